#!/usr/bin/env bash
# On a GPU machine: records the kernel modules that augscope's usual work compiles (the manifest
# of a store of prebuilt kernels, see docs/gpu.md "Kernels compiled ahead") into
# $OUT/manifest.jsonl: every bundled preset through `batch`, `apply` at each order, boundary mode
# and storage precision in 3D and 2D with the intensity flags, every filter, and (when
# RECORD_PYTEST=1) the Python package's tests on the GPU (Augment, apply, the adapters, the
# nnU-Net trainer, FEBDS), and the explorer's worker through `bench --latency`.
#
#   BIN=path/to/augscope bash scripts/gpu_record_kernels.sh
#
# Build the store from it on any machine with NVRTC (no GPU needed):
#   cargo run --release --no-default-features --example prebuild_kernels -- MANIFEST DIR
set -u
BIN=${BIN:-.gpu/augscope}
OUT=${OUT:-gpu_out}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
export AUGSCOPE_KERNEL_RECORD=$OUT/manifest.raw
export AUGSCOPE_CACHE_DIR=$(mktemp -d)
W=$(mktemp -d)
run() { "$@" > /dev/null 2>> "$OUT/record_errors.txt" || echo "FAILED ($?): $*" >> "$OUT/record_errors.txt"; }
python3 -c "
import numpy as np
r = np.random.default_rng(0)
np.save('$W/vol.npy', r.random((40, 48, 56), dtype=np.float32))
np.save('$W/img2d.npy', r.random((96, 80), dtype=np.float32))
np.save('$W/rgb.npy', r.random((3, 64, 72), dtype=np.float32))
np.save('$W/lab.npy', (r.random((40, 48, 56)) * 4).astype(np.uint8))"
for p in nnunet-v2 nnunet-v1-3d batchgenerators monai-brats scripts/presets/*.toml; do
  run "$BIN" batch assets/mni152_t1.nii.gz --label assets/mni152_tissue_labels.nii.gz --preset "$p" \
    --count 3 --out "$W/batch" --backend cuda --quiet
  rm -rf "$W/batch"
done
# One process per boundary mode at a time (NVRTC compiles on the CPU; each mode's modules are its
# own).
for mode in constant nearest reflect mirror wrap grid-wrap grid-constant grid-mirror; do
  for order in 0 1 3; do
    for prec in f32 f16 bf16; do
      o=$W/$mode.npy
      run "$BIN" apply "$W/vol.npy" "$o" --rotate 0.2,0.1,0.3 --scale 1.1 --elastic 50,4 \
        --order $order --mode $mode --precision $prec --label "$W/lab.npy" --label-out "$W/l$mode.npy" --backend cuda
      run "$BIN" apply "$W/vol.npy" "$o" --flip 0 --order $order --mode $mode --precision $prec --backend cuda
      run "$BIN" apply "$W/img2d.npy" "$o" --rotate 0.3 --elastic 30,3 --order $order --mode $mode \
        --precision $prec --backend cuda
      run "$BIN" apply "$W/rgb.npy" "$o" --channels --rotate 0.3 --order $order --mode $mode \
        --precision $prec --backend cuda
    done
  done &
done
wait
run "$BIN" apply "$W/vol.npy" "$W/o.npy" --rotate 0.2,0.1,0.3 --noise 0.1 --blur 1 --brightness 1.1 --contrast 0.9 \
  --lowres 0.6 --gamma 1.3 --gamma-invert --gamma-retain-stats --backend cuda
for f in "--gaussian 1.5" "--dog 1,2" "--log 1.5" "--median 3" "--gamma 1.4" "--contrast 1.2,0.1"; do
  o=$W/f${f//[^a-z0-9]/_}.npy
  for mode in reflect constant nearest mirror wrap; do
    for prec in f32 f16 bf16; do
      run "$BIN" filter "$W/vol.npy" "$o" $f --mode $mode --precision $prec --backend cuda
      run "$BIN" filter "$W/img2d.npy" "$o" $f --mode $mode --precision $prec --backend cuda
    done
  done &
done
wait
for m in dog log fft; do run "$BIN" filter "$W/img2d.npy" "$W/o.npy" --febds $m --backend cuda; done
# The explorer's worker (the planes of the slice-first path; a build without the window refuses
# it) and the benchmark's pipelines.
run timeout 120 "$BIN" bench --latency --backend cuda
run "$BIN" bench --shape 64,64,64 --cpu-reps 0 --backend cuda
if [[ ${RECORD_PYTEST:-0} == 1 ]]; then
  B=$(realpath "$BIN")
  (cd /tmp && AUGSCOPE="$B" timeout "${PYTEST_S:-200}" python3 -m pytest -q -p no:cacheprovider \
     "$OLDPWD/python/tests" > "$OUT/record_pytest.log" 2>&1)
  tail -3 "$OUT/record_pytest.log"
fi
sort -u "$OUT/manifest.raw" > "$OUT/manifest.jsonl"
echo "recorded $(wc -l < "$OUT/manifest.jsonl") modules ($(grep -c FAILED "$OUT/record_errors.txt" 2>/dev/null || echo 0) commands failed)"
rm -rf "$W" "$AUGSCOPE_CACHE_DIR"
