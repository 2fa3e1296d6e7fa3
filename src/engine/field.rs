//! The smoothed unit elastic field `G_sigma(noise_k)` (DESIGN §4), one component per axis, on the
//! output grid. It depends only on (seed, sigma, grid shape); alpha merely scales it, so engines
//! cache it and moving any other parameter never recomputes it.

use super::noise::fill_noise;
use crate::filter::gaussian::gaussian_zero;

/// Smoothed unit noise, `components[k][i]` for axis `k` and C-order output index `i`.
#[derive(Clone, Debug, PartialEq)]
pub struct ElasticField {
    pub shape: Vec<usize>,
    pub sigma: f64,
    pub seed: u64,
    pub components: Vec<Vec<f32>>,
}

impl ElasticField {
    /// Same values as `scipy.ndimage.gaussian_filter(noise_k, sigma, mode="constant", cval=0,
    /// truncate=4.0)` with `noise_k` the Philox noise of component `k`.
    pub fn compute(shape: &[usize], sigma: f64, seed: u64) -> Self {
        let n: usize = shape.iter().product();
        let mut scratch = Vec::new();
        let components = (0..shape.len())
            .map(|k| {
                let mut c = vec![0f32; n];
                fill_noise(seed, k as u32, 0, &mut c);
                gaussian_zero(&mut c, &mut scratch, shape, &vec![sigma; shape.len()]);
                c
            })
            .collect();
        ElasticField {
            shape: shape.to_vec(),
            sigma,
            seed,
            components,
        }
    }

    /// Whether this field is the one for (shape, sigma, seed).
    pub fn matches(&self, shape: &[usize], sigma: f64, seed: u64) -> bool {
        self.shape == shape && self.sigma == sigma && self.seed == seed
    }

    /// The largest and root-mean-square displacement length, in voxels, for strength `alpha`.
    pub fn displacement_stats(&self, alpha: f64) -> (f64, f64) {
        let n = self.components.first().map_or(0, Vec::len);
        if n == 0 {
            return (0.0, 0.0);
        }
        let (mut max2, mut sum2) = (0f64, 0f64);
        for i in 0..n {
            let l2: f64 = self.components.iter().map(|c| (c[i] as f64).powi(2)).sum();
            max2 = max2.max(l2);
            sum2 += l2;
        }
        (
            alpha.abs() * max2.sqrt(),
            alpha.abs() * (sum2 / n as f64).sqrt(),
        )
    }
}
