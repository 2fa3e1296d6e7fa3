//! What the CPU resampler reads and how: the voxels or the cubic spline coefficients (kept per
//! image, mode and cval), and the sampler that evaluates orders 0, 1 and 3 under a boundary mode
//! at a row of input coordinates.

use std::sync::Arc;

use rayon::prelude::*;

use super::CpuBackend;
use crate::augment::{CoordMap, Order, Plan};
use crate::engine::boundary::{Mode, SPLINE_PREPAD, fold_tap, map_coordinate};
use crate::engine::field::ElasticField;
use crate::engine::spline::{coefficient_shape, prefilter_cubic_in_place, prepad, spline_weights};
/// The values a sampler reads: the voxels themselves, or cubic spline coefficients.
pub struct Coefficients<'a> {
    data: CoefData<'a>,
    shape: Vec<usize>,
    channels: usize,
    pad: f64,
}

/// The voxels themselves (orders 0 and 1), or shared cubic coefficients (order 3).
enum CoefData<'a> {
    Voxels(&'a [f32]),
    Spline(Arc<Vec<f32>>),
}

/// What cubic coefficients depend on: the image (address, length and a hash of every value, so a
/// new image at a reused address is never mistaken for the old one), its shape, mode and cval.
#[derive(Clone, PartialEq)]
pub(super) struct CoefKey {
    addr: usize,
    len: usize,
    hash: u64,
    shape: Vec<usize>,
    mode: Mode,
    cval_bits: u32,
}

impl CoefKey {
    fn new(data: &[f32], shape: &[usize], plan: &Plan) -> Self {
        // FNV-1a over the value bits, in parallel chunks combined in order.
        let hash = data
            .par_chunks(1 << 16)
            .map(|c| {
                c.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, v| {
                    (h ^ v.to_bits() as u64).wrapping_mul(0x0000_0100_0000_01b3)
                })
            })
            .collect::<Vec<u64>>()
            .into_iter()
            .fold(0u64, |h, c| (h ^ c).wrapping_mul(0x0000_0100_0000_01b3));
        CoefKey {
            addr: data.as_ptr() as usize,
            len: data.len(),
            hash,
            shape: shape.to_vec(),
            mode: plan.mode,
            cval_bits: plan.cval.to_bits(),
        }
    }
}

impl CpuBackend {
    /// The values the sampler reads for `plan`: for order 3 the cubic coefficients, kept from the
    /// last call when the image, mode and cval are the same (moving an angle or alpha with cubic
    /// interpolation then costs no prefilter).
    pub(super) fn coefficients<'a>(
        &self,
        data: &'a [f32],
        shape: &[usize],
        channels: usize,
        plan: &Plan,
    ) -> Coefficients<'a> {
        if plan.order != Order::Cubic {
            return Coefficients::new(data, shape, channels, plan);
        }
        let key = CoefKey::new(data, shape, plan);
        let mut cache = self.coef_cache.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((k, coef, pshape)) = cache.as_ref()
            && *k == key
        {
            return Coefficients {
                data: CoefData::Spline(coef.clone()),
                shape: pshape.clone(),
                channels,
                pad: if plan.mode.needs_prepad() {
                    SPLINE_PREPAD as f64
                } else {
                    0.0
                },
            };
        }
        let c = Coefficients::new(data, shape, channels, plan);
        if let CoefData::Spline(arc) = &c.data {
            *cache = Some((key, arc.clone(), c.shape.clone()));
        }
        c
    }
}

impl<'a> Coefficients<'a> {
    /// Prefilters every channel for order 3 (with scipy's prepadding); borrows the data otherwise.
    pub fn new(data: &'a [f32], shape: &[usize], channels: usize, plan: &Plan) -> Self {
        if plan.order != Order::Cubic {
            return Coefficients {
                data: CoefData::Voxels(data),
                shape: shape.to_vec(),
                channels,
                pad: 0.0,
            };
        }
        let all = if plan.mode.needs_prepad() {
            padded(data, shape, channels, plan)
        } else {
            data.to_vec()
        };
        Self::cubic(all, shape, channels, plan)
    }

