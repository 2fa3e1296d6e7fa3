//! The engines the worker runs on: the CUDA engine opened once per engine selection, and the
//! engines of the slice-only path.

use std::sync::Arc;

use super::{Backend, BackendSpec, CpuBackend, EngineError, Precision, Prepare, select};
/// The CUDA engine of the explorer's engine selection, opened once per (spec, precision), or
/// why there is none (the CPU engine runs then).
#[derive(Default)]
pub struct GpuSlot(Option<(BackendSpec, Precision, Opened)>);

/// An opened engine, or the note saying why it did not open.
pub(super) type Opened = Result<Arc<dyn Backend>, String>;

impl GpuSlot {
    /// The CUDA engine of a CUDA spec (`Ok(None)` for `cpu` and `auto`), or the note saying why
    /// it cannot run, ending with `then` (what runs instead). When it opens, the field kernels
    /// of every sigma are built (a few seconds, once per device), so that moving sigma later
    /// never waits for NVRTC; a failure there shows again, with its message, when the kernel is
    /// first needed.
    pub fn open(
        &mut self,
        spec: &BackendSpec,
        precision: Precision,
        then: &str,
    ) -> Result<Option<Arc<dyn Backend>>, String> {
        let fresh = !matches!(&self.0, Some((s, p, _)) if s == spec && *p == precision);
        if fresh {
            let Some(made) = select::open_cuda(spec, precision) else {
                return Ok(None);
            };
            if let Ok(b) = &made {
                let _ = b.prepare(Prepare::Kernels);
            }
            let made = made.map_err(|e| cuda_fallback_note(&e, then));
            self.0 = Some((spec.clone(), precision, made));
        }
        match &self.0 {
            Some((_, _, Ok(b))) => Ok(Some(b.clone())),
            Some((_, _, Err(note))) => Err(note.clone()),
            None => Ok(None),
        }
    }
}

/// The engines of the slice-only path. On the CPU: the worker's main engine, whose cached volume
/// field and cubic coefficients serve every view, and one engine per view, so that the views'
/// field planes (after a new sigma or seed) are computed at the same time instead of one after
/// the other (an engine holds its plane cache while it computes a plane). On a GPU: the one
/// engine, plane after plane.
pub struct SliceEngines {
    pub main: Arc<dyn Backend>,
    pub per_view: Vec<Arc<dyn Backend>>,
}

impl SliceEngines {
    /// The CPU configuration: `main` and three engines of its own, one per view.
    pub fn new(main: Arc<dyn Backend>) -> Self {
        SliceEngines {
            main,
            per_view: (0..3)
                .map(|_| Arc::new(CpuBackend::new()) as Arc<dyn Backend>)
                .collect(),
        }
    }

    /// One engine for every plane, in turn (a GPU: its launches queue on one stream anyway).
    pub fn one(main: Arc<dyn Backend>) -> Self {
        SliceEngines {
            main,
            per_view: Vec::new(),
        }
    }
}

/// The one line shown when a CUDA request falls back to the CPU: the first line of why, then
/// what runs instead (`then`).
pub fn cuda_fallback_note(e: &EngineError, then: &str) -> String {
    let why = match e {
        EngineError::CudaUnavailable(m) => m.clone(),
        other => other.to_string(),
    };
    let first = why.lines().next().unwrap_or("").trim();
    format!("CUDA engine unavailable ({first}); {then}")
}
