//! The MONAI pipeline of a preset as the `transforms` part of a MONAI bundle config (JSON, read by
//! `monai.bundle.ConfigParser`), rendered from the same model as the Python snippet
//! ([`super::monai::pipeline`]), and [`import_bundle`], which reads such a config back.
//!
//! Layout: `train#preprocessing` is the `Compose` (lazy, with the modes per key in `overrides`);
//! top-level `keys`, `modes`, `padding` and `spacing_mm` are referenced from it (`@modes`), a
//! millimetre translation is an expression (`"$6.0 / @spacing_mm#0"`) and a joint probability
//! `"$0.7 * 0.5"`. The isotropic scale is `rand_isotropic_scaled`, one expression that builds a
//! RandAffined whose scale draws are tied (as the snippet's class). Keys starting and ending with
//! `_` are ignored by ConfigParser inside a component (`_desc_`) and unreferenced at the top level
//! (`_notes_`, `_augscope_`); `_augscope_` keeps the preset fields MONAI has no place for (name,
//! space, cval, label order, scale distribution), so that the import gives back the same preset.

use super::{
    Preset, PresetError, Range, ScaleDistribution, Space, Target, Unit, f, verified_against,
    x_first,
};
use serde_json::{Map, Value, json};

use super::monai::{Arg, Entry, Kind, Num, pipeline};
use crate::augment::preset::{
    ElasticSpec, FlipSpec, RotateSpec, SamplingSpec, ScaleSpec, TranslateSpec,
};
use crate::core::intensity::{Call, IntensitySpec, Normalize};

/// The isotropic scale as one ConfigParser expression (the snippet's `RandIsotropicScaled`).
const ISOTROPIC_EXPR: &str = "$lambda scale_range, **kw: (t := monai.transforms.RandAffined(\
scale_range=scale_range, **kw), g := t.rand_affine.rand_affine_grid, d := g.randomize, \
setattr(g, 'randomize', lambda data=None: (d(data), setattr(g, 'scale_params', \
[g.scale_params[0]] * len(g.scale_params)))), t)[-1]";

fn num_json(n: Num) -> Value {
    match n {
        Num::Lit(v) => json!(v),
        Num::PerMm(v, i) => json!(format!("${} / @spacing_mm#{i}", f(v))),
        Num::Prod(a, b) => json!(format!("${} * {}", f(a), f(b))),
    }
}

fn arg_json(a: &Arg) -> Value {
    match a {
        Arg::Ranges(r) => Value::Array(
            r.iter()
                .map(|g| Value::Array(vec![num_json(g[0]), num_json(g[1])]))
                .collect(),
        ),
        Arg::Range(g) => json!([g[0], g[1]]),
        Arg::Int(i) => json!(i),
    }
}

fn entry_json(e: &Entry) -> Value {
    let mut m = Map::new();
    let target = match e.kind {
        Kind::RandIsotropicScaled => "@rand_isotropic_scaled",
        k => k.name(),
    };
    m.insert("_target_".into(), json!(target));
    m.insert("keys".into(), json!("@keys"));
    m.insert("prob".into(), num_json(e.prob));
    for (k, a) in &e.args {
        m.insert((*k).into(), arg_json(a));
    }
    if e.kind.resamples() {
        m.insert("mode".into(), json!("@modes"));
        m.insert("padding_mode".into(), json!("@padding"));
    }
    if let Some(c) = &e.comment {
        m.insert("_desc_".into(), json!(c));
    }
    Value::Object(m)
}

/// Whether `target` is a MONAI transform an intensity family or the normalisation exports to.
fn is_intensity_target(target: &str) -> bool {
    target == "ScaleIntensityRanged"
        || IntensitySpec::families()
            .iter()
            .filter_map(IntensitySpec::monai)
            .any(|c| c.class == target)
}

