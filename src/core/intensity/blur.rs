//! `gaussian_blur`: batchgeneratorsv2 0.3.6 `GaussianBlurTransform`, per channel and axis: a
//! separable gaussian, axis 0 first, whose kernel has `round_to_odd(6σ + 0.5)` taps (about ±3σ;
//! `_build_kernel(σ, truncate=6)`), normalised to sum 1, over the channel padded by reflection
//! without the edge repeated (torch's `reflect`, scipy's `mirror`). Sums in f32, tap by tap.

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use super::{
    IntensityStep, PerChannel, StepSpec, StepValues, check_p, check_range, draw_channels, py_bool,
    py_float, py_range,
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

/// The index `i` (which may lie outside `0..n`) reflected into the axis without repeating the
/// edge, folded as often as it takes.
pub(crate) fn mirror(i: isize, n: usize) -> usize {
    if n == 1 {
        return 0;
    }
    let period = 2 * (n as isize - 1);
    let m = i.rem_euclid(period);
    (if m < n as isize { m } else { period - m }) as usize
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
                convolve_axis(x, shape, axis, &blur_kernel(*sigma));
            }
        }
    }
    fn needs_whole_channel(&self) -> bool {
        true
    }
}

/// `x` (C order, `shape`) convolved along `axis` with the odd kernel `w`, mirror-padded.
fn convolve_axis(x: &mut [f32], shape: &[usize], axis: usize, w: &[f32]) {
    let n = shape[axis];
    let inner: usize = shape[axis + 1..].iter().product();
    if n == 0 || inner == 0 || w.len() <= 1 {
        return;
    }
    let r = (w.len() / 2) as isize;
    let src = x.to_vec();
    // One output row (fixed outer index and position i along the axis) per task, `inner` long.
    x.par_chunks_mut(inner).enumerate().for_each(|(row, out)| {
        let (o, i) = (row / n, row % n);
        let base = o * n * inner;
        out.fill(0.0);
        for (t, &wt) in w.iter().enumerate() {
            let j = mirror(i as isize + t as isize - r, n);
            let line = &src[base + j * inner..base + (j + 1) * inner];
            for (v, s) in out.iter_mut().zip(line) {
                *v += wt * *s;
            }
        }
    });
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
    fn sample(
        &self,
        rng: &mut SplitMix64,
        channels: usize,
        ndim: usize,
    ) -> (Option<IntensityStep>, serde_json::Value) {
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
    fn batchgeneratorsv2(&self) -> String {
        format!(
            "GaussianBlurTransform(blur_sigma={}, synchronize_channels={}, synchronize_axes={}, \
             p_per_channel={}, benchmark=True)",
            py_range(self.sigma, Default::default()),
            py_bool(self.synchronize_channels),
            py_bool(self.synchronize_axes),
            py_float(self.p_per_channel)
        )
    }
}
