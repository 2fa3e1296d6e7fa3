//! Engines that apply a [`Plan`] to a [`Volume`]: the CPU reference (rayon) and CUDA, and
//! [`select`], the one choice between them (with the CPU retry after a GPU runs out of memory).
//!
//! Arrays are `[z, y, x]` (2D `[y, x]`), channels leading. Every backend takes the same plan and
//! must give the same numbers (to f32 rounding).

pub mod boundary;
pub mod cpu;
pub mod cuda;
pub mod field;
pub mod gaussian;
pub mod hugepages;
pub mod jacobian;
pub mod noise;
pub mod select;
pub mod spline;

use serde::{Deserialize, Serialize};

use crate::core::plan::{Plan, PlanError};
pub use crate::core::spec::{BackendSpec, Precision};
use crate::core::volume::{Volume, flip_in_place};

/// What an engine could not do.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error(transparent)]
    Plan(#[from] PlanError),
    #[error("{0}")]
    Shape(String),
    #[error("CUDA is not available: {0}")]
    CudaUnavailable(String),
    #[error("out of GPU memory: {0}")]
    OutOfMemory(String),
    /// A grid beyond what one GPU launch can cover (e.g. more than 65535 slices); the CPU engine
    /// has no such limit, so callers retry there.
    #[error("beyond the GPU's launch limits: {0}")]
    GpuLimit(String),
    #[error("CUDA error: {0}")]
    Cuda(String),
}

impl From<crate::gpu::GpuError> for EngineError {
    fn from(e: crate::gpu::GpuError) -> Self {
        use crate::gpu::GpuError;
        match e {
            GpuError::Unavailable(s) => EngineError::CudaUnavailable(s),
            GpuError::OutOfMemory(s) => EngineError::OutOfMemory(s),
            GpuError::Shape(s) => EngineError::Shape(s),
            GpuError::Cuda(s) => EngineError::Cuda(s),
        }
    }
}

/// Wall-clock timings of one `apply`, in milliseconds.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Timings {
    /// Elastic field (noise and smoothing); 0 when cached or absent.
    pub field_ms: f64,
    /// Spline prefilter (order 3).
    pub prefilter_ms: f64,
    /// Resampling of image and label.
    pub resample_ms: f64,
    /// Host to device copies (GPU engines).
    pub upload_ms: f64,
    /// Device to host copies (GPU engines).
    pub download_ms: f64,
    /// The intensity steps after the resample (device time on a GPU); 0 without steps.
    #[serde(default)]
    pub intensity_ms: f64,
    /// Everything, end to end.
    pub total_ms: f64,
    /// When the job ran in a batched launch: how many samples these timings cover (all of them
    /// together); absent for a job that ran alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batched: Option<usize>,
}

/// The inputs of one application of a plan.
#[derive(Clone, Copy)]
pub struct Job<'a> {
    pub plan: &'a Plan,
    pub image: &'a Volume,
    /// A label map on the same grid, resampled with order 0 and cval 0.
    pub label: Option<&'a Volume>,
}

/// The outputs of a plan applied into fresh volumes: the image, the label map and the timings.
pub type NewVolumes = (Volume, Option<Volume>, Timings);

/// A [`Backend::apply_owned`] that did not run: why, and the image handed back untouched.
#[derive(Debug)]
pub struct NotApplied {
    pub error: EngineError,
    pub image: Box<Volume>,
}

/// Caller-owned output buffers: `channels * prod(out_shape)` values each.
pub struct Outputs<'a> {
    pub image: &'a mut [f32],
    pub label: Option<&'a mut [f32]>,
}

/// One plane of a 3D output grid: the plane `index` normal to `axis` (the viewer's unit of work).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plane {
    pub axis: usize,
    pub index: usize,
}

/// What [`Backend::prepare`] makes ready ahead of the work that needs it.
#[derive(Clone, Copy)]
pub enum Prepare<'a> {
    /// The kernels an interactive session may need (CUDA: the field kernels of every sigma, so
    /// that moving sigma never waits for NVRTC); nothing on the CPU.
    Kernels,
    /// The plan's unit elastic field on `out_shape`, kept for the applies that follow.
    Field {
        plan: &'a Plan,
        out_shape: &'a [usize],
    },
    /// The field planes of the three views through output voxel `cursor` (3D), made together so
    /// that the noise they share is generated once.
    Planes {
        plan: &'a Plan,
        out_shape: &'a [usize],
        cursor: &'a [usize],
    },
    /// The kernels a run of `plans` will launch on images of `in_shape` with `channels` and
    /// `label_channels` (0: no label map), one sample at a time and in batches (CUDA: compiled
    /// ahead on other threads, so a first run waits for its longest compile, not for each in
    /// turn); nothing on the CPU. Returns at once.
    Modules {
        plans: &'a [Plan],
        in_shape: &'a [usize],
        channels: usize,
        label_channels: usize,
    },
}

