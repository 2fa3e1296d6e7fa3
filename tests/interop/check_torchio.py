#!/usr/bin/env python3
"""Runs what `augscope preset export --to torchio` writes under the real TorchIO and compares it
with `augscope apply` of the same plan.

- Fixed-value presets (every probability 1, ranges of one value): rotation about each axis alone,
  isotropic and per-axis scale, flips, translations in voxels and mm, all combined; on the MNI
  sample stored as RAS, LAS and LPS and under an oblique affine, each loaded as TorchIO loads a
  file (tio.ScalarImage / tio.LabelMap of a NIfTI with its real affine); the anisotropic scan
  with `space = "mm"`; a 2D slice (TorchIO's one-slice volume). Images order 1 (and one order 3
  case) against augscope's `constant` mode with cval 0, labels through the snippet too
  (TorchIO's nearest against augscope's order 0). Bar: >= 99 % of voxels within 1e-2, labels
  >= 99.5 % equal.
- Border: on a volume whose border is not background, the only voxels where TorchIO and
  augscope's constant mode differ are those whose sampling coordinate lies in the half-voxel
  shell outside the edge voxel centres (what the snippet's NOTE says).
- Elastic: the realised displacement (RMS and max of the per-voxel norm, voxels and mm) of the
  snippet's B-spline deformation over many draws against augscope's `apply --report`.
- Distributions: >= 500 draws of a random preset through the snippet, read back from TorchIO's
  own transform history, against `augscope preset sample` (KS p > 0.01; firing rates by a
  two-proportion z-test, p > 0.01); the history rebuilds the draw exactly.
- The bundled presets' snippets run (2D and 3D).

Exit 0 at the bar, 1 below it, 77 when TorchIO is missing.

    python tests/interop/check_torchio.py [path/to/augscope]
"""
import json
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

tio = common.require("torchio", "torchio==1.2.1")
torch = common.require("torch", "torch")
sitk = common.require("SimpleITK", "SimpleITK")

DISTS = ("torchio", "torch", "SimpleITK")


def rad_list(deg):
    return ",".join(repr(math.radians(d)) for d in deg)


class Case:
    """One fixed plan: the preset that says it and the `augscope apply` arguments that do it."""

    def __init__(self, name, rotate=None, scale=None, translate=None, unit="voxel", flip=(),
                 order=1, space=None, mode="constant"):
        self.name, self.rotate, self.scale, self.translate = name, rotate, scale, translate
        self.unit, self.flip, self.order, self.space = unit, flip, order, space
        self.mode = mode

    def sections(self, ndim):
        s = {}
        if self.flip:
            s["flip"] = {"p": [1.0 if a in self.flip else 0.0 for a in range(ndim)]}
        if self.rotate is not None:
            if ndim == 2:
                s["rotate"] = {"p": 1.0, "range_deg": [[self.rotate[0]] * 2],
                               "range_deg_2d": [self.rotate[0]] * 2}
            else:
                s["rotate"] = {"p": 1.0, "range_deg": [[a, a] for a in self.rotate]}
        if self.scale is not None:
            per_axis = len(self.scale) > 1
            s["scale"] = {"p": 1.0, "range": [[v, v] for v in self.scale], "per_axis": per_axis}
        if self.translate is not None:
            s["translate"] = {"p": 1.0, "range": [[v, v] for v in self.translate],
                              "unit": self.unit}
        s["sampling"] = {"order": self.order, "mode": self.mode, "cval": 0.0, "label_order": 0}
        return s

    def apply_args(self, spacing):
        """`spacing`: [z, y, x] mm of the input (for translations in mm)."""
        args = ["--order", str(self.order), "--mode", self.mode, "--cval=0"]
        if self.space == "mm":
            args += ["--space", "mm"]
        if self.rotate is not None:
            args.append("--rotate=" + rad_list(self.rotate))
        if self.scale is not None:
            args.append("--scale=" + ",".join(repr(float(v)) for v in self.scale))
        if self.translate is not None:
            t = list(self.translate)
            if self.unit == "mm" and self.space != "mm":
                t = [v / s for v, s in zip(t, spacing)]
            elif self.unit == "voxel" and self.space == "mm":
                t = [v * s for v, s in zip(t, spacing)]
            args.append("--translate=" + ",".join(repr(float(v)) for v in t))
        if self.flip:
            args.append("--flip=" + ",".join(map(str, self.flip)))
        return args


