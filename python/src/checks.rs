//! The checks at the Python boundary: every entry point refuses what the library would not
//! survive (a panic, an allocation abort) with one `ValueError` or `MemoryError` line, before it
//! reads or allocates anything large. Shapes are numpy's, `[z, y, x]` after any leading axes.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::OnceLock;

use pyo3::PyResult;
use pyo3::exceptions::{PyMemoryError, PyValueError};

use augscope::augment::{Elastic, Plan, Space};

/// The smallest voxel size accepted, in mm: below it a plan in mm space turns millimetres into
/// billions of voxels (a kernel or a coordinate no grid holds).
pub const SPACING_MIN_MM: f64 = 1e-3;
/// The largest voxel size accepted, in mm.
pub const SPACING_MAX_MM: f64 = 1e4;
/// The most threads a pool may ask for.
pub const MAX_THREADS: usize = 4096;

/// Keeps the library's panics off stderr: each becomes one `ValueError` line ([`guard`]), so the
/// default report with its backtrace would only repeat it, louder. With `RUST_BACKTRACE` set, the
/// default report is printed as well, for whoever debugs the library.
pub fn quiet_panics() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if std::env::var_os("RUST_BACKTRACE").is_some() {
            default(info);
        }
    }));
}

/// Runs an entry point's body, turning a panic of the library into a `ValueError` (a
/// `PanicException` is a `BaseException`, which `except Exception` does not catch).
pub fn guard<T>(body: impl FnOnce() -> PyResult<T>) -> PyResult<T> {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(r) => r,
        Err(payload) => {
            let why = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown cause".into());
            let line = why.lines().next().unwrap_or("").trim();
            Err(PyValueError::new_err(format!(
                "augscope cannot process this input (internal check failed: {line})"
            )))
        }
    }
}

/// A spatial dimension count the transform takes (2 or 3).
pub fn ndim(n: usize) -> PyResult<usize> {
    if (2..=3).contains(&n) {
        Ok(n)
    } else {
        Err(PyValueError::new_err(format!(
            "ndim {n}: augscope transforms 2D and 3D grids (ndim 2 or 3)"
        )))
    }
}

/// A voxel size in mm per spatial axis: `ndim` finite values within
/// [`SPACING_MIN_MM`, `SPACING_MAX_MM`].
pub fn spacing(s: &[f64], ndim: usize, what: &str) -> PyResult<()> {
    let ok = |x: &f64| x.is_finite() && (SPACING_MIN_MM..=SPACING_MAX_MM).contains(x);
    if s.len() != ndim || !s.iter().all(ok) {
        return Err(PyValueError::new_err(format!(
            "{what} {s:?} must hold {ndim} finite voxel sizes in mm (one per spatial axis), each \
             between {SPACING_MIN_MM} and {SPACING_MAX_MM}"
        )));
    }
    Ok(())
}

/// Refuses an array with an axis of length 0.
pub fn non_empty(shape: &[usize], what: &str) -> PyResult<()> {
    if shape.contains(&0) {
        return Err(PyValueError::new_err(format!(
            "{what} of shape {shape:?} is empty"
        )));
    }
    Ok(())
}

/// The number of values of `shape` (times `times`), `None` when it overflows.
pub fn count(shape: &[usize], times: usize) -> Option<u64> {
    shape
        .iter()
        .try_fold(times as u64, |a, &n| a.checked_mul(n as u64))
}

/// A number of bytes from the first line of `path` that starts with `key`: its first number
/// after the key, times `unit`.
fn read_number(path: &str, key: &str, unit: u64) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    let line = text.lines().find(|l| l.starts_with(key))?;
    let n: u64 = line[key.len()..].split_whitespace().next()?.parse().ok()?;
    n.checked_mul(unit)
}

/// The host memory a call may plan to use: the least of the machine's physical memory, the
/// memory limit of its control group (a container) and the address space the process has left
/// under its `ulimit -v`. An allocation beyond them aborts the interpreter or swaps the training
/// process to a halt. Where none can be read (not Linux), unbounded: the fallible allocations
/// are then the only check.
fn host_limit_bytes() -> u64 {
    static FIXED: OnceLock<u64> = OnceLock::new();
    let fixed = *FIXED.get_or_init(|| {
        let total = read_number("/proc/meminfo", "MemTotal:", 1024);
        let group = read_number("/sys/fs/cgroup/memory.max", "", 1)
            .or_else(|| read_number("/sys/fs/cgroup/memory/memory.limit_in_bytes", "", 1));
        total.into_iter().chain(group).min().unwrap_or(u64::MAX)
    });
    let address_space = read_number("/proc/self/limits", "Max address space", 1)
        .map(|limit| {
            let used = read_number("/proc/self/status", "VmSize:", 1024).unwrap_or(0);
            limit.saturating_sub(used)
        })
        .unwrap_or(u64::MAX);
    fixed.min(address_space)
}

