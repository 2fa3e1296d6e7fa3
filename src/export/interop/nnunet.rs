//! The nnU-Net v2 trainer subclass (batchgeneratorsv2 `SpatialTransform`, nnunetv2 2.8).
//!
//! batchgeneratorsv2 maps an output voxel `p` of the patch to the input point
//! `R(b) S (p - (patch - 1) / 2) + (shape - 1) / 2` (`spatial.py`: `create_affine_matrix_3d` builds
//! `Rz @ Ry @ Rx @ S`, the grid is multiplied by its transpose as row vectors, and
//! `grid_sample(align_corners=False)` reads pixel centres at `(shape - 1) / 2`), sampled bilinearly
//! with zero padding: augscope's `x = S Rᵀ c + ctr` at order 1, mode grid-constant, with `b = -a`
//! (the same matrices, transposed) and, for an isotropic scale, `R(b) S = S Rᵀ`. It draws each
//! value through `sample_scalar`, which calls a callable with the image and the axis, so the
//! snippet hands it functions that draw exactly what augscope draws: per-axis ranges and
//! probabilities, the split scale distribution, negated angles.

use super::{
    Preset, ScaleDistribution, Target, axis_value, f, header, intensity_left_out, notes_block,
    pair, rad, rot_range, voxel_target_note,
};
use std::fmt::Write as _;

/// The Python after the constants: the callables, the mirror transform and the trainer.
const BODY: &str = r#"
def _uniform(r):
    return float(r[0]) if r[0] == r[1] else float(np.random.uniform(r[0], r[1]))


def _axis(image, dim):
    """The array axis of the preset that spatial axis `dim` of `image` is: a 3D trainer's
    dummy-2D slices (do_dummy_2d_data_aug) are its axes 1 and 2."""
    return dim + NDIM - (image.ndim - 1)


def rotation_angle(image, dim):
    """batchgeneratorsv2's angle for axis `dim` (SpatialTransform.get_parameters calls this once
    per axis after p_rotation fired). Its matrix maps output to input coordinates (x = R S c), as
    augscope's R transposed: the same turn is the negated angle. A 2D image uses the angle of
    its last axis (create_affine_matrix_2d(angles[-1], ...)), which turns the plane of array
    axes 0 and 1, as a rotation about axis 0 of a volume."""
    if image.ndim - 1 == 2:
        if dim != 1:
            return 0.0
        axis = 0
    else:
        axis = dim
    if np.random.uniform() >= P_ROTATION_PER_AXIS[axis]:
        return 0.0
    return -_uniform(ROTATION[axis])


def scale_factor(image, dim):
    """batchgeneratorsv2's scale for axis `dim` (None: one factor for every axis)."""
    r = SCALING[0] if dim is None or len(SCALING) == 1 else SCALING[_axis(image, dim)]
    if SCALE_SPLIT:
        if np.random.uniform() < 0.5 and r[0] < 1.0:
            return _uniform((r[0], 1.0))
        return _uniform((max(r[0], 1.0), r[1]))
    return _uniform(r)


@functools.lru_cache(maxsize=256)
def _mean_square_weight(n, sigma):
    """The mean over an axis of n voxels of the summed squared weights of scipy's gaussian
    (truncate 4, taps outside the axis read 0): augscope's smoothing of its noise."""
    radius = int(4.0 * sigma + 0.5)
    w = np.exp(-0.5 * (np.arange(-radius, radius + 1) / sigma) ** 2)
    w /= w.sum()
    c = np.concatenate([[0.0], np.cumsum(w * w)])
    q = np.arange(n)
    lo = np.maximum(0, radius - q)
    hi = np.minimum(2 * radius, radius + n - 1 - q)
    return float((c[hi + 1] - c[lo]).mean())


