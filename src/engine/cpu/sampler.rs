//! What the CPU resampler reads and how: the voxels or the cubic spline coefficients (kept per
//! image, mode and cval), and the sampler that evaluates orders 0, 1 and 3 under a boundary mode
//! at a row of input coordinates.

use super::*;

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
            let cc = map_coordinate(x[a] + self.pad, len, self.mode)?;
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
