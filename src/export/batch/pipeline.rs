//! The threads of a run: a reader that loads each input once and queues its samples, compute
//! workers that apply the plans (augscope's engine or a library's model), writers that save the
//! outputs, and the manifest appended on the calling thread, one whole line per finished sample.
//! Bounded queues keep memory at a few volumes; the first error stops every thread.

use std::collections::HashSet;
use std::fs::File;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde_json::json;

use super::work::{Item, WorkList};
use super::{BatchError, BatchOptions, usage};
use crate::augment::Plan;
use crate::augment::preset::Sample;
use crate::core::volume::Volume;
use crate::engine::select::NewResult;
use crate::engine::{self, Backend, BackendSpec, EngineError};
use crate::export::preview;
use crate::io::{self, IoError, LoadOptions, SaveOptions};

/// What the manifest records as `verified_against`: for every export target, the library
/// versions its snippet was run under in augscope's interop checks.
fn verified_versions() -> serde_json::Value {
    use crate::export::interop::{Target, verified_against};
    json!({
        "monai": verified_against(Target::Monai),
        "torchio": verified_against(Target::TorchIo),
        "batchgenerators": verified_against(Target::Batchgenerators),
        "nnunet": verified_against(Target::Nnunet),
    })
}

/// A sample waiting to be computed: its item, the loaded (and filtered) input and label map, and
/// the time it took to read them.
type Loaded = (Item, Arc<Volume>, Option<Arc<Volume>>, f64);

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

/// How the threads of a run stop together: the first error is kept, and every thread stops
/// after it, or once the caller's `stop` is set.
pub(super) struct Control<'a> {
    failure: Mutex<Option<BatchError>>,
    halt: AtomicBool,
    stop: &'a AtomicBool,
}

impl<'a> Control<'a> {
    pub(super) fn new(stop: &'a AtomicBool) -> Self {
        Control {
            failure: Mutex::new(None),
            halt: AtomicBool::new(false),
            stop,
        }
    }

    fn fail(&self, e: BatchError) {
        if let Ok(mut f) = self.failure.lock()
            && f.is_none()
        {
            *f = Some(e);
        }
        self.halt.store(true, Ordering::SeqCst);
    }

    fn stopped(&self) -> bool {
        self.halt.load(Ordering::SeqCst) || self.stop.load(Ordering::SeqCst)
    }

    /// The first error of the run, if there was one.
    pub(super) fn take_failure(&self) -> Option<BatchError> {
        match self.failure.lock() {
            Ok(mut f) => f.take(),
            Err(_) => None,
        }
    }
}

/// The engine of a run and the threads around it.
pub(super) struct Workers {
    backend: Arc<dyn Backend>,
    pub(super) backend_name: String,
    backend_note: Option<String>,
    /// Compute workers: one per GPU, one for the CPU engine (which is parallel inside).
    n_compute: usize,
    /// The most samples a compute worker takes from the queue at once.
    gather: usize,
    n_writers: usize,
}

/// Selects the engine of `opts` and sizes the compute and writer threads around it.
pub(super) fn workers(opts: &BatchOptions) -> Workers {
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
    Workers {
        backend: selected.backend,
        backend_name,
        backend_note,
        n_compute,
        gather,
        n_writers,
    }
}

