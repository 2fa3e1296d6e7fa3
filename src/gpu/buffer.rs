//! Device buffers counted by the device's memory tracker, buffers borrowed from a caller, and the
//! raw output pointer shared by the threads that scatter a batch.

use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream, DeviceRepr};

use super::GpuError;
use super::device::{self, DeviceContext, driver_error};

/// A device buffer counted by its device's [`device::MemTracker`].
pub struct DevBuf<T> {
    pub s: CudaSlice<T>,
    pub(crate) _r: device::Reservation,
}

impl<T: DeviceRepr> DevBuf<T> {
    pub(crate) fn new(dev: &DeviceContext, len: usize, what: &str) -> Result<Self, GpuError> {
        let bytes = len.max(1) * std::mem::size_of::<T>();
        let r = dev.tracker.reserve(bytes, what)?;
        // SAFETY: `alloc` returns uninitialised device memory of len.max(1) elements of T; every
        // buffer made here is fully written by a copy or a kernel before it is read.
        let s = unsafe { dev.stream.alloc::<T>(len.max(1)) }.map_err(|e| driver_error(what, e))?;
        Ok(DevBuf { s, _r: r })
    }

    pub(crate) fn bytes(&self) -> usize {
        self.s.len() * std::mem::size_of::<T>()
    }
}

/// Keeps `slot` holding at least `len` elements (reused between calls).
pub(crate) fn ensure<'a, T: DeviceRepr>(
    dev: &DeviceContext,
    slot: &'a mut Option<DevBuf<T>>,
    len: usize,
    what: &str,
) -> Result<&'a mut DevBuf<T>, GpuError> {
    if slot.as_ref().is_none_or(|b| b.s.len() < len.max(1)) {
        *slot = None;
        *slot = Some(DevBuf::new(dev, len, what)?);
    }
    slot.as_mut()
        .ok_or_else(|| GpuError::Cuda("workspace buffer missing".into()))
}

/// A caller's device array seen as a [`CudaSlice`] for the length of one call, so the launches
/// and copies take it like any buffer of the engine; never freed here (dropping leaks the slice
/// back to its owner).
pub(crate) struct Borrowed<T>(pub(crate) std::mem::ManuallyDrop<CudaSlice<T>>);

impl<T> Borrowed<T> {
    /// # Safety
    /// `ptr` is a live allocation of at least `len` values of `T` on `stream`'s device, and stays
    /// allocated (and is not used by other work) until the borrow is dropped.
    pub(crate) unsafe fn new(stream: &Arc<CudaStream>, ptr: u64, len: usize) -> Self {
        // SAFETY: the caller's contract above; the slice is leaked, never freed, on drop.
        Borrowed(std::mem::ManuallyDrop::new(unsafe {
            stream.upgrade_device_ptr::<T>(ptr, len)
        }))
    }
}

impl<T> Drop for Borrowed<T> {
    fn drop(&mut self) {
        // SAFETY: taken once, here; the slice is not used afterwards.
        let s = unsafe { std::mem::ManuallyDrop::take(&mut self.0) };
        // Hands the address back without freeing it (the caller owns the memory).
        let _ = s.leak();
    }
}

impl<T> std::ops::Deref for Borrowed<T> {
    type Target = CudaSlice<T>;
    fn deref(&self) -> &CudaSlice<T> {
        &self.0
    }
}

impl<T> std::ops::DerefMut for Borrowed<T> {
    fn deref_mut(&mut self) -> &mut CudaSlice<T> {
        &mut self.0
    }
}

/// A raw pointer to a caller's output, shared by the download's worker threads, each writing a
/// disjoint range.
#[derive(Clone, Copy)]
pub(crate) struct SendPtr(pub(crate) *mut f32);

// SAFETY: only used by `slice`, whose callers (the download chunks) write disjoint ranges of one
// live `&mut [f32]` that outlives the download.
unsafe impl Send for SendPtr {}

// SAFETY: as above.
unsafe impl Sync for SendPtr {}

impl SendPtr {
    #[allow(clippy::mut_from_ref)] // Disjoint ranges per caller; see the SAFETY notes.
    pub(crate) fn slice(&self, start: usize, len: usize, total: usize) -> &mut [f32] {
        assert!(start + len <= total, "download chunk out of range");
        // SAFETY: `start + len <= total`, the length of the `&mut [f32]` this pointer came from,
        // which outlives every call; the chunks handed out by `download` never overlap.
        unsafe { std::slice::from_raw_parts_mut(self.0.add(start), len) }
    }
}
