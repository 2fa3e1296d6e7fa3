//! Presets: probabilities and ranges per transform (docs/design.md §5), in a versioned TOML file, and
//! sampling them with a seed into a [`Plan`] of fixed values plus the done list.
//!
//! Every vector is in array-axis order `[z, y, x]` (2D: `[y, x]`), as in [`Plan`]. Angles are
//! degrees in the file and radians in the plan. A range is `[lo, hi]`; a list of ranges holds one
//! range for every axis, or a single range that applies to all of them.
//!
//! Sampling is reproducible: each transform draws from its own SplitMix64 stream keyed by
//! `(seed, transform)`, so changing the probability of one transform never changes the values
//! another one draws. The elastic noise seed of a sample is the sample seed itself, so
//! `augscope apply --elastic ALPHA,SIGMA --seed S` reproduces a batch output.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{Done, DoneList, Elastic, Mode, Order, Plan, Space};

mod validate;

/// The only preset format version this build reads.
pub const PRESET_VERSION: u32 = 1;

pub use crate::core::draws::Range;
use crate::core::draws::SplitMix64;
use crate::core::intensity::{DrawFor, IntensitySpec, Normalize};

/// A preset: what may happen to a sample, and how likely.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Preset {
    /// Format version; must be 1.
    pub version: u32,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// Where the values come from (file and function), for bundled presets.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub source: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// Where rotation, translation and elastic act: `"voxel"` (default, as batchgenerators) or
    /// `"mm"` (see [`Space`]: angles turn physical space, elastic alpha and sigma are mm).
    #[serde(default, skip_serializing_if = "Space::is_voxel")]
    pub space: Space,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flip: Option<FlipSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rotate: Option<RotateSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale: Option<ScaleSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub translate: Option<TranslateSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub elastic: Option<ElasticSpec>,
    #[serde(default)]
    pub sampling: SamplingSpec,
    /// The intensity steps after the spatial transform, in order (`[[intensity]]` entries named
    /// by `step`; docs/presets.md). Each draws from its own stream, keyed by its place in the
    /// list.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub intensity: Vec<IntensitySpec>,
    /// The normalisation the preset trains in (`[normalize]`, named by `method`): applied to
    /// the scan once, before the transform, so that the intensity steps act in training's units.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub normalize: Option<Normalize>,
}

/// Mirroring: each axis flips independently with its own probability.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FlipSpec {
    /// Per-axis probability; one value applies to every axis.
    pub p: Vec<f64>,
    /// Mirror after the intensity steps, in nnU-Net's order (spatial transform, intensity,
    /// mirror), instead of with the resample before them ([`Plan::flip_after_intensity`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub after_intensity: bool,
}

/// Rotation: fires with `p`; then each axis rotates with `p_axis` by an angle from its range.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RotateSpec {
    #[serde(default = "one")]
    pub p: f64,
    /// Probability that an axis rotates once the transform fires (batchgenerators
    /// `p_rot_per_axis`); one value or one per axis.
    #[serde(default = "ones")]
    pub p_axis: Vec<f64>,
    /// Angle ranges in degrees, one per axis or one for all.
    pub range_deg: Vec<Range>,
    /// The range of a 2D image's single angle; `range_deg[0]` when absent (nnU-Net rotates 2D
    /// images by ±180° and volumes by ±30°).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub range_deg_2d: Option<Range>,
}

/// How a scale factor is drawn from `[lo, hi]`.
pub use crate::core::draws::Distribution as ScaleDistribution;

/// Scaling (`s > 1` samples a larger region: content looks smaller, as in batchgenerators).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScaleSpec {
    #[serde(default = "one")]
    pub p: f64,
    /// One range for all axes, or one per axis (per-axis ranges need `per_axis = true`).
    pub range: Vec<Range>,
    /// Draw a factor per axis instead of one isotropic factor.
    #[serde(default)]
    pub per_axis: bool,
    #[serde(default)]
    pub distribution: ScaleDistribution,
}

/// Units of a translation range.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Unit {
    #[default]
    Voxel,
    Mm,
}

/// Translation in voxels or millimetres (content moves by `-t`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TranslateSpec {
    #[serde(default = "one")]
    pub p: f64,
    /// One range per axis, or one for all.
    pub range: Vec<Range>,
    #[serde(default)]
    pub unit: Unit,
}

