#!/usr/bin/env python3
"""augscope's random draws of the MONAI and TorchIO intensity families against the libraries' own
random transforms, as distributions.

For each family, a one-step preset with non-default, asymmetric values (so that a swapped axis, a
mis-scaled range or a missing channel cannot pass) is sampled N times by `augscope preset sample
FILE --count N --ndim 3 --channels C` (family k: seeds kN..kN+N-1, so that the families' draws
are independent). The library builds the same transform with the same values and draws N times
from one state (torch, numpy and MONAI's `set_random_state` seeded with 1234 + k):

- MONAI: `t.randomize(...)`, then whether it fired (`t._do_transform`) and its drawn attributes
  (`_offset`, `factor`, `x/y/z`, `gamma_value`, `_coeff`, `x1`…`a`, `floating_control_points`,
  `zoom_factor`); for RandGaussianNoise the mean and std
  that its randomize passes to `R.normal` (a wrapper of `t.R` records them and returns zeros).
- TorchIO: the transform called on a tiny subject, so that its own `__call__` makes the firing
  decision (`torch.rand(1).item() > p`), with `get_params` wrapped to record what it draws; the
  step fired when `get_params` was called.

Per family: the firing rate (augscope's fraction against p, binomial test, and against the
library's fraction, two-proportion z test: chi-square of the 2x2 table, no continuity
correction); the shape of a fired draw (which values and how many: one per channel for
`channel_wise` and TorchIO's gamma, one per axis for the blurs, one per polynomial term for the
bias fields); and, over the draws where the step fired on each side, each drawn parameter (per
channel or axis; the bias coefficients pooled) by the two-sample Kolmogorov-Smirnov test.
augscope's axes are the libraries' reversed ([z, y, x]). Bar: p > 0.01 for every test, one and
the same shape on both sides. One line per (library, family, parameter), augscope first.

    VENV/bin/python tests/interop/check_intensity_draws.py [path/to/augscope]

Exit 0 at the bar, 1 below it, 77 when monai, torchio, torch or scipy is missing.
"""
import json
import os
import sys
from collections import Counter

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common as C  # noqa: E402

C.require("torch", "torch")
C.require("scipy", "scipy")
C.require("monai", "monai==1.6.1")
C.require("torchio", "torchio==1.2.1")

import torch  # noqa: E402
import torchio as tio  # noqa: E402
from monai import transforms as mt  # noqa: E402
from scipy.stats import binomtest, chi2_contingency  # noqa: E402

N = 4000          # draws per family; the lowest p (0.35) leaves ~1400 fired draws to compare
SEED = 1234       # the library side's seed, plus the family's index
BAR = 0.01
LIBS = {"monai": f"MONAI {C.version('monai')}", "torchio": f"TorchIO {C.version('torchio')}"}


def named(name, v):
    """(name, value) pairs: one per channel (`name c0`, `name c1`, ...) for a list."""
    if isinstance(v, (list, tuple)):
        return [(f"{name} c{i}", float(x)) for i, x in enumerate(v)]
    return [(name, float(v))]


def one(v):
    return v[0] if len(v) == 1 else v  # a longer list stays a list: a shape mismatch


# --- the library side: (fired, [(name, value), ...]) per draw ----------------------------------

class Recorder:
    """MONAI's `t.R` with `normal` recording its (loc, scale) and returning zeros."""

    def __init__(self, r):
        self.r, self.calls = r, []

    def __getattr__(self, k):
        return getattr(self.r, k)

    def normal(self, loc=0.0, scale=1.0, size=None):
        self.calls.append((float(loc), float(scale)))
        return np.zeros(size)


def monai_draws(t, read, channels, seed):
    t.set_random_state(seed=seed)
    t.R = Recorder(t.R)
    img = np.zeros((channels, 2, 2, 2), np.float32)
    out = []
    for _ in range(N):
        t.R.calls.clear()
        if isinstance(t, mt.RandBiasField):
            t.randomize(img_size=img.shape[1:])
        else:
            t.randomize(img)
        out.append((bool(t._do_transform), read(t) if t._do_transform else []))
    return out


def torchio_draws(t, read, channels, seed):
    torch.manual_seed(seed)
    calls, get_params = [], t.get_params

    def recording(*args):
        calls.append(get_params(*args))
        return calls[-1]

    t.get_params = recording
    subject = tio.Subject(img=tio.ScalarImage(tensor=torch.rand(channels, 2, 2, 2) + 0.5))
    out = []
    for _ in range(N):
        calls.clear()
        t(subject)
        out.append((bool(calls), read(calls) if calls else []))
    return out


# --- the families ------------------------------------------------------------------------------
# (library, step, tag, preset fields, channels, the library's transform, the (name, value) pairs
# it drew (from the MONAI transform, or TorchIO's get_params results), those of augscope's step)

def ax(names, values):
    return [(n, float(v)) for n, v in zip(names, values)]


ZYX, MS = ("sigma z", "sigma y", "sigma x"), ("mean", "std")


SHARP = ("sigma1 z", "sigma1 y", "sigma1 x", "sigma2 z", "sigma2 y", "sigma2 x", "alpha")


