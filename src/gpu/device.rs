//! CUDA devices: discovery (`augscope devices`), memory statistics, the per-device context with
//! its stream and its loaded kernels, and the simulated memory limit.
//!
//! Memory statistics are the driver's free/total plus what augscope itself holds on the device:
//! `reserved_bytes` (every device buffer augscope holds, caches included) and `allocated_bytes`
//! (the part in use by an operation running now), as PyTorch's allocator reports them.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use cudarc::driver::{CudaContext, CudaStream};
use cudarc::nvrtc::Ptx;
use serde::Serialize;

use std::collections::HashMap;
use std::sync::Mutex;

use cudarc::driver::CudaFunction;

use super::kernel_cache;
use super::nvrtc::{
    self, Family, module_key, modules, nvrtc_compile, nvrtc_options, shared_module,
};
use super::{GpuError, lock};

/// Environment variable that caps augscope's own device memory (bytes, or with a K/M/G suffix),
/// to test the out-of-memory fallback on any GPU.
pub const MEM_LIMIT_ENV: &str = "AUGSCOPE_GPU_MEM_LIMIT";

/// Environment variable for fault injection: `N` makes the device's `N`-th allocation (counted
/// from 1 over device buffers and pinned staging, in the order the work asks for them) fail as
/// out of memory, so that every allocation site's way out can be tried in turn.
pub const FAIL_ALLOC_ENV: &str = "AUGSCOPE_GPU_FAIL_ALLOC";

/// The allocation that [`FAIL_ALLOC_ENV`] makes fail, if any.
pub fn fail_alloc_from_env() -> Result<Option<u64>, String> {
    match std::env::var(FAIL_ALLOC_ENV) {
        Ok(s) if !s.trim().is_empty() => match s.trim().parse::<u64>() {
            Ok(n) if n > 0 => Ok(Some(n)),
            _ => Err(format!(
                "{FAIL_ALLOC_ENV}='{s}' is not an allocation number (1, 2, ...)"
            )),
        },
        _ => Ok(None),
    }
}

/// One CUDA device as the driver reports it.
#[derive(Clone, Debug, Serialize)]
pub struct DeviceInfo {
    pub ordinal: usize,
    pub name: String,
    pub compute_capability: (i32, i32),
    pub multiprocessors: i32,
    pub total_bytes: usize,
    pub free_bytes: usize,
}

/// What `augscope devices` prints: the driver, NVRTC and every device, or why there are none.
#[derive(Clone, Debug, Serialize)]
pub struct DevicesReport {
    /// The driver's CUDA version (e.g. 13000), or why there is no usable driver.
    pub driver: Result<i32, String>,
    /// NVRTC's version, or why it cannot be loaded.
    pub nvrtc: Result<(i32, i32), String>,
    pub devices: Vec<DeviceInfo>,
    /// Devices the driver lists but that could not be opened.
    pub errors: Vec<String>,
    /// augscope's device-memory cap from the environment, if any.
    pub mem_limit_bytes: Option<usize>,
    /// The folder of compiled kernels (none: the disk cache is off), its entries and bytes.
    pub kernel_cache: Option<KernelCacheInfo>,
}

/// Where compiled kernels are kept between processes ([`super::kernel_cache`]).
#[derive(Clone, Debug, Serialize)]
pub struct KernelCacheInfo {
    pub dir: std::path::PathBuf,
    pub entries: usize,
    pub bytes: u64,
}

impl KernelCacheInfo {
    pub fn here() -> Option<Self> {
        let dir = super::kernel_cache::dir()?;
        let (entries, bytes) = super::kernel_cache::usage(&dir);
        Some(KernelCacheInfo {
            dir,
            entries,
            bytes,
        })
    }
}

impl DevicesReport {
    /// Why the CUDA engine cannot run here, in one line; `None` when it can.
    pub fn unavailable_reason(&self) -> Option<String> {
        if let Err(e) = &self.driver {
            return Some(e.clone());
        }
        if self.devices.is_empty() {
            return Some(
                self.errors
                    .first()
                    .cloned()
                    .unwrap_or_else(|| "the driver reports no CUDA device".into()),
            );
        }
        if self.nvrtc.is_err() {
            // Without NVRTC, a device runs only where the prebuilt store serves it.
            if let Some(d) = self.devices.iter().find_map(|d| {
                super::nvrtc::compiler_missing(arch_for(d.compute_capability), d.compute_capability)
            }) {
                return Some(d);
            }
        }
        None
    }
}

