//! The worker thread: loads scans and runs transforms off the UI thread. The UI posts requests
//! into slots (the newest request of each kind replaces an older one that has not started), the
//! worker computes on the chosen engine and wakes the UI with `ctx.request_repaint()`.
//!
//! While a slider moves, the CPU path first computes only the planes on screen, then, once no
//! newer request has arrived for a moment, the whole volume, one plane at a time: a newer request
//! abandons that fill between two planes, so the next slice-only answer is not held up.
//!
//! Filters (the filter panel): before the transform, the scan is filtered once per filter
//! setting and kept ([`FilterCache`]), so moving a transform slider resamples the filtered scan
//! without filtering again; after the transform, the whole transformed volume is filtered when
//! it is complete (the transformed volume is kept, so moving a filter slider does not transform
//! again). FEBDS masks are computed on the planes on screen ([`MaskRequest`]), never on the
//! volume, and never change the image. Label maps are never filtered.

use std::path::PathBuf;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::augment::Plan;
use crate::core::volume::Volume;
use crate::engine::cpu::CpuBackend;
use crate::engine::{
    self, Backend, BackendSpec, EngineError, Job, Outputs, Plane, Precision, Prepare, Timings,
    select,
};
use crate::export::preview::{self, ControlGrid, Model};
use crate::filter::{Boundary, FebdsMethod, Filter};
use crate::gpu::device::{DevicesReport, MemStats};
use crate::io::{self, LoadOptions};

use super::slices::{self, DisplaySlice, ViewGeom};
use super::state::FilterStage;

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
    /// The smallest and largest finite value of the image (gamma's scale, FEBDS's 12-bit map).
    pub range: (f32, f32),
    /// The window presets that suit the scan: the CT windows in Hounsfield units for a CT,
    /// percentile windows for every other scan. (name, width, level).
    pub windows: Vec<(String, f32, f32)>,
    /// The image's histogram over `range`.
    pub histogram: super::legend::Histogram,
    /// The labels of the label map, with their names where the data set gives them.
    pub labels: Vec<super::legend::LabelEntry>,
}

/// The CT window presets (name, width, level) in HU.
pub const CT_WINDOWS: [(&str, f32, f32); 4] = [
    ("CT-Brain", 100.0, 50.0),
    ("Abdomen", 350.0, 40.0),
    ("Lung", 1400.0, -500.0),
    ("Bone", 1000.0, 400.0),
];

/// Whether a scan's values are Hounsfield units: air (about −1000 HU) is in it, which no MR,
/// PET or photograph holds.
pub fn looks_like_ct(range: (f32, f32)) -> bool {
    range.0 <= -900.0 && range.0 >= -3100.0 && range.1 > 0.0
}

/// The window presets of a scan with value range `range` (see [`Loaded::windows`]).
pub fn window_presets(data: &[f32], range: (f32, f32)) -> Vec<(String, f32, f32)> {
    if looks_like_ct(range) {
        return CT_WINDOWS
            .iter()
            .map(|(n, w, l)| (n.to_string(), *w, *l))
            .collect();
    }
    let q = slices::percentiles(data, &[0.01, 0.02, 0.05, 0.95, 0.98, 0.99]);
    let w = |name: &str, lo: f32, hi: f32| (name.to_string(), (hi - lo).max(1e-6), 0.5 * (lo + hi));
    vec![
        w("1–99 %", q[0], q[5]),
        w("2–98 %", q[1], q[4]),
        w("5–95 %", q[2], q[3]),
        w("min–max", range.0, range.1),
    ]
}

/// The intensity filter of a request and where it acts.
#[derive(Clone, Debug, PartialEq)]
pub struct FilterStep {
    pub filter: Filter,
    pub boundary: Boundary,
    pub stage: FilterStage,
}

/// What a filter run did, for the timings panel.
#[derive(Clone, Debug, PartialEq)]
pub struct FilterReport {
    pub name: &'static str,
    pub stage: FilterStage,
    /// `cpu` or `cuda:N`.
    pub backend: String,
    pub elapsed_ms: f64,
    /// Why the engine is not the one asked for (CUDA unavailable, out of memory).
    pub note: Option<String>,
    /// Served from the cache: the scan was filtered so for an earlier request.
    pub cached: bool,
    /// 0.5 and 99.5 percentiles of the filtered values (a window for LoG and DoG, whose values
    /// have nothing in common with the scan's).
    pub window: (f32, f32),
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
    /// The intensity filter, before or after the transform.
    pub filter: Option<FilterStep>,
    /// Whose model of the transform: augscope's own (engine, slice path) or a training
    /// library's (CPU, whole volume).
    pub model: Model,
}

/// Planes of the augmented image (and label) through one cursor.
pub struct SliceSet {
    pub generation: u64,
    pub cursor: Vec<usize>,
    pub image: Vec<Arc<DisplaySlice>>,
    pub label: Vec<Option<Arc<DisplaySlice>>>,
    pub elapsed_ms: f64,
    /// The filter these planes went through (before the transform, or a point-wise one after).
    pub filter: Option<FilterReport>,
    /// The planes lack the filter that acts after the transform: it runs on the whole volume.
    pub unfiltered: bool,
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
    /// The intensity filter that ran (before or after the transform).
    pub filter: Option<FilterReport>,
    /// The model that ran and what it did differently from augscope's (empty for augscope's).
    pub model: Model,
    pub model_steps: Vec<String>,
    /// TorchIO's control grid, for drawing over the views.
    pub control_grid: Option<Arc<ControlGrid>>,
}

