#!/usr/bin/env python3
"""Runs the snippet `augscope preset export --to batchgenerators` writes under the real
batchgenerators (PyPI, 0.25) and compares its output with `augscope apply` of the same plan.

Fixed-value presets (every probability 1, ranges of one value), 3D and 2D, on a smooth random
volume, the MNI sample with its tissue labels and the anisotropic scan with `space = "mm"`:
rotation, isotropic and per-axis scale, flips, elastic, all combined. The bar: >= 99 % of voxels
within 1e-2 of the intensity range, labels >= 99.5 % equal (the first five cases, rotation and
scale, also hold a stricter >= 99.9 % within 1e-3).

batchgenerators draws some values where a fixed-value preset holds one: MirrorTransform mirrors
each allowed axis with p 0.5, and a scale below 1 (or per-axis factors) comes from one range split
at 1. Those cases feed the value through batchgenerators' own random calls (see `Draws`): the
`np.random.uniform() < 0.5` of a mirror returns 0, and the scale's `np.random.random() < 0.5`
branch and `np.random.uniform(lo, hi)` return the planned factor, which must lie in the range the
library draws from. What the library really draws there is measured apart (the `draws:` lines),
and the snippet's NOTE must say it. The elastic noise is always augscope's (docs/design.md §4), fed through
the library's `np.random.random(shape)` in component order.

Distributions: for random presets, >= 500 draws through batchgenerators' own augment_spatial and
augment_mirroring (their rotate_coords_*, scale_coords, elastic_deform_coordinates and the
mirror's np.random.uniform wrapped to record what they were given) against
`augscope preset sample --count N`: for every value KS p > 0.01 or mean and sd within 2 % of the
span, for every firing frequency a two-proportion test p > 0.01 or within 2 points. The NOTEs on
what batchgenerators draws instead (mirror p 0.5, scale split at 1, no scale range below 1) are
measured the same way.

Exit 0 at the bar, 1 below it, 77 when batchgenerators is missing. Runs without torch.

    python3 tests/interop/check_batchgenerators.py [path/to/augscope]
"""
import contextlib
import json
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common as C  # noqa: E402

C.require("batchgenerators", "batchgenerators==0.25.5")

from scipy.ndimage import gaussian_filter  # noqa: E402
from scipy.stats import norm  # noqa: E402

import batchgenerators.augmentations.spatial_transformations as bg_st  # noqa: E402
import batchgenerators.transforms.spatial_transforms as bg_tr  # noqa: E402

VERSION = C.version("batchgenerators")
REPORT = C.Report("batchgenerators", VERSION)
DISTS = ["batchgenerators"]

# Five cases held to a tighter bar: rotation and scale at 1e-3.
STRICT = [
    # (rotation degrees per axis, scale, order, mode, cval)
    ((20.0, -10.0, 35.0), 1.15, 3, "constant", 0.0),
    ((0.0, 0.0, -40.0), 1.3, 1, "nearest", 0.0),
    ((12.0, 7.0, 0.0), 1.05, 1, "reflect", 0.0),
    ((-25.0, 15.0, 5.0), 1.2, 3, "mirror", 0.0),
    ((5.0, 5.0, 5.0), 1.0, 1, "constant", 0.25),
]


# --- batchgenerators' own random calls, fed --------------------------------------------------

