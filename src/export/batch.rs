//! `augscope batch`: N augmented samples of each input, drawn from a preset with seeds S, S+1, …,
//! image and label map together, with a JSON Lines manifest (DESIGN §5, §7).
//!
//! Reading, computing and writing overlap: a reader thread loads each input once and queues its
//! samples, compute workers (one for the CPU engine, which is parallel inside; one per GPU) apply
//! the plans, and writer threads compress and write in parallel, all through bounded queues so
//! that memory stays at a few volumes. Outputs are written atomically (temp file, rename) and a
//! manifest line is appended only after a sample's files are in place, so after Ctrl-C or a kill
//! the folder holds whole files only and `--resume` continues where the run stopped.
//!
//! Work items are numbered `input_index * count + sample_index`; `--shard k/n` takes the items
//! with `number % n == k`, so shards split every input's samples evenly and never overlap.

use std::collections::HashSet;
use std::fs::OpenOptions;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, sync_channel};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde_json::json;

use crate::augment::preset::{Preset, PresetError};
use crate::core::volume::Volume;
use crate::engine::{self, BackendSpec, EngineError, Precision};
use crate::io::{self, Format, IoError, LoadOptions, SaveOptions};

use super::preview::{self, Model};

/// What a batch run needs.
#[derive(Clone, Debug)]
pub struct BatchOptions {
    pub preset: Preset,
    pub inputs: Vec<PathBuf>,
    /// One label map per input, in the same order, or none.
    pub labels: Vec<PathBuf>,
    /// Samples per input.
    pub count: usize,
    /// Seed of the first sample; sample j of every input uses `seed + j`.
    pub seed: u64,
    pub out_dir: PathBuf,
    pub backend: BackendSpec,
    pub precision: Precision,
    /// `(k, n)`: this run does the items with `number % n == k`.
    pub shard: (usize, usize),
    /// Skip samples that the manifest lists and whose files exist.
    pub resume: bool,
    /// Output extension (`nii.gz`, `nii`, `npy`, `png`); the input's kind when `None`.
    pub ext: Option<String>,
    /// Write images in the input's storage type instead of float32.
    pub keep_dtype: bool,
    /// Show a progress bar on stderr (drawn only on a terminal).
    pub progress: bool,
    /// Set (by a Ctrl-C handler, or the GUI's cancel button) to stop after the files being
    /// written.
    pub stop: Arc<AtomicBool>,
    /// Live progress, for a caller that shows it (the GUI's export dialog; the CLI's bar reads
    /// the same counters).
    pub counter: Arc<BatchProgress>,
    /// Parallel writers (compression runs in them); 0 picks one per two cores, at least 2.
    pub writers: usize,
    /// An intensity filter for every sample (the explorer's filter panel), or none.
    pub filter: Option<BatchFilter>,
    /// Whose model of the transform runs (`--as`): augscope's own on the selected engine, or a
    /// training library's ([`super::preview`]) on the CPU engine.
    pub model: Model,
}

/// An intensity filter of a batch: before the spatial transform (each input is filtered once,
/// then every sample resamples the filtered input) or after it (every output image is
/// filtered). Label maps are never filtered. Runs on the batch's engine (`filter::run`).
#[derive(Clone, Debug)]
pub struct BatchFilter {
    pub filter: crate::filter::Filter,
    pub boundary: crate::filter::Boundary,
    pub after: bool,
}

impl BatchFilter {
    /// The filtered copy of `v` (every channel), on `opts`' engine.
    fn apply(&self, v: &Volume, opts: &BatchOptions) -> Result<Volume, BatchError> {
        let r = crate::filter::run(
            &self.filter,
            self.boundary,
            &v.data,
            &v.shape,
            &opts.backend,
            opts.precision,
        )
        .map_err(|e| usage(format!("filter {}: {e}", self.filter.name())))?;
        let mut out = v.clone_meta();
        out.shape = v.shape.clone();
        out.data = r.out;
        Ok(out)
    }

