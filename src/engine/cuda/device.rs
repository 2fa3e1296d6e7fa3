//! One device as the engine holds it: its buffers (the workspace kept between calls), the field
//! cache, uploads and downloads, plane and whole-grid applies, coordinates, displacement
//! statistics, and the process-wide registry of devices.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{
    CudaFunction, CudaSlice, CudaStream, DeviceRepr, LaunchConfig, PushKernelArg,
};

use crate::core::{FieldSpec, Mode, Order, Plan, Volume};
use crate::engine::boundary::SPLINE_PREPAD;
use crate::engine::{EngineError, Job, Outputs, Precision, Timings};
use crate::gpu::buffer::{DevBuf, SendPtr, Staging, ensure};
use crate::gpu::device::{DeviceContext, MemStats};
use crate::gpu::lock;

use super::kernels::{
    BLOCK, PF_WARPS, axis_split, build_defines, grid_out, prefilter_rows_enabled, shape3,
};
use super::{
    Family, PadParams, compiler_missing, driver_error, field_defines, grid_1d, resample_defines,
    resample_params, sampler_defines,
};
/// Buffers kept between calls (the "reserved" part of the memory statistics).
#[derive(Default)]
pub(super) struct Workspace {
    pub(super) img_f32: Option<DevBuf<f32>>,
    pub(super) img_pad: Option<DevBuf<f32>>,
    pub(super) img_u16: Option<DevBuf<u16>>,
    pub(super) scratch_f64: Option<DevBuf<f64>>,
    pub(super) out_f32: Option<DevBuf<f32>>,
    pub(super) out_u16: Option<DevBuf<u16>>,
    pub(super) lab_in: Option<DevBuf<f32>>,
    pub(super) lab_out: Option<DevBuf<f32>>,
    pub(super) field_scratch: Option<DevBuf<f32>>,
    pub(super) coords: Option<DevBuf<f32>>,
    pub(super) stats: Option<DevBuf<f64>>,
    pub(super) dummy: Option<DevBuf<f32>>,
    pub(super) dummy_out: Option<DevBuf<f32>>,
    /// Philox keys of the samples of a field launch.
    pub(super) keys: Option<DevBuf<u32>>,
    pub(super) pin_f32: Staging<f32>,
    pub(super) pin_u16: Staging<u16>,
}

impl Workspace {
    pub(super) fn device_bytes(&self) -> usize {
        fn b<T: DeviceRepr>(x: &Option<DevBuf<T>>) -> usize {
            x.as_ref().map_or(0, |d| d.bytes())
        }
        b(&self.img_f32)
            + b(&self.img_pad)
            + b(&self.img_u16)
            + b(&self.scratch_f64)
            + b(&self.out_f32)
            + b(&self.out_u16)
            + b(&self.lab_in)
            + b(&self.lab_out)
            + b(&self.field_scratch)
            + b(&self.coords)
    }
}

/// The cached unit field of one (seed, per-axis sigma in voxels, shape).
pub(super) struct CachedField {
    pub(super) spec: FieldSpec,
    pub(super) buf: DevBuf<f32>,
}

#[derive(Default)]
pub(super) struct State {
    pub(super) field: Option<CachedField>,
    pub(super) ws: Workspace,
    /// The caller's key of the image (and label) now on the device, with the storage precision
    /// and whether a label came along: a call with the same key skips the upload.
    pub(super) resident: Option<(u64, Precision, bool)>,
}

/// Which part of the output one call computes and downloads.
#[derive(Clone, Copy, Default)]
pub(super) struct Region {
    /// One plane `(axis, index)` of a 3D output grid; the whole grid when `None`.
    pub(super) plane: Option<(usize, usize)>,
    /// The caller's key of the image and label content: when it matches the last upload's, the
    /// device copy is used again (not for order 3, whose prefilter works in place).
    pub(super) resident: Option<u64>,
    /// The caller's arrays in device memory, read and written in place of the host volumes and
    /// output buffers (see [`CudaBackend::apply_device`]).
    pub(super) device: Option<DeviceArrays>,
}

/// Caller-owned f32 arrays in the memory of one device, C order and dense, for
/// [`CudaBackend::apply_device`]: `image` holds `channels * prod(in_shape)` values, `out`
/// `channels * prod(out_shape)`, `label` and `label_out` the label map's channels on the input and
/// the output grid. Addresses are the driver's `CUdeviceptr`s (what DLPack's `data` holds).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceArrays {
    pub image: u64,
    pub label: Option<u64>,
    pub out: u64,
    pub label_out: Option<u64>,
}

