//! batchgenerators 0.25: `SpatialTransform` + `MirrorTransform` keyword arguments.

use super::{
    Preset, ScaleDistribution, Target, all_equal, axis_value, header, intensity_left_out,
    notes_block, rad, rot_range, voxel_target_note,
};
use std::fmt::Write as _;

use serde_json::{Map, Value, json};

/// The keyword arguments of batchgenerators' `SpatialTransform` (0.25) plus `mirror_axes`, and
/// the notes on what they cannot hold.
pub fn batchgenerators_params(p: &Preset, ndim: usize) -> (Map<String, Value>, Vec<String>) {
    let mut m = Map::new();
    let mut notes: Vec<String> =
        intensity_left_out(p, "batchgenerators 0.25's parameter dict", |_| false);
    notes.extend(voxel_target_note(p, "batchgenerators"));
    match &p.elastic {
        Some(e) => {
            m.insert("do_elastic_deform".into(), json!(true));
            m.insert("alpha".into(), json!(e.alpha));
            m.insert("sigma".into(), json!(e.sigma));
            m.insert("p_el_per_sample".into(), json!(e.p));
        }
        None => {
            m.insert("do_elastic_deform".into(), json!(false));
        }
    }
    match &p.rotate {
        Some(r) => {
            m.insert("do_rotation".into(), json!(true));
            let names = ["angle_x", "angle_y", "angle_z"];
            let n = if ndim == 3 { 3 } else { 1 };
            for (axis, name) in names.iter().enumerate().take(n) {
                m.insert((*name).into(), json!(rad(rot_range(p, ndim, axis))));
            }
            m.insert("p_rot_per_sample".into(), json!(r.p));
            let p_axis: Vec<f64> = (0..n)
                .map(|a| axis_value(&r.p_axis, a).unwrap_or(1.0))
                .collect();
            if !all_equal(&p_axis) {
                notes.push(format!(
                    "batchgenerators has one p_rot_per_axis for all axes; the preset's per-axis \
                     probabilities {p_axis:?} are replaced by their mean"
                ));
            }
            let mean = p_axis.iter().sum::<f64>() / n as f64;
            m.insert("p_rot_per_axis".into(), json!(mean));
        }
        None => {
            m.insert("do_rotation".into(), json!(false));
        }
    }
    match &p.scale {
        Some(sc) => {
            m.insert("do_scale".into(), json!(true));
            let lo = sc.range.iter().map(|r| r[0]).fold(f64::INFINITY, f64::min);
            let hi = sc
                .range
                .iter()
                .map(|r| r[1])
                .fold(f64::NEG_INFINITY, f64::max);
            if sc.range.len() > 1 && !sc.range.windows(2).all(|w| w[0] == w[1]) {
                notes.push(format!(
                    "batchgenerators draws every axis from one scale range; the per-axis ranges \
                     are merged into [{lo}, {hi}]"
                ));
            }
            m.insert("scale".into(), json!([lo, hi]));
            m.insert("independent_scale_for_each_axis".into(), json!(sc.per_axis));
            m.insert("p_scale_per_sample".into(), json!(sc.p));
            notes.extend(scale_note(sc.distribution, lo, hi));
        }
        None => {
            m.insert("do_scale".into(), json!(false));
        }
    }
    if p.translate.is_some() {
        notes.push(
            "batchgenerators' SpatialTransform has no translation (it only moves the patch centre \
             with random_crop); the preset's translation is left out"
                .into(),
        );
    }
    let s = &p.sampling;
    m.insert("border_mode_data".into(), json!(s.mode));
    m.insert("border_cval_data".into(), json!(s.cval));
    m.insert("order_data".into(), json!(s.order));
    // augscope resamples label maps with the image's boundary mode and cval 0.
    m.insert("border_mode_seg".into(), json!(s.mode));
    m.insert("border_cval_seg".into(), json!(0));
    m.insert("order_seg".into(), json!(s.label_order));
    let mut mirror = vec![];
    if let Some(fl) = &p.flip {
        for axis in 0..ndim {
            let pa = axis_value(&fl.p, axis).unwrap_or(0.0);
            if pa > 0.0 {
                mirror.push(axis);
                if pa != 0.5 {
                    notes.push(format!(
                        "batchgenerators mirrors each allowed axis with p 0.5; axis {axis} has p \
                         {pa} in the preset and is mirrored with p 0.5 in training"
                    ));
                }
            }
        }
    }
    m.insert("mirror_axes".into(), json!(mirror));
    (m, notes)
}

