//! "What training will see": a grid of N draws (4, 9 or 16) of the preset in use, draw k with
//! seed `first_seed + k` — the samples `augscope batch --seed first_seed` writes — each shown as
//! one plane of the augmented scan (the main view's cursor), with its seed under it and its done
//! list on hover, and small histograms of the drawn angles, scale factors and realised elastic
//! displacement beneath.
//!
//! The tiles are computed on a thread of this module's own ([`GridWorker`]) with the engines'
//! plane path ([`Backend::apply_plane`]: the CPU engine, or the CUDA engine when the engine
//! selection is CUDA and a device works), and fill in as they finish. The newest request wins:
//! a change of preset, scan, N, seed or plane bumps the generation, and the thread abandons
//! stale work between tiles. Arrays are `[z, y, x]` (2D `[y, x]`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::time::Instant;

use eframe::egui;

use crate::augment::preset::{Preset, Sample};
use crate::augment::{Plan, Space};
use crate::core::volume::Volume;
use crate::engine::cpu::CpuBackend;
use crate::engine::{Backend, BackendSpec, EngineError, Job, Outputs, Plane, Precision};

use super::overlay::{self, OverlayEngine, ViewOverlay};
use super::slices::{self, DisplaySlice, ViewGeom};
use super::state::{Params, State};
use super::worker::GpuSlot;
use super::{Runtime, export};

/// The grid sizes offered.
pub const SIZES: [usize; 3] = [4, 9, 16];

/// What one grid is computed for: the thread's whole input.
#[derive(Clone)]
pub struct GridJob {
    pub generation: u64,
    pub image: Arc<Volume>,
    /// Distinguishes scans for the GPU's resident copy of the image.
    pub image_key: u64,
    pub preset: Preset,
    pub n: usize,
    pub first_seed: u64,
    /// The plane `(axis, index)` of a 3D output grid; `None` for a 2D image (computed whole).
    pub plane: Option<(usize, usize)>,
    pub backend: BackendSpec,
    pub precision: Precision,
}

/// The overlays a request computes for each tile, after the tile: those the Display toggles ask
/// for, on the plane of the view the tiles show.
#[derive(Clone)]
pub struct OverlaySpec {
    /// The view whose plane the tiles show (the overlays come in its display order).
    pub view: ViewGeom,
    pub deformation_grid: bool,
    pub jacobian: bool,
}

/// The overlays of one tile: the Jacobian colours and folded count, the deformation-grid lines
/// (see [`overlay::ViewOverlay`]), in the display order of the tile.
pub struct TileOverlay {
    pub view: ViewOverlay,
    texture: Option<egui::TextureHandle>,
}

impl std::fmt::Debug for TileOverlay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TileOverlay")
            .field("width", &self.view.width)
            .field("height", &self.view.height)
            .field("folded", &self.view.jacobian.as_ref().map(|j| j.folded))
            .field("grid_lines", &self.view.grid.len())
            .finish()
    }
}

/// What the thread sends back, each tagged with the generation it was computed for.
#[derive(Debug)]
pub enum GridReply {
    /// The N draws, before any tile (the histograms of angles and scales need no image).
    Samples {
        generation: u64,
        samples: Vec<Sample>,
    },
    /// Tile `k`: its plane in array order (channels leading, the two remaining axes in
    /// increasing order), as `Backend::apply_plane` writes it.
    Tile {
        generation: u64,
        k: usize,
        data: Vec<f32>,
        ms: f64,
        /// Why the engine is not the one asked for.
        note: Option<String>,
    },
    /// The overlays of tile `k`, right after the tile (only when a request asks for them).
    Overlay {
        generation: u64,
        k: usize,
        overlay: TileOverlay,
    },
    /// The realised elastic displacement (max, RMS) of draw `k`: voxels, or mm in mm space.
    Displacement {
        generation: u64,
        k: usize,
        stats: (f64, f64),
    },
    Failed {
        generation: u64,
        message: String,
    },
}

/// The grid's thread: requests in, replies out; `latest` is the generation that counts.
pub struct GridWorker {
    tx: Option<Sender<(GridJob, Option<OverlaySpec>)>>,
    rx: Receiver<GridReply>,
    latest: Arc<AtomicU64>,
    /// Tiles computed so far, over all requests (stale ones included).
    computed: Arc<AtomicUsize>,
    /// Tile overlays computed so far, over all requests.
    overlays: Arc<AtomicUsize>,
}