/// One device: its context, compiled kernels and caches. Shared by every [`CudaBackend`] of the
/// process that uses the device.
pub struct DeviceEngine {
    pub dev: DeviceContext,
    pub(super) state: Mutex<State>,
}

/// Copies the plane `index` normal to `axis` of a 3D volume (every channel, C order of the other
/// two axes) into `dst`.
pub(super) fn copy_plane(v: &Volume, axis: usize, index: usize, dst: &mut [f32]) {
    let [d, h, w] = [v.shape[0], v.shape[1], v.shape[2]];
    let n = d * h * w;
    let mut k = 0;
    for ch in 0..v.channels {
        let c = &v.data[ch * n..(ch + 1) * n];
        let (zs, ys, xs) = match axis {
            0 => (index..index + 1, 0..h, 0..w),
            1 => (0..d, index..index + 1, 0..w),
            _ => (0..d, 0..h, index..index + 1),
        };
        for z in zs {
            for y in ys.clone() {
                for x in xs.clone() {
                    dst[k] = c[(z * h + y) * w + x];
                    k += 1;
                }
            }
        }
    }
}

impl DeviceEngine {
    pub(super) fn open(ordinal: usize) -> Result<Self, EngineError> {
        let dev = DeviceContext::open(ordinal)?;
        // NVRTC is needed unless a store of prebuilt kernels serves this device.
        if let Some(why) = compiler_missing(dev.arch, dev.compute_capability) {
            return Err(EngineError::CudaUnavailable(why));
        }
        // SAFETY: augscope orders its work itself: every buffer is used on `dev.stream`, except
        // uploads on `dev.copy_stream`, which the compute stream waits for before any kernel
        // reads them; so cudarc's per-buffer event tracking is not needed.
        unsafe { dev.ctx.disable_event_tracking() };
        let eng = DeviceEngine {
            dev,
            state: Mutex::default(),
        };
        // Build and load one kernel now, so that a broken NVRTC or driver shows at selection, not
        // mid-run: the order-1 elastic entry, which most plans launch.
        eng.function(
            Family::Resample,
            &resample_defines(Mode::Constant, Order::Linear, 3, Precision::F32, false),
            "resample_plainf_f32",
        )?;
        Ok(eng)
    }

    /// A kernel of the engine, compiled on first use for this define set and kept by the device
    /// (a resample entry is built alone, see [`build_defines`]).
    pub(super) fn function(
        &self,
        family: Family,
        defines: &[String],
        name: &str,
    ) -> Result<CudaFunction, EngineError> {
        Ok(self
            .dev
            .function(family, &build_defines(family, defines, name), name)?)
    }

    /// Starts compiling the module of `name` on another thread (see [`DeviceContext::prefetch`]).
    pub(super) fn prefetch(&self, family: Family, defines: &[String], name: &str) {
        self.dev
            .prefetch(family, &build_defines(family, defines, name), name);
    }

    pub(super) fn event(
        &self,
        stream: &Arc<CudaStream>,
    ) -> Result<cudarc::driver::CudaEvent, EngineError> {
        stream
            .record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
            .map_err(|e| driver_error("cannot record an event", e))
    }

    /// Copies f32 values to the device through the engine's pinned staging buffer, for
    /// other kernel families (the filters) on this device's stream.
    pub(crate) fn upload_f32(
        &self,
        src: &[f32],
        dst: &mut CudaSlice<f32>,
    ) -> Result<(), EngineError> {
        let mut st = lock(&self.state);
        // The workspace's image now holds something else: no call may reuse it by key.
        st.resident = None;
        let fill = |s: usize, c: &mut [f32]| c.copy_from_slice(&src[s..s + c.len()]);
        Ok(st
            .ws
            .pin_f32
            .upload(&self.dev, dst, src.len(), fill, None)?)
    }

    /// Copies the first `out.len()` f32 values of `src` to the host through the engine's pinned
    /// staging buffer.
    pub(crate) fn download_f32(
        &self,
        src: &CudaSlice<f32>,
        out: &mut [f32],
    ) -> Result<(), EngineError> {
        let mut st = lock(&self.state);
        let ptr = SendPtr(out.as_mut_ptr());
        let len = out.len();
        let take = |s: usize, c: &[f32]| ptr.slice(s, c.len(), len).copy_from_slice(c);
        Ok(st.ws.pin_f32.download(&self.dev, src, len, take)?)
    }

