//! `augscope._augscope`: the Python binding of the augscope library (no second engine). The
//! Python package around it (`python/augscope/`) handles shapes, torch tensors and seeds; this
//! module takes float32 numpy arrays and plans as JSON, and runs the library's engine, filters
//! and FEBDS, with the GIL released.
//!
//! Device memory: torch (or CuPy) tensors on a GPU come in as DLPack capsules (`__dlpack__`,
//! asked to order the producer's stream before augscope's, [`cuda_stream`]); the engine reads and
//! writes them where they are, with no copy through the host.
//!
//! Processes: rayon's global thread pool does not survive `fork` (DataLoader workers), so every
//! call runs in a pool of this process, built again in a forked child. A CUDA context does not
//! survive `fork` either: a CUDA request in a child of a process that used CUDA is refused with
//! a clear error (use the `spawn` start method).

use std::path::Path;
use std::sync::{Arc, Mutex};

use numpy::ndarray::{ArrayD, IxDyn};
use numpy::{IntoPyArray, PyArrayDyn, PyReadonlyArrayDyn, PyUntypedArrayMethods};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;

use augscope::augment::preset::{self as presets, Preset};
use augscope::augment::{DoneList, Plan};
use augscope::engine::cuda::{CudaBackend, DeviceArrays};
use augscope::engine::{self, BackendSpec, EngineError, Job, Precision};
use augscope::export::preview::{self, Model};
use augscope::filter::{self as filters, Boundary, Filter};
use augscope::{Mode, Volume};

pyo3::create_exception!(
    _augscope,
    GpuOutOfMemory,
    pyo3::exceptions::PyMemoryError,
    "The GPU ran out of memory (augscope's own limit or the driver's); augscope's caches on it \
     were freed. The package retries such a call on the CPU engine and warns."
);

/// An engine error as the Python exception a caller can act on.
fn engine_err(e: EngineError) -> PyErr {
    match e {
        EngineError::OutOfMemory(_) => GpuOutOfMemory::new_err(e.to_string()),
        EngineError::Plan(_) | EngineError::Shape(_) => PyValueError::new_err(e.to_string()),
        _ => PyRuntimeError::new_err(e.to_string()),
    }
}

/// The thread pool of this process: (process id, pool).
static POOL: Mutex<Option<(u32, Arc<rayon::ThreadPool>)>> = Mutex::new(None);
/// The process that first used CUDA.
static CUDA_PID: Mutex<Option<u32>> = Mutex::new(None);
/// Threads per pool (0: one per core), set by `set_threads`.
static THREADS: Mutex<usize> = Mutex::new(0);

fn pool() -> PyResult<Arc<rayon::ThreadPool>> {
    let pid = std::process::id();
    let mut g = POOL.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((p, pool)) = g.as_ref()
        && *p == pid
    {
        return Ok(pool.clone());
    }
    let threads = *THREADS.lock().unwrap_or_else(|p| p.into_inner());
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .thread_name(|i| format!("augscope-{i}"))
        .build()
        .map_err(|e| PyRuntimeError::new_err(format!("cannot start augscope's threads: {e}")))?;
    let pool = Arc::new(pool);
    *g = Some((pid, pool.clone()));
    Ok(pool)
}

fn backend_spec(backend: &str) -> PyResult<BackendSpec> {
    let spec: BackendSpec = backend.parse().map_err(PyValueError::new_err)?;
    if let BackendSpec::Cuda(_) = spec {
        let pid = std::process::id();
        let mut g = CUDA_PID.lock().unwrap_or_else(|p| p.into_inner());
        match *g {
            Some(p) if p != pid => {
                return Err(PyRuntimeError::new_err(
                    "augscope: CUDA was used before this process was forked, and a CUDA context \
                     does not survive fork; start DataLoader workers with \
                     multiprocessing_context='spawn', or run augscope on CUDA in the main process",
                ));
            }
            _ => *g = Some(pid),
        }
    }
    Ok(spec)
}

fn precision(p: &str) -> PyResult<Precision> {
    p.parse().map_err(PyValueError::new_err)
}

