#!/usr/bin/env bash
# On the GPU machine: a restructured build against the build before it, in one call. The GPU
# test binaries of the new build (in .gpu/tests), the bit-identity matrix of scripts/identity.sh
# on CUDA and on the CPU with both builds (.gpu/before/augscope and .gpu/augscope), then
# `augscope bench` of both builds, alternated, so that the speed is compared within the noise.
# The scans come in .gpu/data. Results go to $OUT. BACKENDS and NO_BENCH=1 narrow the run.
set -u
OUT=${OUT:-gpu_out}
mkdir -p "$OUT"
R=$(cat .gpu/build_root); mkdir -p "$(dirname "$R")"; ln -sfn "$PWD" "$R"
# The test binaries run the `augscope` they were built beside (a plain or a --target-dir headless build).
for d in target/release target/headless/release; do mkdir -p $d && cp .gpu/augscope $d/augscope; done
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/gpu.txt"
for t in .gpu/tests/*; do
  echo "== $t" >> "$OUT/tests.txt"
  timeout 300 "$t" --test-threads 4 >> "$OUT/tests.txt" 2>&1
  echo "rc $?" >> "$OUT/tests.txt"
done
grep -E '^== |test result|rc |FAILED|panicked' "$OUT/tests.txt"; cat "$OUT/gpu.txt"
# BACKENDS: the engines the identity matrix runs on (default: cuda and cpu).
for be in ${BACKENDS:-cuda cpu}; do
  OUT=$OUT scripts/identity.sh .gpu/data "$be" .gpu/before/augscope .gpu/augscope > "$OUT/identity_$be.txt" 2>&1
  cat "$OUT/identity_$be.txt"
  rm -rf "$OUT/identity"
done
[ "${NO_BENCH:-0}" = 1 ] && exit 0
for round in 1 2; do
  for b in before after; do
    bin=.gpu/augscope; [ $b = before ] && bin=.gpu/before/augscope
    $bin bench --backend cuda --reps 20 --json "$OUT/bench_${b}_$round.json" > "$OUT/bench_${b}_$round.txt" 2>&1
    echo "== $b $round"; cat "$OUT/bench_${b}_$round.txt" | head -30
  done
done
