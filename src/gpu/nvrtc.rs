//! NVRTC and the module store: one `.cu` file per kernel [`Family`], compiled at run time to
//! CUBIN for the device's architecture (PTX where it is unknown), kept on disk by
//! [`super::kernel_cache`] and in memory once per process, so that no compile is ever repeated.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use cudarc::nvrtc::Ptx;

use super::{GpuError, kernel_cache, lock, prebuilt};
use crate::core::{Mode, Precision};

pub use super::family::{BOUNDARY_CUH, Family};

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
            super::driver_message(&e)
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

pub(crate) fn store_define(p: Precision) -> &'static str {
    match p {
        Precision::F32 => "-DSTORE_F32",
        Precision::F16 => "-DSTORE_F16",
        Precision::Bf16 => "-DSTORE_BF16",
    }
}

/// NVRTC's options for one family: no fast-math, IEEE division and square root, no flush to
/// zero; fmad off except in the field family, the defines, and `--gpu-architecture` where known.
pub(crate) fn nvrtc_options(family: Family, defines: &[String], arch: Option<&str>) -> Vec<String> {
    // fmad off keeps the sampler's f32 tap sums and the prefilter the CPU's operation for
    // operation; the field's passes write their fused multiply-adds as intrinsics, in the CPU's
    // order (kernels/field.cu), so fmad on changes none of their sums.
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
    // Extra -D defines for measurements of kernel variants (AUGSCOPE_NVRTC_DEFINES=-DX).
    options.extend(super::tuning().nvrtc_defines.iter().cloned());
    options
}

/// Why a device of `arch` and compute capability `cc` cannot have its kernels: NVRTC is missing
/// and no store of prebuilt kernels ([`prebuilt::serves`]) serves the device on this driver.
pub fn compiler_missing(arch: Option<&str>, cc: (i32, i32)) -> Option<String> {
    let err = nvrtc_version().err()?;
    let served = driver_version().is_ok_and(|d| prebuilt::serves(arch, cc, d));
    (!served).then_some(err)
}

/// The module of `family` with `defines` as PTX from the process's prebuilt store, for a device
/// of compute capability `cc` that no CUBIN of the store serves (see [`prebuilt::Index::ptx_for`]).
pub(crate) fn prebuilt_ptx(
    family: Family,
    defines: &[String],
    cc: (i32, i32),
) -> Option<ModuleImage> {
    let (ptx, entries) = prebuilt::lookup_ptx(
        family,
        |virt| nvrtc_options(family, &family.whole_module(defines), Some(virt)),
        cc,
        || driver_version().ok(),
    )?;
    prebuilt::record(family, defines);
    kernel_cache::count_hit();
    Some(ModuleImage {
        image: Ptx::from_src(ptx),
        entries,
        is_cubin: false,
        cached: None,
        ptx: None,
    })
}

/// [`nvrtc_options`] for a known architecture, public for the prebuilt stores' callers and tests.
pub fn nvrtc_options_for(family: Family, defines: &[String], arch: &str) -> Vec<String> {
    nvrtc_options(family, defines, Some(arch))
}

/// What NVRTC made of one program: its PTX, and its CUBIN when compiled for a real `sm_XY`.
pub(crate) struct NvrtcOutput {
    pub(crate) ptx: String,
    pub(crate) cubin: Option<Vec<u8>>,
}

