//! Latency of the explorer's interactive path without a window (`augscope bench --latency`):
//! the same [`Worker`] the window uses receives each parameter change as the window posts it
//! ([`Compute`] built as `App::sync` builds it), and the clock stops when the three planes of
//! that change are ready to upload — a slice-only answer (CPU engine), or the planes cut from the
//! whole volume (CUDA engine), as the window cuts them. No display, no wgpu: it runs on a
//! headless GPU server.
//!
//! Changes are posted as during a slider drag: the next one `gap` after the planes of the last
//! (shorter than the worker's fill delay, so no whole-volume fill runs in between). Volumes are
//! `[z, y, x]`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::core::volume::Volume;
use crate::engine::{BackendSpec, Precision};
use crate::io::{self, SaveOptions};

use super::slices;
use super::state::{BackendChoice, Params};
use super::worker::{Compute, Reply, Worker};

/// What to measure.
#[derive(Clone, Debug)]
pub struct LatencyOptions {
    pub backend: BackendSpec,
    pub precision: Precision,
    /// A synthetic volume of this shape instead of a file.
    pub shape: Option<Vec<usize>>,
    /// The scan (and label map) to open; the bundled sample when `None` and no shape is given.
    pub input: Option<PathBuf>,
    pub label: Option<PathBuf>,
    /// Timed changes per kind, after `warmup` untimed ones.
    pub steps: usize,
    pub warmup: usize,
    /// Pause between the planes of one change and the next change.
    pub gap: Duration,
}

impl Default for LatencyOptions {
    fn default() -> Self {
        LatencyOptions {
            backend: BackendSpec::Auto,
            precision: Precision::F32,
            shape: None,
            input: None,
            label: None,
            steps: 20,
            warmup: 2,
            gap: Duration::from_millis(30),
        }
    }
}

/// Latency of one kind of change.
#[derive(Clone, Debug, Serialize)]
pub struct LatencyRow {
    pub change: String,
    pub shape: String,
    /// Where the planes came from: `slices` (the plane path) or the engine of the whole volume.
    pub path: String,
    pub n: usize,
    /// Parameter posted → three planes ready, median, 95th percentile and max.
    pub median_ms: f64,
    pub p95_ms: f64,
    pub max_ms: f64,
    /// Of which the worker's computation (slice-only or whole transform), median.
    pub compute_median_ms: f64,
}

/// The `q` quantile (nearest rank) of sorted values.
fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// A smooth synthetic scan in [0, 1) with some fine texture, so every interpolation tap matters.
fn synthetic(shape: &[usize]) -> Volume {
    use rayon::prelude::*;
    let (d, h, w) = (shape[0], shape[1], shape[2]);
    let mut data = vec![0f32; d * h * w];
    data.par_chunks_mut(h * w)
        .enumerate()
        .for_each(|(z, plane)| {
            for (i, v) in plane.iter_mut().enumerate() {
                let (y, x) = (i / w, i % w);
                let (fz, fy, fx) = (
                    z as f32 / d as f32,
                    y as f32 / h as f32,
                    x as f32 / w as f32,
                );
                let smooth = 0.5
                    + 0.25 * (6.0 * fz).sin() * (5.0 * fy).cos()
                    + 0.2 * (7.0 * fx + 3.0 * fy).sin();
                let texture = ((x * 7 + y * 13 + z * 29) % 17) as f32 / 170.0;
                *v = (smooth + texture).clamp(0.0, 0.999);
            }
        });
    Volume::new(data, shape.to_vec(), 1)
}

/// Waits for a reply that `pick` accepts (others are dropped), at most `timeout`.
fn wait_for<T>(
    w: &Worker,
    timeout: Duration,
    mut pick: impl FnMut(Reply) -> Option<Result<T, String>>,
) -> Result<T, String> {
    let end = Instant::now() + timeout;
    loop {
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(format!(
                "the worker did not answer within {} s",
                timeout.as_secs()
            ));
        }
        if let Some(r) = w.recv_timeout(left)
            && let Some(v) = pick(r)
        {
            return v;
        }
    }
}

/// The engine choice the window makes for a `--backend` request (auto: the first CUDA device
/// when there is one).
fn window_choice(spec: &BackendSpec) -> BackendChoice {
    match spec {
        BackendSpec::Cpu => BackendChoice::Cpu,
        BackendSpec::Cuda(ids) => BackendChoice::Cuda(ids.first().copied().unwrap_or(0)),
        BackendSpec::Auto => BackendChoice::Auto,
    }
}