CASES_3D = [
    Case("rotate axis 0 by 20 deg", rotate=(20.0, 0.0, 0.0)),
    Case("rotate axis 1 by -15 deg", rotate=(0.0, -15.0, 0.0)),
    Case("rotate axis 2 by 25 deg", rotate=(0.0, 0.0, 25.0)),
    Case("scale 1.25", scale=(1.25,)),
    Case("scale 0.8", scale=(0.8,)),
    Case("scale per axis (1.2, 0.9, 1.1)", scale=(1.2, 0.9, 1.1)),
    Case("flip axis 0", flip=(0,)),
    Case("flip axis 1", flip=(1,)),
    Case("flip axis 2", flip=(2,)),
    Case("translate (3, -2, 4) voxels", translate=(3.0, -2.0, 4.0)),
    Case("combined: rotate (15, -10, 25), scale 0.9, translate, flip 0",
         rotate=(15.0, -10.0, 25.0), scale=(0.9,), translate=(2.0, -3.0, 1.5), flip=(0,)),
]
CASE_ORDER3 = Case("order 3: rotate (15, -10, 25), scale per axis (1.1, 0.95, 1.05)",
                   rotate=(15.0, -10.0, 25.0), scale=(1.1, 0.95, 1.05), order=3)
CASES_MM = [
    Case("mm: rotate (15, -10, 25)", rotate=(15.0, -10.0, 25.0), space="mm"),
    Case("mm: rotate (0, 0, 30), scale per axis (1.1, 0.9, 1.0), translate (6, -4, 5.6) mm, flip 1",
         rotate=(0.0, 0.0, 30.0), scale=(1.1, 0.9, 1.0), translate=(6.0, -4.0, 5.6), unit="mm",
         flip=(1,), space="mm"),
    Case("mm: translate (2, -1, 3) voxels", translate=(2.0, -1.0, 3.0), space="mm"),
    Case("voxel: translate (12, -4, 6) mm", translate=(12.0, -4.0, 6.0), unit="mm"),
    Case("voxel: rotate (10, 0, -20), scale 1.1", rotate=(10.0, 0.0, -20.0), scale=(1.1,)),
]
CASES_2D = [
    Case("2D: rotate 20 deg", rotate=(20.0,)),
    Case("2D: scale per axis (1.2, 0.9)", scale=(1.2, 0.9)),
    Case("2D: scale 0.8", scale=(0.8,)),
    Case("2D: translate (3, -2) voxels", translate=(3.0, -2.0)),
    Case("2D: flip axis 0", flip=(0,)),
    Case("2D: flip axis 1", flip=(1,)),
    Case("2D: combined: rotate -25, scale 1.1, translate, flip 1",
         rotate=(-25.0,), scale=(1.1,), translate=(-2.0, 3.5), flip=(1,)),
]


def snippet_for(work, case, ndim, tag):
    space = "mm" if case.space == "mm" else None
    preset = work.preset(f"{tag} {case.name}"[:60].replace("/", "_").replace(",", "")
                         .replace("(", "").replace(")", ""), case.sections(ndim), space)
    return common.export_snippet("torchio", preset, ndim)


def run_snippet(text, subject, name="snippet"):
    ns = common.exec_snippet(text, name)
    return ns, ns["get_transforms"]()(subject)