fn gib(b: usize) -> f64 {
    b as f64 / (1u64 << 30) as f64
}

impl fmt::Display for DevicesReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.driver {
            Ok(v) => writeln!(f, "driver:  CUDA {}.{}", v / 1000, (v % 1000) / 10)?,
            Err(e) => writeln!(f, "driver:  none ({e})")?,
        }
        match &self.nvrtc {
            Ok((a, b)) => writeln!(f, "nvrtc:   {a}.{b}")?,
            Err(e) => writeln!(f, "nvrtc:   none ({e})")?,
        }
        if let Some(l) = self.mem_limit_bytes {
            writeln!(
                f,
                "limit:   augscope may hold {:.3} GiB per device ({MEM_LIMIT_ENV})",
                gib(l)
            )?;
        }
        for d in &self.devices {
            writeln!(
                f,
                "cuda:{}  {}  sm_{}{}  {} SMs  {:.1} GiB free of {:.1} GiB",
                d.ordinal,
                d.name,
                d.compute_capability.0,
                d.compute_capability.1,
                d.multiprocessors,
                gib(d.free_bytes),
                gib(d.total_bytes)
            )?;
        }
        match &self.kernel_cache {
            Some(c) => writeln!(
                f,
                "kernels: {} compiled ({:.1} MB) in {}",
                c.entries,
                c.bytes as f64 / 1e6,
                c.dir.display()
            )?,
            None => writeln!(
                f,
                "kernels: no disk cache (AUGSCOPE_KERNEL_CACHE=0 or no home)"
            )?,
        }
        if let Some((dir, index)) = super::prebuilt::dir() {
            writeln!(
                f,
                "prebuilt: {} modules for {}{}, NVRTC {}.{}, in {}",
                index.modules,
                index.archs.join(", "),
                index
                    .ptx
                    .as_ref()
                    .map_or(String::new(), |p| format!(" (and PTX for {p})")),
                index.nvrtc.0,
                index.nvrtc.1,
                dir.display()
            )?;
        }
        for e in &self.errors {
            writeln!(f, "error:   {e}")?;
        }
        match self.unavailable_reason() {
            Some(why) => write!(
                f,
                "CUDA engine: unavailable ({why}); the CPU engine runs instead"
            ),
            None => write!(
                f,
                "CUDA engine: available ({} device(s))",
                self.devices.len()
            ),
        }
    }
}

/// Lists the devices, never panicking: a missing driver or NVRTC is reported, not raised.
pub fn discover() -> DevicesReport {
    let nvrtc = nvrtc::nvrtc_version();
    let mem_limit_bytes = mem_limit_from_env().ok().flatten();
    let driver = nvrtc::driver_version();
    let mut devices = vec![];
    let mut errors = vec![];
    if driver.is_ok() {
        match CudaContext::device_count() {
            Ok(n) => {
                for i in 0..n.max(0) as usize {
                    match device_info(i) {
                        Ok(d) => devices.push(d),
                        Err(e) => errors.push(format!("cuda:{i} cannot be opened: {e}")),
                    }
                }
            }
            Err(e) => errors.push(format!(
                "the driver cannot count devices: {}",
                driver_message(&e)
            )),
        }
    }
    DevicesReport {
        driver,
        nvrtc,
        devices,
        errors,
        mem_limit_bytes,
        kernel_cache: KernelCacheInfo::here(),
    }
}

fn device_info(ordinal: usize) -> Result<DeviceInfo, String> {
    let ctx = CudaContext::new(ordinal).map_err(|e| driver_message(&e))?;
    let (free, total) = ctx.mem_get_info().map_err(|e| driver_message(&e))?;
    let sms = ctx
        .attribute(
            cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
        )
        .unwrap_or(0);
    Ok(DeviceInfo {
        ordinal,
        name: ctx.name().unwrap_or_else(|_| "unknown".into()),
        compute_capability: ctx.compute_capability().map_err(|e| driver_message(&e))?,
        multiprocessors: sms,
        total_bytes: total,
        free_bytes: free,
    })
}

pub use super::{driver_error, driver_message};

/// Parses a byte count: `123`, `64K`, `512M`, `2G` (powers of 1024).
pub fn parse_bytes(s: &str) -> Result<usize, String> {
    let t = s.trim();
    let (num, mul) = match t.chars().last().map(|c| c.to_ascii_uppercase()) {
        Some('K') => (&t[..t.len() - 1], 1usize << 10),
        Some('M') => (&t[..t.len() - 1], 1 << 20),
        Some('G') => (&t[..t.len() - 1], 1 << 30),
        _ => (t, 1),
    };
    num.trim()
        .parse::<f64>()
        .ok()
        .filter(|v| v.is_finite() && *v >= 0.0)
        .map(|v| (v * mul as f64) as usize)
        .ok_or_else(|| format!("{MEM_LIMIT_ENV}='{s}' is not a byte count (e.g. 512M, 2G)"))
}

