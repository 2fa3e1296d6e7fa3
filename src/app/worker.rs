//! The worker thread: loads scans and runs transforms off the UI thread. The UI posts requests
//! into slots (the newest request of each kind replaces an older one that has not started), the
//! worker computes on the chosen engine and wakes the UI with `ctx.request_repaint()`.
//!
//! While a slider moves, the CPU path first computes only the planes on screen, then, once no
//! newer request has arrived for a moment, the whole volume, one plane at a time: a newer request
//! abandons that fill between two planes, so the next slice-only answer is not held up.

use std::path::PathBuf;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::augment::Plan;
use crate::engine::cpu::CpuBackend;
use crate::engine::cuda::CudaBackend;
use crate::engine::device::{DevicesReport, MemStats};
use crate::engine::{self, Backend, BackendSpec, EngineError, Job, Precision, Timings};
use crate::io::{self, LoadOptions};
use crate::volume::Volume;

use super::slices::{self, DisplaySlice, ViewGeom};

/// A scan and its label map, as loaded.
pub struct Loaded {
    pub image: Arc<Volume>,
    pub label: Option<Arc<Volume>>,
    pub path: PathBuf,
    pub label_path: Option<PathBuf>,
    /// 0.5 and 99.5 percentiles of the image (the "auto" window).
    pub auto_window: (f32, f32),
    /// A note about the label map (e.g. why it was not used).
    pub note: Option<String>,
    pub load_ms: f64,
}

/// One transform request.
#[derive(Clone)]
pub struct Compute {
    /// Increases with every parameter change; replies carry it.
    pub generation: u64,
    pub plan: Plan,
    pub backend: BackendSpec,
    pub precision: Precision,
    /// The voxel the views are centred on; the slice-only path computes the planes through it.
    pub cursor: Vec<usize>,
    pub views: Vec<ViewGeom>,
    /// Compute the planes on screen before the whole volume (CPU engine, while a slider moves).
    pub slices_first: bool,
}

/// Planes of the augmented image (and label) through one cursor.
pub struct SliceSet {
    pub generation: u64,
    pub cursor: Vec<usize>,
    pub image: Vec<Arc<DisplaySlice>>,
    pub label: Vec<Option<Arc<DisplaySlice>>>,
    pub elapsed_ms: f64,
}

/// A whole augmented volume.
pub struct FullResult {
    pub generation: u64,
    pub image: Arc<Volume>,
    pub label: Option<Arc<Volume>>,
    pub timings: Timings,
    pub backend: String,
    pub note: Option<String>,
    /// Realised displacement (max, RMS) in voxels.
    pub displacement_vox: Option<(f64, f64)>,
}

/// CPU vs GPU on the same plan.
pub struct Comparison {
    pub generation: u64,
    pub cpu: Arc<Volume>,
    pub cpu_ms: f64,
    /// The GPU result, or why there is none.
    pub gpu: Result<(Arc<Volume>, f64, String), String>,
    pub max_abs: f64,
    pub mean_abs: f64,
}

pub enum Reply {
    Loaded(Result<Loaded, String>),
    Slices(SliceSet),
    /// The whole volume of this generation is being computed (after its slices, on the CPU).
    Filling(u64),
    Full(FullResult),
    Compared(Comparison),
    Failed {
        generation: u64,
        message: String,
    },
    Devices(DevicesReport),
    Memory(Vec<MemStats>),
}

#[derive(Default)]
struct Slots {
    load: Option<(PathBuf, Option<PathBuf>)>,
    compute: Option<Compute>,
    compare: Option<Compute>,
    shutdown: bool,
}

struct Shared {
    slots: Mutex<Slots>,
    wake: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Slots> {
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The UI's handle on the worker thread.
pub struct Worker {
    shared: Arc<Shared>,
    replies: Receiver<Reply>,
    thread: Option<JoinHandle<()>>,
}

impl Worker {
    /// Starts the thread; `repaint` is called after every reply.
    pub fn spawn(repaint: impl Fn() + Send + 'static) -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            slots: Mutex::new(Slots::default()),
            wake: Condvar::new(),
        });
        let (tx, replies) = channel();
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name("augscope-worker".into())
            .spawn(move || WorkerLoop::new(s, tx, Box::new(repaint)).run())?;
        Ok(Worker {
            shared,
            replies,
            thread: Some(thread),
        })
    }