def to_zyx(image):
    """A TorchIO image (1, W, H, D) as augscope's [z, y, x] array (2D: [y, x])."""
    arr = image.data[0].numpy()
    if arr.shape[-1] == 1 and arr.ndim == 3:
        arr = arr[..., 0]
    return arr.T


class Scan:
    def __init__(self, work, tag, vol, lab, aff):
        self.tag, self.vol, self.lab, self.aff = tag, vol, lab, aff
        self.img_path = work.file(f"{tag}.nii.gz")
        self.lab_path = work.file(f"{tag}_labels.nii.gz")
        common.save_nifti(self.img_path, vol, aff)
        common.save_nifti(self.lab_path, lab, aff)
        self.spacing = np.sqrt((aff[:3, :3] ** 2).sum(0))[::-1]  # [z, y, x]

    def subject(self):
        return tio.Subject(image=tio.ScalarImage(self.img_path),
                           label=tio.LabelMap(self.lab_path))


def label_agreement(coords, labels, ours, theirs):
    """Labels equal, where a nearest-neighbour tie is allowed either way: where a sampling
    coordinate lies at k + 0.5 (within float32 precision) the rounding is decided by the last
    bit of each library's arithmetic (docs/design.md §3 excepts such ties), so there TorchIO's label
    must be the input's label at one of the tied neighbours. Returns (fraction, ties)."""
    x = np.load(coords).astype(np.float64)
    theirs = np.rint(np.asarray(theirs)).astype(np.int64)
    tie = np.abs(x - np.floor(x) - 0.5) < 1e-4 * np.maximum(1.0, np.abs(x))
    ok = ours.astype(np.int64) == theirs
    any_tie = tie.any(0)
    xt, tt, th = x[:, any_tie], tie[:, any_tie], theirs[any_tie]
    shape = np.array(labels.shape).reshape(-1, 1)
    hit = np.zeros(th.shape, bool)
    for corner in np.ndindex(*(2,) * x.shape[0]):
        c = np.array(corner).reshape(-1, 1)
        idx = np.where(tt, np.floor(xt) + c, np.floor(xt + 0.5)).astype(np.int64)
        inside = ((idx >= 0) & (idx < shape)).all(0)
        value = np.zeros(th.shape, np.int64)  # default_pad_label
        value[inside] = labels[tuple(idx[:, inside])]
        hit |= value == th
    ok[any_tie] = hit
    return float(ok.mean()), float(any_tie.mean())


def compare(report, work, scan, case, ndim=3):
    text = snippet_for(work, case, ndim, scan.tag)
    _, out = run_snippet(text, scan.subject())
    coords = work.file("coords.npy")
    ours, ours_lab = common.apply(work, scan.img_path,
                                  case.apply_args(scan.spacing) + ["--save-coords", coords],
                                  scan.lab_path, tag="ours")
    frac, worst = common.agreement(ours, to_zyx(out.image))
    lab, ties = label_agreement(coords, scan.lab, ours_lab, to_zyx(out.label))
    report.case(f"{scan.tag}: {case.name}", frac, lab,
                f"max |diff| {worst:.3f}; {100 * ties:.2f} % label ties, either side")
    return text


def compare_2d(report, work, sl, lab, spacing, case):
    """A 2D slice: augscope reads the [y, x] array, TorchIO its (1, W, H, 1) image."""
    text = snippet_for(work, case, 2, "2D")
    aff = np.diag([spacing[1], spacing[0], 1.0, 1.0])
    subject = tio.Subject(
        image=tio.ScalarImage(tensor=torch.from_numpy(sl.T[None, ..., None].copy()), affine=aff),
        label=tio.LabelMap(tensor=torch.from_numpy(lab.T[None, ..., None].astype(np.int64)),
                           affine=aff))
    _, out = run_snippet(text, subject, "snippet2d")
    img_path = work.npy("slice", sl)
    lab_path = work.npy("slice_labels", lab)
    coords = work.file("coords2d.npy")
    ours, ours_lab = common.apply(work, img_path,
                                  case.apply_args(spacing) + ["--save-coords", coords],
                                  lab_path, tag="ours2d")
    frac, worst = common.agreement(ours, to_zyx(out.image))
    labf, ties = label_agreement(coords, lab, ours_lab, to_zyx(out.label))
    report.case(case.name, frac, labf,
                f"max |diff| {worst:.3f}; {100 * ties:.2f} % label ties, either side")