/// Runs the reader, the compute workers and the writers, and appends the manifest on this
/// thread until they are done or stopped. Returns how many samples were written; an error is
/// left in `ctl`.
pub(super) fn run(
    opts: &BatchOptions,
    work: &WorkList,
    finished: &HashSet<PathBuf>,
    workers: &Workers,
    ctl: &Control,
    (manifest_file, manifest): (&mut File, &Path),
    bar: &indicatif::ProgressBar,
) -> usize {
    let mut written = 0usize;
    std::thread::scope(|s| {
        let (job_tx, job_rx) = sync_channel::<Loaded>(2 + workers.gather);
        let (out_tx, out_rx) = sync_channel::<Computed>(workers.n_writers + 1);
        let (rec_tx, rec_rx) = std::sync::mpsc::channel::<String>();
        let job_rx = Arc::new(Mutex::new(job_rx));
        let out_rx = Arc::new(Mutex::new(out_rx));

        // Reader: each input once, then its samples, made one at a time.
        s.spawn(move || {
            let backend = workers.backend.as_ref();
            if let Err(e) = read_inputs(opts, work, finished, ctl, backend, &job_tx) {
                ctl.fail(e);
            }
        });

        // Compute workers. On a GPU a worker takes the samples waiting in the queue together
        // (up to `gather`, about 512 MB of outputs): the engine runs them in batched launches.
        for _ in 0..workers.n_compute {
            let job_rx = job_rx.clone();
            let out_tx = out_tx.clone();
            s.spawn(move || {
                if let Err(e) = compute(opts, workers, ctl, &job_rx, &out_tx) {
                    ctl.fail(e);
                }
            });
        }
        drop(out_tx);
        drop(job_rx);

        // Writers.
        for _ in 0..workers.n_writers {
            let out_rx = out_rx.clone();
            let rec_tx = rec_tx.clone();
            s.spawn(move || {
                if let Err(e) = write_outputs(opts, ctl, &out_rx, &rec_tx) {
                    ctl.fail(e);
                }
            });
        }
        drop(rec_tx);

        // This thread appends the manifest, one whole line per finished sample.
        let counter = &opts.counter;
        for line in rec_rx {
            let mut buf = line.into_bytes();
            buf.push(b'\n');
            if let Err(e) = manifest_file
                .write_all(&buf)
                .and_then(|_| manifest_file.flush())
            {
                ctl.fail(IoError::write("manifest", e.to_string(), manifest).into());
                break;
            }
            written += 1;
            counter.written.store(written, Ordering::SeqCst);
            bar.set_position(counter.written.load(Ordering::SeqCst) as u64);
        }
    });
    written
}

/// The reader: loads each input that has samples left once, then queues its samples. Returns
/// when every input is queued or the run stops.
fn read_inputs(
    opts: &BatchOptions,
    work: &WorkList,
    finished: &HashSet<PathBuf>,
    ctl: &Control,
    backend: &dyn Backend,
    job_tx: &SyncSender<Loaded>,
) -> Result<(), BatchError> {
    for input in 0..opts.inputs.len() {
        if ctl.stopped() {
            return Ok(());
        }
        // Made one at a time, twice over (a few ahead for the engine, then all of them): nothing
        // is sized by --count.
        let todo = || {
            work.indices(input)
                .map(move |j| work.item(input, j))
                .filter(|it| !finished.contains(&it.output))
        };
        if todo().next().is_none() {
            continue;
        }
        let t = Instant::now();
        let loaded = load_input(opts, input);
        let read_ms = t.elapsed().as_secs_f64() * 1e3;
        let (img, lab) = loaded?;
        let img = match &opts.filter {
            Some(f) if !f.after => f.apply(&img, opts)?,
            _ => img,
        };
        let first: Vec<Item> = todo().take(PREPARE_PLANS).collect();
        prepare_modules(opts, backend, &first, &img, lab.as_ref());
        drop(first);
        let img = Arc::new(img);
        let lab = lab.map(Arc::new);
        for it in todo() {
            if ctl.stopped()
                || job_tx
                    .send((it, img.clone(), lab.clone(), read_ms))
                    .is_err()
            {
                return Ok(());
            }
        }
    }
    Ok(())
}

/// The samples of one input whose plans [`prepare_modules`] hands to the engine ahead: the first
/// batches are the ones a first run would otherwise wait for.
const PREPARE_PLANS: usize = 64;