/// A MONAI transform on the image key, as the bundle's JSON.
fn call_json(c: &Call) -> Value {
    let mut m = Map::new();
    m.insert("_target_".into(), json!(c.class));
    m.insert("keys".into(), json!("@keys#0"));
    for (k, v) in c.json_args() {
        m.insert(k.into(), v);
    }
    Value::Object(m)
}

/// What the preset's name is stored behind in `_augscope_`.
const NAME_PREFIX: &str = "text: ";

/// The bundle config of `p` for `ndim` spatial axes, as pretty JSON.
pub(super) fn monai_bundle(p: &Preset, ndim: usize) -> String {
    let pl = pipeline(p, ndim);
    let mut root = Map::new();
    let name = if p.name.is_empty() {
        "unnamed"
    } else {
        &p.name
    };
    root.insert(
        "_generated_by_".into(),
        json!(format!(
            "augscope {} from the preset \"{name}\" for a MONAI bundle ({ndim}D)",
            env!("CARGO_PKG_VERSION")
        )),
    );
    root.insert(
        "_verified_against_".into(),
        json!(verified_against(Target::MonaiBundle)),
    );
    let mut notes = vec![
        "MONAI indexes spatial axes x first: augscope axis a is MONAI spatial axis ndim-1-a, and \
         the angles keep their signs; scale_range holds s - 1; an integer mode is the spline \
         order, resampled by scipy's map_coordinates; the lazy Compose resamples the affine \
         transforms and flips once, as augscope does"
            .to_string(),
    ];
    notes.extend(pl.notes.iter().cloned());
    if let Some(n) = p.normalize.as_ref().filter(|n| n.monai().is_none()) {
        notes.push(n.note("MONAI"));
    }
    root.insert("_notes_".into(), json!(notes));
    root.insert(
        "_augscope_".into(),
        json!({
            // Prefixed, so that no preset name can start with MONAI's `$` (an expression that
            // ConfigParser evaluates), `@` (a reference) or `%` (a macro).
            "name": format!("{NAME_PREFIX}{}", p.name),
            "space": p.space.to_string(),
            "cval": p.sampling.cval,
            "label_order": p.sampling.label_order,
            "scale_distribution": p.scale.as_ref().map(|s| match s.distribution {
                ScaleDistribution::Uniform => "uniform",
                ScaleDistribution::Split => "split",
            }),
            "range_deg_2d": p.rotate.as_ref().and_then(|r| r.range_deg_2d),
            // MONAI's flips act with the spatial transforms (a NOTE says so where it matters).
            "flip_after_intensity": p.flip.as_ref().is_some_and(|f| f.after_intensity),
            // Every step, for the import: the MONAI families also run above, the others are
            // left out (a NOTE each).
            "intensity": p.intensity,
            "normalize": p.normalize,
        }),
    );
    root.insert("keys".into(), json!(["image", "label"]));
    root.insert("modes".into(), json!([pl.order, 0]));
    root.insert("padding".into(), json!([pl.mode, "constant"]));
    root.insert("spacing_mm".into(), json!(vec![1.0; ndim]));
    if pl.has(Kind::RandIsotropicScaled) {
        root.insert("rand_isotropic_scaled".into(), json!(ISOTROPIC_EXPR));
    }
    let mut transforms: Vec<Value> = pl.entries.iter().map(entry_json).collect();
    // The normalisation first, as training's pipeline runs it (the import reads it back from
    // `_augscope_`).
    if let Some(c) = p.normalize.as_ref().and_then(Normalize::monai) {
        transforms.insert(0, call_json(&c));
    }
    // The MONAI intensity families, on the image key, after the resample (the import reads them
    // back from `_augscope_`, with every other step).
    for c in p.intensity.iter().filter_map(|s| s.monai()) {
        transforms.push(call_json(&c));
    }
    root.insert(
        "train".into(),
        json!({ "preprocessing": {
            "_target_": "Compose",
            "lazy": true,
            "overrides": {
                "image": { "mode": "@modes#0", "padding_mode": "@padding#0" },
                "label": { "mode": "@modes#1", "padding_mode": "@padding#1" },
            },
            "transforms": transforms,
        }}),
    );
    let mut s = serde_json::to_string_pretty(&Value::Object(root)).unwrap_or_default();
    s.push('\n');
    s
}