/// Elastic deformation `alpha * G_sigma(noise)` (docs/design.md §4; batchgenerators' alpha and sigma), in
/// voxels, or millimetres when the preset's `space` is `"mm"`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ElasticSpec {
    #[serde(default = "one")]
    pub p: f64,
    pub alpha: Range,
    pub sigma: Range,
}

/// Interpolation and boundary handling.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SamplingSpec {
    pub order: u32,
    pub mode: String,
    pub cval: f64,
    /// The order the training pipeline uses for labels. augscope itself always resamples label
    /// maps with order 0; the value is carried into exports.
    pub label_order: u32,
}

impl Default for SamplingSpec {
    fn default() -> Self {
        SamplingSpec {
            order: 1,
            mode: "constant".into(),
            cval: 0.0,
            label_order: 0,
        }
    }
}

fn one() -> f64 {
    1.0
}
fn ones() -> Vec<f64> {
    vec![1.0]
}

/// A preset that cannot be read or used.
#[derive(Debug, thiserror::Error)]
pub enum PresetError {
    #[error("cannot read preset: {why}: {}", path.display())]
    Read {
        why: String,
        path: std::path::PathBuf,
    },
    #[error("invalid preset: {why}")]
    Invalid { why: String },
}

fn invalid(why: impl Into<String>) -> PresetError {
    PresetError::Invalid {
        why: escape_controls(&why.into()),
    }
}

