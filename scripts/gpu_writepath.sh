#!/usr/bin/env bash
# On the GPU machine: batch throughput on the CUDA engine (MNI and its labels, .npy and .nii.gz)
# beside the disk's own write bandwidth (dd with conv=fsync) in the same folder, and what the
# manifest says each sample spent reading, computing and writing. Results go to $OUT/writepath.txt.
set -u
BIN=${BIN:-.gpu}
OUT=${OUT:-gpu_out}
mkdir -p "$OUT"
W=$(mktemp -d -p "${WORK_DIR:-/tmp}")
log() { echo "$*" | tee -a "$OUT/writepath.txt"; }
"$BIN/augscope" apply assets/mni152_t1.nii.gz "$W/mni.npy" >/dev/null
"$BIN/augscope" apply assets/mni152_tissue_labels.nii.gz "$W/lab.npy" --order 0 >/dev/null
cp assets/mni152_t1.nii.gz "$W/mni.nii.gz"; cp assets/mni152_tissue_labels.nii.gz "$W/lab.nii.gz"
sync
dd if=/dev/zero of="$W/dd.bin" bs=1M count=4096 conv=fsync 2>&1 | tail -1 | sed 's/^/dd, 4 GiB, conv=fsync: /' | tee -a "$OUT/writepath.txt"
rm -f "$W/dd.bin"
# Warm the kernel cache, so that the figures are the steady state of a batch.
"$BIN/augscope" batch "$W/mni.npy" --label "$W/lab.npy" --preset nnunet-v1-3d --count 2 --out "$W/warm" --backend cuda --quiet >/dev/null 2>&1
for ext in npy nii.gz; do
  for count in 100; do
    rm -rf "$W/b"
    n=$count; [[ $ext == nii.gz ]] && n=40
    t0=$(date +%s.%N)
    "$BIN/augscope" batch "$W/mni.$ext" --label "$W/lab.$ext" --preset nnunet-v1-3d --count $n --out "$W/b" \
      --backend cuda --quiet 2>&1 | tail -1 | tee -a "$OUT/writepath.txt"
    t1=$(date +%s.%N)
    bytes=$(du -sb "$W/b" | cut -f1)
    python3 - "$W/b/manifest.jsonl" "$t0" "$t1" "$bytes" "$ext" "$n" <<'PY' | tee -a "$OUT/writepath.txt"
import json, sys, statistics as st
rows = [json.loads(l)["timings_ms"] for l in open(sys.argv[1])]
t = float(sys.argv[3]) - float(sys.argv[2]); b = int(sys.argv[4])
med = lambda k: st.median(r[k] for r in rows)
print(f"{sys.argv[5]}: {sys.argv[6]} samples in {t:.2f} s = {int(sys.argv[6]) / t:.1f} samples/s, "
      f"{b / t / 1e9:.2f} GB/s written ({b / 1e9:.2f} GB); per sample median read {med('read'):.0f} ms, "
      f"compute {med('compute'):.0f} ms, write {med('write'):.0f} ms")
PY
  done
done
rm -rf "$W"