/// FEBDS masks of planes on screen.
#[derive(Clone)]
pub struct MaskRequest {
    pub method: FebdsMethod,
    pub planes: Vec<Arc<DisplaySlice>>,
    /// `x ↦ (x − offset) · factor` takes the scan's values to FEBDS's 12-bit range.
    pub offset: f32,
    pub factor: f32,
    pub backend: BackendSpec,
    pub precision: Precision,
}

/// The answer to a [`MaskRequest`]: per plane, its id and its 0/1 mask (`None`: no mask, the
/// note says why).
pub struct MaskSet {
    pub method: FebdsMethod,
    pub masks: Vec<(u64, Option<Arc<DisplaySlice>>)>,
    pub backend: String,
    pub note: Option<String>,
    pub elapsed_ms: f64,
}

impl MaskSet {
    /// The mask of the plane with content id `id`.
    pub fn mask_for(&self, id: u64) -> Option<Arc<DisplaySlice>> {
        self.masks
            .iter()
            .find(|(i, _)| *i == id)
            .and_then(|(_, m)| m.clone())
    }
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
    /// How far the whole-volume fill of a generation is: planes done of all.
    Progress {
        generation: u64,
        done: usize,
        total: usize,
    },
    Full(FullResult),
    Compared(Comparison),
    Masks(MaskSet),
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
    mask: Option<MaskRequest>,
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
        s.mask = None;
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

    /// Posts FEBDS masks of planes; an older request that has not started is dropped.
    pub fn masks(&self, req: MaskRequest) {
        self.shared.lock().mask = Some(req);
        self.shared.wake.notify_one();
    }