    /// Order-3 coefficients from voxels the caller hands over (`channels` images of `shape`,
    /// channel-major): without padding the prefilter runs in their own buffer; with it the
    /// voxels are freed as soon as they are padded. The same values as [`Self::new`].
    pub fn cubic_owned(
        data: Vec<f32>,
        shape: &[usize],
        channels: usize,
        plan: &Plan,
    ) -> Coefficients<'static> {
        let all = if plan.mode.needs_prepad() {
            let all = padded(&data, shape, channels, plan);
            drop(data);
            all
        } else {
            data
        };
        Coefficients::cubic(all, shape, channels, plan)
    }

    /// Filters `all` (`channels` images of the coefficient shape, padded when the mode needs
    /// it) in place, one channel after another.
    fn cubic(mut all: Vec<f32>, shape: &[usize], channels: usize, plan: &Plan) -> Self {
        let pshape = coefficient_shape(shape, plan.mode);
        let pn: usize = pshape.iter().product();
        for c in 0..channels {
            prefilter_cubic_in_place(&mut all[c * pn..(c + 1) * pn], &pshape, plan.mode);
        }
        let pad = if plan.mode.needs_prepad() {
            SPLINE_PREPAD as f64
        } else {
            0.0
        };
        Coefficients {
            data: CoefData::Spline(Arc::new(all)),
            shape: pshape,
            channels,
            pad,
        }
    }

    pub fn sampler(&self, order: Order, mode: Mode, cval: f32) -> Sampler<'_> {
        let data: &[f32] = match &self.data {
            CoefData::Voxels(d) => d,
            CoefData::Spline(c) => c,
        };
        Sampler {
            data,
            shape: self.shape.clone(),
            channels: self.channels,
            order,
            mode,
            cval,
            pad: self.pad,
        }
    }
}

/// Every channel of `data` padded for the prefilter into its place in one buffer (a mode that
/// [needs it](Mode::needs_prepad)).
fn padded(data: &[f32], shape: &[usize], channels: usize, plan: &Plan) -> Vec<f32> {
    let n: usize = shape.iter().product();
    let pn: usize = coefficient_shape(shape, plan.mode).iter().product();
    let mut all = crate::engine::hugepages::zeroed_f32(channels * pn);
    for c in 0..channels {
        let dst = &mut all[c * pn..(c + 1) * pn];
        prepad(&data[c * n..(c + 1) * n], shape, plan.mode, plan.cval, dst);
    }
    all
}

/// Samples a (prefiltered) multi-channel array at continuous coordinates, as
/// `scipy.ndimage.map_coordinates(order, mode, cval, prefilter=True)`.
pub struct Sampler<'a> {
    pub data: &'a [f32],
    pub shape: Vec<usize>,
    pub channels: usize,
    pub order: Order,
    pub mode: Mode,
    pub cval: f32,
    /// scipy's `nprepad`: the coefficient array is padded by this on every side.
    pub pad: f64,
}

/// The farthest tap index the sampler computes with, `2^40`: beyond any grid, and far from
/// overflowing `i64` once the taps are added.
const FAR_TAP: f64 = (1u64 << 40) as f64;

/// Tap offsets and weights of one sample point; `N = order + 1` taps per axis.
struct Taps<const D: usize, const N: usize> {
    off: [[usize; N]; D],
    /// Whether every tap lies on the grid (no grid-constant cval taps).
    all_inside: bool,
    inside: [[bool; N]; D],
    w: [[f64; N]; D],
}

impl<'a> Sampler<'a> {
    /// The sampler of a label map: order 0, cval 0 (background), the plan's mode.
    pub fn label(l: &'a crate::core::volume::Volume, mode: Mode) -> Self {
        Sampler {
            data: &l.data,
            shape: l.shape.clone(),
            channels: l.channels,
            order: Order::Nearest,
            mode,
            cval: 0.0,
            pad: 0.0,
        }
    }
}

