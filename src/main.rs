//! The `augscope` command line (DESIGN §7). Exit 0 ok, 2 bad input or usage (one clear line on
//! stderr), 1 internal error. With no subcommand it opens the GUI.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};

use augscope::augment::preset::escape_controls;
use augscope::augment::{Elastic, Mode, Order, Plan, Space};
use augscope::engine::{self, BackendSpec, Precision};
use augscope::export::preview::{self, Model};
use augscope::io::{self, LoadOptions, SaveOptions};

#[derive(Parser)]
#[command(
    name = "augscope",
    version,
    about = "Exact, fast spatial augmentation explorer for medical images"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Option<Cmd>,
}

#[derive(Subcommand)]
#[allow(clippy::large_enum_variant)] // parsed once at start-up; boxing buys nothing
enum Cmd {
    /// Open the GUI (the bundled sample when no file is given).
    View(ViewArgs),
    /// Shape, dtype, spacing, orientation and value range of a scan.
    Info {
        file: PathBuf,
        /// The first axis of a .npy array is channels.
        #[arg(long)]
        channels: bool,
    },
    /// Apply one spatial transform (flip, elastic, rotate, scale, translate) to a scan.
    Apply(ApplyArgs),
    /// CUDA devices, memory and driver, and the compiled-kernel cache; or why there are none.
    Devices {
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
        /// Remove the compiled kernels kept on disk (they are compiled again on next use).
        #[arg(long)]
        clear_cache: bool,
    },
    /// Time CPU and CUDA on the rotate-only, elastic-only and full pipelines.
    Bench(BenchArgs),
    /// Write N augmented samples of each input, drawn from a preset, with a JSONL manifest.
    Batch(BatchArgs),
    /// Export a preset to a training pipeline, or import one from a parameter dict.
    #[command(subcommand)]
    Preset(PresetCmd),
    /// Filter scans: gaussian, DoG, LoG, median, gamma, contrast or the FEBDS mask (scipy.ndimage
    /// results). `filter IN OUT`, or `filter --out-dir DIR IN...` for a batch.
    Filter(FilterArgs),
}

/// One `--shape D,H,W`.
#[derive(Clone, Debug)]
struct ShapeArg(Vec<usize>);

fn parse_shape(s: &str) -> Result<ShapeArg, String> {
    parse_axes(s).map(|a| ShapeArg(a.0))
}

#[derive(Args)]
struct BenchArgs {
    /// Engine: auto (CPU and the first GPU), cpu, cuda or cuda:N.
    #[arg(long, default_value = "auto", value_parser = |s: &str| s.parse::<BackendSpec>())]
    backend: BackendSpec,
    /// Volume shape D,H,W; repeat for several (default: 48,240,240 128,256,256 256,512,512).
    #[arg(long, value_parser = parse_shape)]
    shape: Vec<ShapeArg>,
    /// GPU storage precision: f32, f16 or bf16.
    #[arg(long, default_value = "f32", value_parser = |s: &str| s.parse::<Precision>())]
    precision: Precision,
    /// Timed GPU repetitions (median; at least 10).
    #[arg(long, default_value_t = 10)]
    reps: usize,
    /// Interpolation order of the pipelines: 0, 1 (the default) or 3.
    #[arg(long, default_value = "1", value_parser = parse_order)]
    order: Order,
    /// Timed CPU repetitions (0 skips the CPU rows).
    #[arg(long, default_value_t = 1)]
    cpu_reps: usize,
    /// Write the table as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Rows: all, spatial (the transform pipelines over --shape) or filters (gaussian, median,
    /// FEBDS at fixed sizes).
    #[arg(long, default_value = "all", value_parser = ["all", "spatial", "filters"])]
    rows: String,
    /// Instead of the pipelines: the explorer's latency, slider change to the three planes
    /// ready, through the same worker as the window (no display needed). On the bundled sample,
    /// or `--input FILE`, or a synthetic volume of the first `--shape`.
    #[arg(long)]
    latency: bool,
    /// The scan for `--latency`.
    #[arg(long, requires = "latency")]
    input: Option<PathBuf>,
    /// Timed changes per kind for `--latency` (angle, alpha, sigma, seed).
    #[arg(long, default_value_t = 20, requires = "latency")]
    steps: usize,
    /// With `--latency`: the explorer's grid of N draws instead (4, 9 or 16): time to its first
    /// and its last tile, per request with new seeds.
    #[arg(long, requires = "latency", value_parser = ["4", "9", "16"])]
    grid: Option<String>,
    /// The preset of `--grid` (a TOML file or a bundled name).
    #[arg(long, default_value = "nnunet-v2", requires = "grid")]
    grid_preset: PathBuf,
}

#[derive(Args)]
struct ViewArgs {
    files: Vec<PathBuf>,
    #[arg(long)]
    label: Option<PathBuf>,
}

/// A user error: exit code 2.
#[derive(Debug)]
struct Usage(String);
impl std::fmt::Display for Usage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}
impl std::error::Error for Usage {}

fn usage(msg: impl Into<String>) -> anyhow::Error {
    Usage(msg.into()).into()
}

/// A comma-separated list of numbers (one clap value, so clap must not treat it as many).
#[derive(Clone, Debug)]
struct Numbers(Vec<f64>);

/// A comma-separated list of axis indices.
#[derive(Clone, Debug)]
struct Axes(Vec<usize>);

fn parse_numbers(s: &str) -> Result<Numbers, String> {
    parse_list(s).map(Numbers)
}

fn parse_list(s: &str) -> Result<Vec<f64>, String> {
    s.split(',')
        .map(|t| {
            let t = t.trim();
            t.parse::<f64>()
                .ok()
                .filter(|v| v.is_finite())
                .ok_or_else(|| format!("'{t}' is not a finite number"))
        })
        .collect()
}

fn parse_axes(s: &str) -> Result<Axes, String> {
    s.split(',')
        .map(|t| {
            t.trim()
                .parse::<usize>()
                .map_err(|_| format!("'{t}' is not an axis index"))
        })
        .collect::<Result<_, _>>()
        .map(Axes)
}

fn parse_order(s: &str) -> Result<Order, String> {
    let v: u32 = s
        .parse()
        .map_err(|_| format!("'{s}' is not an interpolation order (0, 1 or 3)"))?;
    Order::try_from(v)
}