/// An engine that applies plans. Every caller (command line, batch, explorer, bench, Python)
/// holds a `dyn Backend`: the engines differ only in where the work runs.
pub trait Backend: Send + Sync {
    /// A short name for reports: `cpu`, `cuda:0`.
    fn name(&self) -> String;
    /// Applies `job.plan` to `job.image` (and label) into `out`.
    fn apply(&self, job: Job<'_>, out: Outputs<'_>) -> Result<Timings, EngineError>;

    /// [`apply_new`] for a caller that hands `image` over and needs it no more: the engine may
    /// reuse or free its voxels once it has read them and allocates the outputs when it needs
    /// them (the CPU engine computes order-3 coefficients in the voxels' own buffer, or frees
    /// them once padded, before the field is made and the outputs are allocated). When the
    /// work is not done the image comes back untouched with the error, so that another engine
    /// can run it. By default [`apply_new`], the image dropped after it.
    fn apply_owned(
        &self,
        plan: &Plan,
        image: Volume,
        label: Option<&Volume>,
    ) -> Result<NewVolumes, NotApplied> {
        apply_then_drop(self, plan, image, label)
    }

    /// Applies many jobs, one result per job in order. The CUDA engine runs jobs of one shape
    /// together, in batched launches; the default runs them one after another.
    fn apply_many(&self, jobs: Vec<(Job<'_>, Outputs<'_>)>) -> Vec<Result<Timings, EngineError>> {
        jobs.into_iter().map(|(j, o)| self.apply(j, o)).collect()
    }

    /// One output plane of a 3D transform, computed on its own (a slider moves: only the planes
    /// on screen are computed). `out` holds `channels` planes (C order of the other two axes),
    /// and the label planes. `resident` is the caller's key of the image and label content: an
    /// engine that copies the image to a device keeps it there for the next call with the same
    /// key. The same values as that plane of [`Backend::apply`] (to f32 rounding of the field on
    /// the CPU, which may compute the plane of the field alone).
    fn apply_plane(
        &self,
        job: Job<'_>,
        plane: Plane,
        resident: Option<u64>,
        out: Outputs<'_>,
    ) -> Result<Timings, EngineError>;

    /// The input coordinate of every output voxel, `(ndim, *out_shape)` f32 (`--save-coords`,
    /// the Jacobian readout).
    fn coordinates(&self, plan: &Plan, in_shape: &[usize]) -> Result<Vec<f32>, EngineError>;

    /// Largest and RMS elastic displacement `|alpha| |G|` of the plan's field over `out_shape`:
    /// voxels, or millimetres when the plan's space is mm; `None` without a field.
    fn displacement_stats(
        &self,
        plan: &Plan,
        out_shape: &[usize],
    ) -> Result<Option<(f64, f64)>, EngineError>;

