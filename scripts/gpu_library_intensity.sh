#!/usr/bin/env bash
# The MONAI and TorchIO intensity families on a CUDA device, all ten firing, on 128^3 samples, as
# augscope batch runs them (batched launches, the steps on the device before the download),
# against the CPU engine on the same samples: the device time of the steps per sample from the
# manifest (timings_ms.engine.intensity_ms) and the agreement of CUDA with the CPU.
# (scripts/gpu_intensity.sh does the same for nnU-Net's seven.)
#
#   scripts/gpu_library_intensity.sh BIN [COUNT]
#
# Results go to $OUT/library_intensity (or ./gpu_out/library_intensity).
set -u
BIN=$1
COUNT=${2:-24}
W=${OUT:-gpu_out}/library_intensity
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
# Every MONAI and TorchIO family, each firing (p = 1), after a mirror on every axis (a plan
# that moves no voxel is copied on the host, and its steps run there).
cat > "$W/all10.toml" <<'TOML'
version = 1
name = "the MONAI and TorchIO intensity families, all firing"
[flip]
p = [1.0]
[sampling]
order = 1
mode = "grid-constant"
[[intensity]]
step = "monai_shift_intensity"
p = 1.0
offsets = [-0.1, 0.1]
[[intensity]]
step = "monai_scale_intensity"
p = 1.0
factors = [-0.1, 0.1]
[[intensity]]
step = "monai_gaussian_noise"
p = 1.0
std = 0.1
[[intensity]]
step = "monai_gaussian_smooth"
p = 1.0
sigma_x = [0.25, 1.5]
sigma_y = [0.25, 1.5]
sigma_z = [0.25, 1.5]
[[intensity]]
step = "monai_adjust_contrast"
p = 1.0
gamma = [0.5, 2.0]
retain_stats = true
[[intensity]]
step = "monai_bias_field"
p = 1.0
degree = 3
coeff_range = [0.0, 0.1]
[[intensity]]
step = "torchio_noise"
p = 1.0
std = [0.0, 0.25]
[[intensity]]
step = "torchio_blur"
p = 1.0
std = [0.0, 2.0]
[[intensity]]
step = "torchio_gamma"
p = 1.0
log_gamma = [-0.3, 0.3]
[[intensity]]
step = "torchio_bias_field"
p = 1.0
order = 3
coefficients = [-0.5, 0.5]
TOML
for b in cuda cpu; do
  "$BIN" batch --preset "$W/all10.toml" --count "$COUNT" --seed 1 --out "$W/$b" --ext npy \
    --backend $b "$W/img.npy" 2>&1 | tail -1
done
python3 - "$W" <<'PY'
import glob, json, os, sys
import numpy as np
w = sys.argv[1]
rows = [json.loads(l)["timings_ms"]["engine"] for l in open(w + "/cuda/manifest.jsonl")]
per = [r.get("intensity_ms", 0.0) / (r.get("batched") or 1) for r in rows]
print(f"device time of the ten steps per 128^3 sample: median {np.median(per):.3f} ms, "
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
