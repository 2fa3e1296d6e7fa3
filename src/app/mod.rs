//! The desktop explorer (egui/eframe with the wgpu renderer): axial, coronal and sagittal planes
//! of the original and the augmented scan, controls for every [`Plan`] parameter, a worker
//! thread that recomputes on the chosen engine while the UI keeps drawing, and a CPU vs GPU
//! comparison. Arrays are `[z, y, x]` (2D `[y, x]`).
//!
//! Structure (STYLE.md): a persisted serde [`State`] apart from the [`Runtime`] (worker, loaded
//! volumes, slices on screen); panels return [`Command`]s that the app applies once per frame.
//! Carrying out the commands, taking the worker's replies, sending it what the views need, files,
//! screenshots and scripted screenshots each have a file of their own beside this one.

pub mod browse;
pub mod code;
pub mod export;
pub mod format;
pub mod grid;
pub mod latency;
pub mod legend;
pub mod overlay;
pub mod panels;
pub mod preflight;
pub mod preset_editor;
pub mod render;
pub mod slices;
pub mod state;
pub mod views;
pub mod worker;

mod commands;
mod files;
mod replies;
mod screenshot;
mod scripted;
pub mod series_picker;
mod sync;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::time::Instant;

use anyhow::Context as _;
use eframe::egui;

use crate::augment::Plan;
use crate::gpu::device::{DevicesReport, MemStats};

use slices::{DisplaySlice, ViewGeom};
pub use state::{BackendChoice, Colormap, Display, History, Params, State};
use worker::{Comparison, FullResult, Loaded, MaskSet, SliceSet, Worker};

pub use commands::Command;
pub use files::{assets_dir, label_path_beside, sample, sample_label};
pub use screenshot::AutoPng;
pub use scripted::preset_params;
pub use sync::febds_map;

/// Opens the window on the given file (or the bundled sample) and runs until it is closed;
/// `series` chooses the series of a DICOM folder of several (else the picker offers them).
pub fn run(
    files: Vec<PathBuf>,
    label: Option<PathBuf>,
    series: Option<String>,
) -> anyhow::Result<()> {
    preflight::check().map_err(|e| anyhow::anyhow!(e))?;
    let (image, label) = initial_files(files, label);
    let opts = eframe::NativeOptions {
        viewport: egui::ViewportBuilder::default()
            .with_inner_size([1500.0, 940.0])
            .with_min_inner_size([900.0, 600.0])
            .with_drag_and_drop(true)
            .with_title("augscope"),
        renderer: eframe::Renderer::Wgpu,
        ..Default::default()
    };
    eframe::run_native(
        "augscope",
        opts,
        Box::new(move |cc| {
            let mut app = App::new(cc, None);
            app.apply(match series {
                Some(series) => Command::OpenSeries {
                    image,
                    label,
                    series,
                },
                None => Command::Open(image, label),
            });
            // Preset parameters for scripted screenshots (scripts/screenshots.sh).
            if let Ok(spec) = std::env::var("AUGSCOPE_SHOT") {
                scripted::apply_spec(&mut app, &spec);
            }
            Ok(Box::new(app))
        }),
    )
    .map_err(|e| anyhow::anyhow!(preflight::explain(&e.to_string())))
    .context("cannot open the window")
}

/// What to open at start: the first file given, else the sample with its label map.
pub fn initial_files(files: Vec<PathBuf>, label: Option<PathBuf>) -> (PathBuf, Option<PathBuf>) {
    match files.into_iter().next() {
        Some(f) => (f, label),
        None => (sample(), label.or_else(|| Some(sample_label()))),
    }
}

/// A loaded scan and where the views are.
pub struct Scan {
    pub loaded: Loaded,
    pub views: Vec<ViewGeom>,
    pub cursor: Vec<usize>,
    /// The volume shown of a 4D scan (its channel); 0 otherwise.
    pub frame: usize,
}

