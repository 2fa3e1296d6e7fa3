//! Reading a batchgenerators `SpatialTransform` keyword dict or an nnU-Net v1
//! `data_aug_params` dict (JSON) into a preset: the inverse of
//! [`super::interop::batchgenerators_params`]. A JSON object that holds a `"plan"` (a line of a
//! batch manifest, or an `augscope apply --report` file) becomes the preset that reproduces that
//! plan: every transform with p = 1 and ranges of one value, with its order, mode and cval. A
//! MONAI bundle config (`"_target_"` entries, as `preset export --to monai-bundle` writes) goes
//! to [`super::interop::import_bundle`].
//!
//! Both vocabularies index array axes `[z, y, x]` (angle_x / rotation_x is about axis 0) with
//! angles in radians, as augscope does internally; the preset file holds degrees.

use std::fmt::Write as _;

use serde_json::{Map, Value};

use crate::augment::preset::{
    ElasticSpec, FlipSpec, Preset, PresetError, Range, RotateSpec, SamplingSpec, ScaleDistribution,
    ScaleSpec, plan_ndim,
};
use crate::augment::{Plan, Space};

fn bad(why: impl Into<String>) -> PresetError {
    PresetError::Invalid {
        why: crate::augment::preset::escape_controls(&why.into()),
    }
}

fn get<'a>(m: &'a Map<String, Value>, keys: &[&str]) -> Option<(&'a str, &'a Value)> {
    keys.iter()
        .find_map(|k| m.get_key_value(*k).map(|(k, v)| (k.as_str(), v)))
}

fn num(m: &Map<String, Value>, keys: &[&str]) -> Result<Option<f64>, PresetError> {
    match get(m, keys) {
        None | Some((_, Value::Null)) => Ok(None),
        Some((_, Value::Number(n))) => Ok(n.as_f64()),
        Some((_, Value::Bool(b))) => Ok(Some(if *b { 1.0 } else { 0.0 })),
        Some((k, v)) => Err(bad(format!("{k} = {v} is not a number"))),
    }
}

fn flag(m: &Map<String, Value>, keys: &[&str]) -> Result<Option<bool>, PresetError> {
    match get(m, keys) {
        None | Some((_, Value::Null)) => Ok(None),
        Some((_, Value::Bool(b))) => Ok(Some(*b)),
        Some((_, Value::Number(n))) => Ok(Some(n.as_f64().unwrap_or(0.0) != 0.0)),
        Some((k, v)) => Err(bad(format!("{k} = {v} is not true or false"))),
    }
}

/// A `[lo, hi]` pair, or a single number `v` meaning `[v, v]` (batchgenerators accepts both).
fn range(m: &Map<String, Value>, keys: &[&str]) -> Result<Option<Range>, PresetError> {
    match get(m, keys) {
        None | Some((_, Value::Null)) => Ok(None),
        Some((_, Value::Number(n))) => {
            let v = n.as_f64().unwrap_or(0.0);
            Ok(Some([v, v]))
        }
        Some((k, Value::Array(a))) => match a.as_slice() {
            [Value::Number(lo), Value::Number(hi)] => Ok(Some([
                lo.as_f64().unwrap_or(0.0),
                hi.as_f64().unwrap_or(0.0),
            ])),
            _ => Err(bad(format!("{k} must be a pair [lo, hi] of numbers"))),
        },
        Some((k, v)) => Err(bad(format!("{k} = {v} is not a range [lo, hi]"))),
    }
}

fn round_deg(rad: f64) -> f64 {
    // Radians written by Python from degrees (15 / 360 * 2 pi) come back as 15.000000000000002;
    // 1e-9 degrees is far below anything a training pipeline can tell apart.
    let d = rad.to_degrees();
    let r = (d * 1e9).round() / 1e9;
    if r == 0.0 { 0.0 } else { r }
}

