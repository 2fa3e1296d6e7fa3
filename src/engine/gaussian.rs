//! Separable gaussian smoothing, same result as
//! `scipy.ndimage.gaussian_filter(x, sigma, mode="constant", cval=0, truncate=4.0)`.
//!
//! Arrays are C order, axis 0 slowest. Every pass is written as row operations over contiguous
//! memory, so the inner loops vectorise on every axis, the contiguous one included, and each input
//! value is read from memory about once. The sums use fused multiply-adds (one rounding each):
//! the values are the same on every machine, with or without FMA hardware (`f32::mul_add` is
//! exact in software too), and on any thread count.

use rayon::prelude::*;

use crate::core::gaussian::gaussian_kernel1d;

/// Columns handled together on a non-contiguous axis whose rows are near each other: a tile's
/// window of `2r + 4` input rows (about 25 KB at sigma 12) stays in L1 while its output rows are
/// computed one group after another.
const TILE_NEAR: usize = 64;
/// Columns handled together when the rows are `FAR_ROWS` values apart or more (the slowest axis
/// of a volume): wider tiles, fewer streams of rows. Both measured on the benchmark workload.
const TILE_FAR: usize = 256;
const FAR_ROWS: usize = 16 * 1024;

/// Correlates `src` (C order, `shape`) along `axis` with the symmetric odd-length kernel
/// `weights`, zero outside the array (scipy `mode="constant", cval=0`), into `dst`.
///
/// Along contiguous lines an output is `w0 * x_i`, then `acc = fma(w_j, x_{i-j} + x_{i+j}, acc)`
/// for `j = 1..=r` in turn; along any other axis it is `acc = fma(w_{k-i}, x_k, acc)` for the
/// rows `k` from `i - r` up to `i + r` in turn, from `acc = 0`. A tap outside the array is zero.
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
                symmetric_accumulate(out, pad, &w[..=r.min(n - 1)], r);
            },
        );
        return;
    }
    let slab = n * inner;
    dst.par_chunks_mut(slab)
        .zip(src.par_chunks(slab))
        .for_each(|(dslab, sslab)| {
            // Column tiles in parallel, every output row of a tile in one task: the tile's input
            // rows come from memory once and stay in cache for all the outputs that read them.
            let tile = if inner < FAR_ROWS {
                TILE_NEAR
            } else {
                TILE_FAR
            };
            let mut tiles: Vec<Vec<&mut [f32]>> = (0..inner.div_ceil(tile))
                .map(|_| Vec::with_capacity(n))
                .collect();
            for row in dslab.chunks_mut(inner) {
                for (t, piece) in row.chunks_mut(tile).enumerate() {
                    tiles[t].push(piece);
                }
            }
            tiles.into_par_iter().enumerate().for_each(|(t, mut rows)| {
                strided_tile(&mut rows, sslab, n, inner, t * tile, &wext, r);
            });
        });
}

/// Every output row of one column tile (`rows[i]` is row `i`'s piece, starting at column `c0`) of
/// a pass along an axis whose rows are `inner` values apart in `src` (one slab of `n` rows):
/// groups of four rows at once, then the rest. The grouping changes no value (a row's sum in a
/// group only adds exact zeros), so the result does not depend on it.
fn strided_tile(
    rows: &mut [&mut [f32]],
    src: &[f32],
    n: usize,
    inner: usize,
    c0: usize,
    wext: &[f32],
    r: usize,
) {
    let quads = n / 4;
    for (qi, quad) in rows.chunks_exact_mut(4).enumerate() {
        if let [a, b, c, d] = quad {
            strided_accumulate4([a, b, c, d], src, 4 * qi, n, inner, c0, wext, r);
        }
    }
    for (ri, out) in rows.iter_mut().enumerate().skip(4 * quads) {
        strided_accumulate(out, src, ri, n, inner, c0, wext, r);
    }
}

/// Four output rows `i..i + 4` of a strided pass at once: every input row read from cache feeds
/// four accumulators (`wext` is the kernel padded by 3 zeros each side):
/// `out_q = fma(w_{k - i - q}, row(k), out_q)` for `k` from `i - r` up to `i + 3 + r`, rows
/// outside `0..n` skipped. Compiled for AVX-512 and for AVX2 with FMA, picked at run time.
#[multiversion::multiversion(targets("x86_64+avx512f+avx512vl+avx2+fma", "x86_64+avx2+fma"))]
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
    let wdt = outs[0].len();
    let k_lo = i.saturating_sub(r);
    let k_hi = (i + 3 + r).min(n - 1);
    // Offset of input row k from output row i + q is k - i - q, at wext[k + r + 3 - i - q]: the
    // four weights of row k are the window wext[k + r - i..k + r - i + 4], reversed.
    let wwin = &wext[k_lo + r - i..k_hi + r - i + 4];
    let first = k_lo * inner + c0;
    let mut outs = outs;
    let mut k0 = 0;
    while k0 + 32 <= wdt {
        quad_block::<32>(&mut outs, k0, src, first + k0, inner, wwin);
        k0 += 32;
    }
    for b in [16, 8, 1] {
        while k0 + b <= wdt {
            match b {
                16 => quad_block::<16>(&mut outs, k0, src, first + k0, inner, wwin),
                8 => quad_block::<8>(&mut outs, k0, src, first + k0, inner, wwin),
                _ => quad_block::<1>(&mut outs, k0, src, first + k0, inner, wwin),
            }
            k0 += b;
        }
    }
}