    pub fn load(&self, path: PathBuf, label: Option<PathBuf>) {
        let mut s = self.shared.lock();
        s.load = Some((path, label));
        s.compute = None;
        s.compare = None;
        self.shared.wake.notify_one();
    }

    /// Posts a transform; an older one that has not started is dropped.
    pub fn compute(&self, req: Compute) {
        self.shared.lock().compute = Some(req);
        self.shared.wake.notify_one();
    }

    pub fn compare(&self, req: Compute) {
        self.shared.lock().compare = Some(req);
        self.shared.wake.notify_one();
    }

    /// Whether a request is waiting (not yet started).
    pub fn pending(&self) -> bool {
        let s = self.shared.lock();
        s.load.is_some() || s.compute.is_some() || s.compare.is_some()
    }

    pub fn try_recv(&self) -> Option<Reply> {
        self.replies.try_recv().ok()
    }

    /// The next reply, waiting at most `timeout` (headless callers: tests, the latency bench).
    pub fn recv_timeout(&self, timeout: Duration) -> Option<Reply> {
        self.replies.recv_timeout(timeout).ok()
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.shared.lock().shutdown = true;
        self.shared.wake.notify_all();
        if let Some(t) = self.thread.take() {
            // The worker finishes the request it is on; a join keeps the process exit clean.
            let _ = t.join();
        }
    }
}

/// The CUDA engine made for (spec, precision), or why there is none (the CPU engine runs then).
type GpuEngine = (BackendSpec, Precision, Result<Arc<CudaBackend>, String>);
/// (sigma, seed, shape, alpha) of a displacement readout.
type DisplacementKey = (f64, u64, Vec<usize>, f64);

struct WorkerLoop {
    shared: Arc<Shared>,
    tx: Sender<Reply>,
    repaint: Box<dyn Fn() + Send>,
    image: Option<Arc<Volume>>,
    label: Option<Arc<Volume>>,
    /// The CPU engine: it keeps the smoothed elastic field, so moving alpha, an angle or the
    /// mode never recomputes it.
    cpu: Arc<CpuBackend>,
    /// The engines of the slice-only path (the main one is `cpu`).
    slicing: SliceEngines,
    /// The GPU engine for (spec, precision), made on first use.
    gpu: Option<GpuEngine>,
    /// Last displacement readout: (sigma, seed, shape, alpha) -> (max, rms).
    displacement: Option<(DisplacementKey, (f64, f64))>,
    /// Increases with every load: the GPU keeps the image of this key on the device.
    image_key: u64,
}

/// How long the worker waits after a slice-only answer before filling in the whole volume: long
/// enough to see that a slider is still moving.
const FILL_DELAY: Duration = Duration::from_millis(120);

impl WorkerLoop {
    fn new(shared: Arc<Shared>, tx: Sender<Reply>, repaint: Box<dyn Fn() + Send>) -> Self {
        let cpu = Arc::new(CpuBackend::new());
        WorkerLoop {
            shared,
            tx,
            repaint,
            image: None,
            label: None,
            cpu: cpu.clone(),
            slicing: SliceEngines::new(cpu),
            gpu: None,
            displacement: None,
            image_key: 0,
        }
    }

    fn send(&self, r: Reply) {
        // The UI is gone when this fails: nothing left to tell.
        let _ = self.tx.send(r);
        (self.repaint)();
    }

