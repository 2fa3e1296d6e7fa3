//! The `augscope` command line (docs/design.md §7): the arguments here, one module per subcommand. Exit 0
//! ok, 2 bad input or usage (one clear line on stderr), 1 internal error. With no subcommand it
//! opens the GUI.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

use crate::augment::preset::escape_controls;
use crate::augment::{Elastic, Mode, Order, Plan, Space};
use crate::engine::{self, BackendSpec, Precision};
use crate::export::preview::{self, Model};
use crate::io::{self, LoadOptions, SaveOptions};

mod apply;
mod batch;
mod bench;
mod devices;
mod filter;
mod info;
mod preset;
mod view;

use apply::apply;
use batch::batch;
use bench::bench;
use devices::devices;
use filter::filter_cmd;
use info::{info, resolved};
use preset::{preset_cmd, preset_error, write_text};
use view::view;

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
    /// Shape, dtype, spacing, orientation and value range of a scan; the series of a DICOM
    /// folder that holds several.
    Info {
        file: PathBuf,
        /// The first axis of a .npy array is channels.
        #[arg(long)]
        channels: bool,
        /// The series to describe of a DICOM folder that holds several: its SeriesInstanceUID,
        /// or its SeriesNumber where no other series has it.
        #[arg(long, value_name = "UID|NUMBER")]
        series: Option<String>,
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
    /// The series to open of a DICOM folder that holds several: its SeriesInstanceUID, or its
    /// SeriesNumber where no other series has it (without, the window offers them in a picker).
    #[arg(long, value_name = "UID|NUMBER")]
    series: Option<String>,
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

fn parse_step(s: &str) -> Result<crate::core::intensity::IntensityStep, String> {
    serde_json::from_str(s).map_err(|e| format!("not an intensity step: {e}"))
}

fn parse_normalize(s: &str) -> Result<crate::core::intensity::Normalize, String> {
    let n: crate::core::intensity::Normalize = serde_json::from_str(s).map_err(|e| {
        format!(
            "not a normalisation (method nnunet_zscore, nnunet_ct, monai_scale_intensity_range, \
             torchio_z_normalization or torchio_rescale_intensity with its settings): {e}"
        )
    })?;
    n.validate()?;
    Ok(n)
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
    /// After the resample, add normal noise of standard deviation STD (one value, or one per
    /// channel), as batchgeneratorsv2's GaussianNoiseTransform; the noise comes from counters
    /// keyed by --seed, the same on every engine.
    #[arg(long, value_parser = parse_numbers, allow_hyphen_values = true, help_heading = "Intensity (after the resample, image only, in this order)")]
    noise: Option<Numbers>,
    /// Gaussian blur of SIGMA voxels (one value, or one per axis) on every channel, as
    /// batchgeneratorsv2's GaussianBlurTransform (about ±3 sigma, mirrored edges).
    #[arg(long, value_parser = parse_numbers, allow_hyphen_values = true, help_heading = "Intensity (after the resample, image only, in this order)")]
    blur: Option<Numbers>,
    /// After the resample, multiply the image by M (one value, or one per channel), as
    /// batchgeneratorsv2's MultiplicativeBrightnessTransform.
    #[arg(long, value_parser = parse_numbers, allow_hyphen_values = true, help_heading = "Intensity (after the resample, image only, in this order)")]
    brightness: Option<Numbers>,
    /// Contrast F (one value, or one per channel): (x - mean) * F + mean, clipped to the channel's
    /// range as batchgeneratorsv2's ContrastTransform with preserve_range.
    #[arg(long, value_parser = parse_numbers, allow_hyphen_values = true, help_heading = "Intensity (after the resample, image only, in this order)")]
    contrast: Option<Numbers>,
    /// --contrast without the clip to the channel's range (preserve_range off).
    #[arg(
        long,
        requires = "contrast",
        help_heading = "Intensity (after the resample, image only, in this order)"
    )]
    contrast_unclipped: bool,
    /// Simulated low resolution: down by factor S in (0, 1] (one value, or one per axis) with
    /// nearest-exact, back up linearly, on every channel, as batchgeneratorsv2's
    /// SimulateLowResolutionTransform.
    #[arg(long, value_parser = parse_numbers, allow_hyphen_values = true, help_heading = "Intensity (after the resample, image only, in this order)")]
    lowres: Option<Numbers>,
    /// Gamma G > 0 (one value, or one per channel) on the channel's range, as
    /// batchgeneratorsv2's GammaTransform.
    #[arg(long, value_parser = parse_numbers, allow_hyphen_values = true, help_heading = "Intensity (after the resample, image only, in this order)")]
    gamma: Option<Numbers>,
    /// --gamma on the inverted image (p_invert_image).
    #[arg(
        long,
        requires = "gamma",
        help_heading = "Intensity (after the resample, image only, in this order)"
    )]
    gamma_invert: bool,
    /// --gamma keeping the mean and standard deviation of before (p_retain_stats).
    #[arg(
        long,
        requires = "gamma",
        help_heading = "Intensity (after the resample, image only, in this order)"
    )]
    gamma_retain_stats: bool,
    /// An intensity step of any family with its values, as a plan's `intensity` entry (JSON),
    /// e.g. '{"torchio_gamma": {"gammas": [1.3]}}' (docs/presets.md lists the families);
    /// repeatable; acts after the flags' steps, in the order given.
    #[arg(long, value_name = "JSON", value_parser = parse_step, help_heading = "Intensity (after the resample, image only, in this order)")]
    step: Vec<crate::core::intensity::IntensityStep>,
    /// Mirror (--flip) after the intensity steps, in nnU-Net's order (spatial, intensity,
    /// mirror), rather than with the resample before them.
    #[arg(
        long,
        requires = "flip",
        help_heading = "Intensity (after the resample, image only, in this order)"
    )]
    flip_after_intensity: bool,
    /// Normalise the image first, as a preset's `[normalize]` (JSON), e.g.
    /// '{"method": "nnunet_zscore"}' or '{"method": "monai_scale_intensity_range", "a_min": -1000,
    /// "a_max": 1000, "b_min": 0, "b_max": 1, "clip": true}' (docs/presets.md lists the methods):
    /// the transform and the steps then act in its units.
    #[arg(long, value_name = "JSON", value_parser = parse_normalize, help_heading = "Intensity (after the resample, image only, in this order)")]
    normalize: Option<crate::core::intensity::Normalize>,
    /// Seed of the elastic noise and of --noise.
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
    /// The series to read of a DICOM folder that holds several: its SeriesInstanceUID, or its
    /// SeriesNumber where no other series has it (`augscope info FOLDER` lists them).
    #[arg(long, value_name = "UID|NUMBER")]
    series: Option<String>,
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

