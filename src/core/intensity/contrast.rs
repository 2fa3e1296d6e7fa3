//! `contrast`: batchgeneratorsv2 0.3.6 `ContrastTransform`, `(x − mean) · f + mean` per channel,
//! then with `preserve_range` clipped to the channel's minimum and maximum before the step.

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use super::stats::mean_min_max;
use super::{
    IntensityStep, PerChannel, StepSpec, StepValues, check_p, check_range, draw_channels, py_bool,
    py_float, py_range,
};
use crate::core::draws::{Distribution, Range, SplitMix64};

/// The drawn factors.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Contrast {
    pub factors: PerChannel<f64>,
    #[serde(default = "yes")]
    pub preserve_range: bool,
}

fn yes() -> bool {
    true
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
    #[serde(default = "yes")]
    pub preserve_range: bool,
    #[serde(default = "super::one")]
    pub p_per_channel: f64,
    #[serde(default)]
    pub synchronize_channels: bool,
}

impl StepSpec for ContrastSpec {
    fn validate(&self) -> Result<(), String> {
        check_p("p", self.p)?;
        check_p("p_per_channel", self.p_per_channel)?;
        check_range("factor", self.factor, None)
    }
    fn sample(
        &self,
        rng: &mut SplitMix64,
        channels: usize,
        _: usize,
    ) -> (Option<IntensityStep>, serde_json::Value) {
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
    fn batchgeneratorsv2(&self) -> String {
        format!(
            "ContrastTransform(contrast_range={}, preserve_range={}, synchronize_channels={}, \
             p_per_channel={})",
            py_range(self.factor, self.distribution),
            py_bool(self.preserve_range),
            py_bool(self.synchronize_channels),
            py_float(self.p_per_channel)
        )
    }
}
