//! The `augscope` command line (DESIGN §7). Exit 0 ok, 2 bad input or usage (one clear line on
//! stderr), 1 internal error. With no subcommand it opens the GUI.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};

use augscope::augment::{Elastic, Mode, Order, Plan};
use augscope::engine::{self, BackendSpec, Precision};
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
    /// CUDA devices, memory and driver; or why there are none.
    Devices {
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Time CPU and CUDA on the rotate-only, elastic-only and full pipelines.
    Bench(BenchArgs),
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
    /// Timed CPU repetitions (0 skips the CPU rows).
    #[arg(long, default_value_t = 1)]
    cpu_reps: usize,
    /// Write the table as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
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
    /// Translation in voxels per axis (content moves by -t).
    #[arg(long, value_parser = parse_numbers, allow_hyphen_values = true)]
    translate: Option<Numbers>,
    /// Elastic deformation ALPHA,SIGMA (voxels).
    #[arg(long, value_parser = parse_elastic, allow_hyphen_values = true)]
    elastic: Option<(f64, f64)>,
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
    /// Write a JSON report: plan, done list, backend, timings.
    #[arg(long)]
    report: Option<PathBuf>,
    /// The first axis of a .npy input is channels.
    #[arg(long)]
    channels: bool,
    /// Output type: float32 (default) or keep (the input's type).
    #[arg(long, default_value = "float32", value_parser = ["float32", "keep"])]
    dtype: String,
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
                let line = parts.join(" ");
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
            let msg = format!("{e:#}").replace('\n', " ");
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
        Some(Cmd::Devices { json }) => devices(json),
        Some(Cmd::Bench(a)) => bench(a),
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
    let names: Vec<String> = v.shape.iter().map(|n| n.to_string()).collect();
    println!("file:        {}", path.display());
    println!(
        "shape:       {} ({} axes, array order {})",
        names.join(" x "),
        v.ndim(),
        if v.ndim() == 3 { "[z, y, x]" } else { "[y, x]" }
    );
    println!("channels:    {}", v.channels);
    println!("dtype:       {}", v.dtype);
    let sp: Vec<String> = v.spacing_mm.iter().map(|s| format!("{s:.4}")).collect();
    println!("spacing mm:  {}", sp.join(" x "));
    let codes: String = v.axis_codes().into_iter().collect();
    println!(
        "orientation: {codes} (NIfTI i, j, k = array axes {})",
        if v.ndim() == 3 { "2, 1, 0" } else { "1, 0" }
    );
    match v.finite_range() {
        Some((lo, hi)) => println!("range:       {lo} .. {hi}"),
        None => println!("range:       no finite values"),
    }
    let nonfinite = v.data.iter().filter(|x| !x.is_finite()).count();
    if nonfinite > 0 {
        println!("non-finite:  {nonfinite} voxels (NaN or Inf)");
    }
    println!("affine (world_from_voxel, NIfTI index order):");
    for row in &v.world_from_voxel {
        println!(
            "  [{:>10.4} {:>10.4} {:>10.4} {:>10.4}]",
            row[0], row[1], row[2], row[3]
        );
    }
    Ok(())
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
    };
    plan.validate(image.ndim())?;

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
    io::save(&a.output, &out, &save)?;
    if let (Some(p), Some(l)) = (&a.label_out, &out_label) {
        io::save(p, l, &SaveOptions { keep_dtype: true })?;
    }
    let mut disp = None;
    if a.save_coords.is_some() || a.report.is_some() {
        let map = plan.compose(&image.shape)?;
        let gpu_stats = gpu
            .as_ref()
            .and_then(|g| g.displacement_stats(&plan, &map.out_shape).ok());
        let gpu_coords = match (&gpu, &a.save_coords) {
            (Some(g), Some(_)) => g.coordinates(&plan, &image.shape).ok(),
            _ => None,
        };
        let cpu = engine::cpu::CpuBackend::new();
        let need_cpu_field =
            gpu_stats.is_none() || (a.save_coords.is_some() && gpu_coords.is_none());
        let field = if need_cpu_field {
            cpu.field(&plan, &map.out_shape).map(|(f, _)| f)
        } else {
            None
        };
        let stats = gpu_stats
            .flatten()
            .or_else(|| field.as_ref().map(|f| f.displacement_stats(map.alpha)));
        if let Some((max_v, rms_v)) = stats {
            let min_sp = image
                .spacing_mm
                .iter()
                .cloned()
                .fold(f64::INFINITY, f64::min);
            let max_sp = image.spacing_mm.iter().cloned().fold(0.0, f64::max);
            disp = Some(serde_json::json!({
                "max_vox": max_v, "rms_vox": rms_v,
                "max_mm_range": [max_v * min_sp, max_v * max_sp],
                "rms_mm_range": [rms_v * min_sp, rms_v * max_sp],
            }));
        }
        if let Some(p) = &a.save_coords {
            let coords = match gpu_coords {
                Some(c) => c,
                None => engine::cpu::coordinates(&map, field.as_deref()),
            };
            let mut shape = vec![map.ndim];
            shape.extend_from_slice(&map.out_shape);
            io::npy::write(p, &coords, &shape, augscope::DType::F32)?;
        }
    }
    let t_write = t2.elapsed().as_secs_f64() * 1e3;

    if let Some(p) = &a.report {
        let report = serde_json::json!({
            "input": a.input, "output": a.output,
            "label": a.label, "label_output": a.label_out,
            "shape": image.shape, "channels": image.channels,
            "plan": plan, "done": plan.done_list(),
            "backend": backend_name, "backend_note": selected.note,
            "precision": a.precision,
            "timings_ms": { "engine": timings, "read": t_read, "compute": t_compute, "write": t_write,
                             "total": t0.elapsed().as_secs_f64() * 1e3 },
            "displacement": disp,
        });
        let text = serde_json::to_string_pretty(&report).context("cannot encode the report")?;
        io::atomic_write(p, "JSON report", |w| {
            std::io::Write::write_all(w, text.as_bytes())
        })?;
    }
    Ok(())
}

fn devices(json: bool) -> anyhow::Result<()> {
    let report = engine::device::discover();
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).context("cannot encode the report")?
        );
    } else {
        println!("{report}");
    }
    Ok(())
}

fn bench(a: BenchArgs) -> anyhow::Result<()> {
    let shapes: Vec<Vec<usize>> = a.shape.into_iter().map(|s| s.0).collect();
    if let Some(s) = shapes.iter().find(|s| s.len() != 3 || s.contains(&0)) {
        return Err(usage(format!(
            "--shape takes three positive sizes D,H,W, got {s:?}"
        )));
    }
    let mut opts = augscope::bench::BenchOptions {
        backend: a.backend,
        precision: a.precision,
        reps: a.reps,
        cpu_reps: a.cpu_reps,
        ..Default::default()
    };
    if !shapes.is_empty() {
        opts.shapes = shapes;
    }
    let report =
        augscope::bench::run(&opts, |line| eprintln!("{line}")).context("the benchmark failed")?;
    println!("{}", augscope::bench::table(&report));
    if let Some(p) = &a.json {
        let text = serde_json::to_string_pretty(&report).context("cannot encode the table")?;
        io::atomic_write(p, "JSON table", |w| {
            std::io::Write::write_all(w, text.as_bytes())
        })?;
    }
    Ok(())
}
