//! What the panels, menus and dialogs ask the app to do ([`Command`]), and how the app carries
//! each out once per frame.

use std::path::PathBuf;
use std::sync::Arc;

use eframe::egui;

use super::state::{Params, State};
use super::{App, Runtime, browse, export, files, preset_editor, screenshot};

/// What panels ask the app to do.
#[derive(Clone, Debug, PartialEq)]
pub enum Command {
    /// Open a scan and its label map (a DICOM folder of several series shows the series picker).
    Open(PathBuf, Option<PathBuf>),
    /// Open one series of a DICOM folder (its SeriesInstanceUID, or a SeriesNumber that one
    /// series has) and the label map.
    OpenSeries {
        image: PathBuf,
        label: Option<PathBuf>,
        series: String,
    },
    OpenDialog,
    OpenLabelDialog,
    Undo,
    Redo,
    ResetParams,
    NewSeed,
    AutoWindow,
    SetWindow {
        level: f32,
        width: f32,
    },
    Compare(bool),
    /// Move the slice of view `view` by `delta`.
    Step {
        view: usize,
        delta: i64,
    },
    SetCursor(Vec<usize>),
    /// Sample the preset `state.preset` with `state.preset_seed` into the parameters.
    SamplePreset,
    PresetDialog,
    SetPreset(String),
    /// Show the batch export dialog.
    OpenExport,
    StartExport,
    CancelExport,
    ExportFolderDialog,
    SetExportFolder(PathBuf),
    /// Show Export → Code….
    OpenCode,
    /// Show File → Save preset….
    OpenSavePreset,
    /// Show the preset editor, editing the chosen preset unless one is being edited.
    OpenEditor,
    /// Edit a preset centred on the parameters on screen.
    PresetFromPlan,
    /// Drop the preset being edited.
    DiscardDraft,
    /// Show the grid of draws of the preset in use ("What training will see").
    OpenGrid,
    /// Show volume `i` of a 4D scan.
    SetFrame(usize),
    /// Pick a file or folder for this purpose (the system's dialog, else the built-in browser).
    Pick(browse::Purpose),
    /// Show the built-in browser; `true` when the system's dialog failed to open.
    Browse(browse::Purpose, bool),
    /// Write the augmented volume (and its label map beside it) to this path.
    SaveAugmented(PathBuf),
    /// What a save in the background came to: a note, or an error.
    Saved(Result<String, String>),
    /// Save a PNG of the views.
    Screenshot,
    /// The window's pixels, as the renderer read them.
    ScreenshotTaken(Arc<egui::ColorImage>),
    /// Close the window (after a scripted screenshot).
    Quit,
    /// Show the keyboard and mouse help.
    ShowHelp,
}

