#!/usr/bin/env bash
# On the GPU machine: compute-sanitizer (memcheck, racecheck, initcheck, synccheck) over every
# kernel family on small volumes (tests/cuda_fuzz.rs gpu_every_kernel_family_on_small_volumes,
# plus the odd-shape cases under memcheck), then the odd-shape tests against the CPU without it.
# Needs .gpu/tests/cuda_fuzz (scripts/gpu_build.sh with TESTS=cuda_fuzz). Results go to $OUT.
set -u
BIN=${BIN:-.gpu}
OUT=${OUT:-gpu_out}
mkdir -p "$OUT"
# The test binaries look for their fixtures under the folder they were built in.
ROOT=$(cat "$BIN/build_root" 2>/dev/null || true)
if [[ -n $ROOT && ! -e $ROOT && -w / ]]; then mkdir -p "$(dirname "$ROOT")" && ln -s "$PWD" "$ROOT"; fi
T="$BIN/tests/cuda_fuzz"
log() { echo "== $* ($(date +%T))" | tee -a "$OUT/sanitize.txt"; }
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
LIMIT=${LIMIT:-240}
# The four tools and the odd-shape memcheck run side by side (each its own process and log).
sanitize() {
  local tool=$1 name=$2; shift 2
  local extra=()
  # The leak check on the family run, which returns the engine's cached buffers at its end (the
  # other tests keep them for the process's life, by design).
  [[ $name == memcheck ]] && extra=(--leak-check full)
  timeout "$LIMIT" "$CS" --tool "$tool" "${extra[@]}" --error-exitcode 99 --print-limit 50 \
    "$T" --test-threads=1 "$@" > "$OUT/sanitize_$name.log" 2>&1
  echo "$name: exit $?" >> "$OUT/sanitize_$name.log"
}
log "compute-sanitizer memcheck, racecheck, initcheck, synccheck over every kernel family; memcheck over the odd shapes"
for tool in memcheck racecheck initcheck synccheck; do
  sanitize $tool $tool --exact gpu_every_kernel_family_on_small_volumes &
done
sanitize memcheck memcheck_odd --skip huge_axis --skip every_kernel_family &
log "odd shapes, huge axes, half storage, batched launches, filters: GPU against the CPU"
timeout "$LIMIT" "$T" --test-threads=4 2>&1 | tail -15 | tee -a "$OUT/sanitize.txt"
wait
for name in memcheck racecheck initcheck synccheck memcheck_odd; do
  echo "-- $name" | tee -a "$OUT/sanitize.txt"
  grep -E "ERROR SUMMARY|LEAK SUMMARY|RACECHECK SUMMARY|test result|panicked|not supported|: exit" \
    "$OUT/sanitize_$name.log" | tail -6 | tee -a "$OUT/sanitize.txt"
done