class Draws(contextlib.AbstractContextManager):
    """Replaces np.random.random / np.random.uniform while batchgenerators runs:

    - `np.random.random(shape)` (elastic_deform_coordinates, one call per component in axis
      order) returns augscope's uniform noise u of component k for `noise_seed`, so the library's
      own `u * 2 - 1` and gaussian_filter make the field;
    - with `mirror=True`, every argument-free `np.random.uniform()` returns 0.0: all `< p`
      firing tests pass (the fixed-value presets have p = 1) and MirrorTransform's
      `np.random.uniform() < 0.5` mirrors each of its axes;
    - `scale` (a list of factors, consumed in order) answers the scale draw of augment_spatial:
      the argument-free `np.random.random() < 0.5` picks the branch below 1 for a factor < 1, and
      `np.random.uniform(lo, hi)` (lo != hi) returns the factor, which must lie in [lo, hi].

    Anything else goes to numpy's own generator. `calls` records every scalar draw."""

    def __init__(self, noise_seed=None, mirror=False, scale=None):
        self.noise_seed = noise_seed
        self.mirror = mirror
        self.scale = list(scale or [])
        self.component = 0
        self.calls = []

    def __enter__(self):
        self._random, self._uniform = np.random.random, np.random.uniform
        np.random.random, np.random.uniform = self.random, self.uniform
        return self

    def __exit__(self, *exc):
        np.random.random, np.random.uniform = self._random, self._uniform
        return False

    def random(self, size=None):
        if size is not None:
            if self.noise_seed is None:
                raise AssertionError("an elastic noise draw in a case without elastic")
            shape = tuple(np.atleast_1d(size))
            u = C.philox_uniform(self.noise_seed, self.component, int(np.prod(shape)))
            self.component += 1
            return u.reshape(shape)
        if self.scale:
            v = 0.0 if self.scale[0] < 1.0 else 0.75
        else:
            v = self._random()
        self.calls.append(("random", v))
        return v

    def uniform(self, low=None, high=None, size=None):
        bare = low is None and high is None
        low = 0.0 if low is None else low
        high = 1.0 if high is None else high
        if size is not None:
            return self._uniform(low, high, size)
        if bare and self.mirror:
            v = 0.0
        elif not bare and low != high and self.scale:
            v = self.scale.pop(0)
            lo, hi = min(low, high), max(low, high)
            if not lo - 1e-12 <= v <= hi + 1e-12:
                raise AssertionError(f"batchgenerators draws from [{lo}, {hi}]; {v} is outside")
        else:
            v = self._uniform(low, high)
        self.calls.append(("uniform", (low, high), v))
        return v


# --- one fixed-value case ----------------------------------------------------------------------

def case_preset(c, ndim):
    """The preset sections of a case dict (see `fixed_cases`)."""
    sec = {}
    if c.get("flip"):
        sec["flip"] = {"p": [1.0 if a in c["flip"] else 0.0 for a in range(ndim)]}
    if c.get("rotate") is not None:
        sec["rotate"] = {"p": 1.0, "range_deg": [[a, a] for a in c["rotate"]]}
    if c.get("scale") is not None:
        s = c["scale"]
        if isinstance(s, (list, tuple)):
            sec["scale"] = {"p": 1.0, "range": [[v, v] for v in s], "per_axis": True}
        else:
            sec["scale"] = {"p": 1.0, "range": [[s, s]]}
    if c.get("elastic") is not None:
        a, s = c["elastic"]
        sec["elastic"] = {"p": 1.0, "alpha": [a, a], "sigma": [s, s]}
    sec["sampling"] = {"order": c.get("order", 1), "mode": c.get("mode", "constant"),
                       "cval": float(c.get("cval", 0.0)), "label_order": 0}
    return sec


def apply_args(c, space=None):
    args = []
    if c.get("flip"):
        args.append("--flip=" + ",".join(map(str, c["flip"])))
    if c.get("rotate") is not None:
        args.append("--rotate=" + ",".join(repr(math.radians(a)) for a in c["rotate"]))
    if c.get("scale") is not None:
        s = c["scale"]
        args.append("--scale=" + (",".join(map(repr, s)) if isinstance(s, (list, tuple))
                                  else repr(s)))
    if c.get("elastic") is not None:
        args += [f"--elastic={c['elastic'][0]!r},{c['elastic'][1]!r}", "--seed",
                 str(c["seed"])]
    args += ["--order", str(c.get("order", 1)), "--mode", c.get("mode", "constant"),
             f"--cval={float(c.get('cval', 0.0))!r}"]
    if space:
        args += ["--space", space]
    return args


def forced_scale(c):
    """The factors the scale draw must be fed (None when batchgenerators draws the fixed value
    itself: one factor >= 1, or equal factors >= 1 on every axis)."""
    s = c.get("scale")
    if s is None:
        return None
    f = list(s) if isinstance(s, (list, tuple)) else [s]
    if min(f) >= 1.0 and len(set(f)) == 1:
        return None
    return f


def run_bg(snippet, name, vol, lab, c):
    ns = C.exec_snippet(snippet, name)
    tr = ns["get_transforms"](vol.shape)
    data = vol[None, None].astype(np.float64).copy()
    seg = None if lab is None else lab[None, None].astype(np.float32).copy()
    np.random.seed(1234)
    with Draws(noise_seed=c.get("seed") if c.get("elastic") else None,
               mirror=bool(c.get("flip")), scale=forced_scale(c)) as d:
        out = tr(data=data, seg=seg) if seg is not None else tr(data=data)
        if d.scale:
            raise AssertionError(f"batchgenerators did not draw the scale factors {d.scale}")
        if c.get("elastic") and d.component != vol.ndim:
            raise AssertionError(f"{d.component} elastic noise draws, expected {vol.ndim}")
    return out["data"][0, 0], (out["seg"][0, 0] if seg is not None else None)