def control_points(points):
    """The histogram shift's count of control points and its first and last moved inner ones."""
    return [("control points", float(len(points))), ("first inner point", float(points[1])),
            ("last inner point", float(points[-2]))]


def coefficients(values):
    return [("coefficient", float(x)) for x in values]


FAMILIES = [
    ("monai", "monai_shift_intensity", "channel_wise",
     dict(p=0.4, offsets=[-0.2, 0.3], channel_wise=True), 2,
     lambda: mt.RandShiftIntensity(offsets=(-0.2, 0.3), prob=0.4, channel_wise=True),
     lambda t: named("offset", t._offset), lambda v: named("offset", v["offsets"])),
    ("monai", "monai_shift_intensity", "", dict(p=0.45, offsets=[-0.05, 0.4]), 2,
     lambda: mt.RandShiftIntensity(offsets=(-0.05, 0.4), prob=0.45),
     lambda t: named("offset", t._offset), lambda v: named("offset", one(v["offsets"]))),
    ("monai", "monai_scale_intensity", "channel_wise",
     dict(p=0.55, factors=[-0.3, 0.1], channel_wise=True), 2,
     lambda: mt.RandScaleIntensity(factors=(-0.3, 0.1), prob=0.55, channel_wise=True),
     lambda t: named("factor", t.factor), lambda v: named("factor", v["factors"])),
    ("monai", "monai_scale_intensity", "", dict(p=0.4, factors=[-0.15, 0.35]), 2,
     lambda: mt.RandScaleIntensity(factors=(-0.15, 0.35), prob=0.4),
     lambda t: named("factor", t.factor), lambda v: named("factor", one(v["factors"]))),
    ("monai", "monai_gaussian_noise", "", dict(p=0.35, mean=0.05, std=0.15, sample_std=True), 1,
     lambda: mt.RandGaussianNoise(prob=0.35, mean=0.05, std=0.15, sample_std=True),
     lambda t: ax(MS, t.R.calls[-1]), lambda v: ax(MS, (v["mean"], v["std"]))),
    ("monai", "monai_gaussian_smooth", "",
     dict(p=0.5, sigma_x=[0.3, 0.8], sigma_y=[1.0, 1.6], sigma_z=[0.1, 2.2]), 1,
     lambda: mt.RandGaussianSmooth(sigma_x=(0.3, 0.8), sigma_y=(1.0, 1.6), sigma_z=(0.1, 2.2),
                                   prob=0.5),
     lambda t: ax(ZYX, (t.z, t.y, t.x)), lambda v: ax(ZYX, v["sigmas"])),
    ("monai", "monai_adjust_contrast", "",
     dict(p=0.6, gamma=[0.6, 2.3], invert_image=True, retain_stats=True), 1,
     lambda: mt.RandAdjustContrast(prob=0.6, gamma=(0.6, 2.3), invert_image=True,
                                   retain_stats=True),
     lambda t: named("gamma", t.gamma_value), lambda v: named("gamma", v["gamma"])),
    ("monai", "monai_bias_field", "", dict(p=0.45, degree=2, coeff_range=[-0.15, 0.25]), 1,
     lambda: mt.RandBiasField(degree=2, coeff_range=(-0.15, 0.25), prob=0.45),
     lambda t: coefficients(t._coeff),
     lambda v: coefficients(x["c"] for x in v["terms"] if v["convention"] == "monai")),
    ("monai", "monai_gaussian_sharpen", "",
     dict(p=0.45, sigma1_x=[0.4, 0.9], sigma1_y=[0.6, 1.2], sigma1_z=[0.5, 1.5], sigma2_x=0.3,
          sigma2_y=[0.2, 0.5], sigma2_z=0.25, alpha=[5.0, 25.0]), 1,
     lambda: mt.RandGaussianSharpen(sigma1_x=(0.4, 0.9), sigma1_y=(0.6, 1.2),
                                    sigma1_z=(0.5, 1.5), sigma2_x=0.3, sigma2_y=(0.2, 0.5),
                                    sigma2_z=0.25, alpha=(5.0, 25.0), prob=0.45),
     lambda t: ax(SHARP, (t.z1, t.y1, t.x1, t.z2, t.y2, t.x2, t.a)),
     lambda v: ax(SHARP, v["sigma1"] + v["sigma2"] + [v["alpha"]])),
    ("monai", "monai_histogram_shift", "", dict(p=0.55, num_control_points=[4, 9]), 1,
     lambda: mt.RandHistogramShift(num_control_points=(4, 9), prob=0.55),
     lambda t: control_points(t.floating_control_points),
     lambda v: control_points(v["points"])),
    ("monai", "monai_simulate_low_resolution", "", dict(p=0.4, zoom_range=[0.35, 0.9]), 2,
     lambda: mt.RandSimulateLowResolution(zoom_range=(0.35, 0.9), prob=0.4),
     lambda t: named("zoom", t.zoom_factor), lambda v: named("zoom", v["zoom"])),
    ("torchio", "torchio_noise", "", dict(p=0.4, mean=[-0.1, 0.2], std=[0.05, 0.3]), 1,
     lambda: tio.RandomNoise(mean=(-0.1, 0.2), std=(0.05, 0.3), p=0.4),
     lambda calls: ax(MS, calls[0][:2]), lambda v: ax(MS, (v["mean"], v["std"]))),
    ("torchio", "torchio_blur", "", dict(p=0.45, std=[0.2, 1.7]), 1,
     lambda: tio.RandomBlur(std=(0.2, 1.7), p=0.45),
     lambda calls: ax(ZYX, calls[0][::-1]), lambda v: ax(ZYX, v["sigmas"])),
    ("torchio", "torchio_gamma", "", dict(p=0.55, log_gamma=[-0.4, 0.25]), 2,
     lambda: tio.RandomGamma(log_gamma=(-0.4, 0.25), p=0.55),
     lambda calls: named("gamma", list(calls)), lambda v: named("gamma", v["gammas"])),
    ("torchio", "torchio_bias_field", "", dict(p=0.5, order=2, coefficients=[-0.3, 0.2]), 1,
     lambda: tio.RandomBiasField(coefficients=(-0.3, 0.2), order=2, p=0.5),
     lambda calls: coefficients(calls[0]),
     lambda v: coefficients(x["c"] for x in v["terms"] if v["convention"] == "torchio")),
]