fn parse_elastic(s: &str) -> Result<(f64, f64), String> {
    match parse_list(s)?.as_slice() {
        [a, sg] if *sg > 0.0 => Ok((*a, *sg)),
        [_, _] => Err("sigma must be > 0".into()),
        _ => Err(format!("'{s}' is not ALPHA,SIGMA")),
    }
}

fn parse_cval(s: &str) -> Result<f32, String> {
    s.parse::<f32>()
        .map_err(|_| format!("'{s}' is not a number"))
}

#[derive(Args)]
struct ApplyArgs {
    /// Input scan (.nii, .nii.gz, .npy, .png, .jpg, .tif).
    input: PathBuf,
    /// Output file (.nii, .nii.gz, .npy or .png).
    output: PathBuf,
    /// Axes to mirror, e.g. 0,2.
    #[arg(long, value_parser = parse_axes)]
    flip: Option<Axes>,
    /// Rotation in radians about axes 0,1,2 (one angle for a 2D image).
    #[arg(long, value_parser = parse_numbers, allow_hyphen_values = true)]
    rotate: Option<Numbers>,
    /// Scale, isotropic (s) or per axis (s0,s1,s2); s > 1 samples a larger region.
    #[arg(long, value_parser = parse_numbers, allow_hyphen_values = true)]
    scale: Option<Numbers>,
    /// Translation per axis (content moves by -t), in voxels, or mm with --space mm.
    #[arg(long, value_parser = parse_numbers, allow_hyphen_values = true)]
    translate: Option<Numbers>,
    /// Elastic deformation ALPHA,SIGMA, in voxels, or mm with --space mm.
    #[arg(long, value_parser = parse_elastic, allow_hyphen_values = true)]
    elastic: Option<(f64, f64)>,
    /// Where rotation, translation and elastic act: voxel (array indices, as batchgenerators) or
    /// mm (physical, from the header's spacing: anisotropic volumes rotate without shearing).
    #[arg(long, default_value = "voxel", value_parser = |s: &str| s.parse::<Space>())]
    space: Space,
    /// Seed of the elastic noise.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Interpolation order: 0, 1 or 3.
    #[arg(long, default_value = "1", value_parser = parse_order)]
    order: Order,
    /// Boundary mode (scipy.ndimage names).
    #[arg(long, default_value = "constant", value_parser = |s: &str| s.parse::<Mode>())]
    mode: Mode,
    /// Value outside the grid for constant modes.
    #[arg(long, default_value = "0", value_parser = parse_cval, allow_hyphen_values = true)]
    cval: f32,
    /// A label map on the same grid, resampled with order 0.
    #[arg(long, requires = "label_out")]
    label: Option<PathBuf>,
    /// Where to write the resampled label map.
    #[arg(long, requires = "label")]
    label_out: Option<PathBuf>,
    /// Engine: auto, cpu, cuda or cuda:N.
    #[arg(long, default_value = "auto", value_parser = |s: &str| s.parse::<BackendSpec>())]
    backend: BackendSpec,
    /// GPU storage precision: f32, f16 or bf16.
    #[arg(long, default_value = "f32", value_parser = |s: &str| s.parse::<Precision>())]
    precision: Precision,
    /// Write the input coordinates of every output voxel, (ndim, *shape) float32.
    #[arg(long)]
    save_coords: Option<PathBuf>,
    /// Write a JSON report: plan, done list, backend, timings, displacement and Jacobian readouts.
    #[arg(long)]
    report: Option<PathBuf>,
    /// The first axis of a .npy input is channels.
    #[arg(long)]
    channels: bool,
    /// Output type: float32 (default) or keep (the input's type).
    #[arg(long, default_value = "float32", value_parser = ["float32", "keep"])]
    dtype: String,
    /// Preview as a training library does it: augscope (default), monai, torchio, nnunet or
    /// batchgenerators. The library's own model runs where it differs from augscope's (TorchIO's
    /// B-spline control grid, batchgeneratorsv2's FFT-smoothed normal noise, MONAI's chain of
    /// resamples, grid_sample's padding), on the CPU engine.
    #[arg(long = "as", default_value = "augscope", value_parser = |s: &str| s.parse::<Model>())]
    model: Model,
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let code = match e.kind() {
                clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion => 0,
                _ => 2,
            };
            if code == 0 {
                let _ = e.print();
            } else {
                // clap's message up to its usage block, joined into one line.
                let text = e.render().to_string();
                let parts: Vec<&str> = text
                    .lines()
                    .take_while(|l| !l.starts_with("Usage:"))
                    .map(str::trim)
                    .filter(|l| !l.is_empty())
                    .collect();
                let line = escape_controls(&parts.join(" "));
                eprintln!("augscope: {}", line.trim_start_matches("error: "));
            }
            return ExitCode::from(code);
        }
    };
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let user = e.downcast_ref::<Usage>().is_some()
                || e.downcast_ref::<io::IoError>().is_some()
                || e.downcast_ref::<augscope::augment::PlanError>().is_some();
            // One line, and nothing a terminal would act on (an argument or a file may hold
            // escape sequences).
            let msg = escape_controls(&format!("{e:#}")).replace('\n', " ");
            eprintln!("augscope: error: {msg}");
            ExitCode::from(if user { 2 } else { 1 })
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.cmd {
        None => view(ViewArgs {
            files: vec![],
            label: None,
        }),
        Some(Cmd::View(a)) => view(a),
        Some(Cmd::Info { file, channels }) => info(&file, channels),
        Some(Cmd::Apply(a)) => apply(a),
        Some(Cmd::Devices { json, clear_cache }) => devices(json, clear_cache),
        Some(Cmd::Bench(a)) => bench(a),
        Some(Cmd::Batch(a)) => batch(a),
        Some(Cmd::Preset(c)) => preset_cmd(c),
        Some(Cmd::Filter(a)) => filter_cmd(a),
    }
}

fn view(args: ViewArgs) -> anyhow::Result<()> {
    #[cfg(feature = "gui")]
    {
        augscope::app::run(args.files, args.label)
    }
    #[cfg(not(feature = "gui"))]
    {
        let _ = args;
        Err(usage(
            "this augscope was built without the GUI (feature `gui`); use a subcommand, see --help",
        ))
    }
}

