#!/usr/bin/env python3
"""Runs the trainer that `augscope preset export --to nnunet` writes under the real nnU-Net v2 and
batchgeneratorsv2, and compares its spatial augmentation with `augscope apply` of the same plan.

The exported module is imported as nnU-Net would import it, and the transforms come from the
subclass's own `get_training_transforms` (with what its own
`configure_rotation_dummyDA_mirroring_and_inital_patch_size` returns, on a stand-in for the
configuration manager that holds only `patch_size`). From the ComposeTransforms that returns, the
SpatialTransform, the MirrorTransform and the RemoveLabelTransform (the padding label -1 back to
0) run alone, so nnU-Net's intensity transforms stay out of the comparison.

Resampling: batchgeneratorsv2 samples with torch grid_sample, bilinear, zero padding,
align_corners=False, and maps an output voxel p to the input point
A (p - (patch - 1) / 2) + (shape - 1) / 2 (spatial.py: _create_centered_identity_grid2 and
_convert_my_grid_to_grid_sample_grid): augscope's centre convention, with
`--order 1 --mode grid-constant` (taps outside read 0). Labels: nearest neighbour
(mode_seg 'nearest' for label_order 0), augscope's order 0.

A patch smaller than the volume is the centred crop of the same map, offset by
(shape - patch) / 2 voxels: augscope has no output-shape option, so its full output is cropped by
that offset (even differences, so the offset is whole voxels).

    VENV/bin/python tests/interop/check_nnunet.py [path/to/augscope]
"""
import contextlib
import importlib.util
import io
import json
import math
import os
import sys
from types import SimpleNamespace

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common as C  # noqa: E402

C.require("torch", "torch")
C.require("batchgeneratorsv2", "batchgeneratorsv2==0.3.6")
C.require("nnunetv2", "nnunetv2==2.8.1")

import torch  # noqa: E402
from batchgeneratorsv2.transforms.spatial.mirroring import MirrorTransform  # noqa: E402
from batchgeneratorsv2.transforms.spatial.spatial import SpatialTransform  # noqa: E402
from batchgeneratorsv2.transforms.utils.pseudo2d import (  # noqa: E402
    Convert2DTo3DTransform, Convert3DTo2DTransform)
from batchgeneratorsv2.transforms.utils.remove_label import RemoveLabelTransform  # noqa: E402

DISTS = ["nnunetv2", "batchgeneratorsv2", "torch"]
GRID = ["--order", 1, "--mode", "grid-constant"]


# --- the exported trainer -----------------------------------------------------------------------