def forced_note(c):
    """What the case fed, for its report line."""
    fed = []
    if c.get("flip"):
        fed.append("mirror draws fed 0")
    if forced_scale(c):
        fed.append("scale draws fed the factors")
    if c.get("elastic"):
        fed.append("augscope noise")
    return ", ".join(fed)


def expected_notes(c, space):
    """NOTE texts the snippet of a case must hold."""
    want = []
    if space == "mm" and (c.get("rotate") is not None or c.get("elastic") is not None):
        want.append("voxel space")
    if c.get("flip"):
        want.append("mirrors each allowed axis with p 0.5")
    s = c.get("scale")
    if s is not None:
        f = list(s) if isinstance(s, (list, tuple)) else [s]
        if len(set(f)) > 1:
            want.append("draws every axis from one scale range")
        if min(f) < 1.0 and max(f) < 1.0:
            want.append("cannot hold a scale range below 1")
    return want


def fixed_case(work, name, vol, lab, c, image_path=None, label_path=None, space=None,
               ours_space=None, strict=False, report=True, aff=None):
    """Exports the case's preset, runs it under batchgenerators and `augscope apply`; one Report
    line. Returns (image agreement, label agreement)."""
    ndim = vol.ndim
    preset = work.preset(f"bg {name}", case_preset(c, ndim), space=space)
    snippet = C.export_snippet("batchgenerators", preset, ndim)
    C.check_verified_line(snippet, DISTS)
    notes = [ln for ln in snippet.splitlines() if ln.startswith("# NOTE:")]
    missing = [w for w in expected_notes(c, space) if not any(w in n for n in notes)]
    if missing:
        REPORT.stat(f"{name}: NOTE", False, f"the snippet lacks the NOTE {missing}")
    bg_img, bg_lab = run_bg(snippet, name, vol, lab, c)
    if image_path is None:
        image_path = work.npy(f"in_{name}", vol)
        label_path = None if lab is None else work.npy(f"lab_{name}", lab)
    ours, ours_lab = C.apply(work, image_path, apply_args(c, ours_space), label_path,
                             tag=f"out_{name}")
    frac, worst = C.agreement(ours, bg_img)
    lfrac = None if lab is None else C.label_agreement(ours_lab, bg_lab)
    extra = [f"max |diff| {worst:.2e}"]
    if strict:
        f3, _ = C.agreement(ours, bg_img, tol=1e-3)
        extra.append(f"{100 * f3:.3f} % within 1e-3{'' if f3 >= 0.999 else ' (below 99.9 %)'}")
        if f3 < 0.999:
            REPORT.stat(f"{name} at 1e-3", False, f"{100 * f3:.3f} % within 1e-3 (bar 99.9 %)")
    fed = forced_note(c)
    if fed:
        extra.append(fed)
    if report:
        REPORT.case(name, frac, lfrac, "; ".join(extra))
    return frac, lfrac


# --- the scans ---------------------------------------------------------------------------------

def smooth_volume():
    rng = np.random.default_rng(0)
    vol = gaussian_filter(rng.random((18, 22, 26)), 1.5)
    vol = ((vol - vol.min()) / (vol.max() - vol.min())).astype(np.float32)
    seg = ((vol > 0.5).astype(np.uint8) + (vol > 0.7).astype(np.uint8))
    return vol, seg