/// Columns `k0..k0 + B` of [`strided_accumulate4`]'s four rows; `o` is the first input row's
/// offset of column `k0`, `wwin` the weight windows of the rows in turn.
#[inline(always)]
fn quad_block<const B: usize>(
    outs: &mut [&mut [f32]; 4],
    k0: usize,
    src: &[f32],
    mut o: usize,
    inner: usize,
    wwin: &[f32],
) {
    let mut acc = [[0f32; B]; 4];
    for ws in wwin.windows(4) {
        let row: &[f32; B] = src[o..o + B].try_into().unwrap_or(&[0.0; B]);
        let ws: &[f32; 4] = ws.try_into().unwrap_or(&[0.0; 4]);
        for q in 0..4 {
            let wq = ws[3 - q];
            for c in 0..B {
                acc[q][c] = wq.mul_add(row[c], acc[q][c]);
            }
        }
        o += inner;
    }
    for (out, a) in outs.iter_mut().zip(&acc) {
        out[k0..k0 + B].copy_from_slice(a);
    }
}

/// One output row of a strided pass, the same sum as [`strided_accumulate4`] for one row.
#[multiversion::multiversion(targets("x86_64+avx512f+avx512vl+avx2+fma", "x86_64+avx2+fma"))]
#[allow(clippy::too_many_arguments)] // a hot inner kernel: plain arguments keep it inlinable
fn strided_accumulate(
    out: &mut [f32],
    src: &[f32],
    i: usize,
    n: usize,
    inner: usize,
    c0: usize,
    wext: &[f32],
    r: usize,
) {
    let k_lo = i.saturating_sub(r);
    let k_hi = (i + r).min(n - 1);
    let ws = &wext[k_lo + r + 3 - i..=k_hi + r + 3 - i];
    let first = k_lo * inner + c0;
    let wdt = out.len();
    let mut k0 = 0;
    for b in [32, 16, 8, 1] {
        while k0 + b <= wdt {
            let dst = &mut out[k0..k0 + b];
            match b {
                32 => row_block::<32>(dst, src, first + k0, inner, ws),
                16 => row_block::<16>(dst, src, first + k0, inner, ws),
                8 => row_block::<8>(dst, src, first + k0, inner, ws),
                _ => row_block::<1>(dst, src, first + k0, inner, ws),
            }
            k0 += b;
        }
    }
}

/// `B` columns of [`strided_accumulate`]: `o` is the first input row's offset of the first
/// column, `ws` the weights of the rows in turn.
#[inline(always)]
fn row_block<const B: usize>(out: &mut [f32], src: &[f32], mut o: usize, inner: usize, ws: &[f32]) {
    let mut acc = [0f32; B];
    for &wk in ws {
        let row: &[f32; B] = src[o..o + B].try_into().unwrap_or(&[0.0; B]);
        for c in 0..B {
            acc[c] = wk.mul_add(row[c], acc[c]);
        }
        o += inner;
    }
    out.copy_from_slice(&acc);
}

/// `out[k] = w0 pad[c + k]`, then `out[k] = fma(w_j, pad[c + k - j] + pad[c + k + j], out[k])` for
/// `j = 1..w.len()`, for `k` in `0..out.len()`: the inner loop of a pass along contiguous lines.
#[multiversion::multiversion(targets("x86_64+avx512f+avx512vl+avx2+fma", "x86_64+avx2+fma"))]
fn symmetric_accumulate(out: &mut [f32], pad: &[f32], w: &[f32], c: usize) {
    let rr = w.len() - 1;
    let len = out.len();
    let mut k0 = 0;
    // Blocks of outputs stay in registers across all taps: two loads, an add and a fused
    // multiply-add per pair of taps, no load and store of the accumulator.
    let win = |k0: usize, b: usize| &pad[c + k0 - rr..c + k0 + rr + b];
    while k0 + 64 <= len {
        symmetric_block::<64>(&mut out[k0..k0 + 64], win(k0, 64), w);
        k0 += 64;
    }
    for b in [32, 16, 8, 1] {
        while k0 + b <= len {
            let dst = &mut out[k0..k0 + b];
            match b {
                32 => symmetric_block::<32>(dst, win(k0, b), w),
                16 => symmetric_block::<16>(dst, win(k0, b), w),
                8 => symmetric_block::<8>(dst, win(k0, b), w),
                _ => symmetric_block::<1>(dst, win(k0, b), w),
            }
            k0 += b;
        }
    }
}

