#!/usr/bin/env bash
# The intensity steps of a preset on a CUDA device, on 128^3 samples (nnU-Net's batch is 2 of
# them), as augscope batch runs them (batched launches, the steps on the device before the
# download), against the CPU engine on the same samples; the device time of the steps per sample
# from the manifest (timings_ms.engine.intensity_ms, which covers the samples of one batched
# launch), and the agreement of CUDA with the CPU. The preset defaults to nnU-Net v2's seven
# steps, all firing (scripts/presets/nnunet_intensity_all.toml);
# scripts/presets/library_intensity_all.toml fires every MONAI and TorchIO family.
#
#   scripts/gpu_intensity.sh BIN [COUNT] [PRESET]
#
# Results go to $OUT/intensity (or ./gpu_out/intensity).
set -u
BIN=$1
COUNT=${2:-24}
PRESET=${3:-$(dirname "$0")/presets/nnunet_intensity_all.toml}
W=${OUT:-gpu_out}/intensity
rm -rf "$W" && mkdir -p "$W"
python3 - "$W" <<'PY'
import sys, numpy as np
rng = np.random.default_rng(0)
z, y, x = np.meshgrid(*[np.linspace(-1, 1, 128)] * 3, indexing="ij")
base = np.exp(-(x ** 2 + y ** 2 + z ** 2) * 2)
img = base + rng.normal(0, 0.1, base.shape)
img = ((img - img.mean()) / img.std()).astype(np.float32)
np.save(sys.argv[1] + "/img.npy", img)
PY
cp "$PRESET" "$W/preset.toml"
for b in cuda cpu; do
  "$BIN" batch --preset "$W/preset.toml" --count "$COUNT" --seed 1 --out "$W/$b" --ext npy \
    --backend $b "$W/img.npy" 2>&1 | tail -1
done
python3 - "$W" <<'PY'
import glob, json, os, sys
import numpy as np
w = sys.argv[1]
rows = [json.loads(l)["timings_ms"]["engine"] for l in open(w + "/cuda/manifest.jsonl")]
per = [r.get("intensity_ms", 0.0) / (r.get("batched") or 1) for r in rows]
print(f"device time of the preset's steps per 128^3 sample: median {np.median(per):.3f} ms, "
      f"min {min(per):.3f} ms over {len(per)} samples (a batch of 2: twice that); "
      f"batched launches of {sorted(set(r.get('batched') or 1 for r in rows))} samples")
worst, within = 0.0, []
for f in sorted(glob.glob(w + "/cpu/*.npy")):
    a, b = np.load(f), np.load(w + "/cuda/" + os.path.basename(f))
    d = np.abs(a.astype(np.float64) - b)
    worst = max(worst, float(d.max()))
    within.append(float((d <= 1e-4 * (a.max() - a.min())).mean()))
print(f"CUDA vs CPU: worst |diff| {worst:.3g}; voxels within 1e-4 of the range: "
      f"min {100 * min(within):.4f} %")
PY
