//! The CPU engine (rayon): the reference every other backend is checked against.
//!
//! One resample routine, generic over the dimension count and specialised by (order, mode) at run
//! time; boundary rules come from [`super::boundary`] only. Arrays are `[z, y, x]`.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use rayon::prelude::*;

use super::boundary::Mode;
use super::field::ElasticField;
use super::{
    Backend, EngineError, Job, NewVolumes, NotApplied, Outputs, Plane, Prepare, Timings,
    apply_then_drop, check_grids, check_job, check_job_region, new_outputs, new_volumes,
};
use crate::augment::{CoordMap, Order, Plan};
use crate::core::FieldSpec;
use crate::core::volume::Volume;

mod sampler;

pub use sampler::*;

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
        // A field of another seed, sigma or grid is not kept alive beside the new one (in a
        // batch every sample has its own: that would be three volumes for nothing).
        *cache = None;
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
    /// The checks of a whole-grid job, its coordinate map and output grid; `None` when nothing
    /// moves and the input, the exact answer for every order and mode, is copied to `out`.
    fn begin(
        &self,
        job: &Job<'_>,
        out: &mut Outputs<'_>,
    ) -> Result<Option<(CoordMap, Vec<usize>)>, EngineError> {
        let out_shape = check_job(job, out)?;
        let img = job.image;
        let map = job.plan.compose(&img.shape)?;
        if job.plan.is_spatial_identity() && out_shape == img.shape {
            out.image.copy_from_slice(&img.data);
            if let (Some(l), Some(o)) = (job.label, out.label.as_deref_mut()) {
                o.copy_from_slice(&l.data);
            }
            return Ok(None);
        }
        Ok(Some((map, out_shape)))
    }

    /// The resampling of a whole-grid job of `plan` through `map` and `field`, whose image is
    /// read through `coef` and whose label map is `label`; returns its milliseconds.
    fn sample(
        &self,
        (plan, label): (&Plan, Option<&Volume>),
        map: &CoordMap,
        field: Option<&ElasticField>,
        coef: &Coefficients<'_>,
        out: Outputs<'_>,
    ) -> f64 {
        let t = Instant::now();
        let image = coef.sampler(plan.order, plan.mode, plan.cval);
        let label = label.map(|l| Sampler::label(l, plan.mode));
        match map.ndim {
            2 => resample::<2>(map, field, &image, out.image, label.as_ref().zip(out.label)),
            _ => resample::<3>(map, field, &image, out.image, label.as_ref().zip(out.label)),
        }
        t.elapsed().as_secs_f64() * 1e3
    }

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

    /// [`Backend::apply`] without the intensity steps: the resample (or the copy of a plan that
    /// moves nothing).
    fn apply_spatial(&self, job: Job<'_>, mut out: Outputs<'_>) -> Result<Timings, EngineError> {
        let t0 = Instant::now();
        let mut timings = Timings::default();
        let Some((map, out_shape)) = self.begin(&job, &mut out)? else {
            timings.total_ms = t0.elapsed().as_secs_f64() * 1e3;
            return Ok(timings);
        };
        let field = self.field(job.plan, &out_shape).map(|(f, ms)| {
            timings.field_ms = ms;
            f
        });
        let img = job.image;
        let t1 = Instant::now();
        let coef = self.coefficients(&img.data, &img.shape, img.channels, job.plan);
        timings.prefilter_ms = t1.elapsed().as_secs_f64() * 1e3;
        let sampled = self.sample((job.plan, job.label), &map, field.as_deref(), &coef, out);
        timings.resample_ms = sampled;
        timings.total_ms = t0.elapsed().as_secs_f64() * 1e3;
        Ok(timings)
    }
}

impl Backend for CpuBackend {
    fn name(&self) -> String {
        "cpu".into()
    }

    fn apply(&self, job: Job<'_>, out: Outputs<'_>) -> Result<Timings, EngineError> {
        super::with_intensity(job, out, false, |j, o| self.apply_spatial(j, o))
    }

    /// Order 3: the coefficients are computed in the image's own buffer (or the image is freed
    /// once padded) before the field is made, and the outputs are allocated after it, so that
    /// the voxels and the field's scratch are gone when the sampler runs: the coefficients, the
    /// field and the outputs are all that is alive then. The coefficients are not kept for a
    /// later call (their image is gone). Orders 0 and 1, which read the voxels themselves, and a
    /// plan where nothing moves run as [`Backend::apply`].
    fn apply_owned(
        &self,
        plan: &Plan,
        image: Volume,
        label: Option<&Volume>,
    ) -> Result<NewVolumes, NotApplied> {
        let t0 = Instant::now();
        let job = Job {
            plan,
            image: &image,
            label,
        };
        let checked = check_grids(&job).and_then(|out_shape| {
            super::check_intensity(plan, image.channels, image.shape.len())?;
            let map = plan.compose(&image.shape)?;
            Ok((map, out_shape))
        });
        // Where apply reads the voxels themselves (orders 0 and 1, or nothing moves).
        let reads_voxels = |out_shape: &[usize]| {
            plan.order != Order::Cubic || (plan.is_spatial_identity() && out_shape == image.shape)
        };
        let (map, out_shape) = match checked {
            Ok((_, out_shape)) if reads_voxels(&out_shape) => {
                return apply_then_drop(self, plan, image, label);
            }
            Ok(m) => m,
            Err(error) => {
                return Err(NotApplied {
                    error,
                    image: Box::new(image),
                });
            }
        };
        let mut timings = Timings::default();
        let header = image.clone_meta();
        let t1 = Instant::now();
        let coef = Coefficients::cubic_owned(image.data, &header.shape, header.channels, plan);
        timings.prefilter_ms = t1.elapsed().as_secs_f64() * 1e3;
        let field = self.field(plan, &out_shape).map(|(f, ms)| {
            timings.field_ms = ms;
            f
        });
        let (_, mut img_out, mut lab_out) = new_outputs(plan, &header, label);
        let out = Outputs {
            image: &mut img_out,
            label: lab_out.as_deref_mut(),
        };
        timings.resample_ms = self.sample((plan, label), &map, field.as_deref(), &coef, out);
        super::intensity_after(plan, &mut img_out, &header.shape, header.channels);
        timings.total_ms = t0.elapsed().as_secs_f64() * 1e3;
        Ok(new_volumes(
            &header, label, &out_shape, img_out, lab_out, timings,
        ))
    }

    fn apply_plane(
        &self,
        job: Job<'_>,
        plane: Plane,
        _resident: Option<u64>,
        out: Outputs<'_>,
    ) -> Result<Timings, EngineError> {
        super::with_intensity(job, out, true, |j, o| self.plane(j, plane, o))
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
            Prepare::Kernels | Prepare::Modules { .. } => Ok(0.0),
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
    #[cfg(target_arch = "x86_64")]
    if sampler::avx512::row_coords(map, field, base, &q, out) {
        return;
    }
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
    let mut out = super::hugepages::zeroed_f32(n * image.channels);
    let lab_sampler = label.map(|l| Sampler::label(l, label_mode));
    let mut lab_out = label.map(|l| super::hugepages::zeroed_f32(n * l.channels));
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

#[cfg(test)]
mod tests;
