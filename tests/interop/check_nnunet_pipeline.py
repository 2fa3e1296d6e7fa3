#!/usr/bin/env python3
"""The nnunet-v2 preset against nnU-Net v2's own training pipeline, as distributions.

(a) Drawn parameters. nnU-Net's `nnUNetTrainer.get_training_transforms` (patch (40, 48, 40),
rotation ±30° in radians, no deep supervision, mirror axes (0, 1, 2), no dummy 2D) builds the
pipeline; for each of its seven intensity `RandomTransform`s, its own `get_parameters` and its
transform's `get_parameters` draw, on a two-channel image, once per seed (np.random and torch
seeded per seed): whether it fires, which channels take part and the drawn values. `augscope preset
sample nnunet-v2 --channels 2 --count N` draws the same steps. Per step: the fire rate and each
channel's rate (binomial test against the transform's own probability, and a two-proportion test
against what nnU-Net drew), and the drawn values (two-sample KS test: noise sigma, blur sigmas,
brightness and contrast factors, low-resolution scales, gamma values), with the structure of the
draw (one noise sigma for every channel, one low-resolution scale for every axis of a channel,
blur sigmas per axis, which gammas invert and retain statistics).

(b) Per-sample statistics end to end. On a z-scored 64³ patch of the bundled MNI scan,
`augscope batch --preset nnunet-v2 --as nnunet` (the spatial part as nnU-Net's model, then the
intensity steps) against the whole pipeline of `get_training_transforms` with the patch size of
the input (so both sample the same centred grid; np.random and torch seeded per sample): the
two-sample KS test on each sample's standard deviation, 1st and 99th percentile, mean and mean
gradient magnitude.

Bar: p > 0.01 for every test. One line per test, with the versions.

    VENV/bin/python tests/interop/check_nnunet_pipeline.py [path/to/augscope]

Exit 0 at the bar, 1 below it, 77 when nnunetv2, batchgeneratorsv2, torch or scipy is missing.
"""
import json
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common as C  # noqa: E402

C.require("torch", "torch")
C.require("scipy", "scipy")
C.require("batchgeneratorsv2", "batchgeneratorsv2==0.3.6")
C.require("nnunetv2", "nnunetv2==2.8.1")

import torch  # noqa: E402
from batchgeneratorsv2.transforms.utils.random import RandomTransform  # noqa: E402
from nnunetv2.training.nnUNetTrainer.nnUNetTrainer import nnUNetTrainer  # noqa: E402
from scipy.stats import binomtest  # noqa: E402

PRESET = "nnunet-v2"
ROTATION = (-30.0 / 360 * 2 * math.pi, 30.0 / 360 * 2 * math.pi)
BAR = 0.01
# batchgeneratorsv2's class of each step of augscope's preset, in the pipeline's order.
CLASSES = {"gaussian_noise": "GaussianNoiseTransform", "gaussian_blur": "GaussianBlurTransform",
           "brightness": "MultiplicativeBrightnessTransform", "contrast": "ContrastTransform",
           "low_resolution": "SimulateLowResolutionTransform", "gamma": "GammaTransform"}


def nnunet_transforms(patch):
    return nnUNetTrainer.get_training_transforms(
        list(patch), ROTATION, None, (0, 1, 2), False, use_mask_for_norm=None,
        is_cascaded=False, foreground_labels=[1], regions=None, ignore_label=None)


def two_proportions(k1, k2, n1, n2):
    """Two-sided p of a two-proportion z test (k1 of n1 against k2 of n2)."""
    from scipy.stats import norm
    p = (k1 + k2) / (n1 + n2)
    if p in (0.0, 1.0):
        return 1.0 if k1 / n1 == k2 / n2 else 0.0
    z = (k1 / n1 - k2 / n2) / math.sqrt(p * (1 - p) * (1 / n1 + 1 / n2))
    return float(2 * norm.sf(abs(z)))


# --- (a) drawn parameters ----------------------------------------------------------------------

