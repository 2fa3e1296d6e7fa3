//! The normalisation a preset trains in: the units its intensity steps are tuned in. Training
//! pipelines normalise the image before they augment it (nnU-Net in its preprocessing, MONAI and
//! TorchIO as the first transforms), so augscope normalises the scan once, before the transform,
//! wherever the preset is used: `batch`, `apply --normalize`, the explorer and the Python package.
//! Each method is its library's, with its arithmetic:
//!
//! | `method` | library | what it does |
//! |---|---|---|
//! | `nnunet_zscore` | nnU-Net v2 `ZScoreNormalization` | per channel, `(x − mean) / max(std, 1e-8)`, population std; with `use_mask_for_norm`, the statistics and the change inside nnU-Net's nonzero mask only (every channel's nonzero voxels, holes filled), the rest left at 0 |
//! | `nnunet_ct` | nnU-Net v2 `CTNormalization` | clip to `[percentile_00_5, percentile_99_5]`, `(x − mean) / max(std, 1e-8)` with the dataset's foreground statistics |
//! | `monai_scale_intensity_range` | MONAI 1.6.1 `ScaleIntensityRange` | `(x − a_min) / (a_max − a_min)`, then `· (b_max − b_min) + b_min`, optionally clipped to `[b_min, b_max]` |
//! | `torchio_z_normalization` | TorchIO 1.2.1 `ZNormalization` | over the whole image, `(x − mean) / std`, Bessel-corrected std |
//! | `torchio_rescale_intensity` | TorchIO 1.2.1 `RescaleIntensity` | over the whole image, clip to the `percentiles`, then map the image's range to `out_min_max` |
//!
//! Values are f32 and every operation is rounded as the library's float32 arrays round it; the
//! statistics are summed in f64.

use serde::{Deserialize, Serialize};

use super::{Arg, Call, Library};

/// A normalisation method with its settings (a preset's `[normalize]` table, named by
/// `method`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "method")]
pub enum Normalize {
    #[serde(rename = "nnunet_zscore")]
    NnunetZscore(ZscoreSettings),
    #[serde(rename = "nnunet_ct")]
    NnunetCt(CtSettings),
    #[serde(rename = "monai_scale_intensity_range")]
    MonaiScaleIntensityRange(RangeSettings),
    #[serde(rename = "torchio_z_normalization")]
    TorchioZNormalization(NoSettings),
    #[serde(rename = "torchio_rescale_intensity")]
    TorchioRescaleIntensity(RescaleSettings),
}

/// A method without settings.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoSettings {}

/// nnU-Net's z-score: over the whole image, or (`use_mask_for_norm`, as nnU-Net's plans set it
/// when cropping to the nonzero region shrinks the images, e.g. skull-stripped MRI) inside the
/// nonzero mask of its preprocessing: the voxels where any channel is nonzero, with the holes
/// filled (scipy's `binary_fill_holes`, faces connected). The label map plays no part: nnU-Net's
/// mask `seg >= 0` is that mask wherever the labels are 0 outside the scan's nonzero region, and
/// at inference always.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ZscoreSettings {
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub use_mask_for_norm: bool,
}

/// nnU-Net's CT normalisation: the dataset's foreground statistics (its
/// `foreground_intensity_properties_per_channel`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CtSettings {
    pub mean: f64,
    pub std: f64,
    pub percentile_00_5: f64,
    pub percentile_99_5: f64,
}

/// MONAI's `ScaleIntensityRange` arguments (`b_min` and `b_max` together, or neither).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RangeSettings {
    pub a_min: f64,
    pub a_max: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub b_min: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub b_max: Option<f64>,
    #[serde(default)]
    pub clip: bool,
}

/// TorchIO's `RescaleIntensity` arguments.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RescaleSettings {
    #[serde(default = "unit_range")]
    pub out_min_max: [f64; 2],
    #[serde(default = "all_percentiles")]
    pub percentiles: [f64; 2],
}

fn unit_range() -> [f64; 2] {
    [0.0, 1.0]
}