def _expected_max_over_rms(patch_size, sigma):
    """E[max |f|] / RMS(f) of batchgeneratorsv2's field (normal noise smoothed by an FFT gaussian,
    periodic), from the expected Euler characteristic of its excursion sets (a smooth stationary
    gaussian field; second spectral moment 1 / (2 sigma^2))."""
    d = len(patch_size)
    u = np.linspace(0.0, 12.0, 4001)
    lam = 1.0 / (2.0 * sigma * sigma)
    hermite = u if d == 2 else u * u - 1.0
    tail = 2.0 * np.prod(patch_size) * lam ** (d / 2) * hermite * np.exp(-0.5 * u * u) \
        / (2.0 * np.pi) ** ((d + 1) / 2)
    tail = np.clip(tail, 0.0, 1.0)
    tail[: int(np.argmax(tail))] = 1.0
    return float(np.trapezoid(tail, u))


def elastic_scale(image, dim, patch_size):
    """batchgeneratorsv2's sigma as a fraction of the patch edge of axis `dim`, so that it
    smooths with the preset's sigma in voxels."""
    return _uniform(ELASTIC_SIGMA_VOX) / patch_size[dim]


def _magnitude(alpha, sigma, patch_size):
    """augscope's component alpha * G_sigma(U(-1, 1)) has the RMS alpha * sqrt(1/3 * prod(mean
    squared weights)) over the patch; batchgeneratorsv2 scales its component to a maximum, so
    that RMS times the expected max / RMS of its field gives the same expected RMS."""
    ms = np.prod([_mean_square_weight(int(n), float(sigma)) for n in patch_size])
    return alpha * np.sqrt(ms / 3.0) * _expected_max_over_rms(patch_size, sigma)


def elastic_magnitude(image, dim, patch_size, deformation_scale):
    """batchgeneratorsv2's maximum |displacement| (voxels) of component `dim`."""
    return _magnitude(_uniform(ELASTIC_ALPHA), deformation_scale * patch_size[dim], patch_size)


class PresetMirrorTransform(MirrorTransform):
    """MirrorTransform with the preset's probability per axis (batchgeneratorsv2's own mirrors
    every allowed axis with p 0.5)."""

    def get_parameters(self, **data_dict) -> dict:
        offset = NDIM - (data_dict["image"].ndim - 1)
        return {"axes": [i for i in self.allowed_axes if torch.rand(1) < P_MIRROR[i + offset]]}


def _mirror_axes():
    axes = tuple(a for a in range(NDIM) if P_MIRROR[a] > 0.0)
    return axes if axes else None


def _initial_patch(patch_size):
    """The patch that the data loader cuts around the sample's centre: the SpatialTransform
    samples every point of the final patch inside it, for every angle in the ranges (a grid of
    them; angles that may stay 0 included), the largest scale of each axis and the largest
    elastic magnitude, so that no padding shows where augscope would sample the scan."""
    n = len(patch_size)
    half = (np.array(patch_size, float) - 1.0) / 2.0
    scale = np.ones(n)
    if P_SCALING > 0:
        for a in range(n):
            r = SCALING[0] if len(SCALING) == 1 else SCALING[a + NDIM - n]
            scale[a] = max(1.0, r[1])
    reach = half.copy()
    if P_ELASTIC > 0:
        reach = reach + max(_magnitude(ELASTIC_ALPHA[1], s, patch_size) for s in ELASTIC_SIGMA_VOX)
    if n == 2:
        axes = [(0, ROTATION[0], P_ROTATION_PER_AXIS[0])]
    else:
        axes = [(a, ROTATION[a], P_ROTATION_PER_AXIS[a]) for a in range(3)]
    choices = []
    for _, r, p in axes:
        grid = list(np.linspace(r[0], r[1], 13)) if P_ROTATION > 0 and p > 0 else [0.0]
        if P_ROTATION < 1 or p < 1:
            grid.append(0.0)
        choices.append(grid)
    extent = np.zeros(n)
    for angles in itertools.product(*choices):
        # batchgeneratorsv2's matrix: Rz(b2) Ry(b1) Rx(b0) S with b = -a, input = matrix @ patch
        if n == 2:
            c, s = np.cos(-angles[0]), np.sin(-angles[0])
            rot = np.array([[c, -s], [s, c]])
        else:
            rot = np.eye(3)
            for axis, a in reversed(list(enumerate(angles))):
                c, s = np.cos(-a), np.sin(-a)
                i, j = [k for k in range(3) if k != axis]
                m = np.eye(3)
                m[i, i], m[i, j], m[j, i], m[j, j] = c, -s, s, c
                if axis == 1:
                    m[i, j], m[j, i] = s, -s
                rot = rot @ m
        extent = np.maximum(extent, np.abs(rot) @ (scale * reach))
    return [max(int(p), int(np.ceil(2.0 * e + 1.0))) for p, e in zip(patch_size, extent)]