def library_draws(steps, channels, patch, n, seed0):
    """For each intensity RandomTransform of nnU-Net's pipeline, n draws of its own
    get_parameters and its transform's: fired, per-channel mask, values (a list per applied
    channel), and the gamma flags."""
    img = torch.zeros((channels, *patch))
    out = [{"fired": [], "mask": [], "values": [], "sync": [], "flags": []} for _ in steps]
    for i in range(n):
        np.random.seed(seed0 + i)
        torch.manual_seed(seed0 + i)
        for rt, rec in zip(steps, out):
            rec["fired"].append(bool(rt.get_parameters(image=img)["apply_transform"]))
            t = rt.transform
            p = t.get_parameters(image=img)
            name = type(t).__name__
            mask = np.zeros(channels, bool)
            if name == "GaussianNoiseTransform":
                mask[:] = p["apply_mask"].numpy()
                if p["sigmas"] is not None:
                    s = p["sigmas"]
                    vals = [s] if not isinstance(s, list) else s
                    rec["values"] += [float(v) for v in vals]
                    rec["sync"].append(not isinstance(s, list))
            elif name == "GaussianBlurTransform":
                mask[:] = np.asarray(p["apply_to_channel"])
                for sig in p["sigmas"]:
                    rec["values"] += [float(v) for v in sig]
                    rec["sync"].append(len(set(sig)) == 1)
            elif name == "SimulateLowResolutionTransform":
                mask[np.asarray(p["apply_to_channel"], int)] = True
                for sc in p["scales"].tolist():
                    rec["values"].append(float(sc[0]))
                    rec["sync"].append(len(set(sc)) == 1)
            elif name == "MultiplicativeBrightnessTransform":
                mask[np.asarray(p["apply_to_channel"], int)] = True
                rec["values"] += [float(v) for v in p["multipliers"].tolist()]
            elif name == "ContrastTransform":
                mask[p["apply_to_channel"].numpy()] = True
                if p["multipliers"] is not None:
                    rec["values"] += [float(v) for v in p["multipliers"].tolist()]
            elif name == "GammaTransform":
                mask[p["apply_to_channel"].numpy()] = True
                if p["gamma"] is not None:
                    rec["values"] += [float(v) for v in p["gamma"].tolist()]
                    rec["flags"] += list(zip(p["invert_image"].tolist(),
                                             p["retain_stats"].tolist()))
            else:
                raise AssertionError(f"no reader for {name}")
            rec["mask"].append(mask)
    return out


def augscope_draws(steps, channels, n, seed0):
    """The same records from `augscope preset sample`: fired and the channels from `drawn`
    (every sample), the values from the plan's step where it fired."""
    lines = C.run("preset", "sample", PRESET, "--seed", seed0, "--count", n, "--channels",
                  channels).splitlines()
    samples = [json.loads(ln) for ln in lines if ln.strip()]
    assert len(samples) == n, f"{len(samples)} samples for --count {n}"
    out = [{"fired": [], "mask": [], "values": [], "sync": [], "flags": []} for _ in steps]
    names = None
    for s in samples:
        drawn = s["drawn"]["intensity"]
        names = [d["step"] for d in drawn]
        plan = iter(s["plan"].get("intensity", []))
        for d, rec in zip(drawn, out):
            rec["fired"].append(bool(d["fired"]))
            rec["mask"].append(np.array(d["channels"], bool))
            if not (d["fired"] and any(d["channels"])):
                continue
            (key, v), = next(plan).items()
            assert key == d["step"], (key, d["step"])
            if key == "gaussian_noise":
                stds = [x for x in v["std"] if x is not None]
                rec["values"].append(stds[0])
                rec["sync"].append(len(set(stds)) == 1)
            elif key == "gaussian_blur":
                for sig in filter(None, v["sigmas"]):
                    rec["values"] += sig
                    rec["sync"].append(len(set(sig)) == 1)
            elif key == "low_resolution":
                for sc in filter(None, v["scales"]):
                    rec["values"].append(sc[0])
                    rec["sync"].append(len(set(sc)) == 1)
            elif key == "brightness":
                rec["values"] += [x for x in v["multipliers"] if x is not None]
            elif key == "contrast":
                rec["values"] += [x for x in v["factors"] if x is not None]
            elif key == "gamma":
                for g in filter(None, v["channels"]):
                    rec["values"].append(g["gamma"])
                    rec["flags"].append((g["invert"], g["retain_stats"]))
        assert next(plan, None) is None, "plan steps that no drawn step accounts for"
    return names, out


def drawn_parameters(report, _work, n=4000, channels=2, patch=(40, 48, 40)):
    compose = nnunet_transforms(patch)
    steps = [t for t in compose.transforms if isinstance(t, RandomTransform)
             and type(t.transform).__name__ in CLASSES.values()]
    lib = library_draws(steps, channels, patch, n, seed0=10_000)
    names, ours = augscope_draws(steps, channels, n, seed0=0)
    classes = [type(t.transform).__name__ for t in steps]
    same = [CLASSES.get(nm) for nm in names] == classes
    report.stat("pipeline: intensity steps and their order", same,
                f"augscope {names}; nnU-Net {classes}")
    if not same:
        return
    for k, (rt, nm, lr, orr) in enumerate(zip(steps, names, lib, ours)):
        t = rt.transform
        tag = f"{k} {nm}" + (" (inverted)" if nm == "gamma" and t.p_invert_image == 1 else "")
        # fire rate
        kl, ko = sum(lr["fired"]), sum(orr["fired"])
        p_nom = binomtest(ko, n, rt.apply_probability).pvalue
        p_lib = two_proportions(ko, kl, n, n)
        report.stat(f"{tag}: fire rate", p_nom > BAR and p_lib > BAR,
                    f"augscope {ko / n:.3f}, nnU-Net {kl / n:.3f}, p {rt.apply_probability:g} "
                    f"(binomial p {p_nom:.2f}, two-proportion p {p_lib:.2f}, n {n})")
        # each channel's rate
        ml, mo = np.array(lr["mask"]), np.array(orr["mask"])
        for c in range(channels):
            kl, ko = int(ml[:, c].sum()), int(mo[:, c].sum())
            p_nom = binomtest(ko, n, t.p_per_channel).pvalue
            p_lib = two_proportions(ko, kl, n, n)
            report.stat(f"{tag}: channel {c} rate", p_nom > BAR and p_lib > BAR,
                        f"augscope {ko / n:.3f}, nnU-Net {kl / n:.3f}, p_per_channel "
                        f"{t.p_per_channel:g} (binomial p {p_nom:.2f}, two-proportion p "
                        f"{p_lib:.2f})")
        # values and their structure
        p_ks = C.ks_2samp(orr["values"], lr["values"])
        ok = p_ks > BAR
        extra = ""
        if nm in ("gaussian_noise", "gaussian_blur", "low_resolution"):
            so, sl = np.mean(orr["sync"]), np.mean(lr["sync"])
            what = {"gaussian_noise": "one sigma for every channel",
                    "gaussian_blur": "one sigma for every axis",
                    "low_resolution": "one scale for every axis"}[nm]
            ok = ok and so == sl
            extra = f"; {what}: augscope {so:.2f}, nnU-Net {sl:.2f} of draws"
        if nm == "gamma":
            fo = sorted(set(orr["flags"]))
            fl = sorted(set(map(tuple, lr["flags"])))
            ok = ok and fo == fl
            extra = f"; (invert, retain_stats): augscope {fo}, nnU-Net {fl}"
        report.stat(f"{tag}: values", ok,
                    f"KS p {p_ks:.2f} (n {len(orr['values'])} vs {len(lr['values'])}; means "
                    f"{np.mean(orr['values']):.4f} vs {np.mean(lr['values']):.4f}){extra}")


