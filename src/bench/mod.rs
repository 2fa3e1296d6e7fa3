//! `augscope bench`: CPU and CUDA times of the three pipelines (rotate, elastic, full) on one
//! run, beside the device-to-device copy bandwidth and the floor it implies (bytes that must move
//! / bandwidth).
//!
//! Volumes are `[z, y, x]` f32 with values in [0, 1). Pipelines (order 1, constant, as
//! batchgenerators): rotate-only (0.3, 0.2, 0.4 rad), elastic-only (alpha 800, sigma 12) and full
//! (elastic + rotation + scale 0.85). Each elastic repetition uses a new seed, so the field is
//! recomputed every time (as for a new training sample); the "cached" column is the same plan
//! with the field already on the device (moving alpha or an angle in the GUI).
//!
//! Device times come from CUDA events inside the engine (field, prefilter, resample); host→host is
//! the wall time of `Backend::apply` from the host input to the host output, pinned staging
//! included. Medians over `reps` runs after `warmup` runs.

pub mod filters;

use std::time::Instant;

use serde::Serialize;

use crate::augment::{Elastic, Mode, Order, Plan};
use crate::core::volume::Volume;
use crate::engine::cpu::CpuBackend;
use crate::engine::cuda::{self, CudaBackend};
use crate::engine::{Backend, BackendSpec, EngineError, Job, Outputs, Precision, Timings};

/// What to run.
#[derive(Clone, Debug)]
pub struct BenchOptions {
    pub backend: BackendSpec,
    pub precision: Precision,
    pub shapes: Vec<Vec<usize>>,
    /// Timed GPU repetitions (median reported); at least 10.
    pub reps: usize,
    pub warmup: usize,
    /// Timed CPU repetitions (0: no CPU rows).
    pub cpu_reps: usize,
    /// The spatial pipeline rows (over `shapes`).
    pub spatial: bool,
    /// The filter rows (`filters`: fixed shapes).
    pub filters: bool,
    /// Interpolation order of the pipelines (order 1 unless asked).
    pub order: Order,
}

impl Default for BenchOptions {
    fn default() -> Self {
        BenchOptions {
            backend: BackendSpec::Auto,
            precision: Precision::F32,
            shapes: vec![vec![48, 240, 240], vec![128, 256, 256], vec![256, 512, 512]],
            reps: 10,
            warmup: 2,
            cpu_reps: 1,
            spatial: true,
            filters: false,
            order: Order::Linear,
        }
    }
}

/// One row of the table.
#[derive(Clone, Debug, Serialize)]
pub struct BenchRow {
    pub shape: String,
    pub variant: String,
    pub engine: String,
    /// Device time of one new sample: field + prefilter + resample (CUDA events), median.
    pub device_ms: Option<f64>,
    /// Of which the fused resample kernel, median.
    pub resample_ms: Option<f64>,
    /// Of which the elastic field (noise + 3 separable passes per component), median.
    pub field_ms: Option<f64>,
    /// Host→host wall time of `apply`, median (CPU: its whole run).
    pub host_ms: f64,
    pub host_min_ms: f64,
    /// Host→host with the field cached on the device (alpha or an angle moved).
    pub host_cached_ms: Option<f64>,
    /// Device time with the field cached: the resample alone.
    pub device_cached_ms: Option<f64>,
    /// Floor of the device time: bytes that must move / copy bandwidth, for a new sample.
    pub floor_ms: Option<f64>,
    /// Floor with the field cached (read image + field, write output).
    pub floor_cached_ms: Option<f64>,
    /// augscope's peak device memory over this row, in volumes of the input's f32 size.
    pub peak_device_volumes: Option<f64>,
    pub reps: usize,
}

