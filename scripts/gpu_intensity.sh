#!/usr/bin/env bash
# The intensity steps on a CUDA device: nnU-Net v2's seven steps, every one firing, on 128^3
# samples (nnU-Net's batch is 2 of them), as augscope batch runs them (batched launches, the
# steps on the device before the download), against the CPU engine on the same samples; the
# device time of the steps per batch from the manifest (timings_ms.engine.intensity_ms, which
# covers the samples of one batched launch), and the agreement of CUDA with the CPU.
#
#   scripts/gpu_intensity.sh BIN [COUNT]
#
# Results go to $OUT/intensity (or ./gpu_out/intensity).
set -u
BIN=$1
COUNT=${2:-24}
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
# nnunet-v2's seven steps, each firing on every channel (p = 1, p_per_channel = 1).
cat > "$W/all7.toml" <<'TOML'
version = 1
name = "nnU-Net v2's seven intensity steps, all firing"
# A mirror on every axis, so that every sample is resampled on the device (a plan that moves no
# voxel is copied on the host, and its steps run there).
[flip]
p = [1.0]
[sampling]
order = 1
mode = "grid-constant"
[[intensity]]
step = "gaussian_noise"
p = 1.0
std = [0.0, 0.1]
synchronize_channels = true
[[intensity]]
step = "gaussian_blur"
p = 1.0
sigma = [0.5, 1.0]
[[intensity]]
step = "brightness"
p = 1.0
multiplier = [0.75, 1.25]
distribution = "split"
[[intensity]]
step = "contrast"
p = 1.0
factor = [0.75, 1.25]
distribution = "split"
[[intensity]]
step = "low_resolution"
p = 1.0
scale = [0.5, 1.0]
synchronize_axes = true
[[intensity]]
step = "gamma"
p = 1.0
gamma = [0.7, 1.5]
distribution = "split"
p_invert = 1.0
p_retain_stats = 1.0
[[intensity]]
step = "gamma"
p = 1.0
gamma = [0.7, 1.5]
distribution = "split"
p_retain_stats = 1.0
TOML
for b in cuda cpu; do
  "$BIN" batch --preset "$W/all7.toml" --count "$COUNT" --seed 1 --out "$W/$b" --ext npy \
    --backend $b "$W/img.npy" 2>&1 | tail -1
done
python3 - "$W" <<'PY'
import glob, json, os, sys
import numpy as np
w = sys.argv[1]
rows = [json.loads(l)["timings_ms"]["engine"] for l in open(w + "/cuda/manifest.jsonl")]
per = [r.get("intensity_ms", 0.0) / (r.get("batched") or 1) for r in rows]
print(f"device time of the seven steps per 128^3 sample: median {np.median(per):.3f} ms, "
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