fn info(path: &Path, channels: bool) -> anyhow::Result<()> {
    let v = io::load(
        path,
        &LoadOptions {
            channels_first: channels,
        },
    )?;
    use std::fmt::Write as _;
    let mut text = String::new();
    // Lines go to a String first, then to stdout at once: a closed pipe (`augscope info f | head`)
    // is then an ordinary write error, not a panic.
    macro_rules! outln {
        ($($arg:tt)*) => {{
            let _ = writeln!(text, $($arg)*);
        }};
    }
    let names: Vec<String> = v.shape.iter().map(|n| n.to_string()).collect();
    outln!("file:        {}", path.display());
    outln!(
        "shape:       {} ({} axes, array order {})",
        names.join(" x "),
        v.ndim(),
        if v.ndim() == 3 { "[z, y, x]" } else { "[y, x]" }
    );
    outln!("channels:    {}", v.channels);
    outln!("dtype:       {}", v.dtype);
    let sp: Vec<String> = v.spacing_mm.iter().map(|s| format!("{s:.4}")).collect();
    outln!("spacing mm:  {}", sp.join(" x "));
    let codes: String = v.axis_codes().into_iter().collect();
    outln!(
        "orientation: {codes} (NIfTI i, j, k = array axes {})",
        if v.ndim() == 3 { "2, 1, 0" } else { "1, 0" }
    );
    match v.finite_range() {
        Some((lo, hi)) => outln!("range:       {lo} .. {hi}"),
        None => outln!("range:       no finite values"),
    }
    let nonfinite = v.data.iter().filter(|x| !x.is_finite()).count();
    if nonfinite > 0 {
        outln!("non-finite:  {nonfinite} voxels (NaN or Inf)");
    }
    outln!("affine (world_from_voxel, NIfTI index order):");
    for row in &v.world_from_voxel {
        outln!(
            "  [{:>10.4} {:>10.4} {:>10.4} {:>10.4}]",
            row[0],
            row[1],
            row[2],
            row[3]
        );
    }
    write_text(None, &text, "scan summary")
}

/// The path as it will be on disk (the parent canonicalised), for comparing inputs and outputs.
fn resolved(p: &Path) -> PathBuf {
    if let Ok(c) = p.canonicalize() {
        return c;
    }
    let parent = p
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    match (parent.canonicalize(), p.file_name()) {
        (Ok(d), Some(n)) => d.join(n),
        _ => p.to_path_buf(),
    }
}