fn all_percentiles() -> [f64; 2] {
    [0.0, 100.0]
}

/// nnU-Net's `eps` for float32.
const EPS: f32 = 1e-8;

fn finite(name: &str, v: f64) -> Result<(), String> {
    if v.is_finite() && v.abs() <= 1e12 {
        Ok(())
    } else {
        Err(format!("{name} = {v} is not a finite number within ±1e12"))
    }
}

impl Normalize {
    /// The method's name in presets and messages.
    pub fn name(&self) -> &'static str {
        match self {
            Normalize::NnunetZscore(_) => "nnunet_zscore",
            Normalize::NnunetCt(_) => "nnunet_ct",
            Normalize::MonaiScaleIntensityRange(_) => "monai_scale_intensity_range",
            Normalize::TorchioZNormalization(_) => "torchio_z_normalization",
            Normalize::TorchioRescaleIntensity(_) => "torchio_rescale_intensity",
        }
    }

    /// The library whose method this is.
    pub fn library(&self) -> Library {
        match self {
            Normalize::NnunetZscore(_) | Normalize::NnunetCt(_) => Library::Batchgeneratorsv2,
            Normalize::MonaiScaleIntensityRange(_) => Library::Monai,
            Normalize::TorchioZNormalization(_) | Normalize::TorchioRescaleIntensity(_) => {
                Library::Torchio
            }
        }
    }

    /// The library's class.
    pub fn class(&self) -> &'static str {
        match self {
            Normalize::NnunetZscore(_) => "ZScoreNormalization",
            Normalize::NnunetCt(_) => "CTNormalization",
            Normalize::MonaiScaleIntensityRange(_) => "ScaleIntensityRange",
            Normalize::TorchioZNormalization(_) => "ZNormalization",
            Normalize::TorchioRescaleIntensity(_) => "RescaleIntensity",
        }
    }

    /// The units the image is in after it, in words.
    pub fn units(&self) -> String {
        let library = match self.library() {
            Library::Batchgeneratorsv2 => "nnU-Net v2",
            other => other.label(),
        };
        let what = match self {
            Normalize::NnunetZscore(z) if z.use_mask_for_norm => {
                "z-scores of each channel inside the nonzero mask".to_string()
            }
            Normalize::NnunetZscore(_) => "z-scores of each channel".to_string(),
            Normalize::NnunetCt(c) => format!(
                "CT values clipped to [{}, {}], minus {}, over {}",
                c.percentile_00_5, c.percentile_99_5, c.mean, c.std
            ),
            Normalize::MonaiScaleIntensityRange(r) => match (r.b_min, r.b_max) {
                (Some(lo), Some(hi)) => format!(
                    "[{}, {}] mapped to [{lo}, {hi}]{}",
                    r.a_min,
                    r.a_max,
                    if r.clip { ", clipped" } else { "" }
                ),
                _ => format!("[{}, {}] mapped to [0, 1]", r.a_min, r.a_max),
            },
            Normalize::TorchioZNormalization(_) => "z-scores of the whole image".to_string(),
            Normalize::TorchioRescaleIntensity(r) => format!(
                "percentiles {}–{} mapped to [{}, {}]",
                r.percentiles[0], r.percentiles[1], r.out_min_max[0], r.out_min_max[1]
            ),
        };
        format!("{what} ({library}'s {})", self.class())
    }

    /// Whether the settings are usable.
    pub fn validate(&self) -> Result<(), String> {
        let why = match self {
            Normalize::NnunetZscore(_) | Normalize::TorchioZNormalization(_) => Ok(()),
            Normalize::NnunetCt(c) => {
                finite("mean", c.mean)?;
                finite("std", c.std)?;
                finite("percentile_00_5", c.percentile_00_5)?;
                finite("percentile_99_5", c.percentile_99_5)?;
                if c.std < 0.0 {
                    Err(format!("std = {} is negative", c.std))
                } else if c.percentile_00_5 > c.percentile_99_5 {
                    Err(format!(
                        "percentile_00_5 = {} is above percentile_99_5 = {}",
                        c.percentile_00_5, c.percentile_99_5
                    ))
                } else {
                    Ok(())
                }
            }
            Normalize::MonaiScaleIntensityRange(r) => {
                finite("a_min", r.a_min)?;
                finite("a_max", r.a_max)?;
                match (r.b_min, r.b_max) {
                    (Some(lo), Some(hi)) => {
                        finite("b_min", lo)?;
                        finite("b_max", hi)
                    }
                    (None, None) if r.clip => {
                        Err("clip needs b_min and b_max (the range it clips to)".to_string())
                    }
                    (None, None) => Ok(()),
                    _ => Err("give b_min and b_max together, or neither".to_string()),
                }
            }
            Normalize::TorchioRescaleIntensity(r) => {
                finite("out_min_max[0]", r.out_min_max[0])?;
                finite("out_min_max[1]", r.out_min_max[1])?;
                let [lo, hi] = r.percentiles;
                if !(0.0..=100.0).contains(&lo) || !(0.0..=100.0).contains(&hi) || lo > hi {
                    Err(format!(
                        "percentiles [{lo}, {hi}] are not an ascending pair within [0, 100]"
                    ))
                } else {
                    Ok(())
                }
            }
        };
        why.map_err(|w| format!("normalize {}: {w}", self.name()))
    }

    /// Normalises `data`: `channels` consecutive channels on the grid `shape`. Returns, per
    /// channel, the affine map `(a, b)` it applied where the values were not clipped
    /// (`x ↦ a·x + b`), which takes a display window of the raw values to the normalised ones. An
    /// error where the library raises (TorchIO's z-normalisation of an image of one value).
    pub fn apply(
        &self,
        data: &mut [f32],
        shape: &[usize],
        channels: usize,
    ) -> Result<Vec<(f64, f64)>, String> {
        let channels = channels.max(1);
        let n = data.len() / channels;
        if n == 0 {
            return Ok(vec![(1.0, 0.0); channels]);
        }
        let every = |ab: (f64, f64)| vec![ab; channels];
        Ok(match self {
            Normalize::NnunetZscore(z) => {
                // With use_mask_for_norm, the statistics and the change inside the mask only.
                let mask = z
                    .use_mask_for_norm
                    .then(|| nonzero_mask(data, shape, channels));
                let mut maps = vec![];
                for x in data.chunks_mut(n) {
                    let (mean, var) = match &mask {
                        Some(mask) => {
                            let inside: Vec<f32> = x
                                .iter()
                                .zip(mask)
                                .filter_map(|(&v, &m)| m.then_some(v))
                                .collect();
                            moments(&inside)
                        }
                        None => moments(x),
                    };
                    let (m, s) = (mean as f32, (var.sqrt() as f32).max(EPS));
                    for (i, v) in x.iter_mut().enumerate() {
                        if mask.as_ref().is_none_or(|mask| mask[i]) {
                            *v = (*v - m) / s;
                        }
                    }
                    maps.push((1.0 / s as f64, -(m as f64) / s as f64));
                }
                maps
            }
            Normalize::NnunetCt(c) => {
                let (lo, hi) = (c.percentile_00_5 as f32, c.percentile_99_5 as f32);
                let (m, s) = (c.mean as f32, (c.std as f32).max(EPS));
                for v in data.iter_mut() {
                    *v = (v.max(lo).min(hi) - m) / s;
                }
                every((1.0 / s as f64, -(m as f64) / s as f64))
            }
            Normalize::MonaiScaleIntensityRange(r) => every(monai_range(r, data)),
            Normalize::TorchioZNormalization(_) => {
                let (mean, var) = moments(data);
                let nn = data.len() as f64;
                let std = (var * nn / (nn - 1.0).max(1.0)).sqrt() as f32;
                if std == 0.0 {
                    return Err(
                        "torchio_z_normalization: the standard deviation is 0 (an image of one \
                         value), as TorchIO refuses it"
                            .to_string(),
                    );
                }
                let m = mean as f32;
                for v in data.iter_mut() {
                    *v = (*v - m) / std;
                }
                every((1.0 / std as f64, -(m as f64) / std as f64))
            }
            Normalize::TorchioRescaleIntensity(r) => every(torchio_rescale(r, data)),
        })
    }

    /// Normalises the scan `v`: its values become f32 in the method's units (its stored type and
    /// a window from its file no longer describe them).
    pub fn apply_volume(
        &self,
        v: &mut crate::core::volume::Volume,
    ) -> Result<Vec<(f64, f64)>, String> {
        let maps = self.apply(&mut v.data, &v.shape, v.channels)?;
        v.dtype = crate::core::volume::DType::F32;
        v.default_window = None;
        Ok(maps)
    }

    /// MONAI's transform that normalises the same way, on the image key.
    pub fn monai(&self) -> Option<Call> {
        let Normalize::MonaiScaleIntensityRange(r) = self else {
            return None;
        };
        let mut args = vec![
            ("a_min", Arg::Float(r.a_min)),
            ("a_max", Arg::Float(r.a_max)),
        ];
        if let (Some(lo), Some(hi)) = (r.b_min, r.b_max) {
            args.push(("b_min", Arg::Float(lo)));
            args.push(("b_max", Arg::Float(hi)));
        }
        args.push(("clip", Arg::Bool(r.clip)));
        Some(Call {
            class: "ScaleIntensityRanged",
            args,
        })
    }

    /// TorchIO's transform that normalises the same way.
    pub fn torchio(&self) -> Option<Call> {
        match self {
            Normalize::TorchioZNormalization(_) => Some(Call {
                class: "ZNormalization",
                args: vec![],
            }),
            Normalize::TorchioRescaleIntensity(r) => Some(Call {
                class: "RescaleIntensity",
                args: vec![
                    ("out_min_max", Arg::Range(r.out_min_max)),
                    ("percentiles", Arg::Range(r.percentiles)),
                ],
            }),
            _ => None,
        }
    }

    /// The `# NOTE:` line of an export to `library` (by name), which does not write this
    /// normalisation as a transform.
    pub fn note(&self, library: &str) -> String {
        match self.library() {
            Library::Batchgeneratorsv2 => format!(
                "the images are normalised by nnU-Net's {} before augmentation (nnU-Net does it in \
                 its preprocessing, set in the plans' normalization_schemes): give {library} \
                 images normalised so",
                self.class()
            ),
            own => format!(
                "normalize {} ({}'s {}) is left out: give {library} images normalised so, or \
                 export to {}",
                self.name(),
                own.label(),
                self.class(),
                own.target()
            ),
        }
    }
}

