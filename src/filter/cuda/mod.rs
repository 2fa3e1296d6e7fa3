//! The filters on CUDA: host side of `kernels/filter.cu` (NVRTC through
//! [`crate::gpu::nvrtc::compile`], [`Family::Filter`]), interpreting the same [`Filter`] as
//! [`super::apply_cpu`] and giving the same numbers to f32 rounding (the median exactly).
//!
//! Arrays are `[z, y, x]` (2D `[y, x]`); channels and batch items are one more leading axis, so
//! every kernel launch covers the whole batch ("many images in one launch"). The input and the
//! output are stored on the device in the requested [`Precision`] (f32, f16 or bf16; compute and
//! intermediates are f32). Device memory is counted by the device's tracker, so
//! `AUGSCOPE_GPU_MEM_LIMIT` and a real out-of-memory both surface as
//! [`EngineError::OutOfMemory`], which [`super::run`] retries on the CPU.
//!
//! FEBDS runs whole on the GPU: the enhancement (`dog`, `log`), `|·|`, the 5×5 median, the gamma,
//! the threshold (Otsu's 4096-bin histogram or the local variance test), the 7×7 closing and the
//! hole filling; only the mask comes back. The `fft` method's FFT runs on the GPU through cuFFT
//! (cudarc, f32 R2C/C2R, plans cached per shape); where libcufft cannot be loaded, on the CPU
//! (augscope's own radix-2/Bluestein in `super::fft`, f64).
#![allow(unsafe_code)] // Kernel launches are FFI (cudarc's `launch` is unsafe); each block says what it checked. The runtime under them is `crate::gpu`.

mod febds_gpu;
mod febds_segment;

pub use febds_gpu::cufft_available;
use febds_gpu::febds_gpu;
pub use febds_segment::{febds_segment, fill_holes};

use std::sync::Arc;

use cudarc::cufft::CudaFft;
use cudarc::cufft::sys::{cufftType, float2};
use cudarc::driver::{
    CudaFunction, CudaSlice, CudaStream, DeviceRepr, LaunchConfig, PushKernelArg, ValidAsZeroBits,
};

use super::febds::{self, Method};
use super::separable::TRUNCATE;
use super::{Boundary, Filter};
use crate::core::gaussian::gaussian_kernel1d;
use crate::engine::boundary::Mode;
use crate::engine::cuda::{DeviceEngine, device_engine, driver_error, grid_1d};
use crate::engine::{EngineError, Precision};
use crate::gpu::buffer::Borrowed;
use crate::gpu::device::Reservation;
use crate::gpu::nvrtc::{Family, compile, mode_defines};

/// Threads of the contiguous-axis tile (LINE_T in kernels/filter.cu).
const LINE_T: usize = 256;
/// Outputs along the axis per block of the strided pass (STR_L), columns per block (32).
const STR_L: usize = 64;
/// Dynamic shared memory a tile may use (the default limit without opt-in).
const SMEM_MAX: usize = 48 * 1024;

/// Defines of one filter build: the mode values, the mode, the storage type, the median window.
pub fn filter_defines(mode: Mode, store: Precision, median: Option<[usize; 3]>) -> Vec<String> {
    let mut d = mode_defines(mode);
    d.push(
        match store {
            Precision::F32 => "-DSTORE_F32",
            Precision::F16 => "-DSTORE_F16",
            Precision::Bf16 => "-DSTORE_BF16",
        }
        .into(),
    );
    if let Some([k0, k1, k2]) = median {
        d.push(format!("-DMED_K0={k0}"));
        d.push(format!("-DMED_K1={k1}"));
        d.push(format!("-DMED_K2={k2}"));
        if let Some(axis) = median_pair([k0, k1, k2]) {
            d.push(format!("-DMED_PAIR={axis}"));
        }
    }
    d
}

