//! The CUDA engine (cudarc): the same [`Plan`] as the CPU engine, in fused kernels compiled at run
//! time by NVRTC from `kernels/*.cu`, once per device and define set, and cached.
//!
//! Arrays are `[z, y, x]` (2D `[y, x]`), channels leading, as everywhere in augscope. The kernels
//! evaluate DESIGN §3 in one pass per output volume (flip → elastic → affine → boundary → order
//! 0/1/3, image and label together); the unit elastic field is made on the device with the noise
//! generated inside the first smoothing pass and cached by (seed, sigma, shape), so moving alpha or
//! anything else never recomputes it. Coordinates are f64 (as on the CPU, so order-0 rounding and
//! tap choice agree) and tap sums f32; the sampler and the prefilter are compiled with fmad off, the
//! compute-bound field passes with FFMA: the numbers are the CPU engine's to f32 rounding.
//!
//! Without a driver, a device or NVRTC, nothing here panics: cudarc panics when its libraries are
//! missing, so every entry point probes them first ([`driver_version`], [`nvrtc_version`]).
#![allow(unsafe_code)] // The only module allowed `unsafe` (STYLE.md): cudarc's kernel launches, uninitialised device allocations, pinned host memory and the library probes are FFI. Each block says what it checked.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Instant;

use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{
    CudaFunction, CudaSlice, CudaStream, DeviceRepr, LaunchConfig, PinnedHostSlice, PushKernelArg,
};
use cudarc::nvrtc::Ptx;
use rayon::prelude::*;

use super::boundary::{Mode, SPLINE_PREPAD};
use super::device::{self, DeviceContext, MemStats, driver_error};
use crate::core::gaussian::gaussian_kernel1d;
use super::{
    Backend, BackendSpec, EngineError, Job, Outputs, Precision, Selected, Timings, check_job_region,
};
use crate::augment::{CoordMap, Order, Plan};
use crate::core::volume::Volume;

/// The shared header with the boundary rules and samplers.
pub const BOUNDARY_CUH: &str = include_str!("../../kernels/boundary.cuh");

/// One `.cu` file per kernel family.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Family {
    /// `resample_{f32,f16,bf16}`, `coords_f32`.
    Resample,
    /// `gauss_mid_f32`, `gauss_last_f32`, `gauss_direct_f32`, `field_stats_f32`.
    Field,
    /// `pad_f32`, `prefilter_axis_f32`, `to_store_f32`.
    Prefilter,
    /// The filters (`sep_line_f32`, `median_f32`, …); their host code is `src/filter/cuda.rs`.
    Filter,
}

impl Family {
    pub const ALL: [Family; 4] = [
        Family::Resample,
        Family::Field,
        Family::Prefilter,
        Family::Filter,
    ];

    pub fn file(self) -> &'static str {
        match self {
            Family::Resample => "kernels/resample.cu",
            Family::Field => "kernels/field.cu",
            Family::Prefilter => "kernels/prefilter.cu",
            Family::Filter => "kernels/filter.cu",
        }
    }

    fn source(self) -> &'static str {
        match self {
            Family::Resample => include_str!("../../kernels/resample.cu"),
            Family::Field => include_str!("../../kernels/field.cu"),
            Family::Prefilter => include_str!("../../kernels/prefilter.cu"),
            Family::Filter => include_str!("../../kernels/filter.cu"),
        }
    }

    /// The program NVRTC compiles: the shared header (which defines its include guard, so the
    /// `.cu` file's `#include "boundary.cuh"` is skipped) followed by the family's file.
    pub fn program(self) -> String {
        match self {
            Family::Field | Family::Filter => self.source().to_string(),
            _ => format!(
                "{BOUNDARY_CUH}\n#line 1 \"{}\"\n{}",
                self.file(),
                self.source()
            ),
        }
    }
}

/// The driver's CUDA version, or why the driver cannot be used. Never panics.
pub fn driver_version() -> Result<i32, String> {
    // SAFETY: `is_culib_present` only tries to dlopen libcuda by its usual names; no CUDA call.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Err("no NVIDIA driver (libcuda.so could not be loaded)".into());
    }
    let mut v: std::ffi::c_int = 0;
    // SAFETY: the library is loaded (checked above); cuDriverGetVersion(int*) writes one int to
    // `v`, which lives for the call, and needs no cuInit.
    let r = unsafe { cudarc::driver::sys::cuDriverGetVersion(&mut v) };
    r.result().map_err(|e| {
        format!(
            "the NVIDIA driver does not answer: {}",
            device::driver_message(&e)
        )
    })?;
    Ok(v)
}

/// NVRTC's version, or why it cannot be loaded. Never panics.
pub fn nvrtc_version() -> Result<(i32, i32), String> {
    // SAFETY: `is_culib_present` only tries to dlopen libnvrtc by its usual names.
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return Err(
            "NVRTC (libnvrtc.so) could not be loaded; install the CUDA toolkit or \
                    `pip install nvidia-cuda-nvrtc` and add its lib folder to LD_LIBRARY_PATH"
                .into(),
        );
    }
    let (mut a, mut b): (std::ffi::c_int, std::ffi::c_int) = (0, 0);
    // SAFETY: the library is loaded (checked above); nvrtcVersion(int*, int*) writes two ints
    // that live for the call.
    let r = unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut a, &mut b) };
    r.result()
        .map_err(|e| format!("NVRTC does not answer: {e:?}"))?;
    Ok((a, b))
}

/// `-D` defines of the boundary modes, from the Rust enum (the `.cu` files hold no mode numbers).
pub fn mode_defines(mode: Mode) -> Vec<String> {
    let mut d: Vec<String> = Mode::ALL
        .iter()
        .map(|m| {
            format!(
                "-DMODE_{}={}",
                m.name().to_ascii_uppercase().replace('-', "_"),
                *m as u32
            )
        })
        .collect();
    d.push(format!("-DMODE={}", mode as u32));
    d
}

fn store_define(p: Precision) -> &'static str {
    match p {
        Precision::F32 => "-DSTORE_F32",
        Precision::F16 => "-DSTORE_F16",
        Precision::Bf16 => "-DSTORE_BF16",
    }
}

/// Defines of a resample or prefilter build.
pub fn sampler_defines(mode: Mode, order: Order, ndim: usize, store: Precision) -> Vec<String> {
    let mut d = mode_defines(mode);
    d.push(format!("-DORDER={}", order.as_u32()));
    d.push(format!("-DNDIM={ndim}"));
    d.push(store_define(store).into());
    d
}

/// The radius a field build serves for `sigma`: `int(4 sigma + 0.5)` rounded up to a multiple of
/// 8 for the tiled kernels (their weights come as a parameter, zero-padded: one build serves 8
/// radii), or the radius itself above `FIELD_TILED_MAX_R` (the direct kernel, weights baked in).
pub fn field_build_radius(sigma: f64) -> usize {
    let r = gaussian_kernel1d(sigma, 0, 4.0).len() / 2;
    if r <= FIELD_TILED_MAX_R {
        r.div_ceil(8) * 8
    } else {
        r
    }
}

/// Defines of a field build (kernels/field.cu): the build radius, and above
/// `FIELD_TILED_MAX_R` the weights `w_0..w_R` of `gaussian_kernel1d(sigma, 0, 4)` as f32 literals.
pub fn field_defines(sigma: f64) -> Vec<String> {
    let r = field_build_radius(sigma);
    let mut d = vec![format!("-DFIELD_R={r}")];
    if r > FIELD_TILED_MAX_R {
        let w = gaussian_kernel1d(sigma, 0, 4.0);
        let lits: Vec<String> = w[r..].iter().map(|&v| format!("{:e}f", v as f32)).collect();
        d.push(format!("-DFIELD_W={}", lits.join(",")));
    }
    d
}

/// Weights of the tiled field kernels: `w_0..w_R` of `gaussian_kernel1d(sigma, 0, 4)` in f32, zero
/// beyond R. Must match `struct FieldWeights` in kernels/field.cu.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct FieldWeights {
    pub w: [f32; 128],
}

// SAFETY: plain old data (#[repr(C)] f32 array) matching the kernel's struct.
unsafe impl DeviceRepr for FieldWeights {}

/// The [`FieldWeights`] of `sigma` (tiled kernels; zeros when the radius exceeds them).
pub fn field_weights(sigma: f64) -> FieldWeights {
    let w = gaussian_kernel1d(sigma, 0, 4.0);
    let r = w.len() / 2;
    let mut out = FieldWeights { w: [0.0; 128] };
    if r <= FIELD_TILED_MAX_R {
        for (o, &v) in out.w.iter_mut().zip(&w[r..]) {
            *o = v as f32;
        }
    }
    out
}

/// NVRTC's options for one family: no fast-math, IEEE division and square root, no flush to
/// zero; fmad off except in the field family, the defines, and `--gpu-architecture` where known.
fn nvrtc_options(family: Family, defines: &[String], arch: Option<&str>) -> Vec<String> {
    // fmad off keeps the sampler's f32 tap sums and the prefilter the CPU's operation for
    // operation; the field's 97-tap passes are compute-bound and use FFMA (f32 rounding).
    let mut options = vec![
        "--ftz=false".to_string(),
        "--prec-sqrt=true".into(),
        "--prec-div=true".into(),
        format!("--fmad={}", family == Family::Field),
    ];
    if let Some(a) = arch {
        options.push(format!("--gpu-architecture={a}"));
    }
    options.extend(defines.iter().cloned());
    options.push("--std=c++17".into());
    // Extra -D defines for measurements of kernel variants (e.g. AUGSCOPE_NVRTC_DEFINES=-DX).
    if let Ok(extra) = std::env::var("AUGSCOPE_NVRTC_DEFINES") {
        options.extend(
            extra
                .split_whitespace()
                .filter(|d| d.starts_with("-D"))
                .map(String::from),
        );
    }
    options
}

/// What NVRTC made of one program: its PTX, and its CUBIN when compiled for a real `sm_XY`.
struct NvrtcOutput {
    ptx: String,
    cubin: Option<Vec<u8>>,
}

/// Runs NVRTC on `family` with `options`; the compiler's log on failure.
fn nvrtc_compile(family: Family, options: &[String]) -> Result<NvrtcOutput, EngineError> {
    use cudarc::nvrtc::{result, sys};
    nvrtc_version().map_err(EngineError::CudaUnavailable)?;
    let fail = |what: String| {
        EngineError::Cuda(format!(
            "NVRTC could not compile {}: {}",
            family.file(),
            what.trim()
        ))
    };
    let src = std::ffi::CString::new(family.program())
        .map_err(|_| fail("the kernel source holds a NUL byte".into()))?;
    let file = family.file().rsplit('/').next().unwrap_or("kernel.cu");
    let name = std::ffi::CString::new(file).map_err(|_| fail("bad file name".into()))?;
    if options.iter().any(|o| o.contains('\0')) {
        return Err(fail("a compile option holds a NUL byte".into()));
    }
    let prog = result::create_program(&src, Some(&name)).map_err(|e| fail(format!("{e:?}")))?;
    // Destroys the program on every path out of this function.
    struct Program(sys::nvrtcProgram);
    impl Drop for Program {
        fn drop(&mut self) {
            // SAFETY: the program was created by create_program and is destroyed once, here.
            let _ = unsafe { result::destroy_program(self.0) };
        }
    }
    let prog = Program(prog);
    // SAFETY: `prog.0` is a live program (above); the options have no NUL byte (checked above).
    if let Err(e) = unsafe { result::compile_program(prog.0, options) } {
        // SAFETY: the program is live; the log is NUL-terminated by NVRTC.
        let log = unsafe { result::get_program_log(prog.0) }
            .map(|l| {
                let bytes: Vec<u8> = l.iter().map(|&c| c as u8).take_while(|&b| b != 0).collect();
                String::from_utf8_lossy(&bytes).into_owned()
            })
            .unwrap_or_else(|_| format!("{e:?}"));
        return Err(fail(log));
    }
    // SAFETY: the program is live and compiled.
    let ptx = unsafe { result::get_ptx(prog.0) }.map_err(|e| fail(format!("no PTX: {e:?}")))?;
    let ptx_bytes: Vec<u8> = ptx
        .iter()
        .map(|&c| c as u8)
        .take_while(|&b| b != 0)
        .collect();
    let ptx = String::from_utf8_lossy(&ptx_bytes).into_owned();
    let real_arch = options
        .iter()
        .any(|o| o.starts_with("--gpu-architecture=sm_"));
    let cubin = if real_arch {
        let mut size = 0usize;
        // SAFETY: the program is live and compiled; NVRTC writes one usize.
        let r = unsafe { sys::nvrtcGetCUBINSize(prog.0, &mut size) };
        if r == sys::nvrtcResult::NVRTC_SUCCESS && size > 0 {
            let mut buf = vec![0u8; size];
            // SAFETY: `buf` holds exactly the `size` bytes NVRTC reported for this program.
            let r = unsafe { sys::nvrtcGetCUBIN(prog.0, buf.as_mut_ptr().cast()) };
            (r == sys::nvrtcResult::NVRTC_SUCCESS).then_some(buf)
        } else {
            None
        }
    } else {
        None
    };
    Ok(NvrtcOutput { ptx, cubin })
}