fn bad(why: impl Into<String>) -> PresetError {
    PresetError::Invalid {
        why: crate::augment::preset::escape_controls(&why.into()),
    }
}

/// Values written as `1 + (s - 1)` or radians of degrees come back within an ulp or two; this
/// rounds them to 12 decimals so that the preset reads back as it was written.
fn tidy(v: f64) -> f64 {
    let r = (v * 1e12).round() / 1e12;
    if (r - v).abs() <= 1e-9 * v.abs().max(1.0) {
        r
    } else {
        v
    }
}

/// A number of the config: a literal, `"$a / @spacing_mm#i"` (millimetres) or `"$a * b"`.
fn read_num(v: &Value, what: &str) -> Result<Num, PresetError> {
    match v {
        Value::Number(n) => n
            .as_f64()
            .map(Num::Lit)
            .ok_or_else(|| bad(format!("{what}: {v} is not a number"))),
        Value::String(s) => {
            let e = s
                .strip_prefix('$')
                .ok_or_else(|| bad(format!("{what}: '{s}' is not a number")))?;
            if let Some((a, i)) = e.split_once(" / @spacing_mm#") {
                let a: f64 = a
                    .trim()
                    .parse()
                    .map_err(|_| bad(format!("{what}: '{s}' is not a number augscope writes")))?;
                let i: usize = i
                    .trim()
                    .parse()
                    .map_err(|_| bad(format!("{what}: '{s}' is not a number augscope writes")))?;
                return Ok(Num::PerMm(a, i));
            }
            if let Some((a, b)) = e.split_once(" * ") {
                let a: f64 = a
                    .trim()
                    .parse()
                    .map_err(|_| bad(format!("{what}: '{s}' is not a number augscope writes")))?;
                let b: f64 = b
                    .trim()
                    .parse()
                    .map_err(|_| bad(format!("{what}: '{s}' is not a number augscope writes")))?;
                return Ok(Num::Prod(a, b));
            }
            Err(bad(format!(
                "{what}: the expression '{s}' is not one augscope writes \
                 (a number, '$V / @spacing_mm#I' or '$P * Q')"
            )))
        }
        _ => Err(bad(format!("{what}: {v} is not a number"))),
    }
}

fn lit(n: Num, what: &str) -> Result<f64, PresetError> {
    match n {
        Num::Lit(v) => Ok(v),
        _ => Err(bad(format!("{what} must be a plain number here"))),
    }
}

fn read_ranges(v: &Value, what: &str) -> Result<Vec<[Num; 2]>, PresetError> {
    let a = v
        .as_array()
        .ok_or_else(|| bad(format!("{what} is not a list of [lo, hi] ranges")))?;
    a.iter()
        .enumerate()
        .map(|(i, g)| match g.as_array().map(|g| g.as_slice()) {
            Some([lo, hi]) => Ok([
                read_num(lo, &format!("{what}[{i}]"))?,
                read_num(hi, &format!("{what}[{i}]"))?,
            ]),
            _ => Err(bad(format!("{what}[{i}] = {g} is not a [lo, hi] range"))),
        })
        .collect()
}

fn lit_ranges(r: &[[Num; 2]], what: &str) -> Result<Vec<Range>, PresetError> {
    r.iter()
        .map(|g| Ok([lit(g[0], what)?, lit(g[1], what)?]))
        .collect()
}

/// One value for all axes when every axis holds the same.
fn compact<T: Clone + PartialEq>(v: Vec<T>) -> Vec<T> {
    if !v.is_empty() && v.iter().all(|x| *x == v[0]) {
        vec![v[0].clone()]
    } else {
        v
    }
}

