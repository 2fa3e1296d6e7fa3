#!/usr/bin/env bash
# Builds the Python package as a portable wheel: CPython 3.10 and later (abi3), manylinux_2_28
# x86_64, linked with zig against glibc 2.28 so that it installs on any Linux of the last years
# without a Rust toolchain. Writes dist/ and prints `auditwheel show` of the wheel.
#
#   scripts/build_wheels.sh            (from the repository root)
#
# The build tools come from PyPI into a virtualenv of their own (BUILD_VENV, default
# /tmp/augscope-wheel-venv): maturin, ziglang and auditwheel, at the versions below.
set -euo pipefail
VENV=${BUILD_VENV:-/tmp/augscope-wheel-venv}
if [[ ! -x $VENV/bin/maturin ]]; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet "maturin==1.16.0" "ziglang==0.17.1" "auditwheel==6.8.2"
fi
export PATH=$VENV/bin:$PATH
rm -rf dist && mkdir -p dist
maturin build --release --zig --compatibility manylinux_2_28 -m python/Cargo.toml -o dist
for w in dist/*.whl; do
  echo "$w: $(du -h "$w" | cut -f1)"
  auditwheel show "$w"
done