/// The values of a float32 array in C order: the array's own memory when it is contiguous (read
/// in place, with the GIL released, while the array stays borrowed read-only for the call, as
/// numpy's own loops read arrays), else a copy.
fn host_values<'a>(a: &'a PyReadonlyArrayDyn<'_, f32>) -> std::borrow::Cow<'a, [f32]> {
    match a.as_slice() {
        Ok(s) => std::borrow::Cow::Borrowed(s),
        Err(_) => std::borrow::Cow::Owned(a.as_array().iter().copied().collect()),
    }
}

/// A volume from a C-order float32 array: `channels` first axis is channels.
fn volume(
    a: &PyReadonlyArrayDyn<'_, f32>,
    channels: bool,
    spacing: Option<Vec<f64>>,
) -> PyResult<Volume> {
    let shape = a.shape().to_vec();
    let data: Vec<f32> = match a.as_slice() {
        Ok(s) => s.to_vec(),
        Err(_) => a.as_array().iter().copied().collect(),
    };
    let (c, spatial) = if channels {
        if shape.len() < 2 {
            return Err(PyValueError::new_err("channels=True needs (C, ...) arrays"));
        }
        (shape[0], shape[1..].to_vec())
    } else {
        (1, shape)
    };
    if !(2..=3).contains(&spatial.len()) {
        return Err(PyValueError::new_err(format!(
            "augscope transforms 2D and 3D grids; got spatial shape {spatial:?}"
        )));
    }
    let mut v = Volume::new(data, spatial.clone(), c);
    if let Some(s) = spacing {
        if s.len() != spatial.len() || s.iter().any(|x| !(x.is_finite() && *x > 0.0)) {
            return Err(PyValueError::new_err(format!(
                "spacing {s:?} must hold one positive voxel size (mm) per spatial axis {spatial:?}"
            )));
        }
        v.spacing_mm = s;
    }
    Ok(v)
}

/// The array of a volume; with `channels`, its channel axis first (also for one channel).
fn array<'py>(py: Python<'py>, v: Volume, channels: bool) -> PyResult<Bound<'py, PyArrayDyn<f32>>> {
    let mut shape = v.shape.clone();
    if channels || v.channels > 1 {
        shape.insert(0, v.channels);
    }
    let a = ArrayD::from_shape_vec(IxDyn(&shape), v.data)
        .map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
    Ok(a.into_pyarray(py))
}

fn plan_from(json: &str) -> PyResult<Plan> {
    serde_json::from_str(json).map_err(|e| PyValueError::new_err(format!("not a plan: {e}")))
}

type Outputs<'py> = (
    Bound<'py, PyArrayDyn<f32>>,
    Option<Bound<'py, PyArrayDyn<f32>>>,
    String,
);

/// Applies a plan (JSON, the `plan` of a report or manifest line) to an image (and a label map,
/// order 0) on `backend`; returns (image, label, info JSON: backend, note, done, timings, model,
/// model steps). `model` other than augscope runs that library's model on the CPU engine.
#[pyfunction]
#[pyo3(signature = (image, plan, label=None, channels=false, spacing=None, backend="cpu", precision="f32", model="augscope"))]
#[allow(clippy::too_many_arguments)]
fn apply<'py>(
    py: Python<'py>,
    image: PyReadonlyArrayDyn<'py, f32>,
    plan: &str,
    label: Option<PyReadonlyArrayDyn<'py, f32>>,
    channels: bool,
    spacing: Option<Vec<f64>>,
    backend: &str,
    precision: &str,
    model: &str,
) -> PyResult<Outputs<'py>> {
    let img = volume(&image, channels, spacing.clone())?;
    let lab = match &label {
        Some(l) => {
            let l = volume(l, false, spacing)?;
            if l.shape != img.shape {
                return Err(PyValueError::new_err(format!(
                    "label shape {:?} differs from the image's spatial shape {:?}",
                    l.shape, img.shape
                )));
            }
            Some(l)
        }
        None => None,
    };
    let mut plan = plan_from(plan)?;
    if plan.space == augscope::augment::Space::Mm && plan.spacing_mm.is_empty() {
        plan.spacing_mm = img.spacing_mm.clone();
    }
    plan.validate(img.ndim())
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    let model: Model = model.parse().map_err(PyValueError::new_err)?;
    let spec = backend_spec(backend)?;
    let prec = self::precision(precision)?;
    let pool = pool()?;
    let result = py.detach(|| {
        pool.install(|| -> Result<_, String> {
            if !model.is_own() {
                let p = preview::preview(model, &img, lab.as_ref(), &plan)
                    .map_err(|e| e.to_string())?;
                let info = serde_json::json!({
                    "backend": "cpu", "note": null, "done": plan.done_list(),
                    "model": p.model.id(), "model_steps": p.steps,
                    "displacement_vox": p.displacement,
                });
                return Ok((p.image, p.label, info));
            }
            let selected = engine::select::select(&spec, prec);
            let (out, out_lab, timings, oom) = engine::select::apply_new_with_fallback(
                selected.backend.as_ref(),
                &plan,
                &img,
                lab.as_ref(),
            )
            .map_err(|e| e.to_string())?;
            let used = if oom.is_some() {
                "cpu".to_string()
            } else {
                selected.backend.name()
            };
            let info = serde_json::json!({
                "backend": used, "note": oom.or(selected.note), "done": plan.done_list(),
                "timings_ms": timings, "model": model.id(),
                "model_steps": preview::own_step(model).into_iter().collect::<Vec<_>>(),
            });
            Ok((out, out_lab, info))
        })
    });
    let (out, out_lab, info) = result.map_err(PyValueError::new_err)?;
    let out_lab = match out_lab {
        Some(l) => Some(array(py, l, false)?),
        None => None,
    };
    Ok((array(py, out, channels)?, out_lab, info.to_string()))
}

