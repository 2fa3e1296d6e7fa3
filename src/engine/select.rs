//! The one device choice (docs/design.md §6) and the CPU retry after a GPU runs out of memory, for every
//! caller: the command line, the batch runner, the filters, the explorer, the bench and the
//! Python package.

use super::cuda::CudaBackend;
use super::{
    Backend, BackendSpec, EngineError, Job, NotApplied, Outputs, Precision, Selected, Timings,
};
use crate::core::Plan;
use std::sync::Arc;

/// Chooses the engine for a request (docs/design.md §6): an explicit CUDA request opens the devices; when
/// that is impossible (no driver, no GPU, NVRTC missing or failing) the CPU engine runs and the
/// note says why, in one line. `auto` and `cpu` run on the CPU: the data lives on the host.
pub fn select(spec: &BackendSpec, precision: Precision) -> Selected {
    let cpu = || Arc::new(super::cpu::CpuBackend::new());
    match open_cuda(spec, precision) {
        None => Selected {
            backend: cpu(),
            note: None,
        },
        Some(Ok(b)) => Selected {
            backend: b,
            note: None,
        },
        Some(Err(e)) => {
            let why = match &e {
                EngineError::CudaUnavailable(m) => m.clone(),
                other => other.to_string(),
            };
            Selected {
                backend: cpu(),
                note: Some(format!(
                    "CUDA engine unavailable ({}); using the CPU engine",
                    one_line(&why)
                )),
            }
        }
    }
}

/// The CUDA engine of a CUDA request, or why it cannot open; `None` for `cpu` and `auto`. For
/// callers that say in their own words what runs instead (the explorer's panels).
pub fn open_cuda(
    spec: &BackendSpec,
    precision: Precision,
) -> Option<Result<Arc<dyn Backend>, EngineError>> {
    let BackendSpec::Cuda(ids) = spec else {
        return None;
    };
    Some(CudaBackend::new(ids, precision).map(|b| Arc::new(b) as Arc<dyn Backend>))
}

pub(crate) fn one_line(s: &str) -> String {
    let first = s.lines().next().unwrap_or("").trim();
    if s.lines().count() > 1 {
        format!("{first} …")
    } else {
        first.to_string()
    }
}

/// Applies a plan into fresh volumes on `backend`; when the GPU runs out of memory, the same work
/// is retried on the CPU engine. Returns the note to report in that case.
pub fn apply_new_with_fallback(
    backend: &dyn Backend,
    plan: &Plan,
    image: &crate::core::volume::Volume,
    label: Option<&crate::core::volume::Volume>,
) -> Result<
    (
        crate::core::volume::Volume,
        Option<crate::core::volume::Volume>,
        Timings,
        Option<String>,
    ),
    EngineError,
> {
    match super::apply_new(backend, plan, image, label) {
        Ok((a, b, t)) => Ok((a, b, t, None)),
        Err(EngineError::OutOfMemory(why)) => retry_on_cpu(backend, &oom(&why), plan, image, label),
        Err(EngineError::GpuLimit(why)) => retry_on_cpu(backend, &limit(&why), plan, image, label),
        Err(e) => Err(e),
    }
}

/// [`apply_new_with_fallback`] for a caller that hands the image over and needs it no more
/// ([`Backend::apply_owned`]: the engine may free the voxels once read, which lowers the peak
/// of host memory); the image comes back from a GPU that ran out of memory for the CPU retry.
pub fn apply_owned_with_fallback(
    backend: &dyn Backend,
    plan: &Plan,
    image: crate::core::volume::Volume,
    label: Option<&crate::core::volume::Volume>,
) -> Result<NewResult, EngineError> {
    let retry = |why: &str, image: crate::core::volume::Volume| {
        let cpu = super::cpu::CpuBackend::new();
        let (a, b, t) = cpu.apply_owned(plan, image, label).map_err(|n| n.error)?;
        let note = format!("{} {why}; retried on the CPU engine", backend.name());
        Ok((a, b, t, Some(note)))
    };
    match backend.apply_owned(plan, image, label) {
        Ok((a, b, t)) => Ok((a, b, t, None)),
        Err(NotApplied { error, image }) => match error {
            EngineError::OutOfMemory(why) => retry(&oom(&why), *image),
            EngineError::GpuLimit(why) => retry(&limit(&why), *image),
            e => Err(e),
        },
    }
}

