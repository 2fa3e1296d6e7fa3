//! Cubic B-spline prefilter, same result as `scipy.ndimage.spline_filter(x, order=3, mode=mode)`
//! after scipy's `_prepad_for_spline_filter` (`scipy/ndimage/src/ni_splines.c`,
//! `scipy/ndimage/_interpolation.py`).
//!
//! Arrays are C order, axis 0 slowest. Each line is filtered in f64 (as scipy does) and stored as
//! f32 coefficients. Lines along a non-contiguous axis are filtered a tile of columns at a time,
//! so the recursion runs over contiguous rows.

use rayon::prelude::*;

use super::boundary::{Mode, SPLINE_PREPAD};

/// The pole of the cubic B-spline, `sqrt(3) - 2`.
const POLE3: f64 = -0.267_949_192_431_122_7;

/// Which exact boundary scipy's prefilter uses for a mode (`apply_filter` in `ni_splines.c`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum InitKind {
    Mirror,
    Wrap,
    Reflect,
}

fn init_kind(mode: Mode) -> InitKind {
    match mode {
        Mode::Constant | Mode::GridConstant | Mode::Mirror | Mode::Wrap => InitKind::Mirror,
        Mode::GridWrap => InitKind::Wrap,
        Mode::Reflect | Mode::Nearest => InitKind::Reflect,
    }
}

/// Cubic spline coefficients of `src` (shape `shape`) for sampling with `mode`. For `nearest` and
/// `grid-constant` the result is padded by [`SPLINE_PREPAD`] on every side (edge values or cval),
/// exactly as scipy pads before filtering; the returned shape says so.
pub fn prefilter_cubic(
    src: &[f32],
    shape: &[usize],
    mode: Mode,
    cval: f32,
) -> (Vec<f32>, Vec<usize>) {
    let pshape = coefficient_shape(shape, mode);
    let mut data = if mode.needs_prepad() {
        let mut d = super::hugepages::zeroed_f32(pshape.iter().product());
        prepad(src, shape, mode, cval, &mut d);
        d
    } else {
        src.to_vec()
    };
    prefilter_cubic_in_place(&mut data, &pshape, mode);
    (data, pshape)
}

/// The shape of the cubic coefficients of an image of `shape` under `mode`: padded by
/// [`SPLINE_PREPAD`] on every side for `nearest` and `grid-constant`, the image's own otherwise.
pub fn coefficient_shape(shape: &[usize], mode: Mode) -> Vec<usize> {
    let p = if mode.needs_prepad() {
        SPLINE_PREPAD
    } else {
        0
    };
    shape.iter().map(|&n| n + 2 * p).collect()
}

/// scipy's padding before the prefilter, for a mode that [needs it](Mode::needs_prepad): `src`
/// (shape `shape`) padded by [`SPLINE_PREPAD`] on every side into `dst`, which holds the product
/// of [`coefficient_shape`] values (every one is written).
pub fn prepad(src: &[f32], shape: &[usize], mode: Mode, cval: f32, dst: &mut [f32]) {
    assert_eq!(
        dst.len(),
        coefficient_shape(shape, mode).iter().product::<usize>()
    );
    pad_into(src, shape, SPLINE_PREPAD, mode, cval, dst);
}

/// The cubic prefilter where the values lie: `data` holds an image of `pshape` (the padded shape,
/// see [`prepad`], for a mode that needs it) and becomes its coefficients, the same values as
/// [`prefilter_cubic`] gives, with no buffer of their size beside.
pub fn prefilter_cubic_in_place(data: &mut [f32], pshape: &[usize], mode: Mode) {
    assert_eq!(data.len(), pshape.iter().product::<usize>());
    let kind = init_kind(mode);
    for axis in 0..pshape.len() {
        filter_axis(data, pshape, axis, kind);
    }
}

/// Pads by `p` on every side into `out` (the padded shape's size): edge values (`nearest`) or
/// `cval` (`grid-constant`), as `np.pad`. Every value of `out` is written.
fn pad_into(src: &[f32], shape: &[usize], p: usize, mode: Mode, cval: f32, out: &mut [f32]) {
    let pshape: Vec<usize> = shape.iter().map(|&n| n + 2 * p).collect();
    let d = shape.len();
    let row = pshape[d - 1];
    out.par_chunks_mut(row).enumerate().for_each(|(ri, orow)| {
        // Multi-index of this padded row (all axes but the last).
        let mut rem = ri;
        let mut src_off = 0usize;
        let mut inside = true;
        let mut stride = 1usize;
        let mut idx = vec![0usize; d - 1];
        for a in (0..d - 1).rev() {
            idx[a] = rem % pshape[a];
            rem /= pshape[a];
        }
        for a in (0..d).rev() {
            let n = shape[a];
            if a < d - 1 {
                let i = idx[a] as isize - p as isize;
                let j = if i < 0 || i >= n as isize {
                    inside = false;
                    i.clamp(0, n as isize - 1) as usize
                } else {
                    i as usize
                };
                src_off += j * stride;
            }
            stride *= n;
        }
        if !inside && mode == Mode::GridConstant {
            orow.fill(cval);
            return;
        }
        let n = shape[d - 1];
        let srow = &src[src_off..src_off + n];
        for (k, o) in orow.iter_mut().enumerate() {
            let i = k as isize - p as isize;
            *o = if i < 0 || i >= n as isize {
                if mode == Mode::GridConstant {
                    cval
                } else {
                    srow[i.clamp(0, n as isize - 1) as usize]
                }
            } else {
                srow[i as usize]
            };
        }
    });
}

const TILE: usize = 64;