/// The axis (0 or 1) along which a thread of the median kernel makes two outputs, or `None`: the
/// register network holds `N / 2 + 2 <= 64` values of an `N`-tap window, and a pair needs the
/// taps both windows share to fill it (as `kernels/filter.cu` requires).
pub fn median_pair(k: [usize; 3]) -> Option<usize> {
    let n = k[0] * k[1] * k[2];
    let keep = n / 2 + 2;
    if n <= 1 || keep > 64 {
        return None;
    }
    if k[0] > 1 && (k[0] - 1) * k[1] * k[2] >= keep {
        Some(0)
    } else if k[1] > 1 && k[0] * (k[1] - 1) * k[2] >= keep {
        Some(1)
    } else {
        None
    }
}

/// Compiles the filter programs (the CI compile check, no GPU needed): each mode × storage type,
/// the 5³ median in each mode and the 3×3, 5×5, 3³ and 7³ medians in one. Returns the number of
/// programs.
pub fn compile_all(arch: Option<&'static str>) -> Result<usize, EngineError> {
    let mut n = 0;
    for mode in Mode::ALL {
        for p in [Precision::F32, Precision::F16, Precision::Bf16] {
            compile(Family::Filter, &filter_defines(mode, p, None), arch)?;
            n += 1;
        }
        let d = filter_defines(mode, Precision::F32, Some([5, 5, 5]));
        compile(Family::Filter, &d, arch)?;
        n += 1;
    }
    for k in [
        [1, 1, 3],
        [1, 3, 3],
        [1, 5, 5],
        [1, 11, 11],
        [3, 3, 3],
        [3, 5, 7],
        [7, 7, 7],
    ] {
        let d = filter_defines(Mode::Reflect, Precision::F32, Some(k));
        compile(Family::Filter, &d, arch)?;
        n += 1;
    }
    Ok(n)
}

/// One device's view for one filter call.
struct Gpu {
    eng: Arc<DeviceEngine>,
    ordinal: usize,
    precision: Precision,
    /// Reservations of the buffers alive in this call.
    held: Vec<Reservation>,
}

impl Gpu {
    fn stream(&self) -> &Arc<CudaStream> {
        &self.eng.dev.stream
    }

    /// A filter kernel, from the device's store of loaded kernels.
    fn function(&self, defines: &[String], name: &str) -> Result<CudaFunction, EngineError> {
        Ok(self.eng.dev.function(Family::Filter, defines, name)?)
    }

    /// A zeroed buffer of `n` values of `T`, counted by the device's tracker.
    fn alloc_zeroed<T: DeviceRepr + ValidAsZeroBits>(
        &mut self,
        n: usize,
        what: &str,
    ) -> Result<CudaSlice<T>, EngineError> {
        self.held.push(
            self.eng
                .dev
                .tracker
                .reserve(n.max(1) * std::mem::size_of::<T>(), what)?,
        );
        self.stream()
            .alloc_zeros::<T>(n.max(1))
            .map_err(|e| driver_error(what, e))
    }

    /// A zeroed f32 buffer of `n` values, counted by the device's tracker.
    fn alloc(&mut self, n: usize, what: &str) -> Result<CudaSlice<f32>, EngineError> {
        self.alloc_zeroed(n, what)
    }

    /// Uploads `data` in the storage precision and widens it to f32 on the device.
    fn upload(&mut self, data: &[f32], mode: Mode) -> Result<CudaSlice<f32>, EngineError> {
        let what = "the filter input";
        if self.precision == Precision::F32 {
            // Through the engine's pinned, chunked staging (several times pageable bandwidth).
            let mut x = self.alloc(data.len(), what)?;
            self.eng.upload_f32(data, &mut x)?;
            return Ok(x);
        }
        let bits = to_bits(data, self.precision);
        self.held
            .push(self.eng.dev.tracker.reserve(bits.len() * 2, what)?);
        let stored = self
            .stream()
            .clone_htod(&bits)
            .map_err(|e| driver_error(what, e))?;
        let mut x = self.alloc(data.len(), what)?;
        let f = self.function(
            &filter_defines(mode, self.precision, None),
            "from_store_f32",
        )?;
        let n = data.len() as i64;
        let mut b = self.stream().launch_builder(&f);
        b.arg(&stored).arg(&mut x).arg(&n);
        // SAFETY: from_store_f32(const store_t*, float*, long long n): `stored` holds n values of
        // the build's store_t (u16 bits), `x` n floats; threads with i >= n return.
        unsafe { b.launch(grid_1d(data.len())?) }.map_err(|e| driver_error("from_store_f32", e))?;
        Ok(x)
    }

