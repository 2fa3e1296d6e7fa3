//! `monai_gaussian_smooth`: MONAI 1.6.1 `RandGaussianSmooth`, a separable gaussian over the
//! whole image with one sigma per axis drawn uniformly from `sigma_x`, `sigma_y`, `sigma_z`
//! (MONAI's spatial axes, x first: augscope's last axis is MONAI's x). The taps are MONAI's
//! `gaussian_1d(σ, truncated=4, approx="erf")`: `½ (erf((x + ½)/(σ√2)) − erf((x − ½)/(σ√2)))` for
//! `|x| ≤ int(max(4σ, ½) + ½)`, not normalised; beyond the edge lie zeros.

use serde::{Deserialize, Serialize};

use super::blur::MAX_SIGMA;
use super::{
    Arg, Call, DrawFor, Field, IntensitySpec, IntensityStep, Pad, StepSpec, StepValues, check_p,
    check_range, convolve_axis, one_value,
};
use crate::core::draws::{Range, SplitMix64};

/// The drawn sigmas in voxels, one per augscope axis, for every channel.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MonaiSmooth {
    pub sigmas: Vec<f64>,
}

/// MONAI's erf taps for `sigma` (a float32 tensor in MONAI: `sigma` is rounded to f32 first, the
/// taps computed in f64 and rounded).
pub fn erf_kernel(sigma: f64) -> Vec<f32> {
    let s = sigma as f32 as f64;
    let tail = ((s * 4.0).max(0.5) + 0.5) as i64;
    // MONAI's 0.70710678 as the f32 it becomes beside a float32 tensor: 1/√2 rounded to f32.
    let t = (std::f32::consts::FRAC_1_SQRT_2 / s as f32) as f64;
    (-tail..=tail)
        .map(|x| {
            let x = x as f64;
            let v = 0.5 * (libm::erf(t * (x + 0.5)) - libm::erf(t * (x - 0.5)));
            v.max(0.0) as f32
        })
        .collect()
}

/// Per-axis sigmas of a step (`what` names them in a count, `name` one of them): one per axis
/// of an `ndim`-axis image, each in (0, MAX_SIGMA].
pub(crate) fn check_axis_sigmas(
    what: &str,
    name: &str,
    s: &[f64],
    ndim: Option<usize>,
) -> Result<(), String> {
    if let Some(nd) = ndim
        && s.len() != nd
    {
        return Err(format!(
            "{} {what} for an image of {nd} axes: give one per axis",
            s.len()
        ));
    }
    match s
        .iter()
        .find(|v| !v.is_finite() || **v <= 0.0 || **v > MAX_SIGMA)
    {
        Some(v) => Err(format!("{name} {v} is not a number in (0, {MAX_SIGMA}]")),
        None => Ok(()),
    }
}

/// A preset's sigma range in voxels: above 0, at most MAX_SIGMA.
pub(crate) fn check_sigma_range(name: &str, r: Range) -> Result<(), String> {
    check_range(name, r, Some(0.0))?;
    if r[1] > MAX_SIGMA {
        return Err(format!("{name} {} is above {MAX_SIGMA} voxels", r[1]));
    }
    Ok(())
}

/// Per-axis values on augscope's axes as MONAI's `(x, y, z)`: MONAI's x is augscope's last
/// axis; a 2D step's z repeats its y.
pub(crate) fn monai_xyz(s: &[f64]) -> Option<[f64; 3]> {
    let x = *s.last()?;
    let y = *s.get(s.len().checked_sub(2)?)?;
    Some([x, y, if s.len() == 3 { s[0] } else { y }])
}

/// MONAI's `(x, y, z)` on augscope's axes, for an image of `ndim` axes (the other way round).
pub(crate) fn augscope_axes(ndim: usize, x: f64, y: f64, z: f64) -> Vec<f64> {
    if ndim == 3 { vec![z, y, x] } else { vec![y, x] }
}

impl StepValues for MonaiSmooth {
    fn count(&self) -> usize {
        1
    }
    fn check(&self, ndim: Option<usize>) -> Result<(), String> {
        check_axis_sigmas("sigmas", "sigma", &self.sigmas, ndim)
    }
    fn apply_channel(&self, _: usize, _: usize, x: &mut [f32], shape: &[usize]) {
        for (axis, sigma) in self.sigmas.iter().enumerate().take(shape.len()) {
            convolve_axis(x, shape, axis, &erf_kernel(*sigma), Pad::Zero);
        }
    }
    fn needs_whole_channel(&self) -> bool {
        true
    }
    fn fixed(&self) -> Option<IntensitySpec> {
        let [x, y, z] = monai_xyz(&self.sigmas)?;
        Some(IntensitySpec::MonaiGaussianSmooth(MonaiSmoothSpec {
            p: 1.0,
            sigma_x: one_value(x),
            sigma_y: one_value(y),
            sigma_z: one_value(z),
        }))
    }
}

/// When the smoothing fires (`prob`) and the ranges of its sigmas, in voxels, on MONAI's axes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MonaiSmoothSpec {
    pub p: f64,
    pub sigma_x: Range,
    pub sigma_y: Range,
    pub sigma_z: Range,
}

impl StepSpec for MonaiSmoothSpec {
    fn library_default() -> Self {
        MonaiSmoothSpec {
            p: 0.1,
            sigma_x: [0.25, 1.5],
            sigma_y: [0.25, 1.5],
            sigma_z: [0.25, 1.5],
        }
    }
    fn validate(&self) -> Result<(), String> {
        check_p("p", self.p)?;
        for (name, r) in [
            ("sigma_x", self.sigma_x),
            ("sigma_y", self.sigma_y),
            ("sigma_z", self.sigma_z),
        ] {
            check_sigma_range(name, r)?;
        }
        Ok(())
    }
    fn p(&self) -> f64 {
        self.p
    }
    fn fields(&mut self) -> Vec<Field<'_>> {
        vec![
            Field::Prob("p", &mut self.p),
            Field::Range("sigma x (last axis)", &mut self.sigma_x, 0.01, " vox"),
            Field::Range("sigma y", &mut self.sigma_y, 0.01, " vox"),
            Field::Range("sigma z (first axis, 3D)", &mut self.sigma_z, 0.01, " vox"),
        ]
    }
    fn sample(
        &self,
        rng: &mut SplitMix64,
        img: &DrawFor<'_>,
    ) -> (Option<IntensityStep>, serde_json::Value) {
        let fire = rng.chance(self.p);
        let x = rng.range(self.sigma_x);
        let y = rng.range(self.sigma_y);
        let z = rng.range(self.sigma_z);
        let sigmas = augscope_axes(img.ndim, x, y, z);
        let step = IntensityStep::MonaiGaussianSmooth(MonaiSmooth { sigmas });
        (fire.then_some(step), serde_json::json!({ "fired": fire }))
    }
    fn monai(&self) -> Option<Call> {
        Some(Call {
            class: "RandGaussianSmoothd",
            args: vec![
                ("sigma_x", Arg::Range(self.sigma_x)),
                ("sigma_y", Arg::Range(self.sigma_y)),
                ("sigma_z", Arg::Range(self.sigma_z)),
                ("prob", Arg::Float(self.p)),
            ],
        })
    }
}