fn apply(a: ApplyArgs) -> anyhow::Result<()> {
    let t0 = Instant::now();
    // Refuse to overwrite any input, before reading anything.
    let inputs: Vec<&PathBuf> = [Some(&a.input), a.label.as_ref()]
        .into_iter()
        .flatten()
        .collect();
    let outputs: Vec<&PathBuf> = [
        Some(&a.output),
        a.label_out.as_ref(),
        a.save_coords.as_ref(),
        a.report.as_ref(),
    ]
    .into_iter()
    .flatten()
    .collect();
    for o in &outputs {
        for i in &inputs {
            if resolved(o) == resolved(i) {
                return Err(usage(format!(
                    "output would overwrite an input: {}",
                    o.display()
                )));
            }
        }
    }
    for (k, o) in outputs.iter().enumerate() {
        if outputs[..k].iter().any(|p| resolved(p) == resolved(o)) {
            return Err(usage(format!(
                "the same path is given for two outputs: {}",
                o.display()
            )));
        }
    }
    // Output formats must be known before any work is done.
    io::Format::from_path(&a.output)?;
    if let Some(l) = &a.label_out {
        io::Format::from_path(l)?;
    }
    if a.save_coords.is_some() && !a.model.is_own() {
        return Err(usage(format!(
            "--save-coords gives augscope's coordinates; {} resamples its own way (see the \
             report's model_steps): leave out --as or --save-coords",
            a.model.label()
        )));
    }
    if let Some(c) = &a.save_coords
        && !c.to_string_lossy().to_ascii_lowercase().ends_with(".npy")
    {
        return Err(usage(format!(
            "--save-coords writes a .npy file: {}",
            c.display()
        )));
    }

    let load_opts = LoadOptions {
        channels_first: a.channels,
    };
    let image = io::load(&a.input, &load_opts)?;
    let label = match &a.label {
        Some(p) => {
            let l = io::load(p, &LoadOptions::default())?;
            if l.shape != image.shape {
                return Err(usage(format!(
                    "label map shape {:?} differs from the image shape {:?}: {}",
                    l.shape,
                    image.shape,
                    p.display()
                )));
            }
            Some(l)
        }
        None => None,
    };
    let t_read = t0.elapsed().as_secs_f64() * 1e3;

    let plan = Plan {
        flip: a.flip.clone().map(|v| v.0).unwrap_or_default(),
        rotate_rad: a.rotate.clone().map(|v| v.0).unwrap_or_default(),
        scale: a.scale.clone().map(|v| v.0).unwrap_or_default(),
        translate: a.translate.clone().map(|v| v.0).unwrap_or_default(),
        elastic: a.elastic.map(|(alpha, sigma)| Elastic {
            alpha,
            sigma,
            seed: a.seed,
        }),
        order: a.order,
        mode: a.mode,
        cval: a.cval,
        out_shape: None,
        space: a.space,
        spacing_mm: match a.space {
            Space::Mm => image.spacing_mm.clone(),
            Space::Voxel => vec![],
        },
    };
    plan.validate(image.ndim())?;

    if !a.model.is_own() {
        return apply_as(&a, &image, label.as_ref(), &plan, t0, t_read);
    }
    let mut selected = engine::cuda::select(&a.backend, a.precision);
    if let Some(note) = &selected.note {
        eprintln!("augscope: {note}");
    }
    let t1 = Instant::now();
    let (out, out_label, timings, oom) = engine::cuda::apply_new_with_fallback(
        selected.backend.as_ref(),
        &plan,
        &image,
        label.as_ref(),
    )
    .context("the transform failed")?;
    let mut backend_name = selected.backend.name();
    if let Some(note) = oom {
        eprintln!("augscope: {note}");
        backend_name = "cpu".into();
        selected.note = Some(note);
    }
    // The GPU that ran the transform also gives the coordinates and the displacement readout,
    // from its cached field.
    let gpu = match &a.backend {
        BackendSpec::Cuda(ids) if backend_name.starts_with("cuda") => {
            engine::cuda::CudaBackend::new(ids, a.precision).ok()
        }
        _ => None,
    };
    let t_compute = t1.elapsed().as_secs_f64() * 1e3;

    let t2 = Instant::now();
    let save = SaveOptions {
        keep_dtype: a.dtype == "keep",
    };
    let mut staged = Staged::default();
    staged.write(&a.output, |t| io::save(t, &out, &save))?;
    if let (Some(p), Some(l)) = (&a.label_out, &out_label) {
        staged.write(p, |t| io::save(t, l, &SaveOptions { keep_dtype: true }))?;
    }
    let mut disp = None;
    let mut jacobian = None;
    if a.save_coords.is_some() || a.report.is_some() {
        let map = plan.compose(&image.shape)?;
        let gpu_stats = gpu
            .as_ref()
            .and_then(|g| g.displacement_stats(&plan, &map.out_shape).ok());
        // The coordinates feed both --save-coords and the report's Jacobian readout.
        let gpu_coords = gpu
            .as_ref()
            .and_then(|g| g.coordinates(&plan, &image.shape).ok());
        let cpu = engine::cpu::CpuBackend::new();
        let need_cpu_field = gpu_stats.is_none() || gpu_coords.is_none();
        let field = if need_cpu_field {
            cpu.field(&plan, &map.out_shape).map(|(f, _)| f)
        } else {
            None
        };
        // |alpha| |G|: voxels in voxel space, millimetres in mm space (see `Space`); the other
        // unit is bounded by the smallest and largest voxel size.
        let alpha = plan.elastic.map_or(0.0, |e| e.alpha);
        let stats = gpu_stats
            .flatten()
            .or_else(|| field.as_ref().map(|f| f.displacement_stats(alpha)));
        if let Some((max_v, rms_v)) = stats {
            let min_sp = image
                .spacing_mm
                .iter()
                .cloned()
                .fold(f64::INFINITY, f64::min);
            let max_sp = image.spacing_mm.iter().cloned().fold(0.0, f64::max);
            disp = Some(match plan.space {
                Space::Voxel => serde_json::json!({
                    "max_vox": max_v, "rms_vox": rms_v,
                    "max_mm_range": [max_v * min_sp, max_v * max_sp],
                    "rms_mm_range": [rms_v * min_sp, rms_v * max_sp],
                }),
                Space::Mm => serde_json::json!({
                    "max_mm": max_v, "rms_mm": rms_v,
                    "max_vox_range": [max_v / max_sp, max_v / min_sp],
                    "rms_vox_range": [rms_v / max_sp, rms_v / min_sp],
                }),
            });
        }
        let coords = match gpu_coords {
            Some(c) => c,
            None => engine::cpu::coordinates(&map, field.as_deref()),
        };
        // The field is no longer needed: free it (and the engine's cached copy) before the
        // determinant takes its volume.
        drop((field, cpu));
        if let Some(p) = &a.save_coords {
            let mut shape = vec![map.ndim];
            shape.extend_from_slice(&map.out_shape);
            staged.write(p, |t| {
                io::npy::write(t, &coords, &shape, augscope::DType::F32)
            })?;
        }
        if a.report.is_some() {
            // det(∂x/∂p) of the saved coordinates; mirroring (a flip) is not counted as folding.
            let det = engine::jacobian::determinant(&coords, map.ndim, &map.out_shape);
            let s = engine::jacobian::stats_for_map(&det, &map);
            jacobian = Some(serde_json::json!({
                "min": s.min, "max": s.max, "folded_fraction": s.folded_fraction,
                "orientation": engine::jacobian::orientation(&map),
            }));
        }
    }
    let t_write = t2.elapsed().as_secs_f64() * 1e3;

    if let Some(p) = &a.report {
        let report = serde_json::json!({
            "input": a.input, "output": a.output,
            "label": a.label, "label_output": a.label_out,
            "shape": image.shape, "channels": image.channels,
            "space": plan.space, "spacing_mm": image.spacing_mm,
            "plan": plan, "done": plan.done_list(),
            "backend": backend_name, "backend_note": selected.note,
            "precision": a.precision,
            "timings_ms": { "engine": timings, "read": t_read, "compute": t_compute, "write": t_write,
                             "total": t0.elapsed().as_secs_f64() * 1e3 },
            "displacement": disp,
            "jacobian": jacobian,
            "model": a.model.id(),
            "model_steps": preview::own_step(a.model).into_iter().collect::<Vec<_>>(),
        });
        let text = serde_json::to_string_pretty(&report).context("cannot encode the report")?;
        staged.write(p, |t| {
            io::atomic_write(t, "JSON report", |w| {
                std::io::Write::write_all(w, text.as_bytes())
            })
        })?;
    }
    staged.commit()
}

/// Outputs of one command, written all or none: each is written whole under a hidden name in
/// its own folder, and the names are swapped in only when every output is written. Whatever is
/// not committed is removed when this is dropped, so a failure leaves no output and replaces no
/// existing file.
#[derive(Default)]
struct Staged {
    pending: Vec<(PathBuf, PathBuf)>,
}

impl Staged {
    /// Where to write `path` for now (same folder and extension, so the format is the same).
    fn path(&mut self, path: &Path) -> PathBuf {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let tmp = path.with_file_name(format!(".augscope-{}-{name}", std::process::id()));
        self.pending.push((tmp.clone(), path.to_path_buf()));
        tmp
    }

    /// Writes `path` through `write` at its staged name; an error names `path`.
    fn write(
        &mut self,
        path: &Path,
        write: impl FnOnce(&Path) -> Result<(), io::IoError>,
    ) -> Result<(), io::IoError> {
        let tmp = self.path(path);
        write(&tmp).map_err(|e| match e {
            io::IoError::Write { format, why, .. } => io::IoError::Write {
                format,
                why,
                path: path.to_path_buf(),
            },
            other => other,
        })
    }

    /// Renames every staged output into place (on a failure the outputs not yet renamed are
    /// removed when `self` drops).
    fn commit(mut self) -> anyhow::Result<()> {
        while !self.pending.is_empty() {
            let (tmp, path) = self.pending.remove(0);
            if let Err(e) = std::fs::rename(&tmp, &path) {
                let _ = std::fs::remove_file(&tmp);
                return Err(usage(format!("cannot write {}: {e}", path.display())));
            }
        }
        Ok(())
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        for (tmp, _) in &self.pending {
            let _ = std::fs::remove_file(tmp);
        }
    }
}

