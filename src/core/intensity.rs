//! Intensity steps: what a plan does to the image's values after the resample (docs/design.md
//! §9). They act on the image only, in the order the plan lists them; a label map never receives
//! one (the engines apply them to the image output alone).
//!
//! Each step holds its drawn values, one per channel (or one for every channel); `null` for a
//! channel leaves that channel out, as a library's `p_per_channel` does. The formulas are the
//! library's own, step for step:
//! - `brightness`: batchgeneratorsv2 0.3.6 `MultiplicativeBrightnessTransform`: `x · m`.
//! - `contrast`: batchgeneratorsv2 0.3.6 `ContrastTransform`: `(x − mean) · f + mean`, then with
//!   `preserve_range` clipped to the channel's minimum and maximum before the step.
//! - `gamma`: batchgeneratorsv2 0.3.6 `GammaTransform`: optionally inverted (`x · −1`), then
//!   `((x − min) / max(range, 1e-7))^γ · range + min`; with `retain_stats` the mean and the
//!   standard deviation (Bessel-corrected, as `torch.std`) of before are restored; inverted back.
//!
//! Statistics (mean, minimum, maximum, standard deviation) are of the whole channel of the
//! resampled image, summed in f64; the values are f32.

use rayon::prelude::*;

/// One channel's gamma.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GammaValue {
    pub gamma: f64,
    #[serde(default)]
    pub invert: bool,
    #[serde(default)]
    pub retain_stats: bool,
}

/// One step of a plan's intensity part, with its drawn values per channel.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum IntensityStep {
    Brightness {
        multipliers: Vec<Option<f64>>,
    },
    Contrast {
        factors: Vec<Option<f64>>,
        #[serde(default = "yes")]
        preserve_range: bool,
    },
    Gamma {
        channels: Vec<Option<GammaValue>>,
    },
}

fn yes() -> bool {
    true
}

/// The smallest range gamma divides by (batchgeneratorsv2's `eps`).
const EPS: f64 = 1e-7;

impl IntensityStep {
    /// The step's name in done lists and messages.
    pub fn name(&self) -> &'static str {
        match self {
            IntensityStep::Brightness { .. } => "brightness",
            IntensityStep::Contrast { .. } => "contrast",
            IntensityStep::Gamma { .. } => "gamma",
        }
    }

    /// How many channels the step has values for (1: every channel).
    fn len(&self) -> usize {
        match self {
            IntensityStep::Brightness { multipliers } => multipliers.len(),
            IntensityStep::Contrast { factors, .. } => factors.len(),
            IntensityStep::Gamma { channels } => channels.len(),
        }
    }

    /// Whether the values can act on an image of `channels` channels (any count when `None`):
    /// one value, or one per channel; every value finite, gamma above 0.
    pub fn validate(&self, channels: Option<usize>) -> Result<(), String> {
        let n = self.len();
        if n == 0 {
            return Err(format!("{}: no values", self.name()));
        }
        if let Some(channels) = channels
            && n != 1
            && n != channels
        {
            return Err(format!(
                "{}: {n} values for an image of {channels} channel(s): give one, or one per channel",
                self.name()
            ));
        }
        let bad = |v: f64| !v.is_finite();
        match self {
            IntensityStep::Brightness { multipliers: v }
            | IntensityStep::Contrast { factors: v, .. } => {
                if let Some(x) = v.iter().flatten().find(|x| bad(**x)) {
                    return Err(format!("{}: {x} is not a finite number", self.name()));
                }
            }
            IntensityStep::Gamma { channels } => {
                if let Some(g) = channels
                    .iter()
                    .flatten()
                    .find(|g| bad(g.gamma) || g.gamma <= 0.0)
                {
                    return Err(format!("gamma: {} is not a number above 0", g.gamma));
                }
            }
        }
        Ok(())
    }

    /// Applies the step to `data`: `channels` consecutive channels of equal length.
    pub fn apply(&self, data: &mut [f32], channels: usize) {
        let n = data.len() / channels.max(1);
        if n == 0 {
            return;
        }
        for (c, x) in data.chunks_mut(n).enumerate() {
            let pick = |len: usize| if len == 1 { 0 } else { c };
            match self {
                IntensityStep::Brightness { multipliers } => {
                    if let Some(Some(m)) = multipliers.get(pick(multipliers.len())) {
                        let m = *m as f32;
                        x.par_iter_mut().for_each(|v| *v *= m);
                    }
                }
                IntensityStep::Contrast {
                    factors,
                    preserve_range,
                } => {
                    if let Some(Some(f)) = factors.get(pick(factors.len())) {
                        contrast(x, *f as f32, *preserve_range);
                    }
                }
                IntensityStep::Gamma { channels: g } => {
                    if let Some(Some(g)) = g.get(pick(g.len())) {
                        gamma(x, *g);
                    }
                }
            }
        }
    }

    /// Whether the step reads statistics of the whole channel (so that a plane alone cannot be
    /// computed).
    pub fn needs_whole_channel(&self) -> bool {
        !matches!(self, IntensityStep::Brightness { .. })
    }
}

/// Mean, minimum and maximum of `x` (the sum in f64).
fn mean_min_max(x: &[f32]) -> (f64, f32, f32) {
    let (sum, lo, hi) = x
        .par_chunks(1 << 16)
        .map(|c| {
            c.iter().fold(
                (0f64, f32::INFINITY, f32::NEG_INFINITY),
                |(s, lo, hi), &v| (s + v as f64, lo.min(v), hi.max(v)),
            )
        })
        .reduce(
            || (0.0, f32::INFINITY, f32::NEG_INFINITY),
            |a, b| (a.0 + b.0, a.1.min(b.1), a.2.max(b.2)),
        );
    (sum / x.len() as f64, lo, hi)
}