    /// [`Self::upload`] from the caller's input: host values, or `n` f32 values in this device's
    /// memory (copied on the device, rounded to the storage precision there as the host path
    /// rounds them before the upload).
    fn upload_from(&mut self, src: Arrays<'_>, mode: Mode) -> Result<CudaSlice<f32>, EngineError> {
        let (image, len) = match src {
            Arrays::Host(data) => return self.upload(data, mode),
            Arrays::Device { image, len, .. } => (image, len),
        };
        let stream = self.stream().clone();
        // SAFETY: apply_device's contract: `image` holds `len` f32 values on this device, alive
        // and unwritten by other work for the call.
        let input = unsafe { Borrowed::<f32>::new(&stream, image, len) };
        let mut x = self.alloc(len, "the filter input")?;
        if self.precision == Precision::F32 {
            stream
                .memcpy_dtod(&*input, &mut x)
                .map_err(|e| driver_error("the filter input", e))?;
        } else {
            let mut stored = self.alloc_u16(len, "the filter input")?;
            self.convert(&*input, &mut stored, len, mode, "to_store_f32")?;
            self.convert(&stored, &mut x, len, mode, "from_store_f32")?;
        }
        Ok(x)
    }

    /// A u16 buffer of `n` values (storage-type bits), counted by the device's tracker.
    fn alloc_u16(&mut self, n: usize, what: &str) -> Result<CudaSlice<u16>, EngineError> {
        self.alloc_zeroed(n, what)
    }

    /// `to_store_f32` (f32 → storage bits) or `from_store_f32` (bits → f32) over `n` values.
    fn convert<A: cudarc::driver::DeviceRepr, B: cudarc::driver::DeviceRepr>(
        &self,
        src: &CudaSlice<A>,
        dst: &mut CudaSlice<B>,
        n: usize,
        mode: Mode,
        name: &str,
    ) -> Result<(), EngineError> {
        let f = self.function(&filter_defines(mode, self.precision, None), name)?;
        let nn = n as i64;
        let mut b = self.stream().launch_builder(&f);
        b.arg(src).arg(dst).arg(&nn);
        // SAFETY: to_store_f32(const float*, store_t*, long long n) and from_store_f32(const
        // store_t*, float*, long long n): the callers pass f32 and u16 buffers in that order,
        // each of >= n values; threads with i >= n return.
        unsafe { b.launch(grid_1d(n)?) }.map_err(|e| driver_error(name, e))?;
        Ok(())
    }

    /// [`Self::download`] into the caller's output: a new host vector, or `out`, `n` f32 values
    /// in this device's memory (an empty vector is returned then). Rounded to the storage
    /// precision on the device, as on the host path.
    fn download_to(
        &mut self,
        x: &CudaSlice<f32>,
        n: usize,
        mode: Mode,
        dst: Arrays<'_>,
    ) -> Result<Vec<f32>, EngineError> {
        let Arrays::Device { out, .. } = dst else {
            return self.download(x, n, mode);
        };
        let stream = self.stream().clone();
        // SAFETY: apply_device's contract: `out` holds `n` f32 values on this device, alive and
        // unused by other work for the call.
        let mut o = unsafe { Borrowed::<f32>::new(&stream, out, n) };
        if self.precision == Precision::F32 {
            stream
                .memcpy_dtod(&x.slice(0..n), &mut *o)
                .map_err(|e| driver_error("the filter output", e))?;
        } else {
            let mut stored = self.alloc_u16(n, "the filter output")?;
            self.convert(x, &mut stored, n, mode, "to_store_f32")?;
            self.convert(&stored, &mut *o, n, mode, "from_store_f32")?;
        }
        stream
            .synchronize()
            .map_err(|e| driver_error("filter", e))?;
        Ok(Vec::new())
    }