/// The memory cap set by [`MEM_LIMIT_ENV`], if any.
pub fn mem_limit_from_env() -> Result<Option<usize>, String> {
    match std::env::var(MEM_LIMIT_ENV) {
        Ok(s) if !s.trim().is_empty() => parse_bytes(&s).map(Some),
        _ => Ok(None),
    }
}

/// Counts the device bytes augscope holds, and enforces the optional cap.
#[derive(Debug, Default)]
pub struct MemTracker {
    reserved: AtomicUsize,
    allocated: AtomicUsize,
    peak: AtomicUsize,
    limit: Option<usize>,
    /// Allocations asked for so far, and the one to fail ([`FAIL_ALLOC_ENV`]).
    attempts: AtomicU64,
    fail_at: Option<u64>,
}

impl MemTracker {
    pub fn new(limit: Option<usize>) -> Self {
        MemTracker {
            limit,
            ..Default::default()
        }
    }

    /// A tracker whose `n`-th allocation fails as out of memory (fault injection).
    pub fn failing_at(mut self, n: Option<u64>) -> Self {
        self.fail_at = n;
        self
    }

    /// Counts one allocation of `what`; the one chosen by [`FAIL_ALLOC_ENV`] fails here as the
    /// driver's out-of-memory would. Every allocation site calls it before allocating.
    pub fn attempt(&self, what: &str) -> Result<(), GpuError> {
        let n = self.attempts.fetch_add(1, Ordering::SeqCst) + 1;
        if self.fail_at == Some(n) {
            return Err(GpuError::OutOfMemory(format!(
                "{what}: allocation {n} made to fail by {FAIL_ALLOC_ENV}"
            )));
        }
        Ok(())
    }

    /// Accounts for `bytes` more device memory, or refuses with `OutOfMemory` past the cap.
    pub fn reserve(self: &Arc<Self>, bytes: usize, what: &str) -> Result<Reservation, GpuError> {
        self.attempt(what)?;
        let now = self.reserved.fetch_add(bytes, Ordering::SeqCst) + bytes;
        if let Some(l) = self.limit
            && now > l
        {
            self.reserved.fetch_sub(bytes, Ordering::SeqCst);
            return Err(GpuError::OutOfMemory(format!(
                "{what} needs {bytes} bytes, which would bring augscope to {now} bytes on the device, \
                 over the {l}-byte limit set by {MEM_LIMIT_ENV}"
            )));
        }
        self.peak.fetch_max(now, Ordering::SeqCst);
        Ok(Reservation {
            tracker: self.clone(),
            bytes,
        })
    }

    /// Marks `bytes` as in use by a running operation until the guard drops.
    pub fn in_use(self: &Arc<Self>, bytes: usize) -> InUse {
        self.allocated.fetch_add(bytes, Ordering::SeqCst);
        InUse {
            tracker: self.clone(),
            bytes,
        }
    }

    /// Restarts the peak count at the bytes held now.
    pub fn reset_peak(&self) {
        self.peak
            .store(self.reserved.load(Ordering::SeqCst), Ordering::SeqCst);
    }

    pub fn reserved_bytes(&self) -> usize {
        self.reserved.load(Ordering::SeqCst)
    }
    pub fn allocated_bytes(&self) -> usize {
        self.allocated.load(Ordering::SeqCst)
    }
    pub fn peak_bytes(&self) -> usize {
        self.peak.load(Ordering::SeqCst)
    }
    pub fn limit(&self) -> Option<usize> {
        self.limit
    }
}

/// Device bytes accounted for while the owning buffer lives.
#[derive(Debug)]
pub struct Reservation {
    tracker: Arc<MemTracker>,
    bytes: usize,
}

impl Reservation {
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.tracker
            .reserved
            .fetch_sub(self.bytes, Ordering::SeqCst);
    }
}

/// Bytes in use by an operation while it runs.
#[derive(Debug)]
pub struct InUse {
    tracker: Arc<MemTracker>,
    bytes: usize,
}

impl Drop for InUse {
    fn drop(&mut self) {
        self.tracker
            .allocated
            .fetch_sub(self.bytes, Ordering::SeqCst);
    }
}