/// Reads a bundle config written by `augscope preset export --to monai-bundle` back into a preset
/// named `name` (the config's own name when empty). An entry augscope does not write is an error
/// that names it, never a silently different preset.
pub fn import_bundle(text: &str, name: &str) -> Result<Preset, PresetError> {
    let root: Value = serde_json::from_str(text).map_err(|e| bad(format!("not JSON: {e}")))?;
    let root = root
        .as_object()
        .ok_or_else(|| bad("a bundle config is a JSON object"))?;
    let (transforms, ndim) = read_layout(root)?;
    let aug = root.get("_augscope_").and_then(Value::as_object);
    let space: Space = match aug_str(aug, "space") {
        Some(s) => s.parse().map_err(bad)?,
        None => Space::Voxel,
    };
    let sampling = read_sampling(root, aug)?;
    let distribution = match aug_str(aug, "scale_distribution") {
        Some("split") => ScaleDistribution::Split,
        _ => ScaleDistribution::Uniform,
    };
    let mut preset = Preset {
        version: 1,
        name: preset_name(name, aug),
        source: String::new(),
        description: String::new(),
        space,
        flip: None,
        rotate: None,
        scale: None,
        translate: None,
        elastic: None,
        sampling,
        intensity: vec![],
        normalize: None,
    };
    let rotations = read_transforms(transforms, ndim, distribution, &mut preset)?;
    preset.rotate = merge_rotations(&rotations, ndim)?;
    if let Some(n) = aug
        .and_then(|a| a.get("normalize"))
        .filter(|n| !n.is_null())
    {
        preset.normalize = Some(serde_json::from_value(n.clone()).map_err(|e| {
            bad(format!(
                "_augscope_ normalize is not a normalisation method: {e}"
            ))
        })?);
    }
    if let Some(steps) = aug.and_then(|a| a.get("intensity")) {
        preset.intensity = serde_json::from_value(steps.clone()).map_err(|e| {
            bad(format!(
                "_augscope_ intensity is not a list of intensity steps: {e}"
            ))
        })?;
    }
    if let (Some(r), Some(g)) = (preset.rotate.as_mut(), range_deg_2d(aug)) {
        r.range_deg_2d = Some(g);
    }
    if let Some(f) = preset.flip.as_mut() {
        f.after_intensity = aug
            .and_then(|a| a.get("flip_after_intensity"))
            .and_then(Value::as_bool)
            .unwrap_or(false);
    }
    preset.validate()?;
    Ok(preset)
}

/// A rotation entry of the config: its probability and its ranges in radians, x first.
type RotationEntry = (Num, Vec<Range>);

/// The config's transform list and its number of axes (the length of `spacing_mm`, 2 or 3).
fn read_layout(root: &Map<String, Value>) -> Result<(&[Value], usize), PresetError> {
    let transforms = root
        .get("train")
        .and_then(|t| t.get("preprocessing"))
        .and_then(|t| t.get("transforms"))
        .and_then(Value::as_array)
        .ok_or_else(|| bad("no train#preprocessing#transforms list"))?;
    let ndim = root
        .get("spacing_mm")
        .and_then(Value::as_array)
        .map(Vec::len)
        .ok_or_else(|| bad("no spacing_mm list (it gives the number of axes)"))?;
    if !(2..=3).contains(&ndim) {
        return Err(bad(format!(
            "spacing_mm holds {ndim} values (expected 2 or 3)"
        )));
    }
    Ok((transforms, ndim))
}

/// The string stored under `k` in the config's `_augscope_` fields.
fn aug_str<'a>(aug: Option<&'a Map<String, Value>>, k: &str) -> Option<&'a str> {
    aug.and_then(|a| a.get(k)).and_then(Value::as_str)
}