    /// The manifest's record of the filter.
    fn record(&self) -> serde_json::Value {
        json!({
            "filter": self.filter,
            "mode": self.boundary.mode.name(),
            "cval": self.boundary.cval,
            "stage": if self.after { "after" } else { "before" },
        })
    }
}

/// Progress of a running batch, updated by [`run`] and read by whoever shows it.
#[derive(Debug, Default)]
pub struct BatchProgress {
    /// Samples this run has to write (known once the work list and the manifest are read).
    pub todo: AtomicUsize,
    /// Samples written by this run so far (files in place and their manifest line appended).
    pub written: AtomicUsize,
    /// Samples an earlier run finished (`--resume`).
    pub skipped: AtomicUsize,
}

impl BatchProgress {
    /// (written, todo) as of now.
    pub fn get(&self) -> (usize, usize) {
        (
            self.written.load(Ordering::SeqCst),
            self.todo.load(Ordering::SeqCst),
        )
    }
}

/// What a batch run did.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct BatchSummary {
    /// Samples written by this run.
    pub written: usize,
    /// Samples skipped because an earlier run finished them (`--resume`).
    pub skipped: usize,
    /// Samples of this shard in all.
    pub total: usize,
    pub interrupted: bool,
    pub elapsed_s: f64,
    pub samples_per_s: f64,
    pub backend: String,
    pub manifest: PathBuf,
}

/// Why a batch failed.
#[derive(Debug, thiserror::Error)]
pub enum BatchError {
    #[error("{0}")]
    Usage(String),
    #[error(transparent)]
    Io(#[from] IoError),
    #[error(transparent)]
    Preset(#[from] PresetError),
    #[error("the transform failed: {0}")]
    Engine(#[from] EngineError),
    #[error("{0}")]
    Internal(String),
}

impl BatchError {
    /// Whether the user can fix it (exit code 2) rather than a bug (1).
    pub fn is_user(&self) -> bool {
        matches!(
            self,
            BatchError::Usage(_) | BatchError::Io(_) | BatchError::Preset(_)
        ) || matches!(self, BatchError::Engine(EngineError::Plan(_)))
    }
}

fn usage(msg: impl Into<String>) -> BatchError {
    BatchError::Usage(msg.into())
}

/// Parses `k/n` with `0 <= k < n`.
pub fn parse_shard(s: &str) -> Result<(usize, usize), String> {
    let bad = || format!("--shard '{s}' is not k/n with 0 <= k < n (e.g. 0/4)");
    let (k, n) = s.split_once('/').ok_or_else(bad)?;
    let k: usize = k.trim().parse().map_err(|_| bad())?;
    let n: usize = n.trim().parse().map_err(|_| bad())?;
    if n == 0 || k >= n {
        return Err(bad());
    }
    Ok((k, n))
}

/// The file name of an input without its extension (`ct.nii.gz` → `ct`); a folder's own name.
pub fn stem(path: &Path) -> String {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "input".into());
    if path.is_dir() {
        return name;
    }
    let lower = name.to_ascii_lowercase();
    for ext in [
        ".nii.gz", ".nii", ".npy", ".png", ".jpeg", ".jpg", ".tiff", ".tif", ".dcm",
    ] {
        if lower.ends_with(ext) {
            return name[..name.len() - ext.len()].to_string();
        }
    }
    name
}

/// The output extension for an input: its own kind where augscope writes it, else `nii.gz`.
fn default_ext(input: &Path) -> &'static str {
    let lower = input.to_string_lossy().to_ascii_lowercase();
    if lower.ends_with(".nii.gz") {
        "nii.gz"
    } else if lower.ends_with(".nii") {
        "nii"
    } else if lower.ends_with(".npy") {
        "npy"
    } else if lower.ends_with(".png") || lower.ends_with(".jpg") || lower.ends_with(".jpeg") {
        "png"
    } else {
        "nii.gz"
    }
}

/// What the manifest records as `verified_against`: for every export target, the library
/// versions its snippet was run under in augscope's interop checks.
fn verified_versions() -> serde_json::Value {
    use super::interop::{Target, verified_against};
    json!({
        "monai": verified_against(Target::Monai),
        "torchio": verified_against(Target::TorchIo),
        "batchgenerators": verified_against(Target::Batchgenerators),
        "nnunet": verified_against(Target::Nnunet),
    })
}

/// An exclusive lock on a shard's lock file in the output folder, held for the whole run, so a
/// second run of the same shard (or a `--resume` while the first still writes) is refused instead
/// of interleaving manifests and deleting the other run's temporary files. Other shards lock
/// their own files and write beside it. The file is removed when the run ends; filesystems
/// without locks run unlocked.
struct ShardLock {
    path: PathBuf,
    _file: std::fs::File,
}

impl Drop for ShardLock {
    fn drop(&mut self) {
        // Removed while still locked: a run that opened it meanwhile finds it gone (below).
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Whether two metadata describe the same file.
#[cfg(unix)]
fn same_file(a: &std::fs::Metadata, b: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    a.ino() == b.ino() && a.dev() == b.dev()
}

#[cfg(not(unix))]
fn same_file(_: &std::fs::Metadata, _: &std::fs::Metadata) -> bool {
    true
}

fn lock_shard(out_dir: &Path, shard: (usize, usize)) -> Result<Option<ShardLock>, BatchError> {
    let path = out_dir.join(if shard.1 == 1 {
        ".augscope-batch.lock".to_string()
    } else {
        format!(".augscope-batch-shard{}of{}.lock", shard.0, shard.1)
    });
    loop {
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| IoError::write("lock file", e.to_string(), &path))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(usage(format!(
                    "another augscope batch is writing this output folder ({}); wait for it to \
                     finish or choose another --out",
                    out_dir.display()
                )));
            }
            Err(std::fs::TryLockError::Error(_)) => return Ok(None),
        }
        // The lock counts only if the file is still the one at `path` (the run that held it may
        // have removed it between our open and our lock).
        let same = match (file.metadata(), std::fs::metadata(&path)) {
            (Ok(a), Ok(b)) => same_file(&a, &b),
            _ => false,
        };
        if same {
            return Ok(Some(ShardLock { path, _file: file }));
        }
    }
}