    pub(super) fn apply(
        &self,
        job: Job<'_>,
        out: Outputs<'_>,
        precision: Precision,
    ) -> Result<Timings, EngineError> {
        self.apply_region(job, out, precision, Region::default())
    }

    /// Many whole-volume jobs of one shape in one set of launches ([`many_key`] says which jobs
    /// fit together; the caller checks it): the fields of all samples that share a sigma are made
    /// by one launch per pass, and one `resample_many` launch transforms every sample, each with
    /// its own plan, seed, image (or one image for all) and outputs. Identity plans are copied on
    /// the host, as [`Self::apply`] does. The results equal [`Self::apply`]'s bit for bit.
    /// Returns the timings of the whole batch (the same for every job).
    pub(super) fn apply_many(
        &self,
        jobs: &mut [(Job<'_>, Outputs<'_>)],
        precision: Precision,
    ) -> Result<Timings, EngineError> {
        self.with_state(|st| self.transform(st, jobs, precision, Region::default()))
    }

    /// Runs `f` on the locked state; after a GPU out of memory the caches are freed (and the
    /// error returned: the caller retries on the CPU).
    pub(super) fn with_state<T>(
        &self,
        f: impl FnOnce(&mut State) -> Result<T, EngineError>,
    ) -> Result<T, EngineError> {
        let mut st = lock(&self.state);
        let r = f(&mut st);
        if matches!(r, Err(EngineError::OutOfMemory(_))) {
            *st = State::default();
        }
        r
    }

    /// The end of a transform: waits for the stream, reads the prefilter and resample times
    /// from their events ([start, end] each) and records the pinned staging size.
    pub(super) fn finish(
        &self,
        ws: &Workspace,
        [pre0, pre1, rs0, rs1]: [&cudarc::driver::CudaEvent; 4],
        timings: &mut Timings,
    ) -> Result<(), EngineError> {
        self.dev
            .stream
            .synchronize()
            .map_err(|e| driver_error("the transform", e))?;
        let ms = |a: &cudarc::driver::CudaEvent, b| {
            a.elapsed_ms(b)
                .map(f64::from)
                .map_err(|e| driver_error("timing", e))
        };
        timings.prefilter_ms = ms(pre0, pre1)?;
        timings.resample_ms = ms(rs0, rs1)?;
        self.dev
            .set_pinned_bytes(ws.pin_f32.bytes() + ws.pin_u16.bytes());
        Ok(())
    }

    pub(super) fn apply_region(
        &self,
        job: Job<'_>,
        out: Outputs<'_>,
        precision: Precision,
        region: Region,
    ) -> Result<Timings, EngineError> {
        self.with_state(|st| self.transform(st, &mut [(job, out)], precision, region))
    }

