//! The unit elastic field on the device: the separable gaussian passes with the Philox noise
//! generated inside the first, and the cache of the last field (by its [`FieldSpec`]).

use std::sync::Arc;

use cudarc::driver::{CudaFunction, CudaSlice, CudaStream, LaunchConfig, PushKernelArg};

use crate::core::FieldSpec;
use crate::engine::EngineError;
use crate::gpu::buffer::{DevBuf, ensure};

use super::device::{CachedField, State};
use super::kernels::{BLOCK, FIELD_TL, axis_split, contiguous_pass, field_pass_entry};
use super::{DeviceEngine, Family, FieldWeights, driver_error, field_defines, field_weights};
/// The device time of a field computation: nothing when the cached field was reused, else the
/// events around its passes, read once the last pass has finished.
pub(super) enum FieldTime {
    Cached,
    Queued(cudarc::driver::CudaEvent, cudarc::driver::CudaEvent),
}

impl FieldTime {
    /// Milliseconds on the device (0 when cached); waits for the passes to finish.
    pub(super) fn ms(&self) -> Result<f64, EngineError> {
        match self {
            FieldTime::Cached => Ok(0.0),
            FieldTime::Queued(e0, e1) => {
                e1.synchronize()
                    .map_err(|e| driver_error("the elastic field", e))?;
                Ok(e0.elapsed_ms(e1).map_err(|e| driver_error("timing", e))? as f64)
            }
        }
    }
}

/// One separable pass of the field over `slabs` consecutive slabs of `shape` each: slab g (global
/// index, `slab0 + ` the launch's own) is component g % ndim of sample g / ndim of a batch.
pub(super) struct FieldPass<'a> {
    pub(super) shape: &'a [usize],
    pub(super) axis: usize,
    /// The noise pass (axis 0): the input is the Philox noise of each slab; src is unused.
    pub(super) gen_noise: bool,
    /// The Philox key (seed lo, seed hi) of every sample, on the device and on the host.
    pub(super) keys: &'a CudaSlice<u32>,
    pub(super) host_keys: &'a [(u32, u32)],
    pub(super) slab0: usize,
    pub(super) slabs: usize,
    pub(super) tiled: bool,
    /// The noise pass through `gauss_col_noise_f32` (whole columns in one block).
    pub(super) col: bool,
    /// The weights of this axis (tiled kernels).
    pub(super) wts: FieldWeights,
}