/// The preset's name: `name`, or the one stored in `_augscope_` when `name` is empty.
fn preset_name(name: &str, aug: Option<&Map<String, Value>>) -> String {
    if name.is_empty() {
        let stored = aug_str(aug, "name").unwrap_or_default();
        stored
            .strip_prefix(NAME_PREFIX)
            .unwrap_or(stored)
            .to_string()
    } else {
        name.to_string()
    }
}

/// The sampling of the config: `modes`, `padding` and the cval and label order of `_augscope_`.
fn read_sampling(
    root: &Map<String, Value>,
    aug: Option<&Map<String, Value>>,
) -> Result<SamplingSpec, PresetError> {
    let mut sampling = SamplingSpec::default();
    let modes = root.get("modes");
    match modes.and_then(Value::as_array).map(|a| a.as_slice()) {
        Some([Value::Number(o), Value::Number(l)]) if l.as_u64() == Some(0) => {
            sampling.order = o
                .as_u64()
                .and_then(|o| u32::try_from(o).ok())
                .ok_or_else(|| bad(format!("modes[0] = {o} is not a spline order")))?;
        }
        _ => {
            return Err(bad(format!(
                "modes = {}: expected [ORDER, 0] (image spline order, nearest labels)",
                json_or_missing(modes)
            )));
        }
    }
    let padding = root.get("padding");
    match padding.and_then(Value::as_array).map(|a| a.as_slice()) {
        Some([Value::String(m), Value::String(l)]) if l == "constant" => {
            sampling.mode = m.clone();
        }
        _ => {
            return Err(bad(format!(
                "padding = {}: expected [MODE, \"constant\"]",
                json_or_missing(padding)
            )));
        }
    }
    if let Some(c) = aug.and_then(|a| a.get("cval")).and_then(Value::as_f64) {
        sampling.cval = c;
    }
    if let Some(l) = aug
        .and_then(|a| a.get("label_order"))
        .and_then(Value::as_u64)
    {
        sampling.label_order = u32::try_from(l).map_err(|_| {
            bad(format!(
                "_augscope_ label_order = {l} is not a spline order"
            ))
        })?;
    }
    Ok(sampling)
}

/// A config value as JSON for a message (`[3, 1]`), or `missing`.
fn json_or_missing(v: Option<&Value>) -> String {
    v.map_or_else(|| "missing".to_string(), Value::to_string)
}

/// Reads every transform entry into `preset` (translate, scale, elastic, flip) and returns the
/// rotation entries, which are merged afterwards.
fn read_transforms(
    transforms: &[Value],
    ndim: usize,
    distribution: ScaleDistribution,
    preset: &mut Preset,
) -> Result<Vec<RotationEntry>, PresetError> {
    let mut flip_p = vec![0.0; ndim];
    let mut rotations: Vec<RotationEntry> = vec![];
    for (i, t) in transforms.iter().enumerate() {
        let m = t
            .as_object()
            .ok_or_else(|| bad(format!("transforms[{i}] is not an object")))?;
        let target = m.get("_target_").and_then(Value::as_str).unwrap_or("?");
        if is_intensity_target(target) {
            // An intensity step: the import takes the steps from `_augscope_`.
            continue;
        }
        let what = format!("transforms[{i}] ({target})");
        let mut args: Vec<&str> = m
            .keys()
            .map(String::as_str)
            .filter(|k| {
                !matches!(
                    *k,
                    "_target_" | "keys" | "prob" | "mode" | "padding_mode" | "_desc_"
                )
            })
            .collect();
        args.sort_unstable();
        let prob = read_num(
            m.get("prob")
                .ok_or_else(|| bad(format!("{what} has no prob")))?,
            &format!("{what} prob"),
        )?;
        match (target, args.as_slice()) {
            ("RandAffined", ["translate_range"]) => {
                preset.translate = Some(read_translate(m, &what, prob)?);
            }
            ("RandAffined", ["scale_range"]) | ("@rand_isotropic_scaled", ["scale_range"]) => {
                let iso = target.starts_with('@');
                preset.scale = Some(read_scale(m, &what, prob, iso, distribution)?);
            }
            ("RandAffined", ["rotate_range"]) => {
                rotations.push((prob, read_rotate(m, &what, ndim)?));
            }
            ("Rand3DElasticd", ["magnitude_range", "sigma_range"]) => {
                preset.elastic = Some(read_elastic(m, &what, prob)?);
            }
            ("RandFlipd", ["spatial_axis"]) => {
                let ax = entry_arg(m, &what, "spatial_axis")?
                    .as_u64()
                    .map(|a| a as usize)
                    .filter(|a| *a < ndim)
                    .ok_or_else(|| bad(format!("{what} spatial_axis is not an axis")))?;
                flip_p[ndim - 1 - ax] = lit(prob, &what)?;
            }
            _ => {
                let args = if args.is_empty() {
                    "no arguments".to_string()
                } else {
                    args.join(", ")
                };
                return Err(bad(format!(
                    "{what} with {args} is not an entry augscope writes (translate, scale, \
                     rotate, elastic or flip with their own probability)"
                )));
            }
        }
    }
    if flip_p.iter().any(|&p| p > 0.0) {
        preset.flip = Some(FlipSpec {
            p: compact(flip_p),
            after_intensity: false,
        });
    }
    Ok(rotations)
}

