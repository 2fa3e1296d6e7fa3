//! `gaussian_blur`: batchgeneratorsv2 0.3.6 `GaussianBlurTransform`, per channel and axis: a
//! separable gaussian, axis 0 first, whose kernel has `round_to_odd(6σ + 0.5)` taps (about ±3σ;
//! `_build_kernel(σ, truncate=6)`), normalised to sum 1, over the channel padded by reflection
//! without the edge repeated (torch's `reflect`, scipy's `mirror`). Sums in f32, tap by tap.

use serde::{Deserialize, Serialize};

use super::{
    DrawFor, Field, IntensitySpec, IntensityStep, Pad, PerChannel, StepSpec, StepValues, check_p,
    check_range, convolve_axis, draw_channels, one_value, py_bool, py_float, py_range, single,
};
use crate::core::draws::{Range, SplitMix64};

/// The largest sigma, in voxels (601 taps; a training pipeline blurs by a voxel or two).
pub const MAX_SIGMA: f64 = 100.0;

/// The drawn sigmas, in voxels, one per spatial axis.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Blur {
    pub sigmas: PerChannel<Vec<f64>>,
}

/// batchgeneratorsv2's kernel for `sigma`: `round_to_odd(6σ + 0.5)` taps at integer offsets,
/// `exp(−x² / 2σ²)` normalised; Python's rounding (half to even), then to the odd number on the
/// side of the value.
pub fn blur_kernel(sigma: f64) -> Vec<f32> {
    let n = sigma * 6.0 + 0.5;
    let r = n.round_ties_even();
    let size = if r.rem_euclid(2.0) == 1.0 {
        r
    } else if n - r >= 0.0 {
        r + 1.0
    } else {
        r - 1.0
    };
    let size = size.max(1.0) as usize;
    let half = (size as f64 - 1.0) / 2.0;
    let pdf: Vec<f64> = (0..size)
        .map(|i| {
            let x = (i as f64 - half) / sigma;
            (-0.5 * x * x).exp()
        })
        .collect();
    let sum: f64 = pdf.iter().sum();
    pdf.iter().map(|p| (p / sum) as f32).collect()
}

impl StepValues for Blur {
    fn count(&self) -> usize {
        self.sigmas.len()
    }
    fn check(&self, ndim: Option<usize>) -> Result<(), String> {
        for s in self.sigmas.iter().flatten() {
            if let Some(nd) = ndim
                && s.len() != nd
            {
                return Err(format!(
                    "{} sigmas for an image of {nd} axes: give one per axis",
                    s.len()
                ));
            }
            if let Some(v) = s
                .iter()
                .find(|v| !v.is_finite() || **v <= 0.0 || **v > MAX_SIGMA)
            {
                return Err(format!("sigma {v} is not a number in (0, {MAX_SIGMA}]"));
            }
        }
        Ok(())
    }
    fn apply_channel(&self, entry: usize, _: usize, x: &mut [f32], shape: &[usize]) {
        if let Some(Some(s)) = self.sigmas.get(entry) {
            for (axis, sigma) in s.iter().enumerate().take(shape.len()) {
                convolve_axis(x, shape, axis, &blur_kernel(*sigma), Pad::Mirror);
            }
        }
    }
    fn needs_whole_channel(&self) -> bool {
        true
    }
    fn fixed(&self) -> Option<IntensitySpec> {
        let s = single(&self.sigmas)?;
        let first = *s.first()?;
        if s.iter().any(|v| *v != first) {
            return None;
        }
        Some(IntensitySpec::GaussianBlur(BlurSpec {
            p: 1.0,
            sigma: one_value(first),
            p_per_channel: 1.0,
            synchronize_channels: true,
            synchronize_axes: true,
        }))
    }
}

/// When blur fires and how its sigmas are drawn (nnU-Net v2: p 0.2, `[0.5, 1]`, each channel
/// with p 0.5, a sigma per channel and axis).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BlurSpec {
    pub p: f64,
    /// The sigma's range, in voxels.
    pub sigma: Range,
    #[serde(default = "super::one")]
    pub p_per_channel: f64,
    #[serde(default)]
    pub synchronize_channels: bool,
    /// One sigma for every axis of a channel.
    #[serde(default)]
    pub synchronize_axes: bool,
}

impl StepSpec for BlurSpec {
    fn library_default() -> Self {
        BlurSpec {
            p: 0.2,
            sigma: [0.5, 1.0],
            p_per_channel: 0.5,
            synchronize_channels: false,
            synchronize_axes: false,
        }
    }
    fn validate(&self) -> Result<(), String> {
        check_p("p", self.p)?;
        check_p("p_per_channel", self.p_per_channel)?;
        check_range("sigma", self.sigma, Some(0.0))?;
        if self.sigma[1] > MAX_SIGMA {
            return Err(format!(
                "sigma {} is above {MAX_SIGMA} voxels",
                self.sigma[1]
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
            Field::Range("sigma", &mut self.sigma, 0.01, " vox"),
            Field::Prob("p per channel", &mut self.p_per_channel),
            Field::Flag(
                "one value for every channel",
                &mut self.synchronize_channels,
            ),
            Field::Flag("one sigma for every axis", &mut self.synchronize_axes),
        ]
    }
    fn sample(
        &self,
        rng: &mut SplitMix64,
        img: &DrawFor<'_>,
    ) -> (Option<IntensityStep>, serde_json::Value) {
        let (channels, ndim) = (img.channels, img.ndim);
        let (v, drawn) = draw_channels(
            rng,
            self.p,
            self.p_per_channel,
            self.synchronize_channels,
            channels,
            |r| {
                let s: Vec<f64> = (0..ndim).map(|_| r.range(self.sigma)).collect();
                if self.synchronize_axes {
                    vec![s.first().copied().unwrap_or(1.0); ndim]
                } else {
                    s
                }
            },
        );
        (
            v.map(|sigmas| IntensityStep::GaussianBlur(Blur { sigmas })),
            drawn,
        )
    }
    fn batchgeneratorsv2(&self) -> Option<String> {
        Some(format!(
            "GaussianBlurTransform(blur_sigma={}, synchronize_channels={}, synchronize_axes={}, \
             p_per_channel={}, benchmark=True)",
            py_range(self.sigma, Default::default()),
            py_bool(self.synchronize_channels),
            py_bool(self.synchronize_axes),
            py_float(self.p_per_channel)
        ))
    }
}
