//! The CUDA engine (cudarc): the same [`Plan`] as the CPU engine, in fused kernels compiled at run
//! time by NVRTC from `kernels/*.cu`, once per device and define set, and cached.
//!
//! Arrays are `[z, y, x]` (2D `[y, x]`), channels leading, as everywhere in augscope. The kernels
//! evaluate docs/design.md §3 in one pass per output volume (flip → elastic → affine → boundary → order
//! 0/1/3, image and label together); the unit elastic field is made on the device with the noise
//! generated inside the first smoothing pass and cached by (seed, sigma, shape), so moving alpha or
//! anything else never recomputes it. Coordinates are f64 (as on the CPU, so order-0 rounding and
//! tap choice agree) and tap sums f32; the sampler and the prefilter are compiled with fmad off. The
//! field passes sum in the CPU engine's order with explicit fused multiply-adds, so the unit field is
//! the CPU's bit for bit; the outputs are the CPU engine's to f32 rounding.
//!
//! Without a driver, a device or NVRTC, nothing here panics: cudarc panics when its libraries are
//! missing, so every entry point probes them first ([`driver_version`], [`nvrtc_version`]).
#![allow(unsafe_code)] // Kernel launches are FFI: cudarc's `launch` is unsafe because it cannot check a kernel's signature against its arguments; each block says what it checked. The runtime under them (buffers, pinned memory, NVRTC, the probes) is `crate::gpu`.

mod device;
mod field;
mod intensity;
mod kernels;
mod many;
mod prefetch;
mod transform;

pub use crate::gpu::device::load_module;
pub use crate::gpu::nvrtc::{
    BOUNDARY_CUH, Family, ModuleImage, compile, compile_module, compile_module_in,
    compiler_missing, driver_version, mode_defines, nvrtc_version,
};
pub use device::{
    DeviceArrays, DeviceEngine, PcieRates, d2d_bandwidth, device_engine, free_caches, mem_stats,
    pcie_bandwidth, release_all,
};
pub use kernels::{
    FieldWeights, PadParams, ResampleParams, compile_all, field_build_radius, field_defines,
    field_weights, resample_defines, resample_params, sampler_defines, warm_field_kernels,
};
pub use many::{ManyKey, SigmaGroup, field_slots, many_key};

use device::Region;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use cudarc::driver::LaunchConfig;

use super::{Backend, EngineError, Job, Outputs, Plane, Precision, Prepare, Timings};

use crate::core::Plan;
use crate::gpu::device::MemStats;

/// A one-dimensional launch of `n` threads.
pub(crate) fn grid_1d(n: usize) -> Result<LaunchConfig, EngineError> {
    Ok(crate::gpu::launch::grid_1d(n)?)
}

/// A driver error as an engine error.
pub(crate) fn driver_error(what: &str, e: cudarc::driver::DriverError) -> EngineError {
    crate::gpu::device::driver_error(what, e).into()
}

/// Every name of `want` is an entry of the compiled module `ptx` (of `file`).
fn check_entries(ptx: &str, file: &str, want: &[&str]) -> Result<(), EngineError> {
    Ok(crate::gpu::nvrtc::check_entries(ptx, file, want)?)
}

/// The CUDA engine on one or more devices.
pub struct CudaBackend {
    pub(super) engines: Vec<Arc<DeviceEngine>>,
    pub(super) precision: Precision,
    pub(super) next: AtomicUsize,
}

impl CudaBackend {
    /// Opens the devices (the first one when `ordinals` is empty). Fails with a clear error when
    /// there is no driver, no such device or no NVRTC; never panics.
    pub fn new(ordinals: &[usize], precision: Precision) -> Result<Self, EngineError> {
        let ids: Vec<usize> = if ordinals.is_empty() {
            vec![0]
        } else {
            ordinals.to_vec()
        };
        let engines = ids
            .iter()
            .map(|&i| device_engine(i))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(CudaBackend {
            engines,
            precision,
            next: AtomicUsize::new(0),
        })
    }

    pub fn precision(&self) -> Precision {
        self.precision
    }

