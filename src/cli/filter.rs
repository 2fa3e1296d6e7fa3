//! `augscope filter`: one intensity filter over scans.

use std::path::{Path, PathBuf};

use super::{FilterArgs, LoadOptions, SaveOptions, io, resolved, usage};
/// Where the batch output of `input` goes: `dir/<input's file name>`, or `.npy` appended when
/// that format cannot be written.
pub(super) fn batch_output(dir: &Path, input: &Path) -> anyhow::Result<PathBuf> {
    let name = input
        .file_name()
        .ok_or_else(|| usage(format!("input has no file name: {}", input.display())))?;
    let out = dir.join(name);
    Ok(match io::Format::from_path(&out) {
        Ok(io::Format::Nifti | io::Format::Npy | io::Format::Png) => out,
        _ => dir.join(format!("{}.npy", name.to_string_lossy())),
    })
}

pub(super) fn filter_cmd(a: FilterArgs) -> anyhow::Result<()> {
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
    let boundary = crate::filter::Boundary {
        mode: a.mode,
        cval: a.cval,
    };
    let load_opts = LoadOptions {
        channels_first: a.channels,
        series: a.series.clone(),
        ..LoadOptions::default()
    };
    let save = SaveOptions {
        keep_dtype: a.dtype == "keep",
    };
    // Same-shape inputs go to the engine together (one launch on a GPU), up to 512 MiB.
    const BATCH_BYTES: usize = 512 << 20;
    let mut pending: Vec<(crate::Volume, &PathBuf)> = vec![];
    let mut noted = false;
    let mut flush = |pending: &mut Vec<(crate::Volume, &PathBuf)>| -> anyhow::Result<()> {
        let Some((first, _)) = pending.first() else {
            return Ok(());
        };
        let shape = first.shape.clone();
        let data: Vec<f32> = pending
            .iter()
            .flat_map(|(v, _)| v.data.iter().copied())
            .collect();
        let run = crate::filter::run(&filter, boundary, &data, &shape, &a.backend, a.precision)
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
        let batchable = !matches!(filter, crate::filter::Filter::Febds(_));
        if !(fits && batchable) {
            flush(&mut pending)?;
        }
        pending.push((v, output));
    }
    flush(&mut pending)
}
