//! `augscope apply`: one transform of one scan, written whole or not at all.

use anyhow::Context;

use std::path::{Path, PathBuf};
use std::time::Instant;

use super::{
    ApplyArgs, BackendSpec, Elastic, LoadOptions, Numbers, Plan, SaveOptions, Space, engine, io,
    preview, resolved, usage,
};
use crate::augment::DoneList;
use crate::core::intensity::{Blur, Brightness, Contrast, Gamma, LowResolution, Noise};
use crate::core::{GammaValue, IntensityStep, Volume};
use crate::engine::Backend;

pub(super) fn apply(a: ApplyArgs) -> anyhow::Result<()> {
    let t0 = Instant::now();
    check_outputs(&a)?;
    let (image, label) = load_inputs(&a)?;
    let rounded = rounded_integers_note(&a, &image);
    let t_read = t0.elapsed().as_secs_f64() * 1e3;
    let plan = plan_of(&a, &image)?;

    if !a.model.is_own() {
        apply_as(&a, &image, label.as_ref(), &plan, t0, t_read)?;
        if let Some(note) = rounded {
            eprintln!("{note}");
        }
        return Ok(());
    }
    let mut selected = engine::select::select(&a.backend, a.precision);
    if let Some(note) = &selected.note {
        eprintln!("augscope: {note}");
    }
    let t1 = Instant::now();
    // The engine takes the image: it may free the voxels once read (docs/design.md §6's memory budget);
    // the header stays for the readouts and the report.
    let header = image.clone_meta();
    let (out, out_label, timings, oom) = engine::select::apply_owned_with_fallback(
        selected.backend.as_ref(),
        &plan,
        image,
        label.as_ref(),
    )
    .context("the transform failed")?;
    let image = header;
    let mut backend_name = selected.backend.name();
    let oom_retried = oom.is_some();
    if let Some(note) = oom {
        eprintln!("augscope: {note}");
        backend_name = "cpu".into();
        selected.note = Some(note);
    }
    let t_compute = t1.elapsed().as_secs_f64() * 1e3;
    if a.save_coords.is_none() && a.report.is_none() {
        // No readout reads the engine's field again: free it before the outputs are written.
        selected.backend.clear_cache();
    }

    let t2 = Instant::now();
    let mut staged = Staged::default();
    stage_outputs(&a, &mut staged, &out, out_label.as_ref())?;
    // The engine that ran the transform (the CPU after a retry) gives the readouts.
    let ran = (!oom_retried).then(|| selected.backend.as_ref());
    let (disp, jacobian) = readouts(&a, ran, &plan, &image, &mut staged)?;
    let t_write = t2.elapsed().as_secs_f64() * 1e3;

    if let Some(p) = &a.report {
        let report = report_of(
            &a,
            &image,
            &plan,
            serde_json::json!({
                "backend": backend_name, "backend_note": selected.note,
                "precision": a.precision,
                "timings_ms": { "engine": timings, "read": t_read, "compute": t_compute, "write": t_write,
                                 "total": t0.elapsed().as_secs_f64() * 1e3 },
                "displacement": disp,
                "jacobian": jacobian,
                "model": a.model.id(),
                "model_steps": preview::own_step(a.model).into_iter().collect::<Vec<_>>(),
            }),
        );
        stage_report(&mut staged, p, &report)?;
    }
    staged.commit()?;
    if let Some(note) = rounded {
        eprintln!("{note}");
    }
    Ok(())
}

/// The outputs before anything is read: none overwrites an input or another output, their
/// formats are known, and `--save-coords` is a `.npy` of augscope's own transform.
fn check_outputs(a: &ApplyArgs) -> anyhow::Result<()> {
    // Refuse to overwrite any input, before reading anything.
    let inputs: Vec<&PathBuf> = [Some(&a.input), a.label.as_ref()]
        .into_iter()
        .flatten()
        .collect();
    let outputs: Vec<&PathBuf> = [
        Some(&a.output),
        a.label_out.as_ref(),
        a.save_coords.as_ref(),
        a.report.as_ref(),
    ]
    .into_iter()
    .flatten()
    .collect();
    for o in &outputs {
        for i in &inputs {
            if resolved(o) == resolved(i) {
                return Err(usage(format!(
                    "output would overwrite an input: {}",
                    o.display()
                )));
            }
        }
    }
    for (k, o) in outputs.iter().enumerate() {
        if outputs[..k].iter().any(|p| resolved(p) == resolved(o)) {
            return Err(usage(format!(
                "the same path is given for two outputs: {}",
                o.display()
            )));
        }
    }
    // Output formats must be known before any work is done.
    io::Format::from_path(&a.output)?;
    if let Some(l) = &a.label_out {
        io::Format::from_path(l)?;
    }
    if a.save_coords.is_some() && !a.model.is_own() {
        return Err(usage(format!(
            "--save-coords gives augscope's coordinates; {} resamples its own way (see the \
             report's model_steps): leave out --as or --save-coords",
            a.model.label()
        )));
    }
    if let Some(c) = &a.save_coords
        && !c.to_string_lossy().to_ascii_lowercase().ends_with(".npy")
    {
        return Err(usage(format!(
            "--save-coords writes a .npy file: {}",
            c.display()
        )));
    }
    Ok(())
}

