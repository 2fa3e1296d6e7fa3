//! `augscope._augscope`: the Python binding of the augscope library (no second engine). The
//! Python package around it (`python/augscope/`) handles shapes, torch tensors and seeds; this
//! module takes float32 numpy arrays and plans as JSON, and runs the library's engine, filters
//! and FEBDS, with the GIL released.
//!
//! Every entry point checks its input first (`checks`: shapes, plans, voxel sizes, memory) and
//! runs its body under `checks::guard`, so that bad input is a `ValueError` or `MemoryError`
//! line, never a `PanicException` or an aborted interpreter.
//!
//! Device memory: torch (or CuPy) tensors on a GPU come in as DLPack capsules (`__dlpack__`,
//! asked to order the producer's stream before augscope's, [`cuda_stream`]); the engine reads and
//! writes them where they are, with no copy through the host.
//!
//! Processes: rayon's global thread pool does not survive `fork` (DataLoader workers), so every
//! call runs in a pool of this process, built again in a forked child. A CUDA context does not
//! survive `fork` either: a CUDA request in a child of a process that used CUDA is refused with
//! a clear error (use the `spawn` start method).

mod batch;
mod checks;
mod dlpack;

use std::path::Path;
use std::sync::{Arc, Mutex};

use numpy::ndarray::{ArrayD, IxDyn};
use numpy::{IntoPyArray, PyArrayDyn, PyReadonlyArrayDyn, PyUntypedArrayMethods};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;

use augscope::augment::preset::{self as presets, Preset};
use augscope::augment::{DoneList, Plan};
use augscope::core::intensity::Normalize;
use augscope::engine::cuda::CudaBackend;
use augscope::engine::{self, BackendSpec, EngineError, Precision};
use augscope::export::preview::{self, Model};
use augscope::filter::{self as filters, Boundary, Filter};
use augscope::{Mode, Volume};

use checks::guard;
use dlpack::{device_array, same_device};

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

/// The channel count and the spatial grid of an array of `shape` (`channels`: the first axis is
/// channels): a non-empty 2D or 3D grid.
fn grid_of(shape: &[usize], channels: bool) -> PyResult<(usize, Vec<usize>)> {
    let (c, spatial) = if channels {
        match shape.split_first() {
            Some((&c, g)) if !g.is_empty() => (c, g.to_vec()),
            _ => return Err(PyValueError::new_err("channels=True needs (C, ...) arrays")),
        }
    } else {
        (1, shape.to_vec())
    };
    if !(2..=3).contains(&spatial.len()) {
        return Err(PyValueError::new_err(format!(
            "augscope transforms 2D and 3D grids; got spatial shape {spatial:?}"
        )));
    }
    checks::non_empty(shape, "the array")?;
    Ok((c, spatial))
}

