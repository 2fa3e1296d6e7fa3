#!/usr/bin/env python3
"""Runs what `augscope preset export --to monai` (and `--to monai-bundle`) writes under the real
MONAI and compares it with `augscope apply` of the same plan.

Fixed-value presets (every probability 1, ranges of one value) of each transform alone and
combined, 3D and 2D, voxel and mm space, image and labels: the bar of common.py (>= 99 % of voxels
within 1e-2 of the intensity range, labels >= 99.5 % equal). The elastic case feeds augscope's
noise through MONAI's own random call. Random presets: what MONAI drew, read from its transform
objects over 500 draws, against `augscope preset sample`.

    /path/to/venv/bin/python tests/interop/check_monai.py [path/to/augscope]

Exit 0 at the bar, 1 below it, 77 when MONAI is missing.
"""
import json
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common as C  # noqa: E402

monai = C.require("monai", "monai==1.6.1")
torch = C.require("torch", "torch")
from scipy.ndimage import gaussian_filter  # noqa: E402

DISTS = ("monai", "torch")
DRAWS = 500


# --- running a snippet --------------------------------------------------------------------------

def to_monai(arr):
    """[z, y, x] (or [y, x]) numpy -> MONAI's channel-first, x-first tensor."""
    return torch.from_numpy(np.ascontiguousarray(np.asarray(arr, np.float32).T[None]))


def from_monai(t):
    return np.asarray(t.detach().cpu().numpy()[0]).T


def walk(t):
    """Every transform inside a Compose (nested ones too)."""
    inner = getattr(t, "transforms", None)
    if inner is None:
        yield t
        return
    for x in inner:
        yield from walk(x)


class FeedNoise:
    """Stands in for an elastic transform's random state: the uniform noise field it asks for is
    augscope's (docs/design.md §4), every other draw goes to the real state."""

    def __init__(self, real, noise_x_first):
        self.real = real
        self.noise = noise_x_first
        self.fed = 0

    def uniform(self, low=0.0, high=1.0, size=None):
        if size is not None and np.ndim(size) == 1 and len(size) == self.noise.ndim:
            assert tuple(size) == self.noise.shape, (size, self.noise.shape)
            assert (low, high) == (-1.0, 1.0), (low, high)
            self.fed += 1
            return self.noise.copy()
        return self.real.uniform(low, high, size)

    def __getattr__(self, name):
        return getattr(self.real, name)


def monai_noise(seed, shape):
    """augscope's noise for a [z, y, x] grid as MONAI's offset: (ndim, x, y, z), component j =
    MONAI axis j = augscope axis ndim-1-j."""
    n = C.elastic_noise(seed, shape)
    return np.stack([n[len(shape) - 1 - j].T for j in range(len(shape))]).astype(np.float32)


def feed_elastic(tr, seed, shape):
    feeds = []
    for t in walk(tr):
        inner = getattr(t, "rand_3d_elastic", None) or getattr(t, "rand_2d_elastic", None)
        if inner is not None:
            f = FeedNoise(inner.R, monai_noise(seed, shape))
            inner.R = f
            feeds.append(f)
    return feeds


def run_monai(tr, vol, lab=None, noise_seed=None):
    feeds = feed_elastic(tr, noise_seed, vol.shape) if noise_seed is not None else []
    data = {"image": to_monai(vol)}
    if lab is not None:
        data["label"] = to_monai(lab)
    out = tr(data)
    if noise_seed is not None:
        assert feeds and all(f.fed == 1 for f in feeds), "the elastic transform drew no noise"
    img = from_monai(out["image"])
    return img, (from_monai(out["label"]) if lab is not None else None)


def snippet_transform(target, preset_path, ndim, spacing_x_first=None):
    text = C.export_snippet(target, preset_path, ndim)
    if target == "monai":
        ns = C.exec_snippet(text, "monai_snippet")
        if spacing_x_first is not None:
            ns["SPACING_MM"] = tuple(spacing_x_first)
        return ns["get_transforms"](), text
    return bundle_transform(text, spacing_x_first), text