/// `B` outputs of [`symmetric_accumulate`] from their window `win` (`2r + B` values, output `k`
/// centred on `win[r + k]`).
#[inline(always)]
fn symmetric_block<const B: usize>(out: &mut [f32], win: &[f32], w: &[f32]) {
    let r = w.len() - 1;
    let mut acc = [0f32; B];
    let center: &[f32; B] = win[r..r + B].try_into().unwrap_or(&[0.0; B]);
    for (a, &v) in acc.iter_mut().zip(center) {
        *a = w[0] * v;
    }
    // The windows starting at r - j and at r + j, for j = 1..=r.
    let los = win[..r + B - 1].windows(B).rev();
    let his = win[r + 1..].windows(B);
    for ((&wj, lo), hi) in w[1..].iter().zip(los).zip(his) {
        let lo: &[f32; B] = lo.try_into().unwrap_or(&[0.0; B]);
        let hi: &[f32; B] = hi.try_into().unwrap_or(&[0.0; B]);
        for k in 0..B {
            acc[k] = wj.mul_add(lo[k] + hi[k], acc[k]);
        }
    }
    out.copy_from_slice(&acc);
}

/// Gaussian smoothing over every axis in order, zero boundary (scipy `gaussian_filter` with
/// `mode="constant", cval=0, truncate=4.0`). The result ends in `data`; `scratch` is resized and
/// used as the second buffer.
pub fn gaussian_zero(data: &mut Vec<f32>, scratch: &mut Vec<f32>, shape: &[usize], sigma: &[f64]) {
    super::hugepages::scratch_f32(scratch, data.len());
    for (axis, &s) in sigma.iter().enumerate() {
        let w = gaussian_kernel1d(s, 0, 4.0);
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
        let k = gaussian_kernel1d(2.0, 0, 4.0);
        assert_eq!(k.len(), 17);
        assert!((k.iter().sum::<f64>() - 1.0).abs() < 1e-12);
        assert_eq!(gaussian_kernel1d(0.1, 0, 4.0), vec![1.0]);
    }

    #[test]
    fn each_pass_sums_in_its_documented_order_bit_for_bit() {
        // Shapes that take every block width (32, 16, 8, 1 columns), groups of four rows and
        // the rows after them, and a kernel wider than the axis.
        for (n, m, sigma) in [(13usize, 61usize, 2.0), (6, 37, 3.0), (50, 9, 1.0)] {
            let src: Vec<f32> = (0..n * m)
                .map(|i| ((i * 7919) % 1013) as f32 / 1013.0 - 0.5)
                .collect();
            let wd = gaussian_kernel1d(sigma, 0, 4.0);
            let r = wd.len() / 2;
            let w: Vec<f32> = wd[r..].iter().map(|&v| v as f32).collect();
            let tap = |i: isize, lim: usize, get: &dyn Fn(usize) -> f32| {
                if i >= 0 && (i as usize) < lim {
                    get(i as usize)
                } else {
                    0.0
                }
            };
            // Axis 0 (strided): acc = fma(w_{k-i}, x_k, acc), rows k ascending, from 0.
            let mut dst = vec![0f32; n * m];
            correlate_axis_zero(&src, &mut dst, &[n, m], 0, &wd);
            for i in 0..n {
                for c in 0..m {
                    let mut acc = 0f32;
                    for k in i.saturating_sub(r)..=(i + r).min(n - 1) {
                        acc = w[k.abs_diff(i)].mul_add(src[k * m + c], acc);
                    }
                    assert_eq!(dst[i * m + c].to_bits(), acc.to_bits(), "axis 0 ({i}, {c})");
                }
            }
            // Axis 1 (contiguous): w0 x_i, then acc = fma(w_j, x_{i-j} + x_{i+j}, acc).
            correlate_axis_zero(&src, &mut dst, &[n, m], 1, &wd);
            for row in 0..n {
                let get = |c: usize| src[row * m + c];
                for i in 0..m {
                    let mut acc = w[0] * get(i);
                    for (j, &wj) in w.iter().enumerate().take(r.min(m - 1) + 1).skip(1) {
                        let lo = tap(i as isize - j as isize, m, &get);
                        let hi = tap((i + j) as isize, m, &get);
                        acc = wj.mul_add(lo + hi, acc);
                    }
                    assert_eq!(dst[row * m + i], acc, "axis 1 ({row}, {i})");
                }
            }
        }
    }

    #[test]
    #[allow(clippy::needless_range_loop)] // index arithmetic is the point of this reference
    fn every_axis_matches_a_direct_sum() {
        let shape = [5usize, 7, 9];
        let n: usize = shape.iter().product();
        let src: Vec<f32> = (0..n).map(|i| ((i * 37) % 11) as f32 / 11.0).collect();
        let w = gaussian_kernel1d(1.5, 0, 4.0);
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