def border_shell(report, work, scan):
    """On a volume whose border is bright, TorchIO and augscope's constant mode may differ only
    where augscope's sampling coordinate lies within half a voxel outside the grid."""
    vol = (0.5 + 0.5 * scan.vol).astype(np.float32)
    bright = Scan(work, "bright_border", vol, scan.lab, scan.aff)
    case = Case("border", rotate=(15.0, -10.0, 25.0), scale=(0.9,))
    text = snippet_for(work, case, 3, "border")
    _, out = run_snippet(text, bright.subject())
    coords = work.file("coords.npy")
    ours, _ = common.apply(work, bright.img_path,
                           case.apply_args(bright.spacing) + ["--save-coords", coords],
                           tag="border")
    theirs = to_zyx(out.image)
    x = np.load(coords)
    shape = np.array(vol.shape).reshape(3, 1, 1, 1)
    shell = (((x < 0) & (x >= -0.5)) | ((x > shape - 1) & (x <= shape - 0.5))).any(0)
    differ = np.abs(ours - theirs) > common.TOLERANCE
    outside_shell = int((differ & ~shell).sum())
    frac, _ = common.agreement(ours, theirs)
    report.stat("border: differences only in the half-voxel shell", outside_shell == 0,
                f"{100 * (1 - frac):.2f} % of voxels differ (shell {100 * shell.mean():.2f} % "
                f"of the grid), {outside_shell} outside the shell")
    # Order 0 (TorchIO's nearest) is augscope's grid-constant exactly.
    case0 = Case("border order 0", rotate=(15.0, -10.0, 25.0), scale=(0.9,), order=0)
    _, out0 = run_snippet(snippet_for(work, case0, 3, "border0"), bright.subject())
    case0.mode = "grid-constant"
    ours0, _ = common.apply(work, bright.img_path, case0.apply_args(bright.spacing),
                            tag="border0")
    frac0, worst0 = common.agreement(ours0, to_zyx(out0.image), tol=1e-6)
    report.stat("border: nearest = augscope grid-constant order 0", frac0 == 1.0,
                f"{100 * frac0:.3f} % equal, max |diff| {worst0:.2g}")
    # mode nearest: SimpleITK's nearest-neighbour extrapolator.
    for order in (1, 3):
        case_n = Case(f"border: mode nearest, order {order}", rotate=(15.0, -10.0, 25.0),
                      scale=(0.9,), translate=(3.0, -2.0, 4.0), order=order, mode="nearest")
        compare(report, work, bright, case_n)


# --- elastic ------------------------------------------------------------------------------------

def tio_displacement(ns, scan_image, alpha, sigma, space, draws, seed=0):
    """Realised displacement of the snippet's RandomAlphaSigmaElastic for one alpha, sigma:
    (rms_vox, max_vox, rms_mm, max_mm), each averaged over `draws` draws."""
    from torchio.data.io import nib_to_sitk
    el = ns["RandomAlphaSigmaElastic"](alpha=(alpha, alpha), sigma=(sigma, sigma), space=space)
    ncp, dmax = el.grid(scan_image, alpha, sigma)
    ref = nib_to_sitk(scan_image.data[:1], scan_image.affine, force_3d=True)
    direction = np.array(ref.GetDirection()).reshape(3, 3)
    spacing = np.array(ref.GetSpacing())
    torch.manual_seed(seed)
    stats = []
    for _ in range(draws):
        cp = el.get_params(ncp, dmax, 2)
        bspline = tio.ElasticDeformation(control_points=cp, max_displacement=dmax) \
            .get_bspline_transform(ref)
        field = sitk.TransformToDisplacementField(bspline, sitk.sitkVectorFloat64,
                                                  ref.GetSize(), ref.GetOrigin(),
                                                  ref.GetSpacing(), ref.GetDirection())
        mm = sitk.GetArrayFromImage(field)  # [z, y, x, 3] physical (LPS) mm
        vox = (mm @ direction) / spacing  # per index axis, voxels
        n_mm = np.sqrt((mm ** 2).sum(-1))
        n_vox = np.sqrt((vox ** 2).sum(-1))
        stats.append((np.sqrt((n_vox ** 2).mean()), n_vox.max(),
                      np.sqrt((n_mm ** 2).mean()), n_mm.max()))
    return np.mean(stats, axis=0), ncp, dmax