def bundle_transform(text, spacing_x_first=None):
    from monai.bundle import ConfigParser
    cfg = json.loads(text)
    parser = ConfigParser(cfg)
    if spacing_x_first is not None:
        parser["spacing_mm"] = list(spacing_x_first)
    parser.parse(True)
    return parser.get_parsed_content("train#preprocessing")


# --- the fixed-value cases ----------------------------------------------------------------------

def one(v):
    return [float(v), float(v)]


def cases():
    """(name, ndim, scan, space, preset sections, augscope apply arguments, noise seed)."""
    r = math.radians
    out = []
    for ndim in (3, 2):
        rot_args = []
        if ndim == 3:
            for axis, deg in ((0, 20.0), (1, -25.0), (2, 35.0)):
                rng = [[0.0, 0.0]] * 3
                rng[axis] = one(deg)
                a = [0.0] * 3
                a[axis] = r(deg)
                rot_args.append((f"rotate {deg:g} deg about axis {axis}",
                                 {"rotate": {"p": 1.0, "range_deg": rng}},
                                 ["--rotate", ",".join(map(repr, a))]))
            rot_args.append(("rotate (15, -10, 25) deg",
                             {"rotate": {"p": 1.0, "range_deg": [one(15), one(-10), one(25)]}},
                             ["--rotate", f"{r(15)!r},{r(-10)!r},{r(25)!r}"]))
        else:
            for deg in (25.0, -40.0):
                rot_args.append((f"rotate {deg:g} deg",
                                 {"rotate": {"p": 1.0, "range_deg": [one(deg)]}},
                                 ["--rotate", repr(r(deg))]))
        for name, sec, args in rot_args:
            out.append((name, ndim, "mni", None, sec, args, None))
        for s in (1.25, 0.8):
            out.append((f"scale {s:g}", ndim, "mni", None,
                        {"scale": {"p": 1.0, "range": [one(s)]}}, ["--scale", repr(s)], None))
        per = (0.85, 1.1, 1.3)[-ndim:]
        out.append(("scale per axis", ndim, "mni", None,
                    {"scale": {"p": 1.0, "per_axis": True, "range": [one(s) for s in per]}},
                    ["--scale", ",".join(map(repr, per))], None))
        for axis in range(ndim):
            p = [0.0] * ndim
            p[axis] = 1.0
            out.append((f"flip axis {axis}", ndim, "mni", None, {"flip": {"p": p}},
                        ["--flip", str(axis)], None))
        t = (3.5, -2.25, 5.0)[-ndim:]
        out.append(("translate (voxels)", ndim, "mni", None,
                    {"translate": {"p": 1.0, "range": [one(v) for v in t]}},
                    ["--translate", ",".join(map(repr, t))], None))
        out.append(("elastic alpha 60 sigma 4", ndim, "mni", None,
                    {"elastic": {"p": 1.0, "alpha": one(60.0), "sigma": one(4.0)}},
                    ["--elastic", "60,4", "--seed", "11"], 11))
        angles = (one(15), one(-10), one(25)) if ndim == 3 else (one(-30),)
        rad = [r(g[0]) for g in angles]
        comb = {
            "flip": {"p": [1.0] + [0.0] * (ndim - 1)},
            "rotate": {"p": 1.0, "range_deg": list(angles)},
            "scale": {"p": 1.0, "range": [one(0.9)]},
            "translate": {"p": 1.0, "range": [one(v) for v in t]},
        }
        comb_args = ["--flip", "0", "--rotate", ",".join(map(repr, rad)), "--scale", "0.9",
                     "--translate", ",".join(map(repr, t))]
        out.append(("flip+rotate+scale 0.9+translate", ndim, "mni", None, comb, comb_args, None))
        comb_ps = dict(comb, scale={"p": 1.0, "per_axis": True, "range": [one(s) for s in per]})
        out.append(("flip+rotate+per-axis scale+translate", ndim, "mni", None, comb_ps,
                    ["--flip", "0", "--rotate", ",".join(map(repr, rad)), "--scale",
                     ",".join(map(repr, per)), "--translate", ",".join(map(repr, t))], None))
        comb_e = dict(comb, elastic={"p": 1.0, "alpha": one(60.0), "sigma": one(4.0)})
        out.append(("all combined with elastic", ndim, "mni", None, comb_e,
                    comb_args + ["--elastic", "60,4", "--seed", "5"], 5))
    # mm space on the anisotropic scan: translation in mm and scale are exact in MONAI's voxels;
    # rotation turns array indices (the snippet's note), so it is compared with augscope in voxel
    # space on the same data.
    out.append(("mm: translate (mm) + scale, anisotropic", 3, "aniso", "mm",
                {"translate": {"p": 1.0, "unit": "mm", "range": [one(6.0), one(-3.0), one(4.5)]},
                 "scale": {"p": 1.0, "range": [one(1.1)]}},
                ["--space", "mm", "--translate", "6.0,-3.0,4.5", "--scale", "1.1"], None))
    out.append(("mm: rotate 20 deg about axis 1, as voxels (the note)", 3, "aniso", "mm",
                {"rotate": {"p": 1.0, "range_deg": [[0.0, 0.0], one(20.0), [0.0, 0.0]]}},
                ["--space", "voxel", "--rotate", f"0,{r(20)!r},0"], None))
    return out