    /// Rounds `x` to the storage precision on the device and downloads it as f32.
    fn download(
        &mut self,
        x: &CudaSlice<f32>,
        n: usize,
        mode: Mode,
    ) -> Result<Vec<f32>, EngineError> {
        let what = "the filter output";
        let out = if self.precision == Precision::F32 {
            let mut out = vec![0f32; n];
            self.eng.download_f32(x, &mut out)?;
            out
        } else {
            let mut stored = self.alloc_u16(n, what)?;
            let f = self.function(&filter_defines(mode, self.precision, None), "to_store_f32")?;
            let nn = n as i64;
            let mut b = self.stream().launch_builder(&f);
            b.arg(x).arg(&mut stored).arg(&nn);
            // SAFETY: to_store_f32(const float*, store_t*, long long n): `x` holds >= n floats,
            // `stored` >= n u16 (store_t is unsigned short in the half builds); i >= n returns.
            unsafe { b.launch(grid_1d(n)?) }.map_err(|e| driver_error("to_store_f32", e))?;
            let bits = self
                .stream()
                .clone_dtoh(&stored.slice(0..n))
                .map_err(|e| driver_error(what, e))?;
            from_bits(&bits, self.precision)
        };
        self.stream()
            .synchronize()
            .map_err(|e| driver_error("filter", e))?;
        Ok(out)
    }

