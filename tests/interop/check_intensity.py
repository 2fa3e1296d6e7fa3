#!/usr/bin/env python3
"""augscope's intensity steps against batchgeneratorsv2 itself, with the values fed: for each
step (brightness, contrast, gamma with and without inversion and retained statistics), on one-
and two-channel volumes, alone and after a spatial transform, `augscope apply` with the step's
flags against batchgeneratorsv2's transform (its drawn values fixed by ranges of one value, every
channel applied) on augscope's own resample of the same spatial plan. Bar: at least 99.9 % of the
voxels within 1e-4 of the image's intensity range. One line per (library, step, case).

    python tests/interop/check_intensity.py [path/to/augscope]

Exit 0 at the bar, 1 below it, 77 when batchgeneratorsv2 or torch is missing.
"""
import os
import subprocess
import sys
import tempfile

import numpy as np

try:
    import torch
    import batchgeneratorsv2
    from batchgeneratorsv2.transforms.intensity.brightness import (
        MultiplicativeBrightnessTransform)
    from batchgeneratorsv2.transforms.intensity.contrast import ContrastTransform
    from batchgeneratorsv2.transforms.intensity.gamma import GammaTransform
except ImportError as e:
    print(f"SKIP intensity: {e}")
    sys.exit(77)

from importlib.metadata import version

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BIN = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "target", "debug", "augscope")
VERSION = version("batchgeneratorsv2")
BAR, TOL = 0.999, 1e-4


def bg(step, values, invert=False, retain=False):
    """batchgeneratorsv2's transform of `step` with its draws fixed to `values` (one per
    channel: a range of one value each, drawn per channel)."""
    it = iter(values)

    def draw(*_args, **_kwargs):
        return next(it)

    if step == "brightness":
        return MultiplicativeBrightnessTransform(multiplier_range=draw, synchronize_channels=False,
                                                 p_per_channel=1)
    if step in ("contrast", "contrast_unclipped"):
        return ContrastTransform(contrast_range=draw, preserve_range=step == "contrast",
                                 synchronize_channels=False, p_per_channel=1)
    return GammaTransform(gamma=draw, p_invert_image=1 if invert else 0,
                          synchronize_channels=False, p_per_channel=1,
                          p_retain_stats=1 if retain else 0)


def flags(step, values, invert, retain):
    v = ",".join(str(x) for x in values)
    if step == "brightness":
        return ["--brightness", v]
    if step == "contrast":
        return ["--contrast", v]
    if step == "contrast_unclipped":
        return ["--contrast", v, "--contrast-unclipped"]
    return ["--gamma", v] + (["--gamma-invert"] if invert else []) + \
        (["--gamma-retain-stats"] if retain else [])


def run(args):
    r = subprocess.run([BIN, "apply", *args], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"augscope apply {' '.join(args)}: {r.stderr.strip()}")


def main():
    rng = np.random.default_rng(7)
    spatial_cases = {"alone": [], "after a rotation": ["--rotate", "0.3,-0.2,0.1",
                                                       "--scale", "1.1", "--order", "3"]}
    steps = [("brightness", [1.23, 0.81], False, False),
             ("contrast", [1.21, 0.78], False, False),
             ("contrast_unclipped", [1.3, 0.7], False, False),
             ("gamma", [1.37, 0.74], False, False),
             ("gamma", [1.37, 0.74], True, False),
             ("gamma", [0.81, 1.45], False, True),
             ("gamma", [0.81, 1.45], True, True)]
    failed = 0
    with tempfile.TemporaryDirectory() as d:
        for channels in (1, 2):
            # A z-scored, MRI-like volume: smooth structure plus noise, per channel.
            z, y, x = np.meshgrid(*[np.linspace(-1, 1, n) for n in (20, 24, 22)], indexing="ij")
            base = np.exp(-(x ** 2 + y ** 2 + z ** 2) * 2) * 3
            img = np.stack([base * (1 + c) + rng.normal(0, 0.3, base.shape) - 0.5 * c
                            for c in range(channels)]).astype(np.float32)
            src = os.path.join(d, "img.npy")
            np.save(src, img if channels > 1 else img[0])
            ch = ["--channels"] if channels > 1 else []
            for case, spatial in spatial_cases.items():
                # augscope's own resample, the input of batchgeneratorsv2's step.
                ref = os.path.join(d, "spatial.npy")
                if spatial:
                    run([src, ref, *spatial, *ch])
                    resampled = np.load(ref)
                else:
                    resampled = np.load(src)
                resampled = resampled.reshape((channels,) + resampled.shape[-3:])
                for step, vals, invert, retain in steps:
                    vals = vals[:channels]
                    out = os.path.join(d, "out.npy")
                    run([src, out, *spatial, *ch, *flags(step, vals, invert, retain)])
                    got = np.load(out).reshape(resampled.shape)
                    t = bg(step, vals, invert, retain)
                    want = t(image=torch.from_numpy(resampled.copy()))["image"].numpy()
                    rng_ = float(want.max() - want.min()) or 1.0
                    diff = np.abs(got.astype(np.float64) - want) / rng_
                    frac = float((diff <= TOL).mean())
                    name = step + ("+invert" if invert else "") + ("+retain_stats" if retain else "")
                    ok = frac >= BAR and np.isfinite(got).all()
                    failed += not ok
                    print(f"{'ok  ' if ok else 'FAIL'} batchgeneratorsv2 {VERSION} {name}, "
                          f"{channels} channel(s), {case}: {100 * frac:.3f} % within {TOL} of "
                          f"the range (worst {diff.max():.2e})", flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