def sampling_args(sec):
    s = sec.get("sampling", {})
    return ["--order", str(s.get("order", 1)), "--mode", s.get("mode", "constant")]


def label_match(ours, theirs, coords, lab_in):
    """Fraction of label voxels equal, where a voxel whose sampling coordinate is an exact .5 on
    some axis (order 0 may round it either way: docs/design.md §3 excepts such ties, and MONAI builds its
    matrices in float32) also matches the label one rounding the other way gives; and the
    fraction of such ties."""
    from scipy.ndimage import map_coordinates
    coords = np.asarray(coords, np.float64)
    tie = (np.abs(coords % 1.0 - 0.5) < 1e-4).any(axis=0)
    theirs = np.rint(np.asarray(theirs)).astype(np.int64)
    ok = np.asarray(ours).astype(np.int64) == theirs
    lab_in = np.asarray(lab_in, np.float64)
    for shift in (-1e-3, 1e-3):
        other = map_coordinates(lab_in, coords + shift, order=0, mode="constant")
        ok |= tie & (np.rint(other).astype(np.int64) == theirs)
    return float(ok.mean()), float(tie.mean())


def without_elastic(args):
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
            continue
        if a in ("--elastic", "--seed"):
            skip = True
            continue
        out.append(a)
    return out


def reference(work, case, ndim, img_path, lab_path, args, sec, lab_in):
    """augscope's output for a case, and what it is: one fused resample, or where the snippet's
    NOTE says MONAI does something else, augscope run the way MONAI does it."""
    ext = os.path.basename(img_path).split(".", 1)[1]
    samp = sampling_args(sec)
    coords = work.file("coords.npy")
    has_elastic = "--elastic" in args
    affine = [a for a in ("rotate", "scale", "translate") if a in sec]
    if has_elastic and ndim == 2:
        ours, lab = C.apply(work, img_path, without_elastic(args) + samp +
                            ["--save-coords", coords], lab_path, tag="ref", ext=ext)
        return ours, lab, np.load(coords), "elastic left out in 2D (the NOTE)", lab_in
    if has_elastic and affine:
        # Rand3DElasticd is not lazy: the affine part is resampled first, then the deformation
        # (and the flip) on that result.
        first = [a for a in without_elastic(args)]
        flip = []
        if "--flip" in first:
            i = first.index("--flip")
            flip = first[i:i + 2]
            del first[i:i + 2]
        mid, mid_lab = C.apply(work, img_path, first + samp, lab_path, tag="mid", ext=ext)
        mid_path, mid_lab_path = work.npy("mid_in", mid), work.npy("mid_lab_in", mid_lab)
        i = args.index("--elastic")
        second = args[i:i + 4] + flip
        ours, lab = C.apply(work, mid_path, second + samp + ["--save-coords", coords],
                            mid_lab_path, tag="ref")
        single, _ = C.apply(work, img_path, args + samp, None, tag="single", ext=ext)
        return ours, lab, np.load(coords), "two resamples (the NOTE)", mid_lab, single
    ours, lab = C.apply(work, img_path, args + samp + ["--save-coords", coords], lab_path,
                        tag="ref", ext=ext)
    return ours, lab, np.load(coords), "", lab_in