class Trainer:
    """The exported module, its trainer class and what nnU-Net would build from it."""

    _count = 0

    def __init__(self, work, sections, ndim, space=None):
        Trainer._count += 1
        self.preset = work.preset(f"nnunet case {Trainer._count}", sections, space)
        self.text = C.export_snippet("nnunet", self.preset, ndim)
        path = work.file(f"nnunet_trainer_{Trainer._count}.py")
        with open(path, "w") as fh:
            fh.write(self.text)
        spec = importlib.util.spec_from_file_location(f"augscope_nnunet_{Trainer._count}", path)
        self.module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(self.module)
        self.cls = self.module.nnUNetTrainerAugscope
        self.log = work.file("trainer_log.txt")

    def configure(self, patch_size):
        """The subclass's configure_rotation_dummyDA_mirroring_and_inital_patch_size on an object
        that holds only what it reads: configuration_manager.patch_size, and what nnU-Net's
        print_to_log_file needs (local_rank, a log file; its console line is kept out of the
        report)."""
        trainer = self.cls.__new__(self.cls)
        trainer.configuration_manager = SimpleNamespace(patch_size=list(patch_size))
        trainer.local_rank = 0
        trainer.log_file = self.log
        with contextlib.redirect_stdout(io.StringIO()):
            rotation, dummy_2d, initial, mirror = \
                trainer.configure_rotation_dummyDA_mirroring_and_inital_patch_size()
        return SimpleNamespace(rotation=rotation, dummy_2d=dummy_2d, initial=initial,
                               mirror=mirror, tta=trainer.inference_allowed_mirroring_axes)

    def transforms(self, patch_size):
        cfg = self.configure(patch_size)
        compose = self.cls.get_training_transforms(
            list(patch_size), cfg.rotation, None, cfg.mirror, cfg.dummy_2d,
            use_mask_for_norm=None, is_cascaded=False, foreground_labels=[1, 2], regions=None,
            ignore_label=None)
        spatial = [t for t in compose.transforms if isinstance(t, SpatialTransform)]
        mirror = [t for t in compose.transforms if isinstance(t, MirrorTransform)]
        assert len(spatial) == 1 and len(mirror) <= 1, compose.transforms
        # the geometric part of the pipeline, in its order (dummy 2D: the slicing around it)
        kinds = (Convert3DTo2DTransform, SpatialTransform, Convert2DTo3DTransform, MirrorTransform,
                 RemoveLabelTransform)
        self.geometric = [t for t in compose.transforms if isinstance(t, kinds)]
        return cfg, spatial[0], (mirror[0] if mirror else None)

    def run(self, image, label, patch_size=None):
        """The trainer's SpatialTransform, MirrorTransform and RemoveLabelTransform on one
        sample (image [z, y, x] float, label the same grid), as numpy arrays."""
        patch_size = tuple(patch_size or image.shape)
        self.transforms(patch_size)
        data = {"image": torch.from_numpy(np.ascontiguousarray(image, np.float32)[None].copy())}
        if label is not None:
            data["segmentation"] = torch.from_numpy(label.astype(np.int16)[None].copy())
        for t in self.geometric:
            data = t(**data)
        seg = data["segmentation"][0].numpy() if label is not None else None
        return data["image"][0].numpy(), seg


def _csv(v):
    return ",".join(repr(float(x)) for x in v)


def plan_args(rot_deg=None, scale=None, flip=None):
    args = []
    if rot_deg is not None:
        args += ["--rotate", _csv(np.radians(rot_deg))]
    if scale is not None:
        args += ["--scale", _csv(scale)]
    if flip:
        args += ["--flip", ",".join(map(str, flip))]
    return args


def fixed_sections(ndim, rot_deg=None, scale=None, flip=None, p_axis=None):
    """A fixed-value preset: every probability 1, every range one value."""
    s = {}
    if rot_deg is not None:
        s["rotate"] = {"p": 1.0, "range_deg": [[a, a] for a in rot_deg]}
        if ndim == 2:
            s["rotate"]["range_deg"] = [[rot_deg[0], rot_deg[0]]]
        if p_axis is not None:
            s["rotate"]["p_axis"] = p_axis
    if scale is not None:
        per_axis = len(scale) > 1
        s["scale"] = {"p": 1.0, "range": [[v, v] for v in scale], "per_axis": per_axis}
    if flip is not None:
        s["flip"] = {"p": [1.0 if a in flip else 0.0 for a in range(ndim)]}
    s["sampling"] = {"order": 1, "mode": "constant", "cval": 0.0, "label_order": 0}
    return s