    /// Order 3: pads (nearest, grid-constant: scipy's nprepad) and prefilters on the device the
    /// `channels` images of `in_shape` in `ws.img_f32`, into `ws.img_pad` (padded) or in place,
    /// then converts to the storage type in `ws.img_u16` (f16, bf16). Returns the coefficient
    /// shape and the pad.
    pub(super) fn prefilter_device(
        &self,
        ws: &mut Workspace,
        mode: Mode,
        in_shape: &[usize],
        channels: usize,
        precision: Precision,
        cval: f32,
    ) -> Result<(Vec<usize>, f64), EngineError> {
        let stream = self.dev.stream.clone();
        let ndim = in_shape.len();
        let n_in: usize = in_shape.iter().product();
        let half = precision != Precision::F32;
        let mut coef_shape = in_shape.to_vec();
        let mut pad = 0.0;
        let pdefs = sampler_defines(mode, Order::Cubic, ndim, precision);
        let padded = mode.needs_prepad();
        if padded {
            coef_shape = in_shape.iter().map(|&n| n + 2 * SPLINE_PREPAD).collect();
            pad = SPLINE_PREPAD as f64;
        }
        let n_coef: usize = coef_shape.iter().product();
        if padded {
            let f = self.function(Family::Prefilter, &pdefs, "pad_f32")?;
            let dst = ensure(
                &self.dev,
                &mut ws.img_pad,
                channels * n_coef,
                "the padded image",
            )?;
            let Some(src) = ws.img_f32.as_ref() else {
                return Err(EngineError::Cuda("image buffer missing".into()));
            };
            let p = PadParams {
                n_out: n_coef as i64,
                in_shape: shape3(in_shape),
                out_shape: shape3(&coef_shape),
                pad: SPLINE_PREPAD as i32,
                cval,
            };
            let (ch, nin) = (channels as i32, n_in as i64);
            let mut b = stream.launch_builder(&f);
            b.arg(&src.s).arg(&mut dst.s).arg(&ch).arg(&nin).arg(&p);
            // SAFETY: pad_f32(const float* src, float* dst, int channels, i64 n_in, PadParams):
            // src holds >= channels * n_in elements, dst >= channels * n_coef (ensured above);
            // one thread per padded voxel, bounds-checked against p.n_out = n_coef.
            unsafe { b.launch(grid_1d(n_coef)?) }.map_err(|e| driver_error("pad_f32", e))?;
        }
        let scratch = ensure(
            &self.dev,
            &mut ws.scratch_f64,
            channels * n_coef,
            "the prefilter scratch",
        )?;
        let coef = if padded {
            ws.img_pad.as_mut()
        } else {
            ws.img_f32.as_mut()
        };
        let Some(coef) = coef else {
            return Err(EngineError::Cuda("coefficient buffer missing".into()));
        };
        let f = self.function(Family::Prefilter, &pdefs, "prefilter_axis_f32")?;
        let f_rows = self.function(Family::Prefilter, &pdefs, "prefilter_rows_f32")?;
        for axis in 0..ndim {
            let (outer, len, inner) = axis_split(&coef_shape, axis);
            let lines = channels * outer * inner;
            let (lines_i, len_i, inner_i) = (lines as i64, len as i32, inner as i64);
            if inner == 1 && prefilter_rows_enabled() {
                // The last axis: 32 lines per warp through shared tiles (coalesced).
                let cfg = LaunchConfig {
                    grid_dim: (lines.div_ceil(32 * PF_WARPS).max(1) as u32, 1, 1),
                    block_dim: (32 * PF_WARPS as u32, 1, 1),
                    shared_mem_bytes: 0,
                };
                let mut b = stream.launch_builder(&f_rows);
                b.arg(&mut coef.s)
                    .arg(&mut scratch.s)
                    .arg(&lines_i)
                    .arg(&len_i);
                // SAFETY: prefilter_rows_f32(float* data, double* scratch, i64 lines, int n):
                // data (f32) and scratch (f64) hold >= channels * n_coef = lines * n elements
                // (lines of n contiguous elements); each warp takes 32 lines, bounds-checked
                // against `lines` (rows past the end are neither read nor written).
                unsafe { b.launch(cfg) }.map_err(|e| driver_error("prefilter_rows_f32", e))?;
                continue;
            }
            let cfg = LaunchConfig {
                grid_dim: (lines.div_ceil(128).max(1) as u32, 1, 1),
                block_dim: (128, 1, 1),
                shared_mem_bytes: 0,
            };
            let mut b = stream.launch_builder(&f);
            b.arg(&mut coef.s)
                .arg(&mut scratch.s)
                .arg(&lines_i)
                .arg(&len_i)
                .arg(&inner_i);
            // SAFETY: prefilter_axis_f32(float* data, double* scratch, i64 lines, int n,
            // i64 inner): data (f32) and scratch (f64) hold >= channels * n_coef =
            // lines * n elements; one thread per line, bounds-checked against `lines`.
            unsafe { b.launch(cfg) }.map_err(|e| driver_error("prefilter_axis_f32", e))?;
        }
        if half {
            let f = self.function(Family::Prefilter, &pdefs, "to_store_f32")?;
            let dst = ensure(
                &self.dev,
                &mut ws.img_u16,
                channels * n_coef,
                "the image coefficients",
            )?;
            let total = (channels * n_coef) as i64;
            let mut b = stream.launch_builder(&f);
            b.arg(&coef.s).arg(&mut dst.s).arg(&total);
            // SAFETY: to_store_f32(const float* src, u16* dst, i64 n): both hold >= n =
            // channels * n_coef elements; bounds-checked per thread.
            unsafe { b.launch(grid_1d(channels * n_coef)?) }
                .map_err(|e| driver_error("to_store_f32", e))?;
        }
        Ok((coef_shape, pad))
    }

