//! The CPU engine (rayon): the reference every other backend is checked against.
//!
//! One resample routine, generic over the dimension count and specialised by (order, mode) at run
//! time; boundary rules come from [`super::boundary`] only. Arrays are `[z, y, x]`.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use rayon::prelude::*;

use super::boundary::{Mode, SPLINE_PREPAD, fold_tap, map_coordinate};
use super::field::ElasticField;
use super::spline::{prefilter_cubic, spline_weights};
use super::{
    Backend, EngineError, Job, Outputs, Plane, Prepare, Timings, check_job, check_job_region,
};
use crate::augment::{CoordMap, Order, Plan};
use crate::core::FieldSpec;

/// The CPU engine. Keeps the last smoothed elastic field, so that changing anything but
/// (seed, sigma, shape) never recomputes it.
#[derive(Default)]
pub struct CpuBackend {
    field_cache: Mutex<Option<Arc<ElasticField>>>,
    /// Field planes of the slice path: ((shape, sigmas, seed, axis, index), per-component plane).
    plane_cache: Mutex<Vec<(PlaneKey, Arc<FieldPlane>)>>,
    /// The last cubic coefficients, their key and their (padded) shape.
    coef_cache: Mutex<Option<CachedCoefficients>>,
    /// The last displacement readout: ((field, alpha bits), (max, RMS)).
    stats_cache: Mutex<Option<(StatsKey, (f64, f64))>>,
}

/// Cubic coefficients with their key and their (padded) shape.
type CachedCoefficients = (CoefKey, Arc<Vec<f32>>, Vec<usize>);

/// What a displacement readout depends on: the field and the bits of alpha.
type StatsKey = (FieldSpec, u64);

/// One plane of the unit field, per component.
type FieldPlane = Vec<Vec<f32>>;

/// What a cached field plane depends on: (shape, per-axis sigma bits, seed, axis, index).
type PlaneKey = (Vec<usize>, Vec<u64>, u64, usize, usize);

/// Planes kept by the slice path: the three views of the GUI and one spare.
const PLANE_CACHE: usize = 4;

impl CpuBackend {
    pub fn new() -> Self {
        Self::default()
    }

    /// The unit elastic field of a plan on an output grid, from the cache when it matches.
    /// Returns the field and the milliseconds spent computing it (0 when cached).
    pub fn field(&self, plan: &Plan, out_shape: &[usize]) -> Option<(Arc<ElasticField>, f64)> {
        let spec = plan.field_spec(out_shape)?;
        let mut cache = self.field_cache.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(f) = cache.as_ref()
            && f.matches(out_shape, &spec.sigma_vox, spec.seed)
        {
            return Some((f.clone(), 0.0));
        }
        let t = Instant::now();
        let f = Arc::new(ElasticField::compute_axes(
            out_shape,
            &spec.sigma_vox,
            spec.seed,
        ));
        *cache = Some(f.clone());
        Some((f, t.elapsed().as_secs_f64() * 1e3))
    }
}

