#!/usr/bin/env bash
# The one script that runs on the GPU machine (NVIDIA H200, no Rust there): the CUDA tests and the
# scipy fixture tests on the GPU, CLI checks (devices, CPU-vs-CUDA on the bundled MNI sample,
# the out-of-memory fallback), `augscope bench`, and the peers (scipy/cupyx/torch) in the same call.
#
# Build here first (`bash scripts/gpu_build.sh` does it):
#   cargo build --release --no-default-features
#   cargo test --release --no-run --no-default-features --message-format=json | (collect the
#   test executables) and copy them with target/release/augscope and peers_bench.py into .gpu/
# Then run with the device tool: carry [".gpu"], command `bash scripts/gpu_check.sh`.
# Results go to $OUT (or ./gpu_out). Each step has its own time limit so one slow step cannot
# starve the rest.
set -u
BIN=${BIN:-.gpu}
OUT=${OUT:-gpu_out}
STEPS=${STEPS:-tests,cli,bench,tune,ncu,peers}
mkdir -p "$OUT"
# The test binaries look for their fixtures under the path they were built in: SRC_DIR, else the
# folder scripts/gpu_build.sh wrote to $BIN/build_root, else this checkout.
SRC_DIR=${SRC_DIR:-$(cat "$BIN/build_root" 2>/dev/null || echo "$PWD")}
if [[ ! -e $SRC_DIR && -w / ]]; then mkdir -p "$(dirname "$SRC_DIR")" && ln -s "$PWD" "$SRC_DIR"; fi
log() { echo "== $* ($(date +%T))" | tee -a "$OUT/summary.txt"; }

log "machine"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1 | tee -a "$OUT/summary.txt"
"$BIN/augscope" devices 2>&1 | tee -a "$OUT/summary.txt"