def aug_displacement(work, img_path, alpha, sigma, space, seeds):
    """augscope's report for each seed: (rms, max) in the preset's unit (voxels, or mm in mm
    space), averaged; the other unit is a range in the report for anisotropic voxels."""
    stats = []
    unit = "mm" if space == "mm" else "vox"
    for s in seeds:
        rep = work.file("report.json")
        args = ["apply", img_path, work.file("el.npy"), "--elastic", f"{alpha},{sigma}",
                "--seed", s, "--report", rep, "--backend", "cpu"]
        if space == "mm":
            args += ["--space", "mm"]
        common.run(*args)
        d = json.load(open(rep))["displacement"]
        stats.append((d[f"rms_{unit}"], d[f"max_{unit}"]))
    return np.mean(stats, axis=0)


class Slice2D:
    """A 2D slice as both tools read it: a [y, x] .npy for augscope, TorchIO's (1, W, H, 1)."""

    def __init__(self, work, sl, lab, spacing):
        self.tag, self.sl, self.lab = "2D", sl, lab
        self.img_path = work.npy("slice_el", sl)
        self.aff = np.diag([spacing[1], spacing[0], 1.0, 1.0])

    def image(self):
        return tio.ScalarImage(tensor=torch.from_numpy(self.sl.T[None, ..., None].copy()),
                               affine=self.aff)

    def subject(self):
        lab = torch.from_numpy(self.lab.T[None, ..., None].astype(np.int64))
        return tio.Subject(image=self.image(), label=tio.LabelMap(tensor=lab, affine=self.aff))


def elastic_checks(report, work, scans):
    for scan, ndim, space, alpha, sigma, tio_draws, aug_seeds in scans:
        preset = work.preset(f"elastic {scan.tag} {space} {alpha} {sigma}",
                             {"elastic": {"p": 1.0, "alpha": [alpha, alpha],
                                          "sigma": [sigma, sigma]}},
                             "mm" if space == "mm" else None)
        text = common.export_snippet("torchio", preset, ndim)
        ns, out = run_snippet(text, scan.subject(), "elastic")
        ok_run = bool(torch.isfinite(out.image.data).all()) and set(
            np.unique(out.label.data.numpy())) <= set(np.unique(scan.lab))
        image = scan.image() if ndim == 2 else tio.ScalarImage(scan.img_path)
        t, ncp, dmax = tio_displacement(ns, image, alpha, sigma, space, tio_draws)
        a = aug_displacement(work, scan.img_path, alpha, sigma, space, aug_seeds)
        unit = "mm" if space == "mm" else "vox"
        mine = (t[2], t[3]) if space == "mm" else (t[0], t[1])
        ratio = mine[0] / a[0]
        report.stat(
            f"elastic {scan.tag} {space} alpha {alpha:g} sigma {sigma:g}",
            ok_run and abs(ratio - 1) < 0.05,
            f"RMS TorchIO {mine[0]:.3f} {unit} vs augscope {a[0]:.3f} {unit} (x{ratio:.3f}); "
            f"max {mine[1]:.2f} vs {a[1]:.2f} {unit} (x{mine[1] / a[1]:.3f}); TorchIO also "
            f"{t[0]:.3f} vox / {t[2]:.3f} mm RMS; num_control_points {ncp}, max_displacement "
            f"({', '.join(f'{d:.2f}' for d in dmax)}) mm; means of {tio_draws} and "
            f"{len(aug_seeds)} draws")