/// Compiles one family with NVRTC to PTX (the compile checks; devices load CUBIN through
/// [`compile_module`]).
pub fn compile(
    family: Family,
    defines: &[String],
    arch: Option<&'static str>,
) -> Result<Ptx, EngineError> {
    let out = nvrtc_compile(family, &nvrtc_options(family, defines, arch))?;
    Ok(Ptx::from_src(out.ptx))
}

/// A module ready to load: CUBIN for the device's architecture (from the disk cache, or compiled
/// and then cached), else PTX for the driver to JIT where the architecture is unknown; the
/// module's entry names; and the cache key it is stored under.
#[derive(Clone)]
pub struct ModuleImage {
    pub image: Ptx,
    pub entries: Vec<String>,
    /// Whether the image is a CUBIN (loaded as it is) rather than PTX (JIT-compiled on load).
    pub is_cubin: bool,
    /// The disk cache's folder and key of a CUBIN, so that one the driver refuses is forgotten.
    cached: Option<(std::path::PathBuf, String)>,
    /// The PTX of a module compiled in this process, the fallback when a CUBIN does not load.
    ptx: Option<String>,
}

/// The module of `family` with `defines` for `arch`, from the disk cache where it holds one.
pub fn compile_module(
    family: Family,
    defines: &[String],
    arch: Option<&'static str>,
) -> Result<ModuleImage, EngineError> {
    compile_module_in(family, defines, arch, super::kernel_cache::dir())
}

/// [`compile_module`] with the cache folder given (`None`: no disk cache).
pub fn compile_module_in(
    family: Family,
    defines: &[String],
    arch: Option<&'static str>,
    cache_dir: Option<std::path::PathBuf>,
) -> Result<ModuleImage, EngineError> {
    use super::kernel_cache;
    let options = nvrtc_options(family, defines, arch);
    let nvrtc = nvrtc_version().map_err(EngineError::CudaUnavailable)?;
    let slot = match (arch, cache_dir) {
        (Some(a), Some(dir)) => {
            let driver = driver_version().unwrap_or(0);
            let program = family.program();
            let key = kernel_cache::key(family.file(), &program, &options, a, nvrtc, driver);
            Some((dir, key))
        }
        _ => None,
    };
    if let Some((dir, key)) = &slot
        && let Some(hit) = kernel_cache::read(dir, key)
    {
        kernel_cache::count_hit();
        return Ok(ModuleImage {
            image: Ptx::from_binary(hit.image),
            entries: hit.entries,
            is_cubin: true,
            cached: slot,
            ptx: None,
        });
    }
    let t = Instant::now();
    let out = nvrtc_compile(family, &options)?;
    kernel_cache::count_compile(t.elapsed().as_micros() as u64);
    let entries = ptx_entries(&out.ptx);
    match out.cubin {
        Some(cubin) => {
            let c = kernel_cache::Compiled {
                image: cubin,
                entries: entries.clone(),
            };
            if let Some((dir, key)) = &slot {
                kernel_cache::write(dir, key, &c);
            }
            Ok(ModuleImage {
                image: Ptx::from_binary(c.image),
                entries,
                is_cubin: true,
                cached: slot,
                ptx: Some(out.ptx),
            })
        }
        None => Ok(ModuleImage {
            image: Ptx::from_src(out.ptx),
            entries,
            is_cubin: false,
            cached: None,
            ptx: None,
        }),
    }
}

/// The options a module of `family` is built with for entry `name`: a resample module holds that
/// entry alone (RS_ONLY in kernels/resample.cu), so NVRTC and ptxas build only what is launched,
/// a third of the whole file's compile time or less.
fn build_defines(family: Family, defines: &[String], name: &str) -> Vec<String> {
    match (family, resample_only(name)) {
        (Family::Resample, Some(k)) => [defines, &[format!("-DRS_ONLY={k}")]].concat(),
        _ => defines.to_vec(),
    }
}

type ModuleCell = Arc<OnceLock<Result<ModuleImage, String>>>;

/// The modules of [`shared_module`], compiled or being compiled.
fn modules() -> &'static Mutex<HashMap<String, ModuleCell>> {
    static M: OnceLock<Mutex<HashMap<String, ModuleCell>>> = OnceLock::new();
    M.get_or_init(Mutex::default)
}

fn module_key(family: Family, defines: &[String], arch: Option<&'static str>) -> String {
    format!("{family:?}|{arch:?}|{}", defines.join(" "))
}

/// Modules compiled (or read from disk) in this process, by family, architecture and options: a
/// compile under way on another thread is waited for, never repeated.
fn shared_module(
    family: Family,
    defines: &[String],
    arch: Option<&'static str>,
) -> Result<ModuleImage, EngineError> {
    nvrtc_version().map_err(EngineError::CudaUnavailable)?;
    let cell = lock(modules())
        .entry(module_key(family, defines, arch))
        .or_default()
        .clone();
    cell.get_or_init(|| compile_module(family, defines, arch).map_err(|e| e.to_string()))
        .clone()
        .map_err(EngineError::Cuda)
}

/// Loads `family` with `defines` on `dev`: the module and its entry names. A CUBIN the driver
/// refuses is dropped from the cache and the module compiled again, then loaded as PTX.
pub fn load_module(
    dev: &DeviceContext,
    family: Family,
    defines: &[String],
) -> Result<(Arc<cudarc::driver::CudaModule>, Vec<String>), EngineError> {
    let m = shared_module(family, defines, dev.arch)?;
    // Loaded modules are kept by the engine: the image need not stay in host memory.
    lock(modules()).remove(&module_key(family, defines, dev.arch));
    match dev.ctx.load_module(m.image) {
        Ok(module) => Ok((module, m.entries)),
        Err(first) => {
            if let Some((dir, key)) = &m.cached {
                super::kernel_cache::forget(dir, key);
            }
            let ptx = match m.ptx {
                Some(p) => p,
                None => nvrtc_compile(family, &nvrtc_options(family, defines, dev.arch))?.ptx,
            };
            dev.ctx
                .load_module(Ptx::from_src(ptx))
                .map(|module| (module, m.entries))
                .map_err(|_| driver_error("cannot load a compiled kernel", first))
        }
    }
}

/// Every resample entry the host may launch for `precision` is in the compiled module.
fn check_resample_entries(ptx: &str, precision: Precision) -> Result<(), EngineError> {
    let mut want = vec![];
    for (channels, label, field) in [(1, false, false), (1, false, true), (2, true, true)] {
        want.push(resample_entry(precision, channels, label, field));
        if precision == Precision::F32 {
            want.push(resample_many_entry(channels, label));
        }
    }
    check_entries(ptx, "kernels/resample.cu", &want)
}

/// Every name of `want` is an entry of the compiled module `ptx` (of `file`).
fn check_entries(ptx: &str, file: &str, want: &[&str]) -> Result<(), EngineError> {
    let have = ptx_entries(ptx);
    match want.iter().find(|w| !have.iter().any(|e| e == *w)) {
        Some(w) => Err(EngineError::Cuda(format!("{file} has no entry {w}"))),
        None => Ok(()),
    }
}

/// Every define set the engine can ask for, per family (the CI compile check): all modes × orders
/// × 2D/3D in f32, the two half types, the prefilter per mode, and the field at small, tiled,
/// shared-window and direct radii. Returns the number of programs compiled.
pub fn compile_all(arch: Option<&'static str>) -> Result<usize, EngineError> {
    let mut n = 0;
    for mode in Mode::ALL {
        for ndim in [2, 3] {
            for order in [Order::Nearest, Order::Linear, Order::Cubic] {
                let ptx = compile(
                    Family::Resample,
                    &resample_defines(mode, order, ndim, Precision::F32, false),
                    arch,
                )?;
                check_resample_entries(&ptx.to_src(), Precision::F32)?;
                n += 1;
            }
            let ptx = compile(
                Family::Prefilter,
                &sampler_defines(mode, Order::Cubic, ndim, Precision::F32),
                arch,
            )?;
            check_entries(
                &ptx.to_src(),
                "kernels/prefilter.cu",
                &[
                    "pad_f32",
                    "prefilter_axis_f32",
                    "prefilter_rows_f32",
                    "to_store_f32",
                ],
            )?;
            n += 1;
        }
    }
    let mut big = sampler_defines(Mode::Mirror, Order::Cubic, 3, Precision::F32);
    big.push("-DIDX64".into());
    compile(Family::Resample, &big, arch)?;
    n += 1;
    for p in [Precision::F16, Precision::Bf16] {
        let ptx = compile(
            Family::Resample,
            &resample_defines(Mode::Reflect, Order::Cubic, 3, p, false),
            arch,
        )?;
        check_resample_entries(&ptx.to_src(), p)?;
        compile(
            Family::Prefilter,
            &sampler_defines(Mode::Nearest, Order::Cubic, 3, p),
            arch,
        )?;
        n += 2;
    }
    for sigma in [0.1, 2.0, 12.0, 20.0, 45.0] {
        compile(Family::Field, &field_defines(sigma), arch)?;
        n += 1;
    }
    Ok(n)
}

/// Kernel parameters of `resample_*` and `coords_f32`; must match `struct ResampleParams` in
/// `kernels/resample.cu` field for field.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ResampleParams {
    pub m: [f64; 9],
    pub offset: [f64; 3],
    pub ctr_out: [f64; 3],
    /// Elastic strength per axis (voxels per unit field value).
    pub alpha: [f64; 3],
    pub pad: f64,
    pub n_out: i64,
    pub n_in: i64,
    pub n_lab: i64,
    pub out_shape: [i32; 3],
    pub in_shape: [i32; 3],
    pub lab_shape: [i32; 3],
    pub flip: [i32; 3],
    pub channels: i32,
    pub lab_channels: i32,
    pub cval: f32,
    pub has_field: i32,
    pub has_label: i32,
    /// The sample's field in a batched launch (`resample_many_*`): field + field_slot * stride.
    pub field_slot: i32,
    /// The computed box of the output grid (voxels `box_lo + [0, box_shape)`), written compactly:
    /// the whole grid, or one plane for the viewer.
    pub box_lo: [i32; 3],
    pub box_shape: [i32; 3],
    /// Voxels of the box: the channel stride of the outputs.
    pub n_box: i64,
}

// SAFETY: #[repr(C)], plain old data (f64, i64, i32, f32 only; no pointers), laid out exactly as
// the C struct in kernels/resample.cu (248 bytes, 8-byte aligned; checked by a test).
unsafe impl DeviceRepr for ResampleParams {}

/// Kernel parameters of `pad_f32`; must match `struct PadParams` in `kernels/prefilter.cu`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct PadParams {
    pub n_out: i64,
    pub in_shape: [i32; 3],
    pub out_shape: [i32; 3],
    pub pad: i32,
    pub cval: f32,
}

// SAFETY: #[repr(C)], plain old data, laid out as `struct PadParams` in kernels/prefilter.cu
// (40 bytes, 8-byte aligned).
unsafe impl DeviceRepr for PadParams {}

fn shape3(s: &[usize]) -> [i32; 3] {
    let mut o = [1i32; 3];
    for (a, &n) in s.iter().enumerate().take(3) {
        o[a] = n as i32;
    }
    o
}

