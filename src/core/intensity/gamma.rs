//! `gamma`: batchgeneratorsv2 0.3.6 `GammaTransform`, per channel: optionally inverted (`x · −1`),
//! then `((x − min) / max(range, 1e-7))^γ · range + min`; with `retain_stats` the mean and the
//! standard deviation (Bessel-corrected, as `torch.std`) of before are restored; inverted back.

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use super::stats::{mean_min_max, std_about};
use super::{
    DrawFor, Field, IntensitySpec, IntensityStep, PerChannel, StepSpec, StepValues, check_p,
    check_range, one_value, py_bool, py_float, py_range, single,
};
use crate::core::draws::{Distribution, Range, SplitMix64};

/// The smallest range gamma divides by (batchgeneratorsv2's `eps`).
const EPS: f64 = 1e-7;

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

/// The drawn gammas.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Gamma {
    pub channels: PerChannel<GammaValue>,
}

impl StepValues for Gamma {
    fn count(&self) -> usize {
        self.channels.len()
    }
    fn check(&self, _: Option<usize>) -> Result<(), String> {
        match self
            .channels
            .iter()
            .flatten()
            .find(|g| !g.gamma.is_finite() || g.gamma <= 0.0)
        {
            Some(g) => Err(format!("{} is not a number above 0", g.gamma)),
            None => Ok(()),
        }
    }
    fn apply_channel(&self, entry: usize, _: usize, x: &mut [f32], _: &[usize]) {
        if let Some(Some(g)) = self.channels.get(entry) {
            gamma(x, *g);
        }
    }
    fn needs_whole_channel(&self) -> bool {
        true
    }
    fn fixed(&self) -> Option<IntensitySpec> {
        let v = single(&self.channels)?;
        let flag = |b: bool| if b { 1.0 } else { 0.0 };
        Some(IntensitySpec::Gamma(GammaSpec {
            p: 1.0,
            gamma: one_value(v.gamma),
            distribution: Default::default(),
            p_invert: flag(v.invert),
            p_retain_stats: flag(v.retain_stats),
            p_per_channel: 1.0,
            synchronize_channels: true,
        }))
    }
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

/// When gamma fires and how its values are drawn (nnU-Net v2: two steps, `[0.7, 1.5]` split with
/// statistics retained: inverted with p 0.1, then plain with p 0.3).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GammaSpec {
    pub p: f64,
    pub gamma: Range,
    #[serde(default)]
    pub distribution: Distribution,
    /// Probability that a channel is inverted first.
    #[serde(default)]
    pub p_invert: f64,
    /// Probability that a channel keeps its mean and standard deviation.
    #[serde(default)]
    pub p_retain_stats: f64,
    #[serde(default = "super::one")]
    pub p_per_channel: f64,
    #[serde(default)]
    pub synchronize_channels: bool,
}

impl StepSpec for GammaSpec {
    fn library_default() -> Self {
        GammaSpec {
            p: 0.3,
            gamma: [0.7, 1.5],
            distribution: Distribution::Split,
            p_invert: 0.0,
            p_retain_stats: 1.0,
            p_per_channel: 1.0,
            synchronize_channels: false,
        }
    }
    fn validate(&self) -> Result<(), String> {
        check_p("p", self.p)?;
        check_p("p_per_channel", self.p_per_channel)?;
        check_p("p_invert", self.p_invert)?;
        check_p("p_retain_stats", self.p_retain_stats)?;
        check_range("gamma", self.gamma, Some(0.0))
    }
    fn p(&self) -> f64 {
        self.p
    }
    fn fields(&mut self) -> Vec<Field<'_>> {
        vec![
            Field::Prob("p", &mut self.p),
            Field::Range("gamma", &mut self.gamma, 0.01, ""),
            Field::Distribution(&mut self.distribution),
            Field::Prob("p invert", &mut self.p_invert),
            Field::Prob("p retain stats", &mut self.p_retain_stats),
            Field::Prob("p per channel", &mut self.p_per_channel),
            Field::Flag(
                "one value for every channel",
                &mut self.synchronize_channels,
            ),
        ]
    }
    fn sample(
        &self,
        rng: &mut SplitMix64,
        img: &DrawFor<'_>,
    ) -> (Option<IntensityStep>, serde_json::Value) {
        let channels = img.channels;
        // As batchgeneratorsv2: the channels, then each one's retain and invert decisions, then
        // the gammas (one shared, or one each); every decision drawn.
        let fire = rng.chance(self.p);
        let taking: Vec<bool> = (0..channels)
            .map(|_| rng.chance(self.p_per_channel))
            .collect();
        let flags: Vec<(bool, bool)> = (0..channels)
            .map(|_| (rng.chance(self.p_retain_stats), rng.chance(self.p_invert)))
            .collect();
        let shared = rng.draw(self.gamma, self.distribution);
        let values: PerChannel<GammaValue> = (0..channels)
            .map(|c| {
                let own = rng.draw(self.gamma, self.distribution);
                let (retain_stats, invert) = flags[c];
                taking[c].then_some(GammaValue {
                    gamma: if self.synchronize_channels {
                        shared
                    } else {
                        own
                    },
                    invert,
                    retain_stats,
                })
            })
            .collect();
        let drawn = serde_json::json!({ "fired": fire, "channels": taking });
        let step = (fire && taking.iter().any(|&t| t))
            .then_some(IntensityStep::Gamma(Gamma { channels: values }));
        (step, drawn)
    }
    fn batchgeneratorsv2(&self) -> Option<String> {
        Some(format!(
            "GammaTransform(gamma={}, p_invert_image={}, synchronize_channels={}, \
             p_per_channel={}, p_retain_stats={})",
            py_range(self.gamma, self.distribution),
            py_float(self.p_invert),
            py_bool(self.synchronize_channels),
            py_float(self.p_per_channel),
            py_float(self.p_retain_stats)
        ))
    }
}