# --- distributions ------------------------------------------------------------------------------

RANDOM = {
    "flip": {"p": [0.3, 0.5, 0.7]},
    "rotate": {"p": 0.7, "p_axis": [0.8, 0.6, 0.9],
               "range_deg": [[-10.0, 25.0], [5.0, 15.0], [-30.0, -5.0]]},
    "scale": {"p": 0.6, "range": [[0.8, 1.3]]},
    "translate": {"p": 0.5, "range": [[-3.0, 2.0], [0.0, 4.0], [-5.0, -1.0]]},
    "elastic": {"p": 0.4, "alpha": [50.0, 150.0], "sigma": [4.0, 7.0]},
    "sampling": {"order": 1, "mode": "constant", "cval": 0.0, "label_order": 0},
}


def distributions(report, work, count=500):
    preset = work.preset("random", RANDOM)
    text = common.export_snippet("torchio", preset, 3)
    common.check_verified_line(text, DISTS)
    ns = common.exec_snippet(text, "random")
    transforms = ns["get_transforms"]()
    small = tio.ScalarImage(tensor=torch.rand(1, 12, 10, 8), affine=np.diag([2.0, 2.0, 2.0, 1.0]))
    torch.manual_seed(1234)
    got = {k: [] for k in ("rot_fired", "scale_fired", "trans_fired", "elastic_fired")}
    angles = [[] for _ in range(3)]
    scales, trans = [], [[] for _ in range(3)]
    flips = [[] for _ in range(3)]
    elastic_d = []
    first = None
    for _ in range(count):
        out = transforms(tio.Subject(image=small))
        first = first or out
        applied = out.applied_transforms
        aff = [args for name, args in applied if name == "ArrayAxisAffine"]
        deg, sc, tr = ((0.0,) * 3, (1.0,) * 3, (0.0,) * 3)
        if aff:
            deg, sc, tr = aff[0]["degrees"], aff[0]["scales"], aff[0]["translation"]
        got["rot_fired"].append(any(d != 0 for d in deg))
        for a in range(3):
            if deg[a] != 0:
                angles[a].append(deg[a])
            if tr != (0.0,) * 3:
                trans[a].append(tr[a])
        got["scale_fired"].append(sc != (1.0,) * 3)
        if sc != (1.0,) * 3:
            scales.append(sc[0])
        got["trans_fired"].append(tr != (0.0,) * 3)
        el = [args for name, args in applied if name == "ElasticDeformation"]
        got["elastic_fired"].append(bool(el))
        if el:
            elastic_d.append(max(el[0]["max_displacement"]))
        flipped = set()
        for name, args in applied:
            if name == "Flip":
                flipped.update(args["axes"])
        for a in range(3):
            flips[a].append((2 - a) in flipped)
    # The history reproduces the output (TorchIO rebuilds ArrayAxisAffine from it).
    again = tio.Compose(first.get_applied_transforms())(tio.Subject(image=small))
    same = float(torch.abs(again.image.data - first.image.data).max())
    report.stat("history reproduces the draw", same < 1e-5, f"max |diff| {same:.2g}")

    want = common.run("preset", "sample", "--seed", 0, "--count", count, "--ndim", 3, preset)
    samples = [json.loads(line) for line in want.splitlines() if line.strip()]
    if len(samples) != count:
        raise AssertionError(f"preset sample gave {len(samples)} lines, not {count}")
    w_angles = [[] for _ in range(3)]
    w_trans = [[] for _ in range(3)]
    w_scales, w_elastic = [], []
    w = {k: [] for k in got}
    w_flips = [[] for _ in range(3)]
    el_probe = ns["RandomAlphaSigmaElastic"](alpha=(1, 1), sigma=(1, 1))
    for s in samples:
        d = s["drawn"]
        r = d["rotate"]
        w["rot_fired"].append(r["fired"] and any(a != 0 for a in r["angles_deg"]))
        for a in range(3):
            if r["fired"] and r["axes_fired"][a]:
                w_angles[a].append(r["angles_deg"][a])
        w["scale_fired"].append(d["scale"]["fired"])
        if d["scale"]["fired"]:
            w_scales.append(d["scale"]["factors"][0])
        w["trans_fired"].append(d["translate"]["fired"])
        if d["translate"]["fired"]:
            for a in range(3):
                w_trans[a].append(d["translate"]["voxels"][a])
        w["elastic_fired"].append(d["elastic"]["fired"])
        if d["elastic"]["fired"]:
            _, dm = el_probe.grid(small, d["elastic"]["alpha"], d["elastic"]["sigma"])
            w_elastic.append(max(dm))
        for a in range(3):
            w_flips[a].append(d["flip"]["axes_fired"][a])

    def rate_line(name, a, b):
        """Two-proportion z-test (pooled): the same firing rate unless p <= 0.01."""
        pa, pb = float(np.mean(a)), float(np.mean(b))
        pooled = (pa * len(a) + pb * len(b)) / (len(a) + len(b))
        se = math.sqrt(max(pooled * (1 - pooled), 1e-12) * (1 / len(a) + 1 / len(b)))
        p = math.erfc(abs(pa - pb) / se / math.sqrt(2))
        report.stat(name, p > 0.01,
                    f"TorchIO {100 * pa:.1f} %, augscope {100 * pb:.1f} % (z-test p {p:.3f})")

    def ks_line(name, a, b):
        p = common.ks_2samp(a, b)
        report.stat(name, p > 0.01, f"KS p {p:.3f}; n {len(a)} / {len(b)}; mean "
                    f"{np.mean(a):.3f} / {np.mean(b):.3f}")

    for k, label in (("rot_fired", "rotation fires"), ("scale_fired", "scale fires"),
                     ("trans_fired", "translation fires"), ("elastic_fired", "elastic fires")):
        rate_line(f"random: {label}", got[k], w[k])
    for a in range(3):
        rate_line(f"random: axis {a} rotates", _fired_flags(angles[a], count),
                  _fired_flags(w_angles[a], count))
        ks_line(f"random: angle about axis {a} (deg)", angles[a], w_angles[a])
    ks_line("random: scale factor", scales, w_scales)
    for a in range(3):
        ks_line(f"random: translation axis {a} (voxels)", trans[a], w_trans[a])
        rate_line(f"random: flip axis {a}", flips[a], w_flips[a])
    ks_line("random: elastic max_displacement (mm)", elastic_d, w_elastic)

    # batchgenerators' split scale distribution, one factor per axis.
    split = work.preset("split", {"scale": {"p": 0.8, "range": [[0.7, 1.4]], "per_axis": True,
                                            "distribution": "split"}})
    transforms = common.exec_snippet(common.export_snippet("torchio", split, 3),
                                     "split")["get_transforms"]()
    mine = [[] for _ in range(3)]
    for _ in range(count):
        applied = transforms(tio.Subject(image=small)).applied_transforms
        for name, args in applied:
            if name == "ArrayAxisAffine" and tuple(args["scales"]) != (1.0, 1.0, 1.0):
                for a in range(3):
                    mine[a].append(args["scales"][a])
    want = common.run("preset", "sample", "--seed", 0, "--count", count, "--ndim", 3, split)
    theirs = [[] for _ in range(3)]
    for line in want.splitlines():
        d = json.loads(line)["drawn"]["scale"]
        for a in range(3):
            if d["fired"]:
                theirs[a].append(d["factors"][a])
    rate_line("split scale fires", _fired_flags(mine[0], count), _fired_flags(theirs[0], count))
    for a in range(3):
        ks_line(f"split scale factor axis {a}", mine[a], theirs[a])


