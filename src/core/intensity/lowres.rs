//! `low_resolution`: batchgeneratorsv2 0.3.6 `SimulateLowResolutionTransform`, per channel:
//! down to `round(n · s)` voxels per axis with torch's `nearest-exact`, then back up to `n` with
//! its (bi/tri)linear interpolation (`align_corners=False`), as `torch.nn.functional.interpolate`
//! computes them on the CPU:
//! - the factor `s` is rounded to f32 first (batchgeneratorsv2 keeps it in a float32 tensor), and
//!   `round` is Python's (half to even);
//! - nearest-exact: source `min(floor((o + 0.5) · n/m), n − 1)`, with `n/m` in f32;
//! - linear: source `max((o + 0.5) · m/n − 0.5, 0)` in f32, its floor and the next voxel (the
//!   last one repeated), weights `1 − λ` and `λ`; an axis of equal sizes copies. The weighted
//!   sum nests the axes from the first: `(… · w₀ + … · w₁)`.

use serde::{Deserialize, Serialize};

use super::{
    DrawFor, Field, IntensitySpec, IntensityStep, PerChannel, StepSpec, StepValues, check_p,
    check_range, draw_channels, one_value, py_bool, py_float, py_range, single,
};
use crate::core::draws::{Range, SplitMix64};

/// The drawn factors, one per spatial axis (1: the axis keeps its resolution).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LowResolution {
    pub scales: PerChannel<Vec<f64>>,
}

/// The low-resolution shape of `shape` for factors `scales` (batchgeneratorsv2's
/// `round(n · s)`, at least 1).
pub fn low_resolution_shape(shape: &[usize], scales: &[f64]) -> Vec<usize> {
    shape
        .iter()
        .zip(scales)
        .map(|(&n, &s)| ((n as f64 * (s as f32) as f64).round_ties_even() as usize).max(1))
        .collect()
}

impl StepValues for LowResolution {
    fn count(&self) -> usize {
        self.scales.len()
    }
    fn check(&self, ndim: Option<usize>) -> Result<(), String> {
        for s in self.scales.iter().flatten() {
            if let Some(nd) = ndim
                && s.len() != nd
            {
                return Err(format!(
                    "{} factors for an image of {nd} axes: give one per axis",
                    s.len()
                ));
            }
            if let Some(v) = s.iter().find(|v| !v.is_finite() || **v <= 0.0 || **v > 1.0) {
                return Err(format!("factor {v} is not a number in (0, 1]"));
            }
        }
        Ok(())
    }
    fn apply_channel(&self, entry: usize, _: usize, x: &mut [f32], shape: &[usize]) {
        if let Some(Some(s)) = self.scales.get(entry) {
            let small = low_resolution_shape(shape, s);
            let down = resize_nearest(x, shape, &small, nearest_exact_index);
            resize_linear(&down, &small, x, shape);
        }
    }
    fn needs_whole_channel(&self) -> bool {
        true
    }
    fn fixed(&self) -> Option<IntensitySpec> {
        let s = single(&self.scales)?;
        let first = *s.first()?;
        if s.iter().any(|v| *v != first) {
            return None;
        }
        Some(IntensitySpec::LowResolution(LowResolutionSpec {
            p: 1.0,
            scale: one_value(first),
            p_per_channel: 1.0,
            synchronize_channels: true,
            synchronize_axes: true,
            ignore_axes: vec![],
        }))
    }
}

/// torch's nearest-exact source index of output `o` for an axis from `n` to `m` voxels.
pub(crate) fn nearest_exact_index(o: usize, n: usize, m: usize) -> usize {
    let scale = n as f32 / m as f32;
    ((((o as f64 + 0.5) * scale as f64) as f32).floor() as usize).min(n - 1)
}

/// torch's legacy `nearest` source index of output `o` for an axis from `n` to `m` voxels:
/// `min(floor(o · (n/m)), n − 1)` in f32 (the same size copies, twice the size halves).
pub(crate) fn nearest_index(o: usize, n: usize, m: usize) -> usize {
    if n == m {
        return o;
    }
    if m == 2 * n {
        return o >> 1;
    }
    let scale = n as f32 / m as f32;
    ((o as f32 * scale).floor() as usize).min(n - 1)
}

/// torch's linear source indices and weights of output `o` for an axis from `n` to `m` voxels.
pub(crate) fn linear_taps(o: usize, n: usize, m: usize) -> (usize, usize, f32, f32) {
    if n == m {
        return (o, o, 1.0, 0.0);
    }
    let scale = n as f32 / m as f32;
    let src = (scale * (o as f32 + 0.5) - 0.5).max(0.0);
    let i0 = (src.floor() as usize).min(n - 1);
    let l1 = (src - i0 as f32).clamp(0.0, 1.0);
    let i1 = if i0 < n - 1 { i0 + 1 } else { i0 };
    (i0, i1, 1.0 - l1, l1)
}

fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for a in (0..shape.len().saturating_sub(1)).rev() {
        s[a] = s[a + 1] * shape[a + 1];
    }
    s
}