/// A preset from a bundled name, a TOML file path, TOML text, or JSON text of a dict.
fn load_preset(spec: &str) -> PyResult<Preset> {
    let err = |e: presets::PresetError| PyValueError::new_err(e.to_string());
    let t = spec.trim_start();
    if t.starts_with('{') {
        let v: serde_json::Value = serde_json::from_str(spec)
            .map_err(|e| PyValueError::new_err(format!("preset: {e}")))?;
        let text = toml::to_string(&v)
            .map_err(|e| PyValueError::new_err(format!("preset: not a TOML table: {e}")))?;
        return Preset::parse(&text).map_err(err);
    }
    if spec.contains('\n') || spec.contains('=') {
        return Preset::parse(spec).map_err(err);
    }
    presets::load_or_bundled(Path::new(spec)).map_err(err)
}

/// Checks a preset; returns it as JSON (what the sampler reads).
#[pyfunction]
fn preset(spec: &str) -> PyResult<String> {
    let p = load_preset(spec)?;
    serde_json::to_string(&p).map_err(|e| PyRuntimeError::new_err(e.to_string()))
}

/// One draw of a preset, as `augscope preset sample` and `augscope batch` draw it: (plan JSON,
/// done list JSON, drawn values JSON).
#[pyfunction]
#[pyo3(signature = (preset, seed, ndim=3, spacing=None, space=None))]
fn sample(
    preset: &str,
    seed: u64,
    ndim: usize,
    spacing: Option<Vec<f64>>,
    space: Option<&str>,
) -> PyResult<(String, String, String)> {
    let mut p = load_preset(preset)?;
    if let Some(s) = space {
        p.space = s.parse().map_err(PyValueError::new_err)?;
    }
    let spacing = spacing.unwrap_or_else(|| vec![1.0; ndim]);
    let s = p
        .sample(seed, ndim, &spacing)
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    let j = |v: serde_json::Result<String>| v.map_err(|e| PyRuntimeError::new_err(e.to_string()));
    Ok((
        j(serde_json::to_string(&s.plan))?,
        j(serde_json::to_string(&s.done))?,
        j(serde_json::to_string(&s.drawn))?,
    ))
}