/// A note for an image whose integers f32 cannot hold (beyond 2^24): its transform rounds them.
/// Said once the outputs are written (a failure stays one line).
fn rounded_integers_note(a: &ApplyArgs, image: &Volume) -> Option<String> {
    let beyond = |v: &f32| v.abs() > crate::core::labels::F32_EXACT as f32;
    (image.dtype.is_integer() && image.data.iter().any(beyond)).then(|| {
        format!(
            "augscope: note: {} holds integers beyond 2^24, which an image's transform computes \
             in float32 (rounded to 8 significant digits); give a label map with --label to keep \
             its exact values",
            a.input.display()
        )
    })
}

/// The image and its label map (on the image's grid).
fn load_inputs(a: &ApplyArgs) -> anyhow::Result<(Volume, Option<Volume>)> {
    let load_opts = LoadOptions {
        channels_first: a.channels,
        series: a.series.clone(),
        ..LoadOptions::default()
    };
    let mut image = io::load(&a.input, &load_opts)?;
    if let Some(n) = &a.normalize {
        n.apply_volume(&mut image).map_err(usage)?;
    }
    let label = match &a.label {
        Some(p) => {
            let l = io::load(
                p,
                &LoadOptions {
                    label: true,
                    ..LoadOptions::default()
                },
            )?;
            if l.shape != image.shape {
                return Err(usage(format!(
                    "label map shape {:?} differs from the image shape {:?}: {}",
                    l.shape,
                    image.shape,
                    p.display()
                )));
            }
            Some(l)
        }
        None => None,
    };
    Ok((image, label))
}

/// The transform of the command line, checked against the image.
fn plan_of(a: &ApplyArgs, image: &Volume) -> anyhow::Result<Plan> {
    let plan = Plan {
        flip: a.flip.clone().map(|v| v.0).unwrap_or_default(),
        rotate_rad: a.rotate.clone().map(|v| v.0).unwrap_or_default(),
        scale: a.scale.clone().map(|v| v.0).unwrap_or_default(),
        translate: a.translate.clone().map(|v| v.0).unwrap_or_default(),
        elastic: a.elastic.map(|(alpha, sigma)| Elastic {
            alpha,
            sigma,
            seed: a.seed,
        }),
        order: a.order,
        mode: a.mode,
        cval: a.cval,
        out_shape: None,
        space: a.space,
        spacing_mm: match a.space {
            Space::Mm => image.spacing_mm.clone(),
            Space::Voxel => vec![],
        },
        intensity: intensity_of(a, image.ndim()),
        flip_after_intensity: a.flip_after_intensity,
    };
    plan.validate(image.ndim())?;
    for step in &plan.intensity {
        step.validate(Some(image.channels), Some(image.ndim()))
            .map_err(|why| usage(format!("--{why}")))?;
    }
    Ok(plan)
}

/// The intensity steps of the command line, in the order they act (nnU-Net's): noise, blur,
/// brightness, contrast, low resolution, gamma. `ndim` spreads one sigma or factor over the axes.
fn intensity_of(a: &ApplyArgs, ndim: usize) -> Vec<IntensityStep> {
    let values = |n: &Numbers| n.0.iter().map(|&v| Some(v)).collect::<Vec<_>>();
    let per_axis = |n: &Numbers| match n.0[..] {
        [v] => vec![Some(vec![v; ndim])],
        _ => vec![Some(n.0.clone())],
    };
    let mut steps = vec![];
    if let Some(s) = &a.noise {
        steps.push(IntensityStep::GaussianNoise(Noise {
            std: values(s),
            seed: a.seed,
        }));
    }
    if let Some(s) = &a.blur {
        steps.push(IntensityStep::GaussianBlur(Blur {
            sigmas: per_axis(s),
        }));
    }
    if let Some(m) = &a.brightness {
        steps.push(IntensityStep::Brightness(Brightness {
            multipliers: values(m),
        }));
    }
    if let Some(f) = &a.contrast {
        steps.push(IntensityStep::Contrast(Contrast {
            factors: values(f),
            preserve_range: !a.contrast_unclipped,
        }));
    }
    if let Some(s) = &a.lowres {
        steps.push(IntensityStep::LowResolution(LowResolution {
            scales: per_axis(s),
        }));
    }
    if let Some(g) = &a.gamma {
        let channels =
            g.0.iter()
                .map(|&gamma| {
                    Some(GammaValue {
                        gamma,
                        invert: a.gamma_invert,
                        retain_stats: a.gamma_retain_stats,
                    })
                })
                .collect();
        steps.push(IntensityStep::Gamma(Gamma { channels }));
    }
    steps.extend(a.step.iter().cloned());
    steps
}

