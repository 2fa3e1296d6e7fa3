//! The smoothed unit elastic field `G_sigma(noise_k)` (docs/design.md §4), one component per axis, on the
//! output grid. It depends only on (seed, sigma, grid shape); alpha merely scales it, so engines
//! cache it and moving any other parameter never recomputes it. Sigma is given per axis in
//! voxels, `[z, y, x]` (one value on every axis in voxel space; `sigma_mm / spacing` in mm space).

use rayon::prelude::*;

use super::gaussian::gaussian_zero;
use super::noise::{fill_noise, fill_noise_run};
use crate::core::gaussian::gaussian_kernel1d;

/// Smoothed unit noise, `components[k][i]` for axis `k` and C-order output index `i`.
#[derive(Clone, Debug, PartialEq)]
pub struct ElasticField {
    pub shape: Vec<usize>,
    /// The gaussian's sigma per axis, in voxels.
    pub sigma_vox: Vec<f64>,
    pub seed: u64,
    pub components: Vec<Vec<f32>>,
}

impl ElasticField {
    /// Same values as `scipy.ndimage.gaussian_filter(noise_k, sigma, mode="constant", cval=0,
    /// truncate=4.0)` with `noise_k` the Philox noise of component `k`.
    pub fn compute(shape: &[usize], sigma: f64, seed: u64) -> Self {
        Self::compute_axes(shape, &vec![sigma; shape.len()], seed)
    }

    /// [`Self::compute`] with one sigma per axis (voxels): same values as
    /// `scipy.ndimage.gaussian_filter(noise_k, sigma_vox, mode="constant", cval=0, truncate=4.0)`.
    pub fn compute_axes(shape: &[usize], sigma_vox: &[f64], seed: u64) -> Self {
        let n: usize = shape.iter().product();
        let mut scratch = Vec::new();
        let components = (0..shape.len())
            .map(|k| {
                let mut c = super::hugepages::zeroed_f32(n);
                fill_noise(seed, k as u32, 0, &mut c);
                gaussian_zero(&mut c, &mut scratch, shape, sigma_vox);
                c
            })
            .collect();
        ElasticField {
            shape: shape.to_vec(),
            sigma_vox: sigma_vox.to_vec(),
            seed,
            components,
        }
    }

    /// The unit field on one plane of a 3D grid, the plane `index` normal to `axis`, without
    /// computing the volume: the separable passes commute, so the plane is first smoothed across
    /// `axis` from a slab of noise generated on the fly from its Philox counters, then within
    /// the plane. Equal to `compute(shape, ..)` restricted to the plane, to f32 rounding.
    /// Returns one C-order plane per component.
    pub fn compute_plane(
        shape: &[usize],
        sigma: f64,
        seed: u64,
        axis: usize,
        index: usize,
    ) -> Vec<Vec<f32>> {
        Self::compute_plane_axes(shape, &vec![sigma; shape.len()], seed, axis, index)
    }