# --- the augscope side and the tests -----------------------------------------------------------

def augscope_draws(work, step, fields, channels, seed):
    path = work.file(f"{step}_{seed}.toml")
    with open(path, "w") as fh:
        fh.write("version = 1\nname = \"x\"\n[[intensity]]\n" f"step = {json.dumps(step)}\n"
                 + "".join(f"{k} = {C._toml_value(v)}\n" for k, v in fields.items()))
    lines = C.run("preset", "sample", path, "--seed", seed, "--count", N, "--ndim", 3,
                  "--channels", channels).splitlines()
    out = []
    for s in map(json.loads, filter(str.strip, lines)):
        plan = s["plan"].get("intensity", [])
        fired = bool(plan)
        assert fired == s["drawn"]["intensity"][0]["fired"], s
        out.append((fired, list(plan[0].items()) if fired else []))
    assert len(out) == N, f"{len(out)} samples for --count {N}"
    return out


def shape(draws):
    """The shapes of the fired draws, each as 'name ×count + ...'."""
    return sorted({" + ".join(f"{k} ×{n}" if n > 1 else k for k, n in Counter(
        name for name, _ in vals).items()) for fired, vals in draws if fired})


def check(line, fam, work, k):
    lib, step, tag, fields, channels, make, theirs_read, read = fam
    draws = monai_draws if lib == "monai" else torchio_draws
    theirs = draws(make(), theirs_read, channels, SEED + k)
    ours = [(f, read(dict(vals)[step]) if f else []) for f, vals in
            augscope_draws(work, step, fields, channels, k * N)]
    head = f"{LIBS[lib]} {step}" + (f" ({tag})" if tag else "")
    ko, kl, p = sum(f for f, _ in ours), sum(f for f, _ in theirs), fields["p"]
    p_nom = binomtest(ko, N, p).pvalue
    p_lib = chi2_contingency([[ko, N - ko], [kl, N - kl]], correction=False).pvalue
    line(f"{head} fired", p_nom > BAR and p_lib > BAR,
         f"{ko / N:.3f} / {kl / N:.3f} of {N}, p {p:g} (binomial p {p_nom:.2f}, "
         f"two-proportion p {p_lib:.2f})")
    so, sl = shape(ours), shape(theirs)
    line(f"{head} shape", so == sl and len(so) == 1,
         f"{' | '.join(so) or 'none'} / {' | '.join(sl) or 'none'} per fired draw")
    names = list(dict.fromkeys(n for _, vals in theirs + ours for n, _ in vals))
    for name in names:
        a = [v for _, vals in ours for n, v in vals if n == name]
        b = [v for _, vals in theirs for n, v in vals if n == name]
        if not a or not b:
            line(f"{head} {name}", False, f"n {len(a)} / {len(b)}")
            continue
        pk = C.ks_2samp(a, b)
        line(f"{head} {name}", pk > BAR,
             f"KS p {pk:.2f}; n {len(a)} / {len(b)}; mean {np.mean(a):.4f} / {np.mean(b):.4f}")


def main():
    torch.set_num_threads(1)
    failed, count = [], 0

    def line(name, ok, detail):
        nonlocal count
        count += 1
        print(f"{name}: {detail}  {'ok' if ok else 'FAIL'}", flush=True)
        if not ok:
            failed.append(name)

    work = C.Workdir()
    try:
        for k, fam in enumerate(FAMILIES):
            torch.manual_seed(SEED + k)
            np.random.seed(SEED + k)
            try:
                check(line, fam, work, k)
            except Exception as e:  # a family that cannot run is a failure of that family
                line(f"{LIBS[fam[0]]} {fam[1]}", False, f"{type(e).__name__}: {e}")
    finally:
        work.close()
    print("augscope draws (augscope / library): "
          + (f"{len(failed)} of {count} below the bar: {', '.join(failed)}" if failed
             else f"all {count} at the bar"))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