    fn run(mut self) {
        // The device report can take a moment (driver loading): off the UI thread, once.
        self.send(Reply::Devices(engine::device::discover()));
        loop {
            let (load, compute, compare) = {
                let mut s = self.shared.lock();
                while !s.shutdown && s.load.is_none() && s.compute.is_none() && s.compare.is_none()
                {
                    s = self.shared.wake.wait(s).unwrap_or_else(|p| p.into_inner());
                }
                if s.shutdown {
                    return;
                }
                match s.load.take() {
                    Some(l) => (Some(l), None, None),
                    None => match s.compute.take() {
                        Some(c) => (None, Some(c), None),
                        None => (None, None, s.compare.take()),
                    },
                }
            };
            if let Some((path, label)) = load {
                let r = load_scan(path, label);
                if let Ok(l) = &r {
                    self.image = Some(l.image.clone());
                    self.label = l.label.clone();
                    self.image_key += 1;
                    self.displacement = None;
                }
                self.send(Reply::Loaded(r));
            } else if let Some(c) = compute {
                self.compute(c);
            } else if let Some(c) = compare {
                self.compare(c);
            }
        }
    }

    /// The engine for a request: whether it runs on a GPU (made once per spec), and the note to
    /// show when a CUDA request falls back to the CPU.
    fn backend(&mut self, spec: &BackendSpec, precision: Precision) -> (bool, Option<String>) {
        let BackendSpec::Cuda(ids) = spec else {
            return (false, None);
        };
        let fresh = !matches!(&self.gpu, Some((s, p, _)) if s == spec && *p == precision);
        if fresh {
            let made = CudaBackend::new(ids, precision).map(Arc::new).map_err(|e| {
                let why = match &e {
                    EngineError::CudaUnavailable(m) => m.clone(),
                    other => other.to_string(),
                };
                let first = why.lines().next().unwrap_or("").trim().to_string();
                format!("CUDA engine unavailable ({first}); using the CPU engine")
            });
            if made.is_ok() {
                // Build the field kernels of every sigma now (a few seconds, once per device),
                // so that moving sigma later never waits for NVRTC. A failure shows again, with
                // its message, when the kernel is first needed.
                for &i in ids {
                    let _ = crate::engine::cuda::warm_field_kernels(i);
                }
            }
            self.gpu = Some((spec.clone(), precision, made));
        }
        match &self.gpu {
            Some((_, _, Ok(_))) => (true, None),
            Some((_, _, Err(note))) => (false, Some(note.clone())),
            None => (false, None),
        }
    }

    /// Whether a newer request (or a shutdown) waits: a running fill is then abandoned.
    fn superseded(&self) -> bool {
        let s = self.shared.lock();
        s.shutdown || s.load.is_some() || s.compute.is_some()
    }

