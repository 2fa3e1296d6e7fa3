//! `monai_histogram_shift`: MONAI 1.6.1 `RandHistogramShift`, a piecewise-linear map of the
//! whole image's intensities (every channel at once). `n` control points are drawn as MONAI does:
//! `n` uniformly from `num_control_points` (both ends included), the reference points
//! `linspace(0, 1, n)`, and the moved points the same except that each inner one, in order, is
//! drawn uniformly between the moved point before it and the reference point after it. With the
//! image's minimum `lo` and maximum `hi`, both sets are scaled to `p · (hi − lo) + lo`, and each
//! voxel goes through MONAI's torch interpolation: the segment from `searchsorted` (left) minus
//! one, clamped to the segments, its slope `m = Δy/Δx` and intercept `b = y₀ − m x₀`, the value
//! `m x + b`; below the first point the first moved point, above the last the last. All of it in
//! f32, as MONAI's float32 tensors; an image of one value is left as it is.

use serde::{Deserialize, Deserializer, Serialize};

use super::{
    Arg, Call, DrawFor, Field, IntensitySpec, IntensityStep, StepSpec, StepValues, check_p,
};
use crate::core::draws::SplitMix64;

/// The most control points a preset or plan may give.
pub const MAX_CONTROL_POINTS: usize = 256;

/// The drawn control points, moved, in [0, 1] of the image's range; the reference points are
/// evenly spaced, as many.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MonaiHistogramShift {
    pub points: Vec<f64>,
}

/// numpy's `linspace(0, 1, n)`: `i · (1 / (n − 1))`, the last exactly 1.
pub fn reference_points(n: usize) -> Vec<f64> {
    let step = 1.0 / (n.max(2) - 1) as f64;
    let mut v: Vec<f64> = (0..n).map(|i| i as f64 * step).collect();
    if let Some(last) = v.last_mut()
        && n > 1
    {
        *last = 1.0;
    }
    v
}

/// The control points scaled to the image's range `[lo, hi]`, as f32 tensors: `p · (hi − lo) +
/// lo`.
pub(crate) fn scaled(points: &[f64], lo: f32, hi: f32) -> Vec<f32> {
    let r = hi - lo;
    points.iter().map(|&p| (p as f32) * r + lo).collect()
}

/// MONAI's torch `interp` of `v` through the points `(xs, ys)` (at least two).
pub(crate) fn interp(v: f32, xs: &[f32], ys: &[f32]) -> f32 {
    let last = xs.len() - 1;
    if v < xs[0] {
        return ys[0];
    }
    if v > xs[last] {
        return ys[last];
    }
    // searchsorted (left): the first point not below v.
    let first_not_below = xs.partition_point(|&x| x < v);
    let i = first_not_below.saturating_sub(1).min(last - 1);
    let m = (ys[i + 1] - ys[i]) / (xs[i + 1] - xs[i]);
    let b = ys[i] - m * xs[i];
    m * v + b
}

impl StepValues for MonaiHistogramShift {
    fn count(&self) -> usize {
        1
    }
    fn check(&self, _: Option<usize>) -> Result<(), String> {
        let n = self.points.len();
        if !(3..=MAX_CONTROL_POINTS).contains(&n) {
            return Err(format!(
                "{n} control points: give 3 to {MAX_CONTROL_POINTS}"
            ));
        }
        match self
            .points
            .iter()
            .find(|v| !v.is_finite() || !(0.0..=1.0).contains(*v))
        {
            Some(v) => Err(format!("control point {v} is not a number in [0, 1]")),
            None => Ok(()),
        }
    }
    fn apply_channel(&self, _: usize, _: usize, x: &mut [f32], _: &[usize]) {
        use rayon::prelude::*;
        let (_, lo, hi) = super::stats::mean_min_max(x);
        if lo == hi || !lo.is_finite() || !hi.is_finite() {
            return;
        }
        let xs = scaled(&reference_points(self.points.len()), lo, hi);
        let ys = scaled(&self.points, lo, hi);
        x.par_iter_mut().for_each(|v| *v = interp(*v, &xs, &ys));
    }
    fn needs_whole_channel(&self) -> bool {
        true
    }
    fn whole_image(&self) -> bool {
        true
    }
    fn fixed(&self) -> Option<IntensitySpec> {
        None
    }
}

/// When the shift fires (`prob`) and how many control points it draws: `[fewest, most]`, or one
/// number for both.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MonaiHistogramShiftSpec {
    pub p: f64,
    #[serde(deserialize_with = "count_or_range")]
    pub num_control_points: [usize; 2],
}

/// One count, or a `[fewest, most]` pair, as MONAI takes them.
fn count_or_range<'de, D: Deserializer<'de>>(d: D) -> Result<[usize; 2], D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Either {
        One(usize),
        Two([usize; 2]),
    }
    Ok(match Either::deserialize(d)? {
        Either::One(n) => [n, n],
        Either::Two(r) => r,
    })
}

impl StepSpec for MonaiHistogramShiftSpec {
    fn library_default() -> Self {
        MonaiHistogramShiftSpec {
            p: 0.1,
            num_control_points: [10, 10],
        }
    }
    fn validate(&self) -> Result<(), String> {
        check_p("p", self.p)?;
        let [lo, hi] = self.num_control_points;
        if lo < 3 || hi > MAX_CONTROL_POINTS || lo > hi {
            return Err(format!(
                "num_control_points [{lo}, {hi}] is not a range within 3..={MAX_CONTROL_POINTS}"
            ));
        }
        Ok(())
    }
    fn p(&self) -> f64 {
        self.p
    }
    fn fields(&mut self) -> Vec<Field<'_>> {
        let [lo, hi] = &mut self.num_control_points;
        vec![
            Field::Prob("p", &mut self.p),
            Field::Count("control points, fewest", lo, MAX_CONTROL_POINTS),
            Field::Count("control points, most", hi, MAX_CONTROL_POINTS),
        ]
    }
    fn sample(
        &self,
        rng: &mut SplitMix64,
        _: &DrawFor<'_>,
    ) -> (Option<IntensityStep>, serde_json::Value) {
        let fire = rng.chance(self.p);
        let [lo, hi] = self.num_control_points;
        let n = (lo + (rng.uniform() * (hi - lo + 1) as f64) as usize).min(hi);
        let reference = reference_points(n);
        let mut points = reference.clone();
        for i in 1..n.saturating_sub(1) {
            points[i] = rng.range([points[i - 1], reference[i + 1]]);
        }
        let step = IntensityStep::MonaiHistogramShift(MonaiHistogramShift { points });
        (fire.then_some(step), serde_json::json!({ "fired": fire }))
    }
    fn monai(&self) -> Option<Call> {
        let [lo, hi] = self.num_control_points;
        Some(Call {
            class: "RandHistogramShiftd",
            args: vec![
                (
                    "num_control_points",
                    if lo == hi {
                        Arg::Int(lo)
                    } else {
                        Arg::IntPair([lo, hi])
                    },
                ),
                ("prob", Arg::Float(self.p)),
            ],
        })
    }
}