/// The readouts beside the outputs, when asked for: the displacement and the Jacobian of the
/// report, and the coordinates of `--save-coords` (staged with the outputs). `ran` is the engine
/// that ran the transform (its cached field serves); the CPU engine when that fails or is absent.
fn readouts(
    a: &ApplyArgs,
    ran: Option<&dyn Backend>,
    plan: &Plan,
    image: &crate::core::volume::Volume,
    staged: &mut Staged,
) -> anyhow::Result<(Option<serde_json::Value>, Option<serde_json::Value>)> {
    let (mut disp, mut jacobian) = (None, None);
    if a.save_coords.is_none() && a.report.is_none() {
        return Ok((disp, jacobian));
    }
    let map = plan.compose(&image.shape)?;
    // The coordinates feed both --save-coords and the Jacobian readout.
    let cpu = engine::cpu::CpuBackend::new();
    let ran = ran.unwrap_or(&cpu);
    let stats = ran
        .displacement_stats(plan, &map.out_shape)
        .or_else(|_| cpu.displacement_stats(plan, &map.out_shape))?;
    let coords = ran
        .coordinates(plan, &image.shape)
        .or_else(|_| cpu.coordinates(plan, &image.shape))?;
    if let Some((max_v, rms_v)) = stats {
        let min_sp = image
            .spacing_mm
            .iter()
            .cloned()
            .fold(f64::INFINITY, f64::min);
        let max_sp = image.spacing_mm.iter().cloned().fold(0.0, f64::max);
        disp = Some(match plan.space {
            Space::Voxel => serde_json::json!({
                "max_vox": max_v, "rms_vox": rms_v,
                "max_mm_range": [max_v * min_sp, max_v * max_sp],
                "rms_mm_range": [rms_v * min_sp, rms_v * max_sp],
            }),
            Space::Mm => serde_json::json!({
                "max_mm": max_v, "rms_mm": rms_v,
                "max_vox_range": [max_v / max_sp, max_v / min_sp],
                "rms_vox_range": [rms_v / max_sp, rms_v / min_sp],
            }),
        });
    }
    // The field is no longer needed: free it before the determinant takes its volume.
    ran.clear_cache();
    cpu.clear_cache();
    if let Some(p) = &a.save_coords {
        let mut shape = vec![map.ndim];
        shape.extend_from_slice(&map.out_shape);
        staged.write(p, |t| io::npy::write(t, &coords, &shape, crate::DType::F32))?;
    }
    if a.report.is_some() {
        // det(∂x/∂p) of the saved coordinates; mirroring (a flip) is not counted as folding.
        let det = engine::jacobian::determinant(&coords, map.ndim, &map.out_shape);
        let s = engine::jacobian::stats_for_map(&det, &map);
        jacobian = Some(serde_json::json!({
            "min": s.min, "max": s.max, "folded_fraction": s.folded_fraction,
            "orientation": engine::jacobian::orientation(&map),
        }));
    }
    Ok((disp, jacobian))
}

/// Outputs of one command, written all or none: each is written whole under a hidden name in
/// its own folder, and the names are swapped in only when every output is written. Whatever is
/// not committed is removed when this is dropped, so a failure leaves no output and replaces no
/// existing file.
#[derive(Default)]
struct Staged {
    pending: Vec<(PathBuf, PathBuf)>,
}

impl Staged {
    /// Where to write `path` for now (same folder and extension, so the format is the same).
    fn path(&mut self, path: &Path) -> PathBuf {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let tmp = path.with_file_name(format!(".augscope-{}-{name}", std::process::id()));
        self.pending.push((tmp.clone(), path.to_path_buf()));
        tmp
    }