/// Refuses work whose f32 buffers (`values` in all, `None` when the count overflows) would not
/// fit in the machine's memory.
pub fn memory(values: Option<u64>, what: &str) -> PyResult<()> {
    let limit = host_limit_bytes();
    match values.and_then(|v| v.checked_mul(4)) {
        Some(b) if b <= limit => Ok(()),
        Some(b) => Err(PyMemoryError::new_err(format!(
            "{what} needs about {:.3e} bytes of memory, more than this machine has ({:.3e} bytes)",
            b as f64, limit as f64
        ))),
        None => Err(PyMemoryError::new_err(format!(
            "{what} is too large to address in memory"
        ))),
    }
}

/// A copy of `src`, refused with a `MemoryError` (not an abort) when it cannot be allocated.
pub fn copy(src: &[f32]) -> PyResult<Vec<f32>> {
    let mut v = Vec::new();
    v.try_reserve_exact(src.len()).map_err(|_| {
        PyMemoryError::new_err(format!("cannot allocate a copy of {} values", src.len()))
    })?;
    v.extend_from_slice(src);
    Ok(v)
}

/// The keys of a serialised object.
fn keys_of(v: serde_json::Result<serde_json::Value>) -> Vec<String> {
    match v {
        Ok(serde_json::Value::Object(m)) => m.keys().cloned().collect(),
        _ => vec![],
    }
}

/// Refuses keys of `obj` that are not `known`.
fn known_keys(
    obj: &serde_json::Map<String, serde_json::Value>,
    known: &[String],
    what: &str,
) -> PyResult<()> {
    let unknown: Vec<&String> = obj.keys().filter(|k| !known.contains(k)).collect();
    if unknown.is_empty() {
        return Ok(());
    }
    Err(PyValueError::new_err(format!(
        "{what}: unknown key(s) {unknown:?}; the known keys are {}",
        known.join(", ")
    )))
}

/// A plan from its JSON (the `plan` of a report, manifest line or draw), with every key known:
/// a misspelt key (`rotate` for `rotate_rad`) is refused instead of silently meaning "none".
pub fn plan(json: &str) -> PyResult<Plan> {
    let v: serde_json::Value = serde_json::from_str(json)
        .map_err(|e| PyValueError::new_err(format!("not a plan: {e}")))?;
    let serde_json::Value::Object(obj) = &v else {
        return Err(PyValueError::new_err(
            "not a plan: a plan is a JSON object (a dict)",
        ));
    };
    // Every key a plan may have: `flip_after_intensity` is written only when set, `intensity`
    // only when a plan has steps.
    let mut keys = keys_of(serde_json::to_value(Plan {
        flip_after_intensity: true,
        ..Plan::default()
    }));
    keys.push("intensity".into());
    known_keys(obj, &keys, "plan")?;
    if let Some(serde_json::Value::Object(e)) = obj.get("elastic") {
        let unit = Elastic {
            alpha: 0.0,
            sigma: 1.0,
            seed: 0,
        };
        known_keys(e, &keys_of(serde_json::to_value(unit)), "plan's elastic")?;
    }
    serde_json::from_value(v).map_err(|e| PyValueError::new_err(format!("not a plan: {e}")))
}

/// The plan made ready for a grid of `ndim` axes with the scan's voxel size `spacing` (given by
/// the caller, checked) or `default_spacing` (the volume's): in mm space the scan's spacing is
/// the plan's; then checked.
pub fn ready_plan(
    mut p: Plan,
    ndim: usize,
    spacing: Option<&[f64]>,
    default_spacing: &[f64],
) -> PyResult<Plan> {
    if p.space == Space::Mm {
        match spacing {
            Some(s) => p.spacing_mm = s.to_vec(),
            None if p.spacing_mm.is_empty() => p.spacing_mm = default_spacing.to_vec(),
            None => {}
        }
        self::spacing(&p.spacing_mm, ndim, "the plan's spacing_mm")?;
    }
    p.validate(ndim)
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    Ok(p)
}