impl GridWorker {
    /// Starts the threads; `repaint` is called after every reply.
    pub fn spawn(repaint: impl Fn() + Send + Sync + 'static) -> std::io::Result<Self> {
        let (tx, jobs) = channel::<(GridJob, Option<OverlaySpec>)>();
        let (field_tx, field_jobs) = channel::<FieldJob>();
        let (out, rx) = channel();
        let latest = Arc::new(AtomicU64::new(0));
        let computed = Arc::new(AtomicUsize::new(0));
        let overlays = Arc::new(AtomicUsize::new(0));
        let repaint: Arc<dyn Fn() + Send + Sync> = Arc::new(repaint);
        // The displacement of whole fields takes seconds a draw on a large scan: it runs on a
        // thread of its own, so that the tiles of a newer request never wait for it.
        {
            let (current, out, repaint) = (latest.clone(), out.clone(), repaint.clone());
            std::thread::Builder::new()
                .name("augscope-grid-field".into())
                .spawn(move || {
                    while let Ok(mut job) = field_jobs.recv() {
                        while let Ok(j) = field_jobs.try_recv() {
                            job = j;
                        }
                        let send = |r: GridReply| {
                            let gone = out.send(r).is_err();
                            repaint();
                            !gone
                        };
                        let stale = || current.load(Ordering::SeqCst) != job.generation;
                        run_field_job(&job, &send, &stale);
                    }
                })?;
        }
        let current = latest.clone();
        let counter = computed.clone();
        let overlay_counter = overlays.clone();
        std::thread::Builder::new()
            .name("augscope-grid".into())
            .spawn(move || {
                let mut engines = Engines::default();
                while let Ok(mut job) = jobs.recv() {
                    // Only the newest request matters.
                    while let Ok(j) = jobs.try_recv() {
                        job = j;
                    }
                    if current.load(Ordering::SeqCst) != job.0.generation {
                        continue;
                    }
                    let send = |r: GridReply| {
                        let gone = out.send(r).is_err();
                        repaint();
                        !gone
                    };
                    let (job, spec) = job;
                    let stale = || current.load(Ordering::SeqCst) != job.generation;
                    let counters = (&*counter, &*overlay_counter);
                    let done = run_job(&mut engines, &job, spec.as_ref(), &send, &stale, counters);
                    if let Some(f) = done {
                        // The field thread ends when this sender goes (with this thread).
                        let _ = field_tx.send(f);
                    }
                }
            })?;
        Ok(GridWorker {
            tx: Some(tx),
            rx,
            latest,
            computed,
            overlays,
        })
    }

    /// Asks for `job`; any older request still running stops at its next tile.
    pub fn request(&self, job: GridJob) {
        self.request_with_overlays(job, None);
    }

    /// Asks for `job` and, after each tile, the overlays `spec` asks for.
    pub fn request_with_overlays(&self, job: GridJob, spec: Option<OverlaySpec>) {
        self.latest.store(job.generation, Ordering::SeqCst);
        if let Some(tx) = &self.tx {
            // The thread only ends when this sender is dropped.
            let _ = tx.send((job, spec));
        }
    }

    /// Tile overlays computed so far, over all requests.
    pub fn overlays_computed(&self) -> usize {
        self.overlays.load(Ordering::SeqCst)
    }

    /// Tiles computed so far, over all requests (stale ones included).
    pub fn tiles_computed(&self) -> usize {
        self.computed.load(Ordering::SeqCst)
    }

    pub fn try_recv(&self) -> Option<GridReply> {
        self.rx.try_recv().ok()
    }
}

impl Drop for GridWorker {
    fn drop(&mut self) {
        // Both threads end on their own, without being waited for: the tile thread after the
        // tile in progress (its engines and their caches go with it), the field thread after
        // the field in progress.
        self.latest.store(u64::MAX, Ordering::SeqCst);
        self.tx = None;
    }
}

/// The thread's engines: the CPU engine (its caches: cubic coefficients of the scan, field
/// planes), and the CUDA engine made once per (spec, precision).
struct Engines {
    cpu: Arc<dyn Backend>,
    /// The overlays' computation, with its cache of unit field planes.
    overlay: OverlayEngine,
    gpu: GpuSlot,
}

impl Default for Engines {
    fn default() -> Self {
        Engines {
            cpu: Arc::new(CpuBackend::new()),
            overlay: OverlayEngine::default(),
            gpu: GpuSlot::default(),
        }
    }
}

/// Values in tile `plane` of `image`: `channels * plane` for a 3D plane, the whole grid in 2D.
fn tile_len(image: &Volume, plane: Option<(usize, usize)>) -> usize {
    let n: usize = image.shape.iter().product();
    image.channels
        * match plane {
            Some((axis, _)) => n / image.shape[axis].max(1),
            None => n,
        }
}

/// One tile on `engine`: the plane (3D) or the whole image (2D). `resident` is the scan's
/// content key, which lets a GPU keep the scan on the device between tiles.
fn tile(
    engine: &dyn Backend,
    plan: &Plan,
    image: &Volume,
    plane: Option<(usize, usize)>,
    resident: u64,
    out: &mut [f32],
) -> Result<(), EngineError> {
    let job = Job {
        plan,
        image,
        label: None,
    };
    let out = Outputs {
        image: out,
        label: None,
    };
    match plane {
        Some((axis, index)) => engine
            .apply_plane(job, Plane { axis, index }, Some(resident), out)
            .map(|_| ()),
        None => engine.apply(job, out).map(|_| ()),
    }
}

/// The displacement work of a request whose tiles are done.
struct FieldJob {
    generation: u64,
    plans: Vec<Plan>,
    shape: Vec<usize>,
    gpu: Option<Arc<dyn Backend>>,
}