/// The kernel parameters of a coordinate map (with or without the field).
pub fn resample_params(map: &CoordMap, has_field: bool, cval: f32) -> ResampleParams {
    let mut m = [0f64; 9];
    for i in 0..3 {
        for j in 0..3 {
            m[i * 3 + j] = map.in_from_centered[i][j];
        }
    }
    ResampleParams {
        m,
        offset: map.offset,
        ctr_out: map.ctr_out,
        alpha: map.alpha,
        pad: 0.0,
        n_out: map.out_shape.iter().product::<usize>() as i64,
        n_in: map.in_shape.iter().product::<usize>() as i64,
        n_lab: map.in_shape.iter().product::<usize>() as i64,
        out_shape: shape3(&map.out_shape),
        in_shape: shape3(&map.in_shape),
        lab_shape: shape3(&map.in_shape),
        flip: [map.flip[0] as i32, map.flip[1] as i32, map.flip[2] as i32],
        channels: 1,
        lab_channels: 0,
        cval,
        has_field: has_field as i32,
        has_label: 0,
        field_slot: 0,
        box_lo: [0; 3],
        box_shape: shape3(&map.out_shape),
        n_box: map.out_shape.iter().product::<usize>() as i64,
    }
}

/// A device buffer counted by its device's [`device::MemTracker`].
pub struct DevBuf<T> {
    pub s: CudaSlice<T>,
    _r: device::Reservation,
}

impl<T: DeviceRepr> DevBuf<T> {
    fn new(dev: &DeviceContext, len: usize, what: &str) -> Result<Self, EngineError> {
        let bytes = len.max(1) * std::mem::size_of::<T>();
        let r = dev.tracker.reserve(bytes, what)?;
        // SAFETY: `alloc` returns uninitialised device memory of len.max(1) elements of T; every
        // buffer made here is fully written by a copy or a kernel before it is read.
        let s = unsafe { dev.stream.alloc::<T>(len.max(1)) }.map_err(|e| driver_error(what, e))?;
        Ok(DevBuf { s, _r: r })
    }

    fn bytes(&self) -> usize {
        self.s.len() * std::mem::size_of::<T>()
    }
}

/// Keeps `slot` holding at least `len` elements (reused between calls).
fn ensure<'a, T: DeviceRepr>(
    dev: &DeviceContext,
    slot: &'a mut Option<DevBuf<T>>,
    len: usize,
    what: &str,
) -> Result<&'a mut DevBuf<T>, EngineError> {
    if slot.as_ref().is_none_or(|b| b.s.len() < len.max(1)) {
        *slot = None;
        *slot = Some(DevBuf::new(dev, len, what)?);
    }
    slot.as_mut()
        .ok_or_else(|| EngineError::Cuda("workspace buffer missing".into()))
}

/// The device time of a field computation: nothing when the cached field was reused, else the
/// events around its passes, read once the last pass has finished.
enum FieldTime {
    Cached,
    Queued(cudarc::driver::CudaEvent, cudarc::driver::CudaEvent),
}