impl CpuBackend {
    /// The unit field on the output plane `index` normal to `axis` (the flipped index: field
    /// values live at `q`), from the volume cache, the plane cache, or computed on its own.
    fn field_plane(
        &self,
        plan: &Plan,
        out_shape: &[usize],
        axis: usize,
        q_index: usize,
    ) -> Option<Arc<FieldPlane>> {
        let FieldSpec {
            seed,
            sigma_vox: sigma,
            ..
        } = plan.field_spec(out_shape)?;
        {
            let cache = self.field_cache.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(f) = cache.as_ref()
                && f.matches(out_shape, &sigma, seed)
            {
                return Some(Arc::new(f.plane(axis, q_index)));
            }
        }
        let bits = sigma.iter().map(|s| s.to_bits()).collect();
        let key: PlaneKey = (out_shape.to_vec(), bits, seed, axis, q_index);
        let mut planes = self.plane_cache.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, p)) = planes.iter().find(|(k, _)| *k == key) {
            return Some(p.clone());
        }
        let p = Arc::new(ElasticField::compute_plane_axes(
            out_shape, &sigma, seed, axis, q_index,
        ));
        if planes.len() >= PLANE_CACHE {
            planes.remove(0);
        }
        planes.push((key, p.clone()));
        Some(p)
    }

    /// Makes the field planes of the three views through output voxel `cursor` (one plane normal
    /// to each axis of a 3D grid) ready for [`Backend::apply_plane`], computed together so that the
    /// noise their slabs share is generated once ([`ElasticField::compute_planes_axes`]; same
    /// values as computing each alone). Nothing to do without an elastic field, when the volume
    /// field is cached, or when the planes are.
    pub fn prefill_field_planes(&self, plan: &Plan, out_shape: &[usize], cursor: &[usize]) {
        if out_shape.len() != 3 || cursor.len() != 3 {
            return;
        }
        let Some(FieldSpec {
            seed,
            sigma_vox: sigma,
            ..
        }) = plan.field_spec(out_shape)
        else {
            return;
        };
        if self
            .field_cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .is_some_and(|f| f.matches(out_shape, &sigma, seed))
        {
            return;
        }
        // The planes live at the flipped indices q (field values are indexed by q).
        let q: [usize; 3] = std::array::from_fn(|a| {
            let i = cursor[a].min(out_shape[a].saturating_sub(1));
            if plan.flip.contains(&a) {
                out_shape[a] - 1 - i
            } else {
                i
            }
        });
        let bits: Vec<u64> = sigma.iter().map(|s| s.to_bits()).collect();
        let keys: Vec<PlaneKey> = (0..3)
            .map(|a| (out_shape.to_vec(), bits.clone(), seed, a, q[a]))
            .collect();
        {
            let planes = self.plane_cache.lock().unwrap_or_else(|p| p.into_inner());
            if keys.iter().all(|k| planes.iter().any(|(c, _)| c == k)) {
                return;
            }
        }
        let computed = ElasticField::compute_planes_axes(out_shape, &sigma, seed, q);
        let mut planes = self.plane_cache.lock().unwrap_or_else(|p| p.into_inner());
        for (key, plane) in keys.into_iter().zip(computed) {
            planes.retain(|(c, _)| *c != key);
            if planes.len() >= PLANE_CACHE {
                planes.remove(0);
            }
            planes.push((key, Arc::new(plane)));
        }
    }

    /// [`Backend::apply_plane`] on the CPU: the plane's field comes from the volume field when
    /// it is cached, else from the plane cache or computed for the plane alone.
    fn plane(&self, job: Job<'_>, plane: Plane, out: Outputs<'_>) -> Result<Timings, EngineError> {
        let t0 = Instant::now();
        let img = job.image;
        let Plane { axis, index } = plane;
        check_job_region(&job, &out, Some((axis, index)))?;
        let map = job.plan.compose(&img.shape)?;
        let plane_len: usize = (0..3)
            .filter(|&a| a != axis)
            .map(|a| map.out_shape[a])
            .product();
        let (out_image, out_label) = (out.image, out.label);
        let mut timings = Timings::default();
        let q_index = map.flip_index(axis, index);
        let field = self.field_plane(job.plan, &map.out_shape, axis, q_index);
        timings.field_ms = t0.elapsed().as_secs_f64() * 1e3;
        let t1 = Instant::now();
        let coef = self.coefficients(&img.data, &img.shape, img.channels, job.plan);
        timings.prefilter_ms = t1.elapsed().as_secs_f64() * 1e3;
        let t2 = Instant::now();
        let image = coef.sampler(job.plan.order, job.plan.mode, job.plan.cval);
        // Rows of the plane run along its last axis.
        let (ra, ca) = match axis {
            0 => (1, 2),
            1 => (0, 2),
            _ => (0, 1),
        };
        let (rows, cols) = (map.out_shape[ra], map.out_shape[ca]);
        let coords_of_row = |r: usize, buf: &mut Vec<[f64; 3]>| {
            buf.clear();
            for col in 0..cols {
                let mut q = [0usize; 3];
                q[axis] = map.flip_index(axis, index);
                q[ra] = map.flip_index(ra, r);
                q[ca] = map.flip_index(ca, col);
                let mut d = [0f32; 3];
                if let Some(f) = &field {
                    // The plane holds the field at q; its index is (q[ra], q[ca]).
                    let u = q[ra] * cols + q[ca];
                    for (a, da) in d.iter_mut().enumerate() {
                        *da = f[a][u];
                    }
                }
                buf.push(map.input_coord(&q, &d));
            }
        };
        let img_rows = split_rows(out_image, plane_len, cols);
        let lab_sampler = job.label.map(|l| Sampler::label(l, job.plan.mode));
        let lab_rows = match out_label {
            Some(buf) if lab_sampler.is_some() => split_rows(buf, plane_len, cols),
            _ => (0..rows).map(|_| Vec::new()).collect(),
        };
        img_rows
            .into_par_iter()
            .zip(lab_rows.into_par_iter())
            .enumerate()
            .for_each_init(
                || Vec::with_capacity(cols),
                |coords, (r, (mut irow, mut lrow))| {
                    coords_of_row(r, coords);
                    image.sample_row::<3>(coords, &mut irow);
                    if let Some(ls) = &lab_sampler
                        && !lrow.is_empty()
                    {
                        ls.sample_row::<3>(coords, &mut lrow);
                    }
                },
            );
        timings.resample_ms = t2.elapsed().as_secs_f64() * 1e3;
        timings.total_ms = t0.elapsed().as_secs_f64() * 1e3;
        Ok(timings)
    }
}