/// An intensity filter (`augscope filter` names: "gaussian:2", "log:1.5", "dog:1,2",
/// "median:3", "gamma:0.8", "contrast:1.2,0.1") over arrays of `ndim` spatial axes (leading
/// axes: channels or batch items); returns (filtered, info JSON: backend, note).
#[pyfunction]
#[pyo3(signature = (image, spec, ndim, mode="reflect", cval=0.0, backend="cpu", precision="f32"))]
#[allow(clippy::too_many_arguments)]
fn filter<'py>(
    py: Python<'py>,
    image: PyReadonlyArrayDyn<'py, f32>,
    spec: &str,
    ndim: usize,
    mode: &str,
    cval: f32,
    backend: &str,
    precision: &str,
) -> PyResult<(Bound<'py, PyArrayDyn<f32>>, String)> {
    let f: Filter = spec.parse().map_err(PyValueError::new_err)?;
    let mode: Mode = mode.parse().map_err(PyValueError::new_err)?;
    let full = image.shape().to_vec();
    if ndim == 0 || ndim > full.len() {
        return Err(PyValueError::new_err(format!(
            "ndim {ndim} spatial axes in an array of shape {full:?}"
        )));
    }
    let shape = full[full.len() - ndim..].to_vec();
    let data = host_values(&image);
    let count = data.len() / shape.iter().product::<usize>().max(1);
    let f = f
        .resolved(ndim, count)
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    let spec = backend_spec(backend)?;
    let prec = self::precision(precision)?;
    let pool = pool()?;
    let b = Boundary { mode, cval };
    let run = py
        .detach(|| pool.install(|| filters::run(&f, b, &data, &shape, &spec, prec)))
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    let info = serde_json::json!({ "backend": run.backend, "note": run.note });
    let a = ArrayD::from_shape_vec(IxDyn(&full), run.out)
        .map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
    Ok((a.into_pyarray(py), info.to_string()))
}

/// The FEBDS mask (0/1) of 2D images `[..., y, x]` (12-bit intensities) with `method` dog, log
/// or fft.
#[pyfunction]
#[pyo3(signature = (image, method="dog", backend="cpu", precision="f32"))]
fn febds<'py>(
    py: Python<'py>,
    image: PyReadonlyArrayDyn<'py, f32>,
    method: &str,
    backend: &str,
    precision: &str,
) -> PyResult<(Bound<'py, PyArrayDyn<f32>>, String)> {
    let m: filters::FebdsMethod = method.parse().map_err(PyValueError::new_err)?;
    let full = image.shape().to_vec();
    if full.len() < 2 {
        return Err(PyValueError::new_err("FEBDS takes 2D images [..., y, x]"));
    }
    let shape = full[full.len() - 2..].to_vec();
    let data = host_values(&image);
    let spec = backend_spec(backend)?;
    let prec = self::precision(precision)?;
    let pool = pool()?;
    let b = Boundary {
        mode: Mode::Reflect,
        cval: 0.0,
    };
    let f = Filter::Febds(m);
    let run = py
        .detach(|| pool.install(|| filters::run(&f, b, &data, &shape, &spec, prec)))
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    let info = serde_json::json!({ "backend": run.backend, "note": run.note });
    let a = ArrayD::from_shape_vec(IxDyn(&full), run.out)
        .map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
    Ok((a.into_pyarray(py), info.to_string()))
}

/// Threads of augscope's pool in this process (0: one per core); takes effect for the next
/// pool (a new process, or now when `rebuild`).
#[pyfunction]
#[pyo3(signature = (n, rebuild=true))]
fn set_threads(n: usize, rebuild: bool) {
    *THREADS.lock().unwrap_or_else(|p| p.into_inner()) = n;
    if rebuild {
        *POOL.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }
}

/// The CUDA devices, as `augscope devices --json`.
#[pyfunction]
fn devices() -> PyResult<String> {
    serde_json::to_string(&augscope::gpu::device::discover())
        .map_err(|e| PyRuntimeError::new_err(e.to_string()))
}

// --- device memory through DLPack ----------------------------------------------------------------

/// DLPack's C structures (dlpack.h, the unversioned `dltensor` capsule).
#[repr(C)]
struct DlDevice {
    device_type: i32,
    device_id: i32,
}

#[repr(C)]
struct DlDataType {
    code: u8,
    bits: u8,
    lanes: u16,
}

#[repr(C)]
struct DlTensor {
    data: *mut std::ffi::c_void,
    device: DlDevice,
    ndim: i32,
    dtype: DlDataType,
    shape: *const i64,
    strides: *const i64,
    byte_offset: u64,
}

#[repr(C)]
struct DlManagedTensor {
    dl_tensor: DlTensor,
    manager_ctx: *mut std::ffi::c_void,
    deleter: Option<unsafe extern "C" fn(*mut DlManagedTensor)>,
}

const DL_CUDA: i32 = 2;
const DL_FLOAT: u8 = 2;

/// A dense float32 array in the memory of one CUDA device.
struct DeviceArray {
    ptr: u64,
    shape: Vec<usize>,
    device: usize,
}

impl DeviceArray {
    fn len(&self) -> usize {
        self.shape.iter().product()
    }
}