def _fired_flags(values, count):
    return [True] * len(values) + [False] * (count - len(values))


def bundled(report, vol):
    """The bundled presets' snippets run as they are (random draws): shape kept, values finite."""
    for name in ("nnunet-v2", "nnunet-v1-3d", "batchgenerators", "monai-brats"):
        for ndim in (3, 2):
            text = common.run("preset", "export", "--to", "torchio", "--ndim", ndim, name)
            arr = vol[::2, ::2, ::2] if ndim == 3 else vol[vol.shape[0] // 2]
            tensor = torch.from_numpy(arr.T.copy())[None]
            if ndim == 2:
                tensor = tensor[..., None]
            image = tio.ScalarImage(tensor=tensor, affine=np.diag([3.0, 3.0, 3.0, 1.0]))
            transforms = common.exec_snippet(text, "bundled")["get_transforms"]()
            torch.manual_seed(3)
            good = True
            for _ in range(4):
                out = transforms(tio.Subject(image=image)).image.data
                good &= out.shape == tensor.shape and bool(torch.isfinite(out).all())
            report.stat(f"bundled preset {name} ({ndim}D) runs", good,
                        "4 draws: shape kept, values finite")


def main():
    report = common.Report("torchio", common.version("torchio"))
    work = common.Workdir()
    try:
        vol, lab, aff = common.mni_small(step=3)
        scans = {code: Scan(work, code, *common.oriented(vol, lab, aff, code))
                 for code in ("RAS", "LAS", "LPS")}
        snippet = None
        for code, scan in scans.items():
            for case in CASES_3D:
                snippet = compare(report, work, scan, case)
        common.check_verified_line(snippet, DISTS)
        compare(report, work, scans["RAS"], CASE_ORDER3)
        # An oblique affine (20 degrees about the S axis, 10 about R): the same array transform.
        c, s = math.cos(math.radians(20)), math.sin(math.radians(20))
        c2, s2 = math.cos(math.radians(10)), math.sin(math.radians(10))
        turn = np.array([[c, -s, 0], [s, c, 0], [0, 0, 1]]) @ np.array(
            [[1, 0, 0], [0, c2, -s2], [0, s2, c2]])
        oblique_aff = aff.copy()
        oblique_aff[:3, :3] = turn @ aff[:3, :3]
        oblique = Scan(work, "oblique", vol, lab, oblique_aff)
        compare(report, work, oblique, CASES_3D[-1])
        avol, alab, aaff = common.anisotropic()
        aniso = Scan(work, "anisotropic", avol, alab, aaff)
        for case in CASES_MM:
            compare(report, work, aniso, case)
        las_aniso = Scan(work, "anisotropic-LPS", *common.oriented(avol, alab, aaff, "LPS"))
        compare(report, work, las_aniso, CASES_MM[1])
        z = vol.shape[0] // 2 + 3
        for case in CASES_2D:
            compare_2d(report, work, vol[z], lab[z], scans["RAS"].spacing[1:], case)
        border_shell(report, work, scans["RAS"])
        slice2d = Slice2D(work, vol[z], lab[z], scans["RAS"].spacing[1:])
        elastic_checks(report, work, [
            (scans["RAS"], 3, "voxel", 100.0, 5.0, 12, range(4)),
            (scans["LPS"], 3, "voxel", 800.0, 9.0, 12, range(4)),
            (aniso, 3, "mm", 300.0, 12.0, 12, range(4)),
            (slice2d, 2, "voxel", 60.0, 4.0, 60, range(24)),
        ])
        bundled(report, vol)
        distributions(report, work)
    finally:
        work.close()
    report.finish()


if __name__ == "__main__":
    main()
