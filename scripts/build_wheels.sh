#!/usr/bin/env bash
# Builds the Python package as a wheel that needs no Rust and no CUDA toolkit to install: CPython
# 3.10 and later (abi3). On Linux it is manylinux_2_28, linked with zig against glibc 2.28 so that
# it installs on any Linux of the last years. The wheel carries
#   - the Python package and its extension module (`import augscope`);
#   - the `augscope` binary, CLI and explorer, run by the console command `augscope`
#     (augscope/bin/augscope), with the sample scan it opens (augscope/assets/).
# Writes dist/ and prints the wheel's size (and, on Linux, `auditwheel show`).
#
#   scripts/build_wheels.sh                     (from anywhere; builds for this machine)
#   scripts/build_wheels.sh --headless          the binary without the window (CLI only; faster)
#   scripts/build_wheels.sh --target TRIPLE     another target: aarch64-unknown-linux-gnu on a
#                                               Linux host (zig cross-links), or the host's own
#                                               triple on macOS and Windows
#   scripts/build_wheels.sh --kernels MANIFEST  also carry CUBINs compiled ahead for sm_75 to
#                                               sm_120 (augscope/kernels/, src/gpu/prebuilt.rs)
#                                               of the modules a manifest recorded with
#                                               AUGSCOPE_KERNEL_RECORD lists; needs NVRTC on
#                                               LD_LIBRARY_PATH
#
# The build tools come from PyPI into a virtualenv of their own (BUILD_VENV, default
# $TMPDIR/augscope-wheel-venv): maturin, and on Linux ziglang, cargo-zigbuild and auditwheel, at
# the versions below. A Rust toolchain (cargo) must be on PATH.
set -euo pipefail
cd "$(dirname "$0")/.."
FEATURES=()
TARGET=""
MANIFEST=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --headless) FEATURES=(--no-default-features); shift ;;
    --target) TARGET=${2:?--target needs a triple}; shift 2 ;;
    --kernels) MANIFEST=$(realpath "${2:?--kernels needs a manifest}"); shift 2 ;;
    *) echo "usage: scripts/build_wheels.sh [--headless] [--target TRIPLE] [--kernels MANIFEST]" >&2
       exit 2 ;;
  esac
done
TARGET=${TARGET:-$(rustc -vV | sed -n 's/^host: //p')}
case "$TARGET" in
  *-linux-gnu) LINUX=1 ;;
  *) LINUX=0 ;;
esac
case "$TARGET" in
  *-windows-*) EXE=augscope.exe ;;
  *) EXE=augscope ;;
esac

VENV=${BUILD_VENV:-${TMPDIR:-/tmp}/augscope-wheel-venv}
if [[ -d $VENV/Scripts ]]; then VBIN=$VENV/Scripts; else VBIN=$VENV/bin; fi
if [[ ! -e $VBIN/maturin && ! -e $VBIN/maturin.exe ]]; then
  python3 -m venv "$VENV"
  [[ -d $VENV/Scripts ]] && VBIN=$VENV/Scripts
  TOOLS=("maturin==1.16.0")
  [[ $LINUX == 1 ]] && TOOLS+=("ziglang==0.17.1" "cargo-zigbuild==0.24.1" "auditwheel==6.8.2")
  "$VBIN/python" -m pip install --quiet --disable-pip-version-check "${TOOLS[@]}"
fi
export PATH=$VBIN:$PATH

# The binary, stripped (no line tables: the wheel is what users download).
BIN_DIR=python/augscope/bin
ASSETS_DIR=python/augscope/assets
KERNELS_DIR=python/augscope/kernels
cleanup() { rm -rf "$BIN_DIR" "$ASSETS_DIR" "$KERNELS_DIR"; }
trap cleanup EXIT
cleanup
export CARGO_PROFILE_RELEASE_DEBUG=false CARGO_PROFILE_RELEASE_STRIP=symbols
if [[ $LINUX == 1 ]]; then
  rustup target list --installed 2>/dev/null | grep -qx "$TARGET" \
    || rustup target add "$TARGET" 2>/dev/null || true
  cargo zigbuild --release --locked --target "$TARGET.2.28" "${FEATURES[@]}" --bin augscope
else
  cargo build --release --locked --target "$TARGET" "${FEATURES[@]}" --bin augscope
fi
mkdir -p "$BIN_DIR" "$ASSETS_DIR"
cp "target/$TARGET/release/$EXE" "$BIN_DIR/$EXE"
cp assets/mni152_t1.nii.gz assets/mni152_tissue_labels.nii.gz assets/LICENSES.md "$ASSETS_DIR/"

if [[ -n $MANIFEST ]]; then
  cargo run --release --locked --no-default-features --example prebuild_kernels -- \
    "$MANIFEST" "$KERNELS_DIR"
fi

# The wheel: the extension module, the package, the binary and the sample.
rm -rf dist && mkdir -p dist
if [[ $LINUX == 1 ]]; then
  maturin build --release --target "$TARGET" --zig --compatibility manylinux_2_28 \
    -m python/Cargo.toml -o dist
else
  maturin build --release --target "$TARGET" -m python/Cargo.toml -o dist
fi
for w in dist/*.whl; do
  echo "$w: $(du -h "$w" | cut -f1)"
  if [[ $LINUX == 1 ]]; then auditwheel show "$w"; fi
done