impl FieldPass<'_> {
    pub(super) fn launch(
        &self,
        stream: &Arc<CudaStream>,
        f: &CudaFunction,
        src: &cudarc::driver::CudaView<'_, f32>,
        dst: &mut cudarc::driver::CudaViewMut<'_, f32>,
    ) -> Result<(), EngineError> {
        let ndim = self.shape.len();
        let n: usize = self.shape.iter().product();
        let total = self.slabs * n;
        // The whole-column noise pass reads nothing.
        if (!self.col && src.len() != total) || dst.len() != total || self.slabs == 0 {
            return Err(EngineError::Cuda(
                "field pass buffers of the wrong size".into(),
            ));
        }
        if (self.slab0 + self.slabs).div_ceil(ndim) > self.host_keys.len()
            || self.keys.len() < 2 * self.host_keys.len()
        {
            return Err(EngineError::Cuda(
                "field pass without a key per sample".into(),
            ));
        }
        let (outer, len, inner) = axis_split(self.shape, self.axis);
        let too_large = || {
            EngineError::GpuLimit(format!(
                "{} slabs of {:?} are too many for the field kernels",
                self.slabs, self.shape
            ))
        };
        let gen_noise = self.gen_noise as i32;
        let (slab0, ndim_i) = (self.slab0 as i32, ndim as i32);
        if self.col {
            if self.axis != 0
                || !self.gen_noise
                || inner.div_ceil(32) > (1 << 31) - 1
                || self.slabs > 65535
            {
                return Err(too_large());
            }
            let cfg = LaunchConfig {
                grid_dim: (inner.div_ceil(32) as u32, self.slabs as u32, 1),
                block_dim: (32, 8, 1),
                shared_mem_bytes: 0,
            };
            let (len_i, inner_i) = (len as i32, inner as i64);
            let mut b = stream.launch_builder(f);
            b.arg(dst).arg(&len_i).arg(&inner_i);
            b.arg(self.keys).arg(&slab0).arg(&ndim_i).arg(&self.wts);
            // SAFETY: gauss_col_noise_f32(float* dst, int n, i64 inner, const u32* keys,
            // int slab0, int ndim, FieldWeights): dst is a view of exactly slabs * n * inner
            // elements (outer = 1 on axis 0, checked above) and block y writes slab y only; keys
            // holds 2 values per sample and every slab's sample is below host_keys.len()
            // (checked above); the kernel bounds-checks col < inner and i < n, and the host only
            // picks it when n + 2R <= COL_ROWS (its shared tile).
            unsafe { b.launch(cfg) }.map_err(|e| driver_error("gauss_col_noise_f32", e))?;
        } else if !self.tiled {
            // One launch per slab, with that slab's key.
            let cfg = LaunchConfig {
                grid_dim: (n.div_ceil(BLOCK as usize).clamp(1, 1 << 20) as u32, 1, 1),
                block_dim: (BLOCK, 1, 1),
                shared_mem_bytes: 0,
            };
            for s in 0..self.slabs {
                let g = self.slab0 + s;
                let (key0, key1) = self.host_keys[g / ndim];
                let kk = (g % ndim) as u32;
                let src_s = src.slice(s * n..(s + 1) * n);
                let mut dst_s = dst.slice_mut(s * n..(s + 1) * n);
                let (n_comp, ncomp, len_i, inner_i) = (n as i64, 1i32, len as i32, inner as i64);
                let mut b = stream.launch_builder(f);
                b.arg(&src_s)
                    .arg(&mut dst_s)
                    .arg(&n_comp)
                    .arg(&ncomp)
                    .arg(&len_i)
                    .arg(&inner_i);
                b.arg(&gen_noise).arg(&key0).arg(&key1).arg(&kk);
                // SAFETY: gauss_direct_f32(const float* src, float* dst, i64 n_comp, int ncomp,
                // int n, i64 inner, int gen_noise, u32 key0, u32 key1, u32 noise_k): src and dst
                // are views of exactly n = n_comp elements (one slab), ncomp = 1; the grid-stride
                // loop stays below n_comp * ncomp.
                unsafe { b.launch(cfg) }.map_err(|e| driver_error("gauss_direct_f32", e))?;
            }
        } else if !contiguous_pass(self.axis, self.shape) {
            let outer_all = self.slabs * outer;
            if outer_all > i32::MAX as usize || len.div_ceil(FIELD_TL) > 65535 {
                return Err(too_large());
            }
            let (outer_i, len_i, inner_i) = (outer_all as i32, len as i32, inner as i64);
            let comp_outer = outer as i32;
            // The grid's z extent is at most 65535: longer runs of `outer` in parts, each from
            // its first index o0.
            for o0 in (0..outer_all).step_by(65535) {
                let cfg = LaunchConfig {
                    grid_dim: (
                        inner.div_ceil(32) as u32,
                        len.div_ceil(FIELD_TL) as u32,
                        (outer_all - o0).min(65535) as u32,
                    ),
                    block_dim: (32, 8, 1),
                    shared_mem_bytes: 0,
                };
                let o0_i = o0 as i32;
                let mut b = stream.launch_builder(f);
                b.arg(src)
                    .arg(&mut *dst)
                    .arg(&outer_i)
                    .arg(&len_i)
                    .arg(&inner_i);
                b.arg(&gen_noise)
                    .arg(self.keys)
                    .arg(&slab0)
                    .arg(&comp_outer)
                    .arg(&ndim_i)
                    .arg(&self.wts)
                    .arg(&o0_i);
                // SAFETY: gauss_mid_f32(const float* src, float* dst, int outer, int n,
                // i64 inner, int gen_noise, const u32* keys, int slab0, int comp_outer, int ndim,
                // FieldWeights, int o0): src and dst are views of exactly outer_all * n * inner
                // elements (checked above); keys holds 2 values per sample of every slab
                // (checked above); the kernel bounds-checks i < n and col < inner, and
                // o0 + blockIdx.z < outer_all by the grid.
                unsafe { b.launch(cfg) }.map_err(|e| driver_error("gauss_mid_f32", e))?;
            }
        } else {
            let lines = self.slabs * outer;
            if lines.div_ceil(32) > (1 << 31) - 1 || len.div_ceil(FIELD_TL) > 65535 {
                return Err(too_large());
            }
            let cfg = LaunchConfig {
                grid_dim: (lines.div_ceil(32) as u32, len.div_ceil(FIELD_TL) as u32, 1),
                block_dim: (32, 8, 1),
                shared_mem_bytes: 0,
            };
            let (lines_i, len_i) = (lines as i64, len as i32);
            let mut b = stream.launch_builder(f);
            b.arg(src).arg(dst).arg(&lines_i).arg(&len_i).arg(&self.wts);
            // SAFETY: gauss_last_f32(const float* src, float* dst, i64 lines, int n, FieldWeights):
            // src and dst are views of exactly lines * n elements (the last axis, inner = 1;
            // checked above); the kernel bounds-checks line < lines and i < n.
            unsafe { b.launch(cfg) }.map_err(|e| driver_error("gauss_last_f32", e))?;
        }
        Ok(())
    }
}