    /// [`Self::compute_plane`] with one sigma per axis (voxels).
    pub fn compute_plane_axes(
        shape: &[usize],
        sigma_vox: &[f64],
        seed: u64,
        axis: usize,
        index: usize,
    ) -> Vec<Vec<f32>> {
        let nd = shape.len();
        let plane_shape: Vec<usize> = (0..nd).filter(|&a| a != axis).map(|a| shape[a]).collect();
        let plane_sigma: Vec<f64> = (0..nd)
            .filter(|&a| a != axis)
            .map(|a| sigma_vox[a])
            .collect();
        let plane_len: usize = plane_shape.iter().product();
        let w: Vec<f32> = gaussian_kernel1d(sigma_vox[axis], 0, 4.0)
            .iter()
            .map(|&v| v as f32)
            .collect();
        let r = w.len() / 2;
        let n = shape[axis];
        let inner: usize = shape[axis + 1..].iter().product();
        // Slab rows index..index ± r that exist, with their weights.
        let lo = index.saturating_sub(r);
        let hi = (index + r).min(n - 1);
        let mut scratch = Vec::new();
        (0..nd)
            .map(|k| {
                let k32 = k as u32;
                let mut plane = vec![0f32; plane_len];
                if inner == 1 {
                    // The slab runs along the contiguous axis: one run of noise per plane voxel.
                    plane.par_chunks_mut(256).enumerate().for_each_init(
                        || vec![0f32; hi - lo + 1],
                        |buf, (ci, chunk)| {
                            for (j, out) in chunk.iter_mut().enumerate() {
                                let row = (ci * 256 + j) as u64;
                                fill_noise_run(seed, k32, row * n as u64 + lo as u64, buf);
                                *out = buf
                                    .iter()
                                    .enumerate()
                                    .map(|(t, &v)| w[lo + t + r - index] * v)
                                    .sum();
                            }
                        },
                    );
                } else {
                    // For each slab row z and each outer index, the plane's inner run is
                    // contiguous in the volume: generate it at once and accumulate.
                    const RUN: usize = 4096;
                    plane
                        .par_chunks_mut(inner)
                        .enumerate()
                        .for_each(|(o, orow)| {
                            // Runs in parallel too: for axis 0 the plane is a single row.
                            orow.par_chunks_mut(RUN).enumerate().for_each(|(ci, out)| {
                                let mut buf = vec![0f32; out.len()];
                                for z in lo..=hi {
                                    let start = (o * n + z) * inner + ci * RUN;
                                    fill_noise_run(seed, k32, start as u64, &mut buf);
                                    let wz = w[z + r - index];
                                    for (a, &v) in out.iter_mut().zip(&buf) {
                                        *a += wz * v;
                                    }
                                }
                            });
                        });
                }
                gaussian_zero(&mut plane, &mut scratch, &plane_shape, &plane_sigma);
                plane
            })
            .collect()
    }

    /// The unit field on the three planes through `q` of a 3D grid (plane `a` normal to axis `a`
    /// at index `q[a]`), each equal bit for bit to [`Self::compute_plane_axes`] of it, but with the
    /// noise the three slabs share generated once: every row `(z, y)` of noise is made once, whole
    /// where the axial or coronal slab needs it and only over the sagittal slab's x range
    /// elsewhere (at sigma 12 on the 197×233×189 sample, 7.4 M values per component instead of
    /// 12.3 M). Returns the planes per axis, each one plane per component.
    pub fn compute_planes_axes(
        shape: &[usize],
        sigma_vox: &[f64],
        seed: u64,
        q: [usize; 3],
    ) -> [Vec<Vec<f32>>; 3] {
        assert_eq!(shape.len(), 3, "three planes need a 3D grid");
        let [d, h, w] = [shape[0], shape[1], shape[2]];
        // Per axis: the full f32 kernel, its radius and the slab range around q.
        let kern: Vec<(Vec<f32>, usize, usize, usize)> = (0..3)
            .map(|a| {
                let wa: Vec<f32> = gaussian_kernel1d(sigma_vox[a], 0, 4.0)
                    .iter()
                    .map(|&v| v as f32)
                    .collect();
                let r = wa.len() / 2;
                let lo = q[a].saturating_sub(r);
                let hi = (q[a] + r).min(shape[a] - 1);
                (wa, r, lo, hi)
            })
            .collect();
        let (z_lo, z_hi) = (kern[0].2, kern[0].3);
        let (y_lo, y_hi) = (kern[1].2, kern[1].3);
        let (x_lo, x_hi) = (kern[2].2, kern[2].3);
        let full = |z: usize, y: usize| (z_lo..=z_hi).contains(&z) || (y_lo..=y_hi).contains(&y);
        // Where each row's noise starts in the buffer, and its first x.
        let mut offset = Vec::with_capacity(d * h + 1);
        let mut total = 0usize;
        for z in 0..d {
            for y in 0..h {
                offset.push(total);
                total += if full(z, y) { w } else { x_hi - x_lo + 1 };
            }
        }
        offset.push(total);
        let plane_shapes = [[h, w], [d, w], [d, h]];
        let mut out: [Vec<Vec<f32>>; 3] = [vec![], vec![], vec![]];
        let mut scratch = Vec::new();
        let mut noise = vec![0f32; total];
        for k in 0..3u32 {
            // Every needed noise row, once, rows in parallel.
            let mut rows: Vec<&mut [f32]> = Vec::with_capacity(d * h);
            let mut rest = noise.as_mut_slice();
            for r in 0..d * h {
                let (row, tail) = rest.split_at_mut(offset[r + 1] - offset[r]);
                rows.push(row);
                rest = tail;
            }
            rows.into_par_iter().enumerate().for_each(|(r, row)| {
                let x0 = if row.len() == w { 0 } else { x_lo };
                fill_noise_run(seed, k, (r * w + x0) as u64, row);
            });
            let row = |z: usize, y: usize| &noise[offset[z * h + y]..offset[z * h + y + 1]];
            // Across each plane's normal axis, in the order compute_plane_axes sums.
            let (w0, r0) = (&kern[0].0, kern[0].1);
            let mut pz = vec![0f32; h * w];
            pz.par_chunks_mut(w).enumerate().for_each(|(y, acc)| {
                for z in z_lo..=z_hi {
                    let wz = w0[z + r0 - q[0]];
                    for (a, &v) in acc.iter_mut().zip(row(z, y)) {
                        *a += wz * v;
                    }
                }
            });
            let (w1, r1) = (&kern[1].0, kern[1].1);
            let mut py = vec![0f32; d * w];
            py.par_chunks_mut(w).enumerate().for_each(|(z, acc)| {
                for y in y_lo..=y_hi {
                    let wy = w1[y + r1 - q[1]];
                    for (a, &v) in acc.iter_mut().zip(row(z, y)) {
                        *a += wy * v;
                    }
                }
            });
            let (w2, r2) = (&kern[2].0, kern[2].1);
            let mut px = vec![0f32; d * h];
            px.par_chunks_mut(h).enumerate().for_each(|(z, acc)| {
                for (y, a) in acc.iter_mut().enumerate() {
                    let nr = row(z, y);
                    let run = if nr.len() == w { &nr[x_lo..=x_hi] } else { nr };
                    *a = run
                        .iter()
                        .enumerate()
                        .map(|(t, &v)| w2[x_lo + t + r2 - q[2]] * v)
                        .sum();
                }
            });
            // Then within each plane.
            for (axis, mut plane) in [pz, py, px].into_iter().enumerate() {
                let sig: Vec<f64> = (0..3)
                    .filter(|&a| a != axis)
                    .map(|a| sigma_vox[a])
                    .collect();
                gaussian_zero(&mut plane, &mut scratch, &plane_shapes[axis], &sig);
                out[axis].push(plane);
            }
        }
        out
    }

