#!/usr/bin/env python3
"""Checks `augscope apply --as monai|torchio|nnunet` (the libraries' own models, "Preview as")
against the real libraries running the exported snippets, voxel by voxel, to the bar of the
exports (common.IMAGE_BAR of voxels within 1e-2 of the intensity range, labels LABEL_BAR equal).

The random parts are fed through each library's own random calls, from augscope's streams
(docs/design.md §4):
- MONAI's Rand3DElasticd asks its random state for the uniform offset: it gets augscope's
  uniform noise (check_monai.FeedNoise);
- batchgeneratorsv2's SpatialTransform asks torch.normal for its offsets: it gets augscope's
  normal noise (Philox counter word 3 = 1, Box-Muller);
- TorchIO's RandomElasticDeformation.get_params draws the control points: it gets augscope's
  uniform noise on the control grid times the maximum displacement the snippet computed, with
  TorchIO's locked borders.
So any difference left is the model: kernels, magnitudes, grids, resample chains and padding.

    VENV/bin/python tests/interop/check_preview.py [path/to/augscope]
"""
import math
import os
import sys
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common as C  # noqa: E402

C.require("torch", "torch")
C.require("monai", "monai==1.6.1")
C.require("torchio", "torchio==1.2.1")
C.require("nnunetv2", "nnunetv2==2.8.1")

import torch  # noqa: E402

import check_monai as CM  # noqa: E402
import check_nnunet as CN  # noqa: E402


def philox_normal(seed, k, n):
    """augscope's normal noise (engine::noise::normal_value) for linear indices 0..n."""
    i = np.arange(n, dtype=np.uint64)
    lo = (i & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    hi = (i >> np.uint64(32)).astype(np.uint32)
    x0, x1, _, _ = C.philox4x32_10(lo, hi, np.full(n, k, np.uint32), np.ones(n, np.uint32),
                                   seed & 0xFFFFFFFF, seed >> 32)
    u1 = ((x0 >> np.uint32(8)).astype(np.float64) + 1.0) * 2.0 ** -24
    u2 = (x1 >> np.uint32(8)).astype(np.float64) * 2.0 ** -24
    return (np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u2)).astype(np.float32)


def r(deg):
    return repr(math.radians(deg))


def fixed(rot=None, scale=None, translate=None, flip=None, elastic=None, order=1, mode="constant",
          cval=0.0, ndim=3):
    """A fixed-value preset (every p 1, every range one value) and the matching apply args."""
    s, args = {}, []
    if rot is not None:
        s["rotate"] = {"p": 1.0, "range_deg": [[a, a] for a in rot]}
        args += ["--rotate", ",".join(r(a) for a in rot)]
    if scale is not None:
        s["scale"] = {"p": 1.0, "range": [[v, v] for v in scale], "per_axis": len(scale) > 1}
        args += ["--scale", ",".join(repr(float(v)) for v in scale)]
    if translate is not None:
        s["translate"] = {"p": 1.0, "range": [[t, t] for t in translate]}
        args += ["--translate", ",".join(repr(float(t)) for t in translate)]
    if flip is not None:
        s["flip"] = {"p": [1.0 if a in flip else 0.0 for a in range(ndim)]}
        args += ["--flip", ",".join(map(str, flip))]
    if elastic is not None:
        alpha, sigma, seed = elastic
        s["elastic"] = {"p": 1.0, "alpha": [alpha, alpha], "sigma": [sigma, sigma]}
        args += ["--elastic", f"{alpha!r},{sigma!r}", "--seed", str(seed)]
    s["sampling"] = {"order": order, "mode": mode, "cval": cval, "label_order": 0}
    args += ["--order", str(order), "--mode", mode, "--cval", repr(float(cval))]
    return s, args


def ours(work, img_path, lab_path, args, model, tag):
    return C.apply(work, img_path, args + ["--as", model], lab_path, tag=tag,
                   ext=os.path.basename(img_path).split(".", 1)[1])


def line(rep, name, mine, theirs, lab_mine=None, lab_theirs=None, extra=""):
    rng = float(np.ptp(np.asarray(theirs, np.float64))) or 1.0
    frac, worst = C.agreement(mine, theirs, rng)
    lf = None if lab_mine is None else C.label_agreement(lab_mine, lab_theirs)
    rep.case(name, frac, lf, f"max |diff| {worst / rng:.2e} of the range" + (
        f"; {extra}" if extra else ""))