    pub fn ordinals(&self) -> Vec<usize> {
        self.engines.iter().map(|e| e.dev.ordinal).collect()
    }

    /// Restarts the peak-memory count of every device at what augscope holds now.
    pub fn reset_peak(&self) {
        for e in &self.engines {
            e.dev.tracker.reset_peak();
        }
    }

    /// Applies many jobs, split across the backend's devices (job i on device i mod n), each
    /// device working through its share on its own thread: consecutive jobs of one kind
    /// ([`many_key`]) run together in batched launches ([`DeviceEngine::apply_many`]), as many
    /// at a time as fit the device's memory budget; a batch that fails (out of memory, say) is
    /// retried job by job, so every job gets its own result.
    pub fn apply_batch(
        &self,
        jobs: Vec<(Job<'_>, Outputs<'_>)>,
    ) -> Vec<Result<Timings, EngineError>> {
        let n_dev = self.engines.len();
        let mut per_dev: Vec<Vec<(usize, Job<'_>, Outputs<'_>)>> =
            (0..n_dev).map(|_| vec![]).collect();
        let total = jobs.len();
        // Contiguous shares, so that neighbours (usually of one kind) stay together.
        let share = total.div_ceil(n_dev.max(1)).max(1);
        for (i, (j, o)) in jobs.into_iter().enumerate() {
            per_dev[(i / share).min(n_dev - 1)].push((i, j, o));
        }
        let mut results: Vec<Option<Result<Timings, EngineError>>> =
            (0..total).map(|_| None).collect();
        std::thread::scope(|s| {
            let handles: Vec<_> = per_dev
                .into_iter()
                .zip(&self.engines)
                .map(|(work, eng)| {
                    let precision = self.precision;
                    s.spawn(move || eng.run_jobs(work, precision))
                })
                .collect();
            for h in handles {
                // A worker that panicked leaves its results as None: reported below.
                if let Ok(v) = h.join() {
                    for (i, r) in v {
                        results[i] = Some(r);
                    }
                }
            }
        });
        results
            .into_iter()
            .map(|r| r.unwrap_or_else(|| Err(EngineError::Cuda("a device worker stopped".into()))))
            .collect()
    }
}

impl CudaBackend {
    /// Applies a job to arrays in the memory of the first device (DLPack tensors of torch or
    /// CuPy): the image is read and the outputs written where they are, with no copy through the
    /// host. `job.image` and `job.label` give the grids, channels and spacing; their data are not
    /// read (see [`Volume::grid`]). The work is queued on [`Self::stream_handle`] and done when
    /// this returns; a caller's other streams must have finished writing the inputs (DLPack's
    /// `stream` argument does that). The same values as [`Backend::apply`] bit for bit.
    ///
    /// # Safety
    /// Every address in `arrays` is a live allocation on that device holding the values that
    /// [`DeviceArrays`] names for this job's grids, not freed, and not written by other work
    /// (nor, for the outputs, read) until this returns.
    pub unsafe fn apply_device(
        &self,
        job: Job<'_>,
        arrays: DeviceArrays,
    ) -> Result<Timings, EngineError> {
        let region = Region {
            device: Some(arrays),
            ..Region::default()
        };
        if let Some(s) = job.plan.intensity.first() {
            if !DeviceEngine::intensity_here(self.precision, region) {
                return Err(EngineError::Shape(format!(
                    "the {} step runs on device arrays stored in f32 only (precision {:?})",
                    s.name(),
                    self.precision
                )));
            }
            crate::engine::check_intensity(job.plan, job.image.channels, job.image.shape.len())?;
        }
        let out = Outputs {
            image: &mut [],
            label: None,
        };
        self.engines[0].apply_region(job, out, self.precision, region)
    }

