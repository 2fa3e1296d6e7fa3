#!/usr/bin/env bash
# On the GPU machine: the time from process start to the first result, each run a new process,
# for a small `apply` and a 40-sample `batch` (MNI and its labels, .npy), with
#   fresh:  an empty kernel cache and an empty driver JIT cache (a new container or node),
#   warm:   the same caches again (the second run),
#   no-jit: the kernel cache warm and the driver's JIT cache disabled (CUDA_CACHE_DISABLE=1),
# for this build ($BIN/augscope) and, when present, an earlier one ($BIN/augscope_before); with
# PREBUILT=DIR (a store of prebuilt kernels, as the wheel carries in augscope/kernels), this build
# again with the store (AUGSCOPE_PREBUILT_KERNELS, which the Python package and its console
# command set). Results go to $OUT/coldstart.txt.
set -u
BIN=${BIN:-.gpu}
OUT=${OUT:-gpu_out}
mkdir -p "$OUT"
# WORK_DIR: where the inputs and the batch go (a tmpfs such as /dev/shm takes the disk out of the
# figures).
W=$(mktemp -d -p "${WORK_DIR:-/tmp}")
python3 -c "
import numpy as np
np.save('$W/small.npy', np.random.default_rng(0).random((32, 64, 64), dtype=np.float32))"
"$BIN/augscope" apply assets/mni152_t1.nii.gz "$W/mni.npy" >/dev/null
"$BIN/augscope" apply assets/mni152_tissue_labels.nii.gz "$W/mni_lab.npy" --order 0 >/dev/null
# Every binary runs once before any is timed, so that none pays for reading the driver and NVRTC
# libraries from disk (a cost of the host, not of augscope).
for b in augscope_before augscope; do
  [[ -x $BIN/$b ]] && AUGSCOPE_KERNEL_CACHE=0 "$BIN/$b" devices >/dev/null 2>&1
done
secs() { local t0 t1; t0=$(date +%s.%N); "$@" >/dev/null 2>"$W/err" || { echo "FAILED: $(tail -1 "$W/err")"; }; t1=$(date +%s.%N); python3 -c "print(f'{$t1 - $t0:.2f}')"; }
for v in augscope_before augscope ${PREBUILT:+augscope+prebuilt}; do
  b=${v%+prebuilt}
  [[ -x $BIN/$b ]] || continue
  store=()
  [[ $v == *+prebuilt ]] && store=(AUGSCOPE_PREBUILT_KERNELS="$PREBUILT")
  for what in apply batch; do
    K=$(mktemp -d); J=$(mktemp -d)
    run() {
      if [[ $what == apply ]]; then
        secs env "${store[@]}" "$@" AUGSCOPE_CACHE_DIR="$K" CUDA_CACHE_PATH="$J" "$BIN/$b" apply "$W/small.npy" "$W/o.npy" \
          --rotate 0.2,0.1,0.3 --elastic 100,4 --order 3 --backend cuda
      else
        rm -rf "$W/batch"
        secs env "${store[@]}" "$@" AUGSCOPE_CACHE_DIR="$K" CUDA_CACHE_PATH="$J" "$BIN/$b" batch "$W/mni.npy" --label "$W/mni_lab.npy" \
          --preset nnunet-v1-3d --count 40 --out "$W/batch" --backend cuda --quiet
      fi
    }
    fresh=$(run); warm=$(run); warm2=$(run); nojit=$(run CUDA_CACHE_DISABLE=1)
    rm -rf "$K" "$J"; K=$(mktemp -d); J=$(mktemp -d)
    fresh2=$(run)
    entries=$(ls "$K/kernels" 2>/dev/null | wc -l)
    echo "$v $what: fresh ${fresh} s / ${fresh2} s, warm ${warm} s / ${warm2} s, driver JIT cache off ${nojit} s ($entries kernel files)" | tee -a "$OUT/coldstart.txt"
    rm -rf "$K" "$J"
  done
done
rm -rf "$W"