/// The whole run.
#[derive(Clone, Debug, Serialize)]
pub struct BenchReport {
    pub device: Option<String>,
    /// Device-to-device copy bandwidth, bytes read + written per second.
    pub d2d_bytes_per_s: Option<f64>,
    /// Pinned host↔device copy rates: the floor of the host→host figures.
    pub pcie: Option<cuda::PcieRates>,
    pub note: Option<String>,
    pub rows: Vec<BenchRow>,
}

/// The median of `v` (sorted in place); NaN when empty.
pub(crate) fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() {
        return f64::NAN;
    }
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        0.5 * (v[m - 1] + v[m])
    }
}

/// The row name of a pipeline: its name, with the order when it is not the default order 1.
fn variant_name(variant: &str, order: Order) -> String {
    if order == Order::Linear {
        variant.to_string()
    } else {
        format!("{variant} order {}", order.as_u32())
    }
}

/// Samples of the batched rows, for shapes of at most `BATCH_MAX_VOXELS` voxels.
const BATCH: usize = 32;
const BATCH_MAX_VOXELS: usize = 1 << 23;

/// The three pipelines (at order 1; `order` for the same pipelines at another order).
pub fn plans(order: Order) -> Vec<(&'static str, Plan)> {
    let base = Plan {
        order,
        mode: Mode::Constant,
        ..Plan::default()
    };
    let rot = vec![0.3, 0.2, 0.4];
    let el = Some(Elastic {
        alpha: 800.0,
        sigma: 12.0,
        seed: 1,
    });
    vec![
        (
            "rotate",
            Plan {
                rotate_rad: rot.clone(),
                ..base.clone()
            },
        ),
        (
            "elastic",
            Plan {
                elastic: el,
                ..base.clone()
            },
        ),
        (
            "full",
            Plan {
                rotate_rad: rot,
                scale: vec![0.85],
                elastic: el,
                ..base
            },
        ),
    ]
}

fn test_volume(shape: &[usize]) -> Volume {
    let n: usize = shape.iter().product();
    let mut s: u64 = 0x2545_F491_4F6C_DD1D;
    let data = (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 40) as f32 / (1u64 << 24) as f32
        })
        .collect();
    Volume::new(data, shape.to_vec(), 1)
}

fn with_seed(plan: &Plan, seed: u64) -> Plan {
    let mut p = plan.clone();
    if let Some(e) = &mut p.elastic {
        e.seed = seed;
    }
    p
}

fn run_once(
    b: &dyn Backend,
    plan: &Plan,
    img: &Volume,
    out: &mut [f32],
) -> Result<(Timings, f64), EngineError> {
    let t = Instant::now();
    let tm = b.apply(
        Job {
            plan,
            image: img,
            label: None,
        },
        Outputs {
            image: out,
            label: None,
        },
    )?;
    Ok((tm, t.elapsed().as_secs_f64() * 1e3))
}

/// Runs the benchmark; `progress` receives one line per finished row.
pub fn run(
    opts: &BenchOptions,
    mut progress: impl FnMut(&str),
) -> Result<BenchReport, EngineError> {
    let gpu = open_gpu(opts, &mut progress);
    let mut report = BenchReport {
        device: None,
        d2d_bytes_per_s: None,
        pcie: None,
        note: None,
        rows: vec![],
    };
    if let Some(g) = &gpu {
        report.device = device_name(g);
        report.d2d_bytes_per_s = Some(copy_bandwidth(g, &mut progress)?);
        report.pcie = Some(host_bandwidth(g, &mut progress)?);
    }
    let reps = opts.reps.max(10);
    let shapes: &[Vec<usize>] = if opts.spatial { &opts.shapes } else { &[] };
    for shape in shapes {
        let rows = spatial_rows(
            opts,
            gpu.as_ref(),
            shape,
            reps,
            report.d2d_bytes_per_s,
            &mut progress,
        )?;
        report.rows.extend(rows);
    }
    if opts.filters {
        let ord = gpu.as_ref().map(|g| g.ordinals()[0]);
        let rows = filters::rows(
            ord,
            opts.precision,
            reps,
            opts.cpu_reps,
            report.d2d_bytes_per_s,
            |r| progress(&format_row(r)),
        )?;
        report.rows.extend(rows);
    }
    Ok(report)
}

