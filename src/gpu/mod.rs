//! The CUDA runtime shared by the engine and the filters: devices and their memory accounting
//! ([`device`]), one store of compiled modules per process and of loaded kernels per device
//! ([`nvrtc`], with the on-disk CUBIN cache in [`kernel_cache`] and the stores of kernels compiled
//! ahead in [`prebuilt`]), device buffers and pinned
//! staging ([`buffer`]), launch shapes ([`launch`]), the tuning knobs ([`tuning`]) and [`GpuError`], cudarc's errors in augscope's
//! words.
//!
//! Nothing here knows a transform or a filter: the layers above pass define sets and entry
//! names. Without a driver, a device or NVRTC nothing here panics (cudarc panics when its
//! libraries are missing, so every entry point probes them first).
#![allow(unsafe_code)] // The FFI lives here (STYLE.md): the library probes, NVRTC, uninitialised device allocations and pinned host memory. Each block says what it checked.

pub mod buffer;
pub mod device;
pub mod family;
pub mod kernel_cache;
pub mod launch;
pub mod nvrtc;
pub mod prebuilt;
pub mod tuning;

pub use tuning::{Tuning, tuning};

use std::sync::{Mutex, MutexGuard};

use cudarc::driver::DriverError;
use cudarc::driver::sys::CUresult;

/// What the CUDA runtime could not do.
#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    /// No driver, no such device, or no NVRTC.
    #[error("CUDA is not available: {0}")]
    Unavailable(String),
    /// The driver's out-of-memory, or augscope's own memory cap (`AUGSCOPE_GPU_MEM_LIMIT`).
    #[error("out of GPU memory: {0}")]
    OutOfMemory(String),
    /// A launch beyond what one grid can cover.
    #[error("{0}")]
    Shape(String),
    /// Any other driver or compiler error.
    #[error("CUDA error: {0}")]
    Cuda(String),
}

/// Locks `m`, taking the data of a poisoned lock as it is (every holder leaves it consistent).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The driver's name and description of an error.
pub fn driver_message(e: &DriverError) -> String {
    let name = e.error_name().map(|s| s.to_string_lossy().into_owned());
    let text = e.error_string().map(|s| s.to_string_lossy().into_owned());
    match (name, text) {
        (Ok(n), Ok(t)) => format!("{n}: {t}"),
        _ => format!("{:?}", e.0),
    }
}

/// A driver error in augscope's words; out-of-memory becomes [`GpuError::OutOfMemory`].
pub fn driver_error(what: &str, e: DriverError) -> GpuError {
    if e.0 == CUresult::CUDA_ERROR_OUT_OF_MEMORY {
        GpuError::OutOfMemory(format!("{what}: {}", driver_message(&e)))
    } else {
        GpuError::Cuda(format!("{what}: {}", driver_message(&e)))
    }
}