/// The manifest of a shard: `manifest.jsonl`, or `manifest-shard{k}of{n}.jsonl`.
pub fn manifest_path(out_dir: &Path, shard: (usize, usize)) -> PathBuf {
    if shard.1 == 1 {
        out_dir.join("manifest.jsonl")
    } else {
        out_dir.join(format!("manifest-shard{}of{}.jsonl", shard.0, shard.1))
    }
}

/// One sample to make.
#[derive(Clone, Debug)]
/// The samples of this run's shard, made one at a time: a `--count` of 10^8 never builds a list
/// (sample j of input i belongs to shard k of n when (i · count + j) mod n = k).
struct WorkList<'a> {
    opts: &'a BatchOptions,
    stems: Vec<String>,
    exts: Vec<String>,
}

impl<'a> WorkList<'a> {
    fn new(opts: &'a BatchOptions, stems: Vec<String>) -> Self {
        let exts = opts
            .inputs
            .iter()
            .map(|p| opts.ext.clone().unwrap_or_else(|| default_ext(p).into()))
            .collect();
        WorkList { opts, stems, exts }
    }

    fn in_shard(&self, input: usize, j: usize) -> bool {
        let (k, n) = self.opts.shard;
        (input as u128 * self.opts.count as u128 + j as u128) % n as u128 == k as u128
    }

    /// The sample indices of `input` in this shard, in order.
    fn indices(&self, input: usize) -> std::iter::StepBy<std::ops::Range<usize>> {
        let (k, n) = self.opts.shard;
        let offset = ((input as u128 * self.opts.count as u128) % n as u128) as usize;
        let first = (k + n - offset) % n;
        (first..self.opts.count).step_by(n)
    }