/// The kernels of a field's passes, one per axis: (tiled, whole-column noise pass, weights,
/// function).
pub(super) type FieldKernels = Vec<(bool, bool, FieldWeights, CudaFunction)>;

/// Philox keys (seed lo, seed hi) of seeds.
pub(super) fn philox_keys(seeds: &[u64]) -> Vec<(u32, u32)> {
    seeds
        .iter()
        .map(|&s| (s as u32, (s >> 32) as u32))
        .collect()
}

impl DeviceEngine {
    /// The kernels of the field passes of `sigma_vox` on `shape`, one per axis, each built with
    /// that axis's weights (one build per entry and radius; see [`field_pass_entry`]).
    pub(super) fn field_kernels(
        &self,
        sigma_vox: &[f64],
        shape: &[usize],
    ) -> Result<FieldKernels, EngineError> {
        let ndim = shape.len();
        let mut kernels = Vec::with_capacity(ndim);
        for (axis, &sigma) in sigma_vox.iter().enumerate() {
            let (tiled, col, name) = field_pass_entry(sigma, axis, shape);
            kernels.push((
                tiled,
                col,
                field_weights(sigma),
                self.function(Family::Field, &field_defines(sigma), name)?,
            ));
        }
        Ok(kernels)
    }

    /// Copies the samples' Philox keys into `slot` (two u32 per sample).
    pub(super) fn upload_keys<'a>(
        &self,
        slot: &'a mut Option<DevBuf<u32>>,
        keys: &[(u32, u32)],
    ) -> Result<&'a CudaSlice<u32>, EngineError> {
        let flat: Vec<u32> = keys.iter().flat_map(|&(a, b)| [a, b]).collect();
        let buf = ensure(&self.dev, slot, flat.len(), "the noise keys")?;
        let mut dst = buf.s.slice_mut(0..flat.len());
        self.dev
            .stream
            .memcpy_htod(&flat, &mut dst)
            .map_err(|e| driver_error("the noise keys", e))?;
        Ok(&buf.s)
    }

    /// The passes `passes` (axes) of the unit field of `slabs` consecutive slabs (global slab
    /// `slab0` first;
    /// slab g is component g % ndim of sample g / ndim, with key `host_keys[g / ndim]`), each of
    /// `shape`, into `out` (slabs * n values); `scratch` holds as many. Pass `axis` reads the
    /// previous pass (pass 0 makes the noise); the passes alternate between `out` and `scratch` so
    /// that the last one ends in `out`: 3D noise→out→scratch→out, 2D noise→scratch→out.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn field_passes(
        &self,
        kernels: &FieldKernels,
        shape: &[usize],
        keys: &CudaSlice<u32>,
        host_keys: &[(u32, u32)],
        slab0: usize,
        slabs: usize,
        passes: std::ops::Range<usize>,
        out: &mut cudarc::driver::CudaViewMut<'_, f32>,
        scratch: &mut cudarc::driver::CudaViewMut<'_, f32>,
    ) -> Result<(), EngineError> {
        let ndim = shape.len();
        let n: usize = shape.iter().product();
        // Slabs per launch: the grid's y and z limits (65535) of the noise and middle passes.
        let per_launch = (0..ndim.saturating_sub(1))
            .map(|a| 65535 / shape[..a].iter().product::<usize>().max(1))
            .min()
            .unwrap_or(65535)
            .clamp(1, 65535);
        let mut first = 0;
        while first < slabs {
            let count = per_launch.min(slabs - first);
            let span = first * n..(first + count) * n;
            for (axis, (tiled, col, wts, f)) in kernels.iter().enumerate() {
                if !passes.contains(&axis) {
                    continue;
                }
                let pass = FieldPass {
                    shape,
                    axis,
                    gen_noise: axis == 0,
                    keys,
                    host_keys,
                    slab0: slab0 + first,
                    slabs: count,
                    tiled: *tiled,
                    col: *col,
                    wts: *wts,
                };
                if (ndim - 1 - axis).is_multiple_of(2) {
                    // The whole-column noise pass reads nothing (its scratch may be empty).
                    let src = if *col {
                        scratch.slice(0..0)
                    } else {
                        scratch.slice(span.clone())
                    };
                    let mut dst = out.slice_mut(span.clone());
                    pass.launch(&self.dev.stream, f, &src, &mut dst)?;
                } else {
                    let src = out.slice(span.clone());
                    let mut dst = scratch.slice_mut(span.clone());
                    pass.launch(&self.dev.stream, f, &src, &mut dst)?;
                }
            }
            first += count;
        }
        Ok(())
    }

    /// Makes sure the unit field of `spec` is on the device.
    /// The passes are queued on the compute stream and not waited for, so that the caller can
    /// upload the image while they run; the returned [`FieldTime`] reads their device time later.
    pub(super) fn ensure_field(
        &self,
        st: &mut State,
        spec: &FieldSpec,
    ) -> Result<FieldTime, EngineError> {
        if st.field.as_ref().is_some_and(|f| f.spec == *spec) {
            return Ok(FieldTime::Cached);
        }
        st.field = None;
        let FieldSpec {
            seed,
            ref sigma_vox,
            ref shape,
        } = *spec;
        let ndim = shape.len();
        if sigma_vox.len() != ndim {
            return Err(EngineError::Cuda(format!(
                "the elastic field of a {ndim}D grid needs {ndim} sigmas, got {}",
                sigma_vox.len()
            )));
        }
        let n: usize = shape.iter().product();
        let stream = &self.dev.stream;
        let mut buf = DevBuf::<f32>::new(&self.dev, ndim * n, "the elastic field")?;
        let scratch = ensure(
            &self.dev,
            &mut st.ws.field_scratch,
            n,
            "the elastic field scratch",
        )?;
        let _busy = self.dev.tracker.in_use(buf.bytes() + scratch.bytes());
        let kernels = self.field_kernels(sigma_vox, shape)?;
        let host_keys = philox_keys(&[seed]);
        let keys = self.upload_keys(&mut st.ws.keys, &host_keys)?;
        // Timed from here: the kernel lookups above (string keys) are host work.
        let e0 = self.event(stream)?;
        // In 3D the noise pass writes the components themselves: with the whole-column kernel
        // (no scratch) it runs over all three in one launch; the other passes go component by
        // component through one scratch volume.
        let noise_together = ndim == 3 && kernels[0].1;
        if noise_together {
            let mut all = buf.s.slice_mut(0..ndim * n);
            let mut none = scratch.s.slice_mut(0..0);
            self.field_passes(
                &kernels,
                shape,
                keys,
                &host_keys,
                0,
                ndim,
                0..1,
                &mut all,
                &mut none,
            )?;
        }
        for k in 0..ndim {
            let mut comp = buf.s.slice_mut(k * n..(k + 1) * n);
            let mut scr = scratch.s.slice_mut(0..n);
            let first = if noise_together { 1 } else { 0 };
            self.field_passes(
                &kernels,
                shape,
                keys,
                &host_keys,
                k,
                1,
                first..ndim,
                &mut comp,
                &mut scr,
            )?;
        }
        let e1 = self.event(stream)?;
        st.field = Some(CachedField {
            spec: spec.clone(),
            buf,
        });
        Ok(FieldTime::Queued(e0, e1))
    }
}