# --- MONAI --------------------------------------------------------------------------------------

def monai_cases(rep, work):
    vol, lab, aff = C.mni_small(3)
    img_path, lab_path = work.file("mni.nii.gz"), work.file("mni_labels.nii.gz")
    C.save_nifti(img_path, vol, aff)
    C.save_nifti(lab_path, lab, aff)
    cases = [
        ("3D elastic alone (alpha 300, sigma 6)", fixed(elastic=(300.0, 6.0, 3)), 3),
        ("3D elastic sigma 2 (erf kernel matters most)", fixed(elastic=(60.0, 2.0, 5)), 5),
        ("3D rotate + scale + translate + elastic + flip (two resamples)",
         fixed(rot=(12.0, -18.0, 25.0), scale=(0.9,), translate=(2.0, -3.0, 1.5), flip=[2],
               elastic=(300.0, 6.0, 7)), 7),
        ("3D rotate + elastic, order 3, mode reflect",
         fixed(rot=(0.0, 15.0, -10.0), elastic=(250.0, 5.0, 11), order=3, mode="reflect"), 11),
        ("3D rotate + scale, cval 0.3 (MONAI pads with 0)",
         fixed(rot=(20.0, 0.0, 0.0), scale=(1.2,), cval=0.3), None),
    ]
    for name, (sections, args), seed in cases:
        preset = work.preset(f"preview monai {name[:20]}", sections)
        tr, _ = CM.snippet_transform("monai", preset, 3)
        theirs, their_lab = CM.run_monai(tr, vol, lab, noise_seed=seed)
        mine, my_lab = ours(work, img_path, lab_path, args, "monai", "monai")
        line(rep, name, mine, theirs, my_lab, their_lab)
    sl, sl_lab = vol[vol.shape[0] // 2], lab[vol.shape[0] // 2]
    sl_path, sl_lab_path = work.npy("mni2d", sl), work.npy("mni2d_labels", sl_lab)
    sections, args = fixed(rot=(20.0,), elastic=(60.0, 4.0, 2), ndim=2)
    preset = work.preset("preview monai 2d", sections)
    tr, _ = CM.snippet_transform("monai", preset, 2)
    theirs, their_lab = CM.run_monai(tr, sl, sl_lab)
    mine, my_lab = ours(work, sl_path, sl_lab_path, args, "monai", "monai2d_out")
    line(rep, "2D rotate + elastic (MONAI leaves the elastic out)", mine, theirs, my_lab,
         their_lab)


# --- nnU-Net v2 ---------------------------------------------------------------------------------

class FeedNormal:
    """torch.normal for batchgeneratorsv2's offsets: augscope's normal noise."""

    def __init__(self, seed):
        self.seed, self.fed, self.real = seed, 0, torch.normal

    def __call__(self, *a, **k):
        size = k.get("size")
        if size is None or k.get("mean") != 0 or k.get("std") != 1:
            return self.real(*a, **k)
        dim, shape = size[0], tuple(size[1:])
        n = int(np.prod(shape))
        self.fed += 1
        return torch.from_numpy(np.stack([philox_normal(self.seed, d, n).reshape(shape)
                                          for d in range(dim)]))

    def __enter__(self):
        torch.normal = self
        return self

    def __exit__(self, *exc):
        torch.normal = self.real


def nnunet_cases(rep, work):
    vol, lab, aff = C.mni_small(3)
    img_path, lab_path = work.npy("nn", vol), work.npy("nn_labels", lab)
    cases = [
        ("3D elastic alone (alpha 400, sigma 5)", fixed(elastic=(400.0, 5.0, 4)), 4),
        ("3D rotate + isotropic scale + elastic + flip",
         fixed(rot=(10.0, -15.0, 20.0), scale=(1.15,), flip=[1], elastic=(300.0, 6.0, 9)), 9),
        ("3D rotate + per-axis scale (R^T S, not S R^T)",
         fixed(rot=(10.0, -15.0, 5.0), scale=(1.2, 0.9, 1.1)), None),
        ("3D rotate + translate (dropped), order 3 (bilinear), mode reflect",
         fixed(rot=(0.0, 0.0, 25.0), translate=(3.0, 0.0, -2.0), order=3, mode="reflect"), None),
        ("3D elastic, mode nearest (border padding)",
         fixed(elastic=(500.0, 4.0, 13), mode="nearest"), 13),
    ]
    for name, (sections, args), seed in cases:
        tr = CN.Trainer(work, sections, 3)
        with FeedNormal(seed if seed is not None else 0) as feed:
            theirs, their_lab = tr.run(vol, lab)
        if seed is not None:
            assert feed.fed == 1, "batchgeneratorsv2 drew no offsets"
        mine, my_lab = ours(work, img_path, lab_path, args, "nnunet", "nnunet")
        line(rep, name, mine, theirs, my_lab, their_lab)
    sl, sl_lab = vol[vol.shape[0] // 2], lab[vol.shape[0] // 2]
    sl_path, sl_lab_path = work.npy("nn2d", sl), work.npy("nn2d_labels", sl_lab)
    sections, args = fixed(rot=(20.0,), scale=(1.1,), flip=[1], elastic=(80.0, 4.0, 6), ndim=2)
    tr = CN.Trainer(work, sections, 2)
    with FeedNormal(6) as feed:
        theirs, their_lab = tr.run(sl, sl_lab)
    assert feed.fed == 1, "batchgeneratorsv2 drew no offsets"
    mine, my_lab = ours(work, sl_path, sl_lab_path, args, "nnunet", "nn2d_out")
    line(rep, "2D rotate + scale + elastic + flip", mine, theirs, my_lab, their_lab)


# --- TorchIO ------------------------------------------------------------------------------------

def _lps_axes(aff):
    """Per NIfTI axis d: voxel size s_d and the LPS direction sign L_d (axis-aligned affines)."""
    s = np.sqrt((aff[:3, :3] ** 2).sum(0))
    rsign = np.sign(np.diag(aff[:3, :3]))
    return s, np.array([-1.0, -1.0, 1.0]) * rsign


def to_torchio(cp_vox, aff):
    """augscope's control grid (3, n0, n1, n2), voxels per array axis, as TorchIO's
    control_points (n_x, n_y, n_z, 3): mm along LPS, nodes along increasing LPS."""
    s, L = _lps_axes(aff)
    t = np.transpose(np.asarray(cp_vox, np.float64), (3, 2, 1, 0))[..., ::-1]
    for d in range(3):
        if L[d] < 0:
            t = np.flip(t, axis=d)
    return np.ascontiguousarray(t * (L * s)[None, None, None, :])


def feed_control_points(ns, seed, aff, two_d):
    """Replaces the snippet's RandomAlphaSigmaElastic.get_params: augscope's control points on
    the grid the snippet computed (its num_control_points and max_displacement, mm per world
    axis), locked as TorchIO locks them."""
    cls = ns["RandomAlphaSigmaElastic"]
    s, _ = _lps_axes(aff)
    fed = []

    def get_params(self, num_control_points, max_displacement, num_locked_borders):
        points = tuple(int(n) for n in num_control_points[::-1])  # [z, y, x]
        count = int(np.prod(points))
        max_vox = [float(max_displacement[2 - a]) / s[2 - a] for a in range(3)]
        cp = np.stack([max_vox[a] * (2.0 * C.philox_uniform(seed, a, count) - 1.0)
                       .reshape(points) for a in range(3)])
        for k in range(num_locked_borders):
            for arr in cp:
                arr[:, k, :] = arr[:, -1 - k, :] = 0.0
                arr[:, :, k] = arr[:, :, -1 - k] = 0.0
        if two_d:
            cp[0] = 0.0
        fed.append(points)
        return to_torchio(cp, aff)

    cls.get_params = get_params
    return fed


def torchio_cases(rep, work):
    import torchio as tio
    vol, lab, aff = C.mni_small(3)
    scans = [("RAS", vol, lab, aff), ("LAS", *C.oriented(vol, lab, aff, "LAS"))]
    cases = [
        ("elastic alone (alpha 300, sigma 6)", fixed(elastic=(300.0, 6.0, 3)), 3, None),
        ("rotate + scale + translate + elastic + flip (two resamples)",
         fixed(rot=(12.0, -18.0, 25.0), scale=(0.9,), translate=(2.0, -3.0, 1.5), flip=[2],
               elastic=(300.0, 6.0, 7)), 7, None),
        ("elastic, order 3", fixed(elastic=(250.0, 5.0, 11), order=3), 11, None),
        ("rotate + translate, mode nearest (nearest-voxel extrapolation)",
         fixed(rot=(0.0, 20.0, 0.0), translate=(6.0, 0.0, -5.0), mode="nearest"), None, None),
        ("rotate + scale, cval 0.25", fixed(rot=(15.0, 0.0, 10.0), scale=(1.25,), cval=0.25),
         None, None),
        ("elastic in mm on 3 x 1 x 1 mm voxels (alpha 300, sigma 12 mm)",
         fixed(elastic=(300.0, 12.0, 5)), 5, "mm"),
    ]
    for tag, v, lb, af in scans:
        img_path, lab_path = work.file(f"tio_{tag}.nii.gz"), work.file(f"tio_{tag}_l.nii.gz")
        C.save_nifti(img_path, v, af)
        C.save_nifti(lab_path, lb, af)
        for name, (sections, args), seed, space in cases:
            if space == "mm":
                if tag != "RAS":
                    continue
                v2, lb2, af2 = C.anisotropic((3.0, 1.0, 1.0))
                ip, lp = work.file("tio_aniso.nii.gz"), work.file("tio_aniso_l.nii.gz")
                C.save_nifti(ip, v2, af2)
                C.save_nifti(lp, lb2, af2)
                v_, lb_, af_ = v2, lb2, af2
                args = args + ["--space", "mm"]
            else:
                ip, lp, v_, lb_, af_ = img_path, lab_path, v, lb, af
            preset = work.preset(f"preview torchio {tag} {name[:16]}", sections, space)
            ns = C.exec_snippet(C.export_snippet("torchio", preset, 3), "tio_preview")
            fed = feed_control_points(ns, seed, af_, False) if seed is not None else []
            subject = tio.Subject(image=tio.ScalarImage(ip), label=tio.LabelMap(lp))
            out = ns["get_transforms"]()(subject)
            if seed is not None:
                assert len(fed) == 1, "the snippet drew no control points"
            theirs = out["image"].data[0].numpy().T
            their_lab = out["label"].data[0].numpy().T
            mine, my_lab = ours(work, ip, lp, args, "torchio", "tio")
            grid = f"control grid {fed[0]}" if fed else ""
            line(rep, f"{tag}: {name}", mine, theirs, my_lab, their_lab, grid)
    # 2D: TorchIO's one-slice volume (W, H, 1).
    sl, sl_lab = vol[vol.shape[0] // 2], lab[vol.shape[0] // 2]
    sl_path, sl_lab_path = work.npy("tio2d", sl), work.npy("tio2d_labels", sl_lab)
    sections, args = fixed(rot=(15.0,), elastic=(60.0, 4.0, 2), ndim=2)
    preset = work.preset("preview torchio 2d", sections)
    ns = C.exec_snippet(C.export_snippet("torchio", preset, 2), "tio_preview_2d")
    # augscope reads a .npy as 1 mm voxels: the TorchIO image gets the same (identity) affine.
    ident = np.eye(4)
    fed = feed_control_points(ns, 2, ident, True)
    img = tio.ScalarImage(tensor=torch.from_numpy(sl.T[None, ..., None].copy()), affine=ident)
    labm = tio.LabelMap(tensor=torch.from_numpy(sl_lab.T[None, ..., None].astype(np.int64)),
                        affine=ident)
    out = ns["get_transforms"]()(tio.Subject(image=img, label=labm))
    theirs = out["image"].data[0, ..., 0].numpy().T
    their_lab = out["label"].data[0, ..., 0].numpy().T
    mine, my_lab = ours(work, sl_path, sl_lab_path, args, "torchio", "tio2d_out")
    line(rep, "2D rotate + elastic (one-slice volume)", mine, theirs, my_lab, their_lab,
         f"control grid {fed[0]}")


def main():
    # TorchIO warns when a displacement exceeds half its grid spacing (folding may occur); the
    # 2D case's alpha does on purpose, and the warning is not a result.
    warnings.filterwarnings("ignore", "The maximum displacement is larger", RuntimeWarning)
    work = C.Workdir()
    try:
        for target, dist, fn in (("preview monai", "monai", monai_cases),
                                 ("preview nnunet", "batchgeneratorsv2", nnunet_cases),
                                 ("preview torchio", "torchio", torchio_cases)):
            rep = C.Report(target, C.version(dist))
            fn(rep, work)
            if rep.failed:
                rep.finish()
            print(f"{target}: all {rep.count} cases at the bar")
    finally:
        work.close()


if __name__ == "__main__":
    main()