/// The array behind a DLPack capsule (`tensor.__dlpack__(stream=...)`), checked: on a CUDA
/// device, float32, C order without gaps. The capsule is only read: its producer keeps the
/// memory until the capsule is collected, which the caller's reference outlives this call.
fn device_array(capsule: &Bound<'_, PyAny>, what: &str) -> PyResult<DeviceArray> {
    let py = capsule.py();
    // SAFETY: PyCapsule_GetPointer checks that the object is a capsule named "dltensor" and
    // returns its pointer, or NULL with an exception set (taken below); the GIL is held.
    let p = unsafe { pyo3::ffi::PyCapsule_GetPointer(capsule.as_ptr(), c"dltensor".as_ptr()) };
    if p.is_null() {
        let _ = PyErr::take(py);
        return Err(PyValueError::new_err(format!(
            "{what}: not an unconsumed DLPack capsule (pass tensor.__dlpack__())"
        )));
    }
    // SAFETY: a "dltensor" capsule holds a DLManagedTensor (DLPack's contract), alive while the
    // capsule is; `shape` and `strides` (or NULL) hold `ndim` values each.
    let t = unsafe { &(*(p as *const DlManagedTensor)).dl_tensor };
    if t.device.device_type != DL_CUDA {
        return Err(PyValueError::new_err(format!(
            "{what}: DLPack device type {} is not CUDA",
            t.device.device_type
        )));
    }
    if (t.dtype.code, t.dtype.bits, t.dtype.lanes) != (DL_FLOAT, 32, 1) {
        return Err(PyValueError::new_err(format!(
            "{what}: must be float32 (DLPack code {}, {} bits)",
            t.dtype.code, t.dtype.bits
        )));
    }
    let ndim = usize::try_from(t.ndim).unwrap_or(0);
    let raw_shape: &[i64] = if ndim == 0 {
        &[]
    } else {
        // SAFETY: `shape` holds `ndim` values (DLPack's contract).
        unsafe { std::slice::from_raw_parts(t.shape, ndim) }
    };
    let shape: Vec<usize> = raw_shape.iter().map(|&n| n.max(0) as usize).collect();
    if !t.strides.is_null() && ndim > 0 {
        // SAFETY: non-NULL `strides` holds `ndim` values.
        let strides = unsafe { std::slice::from_raw_parts(t.strides, ndim) };
        let mut want = 1i64;
        for a in (0..ndim).rev() {
            if shape[a] > 1 && strides[a] != want {
                return Err(PyValueError::new_err(format!(
                    "{what}: must be contiguous in C order (strides {strides:?} for shape \
                     {shape:?}); pass tensor.contiguous()"
                )));
            }
            want *= raw_shape[a].max(1);
        }
    }
    Ok(DeviceArray {
        ptr: t.data as u64 + t.byte_offset,
        shape,
        device: usize::try_from(t.device.device_id).unwrap_or(0),
    })
}

fn same_device(arrays: &[&DeviceArray], device: usize) -> PyResult<()> {
    for a in arrays {
        if a.device != device {
            return Err(PyValueError::new_err(format!(
                "arrays on cuda:{} and cuda:{device}: augscope works on one device per call",
                a.device
            )));
        }
    }
    Ok(())
}

/// The CUDA engine of one device, after the fork check.
fn cuda_backend(device: usize, precision: &str) -> PyResult<CudaBackend> {
    backend_spec(&format!("cuda:{device}"))?;
    let prec = self::precision(precision)?;
    CudaBackend::new(&[device], prec).map_err(engine_err)
}

/// The compute stream of augscope's engine on `device` (a `CUstream` as an integer): pass it to
/// `tensor.__dlpack__(stream=...)`, so the tensor's pending work is ordered before augscope's.
#[pyfunction]
fn cuda_stream(device: usize) -> PyResult<u64> {
    Ok(cuda_backend(device, "f32")?.stream_handle())
}