impl Sampler<'_> {
    /// The taps for input coordinate `x`, or `None` when the point reads cval (`constant` mode).
    /// scipy's `NI_GeometricTransform`: map the coordinate, find the first tap, fold each tap.
    #[inline(always)]
    fn taps<const D: usize, const N: usize>(
        &self,
        shape: &[usize; D],
        strides: &[usize; D],
        x: &[f64; D],
    ) -> Option<Taps<D, N>> {
        let order = N - 1;
        let spline_mode = self.mode.spline_mode();
        let mut t = Taps {
            off: [[0; N]; D],
            all_inside: true,
            inside: [[true; N]; D],
            w: [[1.0; N]; D],
        };
        for a in 0..D {
            let len = shape[a];
            // Far off the grid every tap folds or clamps the same way, and an index past ±2^40
            // would overflow the tap arithmetic below: a huge coordinate (or one that the fold of
            // a huge one made infinite) reads the boundary, never past the slice.
            let cc = map_coordinate(x[a] + self.pad, len, self.mode)?.clamp(-FAR_TAP, FAR_TAP);
            let start = if order & 1 == 1 {
                cc.floor() as i64 - (order / 2) as i64
            } else {
                (cc + 0.5).floor() as i64 - (order / 2) as i64
            };
            if start >= 0 && start + (order as i64) < len as i64 {
                let base = start as usize * strides[a];
                for k in 0..N {
                    t.off[a][k] = base + k * strides[a];
                }
            } else {
                for k in 0..N {
                    match fold_tap(start + k as i64, len, spline_mode) {
                        Some(j) => t.off[a][k] = j * strides[a],
                        None => {
                            t.inside[a][k] = false;
                            t.all_inside = false;
                        }
                    }
                }
            }
            if N == 2 {
                let f = cc - cc.floor();
                t.w[a][0] = 1.0 - f;
                t.w[a][1] = f;
            } else if N == 4 {
                let mut w = [0.0; 4];
                spline_weights(cc, 3, &mut w);
                t.w[a].copy_from_slice(&w[..N]);
            }
        }
        Some(t)
    }

    /// The interpolated value of one channel (`data` is that channel) from precomputed taps, in
    /// scipy's tap order and f64 arithmetic.
    #[inline(always)]
    fn eval<const D: usize, const N: usize>(&self, t: &Taps<D, N>, data: &[f32]) -> f32 {
        let cval = self.cval as f64;
        let mut sum = 0f64;
        if D == 2 {
            for i in 0..N {
                for j in 0..N {
                    let v = if t.all_inside || (t.inside[0][i] && t.inside[1][j]) {
                        data[t.off[0][i] + t.off[1][j]] as f64
                    } else {
                        cval
                    };
                    sum += v * t.w[0][i] * t.w[1][j];
                }
            }
        } else {
            for i in 0..N {
                for j in 0..N {
                    let oij = t.off[0][i] + t.off[1][j];
                    for k in 0..N {
                        let v = if t.all_inside
                            || (t.inside[0][i] && t.inside[1][j] && t.inside[2][k])
                        {
                            data[oij + t.off[2][k]] as f64
                        } else {
                            cval
                        };
                        sum += v * t.w[0][i] * t.w[1][j] * t.w[2][k];
                    }
                }
            }
        }
        sum as f32
    }

    /// Samples every channel at `x` into `outs[ch][i]`.
    #[inline(always)]
    fn sample_into<const D: usize, const N: usize>(
        &self,
        shape: &[usize; D],
        strides: &[usize; D],
        x: &[f64; D],
        outs: &mut [&mut [f32]],
        i: usize,
    ) {
        let len = strides[0] * shape[0];
        match self.taps::<D, N>(shape, strides, x) {
            Some(t) => {
                for (ch, o) in outs.iter_mut().enumerate() {
                    o[i] = self.eval::<D, N>(&t, &self.data[ch * len..(ch + 1) * len]);
                }
            }
            None => {
                for o in outs.iter_mut() {
                    o[i] = self.cval;
                }
            }
        }
    }

    /// Order 1 at a point whose taps all lie inside the grid (`floor(x) in 0..=n-2` on every
    /// axis): the offset of the first tap and the weights `[1 - t, t]` per axis, as [`Self::taps`]
    /// gives them there (`map_coordinate` is the identity inside `[0, n-1]`). `None` elsewhere,
    /// and for NaN.
    #[inline(always)]
    fn linear_interior<const D: usize>(
        &self,
        shape: &[usize; D],
        strides: &[usize; D],
        x: &[f64; D],
    ) -> Option<(usize, [[f64; 2]; D])> {
        let mut base = 0;
        let mut w = [[0.0; 2]; D];
        for a in 0..D {
            let cc = x[a] + self.pad;
            let f = cc.floor();
            if !(f >= 0.0 && f <= shape[a] as f64 - 2.0) {
                return None;
            }
            let t = cc - f;
            w[a] = [1.0 - t, t];
            base += f as usize * strides[a];
        }
        Some((base, w))
    }

    /// Samples a whole row of coordinates, dispatching once on the order.
    pub(super) fn sample_row<const D: usize>(&self, coords: &[[f64; D]], outs: &mut [&mut [f32]]) {
        sample_row_mv::<D>(self, coords, outs);
    }
}