/// Computes one request: the draws, then the tiles in order; stops as soon as `stale()` says a
/// newer request waits (checked between tiles) or nobody listens. Returns the displacement
/// work for the field thread once every tile is sent.
fn run_job(
    engines: &mut Engines,
    job: &GridJob,
    spec: Option<&OverlaySpec>,
    send: &dyn Fn(GridReply) -> bool,
    stale: &dyn Fn() -> bool,
    (computed, overlays): (&AtomicUsize, &AtomicUsize),
) -> Option<FieldJob> {
    let image = job.image.as_ref();
    let nd = image.ndim();
    let samples: Result<Vec<Sample>, String> = (0..job.n)
        .map(|k| {
            job.preset
                .sample(job.first_seed.wrapping_add(k as u64), nd, &image.spacing_mm)
                .map_err(|e| format!("preset {}: {e}", job.preset.name))
        })
        .collect();
    let samples = match samples {
        Ok(s) => s,
        Err(message) => {
            send(GridReply::Failed {
                generation: job.generation,
                message,
            });
            return None;
        }
    };
    let plans: Vec<Plan> = samples.iter().map(|s| s.plan.clone()).collect();
    if !send(GridReply::Samples {
        generation: job.generation,
        samples,
    }) {
        return None;
    }
    let (gpu, mut note) =
        match engines
            .gpu
            .open(&job.backend, job.precision, "the grid uses the CPU engine")
        {
            Ok(g) => (g, None),
            Err(n) => (None, Some(n)),
        };
    let len = tile_len(image, job.plane);
    for (k, plan) in plans.iter().enumerate() {
        if stale() {
            return None;
        }
        let t = Instant::now();
        let mut data = vec![0f32; len];
        let on_gpu = gpu
            .as_ref()
            .map(|g| tile(g.as_ref(), plan, image, job.plane, job.image_key, &mut data));
        let r = match on_gpu {
            Some(Ok(())) => Ok(()),
            Some(Err(e)) => {
                // Out of memory or a failed launch: this tile on the CPU, and say so.
                note = Some(format!("CUDA: {e}; this tile used the CPU engine"));
                tile(
                    engines.cpu.as_ref(),
                    plan,
                    image,
                    job.plane,
                    job.image_key,
                    &mut data,
                )
            }
            None => tile(
                engines.cpu.as_ref(),
                plan,
                image,
                job.plane,
                job.image_key,
                &mut data,
            ),
        };
        if let Err(e) = r {
            send(GridReply::Failed {
                generation: job.generation,
                message: e.to_string(),
            });
            return None;
        }
        computed.fetch_add(1, Ordering::SeqCst);
        let tile = GridReply::Tile {
            generation: job.generation,
            k,
            data,
            ms: t.elapsed().as_secs_f64() * 1e3,
            note: note.clone(),
        };
        if !send(tile) {
            return None;
        }
        if let Some(spec) = spec.filter(|s| s.jacobian || s.deformation_grid) {
            match tile_overlay(&mut engines.overlay, job, plan, spec, stale) {
                Ok(Some(view)) => {
                    overlays.fetch_add(1, Ordering::SeqCst);
                    let reply = GridReply::Overlay {
                        generation: job.generation,
                        k,
                        overlay: TileOverlay {
                            view,
                            texture: None,
                        },
                    };
                    if !send(reply) {
                        return None;
                    }
                }
                Ok(None) => return None,
                Err(message) => {
                    send(GridReply::Failed {
                        generation: job.generation,
                        message: format!("overlay: {message}"),
                    });
                    return None;
                }
            }
        }
    }
    Some(FieldJob {
        generation: job.generation,
        plans,
        shape: image.shape.clone(),
        gpu,
    })
}

/// The overlays of one tile, as the augmented views compute theirs (the CPU engine's
/// coordinates of the tile's plane and its two neighbours from the plan's map and unit field
/// planes); `Ok(None)` when `stale()` said a newer request waits.
fn tile_overlay(
    engine: &mut OverlayEngine,
    job: &GridJob,
    plan: &Plan,
    spec: &OverlaySpec,
    stale: &dyn Fn() -> bool,
) -> Result<Option<ViewOverlay>, String> {
    let image = job.image.as_ref();
    let mut cursor = vec![0usize; image.ndim()];
    if let Some((axis, index)) = job.plane {
        cursor[axis] = index;
    }
    let req = overlay::Request {
        generation: job.generation,
        plan: plan.clone(),
        shape: image.shape.clone(),
        spacing_mm: image.spacing_mm.clone(),
        views: vec![spec.view.clone()],
        cursor,
        grid: spec.deformation_grid,
        jacobian: spec.jacobian,
        volume: false,
    };
    Ok(engine
        .planes(&req, stale)?
        .and_then(|p| p.views.into_iter().next()))
}

/// The displacement of every draw with elastic, one draw at a time, until `stale()`.
fn run_field_job(job: &FieldJob, send: &dyn Fn(GridReply) -> bool, stale: &dyn Fn() -> bool) {
    for (k, plan) in job.plans.iter().enumerate() {
        if stale() {
            return;
        }
        let Some(stats) = displacement(job.gpu.as_deref(), plan, &job.shape) else {
            continue;
        };
        if !send(GridReply::Displacement {
            generation: job.generation,
            k,
            stats,
        }) {
            return;
        }
    }
}