def central(vol, patch):
    off = [(n - p) // 2 for n, p in zip(vol.shape, patch)]
    assert all((n - p) % 2 == 0 for n, p in zip(vol.shape, patch)), "even differences only"
    return vol[tuple(slice(o, o + p) for o, p in zip(off, patch))]


# --- fixed-value cases --------------------------------------------------------------------------

def fixed_cases(work, report):
    vol3, lab3, aff3 = C.mni_small(3)
    ip3, lp3 = work.npy("mni", vol3), work.npy("mni_labels", lab3)
    mid = vol3.shape[0] // 2 + 4
    vol2, lab2 = np.ascontiguousarray(vol3[mid]), np.ascontiguousarray(lab3[mid])
    ip2, lp2 = work.npy("mni2d", vol2), work.npy("mni2d_labels", lab2)

    cases3 = [
        ("3D rotate axis 0 +25", dict(rot_deg=(25.0, 0.0, 0.0))),
        ("3D rotate axis 1 -20", dict(rot_deg=(0.0, -20.0, 0.0))),
        ("3D rotate axis 2 +35", dict(rot_deg=(0.0, 0.0, 35.0))),
        ("3D rotate 20 all axes, p_axis only axis 1", dict(rot_deg=(20.0,), p_axis=[0.0, 1.0, 0.0]),
         dict(rot_deg=(0.0, 20.0, 0.0))),
        ("3D rotate (20, -10, 15)", dict(rot_deg=(20.0, -10.0, 15.0))),
        ("3D scale 1.25", dict(scale=(1.25,))),
        ("3D scale 0.8", dict(scale=(0.8,))),
        ("3D scale per axis (1.2, 0.9, 1.1)", dict(scale=(1.2, 0.9, 1.1))),
        ("3D flip 0", dict(flip=(0,))),
        ("3D flip 1", dict(flip=(1,))),
        ("3D flip 2", dict(flip=(2,))),
        ("3D combined rotate (20, -10, 15) scale 1.15 flip 0,2",
         dict(rot_deg=(20.0, -10.0, 15.0), scale=(1.15,), flip=(0, 2))),
    ]
    for case in cases3:
        name, spec = case[0], case[1]
        plan = case[2] if len(case) > 2 else spec
        tr = Trainer(work, fixed_sections(3, **spec), 3)
        img, seg = tr.run(vol3, lab3)
        ours, ours_lab = C.apply(work, ip3, plan_args(**plan) + GRID, label_path=lp3)
        report.case(name, C.agreement(ours, img)[0], C.label_agreement(ours_lab, seg))
        if name.startswith("3D combined"):
            patch = (51, 60, 54)
            img_c, seg_c = tr.run(vol3, lab3, patch)
            report.case(f"{name}, patch {patch} (augscope's output cropped by "
                        f"{tuple((n - p) // 2 for n, p in zip(vol3.shape, patch))})",
                        C.agreement(central(ours, patch), img_c)[0],
                        C.label_agreement(central(ours_lab, patch), seg_c))
            C.check_verified_line(tr.text, DISTS)

    # Boundary modes and order 0: grid_sample's border and reflection padding (align_corners=False)
    # and its nearest neighbour, as the snippet maps augscope's modes onto them.
    for mode, order in [("nearest", 1), ("reflect", 1), ("grid-constant", 0)]:
        spec = dict(rot_deg=(20.0, -10.0, 15.0), scale=(1.15,))
        sections = fixed_sections(3, **spec)
        sections["sampling"].update(mode=mode, order=order)
        tr = Trainer(work, sections, 3)
        img, seg = tr.run(vol3, lab3)
        ours, ours_lab = C.apply(work, ip3, plan_args(**spec) + ["--order", order, "--mode", mode],
                                 label_path=lp3)
        report.case(f"3D rotate (20, -10, 15) scale 1.15, order {order}, mode {mode}",
                    C.agreement(ours, img)[0], C.label_agreement(ours_lab, seg))

    # The one known difference, as the snippet's NOTE states it: batchgeneratorsv2 scales before
    # it turns. The figure must stay what the NOTE says.
    rot, sc = (10.0, -15.0, 5.0), (1.2, 0.9, 1.1)
    tr = Trainer(work, fixed_sections(3, rot_deg=rot, scale=sc), 3)
    img, _ = tr.run(vol3, None)
    ours, _ = C.apply(work, ip3, plan_args(rot_deg=rot, scale=sc) + GRID)
    frac = C.agreement(ours, img)[0]
    note = next((ln for ln in tr.text.splitlines() if "scales before it turns" in ln), "")
    stated = [float(x) for x in __import__("re").findall(r"([0-9.]+) % of voxels", note)]
    report.stat("3D rotate (10, -15, 5) with scale per axis (1.2, 0.9, 1.1): the NOTE's figure",
                bool(stated) and abs(100 * frac - stated[0]) <= 2.0,
                f"{100 * frac:.1f} % within 1e-2 (the NOTE says {stated[0] if stated else '?'} %)")

    cases2 = [
        ("2D rotate 30", dict(rot_deg=(30.0,))),
        ("2D rotate -50", dict(rot_deg=(-50.0,))),
        ("2D scale 1.2", dict(scale=(1.2,))),
        ("2D scale per axis (0.85, 1.15)", dict(scale=(0.85, 1.15))),
        ("2D flip 0", dict(flip=(0,))),
        ("2D flip 1", dict(flip=(1,))),
        ("2D combined rotate 30 scale 1.2 flip 1", dict(rot_deg=(30.0,), scale=(1.2,), flip=(1,))),
    ]
    for name, spec in cases2:
        tr = Trainer(work, fixed_sections(2, **spec), 2)
        img, seg = tr.run(vol2, lab2)
        ours, ours_lab = C.apply(work, ip2, plan_args(**spec) + GRID, label_path=lp2)
        report.case(name, C.agreement(ours, img)[0], C.label_agreement(ours_lab, seg))
        if name.startswith("2D combined"):
            patch = (60, 50)
            img_c, seg_c = tr.run(vol2, lab2, patch)
            report.case(f"{name}, patch {patch}", C.agreement(central(ours, patch), img_c)[0],
                        C.label_agreement(central(ours_lab, patch), seg_c))
            C.check_verified_line(tr.text, DISTS)

    # Dummy 2D (an anisotropic 3D patch): nnU-Net turns and scales each slice in its plane, the
    # plane of array axes 1 and 2, which is augscope's rotation about axis 0.
    spec = dict(rot_deg=(25.0, 0.0, 0.0), scale=(1.15,), flip=(2,))
    tr = Trainer(work, fixed_sections(3, **spec), 3)
    sub = np.ascontiguousarray(vol3[20:36])
    sub_lab = np.ascontiguousarray(lab3[20:36])
    assert tr.configure(sub.shape).dummy_2d
    img, seg = tr.run(sub, sub_lab)
    ip_s, lp_s = work.npy("sub", sub), work.npy("sub_labels", sub_lab)
    ours, ours_lab = C.apply(work, ip_s, plan_args(rot_deg=(25.0, 0.0, 0.0), scale=(1.0, 1.15, 1.15),
                                                   flip=(2,)) + GRID, label_path=lp_s)
    report.case("3D dummy-2D patch (16, 78, 66): rotate axis 0 +25, scale 1.15 in-plane, flip 2",
                C.agreement(ours, img)[0], C.label_agreement(ours_lab, seg))


def mm_cases(work, report):
    """A `space = "mm"` preset on anisotropic voxels: nnU-Net turns array indices, so the trained
    augmentation is augscope's voxel-space plan, as the NOTE says; how far that is from the
    physical rotation is measured beside it."""
    vol, lab, aff = C.anisotropic()
    # in y and x no more than 3 times the slices, so that nnU-Net keeps its 3D augmentation
    # (do_dummy_2d_data_aug past nnunetv2's ANISO_THRESHOLD)
    ny, nx = min(vol.shape[1], 3 * vol.shape[0] - 1), min(vol.shape[2], 3 * vol.shape[0] - 1)
    oy, ox = (vol.shape[1] - ny) // 2, (vol.shape[2] - nx) // 2
    vol = np.ascontiguousarray(vol[:, oy:oy + ny, ox:ox + nx])
    lab = np.ascontiguousarray(lab[:, oy:oy + ny, ox:ox + nx])
    aff = aff.copy()
    aff[:3, 3] = aff[:3, :3] @ np.array([ox, oy, 0.0]) + aff[:3, 3]
    nii, nii_lab = work.file("aniso.nii.gz"), work.file("aniso_labels.nii.gz")
    C.save_nifti(nii, vol, aff)
    C.save_nifti(nii_lab, lab, aff)
    spacing = tuple(float(np.linalg.norm(aff[:3, 2 - a])) for a in range(3))
    for name, spec in [
        ("3D mm preset, anisotropic scan, rotate axis 1 +15", dict(rot_deg=(0.0, 15.0, 0.0))),
        ("3D mm preset, anisotropic scan, rotate axis 0 +20 scale 1.1 flip 1",
         dict(rot_deg=(20.0, 0.0, 0.0), scale=(1.1,), flip=(1,))),
    ]:
        tr = Trainer(work, fixed_sections(3, **spec), 3, space="mm")
        assert "voxel space" in tr.text, "the snippet must say that mm is not expressible"
        img, seg = tr.run(vol, lab)
        ours, ours_lab = C.apply(work, nii, plan_args(**spec) + GRID + ["--space", "voxel"],
                                 label_path=nii_lab, tag="vox", ext="nii.gz")
        mm, _ = C.apply(work, nii, plan_args(**spec) + GRID + ["--space", "mm"], tag="mm",
                        ext="nii.gz")
        report.case(f"{name} (against augscope --space voxel)", C.agreement(ours, img)[0],
                    C.label_agreement(ours_lab, seg),
                    extra=f"against --space mm (spacing {spacing}): "
                          f"{100 * C.agreement(mm, img)[0]:.1f} %")


# --- configure_rotation_dummyDA_mirroring_and_inital_patch_size ---------------------------------

def configure_checks(work, report):
    """What the override returns is what the transforms use, and its initial patch (the region the
    data loader cuts) holds every point the SpatialTransform samples, for the extremes of the
    angle ranges alone and together and the largest scale."""
    sections = {
        "rotate": {"p": 1.0, "range_deg": [[-30.0, 30.0], [-10.0, 10.0], [-5.0, 20.0]]},
        "scale": {"p": 1.0, "range": [[0.8, 1.3]]},
        "flip": {"p": [0.5, 0.0, 0.25]},
    }
    tr = Trainer(work, sections, 3)
    patch = (40, 48, 44)
    cfg, spatial, mirror = tr.transforms(patch)
    ok = (cfg.rotation is tr.module.rotation_angle and spatial.rotation is cfg.rotation
          and cfg.mirror == (0, 2) and cfg.tta == (0, 2) and not cfg.dummy_2d
          and tuple(mirror.allowed_axes) == (0, 2))
    initial = np.asarray(cfg.initial, int)
    worst = 0.0
    extremes = [(-30.0, 0.0, 0.0), (30.0, 0.0, 0.0), (0.0, 10.0, 0.0), (0.0, 0.0, 20.0),
                (0.0, 0.0, -5.0), (-30.0, 10.0, 20.0), (30.0, -10.0, -5.0), (30.0, 10.0, 20.0)]
    for deg in extremes:
        # batchgeneratorsv2's angles are augscope's negated (as the snippet's rotation_angle)
        spatial.rotation = (lambda image, dim, d=deg: -math.radians(d[dim]))
        spatial.scaling = 1.3
        params = spatial.get_parameters(image=torch.zeros((1, *initial)))
        g = params["grid"].flip(-1).numpy()  # grid_sample's x-first back to array order
        pix = (g + 1) * initial / 2 - 0.5     # align_corners=False
        # inside [0, n - 1] bilinear reads no padding
        worst = max(worst, float(np.max(np.maximum(-pix, pix - (initial - 1)))))
    ok = ok and worst <= 0.0
    report.stat("configure: rotation callable, mirror axes, initial patch",
                ok, f"initial patch {tuple(int(i) for i in initial)} for patch {patch}, "
                    f"mirror {cfg.mirror}, samples reach {worst:+.2f} voxels past it")
    # An anisotropic patch switches nnU-Net to dummy 2D: the first axis is kept whole.
    cfg = tr.configure((12, 64, 64))
    report.stat("configure: dummy 2D on an anisotropic patch",
                bool(cfg.dummy_2d) and int(cfg.initial[0]) == 12 and all(
                    int(i) >= 64 for i in cfg.initial[1:]),
                f"dummy_2d {cfg.dummy_2d}, initial patch {tuple(int(i) for i in cfg.initial)}")


# --- elastic ------------------------------------------------------------------------------------

def _norms(field_last):
    n = np.sqrt((np.asarray(field_last, np.float64) ** 2).sum(-1))
    return float(np.sqrt((n ** 2).mean())), float(n.max())


def elastic_check(work, report):
    """batchgeneratorsv2's deformation (normal noise, FFT gaussian, each component scaled to a
    maximum) under the snippet's mapping, against augscope's for the same alpha and sigma:
    max and RMS of the per-voxel Euclidean norm, voxels. The NOTE's figures must hold."""
    vol, _, _ = C.mni_small(3)
    ip = work.npy("el", vol)
    alpha, sigma = 400.0, 5.0
    tr = Trainer(work, {"elastic": {"p": 1.0, "alpha": [alpha, alpha], "sigma": [sigma, sigma]}}, 3)
    _, spatial, _ = tr.transforms(vol.shape)
    ours_rms, ours_max, lib_rms, lib_max = [], [], [], []
    for seed in range(8):
        rep = work.file(f"el{seed}.json")
        C.run("apply", ip, work.file("el_out.npy"), "--elastic", f"{alpha},{sigma}", "--seed", seed,
              "--backend", "cpu", "--report", rep)
        with open(rep) as fh:
            d = json.load(fh)["displacement"]
        ours_rms.append(d["rms_vox"])
        ours_max.append(d["max_vox"])
        np.random.seed(seed)
        torch.manual_seed(seed)
        off = spatial.get_parameters(image=torch.zeros((1, *vol.shape)))["elastic_offsets"]
        r, m = _norms(off.numpy())
        lib_rms.append(r)
        lib_max.append(m)
    detail = (f"alpha {alpha:g} sigma {sigma:g} on {vol.shape}, 8 draws: augscope RMS "
              f"{np.mean(ours_rms):.2f} max {np.mean(ours_max):.2f}; batchgeneratorsv2 RMS "
              f"{np.mean(lib_rms):.2f} (range {min(lib_rms):.2f}-{max(lib_rms):.2f}) max "
              f"{np.mean(lib_max):.2f} voxels")
    note = next((ln for ln in tr.text.splitlines() if "batchgeneratorsv2 draws normal" in ln), "")
    ok = abs(np.mean(lib_rms) / np.mean(ours_rms) - 1.0) <= 0.1 and "RMS" in note
    report.stat("elastic displacement under the snippet's mapping", ok, detail)


# --- distributions ------------------------------------------------------------------------------

def _angles_scales(affine, ndim):
    """augscope's angles (degrees) and scales from batchgeneratorsv2's affine R(b) S (b = -a)."""
    if affine is None:
        return [0.0] * (3 if ndim == 3 else 1), [1.0] * ndim
    a = np.asarray(affine, float)
    s = np.linalg.norm(a, axis=0)
    r = a / s
    if ndim == 2:
        return [-math.degrees(math.atan2(r[1, 0], r[0, 0]))], list(s)
    b0 = math.atan2(r[2, 1], r[2, 2])
    b1 = -math.asin(max(-1.0, min(1.0, r[2, 0])))
    b2 = math.atan2(r[1, 0], r[0, 0])
    return [-math.degrees(b) for b in (b0, b1, b2)], list(s)


def _proportions(k1, k2, n):
    """Two-sided p of a two-proportion z test (k1 and k2 of n)."""
    from scipy.stats import norm
    p = (k1 + k2) / (2 * n)
    if p in (0.0, 1.0):
        return 1.0 if k1 == k2 else 0.0
    z = (k1 - k2) / n / math.sqrt(2 * p * (1 - p) / n)
    return float(2 * norm.sf(abs(z)))


def distribution_checks(work, report, n=600):
    np.random.seed(1)
    torch.manual_seed(1)
    for ndim, sections in [
        (3, {"rotate": {"p": 0.7, "p_axis": [1.0, 0.5, 1.0],
                        "range_deg": [[-30.0, 30.0], [-10.0, 20.0], [0.0, 15.0]]},
             "scale": {"p": 0.6, "range": [[0.7, 1.4]]},
             "flip": {"p": [0.5]}}),
        (3, {"scale": {"p": 0.8, "range": [[0.8, 1.1], [0.7, 1.4], [0.9, 1.2]], "per_axis": True,
                       "distribution": "split"}}),
        (2, {"rotate": {"p": 0.4, "range_deg": [[-180.0, 180.0]]},
             "scale": {"p": 0.5, "range": [[0.7, 1.4]], "distribution": "split"},
             "flip": {"p": [0.5, 0.3]}}),
    ]:
        tr = Trainer(work, sections, ndim)
        patch = (8,) * ndim
        _, spatial, mirror = tr.transforms(patch)
        lib = {"angles": [], "scales": [], "mirror": []}
        for _ in range(n):
            params = spatial.get_parameters(image=torch.zeros((1, *patch)))
            ang, sc = _angles_scales(params["affine"], ndim)
            lib["angles"].append(ang)
            lib["scales"].append(sc)
            if mirror is not None:
                lib["mirror"].append(mirror.get_parameters(image=torch.zeros((1, *patch)))["axes"])
        lines = C.run("preset", "sample", "--seed", 0, "--count", n, "--ndim", ndim,
                      tr.preset).splitlines()
        ours = [json.loads(ln) for ln in lines if ln.strip()]
        tag = f"{ndim}D {'+'.join(sections)}"
        if "rotate" in sections:
            la = np.array(lib["angles"])
            oa = np.array([s["drawn"]["rotate"]["angles_deg"] for s in ours])
            for k in range(la.shape[1]):
                lf, of = la[:, k] != 0, oa[:, k] != 0
                p_f = _proportions(int(lf.sum()), int(of.sum()), n)
                p_ks = C.ks_2samp(la[lf, k], oa[of, k])
                report.stat(f"{tag}: angle {k}", p_f > 0.01 and p_ks > 0.01,
                            f"fires {lf.mean():.3f} vs augscope {of.mean():.3f} (p {p_f:.2f}); "
                            f"values KS p {p_ks:.2f}")
        if "scale" in sections:
            ls = np.array(lib["scales"])
            per_axis = sections["scale"].get("per_axis", False)
            os_ = []
            for s in ours:
                f = s["drawn"]["scale"]["factors"] or [1.0] * (ndim if per_axis else 1)
                os_.append(f if per_axis else f * ndim)
            os_ = np.array(os_)
            for k in range(ndim if per_axis else 1):
                # a rotation alone leaves the columns of R(b) S of norm 1 up to rounding
                lf, of = np.abs(ls[:, k] - 1.0) > 1e-6, os_[:, k] != 1.0
                p_f = _proportions(int(lf.sum()), int(of.sum()), n)
                p_ks = C.ks_2samp(ls[lf, k], os_[of, k])
                same = bool(np.allclose(ls, ls[:, :1]))
                iso = "" if per_axis else f", isotropic: {same}"
                report.stat(f"{tag}: scale {k if per_axis else '(all axes)'}",
                            p_f > 0.01 and p_ks > 0.01 and (per_axis or same),
                            f"fires {lf.mean():.3f} vs augscope {of.mean():.3f} (p {p_f:.2f}); "
                            f"values KS p {p_ks:.2f}{iso}")
        if "flip" in sections:
            for k in range(ndim):
                lk = sum(k in axes for axes in lib["mirror"])
                ok_ = sum(bool(s["drawn"]["flip"]["axes_fired"][k]) for s in ours)
                p_f = _proportions(lk, ok_, n)
                report.stat(f"{tag}: mirror axis {k}", p_f > 0.01,
                            f"fires {lk / n:.3f} vs augscope {ok_ / n:.3f} (p {p_f:.2f})")


def main():
    report = C.Report("nnunet", f"nnunetv2 {C.version('nnunetv2')}")
    torch.set_num_threads(2)
    work = C.Workdir()
    try:
        for part in (fixed_cases, mm_cases, configure_checks, elastic_check, distribution_checks):
            try:
                part(work, report)
            except Exception as e:  # a part that cannot run is a failure of that part
                report.stat(part.__name__, False, f"{type(e).__name__}: {e}")
    finally:
        work.close()
    report.finish()


if __name__ == "__main__":
    main()