/// The argument `k` of the entry `m` (named `what` in errors).
fn entry_arg<'a>(m: &'a Map<String, Value>, what: &str, k: &str) -> Result<&'a Value, PresetError> {
    m.get(k).ok_or_else(|| bad(format!("{what} has no {k}")))
}

/// A translation entry: `translate_range` in voxels, or in millimetres over `@spacing_mm`.
fn read_translate(
    m: &Map<String, Value>,
    what: &str,
    prob: Num,
) -> Result<TranslateSpec, PresetError> {
    let r = read_ranges(
        entry_arg(m, what, "translate_range")?,
        &format!("{what} translate_range"),
    )?;
    let mm = r.iter().any(|g| matches!(g[0], Num::PerMm(..)));
    let mut vals = vec![];
    for (j, g) in r.iter().enumerate() {
        let v = |n: Num| match (n, mm) {
            (Num::Lit(v), false) => Ok(v),
            (Num::PerMm(v, a), true) if a == j => Ok(v),
            _ => Err(bad(format!(
                "{what} translate_range[{j}] mixes voxels and millimetres"
            ))),
        };
        vals.push([v(g[0])?, v(g[1])?]);
    }
    Ok(TranslateSpec {
        p: lit(prob, what)?,
        range: compact(x_first(&vals)),
        unit: if mm { Unit::Mm } else { Unit::Voxel },
    })
}

/// A scale entry: `scale_range` holds s - 1, per axis, or one range when `iso`.
fn read_scale(
    m: &Map<String, Value>,
    what: &str,
    prob: Num,
    iso: bool,
    distribution: ScaleDistribution,
) -> Result<ScaleSpec, PresetError> {
    let r = lit_ranges(
        &read_ranges(
            entry_arg(m, what, "scale_range")?,
            &format!("{what} scale_range"),
        )?,
        what,
    )?;
    let r: Vec<Range> = r
        .iter()
        .map(|g| [tidy(g[0] + 1.0), tidy(g[1] + 1.0)])
        .collect();
    let r = if iso { r } else { x_first(&r) };
    if iso && compact(r.clone()).len() != 1 {
        return Err(bad(format!("{what}: an isotropic scale takes one range")));
    }
    Ok(ScaleSpec {
        p: lit(prob, what)?,
        range: compact(r),
        per_axis: !iso,
        distribution,
    })
}