/// Reads a parameter dict. `text` is JSON, or a batchgenerators snippet written by
/// `augscope preset export`, whose dict sits between the `augscope-params` markers.
pub fn import(text: &str, name: &str) -> Result<Preset, PresetError> {
    let json = match (
        text.find("# augscope-params-begin"),
        text.find("# augscope-params-end"),
    ) {
        (Some(a), Some(b)) if a < b => {
            let inner = &text[a..b];
            // The dict sits between r""" and the last """ (one r""" alone is damaged too).
            let body = match (inner.find("r\"\"\""), inner.rfind("\"\"\"")) {
                (Some(s), Some(e)) => inner.get(s + 4..e),
                _ => None,
            };
            let Some(body) = body else {
                return Err(bad("the snippet's parameter block is damaged"));
            };
            body.to_string()
        }
        _ => text.to_string(),
    };
    let value: Value = serde_json::from_str(&json).map_err(|e| {
        if let Some(many) = several_lines(&json) {
            return many;
        }
        bad(format!(
            "not a JSON parameter dict (line {}, column {}: {e})",
            e.line(),
            e.column()
        ))
    })?;
    let Value::Object(m) = value else {
        return Err(bad("the parameter file must hold one JSON object"));
    };
    if holds_target(&Value::Object(m.clone())) {
        return super::interop::import_bundle(&json, name);
    }
    match m.get("plan") {
        Some(plan) => {
            let ndim = m.get("shape").and_then(Value::as_array).map(Vec::len);
            from_plan(plan, m.get("seed"), ndim, name)
        }
        None => from_params(&m, name),
    }
}

/// Whether a config holds MONAI bundle entries (`"_target_"` keys, at any depth).
fn holds_target(v: &Value) -> bool {
    match v {
        Value::Object(m) => m.contains_key("_target_") || m.values().any(holds_target),
        Value::Array(a) => a.iter().any(holds_target),
        _ => false,
    }
}

/// The error for a text of several JSON objects, one per line (a whole manifest), or `None`.
fn several_lines(text: &str) -> Option<PresetError> {
    let lines = text
        .lines()
        .filter(|l| serde_json::from_str::<Map<String, Value>>(l).is_ok())
        .count();
    (lines > 1).then(|| {
        bad(format!(
            "this holds {lines} JSON lines (a batch manifest?); import one sample's line, e.g. \
             `sed -n 3p manifest.jsonl > sample.json`"
        ))
    })
}

/// The preset that reproduces `plan` (p = 1, ranges of one value): the plan of a manifest line or
/// an `apply` report. Its elastic noise is the sample seed's, which the description names.
fn from_plan(
    plan: &Value,
    seed: Option<&Value>,
    shape_ndim: Option<usize>,
    name: &str,
) -> Result<Preset, PresetError> {
    let plan: Plan = serde_json::from_value(plan.clone())
        .map_err(|e| bad(format!("the \"plan\" is not an augscope plan: {e}")))?;
    if plan.out_shape.is_some() {
        return Err(bad(
            "the plan has an output shape of its own; a preset keeps the input's grid",
        ));
    }
    let ndim = shape_ndim.or_else(|| plan_ndim(&plan));
    if !plan.flip.is_empty() && ndim.is_none() {
        return Err(bad(
            "the plan flips some axes but does not say how many axes the image has (no \
             \"shape\" beside it)",
        ));
    }
    // The preset must reproduce the plan exactly: a plan that no image of its grid can take
    // (an axis it does not have, a value past the limits) is refused, never trimmed to fit.
    let grid = ndim
        .or_else(|| (plan.space == Space::Mm).then_some(plan.spacing_mm.len()))
        .unwrap_or(3);
    if let Some(&axis) = plan.flip.iter().find(|&&a| a >= grid) {
        return Err(bad(format!(
            "the plan flips axis {axis}, which a {grid}D image does not have"
        )));
    }
    plan.validate(grid)
        .map_err(|e| bad(format!("the \"plan\" cannot be applied: {e}")))?;
    // Without flips the number of axes is not needed.
    let mut preset = Preset::reproducing(&plan, ndim.unwrap_or(3))?;
    let mut description = format!(
        "Reproduces one plan exactly: every transform fires (p = 1) with the plan's values{}",
        ndim.map_or(String::new(), |n| format!(" ({n}D)"))
    );
    if let Some(e) = plan.elastic {
        let _ = write!(
            description,
            "; the elastic noise is seed {}'s, so sample it with --seed {}",
            e.seed, e.seed
        );
    } else if let Some(s) = seed.and_then(Value::as_u64) {
        let _ = write!(description, "; drawn as sample seed {s}");
    }
    description.push('.');
    preset.name = name.to_string();
    preset.description = description;
    preset.validate()?;
    Ok(preset)
}