/// Zoom and pan of one plane (shared by its original and augmented views).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Nav {
    pub zoom: f32,
    /// Offset of the image centre from the view centre, in fractions of the view size.
    pub pan: egui::Vec2,
}

impl Default for Nav {
    fn default() -> Self {
        Nav {
            zoom: 1.0,
            pan: egui::Vec2::ZERO,
        }
    }
}

/// Latency of the last parameter change: request sent to slices received.
#[derive(Clone, Copy, Debug, Default)]
pub struct Latency {
    pub last_ms: Option<f64>,
    pub slice_compute_ms: Option<f64>,
}

/// Everything that is not persisted: the worker, volumes and slices on screen.
pub struct Runtime {
    pub worker: Option<Worker>,
    pub history: History,
    pub scan: Option<Scan>,
    pub loading: Option<PathBuf>,
    /// A message shown in the window until dismissed (load errors among them).
    pub error: Option<String>,
    pub note: Option<String>,
    /// The transform of the scan: what was asked for and what came back.
    pub work: Work,
    /// The original planes on screen, the views' zoom and pan, and the pointer.
    pub views: ViewsRuntime,
    /// The GPU panels: devices, memory, the CPU-vs-GPU comparison.
    pub gpu: GpuPanel,
    /// The FEBDS masks over the views.
    pub febds: FebdsRuntime,
    /// Screenshots and scripted captures.
    pub capture: Capture,
    /// The windows besides the main one, and the file browser.
    pub windows: Windows,
    /// The deformation grid and Jacobian overlays and their thread.
    pub overlay: overlay::OverlayRuntime,
    pub has_wgpu: bool,
    pub dialogs: (Sender<Command>, Receiver<Command>),
    /// The last preset sample: the parameters it set, its done list and drawn values, and the
    /// preset it was drawn from, in words ([`code::preset_in_use`]).
    pub sampled: Option<(Params, Vec<crate::augment::Done>, String)>,
    /// The window title last sent.
    pub title: String,
    pub quit: bool,
    /// Wakes the UI when a background thread (a save, a screenshot) has sent its answer.
    pub egui_ctx: egui::Context,
}

/// The transform of the open scan in flight: each change of the parameters is a generation.
#[derive(Default)]
pub struct Work {
    pub generation: u64,
    /// The generation, cursor and time of the last request sent to the worker.
    pub sent: Option<(u64, Vec<usize>, Instant)>,
    pub full: Option<FullResult>,
    pub shown: Option<SliceSet>,
    /// Whether the planes on screen were cut from the whole volume of their generation (else
    /// they are the worker's planes, shown until the whole volume is there).
    pub shown_full: bool,
    pub applied: Option<Params>,
    /// The parameters of the last generations (oldest first, a few kept): what the planes on
    /// screen, which may be older than the sliders, were computed with.
    pub applied_log: Vec<(u64, Params)>,
    /// The generation whose whole volume the worker is filling in.
    pub filling: Option<u64>,
    /// When the current generation's work began (for the elapsed time of long work), and how
    /// far its whole-volume fill is.
    pub work_started: Option<(u64, Instant)>,
    pub progress: Option<Progress>,
    pub latency: Latency,
}

/// The original planes on screen, and how the views look at them.
#[derive(Default)]
pub struct ViewsRuntime {
    pub original: Vec<Arc<DisplaySlice>>,
    pub original_label: Vec<Option<Arc<DisplaySlice>>>,
    pub original_cursor: Vec<usize>,
    pub nav: Vec<Nav>,
    pub active_view: usize,
    /// What lies under the mouse pointer this frame (the status bar's readout).
    pub hover: Option<Hover>,
}

/// The GPU panels' data: the devices, their memory, and the CPU-vs-GPU comparison.
#[derive(Default)]
pub struct GpuPanel {
    pub devices: Option<DevicesReport>,
    pub memory: Vec<MemStats>,
    pub comparison: Option<Comparison>,
    pub compare_sent: Option<u64>,
}

