//! `torchio_noise`: TorchIO 1.2.1 `RandomNoise`, `x + (n · σ + μ)` in f32 (torch's `randn` times
//! σ plus μ, each rounded), with μ and σ drawn uniformly from their ranges, one pair for the
//! image. `n` is augscope's standard normal field of the step's key (see `noise.rs`), over every
//! channel.

use serde::{Deserialize, Serialize};

use super::monai_noise::check_mean_std;
use super::noise::add_field;
use super::{
    Arg, Call, DrawFor, Field, IntensitySpec, IntensityStep, StepSpec, StepValues, check_p,
    check_range, one_value,
};
use crate::core::draws::{Range, SplitMix64};

/// The drawn mean and standard deviation, and the noise's key.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TorchioNoise {
    pub mean: f64,
    pub std: f64,
    pub seed: u64,
}

impl StepValues for TorchioNoise {
    fn count(&self) -> usize {
        1
    }
    fn check(&self, _: Option<usize>) -> Result<(), String> {
        check_mean_std(self.mean, self.std)
    }
    fn apply_channel(&self, _: usize, channel: usize, x: &mut [f32], _: &[usize]) {
        let (mean, std) = (self.mean as f32, self.std as f32);
        add_field(x, self.seed, channel, |z| z * std + mean);
    }
    fn needs_whole_channel(&self) -> bool {
        true
    }
    fn fixed(&self) -> Option<IntensitySpec> {
        Some(IntensitySpec::TorchioNoise(TorchioNoiseSpec {
            p: 1.0,
            mean: one_value(self.mean),
            std: one_value(self.std),
        }))
    }
}

/// When the noise fires and the ranges its mean and standard deviation are drawn from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TorchioNoiseSpec {
    pub p: f64,
    #[serde(default)]
    pub mean: Range,
    pub std: Range,
}

impl StepSpec for TorchioNoiseSpec {
    fn library_default() -> Self {
        TorchioNoiseSpec {
            p: 1.0,
            mean: [0.0, 0.0],
            std: [0.0, 0.25],
        }
    }
    fn validate(&self) -> Result<(), String> {
        check_p("p", self.p)?;
        check_range("mean", self.mean, None)?;
        check_range("std", self.std, None)?;
        if self.std[0] < 0.0 {
            return Err(format!(
                "std [{}, {}] reaches below 0",
                self.std[0], self.std[1]
            ));
        }
        Ok(())
    }
    fn p(&self) -> f64 {
        self.p
    }
    fn fields(&mut self) -> Vec<Field<'_>> {
        vec![
            Field::Prob("p", &mut self.p),
            Field::Range("mean", &mut self.mean, 0.01, ""),
            Field::Range("std", &mut self.std, 0.005, ""),
        ]
    }
    fn sample(
        &self,
        rng: &mut SplitMix64,
        _: &DrawFor<'_>,
    ) -> (Option<IntensityStep>, serde_json::Value) {
        let fire = rng.chance(self.p);
        let mean = rng.range(self.mean);
        let std = rng.range(self.std);
        let seed = rng.next_u64();
        let step = IntensityStep::TorchioNoise(TorchioNoise { mean, std, seed });
        (fire.then_some(step), serde_json::json!({ "fired": fire }))
    }
    fn torchio(&self) -> Option<Call> {
        Some(Call {
            class: "RandomNoise",
            args: vec![
                ("mean", Arg::Range(self.mean)),
                ("std", Arg::Range(self.std)),
                ("p", Arg::Float(self.p)),
            ],
        })
    }
}