/// The realised displacement (max, RMS) of a plan's elastic field over the whole output grid,
/// as the engine reports it (the explorer's readout): `|alpha| |G_sigma(noise)|`. On the CPU
/// the field is made for this and dropped (the grid keeps no volume fields).
fn displacement(gpu: Option<&dyn Backend>, plan: &Plan, shape: &[usize]) -> Option<(f64, f64)> {
    let out_shape = plan.out_shape.clone().unwrap_or_else(|| shape.to_vec());
    if let Some(g) = gpu
        && let Ok(Some(s)) = g.displacement_stats(plan, &out_shape)
    {
        return Some(s);
    }
    CpuBackend::new()
        .displacement_stats(plan, &out_shape)
        .ok()
        .flatten()
}

/// One finished tile.
pub struct Tile {
    pub seed: u64,
    /// The plane as the engine wrote it: array order, channels leading (see [`GridReply::Tile`]).
    pub data: Vec<f32>,
    /// The same plane in display order (the main view's orientation).
    pub display: Arc<DisplaySlice>,
    pub ms: f64,
    texture: Option<(egui::TextureHandle, (f32, f32))>,
}

/// What identifies a grid: a change of any of these is a new request.
#[derive(Clone)]
struct GridKey {
    preset: Preset,
    image: Arc<Volume>,
    n: usize,
    first_seed: u64,
    plane: Option<(usize, usize)>,
    backend: BackendSpec,
    precision: Precision,
    /// The Display toggles of the overlays: (deformation grid, Jacobian).
    overlays: (bool, bool),
}

impl PartialEq for GridKey {
    fn eq(&self, o: &Self) -> bool {
        Arc::ptr_eq(&self.image, &o.image)
            && self.preset == o.preset
            && self.n == o.n
            && self.first_seed == o.first_seed
            && self.plane == o.plane
            && self.backend == o.backend
            && self.precision == o.precision
            && self.overlays == o.overlays
    }
}

/// The window's runtime side: settings, the thread, and the tiles of the newest request.
pub struct GridRuntime {
    pub open: bool,
    /// Draws shown: one of [`SIZES`].
    pub n: usize,
    /// Seed of draw 0; draw k uses `first_seed + k`.
    pub first_seed: u64,
    /// The main view whose plane the tiles show (index into the scan's views).
    pub view: usize,
    /// The generation of the newest request.
    pub generation: u64,
    /// The draws of the newest request (empty until the thread sent them).
    pub samples: Vec<Sample>,
    /// Tile k of the newest request, once computed.
    pub tiles: Vec<Option<Tile>>,
    /// Realised displacement (max, RMS) of draw k, for the draws with elastic.
    pub displacement: Vec<Option<(f64, f64)>>,
    /// The overlays of tile k, once computed (only while a Display overlay toggle is on).
    pub overlays: Vec<Option<TileOverlay>>,
    /// The plane `(axis, index)` the tiles hold (3D), `None` for a 2D image.
    pub plane: Option<(usize, usize)>,
    pub error: Option<String>,
    pub note: Option<String>,
    /// When the newest request was sent, and the milliseconds to its first and last tile.
    pub started: Option<Instant>,
    pub first_ms: Option<f64>,
    pub last_ms: Option<f64>,
    key: Option<GridKey>,
    image_key: u64,
    worker: Option<GridWorker>,
}

impl Default for GridRuntime {
    fn default() -> Self {
        GridRuntime {
            open: false,
            n: 9,
            first_seed: 0,
            view: 0,
            generation: 0,
            samples: vec![],
            tiles: vec![],
            displacement: vec![],
            overlays: vec![],
            plane: None,
            error: None,
            note: None,
            started: None,
            first_ms: None,
            last_ms: None,
            key: None,
            image_key: 0,
            worker: None,
        }
    }
}

impl GridRuntime {
    /// Whether every tile of the newest request is there, and the displacement of every draw
    /// with elastic (or the request failed).
    pub fn complete(&self) -> bool {
        if self.key.is_none() {
            return false;
        }
        if self.error.is_some() {
            return true;
        }
        let wants_overlays = self
            .key
            .as_ref()
            .is_some_and(|k| k.overlays != (false, false));
        let overlays_done = !wants_overlays
            || (self.overlays.len() == self.n && self.overlays.iter().all(Option::is_some));
        overlays_done
            && self.samples.len() == self.n
            && self.tiles.len() == self.n
            && self.tiles.iter().all(Option::is_some)
            && self
                .samples
                .iter()
                .zip(&self.displacement)
                .all(|(s, d)| d.is_some() || s.plan.elastic.is_none_or(|e| e.alpha == 0.0))
    }

    /// Stops the computation and forgets the request (the window closed); the thread ends and
    /// takes its caches (the scan's cubic coefficients among them) along.
    pub fn close(&mut self) {
        self.open = false;
        self.generation += 1;
        self.worker = None;
        self.key = None;
        self.tiles.clear();
        self.samples.clear();
        self.displacement.clear();
        self.overlays.clear();
    }