def fixed_cases(work):
    vol, seg = smooth_volume()
    for k, (deg, scale, order, mode, cval) in enumerate(STRICT):
        c = {"rotate": deg, "scale": scale, "order": order, "mode": mode, "cval": cval}
        fixed_case(work, f"case {k}: rotate {deg} deg, scale {scale}, order {order}, {mode}",
                   vol, seg, c, strict=True)

    mni, lab, _ = C.mni_small(step=4)
    el = {"seed": 7}
    cases3 = [
        ("flip 0", {"flip": [0]}),
        ("flip 1", {"flip": [1]}),
        ("flip 2", {"flip": [2]}),
        ("flip 0,1,2 + rotate", {"flip": [0, 1, 2], "rotate": (10.0, -5.0, 20.0)}),
        ("scale 1.25", {"scale": 1.25, "order": 3}),
        ("scale 0.8", {"scale": 0.8, "order": 3}),
        ("scale per axis 1.1,1.3,1.2", {"scale": [1.1, 1.3, 1.2]}),
        ("scale per axis 0.85,1.2,0.9", {"scale": [0.85, 1.2, 0.9], "mode": "nearest"}),
        ("scale per axis 1.2,1.2,1.2", {"scale": [1.2, 1.2, 1.2]}),
        ("elastic 200,4", {"elastic": (200.0, 4.0), **el}),
        ("elastic 60,2 order 3 reflect", {"elastic": (60.0, 2.0), "order": 3, "mode": "reflect",
                                          **el}),
        ("combined", {"flip": [0, 2], "rotate": (15.0, -10.0, 25.0), "scale": 1.1,
                      "elastic": (150.0, 3.0), "order": 3, **el}),
        ("combined, scale below 1", {"flip": [1], "rotate": (-20.0, 5.0, 10.0),
                                     "scale": [0.9, 0.95, 1.15], "elastic": (100.0, 3.0),
                                     "mode": "mirror", **el}),
    ]
    for name, c in cases3:
        fixed_case(work, f"MNI 3D {name}", mni, lab, c)

    z = mni.shape[0] // 2 + 2
    sl, sl_lab = np.ascontiguousarray(mni[z]), np.ascontiguousarray(lab[z])
    cases2 = [
        ("rotate 30 + scale 1.2", {"rotate": (30.0,), "scale": 1.2, "order": 3}),
        ("flip 0", {"flip": [0]}),
        ("flip 1", {"flip": [1]}),
        ("scale per axis 0.8,1.25", {"scale": [0.8, 1.25]}),
        ("elastic 80,3", {"elastic": (80.0, 3.0), **el}),
        ("combined", {"flip": [0, 1], "rotate": (-35.0,), "scale": 0.9,
                      "elastic": (50.0, 2.5), "order": 3, "mode": "nearest", **el}),
    ]
    for name, c in cases2:
        fixed_case(work, f"MNI 2D {name}", sl, sl_lab, c)


def translate_case(work):
    """The NOTE says the translation is left out: the snippet equals augscope without it."""
    mni, lab, _ = C.mni_small(step=4)
    c = {"rotate": (10.0, 0.0, -15.0), "scale": 1.1}
    sec = case_preset(c, 3)
    sec["translate"] = {"p": 1.0, "range": [[3.0, 3.0], [-4.0, -4.0], [2.0, 2.0]]}
    preset = work.preset("bg translate", sec)
    snippet = C.export_snippet("batchgenerators", preset, 3)
    C.check_verified_line(snippet, DISTS)
    bg_img, bg_lab = run_bg(snippet, "translate", mni, lab, c)
    img = work.npy("in_translate", mni)
    labp = work.npy("lab_translate", lab)
    without, without_lab = C.apply(work, img, apply_args(c), labp, tag="out_translate")
    frac, worst = C.agreement(without, bg_img)
    lfrac = C.label_agreement(without_lab, bg_lab)
    text = "has no translation"
    REPORT.case("MNI 3D translate 3,-4,2 + rotate + scale = augscope without the translation "
                "(NOTE: left out)", frac if text in snippet else 0.0, lfrac,
                f"max |diff| {worst:.2e}; NOTE {'present' if text in snippet else 'MISSING'}")


def mm_cases(work):
    """space = "mm": batchgenerators takes the values as voxels."""
    c = {"rotate": (0.0, 20.0, 0.0), "scale": 1.1, "elastic": (150.0, 3.0), "seed": 11}
    vol, lab, aff = C.anisotropic()
    img = work.file("aniso.nii.gz")
    labp = work.file("aniso_labels.nii.gz")
    C.save_nifti(img, vol, aff)
    C.save_nifti(labp, lab, aff)
    # What the NOTE claims: the values are used as voxels (equal to augscope in voxel space) ...
    fixed_case(work, "anisotropic 6x2x2 mm, mm preset = augscope --space voxel", vol, lab, c,
               img, labp, space="mm", ours_space="voxel")
    # ... and so differ from the preset's mm meaning on anisotropic voxels.
    frac, lfrac = fixed_case(work, "anisotropic mm", vol, lab, c, img, labp, space="mm",
                             ours_space="mm", report=False)
    REPORT.stat("anisotropic 6x2x2 mm, mm preset vs augscope --space mm (NOTE: differs)",
                frac < C.IMAGE_BAR,
                f"{100 * frac:.2f} % within 1e-2, labels {100 * lfrac:.2f} % equal: below the bar, "
                f"as the NOTE says")
    # On 1 mm isotropic voxels the mm preset is exact.
    full, full_lab, aff1 = C.mni_small(step=1)
    sl = (slice(60, 108), slice(70, 126), slice(56, 108))
    iso, iso_lab = np.ascontiguousarray(full[sl]), np.ascontiguousarray(full_lab[sl])
    img1 = work.file("iso1.nii.gz")
    lab1 = work.file("iso1_labels.nii.gz")
    C.save_nifti(img1, iso, aff1)
    C.save_nifti(lab1, iso_lab, aff1)
    fixed_case(work, "1 mm isotropic, mm preset = augscope --space mm", iso, iso_lab, c, img1,
               lab1, space="mm", ours_space="mm")


