#!/usr/bin/env bash
# Builds what scripts/gpu_check.sh runs on the GPU machine (which has no Rust toolchain) and
# copies it into .gpu/ (ignored by git; pass it to the device tool with carry [".gpu"]):
# the release app (it also runs headless: bench, bench --latency, filter, batch), the release
# test binaries named in TESTS, and the peer benchmarks. Everything is stripped (carry limit).
# Run from the repository root. PEERS_BENCH: peers_bench.py (default: the project's shared folder
# beside the checkout, ../shared/bench/peers_bench.py; skipped when missing).
set -euo pipefail
TESTS=${TESTS:-cuda scipy_fixtures space_fixtures slice_path filters_cuda filters febds}
PEERS_BENCH=${PEERS_BENCH:-../shared/bench/peers_bench.py}
rm -rf .gpu && mkdir -p .gpu/tests
cargo build --release
cp target/release/augscope .gpu/
args=()
for t in $TESTS; do args+=(--test "$t"); done
cargo test --release --no-run --no-default-features "${args[@]}" --message-format=json 2>/dev/null \
  | python3 -c '
import json, sys, shutil
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] == ["test"]:
        shutil.copy(m["executable"], ".gpu/tests/" + m["target"]["name"])
        print("test binary:", m["target"]["name"])
'
cp "$PEERS_BENCH" .gpu/ 2>/dev/null || true
# The test binaries look for their fixtures under the folder they were built in: the GPU-side
# scripts read it here.
pwd > .gpu/build_root
for f in benches/*.py; do cp "$f" .gpu/; done
strip .gpu/augscope .gpu/tests/*
du -sh .gpu