/// nnU-Net's nonzero mask (`create_nonzero_mask`): the voxels of `shape` where any of the
/// `channels` channels is nonzero, with the holes filled as scipy's `binary_fill_holes` fills
/// them (a voxel outside the mask is a hole unless a path of face neighbours outside the mask
/// joins it to the grid's border).
fn nonzero_mask(data: &[f32], shape: &[usize], channels: usize) -> Vec<bool> {
    let n: usize = shape.iter().product();
    let mut mask = vec![false; n];
    for c in data.chunks(n).take(channels) {
        for (m, &v) in mask.iter_mut().zip(c) {
            *m |= v != 0.0;
        }
    }
    // Flood the outside from the border voxels that are not in the mask.
    let mut strides = vec![1usize; shape.len()];
    for a in (0..shape.len().saturating_sub(1)).rev() {
        strides[a] = strides[a + 1] * shape[a + 1];
    }
    let mut outside = vec![false; n];
    let mut stack = vec![];
    let coord = |i: usize, a: usize| (i / strides[a]) % shape[a];
    for i in 0..n {
        let border = (0..shape.len()).any(|a| {
            let c = coord(i, a);
            c == 0 || c + 1 == shape[a]
        });
        if border && !mask[i] {
            outside[i] = true;
            stack.push(i);
        }
    }
    while let Some(i) = stack.pop() {
        for a in 0..shape.len() {
            let c = coord(i, a);
            let mut visit = |j: usize| {
                if !mask[j] && !outside[j] {
                    outside[j] = true;
                    stack.push(j);
                }
            };
            if c > 0 {
                visit(i - strides[a]);
            }
            if c + 1 < shape[a] {
                visit(i + strides[a]);
            }
        }
    }
    outside.iter().map(|&o| !o).collect()
}