class PresetSpatialTransform(SpatialTransform):
    """nnU-Net's SpatialTransform, with label ties settled as augscope settles them: grid_sample's
    nearest neighbour rounds a sample point exactly half-way between two voxels to the even one
    (nearbyint), augscope and scipy round it up (floor(x + 0.5)), so the segmentation is sampled
    1/1000 voxel further along every axis."""

    def _apply_to_segmentation(self, segmentation, **params):
        grid = params.get("grid")
        if self.mode_seg == "nearest" and grid is not None:
            size = torch.tensor(segmentation.shape[1:][::-1], dtype=grid.dtype)
            params = dict(params, grid=grid + 2e-3 / size)
        return super()._apply_to_segmentation(segmentation, **params)


class nnUNetTrainerAugscope(nnUNetTrainer):
    def configure_rotation_dummyDA_mirroring_and_inital_patch_size(self):
        _, dummy_2d, _, _ = super().configure_rotation_dummyDA_mirroring_and_inital_patch_size()
        patch_size = [int(i) for i in self.configuration_manager.patch_size]
        if len(patch_size) != NDIM:
            raise RuntimeError(
                f"nnUNetTrainerAugscope was exported for {NDIM}D patches, but this configuration's "
                f"patch is {len(patch_size)}D: export the preset with --ndim {len(patch_size)}")
        if dummy_2d:
            initial = [patch_size[0]] + _initial_patch(patch_size[1:])
        else:
            initial = _initial_patch(patch_size)
        mirror_axes = _mirror_axes()
        self.inference_allowed_mirroring_axes = mirror_axes
        return rotation_angle, dummy_2d, np.array(initial), mirror_axes

    @staticmethod
    def get_training_transforms(patch_size, rotation_for_DA, deep_supervision_scales, mirror_axes,
                                do_dummy_2d_data_aug, *args, **kwargs):
        transforms = nnUNetTrainer.get_training_transforms(
            patch_size, rotation_angle, deep_supervision_scales, mirror_axes,
            do_dummy_2d_data_aug, *args, **kwargs)
        for i, t in enumerate(transforms.transforms):
            if isinstance(t, SpatialTransform):
                t.__class__ = PresetSpatialTransform
                t.p_rotation = P_ROTATION
                t.rotation = rotation_angle
                t.p_rot_per_axis = 1.0
                t.p_scaling = P_SCALING
                t.scaling = scale_factor
                t.p_synchronize_scaling_across_axes = 0.0 if SCALE_PER_AXIS else 1.0
                t.p_elastic_deform = P_ELASTIC
                t.elastic_deform_scale = elastic_scale
                t.elastic_deform_magnitude = elastic_magnitude
                t.p_synchronize_def_scale_across_axes = 0.0
                t.mode_image = MODE_IMAGE
                t.padding_mode_image = PADDING_MODE_IMAGE
                t.padding_value_image = CVAL
                t.mode_seg = MODE_SEG
                if PADDING_MODE_IMAGE != "constant":
                    # labels follow the image's border rule (nnU-Net pads them with -1, then 0)
                    t.border_mode_seg = PADDING_MODE_IMAGE
            elif isinstance(t, MirrorTransform):
                transforms.transforms[i] = PresetMirrorTransform(t.allowed_axes)
        # nnU-Net's intensity steps give way to the preset's, at the same place: after the
        # spatial transform (and the dummy-2D conversion back), before the mirror.
        steps = [t for t in transforms.transforms
                 if not (isinstance(t, RandomTransform) and isinstance(t.transform, _INTENSITY))]
        at = next(i for i, t in enumerate(steps) if isinstance(t, SpatialTransform)) + 1
        if at < len(steps) and isinstance(steps[at], Convert2DTo3DTransform):
            at += 1
        steps[at:at] = intensity_transforms((0,) if do_dummy_2d_data_aug else None)
        transforms.transforms = steps
        return transforms