    fn total(&self) -> usize {
        (0..self.opts.inputs.len())
            .map(|i| self.indices(i).len())
            .sum()
    }

    fn item(&self, input: usize, j: usize) -> Item {
        let seed = self.opts.seed + j as u64;
        let (stem, ext) = (&self.stems[input], &self.exts[input]);
        let dir = &self.opts.out_dir;
        Item {
            input,
            index: j,
            seed,
            output: dir.join(format!("{stem}_s{seed}.{ext}")),
            label_output: (!self.opts.labels.is_empty())
                .then(|| dir.join(format!("{stem}_s{seed}_label.{ext}"))),
        }
    }

    /// The (input, index, is a label map) of an output file name of this shard, if it is one.
    fn parse(&self, name: &str) -> Option<(usize, usize, bool)> {
        self.stems.iter().enumerate().find_map(|(i, stem)| {
            let rest = name.strip_prefix(stem.as_str())?.strip_prefix("_s")?;
            let rest = rest
                .strip_suffix(self.exts[i].as_str())?
                .strip_suffix('.')?;
            let (digits, label) = match rest.strip_suffix("_label") {
                Some(d) => (d, true),
                None => (rest, false),
            };
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            let seed: u64 = digits.parse().ok()?;
            let j = usize::try_from(seed.checked_sub(self.opts.seed)?).ok()?;
            (j < self.opts.count && self.in_shard(i, j)).then_some((i, j, label))
        })
    }
}

struct Item {
    input: usize,
    index: usize,
    seed: u64,
    output: PathBuf,
    label_output: Option<PathBuf>,
}

/// A sample computed and waiting to be written.
struct Computed {
    item: Item,
    image: Volume,
    label: Option<Volume>,
    record: serde_json::Value,
    compute_ms: f64,
    read_ms: f64,
}

type Shared<T> = Arc<Mutex<T>>;

fn recv_shared<T>(rx: &Shared<Receiver<T>>) -> Option<T> {
    let guard = rx.lock().ok()?;
    guard.recv().ok()
}