    /// Tiles the thread computed so far, over all requests (stale ones included).
    pub fn tiles_computed(&self) -> usize {
        self.worker.as_ref().map_or(0, GridWorker::tiles_computed)
    }

    /// Tile overlays the thread computed so far, over all requests.
    pub fn overlays_computed(&self) -> usize {
        self.worker
            .as_ref()
            .map_or(0, GridWorker::overlays_computed)
    }

    /// Moves the first seed past the draws shown.
    pub fn reseed(&mut self) {
        self.first_seed = self.first_seed.wrapping_add(self.n as u64);
    }

    /// Sends a request when what the grid depends on changed; takes the thread's replies.
    pub fn sync(
        &mut self,
        state: &State,
        rt_scan: Option<&super::Scan>,
        have_cuda: bool,
        ctx: &egui::Context,
    ) {
        self.receive(rt_scan);
        let Some(scan) = rt_scan else {
            return;
        };
        let image = &scan.loaded.image;
        let nd = image.ndim();
        let preset = match export::chosen_preset(state, nd, true) {
            Ok(p) => p,
            Err(e) => {
                self.error = Some(e);
                return;
            }
        };
        self.view = self.view.min(scan.views.len().saturating_sub(1));
        let plane = if nd == 3 {
            scan.views[self.view]
                .normal
                .map(|a| (a, scan.cursor[a].min(image.shape[a].saturating_sub(1))))
        } else {
            None
        };
        let key = GridKey {
            preset,
            image: image.clone(),
            n: self.n,
            first_seed: self.first_seed,
            plane,
            backend: state.params.backend.spec(have_cuda),
            precision: state.params.precision,
            overlays: (state.display.deformation_grid, state.display.jacobian),
        };
        if self.key.as_ref() == Some(&key) {
            return;
        }
        if self
            .key
            .as_ref()
            .is_none_or(|k| !Arc::ptr_eq(&k.image, &key.image))
        {
            self.image_key += 1;
        }
        if self.worker.is_none() {
            let ctx = ctx.clone();
            match GridWorker::spawn(move || ctx.request_repaint()) {
                Ok(w) => self.worker = Some(w),
                Err(e) => {
                    self.error = Some(format!("cannot start the grid thread: {e}"));
                    return;
                }
            }
        }
        self.generation += 1;
        self.samples.clear();
        self.tiles = (0..key.n).map(|_| None).collect();
        self.displacement = vec![None; key.n];
        self.overlays = (0..key.n).map(|_| None).collect();
        self.plane = key.plane;
        self.error = None;
        self.note = None;
        self.started = Some(Instant::now());
        self.first_ms = None;
        self.last_ms = None;
        let (deformation_grid, jacobian) = key.overlays;
        let spec = (deformation_grid || jacobian).then(|| OverlaySpec {
            view: scan.views[self.view].clone(),
            deformation_grid,
            jacobian,
        });
        if let Some(w) = &self.worker {
            w.request_with_overlays(
                GridJob {
                    generation: self.generation,
                    image: key.image.clone(),
                    image_key: self.image_key,
                    preset: key.preset.clone(),
                    n: key.n,
                    first_seed: key.first_seed,
                    plane: key.plane,
                    backend: key.backend.clone(),
                    precision: key.precision,
                },
                spec,
            );
        }
        self.key = Some(key);
    }

    /// Takes the replies of the newest request; older ones are dropped.
    fn receive(&mut self, scan: Option<&super::Scan>) {
        let Some(w) = &self.worker else {
            return;
        };
        while let Some(r) = w.try_recv() {
            match r {
                GridReply::Samples {
                    generation,
                    samples,
                } if generation == self.generation => self.samples = samples,
                GridReply::Tile {
                    generation,
                    k,
                    data,
                    ms,
                    note,
                } if generation == self.generation && k < self.tiles.len() => {
                    let Some(scan) = scan else { continue };
                    let img = &scan.loaded.image;
                    let view = &scan.views[self.view.min(scan.views.len() - 1)];
                    let display = slices::extract_from_plane(
                        &data,
                        &img.shape,
                        img.channels,
                        &img.spacing_mm,
                        view,
                    );
                    self.note = note;
                    let elapsed = self.started.map(|t| t.elapsed().as_secs_f64() * 1e3);
                    if self.first_ms.is_none() {
                        self.first_ms = elapsed;
                    }
                    let seed = self
                        .samples
                        .get(k)
                        .map_or(self.first_seed + k as u64, |s| s.seed);
                    self.tiles[k] = Some(Tile {
                        seed,
                        data,
                        display,
                        ms,
                        texture: None,
                    });
                    if self.tiles.iter().all(Option::is_some) {
                        self.last_ms = elapsed;
                    }
                }
                GridReply::Overlay {
                    generation,
                    k,
                    overlay,
                } if generation == self.generation && k < self.overlays.len() => {
                    self.overlays[k] = Some(overlay);
                }
                GridReply::Displacement {
                    generation,
                    k,
                    stats,
                } if generation == self.generation && k < self.displacement.len() => {
                    self.displacement[k] = Some(stats);
                }
                GridReply::Failed {
                    generation,
                    message,
                } if generation == self.generation => self.error = Some(message),
                _ => {}
            }
        }
    }
}

