#!/usr/bin/env python3
"""augscope's normalisation methods (a preset's `[normalize]`, `augscope apply --normalize`)
against the libraries' own: nnU-Net v2's ZScoreNormalization (per channel, without the mask, and
with `use_mask_for_norm` inside its preprocessing's nonzero mask, `create_nonzero_mask`) and
CTNormalization (with a dataset's intensity properties), MONAI 1.6.1's ScaleIntensityRange (with
and without an output range and clipping, and an empty input range), TorchIO 1.2.1's
ZNormalization and RescaleIntensity (default and clipped percentiles, another output range).

Each case runs `augscope apply IN OUT --normalize JSON` (no transform) on a 3D volume of one or
two channels and the library's class on the same array (TorchIO on its (C, W, H, D) tensor, which
takes its statistics over every channel at once). Bar: at least 99.9 % of the voxels within 1e-4
of the library output's intensity range. One line per (library, method, case).

    VENV/bin/python tests/interop/check_normalize.py [path/to/augscope]

Exit 0 at the bar, 1 below it, 77 when nnunetv2, MONAI, TorchIO or torch is missing.
"""
import json
import os
import subprocess
import sys
import tempfile
import warnings

import numpy as np

# MONAI warns of the empty input range, a case checked on purpose.
warnings.filterwarnings("ignore", message="Divide by zero")

try:
    import torch
    import monai.transforms as mt
    import monai
    import torchio as tio
    from nnunetv2.preprocessing.cropping.cropping import create_nonzero_mask
    from nnunetv2.preprocessing.normalization.default_normalization_schemes import (
        CTNormalization, ZScoreNormalization)
except ImportError as e:
    print(f"SKIP normalize: {e}")
    sys.exit(77)

from importlib.metadata import version

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BIN = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "target", "debug", "augscope")
LIBS = {"nnU-Net": version("nnunetv2"), "MONAI": version("monai"), "TorchIO": version("torchio")}
BAR, TOL = 0.999, 1e-4
SHAPE = (17, 22, 25)

monai.data.set_track_meta(False)


def nnunet(scheme, props=None):
    def run(img):
        out = img.copy()
        for c in range(img.shape[0]):
            out[c] = scheme(use_mask_for_norm=False, intensityproperties=props or {}).run(
                img[c].copy())
        return out
    return run


def nnunet_masked(img):
    """nnU-Net's preprocessing of a scan without labels: the nonzero mask (every channel, holes
    filled) as `seg = where(mask, 0, -1)`, then ZScoreNormalization with use_mask_for_norm."""
    seg = np.where(create_nonzero_mask(img), 0, -1)
    out = img.copy()
    for c in range(img.shape[0]):
        out[c] = ZScoreNormalization(use_mask_for_norm=True, intensityproperties={}).run(
            img[c].copy(), seg)
    return out


def monai_run(t):
    return lambda img: np.asarray(t(torch.from_numpy(img.copy())))


def tio_run(t):
    def run(img):
        lib = np.ascontiguousarray(np.transpose(img, (0, 3, 2, 1)))
        subject = tio.Subject(image=tio.ScalarImage(tensor=torch.from_numpy(lib)))
        out = t(subject).image.data.numpy()
        return np.ascontiguousarray(np.transpose(out, (0, 3, 2, 1)))
    return run