/// `189×233×197`.
fn shape_text(shape: &[usize]) -> String {
    shape
        .iter()
        .map(|n| n.to_string())
        .collect::<Vec<_>>()
        .join("×")
}

/// How long the measurement waits for any one answer of the worker.
const TIMEOUT: Duration = Duration::from_secs(600);

/// A parameter change of one kind: step `i` of the slider drag.
type Change = fn(&mut Params, usize);

/// The kinds of change measured, in order, each as a slider drag moves it.
const KINDS: [(&str, Change); 4] = [
    ("angle", |p, i| p.rotate_deg[0] = 2.0 + 1.5 * i as f64),
    ("alpha", |p, i| p.alpha = 820.0 + 10.0 * i as f64),
    ("sigma", |p, i| p.sigma_vox = 12.5 + 0.5 * (i % 16) as f64),
    ("seed", |p, i| p.seed = 1000 + i as u64),
];

/// Runs the measurement; `log` receives progress lines.
pub fn run(opts: &LatencyOptions, mut log: impl FnMut(&str)) -> Result<Vec<LatencyRow>, String> {
    let worker = Worker::spawn(|| {}).map_err(|e| format!("cannot start the worker: {e}"))?;
    let devices = wait_for(&worker, TIMEOUT, |r| match r {
        Reply::Devices(d) => Some(Ok(d)),
        _ => None,
    })?;
    let (path, image) = load_input(opts, &worker)?;
    // The engine as the window picks it (auto: the first CUDA device when there is one).
    let choice = window_choice(&opts.backend);
    let mut probe = Probe {
        worker: &worker,
        spec: choice.spec(!devices.devices.is_empty()),
        views: slices::views(&image),
        cursor: image.shape.iter().map(|n| n / 2).collect(),
        shape_txt: shape_text(&image.shape),
        image,
        generation: 0,
    };
    log(&format!(
        "latency: {} ({}), engine {:?}, {} timed changes per kind after {} warm-up",
        path.display(),
        probe.shape_txt,
        probe.spec,
        opts.steps,
        opts.warmup
    ));
    let mut params = Params {
        elastic: true,
        alpha: 800.0,
        sigma_vox: 12.0,
        seed: 42,
        backend: choice,
        precision: opts.precision,
        ..Params::default()
    };
    let mut rows = vec![];
    for (name, change) in KINDS {
        let row = probe.measure(opts, &mut params, name, change)?;
        log(&format_row(&row));
        // Let the whole-volume fill of the last change finish, so the next kind starts at rest
        // (on the CUDA path the planes came from that volume already).
        let from_volume = row.path != "slices";
        rows.push(row);
        if !from_volume {
            probe.wait_for_fill()?;
        }
    }
    Ok(rows)
}

/// Opens the input in `worker` as the window opens it: the file of `opts` (the bundled sample
/// when none), or a synthetic volume of `opts.shape` written where the worker can load it.
/// Returns its path and the loaded scan, which must be 3D.
fn load_input(opts: &LatencyOptions, worker: &Worker) -> Result<(PathBuf, Arc<Volume>), String> {
    let tmp = std::env::temp_dir().join(format!("augscope-latency-{}", std::process::id()));
    let (path, label) = match (&opts.shape, &opts.input) {
        (Some(shape), _) => {
            if shape.len() != 3 || shape.contains(&0) {
                return Err(format!("--shape needs three positive sizes, got {shape:?}"));
            }
            std::fs::create_dir_all(&tmp).map_err(|e| format!("{e}: {}", tmp.display()))?;
            let p = tmp.join("synthetic.npy");
            io::save(&p, &synthetic(shape), &SaveOptions::default()).map_err(|e| e.to_string())?;
            (p, None)
        }
        (None, Some(p)) => (p.clone(), opts.label.clone()),
        (None, None) => (super::sample(), Some(super::sample_label())),
    };
    worker.load(path.clone(), label);
    let loaded = wait_for(worker, TIMEOUT, |r| match r {
        Reply::Loaded(l) => Some(l),
        _ => None,
    });
    if opts.shape.is_some() {
        let _ = std::fs::remove_dir_all(&tmp);
    }
    let loaded = loaded?;
    let image: Arc<Volume> = loaded.image.clone();
    if image.ndim() != 3 {
        return Err(format!(
            "the latency bench needs a 3D scan: {}",
            path.display()
        ));
    }
    Ok((path, image))
}