/// Starts the engine compiling what the first samples of this input will launch (augscope's own
/// model: a library's model runs on the CPU engine). A plan that cannot be drawn is skipped here;
/// the compute worker reports it.
fn prepare_modules(
    opts: &BatchOptions,
    backend: &dyn Backend,
    items: &[Item],
    img: &Volume,
    lab: Option<&Volume>,
) {
    if !opts.model.is_own() {
        return;
    }
    let plans: Vec<Plan> = items
        .iter()
        .filter_map(|it| {
            opts.preset
                .sample(it.seed, img.ndim(), img.channels, &img.spacing_mm)
                .ok()
        })
        .map(|s| s.plan)
        .collect();
    let _ = backend.prepare(engine::Prepare::Modules {
        plans: &plans,
        in_shape: &img.shape,
        channels: img.channels,
        label_channels: lab.map_or(0, |l| l.channels),
    });
}

/// Input `input` and its label map, checked against the preset and each other.
fn load_input(opts: &BatchOptions, input: usize) -> Result<(Volume, Option<Volume>), BatchError> {
    let img = io::load(
        &opts.inputs[input],
        &LoadOptions {
            series: opts.series.clone(),
            ..LoadOptions::default()
        },
    )?;
    opts.preset
        .check_ndim(img.ndim())
        .and_then(|()| opts.preset.check_spacing(&img.spacing_mm))
        .map_err(|e| usage(format!("{e}: {}", opts.inputs[input].display())))?;
    // In the preset's training units, once, before any transform.
    let mut img = img;
    if let Some(n) = &opts.preset.normalize {
        n.apply_volume(&mut img)
            .map_err(|e| usage(format!("{e}: {}", opts.inputs[input].display())))?;
    }
    let lab = match opts.labels.get(input) {
        Some(p) => {
            let l = io::load(
                p,
                &LoadOptions {
                    label: true,
                    ..LoadOptions::default()
                },
            )?;
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
}

/// A compute worker: takes queued samples (several together on a GPU), applies their plans and
/// queues the outputs with their manifest records. Returns when the queue ends or the run stops.
fn compute(
    opts: &BatchOptions,
    workers: &Workers,
    ctl: &Control,
    job_rx: &Shared<Receiver<Loaded>>,
    out_tx: &SyncSender<Computed>,
) -> Result<(), BatchError> {
    let backend = workers.backend.as_ref();
    while let Some(first) = recv_shared(job_rx) {
        if ctl.stopped() {
            return Ok(());
        }
        let items = gather(first, job_rx, workers.gather);
        let t = Instant::now();
        let mut samples = Vec::with_capacity(items.len());
        for (item, img, _, _) in &items {
            samples.push(opts.preset.sample(
                item.seed,
                img.ndim(),
                img.channels,
                &img.spacing_mm,
            )?);
        }
        let work: Vec<_> = items
            .iter()
            .zip(&samples)
            .map(|((_, img, lab, _), sample)| (&sample.plan, &**img, lab.as_deref()))
            .collect();
        let (results, steps) = apply(opts, backend, &work);
        // The batch's time, shared evenly by its samples.
        let compute_ms = t.elapsed().as_secs_f64() * 1e3 / items.len() as f64;
        for (((item, _, _, read_ms), (sample, r)), model_steps) in items
            .into_iter()
            .zip(samples.into_iter().zip(results))
            .zip(steps)
        {
            let (mut out, out_label, timings, oom) = r?;
            if let Some(f) = opts.filter.as_ref().filter(|f| f.after) {
                out = f.apply(&out, opts)?;
            }
            let record = record(
                opts,
                workers,
                &item,
                &out,
                &sample,
                model_steps,
                (timings, oom),
            );
            let c = Computed {
                item,
                image: out,
                label: out_label,
                record,
                compute_ms,
                read_ms,
            };
            if out_tx.send(c).is_err() {
                return Ok(());
            }
        }
    }
    Ok(())
}

/// `first` and the samples waiting behind it in the queue, up to `gather` and about 512 MB of
/// outputs.
fn gather(first: Loaded, job_rx: &Shared<Receiver<Loaded>>, gather: usize) -> Vec<Loaded> {
    let per_sample = 4 * first.1.data.len() + first.2.as_ref().map_or(0, |l| 4 * l.data.len());
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
    items
}

/// Applies the plans of a batch of samples: augscope's own model on the run's engine, a
/// library's on the CPU. Returns the results and, per sample, what the library's model does
/// differently (`model_steps`).
fn apply(
    opts: &BatchOptions,
    backend: &dyn Backend,
    work: &[(&Plan, &Volume, Option<&Volume>)],
) -> (Vec<Result<NewResult, EngineError>>, Vec<Vec<String>>) {
    // What the library's model does differently, per sample (`model_steps`).
    let mut steps: Vec<Vec<String>> = vec![];
    let results: Vec<_> = if opts.model.is_own() {
        steps.resize(
            work.len(),
            preview::own_step(opts.model).into_iter().collect(),
        );
        engine::select::apply_many_new_with_fallback(backend, work)
    } else {
        work.iter()
            .map(
                |(plan, img, lab)| match preview::preview(opts.model, img, *lab, plan) {
                    Ok(p) => {
                        steps.push(p.steps);
                        Ok((p.image, p.label, Default::default(), None))
                    }
                    Err(preview::PreviewError::Plan(e)) => Err(EngineError::Plan(e)),
                    Err(e) => Err(EngineError::Shape(e.to_string())),
                },
            )
            .collect()
    };
    steps.resize(results.len(), vec![]);
    (results, steps)
}

/// The manifest line of one sample (without the read, compute and write times, which the writer
/// adds). `oom` is the engine's note when the sample was retried on the CPU engine.
fn record(
    opts: &BatchOptions,
    workers: &Workers,
    item: &Item,
    out: &Volume,
    sample: &Sample,
    model_steps: Vec<String>,
    (timings, oom): (engine::Timings, Option<String>),
) -> serde_json::Value {
    let used = if oom.is_some() {
        "cpu".to_string()
    } else {
        workers.backend.name()
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
        "backend_note": oom.or_else(|| workers.backend_note.clone()),
        "timings_ms": { "engine": timings },
    });
    let mut record = record;
    if let Some(f) = &opts.filter {
        record["intensity_filter"] = f.record();
    }
    // The preset's normalisation, which the input went through before the plan.
    if let Some(n) = &opts.preset.normalize {
        record["normalize"] = json!(n);
    }
    if let Some(series) = &opts.series {
        record["series"] = json!(series);
    }
    record
}

/// A writer: saves each computed sample (image, then label map), adds the times to its record
/// and sends the manifest line. Returns when the queue ends or the run stops.
fn write_outputs(
    opts: &BatchOptions,
    ctl: &Control,
    out_rx: &Shared<Receiver<Computed>>,
    rec_tx: &std::sync::mpsc::Sender<String>,
) -> Result<(), BatchError> {
    while let Some(mut c) = recv_shared(out_rx) {
        if ctl.stopped() {
            return Ok(());
        }
        let t = Instant::now();
        let save = SaveOptions {
            keep_dtype: opts.keep_dtype,
        };
        io::save(&c.item.output, &c.image, &save)?;
        if let (Some(p), Some(l)) = (&c.item.label_output, &c.label) {
            io::save(p, l, &SaveOptions { keep_dtype: true })?;
        }
        let write_ms = t.elapsed().as_secs_f64() * 1e3;
        if let Some(tm) = c.record.get_mut("timings_ms") {
            tm["read"] = json!(c.read_ms);
            tm["compute"] = json!(c.compute_ms);
            tm["write"] = json!(write_ms);
        }
        let line = serde_json::to_string(&c.record)
            .map_err(|e| BatchError::Internal(format!("cannot encode the manifest: {e}")))?;
        if rec_tx.send(line).is_err() {
            return Ok(());
        }
    }
    Ok(())
}