    /// Applies one job per sample to a batch of arrays in the memory of the first device: each
    /// array of `arrays` holds the samples one after another, as a dense `(B, C, *grid)` tensor
    /// does (sample i of the image at `image + 4 * i * C * prod(in_shape)` bytes, and so on).
    /// Every job has the same grids, channels and label channels; each has its own plan. The
    /// samples run in batched launches (one per stage, as many samples as fit the device's
    /// budget), with one wait for the stream at the end of each launch group, not one per
    /// sample; a batch that cannot share a launch (half-precision storage, a sample that moves
    /// nothing) runs job by job. The same values as [`Self::apply_device`] on each sample, bit for
    /// bit. The timings cover the whole batch.
    ///
    /// # Safety
    /// As [`Self::apply_device`], for the `jobs.len()` samples of each array.
    pub unsafe fn apply_device_batch(
        &self,
        jobs: &[Job<'_>],
        arrays: DeviceArrays,
    ) -> Result<Timings, EngineError> {
        let Some(first) = jobs.first() else {
            return Ok(Timings::default());
        };
        let out_shape = |j: &Job<'_>| {
            j.plan
                .out_shape
                .clone()
                .unwrap_or_else(|| j.image.shape.clone())
        };
        let shape0 = out_shape(first);
        for j in jobs {
            if j.image.shape != first.image.shape
                || j.image.channels != first.image.channels
                || j.label.map(|l| (l.channels, &l.shape))
                    != first.label.map(|l| (l.channels, &l.shape))
                || out_shape(j) != shape0
            {
                return Err(EngineError::Shape(
                    "the samples of a batch share their grids, channels and output shape".into(),
                ));
            }
        }
        let (n_in, n_out) = (first.image.len_spatial(), shape0.iter().product::<usize>());
        let (ch, lab_ch) = (first.image.channels, first.label.map_or(0, |l| l.channels));
        // The arrays of samples lo..: each address moved past the samples before.
        let from = |lo: usize| DeviceArrays {
            image: arrays.image + (4 * lo * ch * n_in) as u64,
            label: arrays.label.map(|a| a + (4 * lo * lab_ch * n_in) as u64),
            out: arrays.out + (4 * lo * ch * n_out) as u64,
            label_out: arrays
                .label_out
                .map(|a| a + (4 * lo * lab_ch * n_out) as u64),
        };
        let key = many_key(first, self.precision);
        let moves = |j: &Job<'_>| !(j.plan.is_spatial_identity() && out_shape(j) == j.image.shape);
        let together = jobs.len() > 1
            && key.is_some()
            && jobs
                .iter()
                .all(|j| moves(j) && many_key(j, self.precision) == key);
        let t0 = std::time::Instant::now();
        let mut sum = Timings::default();
        let mut add = |t: Timings| {
            sum.field_ms += t.field_ms;
            sum.prefilter_ms += t.prefilter_ms;
            sum.resample_ms += t.resample_ms;
            sum.upload_ms += t.upload_ms;
            sum.download_ms += t.download_ms;
            sum.intensity_ms += t.intensity_ms;
        };
        if !together {
            for (i, j) in jobs.iter().enumerate() {
                // SAFETY: this function's contract, for sample i's part of each array.
                add(unsafe { self.apply_device(*j, from(i)) }?);
            }
        } else {
            for j in jobs {
                if !j.plan.intensity.is_empty() {
                    crate::engine::check_intensity(j.plan, ch, j.image.shape.len())?;
                }
            }
            let eng = &self.engines[0];
            let cap = eng.many_capacity(first);
            let mut lo = 0;
            for chunk in jobs.chunks(cap) {
                let region = Region {
                    device: Some(from(lo)),
                    ..Region::default()
                };
                let mut work: Vec<(Job<'_>, Outputs<'_>)> = chunk
                    .iter()
                    .map(|j| {
                        let out = Outputs {
                            image: &mut [],
                            label: None,
                        };
                        (*j, out)
                    })
                    .collect();
                let t =
                    eng.with_state(|st| eng.transform(st, &mut work, self.precision, region))?;
                add(t);
                lo += chunk.len();
            }
        }
        sum.total_ms = t0.elapsed().as_secs_f64() * 1e3;
        sum.batched = Some(jobs.len());
        Ok(sum)
    }