impl Backend for CpuBackend {
    fn name(&self) -> String {
        "cpu".into()
    }

    fn apply(&self, job: Job<'_>, out: Outputs<'_>) -> Result<Timings, EngineError> {
        let t0 = Instant::now();
        let out_shape = check_job(&job, &out)?;
        let img = job.image;
        let map = job.plan.compose(&img.shape)?;
        let mut timings = Timings::default();
        if job.plan.is_identity() && out_shape == img.shape {
            // Nothing moves: the input is the exact answer for every order and mode.
            out.image.copy_from_slice(&img.data);
            if let (Some(l), Some(o)) = (job.label, out.label) {
                o.copy_from_slice(&l.data);
            }
            timings.total_ms = t0.elapsed().as_secs_f64() * 1e3;
            return Ok(timings);
        }
        let field = self.field(job.plan, &out_shape).map(|(f, ms)| {
            timings.field_ms = ms;
            f
        });
        let t1 = Instant::now();
        let coef = self.coefficients(&img.data, &img.shape, img.channels, job.plan);
        timings.prefilter_ms = t1.elapsed().as_secs_f64() * 1e3;
        let t2 = Instant::now();
        let image = coef.sampler(job.plan.order, job.plan.mode, job.plan.cval);
        let label = job.label.map(|l| Sampler::label(l, job.plan.mode));
        match map.ndim {
            2 => resample::<2>(
                &map,
                field.as_deref(),
                &image,
                out.image,
                label.as_ref().zip(out.label),
            ),
            _ => resample::<3>(
                &map,
                field.as_deref(),
                &image,
                out.image,
                label.as_ref().zip(out.label),
            ),
        }
        timings.resample_ms = t2.elapsed().as_secs_f64() * 1e3;
        timings.total_ms = t0.elapsed().as_secs_f64() * 1e3;
        Ok(timings)
    }

    fn apply_plane(
        &self,
        job: Job<'_>,
        plane: Plane,
        _resident: Option<u64>,
        out: Outputs<'_>,
    ) -> Result<Timings, EngineError> {
        self.plane(job, plane, out)
    }

    fn coordinates(&self, plan: &Plan, in_shape: &[usize]) -> Result<Vec<f32>, EngineError> {
        plan.validate(in_shape.len())?;
        let map = plan.compose(in_shape)?;
        let field = self.field(plan, &map.out_shape).map(|(f, _)| f);
        Ok(coordinates(&map, field.as_deref()))
    }