/// The ranges of a rotation entry in radians, x first: three in 3D, one in 2D.
fn read_rotate(m: &Map<String, Value>, what: &str, ndim: usize) -> Result<Vec<Range>, PresetError> {
    let r = lit_ranges(
        &read_ranges(
            entry_arg(m, what, "rotate_range")?,
            &format!("{what} rotate_range"),
        )?,
        what,
    )?;
    if r.len() != if ndim == 3 { 3 } else { 1 } {
        return Err(bad(format!(
            "{what}: rotate_range holds {} ranges",
            r.len()
        )));
    }
    Ok(r)
}

/// An elastic entry: `magnitude_range` and `sigma_range`, each `[lo, hi]`.
fn read_elastic(m: &Map<String, Value>, what: &str, prob: Num) -> Result<ElasticSpec, PresetError> {
    let pair = |k: &str| -> Result<Range, PresetError> {
        match entry_arg(m, what, k)?.as_array().map(|a| a.as_slice()) {
            Some([Value::Number(a), Value::Number(b)]) => Ok([
                a.as_f64().unwrap_or(f64::NAN),
                b.as_f64().unwrap_or(f64::NAN),
            ]),
            _ => Err(bad(format!("{what} {k} is not [lo, hi]"))),
        }
    };
    Ok(ElasticSpec {
        p: lit(prob, what)?,
        alpha: pair("magnitude_range")?,
        sigma: pair("sigma_range")?,
    })
}

/// The rotation of the preset from its entries: one entry for all axes, or one entry per axis
/// (augscope axis from the one non-zero range, x first) with the probabilities `p * p_axis`.
fn merge_rotations(
    rotations: &[RotationEntry],
    ndim: usize,
) -> Result<Option<RotateSpec>, PresetError> {
    let deg = |g: Range| [tidy(g[0].to_degrees()), tidy(g[1].to_degrees())];
    let n_rot = if ndim == 3 { 3 } else { 1 };
    match rotations {
        [] => Ok(None),
        [(Num::Lit(p), r)] => {
            let rd: Vec<Range> = r.iter().map(|g| deg(*g)).collect();
            let rd = if ndim == 3 { x_first(&rd) } else { rd };
            Ok(Some(RotateSpec {
                p: *p,
                p_axis: vec![1.0],
                range_deg: compact(rd),
                range_deg_2d: None,
            }))
        }
        many => {
            let mut p_rot = None;
            let mut p_axis = vec![0.0; n_rot];
            let mut range = vec![[0.0, 0.0]; n_rot];
            for (prob, r) in many {
                let set: Vec<usize> = (0..r.len()).filter(|&j| r[j] != [0.0, 0.0]).collect();
                let [j] = set.as_slice() else {
                    return Err(bad(
                        "several rotation entries, but not one axis each: not what augscope writes",
                    ));
                };
                let axis = n_rot - 1 - j;
                let (p, pa) = match *prob {
                    Num::Lit(v) => (1.0, v),
                    Num::Prod(a, b) => (a, b),
                    Num::PerMm(..) => return Err(bad("a rotation probability in millimetres")),
                };
                if p_rot.is_some_and(|q| q != p) {
                    return Err(bad("rotation entries disagree about rotate.p"));
                }
                p_rot = Some(p);
                p_axis[axis] = pa;
                range[axis] = deg(r[*j]);
            }
            Ok(Some(RotateSpec {
                p: p_rot.unwrap_or(1.0),
                p_axis: compact(p_axis),
                range_deg: compact(range),
                range_deg_2d: None,
            }))
        }
    }
}

/// The 2D rotation range stored in `_augscope_`, when there is one.
fn range_deg_2d(aug: Option<&Map<String, Value>>) -> Option<Range> {
    aug.and_then(|a| a.get("range_deg_2d"))
        .and_then(Value::as_array)
        .and_then(|a| Some([a.first()?.as_f64()?, a.get(1)?.as_f64()?]))
}

#[cfg(test)]
mod tests;