/// Applies a plan to arrays on a CUDA device, given as DLPack capsules: `image` `(C, *grid)` with
/// `channels` (else `grid`), `out` the same on the plan's output grid; `label` and `label_out`
/// one label map (float32) on the two grids. Returns the info JSON. The same bits as `apply` on
/// that device, with no copy through the host.
#[pyfunction]
#[pyo3(signature = (image, out, plan, label=None, label_out=None, channels=false, spacing=None, device=0, precision="f32"))]
#[allow(clippy::too_many_arguments)]
fn apply_cuda(
    py: Python<'_>,
    image: &Bound<'_, PyAny>,
    out: &Bound<'_, PyAny>,
    plan: &str,
    label: Option<&Bound<'_, PyAny>>,
    label_out: Option<&Bound<'_, PyAny>>,
    channels: bool,
    spacing: Option<Vec<f64>>,
    device: usize,
    precision: &str,
) -> PyResult<String> {
    let img = device_array(image, "image")?;
    let out = device_array(out, "out")?;
    let lab = label.map(|l| device_array(l, "label")).transpose()?;
    let lab_out = label_out
        .map(|l| device_array(l, "label_out"))
        .transpose()?;
    if lab.is_some() != lab_out.is_some() {
        return Err(PyValueError::new_err("label and label_out come together"));
    }
    let mut all = vec![&img, &out];
    all.extend(lab.iter());
    all.extend(lab_out.iter());
    same_device(&all, device)?;
    let (c, grid) = if channels {
        match img.shape.split_first() {
            Some((&c, g)) => (c, g.to_vec()),
            None => return Err(PyValueError::new_err("channels=True needs (C, ...) arrays")),
        }
    } else {
        (1, img.shape.clone())
    };
    if !(2..=3).contains(&grid.len()) {
        return Err(PyValueError::new_err(format!(
            "augscope transforms 2D and 3D grids; got spatial shape {grid:?}"
        )));
    }
    let mut grid_vol = augscope::Volume::grid(grid.clone(), c);
    if let Some(s) = spacing {
        if s.len() != grid.len() || s.iter().any(|x| !(x.is_finite() && *x > 0.0)) {
            return Err(PyValueError::new_err(format!(
                "spacing {s:?} must hold one positive voxel size (mm) per spatial axis {grid:?}"
            )));
        }
        grid_vol.spacing_mm = s;
    }
    let mut plan = plan_from(plan)?;
    if plan.space == augscope::augment::Space::Mm && plan.spacing_mm.is_empty() {
        plan.spacing_mm = grid_vol.spacing_mm.clone();
    }
    plan.validate(grid.len())
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    let out_grid = plan.out_shape.clone().unwrap_or_else(|| grid.clone());
    let mut want_out = out_grid.clone();
    if channels {
        want_out.insert(0, c);
    }
    if out.shape != want_out {
        return Err(PyValueError::new_err(format!(
            "out has shape {:?}; this plan writes {want_out:?}",
            out.shape
        )));
    }
    if let (Some(l), Some(lo)) = (&lab, &lab_out)
        && (l.shape != grid || lo.shape != out_grid)
    {
        return Err(PyValueError::new_err(format!(
            "label {:?} and label_out {:?} must be the grids {grid:?} and {out_grid:?}",
            l.shape, lo.shape
        )));
    }
    let lab_vol = lab.as_ref().map(|_| {
        let mut v = augscope::Volume::grid(grid.clone(), 1);
        v.spacing_mm = grid_vol.spacing_mm.clone();
        v
    });
    let backend = cuda_backend(device, precision)?;
    let arrays = DeviceArrays {
        image: img.ptr,
        label: lab.as_ref().map(|l| l.ptr),
        out: out.ptr,
        label_out: lab_out.as_ref().map(|l| l.ptr),
    };
    let timings = py
        .detach(|| {
            let job = Job {
                plan: &plan,
                image: &grid_vol,
                label: lab_vol.as_ref(),
            };
            // SAFETY: the four arrays were read from DLPack capsules the caller holds for this
            // call, checked above to be dense float32 on this device with the lengths the job's
            // grids need; the producer ordered its stream before augscope's (cuda_stream), and
            // the call returns only when the engine's stream is done with them.
            unsafe { backend.apply_device(job, arrays) }
        })
        .map_err(engine_err)?;
    let info = serde_json::json!({
        "backend": format!("cuda:{device}"), "note": null, "done": plan.done_list(),
        "timings_ms": timings, "model": "augscope", "model_steps": [],
        "host_bytes_copied": 0,
    });
    Ok(info.to_string())
}