/// The loaded scan in the worker, the engine and the planes on screen: what every change of the
/// measurement posts and waits for.
struct Probe<'a> {
    worker: &'a Worker,
    spec: BackendSpec,
    image: Arc<Volume>,
    views: Vec<slices::ViewGeom>,
    cursor: Vec<usize>,
    shape_txt: String,
    /// The generation of the last change posted.
    generation: u64,
}

impl Probe<'_> {
    /// The row of one kind of change: `opts.warmup` untimed and `opts.steps` timed changes made
    /// by `change` to `params`, each posted `opts.gap` after the planes of the last.
    fn measure(
        &mut self,
        opts: &LatencyOptions,
        params: &mut Params,
        name: &str,
        change: Change,
    ) -> Result<LatencyRow, String> {
        let mut total = vec![];
        let mut compute = vec![];
        let mut path_name = String::new();
        for i in 0..opts.warmup + opts.steps {
            change(params, i);
            let (ms, ms_compute, via) = self.post(params)?;
            if i >= opts.warmup {
                total.push(ms);
                compute.push(ms_compute);
            }
            path_name = via;
            std::thread::sleep(opts.gap);
        }
        total.sort_by(f64::total_cmp);
        compute.sort_by(f64::total_cmp);
        Ok(LatencyRow {
            change: name.into(),
            shape: self.shape_txt.clone(),
            path: path_name,
            n: total.len(),
            median_ms: quantile(&total, 0.5),
            p95_ms: quantile(&total, 0.95),
            max_ms: total.last().copied().unwrap_or(f64::NAN),
            compute_median_ms: quantile(&compute, 0.5),
        })
    }

    /// Posts `params` as the next generation and waits until its three planes are ready: the
    /// time from posting to planes ready and the worker's compute time (ms), and where the planes
    /// came from.
    fn post(&mut self, params: &Params) -> Result<(f64, f64, String), String> {
        self.generation += 1;
        let g = self.generation;
        let c = Compute {
            generation: g,
            plan: params.to_plan(3, &[1.0; 3]),
            backend: self.spec.clone(),
            precision: params.precision,
            cursor: self.cursor.clone(),
            views: self.views.clone(),
            slices_first: true,
            filter: None,
            normalize: None,
            model: Default::default(),
        };
        let t = Instant::now();
        self.worker.compute(c);
        let (ms_compute, via) = wait_for(self.worker, TIMEOUT, |r| match r {
            Reply::Slices(s) if s.generation == g => Some(Ok((s.elapsed_ms, "slices".to_string()))),
            Reply::Full(f) if f.generation == g => {
                // The window cuts the planes on screen from the whole volume.
                let planes: Vec<_> = self
                    .views
                    .iter()
                    .map(|v| {
                        let idx = v.normal.map_or(0, |a| self.cursor[a]);
                        slices::extract(
                            &f.image.data,
                            &f.image.shape,
                            f.image.channels,
                            &self.image.spacing_mm,
                            v,
                            idx,
                        )
                    })
                    .collect();
                drop(planes);
                Some(Ok((
                    f.timings.total_ms,
                    format!("whole volume on {}", f.backend),
                )))
            }
            Reply::Failed {
                generation,
                message,
            } if generation == g => Some(Err(message)),
            _ => None,
        })?;
        Ok((t.elapsed().as_secs_f64() * 1e3, ms_compute, via))
    }

    /// Waits for the whole-volume fill of the last change posted.
    fn wait_for_fill(&self) -> Result<(), String> {
        let g = self.generation;
        wait_for(self.worker, TIMEOUT, |r| match r {
            Reply::Full(f) if f.generation == g => Some(Ok(())),
            Reply::Failed {
                generation,
                message,
            } if generation == g => Some(Err(message)),
            _ => None,
        })
    }
}