def fixed_cases(rep, work, scans, target, only=None):
    for name, ndim, scan, space, sec, args, noise_seed in cases():
        if only and not any(o in name for o in only):
            continue
        variants = ((1, "constant"), (3, "nearest")) if "combined" in name else ((1, "constant"),)
        for order, mode in variants:
            sections = dict(sec)
            sections["sampling"] = {"order": order, "mode": mode, "cval": 0.0, "label_order": 0}
            vol, lab, img_path, lab_path, sp = scans[(scan, ndim)]
            preset = work.preset(f"{target} {name} {ndim}d {order}", sections, space)
            tr, text = snippet_transform(target, preset, ndim, sp[::-1] if space else None)
            if target == "monai":
                C.check_verified_line(text, DISTS)
            else:
                C.check_verified_line("# Verified against: " +
                                      json.loads(text)["_verified_against_"], DISTS)
            ref = reference(work, name, ndim, img_path, lab_path, args, sections, lab)
            ours, ours_lab, coords, what, ref_lab_in = ref[:5]
            theirs, theirs_lab = run_monai(tr, vol, lab, noise_seed if ndim == 3 else None)
            frac, dmax = C.agreement(ours, theirs)
            lfrac, tie = label_match(ours_lab, theirs_lab, coords, ref_lab_in)
            extra = f"max |diff| {dmax:.3g}"
            if tie:
                extra += f"; {100 * tie:.2f} % of voxels are order-0 ties at .5 (either rounding " \
                         f"counts; strictly {100 * C.label_agreement(ours_lab, theirs_lab):.2f} %)"
            if what:
                extra += f"; against augscope: {what}"
            if len(ref) > 5:
                single, _ = C.agreement(ref[5], theirs)
                extra += f"; {100 * single:.2f} % within 1e-2 of augscope's single resample"
            tag = "" if target == "monai" else " [bundle]"
            rep.case(f"{ndim}D {name} (order {order}, {mode}){tag}", frac, lfrac, extra)


NORMALIZE = {"method": "monai_scale_intensity_range", "a_min": 10.0, "a_max": 180.0,
             "b_min": 0.0, "b_max": 1.0, "clip": True}