/// The order-1 value of one channel from interior taps: [`Sampler::eval`] without the boundary
/// bookkeeping, the same f64 products summed in the same order.
#[inline(always)]
fn linear_eval<const D: usize>(
    data: &[f32],
    base: usize,
    strides: &[usize; D],
    w: &[[f64; 2]; D],
) -> f32 {
    let mut sum = 0f64;
    if D == 2 {
        for i in 0..2 {
            for j in 0..2 {
                let v = data[base + i * strides[0] + j * strides[1]] as f64;
                sum += v * w[0][i] * w[1][j];
            }
        }
    } else {
        for i in 0..2 {
            for j in 0..2 {
                let oij = base + i * strides[0] + j * strides[1];
                for k in 0..2 {
                    let v = data[oij + k * strides[2]] as f64;
                    sum += v * w[0][i] * w[1][j] * w[2][k];
                }
            }
        }
    }
    sum as f32
}

/// [`Sampler::sample_row`], also compiled for AVX2+FMA (hardware floor and fused multiply-adds), picked at run time.
#[multiversion::multiversion(targets("x86_64+avx2+fma"))]
fn sample_row_mv<const D: usize>(s: &Sampler<'_>, coords: &[[f64; D]], outs: &mut [&mut [f32]]) {
    let mut shape = [0usize; D];
    let mut strides = [0usize; D];
    let mut st = 1;
    for a in (0..D).rev() {
        shape[a] = s.shape[a];
        strides[a] = st;
        st *= s.shape[a];
    }
    match s.order {
        Order::Nearest => {
            for (i, x) in coords.iter().enumerate() {
                s.sample_into::<D, 1>(&shape, &strides, x, outs, i);
            }
        }
        Order::Linear => {
            let len = strides[0] * shape[0];
            #[cfg(target_arch = "x86_64")]
            if let Some(done) = avx512::linear_row_checked(s, &shape, &strides, coords, outs) {
                // The lanes left to the scalar path: points with a tap off the grid, and the
                // last points of the row.
                for i in done {
                    s.sample_into::<D, 2>(&shape, &strides, &coords[i], outs, i);
                }
                return;
            }
            for (i, x) in coords.iter().enumerate() {
                // Most points have all taps inside the grid: there scipy's boundary steps are the
                // identity, so skip them (same values as `sample_into`, in the same order).
                match s.linear_interior::<D>(&shape, &strides, x) {
                    Some((base, w)) => {
                        for (ch, o) in outs.iter_mut().enumerate() {
                            o[i] = linear_eval::<D>(
                                &s.data[ch * len..(ch + 1) * len],
                                base,
                                &strides,
                                &w,
                            );
                        }
                    }
                    None => s.sample_into::<D, 2>(&shape, &strides, x, outs, i),
                }
            }
        }
        Order::Cubic => {
            for (i, x) in coords.iter().enumerate() {
                s.sample_into::<D, 4>(&shape, &strides, x, outs, i);
            }
        }
    }
}

/// Order 1 on AVX-512: eight points at a time, every point whose taps all lie inside the grid in
/// vector lanes (the f64 operations of [`linear_eval`], in the same order, so the same values bit
/// for bit), the rest handed back to the scalar path.
#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)] // masked gathers from a slice, at offsets checked inside it
pub(super) mod avx512 {
    use std::arch::x86_64::*;

    use super::{CoordMap, ElasticField, Sampler};

    const L: usize = 8;

    /// [`linear_row`] where the CPU has AVX-512F and the channel's offsets fit in i32: the
    /// indices of the points left to the scalar path, or `None` (nothing written) elsewhere.
    pub(super) fn linear_row_checked<const D: usize>(
        s: &Sampler<'_>,
        shape: &[usize; D],
        strides: &[usize; D],
        coords: &[[f64; D]],
        outs: &mut [&mut [f32]],
    ) -> Option<Vec<usize>> {
        let len = strides[0] * shape[0];
        let fits = len < i32::MAX as usize && s.data.len() >= len * outs.len();
        if !fits || coords.len() < L || !is_x86_feature_detected!("avx512f") {
            return None;
        }
        // In `constant` mode a point off the grid on some axis reads cval (`map_coordinate`).
        let cval = (s.mode == super::Mode::Constant).then_some(s.cval);
        // SAFETY: the CPU has AVX-512F (checked above).
        Some(unsafe { linear_row(s.data, len, s.pad, cval, shape, strides, coords, outs) })
    }