def cases(rng):
    def mri(c):
        return (rng.gamma(2.0, 60.0, (c, *SHAPE))).astype(np.float32)

    def ct(c):
        return rng.normal(-200, 600, (c, *SHAPE)).clip(-1024, 3000).astype(np.float32)

    out = []
    for c in (1, 2):
        tag = f"3d-{c}ch"
        out.append(("nnU-Net", "nnunet_zscore", tag, mri(c), {"method": "nnunet_zscore"},
                    nnunet(ZScoreNormalization)))
        # a skull-stripped scan: a zero background, a zero hole inside the head (filled by the
        # mask), a zero cut to the border (not a hole), and in the second channel nonzero voxels
        # where the first is zero
        head = mri(c)
        z, y, x = np.meshgrid(*[np.linspace(-1, 1, n) for n in SHAPE], indexing="ij")
        r = np.sqrt(z ** 2 + y ** 2 + x ** 2)
        head[:, r > 0.8] = 0
        head[0, r < 0.25] = 0
        head[:, :, 5:7, :] = 0
        if c > 1:
            head[1, r < 0.25] = 0
            head[1, (r > 0.8) & (r < 0.9)] = 7.0
        out.append(("nnU-Net", "nnunet_zscore", f"{tag} use_mask_for_norm", head,
                    {"method": "nnunet_zscore", "use_mask_for_norm": True}, nnunet_masked))
        props = {"mean": 95.5, "std": 310.25, "percentile_00_5": -980.0,
                 "percentile_99_5": 1450.0}
        out.append(("nnU-Net", "nnunet_ct", tag, ct(c), dict(method="nnunet_ct", **props),
                    nnunet(CTNormalization, props)))
        for a_min, a_max, b_min, b_max, clip in ((-1000.0, 1000.0, 0.0, 1.0, True),
                                                 (-175.0, 250.0, 0.0, 1.0, False),
                                                 (-500.0, 700.0, -1.0, 1.0, True),
                                                 (0.0, 255.0, None, None, False),
                                                 (100.0, 100.0, None, None, False)):
            spec = {"method": "monai_scale_intensity_range", "a_min": a_min, "a_max": a_max,
                    "clip": clip}
            if b_min is not None:
                spec.update(b_min=b_min, b_max=b_max)
            name = f"{tag} [{a_min:g}, {a_max:g}]" + (f" -> [{b_min:g}, {b_max:g}]"
                                                      if b_min is not None else "")
            out.append(("MONAI", "monai_scale_intensity_range", name + (" clip" if clip else ""),
                        ct(c), spec, monai_run(mt.ScaleIntensityRange(
                            a_min=a_min, a_max=a_max, b_min=b_min, b_max=b_max, clip=clip))))
        out.append(("TorchIO", "torchio_z_normalization", tag, mri(c),
                    {"method": "torchio_z_normalization"}, tio_run(tio.ZNormalization())))
        for outr, pct in (((0.0, 1.0), (0.0, 100.0)), ((-1.0, 1.0), (0.5, 99.5)),
                          ((0.0, 255.0), (2.0, 98.0))):
            out.append(("TorchIO", "torchio_rescale_intensity",
                        f"{tag} percentiles {pct[0]:g}-{pct[1]:g} -> [{outr[0]:g}, {outr[1]:g}]",
                        mri(c), {"method": "torchio_rescale_intensity",
                                 "out_min_max": list(outr), "percentiles": list(pct)},
                        tio_run(tio.RescaleIntensity(out_min_max=outr, percentiles=pct))))
    return out


def main():
    failed = 0
    with tempfile.TemporaryDirectory() as d:
        src, dst = os.path.join(d, "in.npy"), os.path.join(d, "out.npy")
        for lib, method, tag, img, spec, run_lib in cases(np.random.default_rng(20261205)):
            np.save(src, img if img.shape[0] > 1 else img[0])
            args = [BIN, "apply", src, dst, "--backend", "cpu", "--normalize", json.dumps(spec)]
            r = subprocess.run(args + (["--channels"] if img.shape[0] > 1 else []),
                               capture_output=True, text=True)
            if r.returncode != 0:
                raise SystemExit(f"augscope apply --normalize {json.dumps(spec)}: "
                                 f"{r.stderr.strip()}")
            got = np.load(dst).reshape(img.shape).astype(np.float64)
            want = run_lib(img).astype(np.float64)
            span = float(want.max() - want.min()) or 1.0
            diff = np.abs(got - want) / span
            frac = float((diff <= TOL).mean())
            ok = frac >= BAR and bool(np.isfinite(got).all())
            failed += not ok
            print(f"{lib} {LIBS[lib]} {method} {tag}: {100 * frac:.3f}% within {TOL:g} of range "
                  f"(worst {diff.max():.1e}) {'ok' if ok else 'FAIL'}", flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
