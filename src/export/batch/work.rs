//! The samples of a run's shard and their output names: `<stem>_s<seed>.<ext>` and
//! `<stem>_s<seed>_label.<ext>` in the output folder, made one at a time, and the check that no
//! two inputs and no output and input share a name.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use super::{BatchError, BatchOptions, stem, usage};

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

/// The work list of `opts`, once the names it gives are known not to collide with each other or
/// to replace an input.
pub(super) fn work_list(opts: &BatchOptions) -> Result<WorkList<'_>, BatchError> {
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
    Ok(work)
}

#[derive(Clone, Debug)]
/// The samples of this run's shard, made one at a time: a `--count` of 10^8 never builds a list
/// (sample j of input i belongs to shard k of n when (i · count + j) mod n = k).
pub(super) struct WorkList<'a> {
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
    pub(super) fn indices(&self, input: usize) -> std::iter::StepBy<std::ops::Range<usize>> {
        let (k, n) = self.opts.shard;
        let offset = ((input as u128 * self.opts.count as u128) % n as u128) as usize;
        let first = (k + n - offset) % n;
        (first..self.opts.count).step_by(n)
    }

    pub(super) fn total(&self) -> usize {
        (0..self.opts.inputs.len())
            .map(|i| self.indices(i).len())
            .sum()
    }

    pub(super) fn item(&self, input: usize, j: usize) -> Item {
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
    pub(super) fn parse(&self, name: &str) -> Option<(usize, usize, bool)> {
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

    /// Samples of this run that an earlier one finished (the manifest may list others, from a
    /// run with another --count).
    pub(super) fn done_before(&self, finished: &HashSet<PathBuf>) -> usize {
        finished
            .iter()
            .filter(|p| {
                p.file_name()
                    .and_then(|n| self.parse(&n.to_string_lossy()))
                    .is_some_and(|(_, _, label)| !label)
            })
            .count()
    }
}

/// One sample to make.
pub(super) struct Item {
    pub(super) input: usize,
    pub(super) index: usize,
    pub(super) seed: u64,
    pub(super) output: PathBuf,
    pub(super) label_output: Option<PathBuf>,
}