    fn compute(&mut self, c: Compute) {
        let Some(image) = self.image.clone() else {
            return;
        };
        let label = self.label.clone();
        if let Err(e) = c.plan.validate(image.ndim()) {
            self.send(Reply::Failed {
                generation: c.generation,
                message: e.to_string(),
            });
            return;
        }
        let (on_gpu, note) = self.backend(&c.backend, c.precision);
        let gpu = match (&self.gpu, on_gpu) {
            (Some((_, _, Ok(b))), true) => Some(b.clone()),
            _ => None,
        };
        if c.slices_first {
            // The planes on screen first: on the GPU each is one launch over the plane with the
            // image kept on the device; on the CPU each is computed on its own.
            let slices = match &gpu {
                // A GPU failure (out of memory, say) leaves the planes to the CPU; the whole
                // volume below reports what happened.
                Some(b) => compute_slices_gpu(b, self.image_key, &c, &image, label.as_deref())
                    .or_else(|_| compute_slices(&self.slicing, &c, &image, label.as_deref())),
                None => compute_slices(&self.slicing, &c, &image, label.as_deref()),
            };
            match slices {
                Ok(s) => self.send(Reply::Slices(s)),
                Err(message) => {
                    self.send(Reply::Failed {
                        generation: c.generation,
                        message,
                    });
                    return;
                }
            }
            // Fill in the whole volume only when the slider has come to rest.
            let s = self.shared.lock();
            let (s, _) = self
                .shared
                .wake
                .wait_timeout_while(s, FILL_DELAY, |s| {
                    !s.shutdown && s.load.is_none() && s.compute.is_none()
                })
                .unwrap_or_else(|p| p.into_inner());
            if s.shutdown || s.load.is_some() || s.compute.is_some() {
                return;
            }
        }
        let result = match &gpu {
            Some(b) => {
                engine::cuda::apply_new_with_fallback(b.as_ref(), &c.plan, &image, label.as_deref())
                    .map(|(img, lab, t, fallback)| {
                        let name = if fallback.is_some() {
                            "cpu".to_string()
                        } else {
                            b.name()
                        };
                        Some((img, lab, t, name, fallback))
                    })
            }
            None => {
                self.send(Reply::Filling(c.generation));
                let cpu = self.cpu.clone();
                let r = fill_volume(&cpu, &c.plan, &image, label.as_deref(), &|| {
                    self.superseded()
                });
                // The fill made the volume field first, also when it was then abandoned.
                self.slicing.main_field = field_key(&c.plan, &image.shape);
                r.map(|r| r.map(|(img, lab, t)| (img, lab, t, cpu.name(), None)))
            }
        };
        match result {
            // Superseded: the newer request is served next; this one tells nothing.
            Ok(None) => {}
            Ok(Some((img, lab, timings, name, fallback))) => {
                let displacement_vox = match &gpu {
                    Some(b) if fallback.is_none() => {
                        b.displacement_stats(&c.plan, &image.shape).ok().flatten()
                    }
                    _ => self.displacement(&c.plan, &image.shape),
                };
                self.send(Reply::Full(FullResult {
                    generation: c.generation,
                    image: Arc::new(img),
                    label: lab.map(Arc::new),
                    timings,
                    backend: name,
                    note: fallback.or(note),
                    displacement_vox,
                }));
                if on_gpu {
                    self.send(Reply::Memory(engine::cuda::mem_stats()));
                }
            }
            Err(e) => self.send(Reply::Failed {
                generation: c.generation,
                message: e.to_string(),
            }),
        }
    }

    /// Max and RMS displacement of the plan's elastic field, cached per (field, alpha).
    fn displacement(&mut self, plan: &Plan, shape: &[usize]) -> Option<(f64, f64)> {
        let e = plan.elastic?;
        let key = (e.sigma, e.seed, shape.to_vec(), e.alpha);
        if let Some((k, v)) = &self.displacement
            && *k == key
        {
            return Some(*v);
        }
        let (field, _) = self.cpu.field(plan, shape)?;
        self.slicing.main_field = field_key(plan, shape);
        let v = field.displacement_stats(e.alpha);
        self.displacement = Some((key, v));
        Some(v)
    }

    fn compare(&mut self, c: Compute) {
        let Some(image) = self.image.clone() else {
            return;
        };
        let t = Instant::now();
        let cpu = engine::apply_new(self.cpu.as_ref(), &c.plan, &image, None);
        self.slicing.main_field = field_key(&c.plan, &image.shape);
        let cpu = match cpu {
            Ok((v, _, _)) => v,
            Err(e) => {
                self.send(Reply::Failed {
                    generation: c.generation,
                    message: e.to_string(),
                });
                return;
            }
        };
        let cpu_ms = t.elapsed().as_secs_f64() * 1e3;
        let spec = match c.backend {
            BackendSpec::Cuda(ref ids) => BackendSpec::Cuda(ids.clone()),
            _ => BackendSpec::Cuda(vec![0]),
        };
        let (on_gpu, note) = self.backend(&spec, c.precision);
        let gpu = match (&self.gpu, on_gpu) {
            (Some((_, _, Ok(b))), true) => {
                // Once to compile and upload, once to time.
                let warm = engine::apply_new(b.as_ref(), &c.plan, &image, None);
                let t = Instant::now();
                match warm.and_then(|_| engine::apply_new(b.as_ref(), &c.plan, &image, None)) {
                    Ok((v, _, _)) => Ok((Arc::new(v), t.elapsed().as_secs_f64() * 1e3, b.name())),
                    Err(e) => Err(e.to_string()),
                }
            }
            _ => Err(note.unwrap_or_else(|| "no CUDA device".into())),
        };
        let (max_abs, mean_abs) = match &gpu {
            Ok((g, _, _)) => abs_diff_stats(&cpu.data, &g.data),
            Err(_) => (0.0, 0.0),
        };
        self.send(Reply::Compared(Comparison {
            generation: c.generation,
            cpu: Arc::new(cpu),
            cpu_ms,
            gpu,
            max_abs,
            mean_abs,
        }));
    }
}