/// A volume of a float32 array's values (copied; a `MemoryError` when they cannot be) on `grid`
/// with `c` channels and the voxel size `spacing` (checked by the caller).
fn volume(
    a: &PyReadonlyArrayDyn<'_, f32>,
    c: usize,
    grid: &[usize],
    spacing: Option<&[f64]>,
) -> PyResult<Volume> {
    let data = checks::copy(&host_values(a))?;
    let mut v = Volume::new(data, grid.to_vec(), c);
    if let Some(s) = spacing {
        v.spacing_mm = s.to_vec();
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

/// A plan (JSON) made ready for an image of `c` channels on `grid` (and a label map when
/// `label`) with the voxel size `spacing`: keys known, values valid, and, with `host_memory`,
/// the host memory of the apply (input copies, outputs, the elastic field and scratch: DESIGN
/// §6's budget) within the machine's. Returns the plan and its output grid.
fn plan_for(
    json: &str,
    c: usize,
    grid: &[usize],
    label: bool,
    spacing: Option<&[f64]>,
    host_memory: bool,
) -> PyResult<(Plan, Vec<usize>)> {
    if let Some(s) = spacing {
        checks::spacing(s, grid.len(), "spacing")?;
    }
    let plan = checks::plan(json)?;
    let plan = checks::ready_plan(plan, grid.len(), spacing, &vec![1.0; grid.len()])?;
    let out_grid = plan.out_shape.clone().unwrap_or_else(|| grid.to_vec());
    if !host_memory {
        return Ok((plan, out_grid));
    }
    let lab = usize::from(label);
    let (n_in, n_out) = (checks::count(grid, 1), checks::count(&out_grid, 1));
    let values = n_in.zip(n_out).and_then(|(i, o)| {
        let io = i.checked_mul((c + lab) as u64)?;
        let oo = o.checked_mul((c + lab) as u64)?;
        io.checked_add(oo)?.checked_add(i.max(o).checked_mul(4)?)
    });
    checks::memory(
        values,
        &format!("a plan writing {out_grid:?} from {grid:?}"),
    )?;
    Ok((plan, out_grid))
}

type Outputs<'py> = (
    Bound<'py, PyArrayDyn<f32>>,
    Option<Bound<'py, PyArrayDyn<f32>>>,
    String,
);

/// Applies a plan (JSON, the `plan` of a report or manifest line) to an image (and a label map,
/// order 0) on `backend`; returns (image, label, info JSON: backend, note, done, timings, model,
/// model steps, and the plan that ran). `spacing` is the scan's voxel size in mm; in mm space it
/// is the plan's (replacing the plan's `spacing_mm`). `model` other than augscope runs that
/// library's model on the CPU engine.
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
    guard(|| {
        let (c, grid) = grid_of(image.shape(), channels)?;
        if let Some(l) = &label
            && l.shape() != grid.as_slice()
        {
            return Err(PyValueError::new_err(format!(
                "label shape {:?} differs from the image's spatial shape {grid:?}",
                l.shape()
            )));
        }
        let (plan, _) = plan_for(plan, c, &grid, label.is_some(), spacing.as_deref(), true)?;
        let model: Model = model.parse().map_err(PyValueError::new_err)?;
        let spec = backend_spec(backend)?;
        let prec = self::precision(precision)?;
        let img = volume(&image, c, &grid, spacing.as_deref())?;
        let lab = match &label {
            Some(l) => Some(volume(l, 1, &grid, spacing.as_deref())?),
            None => None,
        };
        let pool = pool()?;
        let result = py.detach(|| {
            pool.install(|| -> Result<_, String> {
                if !model.is_own() {
                    let p = preview::preview(model, &img, lab.as_ref(), &plan)
                        .map_err(|e| e.to_string())?;
                    let info = serde_json::json!({
                        "backend": "cpu", "note": null, "done": plan.done_list(),
                        "model": p.model.id(), "model_steps": p.steps,
                        "displacement_vox": p.displacement, "plan": plan,
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
                    "plan": plan,
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
    })
}

/// Checks a plan (JSON) for an array of `shape` (`channels`: its first axis is channels) with the
/// voxel size `spacing`, as `apply` and `apply_cuda_batch` do before any work (keys, values, and with
/// `host_memory` the host memory of `apply`); returns the plan that would run, as JSON. Callers
/// that allocate the outputs themselves check first.
#[pyfunction]
#[pyo3(signature = (plan, shape, channels=false, label=false, spacing=None, host_memory=true))]
fn check_plan(
    plan: &str,
    shape: Vec<usize>,
    channels: bool,
    label: bool,
    spacing: Option<Vec<f64>>,
    host_memory: bool,
) -> PyResult<String> {
    guard(|| {
        let (c, grid) = grid_of(&shape, channels)?;
        let (plan, _) = plan_for(plan, c, &grid, label, spacing.as_deref(), host_memory)?;
        serde_json::to_string(&plan).map_err(|e| PyRuntimeError::new_err(e.to_string()))
    })
}

/// Refuses (`MemoryError`) work of `values` float32 values in all beyond the machine's memory;
/// the package asks before converting an array to float32.
#[pyfunction]
fn check_memory(values: u64, what: &str) -> PyResult<()> {
    guard(|| checks::memory(Some(values), what))
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
    guard(|| {
        let p = load_preset(spec)?;
        serde_json::to_string(&p).map_err(|e| PyRuntimeError::new_err(e.to_string()))
    })
}

/// One draw of a preset, as `augscope preset sample` and `augscope batch` draw it for a scan of
/// voxel size `spacing` (mm; ones by default) and `channels` channels (1 to 4096): (plan JSON,
/// done list JSON, drawn values JSON).
#[pyfunction]
#[pyo3(signature = (preset, seed, ndim=3, spacing=None, space=None, channels=1))]
fn sample(
    preset: &str,
    seed: u64,
    ndim: usize,
    spacing: Option<Vec<f64>>,
    space: Option<&str>,
    channels: usize,
) -> PyResult<(String, String, String)> {
    guard(|| {
        let ndim = checks::ndim(ndim)?;
        let spacing = spacing.unwrap_or_else(|| vec![1.0; ndim]);
        checks::spacing(&spacing, ndim, "spacing")?;
        let mut p = load_preset(preset)?;
        if let Some(s) = space {
            p.space = s.parse().map_err(PyValueError::new_err)?;
        }
        let s = p
            .sample(seed, ndim, channels, &spacing)
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        let j =
            |v: serde_json::Result<String>| v.map_err(|e| PyRuntimeError::new_err(e.to_string()));
        Ok((
            j(serde_json::to_string(&s.plan))?,
            j(serde_json::to_string(&s.done))?,
            j(serde_json::to_string(&s.drawn))?,
        ))
    })
}

/// The memory check of a filter over `full` (input borrowed; output and the filter's scratch).
fn filter_memory(full: &[usize]) -> PyResult<()> {
    checks::non_empty(full, "the array")?;
    let n = checks::count(full, 1);
    checks::memory(
        n.and_then(|n| n.checked_mul(4)),
        &format!("filtering an array of shape {full:?}"),
    )
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
    guard(|| {
        let f: Filter = spec.parse().map_err(PyValueError::new_err)?;
        let mode: Mode = mode.parse().map_err(PyValueError::new_err)?;
        let full = image.shape().to_vec();
        if ndim == 0 || ndim > full.len() {
            return Err(PyValueError::new_err(format!(
                "ndim {ndim} spatial axes in an array of shape {full:?}"
            )));
        }
        filter_memory(&full)?;
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
    })
}

/// `image` normalised by `spec` (a preset's `[normalize]` as JSON; `channels`: the first axis is
/// channels), as `augscope apply --normalize` does: (normalised array, per-channel affine maps
/// as JSON).
#[pyfunction]
#[pyo3(signature = (image, spec, channels=false))]
fn normalize<'py>(
    py: Python<'py>,
    image: PyReadonlyArrayDyn<'py, f32>,
    spec: &str,
    channels: bool,
) -> PyResult<(Bound<'py, PyArrayDyn<f32>>, String)> {
    guard(|| {
        let n: Normalize = serde_json::from_str(spec)
            .map_err(|e| PyValueError::new_err(format!("not a normalisation: {e}")))?;
        n.validate().map_err(PyValueError::new_err)?;
        let full = image.shape().to_vec();
        let (c, grid) = grid_of(&full, channels)?;
        filter_memory(&full)?;
        let mut data = host_values(&image).into_owned();
        let pool = pool()?;
        let maps = py
            .detach(|| pool.install(|| n.apply(&mut data, &grid, c)))
            .map_err(PyValueError::new_err)?;
        let a = ArrayD::from_shape_vec(IxDyn(&full), data)
            .map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
        Ok((a.into_pyarray(py), serde_json::json!(maps).to_string()))
    })
}

/// The FEBDS mask (0/1) of 2D images `[..., y, x]` (12-bit intensities) with `method` dog, log
/// or fft: a stack (any leading axes) is segmented image by image.
#[pyfunction]
#[pyo3(signature = (image, method="dog", backend="cpu", precision="f32"))]
fn febds<'py>(
    py: Python<'py>,
    image: PyReadonlyArrayDyn<'py, f32>,
    method: &str,
    backend: &str,
    precision: &str,
) -> PyResult<(Bound<'py, PyArrayDyn<f32>>, String)> {
    guard(|| {
        let m: filters::FebdsMethod = method.parse().map_err(PyValueError::new_err)?;
        let full = image.shape().to_vec();
        if full.len() < 2 {
            return Err(PyValueError::new_err("FEBDS takes 2D images [..., y, x]"));
        }
        filter_memory(&full)?;
        let shape = full[full.len() - 2..].to_vec();
        let per = shape[0] * shape[1];
        let data = host_values(&image);
        let spec = backend_spec(backend)?;
        let prec = self::precision(precision)?;
        let pool = pool()?;
        let b = Boundary {
            mode: Mode::Reflect,
            cval: 0.0,
        };
        let f = Filter::Febds(m);
        let (out, run_backend, note) = py
            .detach(|| {
                pool.install(|| -> Result<_, String> {
                    let mut out = Vec::new();
                    out.try_reserve_exact(data.len()).map_err(|_| {
                        format!("cannot allocate the mask of {} values", data.len())
                    })?;
                    let (mut used, mut note) = (String::from("cpu"), None);
                    for one in data.chunks(per) {
                        let run = filters::run(&f, b, one, &shape, &spec, prec)
                            .map_err(|e| e.to_string())?;
                        out.extend_from_slice(&run.out);
                        used = run.backend;
                        note = note.or(run.note);
                    }
                    Ok((out, used, note))
                })
            })
            .map_err(PyValueError::new_err)?;
        let info = serde_json::json!({ "backend": run_backend, "note": note });
        let a = ArrayD::from_shape_vec(IxDyn(&full), out)
            .map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
        Ok((a.into_pyarray(py), info.to_string()))
    })
}

/// Threads of augscope's pool in this process (0: one per core); takes effect for the next
/// pool (a new process, or now when `rebuild`).
#[pyfunction]
#[pyo3(signature = (n, rebuild=true))]
fn set_threads(n: usize, rebuild: bool) -> PyResult<()> {
    guard(|| {
        if n > checks::MAX_THREADS {
            return Err(PyValueError::new_err(format!(
                "{n} threads: at most {}",
                checks::MAX_THREADS
            )));
        }
        *THREADS.lock().unwrap_or_else(|p| p.into_inner()) = n;
        if rebuild {
            *POOL.lock().unwrap_or_else(|p| p.into_inner()) = None;
        }
        Ok(())
    })
}

/// The CUDA devices, as `augscope devices --json`.
#[pyfunction]
fn devices() -> PyResult<String> {
    guard(|| {
        serde_json::to_string(&augscope::gpu::device::discover())
            .map_err(|e| PyRuntimeError::new_err(e.to_string()))
    })
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
    guard(|| Ok(cuda_backend(device, "f32")?.stream_handle()))
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
    guard(|| {
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
    })
}

/// augscope's memory on every CUDA device it has opened, as JSON: the driver's free and total,
/// what augscope reserves (caches included), uses now, its peak, and its pinned host memory.
#[pyfunction]
fn memory_stats() -> PyResult<String> {
    guard(|| {
        serde_json::to_string(&engine::cuda::mem_stats())
            .map_err(|e| PyRuntimeError::new_err(e.to_string()))
    })
}

/// Frees augscope's GPU caches (the elastic field, work buffers, pinned staging) on every device.
#[pyfunction]
fn free_caches() -> PyResult<()> {
    guard(|| {
        engine::cuda::free_caches();
        Ok(())
    })
}

/// Waits for the kernel compiles started ahead on other threads (registered with `atexit`: the
/// interpreter must not end while NVRTC runs on another thread).
#[pyfunction]
fn finish_background_compiles(py: Python<'_>) -> PyResult<()> {
    py.detach(augscope::gpu::nvrtc::finish_background_compiles);
    Ok(())
}

#[pymodule]
fn _augscope(m: &Bound<'_, PyModule>) -> PyResult<()> {
    checks::quiet_panics();
    m.add_function(wrap_pyfunction!(apply, m)?)?;
    m.add_function(wrap_pyfunction!(check_plan, m)?)?;
    m.add_function(wrap_pyfunction!(check_memory, m)?)?;
    m.add_function(wrap_pyfunction!(preset, m)?)?;
    m.add_function(wrap_pyfunction!(sample, m)?)?;
    m.add_function(wrap_pyfunction!(filter, m)?)?;
    m.add_function(wrap_pyfunction!(normalize, m)?)?;
    m.add_function(wrap_pyfunction!(febds, m)?)?;
    m.add_function(wrap_pyfunction!(set_threads, m)?)?;
    m.add_function(wrap_pyfunction!(devices, m)?)?;
    m.add_function(wrap_pyfunction!(cuda_stream, m)?)?;
    m.add_function(wrap_pyfunction!(batch::apply_cuda_batch, m)?)?;
    m.add_function(wrap_pyfunction!(filter_cuda, m)?)?;
    m.add_function(wrap_pyfunction!(memory_stats, m)?)?;
    m.add_function(wrap_pyfunction!(free_caches, m)?)?;
    m.add_function(wrap_pyfunction!(finish_background_compiles, m)?)?;
    m.add("GpuOutOfMemory", m.py().get_type::<GpuOutOfMemory>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
