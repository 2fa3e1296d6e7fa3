//! `augscope preset`: export, import and show presets.

use anyhow::Context;

use std::path::Path;

use super::{PresetCmd, io, usage};
pub(super) fn preset_error(e: crate::augment::preset::PresetError) -> anyhow::Error {
    usage(e.to_string())
}

pub(super) fn write_text(
    output: Option<&Path>,
    text: &str,
    what: &'static str,
) -> anyhow::Result<()> {
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
                Err(e) => stdout_error(e, what),
                Ok(()) => Ok(()),
            }
        }
    }
}

/// What a failed write of the `what` to standard output means: an error line, or the quiet end
/// of a reader that stopped reading.
fn stdout_error(e: std::io::Error, what: &str) -> anyhow::Result<()> {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        Ok(())
    } else {
        Err(usage(format!(
            "cannot write the {what} to standard output: {e}"
        )))
    }
}

pub(super) fn preset_cmd(c: PresetCmd) -> anyhow::Result<()> {
    use crate::augment::preset;
    match c {
        PresetCmd::Export {
            to,
            ndim,
            output,
            preset: p,
        } => {
            let pr = preset::load_or_bundled(&p).map_err(preset_error)?;
            let text = crate::export::export(&pr, to, ndim).map_err(preset_error)?;
            write_text(output.as_deref(), &text, "snippet")
        }
        PresetCmd::Import { output, params } => {
            let text = preset::read_text_file(&params, preset::MAX_TEXT_BYTES)
                .map_err(|e| usage(format!("cannot read parameters: {e}: {}", params.display())))?;
            let name = format!("imported from {}", params.display());
            let pr = crate::export::import::import(&text, &name)
                .map_err(|e| usage(format!("{e}: {}", params.display())))?;
            write_text(output.as_deref(), &pr.to_toml(), "preset")
        }
        PresetCmd::Sample {
            seed,
            count,
            ndim,
            channels,
            preset: p,
        } => {
            let pr = preset::load_or_bundled(&p).map_err(preset_error)?;
            let spacing = vec![1.0; ndim];
            let Some(count) = count else {
                let s = pr
                    .sample(seed, ndim, channels, &spacing)
                    .map_err(preset_error)?;
                let text = serde_json::to_string_pretty(&s).context("cannot encode the sample")?;
                return write_text(None, &format!("{text}\n"), "sample");
            };
            // Every sample is written as it is drawn: memory does not grow with --count.
            pr.check_ndim(ndim).map_err(preset_error)?;
            let mut out = std::io::BufWriter::new(std::io::stdout().lock());
            for j in 0..count {
                let s = pr
                    .sample(seed.wrapping_add(j), ndim, channels, &spacing)
                    .map_err(preset_error)?;
                let line = serde_json::to_string(&s).context("cannot encode the sample")?;
                let written = std::io::Write::write_all(&mut out, line.as_bytes())
                    .and_then(|()| std::io::Write::write_all(&mut out, b"\n"));
                if let Err(e) = written {
                    return stdout_error(e, "samples");
                }
            }
            match std::io::Write::flush(&mut out) {
                Err(e) => stdout_error(e, "samples"),
                Ok(()) => Ok(()),
            }
        }
    }
}