# --- distributions -----------------------------------------------------------------------------

def two_proportions(k1, n1, k2, n2):
    """Two-sided p-value that two firing frequencies are the same (pooled z-test)."""
    p = (k1 + k2) / (n1 + n2)
    if p in (0.0, 1.0):
        return 1.0 if k1 / n1 == k2 / n2 else 0.0
    z = (k1 / n1 - k2 / n2) / math.sqrt(p * (1 - p) * (1 / n1 + 1 / n2))
    return float(2 * norm.sf(abs(z)))


class Recorder:
    """Wraps batchgenerators' own functions where their callers look them up (augment_spatial's
    coordinate functions in batchgenerators.augmentations.spatial_transformations, MirrorTransform's
    augment_mirroring in batchgenerators.transforms.spatial_transforms), to record each sample's
    draws."""

    NAMES = ("rotate_coords_3d", "rotate_coords_2d", "scale_coords", "elastic_deform_coordinates",
             "augment_mirroring")

    def __init__(self):
        self.sample = None

    def __enter__(self):
        self.saved = {n: getattr(self.module(n), n) for n in self.NAMES}
        rec = self

        def rot3(coords, ax, ay, az):
            rec.sample["rotate"] = [ax, ay, az]
            return rec.saved["rotate_coords_3d"](coords, ax, ay, az)

        def rot2(coords, a):
            rec.sample["rotate"] = [a]
            return rec.saved["rotate_coords_2d"](coords, a)

        def scale(coords, sc):
            rec.sample["scale"] = list(np.atleast_1d(sc).astype(float))
            return rec.saved["scale_coords"](coords, sc)

        def elastic(coords, a, s):
            rec.sample["elastic"] = (a, s)
            return rec.saved["elastic_deform_coordinates"](coords, a, s)

        def mirror(sample_data, sample_seg=None, axes=(0, 1, 2)):
            # The per-axis `np.random.uniform() < 0.5` draws, in axis order (axis 2 only in 3D).
            drawn = []
            real = np.random.uniform

            def uniform(*a, **k):
                v = real(*a, **k)
                drawn.append(v)
                return v
            np.random.uniform = uniform
            try:
                out = rec.saved["augment_mirroring"](sample_data, sample_seg, axes=axes)
            finally:
                np.random.uniform = real
            nd = sample_data.ndim - 1
            it = iter(drawn)
            rec.sample["flip"] = [a in axes and (a < 2 or nd == 3) and next(it) < 0.5
                                  for a in range(nd)]
            return out

        for n, fn in zip(self.NAMES, (rot3, rot2, scale, elastic, mirror)):
            setattr(self.module(n), n, fn)
        return self

    def __exit__(self, *exc):
        for n, fn in self.saved.items():
            setattr(self.module(n), n, fn)
        return False

    @staticmethod
    def module(name):
        return bg_tr if name == "augment_mirroring" else bg_st


def bg_draws(snippet, ndim, count, seed=0):
    """`count` samples of the snippet's transforms on a small array: what each drew."""
    ns = C.exec_snippet(snippet, "distribution")
    shape = (5, 6, 7) if ndim == 3 else (9, 10)
    tr = ns["get_transforms"](shape)
    arr = np.random.default_rng(0).random(shape)
    out = []
    np.random.seed(seed)
    with Recorder() as rec:
        for _ in range(count):
            rec.sample = {}
            tr(data=arr[None, None].copy())
            out.append(rec.sample)
    return out


def ours_draws(preset, ndim, count):
    text = C.run("preset", "sample", "--seed", 0, "--count", count, "--ndim", ndim, preset)
    return [json.loads(ln)["drawn"] for ln in text.splitlines() if ln.strip()]


