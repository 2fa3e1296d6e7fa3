//! What a run settles before its first sample: the options checked, the shard's lock on the
//! output folder, the manifest of an earlier run (kept on `--resume`, else a refusal) and the
//! temporary files a killed run left.

use std::collections::HashSet;
use std::fs::OpenOptions;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use super::work::WorkList;
use super::{BatchError, BatchOptions, usage};
use crate::io::{self, Format, IoError};

/// Checks what can be checked before the output folder is touched: the preset, the counts, the
/// shard, the inputs and the output extension.
pub(super) fn check_options(opts: &BatchOptions) -> Result<(), BatchError> {
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
    Ok(())
}

/// An exclusive lock on a shard's lock file in the output folder, held for the whole run, so a
/// second run of the same shard (or a `--resume` while the first still writes) is refused instead
/// of interleaving manifests and deleting the other run's temporary files. Other shards lock
/// their own files and write beside it. The file is removed when the run ends; filesystems
/// without locks run unlocked.
pub(super) struct ShardLock {
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

pub(super) fn lock_shard(
    out_dir: &Path,
    shard: (usize, usize),
) -> Result<Option<ShardLock>, BatchError> {
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

/// The outputs an earlier run of this shard finished. The manifest: refuse to mix runs unless
/// resuming; when resuming keep the whole lines whose files exist, and forget the rest.
pub(super) fn finished_samples(
    opts: &BatchOptions,
    work: &WorkList,
    manifest: &Path,
) -> Result<HashSet<PathBuf>, BatchError> {
    let mut finished: HashSet<PathBuf> = HashSet::new();
    // A manifest without a line (a run that failed before its first sample) holds nothing to
    // resume or to protect.
    let empty = std::fs::metadata(manifest).is_ok_and(|m| m.len() == 0);
    if manifest.exists() && !empty {
        if !opts.resume {
            return Err(usage(format!(
                "the output folder already holds a batch manifest; pass --resume to continue \
                 that batch or choose another --out: {}",
                manifest.display()
            )));
        }
        let text = std::fs::read_to_string(manifest)
            .map_err(|e| IoError::read("manifest", e.to_string(), manifest))?;
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
        io::atomic_write(manifest, "manifest", |w| w.write_all(kept.as_bytes()))?;
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
    Ok(finished)
}

/// Temporary files of a killed run, for this shard's outputs only (other shards may be
/// writing theirs into the same folder right now).
pub(super) fn remove_temporaries(opts: &BatchOptions, work: &WorkList) {
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
}