    fn displacement_stats(
        &self,
        plan: &Plan,
        out_shape: &[usize],
    ) -> Result<Option<(f64, f64)>, EngineError> {
        let Some(spec) = plan.field_spec(out_shape) else {
            return Ok(None);
        };
        let alpha = plan.elastic.map_or(0.0, |e| e.alpha);
        let key = (spec, alpha.to_bits());
        let mut last = self.stats_cache.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((k, v)) = last.as_ref()
            && *k == key
        {
            return Ok(Some(*v));
        }
        let Some((field, _)) = self.field(plan, out_shape) else {
            return Ok(None);
        };
        let v = field.displacement_stats(alpha);
        *last = Some((key, v));
        Ok(Some(v))
    }

    fn prepare(&self, what: Prepare<'_>) -> Result<f64, EngineError> {
        match what {
            Prepare::Kernels => Ok(0.0),
            Prepare::Field { plan, out_shape } => {
                Ok(self.field(plan, out_shape).map_or(0.0, |(_, ms)| ms))
            }
            Prepare::Planes {
                plan,
                out_shape,
                cursor,
            } => {
                let t = Instant::now();
                self.prefill_field_planes(plan, out_shape, cursor);
                Ok(t.elapsed().as_secs_f64() * 1e3)
            }
        }
    }

    fn holds_field(&self, plan: &Plan, out_shape: &[usize]) -> bool {
        let Some(spec) = plan.field_spec(out_shape) else {
            return false;
        };
        self.field_cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .is_some_and(|f| f.matches(&spec.shape, &spec.sigma_vox, spec.seed))
    }