def freq(name, k1, k2, n):
    """A firing frequency: a two-proportion test p > 0.01, or within 2 percentage points."""
    p = two_proportions(k1, n, k2, n)
    d = abs(k1 - k2) / n
    REPORT.stat(name, p > 0.01 or d <= 0.02,
                f"batchgenerators {k1 / n:.3f}, augscope {k2 / n:.3f} (n = {n}, p = {p:.3f})")


def ks(name, a, b):
    """A distribution of values: KS p > 0.01, or mean and standard deviation within 2 % of the
    values' span."""
    if len(a) < 20 or len(b) < 20:
        REPORT.stat(name, False, f"too few values (batchgenerators {len(a)}, augscope {len(b)})")
        return
    a, b = np.asarray(a, float), np.asarray(b, float)
    p = C.ks_2samp(a, b)
    span = max(a.max(), b.max()) - min(a.min(), b.min())
    dm, ds = abs(a.mean() - b.mean()) / span, abs(a.std() - b.std()) / span
    REPORT.stat(name, p > 0.01 or (dm <= 0.02 and ds <= 0.02),
                f"KS p = {p:.3f}, means {a.mean():.4f} / {b.mean():.4f}, sd {a.std():.4f} / "
                f"{b.std():.4f} (differences {100 * dm:.1f} %, {100 * ds:.1f} % of the span; "
                f"n = {len(a)} / {len(b)})")


def compare(tag, bg, ours, ndim, scale_dist=True):
    n = len(bg)
    # Flip: per axis.
    for a in range(ndim):
        freq(f"{tag} flip axis {a} frequency", sum(s.get("flip", [False] * ndim)[a] for s in bg),
             sum(o["flip"]["axes_fired"][a] for o in ours), n)
    # Rotation: fired, each axis given fired, angles of the axes that turned.
    rb = [s["rotate"] for s in bg if "rotate" in s]
    ro = [o["rotate"] for o in ours if o["rotate"]["fired"]]
    freq(f"{tag} rotation frequency", len(rb), len(ro), n)
    for a in range(3 if ndim == 3 else 1):
        fb = [r[a] for r in rb if r[a] != 0]
        fo = [math.radians(r["angles_deg"][a]) for r in ro if r["axes_fired"][a]]
        p = two_proportions(len(fb), len(rb), len(fo), len(ro))
        d = abs(len(fb) / len(rb) - len(fo) / len(ro))
        REPORT.stat(f"{tag} rotation axis {a} frequency once fired", p > 0.01 or d <= 0.02,
                    f"batchgenerators {len(fb) / len(rb):.3f}, augscope {len(fo) / len(ro):.3f} "
                    f"(p = {p:.3f})")
        ks(f"{tag} rotation angle axis {a} (rad)", fb, fo)
    # Scale.
    sb = [s["scale"] for s in bg if "scale" in s]
    so = [o["scale"]["factors"] for o in ours if o["scale"]["fired"]]
    freq(f"{tag} scale frequency", len(sb), len(so), n)
    if scale_dist:
        ks(f"{tag} scale factors", np.concatenate(sb), np.concatenate(so))
    # Elastic.
    eb = [s["elastic"] for s in bg if "elastic" in s]
    eo = [(o["elastic"]["alpha"], o["elastic"]["sigma"]) for o in ours if o["elastic"]["fired"]]
    freq(f"{tag} elastic frequency", len(eb), len(eo), n)
    ks(f"{tag} elastic alpha", [e[0] for e in eb], [e[0] for e in eo])
    ks(f"{tag} elastic sigma", [e[1] for e in eb], [e[1] for e in eo])
    return sb, so