/// The FEBDS masks over the views.
#[derive(Default)]
pub struct FebdsRuntime {
    /// The last masks received.
    pub masks: Option<MaskSet>,
    /// The method and plane ids of the last request sent.
    pub mask_sent: Option<(crate::filter::FebdsMethod, Vec<u64>)>,
}

/// Screenshots of the window, and scripted captures.
pub struct Capture {
    /// A screenshot was asked for and has not arrived.
    pub screenshot_pending: bool,
    /// Where the views are in the window (points), for the screenshot.
    pub views_rect: Option<egui::Rect>,
    pub pixels_per_point: f32,
    /// The zoom every view starts at (scripted screenshots).
    pub initial_zoom: Option<f32>,
    /// A scripted PNG of the window, taken when the work is done (then the app quits).
    pub auto_png: Option<AutoPng>,
    /// Show no timings (snapshot tests: they differ from run to run).
    pub hide_timings: bool,
}

impl Default for Capture {
    fn default() -> Self {
        Self {
            screenshot_pending: false,
            views_rect: None,
            pixels_per_point: 1.0,
            initial_zoom: None,
            auto_png: None,
            hide_timings: false,
        }
    }
}

/// The windows besides the main one.
#[derive(Default)]
pub struct Windows {
    /// The batch export dialog and its running batch.
    pub export: export::ExportRuntime,
    /// The code window and the save-preset window.
    pub code: code::CodeRuntime,
    /// The preset editor.
    pub editor: preset_editor::EditorRuntime,
    /// The grid of draws of the preset in use.
    pub grid: grid::GridRuntime,
    /// The built-in file browser.
    pub browse: browse::BrowseRuntime,
    /// The series picker, while a DICOM folder of several series waits for a choice.
    pub series_picker: Option<series_picker::SeriesPicker>,
    pub help_open: bool,
}

/// [`App::params_on_screen`].
pub fn params_on_screen<'a>(state: &'a State, rt: &'a Runtime) -> &'a Params {
    let generation = rt.work.shown.as_ref().map(|s| s.generation).or(rt
        .work
        .full
        .as_ref()
        .map(|f| f.generation));
    generation
        .and_then(|g| rt.work.applied_log.iter().rev().find(|(k, _)| *k == g))
        .map_or(&state.params, |(_, p)| p)
}

/// How far the whole-volume fill is.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Progress {
    pub generation: u64,
    pub done: usize,
    pub total: usize,
    /// When the first plane report came, and how many planes were done then: the rate excludes
    /// the elastic field made before the planes.
    pub first: (Instant, usize),
}

impl Progress {
    /// The fraction done (0..1).
    pub fn fraction(&self) -> f32 {
        self.done as f32 / self.total.max(1) as f32
    }

    /// Seconds left at the rate since the first report; `None` before a rate is known.
    pub fn seconds_left(&self) -> Option<f64> {
        let planes = self.done.checked_sub(self.first.1).filter(|&n| n > 0)?;
        let rate = planes as f64 / self.first.0.elapsed().as_secs_f64().max(1e-6);
        Some((self.total - self.done.min(self.total)) as f64 / rate)
    }
}

/// The voxel under the pointer and its values, for the status bar.
#[derive(Clone, Debug, PartialEq)]
pub struct Hover {
    /// Array index (`[z, y, x]` or `[y, x]`).
    pub voxel: Vec<usize>,
    /// The original's value there (one per channel).
    pub original: Vec<f32>,
    /// The augmented value at the same place on screen (one per channel), once computed.
    pub augmented: Option<Vec<f32>>,
    /// The label there, in the original and in the augmented label map.
    pub label: Option<(f32, Option<f32>)>,
}

pub struct App {
    pub state: State,
    pub rt: Runtime,
}

impl App {
    /// Builds the app; `open` is loaded at once (the CLI's files, or the sample).
    pub fn new(cc: &eframe::CreationContext<'_>, open: Option<(PathBuf, Option<PathBuf>)>) -> Self {
        let state: State = cc
            .storage
            .and_then(|s| eframe::get_value(s, eframe::APP_KEY))
            .unwrap_or_default();
        Self::with_state(cc, state, open)
    }