/// Memory of one device, for the GUI panel and reports.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct MemStats {
    pub ordinal: usize,
    /// The driver's view of the whole device.
    pub driver_free_bytes: usize,
    pub driver_total_bytes: usize,
    /// Every device buffer augscope holds (caches included).
    pub reserved_bytes: usize,
    /// The part of `reserved_bytes` in use by an operation running now.
    pub allocated_bytes: usize,
    /// The most augscope held at once.
    pub peak_bytes: usize,
    /// Page-locked host staging memory augscope holds.
    pub pinned_host_bytes: usize,
    pub limit_bytes: Option<usize>,
}

/// One device's context, stream and accounting: the RAII scope of everything augscope holds on it.
/// Buffers made through it are counted; dropping it waits for the device and frees them.
pub struct DeviceContext {
    pub ordinal: usize,
    pub name: String,
    pub ctx: Arc<CudaContext>,
    /// The stream kernels and copies run on.
    pub stream: Arc<CudaStream>,
    /// The stream uploads run on (see [`super::buffer::Staging::upload`]), so that a transfer
    /// overlaps kernels queued on `stream` that do not read its target.
    pub copy_stream: Arc<CudaStream>,
    pub tracker: Arc<MemTracker>,
    /// NVRTC's target, `sm_XY` from the compute capability.
    pub arch: Option<&'static str>,
    pub compute_capability: (i32, i32),
    pinned_bytes: AtomicUsize,
    /// The kernels loaded on this device, by family, define set and entry name.
    functions: Mutex<HashMap<String, CudaFunction>>,
}

impl DeviceContext {
    /// Opens device `ordinal`, checking for the driver first (cudarc panics without one).
    pub fn open(ordinal: usize) -> Result<Self, GpuError> {
        nvrtc::driver_version().map_err(GpuError::Unavailable)?;
        let n = CudaContext::device_count()
            .map_err(|e| driver_error("cannot count CUDA devices", e))?;
        if ordinal >= n.max(0) as usize {
            return Err(GpuError::Unavailable(if n <= 0 {
                "the driver reports no CUDA device".into()
            } else {
                format!("cuda:{ordinal} does not exist (this machine has {n} device(s))")
            }));
        }
        let ctx = CudaContext::new(ordinal)
            .map_err(|e| driver_error(&format!("cannot open cuda:{ordinal}"), e))?;
        let stream = ctx
            .new_stream()
            .map_err(|e| driver_error("cannot create a stream", e))?;
        let copy_stream = ctx
            .new_stream()
            .map_err(|e| driver_error("cannot create a stream", e))?;
        let cc = ctx
            .compute_capability()
            .map_err(|e| driver_error("cannot read the compute capability", e))?;
        let limit = mem_limit_from_env().map_err(GpuError::Unavailable)?;
        let fail_at = fail_alloc_from_env().map_err(GpuError::Unavailable)?;
        Ok(DeviceContext {
            ordinal,
            name: ctx.name().unwrap_or_else(|_| "unknown".into()),
            arch: arch_for(cc),
            compute_capability: cc,
            ctx,
            stream,
            copy_stream,
            tracker: Arc::new(MemTracker::new(limit).failing_at(fail_at)),
            pinned_bytes: AtomicUsize::new(0),
            functions: Mutex::default(),
        })
    }

    /// Driver free/total plus augscope's own bytes.
    pub fn mem_stats(&self) -> MemStats {
        let (free, total) = self.ctx.mem_get_info().unwrap_or((0, 0));
        MemStats {
            ordinal: self.ordinal,
            driver_free_bytes: free,
            driver_total_bytes: total,
            reserved_bytes: self.tracker.reserved_bytes(),
            allocated_bytes: self.tracker.allocated_bytes(),
            peak_bytes: self.tracker.peak_bytes(),
            pinned_host_bytes: self.pinned_bytes.load(Ordering::SeqCst),
            limit_bytes: self.tracker.limit(),
        }
    }

    /// A kernel of `family` built with `defines` (the whole define set), compiled (or read from
    /// the disk cache) and loaded on first use, then kept: every entry of its module is kept at
    /// once, so that its siblings (the other passes of a family) never compile it again.
    pub fn function(
        &self,
        family: Family,
        defines: &[String],
        name: &str,
    ) -> Result<CudaFunction, GpuError> {
        let key = function_key(family, defines, name);
        if let Some(f) = lock(&self.functions).get(&key) {
            return Ok(f.clone());
        }
        let (module, entries) = load_module(self, family, defines)?;
        let f = module
            .load_function(name)
            .map_err(|e| driver_error(&format!("kernel {name} is missing"), e))?;
        let mut map = lock(&self.functions);
        for e in entries {
            if let Ok(g) = module.load_function(&e) {
                map.insert(function_key(family, defines, &e), g);
            }
        }
        map.insert(key, f.clone());
        Ok(f)
    }

