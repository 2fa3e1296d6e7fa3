//! Separable filters with every boundary mode of scipy.ndimage's filters: gaussian smoothing,
//! gaussian_laplace (LoG) and the difference of gaussians.
//!
//! Arrays are C order, axis 0 slowest (`[z, y, x]` or `[y, x]`). One pass correlates a symmetric
//! kernel along one axis. A pass along a strided axis works on tiles of [`COLS`] neighbouring
//! columns: the tile's whole column of input rows (with the boundary extension already applied)
//! is gathered once into a per-thread buffer, then every output row is a sum of contiguous tile
//! rows, so the inner loops vectorise, each input value is read once whatever the radius, and no
//! voxel allocates. Tasks are (slab, column segment) pairs, so even a pass along axis 0 has
//! enough of them for every thread.
//!
//! Boundary modes follow scipy's filter rules (`ni_support.c::NI_ExtendLine` through
//! `_extend_mode_to_code(mode, is_filter=True)`), which differ from `map_coordinates`: `wrap` is
//! periodic with period n (= `grid-wrap`), `grid-constant` = `constant`, `grid-mirror` =
//! `reflect`; see [`filter_tap`].

use rayon::prelude::*;

use crate::core::gaussian::gaussian_kernel1d;
use crate::engine::boundary::{Mode, fold_tap};

/// scipy's `truncate` default: kernels reach `int(4 sigma + 0.5)` voxels.
pub const TRUNCATE: f64 = 4.0;

/// Columns of a strided pass handled together (one tile row is `COLS` contiguous f32).
const COLS: usize = 64;

/// The input index read for tap `i` on an axis of length `n` under scipy's filter rule for
/// `mode`; `None` reads cval. Same result as `NI_ExtendLine` (scipy `ni_support.c`): `nearest`
/// clamps, `reflect` (= `grid-mirror`) has period 2n, `mirror` period 2n − 2 (n = 1: the one
/// value), `wrap` and `grid-wrap` period n, `constant` and `grid-constant` read cval.
#[inline]
pub fn filter_tap(i: i64, n: usize, mode: Mode) -> Option<usize> {
    let m = match mode {
        Mode::Constant | Mode::GridConstant => Mode::GridConstant,
        Mode::Wrap | Mode::GridWrap => Mode::GridWrap,
        m => m,
    };
    fold_tap(i, n, m)
}