def intensity_export_case(rep, work, scans, target):
    """MONAI's ScaleIntensityRange as the preset's normalisation, a mirror and every MONAI
    intensity family whose values a preset can fix (probability 1,
    ranges of one value; the noise and the histogram shift draw at random in MONAI whatever the
    preset), exported and run under MONAI, against `augscope apply` of the same steps: each step
    is MONAI's own transform in the snippet and the bundle (1e-4 of the range, the intensity
    families' bar)."""
    vol, lab, img_path, lab_path, _ = scans[("mni", 3)]
    steps = [
        {"step": "monai_shift_intensity", "p": 1.0, "offsets": one(12.5)},
        {"step": "monai_scale_intensity", "p": 1.0, "factors": one(0.25)},
        {"step": "monai_gaussian_smooth", "p": 1.0, "sigma_x": one(0.75), "sigma_y": one(1.25),
         "sigma_z": one(0.5)},
        {"step": "monai_adjust_contrast", "p": 1.0, "gamma": one(1.3), "retain_stats": True},
        {"step": "monai_bias_field", "p": 1.0, "degree": 2, "coeff_range": one(0.05)},
        {"step": "monai_gaussian_sharpen", "p": 1.0, "sigma1_x": one(1.0), "sigma1_y": one(0.75),
         "sigma1_z": one(0.5), "sigma2_x": one(0.5), "sigma2_y": one(0.5), "sigma2_z": one(0.25),
         "alpha": one(8.0)},
        {"step": "monai_simulate_low_resolution", "p": 1.0, "zoom_range": one(0.7)},
    ]
    path = work.file(f"{target}_intensity.toml")
    with open(path, "w") as fh:
        fh.write(C.preset_toml(f"{target} intensity", {"flip": {"p": [1.0, 0.0, 0.0]},
                                                       "normalize": NORMALIZE}))
        for st in steps:
            fh.write("[[intensity]]\n" + "".join(f"{k} = {C._toml_value(v)}\n"
                                                 for k, v in st.items()))
    tr, text = snippet_transform(target, path, 3)
    for st in steps:
        cls = {"monai_simulate_low_resolution": "RandSimulateLowResolution"}.get(
            st["step"], "Rand" + "".join(w.title() for w in st["step"].split("_")[1:]))
        assert cls in text, f"{cls} is not in the {target} export"
    plan = C.preset_samples(path, 1)[0]["plan"]
    args = ["--flip", "0", "--normalize", json.dumps(NORMALIZE)]
    for st in plan["intensity"]:
        args += ["--step", json.dumps(st)]
    ours, ours_lab = C.apply(work, img_path, args, lab_path, tag="intensity")
    theirs, theirs_lab = run_monai(tr, vol, lab)
    span = float(theirs.max() - theirs.min()) or 1.0
    frac, dmax = C.agreement(ours, theirs, span, 1e-4)
    tag = "" if target == "monai" else " [bundle]"
    assert "ScaleIntensityRange" in text, f"the normalisation is not in the {target} export"
    rep.case(f"3D ScaleIntensityRange + flip + {len(steps)} MONAI intensity families{tag}", frac,
             C.label_agreement(ours_lab, theirs_lab),
             f"max |diff| {dmax / span:.2g} of the range; the labels only mirrored", tol=1e-4)


def orientation_case(rep, work, target):
    """The scan stored as LAS, read by LoadImaged + EnsureChannelFirstd from NIfTI: MONAI and
    augscope both transform the stored array, so the outputs agree whatever the orientation."""
    from monai.transforms import Compose, EnsureChannelFirstd, LoadImaged
    vol, lab, aff = C.mni_small(step=4)
    for code in ("LAS", "LPS"):
        v, lb, a = C.oriented(vol, lab, aff, code)
        ip, lp = work.file(f"o_{code}.nii.gz"), work.file(f"o_{code}_lab.nii.gz")
        C.save_nifti(ip, v, a)
        C.save_nifti(lp, lb.astype(np.float32), a)
        sec = {"rotate": {"p": 1.0, "range_deg": [one(15), one(-10), one(25)]},
               "scale": {"p": 1.0, "range": [one(0.9)]},
               "translate": {"p": 1.0, "range": [one(3.0), one(-2.0), one(1.5)]},
               "flip": {"p": [0.0, 1.0, 0.0]},
               "sampling": {"order": 1, "mode": "constant", "cval": 0.0, "label_order": 0}}
        preset = work.preset(f"{target} oriented {code}", sec)
        tr, _ = snippet_transform(target, preset, 3)
        load = Compose([LoadImaged(keys=("image", "label")),
                        EnsureChannelFirstd(keys=("image", "label"))])
        out = tr(load({"image": ip, "label": lp}))
        theirs, theirs_lab = from_monai(out["image"]), from_monai(out["label"])
        r = math.radians
        ours, ours_lab = C.apply(work, ip, ["--rotate", f"{r(15)!r},{r(-10)!r},{r(25)!r}",
                                            "--scale", "0.9", "--translate", "3.0,-2.0,1.5",
                                            "--flip", "1", "--order", "1"], lp, tag="o",
                                 ext="nii.gz")
        frac, dmax = C.agreement(ours, theirs)
        rep.case(f"3D {code} NIfTI via LoadImaged, rotate+scale+translate+flip", frac,
                 C.label_agreement(ours_lab, theirs_lab), f"max |diff| {dmax:.3g}")