    /// [`super::super::row_coords`] where the CPU has AVX-512F: eight points per step in f64
    /// lanes, the operations of `CoordMap::input_coord` in its order (the same values), the last
    /// points of the row one by one. `false` (nothing written) elsewhere.
    pub(in crate::engine::cpu) fn row_coords<const D: usize>(
        map: &CoordMap,
        field: Option<&ElasticField>,
        base: usize,
        q: &[usize; D],
        out: &mut Vec<[f64; D]>,
    ) -> bool {
        if !is_x86_feature_detected!("avx512f") {
            return false;
        }
        // SAFETY: the CPU has AVX-512F (checked above).
        unsafe { row_coords_avx512(map, field, base, q, out) };
        true
    }

    #[target_feature(enable = "avx512f")]
    fn row_coords_avx512<const D: usize>(
        map: &CoordMap,
        field: Option<&ElasticField>,
        base: usize,
        q: &[usize; D],
        out: &mut Vec<[f64; D]>,
    ) {
        let n = map.out_shape[D - 1];
        let flip = map.flip[D - 1];
        out.clear();
        out.resize(n, [0.0; D]);
        let comps: Option<[&[f32]; D]> =
            field.map(|f| std::array::from_fn(|a| &f.components[a][base..base + n]));
        // c_a = (q_a - ctr_a) + alpha_a d_a: the first term is the same for the whole row but on
        // the last axis.
        let c_row: [f64; D] = std::array::from_fn(|a| q[a] as f64 - map.ctr_out[a]);
        let lanes = _mm512_setr_pd(0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0);
        let reverse = _mm256_setr_epi32(7, 6, 5, 4, 3, 2, 1, 0);
        let full = n - n % L;
        for px0 in (0..full).step_by(L) {
            // The flipped indices q of px0..px0 + 8, and where their field values start.
            let (ql, first) = if flip {
                let top = (n - 1 - px0) as f64;
                (_mm512_sub_pd(_mm512_set1_pd(top), lanes), n - px0 - L)
            } else {
                (_mm512_add_pd(_mm512_set1_pd(px0 as f64), lanes), px0)
            };
            let mut c = [_mm512_setzero_pd(); D];
            for (a, ca) in c.iter_mut().enumerate() {
                let qa = if a == D - 1 {
                    _mm512_sub_pd(ql, _mm512_set1_pd(map.ctr_out[a]))
                } else {
                    _mm512_set1_pd(c_row[a])
                };
                let d = match &comps {
                    Some(cs) => {
                        let src: &[f32; L] =
                            cs[a][first..first + L].try_into().expect("8 field values");
                        // SAFETY: src holds 8 f32.
                        let v = unsafe { _mm256_loadu_ps(src.as_ptr()) };
                        let v = if flip {
                            _mm256_permutevar8x32_ps(v, reverse)
                        } else {
                            v
                        };
                        _mm512_cvtps_pd(v)
                    }
                    None => _mm512_setzero_pd(),
                };
                *ca = _mm512_add_pd(qa, _mm512_mul_pd(_mm512_set1_pd(map.alpha[a]), d));
            }
            let mut x = [[0f64; L]; D];
            for (i, xi) in x.iter_mut().enumerate() {
                let mut s = _mm512_set1_pd(map.offset[i]);
                for (j, cj) in c.iter().enumerate() {
                    s = _mm512_add_pd(
                        s,
                        _mm512_mul_pd(_mm512_set1_pd(map.in_from_centered[i][j]), *cj),
                    );
                }
                // SAFETY: xi holds 8 f64.
                unsafe { _mm512_storeu_pd(xi.as_mut_ptr(), s) };
            }
            for (l, o) in out[px0..px0 + L].iter_mut().enumerate() {
                for (a, oa) in o.iter_mut().enumerate() {
                    *oa = x[a][l];
                }
            }
        }
        let mut qq = *q;
        for (px, o) in out.iter_mut().enumerate().skip(full) {
            qq[D - 1] = map.flip_index(D - 1, px);
            let d: [f32; D] =
                std::array::from_fn(|a| comps.as_ref().map_or(0.0, |cs| cs[a][qq[D - 1]]));
            *o = map.input_coord(&qq, &d);
        }
    }

