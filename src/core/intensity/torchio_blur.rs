//! `torchio_blur`: TorchIO 1.2.1 `RandomBlur`, `scipy.ndimage.gaussian_filter` per channel with
//! one standard deviation per axis in mm, each drawn uniformly from `std`, divided by the voxel
//! size. scipy's taps: `exp(−x²/2σ²)` normalised, `|x| ≤ int(4σ + ½)`, edges reflected with the
//! edge repeated (scipy's `reflect`); an axis with σ ≤ 1e-15 is left alone. TorchIO holds
//! augscope's axes x first (`(W, H, D)`; a 2D image as `(W, H, 1)`): its x is augscope's last
//! axis.

use serde::{Deserialize, Serialize};

use super::blur::MAX_SIGMA;
use super::{
    Arg, Call, DrawFor, Field, IntensityStep, Pad, StepSpec, StepValues, check_p, check_range,
    convolve_axis,
};
use crate::core::draws::{Range, SplitMix64};

/// The drawn sigmas in voxels, one per augscope axis, for every channel.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TorchioBlur {
    pub sigmas: Vec<f64>,
}

/// scipy's gaussian taps for `sigma` voxels (`_gaussian_kernel1d`, truncate 4), in f64 and
/// rounded; one tap of 1 for σ ≤ 1e-15, which scipy skips.
pub fn scipy_gaussian_kernel(sigma: f64) -> Vec<f32> {
    if sigma <= 1e-15 {
        return vec![1.0];
    }
    let radius = (4.0 * sigma + 0.5) as i64;
    let s2 = sigma * sigma;
    let phi: Vec<f64> = (-radius..=radius)
        .map(|x| (-0.5 / s2 * (x * x) as f64).exp())
        .collect();
    let sum: f64 = phi.iter().sum();
    phi.iter().map(|p| (p / sum) as f32).collect()
}

impl StepValues for TorchioBlur {
    fn count(&self) -> usize {
        1
    }
    fn check(&self, ndim: Option<usize>) -> Result<(), String> {
        if let Some(nd) = ndim
            && self.sigmas.len() != nd
        {
            return Err(format!(
                "{} sigmas for an image of {nd} axes: give one per axis",
                self.sigmas.len()
            ));
        }
        match self
            .sigmas
            .iter()
            .find(|v| !v.is_finite() || **v < 0.0 || **v > MAX_SIGMA)
        {
            Some(v) => Err(format!(
                "sigma {v} is not a number in [0, {MAX_SIGMA}] voxels"
            )),
            None => Ok(()),
        }
    }
    fn apply_channel(&self, _: usize, _: usize, x: &mut [f32], shape: &[usize]) {
        for (axis, sigma) in self.sigmas.iter().enumerate().take(shape.len()) {
            convolve_axis(x, shape, axis, &scipy_gaussian_kernel(*sigma), Pad::Reflect);
        }
    }
    fn needs_whole_channel(&self) -> bool {
        true
    }
}

/// When the blur fires and the range of its standard deviations, in mm.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TorchioBlurSpec {
    pub p: f64,
    pub std: Range,
}

impl StepSpec for TorchioBlurSpec {
    fn library_default() -> Self {
        TorchioBlurSpec {
            p: 1.0,
            std: [0.0, 2.0],
        }
    }
    fn validate(&self) -> Result<(), String> {
        check_p("p", self.p)?;
        check_range("std", self.std, None)?;
        if self.std[0] < 0.0 || self.std[1] > MAX_SIGMA {
            return Err(format!(
                "std [{}, {}] is not within [0, {MAX_SIGMA}] mm",
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
            Field::Range("std", &mut self.std, 0.01, " mm"),
        ]
    }
    fn sample(
        &self,
        rng: &mut SplitMix64,
        img: &DrawFor<'_>,
    ) -> (Option<IntensityStep>, serde_json::Value) {
        let fire = rng.chance(self.p);
        let mm: Vec<f64> = (0..3).map(|_| rng.range(self.std)).collect();
        // TorchIO holds augscope's axes the other way round, x first (a 2D image as (W, H, 1)).
        let sigmas: Vec<f64> = if img.ndim == 3 {
            (0..3).map(|a| mm[2 - a] / img.spacing(a)).collect()
        } else {
            vec![mm[1] / img.spacing(0), mm[0] / img.spacing(1)]
        };
        let step = IntensityStep::TorchioBlur(TorchioBlur { sigmas });
        (
            fire.then_some(step),
            serde_json::json!({ "fired": fire, "std_mm": mm }),
        )
    }
    fn torchio(&self) -> Option<Call> {
        Some(Call {
            class: "RandomBlur",
            args: vec![("std", Arg::Range(self.std)), ("p", Arg::Float(self.p))],
        })
    }
}
