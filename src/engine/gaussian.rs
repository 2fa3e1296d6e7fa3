//! Separable gaussian smoothing, same result as
//! `scipy.ndimage.gaussian_filter(x, sigma, mode="constant", cval=0, truncate=4.0)`.
//!
//! Arrays are C order, axis 0 slowest. Every pass is written as row operations
//! (`out += w * (row_lo + row_hi)`) over contiguous memory, so the inner loops vectorise on every
//! axis, the contiguous one included, and each input value is read from memory about once.

use rayon::prelude::*;

use crate::core::gaussian::gaussian_kernel1d;

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
    dst.par_chunks_mut(slab)
        .zip(src.par_chunks(slab))
        .for_each(|(dslab, sslab)| {
            // Column tiles in parallel, every output row of a tile in one task: the tile's input
            // rows come from memory once and stay in cache for all the outputs that read them.
            // Rows are grouped in fours from row 0 whatever the thread count, so every value is
            // summed the same way on any machine (bit-identical across thread counts).
            let mut tiles: Vec<Vec<&mut [f32]>> = (0..inner.div_ceil(TILE))
                .map(|_| Vec::with_capacity(n))
                .collect();
            for row in dslab.chunks_mut(inner) {
                for (t, piece) in row.chunks_mut(TILE).enumerate() {
                    tiles[t].push(piece);
                }
            }
            tiles.into_par_iter().enumerate().for_each(|(t, mut rows)| {
                pass_tile(&mut rows, sslab, n, inner, t * TILE, &w, &wext, r);
            });
        });
}

/// Every output row of one column tile (`rows[i]` is row `i`'s piece, starting at column `c0`) of
/// a pass along an axis whose rows are `inner` values apart in `src` (one slab of `n` rows):
/// groups of four rows at once, then the rest.
#[allow(clippy::too_many_arguments)] // internal helper of correlate_axis_zero
fn pass_tile(
    rows: &mut [&mut [f32]],
    sslab: &[f32],
    n: usize,
    inner: usize,
    c0: usize,
    w: &[f32],
    wext: &[f32],
    r: usize,
) {
    let quads = n / 4;
    for (qi, quad) in rows.chunks_exact_mut(4).enumerate() {
        if let [a, b, c, d] = quad {
            strided_accumulate4([a, b, c, d], sslab, 4 * qi, n, inner, c0, wext, r);
        }
    }
    for (ri, out) in rows.iter_mut().enumerate().skip(4 * quads) {
        strided_accumulate(out, sslab, ri, n, inner, c0, w);
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
    // Offset of input row k from output row i + q is k - i - q, at wext[k + r + 3 - i - q]: the
    // four weights of row k are the window wext[k + r - i..k + r - i + 4], reversed.
    let wwin = &wext[k_lo + r - i..k_hi + r - i + 4];
    for k0 in (0..full).step_by(B4) {
        let mut acc = [[0f32; B4]; 4];
        let mut o = k_lo * inner + c0 + k0;
        for ws in wwin.windows(4) {
            let row: &[f32; B4] = src[o..o + B4].try_into().unwrap_or(&[0.0; B4]);
            let ws: &[f32; 4] = ws.try_into().unwrap_or(&[0.0; 4]);
            for q in 0..4 {
                let wq = ws[3 - q];
                for c in 0..B4 {
                    acc[q][c] += wq * row[c];
                }
            }
            o += inner;
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