/// The CUDA engine when `opts.backend` asks for one and it starts; `None` (and a progress line
/// when it fails) otherwise.
fn open_gpu(opts: &BenchOptions, progress: &mut dyn FnMut(&str)) -> Option<CudaBackend> {
    if matches!(opts.backend, BackendSpec::Cpu) {
        return None;
    }
    let ids = match &opts.backend {
        BackendSpec::Cuda(ids) => ids.clone(),
        _ => vec![],
    };
    match CudaBackend::new(&ids, opts.precision) {
        Ok(g) => Some(g),
        Err(e) => {
            progress(&format!("CUDA engine unavailable ({e}); CPU rows only"));
            None
        }
    }
}

/// The report's name of the engine's first device: `cuda:N name sm_XY`.
fn device_name(g: &CudaBackend) -> Option<String> {
    let ord = g.ordinals()[0];
    crate::gpu::device::discover()
        .devices
        .into_iter()
        .find(|d| d.ordinal == ord)
        .map(|d| {
            format!(
                "cuda:{} {} sm_{}{}",
                d.ordinal, d.name, d.compute_capability.0, d.compute_capability.1
            )
        })
}

/// Measures the device-to-device copy bandwidth of the engine's first device (bytes read +
/// written per second) and reports it on `progress`.
fn copy_bandwidth(g: &CudaBackend, progress: &mut dyn FnMut(&str)) -> Result<f64, EngineError> {
    let bw = cuda::d2d_bandwidth(g.ordinals()[0], 1 << 31, 20)?;
    progress(&format!(
        "device-to-device copy: {:.2} TB/s (read + write, 2 GiB buffer)",
        bw / 1e12
    ));
    Ok(bw)
}

/// Measures the pinned host↔device copy rates of the engine's first device (256 MiB transfers)
/// and reports them on `progress`.
fn host_bandwidth(
    g: &CudaBackend,
    progress: &mut dyn FnMut(&str),
) -> Result<cuda::PcieRates, EngineError> {
    let r = cuda::pcie_bandwidth(g.ordinals()[0], 1 << 28, 10)?;
    progress(&pcie_line(&r));
    Ok(r)
}

fn pcie_line(r: &cuda::PcieRates) -> String {
    format!(
        "pinned host copies: to the device {:.1} GB/s, to the host {:.1} GB/s; both at once {:.1} / {:.1} GB/s (256 MiB transfers)",
        r.h2d / 1e9,
        r.d2h / 1e9,
        r.duplex_h2d / 1e9,
        r.duplex_d2h / 1e9
    )
}

/// One shape of the spatial rows: its test volume, an output buffer and its name in the table.
struct SpatialShape {
    img: Volume,
    out: Vec<f32>,
    voxels: usize,
    /// Bytes of one f32 volume of this shape.
    vol_bytes: f64,
    name: String,
}

impl SpatialShape {
    /// The test volume of `shape` and a zeroed output of the same size.
    fn new(shape: &[usize]) -> Self {
        let voxels: usize = shape.iter().product();
        SpatialShape {
            img: test_volume(shape),
            out: vec![0f32; voxels],
            voxels,
            vol_bytes: (voxels * 4) as f64,
            name: shape
                .iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join("x"),
        }
    }
}

