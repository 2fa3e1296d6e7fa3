#!/usr/bin/env bash
# Packs the desktop app for a release: a tarball with the binary, the sample scan it opens, the
# desktop entry and the README (dist/augscope-VERSION-TARGET.tar.gz), and on Linux a .deb built by
# cargo-deb (/usr/bin/augscope, /usr/share/augscope/assets, /usr/share/applications).
#
#   scripts/package_desktop.sh [--target TRIPLE] [--no-build]
#
# --no-build packs the binary already in target/TRIPLE/release (target/release for the host).
set -euo pipefail
cd "$(dirname "$0")/.."
TARGET=""
BUILD=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    --target) TARGET=${2:?--target needs a triple}; shift 2 ;;
    --no-build) BUILD=0; shift ;;
    *) echo "usage: scripts/package_desktop.sh [--target TRIPLE] [--no-build]" >&2; exit 2 ;;
  esac
done
HOST=$(rustc -vV | sed -n 's/^host: //p')
TARGET=${TARGET:-$HOST}
OUT_DIR=target/$TARGET/release
[[ $TARGET == "$HOST" && ! -e $OUT_DIR ]] && OUT_DIR=target/release
case "$TARGET" in *-windows-*) EXE=augscope.exe ;; *) EXE=augscope ;; esac
if [[ $BUILD == 1 ]]; then
  CARGO_PROFILE_RELEASE_DEBUG=false CARGO_PROFILE_RELEASE_STRIP=symbols \
    cargo build --release --locked --target "$TARGET" --bin augscope
  OUT_DIR=target/$TARGET/release
fi
[[ -x $OUT_DIR/$EXE ]] || { echo "no binary at $OUT_DIR/$EXE" >&2; exit 2; }
VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
NAME=augscope-$VERSION-$TARGET
STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT
mkdir -p "$STAGE/$NAME/assets" dist
cp "$OUT_DIR/$EXE" "$STAGE/$NAME/"
cp assets/mni152_t1.nii.gz assets/mni152_tissue_labels.nii.gz assets/LICENSES.md \
  "$STAGE/$NAME/assets/"
cp packaging/augscope.desktop README.md "$STAGE/$NAME/"
tar -C "$STAGE" -czf "dist/$NAME.tar.gz" "$NAME"
echo "dist/$NAME.tar.gz: $(du -h "dist/$NAME.tar.gz" | cut -f1)"
if [[ $TARGET == *-linux-gnu ]] && command -v cargo-deb > /dev/null; then
  DEB_TARGET=()
  [[ $OUT_DIR == target/release ]] || DEB_TARGET=(--target "$TARGET")
  cargo deb --no-build --no-strip "${DEB_TARGET[@]}" -o dist/
fi