/// What batchgenerators 0.25 draws for `scale = (lo, hi)` where that differs from the preset.
///
/// `augment_spatial` draws each factor as `U(lo, 1)` if `np.random.random() < 0.5 and lo < 1`,
/// else `U(max(lo, 1), hi)`. So for `lo >= 1` it draws `U(lo, hi)` (both distributions); for
/// `lo < 1 < hi` below and above 1 with equal chance (augscope's `split`); for `hi == 1` the
/// factor is 1 in half of the draws; and for `hi < 1` the second branch is `U(1, hi)`, i.e.
/// `U(hi, 1)`: no range below 1, not even one fixed value, can be held.
fn scale_note(dist: ScaleDistribution, lo: f64, hi: f64) -> Option<String> {
    if lo >= 1.0 || dist == ScaleDistribution::Split {
        // augscope's split is batchgenerators' draw, for every range.
        return None;
    }
    if hi < 1.0 {
        return Some(format!(
            "batchgenerators cannot hold a scale range below 1: for scale = [{lo}, {hi}] it draws \
             U({lo}, 1) or U({hi}, 1) with equal chance, so the factors reach up to 1 (a fixed \
             factor s < 1 becomes U(s, 1))"
        ));
    }
    Some(if hi > 1.0 {
        "batchgenerators draws scales below and above 1 with equal chance (augscope's \
         distribution = \"split\"); the preset draws uniformly"
            .into()
    } else {
        format!(
            "batchgenerators keeps the scale at 1 in half of the draws and draws U({lo}, 1) in \
             the other half (augscope's distribution = \"split\"); the preset draws uniformly"
        )
    })
}

pub(super) fn batchgenerators(p: &Preset, ndim: usize) -> String {
    let (params, notes) = batchgenerators_params(p, ndim);
    let json = serde_json::to_string_pretty(&Value::Object(params)).unwrap_or_default();
    let mut s = header(
        p,
        Target::Batchgenerators,
        "batchgenerators 0.25 (SpatialTransform + MirrorTransform)",
        ndim,
    );
    s.push_str(
        "# Arrays are (b, c, z, y, x) as in augscope: angle_x rotates about array axis 0. Angles in\n\
         # radians; scale > 1 samples a larger region (content smaller) in both; alpha and sigma in\n\
         # voxels, the same displacement alpha * gaussian_filter(U(-1, 1), sigma) (only the noise\n\
         # differs). The patch is the whole array, centred (random_crop=False).\n",
    );
    s.push_str(&notes_block(&notes));
    let _ = write!(
        s,
        r#"import json

from batchgenerators.transforms.abstract_transforms import Compose
from batchgenerators.transforms.spatial_transforms import MirrorTransform, SpatialTransform

# augscope-params-begin
PARAMS = json.loads(r"""
{json}
""")
# augscope-params-end


def get_transforms(patch_size):
    """The augmentation for arrays of spatial shape `patch_size` (the output keeps that shape)."""
    params = dict(PARAMS)
    mirror_axes = tuple(params.pop("mirror_axes"))
    transforms = [
        SpatialTransform(
            tuple(patch_size), patch_center_dist_from_border=None, random_crop=False, **params
        )
    ]
    if mirror_axes:
        transforms.append(MirrorTransform(axes=mirror_axes))
    return Compose(transforms)
"#
    );
    s
}