/// Runs NVRTC on `family` with `options`; the compiler's log on failure.
pub(crate) fn nvrtc_compile(family: Family, options: &[String]) -> Result<NvrtcOutput, GpuError> {
    use cudarc::nvrtc::{result, sys};
    nvrtc_version().map_err(GpuError::Unavailable)?;
    let fail = |what: String| {
        GpuError::Cuda(format!(
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
) -> Result<Ptx, GpuError> {
    let out = nvrtc_compile(family, &nvrtc_options(family, defines, arch))?;
    Ok(Ptx::from_src(out.ptx))
}

/// A module ready to load: CUBIN for the device's architecture (from a prebuilt store, the disk
/// cache, or compiled and then cached), else PTX for the driver to JIT where the architecture is unknown; the
/// module's entry names; and the cache key it is stored under.
#[derive(Clone)]
pub struct ModuleImage {
    pub image: Ptx,
    pub entries: Vec<String>,
    /// Whether the image is a CUBIN (loaded as it is) rather than PTX (JIT-compiled on load).
    pub is_cubin: bool,
    /// The disk cache's folder and key of a CUBIN, so that one the driver refuses is forgotten.
    pub(crate) cached: Option<(std::path::PathBuf, String)>,
    /// The PTX of a module compiled in this process, the fallback when a CUBIN does not load.
    pub(crate) ptx: Option<String>,
}

/// The module of `family` with `defines` for `arch`, from the disk cache where it holds one.
pub fn compile_module(
    family: Family,
    defines: &[String],
    arch: Option<&'static str>,
) -> Result<ModuleImage, GpuError> {
    compile_module_in(family, defines, arch, kernel_cache::dir())
}

/// [`compile_module`] with the cache folder given (`None`: no disk cache).
pub fn compile_module_in(
    family: Family,
    defines: &[String],
    arch: Option<&'static str>,
    cache_dir: Option<std::path::PathBuf>,
) -> Result<ModuleImage, GpuError> {
    let options = nvrtc_options(family, defines, arch);
    prebuilt::record(family, defines);
    // A store holds whole modules: the one of these defines with every entry of the file.
    let whole = nvrtc_options(family, &family.whole_module(defines), arch);
    if let Some(a) = arch
        && let Some(hit) = prebuilt::lookup(family, &whole, a, || driver_version().ok())
    {
        kernel_cache::count_hit();
        return Ok(ModuleImage {
            image: Ptx::from_binary(hit.image),
            entries: hit.entries,
            is_cubin: true,
            cached: None,
            ptx: None,
        });
    }
    let nvrtc = nvrtc_version().map_err(|e| match prebuilt::dir() {
        // Say which kernel the store lacks: the fix is NVRTC, or a store that holds it.
        Some((d, _)) => GpuError::Unavailable(format!(
            "the prebuilt kernels in {} do not hold {} with {}, and {e}",
            d.display(),
            family.file(),
            defines.join(" ")
        )),
        None => GpuError::Unavailable(e),
    })?;
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

/// Compiles every module of `manifest` for every architecture of `archs` (`sm_XY`) into a store of
/// prebuilt kernels in `dir` (created, [`prebuilt`]), and writes its index. The options are the engine's for the defaults (no
/// tuning define may be set). Returns the index.
pub fn build_prebuilt(
    manifest: &[prebuilt::ModuleSpec],
    archs: &[String],
    dir: &std::path::Path,
) -> Result<prebuilt::Index, GpuError> {
    if !super::tuning().nvrtc_defines.is_empty() {
        return Err(GpuError::Cuda(
            "AUGSCOPE_NVRTC_DEFINES is set: a prebuilt store holds the defaults only".into(),
        ));
    }
    let nvrtc = nvrtc_version().map_err(GpuError::Unavailable)?;
    std::fs::create_dir_all(dir).map_err(|e| GpuError::Cuda(format!("{}: {e}", dir.display())))?;
    let mut targets = vec![];
    for arch in archs {
        if !arch.starts_with("sm_") {
            return Err(GpuError::Cuda(format!(
                "architecture '{arch}': a real one (sm_XY) is needed for a CUBIN"
            )));
        }
        targets.push(arch.clone());
    }
    // PTX of the newest architecture too, for devices newer than every CUBIN (their driver
    // compiles it on load).
    let newest = archs
        .iter()
        .filter_map(|a| prebuilt::cc_of(a).map(|cc| (cc, a)))
        .max()
        .map(|(_, a)| a.replacen("sm_", "compute_", 1));
    targets.extend(newest.clone());
    let manifest = &prebuilt::whole_modules(manifest).map_err(GpuError::Cuda)?;
    let mut jobs = vec![];
    for arch in &targets {
        for spec in manifest {
            jobs.push((
                spec.family().map_err(GpuError::Cuda)?,
                &spec.defines,
                arch.as_str(),
            ));
        }
    }
    // One compile per job, on every core (NVRTC is thread-safe; each program is its own).
    let next = std::sync::atomic::AtomicUsize::new(0);
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let one = |(family, defines, arch): (Family, &Vec<String>, &str)| -> Result<(), GpuError> {
        let options = nvrtc_options(family, defines, Some(arch));
        let out = nvrtc_compile(family, &options)?;
        let entries = ptx_entries(&out.ptx);
        let image = if arch.starts_with("sm_") {
            out.cubin.ok_or_else(|| {
                GpuError::Cuda(format!(
                    "NVRTC made no CUBIN of {} for {arch}",
                    family.file()
                ))
            })?
        } else {
            out.ptx.into_bytes()
        };
        let c = kernel_cache::Compiled { image, entries };
        let k = prebuilt::key(family, &options, arch);
        kernel_cache::write(dir, &k, &c);
        if kernel_cache::read(dir, &k).as_ref() != Some(&c) {
            return Err(GpuError::Cuda(format!(
                "{}: the entry of {} for {arch} could not be written",
                dir.display(),
                family.file()
            )));
        }
        Ok(())
    };
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads.min(jobs.len()).max(1))
            .map(|_| {
                scope.spawn(|| -> Result<(), GpuError> {
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(&job) = jobs.get(i) else {
                            return Ok(());
                        };
                        if let Err(e) = one(job) {
                            // Stops the other workers at their next job.
                            next.store(jobs.len(), std::sync::atomic::Ordering::Relaxed);
                            return Err(e);
                        }
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| {
                w.join()
                    .unwrap_or_else(|_| Err(GpuError::Cuda("a compile panicked".into())))
            })
            .collect::<Result<Vec<()>, GpuError>>()
    })?;
    let index = prebuilt::Index {
        nvrtc,
        archs: archs.to_vec(),
        modules: manifest.len(),
        ptx: newest,
    };
    let text = serde_json::to_string_pretty(&index).map_err(|e| GpuError::Cuda(e.to_string()))?;
    std::fs::write(dir.join(prebuilt::INDEX), text)
        .map_err(|e| GpuError::Cuda(format!("{}: {e}", dir.display())))?;
    Ok(index)
}

pub(crate) type ModuleCell = Arc<OnceLock<Result<ModuleImage, String>>>;

/// The modules of [`shared_module`], compiled or being compiled.
pub(crate) fn modules() -> &'static Mutex<HashMap<String, ModuleCell>> {
    static M: OnceLock<Mutex<HashMap<String, ModuleCell>>> = OnceLock::new();
    M.get_or_init(Mutex::default)
}

pub(crate) fn module_key(family: Family, defines: &[String], arch: Option<&'static str>) -> String {
    format!("{family:?}|{arch:?}|{}", defines.join(" "))
}

/// Modules compiled (or read from disk) in this process, by family, architecture and options: a
/// compile under way on another thread is waited for, never repeated.
pub(crate) fn shared_module(
    family: Family,
    defines: &[String],
    arch: Option<&'static str>,
) -> Result<ModuleImage, GpuError> {
    if arch.is_none_or(|a| !prebuilt::dir().is_some_and(|(_, i)| i.archs.iter().any(|x| x == a))) {
        nvrtc_version().map_err(GpuError::Unavailable)?;
    }
    let cell = lock(modules())
        .entry(module_key(family, defines, arch))
        .or_default()
        .clone();
    cell.get_or_init(|| compile_module(family, defines, arch).map_err(|e| e.to_string()))
        .clone()
        .map_err(GpuError::Cuda)
}

/// Compiles running on threads of their own ([`compile_ahead`]), until
/// [`finish_background_compiles`] joins them.
fn background() -> &'static Mutex<Vec<std::thread::JoinHandle<()>>> {
    static B: OnceLock<Mutex<Vec<std::thread::JoinHandle<()>>>> = OnceLock::new();
    B.get_or_init(Mutex::default)
}

/// Starts [`shared_module`] of `family` with `defines` for `arch` on a thread of its own, so that
/// NVRTC builds it while the caller builds or runs others; a later [`shared_module`] call finds it
/// compiled, or waits for the compile under way. A thread that cannot start is no error: the
/// module compiles when it is first used.
pub fn compile_ahead(family: Family, defines: Vec<String>, arch: Option<&'static str>) {
    let mut running = lock(background());
    running.retain(|h| !h.is_finished());
    let started = std::thread::Builder::new()
        .name("augscope-nvrtc".into())
        .spawn(move || {
            let _ = shared_module(family, &defines, arch);
        });
    if let Ok(h) = started {
        running.push(h);
    }
}

/// How many compiles started by [`compile_ahead`] are still running.
pub fn background_compiles_running() -> usize {
    lock(background())
        .iter()
        .filter(|h| !h.is_finished())
        .count()
}

/// Waits for every compile that [`compile_ahead`] started. A process must not exit while NVRTC
/// runs on another thread: the library's own teardown at exit frees what that compile still
/// uses, and the process then crashes after its work is done (a run that fell back to the CPU
/// engine finishes before the compiles it started). Every front end calls this before it
/// returns or exits; the wait is at most one compile (about a second).
pub fn finish_background_compiles() {
    let running = std::mem::take(&mut *lock(background()));
    for h in running {
        let _ = h.join();
    }
}

/// Every name of `want` is an entry of the compiled module `ptx` (of `file`).
pub(crate) fn check_entries(ptx: &str, file: &str, want: &[&str]) -> Result<(), GpuError> {
    let have = ptx_entries(ptx);
    match want.iter().find(|w| !have.iter().any(|e| e == *w)) {
        Some(w) => Err(GpuError::Cuda(format!("{file} has no entry {w}"))),
        None => Ok(()),
    }
}

/// The kernel entry names of a PTX module (`.entry name(`).
pub(crate) fn ptx_entries(ptx: &str) -> Vec<String> {
    ptx.lines()
        .filter_map(|l| l.split(".entry ").nth(1))
        .filter_map(|rest| rest.split(['(', ' ']).next())
        .filter(|n| !n.is_empty())
        .map(String::from)
        .collect()
}