impl App {
    /// Carries out one command (what the panels, menus and dialogs ask for).
    pub fn apply(&mut self, cmd: Command) {
        let App { state, rt } = self;
        match cmd {
            Command::Open(image, label) => files::open(rt, image, label, None),
            Command::OpenSeries {
                image,
                label,
                series,
            } => files::open(rt, image, label, Some(series)),
            Command::OpenDialog => self.apply(Command::Pick(browse::Purpose::Scan)),
            Command::OpenLabelDialog => {
                if let Some(img) = rt.scan.as_ref().map(|s| s.loaded.path.clone()) {
                    self.apply(Command::Pick(browse::Purpose::Label(img)));
                }
            }
            Command::Pick(purpose) => files::pick(rt, purpose),
            Command::SaveAugmented(path) => files::save_in_background(rt, path),
            Command::Saved(Ok(note)) => rt.note = Some(note),
            Command::Saved(Err(e)) => rt.error = Some(e),
            Command::Screenshot => rt.capture.screenshot_pending = true,
            Command::ScreenshotTaken(img) => screenshot::save_in_background(rt, img),
            Command::Quit => rt.quit = true,
            Command::ShowHelp => rt.windows.help_open = true,
            Command::Browse(purpose, failed) => {
                let start = rt.scan.as_ref().map(|s| s.loaded.path.clone());
                let why = failed.then(|| {
                    "the system file dialog did not open (no XDG desktop portal or zenity \
                     answered): augscope's own browser"
                        .to_string()
                });
                rt.windows.browse.show(purpose, start.as_deref(), why);
            }
            Command::SamplePreset => sample_preset(state, rt),
            Command::PresetDialog => self.apply(Command::Pick(browse::Purpose::Preset)),
            Command::SetPreset(p) => {
                if !crate::augment::preset::BUNDLED.iter().any(|(n, _)| *n == p) {
                    state.push_recent_preset(p.clone());
                }
                state.preset = p;
            }
            Command::OpenCode => rt.windows.code.open = true,
            Command::OpenSavePreset => open_save_preset(state, rt),
            Command::OpenEditor => open_editor(state, rt),
            Command::PresetFromPlan => {
                let nd = rt.scan.as_ref().map_or(3, |s| s.loaded.image.ndim());
                state.draft = Some(preset_editor::centred_on(state, nd));
                rt.windows.editor.open = true;
            }
            Command::DiscardDraft => {
                state.draft = None;
                rt.windows.editor.baseline = None;
                rt.windows.editor.open = false;
            }
            Command::OpenExport => rt.windows.export.open = true,
            Command::OpenGrid => rt.windows.grid.open = true,
            Command::StartExport => {
                if let Err(e) = export::start(state, rt) {
                    rt.windows.export.last = Some(Err(e));
                }
            }
            Command::CancelExport => rt.windows.export.cancel(),
            Command::ExportFolderDialog => self.apply(Command::Pick(browse::Purpose::ExportFolder)),
            Command::SetExportFolder(p) => state.export.out_dir = p.display().to_string(),
            Command::Undo => {
                if let Some(s) = rt.history.undo(state) {
                    state.params = s.params;
                    state.draft = s.draft;
                }
            }
            Command::Redo => {
                if let Some(s) = rt.history.redo(state) {
                    state.params = s.params;
                    state.draft = s.draft;
                }
            }
            Command::ResetParams => {
                state.params = Params {
                    backend: state.params.backend,
                    precision: state.params.precision,
                    ..Params::default()
                };
            }
            Command::NewSeed => {
                // A fresh seed from the clock: reproducible once chosen, since it is shown.
                let t = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos() as u64);
                state.params.seed = splitmix(t ^ state.params.seed) % 1_000_000;
            }
            Command::AutoWindow => {
                if let Some(s) = &rt.scan {
                    let (lo, hi) = s.loaded.auto_window;
                    state.display.level = Some(0.5 * (lo + hi));
                    state.display.width = Some((hi - lo).max(1e-6));
                }
            }
            Command::SetWindow { level, width } => {
                state.display.level = Some(level);
                state.display.width = Some(width.max(1e-6));
            }
            Command::Compare(on) => {
                state.show_compare = on;
            }
            Command::Step { view, delta } => {
                if let Some(s) = &mut rt.scan
                    && let Some(axis) = s.views.get(view).and_then(|v| v.normal)
                {
                    let n = s.loaded.image.shape[axis] as i64;
                    let v = (s.cursor[axis] as i64 + delta).clamp(0, n - 1);
                    s.cursor[axis] = v as usize;
                }
            }
            Command::SetFrame(i) => {
                if let Some(s) = &mut rt.scan {
                    s.frame = i.min(s.loaded.image.channels.saturating_sub(1));
                }
            }
            Command::SetCursor(c) => {
                if let Some(s) = &mut rt.scan
                    && c.len() == s.cursor.len()
                {
                    s.cursor = c
                        .iter()
                        .zip(&s.loaded.image.shape)
                        .map(|(&i, &n)| i.min(n.saturating_sub(1)))
                        .collect();
                }
            }
        }
    }
}

/// Draws one plan from the preset in use with the preset seed into the parameters, and steps the
/// seed.
fn sample_preset(state: &mut State, rt: &mut Runtime) {
    let (nd, channels, spacing) = rt.scan.as_ref().map_or((3, 1, vec![1.0; 3]), |s| {
        let im = &s.loaded.image;
        (im.ndim(), im.channels, im.spacing_mm.clone())
    });
    let sampled = export::chosen_preset(state, nd, true).and_then(|p| {
        p.sample(state.preset_seed, nd, channels, &spacing)
            .map(|s| (s, p.normalize.clone()))
            .map_err(|e| format!("preset {}: {e}", p.name))
    });
    match sampled {
        Ok((s, normalize)) => {
            let from = super::code::preset_in_use(state, rt);
            state.params = Params::from_plan(&s.plan, nd, &state.params);
            // The preset's units: its normalisation, or the raw scan where it has none.
            state.params.normalize = normalize;
            rt.sampled = Some((state.params.clone(), s.done, from));
            state.preset_seed = state.preset_seed.wrapping_add(1);
        }
        Err(e) => rt.error = Some(e),
    }
}

/// Opens File → Save preset…, named after the preset being edited if there is one.
fn open_save_preset(state: &State, rt: &mut Runtime) {
    let save = &mut rt.windows.code.save;
    save.confirm = None;
    if let Some(d) = &state.draft {
        save.from_preset = true;
        save.name = d.name.clone();
        save.description = d.description.clone();
    }
    if save.name.is_empty() {
        save.name = "my preset".into();
    }
    save.open = true;
    save.status = None;
}

/// Opens the preset editor, on the chosen preset unless one is being edited.
fn open_editor(state: &mut State, rt: &mut Runtime) {
    if state.draft.is_none() {
        let nd = rt.scan.as_ref().map_or(3, |s| s.loaded.image.ndim());
        match export::chosen_preset(state, nd, true) {
            Ok(p) => {
                rt.windows.editor.baseline = Some(p.clone());
                state.draft = Some(p);
            }
            Err(e) => rt.error = Some(e),
        }
    }
    rt.windows.editor.open = state.draft.is_some();
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}
