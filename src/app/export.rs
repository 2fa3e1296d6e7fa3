//! The batch export dialog: N augmented samples of the open scan (and its label map) written by
//! the same code as `augscope batch` ([`crate::export::batch::run`]), on a background thread,
//! with a progress bar and a cancel button. Cancel sets the run's `stop` flag, so the folder keeps
//! whole files only and the manifest lists exactly them.
//!
//! The samples come either from the current parameters (a preset whose every transform fires
//! with the values on screen; sample j draws its elastic noise from seed + j) or from the preset
//! chosen in the controls, with its probabilities and ranges.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, channel};
use std::time::Instant;

use eframe::egui;

use crate::augment::preset::Preset;
use crate::export::batch::{self, BatchFilter, BatchOptions, BatchProgress, BatchSummary};

use super::state::{ExportSettings, FilterStage, Params, State};
use super::{Command, Runtime};

/// The export formats offered: (value of `ext`, shown as).
pub const FORMATS: [(&str, &str); 5] = [
    ("", "as the scan"),
    ("nii.gz", "NIfTI .nii.gz"),
    ("nii", "NIfTI .nii"),
    ("npy", "NumPy .npy"),
    ("png", "PNG (2D)"),
];

/// A batch running on its thread.
pub struct ExportJob {
    pub stop: Arc<AtomicBool>,
    pub counter: Arc<BatchProgress>,
    pub out_dir: PathBuf,
    pub started: Instant,
    done: Receiver<Result<BatchSummary, String>>,
}

