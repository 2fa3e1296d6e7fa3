//! `monai_gaussian_noise`: MONAI 1.6.1 `RandGaussianNoise`, `x + f32(mean + σ · n)`: numpy's
//! `normal(mean, σ)` in f64, rounded to f32, added in f32. σ is drawn uniformly from `[0, std]`
//! (`sample_std`) or is `std`; one σ for the whole image. `n` is augscope's standard normal field
//! of the step's key (see `noise.rs`), over every channel.

use serde::{Deserialize, Serialize};

use super::noise::add_field;
use super::{
    Arg, Call, DrawFor, Field, IntensitySpec, IntensityStep, StepSpec, StepValues, check_p,
};
use crate::core::draws::SplitMix64;

/// The drawn mean and standard deviation, and the noise's key.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MonaiNoise {
    pub mean: f64,
    pub std: f64,
    pub seed: u64,
}

impl StepValues for MonaiNoise {
    fn count(&self) -> usize {
        1
    }
    fn check(&self, _: Option<usize>) -> Result<(), String> {
        check_mean_std(self.mean, self.std)
    }
    fn apply_channel(&self, _: usize, channel: usize, x: &mut [f32], _: &[usize]) {
        let (mean, std) = (self.mean, self.std);
        add_field(x, self.seed, channel, |z| (mean + std * z as f64) as f32);
    }
    fn needs_whole_channel(&self) -> bool {
        true
    }
    fn fixed(&self) -> Option<IntensitySpec> {
        Some(IntensitySpec::MonaiGaussianNoise(MonaiNoiseSpec {
            p: 1.0,
            mean: self.mean,
            std: self.std,
            sample_std: false,
        }))
    }
}

/// A finite mean within ±1e6 and a finite standard deviation in [0, 1e6], or why not.
pub(crate) fn check_mean_std(mean: f64, std: f64) -> Result<(), String> {
    if !mean.is_finite() || mean.abs() > 1e6 {
        return Err(format!("mean {mean} is not a finite number within ±1e6"));
    }
    if !std.is_finite() || !(0.0..=1e6).contains(&std) {
        return Err(format!("std {std} is not a finite number in [0, 1e6]"));
    }
    Ok(())
}

/// When the noise fires (`prob`) and its distribution.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MonaiNoiseSpec {
    pub p: f64,
    #[serde(default)]
    pub mean: f64,
    pub std: f64,
    /// σ drawn uniformly from `[0, std]` (MONAI's default), else σ = `std`.
    #[serde(default = "super::yes")]
    pub sample_std: bool,
}

impl StepSpec for MonaiNoiseSpec {
    fn library_default() -> Self {
        MonaiNoiseSpec {
            p: 0.1,
            mean: 0.0,
            std: 0.1,
            sample_std: true,
        }
    }
    fn validate(&self) -> Result<(), String> {
        check_p("p", self.p)?;
        check_mean_std(self.mean, self.std)
    }
    fn p(&self) -> f64 {
        self.p
    }
    fn fields(&mut self) -> Vec<Field<'_>> {
        vec![
            Field::Prob("p", &mut self.p),
            Field::Number("mean", &mut self.mean, 0.01, ""),
            Field::Number("std", &mut self.std, 0.005, ""),
            Field::Flag("std drawn from [0, std]", &mut self.sample_std),
        ]
    }
    fn sample(
        &self,
        rng: &mut SplitMix64,
        _: &DrawFor<'_>,
    ) -> (Option<IntensityStep>, serde_json::Value) {
        let fire = rng.chance(self.p);
        let drawn_std = rng.range([0.0, self.std]);
        let seed = rng.next_u64();
        let std = if self.sample_std { drawn_std } else { self.std };
        let step = IntensityStep::MonaiGaussianNoise(MonaiNoise {
            mean: self.mean,
            std,
            seed,
        });
        (fire.then_some(step), serde_json::json!({ "fired": fire }))
    }
    fn monai(&self) -> Option<Call> {
        Some(Call {
            class: "RandGaussianNoised",
            args: vec![
                ("prob", Arg::Float(self.p)),
                ("mean", Arg::Float(self.mean)),
                ("std", Arg::Float(self.std)),
                ("sample_std", Arg::Bool(self.sample_std)),
            ],
        })
    }
}