/// The batchgenerators and nnU-Net keys the import reads; any other key is named as ignored.
const KNOWN: &[&str] = &[
    "do_elastic_deform",
    "do_elastic",
    "alpha",
    "elastic_deform_alpha",
    "sigma",
    "elastic_deform_sigma",
    "p_el_per_sample",
    "p_eldef",
    "do_rotation",
    "angle_x",
    "angle_y",
    "angle_z",
    "rotation_x",
    "rotation_y",
    "rotation_z",
    "p_rot_per_sample",
    "p_rot",
    "p_rot_per_axis",
    "rotation_p_per_axis",
    "do_scale",
    "do_scaling",
    "scale",
    "scale_range",
    "independent_scale_for_each_axis",
    "independent_scale_factor_for_each_axis",
    "p_scale_per_sample",
    "p_scale",
    "p_independent_scale_per_axis",
    "border_mode_data",
    "border_cval_data",
    "order_data",
    "border_mode_seg",
    "border_cval_seg",
    "order_seg",
    "do_mirror",
    "mirror_axes",
    "patch_size",
    "patch_center_dist_from_border",
    "random_crop",
    "data_key",
    "label_key",
    "random_crop_dist_to_border",
    "dummy_2D",
];

/// Builds a preset from batchgenerators `SpatialTransform` keywords and/or nnU-Net v1
/// `data_aug_params` keys.
pub fn from_params(m: &Map<String, Value>, name: &str) -> Result<Preset, PresetError> {
    let ignored = ignored_keys(m)?;
    let elastic = elastic_params(m)?;
    let rotate = rotate_params(m)?;
    let scale = scale_params(m)?;
    let flip = flip_params(m)?;
    let sampling = sampling_params(m)?;

    let mut description = String::new();
    if !ignored.is_empty() {
        description = format!(
            "Imported; keys without a spatial meaning for augscope were ignored: {}",
            ignored.join(", ")
        );
    }
    let preset = Preset {
        version: 1,
        name: name.to_string(),
        source: String::new(),
        description,
        // batchgenerators and nnU-Net augment in voxel space.
        space: crate::augment::Space::Voxel,
        flip,
        rotate,
        scale,
        translate: None,
        elastic,
        sampling,
        intensity: vec![],
        normalize: None,
    };
    preset.validate()?;
    Ok(preset)
}

/// The keys of `m` the import does not read, sorted; an error when it reads none of them.
fn ignored_keys(m: &Map<String, Value>) -> Result<Vec<&str>, PresetError> {
    let mut ignored: Vec<&str> = m
        .keys()
        .map(String::as_str)
        .filter(|k| !KNOWN.contains(k))
        .collect();
    ignored.sort_unstable();
    if ignored.len() == m.len() {
        return Err(bad(
            "none of the keys is a batchgenerators or nnU-Net augmentation parameter, and there \
             is no augscope \"plan\" (expected e.g. do_rotation, angle_x, scale, alpha, \
             mirror_axes)",
        ));
    }
    Ok(ignored)
}

/// The elastic deformation of the dict, when it turns one on.
fn elastic_params(m: &Map<String, Value>) -> Result<Option<ElasticSpec>, PresetError> {
    if !flag(m, &["do_elastic_deform", "do_elastic"])?.unwrap_or(false) {
        return Ok(None);
    }
    let alpha = range(m, &["alpha", "elastic_deform_alpha"])?.unwrap_or([0.0, 1000.0]);
    let sigma = range(m, &["sigma", "elastic_deform_sigma"])?.unwrap_or([10.0, 13.0]);
    let p = num(m, &["p_el_per_sample", "p_eldef"])?.unwrap_or(1.0);
    Ok(Some(ElasticSpec { p, alpha, sigma }))
}

/// The rotation of the dict in degrees, when it turns one on.
fn rotate_params(m: &Map<String, Value>) -> Result<Option<RotateSpec>, PresetError> {
    if !flag(m, &["do_rotation"])?.unwrap_or(false) {
        return Ok(None);
    }
    let mut ranges = vec![];
    for keys in [
        ["angle_x", "rotation_x"],
        ["angle_y", "rotation_y"],
        ["angle_z", "rotation_z"],
    ] {
        if let Some(r) = range(m, &keys)? {
            ranges.push([round_deg(r[0]), round_deg(r[1])]);
        }
    }
    if ranges.is_empty() {
        ranges.push([0.0, 360.0]);
    }
    if ranges.windows(2).all(|w| w[0] == w[1]) {
        ranges.truncate(1);
    }
    let p = num(m, &["p_rot_per_sample", "p_rot"])?.unwrap_or(1.0);
    let p_axis = num(m, &["p_rot_per_axis", "rotation_p_per_axis"])?.unwrap_or(1.0);
    Ok(Some(RotateSpec {
        p,
        p_axis: vec![p_axis],
        range_deg: ranges,
        range_deg_2d: None,
    }))
}