/// The grid of draws ("What training will see", [`super::grid`]) through the window's own grid
/// thread: for `opts.steps` requests, each with new seeds, the time from the request to the first
/// and to the last of its `n` tiles (the axial plane at the centre of the scan), on the engine of
/// `opts.backend`. Rows: the first tile and the last tile.
pub fn grid(
    opts: &LatencyOptions,
    n: usize,
    preset: &crate::augment::preset::Preset,
    mut log: impl FnMut(&str),
) -> Result<Vec<LatencyRow>, String> {
    use super::grid::{GridJob, GridReply, GridWorker};
    const TIMEOUT: Duration = Duration::from_secs(600);
    let (path, image) = match (&opts.shape, &opts.input) {
        (Some(shape), _) => {
            if shape.len() != 3 || shape.contains(&0) {
                return Err(format!("--shape needs three positive sizes, got {shape:?}"));
            }
            (PathBuf::from("synthetic"), synthetic(shape))
        }
        (None, input) => {
            let p = input.clone().unwrap_or_else(super::sample);
            let v = io::load(&p, &Default::default()).map_err(|e| e.to_string())?;
            (p, v)
        }
    };
    if image.ndim() != 3 {
        return Err(format!(
            "the grid bench needs a 3D scan: {}",
            path.display()
        ));
    }
    let devices = crate::gpu::device::discover();
    let choice = window_choice(&opts.backend);
    let backend = choice.spec(!devices.devices.is_empty());
    let shape_txt = shape_text(&image.shape);
    let plane = Some((0, image.shape[0] / 2));
    let image = Arc::new(image);
    let side = (n as f64).sqrt().round() as usize;
    log(&format!(
        "grid: {} ({shape_txt}), {side}×{side} draws of {}, engine {backend:?}, {} timed requests \
         after {} warm-up",
        path.display(),
        preset.name,
        opts.steps,
        opts.warmup
    ));
    let worker =
        GridWorker::spawn(|| {}).map_err(|e| format!("cannot start the grid thread: {e}"))?;
    let (mut first, mut last, mut per_tile) = (vec![], vec![], vec![]);
    let mut engine = String::new();
    for step in 0..opts.warmup + opts.steps {
        let generation = step as u64 + 1;
        let t0 = Instant::now();
        worker.request(GridJob {
            generation,
            image: image.clone(),
            image_key: 1,
            preset: preset.clone(),
            n,
            first_seed: (step * n) as u64,
            plane,
            backend: backend.clone(),
            precision: opts.precision,
        });
        let (mut got, mut t_first, mut tiles_ms) = (0, 0.0, vec![]);
        let end = t0 + TIMEOUT;
        while got < n {
            if Instant::now() > end {
                return Err(format!(
                    "the grid did not finish within {} s",
                    TIMEOUT.as_secs()
                ));
            }
            match worker.try_recv() {
                Some(GridReply::Tile {
                    generation: g,
                    ms,
                    note,
                    ..
                }) if g == generation => {
                    if got == 0 {
                        t_first = t0.elapsed().as_secs_f64() * 1e3;
                    }
                    got += 1;
                    tiles_ms.push(ms);
                    engine = note.unwrap_or_else(|| format!("{backend:?}").to_lowercase());
                }
                Some(GridReply::Failed { message, .. }) => return Err(message),
                Some(_) => {}
                None => std::thread::sleep(Duration::from_micros(200)),
            }
        }
        if step >= opts.warmup {
            first.push(t_first);
            last.push(t0.elapsed().as_secs_f64() * 1e3);
            per_tile.extend(tiles_ms);
        }
    }
    let row = |change: String, mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        let mut t = per_tile.clone();
        t.sort_by(f64::total_cmp);
        LatencyRow {
            change,
            shape: shape_txt.clone(),
            path: engine.clone(),
            n: v.len(),
            median_ms: quantile(&v, 0.5),
            p95_ms: quantile(&v, 0.95),
            max_ms: v.last().copied().unwrap_or(f64::NAN),
            compute_median_ms: quantile(&t, 0.5),
        }
    };
    Ok(vec![
        row(format!("grid {side}×{side}: first tile"), first),
        row(format!("grid {side}×{side}: last tile"), last),
    ])
}

pub fn format_row(r: &LatencyRow) -> String {
    format!(
        "{:<6} {:>12}  median {:7.1} ms  p95 {:7.1} ms  max {:7.1} ms  (worker {:6.1} ms)  n={}  {}",
        r.change, r.shape, r.median_ms, r.p95_ms, r.max_ms, r.compute_median_ms, r.n, r.path
    )
}

/// The rows as a text table.
pub fn table(rows: &[LatencyRow]) -> String {
    let grid = rows.iter().any(|r| r.change.starts_with("grid"));
    let mut s = String::from(if grid {
        "grid request -> tiles ready (the explorer's grid thread, headless; in brackets: one \
         tile's compute)\n"
    } else {
        "slider change -> three planes ready (the explorer's worker, headless)\n"
    });
    for r in rows {
        s.push_str(&format_row(r));
        s.push('\n');
    }
    s
}
