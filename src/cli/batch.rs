//! `augscope batch`: N augmented samples and a manifest.

use super::{BackendSpec, BatchArgs, preset_error, usage};
pub(super) fn batch(a: BatchArgs) -> anyhow::Result<()> {
    use crate::export::batch;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let mut preset = crate::augment::preset::load_or_bundled(&a.preset).map_err(preset_error)?;
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
                crate::gpu::nvrtc::finish_background_compiles();
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
            boundary: crate::filter::Boundary {
                mode: a.filter_mode,
                cval: a.filter_cval,
            },
            after: a.filter_after,
        }),
        model: a.model,
        series: a.series,
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
