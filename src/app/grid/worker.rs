//! The grid's tile thread: the requests and replies it speaks ([`GridJob`], [`GridReply`]), its
//! engines, each request's draws, tiles and tile overlays, and the field thread beside it that
//! measures the realised elastic displacement once a request's tiles are done.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::time::Instant;

use eframe::egui;

use crate::app::overlay::{self, OverlayEngine, ViewOverlay};
use crate::app::slices::ViewGeom;
use crate::app::worker::GpuSlot;
use crate::augment::Plan;
use crate::augment::preset::{Preset, Sample};
use crate::core::volume::Volume;
use crate::engine::cpu::CpuBackend;
use crate::engine::{Backend, BackendSpec, EngineError, Job, Outputs, Plane, Precision};

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
    pub(super) texture: Option<egui::TextureHandle>,
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
        /// The affine map per channel of the preset's normalisation, which the tiles are in.
        normalized: Option<Vec<(f64, f64)>>,
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
        // A step that needs the whole channel (statistics, neighbours, the noise's counters), or
        // a mirror after the steps, cannot be computed from a plane: the whole grid, then its
        // plane.
        Some((axis, index)) if plan.steps_need_whole_volume() => {
            let mut full = vec![0f32; tile_len(image, None)];
            let whole = Outputs {
                image: &mut full,
                label: None,
            };
            engine.apply(job, whole)?;
            copy_plane(&full, &image.shape, axis, index, out.image);
            Ok(())
        }
        Some((axis, index)) => engine
            .apply_plane(job, Plane { axis, index }, Some(resident), out)
            .map(|_| ()),
        None => engine.apply(job, out).map(|_| ()),
    }
}

/// Plane `index` of `axis` of each channel of `full` (C order, channels first, spatial `shape`)
/// into `out`, channel by channel, the other axes in increasing order (as
/// `Backend::apply_plane` writes a plane).
fn copy_plane(full: &[f32], shape: &[usize], axis: usize, index: usize, out: &mut [f32]) {
    let n: usize = shape.iter().product();
    let outer: usize = shape[..axis].iter().product();
    let inner: usize = shape[axis + 1..].iter().product();
    let mut o = out.iter_mut();
    for ch in full.chunks(n.max(1)) {
        for a in 0..outer {
            let start = (a * shape[axis] + index) * inner;
            // The source first: zip takes from its first iterator before it knows the second
            // is done, which must not cost an output value.
            for (src, dst) in ch[start..start + inner].iter().zip(&mut o) {
                *dst = *src;
            }
        }
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
                .sample(
                    job.first_seed.wrapping_add(k as u64),
                    nd,
                    image.channels,
                    &image.spacing_mm,
                )
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
    // The preset's units: the scan normalised once per request, resident on a GPU under a key
    // of its own (the scan's key and the method).
    let mut resident = job.image_key;
    let mut normalized = None;
    let normalized_image;
    let image = match &job.preset.normalize {
        None => image,
        Some(n) => {
            let mut v = image.clone();
            match n.apply_volume(&mut v) {
                Ok(maps) => normalized = Some(maps),
                Err(message) => {
                    send(GridReply::Failed {
                        generation: job.generation,
                        message,
                    });
                    return None;
                }
            }
            use std::hash::{Hash, Hasher};
            let mut h = std::collections::hash_map::DefaultHasher::new();
            format!("{n:?}").hash(&mut h);
            resident = job.image_key ^ h.finish() | 1 << 63;
            normalized_image = v;
            &normalized_image
        }
    };
    if !send(GridReply::Samples {
        generation: job.generation,
        samples,
        normalized,
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
            .map(|g| tile(g.as_ref(), plan, image, job.plane, resident, &mut data));
        let r = match on_gpu {
            Some(Ok(())) => Ok(()),
            failed => {
                if let Some(Err(e)) = failed {
                    // Out of memory or a failed launch: this tile on the CPU, and say so.
                    note = Some(format!("CUDA: {e}; this tile used the CPU engine"));
                }
                let cpu = engines.cpu.as_ref();
                tile(cpu, plan, image, job.plane, resident, &mut data)
            }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::cpu::CpuBackend;

    /// A tile whose plan needs the whole channel (contrast) is the plane of the whole grid's
    /// result, in the order a plane apply writes it; a plan without such a step takes the plane
    /// path, which the same copy reproduces.
    #[test]
    fn whole_channel_tiles_are_planes_of_the_whole_grid() {
        let shape = vec![4, 5, 6];
        let n: usize = shape.iter().product();
        let image = Volume::new(
            (0..2 * n).map(|i| i as f32 * 0.5).collect(),
            shape.clone(),
            2,
        );
        let cpu = CpuBackend::new();
        // A flip moves voxels exactly: both paths give the same bits.
        let plan = Plan {
            flip: vec![1],
            ..Plan::default()
        };
        for axis in 0..3 {
            let index = shape[axis] / 2;
            let len = tile_len(&image, Some((axis, index)));
            let mut by_plane = vec![0f32; len];
            tile(&cpu, &plan, &image, Some((axis, index)), 1, &mut by_plane)
                .unwrap_or_else(|e| panic!("{e}"));
            let mut full = vec![0f32; 2 * n];
            tile(&cpu, &plan, &image, None, 1, &mut full).unwrap_or_else(|e| panic!("{e}"));
            let mut copied = vec![0f32; len];
            copy_plane(&full, &shape, axis, index, &mut copied);
            assert_eq!(copied, by_plane, "axis {axis}");
        }
        let contrast = Plan {
            intensity: vec![
                serde_json::from_str(r#"{"contrast": {"factors": [1.5]}}"#)
                    .unwrap_or_else(|e| panic!("{e}")),
            ],
            ..plan
        };
        let mut tile_out = vec![0f32; tile_len(&image, Some((1, 2)))];
        tile(&cpu, &contrast, &image, Some((1, 2)), 1, &mut tile_out)
            .unwrap_or_else(|e| panic!("{e}"));
        let mut full = vec![0f32; 2 * n];
        tile(&cpu, &contrast, &image, None, 1, &mut full).unwrap_or_else(|e| panic!("{e}"));
        let mut want = vec![0f32; tile_out.len()];
        copy_plane(&full, &shape, 1, 2, &mut want);
        assert_eq!(tile_out, want);
    }
}