/// `s` with every control character but the line break written as an escape (`\t`,
/// `\u{1b}`): an error quotes what a preset holds, and a terminal must never act on it.
pub fn escape_controls(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_control() && c != '\n' {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// The most bytes a preset or a parameter file may hold (they take a few kilobytes).
pub const MAX_TEXT_BYTES: u64 = 16 << 20;

/// The text of the regular file `path`, of at most `max` bytes; the error says why not (without
/// the path). A folder, FIFO, socket or device is refused before anything is read from it:
/// reading a FIFO or a terminal would wait for a writer for ever, and a device may never end.
pub fn read_text_file(path: &Path, max: u64) -> Result<String, String> {
    use std::io::Read as _;
    let mut opts = std::fs::OpenOptions::new();
    opts.read(true);
    #[cfg(unix)]
    {
        // A FIFO without a writer blocks a plain open; a non-blocking one returns at once and
        // is refused below. Reads of a regular file do not block either way.
        use std::os::unix::fs::OpenOptionsExt;
        opts.custom_flags(libc::O_NONBLOCK);
    }
    #[cfg(not(unix))]
    if std::fs::metadata(path).is_ok_and(|m| !m.is_file()) {
        return Err(NOT_REGULAR.into());
    }
    let file = opts.open(path).map_err(|e| e.to_string())?;
    let meta = file.metadata().map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err(NOT_REGULAR.into());
    }
    let too_big = || format!("larger than {} MiB, which no such file needs", max >> 20);
    if meta.len() > max {
        return Err(too_big());
    }
    let mut bytes = vec![];
    file.take(max.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    if bytes.len() as u64 > max {
        return Err(too_big());
    }
    String::from_utf8(bytes).map_err(|_| "not UTF-8 text".to_string())
}

const NOT_REGULAR: &str = "not a regular file (a folder, FIFO, socket or device)";

/// One sample of a preset: the plan, the transforms that fired with their values, and every
/// random decision that was drawn.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Sample {
    pub seed: u64,
    pub plan: Plan,
    pub done: Vec<Done>,
    pub drawn: serde_json::Value,
}

const STREAM_FLIP: u64 = 1;
const STREAM_ROTATE: u64 = 2;
const STREAM_SCALE: u64 = 3;
const STREAM_TRANSLATE: u64 = 4;
const STREAM_ELASTIC: u64 = 5;
/// The stream of the intensity step at place `i` is `STREAM_INTENSITY + i`.
const STREAM_INTENSITY: u64 = 64;

/// The value for `axis` from a list holding one value for every axis or one for all.
fn per_axis<T: Copy>(v: &[T], axis: usize) -> Option<T> {
    match v.len() {
        1 => v.first().copied(),
        _ => v.get(axis).copied(),
    }
}

impl Preset {
    /// Reads and validates a preset file.
    pub fn load(path: &Path) -> Result<Preset, PresetError> {
        let text = read_text_file(path, MAX_TEXT_BYTES).map_err(|why| PresetError::Read {
            why,
            path: path.to_path_buf(),
        })?;
        Preset::parse(&text).map_err(|e| match e {
            PresetError::Invalid { why } => PresetError::Read {
                why,
                path: path.to_path_buf(),
            },
            other => other,
        })
    }

    /// Parses and validates preset TOML text.
    pub fn parse(text: &str) -> Result<Preset, PresetError> {
        // The version first, so that a newer file gets a version message, not a field error.
        if let Ok(table) = text.parse::<toml::Table>() {
            match table.get("version") {
                None => return Err(invalid("missing `version = 1` at the top of the file")),
                Some(toml::Value::Integer(v)) if *v == PRESET_VERSION as i64 => {}
                Some(v) => {
                    return Err(invalid(format!(
                        "version {v} is not supported (this augscope reads version {PRESET_VERSION})"
                    )));
                }
            }
        }
        let preset: Preset = toml::from_str(text).map_err(|e| {
            let line = e.span().map(|s| {
                text.as_bytes()[..s.start.min(text.len())]
                    .iter()
                    .filter(|&&b| b == b'\n')
                    .count()
                    + 1
            });
            let msg = e.message().trim().replace('\n', " ");
            match line {
                Some(l) => invalid(format!("line {l}: {msg}")),
                None => invalid(msg),
            }
        })?;
        preset.validate()?;
        Ok(preset)
    }

    /// The preset as TOML text (what `preset import` writes).
    pub fn to_toml(&self) -> String {
        // Serialising plain structs of numbers, strings and arrays cannot fail.
        toml::to_string(self).unwrap_or_default()
    }

    /// Draws one sample for an image of `channels` channels on a grid of `ndim` axes with voxel
    /// size `spacing_mm` (used by translations in millimetres, and carried into the plan in mm
    /// space). The channel count only matters to the intensity steps, which draw per channel.
    pub fn sample(
        &self,
        seed: u64,
        ndim: usize,
        channels: usize,
        spacing_mm: &[f64],
    ) -> Result<Sample, PresetError> {
        self.check_ndim(ndim)?;
        self.check_spacing(spacing_mm)?;
        let s = &self.sampling;
        let mut plan = Plan {
            order: Order::try_from(s.order).map_err(invalid)?,
            mode: s.mode.parse::<Mode>().map_err(invalid)?,
            cval: s.cval as f32,
            space: self.space,
            spacing_mm: match self.space {
                Space::Mm => spacing_mm.to_vec(),
                Space::Voxel => vec![],
            },
            ..Plan::default()
        };
        let mut drawn = serde_json::Map::new();

        if let Some(f) = &self.flip {
            let mut rng = SplitMix64::new(seed, STREAM_FLIP);
            let mut fired = vec![];
            for axis in 0..ndim {
                let p = per_axis(&f.p, axis).unwrap_or(0.0);
                let hit = rng.chance(p);
                fired.push(hit);
                if hit {
                    plan.flip.push(axis);
                }
            }
            drawn.insert("flip".into(), serde_json::json!({ "axes_fired": fired }));
            plan.flip_after_intensity = f.after_intensity;
        }

        if let Some(r) = &self.rotate {
            let mut rng = SplitMix64::new(seed, STREAM_ROTATE);
            let fire = rng.chance(r.p);
            let n_angles = if ndim == 3 { 3 } else { 1 };
            let mut deg = vec![0.0; n_angles];
            let mut axis_fired = vec![false; n_angles];
            for axis in 0..n_angles {
                let p_axis = per_axis(&r.p_axis, axis).unwrap_or(1.0);
                let hit = rng.chance(p_axis);
                let g = match (ndim, r.range_deg_2d) {
                    (2, Some(g)) => g,
                    _ => per_axis(&r.range_deg, axis).unwrap_or([0.0, 0.0]),
                };
                let a = rng.range(g);
                if fire && hit {
                    deg[axis] = a;
                    axis_fired[axis] = true;
                }
            }
            if fire && deg.iter().any(|&a| a != 0.0) {
                plan.rotate_rad = deg.iter().map(|d| d.to_radians()).collect();
            }
            drawn.insert(
                "rotate".into(),
                serde_json::json!({ "fired": fire, "axes_fired": axis_fired, "angles_deg": deg }),
            );
        }

        if let Some(sc) = &self.scale {
            let mut rng = SplitMix64::new(seed, STREAM_SCALE);
            let fire = rng.chance(sc.p);
            let n = if sc.per_axis { ndim } else { 1 };
            let mut factors = Vec::with_capacity(n);
            for axis in 0..n {
                let g = per_axis(&sc.range, axis).unwrap_or([1.0, 1.0]);
                let v = rng.draw(g, sc.distribution);
                factors.push(v);
            }
            if fire {
                plan.scale = factors.clone();
            }
            drawn.insert(
                "scale".into(),
                serde_json::json!({ "fired": fire, "factors": if fire { factors } else { vec![] } }),
            );
        }

        if let Some(t) = &self.translate {
            let mut rng = SplitMix64::new(seed, STREAM_TRANSLATE);
            let fire = rng.chance(t.p);
            let mut vals = Vec::with_capacity(ndim);
            for axis in 0..ndim {
                vals.push(rng.range(per_axis(&t.range, axis).unwrap_or([0.0, 0.0])));
            }
            let vox: Vec<f64> = match t.unit {
                Unit::Voxel => vals.clone(),
                Unit::Mm => vals
                    .iter()
                    .enumerate()
                    .map(|(a, v)| {
                        let sp = spacing_mm
                            .get(a)
                            .copied()
                            .filter(|s| *s > 0.0)
                            .unwrap_or(1.0);
                        v / sp
                    })
                    .collect(),
            };
            if fire {
                // The plan holds the translation in its own space.
                plan.translate = match (self.space, t.unit) {
                    (Space::Voxel, _) => vox.clone(),
                    (Space::Mm, Unit::Mm) => vals.clone(),
                    (Space::Mm, Unit::Voxel) => {
                        vals.iter().zip(spacing_mm).map(|(v, sp)| v * sp).collect()
                    }
                };
            }
            drawn.insert(
                "translate".into(),
                serde_json::json!({ "fired": fire, "values": if fire { vals } else { vec![] },
                                    "unit": t.unit, "voxels": if fire { vox } else { vec![] } }),
            );
        }

        if let Some(e) = &self.elastic {
            let mut rng = SplitMix64::new(seed, STREAM_ELASTIC);
            let fire = rng.chance(e.p);
            let alpha = rng.range(e.alpha);
            let sigma = rng.range(e.sigma);
            if fire {
                plan.elastic = Some(Elastic { alpha, sigma, seed });
            }
            drawn.insert(
                "elastic".into(),
                serde_json::json!({ "fired": fire, "alpha": if fire { Some(alpha) } else { None },
                                    "sigma": if fire { Some(sigma) } else { None }, "noise_seed": seed }),
            );
        }

        if !self.intensity.is_empty() {
            let mut steps = vec![];
            for (i, spec) in self.intensity.iter().enumerate() {
                let mut rng = SplitMix64::new(seed, STREAM_INTENSITY + i as u64);
                let img = DrawFor {
                    channels: channels.max(1),
                    ndim,
                    spacing_mm,
                };
                let (step, mut d) = spec.sample(&mut rng, &img);
                d["step"] = spec.name().into();
                steps.push(d);
                plan.intensity.extend(step);
            }
            drawn.insert("intensity".into(), steps.into());
        }

        plan.validate(ndim)
            .map_err(|e| invalid(format!("the drawn plan is not valid: {e}")))?;
        Ok(Sample {
            seed,
            done: plan.done_list(),
            plan,
            drawn: serde_json::Value::Object(drawn),
        })
    }
}

/// The number of axes a plan's vectors say it has (3 for three angles, scales or translations; 2
/// for one angle or two values), or `None` when they do not say (only flips and elastic).
pub fn plan_ndim(plan: &Plan) -> Option<usize> {
    match (
        plan.rotate_rad.len(),
        plan.scale.len(),
        plan.translate.len(),
    ) {
        (3, _, _) | (_, 3, _) | (_, _, 3) => Some(3),
        (1, _, _) | (_, 2, _) | (_, _, 2) => Some(2),
        _ => None,
    }
}

/// The angle in degrees whose `to_radians()` is `rad` exactly (so that sampling the preset gives
/// back the plan's radians bit for bit), the shortest to read of those within a few ulps of
/// `rad.to_degrees()` (12 rather than 12.000000000000002).
fn degrees_exact(rad: f64) -> f64 {
    let d = rad.to_degrees();
    let mut candidates = vec![d];
    let (mut up, mut down) = (d, d);
    for _ in 0..4 {
        up = up.next_up();
        down = down.next_down();
        candidates.extend([up, down]);
    }
    candidates
        .into_iter()
        .filter(|c| c.to_radians() == rad)
        .min_by_key(|c| format!("{c}").len())
        .unwrap_or(d)
}

impl Preset {
    /// The preset that reproduces `plan` exactly on a grid of `ndim` axes: every transform that
    /// acts fires (p = 1) with a range of one value, with the plan's order, mode, cval and space;
    /// the elastic noise is the sample seed's. `ndim` sizes the flip list (one entry would mean
    /// every axis). The plan's output shape, if any, is not kept: a preset keeps the input's
    /// grid. Name and description are left empty. Intensity steps become sections that always
    /// draw their values (see [`IntensitySpec::fixed`]); a step whose values no section draws
    /// (values per channel, a bias field's coefficients) is refused.
    pub fn reproducing(plan: &Plan, ndim: usize) -> Result<Preset, PresetError> {
        let intensity = plan
            .intensity
            .iter()
            .map(|step| {
                IntensitySpec::fixed(step).ok_or_else(|| {
                    invalid(format!(
                        "the plan's {} step holds values no preset section draws (values per \
                         channel, or values its library draws otherwise)",
                        step.name()
                    ))
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Preset {
            intensity,
            ..Preset::reproducing_spatial(plan, ndim)
        })
    }

    /// [`Preset::reproducing`] of the plan's spatial part alone: its intensity steps are left
    /// out.
    pub fn reproducing_spatial(plan: &Plan, ndim: usize) -> Preset {
        let one = |v: f64| [v, v];
        let flip = (!plan.flip.is_empty()).then(|| FlipSpec {
            p: (0..ndim)
                .map(|a| if plan.flip.contains(&a) { 1.0 } else { 0.0 })
                .collect(),
            after_intensity: plan.flip_after_intensity,
        });
        let rotate = (!plan.rotate_rad.is_empty()).then(|| {
            let deg: Vec<Range> = plan
                .rotate_rad
                .iter()
                .map(|&r| one(degrees_exact(r)))
                .collect();
            RotateSpec {
                p: 1.0,
                p_axis: vec![1.0],
                range_deg_2d: (deg.len() == 1).then(|| deg[0]),
                range_deg: deg,
            }
        });
        let scale = (!plan.scale.is_empty()).then(|| ScaleSpec {
            p: 1.0,
            range: plan.scale.iter().map(|&s| one(s)).collect(),
            per_axis: plan.scale.len() > 1,
            distribution: ScaleDistribution::Uniform,
        });
        let translate = (!plan.translate.is_empty()).then(|| TranslateSpec {
            p: 1.0,
            range: plan.translate.iter().map(|&t| one(t)).collect(),
            unit: match plan.space {
                Space::Voxel => Unit::Voxel,
                Space::Mm => Unit::Mm,
            },
        });
        let elastic = plan.elastic.map(|e| ElasticSpec {
            p: 1.0,
            alpha: one(e.alpha),
            sigma: one(e.sigma),
        });
        Preset {
            version: PRESET_VERSION,
            name: String::new(),
            source: String::new(),
            description: String::new(),
            space: plan.space,
            flip,
            rotate,
            scale,
            translate,
            elastic,
            sampling: SamplingSpec {
                order: plan.order.as_u32(),
                mode: plan.mode.name().to_string(),
                cval: f64::from(plan.cval),
                label_order: 0,
            },
            intensity: vec![],
            normalize: None,
        }
    }
}

/// The presets shipped in `assets/presets/`, by name.
pub const BUNDLED: &[(&str, &str)] = &[
    (
        "nnunet-v2",
        include_str!("../../assets/presets/nnunet_v2_default.toml"),
    ),
    (
        "nnunet-v1-3d",
        include_str!("../../assets/presets/nnunet_v1_3d_default.toml"),
    ),
    (
        "batchgenerators",
        include_str!("../../assets/presets/batchgenerators_spatial_default.toml"),
    ),
    (
        "monai-brats",
        include_str!("../../assets/presets/monai_brats.toml"),
    ),
];

/// Loads a preset from a file, or a bundled one by name (`nnunet-v2`, `nnunet-v1-3d`,
/// `batchgenerators`, `monai-brats`) when no such file exists.
pub fn load_or_bundled(path_or_name: &Path) -> Result<Preset, PresetError> {
    if !path_or_name.exists()
        && let Some(name) = path_or_name.to_str()
        && let Some((_, text)) = BUNDLED.iter().find(|(n, _)| *n == name)
    {
        return Preset::parse(text);
    }
    Preset::load(path_or_name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bundled_presets_parse() {
        for (name, text) in BUNDLED {
            let p = Preset::parse(text).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(p.version, 1);
            assert!(!p.source.is_empty(), "{name} cites its source");
        }
    }
}
