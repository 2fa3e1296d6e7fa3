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
//!
//! The rooms: `load` (reading a scan, window presets), `filters` (the filter stages and FEBDS
//! masks), `engines` (the CUDA engine slot and the slice engines), `planes` (the planes on screen
//! and the plane-by-plane fill); the loop and its messages live here.

mod engines;
mod filters;
pub mod histogram;
mod load;
mod planes;
#[cfg(test)]
mod tests;

pub use engines::*;
pub use filters::*;
pub use load::*;
pub use planes::*;

use std::path::PathBuf;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::augment::Plan;
use crate::core::intensity::Normalize;
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
    /// The normalisation of the scan, before everything else (the preset's training units).
    pub normalize: Option<Normalize>,
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
    /// The normalisation the scan went through first.
    pub normalized: Option<Arc<Normalized>>,
}

/// What a normalisation of the scan did: its units in words and, per channel, the affine map
/// `x ↦ a·x + b` it applied (a raw display window maps through it).
#[derive(Clone, Debug, PartialEq)]
pub struct Normalized {
    pub units: String,
    pub maps: Vec<(f64, f64)>,
}

/// The normalised scan of the source stage, for one scan and method.
struct NormalizedScan {
    source: u64,
    method: Normalize,
    image: Arc<Volume>,
    key: u64,
    report: Arc<Normalized>,
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
    /// The intensity histograms of the image the transform read and of this one.
    pub histograms: Option<Arc<histogram::Histograms>>,
    /// The normalisation the scan went through first.
    pub normalized: Option<Arc<Normalized>>,
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
    /// The folder opened holds several DICOM series: one is to be chosen.
    ChooseSeries(SeriesChoice),
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
    /// A scan, its label map and the series to read of a DICOM folder of several.
    load: Option<(PathBuf, Option<PathBuf>, Option<String>)>,
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
        self.load_series(path, label, None);
    }

    /// Posts a load of the series `series` of a DICOM folder (its SeriesInstanceUID, or a
    /// SeriesNumber that one series has); without, a folder of several series is answered with
    /// [`Reply::ChooseSeries`].
    pub fn load_series(&self, path: PathBuf, label: Option<PathBuf>, series: Option<String>) {
        let mut s = self.shared.lock();
        s.load = Some((path, label, series));
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
    /// The normalised scan, made once per scan and method.
    normalized: Option<NormalizedScan>,
    /// The filtered scan of the "before" stage.
    prefiltered: FilterCache,
    /// The last transformed (unfiltered) volume, while a filter acts after the transform.
    transformed: Option<Transformed>,
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
            normalized: None,
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
            if let Some((path, label, series)) = load {
                let r = load_scan(path, label, series);
                if let Ok(l) = &r {
                    self.image = Some(l.image.clone());
                    self.label = l.label.clone();
                    self.image_key = Self::new_key(&mut self.keys);
                    self.normalized = None;
                    self.prefiltered.clear();
                    self.transformed = None;
                }
                self.send(match r {
                    Ok(l) => Reply::Loaded(Ok(l)),
                    Err(NotLoaded::Error(e)) => Reply::Loaded(Err(e)),
                    Err(NotLoaded::Choose(c)) => Reply::ChooseSeries(c),
                });
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
        if let Err(message) = self.try_compute(&c) {
            self.send(Reply::Failed {
                generation: c.generation,
                message,
            });
        }
    }

    /// One request: the scan (filtered when a filter acts before), the planes on screen first
    /// when asked, then the whole volume (filtered when a filter acts after). `Ok` also when a
    /// newer request superseded this one, which then tells nothing.
    fn try_compute(&mut self, c: &Compute) -> Result<(), String> {
        let Some(scan) = self.image.clone() else {
            return Ok(());
        };
        let label = self.label.clone();
        c.plan.validate(scan.ndim()).map_err(|e| e.to_string())?;
        let (gpu, note) = match self
            .gpu
            .open(&c.backend, c.precision, "using the CPU engine")
        {
            Ok(g) => (g, None),
            Err(note) => (None, Some(note)),
        };
        let after = c.filter.as_ref().filter(|f| f.stage == FilterStage::After);
        let (scan, scan_key, normalized) = self.normalized_source(c, scan)?;
        let (image, image_key, before_report) = self.source(c, scan, scan_key)?;
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
        // plane path), and so does a plan with an intensity step that reads more of a channel
        // than the voxel it writes (statistics, neighbours): a plane alone cannot give it.
        let planes_exact = !c.plan.steps_need_whole_volume();
        if c.slices_first && !reuse && c.model.is_own() && planes_exact {
            let scan = (image.as_ref(), label.as_deref(), image_key);
            let rested = self.slices_first(c, gpu.as_ref(), scan, &before_report, &normalized)?;
            if !rested {
                return Ok(());
            }
        }
        let transformed = match self.transformed.take().filter(|t| t.key == transform_key) {
            Some(t) => t,
            None => match self.transform(c, &image, image_key, label.as_deref(), gpu.as_ref())? {
                // Superseded: the newer request is served next; this one tells nothing.
                None => return Ok(()),
                Some(t) => Transformed {
                    key: transform_key,
                    note: t.note.or(note),
                    ..t
                },
            },
        };
        let (image_out, filter) = match after {
            Some(step) => {
                let (v, report) = filter_volume(step, &transformed.image, &c.backend, c.precision)?;
                (Arc::new(v), Some(report))
            }
            None => (transformed.image.clone(), before_report),
        };
        let histograms = histogram::histograms(&image, &image_out).map(Arc::new);
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
            histograms,
            normalized,
        }));
        if after.is_some() {
            // Kept for the next filter setting: moving a filter slider does not transform again.
            self.transformed = Some(transformed);
        }
        if gpu.is_some() {
            self.send(Reply::Memory(engine::cuda::mem_stats()));
        }
        Ok(())
    }

    /// The volume the transform reads, with its content key: the scan, or the scan filtered once
    /// per filter setting (with the filter's report) when a filter acts before the transform.
    /// The scan in the request's normalisation (made once per scan and method), with its
    /// content key and what the normalisation did; the scan itself without one.
    #[allow(clippy::type_complexity)]
    fn normalized_source(
        &mut self,
        c: &Compute,
        scan: Arc<Volume>,
    ) -> Result<(Arc<Volume>, u64, Option<Arc<Normalized>>), String> {
        let Some(method) = &c.normalize else {
            self.normalized = None;
            return Ok((scan, self.image_key, None));
        };
        if let Some(n) = &self.normalized
            && n.source == self.image_key
            && n.method == *method
        {
            return Ok((n.image.clone(), n.key, Some(n.report.clone())));
        }
        self.normalized = None;
        let mut v = (*scan).clone();
        let maps = method.apply_volume(&mut v)?;
        let n = NormalizedScan {
            source: self.image_key,
            method: method.clone(),
            image: Arc::new(v),
            key: Self::new_key(&mut self.keys),
            report: Arc::new(Normalized {
                units: method.units(),
                maps,
            }),
        };
        let out = (n.image.clone(), n.key, Some(n.report.clone()));
        self.normalized = Some(n);
        Ok(out)
    }

    fn source(
        &mut self,
        c: &Compute,
        scan: Arc<Volume>,
        scan_key: u64,
    ) -> Result<(Arc<Volume>, u64, Option<FilterReport>), String> {
        let Some(step) = c.filter.as_ref().filter(|f| f.stage == FilterStage::Before) else {
            // Nothing filters the scan now: free the filtered copy.
            self.prefiltered.clear();
            return Ok((scan, scan_key, None));
        };
        let key = FilterKey {
            source: scan_key,
            filter: step.filter.clone(),
            boundary: step.boundary,
            backend: c.backend.clone(),
            precision: c.precision,
        };
        let keys = &mut self.keys;
        let (v, report, k) = self.prefiltered.get_or_run(
            key,
            || Self::new_key(keys),
            || filter_volume(step, &scan, &c.backend, c.precision),
        )?;
        Ok((v, k, Some(report)))
    }

    /// The planes on screen, sent first: on the GPU each is one launch over the plane with the
    /// image kept on the device; on the CPU each is computed on its own. Then waits for the
    /// slider to come to rest: `Ok(false)` when a newer request (or a shutdown) came meanwhile.
    fn slices_first(
        &self,
        c: &Compute,
        gpu: Option<&Arc<dyn Backend>>,
        scan: (&Volume, Option<&Volume>, u64),
        before_report: &Option<FilterReport>,
        normalized: &Option<Arc<Normalized>>,
    ) -> Result<bool, String> {
        let after = c.filter.as_ref().filter(|f| f.stage == FilterStage::After);
        let mut s = match gpu {
            // A GPU failure (out of memory, say) leaves the planes to the CPU; the whole
            // volume reports what happened.
            Some(b) => compute_slices(&SliceEngines::one(b.clone()), c, scan)
                .or_else(|_| compute_slices(&self.slicing, c, scan)),
            None => compute_slices(&self.slicing, c, scan),
        }?;
        s.filter = before_report.clone();
        s.normalized = normalized.clone();
        // A point-wise filter after the transform is exact on a plane; the others need the
        // whole volume and wait for it.
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
        self.send(Reply::Slices(s));
        // Fill in the whole volume only when the slider has come to rest.
        let s = self.shared.lock();
        let (s, _) = self
            .shared
            .wake
            .wait_timeout_while(s, FILL_DELAY, |s| {
                !s.shutdown && s.load.is_none() && s.compute.is_none()
            })
            .unwrap_or_else(|p| p.into_inner());
        Ok(!(s.shutdown || s.load.is_some() || s.compute.is_some()))
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