    /// One plane of this field (the plane `index` normal to `axis`), per component, C order.
    pub fn plane(&self, axis: usize, index: usize) -> Vec<Vec<f32>> {
        let nd = self.shape.len();
        let inner: usize = self.shape[axis + 1..].iter().product();
        let n = self.shape[axis];
        self.components
            .iter()
            .map(|c| {
                c.chunks(n * inner)
                    .flat_map(|slab| slab[index * inner..(index + 1) * inner].iter().copied())
                    .collect()
            })
            .take(nd)
            .collect()
    }

    /// Whether this field is the one for (shape, per-axis sigma in voxels, seed).
    pub fn matches(&self, shape: &[usize], sigma_vox: &[f64], seed: u64) -> bool {
        self.shape == shape && self.sigma_vox == sigma_vox && self.seed == seed
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn three_planes_with_shared_noise_equal_the_planes_computed_alone() {
        // Bit for bit, for planes inside, at the edges, and slabs wider than the grid.
        let shape = [19usize, 27, 23];
        for (sigma, q) in [
            ([2.0, 3.0, 1.5], [9usize, 13, 11]),
            ([1.0, 1.2, 2.5], [0, 26, 4]),
            ([6.0, 0.5, 8.0], [18, 2, 22]),
        ] {
            let shared = ElasticField::compute_planes_axes(&shape, &sigma, 77, q);
            for (axis, planes) in shared.iter().enumerate() {
                let alone = ElasticField::compute_plane_axes(&shape, &sigma, 77, axis, q[axis]);
                assert_eq!(*planes, alone, "axis {axis}, sigma {sigma:?}, q {q:?}");
            }
        }
    }
}