    fn clear_cache(&self) {
        *self.field_cache.lock().unwrap_or_else(|p| p.into_inner()) = None;
        self.plane_cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
        *self.coef_cache.lock().unwrap_or_else(|p| p.into_inner()) = None;
        *self.stats_cache.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }
}

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
struct CoefKey {
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
    fn coefficients<'a>(
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
        let n: usize = shape.iter().product();
        let mut all = Vec::new();
        let mut pshape = shape.to_vec();
        for c in 0..channels {
            let (coef, ps) =
                prefilter_cubic(&data[c * n..(c + 1) * n], shape, plan.mode, plan.cval);
            all.extend_from_slice(&coef);
            pshape = ps;
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
    fn sample_row<const D: usize>(&self, coords: &[[f64; D]], outs: &mut [&mut [f32]]) {
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

/// Input coordinates of the output row `row` (C-order index over all axes but the last).
#[inline]
pub fn row_coords<const D: usize>(
    map: &CoordMap,
    field: Option<&ElasticField>,
    row: usize,
    out: &mut Vec<[f64; D]>,
) {
    let shape = &map.out_shape;
    let row_len = shape[D - 1];
    let mut p = [0usize; D];
    let mut rem = row;
    for a in (0..D - 1).rev() {
        p[a] = rem % shape[a];
        rem /= shape[a];
    }
    // Linear index of q with the last axis at 0.
    let mut q = [0usize; D];
    let mut base = 0usize;
    for a in 0..D - 1 {
        q[a] = map.flip_index(a, p[a]);
        base = base * shape[a] + q[a];
    }
    base *= row_len;
    out.clear();
    for px in 0..row_len {
        q[D - 1] = map.flip_index(D - 1, px);
        let lin = base + q[D - 1];
        let mut d = [0f32; D];
        if let Some(f) = field {
            for (a, da) in d.iter_mut().enumerate() {
                *da = f.components[a][lin];
            }
        }
        out.push(map.input_coord(&q, &d));
    }
}

/// Every output voxel's input coordinate: `(ndim, *out_shape)` values, C order (`--save-coords`).
pub fn coordinates(map: &CoordMap, field: Option<&ElasticField>) -> Vec<f32> {
    let n: usize = map.out_shape.iter().product();
    let d = map.ndim;
    let row_len = map.out_shape[d - 1];
    let mut out = vec![0f32; d * n];
    let mut per_axis: Vec<&mut [f32]> = out.chunks_mut(n).collect();
    let mut rows: Vec<Vec<&mut [f32]>> = (0..n / row_len).map(|_| Vec::with_capacity(d)).collect();
    for axis in per_axis.drain(..) {
        for (r, chunk) in axis.chunks_mut(row_len).enumerate() {
            rows[r].push(chunk);
        }
    }
    match d {
        2 => write_coords::<2>(map, field, rows),
        _ => write_coords::<3>(map, field, rows),
    }
    out
}

/// Fills the per-row, per-axis coordinate slices of [`coordinates`].
fn write_coords<const D: usize>(
    map: &CoordMap,
    field: Option<&ElasticField>,
    rows: Vec<Vec<&mut [f32]>>,
) {
    rows.into_par_iter()
        .enumerate()
        .for_each_init(Vec::new, |buf, (r, mut axes)| {
            row_coords::<D>(map, field, r, buf);
            for (i, x) in buf.iter().enumerate() {
                for (a, ax) in axes.iter_mut().enumerate() {
                    ax[i] = x[a] as f32;
                }
            }
        });
}

/// Splits a channel-major buffer into per-row groups of channel slices.
fn split_rows(buf: &mut [f32], n: usize, row_len: usize) -> Vec<Vec<&mut [f32]>> {
    let nrows = n / row_len;
    let mut rows: Vec<Vec<&mut [f32]>> = (0..nrows).map(|_| Vec::new()).collect();
    for ch in buf.chunks_mut(n) {
        for (r, chunk) in ch.chunks_mut(row_len).enumerate() {
            rows[r].push(chunk);
        }
    }
    rows
}

/// Resamples `image` (and `label`, order 0, cval 0) through an explicit coordinate map and
/// unit field (labels: order 0 and cval 0 under `label_mode`), for callers that build the map themselves (a training library's model of a
/// transform, see `export::preview`): `x = map(q, field(q))` as in [`CoordMap::input_coord`].
/// The outputs take the input's header; their grid is `map.out_shape`.
pub fn resample_map(
    image: &crate::core::volume::Volume,
    label: Option<&crate::core::volume::Volume>,
    map: &CoordMap,
    field: Option<&ElasticField>,
    sampling: (Order, Mode, f32),
    label_mode: Mode,
) -> (
    crate::core::volume::Volume,
    Option<crate::core::volume::Volume>,
) {
    let (order, mode, cval) = sampling;
    let n: usize = map.out_shape.iter().product();
    let plan = Plan {
        order,
        mode,
        cval,
        ..Plan::default()
    };
    let coef = Coefficients::new(&image.data, &image.shape, image.channels, &plan);
    let sampler = coef.sampler(order, mode, cval);
    let mut out = vec![0f32; n * image.channels];
    let lab_sampler = label.map(|l| Sampler::label(l, label_mode));
    let mut lab_out = label.map(|l| vec![0f32; n * l.channels]);
    let lab = lab_sampler.as_ref().zip(lab_out.as_deref_mut());
    match map.ndim {
        2 => resample::<2>(map, field, &sampler, &mut out, lab),
        _ => resample::<3>(map, field, &sampler, &mut out, lab),
    }
    let img = super::output_volume(image, &map.out_shape, out);
    let lab = label
        .zip(lab_out)
        .map(|(l, d)| super::output_volume(l, &map.out_shape, d));
    (img, lab)
}

/// Resamples image (and label) over the whole output grid with one coordinate per voxel.
fn resample<const D: usize>(
    map: &CoordMap,
    field: Option<&ElasticField>,
    image: &Sampler<'_>,
    out: &mut [f32],
    label: Option<(&Sampler<'_>, &mut [f32])>,
) {
    let n: usize = map.out_shape.iter().product();
    let row_len = map.out_shape[D - 1];
    if n == 0 {
        return;
    }
    let img_rows = split_rows(out, n, row_len);
    let (lab_sampler, lab_rows) = match label {
        Some((s, buf)) => (Some(s), split_rows(buf, n, row_len)),
        None => (None, (0..n / row_len).map(|_| Vec::new()).collect()),
    };
    img_rows
        .into_par_iter()
        .zip(lab_rows.into_par_iter())
        .enumerate()
        .for_each_init(
            || Vec::with_capacity(row_len),
            |coords, (r, (mut irow, mut lrow))| {
                row_coords::<D>(map, field, r, coords);
                image.sample_row::<D>(coords, &mut irow);
                if let Some(ls) = lab_sampler {
                    ls.sample_row::<D>(coords, &mut lrow);
                }
            },
        );
}
