//! `contrast`: batchgeneratorsv2 0.3.6 `ContrastTransform`, `(x − mean) · f + mean` per channel,
//! then with `preserve_range` clipped to the channel's minimum and maximum before the step.

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use super::stats::mean_min_max;
use super::{
    DrawFor, Field, IntensitySpec, IntensityStep, PerChannel, StepSpec, StepValues, check_p,
    check_range, draw_channels, one_value, py_bool, py_float, py_range, single,
};
use crate::core::draws::{Distribution, Range, SplitMix64};

/// The drawn factors.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Contrast {
    pub factors: PerChannel<f64>,
    #[serde(default = "super::yes")]
    pub preserve_range: bool,
}

impl StepValues for Contrast {
    fn count(&self) -> usize {
        self.factors.len()
    }
    fn check(&self, _: Option<usize>) -> Result<(), String> {
        match self.factors.iter().flatten().find(|m| !m.is_finite()) {
            Some(m) => Err(format!("{m} is not a finite number")),
            None => Ok(()),
        }
    }
    fn apply_channel(&self, entry: usize, _: usize, x: &mut [f32], _: &[usize]) {
        if let Some(Some(f)) = self.factors.get(entry) {
            contrast(x, *f as f32, self.preserve_range);
        }
    }
    fn needs_whole_channel(&self) -> bool {
        true
    }
    fn fixed(&self) -> Option<IntensitySpec> {
        Some(IntensitySpec::Contrast(ContrastSpec {
            p: 1.0,
            factor: one_value(single(&self.factors)?),
            distribution: Default::default(),
            preserve_range: self.preserve_range,
            p_per_channel: 1.0,
            synchronize_channels: true,
        }))
    }
}

fn contrast(x: &mut [f32], f: f32, preserve_range: bool) {
    let (mean, lo, hi) = mean_min_max(x);
    let mean = mean as f32;
    x.par_iter_mut().for_each(|v| {
        let mut y = (*v - mean) * f + mean;
        // Comparisons, not `clamp`: a channel without a number (all NaN) has lo > hi.
        if preserve_range {
            if y < lo {
                y = lo;
            }
            if y > hi {
                y = hi;
            }
        }
        *v = y;
    });
}

/// When contrast fires and how its factors are drawn (nnU-Net v2: p 0.15, `[0.75, 1.25]` split,
/// range preserved, per channel).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContrastSpec {
    pub p: f64,
    pub factor: Range,
    #[serde(default)]
    pub distribution: Distribution,
    #[serde(default = "super::yes")]
    pub preserve_range: bool,
    #[serde(default = "super::one")]
    pub p_per_channel: f64,
    #[serde(default)]
    pub synchronize_channels: bool,
}

impl StepSpec for ContrastSpec {
    fn library_default() -> Self {
        ContrastSpec {
            p: 0.15,
            factor: [0.75, 1.25],
            distribution: Distribution::Split,
            preserve_range: true,
            p_per_channel: 1.0,
            synchronize_channels: false,
        }
    }
    fn validate(&self) -> Result<(), String> {
        check_p("p", self.p)?;
        check_p("p_per_channel", self.p_per_channel)?;
        check_range("factor", self.factor, None)
    }
    fn p(&self) -> f64 {
        self.p
    }
    fn fields(&mut self) -> Vec<Field<'_>> {
        vec![
            Field::Prob("p", &mut self.p),
            Field::Range("factor", &mut self.factor, 0.01, ""),
            Field::Distribution(&mut self.distribution),
            Field::Flag("clip to the channel's range", &mut self.preserve_range),
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
            |r| r.draw(self.factor, self.distribution),
        );
        let step = v.map(|factors| {
            IntensityStep::Contrast(Contrast {
                factors,
                preserve_range: self.preserve_range,
            })
        });
        (step, drawn)
    }
    fn batchgeneratorsv2(&self) -> Option<String> {
        Some(format!(
            "ContrastTransform(contrast_range={}, preserve_range={}, synchronize_channels={}, \
             p_per_channel={})",
            py_range(self.factor, self.distribution),
            py_bool(self.preserve_range),
            py_bool(self.synchronize_channels),
            py_float(self.p_per_channel)
        ))
    }
}