/// The Bessel-corrected standard deviation of `x` about `mean` (as `torch.std`).
fn std_about(x: &[f32], mean: f64) -> f64 {
    let ss: f64 = x
        .par_chunks(1 << 16)
        .map(|c| c.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>())
        .sum();
    (ss / (x.len().max(2) - 1) as f64).sqrt()
}

fn contrast(x: &mut [f32], f: f32, preserve_range: bool) {
    let (mean, lo, hi) = mean_min_max(x);
    let mean = mean as f32;
    x.par_iter_mut().for_each(|v| {
        let y = (*v - mean) * f + mean;
        *v = if preserve_range { y.clamp(lo, hi) } else { y };
    });
}

fn gamma(x: &mut [f32], g: GammaValue) {
    if g.invert {
        x.par_iter_mut().for_each(|v| *v = -*v);
    }
    let (mean, lo, hi) = mean_min_max(x);
    let std = if g.retain_stats {
        std_about(x, mean)
    } else {
        0.0
    };
    let gamma = g.gamma as f32;
    let range = hi - lo;
    let denom = (range as f64).max(EPS) as f32;
    x.par_iter_mut()
        .for_each(|v| *v = ((*v - lo) / denom).powf(gamma) * range + lo);
    if g.retain_stats {
        let (mean_here, _, _) = mean_min_max(x);
        let std_here = std_about(x, mean_here);
        let scale = (std / std_here.max(EPS)) as f32;
        let (mean_here, mean) = (mean_here as f32, mean as f32);
        x.par_iter_mut()
            .for_each(|v| *v = (*v - mean_here) * scale + mean);
    }
    if g.invert {
        x.par_iter_mut().for_each(|v| *v = -*v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_follow_their_formulas() {
        let mut x = vec![1.0f32, 2.0, 3.0, 6.0, 10.0, 20.0];
        IntensityStep::Brightness {
            multipliers: vec![Some(2.0), None],
        }
        .apply(&mut x, 2);
        assert_eq!(x, vec![2.0, 4.0, 6.0, 6.0, 10.0, 20.0]);

        // Contrast about the mean 4, clipped to [2, 6].
        let mut y = vec![2.0f32, 4.0, 6.0];
        IntensityStep::Contrast {
            factors: vec![Some(2.0)],
            preserve_range: true,
        }
        .apply(&mut y, 1);
        assert_eq!(y, vec![2.0, 4.0, 6.0]);
        let mut y = vec![2.0f32, 4.0, 6.0];
        IntensityStep::Contrast {
            factors: vec![Some(0.5)],
            preserve_range: false,
        }
        .apply(&mut y, 1);
        assert_eq!(y, vec![3.0, 4.0, 5.0]);

        // Gamma 2 on [0, 4]: ((x / 4)^2) * 4.
        let mut z = vec![0.0f32, 2.0, 4.0];
        let g = GammaValue {
            gamma: 2.0,
            invert: false,
            retain_stats: false,
        };
        IntensityStep::Gamma {
            channels: vec![Some(g)],
        }
        .apply(&mut z, 1);
        assert_eq!(z, vec![0.0, 1.0, 4.0]);
        // Inverted: the curve bends the other way, the range stays.
        let mut z = vec![0.0f32, 2.0, 4.0];
        IntensityStep::Gamma {
            channels: vec![Some(GammaValue { invert: true, ..g })],
        }
        .apply(&mut z, 1);
        assert_eq!(z, vec![0.0, 3.0, 4.0]);
        // Retained statistics: mean and (Bessel) std as before.
        let mut w: Vec<f32> = (0..100)
            .map(|i| (i as f32 * 0.37).sin() * 5.0 + 3.0)
            .collect();
        let (m0, _, _) = mean_min_max(&w);
        let s0 = std_about(&w, m0);
        IntensityStep::Gamma {
            channels: vec![Some(GammaValue {
                gamma: 1.7,
                invert: false,
                retain_stats: true,
            })],
        }
        .apply(&mut w, 1);
        let (m1, _, _) = mean_min_max(&w);
        assert!((m1 - m0).abs() < 1e-5 && (std_about(&w, m1) - s0).abs() < 1e-5);
    }

    #[test]
    fn bad_values_are_refused() {
        let g = |gamma: f64| IntensityStep::Gamma {
            channels: vec![Some(GammaValue {
                gamma,
                invert: false,
                retain_stats: false,
            })],
        };
        assert!(g(0.0).validate(Some(1)).is_err());
        assert!(g(-1.0).validate(None).is_err());
        assert!(g(f64::NAN).validate(Some(1)).is_err());
        assert!(g(0.5).validate(Some(1)).is_ok());
        let b = IntensityStep::Brightness {
            multipliers: vec![Some(1.0), Some(f64::INFINITY)],
        };
        assert!(b.validate(Some(2)).is_err());
        let b = IntensityStep::Brightness {
            multipliers: vec![Some(1.0), Some(2.0)],
        };
        assert!(b.validate(Some(3)).is_err());
        assert!(b.validate(Some(2)).is_ok());
    }

    #[test]
    fn plans_read_steps_as_json() {
        let s: Vec<IntensityStep> = serde_json::from_str(
            r#"[{"brightness": {"multipliers": [1.1]}},
                {"contrast": {"factors": [0.8, null]}},
                {"gamma": {"channels": [{"gamma": 1.3, "invert": true, "retain_stats": true}]}}]"#,
        )
        .unwrap();
        assert_eq!(s.len(), 3);
        assert!(matches!(
            s[1],
            IntensityStep::Contrast {
                preserve_range: true,
                ..
            }
        ));
        assert!(serde_json::from_str::<Vec<IntensityStep>>(r#"[{"gama": {}}]"#).is_err());
    }
}