    /// Builds the app on a state saved before (what [`App::new`] reads from the storage).
    pub fn with_state(
        cc: &eframe::CreationContext<'_>,
        state: State,
        open: Option<(PathBuf, Option<PathBuf>)>,
    ) -> Self {
        let has_wgpu = match &cc.wgpu_render_state {
            Some(rs) => {
                render::SliceRenderer::install(rs);
                true
            }
            None => false,
        };
        let egui_ctx = cc.egui_ctx.clone();
        let ctx = cc.egui_ctx.clone();
        let (worker, error) = match Worker::spawn(move || ctx.request_repaint()) {
            Ok(w) => (Some(w), None),
            Err(e) => (None, Some(format!("cannot start the worker thread: {e}"))),
        };
        let mut app = App {
            state,
            rt: Runtime {
                worker,
                history: History::default(),
                scan: None,
                loading: None,
                error,
                note: None,
                work: Work::default(),
                views: ViewsRuntime::default(),
                gpu: GpuPanel::default(),
                febds: FebdsRuntime::default(),
                capture: Capture::default(),
                windows: Windows::default(),
                overlay: overlay::OverlayRuntime::default(),
                has_wgpu,
                dialogs: channel(),
                sampled: None,
                title: String::new(),
                quit: false,
                egui_ctx,
            },
        };
        // The preset being edited was saved before: it has unsaved edits only where it differs
        // from the preset it came from, as read now.
        if app.state.draft.is_some() {
            let name = match app.state.preset.as_str() {
                "" => "nnunet-v2",
                p => p,
            };
            app.rt.windows.editor.baseline =
                crate::augment::preset::load_or_bundled(Path::new(name)).ok();
        }
        if let Some((image, label)) = open {
            app.apply(Command::Open(image, label));
        }
        app
    }

    /// The window title: the scan, and the preset in use with a `*` while it has unsaved edits.
    pub fn title(&self) -> String {
        let mut t = String::from("augscope");
        if let Some(scan) = &self.rt.scan
            && let Some(name) = scan.loaded.path.file_name()
        {
            t.push_str(&format!(" — {}", name.to_string_lossy()));
            if let Some(series) = &scan.loaded.series {
                t.push_str(&format!(" ({})", series.name()));
            }
        }
        let preset = match &self.state.draft {
            Some(d) => d.name.clone(),
            None => Path::new(&self.state.preset)
                .file_name()
                .map_or_else(String::new, |n| n.to_string_lossy().into_owned()),
        };
        if !preset.is_empty() {
            t.push_str(&format!(" — preset {preset}"));
            if self.rt.windows.editor.unsaved(&self.state) {
                t.push('*');
            }
        }
        t
    }

    /// Whether nothing is being loaded or computed and the views show the current parameters.
    pub fn is_idle(&self) -> bool {
        let rt = &self.rt;
        let busy_worker = rt.worker.as_ref().is_some_and(Worker::pending);
        let computing = rt.scan.is_some()
            && rt
                .work
                .full
                .as_ref()
                .is_none_or(|f| f.generation != rt.work.generation);
        let comparing = self.state.show_compare
            && rt
                .gpu
                .comparison
                .as_ref()
                .is_none_or(|c| c.generation != rt.work.generation);
        rt.loading.is_none()
            && !busy_worker
            && !computing
            && !comparing
            && !rt.windows.export.running()
            && !self.masks_pending()
    }

    /// The parameters the augmented views show: those of the generation on screen, which lag
    /// the sliders while the worker computes; the sliders' own before anything is shown.
    pub fn params_on_screen(&self) -> &Params {
        params_on_screen(&self.state, &self.rt)
    }

    /// The loaded scan's (min, max); (0, 1) with none.
    pub fn scan_range(&self) -> (f32, f32) {
        self.rt.scan.as_ref().map_or((0.0, 1.0), |s| s.loaded.range)
    }