    /// The plan's unit field on `out_shape` from the first device (its cached field, made if
    /// needed), the components one after another: for checks against
    /// [`crate::engine::cpu::CpuBackend::field`], which it equals bit for bit.
    pub fn unit_field(
        &self,
        plan: &Plan,
        out_shape: &[usize],
    ) -> Result<Option<Vec<f32>>, EngineError> {
        plan.validate(out_shape.len())?;
        self.engines[0].unit_field(plan, out_shape)
    }

    /// The first device's compute stream (`CUstream` as an integer): the stream a DLPack
    /// producer is asked to order its work before ([`Self::apply_device`]).
    pub fn stream_handle(&self) -> u64 {
        self.engines[0].dev.stream.cu_stream() as u64
    }
}

/// The output shape of a job over device arrays ([`CudaBackend::apply_device`]): whole grids
/// only, a label map on the image's grid with both of its arrays, a valid plan.
fn check_device_job(
    job: &Job<'_>,
    d: &DeviceArrays,
    region: Region,
) -> Result<Vec<usize>, EngineError> {
    if region.plane.is_some() {
        return Err(EngineError::Shape(
            "device arrays are transformed as whole grids".into(),
        ));
    }
    job.plan.validate(job.image.ndim())?;
    if let Some(l) = job.label
        && l.shape != job.image.shape
    {
        return Err(EngineError::Shape(format!(
            "label grid {:?} differs from the image's {:?}",
            l.shape, job.image.shape
        )));
    }
    if job.label.is_some() != d.label.is_some() || d.label.is_some() != d.label_out.is_some() {
        return Err(EngineError::Shape(
            "a label map needs its input and output arrays on the device".into(),
        ));
    }
    Ok(job
        .plan
        .out_shape
        .clone()
        .unwrap_or_else(|| job.image.shape.clone()))
}

/// A job of a batch with its outputs, held for the intensity steps after the batch.
type Held<'a> = (Job<'a>, &'a mut [f32], Option<&'a mut [f32]>);

impl Backend for CudaBackend {
    fn name(&self) -> String {
        let ids: Vec<String> = self.ordinals().iter().map(|i| i.to_string()).collect();
        format!("cuda:{}", ids.join(","))
    }

    /// The intensity steps run on the device before the download in f32 storage, else on the
    /// host output after it (one pass over it).
    fn apply(&self, job: Job<'_>, out: Outputs<'_>) -> Result<Timings, EngineError> {
        // Concurrent callers spread over the devices; one caller uses them in turn.
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.engines.len();
        if DeviceEngine::intensity_here(self.precision, Region::default()) {
            crate::engine::check_intensity(job.plan, job.image.channels, job.image.shape.len())?;
            return self.engines[i].apply(job, out, self.precision);
        }
        crate::engine::with_intensity(job, out, false, |j, o| {
            self.engines[i].apply(j, o, self.precision)
        })
    }

    fn apply_many(&self, jobs: Vec<(Job<'_>, Outputs<'_>)>) -> Vec<Result<Timings, EngineError>> {
        let checks: Vec<Result<(), EngineError>> = jobs
            .iter()
            .map(|(j, _)| {
                crate::engine::check_intensity(j.plan, j.image.channels, j.image.shape.len())
            })
            .collect();
        if let Some(k) = checks.iter().position(Result::is_err) {
            return checks
                .into_iter()
                .map(|c| {
                    Err(c.err().unwrap_or_else(|| {
                        EngineError::Shape(format!(
                            "not run: job {k} of the batch has intensity steps that cannot act"
                        ))
                    }))
                })
                .collect();
        }
        let mut held: Vec<Held<'_>> = jobs
            .into_iter()
            .map(|(j, o)| (j, o.image, o.label))
            .collect();
        let batch: Vec<(Job<'_>, Outputs<'_>)> = held
            .iter_mut()
            .map(|(j, image, label)| {
                (
                    *j,
                    Outputs {
                        image,
                        label: label.as_deref_mut(),
                    },
                )
            })
            .collect();
        let results = self.apply_batch(batch);
        if DeviceEngine::intensity_here(self.precision, Region::default()) {
            return results;
        }
        for ((j, image, _), r) in held.iter_mut().zip(&results) {
            if r.is_ok() {
                crate::engine::intensity_after(j.plan, image, &j.image.shape, j.image.channels);
            }
        }
        results
    }