/// The spatial rows of one shape, each reported on `progress` as it finishes: every pipeline on
/// the GPU and then the CPU, and the batched GPU row for small shapes.
fn spatial_rows(
    opts: &BenchOptions,
    gpu: Option<&CudaBackend>,
    shape: &[usize],
    reps: usize,
    d2d_bytes_per_s: Option<f64>,
    progress: &mut dyn FnMut(&str),
) -> Result<Vec<BenchRow>, EngineError> {
    let mut s = SpatialShape::new(shape);
    let bw = d2d_bytes_per_s.unwrap_or(f64::NAN);
    let mut rows = vec![];
    let mut push = |row: BenchRow| {
        progress(&format_row(&row));
        rows.push(row);
    };
    for (variant, plan) in plans(opts.order) {
        if let Some(g) = gpu {
            push(gpu_row(g, opts, reps, bw, variant, &plan, &mut s)?);
        }
        if opts.cpu_reps > 0 {
            push(cpu_row(opts, variant, &plan, &mut s)?);
        }
    }
    if let Some(g) = gpu
        && s.voxels <= BATCH_MAX_VOXELS
    {
        push(batch_row(g, opts, reps, bw, &s)?);
    }
    if let Some(g) = gpu {
        g.clear_cache();
    }
    Ok(rows)
}

/// The GPU row of one pipeline: `reps` new samples (a new seed each) after the warm-up, then,
/// when elastic, `reps` runs with the field cached on the device (only alpha moves).
fn gpu_row(
    g: &CudaBackend,
    opts: &BenchOptions,
    reps: usize,
    bw: f64,
    variant: &str,
    plan: &Plan,
    s: &mut SpatialShape,
) -> Result<BenchRow, EngineError> {
    let elastic = plan.elastic.is_some();
    g.clear_cache();
    g.reset_peak();
    let mut seed = 1000u64;
    for _ in 0..opts.warmup.max(1) {
        seed += 1;
        run_once(g, &with_seed(plan, seed), &s.img, &mut s.out)?;
    }
    let (mut dev, mut rs, mut fld, mut host) = (vec![], vec![], vec![], vec![]);
    for _ in 0..reps {
        seed += 1;
        let (t, wall) = run_once(g, &with_seed(plan, seed), &s.img, &mut s.out)?;
        dev.push(t.field_ms + t.prefilter_ms + t.resample_ms);
        rs.push(t.resample_ms);
        fld.push(t.field_ms);
        host.push(wall);
    }
    let (mut dc, mut hc) = (vec![], vec![]);
    if elastic {
        // Same seed again: the field stays on the device; only alpha changes.
        for i in 0..reps {
            let mut p = with_seed(plan, seed);
            if let Some(e) = &mut p.elastic {
                e.alpha = 800.0 + i as f64;
            }
            let (t, wall) = run_once(g, &p, &s.img, &mut s.out)?;
            dc.push(t.field_ms + t.prefilter_ms + t.resample_ms);
            hc.push(wall);
        }
    }
    // Bytes that must move: the resample reads the image (and the field when
    // elastic) and writes the output; a new field writes the noise pass and reads +
    // writes each later pass, for each of the 3 components.
    let resample_bytes = s.vol_bytes * if elastic { 5.0 } else { 2.0 };
    let field_bytes = if elastic {
        s.vol_bytes * 3.0 * 5.0
    } else {
        0.0
    };
    let peak = g
        .mem_stats()
        .first()
        .map(|m| m.peak_bytes as f64 / s.vol_bytes);
    let host_min = host.iter().cloned().fold(f64::INFINITY, f64::min);
    Ok(BenchRow {
        shape: s.name.clone(),
        variant: variant_name(variant, opts.order),
        engine: g.name(),
        device_ms: Some(median(&mut dev)),
        resample_ms: Some(median(&mut rs)),
        field_ms: Some(median(&mut fld)),
        host_ms: median(&mut host),
        host_min_ms: host_min,
        host_cached_ms: elastic.then(|| median(&mut hc)),
        device_cached_ms: elastic.then(|| median(&mut dc)),
        floor_ms: Some((resample_bytes + field_bytes) / bw * 1e3),
        floor_cached_ms: Some(resample_bytes / bw * 1e3),
        peak_device_volumes: peak,
        reps,
    })
}