/// `apply --as LIBRARY`: the library's model on the CPU engine, written as `apply` writes.
fn apply_as(
    a: &ApplyArgs,
    image: &augscope::Volume,
    label: Option<&augscope::Volume>,
    plan: &Plan,
    t0: Instant,
    t_read: f64,
) -> anyhow::Result<()> {
    if !matches!(a.backend, BackendSpec::Auto | BackendSpec::Cpu) {
        eprintln!(
            "augscope: {} runs on the CPU engine (--backend is not used)",
            a.model.label()
        );
    }
    let t1 = Instant::now();
    let p = preview::preview(a.model, image, label, plan).context("the transform failed")?;
    let t_compute = t1.elapsed().as_secs_f64() * 1e3;
    let t2 = Instant::now();
    let mut staged = Staged::default();
    let save = SaveOptions {
        keep_dtype: a.dtype == "keep",
    };
    staged.write(&a.output, |t| io::save(t, &p.image, &save))?;
    if let (Some(path), Some(l)) = (&a.label_out, &p.label) {
        staged.write(path, |t| io::save(t, l, &SaveOptions { keep_dtype: true }))?;
    }
    let t_write = t2.elapsed().as_secs_f64() * 1e3;
    if let Some(path) = &a.report {
        let report = serde_json::json!({
            "input": a.input, "output": a.output,
            "label": a.label, "label_output": a.label_out,
            "shape": image.shape, "channels": image.channels,
            "space": plan.space, "spacing_mm": image.spacing_mm,
            "plan": plan, "done": plan.done_list(),
            "backend": "cpu",
            "timings_ms": { "read": t_read, "compute": t_compute, "write": t_write,
                             "total": t0.elapsed().as_secs_f64() * 1e3 },
            "displacement": p.displacement.map(|(max_v, rms_v)| serde_json::json!({
                "max_vox": max_v, "rms_vox": rms_v,
            })),
            "model": p.model.id(),
            "model_steps": p.steps,
            "control_grid": p.control_grid.as_ref().map(|g| serde_json::json!({
                "shape": g.shape, "origin_vox": g.origin, "spacing_vox": g.spacing,
            })),
        });
        let text = serde_json::to_string_pretty(&report).context("cannot encode the report")?;
        staged.write(path, |t| {
            io::atomic_write(t, "JSON report", |w| {
                std::io::Write::write_all(w, text.as_bytes())
            })
        })?;
    }
    staged.commit()?;
    for s in &p.steps {
        eprintln!("augscope: as {}: {s}", p.model.label());
    }
    Ok(())
}

fn devices(json: bool, clear_cache: bool) -> anyhow::Result<()> {
    if clear_cache {
        let Some(dir) = engine::kernel_cache::dir() else {
            return write_text(None, "kernels: no disk cache to clear\n", "device report");
        };
        let n = engine::kernel_cache::clear(&dir)
            .map_err(|e| usage(format!("cannot clear {}: {e}", dir.display())))?;
        return write_text(
            None,
            &format!(
                "kernels: removed {n} compiled kernels from {}\n",
                dir.display()
            ),
            "device report",
        );
    }
    let report = engine::device::discover();
    let text = if json {
        serde_json::to_string_pretty(&report).context("cannot encode the report")?
    } else {
        report.to_string()
    };
    write_text(None, &format!("{text}\n"), "device report")
}

fn bench(a: BenchArgs) -> anyhow::Result<()> {
    let shapes: Vec<Vec<usize>> = a.shape.iter().map(|s| s.0.clone()).collect();
    if let Some(s) = shapes.iter().find(|s| s.len() != 3 || s.contains(&0)) {
        return Err(usage(format!(
            "--shape takes three positive sizes D,H,W, got {s:?}"
        )));
    }
    if a.latency {
        return bench_latency(&a, shapes.first().cloned());
    }
    let mut opts = augscope::bench::BenchOptions {
        backend: a.backend,
        precision: a.precision,
        reps: a.reps,
        cpu_reps: a.cpu_reps,
        spatial: a.rows != "filters",
        filters: a.rows != "spatial",
        order: a.order,
        ..Default::default()
    };
    if !shapes.is_empty() {
        opts.shapes = shapes;
    }
    let report =
        augscope::bench::run(&opts, |line| eprintln!("{line}")).context("the benchmark failed")?;
    if let Some(p) = &a.json {
        let text = serde_json::to_string_pretty(&report).context("cannot encode the table")?;
        io::atomic_write(p, "JSON table", |w| {
            std::io::Write::write_all(w, text.as_bytes())
        })?;
    }
    write_text(
        None,
        &format!("{}\n", augscope::bench::table(&report)),
        "benchmark table",
    )?;
    Ok(())
}

#[cfg(feature = "gui")]
fn bench_latency(a: &BenchArgs, shape: Option<Vec<usize>>) -> anyhow::Result<()> {
    use augscope::app::latency;
    if let Some(p) = &a.input
        && !p.exists()
    {
        return Err(usage(format!("no such file or folder: {}", p.display())));
    }
    let opts = latency::LatencyOptions {
        backend: a.backend.clone(),
        precision: a.precision,
        shape,
        input: a.input.clone(),
        steps: a.steps.max(1),
        ..Default::default()
    };
    let rows = match &a.grid {
        Some(n) => {
            let preset =
                augscope::augment::preset::load_or_bundled(&a.grid_preset).map_err(preset_error)?;
            let n = n
                .parse()
                .map_err(|_| usage(format!("--grid {n} is not 4, 9 or 16")))?;
            latency::grid(&opts, n, &preset, |line| eprintln!("{line}"))
        }
        None => latency::run(&opts, |line| eprintln!("{line}")),
    }
    .map_err(|e| anyhow::anyhow!(e))
    .context("the latency measurement failed")?;
    if let Some(p) = &a.json {
        let text = serde_json::to_string_pretty(&rows).context("cannot encode the table")?;
        io::atomic_write(p, "JSON table", |w| {
            std::io::Write::write_all(w, text.as_bytes())
        })?;
    }
    write_text(
        None,
        &format!("{}\n", latency::table(&rows)),
        "latency table",
    )
}

#[cfg(not(feature = "gui"))]
fn bench_latency(_: &BenchArgs, _: Option<Vec<usize>>) -> anyhow::Result<()> {
    Err(usage(
        "--latency measures the explorer's worker, which this build leaves out: build with the \
         default features (cargo build --release)",
    ))
}

