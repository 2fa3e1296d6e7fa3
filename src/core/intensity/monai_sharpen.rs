//! `monai_gaussian_sharpen`: MONAI 1.6.1 `RandGaussianSharpen` (`GaussianSharpen`), on each
//! channel: `b₁ = G(σ₁) x`, `b₂ = G(σ₂) b₁`, `b₁ + α (b₁ − b₂)` in f32, where `G` is the separable
//! erf-tap filter of `monai_gaussian_smooth` (zero padding). The sigmas are drawn per axis on
//! MONAI's axes (x first: augscope's last axis is MONAI's x): `σ₁` uniformly from `sigma1_x` …;
//! `σ₂` from `sigma2_x` … where that is a range, or from `[sigma2_x, σ₁ₓ]` where it is one
//! number (MONAI's default, 0.5); `α` uniformly from `alpha`.

use serde::{Deserialize, Serialize};

use super::monai_smooth::{augscope_axes, check_axis_sigmas, check_sigma_range, monai_xyz};
use super::{
    Arg, Call, DrawFor, Field, IntensitySpec, IntensityStep, Pad, StepSpec, StepValues, check_p,
    check_range, convolve_axis, erf_kernel, one_value,
};
use crate::core::draws::{Range, SplitMix64};

/// The drawn sigmas in voxels, one per augscope axis, and the weight, for every channel.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MonaiSharpen {
    pub sigma1: Vec<f64>,
    pub sigma2: Vec<f64>,
    pub alpha: f64,
}

/// The largest weight `alpha` a preset or plan may give (MONAI's default range is 10–30).
pub const MAX_ALPHA: f64 = 1000.0;

/// `b₁ + α (b₁ − b₂)` in place on `b1`, as torch computes it (α rounded to f32 first).
pub(crate) fn sharpen_combine(b1: &mut [f32], b2: &[f32], alpha: f64) {
    use rayon::prelude::*;
    let a = alpha as f32;
    b1.par_iter_mut()
        .zip(b2.par_iter())
        .for_each(|(x, &y)| *x += a * (*x - y));
}

impl StepValues for MonaiSharpen {
    fn count(&self) -> usize {
        1
    }
    fn check(&self, ndim: Option<usize>) -> Result<(), String> {
        check_axis_sigmas("sigma1 values", "sigma1", &self.sigma1, ndim)?;
        let nd = ndim.or(Some(self.sigma1.len()));
        check_axis_sigmas("sigma2 values", "sigma2", &self.sigma2, nd)?;
        if !self.alpha.is_finite() || self.alpha.abs() > MAX_ALPHA {
            return Err(format!(
                "alpha {} is not a number in [-{MAX_ALPHA}, {MAX_ALPHA}]",
                self.alpha
            ));
        }
        Ok(())
    }
    fn apply_channel(&self, _: usize, _: usize, x: &mut [f32], shape: &[usize]) {
        for (axis, sigma) in self.sigma1.iter().enumerate().take(shape.len()) {
            convolve_axis(x, shape, axis, &erf_kernel(*sigma), Pad::Zero);
        }
        let mut b2 = x.to_vec();
        for (axis, sigma) in self.sigma2.iter().enumerate().take(shape.len()) {
            convolve_axis(&mut b2, shape, axis, &erf_kernel(*sigma), Pad::Zero);
        }
        sharpen_combine(x, &b2, self.alpha);
    }
    fn needs_whole_channel(&self) -> bool {
        true
    }
    fn fixed(&self) -> Option<IntensitySpec> {
        let [x1, y1, z1] = monai_xyz(&self.sigma1)?;
        let [x2, y2, z2] = monai_xyz(&self.sigma2)?;
        Some(IntensitySpec::MonaiGaussianSharpen(MonaiSharpenSpec {
            p: 1.0,
            sigma1_x: one_value(x1),
            sigma1_y: one_value(y1),
            sigma1_z: one_value(z1),
            sigma2_x: Sigma2::Range(one_value(x2)),
            sigma2_y: Sigma2::Range(one_value(y2)),
            sigma2_z: Sigma2::Range(one_value(z2)),
            alpha: one_value(self.alpha),
        }))
    }
}

/// The second filter's sigma on one axis: a range, or one number `s` for the range from `s` to
/// the first filter's drawn sigma on that axis (MONAI's two forms).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Sigma2 {
    UpToSigma1(f64),
    Range(Range),
}

impl Sigma2 {
    fn draw(self, rng: &mut SplitMix64, sigma1: f64) -> f64 {
        match self {
            Sigma2::UpToSigma1(lo) => rng.range([lo, sigma1]),
            Sigma2::Range(r) => rng.range(r),
        }
    }

    fn arg(self) -> Arg {
        match self {
            Sigma2::UpToSigma1(v) => Arg::Float(v),
            Sigma2::Range(r) => Arg::Range(r),
        }
    }