# --- (b) per-sample statistics end to end ------------------------------------------------------

def mni_patch(size=64):
    """The bundled MNI T1 (array [z, y, x]), a cube of `size` around its centre, z-scored."""
    import nibabel as nib
    vol = np.asarray(nib.load(C.MNI).dataobj, dtype=np.float32).T
    c = [n // 2 for n in vol.shape]
    h = size // 2
    p = vol[c[0] - h:c[0] + h, c[1] - h:c[1] + h, c[2] - h:c[2] + h].astype(np.float64)
    return ((p - p.mean()) / p.std()).astype(np.float32)


STATS = {
    "std": lambda v: v.std(),
    "1st percentile": lambda v: np.percentile(v, 1),
    "99th percentile": lambda v: np.percentile(v, 99),
    "mean": lambda v: v.mean(),
    "mean gradient magnitude": lambda v: np.sqrt(sum(g ** 2 for g in np.gradient(v))).mean(),
}


def statistics(v):
    """The statistics of one sample, in f64, rounded to 1e-6: a step that keeps a statistic
    (gamma retains the mean and the standard deviation, a mirror keeps every one) keeps it only
    to the rounding of f32 sums, which differ between torch's f32 reductions and augscope's f64
    ones; unrounded, the KS test would compare those rounding errors of the many samples that
    sit at the input's values."""
    v = np.asarray(v, np.float64)
    return {k: round(float(f(v)), 6) for k, f in STATS.items()}


def quartiles(x):
    return "/".join(f"{q:.4f}" for q in np.quantile(x, [0.25, 0.5, 0.75]))


def end_to_end(report, work, n=1000):
    patch = mni_patch()
    src = work.npy("mni_patch", patch)
    out = work.file("batch")
    C.run("batch", "--preset", PRESET, "--as", "nnunet", "--count", n, "--seed", 0, "--out",
          out, "--ext", "npy", "--quiet", src)
    ours = [statistics(np.load(os.path.join(out, f"mni_patch_s{s}.npy"))) for s in range(n)]

    compose = nnunet_transforms(patch.shape)
    theirs = []
    for i in range(n):
        np.random.seed(50_000 + i)
        torch.manual_seed(50_000 + i)
        data = {"image": torch.from_numpy(patch[None].copy()),
                "segmentation": torch.zeros((1, *patch.shape), dtype=torch.int16)}
        data = compose(**data)
        theirs.append(statistics(data["image"][0].numpy()))
    for k in STATS:
        a = [s[k] for s in ours]
        b = [s[k] for s in theirs]
        p = C.ks_2samp(a, b)
        report.stat(f"64³ MNI patch, {n} samples each: {k}", p > BAR,
                    f"KS p {p:.2f} (quartiles: augscope --as nnunet {quartiles(a)}, nnU-Net "
                    f"{quartiles(b)})")


def main():
    torch.set_num_threads(2)
    report = C.Report("nnunet pipeline", f"nnunetv2 {C.version('nnunetv2')}, batchgeneratorsv2 "
                      f"{C.version('batchgeneratorsv2')}, torch {C.version('torch')}")
    work = C.Workdir()
    try:
        for part in (drawn_parameters, end_to_end):
            try:
                part(report, work)
            except Exception as e:  # a part that cannot run is a failure of that part
                report.stat(part.__name__, False, f"{type(e).__name__}: {e}")
    finally:
        work.close()
    report.finish()


if __name__ == "__main__":
    main()
