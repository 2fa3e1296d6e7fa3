#!/usr/bin/env bash
# The filter checks on the GPU machine (NVIDIA H200, no Rust there), in the layout of
# scripts/gpu_check.sh: the test executables of tests/filters_cuda.rs, tests/filters.rs,
# tests/febds.rs and tests/filter_cli.rs and target/release/augscope copied into .gpu/ (tests in
# .gpu/tests/), benches/peers_filters.py run from the checkout.
#
# Build here first: `TESTS="filters_cuda filters febds" scripts/gpu_build.sh` (the app and the
# test executables, stripped, into .gpu/). The OOM test of filters_cuda runs the app where cargo
# put it: copy .gpu/augscope to target/release/augscope on the GPU machine first. Then: carry [".gpu"], command `bash scripts/gpu_check_filters.sh`. Results in $OUT.
set -u
BIN=${BIN:-.gpu}
OUT=${OUT:-gpu_out}
mkdir -p "$OUT"
# The test binaries look for their fixtures under the path they were built in: SRC_DIR, else the
# folder scripts/gpu_build.sh wrote to $BIN/build_root, else this checkout.
SRC_DIR=${SRC_DIR:-$(cat "$BIN/build_root" 2>/dev/null || echo "$PWD")}
if [[ ! -e $SRC_DIR && -w / ]]; then mkdir -p "$(dirname "$SRC_DIR")" && ln -s "$PWD" "$SRC_DIR"; fi
log() { echo "== $* ($(date +%T))" | tee -a "$OUT/filters_summary.txt"; }

log "filter tests (CUDA vs CPU on every fixture, larger volumes, f16/bf16, FEBDS, OOM; CPU vs scipy)"
for t in "$BIN"/tests/filters_cuda* "$BIN"/tests/filters "$BIN"/tests/filters-* "$BIN"/tests/febds* "$BIN"/tests/filter_cli*; do
  [[ -x $t ]] || continue
  echo "--- $(basename "$t")" >> "$OUT/filters_tests.log"
  timeout 300 "$t" --test-threads=4 --nocapture >> "$OUT/filters_tests.log" 2>&1
  echo "$(basename "$t"): exit $?" | tee -a "$OUT/filters_summary.txt"
done
grep -E "test result|FAILED|panicked|skipped|worst|FEBDS|cases" "$OUT/filters_tests.log" | tee -a "$OUT/filters_summary.txt"

log "CLI: CPU vs CUDA, gaussian/median/log on a volume and FEBDS on the fixture"
W=$(mktemp -d)
python3 -c "import numpy as np; np.save('$W/vol.npy', np.random.default_rng(1).random((96,160,192), dtype=np.float32))"
for f in "--gaussian 3" "--median 5" "--log 2" "--dog 1,3"; do
  for b in cpu cuda:0; do
    "$BIN/augscope" filter "$W/vol.npy" "$W/${b%%:*}.npy" $f --mode mirror --backend $b 2>&1 | tee -a "$OUT/filters_summary.txt"
  done
  python3 -c "import numpy as np; a=np.load('$W/cpu.npy'); b=np.load('$W/cuda.npy'); print('$f: max |cpu-cuda|', float(np.abs(a-b).max()))" | tee -a "$OUT/filters_summary.txt"
done
for m in dog log fft; do
  for b in cpu cuda:0; do
    "$BIN/augscope" filter tests/fixtures/febds/input.npy "$W/${b%%:*}_$m.npy" --febds $m --backend $b 2>&1 | tee -a "$OUT/filters_summary.txt"
  done
  python3 -c "import numpy as np; a=np.load('$W/cpu_$m.npy'); b=np.load('$W/cuda_$m.npy'); r=np.load('tests/fixtures/febds/mask_$m.npy'); print('febds $m: cpu vs cuda differ', int((a!=b).sum()), '; cuda vs medical-image-std differ', int((b!=r).sum()), 'of', a.size)" | tee -a "$OUT/filters_summary.txt"
done

log "bench: filter rows"
timeout 500 "$BIN/augscope" bench --rows filters --backend cuda:0 --cpu-reps 1 --json "$OUT/bench_filters.json" 2>&1 | tee -a "$OUT/filters_summary.txt"

log "peers: cupyx.scipy.ndimage and medical-image-std (torch), and augscope again, same call"
timeout 500 python3 benches/peers_filters.py --augscope "$BIN/augscope" --check --json "$OUT/peers_filters.json" 2>&1 | tee -a "$OUT/filters_summary.txt"