/// Correlates `src` (C order, `shape`) along `axis` with the symmetric odd-length `weights`
/// under the filter boundary `mode` (cval for the constant modes), into `dst`. Same result as
/// `scipy.ndimage.correlate1d(src, weights, axis, mode=mode, cval=cval)` up to f32 rounding
/// (scipy sums in f64).
pub fn correlate1d(
    src: &[f32],
    dst: &mut [f32],
    shape: &[usize],
    axis: usize,
    weights: &[f64],
    mode: Mode,
    cval: f32,
) {
    assert_eq!(src.len(), dst.len());
    assert_eq!(weights.len() % 2, 1, "a symmetric kernel has odd length");
    let n = shape[axis];
    if n == 0 || src.is_empty() {
        return;
    }
    let r = weights.len() / 2;
    // Half kernel: w[0] the centre, w[j] the weight of offsets ±j.
    let w: Vec<f32> = weights[r..].iter().map(|&v| v as f32).collect();
    let inner: usize = shape[axis + 1..].iter().product();
    let padded = n + 2 * r;
    if inner == 1 {
        dst.par_chunks_mut(n).zip(src.par_chunks(n)).for_each_init(
            || vec![0f32; padded],
            |pad, (out, line)| {
                for (k, p) in pad.iter_mut().enumerate() {
                    *p = match filter_tap(k as i64 - r as i64, n, mode) {
                        Some(j) => line[j],
                        None => cval,
                    };
                }
                line_accumulate(out, pad, &w);
            },
        );
        return;
    }
    let slab = n * inner;
    let outer = src.len() / slab;
    // A task makes every output row of one slab for a segment of `seg` columns: each input value
    // is read once (plus the 2r boundary rows), however large the radius. Segments are a multiple
    // of COLS, small enough for about 8 tasks per thread.
    let threads = rayon::current_num_threads().max(1);
    let want = (inner * outer).div_ceil(8 * threads);
    let seg = want.div_ceil(COLS).clamp(1, 16) * COLS;
    dst.par_chunks_mut(slab)
        .zip(src.par_chunks(slab))
        .for_each(|(dslab, sslab)| {
            // Row r of the slab, split into column segments: segs[s][i] is row i of segment s.
            let nseg = inner.div_ceil(seg);
            let mut segs: Vec<Vec<&mut [f32]>> = (0..nseg).map(|_| Vec::with_capacity(n)).collect();
            for row in dslab.chunks_mut(inner) {
                for (sg, part) in segs.iter_mut().zip(row.chunks_mut(seg)) {
                    sg.push(part);
                }
            }
            segs.into_par_iter().enumerate().for_each_init(
                || vec![0f32; (n + 2 * r) * COLS],
                |tile, (si, mut rows)| {
                    let width = rows.first().map_or(0, |row| row.len());
                    for k0 in (0..width).step_by(COLS) {
                        let c0 = si * seg + k0;
                        let wdt = COLS.min(width - k0);
                        // Tile row t holds input row t - r, extended by the mode.
                        for t in 0..n + 2 * r {
                            let dstrow = &mut tile[t * COLS..t * COLS + wdt];
                            match filter_tap(t as i64 - r as i64, n, mode) {
                                Some(j) => dstrow
                                    .copy_from_slice(&sslab[j * inner + c0..j * inner + c0 + wdt]),
                                None => dstrow.fill(cval),
                            }
                        }
                        for (i, row) in rows.iter_mut().enumerate() {
                            tile_accumulate(&mut row[k0..k0 + wdt], tile, i + r, &w);
                        }
                    }
                },
            );
        });
}

/// `out[k] = w0 pad[k + r] + sum_j w_j (pad[k + r - j] + pad[k + r + j])` over a padded line.
#[multiversion::multiversion(targets("x86_64+avx2+fma", "x86_64+avx"))]
fn line_accumulate(out: &mut [f32], pad: &[f32], w: &[f32]) {
    let r = w.len() - 1;
    let n = out.len();
    for (o, &c) in out.iter_mut().zip(&pad[r..r + n]) {
        *o = w[0] * c;
    }
    for (j, &wj) in w.iter().enumerate().skip(1) {
        let lo = &pad[r - j..r - j + n];
        let hi = &pad[r + j..r + j + n];
        for ((o, &l), &h) in out.iter_mut().zip(lo).zip(hi) {
            *o += wj * (l + h);
        }
    }
}

/// One output row of a strided pass: tile rows (each [`COLS`] wide) `c ± j` weighted by `w[j]`.
#[multiversion::multiversion(targets("x86_64+avx2+fma", "x86_64+avx"))]
fn tile_accumulate(out: &mut [f32], tile: &[f32], c: usize, w: &[f32]) {
    let wdt = out.len();
    let row = |t: usize| &tile[t * COLS..t * COLS + wdt];
    let mut acc = [0f32; COLS];
    let acc = &mut acc[..wdt];
    for (a, &v) in acc.iter_mut().zip(row(c)) {
        *a = w[0] * v;
    }
    for (j, &wj) in w.iter().enumerate().skip(1) {
        for ((a, &l), &h) in acc.iter_mut().zip(row(c - j)).zip(row(c + j)) {
            *a += wj * (l + h);
        }
    }
    out.copy_from_slice(acc);
}

/// Boundary handling and truncation shared by the separable filters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Boundary {
    pub mode: Mode,
    pub cval: f32,
}