"#;

/// Python's `True` / `False`.
fn py_bool(b: bool) -> &'static str {
    if b { "True" } else { "False" }
}

fn py_tuple(v: &[String]) -> String {
    format!("({},)", v.join(", "))
}

/// batchgeneratorsv2's `padding_mode_image` for augscope's boundary mode, if it has one:
/// grid_sample pads with zeros (`constant` shifts the image so the padding is the value),
/// clamps (`border`) or reflects about the outer pixel edges (`reflection`, align_corners=False).
fn padding_mode(mode: &str) -> Option<&'static str> {
    match mode {
        "constant" | "grid-constant" => Some("constant"),
        "nearest" => Some("border"),
        "reflect" | "grid-mirror" => Some("reflection"),
        _ => None,
    }
}

/// The nnU-Net (batchgeneratorsv2) snippet of `p` for `ndim` spatial axes.
/// A sentence on its length: the preset's transform families map to the library's in the
/// library's own order, each beside the note that says where the library differs from augscope;
/// read top to bottom, the function is that mapping, and splitting it would scatter the table.
/// The preset's intensity steps as the items of a Python list, one per line.
fn intensity_list(p: &Preset) -> String {
    let items: String = p
        .intensity
        .iter()
        .filter_map(|s| s.batchgeneratorsv2())
        .map(|t| format!("\n        {t},"))
        .collect();
    if items.is_empty() {
        items
    } else {
        items + "\n    "
    }
}