#[derive(Args)]
struct BatchArgs {
    /// Preset file (TOML), or a bundled preset: nnunet-v2, nnunet-v1-3d, batchgenerators.
    #[arg(long)]
    preset: PathBuf,
    /// Samples per input.
    #[arg(long)]
    count: usize,
    /// Seed of the first sample; sample j uses seed + j.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Output folder (created if missing).
    #[arg(long)]
    out: PathBuf,
    /// A label map per input, in the order of the inputs (repeat the flag).
    #[arg(long)]
    label: Vec<PathBuf>,
    /// Engine: auto, cpu, cuda or cuda:N[,M…] (several GPUs split the batch).
    #[arg(long, default_value = "auto", value_parser = |s: &str| s.parse::<BackendSpec>())]
    backend: BackendSpec,
    /// GPU storage precision: f32, f16 or bf16.
    #[arg(long, default_value = "f32", value_parser = |s: &str| s.parse::<Precision>())]
    precision: Precision,
    /// Do only shard k of n (0-based), e.g. --shard $SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT.
    #[arg(long, default_value = "0/1", value_parser = augscope::export::batch::parse_shard)]
    shard: (usize, usize),
    /// Skip samples an earlier run finished (listed in the manifest, files present).
    #[arg(long)]
    resume: bool,
    /// Where rotation, translation and elastic act: voxel or mm (default: the preset's `space`,
    /// else voxel).
    #[arg(long, value_parser = |s: &str| s.parse::<Space>())]
    space: Option<Space>,
    /// Output extension: nii.gz, nii, npy or png (default: the input's kind).
    #[arg(long)]
    ext: Option<String>,
    /// Output type: float32 (default) or keep (the input's type).
    #[arg(long, default_value = "float32", value_parser = ["float32", "keep"])]
    dtype: String,
    /// An intensity filter for every sample: gaussian:S, log:S, dog:S1,S2, median:N,
    /// gamma:G[,SCALE] or contrast:C,B (sigmas and sizes in voxels, one value or one per axis).
    /// Before the spatial transform (each input filtered once) unless --filter-after; label maps
    /// are never filtered.
    #[arg(long, value_parser = |s: &str| s.parse::<augscope::filter::Filter>(), value_name = "NAME:ARGS")]
    filter: Option<augscope::filter::Filter>,
    /// Apply --filter to every output instead of the input.
    #[arg(long, requires = "filter")]
    filter_after: bool,
    /// Boundary mode of --filter (scipy.ndimage filter names).
    #[arg(long, default_value = "reflect", value_parser = |s: &str| s.parse::<Mode>())]
    filter_mode: Mode,
    /// Value outside the image for --filter's constant modes.
    #[arg(long, default_value = "0", value_parser = parse_cval, allow_hyphen_values = true)]
    filter_cval: f32,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
    /// Whose model of the transform: augscope (default), monai, torchio, nnunet or
    /// batchgenerators (see `apply --as`); a library's model runs on the CPU engine, and the
    /// manifest names it.
    #[arg(long = "as", default_value = "augscope", value_parser = |s: &str| s.parse::<Model>())]
    model: Model,
    /// Inputs (.nii, .nii.gz, .npy, .png, .jpg, .tif, .dcm or a DICOM folder).
    #[arg(required = true)]
    inputs: Vec<PathBuf>,
}

#[derive(Subcommand)]
enum PresetCmd {
    /// Print a preset as Python for a training pipeline.
    Export {
        /// monai, torchio, batchgenerators, batchgenerators-json, nnunet, monai-bundle or python.
        #[arg(long, value_parser = |s: &str| s.parse::<augscope::export::Target>())]
        to: augscope::export::Target,
        /// Spatial dimensions of the pipeline: 2 or 3.
        #[arg(long, default_value_t = 3,
              value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(2..=3))]
        ndim: usize,
        /// Write to a file instead of stdout.
        #[arg(long, short)]
        output: Option<PathBuf>,
        /// Preset file, or a bundled preset name.
        preset: PathBuf,
    },
    /// Read a preset from a batchgenerators / nnU-Net parameter dict (JSON, or an exported
    /// snippet), a MONAI bundle config, or one batch manifest line or `apply --report` file (its plan).
    Import {
        /// Write to a file instead of stdout.
        #[arg(long, short)]
        output: Option<PathBuf>,
        /// The parameter file.
        params: PathBuf,
    },
    /// Draw one sample of a preset and print the plan and done list as JSON; with `--count N`,
    /// samples seed..seed+N-1 as one JSON object per line.
    Sample {
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// How many samples, one JSON line each (seeds seed, seed+1, ...).
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
        count: Option<u64>,
        /// Spatial dimensions: 2 or 3.
        #[arg(long, default_value_t = 3,
              value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(2..=3))]
        ndim: usize,
        preset: PathBuf,
    },
}

fn preset_error(e: augscope::augment::preset::PresetError) -> anyhow::Error {
    usage(e.to_string())
}

fn write_text(output: Option<&Path>, text: &str, what: &'static str) -> anyhow::Result<()> {
    match output {
        Some(p) => Ok(io::atomic_write(p, what, |w| {
            std::io::Write::write_all(w, text.as_bytes())
        })?),
        // Not print!: a full disk is an error line, not a panic; a reader that stopped reading
        // (`augscope devices | head -1`) ends the output quietly, as a shell tool does.
        None => {
            let mut out = std::io::stdout().lock();
            match std::io::Write::write_all(&mut out, text.as_bytes())
                .and_then(|()| std::io::Write::flush(&mut out))
            {
                Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(usage(format!(
                    "cannot write the {what} to standard output: {e}"
                ))),
                _ => Ok(()),
            }
        }
    }
}