impl Default for Boundary {
    /// scipy's default for its filters: `mode="reflect"`, `cval=0`.
    fn default() -> Self {
        Boundary {
            mode: Mode::Reflect,
            cval: 0.0,
        }
    }
}

/// Runs the passes of one gaussian (derivative `orders[a]` along axis `a`) on one spatial array:
/// the result ends in `data`; `scratch` is the second buffer. Axes with `sigma <= 1e-15` are
/// skipped, as scipy does.
fn gaussian_passes(
    data: &mut Vec<f32>,
    scratch: &mut Vec<f32>,
    shape: &[usize],
    sigma: &[f64],
    orders: &[u32],
    b: Boundary,
) {
    scratch.resize(data.len(), 0.0);
    for axis in 0..shape.len() {
        if sigma[axis] <= 1e-15 {
            continue;
        }
        let w = gaussian_kernel1d(sigma[axis], orders[axis], TRUNCATE);
        correlate1d(data, scratch, shape, axis, &w, b.mode, b.cval);
        std::mem::swap(data, scratch);
    }
}

/// Checks `data.len()` against `shape` and returns the spatial size of one channel.
fn channel_len(data: &[f32], shape: &[usize]) -> usize {
    let n: usize = shape.iter().product();
    assert!(
        n == 0 && data.is_empty() || n > 0 && data.len().is_multiple_of(n),
        "data length {} is not a multiple of the shape {shape:?}",
        data.len()
    );
    n
}

/// Same result as `scipy.ndimage.gaussian_filter(x, sigma, mode=mode, cval=cval, truncate=4.0)`
/// on each channel (or batch item) of `data`: `data.len()` is a multiple of `prod(shape)`.
/// `sigma` has one value per axis.
pub fn gaussian(data: &[f32], shape: &[usize], sigma: &[f64], b: Boundary) -> Vec<f32> {
    assert_eq!(sigma.len(), shape.len());
    let n = channel_len(data, shape);
    let orders = vec![0; shape.len()];
    let mut out = Vec::with_capacity(data.len());
    let mut buf = Vec::new();
    let mut scratch = Vec::new();
    for ch in data.chunks(n.max(1)) {
        buf.clear();
        buf.extend_from_slice(ch);
        gaussian_passes(&mut buf, &mut scratch, shape, sigma, &orders, b);
        out.extend_from_slice(&buf);
    }
    out
}

/// Same result as `scipy.ndimage.gaussian_laplace(x, sigma, mode=mode, cval=cval)` on each
/// channel: the sum over axes `a` of the gaussian with a second derivative along `a`, added in
/// axis order as scipy's `generic_laplace` does.
pub fn gaussian_laplace(data: &[f32], shape: &[usize], sigma: &[f64], b: Boundary) -> Vec<f32> {
    assert_eq!(sigma.len(), shape.len());
    let n = channel_len(data, shape);
    let mut out = Vec::with_capacity(data.len());
    let (mut acc, mut buf, mut scratch) = (Vec::new(), Vec::new(), Vec::new());
    for ch in data.chunks(n.max(1)) {
        for axis in 0..shape.len() {
            let mut orders = vec![0; shape.len()];
            orders[axis] = 2;
            buf.clear();
            buf.extend_from_slice(ch);
            gaussian_passes(&mut buf, &mut scratch, shape, sigma, &orders, b);
            if axis == 0 {
                std::mem::swap(&mut acc, &mut buf);
            } else {
                acc.par_iter_mut()
                    .zip(buf.par_iter())
                    .for_each(|(a, &v)| *a += v);
            }
        }
        out.extend_from_slice(&acc);
    }
    out
}