def elastic_field_stats(rep):
    """MONAI's smoothing of the same noise against augscope's G_sigma (scipy gaussian_filter,
    truncate 4, mode constant): the realised displacement of alpha 1."""
    from monai.networks.layers import GaussianFilter
    shape = (40, 44, 36)
    for sigma in (2.0, 4.0, 8.0):
        n = C.elastic_noise(3, shape)
        ours = np.stack([gaussian_filter(c, sigma, mode="constant", truncate=4.0) for c in n])
        g = GaussianFilter(3, sigma, 3.0)  # what Rand3DElasticd builds
        theirs = g(torch.from_numpy(n[None].astype(np.float32)))[0].numpy()
        d = np.sqrt((ours ** 2).sum(0))
        t = np.sqrt((theirs ** 2).sum(0))
        rms_o, rms_t = np.sqrt((d ** 2).mean()), np.sqrt((t ** 2).mean())
        err = np.sqrt(((ours - theirs) ** 2).sum(0).mean()) / rms_o
        rep.stat(f"3D elastic field, sigma {sigma:g}: MONAI RMS / augscope RMS",
                 abs(rms_t / rms_o - 1) < 0.1,
                 f"RMS ratio {rms_t / rms_o:.4f}, max ratio {t.max() / d.max():.4f}, "
                 f"field difference {100 * err:.2f} % of its RMS")


# --- distributions ------------------------------------------------------------------------------

RANDOM = {
    "flip": {"p": [0.3, 0.6, 0.45]},
    "rotate": {"p": 0.7, "range_deg": [[-10.0, 25.0], [5.0, 40.0], [-30.0, -5.0]]},
    "scale": {"p": 0.6, "range": [[0.8, 1.3]]},
    "translate": {"p": 0.4, "range": [[-4.0, 2.0], [0.0, 6.0], [-3.0, 3.0]]},
    "elastic": {"p": 0.35, "alpha": [20.0, 80.0], "sigma": [3.0, 5.0]},
    "sampling": {"order": 1, "mode": "constant", "cval": 0.0, "label_order": 0},
}


def record_draws(tr):
    """What the transforms of `tr` drew in their last call, by kind, from MONAI's own objects."""
    out = {}
    for t in walk(tr):
        name = type(t).__name__
        if hasattr(t, "rand_affine"):
            # The matrix the transform resampled with (its parameters are drawn again per key
            # after the matrix is built, so they are not what was applied).
            g = t.rand_affine.rand_affine_grid
            a = np.asarray(g.get_transformation_matrix(), np.float64)
            n = a.shape[0] - 1
            m = a[:n, :n]
            if n == 3:
                rot = [math.atan2(-m[1, 2], m[2, 2]), math.asin(max(-1.0, min(1.0, m[0, 2]))),
                       math.atan2(-m[0, 1], m[0, 0])]
            else:
                rot = [math.atan2(m[1, 0], m[0, 0])]
            rec = {"fired": bool(t._do_transform), "rotate": rot,
                   "scale": list(np.diag(m)), "translate": list(a[:n, n])}
            def given(r):
                return any(x is not None for x in r)
            key = ("rotate" if given(g.rotate_range) else "scale" if given(g.scale_range)
                   else "translate")
            out[key] = rec
        elif hasattr(t, "rand_3d_elastic") or hasattr(t, "rand_2d_elastic"):
            e = getattr(t, "rand_3d_elastic", None) or t.rand_2d_elastic
            out["elastic"] = {"fired": bool(t._do_transform),
                              "alpha": float(getattr(e, "magnitude", np.nan)),
                              "sigma": float(getattr(e, "sigma", np.nan))}
        elif name == "RandFlipd":
            out.setdefault("flip", {})[int(t.flipper.spatial_axis if not isinstance(
                t.flipper.spatial_axis, (list, tuple)) else t.flipper.spatial_axis[0])] = \
                bool(t._do_transform)
    return out