/// Puts draw `k`'s plan into the main views, as "Sample from preset" does.
pub fn pick(state: &mut State, rt: &mut Runtime, k: usize) {
    let nd = rt.scan.as_ref().map_or(3, |s| s.loaded.image.ndim());
    let Some(s) = rt.grid.samples.get(k) else {
        return;
    };
    state.params = Params::from_plan(&s.plan, nd, &state.params);
    rt.sampled = Some((state.params.clone(), s.done.clone()));
}

/// A grayscale (or RGB) image of a display slice through the window `[lo, hi]`.
fn tile_image(s: &DisplaySlice, lo: f32, hi: f32) -> egui::ColorImage {
    let scale = 255.0 / (hi - lo).max(1e-12);
    let byte = |v: f32| ((v - lo) * scale).clamp(0.0, 255.0) as u8;
    let n = s.width * s.height;
    if s.channels >= 3 {
        let rgb: Vec<u8> = (0..n)
            .flat_map(|i| {
                [
                    byte(s.data[i]),
                    byte(s.data[n + i]),
                    byte(s.data[2 * n + i]),
                ]
            })
            .collect();
        egui::ColorImage::from_rgb([s.width, s.height], &rgb)
    } else {
        let gray: Vec<u8> = s.data[..n].iter().map(|&v| byte(v)).collect();
        egui::ColorImage::from_gray([s.width, s.height], &gray)
    }
}

/// Draws a tile's overlays over its image at `rect`: the Jacobian colours (uploaded once) and
/// the deformation-grid lines, each while its Display toggle is on.
fn paint_tile_overlay(
    ui: &egui::Ui,
    display: &super::state::Display,
    k: usize,
    o: &mut TileOverlay,
    rect: egui::Rect,
) {
    let painter = ui.painter_at(rect);
    if display.jacobian {
        if o.texture.is_none()
            && let Some(image) = o.view.jacobian.as_mut().and_then(|j| j.image.take())
        {
            o.texture = Some(ui.ctx().load_texture(
                format!("grid-jacobian-{k}"),
                image,
                egui::TextureOptions::NEAREST,
            ));
        }
        if let Some(tex) = &o.texture {
            painter.image(
                tex.id(),
                rect,
                egui::Rect::from_min_max(egui::Pos2::ZERO, egui::pos2(1.0, 1.0)),
                egui::Color32::WHITE,
            );
        }
    }
    if display.deformation_grid {
        let (w, h) = (o.view.width.max(1) as f32, o.view.height.max(1) as f32);
        let stroke = egui::Stroke::new(1.0, overlay::GRID_COLOUR);
        for line in &o.view.grid {
            let pts: Vec<egui::Pos2> = line
                .iter()
                .map(|t| {
                    egui::pos2(
                        rect.min.x + t[0] / w * rect.width(),
                        rect.min.y + t[1] / h * rect.height(),
                    )
                })
                .collect();
            painter.add(egui::Shape::line(pts, stroke));
        }
    }
}

/// The done list of a draw, one transform a line, with units.
fn done_text(s: &Sample, spacing_mm: &[f64]) -> String {
    if s.done.is_empty() {
        return format!("seed {}: identity (nothing fired)", s.seed);
    }
    let mut t = format!("seed {}", s.seed);
    for d in &s.done {
        t.push_str(&format!(
            "\n{}: {}",
            d.transform,
            super::format::done_line(d, spacing_mm)
        ));
    }
    t
}

/// Values of the histograms under the grid: (title, unit, values).
pub fn histogram_values(g: &GridRuntime) -> Vec<(String, &'static str, Vec<f64>)> {
    let mut out = vec![];
    let nd = g
        .samples
        .iter()
        .find_map(|s| (!s.plan.rotate_rad.is_empty()).then_some(s.plan.rotate_rad.len()))
        .unwrap_or(0);
    for a in 0..nd {
        let v: Vec<f64> = g
            .samples
            .iter()
            .filter_map(|s| s.plan.rotate_rad.get(a).copied())
            .filter(|&r| r != 0.0)
            .map(f64::to_degrees)
            .collect();
        let title = if nd == 1 {
            "rotation".to_string()
        } else {
            format!("rotation about axis {a}")
        };
        out.push((title, "°", v));
    }
    let scales: Vec<f64> = g
        .samples
        .iter()
        .flat_map(|s| s.plan.scale.iter().copied())
        .filter(|&s| s != 1.0)
        .collect();
    out.push(("scale factor".into(), "×", scales));
    let mm = g.samples.iter().any(|s| s.plan.space == Space::Mm);
    let rms: Vec<f64> = g.displacement.iter().flatten().map(|d| d.1).collect();
    out.push((
        "elastic displacement RMS".into(),
        if mm { "mm" } else { "vox" },
        rms,
    ));
    out
}

