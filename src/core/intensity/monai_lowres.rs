//! `monai_simulate_low_resolution`: MONAI 1.6.1 `RandSimulateLowResolution` with its defaults
//! (`downsample_mode="nearest"`, `upsample_mode="trilinear"`, `align_corners=False`): one zoom
//! `z` drawn uniformly from `zoom_range` for the image, every axis down to `max(1, round(n · z))`
//! voxels (numpy's round, half to even, of the f64 product) with torch's legacy `nearest`, then
//! back up to `n` with its linear interpolation, as `torch.nn.functional.interpolate` computes
//! them on the CPU (the index and weight arithmetic of `lowres.rs`). MONAI's `trilinear` needs a
//! 3D image; on a 2D one augscope interpolates bilinearly, as `upsample_mode="bilinear"` would.

use serde::{Deserialize, Serialize};

use super::lowres::{nearest_index, resize_linear, resize_nearest};
use super::{
    Arg, Call, DrawFor, Field, IntensitySpec, IntensityStep, StepSpec, StepValues, check_p,
    check_range, one_value,
};
use crate::core::draws::{Range, SplitMix64};

/// The drawn zoom, for every axis and channel.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MonaiLowResolution {
    pub zoom: f64,
}

/// The low-resolution shape of `shape` for `zoom` (MONAI's `max(1, int(np.round(n · z)))`).
pub fn monai_low_resolution_shape(shape: &[usize], zoom: f64) -> Vec<usize> {
    shape
        .iter()
        .map(|&n| ((n as f64 * zoom).round_ties_even() as usize).max(1))
        .collect()
}

impl StepValues for MonaiLowResolution {
    fn count(&self) -> usize {
        1
    }
    fn check(&self, _: Option<usize>) -> Result<(), String> {
        if !self.zoom.is_finite() || self.zoom <= 0.0 || self.zoom > 1.0 {
            return Err(format!("zoom {} is not a number in (0, 1]", self.zoom));
        }
        Ok(())
    }
    fn apply_channel(&self, _: usize, _: usize, x: &mut [f32], shape: &[usize]) {
        let small = monai_low_resolution_shape(shape, self.zoom);
        let down = resize_nearest(x, shape, &small, nearest_index);
        resize_linear(&down, &small, x, shape);
    }
    fn needs_whole_channel(&self) -> bool {
        true
    }
    fn fixed(&self) -> Option<IntensitySpec> {
        Some(IntensitySpec::MonaiSimulateLowResolution(
            MonaiLowResolutionSpec {
                p: 1.0,
                zoom_range: one_value(self.zoom),
            },
        ))
    }
}

/// When the low resolution fires (`prob`) and the range of its zoom.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MonaiLowResolutionSpec {
    pub p: f64,
    pub zoom_range: Range,
}

impl StepSpec for MonaiLowResolutionSpec {
    fn library_default() -> Self {
        MonaiLowResolutionSpec {
            p: 0.1,
            zoom_range: [0.5, 1.0],
        }
    }
    fn validate(&self) -> Result<(), String> {
        check_p("p", self.p)?;
        check_range("zoom_range", self.zoom_range, Some(0.0))?;
        if self.zoom_range[1] > 1.0 {
            return Err(format!("zoom_range {} is above 1", self.zoom_range[1]));
        }
        Ok(())
    }
    fn p(&self) -> f64 {
        self.p
    }
    fn fields(&mut self) -> Vec<Field<'_>> {
        vec![
            Field::Prob("p", &mut self.p),
            Field::Range("zoom", &mut self.zoom_range, 0.01, "×"),
        ]
    }
    fn sample(
        &self,
        rng: &mut SplitMix64,
        _: &DrawFor<'_>,
    ) -> (Option<IntensityStep>, serde_json::Value) {
        let fire = rng.chance(self.p);
        let zoom = rng.range(self.zoom_range);
        let step = IntensityStep::MonaiSimulateLowResolution(MonaiLowResolution { zoom });
        (fire.then_some(step), serde_json::json!({ "fired": fire }))
    }
    fn monai(&self) -> Option<Call> {
        Some(Call {
            class: "RandSimulateLowResolutiond",
            args: vec![
                ("zoom_range", Arg::Range(self.zoom_range)),
                ("prob", Arg::Float(self.p)),
            ],
        })
    }
}