    /// Makes `what` ready now; returns the milliseconds spent computing a field (0 when it was
    /// ready or there is none).
    fn prepare(&self, what: Prepare<'_>) -> Result<f64, EngineError>;

    /// Whether the engine holds the plan's volume field on `out_shape` already (applies then
    /// read it instead of computing the field or its planes); false without a field.
    fn holds_field(&self, plan: &Plan, out_shape: &[usize]) -> bool;

    /// Drops the cached field, coefficients and buffers.
    fn clear_cache(&self);

    /// The memory statistics of the devices the engine runs on (none for the CPU).
    fn mem_stats(&self) -> Vec<crate::gpu::device::MemStats> {
        Vec::new()
    }
}

/// Checks a job's grids and the output buffer sizes; returns the output shape.
pub fn check_job(job: &Job<'_>, out: &Outputs<'_>) -> Result<Vec<usize>, EngineError> {
    check_job_region(job, out, None)
}

/// [`check_job`] for the outputs of one plane `index` normal to `axis` of a 3D output grid
/// (`plane = Some((axis, index))`; the buffers then hold one plane per channel), or of the whole
/// grid (`None`). Returns the whole output grid's shape.
pub fn check_job_region(
    job: &Job<'_>,
    out: &Outputs<'_>,
    plane: Option<(usize, usize)>,
) -> Result<Vec<usize>, EngineError> {
    let img = job.image;
    job.plan.validate(img.ndim())?;
    let out_shape = job
        .plan
        .out_shape
        .clone()
        .unwrap_or_else(|| img.shape.clone());
    let n_out: usize = match plane {
        None => out_shape.iter().product(),
        Some((axis, index)) => {
            if out_shape.len() != 3 || axis >= 3 || index >= out_shape[axis] {
                return Err(EngineError::Shape(format!(
                    "slice {index} along axis {axis} does not exist in a grid of shape \
                     {out_shape:?}"
                )));
            }
            out_shape.iter().product::<usize>() / out_shape[axis]
        }
    };
    if out.image.len() != img.channels * n_out {
        return Err(EngineError::Shape(format!(
            "output buffer holds {} values, the transform writes {}",
            out.image.len(),
            img.channels * n_out
        )));
    }
    if let Some(label) = job.label {
        check_label_grid(job)?;
        match &out.label {
            Some(l) if l.len() == label.channels * n_out => {}
            _ => {
                return Err(EngineError::Shape(
                    "a label map needs an output buffer of its own size".into(),
                ));
            }
        }
    }
    Ok(out_shape)
}

/// [`check_job`] before any output buffer exists: the plan against the image and the label
/// map's grid. Returns the output grid's shape.
pub fn check_grids(job: &Job<'_>) -> Result<Vec<usize>, EngineError> {
    job.plan.validate(job.image.ndim())?;
    check_label_grid(job)?;
    Ok(job
        .plan
        .out_shape
        .clone()
        .unwrap_or_else(|| job.image.shape.clone()))
}

/// The label map, when there is one, lies on the image's grid.
fn check_label_grid(job: &Job<'_>) -> Result<(), EngineError> {
    match job.label {
        Some(label) if label.shape != job.image.shape => Err(EngineError::Shape(format!(
            "label map shape {:?} differs from the image shape {:?}",
            label.shape, job.image.shape
        ))),
        _ => Ok(()),
    }
}

/// An output volume of `shape` holding `data`, with `src`'s metadata (spacing, affine, dtype).
pub(crate) fn output_volume(src: &Volume, shape: &[usize], data: Vec<f32>) -> Volume {
    let mut v = src.clone_meta();
    v.shape = shape.to_vec();
    v.data = data;
    v
}

/// Checks that the plan's intensity steps can act on an image of `channels` channels and `ndim`
/// spatial axes.
pub(crate) fn check_intensity(
    plan: &Plan,
    channels: usize,
    ndim: usize,
) -> Result<(), EngineError> {
    for step in &plan.intensity {
        step.validate(Some(channels), Some(ndim))
            .map_err(|why| EngineError::Plan(PlanError::Intensity(why)))?;
    }
    Ok(())
}

/// The plan's intensity steps on an image output of `channels` channels, in order, after the
/// resample (docs/design.md §9); the label map never receives them. `input_shape` is the input's
/// spatial shape (the output's unless the plan sets `out_shape`).
pub(crate) fn intensity_after(
    plan: &Plan,
    image_out: &mut [f32],
    input_shape: &[usize],
    channels: usize,
) {
    let shape = plan.out_shape.as_deref().unwrap_or(input_shape);
    // The mirror after the steps: they act on the unmirrored image (`Plan::flip_around_steps`).
    let around = plan.flip_around_steps();
    if let Some(axes) = around {
        flip_in_place(image_out, shape, channels, axes);
    }
    for step in &plan.intensity {
        step.apply(image_out, shape, channels);
    }
    if let Some(axes) = around {
        flip_in_place(image_out, shape, channels, axes);
    }
}

/// Runs the spatial part of `job` (`spatial`, into `out`), then the plan's intensity steps on the
/// image output alone; checked first. A `plane` of the grid takes pointwise steps only: a step
/// that reads statistics of the whole channel (contrast, gamma) cannot be computed from a plane.
pub(crate) fn with_intensity<'a>(
    job: Job<'a>,
    out: Outputs<'_>,
    plane: bool,
    spatial: impl for<'o> FnOnce(Job<'a>, Outputs<'o>) -> Result<Timings, EngineError>,
) -> Result<Timings, EngineError> {
    if plane && let Some(s) = job.plan.intensity.iter().find(|s| s.needs_whole_channel()) {
        return Err(EngineError::Shape(format!(
            "the {} step reads statistics of the whole volume: apply the whole grid, not a plane",
            s.name()
        )));
    }
    if plane && job.plan.flip_around_steps().is_some() {
        return Err(EngineError::Shape(
            "the mirror acts after the intensity steps: apply the whole grid, not a plane".into(),
        ));
    }
    check_intensity(job.plan, job.image.channels, job.image.shape.len())?;
    let Outputs { image, label } = out;
    let t = spatial(
        job,
        Outputs {
            image: &mut *image,
            label,
        },
    )?;
    let t0 = std::time::Instant::now();
    intensity_after(job.plan, image, &job.image.shape, job.image.channels);
    let mut t = t;
    if !job.plan.intensity.is_empty() {
        t.intensity_ms = t0.elapsed().as_secs_f64() * 1e3;
    }
    Ok(t)
}