/// The scaling of the dict, when it turns one on.
fn scale_params(m: &Map<String, Value>) -> Result<Option<ScaleSpec>, PresetError> {
    if !flag(m, &["do_scale", "do_scaling"])?.unwrap_or(false) {
        return Ok(None);
    }
    let r = range(m, &["scale", "scale_range"])?.unwrap_or([0.75, 1.25]);
    let per_axis = flag(
        m,
        &[
            "independent_scale_for_each_axis",
            "independent_scale_factor_for_each_axis",
        ],
    )?
    .unwrap_or(false);
    let p = num(m, &["p_scale_per_sample", "p_scale"])?.unwrap_or(1.0);
    // batchgenerators' augment_spatial always draws below and above 1 with equal chance.
    Ok(Some(ScaleSpec {
        p,
        range: vec![r],
        per_axis,
        distribution: ScaleDistribution::Split,
    }))
}

/// The mirroring of the dict: p = 0.5 on each axis of `mirror_axes`, unless `do_mirror` is off.
fn flip_params(m: &Map<String, Value>) -> Result<Option<FlipSpec>, PresetError> {
    let mirror = flag(m, &["do_mirror"])?.unwrap_or(true);
    match (mirror, get(m, &["mirror_axes"])) {
        (true, Some((_, Value::Array(axes)))) if !axes.is_empty() => {
            let mut p = vec![0.0; 3];
            for a in axes {
                let Some(i) = a.as_u64().filter(|&i| i < 3) else {
                    return Err(bad(format!("mirror_axes holds {a}, not an axis 0, 1 or 2")));
                };
                p[i as usize] = 0.5;
            }
            // Trailing axes that never mirror are dropped so that a 2D dict stays 2D-sized.
            while p.len() > 1 && p.last() == Some(&0.0) {
                p.pop();
            }
            if p.iter().all(|&q| q == 0.5) {
                p.truncate(1);
            }
            Ok(Some(FlipSpec {
                p,
                after_intensity: false,
            }))
        }
        (_, Some((_, Value::Array(_)))) | (_, None) | (false, _) => Ok(None),
        (_, Some((_, v))) => Err(bad(format!("mirror_axes = {v} is not a list of axes"))),
    }
}

/// The image's border mode, cval and spline order and the labels' order.
fn sampling_params(m: &Map<String, Value>) -> Result<SamplingSpec, PresetError> {
    let mut sampling = SamplingSpec::default();
    if let Some((_, v)) = get(m, &["border_mode_data"]) {
        sampling.mode = v
            .as_str()
            .ok_or_else(|| bad(format!("border_mode_data = {v} is not a mode name")))?
            .to_string();
    }
    if let Some(v) = num(m, &["border_cval_data"])? {
        sampling.cval = v;
    }
    sampling.order = spline_order(m, "order_data", &[0, 1, 3])?.unwrap_or(3);
    sampling.label_order = spline_order(m, "order_seg", &[0, 1, 2, 3, 4, 5])?.unwrap_or(0);
    Ok(sampling)
}

/// The spline order under `key`, one of `allowed`: a whole number, never rounded or clamped
/// into one (3.9 is not order 3, -1 is not order 0).
fn spline_order(
    m: &Map<String, Value>,
    key: &str,
    allowed: &[u32],
) -> Result<Option<u32>, PresetError> {
    let v = match m.get(key) {
        None | Some(Value::Null) => return Ok(None),
        Some(v) => v,
    };
    let order = v
        .as_f64()
        .filter(|o| o.fract() == 0.0 && *o >= 0.0 && *o <= 5.0)
        .map(|o| o as u32)
        .filter(|o| allowed.contains(o));
    let names: Vec<String> = allowed.iter().map(u32::to_string).collect();
    order.map(Some).ok_or_else(|| {
        bad(format!(
            "{key} = {v} is not a spline order augscope takes here (expected {})",
            names.join(", ")
        ))
    })
}
