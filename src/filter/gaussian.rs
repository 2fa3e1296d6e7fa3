//! Separable gaussian smoothing, same result as
//! `scipy.ndimage.gaussian_filter(x, sigma, mode="constant", cval=0, truncate=4.0)`.
//!
//! Arrays are C order, axis 0 slowest. Every pass is written as row operations
//! (`out += w * (row_lo + row_hi)`) over contiguous memory, so the inner loops vectorise on every
//! axis, the contiguous one included, and each input value is read from memory about once.

use rayon::prelude::*;

/// scipy's `_gaussian_kernel1d(sigma, 0, radius)` with `radius = int(truncate * sigma + 0.5)`:
/// weights `exp(-x^2 / 2 sigma^2)` for `x` in `-radius..=radius`, normalised to sum 1.
pub fn gaussian_kernel(sigma: f64, truncate: f64) -> Vec<f64> {
    let radius = (truncate * sigma + 0.5) as i64;
    if sigma <= 0.0 || radius == 0 {
        return vec![1.0];
    }
    let s2 = sigma * sigma;
    let w: Vec<f64> = (-radius..=radius)
        .map(|x| (-0.5 / s2 * (x * x) as f64).exp())
        .collect();
    let sum: f64 = w.iter().sum();
    w.into_iter().map(|v| v / sum).collect()
}

/// Columns handled together on a non-contiguous axis (the tile's `n` input rows stay in L2).
const TILE: usize = 256;

/// Correlates `src` (C order, `shape`) along `axis` with the symmetric odd-length kernel
/// `weights`, zero outside the array (scipy `mode="constant", cval=0`), into `dst`.
pub fn correlate_axis_zero(
    src: &[f32],
    dst: &mut [f32],
    shape: &[usize],
    axis: usize,
    weights: &[f64],
) {
    assert_eq!(src.len(), dst.len());
    let n = shape[axis];
    if n == 0 || src.is_empty() {
        return;
    }
    let r = weights.len() / 2;
    let w: Vec<f32> = weights[r..].iter().map(|&v| v as f32).collect();
    let inner: usize = shape[axis + 1..].iter().product();
    // The full kernel with 3 zeros on each side: wext[d + r + 3] is the weight of offset d, for
    // |d| <= r + 3, so four neighbouring output rows share every input row without branches.
    let mut wext = vec![0f32; 2 * r + 7];
    for d in -(r as isize)..=(r as isize) {
        wext[(d + r as isize + 3) as usize] = w[d.unsigned_abs()];
    }
    if inner == 1 {
        // Contiguous lines: pad each line with zeros and accumulate shifted copies (L1-resident).
        dst.par_chunks_mut(n).zip(src.par_chunks(n)).for_each_init(
            || vec![0f32; n + 2 * r],
            |pad, (out, line)| {
                pad[r..r + n].copy_from_slice(line);
                symmetric_accumulate(out, pad, &w[..=r.min(n - 1)], r, 1);
            },
        );
        return;
    }
    let slab = n * inner;
    // Fixed row blocks (a multiple of 4, independent of the thread count, so every row is summed
    // the same way on any machine: results are bit-identical across thread counts).
    let rows_per_block = 8;
    dst.par_chunks_mut(slab)
        .zip(src.par_chunks(slab))
        .for_each(|(dslab, sslab)| {
            dslab
                .par_chunks_mut(rows_per_block * inner)
                .enumerate()
                .for_each(|(b, dblock)| {
                    let i0 = b * rows_per_block;
                    pass_rows(dblock, sslab, i0, n, inner, &w, &wext, r);
                });
        });
}

/// Output rows `i0..i0 + dblock.len() / inner` of a pass along an axis whose rows are `inner`
/// values apart in `src` (one slab of `n` rows): groups of four rows at once, then the rest.
#[allow(clippy::too_many_arguments)] // internal helper shared by both pass layouts
fn pass_rows(
    dblock: &mut [f32],
    sslab: &[f32],
    i0: usize,
    n: usize,
    inner: usize,
    w: &[f32],
    wext: &[f32],
    r: usize,
) {
    let rows = dblock.len() / inner;
    let quads = rows / 4;
    // Column tiles outermost: the tile's input rows stay in cache for all outputs.
    for c0 in (0..inner).step_by(TILE) {
        let wdt = TILE.min(inner - c0);
        for (qi, quad) in dblock.chunks_exact_mut(4 * inner).enumerate() {
            let (r0, rest) = quad.split_at_mut(inner);
            let (r1, rest) = rest.split_at_mut(inner);
            let (r2, r3) = rest.split_at_mut(inner);
            let outs = [
                &mut r0[c0..c0 + wdt],
                &mut r1[c0..c0 + wdt],
                &mut r2[c0..c0 + wdt],
                &mut r3[c0..c0 + wdt],
            ];
            strided_accumulate4(outs, sslab, i0 + 4 * qi, n, inner, c0, wext, r);
        }
        for ri in 4 * quads..rows {
            let out = &mut dblock[ri * inner + c0..ri * inner + c0 + wdt];
            strided_accumulate(out, sslab, i0 + ri, n, inner, c0, w);
        }
    }
}