    /// Order-1 samples of `coords` into `outs[ch][i]`, channel `ch` being
    /// `data[ch * len..(ch + 1) * len]`; returns the points it did not compute. With
    /// `outside_cval` (the `constant` mode), a point below 0 or above `n - 1` on some axis is that
    /// value, as the scalar path gives it.
    #[target_feature(enable = "avx512f")]
    #[allow(clippy::too_many_arguments)] // one call site, a hot loop
    fn linear_row<const D: usize>(
        data: &[f32],
        len: usize,
        pad: f64,
        outside_cval: Option<f32>,
        shape: &[usize; D],
        strides: &[usize; D],
        coords: &[[f64; D]],
        outs: &mut [&mut [f32]],
    ) -> Vec<usize> {
        let mut rest = Vec::new();
        let full = coords.len() - coords.len() % L;
        let zero = _mm512_setzero_pd();
        let one = _mm512_set1_pd(1.0);
        for i0 in (0..full).step_by(L) {
            let pts = &coords[i0..i0 + L];
            let mut inside: __mmask8 = 0xff;
            let mut outside: __mmask8 = 0;
            let mut base = zero;
            let mut w = [[zero; 2]; D];
            for a in 0..D {
                let x: [f64; L] = std::array::from_fn(|l| pts[l][a]);
                // SAFETY: x holds L f64.
                let cc = _mm512_add_pd(unsafe { _mm512_loadu_pd(x.as_ptr()) }, _mm512_set1_pd(pad));
                let f = _mm512_roundscale_pd::<{ _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC }>(cc);
                let hi = _mm512_set1_pd(shape[a] as f64 - 2.0);
                outside |= _mm512_cmp_pd_mask::<_CMP_LT_OQ>(cc, zero)
                    | _mm512_cmp_pd_mask::<_CMP_GT_OQ>(cc, _mm512_set1_pd(shape[a] as f64 - 1.0));
                inside &= _mm512_cmp_pd_mask::<_CMP_GE_OQ>(f, zero)
                    & _mm512_cmp_pd_mask::<_CMP_LE_OQ>(f, hi);
                let t = _mm512_sub_pd(cc, f);
                w[a] = [_mm512_sub_pd(one, t), t];
                base = _mm512_add_pd(base, _mm512_mul_pd(f, _mm512_set1_pd(strides[a] as f64)));
            }
            // Inside lanes: 0 <= base and base + the far corner < len < 2^31, exact in f64.
            let base =
                _mm512_cvtepi32_epi64(_mm512_cvttpd_epi32(_mm512_maskz_mov_pd(inside, base)));
            for (ch, o) in outs.iter_mut().enumerate() {
                let chan = &data[ch * len..(ch + 1) * len];
                let mut sum = zero;
                for corner in 0..1usize << D {
                    // Corner bits, axis 0 the most significant: the order of linear_eval.
                    let off: usize = (0..D)
                        .map(|a| ((corner >> (D - 1 - a)) & 1) * strides[a])
                        .sum();
                    let idx = _mm512_add_epi64(base, _mm512_set1_epi64(off as i64));
                    // SAFETY: the gather reads only the inside lanes, each at an offset below len
                    // inside `chan`; the other lanes read nothing.
                    let v = unsafe {
                        _mm512_mask_i64gather_ps::<4>(
                            _mm256_setzero_ps(),
                            inside,
                            idx,
                            chan.as_ptr(),
                        )
                    };
                    // v * w0 * w1 (* w2), then added: left to right, as linear_eval.
                    let mut prod = _mm512_cvtps_pd(v);
                    for (a, wa) in w.iter().enumerate() {
                        let bit = (corner >> (D - 1 - a)) & 1;
                        prod = _mm512_mul_pd(prod, wa[bit]);
                    }
                    sum = _mm512_add_pd(sum, prod);
                }
                let dst: &mut [f32; L] = (&mut o[i0..i0 + L]).try_into().expect("L outputs");
                // SAFETY: dst holds L f32.
                unsafe { _mm256_storeu_ps(dst.as_mut_ptr(), _mm512_cvtpd_ps(sum)) };
            }
            if let Some(cv) = outside_cval {
                for l in (0..L).filter(|l| outside & (1 << l) != 0) {
                    for o in outs.iter_mut() {
                        o[i0 + l] = cv;
                    }
                }
                inside |= outside;
            }
            for l in 0..L {
                if inside & (1 << l) == 0 {
                    rest.push(i0 + l);
                }
            }
        }
        rest.extend(full..coords.len());
        rest
    }
}

#[cfg(test)]
mod tests;