/// Bin counts of `values` over `[lo, hi]`.
pub fn bins(values: &[f64], lo: f64, hi: f64, n: usize) -> Vec<usize> {
    let mut c = vec![0usize; n];
    let w = (hi - lo).max(1e-12);
    for &v in values {
        let i = (((v - lo) / w) * n as f64)
            .floor()
            .clamp(0.0, (n - 1) as f64) as usize;
        c[i] += 1;
    }
    c
}

/// A small bar histogram drawn with the painter, its range under it.
fn histogram(
    ui: &mut egui::Ui,
    title: &str,
    unit: &str,
    values: &[f64],
    of: usize,
    pending: usize,
) {
    const BINS: usize = 12;
    ui.vertical(|ui| {
        let more = if pending > 0 {
            format!(", {pending} computing")
        } else {
            String::new()
        };
        ui.label(egui::RichText::new(format!("{title} ({} of {of}{more})", values.len())).small());
        let (rect, resp) = ui.allocate_exact_size(egui::vec2(150.0, 44.0), egui::Sense::hover());
        let p = ui.painter_at(rect);
        p.rect_filled(rect, 2.0, ui.visuals().extreme_bg_color);
        if values.is_empty() {
            p.text(
                rect.center(),
                egui::Align2::CENTER_CENTER,
                if pending > 0 {
                    "computing…"
                } else {
                    "none drawn"
                },
                egui::FontId::proportional(10.0),
                ui.visuals().weak_text_color(),
            );
            return;
        }
        let lo = values.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let (lo, hi) = if hi - lo < 1e-9 {
            (lo - 0.5 * lo.abs().max(1e-3), hi + 0.5 * hi.abs().max(1e-3))
        } else {
            (lo, hi)
        };
        let counts = bins(values, lo, hi, BINS);
        let top = counts.iter().copied().max().unwrap_or(1).max(1) as f32;
        let bw = rect.width() / BINS as f32;
        let color = ui.visuals().selection.bg_fill;
        for (i, &c) in counts.iter().enumerate() {
            if c == 0 {
                continue;
            }
            let h = (rect.height() - 2.0) * c as f32 / top;
            let x0 = rect.left() + i as f32 * bw;
            p.rect_filled(
                egui::Rect::from_min_max(
                    egui::pos2(x0 + 0.5, rect.bottom() - h),
                    egui::pos2(x0 + bw - 0.5, rect.bottom()),
                ),
                0.0,
                color,
            );
        }
        let f = super::format::num;
        ui.label(
            egui::RichText::new(format!("{} … {} {unit}", f(lo), f(hi)))
                .small()
                .weak(),
        );
        let list: Vec<String> = values.iter().map(|v| f(*v)).collect();
        resp.on_hover_text(list.join(", "));
    });
}