impl FieldTime {
    /// Milliseconds on the device (0 when cached); waits for the passes to finish.
    fn ms(&self) -> Result<f64, EngineError> {
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

/// The cached unit field of one (seed, per-axis sigma in voxels, shape).
struct CachedField {
    seed: u64,
    sigma_vox: Vec<f64>,
    shape: Vec<usize>,
    buf: DevBuf<f32>,
}

/// Buffers kept between calls (the "reserved" part of the memory statistics).
#[derive(Default)]
struct Workspace {
    img_f32: Option<DevBuf<f32>>,
    img_pad: Option<DevBuf<f32>>,
    img_u16: Option<DevBuf<u16>>,
    scratch_f64: Option<DevBuf<f64>>,
    out_f32: Option<DevBuf<f32>>,
    out_u16: Option<DevBuf<u16>>,
    lab_in: Option<DevBuf<f32>>,
    lab_out: Option<DevBuf<f32>>,
    field_scratch: Option<DevBuf<f32>>,
    coords: Option<DevBuf<f32>>,
    stats: Option<DevBuf<f64>>,
    dummy: Option<DevBuf<f32>>,
    dummy_out: Option<DevBuf<f32>>,
    /// Philox keys of the samples of a field launch.
    keys: Option<DevBuf<u32>>,
    pin_f32: Option<PinnedHostSlice<f32>>,
    pin_u16: Option<PinnedHostSlice<u16>>,
}

impl Workspace {
    fn device_bytes(&self) -> usize {
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

#[derive(Default)]
struct State {
    field: Option<CachedField>,
    ws: Workspace,
    /// The caller's key of the image (and label) now on the device, with the storage precision
    /// and whether a label came along: a call with the same key skips the upload.
    resident: Option<(u64, Precision, bool)>,
}

/// Which part of the output one call computes and downloads.
#[derive(Clone, Copy, Default)]
struct Region {
    /// One plane `(axis, index)` of a 3D output grid; the whole grid when `None`.
    plane: Option<(usize, usize)>,
    /// The caller's key of the image and label content: when it matches the last upload's, the
    /// device copy is used again (not for order 3, whose prefilter works in place).
    resident: Option<u64>,
    /// The caller's arrays in device memory, read and written in place of the host volumes and
    /// output buffers (see [`CudaBackend::apply_device`]).
    device: Option<DeviceArrays>,
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

/// A caller's device array seen as a [`CudaSlice`] for the length of one call, so the launches
/// and copies take it like any buffer of the engine; never freed here (dropping leaks the slice
/// back to its owner).
pub(crate) struct Borrowed<T>(std::mem::ManuallyDrop<CudaSlice<T>>);

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

/// One device: its context, compiled kernels and caches. Shared by every [`CudaBackend`] of the
/// process that uses the device.
pub struct DeviceEngine {
    pub dev: DeviceContext,
    copy_stream: Arc<CudaStream>,
    functions: Mutex<HashMap<String, CudaFunction>>,
    state: Mutex<State>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

const BLOCK: u32 = 256;
/// Output voxels per thread of the resample kernels (see [`resample_k`]). Measured on the H200,
/// also software-pipelined (docs/performance.md, Decisions): 2 and 4 gain at most 3 % on the
/// large rotate, lose on small volumes and compile several times slower.
const RESAMPLE_K: usize = 1;
/// Blocks per SM of the order-0/1 resample kernels: 5 caps them at 48 registers (62.5 %
/// occupancy instead of 50 % at 64); rotate 256×512×512 0.80 → 0.59 ms on the H200.
const RESAMPLE_MINB: usize = 5;
/// Blocks per SM of the one-channel, label-free resample entries (`resample_plain*`, RS_PLAIN_MINB
/// in kernels/resample.cu) for orders 0 and 1: 8 caps them at 32 registers (full occupancy); their
/// edge path is a separate function, so only it spills. Rotate 256×512×512 0.61 → 0.46 ms on the
/// H200.
const RESAMPLE_PLAIN_MINB: usize = 8;
/// The same for order 3: 4 blocks (64 registers) instead of the 255 registers and one block per
/// SM of the uncapped cubic kernel.
const RESAMPLE_PLAIN_MINB_CUBIC: usize = 4;
/// Outputs per block along the axis of the tiled field kernels (TY * FIELD_K in kernels/field.cu).
const FIELD_TL: usize = 128;
/// The largest radius of the tiled field kernels (TILED_MAX_R in kernels/field.cu).
const FIELD_TILED_MAX_R: usize = 120;
/// Rows of the shared tile of the whole-column noise pass (COL_ROWS in kernels/field.cu).
const FIELD_COL_ROWS: usize = 352;

/// Block shape of the resample and coordinate kernels: (32, 8, 1) unless
/// `AUGSCOPE_CUDA_BLOCK=x,y,z` (256 threads, x a multiple of 8) asks for another, for tuning.
fn resample_block() -> (u32, u32, u32) {
    static B: OnceLock<(u32, u32, u32)> = OnceLock::new();
    *B.get_or_init(|| {
        let parsed = std::env::var("AUGSCOPE_CUDA_BLOCK").ok().and_then(|s| {
            let v: Vec<u32> = s.split(',').filter_map(|t| t.trim().parse().ok()).collect();
            match v[..] {
                [x, y, z] if x * y * z == 256 && x % 8 == 0 => Some((x, y, z)),
                _ => None,
            }
        });
        parsed.unwrap_or((32, 8, 1))
    })
}

/// Builds the tiled field kernels of every radius (16 NVRTC builds, run in parallel) on device
/// `ordinal`, so that moving sigma later never waits for a compile (about a second per new
/// radius bucket otherwise). Blocking: for benchmarks and long-lived callers that can afford it.
pub fn warm_field_kernels(ordinal: usize) -> Result<(), EngineError> {
    use rayon::prelude::*;
    let eng = device_engine(ordinal)?;
    (0..=FIELD_TILED_MAX_R / 8)
        .into_par_iter()
        .try_for_each(|b| {
            let defines = vec![format!("-DFIELD_R={}", b * 8)];
            eng.function(Family::Field, &defines, "gauss_mid_f32")
                .map(|_| ())
        })
}

/// Copies the plane `index` normal to `axis` of a 3D volume (every channel, C order of the other
/// two axes) into `dst`.
fn copy_plane(v: &Volume, axis: usize, index: usize, dst: &mut [f32]) {
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

/// The kernel entry names of a PTX module (`.entry name(`).
fn ptx_entries(ptx: &str) -> Vec<String> {
    ptx.lines()
        .filter_map(|l| l.split(".entry ").nth(1))
        .filter_map(|rest| rest.split(['(', ' ']).next())
        .filter(|n| !n.is_empty())
        .map(String::from)
        .collect()
}

/// Launch shape of the resample and coordinate kernels: a 3D grid over (x, y, z), so that a thread
/// finds its voxel without integer division.
fn grid_out(out_shape: &[usize]) -> Result<LaunchConfig, EngineError> {
    grid_out_k(out_shape, 1)
}

/// Output voxels per thread of the resample kernels along the last axis (RS_K in
/// kernels/resample.cu): 1 unless `AUGSCOPE_RS_K` (1 to 8) says otherwise, for measurements.
fn resample_k() -> usize {
    static K: OnceLock<usize> = OnceLock::new();
    *K.get_or_init(|| {
        std::env::var("AUGSCOPE_RS_K")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .filter(|k| (1..=8).contains(k))
            .unwrap_or(RESAMPLE_K)
    })
}

/// Blocks per SM the order-0/1 resample kernels are built for (RS_MINB in kernels/resample.cu):
/// `RESAMPLE_MINB` unless `AUGSCOPE_RS_MINB` (1 to 8) says otherwise, for measurements.
fn resample_minb() -> usize {
    static B: OnceLock<usize> = OnceLock::new();
    *B.get_or_init(|| {
        std::env::var("AUGSCOPE_RS_MINB")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .filter(|b| (1..=8).contains(b))
            .unwrap_or(RESAMPLE_MINB)
    })
}

/// Blocks per SM of the `resample_plain*` entries for `order` (RS_PLAIN_MINB): the constants
/// above unless `AUGSCOPE_RS_PLAIN_MINB` (1 to 8) says otherwise, for measurements.
fn resample_plain_minb(order: Order) -> usize {
    static B: OnceLock<Option<usize>> = OnceLock::new();
    let env = *B.get_or_init(|| {
        std::env::var("AUGSCOPE_RS_PLAIN_MINB")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .filter(|b| (1..=8).contains(b))
    });
    env.unwrap_or(if order == Order::Cubic {
        RESAMPLE_PLAIN_MINB_CUBIC
    } else {
        RESAMPLE_PLAIN_MINB
    })
}

/// Warps per block of `prefilter_rows_f32` (PF_WARPS in kernels/prefilter.cu).
const PF_WARPS: usize = 2;

/// Whether the prefilter runs the last axis through `prefilter_rows_f32` (coalesced through
/// shared tiles): yes unless `AUGSCOPE_PF_ROWS=0` (the one-thread-per-line kernel, for A/B
/// measurements; the values are the same).
fn prefilter_rows_enabled() -> bool {
    static P: OnceLock<bool> = OnceLock::new();
    *P.get_or_init(|| std::env::var("AUGSCOPE_PF_ROWS").map_or(true, |v| v.trim() != "0"))
}

/// Whether one-channel, label-free jobs use the `resample_plain*` entries: yes unless
/// `AUGSCOPE_RS_PLAIN=0` (the general entry, for A/B measurements; the values are the same).
fn resample_plain_enabled() -> bool {
    static P: OnceLock<bool> = OnceLock::new();
    *P.get_or_init(|| std::env::var("AUGSCOPE_RS_PLAIN").map_or(true, |v| v.trim() != "0"))
}

/// Whether a job of `channels` image channels, with or without a label map, takes the plain
/// entries: one channel, no label map, one voxel per thread, unless `AUGSCOPE_RS_PLAIN=0`.
fn plain_job(channels: usize, label: bool) -> bool {
    channels == 1 && !label && resample_k() == 1 && resample_plain_enabled()
}

/// The resample entry for one job: the plain entries (one channel, no label map, one voxel per
/// thread; `plainf` reads the displacement field) or the general one.
fn resample_entry(precision: Precision, channels: usize, label: bool, field: bool) -> &'static str {
    match (precision, plain_job(channels, label), field) {
        (Precision::F32, false, _) => "resample_f32",
        (Precision::F16, false, _) => "resample_f16",
        (Precision::Bf16, false, _) => "resample_bf16",
        (Precision::F32, true, false) => "resample_plain_f32",
        (Precision::F16, true, false) => "resample_plain_f16",
        (Precision::Bf16, true, false) => "resample_plain_bf16",
        (Precision::F32, true, true) => "resample_plainf_f32",
        (Precision::F16, true, true) => "resample_plainf_f16",
        (Precision::Bf16, true, true) => "resample_plainf_bf16",
    }
}

/// RS_ONLY's number for a resample entry name (kernels/resample.cu), None for another name.
fn resample_only(name: &str) -> Option<u32> {
    let base = ["_f32", "_f16", "_bf16"]
        .iter()
        .find_map(|s| name.strip_suffix(s))
        .unwrap_or(name);
    Some(match base {
        "resample" => 1,
        "resample_plain" => 2,
        "resample_plainf" => 3,
        "resample_many" => 4,
        "resample_many_plain" => 5,
        "coords" => 6,
        _ => return None,
    })
}

/// The batched resample entry (f32 storage): the plain one for one-channel, label-free samples.
fn resample_many_entry(channels: usize, label: bool) -> &'static str {
    if plain_job(channels, label) {
        "resample_many_plain_f32"
    } else {
        "resample_many_f32"
    }
}

/// The resample kernels' defines: the sampler's, 64-bit tap offsets when a channel has 2^31
/// elements or more, the voxels per thread, and for orders 0 and 1 the register cap (order 3
/// would spill under it).
pub fn resample_defines(
    mode: Mode,
    order: Order,
    ndim: usize,
    store: Precision,
    idx64: bool,
) -> Vec<String> {
    let mut d = sampler_defines(mode, order, ndim, store);
    if idx64 {
        d.push("-DIDX64".into());
    }
    let k = resample_k();
    if k > 1 {
        d.push(format!("-DRS_K={k}"));
    }
    let b = resample_minb();
    if order != Order::Cubic && b > 1 {
        d.push(format!("-DRS_MINB={b}"));
    }
    d.push(format!("-DRS_PLAIN_MINB={}", resample_plain_minb(order)));
    d
}

/// The launch of the resample kernels over `out_shape`, `k` voxels per thread along the last
/// axis.
fn grid_out_k(out_shape: &[usize], k: usize) -> Result<LaunchConfig, EngineError> {
    let (bx, by, bz) = resample_block();
    // 2D: the z threads of the block become more rows.
    let (d, h, w, by, bz) = match *out_shape {
        [h, w] => (1, h, w, by * bz, 1),
        [d, h, w] => (d, h, w, by, bz),
        _ => {
            return Err(EngineError::Shape(format!(
                "cannot launch over {out_shape:?}"
            )));
        }
    };
    let (gx, gy, gz) = (
        w.div_ceil(bx as usize * k.max(1)),
        h.div_ceil(by as usize),
        d.div_ceil(bz as usize),
    );
    if gy > 65535 || gz > 65535 || gx > i32::MAX as usize {
        return Err(EngineError::GpuLimit(format!(
            "grid {out_shape:?} is too large for one launch"
        )));
    }
    Ok(LaunchConfig {
        grid_dim: (gx as u32, gy as u32, gz as u32),
        block_dim: (bx, by, bz),
        shared_mem_bytes: 0,
    })
}

fn grid_1d(n: usize) -> Result<LaunchConfig, EngineError> {
    let blocks = n.div_ceil(BLOCK as usize).max(1);
    if blocks > i32::MAX as usize {
        return Err(EngineError::Shape(format!(
            "{n} voxels are too many for one launch"
        )));
    }
    Ok(LaunchConfig {
        grid_dim: (blocks as u32, 1, 1),
        block_dim: (BLOCK, 1, 1),
        shared_mem_bytes: 0,
    })
}

/// `[outer, n, inner]` of axis `axis` in `shape`.
fn axis_split(shape: &[usize], axis: usize) -> (usize, usize, usize) {
    let outer: usize = shape[..axis].iter().product();
    let inner: usize = shape[axis + 1..].iter().product();
    (outer, shape[axis], inner)
}

/// One separable pass of the field over `slabs` consecutive slabs of `shape` each: slab g (global
/// index, `slab0 + ` the launch's own) is component g % ndim of sample g / ndim of a batch.
struct FieldPass<'a> {
    shape: &'a [usize],
    axis: usize,
    /// The noise pass (axis 0): the input is the Philox noise of each slab; src is unused.
    gen_noise: bool,
    /// The Philox key (seed lo, seed hi) of every sample, on the device and on the host.
    keys: &'a CudaSlice<u32>,
    host_keys: &'a [(u32, u32)],
    slab0: usize,
    slabs: usize,
    tiled: bool,
    /// The noise pass through `gauss_col_noise_f32` (whole columns in one block).
    col: bool,
    /// The weights of this axis (tiled kernels).
    wts: FieldWeights,
}

impl FieldPass<'_> {
    fn launch(
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
        } else if self.axis < ndim - 1 {
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
type FieldKernels = Vec<(bool, bool, FieldWeights, CudaFunction)>;

/// Philox keys (seed lo, seed hi) of seeds.
fn philox_keys(seeds: &[u64]) -> Vec<(u32, u32)> {
    seeds
        .iter()
        .map(|&s| (s as u32, (s >> 32) as u32))
        .collect()
}

impl DeviceEngine {
    fn open(ordinal: usize) -> Result<Self, EngineError> {
        let dev = DeviceContext::open(ordinal)?;
        nvrtc_version().map_err(EngineError::CudaUnavailable)?;
        // SAFETY: augscope orders its work itself: every buffer is used on `dev.stream`, except
        // uploads on `copy_stream`, which the compute stream waits for with an event before any
        // kernel reads them; so cudarc's per-buffer event tracking is not needed.
        unsafe { dev.ctx.disable_event_tracking() };
        let copy_stream = dev
            .ctx
            .new_stream()
            .map_err(|e| driver_error("cannot create a stream", e))?;
        let eng = DeviceEngine {
            dev,
            copy_stream,
            functions: Mutex::new(HashMap::new()),
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

    /// A kernel, compiled on first use for this define set and cached.
    fn function(
        &self,
        family: Family,
        defines: &[String],
        name: &str,
    ) -> Result<CudaFunction, EngineError> {
        let key = format!("{family:?}|{}|{name}", defines.join(" "));
        if let Some(f) = lock(&self.functions).get(&key) {
            return Ok(f.clone());
        }
        let (module, entries) =
            load_module(&self.dev, family, &build_defines(family, defines, name))?;
        let f = module
            .load_function(name)
            .map_err(|e| driver_error(&format!("kernel {name} is missing"), e))?;
        let mut map = lock(&self.functions);
        // Every entry of the module, so that later lookups of its siblings (the other passes of
        // the field, the statistics) hit the cache instead of compiling the module again.
        for e in entries {
            if let Ok(g) = module.load_function(&e) {
                map.insert(format!("{family:?}|{}|{e}", defines.join(" ")), g);
            }
        }
        map.insert(key, f.clone());
        Ok(f)
    }

    /// Starts compiling the module of `name` on another thread, unless it is loaded already, so
    /// that NVRTC builds it while this thread builds or runs others; [`Self::function`] then
    /// finds it compiled (or waits for the compile under way).
    fn prefetch(&self, family: Family, defines: &[String], name: &str) {
        let key = format!("{family:?}|{}|{name}", defines.join(" "));
        if lock(&self.functions).contains_key(&key) {
            return;
        }
        let build = build_defines(family, defines, name);
        let arch = self.dev.arch;
        if lock(modules()).contains_key(&module_key(family, &build, arch)) {
            return;
        }
        // A thread that cannot start is no error: the module compiles when it is first used.
        let _ = std::thread::Builder::new()
            .name("augscope-nvrtc".into())
            .spawn(move || {
                let _ = shared_module(family, &build, arch);
            });
    }

    fn event(&self, stream: &Arc<CudaStream>) -> Result<cudarc::driver::CudaEvent, EngineError> {
        stream
            .record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
            .map_err(|e| driver_error("cannot record an event", e))
    }

    /// The kernels of the field passes of `sigma_vox` on `shape`, one per axis, each built with
    /// that axis's weights (one build when every axis has the same sigma). The noise pass (axis
    /// 0) holds whole columns when they fit the shared tile (COL_ROWS in kernels/field.cu);
    /// AUGSCOPE_FIELD_COL=0 turns that off, for measurements.
    fn field_kernels(
        &self,
        sigma_vox: &[f64],
        shape: &[usize],
    ) -> Result<FieldKernels, EngineError> {
        let ndim = shape.len();
        let mut kernels = Vec::with_capacity(ndim);
        for (axis, &sigma) in sigma_vox.iter().enumerate() {
            let radius = field_build_radius(sigma);
            let tiled = radius <= FIELD_TILED_MAX_R;
            let col = axis == 0
                && tiled
                && shape[0] + 2 * radius <= FIELD_COL_ROWS
                && std::env::var("AUGSCOPE_FIELD_COL").as_deref() != Ok("0");
            let name = match (tiled, col, axis == ndim - 1) {
                (false, _, _) => "gauss_direct_f32",
                (true, true, _) => "gauss_col_noise_f32",
                (true, false, false) => "gauss_mid_f32",
                (true, false, true) => "gauss_last_f32",
            };
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
    fn upload_keys<'a>(
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
    fn field_passes(
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

    /// Makes sure the unit field of (seed, per-axis sigma in voxels, out_shape) is on the device.
    /// The passes are queued on the compute stream and not waited for, so that the caller can
    /// upload the image while they run; the returned [`FieldTime`] reads their device time later.
    fn ensure_field(
        &self,
        st: &mut State,
        sigma_vox: &[f64],
        seed: u64,
        shape: &[usize],
    ) -> Result<FieldTime, EngineError> {
        if let Some(f) = &st.field
            && f.seed == seed
            && f.sigma_vox == sigma_vox
            && f.shape == shape
        {
            return Ok(FieldTime::Cached);
        }
        st.field = None;
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
            seed,
            sigma_vox: sigma_vox.to_vec(),
            shape: shape.to_vec(),
            buf,
        });
        Ok(FieldTime::Queued(e0, e1))
    }

    /// Copies f32 values to the device through the engine's pinned staging buffer ([`Self::upload`]),
    /// for other kernel families (the filters) on this device's stream.
    pub(crate) fn upload_f32(
        &self,
        src: &[f32],
        dst: &mut CudaSlice<f32>,
    ) -> Result<(), EngineError> {
        let mut st = lock(&self.state);
        // The workspace's image now holds something else: no call may reuse it by key.
        st.resident = None;
        let pin = &mut st.ws.pin_f32;
        self.upload(pin, dst, src.len(), |s, c| {
            c.copy_from_slice(&src[s..s + c.len()])
        })
    }

    /// Copies the first `out.len()` f32 values of `src` to the host through the engine's pinned
    /// staging buffer ([`Self::download`]).
    pub(crate) fn download_f32(
        &self,
        src: &CudaSlice<f32>,
        out: &mut [f32],
    ) -> Result<(), EngineError> {
        let mut st = lock(&self.state);
        let pin = &mut st.ws.pin_f32;
        let ptr = SendPtr(out.as_mut_ptr());
        let len = out.len();
        self.download(pin, src, len, |s, c| {
            ptr.slice(s, c.len(), len).copy_from_slice(c);
        })
    }

    /// Copies `src` to the device through pinned staging memory, in chunks, so that the host copy
    /// of one chunk overlaps the transfer of the one before. The transfers wait for every kernel
    /// queued so far (one may still read `dst`).
    fn upload<T: DeviceRepr + cudarc::driver::ValidAsZeroBits + Copy + Send + Sync + Default>(
        &self,
        pin: &mut Option<PinnedHostSlice<T>>,
        dst: &mut CudaSlice<T>,
        src_len: usize,
        fill: impl Fn(usize, &mut [T]) + Sync,
    ) -> Result<(), EngineError> {
        self.upload_after(pin, dst, src_len, fill, None)
    }

    /// [`Self::upload`], with the transfers waiting only for the compute-stream work before
    /// `after` when given: kernels queued since (the elastic field, which never reads `dst`) run
    /// while the image transfers.
    fn upload_after<
        T: DeviceRepr + cudarc::driver::ValidAsZeroBits + Copy + Send + Sync + Default,
    >(
        &self,
        pin: &mut Option<PinnedHostSlice<T>>,
        dst: &mut CudaSlice<T>,
        src_len: usize,
        fill: impl Fn(usize, &mut [T]) + Sync,
        after: Option<&cudarc::driver::CudaEvent>,
    ) -> Result<(), EngineError> {
        const CHUNK: usize = 4 << 20;
        if pin.as_ref().is_none_or(|p| p.len() < src_len) {
            *pin = None;
            // SAFETY: page-locked host memory of src_len elements; every element is written by
            // `fill` before the transfer that reads it.
            let p = unsafe { self.dev.ctx.alloc_pinned_with_flags::<T>(src_len.max(1), 0) }
                .map_err(|e| driver_error("pinned host memory", e))?;
            *pin = Some(p);
        }
        let Some(p) = pin.as_mut() else {
            return Err(EngineError::Cuda("pinned buffer missing".into()));
        };
        let host = p
            .as_mut_slice()
            .map_err(|e| driver_error("pinned host memory", e))?;
        let cs = &self.copy_stream;
        // The staging buffer is refilled below: the copies of an earlier upload that read it
        // must be done (a label map right after its image would otherwise race the image's
        // transfer of a small volume).
        cs.synchronize().map_err(|e| driver_error("upload", e))?;
        // Wait for earlier kernels that may still read the buffer being overwritten.
        match after {
            Some(ev) => cs.wait(ev),
            None => cs.join(&self.dev.stream),
        }
        .map_err(|e| driver_error("stream ordering", e))?;
        for start in (0..src_len).step_by(CHUNK) {
            let end = (start + CHUNK).min(src_len);
            host[start..end]
                .par_chunks_mut(1 << 16)
                .enumerate()
                .for_each(|(i, c)| fill(start + i * (1 << 16), c));
            let mut view = dst.slice_mut(start..end);
            cs.memcpy_htod(&host[start..end], &mut view)
                .map_err(|e| driver_error("upload", e))?;
        }
        self.dev
            .stream
            .join(cs)
            .map_err(|e| driver_error("stream ordering", e))?;
        Ok(())
    }

    /// Copies `src_len` elements from the device to the host, chunk by chunk, handing each chunk
    /// to `take` (which converts it into the caller's buffer) while the next one transfers.
    fn download<T: DeviceRepr + cudarc::driver::ValidAsZeroBits + Copy + Send + Sync>(
        &self,
        pin: &mut Option<PinnedHostSlice<T>>,
        src: &CudaSlice<T>,
        src_len: usize,
        take: impl Fn(usize, &[T]) + Sync,
    ) -> Result<(), EngineError> {
        const CHUNK: usize = 4 << 20;
        if pin.as_ref().is_none_or(|p| p.len() < src_len) {
            *pin = None;
            // SAFETY: page-locked host memory of src_len elements, written by the transfers
            // below before `take` reads it (each chunk after its event completes).
            let p = unsafe { self.dev.ctx.alloc_pinned_with_flags::<T>(src_len.max(1), 0) }
                .map_err(|e| driver_error("pinned host memory", e))?;
            *pin = Some(p);
        }
        let Some(p) = pin.as_mut() else {
            return Err(EngineError::Cuda("pinned buffer missing".into()));
        };
        let host = p
            .as_mut_slice()
            .map_err(|e| driver_error("pinned host memory", e))?;
        let stream = &self.dev.stream;
        let mut events = vec![];
        for start in (0..src_len).step_by(CHUNK) {
            let end = (start + CHUNK).min(src_len);
            let view = src.slice(start..end);
            stream
                .memcpy_dtoh(&view, &mut host[start..end])
                .map_err(|e| driver_error("download", e))?;
            events.push((start, end, self.event(stream)?));
        }
        for (start, end, ev) in events {
            ev.synchronize().map_err(|e| driver_error("download", e))?;
            let chunk = &host[start..end];
            chunk
                .par_chunks(1 << 16)
                .enumerate()
                .for_each(|(i, c)| take(start + i * (1 << 16), c));
        }
        Ok(())
    }

    fn apply(
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
    fn apply_many(
        &self,
        jobs: &mut [(Job<'_>, Outputs<'_>)],
        precision: Precision,
    ) -> Result<Timings, EngineError> {
        self.with_state(|st| self.apply_many_locked(st, jobs, precision))
    }

    /// Runs `f` on the locked state; after a GPU out of memory the caches are freed (and the
    /// error returned: the caller retries on the CPU).
    fn with_state<T>(
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

    fn apply_many_locked(
        &self,
        st: &mut State,
        jobs: &mut [(Job<'_>, Outputs<'_>)],
        precision: Precision,
    ) -> Result<Timings, EngineError> {
        let t0 = Instant::now();
        let mut timings = Timings::default();
        let Some(first) = jobs.first() else {
            return Ok(timings);
        };
        let key = many_key(&first.0, precision)
            .ok_or_else(|| EngineError::Cuda("this job cannot be batched".into()))?;
        let img0 = first.0.image;
        let lab0 = first.0.label;
        let (channels, in_shape) = (img0.channels, img0.shape.clone());
        let lab_channels = lab0.map_or(0, |l| l.channels);
        // Checked per job: the same key, valid buffers; identity plans are copied here.
        let mut todo = vec![];
        let mut maps = vec![];
        let mut out_shape = vec![];
        for (i, (job, out)) in jobs.iter_mut().enumerate() {
            if many_key(job, precision).as_ref() != Some(&key) {
                return Err(EngineError::Cuda(
                    "jobs of different kinds in one batch".into(),
                ));
            }
            let shape = check_job_region(job, out, None)?;
            if job.plan.is_identity() && shape == job.image.shape {
                out.image.copy_from_slice(&job.image.data);
                if let (Some(l), Some(o)) = (job.label, out.label.as_deref_mut()) {
                    o.copy_from_slice(&l.data);
                }
                continue;
            }
            maps.push(job.plan.compose(&job.image.shape)?);
            todo.push(i);
            out_shape = shape;
        }
        if todo.is_empty() {
            timings.total_ms = t0.elapsed().as_secs_f64() * 1e3;
            return Ok(timings);
        }
        let b = todo.len();
        let ndim = in_shape.len();
        let n_in: usize = in_shape.iter().product();
        let n_out: usize = out_shape.iter().product();
        // Every module this batch launches compiles at once on other threads (a first batch's
        // cost is then the longest compile, not their sum).
        self.prefetch(
            Family::Resample,
            &resample_defines(key.mode, key.order, ndim, Precision::F32, n_in >= 1 << 31),
            resample_many_entry(channels, lab_channels > 0),
        );
        if key.order == Order::Cubic {
            let pdefs = sampler_defines(key.mode, Order::Cubic, ndim, Precision::F32);
            self.prefetch(Family::Prefilter, &pdefs, "pad_f32");
        }
        // Each sample's field sigmas (none without elastic), used again for the passes below.
        let sigmas: Vec<Option<Vec<f64>>> = todo
            .iter()
            .map(|&i| {
                let plan = jobs[i].0.plan;
                match plan.elastic {
                    Some(e) if e.alpha != 0.0 => plan.field_sigma_vox(ndim),
                    _ => None,
                }
            })
            .collect();
        for &s in sigmas.iter().flatten().flatten() {
            self.prefetch(Family::Field, &field_defines(s), "gauss_mid_f32");
        }
        // One image (and label map) for every sample, or one each.
        let shared = todo.iter().all(|&i| {
            std::ptr::eq(jobs[i].0.image, img0)
                && match (jobs[i].0.label, lab0) {
                    (Some(a), Some(b)) => std::ptr::eq(a, b),
                    (None, None) => true,
                    _ => false,
                }
        });
        let copies = if shared { 1 } else { b };
        let mut grid = grid_out_k(&out_shape, resample_k())?;
        let zblocks = grid.grid_dim.2 as usize;
        if zblocks * b > 65535 {
            return Err(EngineError::Shape(format!(
                "{b} samples of {out_shape:?} are too many for one launch"
            )));
        }
        grid.grid_dim.2 = (zblocks * b) as u32;
        st.resident = None;

        // 1. Upload the image(s) and label map(s).
        let t_up = Instant::now();
        let ws = &mut st.ws;
        let imgs: Vec<&[f32]> = todo[..copies]
            .iter()
            .map(|&i| &jobs[i].0.image.data[..])
            .collect();
        let per = channels * n_in;
        let buf = ensure(&self.dev, &mut ws.img_f32, copies * per, "the images")?;
        self.upload(&mut ws.pin_f32, &mut buf.s, copies * per, |s, c| {
            fill_stacked(&imgs, per, s, c)
        })?;
        if lab_channels > 0 {
            let labs: Vec<&[f32]> = todo[..copies]
                .iter()
                .filter_map(|&i| jobs[i].0.label.map(|l| &l.data[..]))
                .collect();
            let per = lab_channels * n_in;
            let buf = ensure(&self.dev, &mut ws.lab_in, copies * per, "the label maps")?;
            self.upload(&mut ws.pin_f32, &mut buf.s, copies * per, |s, c| {
                fill_stacked(&labs, per, s, c)
            })?;
        }
        timings.upload_ms = t_up.elapsed().as_secs_f64() * 1e3;

        // Order 3: every image's coefficients, in one set of launches.
        let cubic = key.order == Order::Cubic;
        let e_pre0 = self.event(&self.dev.stream)?;
        let (coef_shape, pad) = if cubic {
            let cval = jobs[todo[0]].0.plan.cval;
            self.prefilter_device(
                ws,
                key.mode,
                &in_shape,
                copies * channels,
                Precision::F32,
                cval,
            )?
        } else {
            (in_shape.clone(), 0.0)
        };
        let e_pre1 = self.event(&self.dev.stream)?;
        let n_coef: usize = coef_shape.iter().product();

        // 2. The fields: one set of passes per sigma, over all of its samples.
        let (slots, groups) = field_slots(&sigmas);
        let n_slots: usize = groups.iter().map(|g| g.1.len()).sum();
        let field = if n_slots > 0 {
            let mut fbuf =
                DevBuf::<f32>::new(&self.dev, n_slots * ndim * n_out, "the elastic fields")?;
            let largest = groups.iter().map(|g| g.1.len()).max().unwrap_or(0);
            let scratch = ensure(
                &self.dev,
                &mut ws.field_scratch,
                largest * ndim * n_out,
                "the elastic field scratch",
            )?;
            let _busy = self.dev.tracker.in_use(fbuf.bytes() + scratch.bytes());
            // Keys in slot order.
            let mut seeds = vec![0u64; n_slots];
            for (k, slot) in slots.iter().enumerate() {
                if let (Some(slot), Some(e)) = (slot, jobs[todo[k]].0.plan.elastic) {
                    seeds[*slot] = e.seed;
                }
            }
            let host_keys = philox_keys(&seeds);
            let mut kernels = vec![];
            for (sigma, _) in &groups {
                kernels.push(self.field_kernels(sigma, &out_shape)?);
            }
            let keys = self.upload_keys(&mut ws.keys, &host_keys)?;
            let e0 = self.event(&self.dev.stream)?;
            let mut slot0 = 0;
            for ((_, members), k) in groups.iter().zip(&kernels) {
                let g = members.len();
                let len = g * ndim * n_out;
                let mut out = fbuf
                    .s
                    .slice_mut(slot0 * ndim * n_out..slot0 * ndim * n_out + len);
                let mut scr = scratch.s.slice_mut(0..len);
                self.field_passes(
                    k,
                    &out_shape,
                    keys,
                    &host_keys,
                    slot0 * ndim,
                    g * ndim,
                    0..ndim,
                    &mut out,
                    &mut scr,
                )?;
                slot0 += g;
            }
            let e1 = self.event(&self.dev.stream)?;
            e1.synchronize()
                .map_err(|e| driver_error("the elastic fields", e))?;
            timings.field_ms = e0.elapsed_ms(&e1).map_err(|e| driver_error("timing", e))? as f64;
            Some(fbuf)
        } else {
            None
        };

        // 3. Every sample's parameters, then one launch.
        let mut params = Vec::with_capacity(b);
        for (k, map) in maps.iter().enumerate() {
            let plan = jobs[todo[k]].0.plan;
            let mut p = resample_params(map, slots[k].is_some(), plan.cval);
            p.channels = channels as i32;
            p.pad = pad;
            p.n_in = n_coef as i64;
            p.in_shape = shape3(&coef_shape);
            p.field_slot = slots[k].unwrap_or(0) as i32;
            if lab_channels > 0 {
                p.has_label = 1;
                p.lab_channels = lab_channels as i32;
                p.n_lab = n_in as i64;
            }
            params.push(p);
        }
        let mut pbuf = DevBuf::<ResampleParams>::new(&self.dev, b, "the sample parameters")?;
        self.dev
            .stream
            .memcpy_htod(&params, &mut pbuf.s)
            .map_err(|e| driver_error("the sample parameters", e))?;
        let name = resample_many_entry(channels, lab_channels > 0);
        let f = self.function(
            Family::Resample,
            &resample_defines(
                key.mode,
                key.order,
                ndim,
                Precision::F32,
                n_coef.max(n_in) >= 1 << 31,
            ),
            name,
        )?;
        ensure(&self.dev, &mut ws.dummy, 1, "a placeholder")?;
        ensure(&self.dev, &mut ws.dummy_out, 1, "a placeholder")?;
        ensure(
            &self.dev,
            &mut ws.out_f32,
            b * channels * n_out,
            "the outputs",
        )?;
        if lab_channels > 0 {
            ensure(
                &self.dev,
                &mut ws.lab_out,
                b * lab_channels * n_out,
                "the label outputs",
            )?;
        }
        let _busy = self
            .dev
            .tracker
            .in_use(ws.device_bytes() + field.as_ref().map_or(0, |f| f.bytes()) + pbuf.bytes());
        let missing = || EngineError::Cuda("workspace buffer missing".into());
        let strides = ManyStrides {
            img: if shared {
                0
            } else {
                (channels * n_coef) as i64
            },
            out: (channels * n_out) as i64,
            lab: if shared {
                0
            } else {
                (lab_channels * n_in) as i64
            },
            lab_out: (lab_channels * n_out) as i64,
            field: (ndim * n_out) as i64,
            zblocks: zblocks as i32,
            samples: b as i32,
        };
        let dummy = &ws.dummy.as_ref().ok_or_else(missing)?.s;
        let field_s = field.as_ref().map_or(dummy, |f| &f.s);
        let lab_in = if lab_channels > 0 {
            &ws.lab_in.as_ref().ok_or_else(missing)?.s
        } else {
            dummy
        };
        let src = if cubic && key.mode.needs_prepad() {
            &ws.img_pad
        } else {
            &ws.img_f32
        };
        let src = &src.as_ref().ok_or_else(missing)?.s;
        let out_buf = &mut ws.out_f32.as_mut().ok_or_else(missing)?.s;
        let lab_out = match ws.lab_out.as_mut() {
            Some(l) if lab_channels > 0 => &mut l.s,
            _ => &mut ws.dummy_out.as_mut().ok_or_else(missing)?.s,
        };
        let stream = self.dev.stream.clone();
        let e_rs0 = self.event(&stream)?;
        let mut lb = stream.launch_builder(&f);
        lb.arg(src)
            .arg(out_buf)
            .arg(lab_in)
            .arg(lab_out)
            .arg(field_s)
            .arg(&pbuf.s)
            .arg(&strides);
        // SAFETY: resample_many_f32 or resample_many_plain_f32, the same arguments (const float*
        // img, float* out, const float* lab, float* lab_out, const float* field,
        // const ResampleParams* ps, ManyStrides st): img holds `copies` images of
        // channels * n_coef (the padded coefficients for order 3; stride 0 when shared), out
        // b * channels * n_out, lab and lab_out likewise for the label channels (or the
        // 1-element placeholders when has_label = 0, never read), field n_slots * ndim * n_out with every field_slot below
        // n_slots (or the placeholder when no sample has a field, has_field = 0), ps b
        // parameter sets; grid.z = zblocks * b and blocks with s >= b return; every voxel is
        // bounds-checked against its sample's box (output_voxel).
        unsafe { lb.launch(grid) }.map_err(|e| driver_error(name, e))?;
        let e_rs1 = self.event(&stream)?;

        // 4. Download into each job's buffers.
        let t_down = Instant::now();
        let outs: Vec<(SendPtr, usize)> = todo
            .iter()
            .map(|&i| {
                let o = &mut jobs[i].1.image;
                (SendPtr(o.as_mut_ptr()), o.len())
            })
            .collect();
        let per = channels * n_out;
        let src = ws.out_f32.as_ref().ok_or_else(missing)?;
        self.download(&mut ws.pin_f32, &src.s, b * per, |s, c| {
            scatter_stacked(&outs, per, s, c)
        })?;
        if lab_channels > 0 {
            let outs: Vec<(SendPtr, usize)> = todo
                .iter()
                .filter_map(|&i| {
                    jobs[i]
                        .1
                        .label
                        .as_deref_mut()
                        .map(|o| (SendPtr(o.as_mut_ptr()), o.len()))
                })
                .collect();
            let per = lab_channels * n_out;
            let src = ws.lab_out.as_ref().ok_or_else(missing)?;
            self.download(&mut ws.pin_f32, &src.s, b * per, |s, c| {
                scatter_stacked(&outs, per, s, c)
            })?;
        }
        timings.download_ms = t_down.elapsed().as_secs_f64() * 1e3;
        self.finish(ws, [&e_pre0, &e_pre1, &e_rs0, &e_rs1], &mut timings)?;
        timings.total_ms = t0.elapsed().as_secs_f64() * 1e3;
        Ok(timings)
    }

    /// The end of a transform: waits for the stream, reads the prefilter and resample times
    /// from their events ([start, end] each) and records the pinned staging size.
    fn finish(
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
        let pinned = ws.pin_f32.as_ref().map_or(0, |p| p.num_bytes())
            + ws.pin_u16.as_ref().map_or(0, |p| p.num_bytes());
        self.dev.set_pinned_bytes(pinned);
        Ok(())
    }

    fn apply_region(
        &self,
        job: Job<'_>,
        out: Outputs<'_>,
        precision: Precision,
        region: Region,
    ) -> Result<Timings, EngineError> {
        self.with_state(|st| self.apply_locked(st, &job, out, precision, region))
    }

    /// Order 3: pads (nearest, grid-constant: scipy's nprepad) and prefilters on the device the
    /// `channels` images of `in_shape` in `ws.img_f32`, into `ws.img_pad` (padded) or in place,
    /// then converts to the storage type in `ws.img_u16` (f16, bf16). Returns the coefficient
    /// shape and the pad.
    fn prefilter_device(
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

    fn apply_locked(
        &self,
        st: &mut State,
        job: &Job<'_>,
        out: Outputs<'_>,
        precision: Precision,
        region: Region,
    ) -> Result<Timings, EngineError> {
        let t0 = Instant::now();
        let dio = region.device;
        let out_shape = match dio {
            None => check_job_region(job, &out, region.plane)?,
            Some(d) => check_device_job(job, &d, region)?,
        };
        let img = job.image;
        let plan = job.plan;
        let map = plan.compose(&img.shape)?;
        let mut timings = Timings::default();
        let n_in: usize = img.shape.iter().product();
        let n_all: usize = out_shape.iter().product();
        let channels = img.channels;
        let lab_channels = job.label.map_or(0, |l| l.channels);
        let stream = self.dev.stream.clone();
        // The caller's device arrays, borrowed for this call (check_device_job matched them to
        // the job's grids).
        // SAFETY: apply_device's contract: each address holds the values named here on this
        // device, alive and untouched by other work until the call returns.
        let (d_img, d_lab, mut d_out, mut d_lab_out) = match dio {
            Some(d) => unsafe {
                (
                    Some(Borrowed::<f32>::new(&stream, d.image, channels * n_in)),
                    d.label
                        .map(|a| Borrowed::<f32>::new(&stream, a, lab_channels * n_in)),
                    Some(Borrowed::<f32>::new(&stream, d.out, channels * n_all)),
                    d.label_out
                        .map(|a| Borrowed::<f32>::new(&stream, a, lab_channels * n_all)),
                )
            },
            None => (None, None, None, None),
        };
        if let (true, Some(src), Some(dst)) = (
            plan.is_identity() && out_shape == img.shape,
            d_img.as_ref(),
            d_out.as_mut(),
        ) {
            // Nothing moves: the input is the answer, copied on the device.
            stream
                .memcpy_dtod(&**src, &mut **dst)
                .map_err(|e| driver_error("copy", e))?;
            if let (Some(src), Some(dst)) = (d_lab.as_ref(), d_lab_out.as_mut()) {
                stream
                    .memcpy_dtod(&**src, &mut **dst)
                    .map_err(|e| driver_error("copy", e))?;
            }
            stream.synchronize().map_err(|e| driver_error("copy", e))?;
            timings.total_ms = t0.elapsed().as_secs_f64() * 1e3;
            return Ok(timings);
        }
        if plan.is_identity() && out_shape == img.shape {
            // Nothing moves: the input is the exact answer, as on the CPU engine.
            match region.plane {
                None => out.image.copy_from_slice(&img.data),
                Some((axis, index)) => copy_plane(img, axis, index, out.image),
            }
            if let (Some(l), Some(o)) = (job.label, out.label) {
                match region.plane {
                    None => o.copy_from_slice(&l.data),
                    Some((axis, index)) => copy_plane(l, axis, index, o),
                }
            }
            timings.total_ms = t0.elapsed().as_secs_f64() * 1e3;
            return Ok(timings);
        }
        let ndim = map.ndim;
        // The computed box: the whole grid, or one plane.
        let mut box_lo = [0usize; 3];
        let mut box_shape = out_shape.clone();
        if let Some((axis, index)) = region.plane {
            box_lo[axis] = index;
            box_shape[axis] = 1;
        }
        let n_out: usize = box_shape.iter().product();
        let cubic = plan.order == Order::Cubic;
        let half = precision != Precision::F32;
        // The resample and prefilter modules compile on other threads while this one builds the
        // field's (a first run's cost is then the longest compile, not their sum).
        let elastic = plan.elastic.filter(|e| e.alpha != 0.0);
        self.prefetch(
            Family::Resample,
            &resample_defines(
                plan.mode,
                plan.order,
                ndim,
                precision,
                n_in.max(job.label.map_or(0, |l| l.shape.iter().product())) >= 1 << 31,
            ),
            resample_entry(precision, channels, job.label.is_some(), elastic.is_some()),
        );
        if cubic {
            let pdefs = sampler_defines(plan.mode, Order::Cubic, ndim, precision);
            self.prefetch(Family::Prefilter, &pdefs, "pad_f32");
        }

        // 1. The unit elastic field, cached on the device. Queued, not waited for: the upload
        // below overlaps it (the host stages the image while the device computes the field).
        let mut field_time = FieldTime::Cached;
        // The upload targets are allocated first: buffers come from the stream-ordered pool of
        // the compute stream, and the copy stream, which waits only for `before_field`, must not
        // write one before its allocation (nor into memory that a freed, smaller buffer held
        // while earlier kernels still read it).
        let up_key = region.resident.map(|k| (k, precision, job.label.is_some()));
        let will_reuse = !cubic && up_key.is_some() && st.resident == up_key && dio.is_none();
        if dio.is_none() && !will_reuse {
            if half && !cubic {
                ensure(&self.dev, &mut st.ws.img_u16, channels * n_in, "the image")?;
            } else {
                ensure(&self.dev, &mut st.ws.img_f32, channels * n_in, "the image")?;
            }
            if let Some(l) = job.label {
                ensure(&self.dev, &mut st.ws.lab_in, l.data.len(), "the label map")?;
            }
        }
        // Everything queued before the field: what the image and label uploads must wait for.
        let before_field = self.event(&stream)?;
        let has_field = match elastic {
            Some(e) => {
                let sigma_vox = plan.field_sigma_vox(out_shape.len()).unwrap_or_default();
                field_time = self.ensure_field(st, &sigma_vox, e.seed, &out_shape)?;
                true
            }
            None => false,
        };

        // 2. Upload (f32, or the storage type directly when no prefilter is needed), unless the
        // caller's key says the same image (and label) is already on the device.
        let t_up = Instant::now();
        let (key, reuse) = (up_key, will_reuse);
        st.resident = None;
        let ws = &mut st.ws;
        let img_len = channels * n_in;
        if let Some(src) = d_img.as_ref() {
            // The caller's array on the device: read in place, except where the storage type or
            // the prefilter (which works in its buffer) needs a copy of its own.
            if cubic {
                let buf = ensure(&self.dev, &mut ws.img_f32, img_len, "the image")?;
                stream
                    .memcpy_dtod(&**src, &mut buf.s.slice_mut(0..img_len))
                    .map_err(|e| driver_error("copy", e))?;
            } else if half {
                let buf = ensure(&self.dev, &mut ws.img_u16, img_len, "the image")?;
                let pdefs = sampler_defines(plan.mode, Order::Cubic, ndim, precision);
                let f = self.function(Family::Prefilter, &pdefs, "to_store_f32")?;
                let total = img_len as i64;
                let mut b = stream.launch_builder(&f);
                b.arg(&**src).arg(&mut buf.s).arg(&total);
                // SAFETY: to_store_f32(const float* src, u16* dst, i64 n): the caller's image
                // holds img_len floats, buf >= img_len u16 (ensured); bounds-checked per thread.
                unsafe { b.launch(grid_1d(img_len)?) }
                    .map_err(|e| driver_error("to_store_f32", e))?;
            }
        } else if reuse {
            // The device copy of the last call with this key is still there.
        } else if half && !cubic {
            let buf = ensure(&self.dev, &mut ws.img_u16, img_len, "the image")?;
            let data = &img.data;
            let conv: fn(f32) -> u16 = if precision == Precision::F16 {
                |v| half::f16::from_f32(v).to_bits()
            } else {
                |v| half::bf16::from_f32(v).to_bits()
            };
            self.upload_after(
                &mut ws.pin_u16,
                &mut buf.s,
                img_len,
                |s, c| {
                    let len = c.len();
                    for (o, &v) in c.iter_mut().zip(&data[s..s + len]) {
                        *o = conv(v);
                    }
                },
                Some(&before_field),
            )?;
        } else {
            let buf = ensure(&self.dev, &mut ws.img_f32, img_len, "the image")?;
            let data = &img.data;
            self.upload_after(
                &mut ws.pin_f32,
                &mut buf.s,
                img_len,
                |s, c| c.copy_from_slice(&data[s..s + c.len()]),
                Some(&before_field),
            )?;
        }
        if let (Some(l), false, None) = (job.label, reuse, dio) {
            let buf = ensure(&self.dev, &mut ws.lab_in, l.data.len(), "the label map")?;
            let data = &l.data;
            self.upload_after(
                &mut ws.pin_f32,
                &mut buf.s,
                data.len(),
                |s, c| c.copy_from_slice(&data[s..s + c.len()]),
                Some(&before_field),
            )?;
        }
        timings.upload_ms = t_up.elapsed().as_secs_f64() * 1e3;
        let now_resident = if cubic { None } else { key };

        // 3. Cubic: pad (nearest, grid-constant) and prefilter on the device, then store type.
        let e_pre0 = self.event(&stream)?;
        let (coef_shape, pad) = if cubic {
            self.prefilter_device(ws, plan.mode, &img.shape, channels, precision, plan.cval)?
        } else {
            (img.shape.clone(), 0.0)
        };
        let e_pre1 = self.event(&stream)?;

        // 4. The fused resample.
        let mut p = resample_params(&map, has_field, plan.cval);
        p.box_lo = [box_lo[0] as i32, box_lo[1] as i32, box_lo[2] as i32];
        p.box_shape = shape3(&box_shape);
        p.n_box = n_out as i64;
        p.pad = pad;
        p.n_in = coef_shape.iter().product::<usize>() as i64;
        p.in_shape = shape3(&coef_shape);
        p.channels = channels as i32;
        if let Some(l) = job.label {
            p.has_label = 1;
            p.lab_channels = l.channels as i32;
            p.n_lab = n_in as i64;
        }
        let name = resample_entry(precision, channels, job.label.is_some(), has_field);
        // Channels of 2^31 elements or more need 64-bit tap offsets.
        let idx64 = p.n_in.max(p.n_lab) >= 1 << 31;
        let rdefs = resample_defines(plan.mode, plan.order, ndim, precision, idx64);
        let f = self.function(Family::Resample, &rdefs, name)?;
        ensure(&self.dev, &mut ws.dummy, 1, "a placeholder")?;
        ensure(&self.dev, &mut ws.dummy_out, 1, "a placeholder")?;
        if job.label.is_some() && dio.is_none() {
            ensure(
                &self.dev,
                &mut ws.lab_out,
                lab_channels * n_out,
                "the label output",
            )?;
        }
        if half {
            ensure(&self.dev, &mut ws.out_u16, channels * n_out, "the output")?;
        } else if dio.is_none() {
            ensure(&self.dev, &mut ws.out_f32, channels * n_out, "the output")?;
        }
        let _busy = self
            .dev
            .tracker
            .in_use(ws.device_bytes() + st.field.as_ref().map_or(0, |f| f.buf.bytes()));
        let missing = || EngineError::Cuda("workspace buffer missing".into());
        let dummy = ws.dummy.as_ref().ok_or_else(missing)?;
        let field = match &st.field {
            Some(f) if has_field => &f.buf.s,
            _ => &dummy.s,
        };
        let lab_in = match (&d_lab, job.label) {
            (Some(l), _) => &**l,
            (None, Some(_)) => &ws.lab_in.as_ref().ok_or_else(missing)?.s,
            (None, None) => &dummy.s,
        };
        let e_rs0 = self.event(&stream)?;
        if half {
            let src = &ws.img_u16.as_ref().ok_or_else(missing)?.s;
            let out_buf = &mut ws.out_u16.as_mut().ok_or_else(missing)?.s;
            let lab_out = match (d_lab_out.as_mut(), ws.lab_out.as_mut()) {
                (Some(d), _) => &mut **d,
                (None, Some(b)) if job.label.is_some() => &mut b.s,
                _ => &mut ws.dummy_out.as_mut().ok_or_else(missing)?.s,
            };
            let mut b = stream.launch_builder(&f);
            b.arg(src)
                .arg(out_buf)
                .arg(lab_in)
                .arg(lab_out)
                .arg(field)
                .arg(&p);
            // SAFETY: resample_{f16,bf16} or resample_plain[f]_{f16,bf16}, the same arguments
            // (const u16* img, u16* out, const float* lab,
            // float* lab_out, const float* field, ResampleParams): img holds channels * n_in
            // coefficients, out channels * n_out, lab/lab_out lab_channels * n_in / n_out (or the
            // 1-element placeholder when has_label = 0, never read), field ndim * n_out (or the
            // placeholder when has_field = 0); all ensured above; one thread per output voxel,
            // bounds-checked against out_shape (output_voxel).
            unsafe { b.launch(grid_out_k(&box_shape, resample_k())?) }
                .map_err(|e| driver_error(name, e))?;
        } else {
            let src = if cubic && plan.mode.needs_prepad() {
                &ws.img_pad
            } else {
                &ws.img_f32
            };
            let src = match (&d_img, cubic) {
                (Some(d), false) => &**d,
                _ => &src.as_ref().ok_or_else(missing)?.s,
            };
            let out_buf = match d_out.as_mut() {
                Some(d) => &mut **d,
                None => &mut ws.out_f32.as_mut().ok_or_else(missing)?.s,
            };
            let lab_out = match (d_lab_out.as_mut(), ws.lab_out.as_mut()) {
                (Some(d), _) => &mut **d,
                (None, Some(b)) if job.label.is_some() => &mut b.s,
                _ => &mut ws.dummy_out.as_mut().ok_or_else(missing)?.s,
            };
            let mut b = stream.launch_builder(&f);
            b.arg(src)
                .arg(out_buf)
                .arg(lab_in)
                .arg(lab_out)
                .arg(field)
                .arg(&p);
            // SAFETY: resample_f32 or resample_plain[f]_f32, the same arguments (const float* img,
            // float* out, const float* lab, float* lab_out,
            // const float* field, ResampleParams): the same lengths as above, in f32; all
            // ensured above; bounds-checked against out_shape (output_voxel).
            unsafe { b.launch(grid_out_k(&box_shape, resample_k())?) }
                .map_err(|e| driver_error(name, e))?;
        }
        let e_rs1 = self.event(&stream)?;

        // 5. Download (and convert from the storage type); device outputs stay on the device.
        let t_down = Instant::now();
        if let Some(dst) = d_out.as_mut() {
            if half {
                let src = ws.out_u16.as_ref().ok_or_else(missing)?;
                let mut defs = mode_defines(plan.mode);
                defs.push(store_define(precision).into());
                let f = self.function(Family::Filter, &defs, "from_store_f32")?;
                let total = (channels * n_out) as i64;
                let mut b = stream.launch_builder(&f);
                b.arg(&src.s).arg(&mut **dst).arg(&total);
                // SAFETY: from_store_f32(const store_t* src, float* dst, i64 n): out_u16 holds
                // channels * n_out values of the build's store_t (ensured above), the caller's
                // output channels * n_out floats; bounds-checked per thread.
                unsafe { b.launch(grid_1d(channels * n_out)?) }
                    .map_err(|e| driver_error("from_store_f32", e))?;
            }
            timings.download_ms = t_down.elapsed().as_secs_f64() * 1e3;
            self.finish(ws, [&e_pre0, &e_pre1, &e_rs0, &e_rs1], &mut timings)?;
            timings.field_ms = field_time.ms()?;
            timings.total_ms = t0.elapsed().as_secs_f64() * 1e3;
            return Ok(timings);
        }
        let out_ptr = SendPtr(out.image.as_mut_ptr());
        let out_len = out.image.len();
        if half {
            let src = ws.out_u16.as_ref().ok_or_else(missing)?;
            let conv: fn(u16) -> f32 = if precision == Precision::F16 {
                |b| half::f16::from_bits(b).to_f32()
            } else {
                |b| half::bf16::from_bits(b).to_f32()
            };
            self.download(&mut ws.pin_u16, &src.s, channels * n_out, |s, c| {
                // SAFETY-free: disjoint ranges of `out.image` per chunk (see SendPtr::slice).
                let o = out_ptr.slice(s, c.len(), out_len);
                for (o, &b) in o.iter_mut().zip(c) {
                    *o = conv(b);
                }
            })?;
        } else {
            let src = ws.out_f32.as_ref().ok_or_else(missing)?;
            self.download(&mut ws.pin_f32, &src.s, channels * n_out, |s, c| {
                out_ptr.slice(s, c.len(), out_len).copy_from_slice(c);
            })?;
        }
        if let (Some(l), Some(lo)) = (job.label, out.label) {
            let src = ws.lab_out.as_ref().ok_or_else(missing)?;
            let ptr = SendPtr(lo.as_mut_ptr());
            let len = lo.len();
            self.download(&mut ws.pin_f32, &src.s, l.channels * n_out, |s, c| {
                ptr.slice(s, c.len(), len).copy_from_slice(c);
            })?;
        }
        timings.download_ms = t_down.elapsed().as_secs_f64() * 1e3;
        self.finish(ws, [&e_pre0, &e_pre1, &e_rs0, &e_rs1], &mut timings)?;
        timings.field_ms = field_time.ms()?;
        st.resident = now_resident;
        timings.total_ms = t0.elapsed().as_secs_f64() * 1e3;
        Ok(timings)
    }

    /// Input coordinates of every output voxel, `(ndim, *out_shape)` f32 (`--save-coords`).
    fn coordinates(&self, plan: &Plan, in_shape: &[usize]) -> Result<Vec<f32>, EngineError> {
        let map = plan.compose(in_shape)?;
        let mut st = lock(&self.state);
        let n: usize = map.out_shape.iter().product();
        let has_field = match plan.elastic {
            Some(e) if e.alpha != 0.0 => {
                let sigma_vox = plan.field_sigma_vox(map.ndim).unwrap_or_default();
                self.ensure_field(&mut st, &sigma_vox, e.seed, &map.out_shape)?;
                true
            }
            _ => false,
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

    /// Largest and RMS displacement `|alpha| |G|` of the plan's field, from the device: voxels, or
    /// millimetres when the plan's space is mm.
    fn displacement_stats(
        &self,
        plan: &Plan,
        out_shape: &[usize],
    ) -> Result<Option<(f64, f64)>, EngineError> {
        let Some(e) = plan.elastic.filter(|e| e.alpha != 0.0) else {
            return Ok(None);
        };
        let mut st = lock(&self.state);
        let sigma_vox = plan.field_sigma_vox(out_shape.len()).unwrap_or_default();
        self.ensure_field(&mut st, &sigma_vox, e.seed, out_shape)?;
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

    fn drop_caches(&self) {
        *lock(&self.state) = State::default();
        self.dev.set_pinned_bytes(0);
    }
}

/// A raw pointer to a caller's output, shared by the download's worker threads, each writing a
/// disjoint range.
#[derive(Clone, Copy)]
struct SendPtr(*mut f32);
// SAFETY: only used by `slice`, whose callers (the download chunks) write disjoint ranges of one
// live `&mut [f32]` that outlives the download.
unsafe impl Send for SendPtr {}
// SAFETY: as above.
unsafe impl Sync for SendPtr {}

impl SendPtr {
    #[allow(clippy::mut_from_ref)] // Disjoint ranges per caller; see the SAFETY notes.
    fn slice(&self, start: usize, len: usize, total: usize) -> &mut [f32] {
        assert!(start + len <= total, "download chunk out of range");
        // SAFETY: `start + len <= total`, the length of the `&mut [f32]` this pointer came from,
        // which outlives every call; the chunks handed out by `download` never overlap.
        unsafe { std::slice::from_raw_parts_mut(self.0.add(start), len) }
    }
}

/// What jobs must share to run in one batched launch ([`DeviceEngine::apply_many`]).
#[derive(Clone, Debug, PartialEq)]
pub struct ManyKey {
    in_shape: Vec<usize>,
    channels: usize,
    out_shape: Vec<usize>,
    mode: Mode,
    order: Order,
    lab_channels: Option<usize>,
    /// The cval the order-3 grid-constant prepad writes (bits).
    pad_cval: Option<u32>,
}

/// The batch a job can join, or `None` when it runs alone: half-precision storage takes the
/// single-volume path. Order 3 prefilters once per batch (every image of the batch, padded with
/// one cval in grid-constant mode).
pub fn many_key(job: &Job<'_>, precision: Precision) -> Option<ManyKey> {
    let plan = job.plan;
    if precision != Precision::F32 {
        return None;
    }
    if !matches!(job.image.ndim(), 2 | 3) {
        return None;
    }
    Some(ManyKey {
        in_shape: job.image.shape.clone(),
        channels: job.image.channels,
        out_shape: plan
            .out_shape
            .clone()
            .unwrap_or_else(|| job.image.shape.clone()),
        mode: plan.mode,
        order: plan.order,
        lab_channels: job.label.map(|l| l.channels),
        pad_cval: (plan.order == Order::Cubic && plan.mode == Mode::GridConstant)
            .then(|| plan.cval.to_bits()),
    })
}

/// Samples that share a sigma: the per-axis sigmas and the samples' indices.
pub type SigmaGroup = (Vec<f64>, Vec<usize>);

/// The field slot of each sample (`None`: no elastic field) and the groups of samples that share
/// a sigma (the per-axis sigmas, compared bit for bit), in slot order: group g's samples take
/// consecutive slots, so that one set of passes makes all of their fields.
pub fn field_slots(sigmas: &[Option<Vec<f64>>]) -> (Vec<Option<usize>>, Vec<SigmaGroup>) {
    let mut groups: Vec<SigmaGroup> = vec![];
    for (i, s) in sigmas.iter().enumerate() {
        let Some(s) = s else { continue };
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        match groups.iter_mut().find(|g| bits(&g.0) == bits(s)) {
            Some(g) => g.1.push(i),
            None => groups.push((s.clone(), vec![i])),
        }
    }
    let mut slots = vec![None; sigmas.len()];
    let mut next = 0;
    for (_, members) in &groups {
        for &i in members {
            slots[i] = Some(next);
            next += 1;
        }
    }
    (slots, groups)
}

/// Fills `c` (elements `s..s + c.len()` of the concatenation of `parts`, `per` elements each).
fn fill_stacked(parts: &[&[f32]], per: usize, s: usize, c: &mut [f32]) {
    let mut done = 0;
    while done < c.len() {
        let at = s + done;
        let (j, off) = (at / per, at % per);
        let take = (per - off).min(c.len() - done);
        c[done..done + take].copy_from_slice(&parts[j][off..off + take]);
        done += take;
    }
}

/// Writes `c` (elements `s..` of the concatenation of the outputs, `per` elements each) into
/// the outputs; concurrent callers write disjoint ranges (see [`SendPtr`]).
fn scatter_stacked(outs: &[(SendPtr, usize)], per: usize, s: usize, c: &[f32]) {
    let mut done = 0;
    while done < c.len() {
        let at = s + done;
        let (j, off) = (at / per, at % per);
        let take = (per - off).min(c.len() - done);
        outs[j]
            .0
            .slice(off, take, outs[j].1)
            .copy_from_slice(&c[done..done + take]);
        done += take;
    }
}

/// Element strides between the samples of `resample_many_*`; must match `struct ManyStrides` in
/// kernels/resample.cu.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct ManyStrides {
    img: i64,
    out: i64,
    lab: i64,
    lab_out: i64,
    field: i64,
    zblocks: i32,
    samples: i32,
}

// SAFETY: #[repr(C)], plain old data (i64 and i32 only), laid out as `struct ManyStrides` in
// kernels/resample.cu (48 bytes, 8-byte aligned).
unsafe impl DeviceRepr for ManyStrides {}

fn registry() -> &'static Mutex<HashMap<usize, Arc<DeviceEngine>>> {
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

/// The CUDA engine on one or more devices.
pub struct CudaBackend {
    engines: Vec<Arc<DeviceEngine>>,
    precision: Precision,
    next: AtomicUsize,
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

    /// The devices' memory statistics.
    pub fn mem_stats(&self) -> Vec<MemStats> {
        self.engines.iter().map(|e| e.dev.mem_stats()).collect()
    }

    /// `--save-coords` from the GPU: `(ndim, *out_shape)` f32 input coordinates.
    pub fn coordinates(&self, plan: &Plan, in_shape: &[usize]) -> Result<Vec<f32>, EngineError> {
        self.engines[0].coordinates(plan, in_shape)
    }

    /// Largest and RMS elastic displacement `|alpha| |G|`, from the device's cached field: voxels,
    /// or millimetres when the plan's space is mm.
    pub fn displacement_stats(
        &self,
        plan: &Plan,
        out_shape: &[usize],
    ) -> Result<Option<(f64, f64)>, EngineError> {
        self.engines[0].displacement_stats(plan, out_shape)
    }

    /// Drops the cached field and buffers of every device of this backend.
    pub fn clear_cache(&self) {
        for e in &self.engines {
            e.drop_caches();
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

impl DeviceEngine {
    /// How many jobs like `job` one batched launch takes: what fits a quarter of the driver's
    /// free memory (and half of an `AUGSCOPE_GPU_MEM_LIMIT`), at most 8 GiB and 256 samples,
    /// and the grid's z limit.
    fn many_capacity(&self, job: &Job<'_>) -> usize {
        let out_shape = job
            .plan
            .out_shape
            .clone()
            .unwrap_or_else(|| job.image.shape.clone());
        let n_out: usize = out_shape.iter().product();
        let n_in: usize = job.image.shape.iter().product();
        let ndim = out_shape.len();
        let lab = job.label.map_or(0, |l| l.channels);
        // Field and its scratch, outputs, and an image and label map each (when not shared).
        let per_sample =
            4 * (2 * ndim * n_out + (job.image.channels + lab) * (n_out + n_in)) + 1024;
        let stats = self.dev.mem_stats();
        let mut budget = (stats.driver_free_bytes / 4).min(8 << 30);
        if let Some(l) = stats.limit_bytes {
            budget = budget.min(l / 2);
        }
        let zblocks = grid_out_k(&out_shape, resample_k())
            .map_or(1, |g| g.grid_dim.2 as usize)
            .max(1);
        (budget / per_sample).clamp(1, 256).min(65535 / zblocks)
    }

    /// This device's share of [`CudaBackend::apply_batch`].
    fn run_jobs(
        &self,
        work: Vec<(usize, Job<'_>, Outputs<'_>)>,
        precision: Precision,
    ) -> Vec<(usize, Result<Timings, EngineError>)> {
        let mut results = Vec::with_capacity(work.len());
        let mut it = work.into_iter().peekable();
        while let Some((i, job, out)) = it.next() {
            let Some(key) = many_key(&job, precision) else {
                results.push((i, self.apply(job, out, precision)));
                continue;
            };
            let cap = self.many_capacity(&job);
            let mut ids = vec![i];
            let mut chunk = vec![(job, out)];
            while chunk.len() < cap {
                match it.next_if(|(_, j, _)| many_key(j, precision).as_ref() == Some(&key)) {
                    Some((i, j, o)) => {
                        ids.push(i);
                        chunk.push((j, o));
                    }
                    None => break,
                }
            }
            if chunk.len() == 1 {
                for (i, (j, o)) in ids.into_iter().zip(chunk) {
                    results.push((i, self.apply(j, o, precision)));
                }
                continue;
            }
            match self.apply_many(&mut chunk, precision) {
                Ok(t) => {
                    let t = Timings {
                        batched: Some(chunk.len()),
                        ..t
                    };
                    results.extend(ids.into_iter().map(|i| (i, Ok(t.clone()))));
                }
                Err(_) => {
                    // One by one: each job gets its own result (or error).
                    for (i, (j, o)) in ids.into_iter().zip(chunk) {
                        results.push((i, self.apply(j, o, precision)));
                    }
                }
            }
        }
        results
    }
}

impl CudaBackend {
    /// One output plane of a 3D transform, the plane `index` normal to `axis` (the viewer's path:
    /// `out_image` holds `channels` planes, `out_label` the label planes), computed on the first
    /// device: the kernel runs over that plane only and only the plane comes back. With
    /// `image_key` (the caller's key of the image and label content), the next call with the same
    /// key reuses the device copy instead of uploading again, so a slider move costs the plane,
    /// not the volume. Same values as that plane of [`Backend::apply`].
    pub fn apply_slice(
        &self,
        job: Job<'_>,
        image_key: Option<u64>,
        axis: usize,
        index: usize,
        out_image: &mut [f32],
        out_label: Option<&mut [f32]>,
    ) -> Result<Timings, EngineError> {
        let region = Region {
            plane: Some((axis, index)),
            resident: image_key,
            device: None,
        };
        let out = Outputs {
            image: out_image,
            label: out_label,
        };
        self.engines[0].apply_region(job, out, self.precision, region)
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
        let out = Outputs {
            image: &mut [],
            label: None,
        };
        self.engines[0].apply_region(job, out, self.precision, region)
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

impl Backend for CudaBackend {
    fn name(&self) -> String {
        let ids: Vec<String> = self.ordinals().iter().map(|i| i.to_string()).collect();
        format!("cuda:{}", ids.join(","))
    }

    fn apply(&self, job: Job<'_>, out: Outputs<'_>) -> Result<Timings, EngineError> {
        // Concurrent callers spread over the devices; one caller uses them in turn.
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.engines.len();
        self.engines[i].apply(job, out, self.precision)
    }

    fn apply_many(&self, jobs: Vec<(Job<'_>, Outputs<'_>)>) -> Vec<Result<Timings, EngineError>> {
        self.apply_batch(jobs)
    }
}

/// Chooses the engine for a request (DESIGN §6): an explicit CUDA request opens the devices; when
/// that is impossible (no driver, no GPU, NVRTC missing or failing) the CPU engine runs and the
/// note says why, in one line. `auto` and `cpu` run on the CPU: the data lives on the host.
pub fn select(spec: &BackendSpec, precision: Precision) -> Selected {
    let cpu = || Box::new(super::cpu::CpuBackend::new());
    match spec {
        BackendSpec::Cpu | BackendSpec::Auto => Selected {
            backend: cpu(),
            note: None,
        },
        BackendSpec::Cuda(ids) => match CudaBackend::new(ids, precision) {
            Ok(b) => Selected {
                backend: Box::new(b),
                note: None,
            },
            Err(e) => {
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
        },
    }
}

fn one_line(s: &str) -> String {
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

/// Why a job went to the CPU: out of memory.
fn oom(why: &str) -> String {
    format!("ran out of memory ({why})")
}

/// Why a job went to the CPU: a grid one launch cannot cover.
fn limit(why: &str) -> String {
    format!("cannot run this grid ({why})")
}

/// The job again on the CPU engine, after `backend` could not run it (`why`), with the note.
fn retry_on_cpu(
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
                vec![0f32; img.channels * n],
                lab.map(|l| vec![0f32; l.channels * n]),
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

#[cfg(test)]
mod tests {
    use super::*;

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