/// Why a job went to the CPU: out of memory.
pub(crate) fn oom(why: &str) -> String {
    format!("ran out of memory ({why})")
}

/// Why a job went to the CPU: a grid one launch cannot cover.
pub(crate) fn limit(why: &str) -> String {
    format!("cannot run this grid ({why})")
}

/// The job again on the CPU engine, after `backend` could not run it (`why`), with the note.
pub(crate) fn retry_on_cpu(
    backend: &dyn Backend,
    why: &str,
    plan: &Plan,
    image: &crate::core::volume::Volume,
    label: Option<&crate::core::volume::Volume>,
) -> Result<NewResult, EngineError> {
    let cpu = super::cpu::CpuBackend::new();
    let (a, b, t) = super::apply_new(&cpu, plan, image, label)?;
    let note = format!("{} {why}; retried on the CPU engine", backend.name());
    Ok((a, b, t, Some(note)))
}

/// One result of [`apply_many_new_with_fallback`]: the image, the label map, the timings and the
/// out-of-memory note when the job was retried on the CPU.
pub type NewResult = (
    crate::core::volume::Volume,
    Option<crate::core::volume::Volume>,
    Timings,
    Option<String>,
);

/// [`apply_new_with_fallback`] for many jobs at once, through [`Backend::apply_many`] (batched
/// launches on the CUDA engine): a job that runs out of GPU memory is retried on the CPU engine.
pub fn apply_many_new_with_fallback(
    backend: &dyn Backend,
    items: &[(
        &Plan,
        &crate::core::volume::Volume,
        Option<&crate::core::volume::Volume>,
    )],
) -> Vec<Result<NewResult, EngineError>> {
    let shapes: Vec<Vec<usize>> = items
        .iter()
        .map(|(plan, img, _)| plan.out_shape.clone().unwrap_or_else(|| img.shape.clone()))
        .collect();
    let mut bufs: Vec<(Vec<f32>, Option<Vec<f32>>)> = items
        .iter()
        .zip(&shapes)
        .map(|((_, img, lab), shape)| {
            let n: usize = shape.iter().product();
            (
                super::hugepages::zeroed_f32(img.channels * n),
                lab.map(|l| super::hugepages::zeroed_f32(l.channels * n)),
            )
        })
        .collect();
    let jobs: Vec<(Job<'_>, Outputs<'_>)> = items
        .iter()
        .zip(bufs.iter_mut())
        .map(|(&(plan, image, label), (o, l))| {
            (
                Job { plan, image, label },
                Outputs {
                    image: o,
                    label: l.as_deref_mut(),
                },
            )
        })
        .collect();
    let results = backend.apply_many(jobs);
    results
        .into_iter()
        .zip(bufs)
        .zip(items.iter().zip(&shapes))
        .map(|((r, (o, l)), (&(plan, image, label), shape))| match r {
            Ok(t) => {
                let mk = |src: &crate::core::volume::Volume, data: Vec<f32>| {
                    super::output_volume(src, shape, data)
                };
                let lab = match (label, l) {
                    (Some(src), Some(d)) => Some(mk(src, d)),
                    _ => None,
                };
                Ok((mk(image, o), lab, t, None))
            }
            Err(EngineError::OutOfMemory(why)) => {
                retry_on_cpu(backend, &oom(&why), plan, image, label)
            }
            Err(EngineError::GpuLimit(why)) => {
                retry_on_cpu(backend, &limit(&why), plan, image, label)
            }
            Err(e) => Err(e),
        })
        .collect()
}