/// `x` (`shape`) resized to `to` by the nearest source voxel, `index(o, n, m)` per axis.
pub(crate) fn resize_nearest(
    x: &[f32],
    shape: &[usize],
    to: &[usize],
    index: fn(usize, usize, usize) -> usize,
) -> Vec<f32> {
    let st = strides(shape);
    let maps: Vec<Vec<usize>> = (0..shape.len())
        .map(|a| {
            (0..to[a])
                .map(|o| index(o, shape[a], to[a]) * st[a])
                .collect()
        })
        .collect();
    let count: usize = to.iter().product();
    let ost = strides(to);
    (0..count)
        .map(|i| {
            let src: usize = maps
                .iter()
                .enumerate()
                .map(|(a, m)| m[(i / ost[a]) % to[a]])
                .sum();
            x[src]
        })
        .collect()
}

/// `src` (`from`) resized linearly into `out` (`to`).
pub(crate) fn resize_linear(src: &[f32], from: &[usize], out: &mut [f32], to: &[usize]) {
    use rayon::prelude::*;
    let st = strides(from);
    let taps: Vec<Vec<(usize, usize, f32, f32)>> = (0..from.len())
        .map(|a| {
            (0..to[a])
                .map(|o| {
                    let (i0, i1, w0, w1) = linear_taps(o, from[a], to[a]);
                    (i0 * st[a], i1 * st[a], w0, w1)
                })
                .collect()
        })
        .collect();
    let ost = strides(to);
    let nd = to.len();
    out.par_iter_mut().enumerate().for_each(|(i, v)| {
        // At most three axes: the taps of this voxel on the stack, not a vector per voxel.
        let mut t = [(0, 0, 1.0, 0.0); 3];
        for (a, ta) in t.iter_mut().enumerate().take(nd) {
            *ta = taps[a][(i / ost[a]) % to[a]];
        }
        *v = nest(src, &t[..nd], 0);
    });
}

/// The weighted sum over axes `a..`, the first axis outermost, from the offset summed so far.
fn nest(src: &[f32], t: &[(usize, usize, f32, f32)], base: usize) -> f32 {
    match t.split_first() {
        None => src[base],
        Some((&(i0, i1, w0, w1), rest)) => {
            nest(src, rest, base + i0) * w0 + nest(src, rest, base + i1) * w1
        }
    }
}

/// When low resolution fires and how its factors are drawn (nnU-Net v2: p 0.25, `[0.5, 1]`,
/// each channel with p 0.5, one factor for every axis of a channel).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LowResolutionSpec {
    pub p: f64,
    pub scale: Range,
    #[serde(default = "super::one")]
    pub p_per_channel: f64,
    #[serde(default)]
    pub synchronize_channels: bool,
    /// One factor for every axis of a channel.
    #[serde(default)]
    pub synchronize_axes: bool,
    /// Axes that keep their resolution (nnU-Net's axis 0 for anisotropic patches).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ignore_axes: Vec<usize>,
}

impl StepSpec for LowResolutionSpec {
    fn library_default() -> Self {
        LowResolutionSpec {
            p: 0.25,
            scale: [0.5, 1.0],
            p_per_channel: 0.5,
            synchronize_channels: false,
            synchronize_axes: true,
            ignore_axes: vec![],
        }
    }
    fn validate(&self) -> Result<(), String> {
        check_p("p", self.p)?;
        check_p("p_per_channel", self.p_per_channel)?;
        check_range("scale", self.scale, Some(0.0))?;
        if self.scale[1] > 1.0 {
            return Err(format!("scale {} is above 1", self.scale[1]));
        }
        if let Some(a) = self.ignore_axes.iter().find(|a| **a > 2) {
            return Err(format!("ignore_axes: {a} is not an axis (0, 1 or 2)"));
        }
        Ok(())
    }
    fn p(&self) -> f64 {
        self.p
    }
    fn fields(&mut self) -> Vec<Field<'_>> {
        vec![
            Field::Prob("p", &mut self.p),
            Field::Range("scale", &mut self.scale, 0.01, ""),
            Field::Prob("p per channel", &mut self.p_per_channel),
            Field::Flag(
                "one value for every channel",
                &mut self.synchronize_channels,
            ),
            Field::Flag("one factor for every axis", &mut self.synchronize_axes),
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
                let s: Vec<f64> = (0..ndim).map(|_| r.range(self.scale)).collect();
                (0..ndim)
                    .map(|a| match () {
                        _ if self.ignore_axes.contains(&a) => 1.0,
                        _ if self.synchronize_axes => s.first().copied().unwrap_or(1.0),
                        _ => s[a],
                    })
                    .collect::<Vec<f64>>()
            },
        );
        (
            v.map(|scales| IntensityStep::LowResolution(LowResolution { scales })),
            drawn,
        )
    }
    fn batchgeneratorsv2(&self) -> Option<String> {
        let ignore = if self.ignore_axes.is_empty() {
            "ignore_axes".to_string()
        } else {
            let own: Vec<String> = self.ignore_axes.iter().map(|a| format!("{a}, ")).collect();
            format!(
                "tuple(sorted(set(ignore_axes or ()) | {{{}}}))",
                own.concat()
            )
        };
        Some(format!(
            "SimulateLowResolutionTransform(scale={}, synchronize_channels={}, \
             synchronize_axes={}, ignore_axes={ignore}, allowed_channels=None, p_per_channel={})",
            py_range(self.scale, Default::default()),
            py_bool(self.synchronize_channels),
            py_bool(self.synchronize_axes),
            py_float(self.p_per_channel)
        ))
    }
}
