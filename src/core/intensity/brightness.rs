//! `brightness`: batchgeneratorsv2 0.3.6 `MultiplicativeBrightnessTransform`, `x · m` per channel.

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use super::{
    DrawFor, Field, IntensitySpec, IntensityStep, PerChannel, StepSpec, StepValues, check_p,
    check_range, draw_channels, one_value, py_bool, py_float, py_range, single,
};
use crate::core::draws::{Distribution, Range, SplitMix64};

/// The drawn multipliers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Brightness {
    pub multipliers: PerChannel<f64>,
}

impl StepValues for Brightness {
    fn count(&self) -> usize {
        self.multipliers.len()
    }
    fn check(&self, _: Option<usize>) -> Result<(), String> {
        match self.multipliers.iter().flatten().find(|m| !m.is_finite()) {
            Some(m) => Err(format!("{m} is not a finite number")),
            None => Ok(()),
        }
    }
    fn apply_channel(&self, entry: usize, _: usize, x: &mut [f32], _: &[usize]) {
        if let Some(Some(m)) = self.multipliers.get(entry) {
            let m = *m as f32;
            x.par_iter_mut().for_each(|v| *v *= m);
        }
    }
    fn needs_whole_channel(&self) -> bool {
        false
    }
    fn fixed(&self) -> Option<IntensitySpec> {
        Some(IntensitySpec::Brightness(BrightnessSpec {
            p: 1.0,
            multiplier: one_value(single(&self.multipliers)?),
            distribution: Default::default(),
            p_per_channel: 1.0,
            synchronize_channels: true,
        }))
    }
}

/// When brightness fires and how its multipliers are drawn (nnU-Net v2: p 0.15, `[0.75, 1.25]`
/// split, per channel).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BrightnessSpec {
    pub p: f64,
    pub multiplier: Range,
    #[serde(default)]
    pub distribution: Distribution,
    #[serde(default = "super::one")]
    pub p_per_channel: f64,
    #[serde(default)]
    pub synchronize_channels: bool,
}

impl StepSpec for BrightnessSpec {
    fn library_default() -> Self {
        BrightnessSpec {
            p: 0.15,
            multiplier: [0.75, 1.25],
            distribution: Distribution::Split,
            p_per_channel: 1.0,
            synchronize_channels: false,
        }
    }
    fn validate(&self) -> Result<(), String> {
        check_p("p", self.p)?;
        check_p("p_per_channel", self.p_per_channel)?;
        check_range("multiplier", self.multiplier, None)
    }
    fn p(&self) -> f64 {
        self.p
    }
    fn fields(&mut self) -> Vec<Field<'_>> {
        vec![
            Field::Prob("p", &mut self.p),
            Field::Range("multiplier", &mut self.multiplier, 0.01, ""),
            Field::Distribution(&mut self.distribution),
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
        let (v, drawn) = draw_channels(
            rng,
            self.p,
            self.p_per_channel,
            self.synchronize_channels,
            channels,
            |r| r.draw(self.multiplier, self.distribution),
        );
        let step = v.map(|multipliers| IntensityStep::Brightness(Brightness { multipliers }));
        (step, drawn)
    }
    fn batchgeneratorsv2(&self) -> Option<String> {
        Some(format!(
            "MultiplicativeBrightnessTransform(multiplier_range={}, synchronize_channels={}, \
             p_per_channel={})",
            py_range(self.multiplier, self.distribution),
            py_bool(self.synchronize_channels),
            py_float(self.p_per_channel)
        ))
    }
}
