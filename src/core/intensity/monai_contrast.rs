//! `monai_adjust_contrast`: MONAI 1.6.1 `RandAdjustContrast`, over the whole image at once (its
//! minimum, maximum, mean and standard deviation span every channel): optionally inverted
//! (`−x`), then `((x − min) / f32(range + 1e-7))^γ · range + min` in f32; with `retain_stats`
//! the result is centred, divided by its standard deviation (Bessel-corrected, as `torch.std`)
//! plus 1e-8 and given the mean and standard deviation of before; inverted back. γ is drawn
//! uniformly from `gamma`.

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use super::stats::{mean_min_max, std_about};
use super::{
    Arg, Call, DrawFor, Field, IntensitySpec, IntensityStep, StepSpec, StepValues, check_p,
    check_range, one_value,
};
use crate::core::draws::{Range, SplitMix64};

/// The drawn gamma.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MonaiContrast {
    pub gamma: f64,
    #[serde(default)]
    pub invert: bool,
    #[serde(default)]
    pub retain_stats: bool,
}

impl StepValues for MonaiContrast {
    fn count(&self) -> usize {
        1
    }
    fn check(&self, _: Option<usize>) -> Result<(), String> {
        if !self.gamma.is_finite() || self.gamma <= 0.0 {
            return Err(format!("gamma {} is not a number above 0", self.gamma));
        }
        Ok(())
    }
    fn apply_channel(&self, _: usize, _: usize, x: &mut [f32], _: &[usize]) {
        if self.invert {
            x.par_iter_mut().for_each(|v| *v = -*v);
        }
        let (mean, lo, hi) = mean_min_max(x);
        let (mn, sd) = if self.retain_stats {
            (mean as f32, std_about(x, mean) as f32)
        } else {
            (0.0, 0.0)
        };
        let range = hi - lo;
        let denom = range + 1e-7;
        let g = self.gamma as f32;
        x.par_iter_mut()
            .for_each(|v| *v = ((*v - lo) / denom).powf(g) * range + lo);
        if self.retain_stats {
            let (m, _, _) = mean_min_max(x);
            let s = std_about(x, m) as f32 + 1e-8;
            let m = m as f32;
            x.par_iter_mut().for_each(|v| *v = sd * ((*v - m) / s) + mn);
        }
        if self.invert {
            x.par_iter_mut().for_each(|v| *v = -*v);
        }
    }
    fn needs_whole_channel(&self) -> bool {
        true
    }
    fn whole_image(&self) -> bool {
        true
    }
    fn fixed(&self) -> Option<IntensitySpec> {
        Some(IntensitySpec::MonaiAdjustContrast(MonaiContrastSpec {
            p: 1.0,
            gamma: one_value(self.gamma),
            invert_image: self.invert,
            retain_stats: self.retain_stats,
        }))
    }
}

/// When the contrast fires (`prob`) and the range of its gamma.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MonaiContrastSpec {
    pub p: f64,
    pub gamma: Range,
    #[serde(default)]
    pub invert_image: bool,
    #[serde(default)]
    pub retain_stats: bool,
}

impl StepSpec for MonaiContrastSpec {
    fn library_default() -> Self {
        MonaiContrastSpec {
            p: 0.1,
            gamma: [0.5, 4.5],
            invert_image: false,
            retain_stats: false,
        }
    }
    fn validate(&self) -> Result<(), String> {
        check_p("p", self.p)?;
        check_range("gamma", self.gamma, Some(0.0))
    }
    fn p(&self) -> f64 {
        self.p
    }
    fn fields(&mut self) -> Vec<Field<'_>> {
        vec![
            Field::Prob("p", &mut self.p),
            Field::Range("gamma", &mut self.gamma, 0.01, ""),
            Field::Flag("invert the image first", &mut self.invert_image),
            Field::Flag("keep mean and std", &mut self.retain_stats),
        ]
    }
    fn sample(
        &self,
        rng: &mut SplitMix64,
        _: &DrawFor<'_>,
    ) -> (Option<IntensityStep>, serde_json::Value) {
        let fire = rng.chance(self.p);
        let gamma = rng.range(self.gamma);
        let step = IntensityStep::MonaiAdjustContrast(MonaiContrast {
            gamma,
            invert: self.invert_image,
            retain_stats: self.retain_stats,
        });
        (fire.then_some(step), serde_json::json!({ "fired": fire }))
    }
    fn monai(&self) -> Option<Call> {
        Some(Call {
            class: "RandAdjustContrastd",
            args: vec![
                ("prob", Arg::Float(self.p)),
                ("gamma", Arg::Range(self.gamma)),
                ("invert_image", Arg::Bool(self.invert_image)),
                ("retain_stats", Arg::Bool(self.retain_stats)),
            ],
        })
    }
}