/// Mean and population variance of `x` (sums in f64).
fn moments(x: &[f32]) -> (f64, f64) {
    use rayon::prelude::*;
    let n = x.len().max(1) as f64;
    let sum: f64 = x.par_iter().map(|&v| v as f64).sum();
    let mean = sum / n;
    let ss: f64 = x
        .par_iter()
        .map(|&v| (v as f64 - mean) * (v as f64 - mean))
        .sum();
    (mean, ss / n)
}

/// MONAI's `ScaleIntensityRange` in torch's float32: `(x − a_min) / (a_max − a_min)`, then
/// `· (b_max − b_min) + b_min`, clipped; an empty input range subtracts `a_min` (and adds
/// `b_min`), as MONAI does after its warning. Returns the affine map.
fn monai_range(r: &RangeSettings, data: &mut [f32]) -> (f64, f64) {
    let a_min = r.a_min as f32;
    let span = r.a_max - r.a_min;
    let b = r.b_min.zip(r.b_max);
    if span == 0.0 {
        let add = r.b_min.map_or(0.0, |v| v as f32);
        for v in data.iter_mut() {
            *v = *v - a_min + add;
        }
        return (1.0, add as f64 - a_min as f64);
    }
    let span = span as f32;
    for v in data.iter_mut() {
        let mut t = (*v - a_min) / span;
        if let Some((lo, hi)) = b {
            t = t * (hi - lo) as f32 + lo as f32;
            if r.clip {
                t = t.max(lo as f32).min(hi as f32);
            }
        }
        *v = t;
    }
    match b {
        Some((lo, hi)) => (
            (hi - lo) / span as f64,
            lo - a_min as f64 * (hi - lo) / span as f64,
        ),
        None => (1.0 / span as f64, -(a_min as f64) / span as f64),
    }
}