    /// On the first device: the kernel runs over the plane only and only the plane comes back;
    /// with `resident`, a slider move costs the plane, not the upload of the volume.
    fn apply_plane(
        &self,
        job: Job<'_>,
        plane: Plane,
        resident: Option<u64>,
        out: Outputs<'_>,
    ) -> Result<Timings, EngineError> {
        let region = Region {
            plane: Some((plane.axis, plane.index)),
            resident,
            device: None,
        };
        crate::engine::with_intensity(job, out, true, |j, o| {
            self.engines[0].apply_region(j, o, self.precision, region)
        })
    }

    /// From the first device, with its cached field.
    fn coordinates(&self, plan: &Plan, in_shape: &[usize]) -> Result<Vec<f32>, EngineError> {
        plan.validate(in_shape.len())?;
        self.engines[0].coordinates(plan, in_shape)
    }

    /// From the first device's cached field, reduced on the device.
    fn displacement_stats(
        &self,
        plan: &Plan,
        out_shape: &[usize],
    ) -> Result<Option<(f64, f64)>, EngineError> {
        self.engines[0].displacement_stats(plan, out_shape)
    }

    /// Kernels: the field kernels of every sigma bucket on every device (a few seconds, once per
    /// device). Modules: the run's modules start compiling on other threads. A field is made
    /// inside the apply that needs it, timed there: preparing it ahead does nothing here.
    fn prepare(&self, what: Prepare<'_>) -> Result<f64, EngineError> {
        match what {
            Prepare::Kernels => {
                for e in &self.engines {
                    warm_field_kernels(e.dev.ordinal)?;
                }
            }
            Prepare::Modules {
                plans,
                in_shape,
                channels,
                label_channels,
            } => {
                for e in &self.engines {
                    e.prefetch_plans(plans, in_shape, (channels, label_channels), self.precision);
                }
            }
            Prepare::Field { .. } | Prepare::Planes { .. } => {}
        }
        Ok(0.0)
    }

    fn holds_field(&self, plan: &Plan, out_shape: &[usize]) -> bool {
        let Some(spec) = plan.field_spec(out_shape) else {
            return false;
        };
        self.engines[0].holds_field(&spec)
    }

    /// Drops the cached field and buffers of every device of this backend.
    fn clear_cache(&self) {
        for e in &self.engines {
            e.drop_caches();
        }
    }