    pub fn plan(&self) -> Plan {
        match &self.rt.scan {
            Some(s) => {
                let v = &s.loaded.image;
                self.state.params.to_plan(v.ndim(), &v.spacing_mm)
            }
            None => self.state.params.to_plan(3, &[1.0; 3]),
        }
    }
}

impl eframe::App for App {
    fn ui(&mut self, ui: &mut egui::Ui, _frame: &mut eframe::Frame) {
        self.receive();
        let mut cmds: Vec<Command> = vec![];
        // Files dropped on the window: the first is the scan, a second its label map.
        let dropped: Vec<PathBuf> = ui.input(|i| {
            i.raw
                .dropped_files
                .iter()
                .map(|f| f.path().to_path_buf())
                .collect()
        });
        if let Some(first) = dropped.first() {
            cmds.push(Command::Open(first.clone(), dropped.get(1).cloned()));
        }
        cmds.extend(panels::shortcuts(ui, self.rt.views.active_view));
        cmds.extend(panels::menu_bar(ui, &mut self.state, &self.rt));
        panels::status_bar(ui, &self.state, &mut self.rt);
        cmds.extend(panels::controls(ui, &mut self.state, &self.rt));
        panels::info_panel(ui, &mut self.state, &self.rt);
        overlay::update(ui.ctx(), &self.state, &mut self.rt);
        cmds.extend(views::central(ui, &mut self.state, &mut self.rt));
        if self.state.show_compare {
            cmds.extend(views::compare_window(ui, &mut self.state, &mut self.rt));
        }
        if self.rt.windows.export.open {
            cmds.extend(export::export_window(ui, &mut self.state, &mut self.rt));
        }
        if self.rt.windows.code.open {
            code::code_window(ui, &mut self.state, &mut self.rt);
        }
        if self.rt.windows.code.save.open {
            code::save_preset_window(ui, &mut self.state, &mut self.rt);
        }
        if self.rt.windows.editor.open {
            cmds.extend(preset_editor::editor_window(
                ui,
                &mut self.state,
                &mut self.rt,
            ));
        }
        if self.rt.windows.grid.open {
            grid::grid_window(ui, &mut self.state, &mut self.rt);
        }
        cmds.extend(browse::window(ui.ctx(), &mut self.rt.windows.browse));
        cmds.extend(series_picker::window(
            ui.ctx(),
            &mut self.rt.windows.series_picker,
        ));
        panels::help_window(ui.ctx(), &mut self.rt.windows.help_open);
        self.rt.capture.pixels_per_point = ui.ctx().pixels_per_point();
        self.auto_png(ui.ctx());
        if self.rt.quit {
            ui.ctx().send_viewport_cmd(egui::ViewportCommand::Close);
        }
        if std::mem::take(&mut self.rt.capture.screenshot_pending) {
            // The pixels come back through the dialogs' channel once the frame is read.
            let tx = self.rt.dialogs.0.clone();
            let ctx = ui.ctx().clone();
            ui.ctx().request_screenshot(move |img| {
                let _ = tx.send(Command::ScreenshotTaken(img));
                ctx.request_repaint();
            });
        }
        for c in cmds {
            self.apply(c);
        }
        // A drag of a slider is one undo step: record once the pointer is released.
        if !ui.input(|i| i.pointer.any_down()) {
            self.rt.history.settle(&self.state);
        }
        self.sync();
        let title = self.title();
        if title != self.rt.title {
            ui.ctx()
                .send_viewport_cmd(egui::ViewportCommand::Title(title.clone()));
            self.rt.title = title;
        }
        if self.rt.loading.is_some() || !self.is_idle() {
            // Replies wake the UI; this keeps the "working" spinner turning meanwhile.
            ui.ctx()
                .request_repaint_after(std::time::Duration::from_millis(100));
        }
    }

    fn save(&mut self, storage: &mut dyn eframe::Storage) {
        eframe::set_value(storage, eframe::APP_KEY, &self.state);
    }
}