impl Drop for ExportJob {
    fn drop(&mut self) {
        // The window closes or the app quits: finish the files being written and stop.
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// The dialog's runtime side.
#[derive(Default)]
pub struct ExportRuntime {
    pub open: bool,
    pub job: Option<ExportJob>,
    /// How the last run ended.
    pub last: Option<Result<BatchSummary, String>>,
}

impl ExportRuntime {
    pub fn running(&self) -> bool {
        self.job.is_some()
    }

    /// Takes the result of a finished run.
    pub fn poll(&mut self) {
        if let Some(job) = &self.job
            && let Ok(r) = job.done.try_recv()
        {
            self.last = Some(r);
            self.job = None;
        }
    }

    pub fn cancel(&self) {
        if let Some(job) = &self.job {
            job.stop.store(true, Ordering::SeqCst);
        }
    }
}

/// A preset that reproduces the parameters on screen: every transform fires (p = 1) with its
/// value as a one-point range, in the units of the preset file (degrees, voxels). Sampled with
/// seed s it gives the plan `p.to_plan(ndim, spacing)` with the elastic noise of seed s. In mm
/// the preset says `space = "mm"` and takes each scan's own spacing when it is sampled.
pub fn preset_from_params(p: &Params, ndim: usize) -> Preset {
    let nd = ndim.clamp(2, 3);
    // The preset keeps the values and their unit; the spacing comes from the scan it is used on.
    let plan = p.to_plan(nd, &vec![1.0; nd]);
    let mut description =
        "the parameters on screen; the elastic noise seed is the sample's".to_string();
    let mut preset = Preset::reproducing(&plan, nd).unwrap_or_else(|e| {
        // Values per channel cannot be drawn by a preset: the steps are left out, and said so.
        description.push_str(&format!("; the intensity steps are left out ({e})"));
        Preset::reproducing_spatial(&plan, nd)
    });
    preset.name = "current parameters".into();
    preset.source = "augscope explorer".into();
    preset.description = description;
    preset
}

/// The preset in use, when `from_preset`: the one being edited, else the one chosen in the
/// controls (a bundled name or a TOML file); otherwise the preset of the parameters on screen
/// ([`preset_from_params`]).
pub fn chosen_preset(state: &State, ndim: usize, from_preset: bool) -> Result<Preset, String> {
    if !from_preset {
        return Ok(preset_from_params(&state.params, ndim));
    }
    if let Some(draft) = &state.draft {
        return Ok(draft.clone());
    }
    let name = if state.preset.is_empty() {
        "nnunet-v2"
    } else {
        state.preset.as_str()
    };
    crate::augment::preset::load_or_bundled(std::path::Path::new(name))
        .map_err(|e| format!("preset {name}: {e}"))
}

/// The filter panel's intensity filter for the exported samples (none for the FEBDS overlay,
/// which changes no value): the same filter, boundary and stage as the view.
pub fn export_filter(state: &State, scan: &super::Scan) -> Option<BatchFilter> {
    let f = &state.params.filter;
    Some(BatchFilter {
        filter: f.intensity_filter(scan.loaded.range.1)?,
        boundary: f.boundary(),
        after: f.stage == FilterStage::After,
    })
}

/// Starts a batch with the dialog's settings on the open scan.
pub fn start(state: &State, rt: &mut Runtime) -> Result<(), String> {
    if rt.windows.export.running() {
        return Err("an export is already running".into());
    }
    let Some(scan) = &rt.scan else {
        return Err("open a scan first".into());
    };
    let s = &state.export;
    let out_dir = PathBuf::from(s.out_dir.trim());
    if out_dir.as_os_str().is_empty() {
        return Err("choose an output folder".into());
    }
    let nd = scan.loaded.image.ndim();
    let preset = chosen_preset(state, nd, s.from_preset)?;
    let labels = match (&scan.loaded.label_path, s.include_label, &scan.loaded.label) {
        (Some(l), true, Some(_)) => vec![l.clone()],
        _ => vec![],
    };
    let have_cuda = rt
        .gpu
        .devices
        .as_ref()
        .is_some_and(|d| !d.devices.is_empty());
    let stop = Arc::new(AtomicBool::new(false));
    let counter = Arc::new(BatchProgress::default());
    let opts = BatchOptions {
        preset,
        inputs: vec![scan.loaded.path.clone()],
        labels,
        count: s.count.max(1),
        seed: s.seed,
        out_dir: out_dir.clone(),
        backend: state.params.backend.spec(have_cuda),
        precision: state.params.precision,
        shard: (0, 1),
        resume: s.resume,
        ext: (!s.ext.is_empty()).then(|| s.ext.clone()),
        keep_dtype: s.keep_dtype,
        progress: false,
        stop: stop.clone(),
        counter: counter.clone(),
        writers: 0,
        filter: export_filter(state, scan),
        model: state.params.preview_as,
        series: scan.loaded.series.as_ref().map(|s| s.uid.clone()),
    };
    let (tx, done) = channel();
    std::thread::Builder::new()
        .name("augscope-export".into())
        .spawn(move || {
            let r = batch::run(&opts).map_err(|e| e.to_string());
            // The dialog is gone when this fails: nothing left to tell.
            let _ = tx.send(r);
        })
        .map_err(|e| format!("cannot start the export thread: {e}"))?;
    rt.windows.export.last = None;
    rt.windows.export.job = Some(ExportJob {
        stop,
        counter,
        out_dir,
        started: Instant::now(),
        done,
    });
    Ok(())
}

/// The export dialog (while `rt.windows.export.open`).
/// A sentence on its length: egui lays the window out as it runs, so the function is the window
/// from top to bottom; the parts with logic of their own are functions beside it.
pub fn export_window(ui: &mut egui::Ui, state: &mut State, rt: &mut Runtime) -> Vec<Command> {
    let mut out = vec![];
    let mut open = rt.windows.export.open;
    egui::Window::new("Export batch")
        .open(&mut open)
        .resizable(false)
        .default_pos([420.0, 120.0])
        .show(ui.ctx(), |ui| {
            let running = rt.windows.export.running();
            let has_label = rt.scan.as_ref().is_some_and(|s| s.loaded.label.is_some());
            let view_seed = state.params.seed;
            let ExportSettings {
                count,
                seed,
                out_dir,
                from_preset,
                include_label,
                resume,
                ext,
                keep_dtype,
            } = &mut state.export;
            ui.add_enabled_ui(!running, |ui| {
                egui::Grid::new("export").num_columns(2).show(ui, |ui| {
                    let l = ui.label("samples");
                    ui.add(egui::DragValue::new(count).range(1..=1_000_000))
                        .labelled_by(l.id);
                    ui.end_row();
                    let l = ui.label("first seed");
                    ui.horizontal(|ui| {
                        ui.add(egui::DragValue::new(seed)).labelled_by(l.id);
                        if ui
                            .button("view's seed")
                            .on_hover_text(format!(
                                "{view_seed}: the first sample is then the volume on screen"
                            ))
                            .clicked()
                        {
                            *seed = view_seed;
                        }
                    });
                    ui.end_row();
                    let l = ui.label("output folder");
                    ui.horizontal(|ui| {
                        ui.add(egui::TextEdit::singleline(out_dir).desired_width(260.0))
                            .labelled_by(l.id);
                        if ui.button("Browse…").clicked() {
                            out.push(Command::ExportFolderDialog);
                        }
                    });
                    ui.end_row();
                    ui.label("parameters");
                    ui.vertical(|ui| {
                        ui.radio_value(from_preset, false, "current parameters")
                            .on_hover_text(
                                "every transform as on screen; sample j's elastic noise uses seed + j",
                            );
                        let name = std::path::Path::new(&state.preset)
                            .file_name()
                            .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
                        ui.radio_value(from_preset, true, format!("preset {name}"))
                            .on_hover_text("drawn with the preset's probabilities and ranges");
                    });
                    ui.end_row();
                    ui.label("format");
                    ui.horizontal(|ui| {
                        egui::ComboBox::from_id_salt("export format")
                            .selected_text(
                                FORMATS
                                    .iter()
                                    .find(|(e, _)| e == ext)
                                    .map_or(ext.as_str(), |(_, n)| n),
                            )
                            .show_ui(ui, |ui| {
                                for (e, name) in FORMATS {
                                    ui.selectable_value(ext, e.to_string(), name);
                                }
                            });
                        ui.selectable_value(keep_dtype, false, "float32")
                            .on_hover_text("every image as float32 (label maps keep their type)");
                        ui.selectable_value(keep_dtype, true, "scan's type")
                            .on_hover_text(
                                "the scan's own type, rounded and clamped as scipy does (--dtype keep)",
                            );
                    });
                    ui.end_row();
                });
                ui.add_enabled(
                    has_label,
                    egui::Checkbox::new(include_label, "label map included"),
                );
                ui.checkbox(resume, "resume a batch in this folder");
                if let Some(f) = state.params.filter.intensity_filter(1.0) {
                    let stage = if state.params.filter.stage == FilterStage::After {
                        "after"
                    } else {
                        "before"
                    };
                    ui.weak(format!(
                        "every sample gets the filter panel's {} {stage} the transform \
                         (label maps unfiltered)",
                        f.name()
                    ));
                } else if state.params.filter.febds().is_some() {
                    ui.weak("the FEBDS overlay is not exported (the images are)");
                }
                let model = state.params.preview_as;
                if !model.is_own() {
                    ui.weak(format!(
                        "previewing as {}: the samples are {}'s model of the transform, on the                          CPU engine (the manifest names it)",
                        model.label(),
                        model.label()
                    ));
                }
            });
            ui.separator();
            if let Some(job) = &rt.windows.export.job {
                let (written, todo) = job.counter.get();
                let frac = if todo > 0 {
                    written as f32 / todo as f32
                } else {
                    0.0
                };
                ui.add(
                    egui::ProgressBar::new(frac)
                        .text(format!("{written} / {todo} samples"))
                        .animate(true),
                );
                ui.horizontal(|ui| {
                    if job.stop.load(Ordering::SeqCst) {
                        ui.spinner();
                        ui.label("stopping after the files being written…");
                    } else if ui.button("Cancel").clicked() {
                        out.push(Command::CancelExport);
                    }
                });
            } else {
                ui.horizontal(|ui| {
                    let ready = rt.scan.is_some() && !out_dir.trim().is_empty();
                    if ui
                        .add_enabled(ready, egui::Button::new("Export"))
                        .on_disabled_hover_text("open a scan and choose an output folder")
                        .clicked()
                    {
                        out.push(Command::StartExport);
                    }
                });
                match &rt.windows.export.last {
                    Some(Ok(s)) if s.interrupted => {
                        ui.label(format!(
                            "cancelled: {} of {} samples written (whole files only); \
                             tick \"resume\" to finish",
                            s.written + s.skipped,
                            s.total
                        ));
                    }
                    Some(Ok(s)) => {
                        ui.label(format!(
                            "{} samples written ({} already there) on {}; manifest {}",
                            s.written,
                            s.skipped,
                            s.backend,
                            s.manifest.display()
                        ));
                    }
                    Some(Err(e)) => {
                        ui.colored_label(ui.visuals().error_fg_color, e);
                    }
                    None => {}
                }
            }
        });
    if !open {
        rt.windows.export.open = false;
    }
    out
}