    /// Whether a request is waiting (not yet started).
    pub fn pending(&self) -> bool {
        let s = self.shared.lock();
        s.load.is_some() || s.compute.is_some() || s.compare.is_some() || s.mask.is_some()
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

/// The CUDA engine of the explorer's engine selection, opened once per (spec, precision), or
/// why there is none (the CPU engine runs then).
#[derive(Default)]
pub struct GpuSlot(Option<(BackendSpec, Precision, Opened)>);

/// An opened engine, or the note saying why it did not open.
type Opened = Result<Arc<dyn Backend>, String>;

impl GpuSlot {
    /// The CUDA engine of a CUDA spec (`Ok(None)` for `cpu` and `auto`), or the note saying why
    /// it cannot run, ending with `then` (what runs instead). When it opens, the field kernels
    /// of every sigma are built (a few seconds, once per device), so that moving sigma later
    /// never waits for NVRTC; a failure there shows again, with its message, when the kernel is
    /// first needed.
    pub fn open(
        &mut self,
        spec: &BackendSpec,
        precision: Precision,
        then: &str,
    ) -> Result<Option<Arc<dyn Backend>>, String> {
        let fresh = !matches!(&self.0, Some((s, p, _)) if s == spec && *p == precision);
        if fresh {
            let Some(made) = select::open_cuda(spec, precision) else {
                return Ok(None);
            };
            if let Ok(b) = &made {
                let _ = b.prepare(Prepare::Kernels);
            }
            let made = made.map_err(|e| cuda_fallback_note(&e, then));
            self.0 = Some((spec.clone(), precision, made));
        }
        match &self.0 {
            Some((_, _, Ok(b))) => Ok(Some(b.clone())),
            Some((_, _, Err(note))) => Err(note.clone()),
            None => Ok(None),
        }
    }
}

struct WorkerLoop {
    shared: Arc<Shared>,
    tx: Sender<Reply>,
    repaint: Box<dyn Fn() + Send>,
    image: Option<Arc<Volume>>,
    label: Option<Arc<Volume>>,
    /// The CPU engine: it keeps the smoothed elastic field, so moving alpha, an angle or the
    /// mode never recomputes it.
    cpu: Arc<dyn Backend>,
    /// The engines of the slice-only path (the main one is `cpu`).
    slicing: SliceEngines,
    /// The GPU engine for (spec, precision), made on first use.
    gpu: GpuSlot,
    /// The key of the loaded scan's content: the GPU keeps the image of a key on the device.
    image_key: u64,
    /// The last key handed out (scans and filtered scans each get their own).
    keys: u64,
    /// The filtered scan of the "before" stage.
    prefiltered: FilterCache,
    /// The last transformed (unfiltered) volume, while a filter acts after the transform.
    transformed: Option<Transformed>,
}

/// What a filtered volume depends on: the source's content key, the filter, its boundary and
/// the engine asked for.
#[derive(Clone, Debug, PartialEq)]
pub struct FilterKey {
    pub source: u64,
    pub filter: Filter,
    pub boundary: Boundary,
    pub backend: BackendSpec,
    pub precision: Precision,
}

/// One filtered volume, kept while requests ask for the same filter of the same source: moving
/// a transform slider never filters again.
#[derive(Default)]
pub struct FilterCache {
    entry: Option<(FilterKey, Arc<Volume>, FilterReport, u64)>,
}

impl FilterCache {
    /// The filtered volume of `key` with its report and content key: from the cache, or made by
    /// `run` (then given the content key `new_key()`). An error is not kept.
    pub fn get_or_run(
        &mut self,
        key: FilterKey,
        new_key: impl FnOnce() -> u64,
        run: impl FnOnce() -> Result<(Volume, FilterReport), String>,
    ) -> Result<(Arc<Volume>, FilterReport, u64), String> {
        if let Some((k, v, r, content)) = &self.entry
            && *k == key
        {
            let report = FilterReport {
                cached: true,
                ..r.clone()
            };
            return Ok((v.clone(), report, *content));
        }
        // Drop the old volume before making the new one: one filtered scan in memory at a time.
        self.entry = None;
        let (v, report) = run()?;
        let v = Arc::new(v);
        let content = new_key();
        self.entry = Some((key, v.clone(), report.clone(), content));
        Ok((v, report, content))
    }

    pub fn clear(&mut self) {
        self.entry = None;
    }
}

/// A transformed volume as the engine returned it, before the "after" filter.
struct Transformed {
    key: (u64, Plan, BackendSpec, Precision, Model),
    image: Arc<Volume>,
    label: Option<Arc<Volume>>,
    timings: Timings,
    backend: String,
    note: Option<String>,
    displacement_vox: Option<(f64, f64)>,
    model_steps: Vec<String>,
    control_grid: Option<Arc<ControlGrid>>,
}

/// Runs `step`'s filter over the whole of `src` (channels filtered one by one) on the engine
/// `spec` asks for, falling back to the CPU with a note as [`crate::filter::run`] does.
pub fn filter_volume(
    step: &FilterStep,
    src: &Volume,
    spec: &BackendSpec,
    precision: Precision,
) -> Result<(Volume, FilterReport), String> {
    let t = Instant::now();
    let r = crate::filter::run(
        &step.filter,
        step.boundary,
        &src.data,
        &src.shape,
        spec,
        precision,
    )
    .map_err(|e| format!("filter {}: {e}", step.filter.name()))?;
    let elapsed_ms = t.elapsed().as_secs_f64() * 1e3;
    let p = slices::percentiles(&r.out, &[0.005, 0.995]);
    let mut v = src.clone_meta();
    v.shape = src.shape.clone();
    v.data = r.out;
    Ok((
        v,
        FilterReport {
            name: step.filter.name(),
            stage: step.stage,
            backend: r.backend,
            elapsed_ms,
            note: r.note,
            cached: false,
            window: (p[0], p[1].max(p[0])),
        },
    ))
}

/// `plane` through a point-wise filter (gamma, contrast): the plane of the filtered volume.
fn filter_plane(step: &FilterStep, plane: &Arc<DisplaySlice>) -> Result<Arc<DisplaySlice>, String> {
    let out = crate::filter::apply_cpu(
        &step.filter,
        step.boundary,
        &plane.data,
        &[plane.height, plane.width],
    )
    .map_err(|e| format!("filter {}: {e}", step.filter.name()))?;
    Ok(slices::with_data(plane, out))
}

/// The FEBDS masks of `req`'s planes (see [`MaskRequest`]).
pub fn febds_masks(req: &MaskRequest) -> MaskSet {
    let t = Instant::now();
    let mut note = None;
    let mut backend = "cpu".to_string();
    let masks = req
        .planes
        .iter()
        .map(|p| {
            if p.channels != 1 {
                note = Some("FEBDS needs a grayscale image; this one has colour channels".into());
                return (p.id, None);
            }
            if p.width == 0 || p.height == 0 {
                return (p.id, None);
            }
            let mapped: Vec<f32> = p
                .data
                .iter()
                .map(|&v| (v - req.offset) * req.factor)
                .collect();
            match crate::filter::run(
                &Filter::Febds(req.method),
                Boundary::default(),
                &mapped,
                &[p.height, p.width],
                &req.backend,
                req.precision,
            ) {
                Ok(r) => {
                    backend = r.backend;
                    if r.note.is_some() {
                        note = r.note;
                    }
                    (p.id, Some(slices::with_data(p, r.out)))
                }
                Err(e) => {
                    note = Some(format!("FEBDS: {e}"));
                    (p.id, None)
                }
            }
        })
        .collect();
    MaskSet {
        method: req.method,
        masks,
        backend,
        note,
        elapsed_ms: t.elapsed().as_secs_f64() * 1e3,
    }
}

/// How long the worker waits after a slice-only answer before filling in the whole volume: long
/// enough to see that a slider is still moving.
const FILL_DELAY: Duration = Duration::from_millis(120);

impl WorkerLoop {
    fn new(shared: Arc<Shared>, tx: Sender<Reply>, repaint: Box<dyn Fn() + Send>) -> Self {
        let cpu: Arc<dyn Backend> = Arc::new(CpuBackend::new());
        WorkerLoop {
            shared,
            tx,
            repaint,
            image: None,
            label: None,
            cpu: cpu.clone(),
            slicing: SliceEngines::new(cpu),
            gpu: GpuSlot::default(),
            image_key: 0,
            keys: 0,
            prefiltered: FilterCache::default(),
            transformed: None,
        }
    }

    fn new_key(keys: &mut u64) -> u64 {
        *keys += 1;
        *keys
    }

    fn send(&self, r: Reply) {
        // The UI is gone when this fails: nothing left to tell.
        let _ = self.tx.send(r);
        (self.repaint)();
    }

    fn run(mut self) {
        // The device report can take a moment (driver loading): off the UI thread, once.
        self.send(Reply::Devices(crate::gpu::device::discover()));
        loop {
            let (load, compute, mask, compare) = {
                let mut s = self.shared.lock();
                while !s.shutdown
                    && s.load.is_none()
                    && s.compute.is_none()
                    && s.mask.is_none()
                    && s.compare.is_none()
                {
                    s = self.shared.wake.wait(s).unwrap_or_else(|p| p.into_inner());
                }
                if s.shutdown {
                    return;
                }
                match s.load.take() {
                    Some(l) => (Some(l), None, None, None),
                    None => match s.compute.take() {
                        Some(c) => (None, Some(c), None, None),
                        None => match s.mask.take() {
                            Some(m) => (None, None, Some(m), None),
                            None => (None, None, None, s.compare.take()),
                        },
                    },
                }
            };
            if let Some((path, label)) = load {
                let r = load_scan(path, label);
                if let Ok(l) = &r {
                    self.image = Some(l.image.clone());
                    self.label = l.label.clone();
                    self.image_key = Self::new_key(&mut self.keys);
                    self.prefiltered.clear();
                    self.transformed = None;
                }
                self.send(Reply::Loaded(r));
            } else if let Some(c) = compute {
                self.compute(c);
            } else if let Some(m) = mask {
                let set = febds_masks(&m);
                self.send(Reply::Masks(set));
            } else if let Some(c) = compare {
                self.compare(c);
            }
        }
    }

    /// Whether a newer request (or a shutdown) waits: a running fill is then abandoned.
    fn superseded(&self) -> bool {
        let s = self.shared.lock();
        s.shutdown || s.load.is_some() || s.compute.is_some()
    }

    fn compute(&mut self, c: Compute) {
        let Some(scan) = self.image.clone() else {
            return;
        };
        let label = self.label.clone();
        if let Err(e) = c.plan.validate(scan.ndim()) {
            self.send(Reply::Failed {
                generation: c.generation,
                message: e.to_string(),
            });
            return;
        }
        let (gpu, note) = match self
            .gpu
            .open(&c.backend, c.precision, "using the CPU engine")
        {
            Ok(g) => (g, None),
            Err(note) => (None, Some(note)),
        };
        let on_gpu = gpu.is_some();
        // The volume the transform reads: the scan, or the scan filtered once per filter setting.
        let before = c.filter.as_ref().filter(|f| f.stage == FilterStage::Before);
        let after = c.filter.as_ref().filter(|f| f.stage == FilterStage::After);
        let (image, image_key, before_report) = match before {
            Some(step) => {
                let key = FilterKey {
                    source: self.image_key,
                    filter: step.filter.clone(),
                    boundary: step.boundary,
                    backend: c.backend.clone(),
                    precision: c.precision,
                };
                let keys = &mut self.keys;
                let r = self.prefiltered.get_or_run(
                    key,
                    || Self::new_key(keys),
                    || filter_volume(step, &scan, &c.backend, c.precision),
                );
                match r {
                    Ok((v, report, k)) => (v, k, Some(report)),
                    Err(message) => {
                        self.send(Reply::Failed {
                            generation: c.generation,
                            message,
                        });
                        return;
                    }
                }
            }
            None => {
                // Nothing filters the scan now: free the filtered copy.
                self.prefiltered.clear();
                (scan, self.image_key, None)
            }
        };
        if after.is_none() {
            self.transformed = None;
        }
        let transform_key = (
            image_key,
            c.plan.clone(),
            c.backend.clone(),
            c.precision,
            c.model,
        );
        let reuse = self
            .transformed
            .as_ref()
            .is_some_and(|t| t.key == transform_key);
        // A library's model runs over the whole volume (its resample chains and fields have no
        // plane path).
        if c.slices_first && !reuse && c.model.is_own() {
            // The planes on screen first: on the GPU each is one launch over the plane with the
            // image kept on the device; on the CPU each is computed on its own.
            let scan = (image.as_ref(), label.as_deref(), image_key);
            let slices = match &gpu {
                // A GPU failure (out of memory, say) leaves the planes to the CPU; the whole
                // volume below reports what happened.
                Some(b) => compute_slices(&SliceEngines::one(b.clone()), &c, scan)
                    .or_else(|_| compute_slices(&self.slicing, &c, scan)),
                None => compute_slices(&self.slicing, &c, scan),
            };
            // A point-wise filter after the transform is exact on a plane; the others need the
            // whole volume and wait for it.
            let slices = slices.and_then(|mut s| {
                s.filter = before_report.clone();
                if let Some(step) = after {
                    if is_pointwise(&step.filter) {
                        s.image = s
                            .image
                            .iter()
                            .map(|p| filter_plane(step, p))
                            .collect::<Result<_, _>>()?;
                    } else {
                        s.unfiltered = true;
                    }
                }
                Ok(s)
            });
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
        let transformed = match self.transformed.take().filter(|t| t.key == transform_key) {
            Some(t) => t,
            None => match self.transform(&c, &image, image_key, label.as_deref(), gpu.as_ref()) {
                // Superseded: the newer request is served next; this one tells nothing.
                Ok(None) => return,
                Ok(Some(t)) => Transformed {
                    key: transform_key,
                    note: t.note.or(note),
                    ..t
                },
                Err(message) => {
                    self.send(Reply::Failed {
                        generation: c.generation,
                        message,
                    });
                    return;
                }
            },
        };
        let (image_out, filter) = match after {
            Some(step) => match filter_volume(step, &transformed.image, &c.backend, c.precision) {
                Ok((v, report)) => (Arc::new(v), Some(report)),
                Err(message) => {
                    self.send(Reply::Failed {
                        generation: c.generation,
                        message,
                    });
                    return;
                }
            },
            None => (transformed.image.clone(), before_report),
        };
        self.send(Reply::Full(FullResult {
            generation: c.generation,
            image: image_out,
            label: transformed.label.clone(),
            timings: transformed.timings.clone(),
            backend: transformed.backend.clone(),
            note: transformed.note.clone(),
            displacement_vox: transformed.displacement_vox,
            filter,
            model: c.model,
            model_steps: transformed.model_steps.clone(),
            control_grid: transformed.control_grid.clone(),
        }));
        if after.is_some() {
            // Kept for the next filter setting: moving a filter slider does not transform again.
            self.transformed = Some(transformed);
        }
        if on_gpu {
            self.send(Reply::Memory(engine::cuda::mem_stats()));
        }
    }

    /// The whole transformed volume of `image` (content key `image_key`) on the GPU or the CPU;
    /// `Ok(None)` when a newer request superseded a CPU fill.
    fn transform(
        &mut self,
        c: &Compute,
        image: &Arc<Volume>,
        image_key: u64,
        label: Option<&Volume>,
        gpu: Option<&Arc<dyn Backend>>,
    ) -> Result<Option<Transformed>, String> {
        if !c.model.is_own() {
            self.send(Reply::Filling(c.generation));
            let t = Instant::now();
            let p = preview::preview(c.model, image, label, &c.plan).map_err(|e| e.to_string())?;
            let ms = t.elapsed().as_secs_f64() * 1e3;
            return Ok(Some(Transformed {
                key: (
                    image_key,
                    c.plan.clone(),
                    c.backend.clone(),
                    c.precision,
                    c.model,
                ),
                image: Arc::new(p.image),
                label: p.label.map(Arc::new),
                timings: Timings {
                    total_ms: ms,
                    ..Timings::default()
                },
                backend: format!("cpu ({})", c.model.label()),
                note: None,
                displacement_vox: p.displacement,
                model_steps: p.steps,
                control_grid: p.control_grid.map(Arc::new),
            }));
        }
        let result = match gpu {
            Some(b) => engine::select::apply_new_with_fallback(b.as_ref(), &c.plan, image, label)
                .map(|(img, lab, t, fallback)| {
                    let name = if fallback.is_some() {
                        "cpu".to_string()
                    } else {
                        b.name()
                    };
                    Some((img, lab, t, name, fallback))
                }),
            None => {
                self.send(Reply::Filling(c.generation));
                let cpu = self.cpu.clone();
                let last = std::cell::Cell::new(None::<Instant>);
                let r = fill_volume(cpu.as_ref(), &c.plan, image, label, &|done, total| {
                    // After the first plane, then a few updates a second.
                    if done > 0 && last.get().is_none_or(|t| t.elapsed().as_millis() >= 100) {
                        last.set(Some(Instant::now()));
                        self.send(Reply::Progress {
                            generation: c.generation,
                            done,
                            total,
                        });
                    }
                    self.superseded()
                });
                r.map(|r| r.map(|(img, lab, t)| (img, lab, t, cpu.name(), None)))
            }
        };
        let Some((img, lab, timings, name, fallback)) = result.map_err(|e| e.to_string())? else {
            return Ok(None);
        };
        let displacement_vox = match gpu {
            Some(b) if fallback.is_none() => {
                b.displacement_stats(&c.plan, &image.shape).ok().flatten()
            }
            _ => self.displacement(&c.plan, &image.shape),
        };
        Ok(Some(Transformed {
            key: (
                image_key,
                c.plan.clone(),
                c.backend.clone(),
                c.precision,
                c.model,
            ),
            image: Arc::new(img),
            label: lab.map(Arc::new),
            timings,
            backend: name,
            note: fallback,
            displacement_vox,
            model_steps: preview::own_step(c.model).into_iter().collect(),
            control_grid: None,
        }))
    }

    /// Max and RMS displacement of the plan's elastic field, from the CPU engine's field.
    fn displacement(&self, plan: &Plan, shape: &[usize]) -> Option<(f64, f64)> {
        self.cpu.displacement_stats(plan, shape).ok().flatten()
    }

    fn compare(&mut self, c: Compute) {
        let Some(image) = self.image.clone() else {
            return;
        };
        let t = Instant::now();
        let cpu = engine::apply_new(self.cpu.as_ref(), &c.plan, &image, None);
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
        let gpu = match self.gpu.open(&spec, c.precision, "using the CPU engine") {
            Ok(Some(b)) => {
                // Once to compile and upload, once to time.
                let warm = engine::apply_new(b.as_ref(), &c.plan, &image, None);
                let t = Instant::now();
                match warm.and_then(|_| engine::apply_new(b.as_ref(), &c.plan, &image, None)) {
                    Ok((v, _, _)) => Ok((Arc::new(v), t.elapsed().as_secs_f64() * 1e3, b.name())),
                    Err(e) => Err(e.to_string()),
                }
            }
            Ok(None) => Err("no CUDA device".into()),
            Err(note) => Err(note),
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

/// Whether `f` changes each value on its own (a plane of the filtered volume is the filtered
/// plane).
fn is_pointwise(f: &Filter) -> bool {
    matches!(f, Filter::Gamma { .. } | Filter::Contrast { .. })
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
    let range = image
        .data
        .iter()
        .filter(|v| v.is_finite())
        .fold((f32::INFINITY, f32::NEG_INFINITY), |(lo, hi), &v| {
            (lo.min(v), hi.max(v))
        });
    let range = if range.0 <= range.1 {
        range
    } else {
        (0.0, 0.0)
    };
    let windows = window_presets(&image.data, range);
    let histogram = super::legend::Histogram::of(&image.data, range);
    let labels = match (&label, &label_path) {
        (Some(l), Some(lp)) => {
            super::legend::label_entries(&l.data, &super::legend::label_names(lp))
        }
        _ => vec![],
    };
    Ok(Loaded {
        image: Arc::new(image),
        label,
        path,
        label_path,
        auto_window,
        note,
        load_ms: t.elapsed().as_secs_f64() * 1e3,
        range,
        windows,
        histogram,
        labels,
    })
}

/// The engines of the slice-only path. On the CPU: the worker's main engine, whose cached volume
/// field and cubic coefficients serve every view, and one engine per view, so that the views'
/// field planes (after a new sigma or seed) are computed at the same time instead of one after
/// the other (an engine holds its plane cache while it computes a plane). On a GPU: the one
/// engine, plane after plane.
pub struct SliceEngines {
    pub main: Arc<dyn Backend>,
    pub per_view: Vec<Arc<dyn Backend>>,
}

impl SliceEngines {
    /// The CPU configuration: `main` and three engines of its own, one per view.
    pub fn new(main: Arc<dyn Backend>) -> Self {
        SliceEngines {
            main,
            per_view: (0..3)
                .map(|_| Arc::new(CpuBackend::new()) as Arc<dyn Backend>)
                .collect(),
        }
    }

    /// One engine for every plane, in turn (a GPU: its launches queue on one stream anyway).
    pub fn one(main: Arc<dyn Backend>) -> Self {
        SliceEngines {
            main,
            per_view: Vec::new(),
        }
    }
}

/// The display slices of one 3D view through `c.cursor`: `compute(plane, outputs)` fills the
/// output plane (the engine's plane path), then it is cut for display.
fn view_plane(
    c: &Compute,
    image: &Volume,
    label: Option<&Volume>,
    v: &ViewGeom,
    compute: impl FnOnce(Plane, Outputs<'_>) -> Result<Timings, EngineError>,
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
    let outputs = Outputs {
        image: &mut out,
        label: lab.as_deref_mut(),
    };
    compute(Plane { axis, index }, outputs).map_err(|e| e.to_string())?;
    let sp = &image.spacing_mm;
    let l = lab.map(|l| slices::extract_from_plane(&l, &image.shape, 1, sp, v));
    Ok((
        slices::extract_from_plane(&out, &image.shape, image.channels, sp, v),
        l,
    ))
}

/// The planes through `c.cursor` of the transformed image and label, each computed on its own
/// with [`Backend::apply_plane`] (3D; `scan` is the image, its label map and their content key,
/// which lets a GPU keep them on the device); a 2D image is computed whole. With engines per view
/// the views run at once, unless the main engine serves them better: it holds the volume field
/// already (planes are then copies of it), or the interpolation is cubic (one set of
/// coefficients, not one per view).
pub fn compute_slices(
    engines: &SliceEngines,
    c: &Compute,
    scan: (&Volume, Option<&Volume>, u64),
) -> Result<SliceSet, String> {
    use rayon::prelude::*;
    type Planes = (Vec<Arc<DisplaySlice>>, Vec<Option<Arc<DisplaySlice>>>);
    let (image, label, key) = scan;
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
        let one = |engine: &dyn Backend, v: &ViewGeom| {
            view_plane(c, image, label, v, |plane, out| {
                engine.apply_plane(job, plane, Some(key), out)
            })
        };
        let out_shape = c
            .plan
            .out_shape
            .clone()
            .unwrap_or_else(|| image.shape.clone());
        let needs_field = c.plan.field_spec(&out_shape).is_some();
        let held = engines.main.holds_field(&c.plan, &out_shape);
        let per_view = engines.per_view.len() >= c.views.len();
        // The three orthogonal views through the cursor: their field planes are made together
        // on the main engine (the noise their slabs share is generated once), then every view
        // runs there from its cache.
        let orthogonal = {
            let mut normals: Vec<usize> = c.views.iter().filter_map(|v| v.normal).collect();
            normals.sort_unstable();
            normals == [0, 1, 2]
        };
        let shared = per_view && needs_field && !held && orthogonal;
        if shared {
            engines
                .main
                .prepare(Prepare::Planes {
                    plan: &c.plan,
                    out_shape: &out_shape,
                    cursor: &c.cursor,
                })
                .map_err(|e| e.to_string())?;
        }
        let cubic = c.plan.order == crate::augment::Order::Cubic;
        let on_main = !per_view || shared || cubic || !needs_field || held;
        let planes: Vec<Result<_, String>> = if shared && !cubic {
            // Field planes cached on the main engine: the views read them at once.
            c.views
                .par_iter()
                .map(|v| one(engines.main.as_ref(), v))
                .collect()
        } else if on_main {
            c.views
                .iter()
                .map(|v| one(engines.main.as_ref(), v))
                .collect()
        } else {
            c.views
                .par_iter()
                .zip(&engines.per_view)
                .map(|(v, e)| one(e.as_ref(), v))
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
        filter: None,
        unfiltered: false,
    })
}

/// The whole transformed volume on `engine`, one axis-0 plane at a time with
/// [`Backend::apply_plane`], calling `superseded(planes done, planes in all)` before each plane
/// (a progress report): `Ok(None)` when it said yes, so a stale fill stops within one plane. The
/// planes read the engine's volume field (prepared first), so the values are those of
/// [`Backend::apply`]. 2D images, identity plans and other output shapes are computed whole.
pub fn fill_volume(
    engine: &dyn Backend,
    plan: &Plan,
    image: &Volume,
    label: Option<&Volume>,
    superseded: &dyn Fn(usize, usize) -> bool,
) -> Result<Option<(Volume, Option<Volume>, Timings)>, EngineError> {
    if image.ndim() != 3 || plan.is_identity() || plan.out_shape.is_some() {
        return engine::apply_new(engine, plan, image, label).map(Some);
    }
    let t0 = Instant::now();
    let shape = &image.shape;
    let mut timings = Timings {
        field_ms: engine.prepare(Prepare::Field {
            plan,
            out_shape: shape,
        })?,
        ..Timings::default()
    };
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
        if superseded(z, shape[0]) {
            return Ok(None);
        }
        let out = Outputs {
            image: &mut img_plane,
            label: lab_plane.as_deref_mut(),
        };
        let t = engine.apply_plane(job, Plane { axis: 0, index: z }, None, out)?;
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

/// The one line shown when a CUDA request falls back to the CPU: the first line of why, then
/// what runs instead (`then`).
pub fn cuda_fallback_note(e: &EngineError, then: &str) -> String {
    let why = match e {
        EngineError::CudaUnavailable(m) => m.clone(),
        other => other.to_string(),
    };
    let first = why.lines().next().unwrap_or("").trim();
    format!("CUDA engine unavailable ({first}); {then}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::boundary::Mode;

    /// A worker loop driven by hand (no thread): requests go straight to `compute`.
    fn worker(image: Volume, label: Option<Volume>) -> (WorkerLoop, Receiver<Reply>) {
        let shared = Arc::new(Shared {
            slots: Mutex::new(Slots::default()),
            wake: Condvar::new(),
        });
        let (tx, rx) = channel();
        let mut w = WorkerLoop::new(shared, tx, Box::new(|| {}));
        w.image = Some(Arc::new(image));
        w.label = label.map(Arc::new);
        w.image_key = WorkerLoop::new_key(&mut w.keys);
        (w, rx)
    }

    fn volume(shape: [usize; 3], seed: usize) -> Volume {
        let n: usize = shape.iter().product();
        let data = (0..n)
            .map(|i| ((i * 37 + seed * 11) % 29) as f32 / 29.0 + (i % 7) as f32 * 0.1)
            .collect();
        Volume::new(data, shape.to_vec(), 1)
    }

    fn request(plan: Plan, filter: Option<FilterStep>) -> Compute {
        Compute {
            generation: 1,
            plan,
            backend: BackendSpec::Cpu,
            precision: Precision::F32,
            cursor: vec![2, 3, 4],
            views: vec![],
            slices_first: false,
            filter,
            model: Model::Augscope,
        }
    }

    fn gaussian(sigma: f64, stage: FilterStage) -> FilterStep {
        FilterStep {
            filter: Filter::Gaussian { sigma: vec![sigma] },
            boundary: Boundary {
                mode: Mode::Mirror,
                cval: 0.0,
            },
            stage,
        }
    }

    fn full(rx: &Receiver<Reply>) -> FullResult {
        let mut got = None;
        for r in rx.try_iter() {
            match r {
                Reply::Full(f) => got = Some(f),
                Reply::Failed { message, .. } => panic!("failed: {message}"),
                _ => {}
            }
        }
        got.expect("a whole volume")
    }

    fn rotation(a: f64) -> Plan {
        Plan {
            rotate_rad: vec![a, 0.0, -0.1],
            ..Plan::default()
        }
    }

    #[test]
    fn before_filters_the_scan_once_and_transforms_the_filtered_scan() {
        let img = volume([6, 7, 8], 0);
        let lab = Volume::new(
            (0..img.data.len()).map(|i| (i % 3) as f32).collect(),
            img.shape.clone(),
            1,
        );
        let (mut w, rx) = worker(img.clone(), Some(lab.clone()));
        let step = gaussian(1.2, FilterStage::Before);
        let filtered = crate::filter::apply_cpu(&step.filter, step.boundary, &img.data, &img.shape)
            .expect("filter");
        let mut fv = img.clone_meta();
        fv.data = filtered;
        for (i, angle) in [0.2, 0.3].into_iter().enumerate() {
            let plan = rotation(angle);
            w.compute(request(plan.clone(), Some(step.clone())));
            let f = full(&rx);
            let r = f.filter.as_ref().expect("report");
            // The second rotation reads the kept filtered scan.
            assert_eq!(r.cached, i == 1, "rotation {angle}");
            assert_eq!(
                (r.name, r.stage, r.backend.as_str()),
                ("gaussian", FilterStage::Before, "cpu")
            );
            let cpu = CpuBackend::new();
            let (want, want_lab, _) =
                engine::apply_new(&cpu, &plan, &fv, Some(&lab)).expect("transform");
            assert!(f.image.data == want.data, "filtered, then transformed");
            // The label map is transformed, never filtered.
            let lab_out = f.label.as_ref().expect("label");
            assert!(Some(&lab_out.data) == want_lab.as_ref().map(|l| &l.data));
            let (unfiltered, _, _) = engine::apply_new(&cpu, &plan, &img, None).expect("transform");
            assert!(
                f.image.data != unfiltered.data,
                "the filter changed the result"
            );
        }
        // Another sigma, then another scan: filtered again.
        w.compute(request(
            rotation(0.3),
            Some(gaussian(2.0, FilterStage::Before)),
        ));
        assert!(!full(&rx).filter.expect("report").cached);
        w.image = Some(Arc::new(volume([6, 7, 8], 1)));
        w.image_key = WorkerLoop::new_key(&mut w.keys);
        w.compute(request(
            rotation(0.3),
            Some(gaussian(2.0, FilterStage::Before)),
        ));
        assert!(!full(&rx).filter.expect("report").cached);
        // Filter off: the scan itself, and the filtered copy is let go.
        w.compute(request(rotation(0.3), None));
        assert!(full(&rx).filter.is_none());
        assert!(w.prefiltered.entry.is_none());
    }

    #[test]
    fn after_filters_the_transformed_volume_and_keeps_the_transform() {
        let img = volume([6, 7, 8], 2);
        let (mut w, rx) = worker(img.clone(), None);
        let plan = rotation(0.4);
        let cpu = CpuBackend::new();
        let (moved, _, _) = engine::apply_new(&cpu, &plan, &img, None).expect("transform");
        let step = gaussian(1.0, FilterStage::After);
        w.compute(request(plan.clone(), Some(step.clone())));
        let f = full(&rx);
        let want = crate::filter::apply_cpu(&step.filter, step.boundary, &moved.data, &moved.shape)
            .expect("filter");
        assert!(f.image.data == want, "transformed, then filtered");
        assert_eq!(f.filter.expect("report").stage, FilterStage::After);
        // A new sigma reuses the transformed volume: swap the scan behind the worker's back
        // (same content key) and the result still comes from the kept transform.
        w.image = Some(Arc::new(volume([6, 7, 8], 3)));
        let step2 = gaussian(2.0, FilterStage::After);
        w.compute(request(plan.clone(), Some(step2.clone())));
        let want2 =
            crate::filter::apply_cpu(&step2.filter, step2.boundary, &moved.data, &moved.shape)
                .expect("filter");
        assert!(full(&rx).image.data == want2);
        // Another plan transforms again (now the swapped scan).
        w.compute(request(rotation(0.1), Some(step2.clone())));
        let (moved3, _, _) =
            engine::apply_new(&cpu, &rotation(0.1), &volume([6, 7, 8], 3), None).expect("t");
        let want3 =
            crate::filter::apply_cpu(&step2.filter, step2.boundary, &moved3.data, &moved3.shape)
                .expect("filter");
        assert!(full(&rx).image.data == want3);
    }

    #[test]
    fn an_invalid_filter_is_one_failure_line() {
        let (mut w, rx) = worker(volume([4, 5, 6], 0), None);
        let step = FilterStep {
            filter: Filter::Median { size: vec![4] },
            boundary: Boundary::default(),
            stage: FilterStage::Before,
        };
        w.compute(request(Plan::default(), Some(step)));
        let msg = rx
            .try_iter()
            .find_map(|r| match r {
                Reply::Failed { message, .. } => Some(message),
                _ => None,
            })
            .expect("a failure");
        assert!(msg.contains("median") && !msg.contains('\n'), "{msg}");
    }

    #[test]
    fn febds_input_map_keeps_12_bit_data_and_stretches_the_rest() {
        use crate::app::febds_map;
        // 12-bit mammogram: unchanged.
        assert_eq!(febds_map((0.0, 3500.0)), (0.0, 1.0));
        // 8-bit image, floats in [0, 1], CT in HU: [min, max] onto [0, 4095].
        for (lo, hi) in [(0.0f32, 255.0f32), (0.0, 1.0), (-1024.0, 3071.0)] {
            let (o, f) = febds_map((lo, hi));
            let (a, b) = ((lo - o) * f, (hi - o) * f);
            assert!(
                a == 0.0 && (b - 4095.0).abs() < 1e-3,
                "{lo}..{hi}: {a}..{b}"
            );
        }
        // A constant scan: no division by zero.
        let (_, f) = febds_map((7.0, 7.0));
        assert!(f.is_finite());
    }

    #[test]
    fn filter_cache_runs_once_per_key() {
        let mut cache = FilterCache::default();
        let v = volume([2, 3, 4], 0);
        let key = |sigma: f64| FilterKey {
            source: 1,
            filter: Filter::Gaussian { sigma: vec![sigma] },
            boundary: Boundary::default(),
            backend: BackendSpec::Cpu,
            precision: Precision::F32,
        };
        let step = gaussian(1.0, FilterStage::Before);
        let mut runs = 0;
        let mut next = 10;
        let mut seen = vec![];
        for sigma in [1.0, 1.0, 2.0, 2.0, 1.0] {
            let (_, report, content) = cache
                .get_or_run(
                    key(sigma),
                    || {
                        next += 1;
                        next
                    },
                    || {
                        runs += 1;
                        filter_volume(&step, &v, &BackendSpec::Cpu, Precision::F32)
                    },
                )
                .expect("filtered");
            seen.push((report.cached, content));
        }
        assert_eq!(runs, 3, "1.0, then 2.0, then 1.0 again (one entry kept)");
        // A cached answer keeps its content key (the GPU keeps that upload); a run gets a new one.
        assert_eq!(
            seen,
            [
                (false, 11),
                (true, 11),
                (false, 12),
                (true, 12),
                (false, 13)
            ]
        );
        // An error is not kept: the next request tries again.
        let r = cache.get_or_run(key(3.0), || 0, || Err("no".into()));
        assert!(r.is_err());
        assert!(cache.entry.is_none());
    }

    #[test]
    fn febds_masks_of_planes_are_the_pipeline_on_the_mapped_plane() {
        let (h, w) = (40, 48);
        let mut data = vec![0.1f32; h * w];
        for (y, x) in [(10, 12), (25, 30), (30, 10)] {
            for dy in 0..3 {
                for dx in 0..3 {
                    data[(y + dy) * w + x + dx] = 0.9;
                }
            }
        }
        let plane = Arc::new(DisplaySlice {
            width: w,
            height: h,
            channels: 1,
            data: data.clone(),
            pixel_mm: [1.0, 1.0],
            id: 7,
        });
        let req = MaskRequest {
            method: FebdsMethod::Dog,
            planes: vec![plane],
            offset: 0.0,
            factor: 4095.0,
            backend: BackendSpec::Cpu,
            precision: Precision::F32,
        };
        let set = febds_masks(&req);
        let mask = set.mask_for(7).expect("a mask");
        let mapped: Vec<f32> = data.iter().map(|v| v * 4095.0).collect();
        let want = crate::filter::febds::febds(&mapped, [h, w], FebdsMethod::Dog);
        assert!(mask.data == want);
        assert!(mask.data[11 * w + 13] == 1.0, "a spot is in the mask");
        assert!(set.mask_for(8).is_none());
        assert_eq!(set.backend, "cpu");
    }
}