/// Runs the command line; the exit status says how it went.
pub fn main() -> ExitCode {
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
    let result = run(cli);
    crate::gpu::nvrtc::finish_background_compiles();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let user = e.downcast_ref::<Usage>().is_some()
                || e.downcast_ref::<io::IoError>().is_some()
                || e.downcast_ref::<crate::augment::PlanError>().is_some()
                || e.downcast_ref::<preview::PreviewError>().is_some();
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
            series: None,
        }),
        Some(Cmd::View(a)) => view(a),
        Some(Cmd::Info {
            file,
            channels,
            series,
        }) => info(&file, channels, series),
        Some(Cmd::Apply(a)) => apply(a),
        Some(Cmd::Devices { json, clear_cache }) => devices(json, clear_cache),
        Some(Cmd::Bench(a)) => bench(a),
        Some(Cmd::Batch(a)) => batch(a),
        Some(Cmd::Preset(c)) => preset_cmd(c),
        Some(Cmd::Filter(a)) => filter_cmd(a),
    }
}

#[derive(Args)]
struct BatchArgs {
    /// Preset file (TOML), or a bundled preset: nnunet-v2, nnunet-v1-3d, batchgenerators,
    /// monai-brats.
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
    #[arg(long, default_value = "0/1", value_parser = crate::export::batch::parse_shard)]
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
    #[arg(long, value_parser = |s: &str| s.parse::<crate::filter::Filter>(), value_name = "NAME:ARGS")]
    filter: Option<crate::filter::Filter>,
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
    /// The series to read of every DICOM folder input that holds several: a SeriesInstanceUID,
    /// or a SeriesNumber that one series of each folder has (`augscope info FOLDER` lists them).
    #[arg(long, value_name = "UID|NUMBER")]
    series: Option<String>,
    /// Inputs (.nii, .nii.gz, .npy, .png, .jpg, .tif, .dcm or a DICOM folder).
    #[arg(required = true)]
    inputs: Vec<PathBuf>,
}

#[derive(Subcommand)]
enum PresetCmd {
    /// Print a preset as Python for a training pipeline.
    Export {
        /// monai, torchio, batchgenerators, batchgenerators-json, nnunet, monai-bundle or python.
        #[arg(long, value_parser = |s: &str| s.parse::<crate::export::Target>())]
        to: crate::export::Target,
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
        /// Channels of the image (the intensity steps draw per channel).
        #[arg(long, default_value_t = 1,
              value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=4096))]
        channels: usize,
        preset: PathBuf,
    },
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
    #[arg(long, value_parser = |s: &str| s.parse::<crate::filter::FebdsMethod>(), value_name = "dog|log|fft")]
    febds: Option<crate::filter::FebdsMethod>,
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
    /// The series to read of every DICOM folder input that holds several: a SeriesInstanceUID,
    /// or a SeriesNumber that one series of each folder has (`augscope info FOLDER` lists them).
    #[arg(long, value_name = "UID|NUMBER")]
    series: Option<String>,
    /// Output type: float32 (default) or keep (the input's type).
    #[arg(long, default_value = "float32", value_parser = ["float32", "keep"])]
    dtype: String,
}

impl FilterArgs {
    fn filter(&self) -> anyhow::Result<crate::filter::Filter> {
        use crate::filter::Filter;
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