fn preset_cmd(c: PresetCmd) -> anyhow::Result<()> {
    use augscope::augment::preset;
    match c {
        PresetCmd::Export {
            to,
            ndim,
            output,
            preset: p,
        } => {
            let pr = preset::load_or_bundled(&p).map_err(preset_error)?;
            let text = augscope::export::export(&pr, to, ndim).map_err(preset_error)?;
            write_text(output.as_deref(), &text, "snippet")
        }
        PresetCmd::Import { output, params } => {
            let text = std::fs::read_to_string(&params)
                .map_err(|e| usage(format!("cannot read parameters: {e}: {}", params.display())))?;
            let name = format!("imported from {}", params.display());
            let pr = augscope::export::import::import(&text, &name)
                .map_err(|e| usage(format!("{e}: {}", params.display())))?;
            write_text(output.as_deref(), &pr.to_toml(), "preset")
        }
        PresetCmd::Sample {
            seed,
            count,
            ndim,
            preset: p,
        } => {
            let pr = preset::load_or_bundled(&p).map_err(preset_error)?;
            let spacing = vec![1.0; ndim];
            let Some(count) = count else {
                let s = pr.sample(seed, ndim, &spacing).map_err(preset_error)?;
                let text = serde_json::to_string_pretty(&s).context("cannot encode the sample")?;
                return write_text(None, &format!("{text}\n"), "sample");
            };
            let mut text = String::new();
            for j in 0..count {
                let s = pr
                    .sample(seed.wrapping_add(j), ndim, &spacing)
                    .map_err(preset_error)?;
                text.push_str(&serde_json::to_string(&s).context("cannot encode the sample")?);
                text.push('\n');
            }
            write_text(None, &text, "samples")
        }
    }
}

fn batch(a: BatchArgs) -> anyhow::Result<()> {
    use augscope::export::batch;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let mut preset = augscope::augment::preset::load_or_bundled(&a.preset).map_err(preset_error)?;
    if let Some(space) = a.space {
        preset.space = space;
    }
    let stop = Arc::new(AtomicBool::new(false));
    {
        // First Ctrl-C (or SIGTERM, as Slurm and Kubernetes stop a job): finish the files being
        // written, then stop. Second: stop at once (only temporary files can be left, and
        // --resume removes them).
        let stop = stop.clone();
        let _ = ctrlc::set_handler(move || {
            if stop.swap(true, Ordering::SeqCst) {
                std::process::exit(130);
            }
            eprintln!(
                "\naugscope: stopping after the files being written (Ctrl-C again to quit now)"
            );
        });
    }
    let opts = batch::BatchOptions {
        preset,
        inputs: a.inputs,
        labels: a.label,
        count: a.count,
        seed: a.seed,
        out_dir: a.out,
        backend: a.backend,
        precision: a.precision,
        shard: a.shard,
        resume: a.resume,
        ext: a.ext,
        keep_dtype: a.dtype == "keep",
        progress: !a.quiet,
        stop: stop.clone(),
        counter: Default::default(),
        writers: 0,
        filter: a.filter.map(|filter| batch::BatchFilter {
            filter,
            boundary: augscope::filter::Boundary {
                mode: a.filter_mode,
                cval: a.filter_cval,
            },
            after: a.filter_after,
        }),
        model: a.model,
    };
    if !a.model.is_own() && !matches!(opts.backend, BackendSpec::Auto | BackendSpec::Cpu) {
        eprintln!(
            "augscope: {} runs on the CPU engine (--backend is not used)",
            a.model.label()
        );
    }
    let summary = match batch::run(&opts) {
        Ok(s) => s,
        Err(e) if e.is_user() => return Err(usage(e.to_string())),
        Err(e) => return Err(anyhow::Error::new(e).context("the batch failed")),
    };
    eprintln!(
        "augscope: {} samples written, {} already done, {} of {} in this shard; {:.2} samples/s on {}; manifest {}",
        summary.written,
        summary.skipped,
        summary.written + summary.skipped,
        summary.total,
        summary.samples_per_s,
        summary.backend,
        summary.manifest.display()
    );
    if summary.interrupted {
        return Err(usage(
            "interrupted; rerun the same command with --resume to finish",
        ));
    }
    Ok(())
}

#[derive(Args)]
#[command(group(
    clap::ArgGroup::new("filter")
        .required(true)
        .multiple(false)
        .args(["gaussian", "dog", "log", "median", "gamma", "contrast", "febds"])
))]
struct FilterArgs {
    /// IN OUT; with --out-dir, any number of inputs.
    #[arg(required = true, value_name = "PATH")]
    paths: Vec<PathBuf>,
    /// Write each input's result into DIR under the input's file name (`.npy` when the input's
    /// format cannot be written: JPEG, TIFF, DICOM).
    #[arg(long, value_name = "DIR")]
    out_dir: Option<PathBuf>,
    /// Gaussian smoothing, sigma in voxels: S or S0,S1[,S2] (scipy gaussian_filter, truncate 4).
    #[arg(long, value_parser = parse_numbers, allow_hyphen_values = true, value_name = "S")]
    gaussian: Option<Numbers>,
    /// Difference of gaussians G(S1) - G(S2).
    #[arg(long, value_parser = parse_numbers, allow_hyphen_values = true, value_name = "S1,S2")]
    dog: Option<Numbers>,
    /// Laplacian of gaussian (scipy gaussian_laplace): S or S0,S1[,S2].
    #[arg(long, value_parser = parse_numbers, allow_hyphen_values = true, value_name = "S")]
    log: Option<Numbers>,
    /// Median over an odd box: N or N0,N1[,N2] (scipy median_filter).
    #[arg(long, value_parser = parse_axes, value_name = "N")]
    median: Option<Axes>,
    /// Gamma: SCALE * (x / SCALE)^G, SCALE 1 unless given (4095 for 12-bit mammograms).
    #[arg(long, value_parser = parse_numbers, allow_hyphen_values = true, value_name = "G[,SCALE]")]
    gamma: Option<Numbers>,
    /// Contrast and brightness: C * x + B.
    #[arg(long, value_parser = parse_numbers, allow_hyphen_values = true, value_name = "C,B")]
    contrast: Option<Numbers>,
    /// The FEBDS micro-calcification mask (medical-image-std's FebdsAlgorithm) of a 2D image.
    #[arg(long, value_parser = |s: &str| s.parse::<augscope::filter::FebdsMethod>(), value_name = "dog|log|fft")]
    febds: Option<augscope::filter::FebdsMethod>,
    /// Boundary mode (scipy.ndimage filter names; wrap = grid-wrap, grid-constant = constant).
    #[arg(long, default_value = "reflect", value_parser = |s: &str| s.parse::<Mode>())]
    mode: Mode,
    /// Value outside the image for the constant modes.
    #[arg(long, default_value = "0", value_parser = parse_cval, allow_hyphen_values = true)]
    cval: f32,
    /// Engine: auto (CPU), cpu, cuda or cuda:N[,M…] (several GPUs split the arrays).
    #[arg(long, default_value = "auto", value_parser = |s: &str| s.parse::<BackendSpec>())]
    backend: BackendSpec,
    /// GPU storage precision: f32, f16 or bf16.
    #[arg(long, default_value = "f32", value_parser = |s: &str| s.parse::<Precision>())]
    precision: Precision,
    /// The first axis of a .npy input is channels.
    #[arg(long)]
    channels: bool,
    /// Output type: float32 (default) or keep (the input's type).
    #[arg(long, default_value = "float32", value_parser = ["float32", "keep"])]
    dtype: String,
}