    /// One separable pass along `axis` of `count` arrays of `shape`, `src` into `dst`.
    #[allow(clippy::too_many_arguments)] // one launch's geometry; a struct would only rename them
    fn pass(
        &self,
        src: &CudaSlice<f32>,
        dst: &mut CudaSlice<f32>,
        shape: &[usize],
        count: usize,
        axis: usize,
        weights: &[f64],
        b: Boundary,
    ) -> Result<(), EngineError> {
        let r = weights.len() / 2;
        let half: Vec<f32> = weights[r..].iter().map(|&v| v as f32).collect();
        let w = self
            .stream()
            .clone_htod(&half)
            .map_err(|e| driver_error("filter weights", e))?;
        let defs = filter_defines(b.mode, Precision::F32, None);
        let outer = count * shape[..axis].iter().product::<usize>();
        let n = shape[axis];
        let inner: usize = shape[axis + 1..].iter().product();
        let (ri, nl, il) = (r as i32, n as i64, inner as i64);
        let line_smem = (LINE_T + 2 * r) * 4;
        let str_smem = (STR_L + 2 * r) * 32 * 4;
        if inner == 1 && line_smem <= SMEM_MAX && n.div_ceil(LINE_T) <= 65535 {
            let f = self.function(&defs, "sep_line_f32")?;
            let cfg = LaunchConfig {
                grid_dim: (outer as u32, n.div_ceil(LINE_T) as u32, 1),
                block_dim: (LINE_T as u32, 1, 1),
                shared_mem_bytes: line_smem as u32,
            };
            if outer > i32::MAX as usize {
                return Err(EngineError::Shape("too many lines for one launch".into()));
            }
            let mut lb = self.stream().launch_builder(&f);
            lb.arg(src).arg(dst).arg(&w).arg(&ri).arg(&nl).arg(&b.cval);
            // SAFETY: sep_line_f32(const float* src, float* dst, const float* w, int r,
            // long long n, float cval): src and dst hold outer * n floats (grid.x = outer lines,
            // grid.y * 256 >= n, i >= n returns), w holds r + 1 floats, the dynamic shared memory
            // is the (256 + 2r)-float tile.
            unsafe { lb.launch(cfg) }.map_err(|e| driver_error("sep_line_f32", e))?;
        } else if inner > 1 && str_smem <= SMEM_MAX && outer <= 65535 && n.div_ceil(STR_L) <= 65535
        {
            let f = self.function(&defs, "sep_strided_f32")?;
            let cfg = LaunchConfig {
                grid_dim: (
                    inner.div_ceil(32) as u32,
                    n.div_ceil(STR_L) as u32,
                    outer as u32,
                ),
                block_dim: (32, 8, 1),
                shared_mem_bytes: str_smem as u32,
            };
            if inner.div_ceil(32) > i32::MAX as usize {
                return Err(EngineError::Shape("rows too long for one launch".into()));
            }
            let mut lb = self.stream().launch_builder(&f);
            lb.arg(src)
                .arg(dst)
                .arg(&w)
                .arg(&ri)
                .arg(&nl)
                .arg(&il)
                .arg(&b.cval);
            // SAFETY: sep_strided_f32(src, dst, w, int r, long long n, long long inner, cval):
            // src and dst hold outer * n * inner floats (grid.z = outer, columns >= inner and
            // rows >= n are skipped), w holds r + 1 floats, shared memory is the
            // (64 + 2r) x 32-float tile.
            unsafe { lb.launch(cfg) }.map_err(|e| driver_error("sep_strided_f32", e))?;
        } else {
            let f = self.function(&defs, "sep_direct_f32")?;
            let total = outer * n * inner;
            let tl = total as i64;
            let mut lb = self.stream().launch_builder(&f);
            lb.arg(src)
                .arg(dst)
                .arg(&w)
                .arg(&ri)
                .arg(&nl)
                .arg(&il)
                .arg(&tl)
                .arg(&b.cval);
            // SAFETY: sep_direct_f32(src, dst, w, r, n, inner, total, cval): src and dst hold
            // total = outer * n * inner floats, one thread per output, k >= total returns; w
            // holds r + 1 floats.
            unsafe { lb.launch(grid_1d(total)?) }.map_err(|e| driver_error("sep_direct_f32", e))?;
        }
        Ok(())
    }

    /// Gaussian (derivative `orders[a]` on axis `a`) of `src` into a new buffer.
    fn gaussian(
        &mut self,
        src: &CudaSlice<f32>,
        shape: &[usize],
        count: usize,
        sigma: &[f64],
        orders: &[u32],
        b: Boundary,
    ) -> Result<CudaSlice<f32>, EngineError> {
        let total = src.len();
        let mut a = self.alloc(total, "a gaussian buffer")?;
        self.stream()
            .memcpy_dtod(src, &mut a)
            .map_err(|e| driver_error("copy", e))?;
        let mut t = self.alloc(total, "a gaussian buffer")?;
        for axis in 0..shape.len() {
            if sigma[axis] <= 1e-15 {
                continue;
            }
            let w = gaussian_kernel1d(sigma[axis], orders[axis], TRUNCATE);
            self.pass(&a, &mut t, shape, count, axis, &w, b)?;
            std::mem::swap(&mut a, &mut t);
        }
        Ok(a)
    }

    /// `acc += alpha * x` over `n` values.
    fn axpy(
        &self,
        acc: &mut CudaSlice<f32>,
        x: &CudaSlice<f32>,
        alpha: f32,
    ) -> Result<(), EngineError> {
        let f = self.function(
            &filter_defines(Mode::Reflect, Precision::F32, None),
            "axpy_f32",
        )?;
        let n = acc.len().min(x.len());
        let nl = n as i64;
        let mut lb = self.stream().launch_builder(&f);
        lb.arg(acc).arg(x).arg(&alpha).arg(&nl);
        // SAFETY: axpy_f32(float* acc, const float* x, float a, long long n): both hold >= n
        // floats; i >= n returns.
        unsafe { lb.launch(grid_1d(n)?) }.map_err(|e| driver_error("axpy_f32", e))?;
        Ok(())
    }