fn filter_axis(data: &mut [f32], shape: &[usize], axis: usize, kind: InitKind) {
    let n = shape[axis];
    if n <= 1 {
        return;
    }
    let inner: usize = shape[axis + 1..].iter().product();
    let gain = (1.0 - POLE3) * (1.0 - 1.0 / POLE3);
    if inner == 1 {
        data.par_chunks_mut(n).for_each_init(
            || vec![0f64; n],
            |buf, line| {
                for (b, &v) in buf.iter_mut().zip(line.iter()) {
                    *b = v as f64 * gain;
                }
                filter_rows(buf, n, 1, POLE3, kind);
                for (v, &b) in line.iter_mut().zip(buf.iter()) {
                    *v = b as f32;
                }
            },
        );
        return;
    }
    let slab = n * inner;
    data.par_chunks_mut(slab).for_each(|s| {
        let mut buf = vec![0f64; n * TILE];
        for c0 in (0..inner).step_by(TILE) {
            let w = TILE.min(inner - c0);
            let buf = &mut buf[..n * w];
            for i in 0..n {
                for (b, &v) in buf[i * w..(i + 1) * w]
                    .iter_mut()
                    .zip(&s[i * inner + c0..i * inner + c0 + w])
                {
                    *b = v as f64 * gain;
                }
            }
            filter_rows(buf, n, w, POLE3, kind);
            for i in 0..n {
                for (v, &b) in s[i * inner + c0..i * inner + c0 + w]
                    .iter_mut()
                    .zip(&buf[i * w..(i + 1) * w])
                {
                    *v = b as f32;
                }
            }
        }
    });
}

/// scipy's `_apply_filter` on `w` interleaved lines of length `n` (`c[i * w + col]`).
fn filter_rows(c: &mut [f64], n: usize, w: usize, z: f64, kind: InitKind) {
    let row = |i: usize| i * w..(i + 1) * w;
    // Causal initialisation of c[0].
    match kind {
        InitKind::Mirror => {
            let z_n_1 = z.powi(n as i32 - 1);
            let mut acc: Vec<f64> = (0..w).map(|j| c[j] + z_n_1 * c[(n - 1) * w + j]).collect();
            let mut z_i = z;
            for i in 1..n - 1 {
                for j in 0..w {
                    acc[j] += z_i * (c[i * w + j] + z_n_1 * c[(n - 1 - i) * w + j]);
                }
                z_i *= z;
            }
            let d = 1.0 - z_n_1 * z_n_1;
            for j in 0..w {
                c[j] = acc[j] / d;
            }
        }
        InitKind::Wrap => {
            let mut acc: Vec<f64> = c[row(0)].to_vec();
            let mut z_i = z;
            for i in 1..n {
                for j in 0..w {
                    acc[j] += z_i * c[(n - i) * w + j];
                }
                z_i *= z;
            }
            for j in 0..w {
                c[j] = acc[j] / (1.0 - z_i);
            }
        }
        InitKind::Reflect => {
            let z_n = z.powi(n as i32);
            let c0: Vec<f64> = c[row(0)].to_vec();
            let mut acc: Vec<f64> = (0..w).map(|j| c[j] + z_n * c[(n - 1) * w + j]).collect();
            let mut z_i = z;
            for i in 1..n {
                for j in 0..w {
                    acc[j] += z_i * (c[i * w + j] + z_n * c[(n - 1 - i) * w + j]);
                }
                z_i *= z;
            }
            let f = z / (1.0 - z_n * z_n);
            for j in 0..w {
                c[j] = acc[j] * f + c0[j];
            }
        }
    }
    // Causal recursion.
    for i in 1..n {
        let (prev, cur) = c.split_at_mut(i * w);
        let prev = &prev[(i - 1) * w..];
        for (a, &b) in cur[..w].iter_mut().zip(prev) {
            *a += z * b;
        }
    }
    // Anti-causal initialisation of c[n - 1].
    match kind {
        InitKind::Mirror => {
            for j in 0..w {
                let (a, b) = (c[(n - 2) * w + j], c[(n - 1) * w + j]);
                c[(n - 1) * w + j] = (z * a + b) * z / (z * z - 1.0);
            }
        }
        InitKind::Wrap => {
            let mut acc: Vec<f64> = c[row(n - 1)].to_vec();
            let mut z_i = z;
            for i in 0..n - 1 {
                for j in 0..w {
                    acc[j] += z_i * c[i * w + j];
                }
                z_i *= z;
            }
            for j in 0..w {
                c[(n - 1) * w + j] = acc[j] * z / (z_i - 1.0);
            }
        }
        InitKind::Reflect => {
            for j in 0..w {
                c[(n - 1) * w + j] *= z / (z - 1.0);
            }
        }
    }
    // Anti-causal recursion.
    for i in (0..n - 1).rev() {
        let (cur, next) = c.split_at_mut((i + 1) * w);
        let cur = &mut cur[i * w..];
        for (a, &b) in cur.iter_mut().zip(&next[..w]) {
            *a = z * (b - *a);
        }
    }
}

/// scipy's `get_spline_interpolation_weights` for order 1 and 3: the weights of the taps
/// `start..=start + order`, where `start = floor(x) - order / 2`.
#[inline]
pub fn spline_weights(x: f64, order: u32, w: &mut [f64; 4]) {
    let t = x - x.floor();
    match order {
        1 => {
            w[0] = 1.0 - t;
            w[1] = t;
        }
        3 => {
            let y = t;
            let z = 1.0 - t;
            w[1] = (y * y * (y - 2.0) * 3.0 + 4.0) / 6.0;
            w[2] = (z * z * (z - 2.0) * 3.0 + 4.0) / 6.0;
            w[0] = z * z * z / 6.0;
            w[3] = 1.0 - w[0] - w[1] - w[2];
        }
        _ => w[0] = 1.0,
    }
}