def distributions(work, count=10000):
    base = {
        "flip": {"p": [0.5]},
        "rotate": {"p": 0.7, "p_axis": [0.8], "range_deg": [[-30.0, 30.0], [-15.0, 15.0],
                                                           [-10.0, 20.0]]},
        "elastic": {"p": 0.4, "alpha": [0.0, 900.0], "sigma": [9.0, 13.0]},
    }
    # Split scale (batchgenerators' own draw): isotropic in 3D, per axis in 2D.
    for ndim, scale in ((3, {"p": 0.6, "range": [[0.7, 1.4]], "distribution": "split"}),
                        (2, {"p": 0.6, "range": [[0.75, 1.25]], "per_axis": True,
                             "distribution": "split"})):
        sec = {**base, "scale": scale}
        if ndim == 2:
            sec["rotate"] = {"p": 0.7, "range_deg": [[-90.0, 45.0]]}
        preset = work.preset(f"bg random {ndim}d", sec)
        snippet = C.export_snippet("batchgenerators", preset, ndim)
        C.check_verified_line(snippet, DISTS)
        compare(f"random {ndim}D", bg_draws(snippet, ndim, count), ours_draws(preset, ndim, count),
                ndim)

    # Uniform scale across 1: the NOTE says batchgenerators draws the split distribution.
    uni = work.preset("bg random uniform", {**base, "scale": {"p": 0.6, "range": [[0.7, 1.4]]}})
    split = work.preset("bg random split", {**base, "scale": {"p": 0.6, "range": [[0.7, 1.4]],
                                                              "distribution": "split"}})
    snippet = C.export_snippet("batchgenerators", uni, 3)
    note = "draws scales below and above 1 with equal chance"
    bg = bg_draws(snippet, 3, count, seed=1)
    sb, so = compare("uniform scale 3D", bg, ours_draws(uni, 3, count), 3, scale_dist=False)
    so_split = [o["scale"]["factors"] for o in ours_draws(split, 3, count) if o["scale"]["fired"]]
    p_uni = C.ks_2samp(np.concatenate(sb), np.concatenate(so))
    p_split = C.ks_2samp(np.concatenate(sb), np.concatenate(so_split))
    REPORT.stat("uniform scale [0.7, 1.4]: NOTE (batchgenerators draws the split distribution)",
                note in snippet and p_uni < 0.01 and p_split > 0.01,
                f"KS vs augscope uniform p = {p_uni:.2g}, vs augscope split p = {p_split:.3f}; "
                f"NOTE {'present' if note in snippet else 'MISSING'}")

    # Mirror probability other than 0.5: the NOTE says batchgenerators mirrors with p 0.5.
    p3 = work.preset("bg flip p 0.3", {"flip": {"p": [0.3, 0.0, 0.3]}})
    snippet = C.export_snippet("batchgenerators", p3, 3)
    bg = bg_draws(snippet, 3, count, seed=2)
    k = [sum(s.get("flip", [False] * 3)[a] for s in bg) for a in range(3)]
    fr = [v / count for v in k]
    pv = [two_proportions(k[a], count, count // 2, count) for a in (0, 2)]
    ok = ("axis 0 has p 0.3" in snippet and "axis 2 has p 0.3" in snippet and k[1] == 0
          and min(pv) > 0.01)
    REPORT.stat("flip p [0.3, 0, 0.3]: NOTE (batchgenerators mirrors allowed axes with p 0.5)",
                ok, f"batchgenerators frequencies {fr[0]:.3f}, {fr[1]:.3f}, {fr[2]:.3f} "
                    f"(p vs 0.5: {pv[0]:.3f}, {pv[1]:.3f})")

    # Per-axis rotation probabilities: the NOTE says batchgenerators uses their mean on every axis.
    pr = work.preset("bg p_axis", {"rotate": {"p": 1.0, "p_axis": [0.2, 0.5, 0.8],
                                              "range_deg": [[-20.0, 20.0]]}})
    snippet = C.export_snippet("batchgenerators", pr, 3)
    rb = [s["rotate"] for s in bg_draws(snippet, 3, count // 4, seed=7)]
    fr = [np.mean([r[a] != 0 for r in rb]) for a in range(3)]
    pv = [two_proportions(int(round(f * len(rb))), len(rb), len(rb) // 2, len(rb)) for f in fr]
    text = "probabilities [0.2, 0.5, 0.8] are replaced by their mean"
    REPORT.stat("rotate p_axis [0.2, 0.5, 0.8]: NOTE (their mean, 0.5, on every axis)",
                text in snippet and min(pv) > 0.01,
                f"batchgenerators per-axis frequencies {fr[0]:.3f}, {fr[1]:.3f}, {fr[2]:.3f} "
                f"(p vs 0.5: {min(pv):.3f} at worst); NOTE {'present' if text in snippet else 'MISSING'}")

    # Per-axis scale ranges: the NOTE says every axis draws from the merged range (split at 1).
    pr = work.preset("bg per-axis ranges", {"scale": {
        "p": 1.0, "per_axis": True, "distribution": "split",
        "range": [[0.9, 1.1], [1.0, 1.3], [0.8, 1.0]]}})
    snippet = C.export_snippet("batchgenerators", pr, 3)
    got = np.array([s["scale"] for s in bg_draws(snippet, 3, count // 4, seed=8)])
    rng = np.random.default_rng(9)
    n = len(got)
    want = np.where(rng.random(n) < 0.5, rng.uniform(0.8, 1.0, n), rng.uniform(1.0, 1.3, n))
    pa = [C.ks_2samp(got[:, a], want) for a in range(3)]
    text = "the per-axis ranges are merged into [0.8, 1.3]"
    REPORT.stat("scale per-axis ranges: NOTE (each axis drawn from the merged [0.8, 1.3], split)",
                text in snippet and min(pa) > 0.01,
                f"KS of each axis vs split [0.8, 1.3]: p = {', '.join(f'{v:.3f}' for v in pa)}; "
                f"NOTE {'present' if text in snippet else 'MISSING'}")

    # A uniform scale range ending at 1: the NOTE says half of the draws keep the scale at 1.
    pr = work.preset("bg scale 0.8 1", {"scale": {"p": 1.0, "range": [[0.8, 1.0]]}})
    snippet = C.export_snippet("batchgenerators", pr, 3)
    got = np.concatenate([s["scale"] for s in bg_draws(snippet, 3, count, seed=4)])
    at1 = got == 1.0
    p = two_proportions(int(at1.sum()), count, count // 2, count)
    pu = C.ks_2samp(got[~at1], np.random.default_rng(6).uniform(0.8, 1.0, count))
    text = "keeps the scale at 1 in half of the draws and draws U(0.8, 1) in the other half"
    REPORT.stat("uniform scale [0.8, 1]: NOTE (half of the draws at 1, the rest U(0.8, 1))",
                text in snippet and p > 0.01 and pu > 0.01,
                f"{at1.mean():.3f} of the draws at 1 (p vs 0.5: {p:.3f}), the rest vs U(0.8, 1) "
                f"KS p = {pu:.3f}; NOTE {'present' if text in snippet else 'MISSING'}")

    # A scale range below 1: what batchgenerators draws for scale = (lo, hi), hi < 1.
    for lo, hi in ((0.8, 0.8), (0.7, 0.9)):
        pr = work.preset(f"bg scale {lo} {hi}", {"scale": {"p": 1.0, "range": [[lo, hi]]}})
        snippet = C.export_snippet("batchgenerators", pr, 3)
        got = np.concatenate([s["scale"] for s in bg_draws(snippet, 3, count, seed=3)])
        rng = np.random.default_rng(5)
        want = np.where(rng.random(count) < 0.5, rng.uniform(lo, 1.0, count),
                        rng.uniform(hi, 1.0, count))
        p = C.ks_2samp(got, want)
        text = f"U({lo}, 1) or U({hi}, 1) with equal chance"
        REPORT.stat(f"scale range [{lo}, {hi}]: NOTE ({text})",
                    text in snippet and p > 0.01,
                    f"KS vs that mixture p = {p:.3f}, draws in [{got.min():.3f}, {got.max():.3f}];"
                    f" NOTE {'present' if text in snippet else 'MISSING'}")


# --- the bundled presets run as they are --------------------------------------------------------

def bundled():
    vol, _ = smooth_volume()
    for name in ("nnunet-v2", "nnunet-v1-3d", "batchgenerators", "monai-brats"):
        for ndim in (3, 2):
            snippet = C.export_snippet("batchgenerators", name, ndim)
            C.check_verified_line(snippet, DISTS)
            ns = C.exec_snippet(snippet, name)
            arr = vol if ndim == 3 else vol[vol.shape[0] // 2]
            np.random.seed(1)
            out = ns["get_transforms"](arr.shape)(data=arr[None, None].astype(np.float64).copy())
            ok = out["data"].shape == arr[None, None].shape and bool(np.isfinite(out["data"]).all())
            REPORT.stat(f"bundled preset {name} ({ndim}D) runs", ok,
                        f"output {out['data'].shape}, finite {np.isfinite(out['data']).all()}")


def main():
    work = C.Workdir()
    try:
        fixed_cases(work)
        translate_case(work)
        mm_cases(work)
        distributions(work)
        bundled()
    finally:
        work.close()
    REPORT.finish()
    print(f"batchgenerators interop: all {len(STRICT)} cases pass at 1e-3 (rotation + scale), "
          f"all {REPORT.count} lines at the bar")


if __name__ == "__main__":
    main()