/// One output row tile of a pass along a non-contiguous axis, reading the input rows in place:
/// `out = w0 row(i) + sum_j w_j (row(i - j) + row(i + j))`, taps outside `0..n` skipped (zero).
#[multiversion::multiversion(targets("x86_64+avx2+fma", "x86_64+avx"))]
fn strided_accumulate(
    out: &mut [f32],
    src: &[f32],
    i: usize,
    n: usize,
    inner: usize,
    c0: usize,
    w: &[f32],
) {
    let r = w.len() - 1;
    let both = r.min(i).min(n - 1 - i);
    let lo_only = r.min(i);
    let hi_only = r.min(n - 1 - i);
    let wdt = out.len();
    let full = wdt - wdt % BLOCK;
    for k0 in (0..full).step_by(BLOCK) {
        let at = |k: usize| -> &[f32; BLOCK] {
            let o = k * inner + c0 + k0;
            src[o..o + BLOCK].try_into().unwrap_or(&[0.0; BLOCK])
        };
        let mut acc = [0f32; BLOCK];
        block_taps(&mut acc, at, i, w, both, lo_only, hi_only);
        out[k0..k0 + BLOCK].copy_from_slice(&acc);
    }
    for k in full..wdt {
        let v = |row: usize| src[row * inner + c0 + k];
        let mut a = w[0] * v(i);
        for (j, &wj) in w.iter().enumerate().take(both + 1).skip(1) {
            a += wj * (v(i - j) + v(i + j));
        }
        for (j, &wj) in w.iter().enumerate().take(lo_only + 1).skip(both + 1) {
            a += wj * v(i - j);
        }
        for (j, &wj) in w.iter().enumerate().take(hi_only + 1).skip(both + 1) {
            a += wj * v(i + j);
        }
        out[k] = a;
    }
}

/// Four output rows `i..i + 4` of a strided pass at once: every input row read from cache feeds
/// four accumulators (`wext` is the kernel padded by 3 zeros each side).
#[multiversion::multiversion(targets("x86_64+avx2+fma", "x86_64+avx"))]
#[allow(clippy::too_many_arguments)] // a hot inner kernel: plain arguments keep it inlinable
fn strided_accumulate4(
    outs: [&mut [f32]; 4],
    src: &[f32],
    i: usize,
    n: usize,
    inner: usize,
    c0: usize,
    wext: &[f32],
    r: usize,
) {
    const B4: usize = 16;
    let wdt = outs[0].len();
    let k_lo = i.saturating_sub(r);
    let k_hi = (i + 3 + r).min(n - 1);
    let [o0, o1, o2, o3] = outs;
    let full = wdt - wdt % B4;
    for k0 in (0..full).step_by(B4) {
        let mut acc = [[0f32; B4]; 4];
        for k in k_lo..=k_hi {
            let o = k * inner + c0 + k0;
            let row: &[f32; B4] = src[o..o + B4].try_into().unwrap_or(&[0.0; B4]);
            // Offset of input row k from output row i + q is k - i - q; index it into wext.
            let base = k + r + 3 - i;
            let ws = [wext[base], wext[base - 1], wext[base - 2], wext[base - 3]];
            for q in 0..4 {
                for c in 0..B4 {
                    acc[q][c] += ws[q] * row[c];
                }
            }
        }
        o0[k0..k0 + B4].copy_from_slice(&acc[0]);
        o1[k0..k0 + B4].copy_from_slice(&acc[1]);
        o2[k0..k0 + B4].copy_from_slice(&acc[2]);
        o3[k0..k0 + B4].copy_from_slice(&acc[3]);
    }
    for c in full..wdt {
        let mut acc = [0f32; 4];
        for k in k_lo..=k_hi {
            let v = src[k * inner + c0 + c];
            let base = k + r + 3 - i;
            for (q, a) in acc.iter_mut().enumerate() {
                *a += wext[base - q] * v;
            }
        }
        o0[c] = acc[0];
        o1[c] = acc[1];
        o2[c] = acc[2];
        o3[c] = acc[3];
    }
}

/// Outputs accumulated together in registers.
const BLOCK: usize = 32;

#[inline(always)]
fn block_taps<'s>(
    acc: &mut [f32; BLOCK],
    at: impl Fn(usize) -> &'s [f32; BLOCK],
    i: usize,
    w: &[f32],
    both: usize,
    lo_only: usize,
    hi_only: usize,
) {
    for (a, &v) in acc.iter_mut().zip(at(i)) {
        *a = w[0] * v;
    }
    for (j, &wj) in w.iter().enumerate().take(both + 1).skip(1) {
        let (lo, hi) = (at(i - j), at(i + j));
        for k in 0..BLOCK {
            acc[k] += wj * (lo[k] + hi[k]);
        }
    }
    for (j, &wj) in w.iter().enumerate().take(lo_only + 1).skip(both + 1) {
        let lo = at(i - j);
        for k in 0..BLOCK {
            acc[k] += wj * lo[k];
        }
    }
    for (j, &wj) in w.iter().enumerate().take(hi_only + 1).skip(both + 1) {
        let hi = at(i + j);
        for k in 0..BLOCK {
            acc[k] += wj * hi[k];
        }
    }
}

