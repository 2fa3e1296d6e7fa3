//! `augscope preset`: export, import and show presets.

use super::*;

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
                Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(usage(format!(
                    "cannot write the {what} to standard output: {e}"
                ))),
                _ => Ok(()),
            }
        }
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
            let text = std::fs::read_to_string(&params)
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