    fn check(self, name: &str, sigma1: Range) -> Result<(), String> {
        match self {
            Sigma2::UpToSigma1(v) => {
                if !(v.is_finite() && v > 0.0 && v <= sigma1[0]) {
                    return Err(format!(
                        "{name} {v} must lie in (0, {}]: it is the low end of a range that ends \
                         at the first sigma",
                        sigma1[0]
                    ));
                }
                Ok(())
            }
            Sigma2::Range(r) => check_sigma_range(name, r),
        }
    }
}

/// When the sharpening fires (`prob`) and the ranges of its sigmas (in voxels, on MONAI's axes)
/// and weight.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MonaiSharpenSpec {
    pub p: f64,
    pub sigma1_x: Range,
    pub sigma1_y: Range,
    pub sigma1_z: Range,
    pub sigma2_x: Sigma2,
    pub sigma2_y: Sigma2,
    pub sigma2_z: Sigma2,
    pub alpha: Range,
}

impl StepSpec for MonaiSharpenSpec {
    fn library_default() -> Self {
        MonaiSharpenSpec {
            p: 0.1,
            sigma1_x: [0.5, 1.0],
            sigma1_y: [0.5, 1.0],
            sigma1_z: [0.5, 1.0],
            sigma2_x: Sigma2::UpToSigma1(0.5),
            sigma2_y: Sigma2::UpToSigma1(0.5),
            sigma2_z: Sigma2::UpToSigma1(0.5),
            alpha: [10.0, 30.0],
        }
    }
    fn validate(&self) -> Result<(), String> {
        check_p("p", self.p)?;
        for (name, r) in [
            ("sigma1_x", self.sigma1_x),
            ("sigma1_y", self.sigma1_y),
            ("sigma1_z", self.sigma1_z),
        ] {
            check_sigma_range(name, r)?;
        }
        self.sigma2_x.check("sigma2_x", self.sigma1_x)?;
        self.sigma2_y.check("sigma2_y", self.sigma1_y)?;
        self.sigma2_z.check("sigma2_z", self.sigma1_z)?;
        check_range("alpha", self.alpha, None)?;
        if self.alpha.iter().any(|a| a.abs() > MAX_ALPHA) {
            return Err(format!(
                "alpha [{}, {}] reaches beyond ±{MAX_ALPHA}",
                self.alpha[0], self.alpha[1]
            ));
        }
        Ok(())
    }
    fn p(&self) -> f64 {
        self.p
    }
    fn fields(&mut self) -> Vec<Field<'_>> {
        let mut f = vec![
            Field::Prob("p", &mut self.p),
            Field::Range("sigma1 x (last axis)", &mut self.sigma1_x, 0.01, " vox"),
            Field::Range("sigma1 y", &mut self.sigma1_y, 0.01, " vox"),
            Field::Range(
                "sigma1 z (first axis, 3D)",
                &mut self.sigma1_z,
                0.01,
                " vox",
            ),
        ];
        for (label_lo, label_range, s) in [
            (
                "sigma2 x from (to sigma1 x)",
                "sigma2 x",
                &mut self.sigma2_x,
            ),
            (
                "sigma2 y from (to sigma1 y)",
                "sigma2 y",
                &mut self.sigma2_y,
            ),
            (
                "sigma2 z from (to sigma1 z)",
                "sigma2 z",
                &mut self.sigma2_z,
            ),
        ] {
            f.push(match s {
                Sigma2::UpToSigma1(v) => Field::Number(label_lo, v, 0.01, " vox"),
                Sigma2::Range(r) => Field::Range(label_range, r, 0.01, " vox"),
            });
        }
        f.push(Field::Range("alpha", &mut self.alpha, 0.1, ""));
        f
    }
    fn sample(
        &self,
        rng: &mut SplitMix64,
        img: &DrawFor<'_>,
    ) -> (Option<IntensityStep>, serde_json::Value) {
        let fire = rng.chance(self.p);
        let x1 = rng.range(self.sigma1_x);
        let y1 = rng.range(self.sigma1_y);
        let z1 = rng.range(self.sigma1_z);
        let x2 = self.sigma2_x.draw(rng, x1);
        let y2 = self.sigma2_y.draw(rng, y1);
        let z2 = self.sigma2_z.draw(rng, z1);
        let alpha = rng.range(self.alpha);
        let step = IntensityStep::MonaiGaussianSharpen(MonaiSharpen {
            sigma1: augscope_axes(img.ndim, x1, y1, z1),
            sigma2: augscope_axes(img.ndim, x2, y2, z2),
            alpha,
        });
        (fire.then_some(step), serde_json::json!({ "fired": fire }))
    }
    fn monai(&self) -> Option<Call> {
        Some(Call {
            class: "RandGaussianSharpend",
            args: vec![
                ("sigma1_x", Arg::Range(self.sigma1_x)),
                ("sigma1_y", Arg::Range(self.sigma1_y)),
                ("sigma1_z", Arg::Range(self.sigma1_z)),
                ("sigma2_x", self.sigma2_x.arg()),
                ("sigma2_y", self.sigma2_y.arg()),
                ("sigma2_z", self.sigma2_z.arg()),
                ("alpha", Arg::Range(self.alpha)),
                ("prob", Arg::Float(self.p)),
            ],
        })
    }
}