/// Difference of gaussians `G(sigma1) x − G(sigma2) x` (each as [`gaussian`]) on each channel,
/// as `skimage.filters.difference_of_gaussians` before its range scaling.
pub fn difference_of_gaussians(
    data: &[f32],
    shape: &[usize],
    sigma1: &[f64],
    sigma2: &[f64],
    b: Boundary,
) -> Vec<f32> {
    let mut lo = gaussian(data, shape, sigma1, b);
    let hi = gaussian(data, shape, sigma2, b);
    lo.par_iter_mut()
        .zip(hi.par_iter())
        .for_each(|(a, &h)| *a -= h);
    lo
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filter_modes_follow_ni_extend_line() {
        // n = 4, values a b c d: scipy's filter extension patterns.
        let taps = |m| (-5..9).map(|i| filter_tap(i, 4, m)).collect::<Vec<_>>();
        let s = |v: &[usize]| v.iter().map(|&j| Some(j)).collect::<Vec<_>>();
        // reflect: dcba abcd dcba (period 8)
        assert_eq!(
            taps(Mode::Reflect),
            s(&[3, 3, 2, 1, 0, 0, 1, 2, 3, 3, 2, 1, 0, 0])
        );
        // mirror: period 6
        assert_eq!(
            taps(Mode::Mirror),
            s(&[1, 2, 3, 2, 1, 0, 1, 2, 3, 2, 1, 0, 1, 2])
        );
        // wrap and grid-wrap: period 4
        let wrap = s(&[3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0]);
        assert_eq!(taps(Mode::Wrap), wrap);
        assert_eq!(taps(Mode::GridWrap), wrap);
        assert_eq!(filter_tap(-1, 4, Mode::Constant), None);
        assert_eq!(filter_tap(4, 4, Mode::GridConstant), None);
        assert_eq!(filter_tap(-3, 1, Mode::Mirror), Some(0));
    }

    #[test]
    fn second_derivative_kernel_has_the_moments_of_d2() {
        // A second derivative kernel sums to 0 and has sum_x x^2 k(x) / 2 = 1 (up to sampling
        // and truncation of the gaussian).
        let k = gaussian_kernel1d(2.0, 2, 4.0);
        let r = (k.len() / 2) as f64;
        let m2: f64 = k
            .iter()
            .enumerate()
            .map(|(i, v)| (i as f64 - r).powi(2) * v)
            .sum();
        assert!((m2 / 2.0 - 1.0).abs() < 1e-2, "{m2}");
        assert!(k.iter().sum::<f64>().abs() < 1e-2);
        assert!(k[k.len() / 2] < 0.0);
    }

    #[test]
    #[allow(clippy::needless_range_loop)] // index arithmetic is the point of this reference
    fn every_axis_and_mode_matches_a_direct_sum() {
        // The second shape has column segments of several tiles on axis 0.
        for shape in [[5usize, 7, 9], [5, 40, 300]] {
            let n: usize = shape.iter().product();
            let src: Vec<f32> = (0..n).map(|i| ((i * 37) % 11) as f32 / 11.0).collect();
            let w = gaussian_kernel1d(1.5, 0, 4.0);
            let r = (w.len() / 2) as i64;
            let strides = [shape[1] * shape[2], shape[2], 1];
            for mode in Mode::ALL {
                for axis in 0..3 {
                    let mut dst = vec![0f32; n];
                    correlate1d(&src, &mut dst, &shape, axis, &w, mode, 0.25);
                    for idx in 0..n {
                        let pos = [
                            idx / strides[0],
                            (idx / strides[1]) % shape[1],
                            idx % shape[2],
                        ];
                        let mut want = 0f64;
                        for t in -r..=r {
                            let v = match filter_tap(pos[axis] as i64 + t, shape[axis], mode) {
                                Some(j) => src[idx - pos[axis] * strides[axis] + j * strides[axis]],
                                None => 0.25,
                            };
                            want += w[(t + r) as usize] * v as f64;
                        }
                        assert!(
                            (dst[idx] as f64 - want).abs() < 1e-6,
                            "{mode} axis {axis} voxel {idx} of {shape:?}"
                        );
                    }
                }
            }
        }
    }
}