/// `out[k] = w0 pad[c + k] + sum_j w_j (pad[c + k - j s] + pad[c + k + j s])`, for `k` in
/// `0..out.len()`: the inner loop of every pass, over contiguous values. Compiled for AVX2+FMA as
/// well, picked at run time.
#[multiversion::multiversion(targets("x86_64+avx2+fma", "x86_64+avx"))]
fn symmetric_accumulate(out: &mut [f32], pad: &[f32], w: &[f32], c: usize, s: usize) {
    // Blocks of B outputs stay in registers across all taps: two loads and one multiply-add per
    // tap instead of a load and store of the accumulator too.
    const B: usize = 32;
    let len = out.len();
    let full = len - len % B;
    for k0 in (0..full).step_by(B) {
        let mut acc = [0f32; B];
        let center: &[f32; B] = pad[c + k0..c + k0 + B].try_into().unwrap_or(&[0.0; B]);
        for (a, &v) in acc.iter_mut().zip(center) {
            *a = w[0] * v;
        }
        for (j, &wj) in w.iter().enumerate().skip(1) {
            let lo: &[f32; B] = pad[c + k0 - j * s..c + k0 - j * s + B]
                .try_into()
                .unwrap_or(&[0.0; B]);
            let hi: &[f32; B] = pad[c + k0 + j * s..c + k0 + j * s + B]
                .try_into()
                .unwrap_or(&[0.0; B]);
            for ((a, &l), &h) in acc.iter_mut().zip(lo).zip(hi) {
                *a += wj * (l + h);
            }
        }
        out[k0..k0 + B].copy_from_slice(&acc);
    }
    let rest = &mut out[full..];
    let c = c + full;
    let len = rest.len();
    for (a, &v) in rest.iter_mut().zip(&pad[c..c + len]) {
        *a = w[0] * v;
    }
    for (j, &wj) in w.iter().enumerate().skip(1) {
        let lo = &pad[c - j * s..c - j * s + len];
        let hi = &pad[c + j * s..c + j * s + len];
        for ((a, &l), &h) in rest.iter_mut().zip(lo).zip(hi) {
            *a += wj * (l + h);
        }
    }
}

/// Gaussian smoothing over every axis in order, zero boundary (scipy `gaussian_filter` with
/// `mode="constant", cval=0, truncate=4.0`). The result ends in `data`; `scratch` is resized and
/// used as the second buffer.
pub fn gaussian_zero(data: &mut Vec<f32>, scratch: &mut Vec<f32>, shape: &[usize], sigma: &[f64]) {
    scratch.resize(data.len(), 0.0);
    for (axis, &s) in sigma.iter().enumerate() {
        let w = gaussian_kernel(s, 4.0);
        if w.len() == 1 {
            continue;
        }
        correlate_axis_zero(data, scratch, shape, axis, &w);
        std::mem::swap(data, scratch);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_matches_scipy_radius_and_normalisation() {
        let k = gaussian_kernel(2.0, 4.0);
        assert_eq!(k.len(), 17);
        assert!((k.iter().sum::<f64>() - 1.0).abs() < 1e-12);
        assert_eq!(gaussian_kernel(0.1, 4.0), vec![1.0]);
    }

    #[test]
    #[allow(clippy::needless_range_loop)] // index arithmetic is the point of this reference
    fn every_axis_matches_a_direct_sum() {
        let shape = [5usize, 7, 9];
        let n: usize = shape.iter().product();
        let src: Vec<f32> = (0..n).map(|i| ((i * 37) % 11) as f32 / 11.0).collect();
        let w = gaussian_kernel(1.5, 4.0);
        let r = (w.len() / 2) as isize;
        for axis in 0..3 {
            let mut dst = vec![0f32; n];
            correlate_axis_zero(&src, &mut dst, &shape, axis, &w);
            let strides = [63usize, 9, 1];
            for idx in 0..n {
                let pos = [idx / 63, (idx / 9) % 7, idx % 9];
                let mut want = 0f64;
                for t in -r..=r {
                    let p = pos[axis] as isize + t;
                    if p >= 0 && p < shape[axis] as isize {
                        let j = idx as isize + t * strides[axis] as isize;
                        want += w[(t + r) as usize] * src[j as usize] as f64;
                    }
                }
                assert!(
                    (dst[idx] as f64 - want).abs() < 1e-6,
                    "axis {axis} voxel {idx}"
                );
            }
        }
    }
}