/// An intensity filter (as `filter`) over arrays on a CUDA device, given as DLPack capsules of
/// equal shape; returns the info JSON. FEBDS (`spec` "febds:dog|log|fft", 2D images) runs every
/// step on the device.
#[pyfunction]
#[pyo3(signature = (image, out, spec, ndim, mode="reflect", cval=0.0, device=0, precision="f32"))]
#[allow(clippy::too_many_arguments)]
fn filter_cuda(
    py: Python<'_>,
    image: &Bound<'_, PyAny>,
    out: &Bound<'_, PyAny>,
    spec: &str,
    ndim: usize,
    mode: &str,
    cval: f32,
    device: usize,
    precision: &str,
) -> PyResult<String> {
    let img = device_array(image, "image")?;
    let out = device_array(out, "out")?;
    same_device(&[&img, &out], device)?;
    if out.shape != img.shape {
        return Err(PyValueError::new_err(format!(
            "out has shape {:?}, the image {:?}",
            out.shape, img.shape
        )));
    }
    let febds = spec.strip_prefix("febds:");
    let f: Filter = match febds {
        Some(m) => Filter::Febds(m.parse().map_err(PyValueError::new_err)?),
        None => spec.parse().map_err(PyValueError::new_err)?,
    };
    let ndim = if febds.is_some() { 2 } else { ndim };
    let mode: Mode = mode.parse().map_err(PyValueError::new_err)?;
    let full = img.shape.clone();
    if ndim == 0 || ndim > full.len() {
        return Err(PyValueError::new_err(format!(
            "ndim {ndim} spatial axes in an array of shape {full:?}"
        )));
    }
    let shape = full[full.len() - ndim..].to_vec();
    let n = img.len();
    let per: usize = shape.iter().product();
    if n == 0 || per == 0 {
        return Err(PyValueError::new_err("empty array"));
    }
    let count = n / per;
    if febds.is_some() && count != 1 {
        return Err(PyValueError::new_err(
            "FEBDS on the device takes one image per call",
        ));
    }
    let f = f
        .resolved(ndim, count)
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    cuda_backend(device, precision)?;
    let prec = self::precision(precision)?;
    let b = Boundary { mode, cval };
    let (src, dst) = (img.ptr, out.ptr);
    let t = py
        .detach(|| {
            // SAFETY: both arrays come from DLPack capsules the caller holds for this call,
            // checked to be dense float32 of `n` values on this device; the producer ordered its
            // stream before augscope's, and the call returns when the work is done.
            let arrays = filters::cuda::Arrays::Device {
                image: src,
                out: dst,
                len: n,
            };
            unsafe { filters::cuda::apply_arrays(&f, b, arrays, &shape, device, prec) }
        })
        .map_err(engine_err)?
        .1;
    let info = serde_json::json!({
        "backend": format!("cuda:{device}"), "note": null,
        "timings_ms": {"upload": t.upload_ms, "compute": t.compute_ms, "download": t.download_ms},
    });
    Ok(info.to_string())
}

/// augscope's memory on every CUDA device it has opened, as JSON: the driver's free and total,
/// what augscope reserves (caches included), uses now, its peak, and its pinned host memory.
#[pyfunction]
fn memory_stats() -> PyResult<String> {
    serde_json::to_string(&engine::cuda::mem_stats())
        .map_err(|e| PyRuntimeError::new_err(e.to_string()))
}

/// Frees augscope's GPU caches (the elastic field, work buffers, pinned staging) on every device.
#[pyfunction]
fn free_caches() {
    engine::cuda::free_caches();
}

#[pymodule]
fn _augscope(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(apply, m)?)?;
    m.add_function(wrap_pyfunction!(preset, m)?)?;
    m.add_function(wrap_pyfunction!(sample, m)?)?;
    m.add_function(wrap_pyfunction!(filter, m)?)?;
    m.add_function(wrap_pyfunction!(febds, m)?)?;
    m.add_function(wrap_pyfunction!(set_threads, m)?)?;
    m.add_function(wrap_pyfunction!(devices, m)?)?;
    m.add_function(wrap_pyfunction!(cuda_stream, m)?)?;
    m.add_function(wrap_pyfunction!(apply_cuda, m)?)?;
    m.add_function(wrap_pyfunction!(filter_cuda, m)?)?;
    m.add_function(wrap_pyfunction!(memory_stats, m)?)?;
    m.add_function(wrap_pyfunction!(free_caches, m)?)?;
    m.add("GpuOutOfMemory", m.py().get_type::<GpuOutOfMemory>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
