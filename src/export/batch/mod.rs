//! `augscope batch`: N augmented samples of each input, drawn from a preset with seeds S, S+1, …,
//! image and label map together, with a JSON Lines manifest (docs/design.md §5, §7).
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
//!
//! This module holds the public API; [`run`] takes a batch through its stages in order: `prepare`
//! (the checks, the shard's lock, the manifest of an earlier run), `work` (the samples of the
//! shard and their output names) and `pipeline` (the reader, compute and writer threads).

mod pipeline;
mod prepare;
mod work;

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Instant;

use serde_json::json;

use crate::augment::preset::{Preset, PresetError};
use crate::core::volume::Volume;
use crate::engine::{BackendSpec, EngineError, Precision};
use crate::io::IoError;

use super::preview::Model;
use pipeline::Control;

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
    /// The series to read of every DICOM folder input that holds several (`--series`): a
    /// SeriesInstanceUID, or a SeriesNumber that one series of each folder has.
    pub series: Option<String>,
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

/// The manifest of a shard: `manifest.jsonl`, or `manifest-shard{k}of{n}.jsonl`.
pub fn manifest_path(out_dir: &Path, shard: (usize, usize)) -> PathBuf {
    if shard.1 == 1 {
        out_dir.join("manifest.jsonl")
    } else {
        out_dir.join(format!("manifest-shard{}of{}.jsonl", shard.0, shard.1))
    }
}

/// Runs a batch. Returns when every item of the shard is written, an error occurs, or `stop` is
/// set (then `interrupted` is true and only whole files are left).
pub fn run(opts: &BatchOptions) -> Result<BatchSummary, BatchError> {
    let t0 = Instant::now();
    let counter = &opts.counter;
    for c in [&counter.todo, &counter.written, &counter.skipped] {
        c.store(0, Ordering::SeqCst);
    }
    prepare::check_options(opts)?;
    let new_dir = !opts.out_dir.exists();
    std::fs::create_dir_all(&opts.out_dir)
        .map_err(|e| IoError::write("output folder", e.to_string(), &opts.out_dir))?;
    let _lock = prepare::lock_shard(&opts.out_dir, opts.shard)?;

    let work = work::work_list(opts)?;
    let total = work.total();

    let manifest = manifest_path(&opts.out_dir, opts.shard);
    let finished = prepare::finished_samples(opts, &work, &manifest)?;
    prepare::remove_temporaries(opts, &work);
    let skipped = work.done_before(&finished);
    let todo_count = total - skipped.min(total);
    counter.skipped.store(skipped, Ordering::SeqCst);
    counter.todo.store(todo_count, Ordering::SeqCst);

    let workers = pipeline::workers(opts);
    let bar = progress_bar(opts.progress, todo_count, skipped, total);
    let ctl = Control::new(&opts.stop);

    let new_manifest = !manifest.exists();
    let mut manifest_file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&manifest)
        .map_err(|e| IoError::write("manifest", e.to_string(), &manifest))?;

    let written = pipeline::run(
        opts,
        &work,
        &finished,
        &workers,
        &ctl,
        (&mut manifest_file, &manifest),
        &bar,
    );
    bar.finish_and_clear();
    let _ = manifest_file.sync_all();

    if let Some(e) = ctl.take_failure() {
        // A run that failed before its first sample leaves nothing behind: no empty manifest,
        // no output folder it made.
        if written == 0 && new_manifest {
            drop(manifest_file);
            let _ = std::fs::remove_file(&manifest);
            drop(_lock);
            if new_dir {
                let _ = std::fs::remove_dir(&opts.out_dir);
            }
        }
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
        backend: workers.backend_name,
        manifest,
    })
}

/// The progress bar on stderr (hidden unless `show`), with the line that says what an earlier
/// run already did.
fn progress_bar(
    show: bool,
    todo_count: usize,
    skipped: usize,
    total: usize,
) -> indicatif::ProgressBar {
    let bar = if show {
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
    bar
}