pub(super) fn nnunet(p: &Preset, ndim: usize) -> String {
    let mut notes: Vec<String> = voxel_target_note(p, "nnU-Net (batchgeneratorsv2)")
        .into_iter()
        .collect();
    notes.extend(intensity_left_out(p, "batchgeneratorsv2", |s| {
        s.batchgeneratorsv2().is_some()
    }));
    let n_angles = if ndim == 3 { 3 } else { 1 };
    let (rotation, p_rot, p_rot_axis) = match &p.rotate {
        Some(r) => (
            (0..n_angles)
                .map(|a| pair(rad(rot_range(p, ndim, a))))
                .collect::<Vec<_>>(),
            r.p,
            (0..n_angles)
                .map(|a| f(axis_value(&r.p_axis, a).unwrap_or(1.0)))
                .collect::<Vec<_>>(),
        ),
        None => (
            vec![pair([0.0, 0.0]); n_angles],
            0.0,
            vec![f(1.0); n_angles],
        ),
    };
    let (scaling, p_scale, per_axis, split) = match &p.scale {
        Some(sc) => (
            sc.range.iter().map(|r| pair(*r)).collect::<Vec<_>>(),
            sc.p,
            sc.per_axis,
            sc.distribution == ScaleDistribution::Split,
        ),
        None => (vec![pair([1.0, 1.0])], 0.0, false, false),
    };
    if ndim == 3
        && per_axis
        && p.rotate.is_some()
        && p.scale.as_ref().is_some_and(|sc| sc.p > 0.0)
        && p.rotate.as_ref().is_some_and(|r| r.p > 0.0)
    {
        notes.push(
            "batchgeneratorsv2 scales before it turns (its affine is R S, augscope's S R^T): the \
             two agree for an isotropic scale, but per-axis scale factors together with a \
             rotation stretch other directions (measured on the MNI sample, rotation \
             (10°, -15°, 5°) with scale (1.2, 0.9, 1.1): 83.9 % of voxels within 1e-2 of \
             augscope's)"
                .into(),
        );
    }
    let (p_el, alpha, sigma) = match &p.elastic {
        Some(e) => {
            notes.push(
                "batchgeneratorsv2 draws normal noise, smooths it with an FFT gaussian (periodic) \
                 and scales each component to a maximum |displacement| (its magnitude); the \
                 snippet passes the preset's sigma in voxels and sets the magnitude so that the \
                 expected RMS displacement is augscope's. The field differs voxel by voxel and its \
                 RMS varies from draw to draw (measured, alpha 400, sigma 5 on a 63×78×66 patch, \
                 8 draws: augscope RMS 5.11, max 13.6 voxels; batchgeneratorsv2 RMS 5.28 \
                 (4.88 to 5.73), max 13.2)"
                    .into(),
            );
            if e.alpha[0] != e.alpha[1] || e.sigma[0] != e.sigma[1] {
                notes.push(
                    "batchgeneratorsv2 draws alpha and sigma for each displacement component \
                     apart; augscope draws one pair per sample"
                        .into(),
                );
            }
            (e.p, e.alpha, e.sigma)
        }
        None => (0.0, [0.0, 0.0], [1.0, 1.0]),
    };
    if p.translate.is_some() {
        notes.push("nnU-Net's SpatialTransform has no translation; it is left out".into());
    }
    if p.intensity.is_empty() {
        notes.push(
            "the preset has no intensity steps: the trainer trains without nnU-Net's seven \
             (noise, blur, brightness, contrast, low resolution, two gammas); the nnunet-v2 \
             preset's [[intensity]] entries bring them back"
                .into(),
        );
    }
    let s = &p.sampling;
    let mode_image = match s.order {
        0 => "nearest",
        _ => "bilinear",
    };
    if s.order == 3 {
        notes.push(
            "batchgeneratorsv2 resamples with torch grid_sample, which has no cubic B-spline \
             (its bicubic is another kernel): the preset's order 3 becomes bilinear (order 1)"
                .into(),
        );
    }
    let pad = padding_mode(&s.mode).unwrap_or("constant");
    match padding_mode(&s.mode) {
        None => notes.push(format!(
            "grid_sample pads with a value, the border or a reflection only: the preset's mode \
             {:?} becomes constant padding with cval {}",
            s.mode,
            f(s.cval)
        )),
        Some(_) if s.mode == "constant" => notes.push(
            "grid_sample interpolates between the image and its padding (augscope's mode \
             grid-constant); the preset's mode \"constant\" differs only where a sample point lies \
             less than one voxel outside the scan"
                .into(),
        ),
        Some(_) => {}
    }
    if s.label_order != 0 {
        notes.push(format!(
            "label_order {}: nnU-Net resamples labels by their interpolated one-hot channels \
             (mode_seg \"bilinear\"); augscope resamples label maps with order 0 (measured on the \
             MNI sample's tissue labels, rotation (11.5°, -17.2°, 5.7°) with scale 1.2: 99.3 % of \
             voxels equal)",
            s.label_order
        ));
    }
    if ndim == 3 {
        notes.push(
            "for anisotropic patches nnU-Net augments each slice in 2D (do_dummy_2d_data_aug): \
             then only the rotation about axis 0 and the scale of axes 1 and 2 apply"
                .into(),
        );
    }
    let mirror: Vec<String> = (0..ndim)
        .map(|a| {
            f(p.flip
                .as_ref()
                .and_then(|fl| axis_value(&fl.p, a))
                .unwrap_or(0.0))
        })
        .collect();

    let mut out = header(
        p,
        Target::Nnunet,
        "nnU-Net v2 (trainer subclass, nnunetv2 >= 2.5)",
        ndim,
    );
    out.push_str(
        "# Put this file in nnunetv2/training/nnUNetTrainer/ and train with -tr nnUNetTrainerAugscope.\n\
         # nnU-Net indexes array axes as augscope does; scaling > 1 samples a larger region (content\n\
         # smaller), as augscope. batchgeneratorsv2's matrix maps output to input points as augscope's\n\
         # transposed one, so its angles are augscope's negated. It resamples with torch grid_sample\n\
         # (align_corners=False): augscope's order 1 with mode grid-constant.\n",
    );
    out.push_str(&notes_block(&notes));
    let _ = write!(
        out,
        r#"import functools
import itertools

import numpy as np
import torch

from batchgeneratorsv2.transforms.intensity.brightness import MultiplicativeBrightnessTransform
from batchgeneratorsv2.transforms.intensity.contrast import BGContrast, ContrastTransform
from batchgeneratorsv2.transforms.intensity.gamma import GammaTransform
from batchgeneratorsv2.transforms.intensity.gaussian_noise import GaussianNoiseTransform
from batchgeneratorsv2.transforms.noise.gaussian_blur import GaussianBlurTransform
from batchgeneratorsv2.transforms.spatial.low_resolution import SimulateLowResolutionTransform
from batchgeneratorsv2.transforms.spatial.mirroring import MirrorTransform
from batchgeneratorsv2.transforms.spatial.spatial import SpatialTransform
from batchgeneratorsv2.transforms.utils.pseudo2d import Convert2DTo3DTransform
from batchgeneratorsv2.transforms.utils.random import RandomTransform
from nnunetv2.training.nnUNetTrainer.nnUNetTrainer import nnUNetTrainer

NDIM = {ndim}
# The preset in augscope's terms, per array axis ([z, y, x]; 2D [y, x]), angles in radians:
# 3D one angle range per axis, 2D the single angle's range.
ROTATION = {rotation}
P_ROTATION = {p_rot}
P_ROTATION_PER_AXIS = {p_rot_axis}
SCALING = {scaling}
SCALE_PER_AXIS = {per_axis}
SCALE_SPLIT = {split}
P_SCALING = {p_scale}
P_ELASTIC = {p_el}
ELASTIC_ALPHA = {alpha}
ELASTIC_SIGMA_VOX = {sigma}
P_MIRROR = {mirror}
MODE_IMAGE = "{mode_image}"
PADDING_MODE_IMAGE = "{pad}"
CVAL = {cval}
MODE_SEG = "{mode_seg}"
_INTENSITY = (GaussianNoiseTransform, GaussianBlurTransform, MultiplicativeBrightnessTransform,
              ContrastTransform, SimulateLowResolutionTransform, GammaTransform)


def intensity_transforms(ignore_axes):
    """The preset's intensity steps, batchgeneratorsv2's own transforms in the preset's order;
    `ignore_axes`: the axes nnU-Net's dummy-2D mode leaves at full resolution (else None)."""
    return [{intensity}]


"#,
        rotation = py_tuple(&rotation),
        p_rot = f(p_rot),
        p_rot_axis = py_tuple(&p_rot_axis),
        scaling = py_tuple(&scaling),
        per_axis = py_bool(per_axis),
        split = py_bool(split),
        p_scale = f(p_scale),
        p_el = f(p_el),
        alpha = pair(alpha),
        sigma = pair(sigma),
        mirror = py_tuple(&mirror),
        cval = f(s.cval),
        intensity = intensity_list(p),
        mode_seg = if s.label_order == 0 {
            "nearest"
        } else {
            "bilinear"
        },
    );
    out.push_str(BODY.trim_start());
    out
}