/// Applies a plan on a backend into freshly allocated volumes that keep the input's header.
pub fn apply_new(
    backend: &dyn Backend,
    plan: &Plan,
    image: &Volume,
    label: Option<&Volume>,
) -> Result<NewVolumes, EngineError> {
    let (out_shape, mut img_out, mut lab_out) = new_outputs(plan, image, label);
    let t = backend.apply(
        Job { plan, image, label },
        Outputs {
            image: &mut img_out,
            label: lab_out.as_deref_mut(),
        },
    )?;
    Ok(new_volumes(image, label, &out_shape, img_out, lab_out, t))
}

/// [`Backend::apply_owned`] as [`apply_new`] on the image, which is then dropped (or handed back
/// with the error).
pub(crate) fn apply_then_drop<B: Backend + ?Sized>(
    backend: &B,
    plan: &Plan,
    image: Volume,
    label: Option<&Volume>,
) -> Result<NewVolumes, NotApplied> {
    let (out_shape, mut img_out, mut lab_out) = new_outputs(plan, &image, label);
    let job = Job {
        plan,
        image: &image,
        label,
    };
    let out = Outputs {
        image: &mut img_out,
        label: lab_out.as_deref_mut(),
    };
    match backend.apply(job, out) {
        Ok(t) => Ok(new_volumes(&image, label, &out_shape, img_out, lab_out, t)),
        Err(error) => Err(NotApplied {
            error,
            image: Box::new(image),
        }),
    }
}

/// The output grid of a plan on `image` and zeroed output buffers for the image and label.
pub(crate) fn new_outputs(
    plan: &Plan,
    image: &Volume,
    label: Option<&Volume>,
) -> (Vec<usize>, Vec<f32>, Option<Vec<f32>>) {
    let out_shape = plan
        .out_shape
        .clone()
        .unwrap_or_else(|| image.shape.clone());
    let n_out: usize = out_shape.iter().product();
    let img_out = hugepages::zeroed_f32(image.channels * n_out);
    let lab_out = label.map(|l| hugepages::zeroed_f32(l.channels * n_out));
    (out_shape, img_out, lab_out)
}

/// The filled output buffers as volumes with the headers of `image` and `label`.
pub(crate) fn new_volumes(
    image: &Volume,
    label: Option<&Volume>,
    out_shape: &[usize],
    img_out: Vec<f32>,
    lab_out: Option<Vec<f32>>,
    t: Timings,
) -> NewVolumes {
    let img = output_volume(image, out_shape, img_out);
    let lab = match (label, lab_out) {
        (Some(l), Some(d)) => Some(output_volume(l, out_shape, d)),
        _ => None,
    };
    (img, lab, t)
}

/// The engine chosen for a request, and why, when it is not the one asked for.
pub struct Selected {
    pub backend: std::sync::Arc<dyn Backend>,
    /// A one-line note for the user and the report (e.g. why the CPU engine runs instead).
    pub note: Option<String>,
}

/// Picks an engine at the default precision ([`select::select`]): a CUDA request that cannot be
/// met falls back to the CPU engine with a note, never an error.
pub fn select_backend(spec: &BackendSpec) -> Selected {
    select::select(spec, Precision::default())
}