    /// A point-wise kernel `name(float* x, float p0, float p1, long long n)` (or without
    /// parameters for `abs_f32`).
    fn pointwise(
        &self,
        x: &mut CudaSlice<f32>,
        name: &str,
        p: Option<(f32, f32)>,
    ) -> Result<(), EngineError> {
        let f = self.function(&filter_defines(Mode::Reflect, Precision::F32, None), name)?;
        let nl = x.len() as i64;
        let n = x.len();
        let mut lb = self.stream().launch_builder(&f);
        lb.arg(x);
        if let Some((a, c)) = &p {
            lb.arg(a).arg(c);
        }
        lb.arg(&nl);
        // SAFETY: gamma_f32 / contrast_f32 (float* x, float, float, long long n) and
        // abs_f32(float* x, long long n): x holds n floats; i >= n returns.
        unsafe { lb.launch(grid_1d(n)?) }.map_err(|e| driver_error(name, e))?;
        Ok(())
    }

    /// Median over the odd box `size` of `count` arrays of `shape` (1 to 3 axes).
    fn median(
        &mut self,
        src: &CudaSlice<f32>,
        shape: &[usize],
        count: usize,
        size: &[usize],
        b: Boundary,
    ) -> Result<CudaSlice<f32>, EngineError> {
        let mut s = [1usize; 3];
        let mut k = [1usize; 3];
        let off = 3 - shape.len();
        s[off..].copy_from_slice(shape);
        k[off..].copy_from_slice(size);
        let [d, h, w] = s;
        let pair = median_pair(k);
        let (gy, gz) = match pair {
            Some(0) => (h.div_ceil(8), count * d.div_ceil(2)),
            Some(_) => (h.div_ceil(16), count * d),
            None => (h.div_ceil(8), count * d),
        };
        if gz > 65535 || gy > 65535 {
            return Err(EngineError::Shape(format!(
                "{count} arrays of {shape:?} are too many for one median launch"
            )));
        }
        let f = self.function(
            &filter_defines(b.mode, Precision::F32, Some(k)),
            "median_f32",
        )?;
        let mut out = self.alloc(src.len(), "the median output")?;
        let (dl, hl, wl) = (d as i64, h as i64, w as i64);
        let cfg = LaunchConfig {
            grid_dim: (w.div_ceil(32) as u32, gy as u32, gz as u32),
            block_dim: (32, 8, 1),
            shared_mem_bytes: 0,
        };
        let mut lb = self.stream().launch_builder(&f);
        lb.arg(src)
            .arg(&mut out)
            .arg(&dl)
            .arg(&hl)
            .arg(&wl)
            .arg(&b.cval);
        // SAFETY: median_f32(const float* src, float* dst, long long d, h, w, float cval): src
        // and dst hold count * d * h * w floats; the grid is the kernel's for this build's
        // MED_PAIR (from `median_pair`, as in `filter_defines`): grid.z = count * d, or
        // count * ceil(d / 2) for pairs along axis 0 (the second output stored only if z + 1 < d);
        // grid.y = ceil(h / 8), or ceil(h / 16) for pairs along axis 1 (stored only if y + 1 < h);
        // x >= w or y >= h return. The window sizes are the build's MED_K* defines.
        unsafe { lb.launch(cfg) }.map_err(|e| driver_error("median_f32", e))?;
        Ok(out)
    }