/// The CPU row of one pipeline: `opts.cpu_reps` runs, a new seed each, no warm-up.
fn cpu_row(
    opts: &BenchOptions,
    variant: &str,
    plan: &Plan,
    s: &mut SpatialShape,
) -> Result<BenchRow, EngineError> {
    let cpu = CpuBackend::new();
    let mut host = vec![];
    for i in 0..opts.cpu_reps {
        let (_, wall) = run_once(&cpu, &with_seed(plan, 5000 + i as u64), &s.img, &mut s.out)?;
        host.push(wall);
    }
    let host_min = host.iter().cloned().fold(f64::INFINITY, f64::min);
    Ok(BenchRow {
        shape: s.name.clone(),
        variant: variant_name(variant, opts.order),
        engine: format!("cpu ({} threads)", rayon::current_num_threads()),
        device_ms: None,
        resample_ms: None,
        field_ms: None,
        host_ms: median(&mut host),
        host_min_ms: host_min,
        host_cached_ms: None,
        device_cached_ms: None,
        floor_ms: None,
        floor_cached_ms: None,
        peak_device_volumes: None,
        reps: opts.cpu_reps,
    })
}

/// The batched GPU row: many small volumes at once, `BATCH` samples of the full pipeline (new
/// seeds, one image) through `apply_batch`, i.e. batched launches; per-sample times.
fn batch_row(
    g: &CudaBackend,
    opts: &BenchOptions,
    reps: usize,
    bw: f64,
    s: &SpatialShape,
) -> Result<BenchRow, EngineError> {
    g.clear_cache();
    let plan = plans(opts.order)
        .into_iter()
        .find(|(v, _)| *v == "full")
        .map(|(_, p)| p)
        .ok_or_else(|| EngineError::Cuda("no full pipeline".into()))?;
    let mut outs: Vec<Vec<f32>> = (0..BATCH).map(|_| vec![0f32; s.voxels]).collect();
    let (mut dev, mut rs, mut fld, mut host) = (vec![], vec![], vec![], vec![]);
    let mut launches = 0;
    for rep in 0..reps + opts.warmup.max(1) {
        let (sum, n_launches, wall) = run_batch(g, &plan, rep, &s.img, &mut outs)?;
        launches = n_launches;
        if rep >= opts.warmup.max(1) {
            let b = BATCH as f64;
            dev.push((sum.field_ms + sum.resample_ms) / b);
            rs.push(sum.resample_ms / b);
            fld.push(sum.field_ms / b);
            host.push(wall / b);
        }
    }
    let host_min = host.iter().cloned().fold(f64::INFINITY, f64::min);
    Ok(BenchRow {
        shape: s.name.clone(),
        variant: format!(
            "{}, {BATCH} samples in {launches} batch(es), per sample",
            variant_name("full", opts.order)
        ),
        engine: g.name(),
        device_ms: Some(median(&mut dev)),
        resample_ms: Some(median(&mut rs)),
        field_ms: Some(median(&mut fld)),
        host_ms: median(&mut host),
        host_min_ms: host_min,
        host_cached_ms: None,
        device_cached_ms: None,
        floor_ms: Some(s.vol_bytes * 20.0 / bw * 1e3),
        floor_cached_ms: None,
        peak_device_volumes: g
            .mem_stats()
            .first()
            .map(|m| m.peak_bytes as f64 / s.vol_bytes),
        reps,
    })
}