/// Max and mean |a − b|.
pub fn abs_diff_stats(a: &[f32], b: &[f32]) -> (f64, f64) {
    if a.is_empty() || a.len() != b.len() {
        return (0.0, 0.0);
    }
    let (mut max, mut sum) = (0f64, 0f64);
    for (x, y) in a.iter().zip(b) {
        let d = (*x as f64 - *y as f64).abs();
        max = max.max(d);
        sum += d;
    }
    (max, sum / a.len() as f64)
}

fn load_scan(path: PathBuf, label_path: Option<PathBuf>) -> Result<Loaded, String> {
    let t = Instant::now();
    let image = io::load(&path, &LoadOptions::default()).map_err(|e| e.to_string())?;
    if image.data.is_empty() {
        return Err(format!("the scan holds no voxels: {}", path.display()));
    }
    if !(2..=3).contains(&image.ndim()) {
        return Err(format!(
            "only 2D and 3D scans can be shown, this one has {} axes: {}",
            image.ndim(),
            path.display()
        ));
    }
    let mut note = None;
    let label = match &label_path {
        None => None,
        Some(lp) => match io::load(lp, &LoadOptions::default()) {
            Ok(l) if l.shape == image.shape && l.channels == 1 => Some(Arc::new(l)),
            Ok(l) => {
                note = Some(format!(
                    "label map ignored: shape {:?} differs from the scan's {:?}: {}",
                    l.shape,
                    image.shape,
                    lp.display()
                ));
                None
            }
            Err(e) => {
                note = Some(format!("label map not loaded: {e}"));
                None
            }
        },
    };
    let p = slices::percentiles(&image.data, &[0.005, 0.995]);
    let auto_window = (p[0], p[1].max(p[0]));
    Ok(Loaded {
        image: Arc::new(image),
        label,
        path,
        label_path,
        auto_window,
        note,
        load_ms: t.elapsed().as_secs_f64() * 1e3,
    })
}

/// What a CPU engine's cached volume field is for: (sigma bits, seed, shape).
type FieldKey = (u64, u64, Vec<usize>);

fn field_key(plan: &Plan, shape: &[usize]) -> Option<FieldKey> {
    plan.elastic
        .filter(|e| e.alpha != 0.0)
        .map(|e| (e.sigma.to_bits(), e.seed, shape.to_vec()))
}

/// The CPU engines of the slice-only path: the worker's main engine, whose cached volume field
/// and cubic coefficients serve every view, and one engine per view, so that the views' field
/// planes (after a new sigma or seed) are computed at the same time instead of one after the
/// other (an engine holds its plane cache while it computes a plane).
pub struct SliceEngines {
    pub main: Arc<CpuBackend>,
    pub per_view: Vec<CpuBackend>,
    /// The volume field the main engine holds, when the worker knows of one.
    pub main_field: Option<FieldKey>,
}

impl SliceEngines {
    pub fn new(main: Arc<CpuBackend>) -> Self {
        SliceEngines {
            main,
            per_view: (0..3).map(|_| CpuBackend::new()).collect(),
            main_field: None,
        }
    }
}