    /// Input coordinates of every output voxel, `(ndim, *out_shape)` f32 (`--save-coords`).
    pub(super) fn coordinates(
        &self,
        plan: &Plan,
        in_shape: &[usize],
    ) -> Result<Vec<f32>, EngineError> {
        let map = plan.compose(in_shape)?;
        let mut st = lock(&self.state);
        let n: usize = map.out_shape.iter().product();
        let has_field = match plan.field_spec(&map.out_shape) {
            Some(spec) => {
                self.ensure_field(&mut st, &spec)?;
                true
            }
            None => false,
        };
        let st = &mut *st;
        let stream = &self.dev.stream;
        ensure(&self.dev, &mut st.ws.dummy, 1, "a placeholder")?;
        let coords = ensure(
            &self.dev,
            &mut st.ws.coords,
            map.ndim * n,
            "the coordinates",
        )?;
        let missing = || EngineError::Cuda("workspace buffer missing".into());
        let field = match &st.field {
            Some(f) if has_field => &f.buf.s,
            _ => &st.ws.dummy.as_ref().ok_or_else(missing)?.s,
        };
        let p = resample_params(&map, has_field, plan.cval);
        let f = self.function(
            Family::Resample,
            &sampler_defines(plan.mode, plan.order, map.ndim, Precision::F32),
            "coords_f32",
        )?;
        let mut b = stream.launch_builder(&f);
        b.arg(&mut coords.s).arg(field).arg(&p);
        // SAFETY: coords_f32(float* out, const float* field, ResampleParams): out holds
        // ndim * n_out elements, field ndim * n_out (or the placeholder when has_field = 0);
        // bounds-checked against out_shape (output_voxel).
        unsafe { b.launch(grid_out(&map.out_shape)?) }
            .map_err(|e| driver_error("coords_f32", e))?;
        let v = stream
            .clone_dtoh(&coords.s.slice(0..map.ndim * n))
            .map_err(|e| driver_error("download", e))?;
        stream
            .synchronize()
            .map_err(|e| driver_error("coordinates", e))?;
        Ok(v)
    }

    /// The plan's unit field on `out_shape`, downloaded: the components one after another
    /// (`ndim * n` f32); `None` without an elastic deformation.
    pub(super) fn unit_field(
        &self,
        plan: &Plan,
        out_shape: &[usize],
    ) -> Result<Option<Vec<f32>>, EngineError> {
        let Some(spec) = plan.field_spec(out_shape) else {
            return Ok(None);
        };
        let mut st = lock(&self.state);
        self.ensure_field(&mut st, &spec)?;
        let Some(field) = st.field.as_ref() else {
            return Err(EngineError::Cuda("field missing".into()));
        };
        let len = out_shape.len() * out_shape.iter().product::<usize>();
        let stream = &self.dev.stream;
        let v = stream
            .clone_dtoh(&field.buf.s.slice(0..len))
            .map_err(|e| driver_error("download", e))?;
        stream
            .synchronize()
            .map_err(|e| driver_error("the elastic field", e))?;
        Ok(Some(v))
    }

