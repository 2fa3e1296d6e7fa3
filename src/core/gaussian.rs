//! The 1D gaussian kernel of scipy.ndimage, the one every smoothing in augscope uses: the elastic
//! field, the gaussian/DoG/LoG filters and the previews.

/// scipy's `_gaussian_kernel1d(sigma, order, radius)` for order 0 or 2, with
/// `radius = int(truncate * sigma + 0.5)`: `phi(x) = exp(-x^2 / 2 sigma^2)` normalised to sum 1,
/// times `(x^2 / sigma^4 - 1 / sigma^2)` for order 2 (the second derivative). Symmetric, so
/// correlation and convolution agree.
pub fn gaussian_kernel1d(sigma: f64, order: u32, truncate: f64) -> Vec<f64> {
    let radius = (truncate * sigma + 0.5) as i64;
    // No smoothing: the identity (scipy's kernel for a radius of 0; a sigma of 0 means none).
    if order == 0 && (sigma <= 0.0 || radius == 0) {
        return vec![1.0];
    }
    let s2 = sigma * sigma;
    let phi: Vec<f64> = (-radius..=radius)
        .map(|x| (-0.5 / s2 * (x * x) as f64).exp())
        .collect();
    let sum: f64 = phi.iter().sum();
    let phi = phi.into_iter().map(|v| v / sum);
    match order {
        0 => phi.collect(),
        _ => phi
            .zip(-radius..=radius)
            .map(|(p, x)| {
                let x2 = (x * x) as f64;
                // scipy's polynomial q(x) = -1/s2 + x^2/s2^2, evaluated the same way.
                (-1.0 / s2 + x2 * (1.0 / s2 * (1.0 / s2))) * p
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_zero_sums_to_one_and_no_sigma_is_the_identity() {
        let w = gaussian_kernel1d(2.0, 0, 4.0);
        assert_eq!(w.len(), 17);
        assert!((w.iter().sum::<f64>() - 1.0).abs() < 1e-12);
        assert_eq!(gaussian_kernel1d(0.0, 0, 4.0), vec![1.0]);
        assert_eq!(gaussian_kernel1d(0.1, 0, 4.0), vec![1.0]);
    }
}