def distributions(rep, work, target):
    ndim = 3
    preset = work.preset(f"{target} random", RANDOM)
    tr, _ = snippet_transform(target, preset, ndim)
    monai.utils.set_determinism(seed=1)
    tr.set_random_state(seed=7)
    img = np.zeros((12, 14, 10), np.float32)
    theirs = {k: [] for k in ("flip", "rotate", "scale", "translate", "elastic")}
    for _ in range(DRAWS):
        tr({"image": to_monai(img), "label": to_monai(img)})
        d = record_draws(tr)
        for k in theirs:
            theirs[k].append(d.get(k))
    ours = [json.loads(line) for line in C.run("preset", "sample", "--seed", 0, "--count", DRAWS,
                                                "--ndim", ndim, preset).splitlines() if line]
    assert len(ours) == DRAWS

    def freq(name, a, b):
        # Two binomial samples of DRAWS: within 4 standard errors of the pooled rate.
        pa, pb = np.mean(a), np.mean(b)
        p = (pa + pb) / 2
        se = math.sqrt(max(p * (1 - p), 1e-9) * 2 / DRAWS)
        rep.stat(f"{name} fires", abs(pa - pb) <= 4 * se,
                 f"augscope {pa:.3f}, MONAI {pb:.3f} (4 se = {4 * se:.3f})")

    def ks(name, a, b):
        p = C.ks_2samp(a, b)
        rep.stat(f"{name}", p > 0.01, f"KS p = {p:.3f} (n {len(a)} vs {len(b)})")

    for axis in range(ndim):
        # augscope axis a is MONAI spatial axis ndim-1-a.
        freq(f"flip axis {axis}", [s["drawn"]["flip"]["axes_fired"][axis] for s in ours],
             [d[ndim - 1 - axis] for d in theirs["flip"]])
    rot_o = [s["drawn"]["rotate"] for s in ours]
    rot_t = theirs["rotate"]
    freq("rotate", [r["fired"] for r in rot_o], [r["fired"] for r in rot_t])
    for axis in range(ndim):
        ks(f"rotate angle about axis {axis} (deg)",
           [r["angles_deg"][axis] for r in rot_o if r["fired"]],
           [math.degrees(r["rotate"][ndim - 1 - axis]) for r in rot_t if r["fired"]])
    sc_o = [s["drawn"]["scale"] for s in ours]
    sc_t = theirs["scale"]
    freq("scale", [r["fired"] for r in sc_o], [r["fired"] for r in sc_t])
    ks("scale factor", [r["factors"][0] for r in sc_o if r["fired"]],
       [r["scale"][0] for r in sc_t if r["fired"]])
    iso = all(len(set(np.round(r["scale"], 12))) == 1 for r in sc_t if r["fired"])
    rep.stat("isotropic scale: one factor for every axis", iso,
             "every MONAI draw holds one factor" if iso else "MONAI drew per-axis factors")
    tr_o = [s["drawn"]["translate"] for s in ours]
    tr_t = theirs["translate"]
    freq("translate", [r["fired"] for r in tr_o], [r["fired"] for r in tr_t])
    for axis in range(ndim):
        ks(f"translate axis {axis} (voxels)", [r["voxels"][axis] for r in tr_o if r["fired"]],
           [r["translate"][ndim - 1 - axis] for r in tr_t if r["fired"]])
    el_o = [s["drawn"]["elastic"] for s in ours]
    el_t = theirs["elastic"]
    freq("elastic", [r["fired"] for r in el_o], [r["fired"] for r in el_t])
    ks("elastic alpha", [r["alpha"] for r in el_o if r["fired"]],
       [r["alpha"] for r in el_t if r["fired"]])
    ks("elastic sigma", [r["sigma"] for r in el_o if r["fired"]],
       [r["sigma"] for r in el_t if r["fired"]])
    return el_o, el_t