    fn mem_stats(&self) -> Vec<MemStats> {
        self.engines.iter().map(|e| e.dev.mem_stats()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::many::{ManyStrides, field_slots, fill_stacked, scatter_stacked};
    use super::{
        BOUNDARY_CUH, Family, PadParams, ResampleParams, field_build_radius, field_defines,
        field_weights, mode_defines,
    };
    use crate::core::Mode;
    use crate::core::gaussian::gaussian_kernel1d;
    use crate::gpu::buffer::SendPtr;
    use crate::gpu::nvrtc::ptx_entries;

    #[test]
    fn params_have_the_c_layout() {
        assert_eq!(std::mem::size_of::<ResampleParams>(), 280);
        assert_eq!(std::mem::align_of::<ResampleParams>(), 8);
        assert_eq!(std::mem::size_of::<PadParams>(), 40);
        assert_eq!(std::mem::size_of::<ManyStrides>(), 48);
        assert!(!BOUNDARY_CUH.is_empty() && Family::Resample.program().contains("ManyStrides"));
    }

    #[test]
    fn field_slots_group_samples_by_sigma_in_slot_order() {
        let s = |v: f64| Some(vec![v, v, v]);
        let sigmas = vec![s(3.0), None, s(2.5), s(3.0), s(2.5), None, s(3.0)];
        let (slots, groups) = field_slots(&sigmas);
        assert_eq!(groups.len(), 2);
        assert_eq!(groups[0], (vec![3.0; 3], vec![0, 3, 6]));
        assert_eq!(groups[1], (vec![2.5; 3], vec![2, 4]));
        assert_eq!(
            slots,
            vec![Some(0), None, Some(3), Some(1), Some(4), None, Some(2)]
        );
        // Bit-for-bit comparison: 0.1 + 0.2 is not 0.3.
        let (_, g) = field_slots(&[Some(vec![0.1 + 0.2]), Some(vec![0.3])]);
        assert_eq!(g.len(), 2);
        let (slots, g) = field_slots(&[None, None]);
        assert!(g.is_empty() && slots == vec![None, None]);
    }

    #[test]
    fn stacked_fill_and_scatter_cross_sample_boundaries() {
        let parts: Vec<Vec<f32>> = (0..3)
            .map(|j| (0..5).map(|i| (10 * j + i) as f32).collect())
            .collect();
        let refs: Vec<&[f32]> = parts.iter().map(|p| &p[..]).collect();
        let mut flat = vec![0f32; 15];
        for (s, c) in [(0usize, 4usize), (4, 7), (11, 4)] {
            fill_stacked(&refs, 5, s, &mut flat[s..s + c]);
        }
        assert_eq!(flat, parts.concat());
        let mut outs: Vec<Vec<f32>> = vec![vec![-1.0; 5]; 3];
        let ptrs: Vec<(SendPtr, usize)> = outs
            .iter_mut()
            .map(|o| (SendPtr(o.as_mut_ptr()), o.len()))
            .collect();
        for (s, c) in [(0usize, 6usize), (6, 2), (8, 7)] {
            scatter_stacked(&ptrs, 5, s, &flat[s..s + c]);
        }
        drop(ptrs);
        assert_eq!(outs, parts);
    }

    #[test]
    fn mode_defines_come_from_the_enum() {
        let d = mode_defines(Mode::GridWrap);
        assert!(d.contains(&"-DMODE_GRID_CONSTANT=1".to_string()));
        assert!(d.contains(&"-DMODE_WRAP=6".to_string()));
        assert_eq!(d.last().map(String::as_str), Some("-DMODE=5"));
    }

    #[test]
    fn field_weights_round_trip_to_the_cpu_f32() {
        // Tiled builds: the radius rounded up to a multiple of 8, the weights as a parameter.
        assert_eq!(field_defines(2.0), vec!["-DFIELD_R=8".to_string()]);
        assert_eq!(field_build_radius(12.0), 48);
        assert_eq!(field_build_radius(12.2), 56);
        assert_eq!(field_build_radius(0.1), 0);
        let w = gaussian_kernel1d(2.0, 0, 4.0);
        let p = field_weights(2.0);
        for (j, &v) in p.w.iter().enumerate() {
            let want = if j <= 8 { w[8 + j] as f32 } else { 0.0 };
            assert_eq!(v, want, "weight {j}");
        }
        // Above the tiled kernels: the weights baked into the build.
        let d = field_defines(45.0);
        assert_eq!(d[0], "-DFIELD_R=180");
        let w = gaussian_kernel1d(45.0, 0, 4.0);
        let lits: Vec<f32> = d[1]
            .trim_start_matches("-DFIELD_W=")
            .split(',')
            .map(|s| s.trim_end_matches('f').parse().unwrap())
            .collect();
        assert_eq!(lits.len(), 181);
        for (l, v) in lits.iter().zip(&w[180..]) {
            assert_eq!(*l, *v as f32);
        }
    }

    #[test]
    fn ptx_entries_are_found() {
        let ptx =
            ".visible .entry gauss_mid_f32(\n\t.param .u64 a\n)\n.visible .entry field_stats_f32(";
        assert_eq!(ptx_entries(ptx), vec!["gauss_mid_f32", "field_stats_f32"]);
    }

    #[test]
    fn program_inlines_the_header() {
        let p = Family::Resample.program();
        assert!(p.starts_with("// Boundary rules"));
        assert!(p.contains("RESAMPLE_ENTRY"));
    }
}