/// Runs a batch. Returns when every item of the shard is written, an error occurs, or `stop` is
/// set (then `interrupted` is true and only whole files are left).
pub fn run(opts: &BatchOptions) -> Result<BatchSummary, BatchError> {
    let t0 = Instant::now();
    let counter = &opts.counter;
    for c in [&counter.todo, &counter.written, &counter.skipped] {
        c.store(0, Ordering::SeqCst);
    }
    opts.preset.validate()?;
    if opts.inputs.is_empty() {
        return Err(usage("batch needs at least one input"));
    }
    if opts.count == 0 {
        return Err(usage("--count must be at least 1"));
    }
    if !opts.labels.is_empty() && opts.labels.len() != opts.inputs.len() {
        return Err(usage(format!(
            "{} label maps given for {} inputs (give one --label per input, in the same order)",
            opts.labels.len(),
            opts.inputs.len()
        )));
    }
    let (k, n) = opts.shard;
    if n == 0 || k >= n {
        return Err(usage(format!("--shard {k}/{n} needs 0 <= k < n")));
    }
    if opts.seed.checked_add(opts.count as u64).is_none() {
        return Err(usage("--seed plus --count overflows a 64-bit seed"));
    }
    for p in opts.inputs.iter().chain(&opts.labels) {
        if !p.exists() {
            return Err(IoError::read("input", "no such file or folder", p).into());
        }
    }
    if let Some(e) = &opts.ext {
        let probe = PathBuf::from(format!("x.{e}"));
        match Format::from_path(&probe) {
            Ok(Format::Nifti | Format::Npy | Format::Png) => {}
            _ => {
                return Err(usage(format!(
                    "--ext {e} is not an output format (expected nii.gz, nii, npy or png)"
                )));
            }
        }
    }
    std::fs::create_dir_all(&opts.out_dir)
        .map_err(|e| IoError::write("output folder", e.to_string(), &opts.out_dir))?;
    let _lock = lock_shard(&opts.out_dir, opts.shard)?;

    // Predictable names: <stem>_s<seed>.<ext> and <stem>_s<seed>_label.<ext>.
    let stems: Vec<String> = opts.inputs.iter().map(|p| stem(p)).collect();
    for (i, s) in stems.iter().enumerate() {
        if let Some(j) = stems[..i].iter().position(|t| t == s) {
            return Err(usage(format!(
                "two inputs share the name '{s}' ({} and {}), so their outputs would collide",
                opts.inputs[j].display(),
                opts.inputs[i].display()
            )));
        }
    }
    let work = WorkList::new(opts, stems);
    // An output may not replace an input: an input in the output folder whose name is one of
    // this run's sample names.
    let canon = |p: &Path| p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
    let out_canon = canon(&opts.out_dir);
    for p in opts.inputs.iter().chain(&opts.labels) {
        let p = canon(p);
        if p.parent() == Some(out_canon.as_path())
            && let Some((_, _, label)) =
                p.file_name().and_then(|n| work.parse(&n.to_string_lossy()))
            && (!label || !opts.labels.is_empty())
        {
            return Err(usage(format!(
                "output would overwrite an input: {}",
                p.display()
            )));
        }
    }
    let total = work.total();

    // The manifest: refuse to mix runs unless resuming; when resuming keep the whole lines whose
    // files exist, and forget the rest.
    let manifest = manifest_path(&opts.out_dir, opts.shard);
    let mut finished: HashSet<PathBuf> = HashSet::new();
    // A manifest without a line (a run that failed before its first sample) holds nothing to
    // resume or to protect.
    let empty = std::fs::metadata(&manifest).is_ok_and(|m| m.len() == 0);
    if manifest.exists() && !empty {
        if !opts.resume {
            return Err(usage(format!(
                "the output folder already holds a batch manifest; pass --resume to continue \
                 that batch or choose another --out: {}",
                manifest.display()
            )));
        }
        let text = std::fs::read_to_string(&manifest)
            .map_err(|e| IoError::read("manifest", e.to_string(), &manifest))?;
        let mut kept = String::new();
        for line in text.lines() {
            let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
                continue; // a line torn by a kill
            };
            // Outputs live in the output folder under their own names: the line's path may be
            // relative to where an earlier run started, so only its file name counts.
            let in_folder = |p: &str| Path::new(p).file_name().map(|n| opts.out_dir.join(n));
            let Some(out) = v.get("output").and_then(|o| o.as_str()).and_then(in_folder) else {
                continue;
            };
            let label_ok = match v.get("label_output").and_then(|o| o.as_str()) {
                Some(l) => in_folder(l).is_some_and(|l| l.is_file()),
                None => true,
            };
            if out.is_file() && label_ok && finished.insert(out) {
                kept.push_str(line);
                kept.push('\n');
            }
        }
        io::atomic_write(&manifest, "manifest", |w| w.write_all(kept.as_bytes()))?;
    } else if !opts.resume
        && let Some(name) = std::fs::read_dir(&opts.out_dir).ok().and_then(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .find(|n| {
                    work.parse(n)
                        .is_some_and(|(_, _, label)| !label || !opts.labels.is_empty())
                })
        })
    {
        return Err(usage(format!(
            "output exists and no manifest lists it; pass --resume to redo unlisted samples or \
             choose another --out: {}",
            opts.out_dir.join(name).display()
        )));
    }
    // Temporary files of a killed run, for this shard's outputs only (other shards may be
    // writing theirs into the same folder right now).
    if let Ok(rd) = std::fs::read_dir(&opts.out_dir) {
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if let Some(rest) = name.strip_prefix('.')
                && let Some((target, _)) = rest.rsplit_once(".tmp-")
                && work.parse(target).is_some()
            {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
    // Samples of this run that an earlier one finished (the manifest may list others, from a
    // run with another --count).
    let skipped = finished
        .iter()
        .filter(|p| {
            p.file_name()
                .and_then(|n| work.parse(&n.to_string_lossy()))
                .is_some_and(|(_, _, label)| !label)
        })
        .count();
    let todo_count = total - skipped.min(total);
    counter.skipped.store(skipped, Ordering::SeqCst);
    counter.todo.store(todo_count, Ordering::SeqCst);

    // A library's model runs on the CPU engine.
    let spec = if opts.model.is_own() {
        opts.backend.clone()
    } else {
        BackendSpec::Cpu
    };
    let selected = engine::select::select(&spec, opts.precision);
    let backend_name = selected.backend.name();
    let backend_note = selected.note.clone();
    let n_compute = match &spec {
        BackendSpec::Cuda(ids) if backend_name.starts_with("cuda") => ids.len().max(1),
        _ => 1,
    };
    // Samples a GPU worker takes together (one item on the CPU engine).
    let gather = if backend_name.starts_with("cuda") {
        64
    } else {
        1
    };
    // Writers: half the cores beside the CPU engine; every core beside a GPU, whose compute
    // leaves the CPU to encoding (gzip) and writing.
    let n_writers = if opts.writers > 0 {
        opts.writers
    } else {
        let cores = std::thread::available_parallelism().map_or(2, |c| c.get());
        if gather > 1 {
            cores.max(2)
        } else {
            (cores / 2).max(2)
        }
    };

    let bar = if opts.progress {
        indicatif::ProgressBar::new(todo_count as u64)
    } else {
        indicatif::ProgressBar::hidden()
    };
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {wide_bar} {pos}/{len} samples  {per_sec}  ETA {eta}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    if skipped > 0 {
        bar.println(format!(
            "augscope: resuming: {skipped} of {total} samples are already done"
        ));
    }

    let failure: Shared<Option<BatchError>> = Arc::new(Mutex::new(None));
    let halt = Arc::new(AtomicBool::new(false));
    let fail = |e: BatchError| {
        if let Ok(mut f) = failure.lock()
            && f.is_none()
        {
            *f = Some(e);
        }
        halt.store(true, Ordering::SeqCst);
    };
    let stopped = || halt.load(Ordering::SeqCst) || opts.stop.load(Ordering::SeqCst);

    let mut manifest_file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&manifest)
        .map_err(|e| IoError::write("manifest", e.to_string(), &manifest))?;

    let mut written = 0usize;
    let backend = selected.backend;
    type Loaded = (Item, Arc<Volume>, Option<Arc<Volume>>, f64);
    std::thread::scope(|s| {
        let (job_tx, job_rx) = sync_channel::<Loaded>(2 + gather);
        let (out_tx, out_rx) = sync_channel::<Computed>(n_writers + 1);
        let (rec_tx, rec_rx) = std::sync::mpsc::channel::<String>();
        let job_rx = Arc::new(Mutex::new(job_rx));
        let out_rx = Arc::new(Mutex::new(out_rx));

        // Reader: each input once, then its samples, made one at a time.
        let work = &work;
        let finished = &finished;
        s.spawn(move || {
            for input in 0..opts.inputs.len() {
                if stopped() {
                    return;
                }
                let mut todo = work
                    .indices(input)
                    .map(|j| work.item(input, j))
                    .filter(|it| !finished.contains(&it.output))
                    .peekable();
                if todo.peek().is_none() {
                    continue;
                }
                let t = Instant::now();
                let loaded = (|| -> Result<(Volume, Option<Volume>), BatchError> {
                    let img = io::load(&opts.inputs[input], &LoadOptions::default())?;
                    opts.preset
                        .check_ndim(img.ndim())
                        .map_err(|e| usage(format!("{e}: {}", opts.inputs[input].display())))?;
                    let lab = match opts.labels.get(input) {
                        Some(p) => {
                            let l = io::load(p, &LoadOptions::default())?;
                            if l.shape != img.shape {
                                return Err(usage(format!(
                                    "label map shape {:?} differs from the image shape {:?}: {}",
                                    l.shape,
                                    img.shape,
                                    p.display()
                                )));
                            }
                            Some(l)
                        }
                        None => None,
                    };
                    Ok((img, lab))
                })();
                let read_ms = t.elapsed().as_secs_f64() * 1e3;
                let (img, lab) = match loaded {
                    Ok(v) => v,
                    Err(e) => {
                        fail(e);
                        return;
                    }
                };
                let img = match &opts.filter {
                    Some(f) if !f.after => match f.apply(&img, opts) {
                        Ok(v) => v,
                        Err(e) => {
                            fail(e);
                            return;
                        }
                    },
                    _ => img,
                };
                let img = Arc::new(img);
                let lab = lab.map(Arc::new);
                for it in todo {
                    if stopped()
                        || job_tx
                            .send((it, img.clone(), lab.clone(), read_ms))
                            .is_err()
                    {
                        return;
                    }
                }
            }
        });

        // Compute workers. On a GPU a worker takes the samples waiting in the queue together
        // (up to `gather`, about 512 MB of outputs): the engine runs them in batched launches.
        for _ in 0..n_compute {
            let job_rx = job_rx.clone();
            let out_tx = out_tx.clone();
            let backend = backend.as_ref();
            let backend_note = backend_note.clone();
            let fail = &fail;
            s.spawn(move || {
                while let Some(first) = recv_shared(&job_rx) {
                    if stopped() {
                        return;
                    }
                    let per_sample =
                        4 * first.1.data.len() + first.2.as_ref().map_or(0, |l| 4 * l.data.len());
                    let take = gather.min((512usize << 20) / per_sample.max(1)).max(1);
                    let mut items = vec![first];
                    if take > 1
                        && let Ok(rx) = job_rx.lock()
                    {
                        while items.len() < take {
                            match rx.try_recv() {
                                Ok(v) => items.push(v),
                                Err(_) => break,
                            }
                        }
                    }
                    let t = Instant::now();
                    let mut samples = Vec::with_capacity(items.len());
                    for (item, img, _, _) in &items {
                        match opts.preset.sample(item.seed, img.ndim(), &img.spacing_mm) {
                            Ok(s) => samples.push(s),
                            Err(e) => {
                                fail(e.into());
                                return;
                            }
                        }
                    }
                    let work: Vec<_> = items
                        .iter()
                        .zip(&samples)
                        .map(|((_, img, lab, _), sample)| (&sample.plan, &**img, lab.as_deref()))
                        .collect();
                    // What the library's model does differently, per sample (`model_steps`).
                    let mut steps: Vec<Vec<String>> = vec![];
                    let results: Vec<_> = if opts.model.is_own() {
                        steps.resize(
                            work.len(),
                            preview::own_step(opts.model).into_iter().collect(),
                        );
                        engine::select::apply_many_new_with_fallback(backend, &work)
                    } else {
                        work.iter()
                            .map(|(plan, img, lab)| {
                                match preview::preview(opts.model, img, *lab, plan) {
                                    Ok(p) => {
                                        steps.push(p.steps);
                                        Ok((p.image, p.label, Default::default(), None))
                                    }
                                    Err(preview::PreviewError::Plan(e)) => {
                                        Err(EngineError::Plan(e))
                                    }
                                    Err(e) => Err(EngineError::Shape(e.to_string())),
                                }
                            })
                            .collect()
                    };
                    steps.resize(results.len(), vec![]);
                    // The batch's time, shared evenly by its samples.
                    let compute_ms = t.elapsed().as_secs_f64() * 1e3 / items.len() as f64;
                    for (((item, _, _, read_ms), (sample, r)), model_steps) in items
                        .into_iter()
                        .zip(samples.into_iter().zip(results))
                        .zip(steps)
                    {
                        let (mut out, out_label, timings, oom) = match r {
                            Ok(v) => v,
                            Err(e) => {
                                fail(e.into());
                                return;
                            }
                        };
                        if let Some(f) = opts.filter.as_ref().filter(|f| f.after) {
                            match f.apply(&out, opts) {
                                Ok(v) => out = v,
                                Err(e) => {
                                    fail(e);
                                    return;
                                }
                            }
                        }
                        let used = if oom.is_some() {
                            "cpu".to_string()
                        } else {
                            backend.name()
                        };
                        let record = json!({
                            "input": opts.inputs[item.input],
                            "label": opts.labels.get(item.input),
                            "output": item.output,
                            "label_output": item.label_output,
                            "index": item.index,
                            "seed": item.seed,
                            "shape": out.shape,
                            "shard": format!("{}/{}", opts.shard.0, opts.shard.1),
                            "preset": opts.preset.name,
                            "done": sample.done,
                            "drawn": sample.drawn,
                            "plan": sample.plan,
                            "model": opts.model.id(),
                            "model_steps": model_steps,
                            "verified_against": verified_versions(),
                            "backend": used,
                            "backend_note": oom.or_else(|| backend_note.clone()),
                            "timings_ms": { "engine": timings },
                        });
                        let mut record = record;
                        if let Some(f) = &opts.filter {
                            record["intensity_filter"] = f.record();
                        }
                        let c = Computed {
                            item,
                            image: out,
                            label: out_label,
                            record,
                            compute_ms,
                            read_ms,
                        };
                        if out_tx.send(c).is_err() {
                            return;
                        }
                    }
                }
            });
        }
        drop(out_tx);
        drop(job_rx);

        // Writers.
        for _ in 0..n_writers {
            let out_rx = out_rx.clone();
            let rec_tx = rec_tx.clone();
            let fail = &fail;
            s.spawn(move || {
                while let Some(mut c) = recv_shared(&out_rx) {
                    if stopped() {
                        return;
                    }
                    let t = Instant::now();
                    let save = SaveOptions {
                        keep_dtype: opts.keep_dtype,
                    };
                    if let Err(e) = io::save(&c.item.output, &c.image, &save) {
                        fail(e.into());
                        return;
                    }
                    if let (Some(p), Some(l)) = (&c.item.label_output, &c.label)
                        && let Err(e) = io::save(p, l, &SaveOptions { keep_dtype: true })
                    {
                        fail(e.into());
                        return;
                    }
                    let write_ms = t.elapsed().as_secs_f64() * 1e3;
                    if let Some(tm) = c.record.get_mut("timings_ms") {
                        tm["read"] = json!(c.read_ms);
                        tm["compute"] = json!(c.compute_ms);
                        tm["write"] = json!(write_ms);
                    }
                    let line = match serde_json::to_string(&c.record) {
                        Ok(l) => l,
                        Err(e) => {
                            fail(BatchError::Internal(format!(
                                "cannot encode the manifest: {e}"
                            )));
                            return;
                        }
                    };
                    if rec_tx.send(line).is_err() {
                        return;
                    }
                }
            });
        }
        drop(rec_tx);

        // This thread appends the manifest, one whole line per finished sample.
        for line in rec_rx {
            let mut buf = line.into_bytes();
            buf.push(b'\n');
            if let Err(e) = manifest_file
                .write_all(&buf)
                .and_then(|_| manifest_file.flush())
            {
                fail(IoError::write("manifest", e.to_string(), &manifest).into());
                break;
            }
            written += 1;
            counter.written.store(written, Ordering::SeqCst);
            bar.set_position(counter.written.load(Ordering::SeqCst) as u64);
        }
    });
    bar.finish_and_clear();
    let _ = manifest_file.sync_all();

    if let Ok(mut f) = failure.lock()
        && let Some(e) = f.take()
    {
        return Err(e);
    }
    let elapsed_s = t0.elapsed().as_secs_f64();
    Ok(BatchSummary {
        written,
        skipped,
        total,
        interrupted: written + skipped < total,
        elapsed_s,
        samples_per_s: if elapsed_s > 0.0 {
            written as f64 / elapsed_s
        } else {
            0.0
        },
        backend: backend_name,
        manifest,
    })
}