/// The planes through `c.cursor` on the GPU ([`CudaBackend::apply_slice`]: one launch over each
/// plane, only the plane downloaded, the image uploaded once per `image_key`). 3D only; a 2D
/// image takes [`compute_slices`]'s whole-image path on the CPU.
fn compute_slices_gpu(
    gpu: &CudaBackend,
    image_key: u64,
    c: &Compute,
    image: &Volume,
    label: Option<&Volume>,
) -> Result<SliceSet, String> {
    if image.ndim() != 3 {
        return Err("the GPU slice path needs a 3D volume".into());
    }
    let t = Instant::now();
    let job = Job {
        plan: &c.plan,
        image,
        label,
    };
    let (imgs, labs) = c
        .views
        .iter()
        .map(|v| {
            view_plane(c, image, label, v, |axis, index, out, lab| {
                gpu.apply_slice(job, Some(image_key), axis, index, out, lab)
            })
        })
        .collect::<Result<Vec<_>, _>>()?
        .into_iter()
        .unzip();
    Ok(SliceSet {
        generation: c.generation,
        cursor: c.cursor.clone(),
        image: imgs,
        label: labs,
        elapsed_ms: t.elapsed().as_secs_f64() * 1e3,
    })
}

/// The display slices of one 3D view through `c.cursor`: `compute(axis, index, image_planes,
/// label_planes)` fills the output plane (CPU or GPU slice path), then it is cut for display.
fn view_plane(
    c: &Compute,
    image: &Volume,
    label: Option<&Volume>,
    v: &ViewGeom,
    compute: impl FnOnce(usize, usize, &mut [f32], Option<&mut [f32]>) -> Result<Timings, EngineError>,
) -> Result<(Arc<DisplaySlice>, Option<Arc<DisplaySlice>>), String> {
    let Some(axis) = v.normal else {
        return Err("a 3D view without a normal axis".into());
    };
    let index = c.cursor.get(axis).copied().unwrap_or(0);
    let plane: usize = (0..3)
        .filter(|&a| a != axis)
        .map(|a| image.shape[a])
        .product();
    let mut out = vec![0f32; plane * image.channels];
    let mut lab = label.map(|l| vec![0f32; plane * l.channels]);
    compute(axis, index, &mut out, lab.as_deref_mut()).map_err(|e| e.to_string())?;
    let sp = &image.spacing_mm;
    let l = lab.map(|l| slices::extract_from_plane(&l, &image.shape, 1, sp, v));
    Ok((
        slices::extract_from_plane(&out, &image.shape, image.channels, sp, v),
        l,
    ))
}

/// The planes through `c.cursor` of the transformed image and label, each computed on its own
/// with [`CpuBackend::apply_slice`] (3D); a 2D image is computed whole. The views run at once on
/// their own engines, unless the main engine serves them better: it holds the volume field
/// already (planes are then copies of it), or the interpolation is cubic (one set of
/// coefficients, not one per view).
pub fn compute_slices(
    engines: &SliceEngines,
    c: &Compute,
    image: &Volume,
    label: Option<&Volume>,
) -> Result<SliceSet, String> {
    use rayon::prelude::*;
    type Planes = (Vec<Arc<DisplaySlice>>, Vec<Option<Arc<DisplaySlice>>>);
    let t = Instant::now();
    let job = Job {
        plan: &c.plan,
        image,
        label,
    };
    let sp = &image.spacing_mm;
    let (imgs, labs): Planes = if image.ndim() != 3 {
        let (img, lab, _) = engine::apply_new(engines.main.as_ref(), &c.plan, image, label)
            .map_err(|e| e.to_string())?;
        c.views
            .iter()
            .map(|v| {
                let l = lab
                    .as_ref()
                    .map(|l| slices::extract(&l.data, &l.shape, 1, sp, v, 0));
                (
                    slices::extract(&img.data, &img.shape, img.channels, sp, v, 0),
                    l,
                )
            })
            .unzip()
    } else {
        let one = |cpu: &CpuBackend, v: &ViewGeom| {
            view_plane(c, image, label, v, |axis, index, out, lab| {
                cpu.apply_slice(job, axis, index, out, lab)
            })
        };
        let needs_field = field_key(&c.plan, &image.shape);
        // The three orthogonal views through the cursor: their field planes are made together
        // on the main engine (the noise their slabs share is generated once), then every view
        // runs there from its cache.
        let orthogonal = {
            let mut normals: Vec<usize> = c.views.iter().filter_map(|v| v.normal).collect();
            normals.sort_unstable();
            normals == [0, 1, 2]
        };
        let shared = needs_field.is_some() && needs_field != engines.main_field && orthogonal;
        if shared {
            let out_shape = c
                .plan
                .out_shape
                .clone()
                .unwrap_or_else(|| image.shape.clone());
            engines
                .main
                .prefill_field_planes(&c.plan, &out_shape, &c.cursor);
        }
        let on_main = shared
            || c.plan.order == crate::augment::Order::Cubic
            || needs_field.is_none()
            || needs_field == engines.main_field
            || engines.per_view.len() < c.views.len();
        let planes: Vec<Result<_, String>> =
            if shared && c.plan.order != crate::augment::Order::Cubic {
                // Field planes cached on the main engine: the views read them at once.
                c.views.par_iter().map(|v| one(&engines.main, v)).collect()
            } else if on_main {
                c.views.iter().map(|v| one(&engines.main, v)).collect()
            } else {
                c.views
                    .par_iter()
                    .zip(&engines.per_view)
                    .map(|(v, cpu)| one(cpu, v))
                    .collect()
            };
        planes
            .into_iter()
            .collect::<Result<Vec<_>, _>>()?
            .into_iter()
            .unzip()
    };
    Ok(SliceSet {
        generation: c.generation,
        cursor: c.cursor.clone(),
        image: imgs,
        label: labs,
        elapsed_ms: t.elapsed().as_secs_f64() * 1e3,
    })
}

