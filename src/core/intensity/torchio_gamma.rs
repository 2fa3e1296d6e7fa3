//! `torchio_gamma`: TorchIO 1.2.1 `RandomGamma`, `sign(x) · |x|^γ` in f32 per channel (TorchIO's
//! `x^γ`, signed where the channel has negative values; the two agree elsewhere), with
//! `γ = exp(u)`, `u` drawn uniformly from `log_gamma` for each channel.

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use super::{
    Arg, Call, DrawFor, Field, IntensityStep, PerChannel, StepSpec, StepValues, check_p,
    check_range,
};
use crate::core::draws::{Range, SplitMix64};

/// The drawn gammas, one per channel.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TorchioGamma {
    pub gammas: PerChannel<f64>,
}

impl StepValues for TorchioGamma {
    fn count(&self) -> usize {
        self.gammas.len()
    }
    fn check(&self, _: Option<usize>) -> Result<(), String> {
        match self
            .gammas
            .iter()
            .flatten()
            .find(|g| !g.is_finite() || **g <= 0.0)
        {
            Some(g) => Err(format!("gamma {g} is not a number above 0")),
            None => Ok(()),
        }
    }
    fn apply_channel(&self, entry: usize, _: usize, x: &mut [f32], _: &[usize]) {
        if let Some(Some(g)) = self.gammas.get(entry) {
            let g = *g as f32;
            x.par_iter_mut().for_each(|v| *v = signed_pow(*v, g));
        }
    }
    fn needs_whole_channel(&self) -> bool {
        false
    }
}

/// `sign(v) · |v|^g` (torch's `sign` is 0 at 0 and keeps NaN).
fn signed_pow(v: f32, g: f32) -> f32 {
    if v > 0.0 {
        v.powf(g)
    } else if v < 0.0 {
        -(-v).powf(g)
    } else {
        v * 0.0
    }
}

/// When gamma fires and the range of its logarithm.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TorchioGammaSpec {
    pub p: f64,
    pub log_gamma: Range,
}

impl StepSpec for TorchioGammaSpec {
    fn library_default() -> Self {
        TorchioGammaSpec {
            p: 1.0,
            log_gamma: [-0.3, 0.3],
        }
    }
    fn validate(&self) -> Result<(), String> {
        check_p("p", self.p)?;
        check_range("log_gamma", self.log_gamma, None)?;
        if self.log_gamma.iter().any(|v| v.abs() > 20.0) {
            return Err(format!(
                "log_gamma [{}, {}] reaches beyond ±20",
                self.log_gamma[0], self.log_gamma[1]
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
            Field::Range("log gamma", &mut self.log_gamma, 0.01, ""),
        ]
    }
    fn sample(
        &self,
        rng: &mut SplitMix64,
        img: &DrawFor<'_>,
    ) -> (Option<IntensityStep>, serde_json::Value) {
        let fire = rng.chance(self.p);
        let gammas: PerChannel<f64> = (0..img.channels)
            .map(|_| Some(rng.range(self.log_gamma).exp()))
            .collect();
        let step = IntensityStep::TorchioGamma(TorchioGamma { gammas });
        (fire.then_some(step), serde_json::json!({ "fired": fire }))
    }
    fn torchio(&self) -> Option<Call> {
        Some(Call {
            class: "RandomGamma",
            args: vec![
                ("log_gamma", Arg::Range(self.log_gamma)),
                ("p", Arg::Float(self.p)),
            ],
        })
    }
}
