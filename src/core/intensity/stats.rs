//! The statistics of a channel that contrast and gamma read: sums in f64, in parallel chunks.

use rayon::prelude::*;

/// Mean, minimum and maximum of `x` (the sum in f64).
pub(crate) fn mean_min_max(x: &[f32]) -> (f64, f32, f32) {
    let (sum, lo, hi) = x
        .par_chunks(1 << 16)
        .map(|c| {
            c.iter().fold(
                (0f64, f32::INFINITY, f32::NEG_INFINITY),
                |(s, lo, hi), &v| (s + v as f64, lo.min(v), hi.max(v)),
            )
        })
        .reduce(
            || (0.0, f32::INFINITY, f32::NEG_INFINITY),
            |a, b| (a.0 + b.0, a.1.min(b.1), a.2.max(b.2)),
        );
    (sum / x.len() as f64, lo, hi)
}

/// The Bessel-corrected standard deviation of `x` about `mean` (as `torch.std`).
pub(crate) fn std_about(x: &[f32], mean: f64) -> f64 {
    let ss: f64 = x
        .par_chunks(1 << 16)
        .map(|c| c.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>())
        .sum();
    (ss / (x.len().max(2) - 1) as f64).sqrt()
}