/// The whole transformed volume on the CPU engine, one axis-0 plane at a time with
/// [`CpuBackend::apply_slice`], asking `superseded` before each plane: `Ok(None)` when it said
/// yes, so a stale fill stops within one plane. The planes read the engine's cached volume field
/// (computed first), so the values are those of [`Backend::apply`]. 2D images, identity plans
/// and other output shapes are computed whole.
pub fn fill_volume(
    cpu: &CpuBackend,
    plan: &Plan,
    image: &Volume,
    label: Option<&Volume>,
    superseded: &dyn Fn() -> bool,
) -> Result<Option<(Volume, Option<Volume>, Timings)>, EngineError> {
    if image.ndim() != 3 || plan.is_identity() || plan.out_shape.is_some() {
        return engine::apply_new(cpu, plan, image, label).map(Some);
    }
    let t0 = Instant::now();
    let mut timings = Timings::default();
    if let Some((_, ms)) = cpu.field(plan, &image.shape) {
        timings.field_ms = ms;
    }
    let shape = &image.shape;
    let n: usize = shape.iter().product();
    let plane = shape[1] * shape[2];
    let mut img = vec![0f32; image.channels * n];
    let mut lab = label.map(|l| vec![0f32; l.channels * n]);
    let mut img_plane = vec![0f32; image.channels * plane];
    let mut lab_plane = label.map(|l| vec![0f32; l.channels * plane]);
    let job = Job { plan, image, label };
    // Channel c of plane z goes to [c][z] of the volume.
    let scatter = |src: &[f32], dst: &mut [f32], z: usize| {
        for (c, p) in src.chunks_exact(plane).enumerate() {
            dst[c * n + z * plane..c * n + (z + 1) * plane].copy_from_slice(p);
        }
    };
    for z in 0..shape[0] {
        if superseded() {
            return Ok(None);
        }
        let t = cpu.apply_slice(job, 0, z, &mut img_plane, lab_plane.as_deref_mut())?;
        timings.prefilter_ms += t.prefilter_ms;
        timings.resample_ms += t.resample_ms;
        scatter(&img_plane, &mut img, z);
        if let (Some(src), Some(dst)) = (&lab_plane, lab.as_deref_mut()) {
            scatter(src, dst, z);
        }
    }
    timings.total_ms = t0.elapsed().as_secs_f64() * 1e3;
    let mk = |src: &Volume, data: Vec<f32>| {
        let mut v = src.clone_meta();
        v.shape = shape.clone();
        v.data = data;
        v
    };
    let out_label = match (label, lab) {
        (Some(l), Some(d)) => Some(mk(l, d)),
        _ => None,
    };
    Ok(Some((mk(image, img), out_label, timings)))
}