/// The "What training will see" window (while `rt.grid.open`).
pub fn grid_window(ui: &mut egui::Ui, state: &mut State, rt: &mut Runtime) {
    let have_cuda = rt.devices.as_ref().is_some_and(|d| !d.devices.is_empty());
    let ctx = ui.ctx().clone();
    rt.grid.sync(state, rt.scan.as_ref(), have_cuda, &ctx);
    let mut open = rt.grid.open;
    let mut picked = None;
    let (lo, hi) = {
        let (alo, ahi) = rt
            .scan
            .as_ref()
            .map_or((0.0, 1.0), |s| s.loaded.auto_window);
        let level = state.display.level.unwrap_or(0.5 * (alo + ahi));
        let width = state.display.width.unwrap_or((ahi - alo).max(1e-6));
        (level - 0.5 * width, level + 0.5 * width)
    };
    let preset_name = match &state.draft {
        Some(d) => d.name.clone(),
        None if state.preset.is_empty() => "nnunet-v2".into(),
        None => std::path::Path::new(&state.preset).file_name().map_or_else(
            || state.preset.clone(),
            |n| n.to_string_lossy().into_owned(),
        ),
    };
    egui::Window::new("What training will see")
        .open(&mut open)
        .default_pos([360.0, 80.0])
        .resizable(false)
        .show(&ctx, |ui| {
            let g = &mut rt.grid;
            ui.weak(format!(
                "draws of preset {preset_name}; draw k uses seed first seed + k, as augscope batch"
            ));
            ui.horizontal(|ui| {
                ui.label("draws");
                for n in SIZES {
                    let side = (n as f64).sqrt().round() as usize;
                    ui.selectable_value(&mut g.n, n, format!("{side}×{side}"))
                        .on_hover_text(format!("{n} draws"));
                }
                let l = ui.label("first seed");
                ui.add(egui::DragValue::new(&mut g.first_seed))
                    .labelled_by(l.id);
                if ui
                    .button("Reseed")
                    .on_hover_text(format!("the next {} draws", g.n))
                    .clicked()
                {
                    g.reseed();
                }
            });
            if let Some(scan) = &rt.scan
                && scan.views.len() > 1
            {
                ui.horizontal(|ui| {
                    ui.label("plane");
                    for (i, v) in scan.views.iter().enumerate() {
                        ui.selectable_value(&mut g.view, i, v.name.as_str());
                    }
                    if let Some((axis, index)) = g.plane {
                        ui.weak(format!("slice {index} of axis {axis} (the views' cursor)"));
                    }
                });
            }
            if rt.scan.is_none() {
                ui.label("open a scan first");
                return;
            }
            if let Some(e) = &g.error {
                ui.colored_label(ui.visuals().error_fg_color, e);
            }
            if let Some(n) = &g.note {
                ui.weak(n);
            }
            let spacing = rt
                .scan
                .as_ref()
                .map_or(vec![], |s| s.loaded.image.spacing_mm.clone());
            let cols = (g.n as f64).sqrt().ceil() as usize;
            let side = (540.0 / cols as f32).floor() - 8.0;
            egui::Grid::new("training_grid")
                .num_columns(cols)
                .spacing([6.0, 6.0])
                .show(ui, |ui| {
                    for k in 0..g.n {
                        let seed = g.first_seed.wrapping_add(k as u64);
                        let layout = egui::Layout::top_down(egui::Align::Center);
                        ui.allocate_ui_with_layout(egui::vec2(side, side + 16.0), layout, |ui| {
                            ui.set_width(side);
                            match g.tiles.get_mut(k).and_then(Option::as_mut) {
                                Some(t) => {
                                    let stale_tex =
                                        t.texture.as_ref().is_none_or(|(_, w)| *w != (lo, hi));
                                    if stale_tex {
                                        let img = tile_image(&t.display, lo, hi);
                                        match &mut t.texture {
                                            Some((h, w)) => {
                                                h.set(img, egui::TextureOptions::LINEAR);
                                                *w = (lo, hi);
                                            }
                                            None => {
                                                let h = ui.ctx().load_texture(
                                                    format!("grid-tile-{k}"),
                                                    img,
                                                    egui::TextureOptions::LINEAR,
                                                );
                                                t.texture = Some((h, (lo, hi)));
                                            }
                                        }
                                    }
                                    let d = &t.display;
                                    let wmm = d.width as f32 * d.pixel_mm[0];
                                    let hmm = d.height as f32 * d.pixel_mm[1];
                                    let f = side / wmm.max(hmm).max(1e-6);
                                    let size = egui::vec2(wmm * f, hmm * f);
                                    if let Some((h, _)) = &t.texture {
                                        let r = ui.add(
                                            egui::Image::new((h.id(), size))
                                                .sense(egui::Sense::click())
                                                .alt_text(format!("draw {k}, seed {}", t.seed)),
                                        );
                                        let ov = g.overlays.get_mut(k).and_then(Option::as_mut);
                                        let folded = ov
                                            .as_ref()
                                            .and_then(|o| o.view.jacobian.as_ref())
                                            .filter(|_| state.display.jacobian)
                                            .map(|j| {
                                                format!(
                                                    "\nplane folded {}",
                                                    overlay::fraction_text(j.folded, j.voxels)
                                                )
                                            })
                                            .unwrap_or_default();
                                        if let Some(o) = ov {
                                            paint_tile_overlay(ui, &state.display, k, o, r.rect);
                                        }
                                        let tip = g
                                            .samples
                                            .get(k)
                                            .map(|s| done_text(s, &spacing) + &folded)
                                            .unwrap_or_default();
                                        let r = r.on_hover_text(format!(
                                            "{tip}\n\nclick: these parameters into the views"
                                        ));
                                        if r.clicked() {
                                            picked = Some(k);
                                        }
                                    }
                                }
                                None => {
                                    let (rect, _) = ui.allocate_exact_size(
                                        egui::vec2(side, side * 0.8),
                                        egui::Sense::hover(),
                                    );
                                    ui.painter().rect_filled(
                                        rect,
                                        2.0,
                                        ui.visuals().extreme_bg_color,
                                    );
                                    if g.error.is_none() {
                                        ui.put(rect, egui::Spinner::new());
                                    }
                                }
                            }
                            ui.label(egui::RichText::new(format!("seed {seed}")).small());
                        });
                        if (k + 1) % cols == 0 {
                            ui.end_row();
                        }
                    }
                });
            if !g.samples.is_empty() {
                ui.separator();
                let hists = histogram_values(g);
                let of = g.samples.len();
                let pending = g
                    .samples
                    .iter()
                    .zip(&g.displacement)
                    .filter(|(s, d)| d.is_none() && s.plan.elastic.is_some_and(|e| e.alpha != 0.0))
                    .count();
                ui.horizontal_wrapped(|ui| {
                    for (title, unit, values) in &hists {
                        let pending = if title.starts_with("elastic") {
                            pending
                        } else {
                            0
                        };
                        histogram(ui, title, unit, values, of, pending);
                    }
                });
            }
            if !rt.hide_timings
                && let Some(first) = g.first_ms
            {
                let last = g
                    .last_ms
                    .map_or_else(|| "…".to_string(), |l| format!("{l:.0} ms"));
                ui.weak(format!("first tile {first:.0} ms, all tiles {last}"));
            }
        });
    if let Some(k) = picked {
        pick(state, rt, k);
    }
    if !open {
        rt.grid.close();
    }
}