/// One `apply_batch` of `BATCH` samples of `plan` (repetition `rep` picks their seeds) into
/// `outs`: the timings summed over its distinct launches, the number of launches, and the wall
/// time in ms.
fn run_batch(
    g: &CudaBackend,
    plan: &Plan,
    rep: usize,
    img: &Volume,
    outs: &mut [Vec<f32>],
) -> Result<(Timings, usize, f64), EngineError> {
    let batch_plans: Vec<Plan> = (0..BATCH)
        .map(|k| with_seed(plan, 20_000 + (rep * BATCH + k) as u64))
        .collect();
    let jobs: Vec<(Job<'_>, Outputs<'_>)> = batch_plans
        .iter()
        .zip(outs.iter_mut())
        .map(|(p, o)| {
            (
                Job {
                    plan: p,
                    image: img,
                    label: None,
                },
                Outputs {
                    image: o,
                    label: None,
                },
            )
        })
        .collect();
    let t = Instant::now();
    let results = g.apply_batch(jobs);
    let wall = t.elapsed().as_secs_f64() * 1e3;
    // Each batched launch reports the timings of its samples together: sum the
    // distinct launches (consecutive runs of equal `batched` timings).
    let mut sum = Timings::default();
    let mut k = 0;
    let mut launches = 0;
    let results: Vec<Timings> = results.into_iter().collect::<Result<_, _>>()?;
    while k < results.len() {
        let t = &results[k];
        sum.field_ms += t.field_ms;
        sum.resample_ms += t.resample_ms;
        launches += 1;
        k += t.batched.unwrap_or(1);
    }
    Ok((sum, launches, wall))
}

fn opt(v: Option<f64>) -> String {
    v.map_or("-".into(), |x| format!("{x:.3}"))
}

/// One human-readable line of a row.
pub fn format_row(r: &BenchRow) -> String {
    format!(
        "{:>12} {:<8} {:<22} device {:>9} ms (resample {:>8}, field {:>8}; cached {:>8}) floor {:>8}/{:>8} \
         host {:>9.2} ms (cached {:>8}) peak {} vol",
        r.shape,
        r.variant,
        r.engine,
        opt(r.device_ms),
        opt(r.resample_ms),
        opt(r.field_ms),
        opt(r.device_cached_ms),
        opt(r.floor_ms),
        opt(r.floor_cached_ms),
        r.host_ms,
        opt(r.host_cached_ms),
        r.peak_device_volumes
            .map_or("-".into(), |p| format!("{p:.1}")),
    )
}

/// The table as text (Markdown).
pub fn table(rep: &BenchReport) -> String {
    let mut s = String::new();
    if let Some(d) = &rep.device {
        s += &format!("device: {d}\n");
    }
    if let Some(bw) = rep.d2d_bytes_per_s {
        s += &format!(
            "device-to-device copy: {:.2} TB/s (bytes read + written)\n",
            bw / 1e12
        );
    }
    if let Some(r) = &rep.pcie {
        s += &pcie_line(r);
        s += "\n";
    }
    s += "\n| shape | variant | engine | device ms (new sample) | resample ms | field ms | device ms (field cached) | floor ms new / cached | host→host ms | host→host cached ms | peak device vols |\n";
    s += "|---|---|---|---|---|---|---|---|---|---|---|\n";
    for r in &rep.rows {
        s += &format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} / {} | {:.2} | {} | {} |\n",
            r.shape,
            r.variant,
            r.engine,
            opt(r.device_ms),
            opt(r.resample_ms),
            opt(r.field_ms),
            opt(r.device_cached_ms),
            opt(r.floor_ms),
            opt(r.floor_cached_ms),
            r.host_ms,
            opt(r.host_cached_ms),
            r.peak_device_volumes
                .map_or("-".into(), |p| format!("{p:.1}")),
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_only_bench_runs_on_a_tiny_shape() {
        let opts = BenchOptions {
            backend: BackendSpec::Cpu,
            shapes: vec![vec![6, 8, 10]],
            cpu_reps: 1,
            ..BenchOptions::default()
        };
        let rep = run(&opts, |_| {}).unwrap();
        assert_eq!(rep.rows.len(), 3);
        assert!(
            rep.rows
                .iter()
                .all(|r| r.host_ms >= 0.0 && r.device_ms.is_none())
        );
        assert!(table(&rep).contains("| 6x8x10 | full |"));
    }

    #[test]
    fn median_of_even_and_odd() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 2.0, 3.0]), 2.5);
    }
}