    /// FEBDS `log`'s 3×3 Laplacian of `count` 2D images.
    fn laplace3x3(
        &mut self,
        g: &CudaSlice<f32>,
        [h, w]: [usize; 2],
    ) -> Result<CudaSlice<f32>, EngineError> {
        let f = self.function(
            &filter_defines(Mode::Mirror, Precision::F32, None),
            "laplace3x3_f32",
        )?;
        let mut out = self.alloc(g.len(), "the Laplacian")?;
        let (hl, wl, tl) = (h as i64, w as i64, g.len() as i64);
        let mut lb = self.stream().launch_builder(&f);
        lb.arg(g).arg(&mut out).arg(&hl).arg(&wl).arg(&tl);
        // SAFETY: laplace3x3_f32(const float* g, float* out, long long h, w, total): both hold
        // total = batch * h * w floats; k >= total returns.
        unsafe { lb.launch(grid_1d(g.len())?) }.map_err(|e| driver_error("laplace3x3_f32", e))?;
        Ok(out)
    }
}

fn to_bits(data: &[f32], p: Precision) -> Vec<u16> {
    match p {
        Precision::F16 => data
            .iter()
            .map(|&v| half::f16::from_f32(v).to_bits())
            .collect(),
        _ => data
            .iter()
            .map(|&v| half::bf16::from_f32(v).to_bits())
            .collect(),
    }
}

fn from_bits(bits: &[u16], p: Precision) -> Vec<f32> {
    match p {
        Precision::F16 => bits
            .iter()
            .map(|&b| half::f16::from_bits(b).to_f32())
            .collect(),
        _ => bits
            .iter()
            .map(|&b| half::bf16::from_bits(b).to_f32())
            .collect(),
    }
}

/// Device times of one [`apply_timed`] (CUDA events), in milliseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct FilterTimings {
    /// Host to device, including the widening from the storage type.
    pub upload_ms: f64,
    /// The filter's kernels.
    pub compute_ms: f64,
    /// The rounding to the storage type and device to host.
    pub download_ms: f64,
}

/// Where one filter call's arrays are: host values, or `len` f32 values at the addresses `image`
/// and `out` in the memory of the call's device (see [`apply_device`]).
#[derive(Clone, Copy, Debug)]
pub enum Arrays<'a> {
    Host(&'a [f32]),
    Device { image: u64, out: u64, len: usize },
}

impl Arrays<'_> {
    fn len(&self) -> usize {
        match self {
            Arrays::Host(d) => d.len(),
            Arrays::Device { len, .. } => *len,
        }
    }
}

/// [`apply_timed`] over arrays in the memory of device `ordinal` (DLPack tensors of torch or
/// CuPy), given as [`Arrays::Device`]: `len / prod(shape)` arrays of `shape` read at `image` and
/// written at `out`, no copy through the host except the FEBDS `fft` method's input where cuFFT
/// is missing. Work runs on the device engine's stream and is done when this returns. The same
/// values as [`apply`] bit for bit. (Host arrays work too; the output then comes back as the
/// vector.)
///
/// # Safety
/// For [`Arrays::Device`]: `image` and `out` are live allocations on device `ordinal` of `len`
/// f32 values each, not freed or used by other work (other streams included) until this returns.
pub unsafe fn apply_arrays(
    filter: &Filter,
    b: Boundary,
    arrays: Arrays<'_>,
    shape: &[usize],
    ordinal: usize,
    precision: Precision,
) -> Result<(Vec<f32>, FilterTimings), EngineError> {
    run(filter, b, arrays, shape, ordinal, precision)
}

/// Applies a resolved filter (see [`Filter::resolved`]) on device `ordinal` to `data`:
/// `data.len() / prod(shape)` arrays of `shape`, all in the same launches. Storage in
/// `precision`; FEBDS keeps its 12-bit input in f32.
pub fn apply(
    filter: &Filter,
    b: Boundary,
    data: &[f32],
    shape: &[usize],
    ordinal: usize,
    precision: Precision,
) -> Result<Vec<f32>, EngineError> {
    apply_timed(filter, b, data, shape, ordinal, precision).map(|(v, _)| v)
}