if [[ $STEPS == *tests* ]]; then
  log "tests (CUDA vs CPU, CUDA vs scipy fixtures, CPU fixtures)"
  for t in "$BIN"/tests/*; do
    echo "--- $(basename "$t")" >> "$OUT/tests.log"
    timeout 120 "$t" --test-threads=8 >> "$OUT/tests.log" 2>&1
    echo "$(basename "$t"): exit $?" | tee -a "$OUT/summary.txt"
  done
  grep -E "test result|FAILED|panicked|GPU vs scipy|within" "$OUT/tests.log" | tee -a "$OUT/summary.txt"
fi

if [[ $STEPS == *cli* ]]; then
  log "CLI: CPU vs CUDA on the MNI sample (full pipeline, order 1 and 3, with labels)"
  W=$(mktemp -d)
  for order in 1 3; do
    args=(--rotate 0.3,0.2,0.4 --scale 0.85 --elastic 800,12 --seed 7 --order $order --mode constant
          --label assets/mni152_tissue_labels.nii.gz)
    "$BIN/augscope" apply assets/mni152_t1.nii.gz "$W/cpu$order.npy" "${args[@]}" --label-out "$W/cpu_lab$order.npy" \
      --backend cpu --report "$W/cpu$order.json" 2>&1 | tee -a "$OUT/summary.txt"
    "$BIN/augscope" apply assets/mni152_t1.nii.gz "$W/gpu$order.npy" "${args[@]}" --label-out "$W/gpu_lab$order.npy" \
      --backend cuda:0 --save-coords "$W/coords$order.npy" --report "$W/gpu$order.json" 2>&1 | tee -a "$OUT/summary.txt"
    cp "$W/gpu$order.json" "$OUT/apply_gpu_o$order.json"
    python3 - "$W" "$order" <<'EOF' 2>&1 | tee -a "$OUT/summary.txt"
import sys, numpy as np
w, o = sys.argv[1], sys.argv[2]
a, b = np.load(f"{w}/cpu{o}.npy").astype(np.float64), np.load(f"{w}/gpu{o}.npy").astype(np.float64)
scale = max(1e-12, float(np.abs(a).max()))
d = np.abs(a - b) / scale
la, lb = np.load(f"{w}/cpu_lab{o}.npy"), np.load(f"{w}/gpu_lab{o}.npy")
print(f"MNI order {o}: {a.size} voxels, |cpu-gpu|/max within 1e-4: {np.mean(d <= 1e-4) * 100:.5f} %, "
      f"max rel diff {d.max():.2e}, NaN {int(np.isnan(b).sum())}, label voxels differing {int((la != lb).sum())}")
EOF
  done
  log "CLI: out-of-memory fallback (AUGSCOPE_GPU_MEM_LIMIT=1M)"
  AUGSCOPE_GPU_MEM_LIMIT=1M "$BIN/augscope" apply assets/mni152_t1.nii.gz "$W/oom.npy" --rotate 0.1,0.2,0.3 \
    --backend cuda:0 --report "$W/oom.json" 2>&1 | tee -a "$OUT/summary.txt"
  python3 -c "import json,sys; r=json.load(open('$W/oom.json')); print('OOM report: backend', r['backend'], '| note:', r['backend_note'])" \
    2>&1 | tee -a "$OUT/summary.txt"
  log "CLI: precision f16/bf16 vs f32 (rotate + scale, order 1)"
  for p in f16 bf16; do
    "$BIN/augscope" apply assets/mni152_t1.nii.gz "$W/p_$p.npy" --rotate 0.3,0.2,0.4 --scale 0.85 --backend cuda:0 --precision $p
  done
  "$BIN/augscope" apply assets/mni152_t1.nii.gz "$W/p_f32.npy" --rotate 0.3,0.2,0.4 --scale 0.85 --backend cuda:0
  python3 - "$W" <<'EOF' 2>&1 | tee -a "$OUT/summary.txt"
import sys, numpy as np
w = sys.argv[1]
ref = np.load(f"{w}/p_f32.npy").astype(np.float64)
m = float(np.abs(ref).max())
for p in ("f16", "bf16"):
    d = np.abs(np.load(f"{w}/p_{p}.npy") - ref) / m
    print(f"precision {p}: max |diff|/max {d.max():.2e}, mean {d.mean():.2e}, 99.9th pct {np.quantile(d, 0.999):.2e}")
EOF
  rm -rf "$W"
fi

if [[ $STEPS == *bench* ]]; then
  log "augscope bench"
  timeout 220 "$BIN/augscope" bench --json "$OUT/bench.json" 2>&1 | tee "$OUT/bench.txt"
  log "augscope bench, f16 and bf16 storage, 256x512x512, GPU only"
  for p in f16 bf16; do
    timeout 60 "$BIN/augscope" bench --precision $p --shape 256,512,512 --cpu-reps 0 2>&1 | grep "cuda:0" | head -3 | tee -a "$OUT/bench.txt"
  done
fi

if [[ $STEPS == *tune* ]]; then
  log "resample block shapes (AUGSCOPE_CUDA_BLOCK), 256x512x512"
  for b in 32,8,1 32,4,2 32,2,4 64,2,2; do
    echo "block $b" | tee -a "$OUT/bench.txt"
    AUGSCOPE_CUDA_BLOCK=$b timeout 60 "$BIN/augscope" bench --shape 256,512,512 --cpu-reps 0 2>&1 \
      | grep -E "^ *256x512x512 (rotate|full) +cuda" | tee -a "$OUT/bench.txt"
  done
fi

if [[ $STEPS == *ncu* ]] && command -v ncu >/dev/null; then
  log "Nsight Compute: resample (rotate) and the three field passes, 256x512x512"
  timeout 150 ncu --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy \
    --section LaunchStats --section ComputeWorkloadAnalysis -k regex:"resample|gauss" -c 4 \
    "$BIN/augscope" bench --shape 256,512,512 --cpu-reps 0 > "$OUT/ncu.txt" 2>&1
  grep -E "resample|gauss|Duration|Throughput|Registers|Achieved Occupancy|L1/TEX Hit|L2 Hit|Executed Ipc|Issue Slots|Block Size|Grid Size" \
    "$OUT/ncu.txt" | head -80 | tee -a "$OUT/summary.txt"
fi

if [[ $STEPS == *peers* ]]; then
  log "peers (cupyx, torch; scipy skipped: single-threaded CPU minutes)"
  PYTHONUNBUFFERED=1 timeout 170 python3 "$BIN/peers_bench.py" --skip-cpu --json "$OUT/peers.json" 2>&1 | tail -40 | tee "$OUT/peers.txt"
fi
log "done"