/// numpy's `percentile(values, q)` (linear method) of the finite values in `sorted` order
/// statistics: the rank `(n − 1) q / 100` between its two neighbours.
fn percentile(values: &mut [f32], q: f64) -> f32 {
    let n = values.len();
    let rank = (n - 1) as f64 * q / 100.0;
    let lo = rank.floor() as usize;
    let hi = (lo + 1).min(n - 1);
    let (_, a, rest) = values.select_nth_unstable_by(lo, f32::total_cmp);
    let a = *a as f64;
    let b = if hi == lo {
        a
    } else {
        rest.iter().copied().fold(f32::INFINITY, f32::min) as f64
    };
    let t = rank - lo as f64;
    // numpy's _lerp: from the lower end below one half, from the upper end above.
    let v = if t >= 0.5 {
        b - (b - a) * (1.0 - t)
    } else {
        a + (b - a) * t
    };
    v as f32
}

/// TorchIO's `RescaleIntensity` over the whole image, with numpy's float32 arithmetic. Returns
/// the affine map.
fn torchio_rescale(r: &RescaleSettings, data: &mut [f32]) -> (f64, f64) {
    let mut v = data.to_vec();
    let lo = percentile(&mut v, r.percentiles[0]);
    let hi = percentile(&mut v, r.percentiles[1]);
    drop(v);
    let clip = |x: f32| x.max(lo).min(hi);
    let (in_min, in_max) = data
        .iter()
        .fold((f32::INFINITY, f32::NEG_INFINITY), |(a, b), &x| {
            (a.min(clip(x)), b.max(clip(x)))
        });
    let in_range = in_max - in_min;
    if in_range == 0.0 {
        // TorchIO warns and returns the image as it was, unclipped.
        return (1.0, 0.0);
    }
    let out_min = r.out_min_max[0] as f32;
    let out_range = (r.out_min_max[1] - r.out_min_max[0]) as f32;
    for x in data.iter_mut() {
        *x = (clip(*x) - in_min) / in_range * out_range + out_min;
    }
    let a = out_range as f64 / in_range as f64;
    (a, out_min as f64 - in_min as f64 * a)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_numpys() {
        let mut v: Vec<f32> = vec![5.0, 1.0, 4.0, 2.0, 3.0];
        assert_eq!(percentile(&mut v.clone(), 0.0), 1.0);
        assert_eq!(percentile(&mut v.clone(), 100.0), 5.0);
        assert_eq!(percentile(&mut v.clone(), 50.0), 3.0);
        assert_eq!(percentile(&mut v, 10.0), 1.4);
    }

    #[test]
    fn zscore_gives_mean_0_and_std_1_per_channel() {
        let mut d: Vec<f32> = (0..200)
            .map(|i| (i % 17) as f32 * (1 + i / 100) as f32)
            .collect();
        Normalize::NnunetZscore(ZscoreSettings::default())
            .apply(&mut d, &[10, 10], 2)
            .unwrap();
        for c in d.chunks(100) {
            let (m, v) = moments(c);
            assert!(m.abs() < 1e-6 && (v.sqrt() - 1.0).abs() < 1e-6, "{m} {v}");
        }
        let mut one = vec![3.0f32; 10];
        assert!(
            Normalize::TorchioZNormalization(NoSettings {})
                .apply(&mut one, &[10], 1)
                .is_err()
        );
    }

    #[test]
    fn the_nonzero_mask_fills_holes_but_not_what_reaches_the_border() {
        // 2D, 7 x 8: a ring of ones with a zero inside (a hole), a zero channel in the ring's
        // wall that opens the second ring to the border (not a hole)
        let rows = [
            "00000000", "01110000", "01010000", "01110111", "00000101", "00000100", "00000111",
        ];
        let data: Vec<f32> = rows
            .iter()
            .flat_map(|r| r.chars().map(|c| if c == '1' { 2.0 } else { 0.0 }))
            .collect();
        let mask = nonzero_mask(&data, &[7, 8], 1);
        let at = |y: usize, x: usize| mask[y * 8 + x];
        assert!(at(2, 2), "the enclosed zero is a hole, filled");
        assert!(
            !at(4, 6) && !at(5, 6),
            "the open ring's inside reaches the border"
        );
        assert!(!at(0, 0) && at(1, 1) && at(3, 5));
        // a second channel's nonzero voxels join the mask
        let mut two = data.clone();
        two.extend((0..56).map(|i| if i == 0 { 1.0 } else { 0.0 }));
        assert!(nonzero_mask(&two, &[7, 8], 2)[0]);
    }

    #[test]
    fn masked_zscore_changes_the_mask_only() {
        let rows = ["000000", "012300", "040500", "067800", "000000"];
        let mut d: Vec<f32> = rows
            .iter()
            .flat_map(|r| r.chars().map(|c| c.to_digit(10).unwrap_or(0) as f32))
            .collect();
        let raw = d.clone();
        let z = Normalize::NnunetZscore(ZscoreSettings {
            use_mask_for_norm: true,
        });
        let maps = z.apply(&mut d, &[5, 6], 1).unwrap();
        let mask = nonzero_mask(&raw, &[5, 6], 1);
        assert_eq!(
            mask.iter().filter(|&&m| m).count(),
            9,
            "the 3 x 3 block, hole filled"
        );
        let inside: Vec<f32> = d
            .iter()
            .zip(&mask)
            .filter_map(|(&v, &m)| m.then_some(v))
            .collect();
        let (m, v) = moments(&inside);
        assert!(m.abs() < 1e-6 && (v.sqrt() - 1.0).abs() < 1e-6, "{m} {v}");
        for (i, (&a, &b)) in d.iter().zip(&raw).enumerate() {
            if !mask[i] {
                assert_eq!(a, b);
            } else {
                assert!((a as f64 - (maps[0].0 * b as f64 + maps[0].1)).abs() < 1e-5);
            }
        }
    }
}