def elastic_displacement(rep, el_o, el_t):
    """The realised displacement (max and RMS in voxels, docs/design.md §4) of the elastic draws: augscope's
    field (scipy, truncate 4) against MONAI's (its GaussianFilter with truncation 3), each on its
    own draws of alpha and sigma, over the same noise seeds."""
    from monai.networks.layers import GaussianFilter
    shape = (24, 26, 22)
    stats_o, stats_t = [], []
    rng = np.random.default_rng(0)
    pairs_o = [(r["alpha"], r["sigma"]) for r in el_o if r["fired"]][:120]
    pairs_t = [(r["alpha"], r["sigma"]) for r in el_t if r["fired"]][:120]
    for k, ((ao, so), (at, st)) in enumerate(zip(pairs_o, pairs_t)):
        n = C.elastic_noise(int(rng.integers(1 << 30)), shape)
        fo = ao * np.stack([gaussian_filter(c, so, mode="constant", truncate=4.0) for c in n])
        ft = at * GaussianFilter(3, st, 3.0)(torch.from_numpy(n[None].astype(np.float32)))[0].numpy()
        for f, acc in ((fo, stats_o), (ft, stats_t)):
            m = np.sqrt((f ** 2).sum(0))
            acc.append((m.max(), math.sqrt((m ** 2).mean())))
    so, st = np.array(stats_o), np.array(stats_t)
    for i, what in enumerate(("max", "RMS")):
        p = C.ks_2samp(so[:, i], st[:, i])
        rep.stat(f"elastic realised displacement {what} (voxels)", p > 0.01,
                 f"KS p = {p:.3f}; mean augscope {so[:, i].mean():.3f}, MONAI {st[:, i].mean():.3f}")


# --- main ---------------------------------------------------------------------------------------

def load_scans(work):
    vol, lab, aff = C.mni_small(step=4)
    scans = {}
    for ndim in (3, 2):
        v = vol if ndim == 3 else vol[vol.shape[0] // 2 + 3]
        lb = lab if ndim == 3 else lab[lab.shape[0] // 2 + 3]
        ip, lp = work.npy(f"mni{ndim}", v), work.npy(f"mni{ndim}_lab", lb.astype(np.uint8))
        scans[("mni", ndim)] = (v, lb, ip, lp, (1.0,) * ndim)
    av, al, aa = C.anisotropic((3.0, 1.5, 1.5))
    ip, lp = work.file("aniso.nii.gz"), work.file("aniso_lab.nii.gz")
    C.save_nifti(ip, av, aa)
    C.save_nifti(lp, al.astype(np.uint8), aa)
    sp = tuple(float(np.linalg.norm(aa[:3, 2 - a])) for a in range(3))  # [z, y, x] mm
    scans[("aniso", 3)] = (av, al, ip, lp, sp)
    return scans


def main():
    only = [a for a in sys.argv[1:] if a.startswith("--only=")]
    only = only[0][len("--only="):].split(",") if only else None
    rep = C.Report("monai", C.version("monai"))
    work = C.Workdir()
    try:
        scans = load_scans(work)
        targets = [t for t in ("monai", "monai-bundle")
                   if not os.environ.get("AUGSCOPE_MONAI_ONLY") or t == "monai"]
        for target in targets:
            fixed_cases(rep, work, scans, target, only)
            if not only or "intensity" in only:
                intensity_export_case(rep, work, scans, target)
        if not only or "rest" in only:
            orientation_case(rep, work, "monai")
            elastic_field_stats(rep)
            for target in targets:
                el_o, el_t = distributions(rep, work, target)
            elastic_displacement(rep, el_o, el_t)
    finally:
        work.close()
    rep.finish()


if __name__ == "__main__":
    main()
