//! Device buffers counted by the device's memory tracker, buffers borrowed from a caller, the
//! pinned staging memory every host-device copy goes through, and the raw output pointer shared
//! by the threads that scatter a batch.

use std::sync::Arc;

use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{
    CudaEvent, CudaSlice, CudaStream, DeviceRepr, PinnedHostSlice, ValidAsZeroBits,
};
use rayon::prelude::*;

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

/// Elements per transfer of a staged copy: the host fills (or drains) one chunk while the one
/// before it transfers.
const CHUNK: usize = 4 << 20;
/// Elements each host thread fills or drains at a time within a chunk.
const PIECE: usize = 1 << 16;

/// Page-locked host memory, kept between calls and grown when a copy needs more, through which
/// uploads and downloads go chunk by chunk (see [`Staging::upload`], [`Staging::download`]).
pub struct Staging<T: DeviceRepr>(Option<PinnedHostSlice<T>>);

impl<T: DeviceRepr> Default for Staging<T> {
    fn default() -> Self {
        Staging(None)
    }
}

impl<T: DeviceRepr + ValidAsZeroBits + Copy + Send + Sync> Staging<T> {
    /// The page-locked bytes held.
    pub fn bytes(&self) -> usize {
        self.0.as_ref().map_or(0, |p| p.num_bytes())
    }

    /// At least `len` elements of page-locked memory.
    fn host(&mut self, dev: &DeviceContext, len: usize) -> Result<&mut [T], GpuError> {
        if self.0.as_ref().is_none_or(|p| p.len() < len) {
            self.0 = None;
            dev.tracker.attempt("pinned host memory")?;
            // SAFETY: page-locked host memory of len elements; every element a transfer reads is
            // written first (by `fill` before an upload, by the transfer before `take` reads it
            // after a download).
            let p = unsafe { dev.ctx.alloc_pinned_with_flags::<T>(len.max(1), 0) }
                .map_err(|e| driver_error("pinned host memory", e))?;
            self.0 = Some(p);
        }
        let Some(p) = self.0.as_mut() else {
            return Err(GpuError::Cuda("pinned buffer missing".into()));
        };
        p.as_mut_slice()
            .map_err(|e| driver_error("pinned host memory", e))
    }

    /// Copies `src_len` elements to `dst` on the device's copy stream: `fill(start, chunk)`
    /// writes the values `start..start + chunk.len()`, in parallel pieces, while the chunk before
    /// transfers. The transfers wait for the compute-stream work before `after` when given (the
    /// kernels queued since, such as the elastic field, never read `dst` and run meanwhile),
    /// else for everything queued on it; the compute stream then waits for the transfers.
    pub fn upload(
        &mut self,
        dev: &DeviceContext,
        dst: &mut CudaSlice<T>,
        src_len: usize,
        fill: impl Fn(usize, &mut [T]) + Sync,
        after: Option<&CudaEvent>,
    ) -> Result<(), GpuError> {
        let host = self.host(dev, src_len)?;
        let cs = &dev.copy_stream;
        // The staging memory is refilled below: the copies of an earlier upload that read it
        // must be done (a label map right after its image would otherwise race the image's
        // transfer of a small volume).
        cs.synchronize().map_err(|e| driver_error("upload", e))?;
        // Wait for earlier kernels that may still read the buffer being overwritten.
        match after {
            Some(ev) => cs.wait(ev),
            None => cs.join(&dev.stream),
        }
        .map_err(|e| driver_error("stream ordering", e))?;
        for start in (0..src_len).step_by(CHUNK) {
            let end = (start + CHUNK).min(src_len);
            host[start..end]
                .par_chunks_mut(PIECE)
                .enumerate()
                .for_each(|(i, c)| fill(start + i * PIECE, c));
            let mut view = dst.slice_mut(start..end);
            cs.memcpy_htod(&host[start..end], &mut view)
                .map_err(|e| driver_error("upload", e))?;
        }
        dev.stream
            .join(cs)
            .map_err(|e| driver_error("stream ordering", e))
    }

    /// Copies `src_len` elements from the device on the compute stream, handing each chunk to
    /// `take(start, chunk)` (which converts it into the caller's buffer, in parallel pieces)
    /// while the next one transfers.
    pub fn download(
        &mut self,
        dev: &DeviceContext,
        src: &CudaSlice<T>,
        src_len: usize,
        take: impl Fn(usize, &[T]) + Sync,
    ) -> Result<(), GpuError> {
        let host = self.host(dev, src_len)?;
        let stream = &dev.stream;
        let mut events = vec![];
        for start in (0..src_len).step_by(CHUNK) {
            let end = (start + CHUNK).min(src_len);
            let view = src.slice(start..end);
            stream
                .memcpy_dtoh(&view, &mut host[start..end])
                .map_err(|e| driver_error("download", e))?;
            let ev = stream
                .record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
                .map_err(|e| driver_error("cannot record an event", e))?;
            events.push((start, end, ev));
        }
        for (start, end, ev) in events {
            ev.synchronize().map_err(|e| driver_error("download", e))?;
            host[start..end]
                .par_chunks(PIECE)
                .enumerate()
                .for_each(|(i, c)| take(start + i * PIECE, c));
        }
        Ok(())
    }
}