impl FilterArgs {
    fn filter(&self) -> anyhow::Result<augscope::filter::Filter> {
        use augscope::filter::Filter;
        let two = |v: &Numbers, what: &str| match v.0[..] {
            [a, b] => Ok((a, b)),
            _ => Err(usage(format!("--{what} takes two numbers, got {:?}", v.0))),
        };
        Ok(if let Some(s) = &self.gaussian {
            Filter::Gaussian { sigma: s.0.clone() }
        } else if let Some(s) = &self.dog {
            let (s1, s2) = two(s, "dog")?;
            Filter::Dog {
                sigma1: vec![s1],
                sigma2: vec![s2],
            }
        } else if let Some(s) = &self.log {
            Filter::Log { sigma: s.0.clone() }
        } else if let Some(n) = &self.median {
            Filter::Median { size: n.0.clone() }
        } else if let Some(g) = &self.gamma {
            let (gamma, scale) = match g.0[..] {
                [g] => (g, 1.0),
                [g, s] => (g, s),
                _ => return Err(usage("--gamma takes G or G,SCALE")),
            };
            Filter::Gamma {
                gamma: gamma as f32,
                scale: scale as f32,
            }
        } else if let Some(c) = &self.contrast {
            let (c, b) = two(c, "contrast")?;
            Filter::Contrast {
                contrast: c as f32,
                brightness: b as f32,
            }
        } else if let Some(m) = self.febds {
            Filter::Febds(m)
        } else {
            return Err(usage(
                "give one filter: --gaussian, --dog, --log, --median, --gamma, --contrast or --febds",
            ));
        })
    }
}

/// Where the batch output of `input` goes: `dir/<input's file name>`, or `.npy` appended when
/// that format cannot be written.
fn batch_output(dir: &Path, input: &Path) -> anyhow::Result<PathBuf> {
    let name = input
        .file_name()
        .ok_or_else(|| usage(format!("input has no file name: {}", input.display())))?;
    let out = dir.join(name);
    Ok(match io::Format::from_path(&out) {
        Ok(io::Format::Nifti | io::Format::Npy | io::Format::Png) => out,
        _ => dir.join(format!("{}.npy", name.to_string_lossy())),
    })
}

fn filter_cmd(a: FilterArgs) -> anyhow::Result<()> {
    let filter = a.filter()?;
    // (input, output) pairs, checked before anything is read.
    let pairs: Vec<(PathBuf, PathBuf)> = match &a.out_dir {
        None => match &a.paths[..] {
            [i, o] => vec![(i.clone(), o.clone())],
            _ => {
                return Err(usage(format!(
                    "filter takes IN OUT ({} paths given); for many inputs use --out-dir DIR IN...",
                    a.paths.len()
                )));
            }
        },
        Some(dir) => {
            if !dir.is_dir() {
                return Err(usage(format!(
                    "--out-dir is not a folder: {}",
                    dir.display()
                )));
            }
            a.paths
                .iter()
                .map(|i| Ok((i.clone(), batch_output(dir, i)?)))
                .collect::<anyhow::Result<_>>()?
        }
    };
    for (k, (i, o)) in pairs.iter().enumerate() {
        io::Format::from_path(o)?;
        if pairs.iter().any(|(i2, _)| resolved(i2) == resolved(o)) {
            return Err(usage(format!(
                "output would overwrite an input: {}",
                o.display()
            )));
        }
        if pairs[..k].iter().any(|(_, o2)| resolved(o2) == resolved(o)) {
            return Err(usage(format!(
                "two inputs would write the same output: {}",
                o.display()
            )));
        }
        if !i.exists() {
            return Err(usage(format!("input does not exist: {}", i.display())));
        }
    }
    let boundary = augscope::filter::Boundary {
        mode: a.mode,
        cval: a.cval,
    };
    let load_opts = LoadOptions {
        channels_first: a.channels,
    };
    let save = SaveOptions {
        keep_dtype: a.dtype == "keep",
    };
    // Same-shape inputs go to the engine together (one launch on a GPU), up to 512 MiB.
    const BATCH_BYTES: usize = 512 << 20;
    let mut pending: Vec<(augscope::Volume, &PathBuf)> = vec![];
    let mut noted = false;
    let mut flush = |pending: &mut Vec<(augscope::Volume, &PathBuf)>| -> anyhow::Result<()> {
        let Some((first, _)) = pending.first() else {
            return Ok(());
        };
        let shape = first.shape.clone();
        let data: Vec<f32> = pending
            .iter()
            .flat_map(|(v, _)| v.data.iter().copied())
            .collect();
        let run = augscope::filter::run(&filter, boundary, &data, &shape, &a.backend, a.precision)
            .map_err(|e| usage(e.to_string()))?;
        if let Some(note) = &run.note
            && !noted
        {
            eprintln!("augscope: {note}");
            noted = true;
        }
        let mut at = 0;
        for (v, out) in pending.drain(..) {
            let n = v.data.len();
            let mut o = v.clone_meta();
            o.data = run.out[at..at + n].to_vec();
            at += n;
            io::save(out, &o, &save)?;
        }
        Ok(())
    };
    for (input, output) in &pairs {
        let v = io::load(input, &load_opts)?;
        // Filter parameters against this input, so a bad input fails before anything is written
        // for it (one line naming the file).
        filter
            .resolved(v.ndim(), v.channels)
            .map_err(|e| usage(format!("{e}: {}", input.display())))?;
        let fits = pending.first().is_some_and(|(p, _)| {
            p.shape == v.shape
                && (pending.iter().map(|(q, _)| q.data.len()).sum::<usize>() + v.data.len()) * 4
                    <= BATCH_BYTES
        });
        // FEBDS works on one image at a time.
        let batchable = !matches!(filter, augscope::filter::Filter::Febds(_));
        if !(fits && batchable) {
            flush(&mut pending)?;
        }
        pending.push((v, output));
    }
    flush(&mut pending)
}
