//! `augscope bench`: pipelines, filters and latency.

use anyhow::Context;

use super::{BenchArgs, io, usage, write_text};
pub(super) fn bench(a: BenchArgs) -> anyhow::Result<()> {
    let shapes: Vec<Vec<usize>> = a.shape.iter().map(|s| s.0.clone()).collect();
    if let Some(s) = shapes.iter().find(|s| s.len() != 3 || s.contains(&0)) {
        return Err(usage(format!(
            "--shape takes three positive sizes D,H,W, got {s:?}"
        )));
    }
    if a.latency {
        return bench_latency(&a, shapes.first().cloned());
    }
    let mut opts = crate::bench::BenchOptions {
        backend: a.backend,
        precision: a.precision,
        reps: a.reps,
        cpu_reps: a.cpu_reps,
        spatial: a.rows != "filters",
        filters: a.rows != "spatial",
        order: a.order,
        ..Default::default()
    };
    if !shapes.is_empty() {
        opts.shapes = shapes;
    }
    let report =
        crate::bench::run(&opts, |line| eprintln!("{line}")).context("the benchmark failed")?;
    if let Some(p) = &a.json {
        let text = serde_json::to_string_pretty(&report).context("cannot encode the table")?;
        io::atomic_write(p, "JSON table", |w| {
            std::io::Write::write_all(w, text.as_bytes())
        })?;
    }
    write_text(
        None,
        &format!("{}\n", crate::bench::table(&report)),
        "benchmark table",
    )?;
    Ok(())
}

#[cfg(feature = "gui")]
pub(super) fn bench_latency(a: &BenchArgs, shape: Option<Vec<usize>>) -> anyhow::Result<()> {
    use crate::app::latency;
    if let Some(p) = &a.input
        && !p.exists()
    {
        return Err(usage(format!("no such file or folder: {}", p.display())));
    }
    let opts = latency::LatencyOptions {
        backend: a.backend.clone(),
        precision: a.precision,
        shape,
        input: a.input.clone(),
        steps: a.steps.max(1),
        ..Default::default()
    };
    let rows = match &a.grid {
        Some(n) => {
            let preset = crate::augment::preset::load_or_bundled(&a.grid_preset)
                .map_err(super::preset_error)?;
            let n = n
                .parse()
                .map_err(|_| usage(format!("--grid {n} is not 4, 9 or 16")))?;
            latency::grid(&opts, n, &preset, |line| eprintln!("{line}"))
        }
        None => latency::run(&opts, |line| eprintln!("{line}")),
    }
    .map_err(|e| anyhow::anyhow!(e))
    .context("the latency measurement failed")?;
    if let Some(p) = &a.json {
        let text = serde_json::to_string_pretty(&rows).context("cannot encode the table")?;
        io::atomic_write(p, "JSON table", |w| {
            std::io::Write::write_all(w, text.as_bytes())
        })?;
    }
    write_text(
        None,
        &format!("{}\n", latency::table(&rows)),
        "latency table",
    )
}

#[cfg(not(feature = "gui"))]
pub(super) fn bench_latency(_: &BenchArgs, _: Option<Vec<usize>>) -> anyhow::Result<()> {
    Err(usage(
        "--latency measures the explorer's worker, which this build leaves out: build with the \
         default features (cargo build --release)",
    ))
}