    /// Writes `path` through `write` at its staged name; an error names `path`.
    fn write(
        &mut self,
        path: &Path,
        write: impl FnOnce(&Path) -> Result<(), io::IoError>,
    ) -> Result<(), io::IoError> {
        let tmp = self.path(path);
        write(&tmp).map_err(|e| match e {
            io::IoError::Write { format, why, .. } => io::IoError::Write {
                format,
                why,
                path: path.to_path_buf(),
            },
            other => other,
        })
    }

    /// Renames every staged output into place (on a failure the outputs not yet renamed are
    /// removed when `self` drops).
    fn commit(mut self) -> anyhow::Result<()> {
        while !self.pending.is_empty() {
            let (tmp, path) = self.pending.remove(0);
            if let Err(e) = std::fs::rename(&tmp, &path) {
                let _ = std::fs::remove_file(&tmp);
                return Err(usage(format!("cannot write {}: {e}", path.display())));
            }
        }
        Ok(())
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        for (tmp, _) in &self.pending {
            let _ = std::fs::remove_file(tmp);
        }
    }
}

/// `apply --as LIBRARY`: the library's model on the CPU engine, written as `apply` writes.
pub(super) fn apply_as(
    a: &ApplyArgs,
    image: &crate::Volume,
    label: Option<&crate::Volume>,
    plan: &Plan,
    t0: Instant,
    t_read: f64,
) -> anyhow::Result<()> {
    if !matches!(a.backend, BackendSpec::Auto | BackendSpec::Cpu) {
        eprintln!(
            "augscope: {} runs on the CPU engine (--backend is not used)",
            a.model.label()
        );
    }
    let t1 = Instant::now();
    let p = preview::preview(a.model, image, label, plan).context("the transform failed")?;
    let t_compute = t1.elapsed().as_secs_f64() * 1e3;
    let t2 = Instant::now();
    let mut staged = Staged::default();
    stage_outputs(a, &mut staged, &p.image, p.label.as_ref())?;
    let t_write = t2.elapsed().as_secs_f64() * 1e3;
    if let Some(path) = &a.report {
        let report = report_of(
            a,
            image,
            plan,
            serde_json::json!({
                "backend": "cpu",
                "timings_ms": { "read": t_read, "compute": t_compute, "write": t_write,
                                 "total": t0.elapsed().as_secs_f64() * 1e3 },
                "displacement": p.displacement.map(|(max_v, rms_v)| serde_json::json!({
                    "max_vox": max_v, "rms_vox": rms_v,
                })),
                "model": p.model.id(),
                "model_steps": p.steps,
                "control_grid": p.control_grid.as_ref().map(|g| serde_json::json!({
                    "shape": g.shape, "origin_vox": g.origin, "spacing_vox": g.spacing,
                })),
            }),
        );
        stage_report(&mut staged, path, &report)?;
    }
    staged.commit()?;
    for s in &p.steps {
        eprintln!("augscope: as {}: {s}", p.model.label());
    }
    Ok(())
}

/// Stages the transformed image (float32, or the scan's type with `--dtype keep`) and label map.
fn stage_outputs(
    a: &ApplyArgs,
    staged: &mut Staged,
    image: &Volume,
    label: Option<&Volume>,
) -> anyhow::Result<()> {
    let save = SaveOptions {
        keep_dtype: a.dtype == "keep",
    };
    staged.write(&a.output, |t| io::save(t, image, &save))?;
    if let (Some(p), Some(l)) = (&a.label_out, label) {
        staged.write(p, |t| io::save(t, l, &SaveOptions { keep_dtype: true }))?;
    }
    Ok(())
}

/// The report's fields every `apply` writes (paths, grid, plan, done list), with `extra`'s.
fn report_of(
    a: &ApplyArgs,
    image: &Volume,
    plan: &Plan,
    extra: serde_json::Value,
) -> serde_json::Value {
    let mut report = serde_json::json!({
        "input": a.input, "output": a.output,
        "label": a.label, "label_output": a.label_out,
        "shape": image.shape, "channels": image.channels,
        "space": plan.space, "spacing_mm": image.spacing_mm,
        "plan": plan, "done": plan.done_list(),
    });
    if let (Some(r), serde_json::Value::Object(x)) = (report.as_object_mut(), extra) {
        r.extend(x);
    }
    report
}

/// Stages the JSON report at `path`.
fn stage_report(
    staged: &mut Staged,
    path: &Path,
    report: &serde_json::Value,
) -> anyhow::Result<()> {
    let text = serde_json::to_string_pretty(report).context("cannot encode the report")?;
    staged.write(path, |t| {
        io::atomic_write(t, "JSON report", |w| {
            std::io::Write::write_all(w, text.as_bytes())
        })
    })?;
    Ok(())
}