    /// Starts compiling the module of `name` on another thread, unless it is loaded already, so
    /// that NVRTC builds it while this thread builds or runs others; [`Self::function`] then
    /// finds it compiled (or waits for the compile under way).
    pub fn prefetch(&self, family: Family, defines: &[String], name: &str) {
        if lock(&self.functions).contains_key(&function_key(family, defines, name)) {
            return;
        }
        let arch = self.arch;
        if lock(modules()).contains_key(&module_key(family, defines, arch)) {
            return;
        }
        super::nvrtc::compile_ahead(family, defines.to_vec(), arch);
    }

    pub(crate) fn set_pinned_bytes(&self, b: usize) {
        self.pinned_bytes.store(b, Ordering::SeqCst);
    }
}

impl Drop for DeviceContext {
    fn drop(&mut self) {
        // Buffers free themselves on their stream; wait so that nothing outlives the scope.
        let _ = self.copy_stream.synchronize();
        let _ = self.stream.synchronize();
    }
}

/// The key of a loaded kernel on a device.
fn function_key(family: Family, defines: &[String], name: &str) -> String {
    format!("{family:?}|{}|{name}", defines.join(" "))
}

/// NVRTC's `sm_XY` target for a compute capability (`None`: NVRTC's default).
pub fn arch_for(cc: (i32, i32)) -> Option<&'static str> {
    Some(match cc {
        (7, 0) => "sm_70",
        (7, 5) => "sm_75",
        (8, 0) => "sm_80",
        (8, 6) => "sm_86",
        (8, 7) => "sm_87",
        (8, 9) => "sm_89",
        (9, 0) => "sm_90",
        (10, 0) => "sm_100",
        (10, 3) => "sm_103",
        (12, 0) => "sm_120",
        _ => return None,
    })
}

/// Loads `family` with `defines` on `dev`: the module and its entry names. A CUBIN the driver
/// refuses is dropped from the cache and the module compiled again, then loaded as PTX.
pub fn load_module(
    dev: &DeviceContext,
    family: Family,
    defines: &[String],
) -> Result<(Arc<cudarc::driver::CudaModule>, Vec<String>), GpuError> {
    if dev.arch.is_none()
        && let Some(m) = super::nvrtc::prebuilt_ptx(family, defines, dev.compute_capability)
    {
        return dev
            .ctx
            .load_module(m.image)
            .map(|module| (module, m.entries))
            .map_err(|e| driver_error("cannot load a prebuilt kernel's PTX", e));
    }
    let m = shared_module(family, defines, dev.arch)?;
    // Loaded modules are kept by the engine: the image need not stay in host memory.
    lock(modules()).remove(&module_key(family, defines, dev.arch));
    match dev.ctx.load_module(m.image) {
        Ok(module) => Ok((module, m.entries)),
        Err(first) => {
            if let Some((dir, key)) = &m.cached {
                kernel_cache::forget(dir, key);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_counts_parse() {
        assert_eq!(parse_bytes("123").unwrap(), 123);
        assert_eq!(parse_bytes("64K").unwrap(), 65536);
        assert_eq!(parse_bytes("1.5m").unwrap(), 1_572_864);
        assert_eq!(parse_bytes("2G").unwrap(), 2 << 30);
        assert!(parse_bytes("lots").is_err());
        assert!(parse_bytes("-1").is_err());
    }

    #[test]
    fn tracker_enforces_the_limit_and_releases() {
        let t = Arc::new(MemTracker::new(Some(1000)));
        let a = t.reserve(600, "a").unwrap();
        assert!(matches!(t.reserve(500, "b"), Err(GpuError::OutOfMemory(_))));
        assert_eq!(t.reserved_bytes(), 600);
        {
            let _u = t.in_use(600);
            assert_eq!(t.allocated_bytes(), 600);
        }
        assert_eq!(t.allocated_bytes(), 0);
        drop(a);
        assert_eq!(t.reserved_bytes(), 0);
        assert_eq!(t.peak_bytes(), 600);
        assert!(t.reserve(1000, "c").is_ok());
    }
}