    /// Largest and RMS displacement `|alpha| |G|` of the plan's field, from the device: voxels, or
    /// millimetres when the plan's space is mm.
    pub(super) fn displacement_stats(
        &self,
        plan: &Plan,
        out_shape: &[usize],
    ) -> Result<Option<(f64, f64)>, EngineError> {
        let (Some(spec), Some(e)) = (plan.field_spec(out_shape), plan.elastic) else {
            return Ok(None);
        };
        let mut st = lock(&self.state);
        self.ensure_field(&mut st, &spec)?;
        let st = &mut *st;
        let n: usize = out_shape.iter().product();
        let stream = &self.dev.stream;
        let stats = ensure(&self.dev, &mut st.ws.stats, 2, "statistics")?;
        stream
            .memset_zeros(&mut stats.s)
            .map_err(|e| driver_error("statistics", e))?;
        let Some(field) = st.field.as_ref() else {
            return Err(EngineError::Cuda("field missing".into()));
        };
        // Every build of the field family holds the statistics kernel: take the smallest.
        let f = self.function(Family::Field, &field_defines(0.0), "field_stats_f32")?;
        let (n_i, ncomp) = (n as i64, out_shape.len() as i32);
        let (mut mx, mut sm) = stats.s.split_at_mut(1);
        // SAFETY: the first f64 of `stats` is reinterpreted as u64 (same size and alignment);
        // the kernel writes its bits with atomicMax.
        let mut mx_bits = unsafe { mx.transmute_mut::<u64>(1) }
            .ok_or_else(|| EngineError::Cuda("statistics buffer".into()))?;
        let mut b = stream.launch_builder(&f);
        b.arg(&field.buf.s)
            .arg(&n_i)
            .arg(&ncomp)
            .arg(&mut mx_bits)
            .arg(&mut sm);
        let cfg = LaunchConfig {
            grid_dim: (1024, 1, 1),
            block_dim: (BLOCK, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: field_stats_f32(const float* field, i64 n, int ncomp, u64* max_bits,
        // double* sum): field holds ncomp * n elements (the cached field of this shape), max_bits
        // and sum one element each; grid-stride loop bounds-checked against n.
        unsafe { b.launch(cfg) }.map_err(|e| driver_error("field_stats_f32", e))?;
        let v = stream
            .clone_dtoh(&stats.s)
            .map_err(|e| driver_error("download", e))?;
        stream
            .synchronize()
            .map_err(|e| driver_error("statistics", e))?;
        let max2 = f64::from_bits(v[0].to_bits());
        let a = e.alpha.abs();
        Ok(Some((a * max2.sqrt(), a * (v[1] / n.max(1) as f64).sqrt())))
    }

    /// Whether the unit field of `spec` is the one cached on the device.
    pub(super) fn holds_field(&self, spec: &FieldSpec) -> bool {
        lock(&self.state)
            .field
            .as_ref()
            .is_some_and(|f| f.spec == *spec)
    }

    pub(super) fn drop_caches(&self) {
        *lock(&self.state) = State::default();
        self.dev.set_pinned_bytes(0);
    }
}

pub(super) fn registry() -> &'static Mutex<HashMap<usize, Arc<DeviceEngine>>> {
    static R: OnceLock<Mutex<HashMap<usize, Arc<DeviceEngine>>>> = OnceLock::new();
    R.get_or_init(|| Mutex::new(HashMap::new()))
}

/// The process-wide engine of device `ordinal`, opened (and its first kernel compiled) once.
pub fn device_engine(ordinal: usize) -> Result<Arc<DeviceEngine>, EngineError> {
    let mut r = lock(registry());
    if let Some(e) = r.get(&ordinal) {
        return Ok(e.clone());
    }
    let e = Arc::new(DeviceEngine::open(ordinal)?);
    r.insert(ordinal, e.clone());
    Ok(e)
}

/// Memory statistics of every device augscope has opened.
pub fn mem_stats() -> Vec<MemStats> {
    let r = lock(registry());
    let mut v: Vec<MemStats> = r.values().map(|e| e.dev.mem_stats()).collect();
    v.sort_by_key(|m| m.ordinal);
    v
}

/// Device-to-device copy bandwidth of device `ordinal` in bytes per second (bytes read plus
/// written), from CUDA events around `reps` copies of a `bytes`-byte buffer: the ceiling every
/// memory-bound kernel is measured against.
pub fn d2d_bandwidth(ordinal: usize, bytes: usize, reps: usize) -> Result<f64, EngineError> {
    let eng = device_engine(ordinal)?;
    let n = bytes / 4;
    let a = DevBuf::<f32>::new(&eng.dev, n, "the bandwidth probe")?;
    let mut b = DevBuf::<f32>::new(&eng.dev, n, "the bandwidth probe")?;
    let stream = &eng.dev.stream;
    stream
        .memset_zeros(&mut b.s)
        .map_err(|e| driver_error("bandwidth probe", e))?;
    for _ in 0..3 {
        stream
            .memcpy_dtod(&a.s, &mut b.s)
            .map_err(|e| driver_error("bandwidth probe", e))?;
    }
    let e0 = eng.event(stream)?;
    for _ in 0..reps.max(1) {
        stream
            .memcpy_dtod(&a.s, &mut b.s)
            .map_err(|e| driver_error("bandwidth probe", e))?;
    }
    let e1 = eng.event(stream)?;
    e1.synchronize()
        .map_err(|e| driver_error("bandwidth probe", e))?;
    let ms = e0.elapsed_ms(&e1).map_err(|e| driver_error("timing", e))? as f64 / reps.max(1) as f64;
    Ok(2.0 * (n * 4) as f64 / (ms * 1e-3))
}

/// Pinned host-to-device and device-to-host copy rates of one device, bytes per second.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PcieRates {
    /// Host to device, alone.
    pub h2d: f64,
    /// Device to host, alone.
    pub d2h: f64,
    /// Each direction while the other runs (the two copy engines at once).
    pub duplex_h2d: f64,
    pub duplex_d2h: f64,
}

/// The pinned copy rates of device `ordinal` from CUDA events around `reps` copies of `bytes`
/// bytes each way: alone, and both directions at once (on the copy stream and the compute
/// stream). The floor of every host→host figure: one volume's upload and download cannot overlap
/// (its output needs all of its input), so its floor is the sum of the two alone.
pub fn pcie_bandwidth(ordinal: usize, bytes: usize, reps: usize) -> Result<PcieRates, EngineError> {
    let eng = device_engine(ordinal)?;
    let n = (bytes / 4).max(1);
    let reps = reps.max(1);
    let err = |e| driver_error("bandwidth probe", e);
    // SAFETY: page-locked host memory of n f32 each; `up` is written before any copy reads it,
    // `down` is only written by the copies.
    let mut up = unsafe { eng.dev.ctx.alloc_pinned_with_flags::<f32>(n, 0) }.map_err(err)?;
    let mut down = unsafe { eng.dev.ctx.alloc_pinned_with_flags::<f32>(n, 0) }.map_err(err)?;
    up.as_mut_slice().map_err(err)?.fill(1.0);
    let mut a = DevBuf::<f32>::new(&eng.dev, n, "the bandwidth probe")?;
    let b = DevBuf::<f32>::new(&eng.dev, n, "the bandwidth probe")?;
    let (cs, ks) = (&eng.dev.copy_stream, &eng.dev.stream);
    // Warm both directions once.
    cs.memcpy_htod(&up, &mut a.s).map_err(err)?;
    ks.memcpy_dtoh(&b.s, &mut down).map_err(err)?;
    cs.synchronize().map_err(err)?;
    ks.synchronize().map_err(err)?;
    let rate = |e0: &cudarc::driver::CudaEvent, e1: &cudarc::driver::CudaEvent| {
        e1.synchronize().map_err(err)?;
        let ms = e0.elapsed_ms(e1).map_err(|e| driver_error("timing", e))? as f64;
        Ok::<f64, EngineError>((n * 4 * reps) as f64 / (ms * 1e-3))
    };
    let e0 = eng.event(cs)?;
    for _ in 0..reps {
        cs.memcpy_htod(&up, &mut a.s).map_err(err)?;
    }
    let h2d = rate(&e0, &eng.event(cs)?)?;
    let e0 = eng.event(ks)?;
    for _ in 0..reps {
        ks.memcpy_dtoh(&b.s, &mut down).map_err(err)?;
    }
    let d2h = rate(&e0, &eng.event(ks)?)?;
    // Both at once: the copy stream starts when the compute stream does.
    let e0 = eng.event(ks)?;
    cs.wait(&e0).map_err(err)?;
    for _ in 0..reps {
        cs.memcpy_htod(&up, &mut a.s).map_err(err)?;
        ks.memcpy_dtoh(&b.s, &mut down).map_err(err)?;
    }
    let (eu, ed) = (eng.event(cs)?, eng.event(ks)?);
    Ok(PcieRates {
        h2d,
        d2h,
        duplex_h2d: rate(&e0, &eu)?,
        duplex_d2h: rate(&e0, &ed)?,
    })
}

/// Frees every cache and context augscope holds on the GPUs (the end of the RAII scope).
pub fn release_all() {
    let engines: Vec<Arc<DeviceEngine>> = lock(registry()).drain().map(|(_, e)| e).collect();
    for e in &engines {
        e.drop_caches();
    }
}

/// Frees what augscope holds on every open device (the cached elastic field, the work buffers,
/// the pinned staging memory), keeping the devices and their compiled kernels.
pub fn free_caches() {
    let engines: Vec<Arc<DeviceEngine>> = lock(registry()).values().cloned().collect();
    for e in &engines {
        e.drop_caches();
    }
}