fn event(s: &Arc<CudaStream>) -> Result<cudarc::driver::CudaEvent, EngineError> {
    s.record_event(Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT))
        .map_err(|e| driver_error("cannot record an event", e))
}

fn between(
    a: &cudarc::driver::CudaEvent,
    b: &cudarc::driver::CudaEvent,
) -> Result<f64, EngineError> {
    a.elapsed_ms(b)
        .map(f64::from)
        .map_err(|e| driver_error("timing", e))
}

/// [`apply`] with the device times of its three phases.
pub fn apply_timed(
    filter: &Filter,
    b: Boundary,
    data: &[f32],
    shape: &[usize],
    ordinal: usize,
    precision: Precision,
) -> Result<(Vec<f32>, FilterTimings), EngineError> {
    run(filter, b, Arrays::Host(data), shape, ordinal, precision)
}

/// The filter on one device, from and to host or device arrays (an empty vector for the latter).
fn run(
    filter: &Filter,
    b: Boundary,
    data: Arrays<'_>,
    shape: &[usize],
    ordinal: usize,
    precision: Precision,
) -> Result<(Vec<f32>, FilterTimings), EngineError> {
    let eng = device_engine(ordinal)?;
    let n: usize = shape.iter().product();
    if n == 0 || !data.len().is_multiple_of(n) {
        return Err(EngineError::Shape(format!(
            "{} values do not fill whole arrays of shape {shape:?}",
            data.len()
        )));
    }
    let count = data.len() / n;
    filter
        .check_work(data.len())
        .map_err(|e| EngineError::Shape(e.to_string()))?;
    let mut g = Gpu {
        eng,
        ordinal,
        precision,
        held: vec![],
    };
    if let Filter::Febds(m) = filter {
        g.precision = Precision::F32;
        return febds_gpu(&mut g, data, [shape[0], shape[1]], *m);
    }
    let e0 = event(g.stream())?;
    let mut x = g.upload_from(data, b.mode)?;
    let e1 = event(g.stream())?;
    let nd = shape.len();
    let y = match filter {
        Filter::Gaussian { sigma } => g.gaussian(&x, shape, count, sigma, &vec![0; nd], b)?,
        Filter::Dog { sigma1, sigma2 } => {
            let mut a = g.gaussian(&x, shape, count, sigma1, &vec![0; nd], b)?;
            let c = g.gaussian(&x, shape, count, sigma2, &vec![0; nd], b)?;
            g.axpy(&mut a, &c, -1.0)?;
            a
        }
        Filter::Log { sigma } => {
            let mut acc: Option<CudaSlice<f32>> = None;
            for axis in 0..nd {
                let mut orders = vec![0; nd];
                orders[axis] = 2;
                let t = g.gaussian(&x, shape, count, sigma, &orders, b)?;
                match &mut acc {
                    None => acc = Some(t),
                    Some(a) => g.axpy(a, &t, 1.0)?,
                }
            }
            acc.ok_or_else(|| EngineError::Shape("no axes".into()))?
        }
        Filter::Median { size } => g.median(&x, shape, count, size, b)?,
        Filter::Gamma { gamma, scale } => {
            g.pointwise(&mut x, "gamma_f32", Some((*gamma, *scale)))?;
            x
        }
        Filter::Contrast {
            contrast,
            brightness,
        } => {
            g.pointwise(&mut x, "contrast_f32", Some((*contrast, *brightness)))?;
            x
        }
        Filter::Febds(_) => unreachable!("handled above"),
    };
    let e2 = event(g.stream())?;
    let out = g.download_to(&y, data.len(), b.mode, data)?;
    let e3 = event(g.stream())?;
    e3.synchronize().map_err(|e| driver_error("filter", e))?;
    let t = FilterTimings {
        upload_ms: between(&e0, &e1)?,
        compute_ms: between(&e1, &e2)?,
        download_ms: between(&e2, &e3)?,
    };
    Ok((out, t))
}
