//! The desktop explorer (egui/eframe with the wgpu renderer): axial, coronal and sagittal planes
//! of the original and the augmented scan, controls for every [`Plan`] parameter, a worker
//! thread that recomputes on the chosen engine while the UI keeps drawing, and a CPU vs GPU
//! comparison. Arrays are `[z, y, x]` (2D `[y, x]`).
//!
//! Structure (STYLE.md): a persisted serde [`State`] apart from the [`Runtime`] (worker, loaded
//! volumes, slices on screen); panels return [`Command`]s that the app applies once per frame.

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
use worker::{
    Comparison, Compute, FilterStep, FullResult, Loaded, MaskRequest, MaskSet, Reply, SliceSet,
    Worker,
};

/// The bundled sample scan (MNI152 T1), relative to the crate root.
pub const SAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/assets/mni152_t1.nii.gz");
/// The sample's label map (1 grey matter, 2 white matter).
pub const SAMPLE_LABEL: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/assets/mni152_tissue_labels.nii.gz"
);

/// Opens the window on the given file (or the bundled sample) and runs until it is closed.
pub fn run(files: Vec<PathBuf>, label: Option<PathBuf>) -> anyhow::Result<()> {
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
            let mut app = App::new(cc, Some((image, label)));
            // Preset parameters for scripted screenshots (scripts/screenshots.sh).
            if let Ok(spec) = std::env::var("AUGSCOPE_SHOT") {
                app.state.params = preset_params(&spec, app.state.params.clone());
                // `export=DIR`: the batch export dialog open on that folder.
                if let Some(dir) = spec
                    .split(';')
                    .find_map(|p| p.trim().strip_prefix("export="))
                {
                    app.state.export.out_dir = dir.to_string();
                    app.state.export.seed = app.state.params.seed;
                    app.rt.export.open = true;
                }
                // `editor`: the preset editor open; `code=K`: the code window on tab K; `grid`:
                // the grid of draws; `preset=NAME`: the preset in use; `overlays`: the deformation
                // grid and Jacobian overlays on; `as=MODEL`: preview as a training library.
                for part in spec.split(';').map(str::trim) {
                    if part == "editor" {
                        app.apply(Command::OpenEditor);
                    } else if part == "grid" {
                        app.apply(Command::OpenGrid);
                    } else if let Some(name) = part.strip_prefix("preset=") {
                        app.state.preset = name.to_string();
                    } else if let Some(p) = part.strip_prefix("png=") {
                        // A PNG of the whole window once the work is done, then quit.
                        app.rt.auto_png = Some(AutoPng {
                            path: PathBuf::from(p),
                            nudge: spec.split(';').any(|q| q.trim() == "nudge"),
                            stage: 0,
                            idle_since: None,
                        });
                    } else if part == "compare" {
                        app.state.show_compare = true;
                    } else if part == "backend=cuda" {
                        app.state.params.backend = BackendChoice::Cuda(0);
                    } else if let Some(z) = part.strip_prefix("zoom=") {
                        app.rt.initial_zoom = z.parse().ok();
                    } else if part == "nearest" {
                        app.state.display.nearest = true;
                    } else if part == "overlays" {
                        app.state.display.deformation_grid = true;
                        app.state.display.jacobian = true;
                    } else if let Some(m) = part.strip_prefix("as=") {
                        if let Ok(m) = m.parse() {
                            app.state.params.preview_as = m;
                        }
                    } else if let Some(tab) = part.strip_prefix("code=") {
                        app.rt.code.open = true;
                        app.rt.code.from_preset = true;
                        app.rt.code.tab = tab.parse().unwrap_or(0);
                    }
                }
            }
            Ok(Box::new(app))
        }),
    )
    .map_err(|e| anyhow::anyhow!(preflight::explain(&e.to_string())))
    .context("cannot open the window")
}

/// Writes the augmented volume to `path` (float32) and its label map, in its own type, beside it
/// (`NAME_label.EXT`); each file appears whole or not at all.
fn save_augmented(
    path: &Path,
    image: &crate::core::volume::Volume,
    label: Option<&crate::core::volume::Volume>,
) -> Result<String, String> {
    use crate::io::{self, SaveOptions};
    io::save(path, image, &SaveOptions { keep_dtype: false }).map_err(|e| e.to_string())?;
    let mut note = format!("saved {}", path.display());
    if let Some(l) = label {
        let lp = label_path_beside(path);
        io::save(&lp, l, &SaveOptions { keep_dtype: true }).map_err(|e| e.to_string())?;
        note.push_str(&format!(" and {}", lp.display()));
    }
    Ok(note)
}

/// `dir/NAME_label.EXT` beside `dir/NAME.EXT` (`.nii.gz` counts as one extension).
pub fn label_path_beside(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    let (stem, ext) = match name.strip_suffix(".nii.gz") {
        Some(s) => (s.to_string(), "nii.gz".to_string()),
        None => match name.rsplit_once('.') {
            Some((s, e)) => (s.to_string(), e.to_string()),
            None => (name.clone(), "nii.gz".to_string()),
        },
    };
    path.with_file_name(format!("{stem}_label.{ext}"))
}

/// Where screenshots go: `~/Pictures` if it exists, else the home folder, else the current one.
fn screenshot_dir() -> PathBuf {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    home.as_ref()
        .map(|h| h.join("Pictures"))
        .filter(|p| p.is_dir())
        .or(home)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// A new screenshot's path in [`screenshot_dir`]: `augscope-<scan>-<unix seconds>.png`.
fn screenshot_path(scan: Option<&Path>) -> PathBuf {
    let stem = scan.and_then(|p| p.file_name()).map_or_else(
        || "views".to_string(),
        |n| {
            let n = n.to_string_lossy();
            n.trim_end_matches(".gz")
                .trim_end_matches(".nii")
                .to_string()
        },
    );
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    screenshot_dir().join(format!("augscope-{stem}-{secs}.png"))
}

/// Writes `crop` (in pixels; the whole image when `None`) of the window's screenshot to `path`
/// as a PNG, whole or not at all.
fn write_png(shot: &egui::ColorImage, crop: Option<egui::Rect>, path: &Path) -> Result<(), String> {
    let [w, h] = shot.size;
    let r = crop.unwrap_or(egui::Rect::from_min_size(
        egui::Pos2::ZERO,
        egui::vec2(w as f32, h as f32),
    ));
    let x0 = (r.min.x.max(0.0) as usize).min(w);
    let y0 = (r.min.y.max(0.0) as usize).min(h);
    let x1 = (r.max.x.max(0.0) as usize).clamp(x0, w);
    let y1 = (r.max.y.max(0.0) as usize).clamp(y0, h);
    if x1 == x0 || y1 == y0 {
        return Err("the screenshot holds no views".into());
    }
    let mut rgba = Vec::with_capacity((x1 - x0) * (y1 - y0) * 4);
    for y in y0..y1 {
        for p in &shot.pixels[y * w + x0..y * w + x1] {
            rgba.extend_from_slice(&p.to_array());
        }
    }
    let (cw, ch) = ((x1 - x0) as u32, (y1 - y0) as u32);
    crate::io::atomic_write(path, "PNG", |f| {
        use image::ImageEncoder as _;
        image::codecs::png::PngEncoder::new(f)
            .write_image(&rgba, cw, ch, image::ExtendedColorType::Rgba8)
            .map_err(std::io::Error::other)
    })
    .map_err(|e| e.to_string())
}

/// What to open at start: the first file given, else the sample with its label map.
pub fn initial_files(files: Vec<PathBuf>, label: Option<PathBuf>) -> (PathBuf, Option<PathBuf>) {
    match files.into_iter().next() {
        Some(f) => (f, label),
        None => (
            PathBuf::from(SAMPLE),
            label.or_else(|| Some(PathBuf::from(SAMPLE_LABEL))),
        ),
    }
}

/// What panels ask the app to do.
#[derive(Clone, Debug, PartialEq)]
pub enum Command {
    Open(PathBuf, Option<PathBuf>),
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
    pub generation: u64,
    pub sent: Option<(u64, Vec<usize>, Instant)>,
    pub full: Option<FullResult>,
    pub shown: Option<SliceSet>,
    pub original: Vec<Arc<DisplaySlice>>,
    pub original_label: Vec<Option<Arc<DisplaySlice>>>,
    pub original_cursor: Vec<usize>,
    pub devices: Option<DevicesReport>,
    pub memory: Vec<MemStats>,
    pub comparison: Option<Comparison>,
    pub compare_sent: Option<u64>,
    pub applied: Option<Params>,
    pub nav: Vec<Nav>,
    pub active_view: usize,
    pub latency: Latency,
    pub has_wgpu: bool,
    pub dialogs: (Sender<Command>, Receiver<Command>),
    /// The last preset sample: the parameters it set, its done list and drawn values.
    pub sampled: Option<(Params, Vec<crate::augment::Done>)>,
    /// Show no timings (snapshot tests: they differ from run to run).
    pub hide_timings: bool,
    /// The generation whose whole volume the worker is filling in.
    pub filling: Option<u64>,
    /// The batch export dialog and its running batch.
    pub export: export::ExportRuntime,
    /// The code window and the save-preset window.
    pub code: code::CodeRuntime,
    /// The preset editor.
    pub editor: preset_editor::EditorRuntime,
    /// The window title last sent.
    pub title: String,
    /// The last FEBDS masks received, and the plane ids of the last request sent.
    pub masks: Option<MaskSet>,
    pub mask_sent: Option<(crate::filter::FebdsMethod, Vec<u64>)>,
    /// The deformation grid and Jacobian overlays and their thread.
    pub overlay: overlay::OverlayRuntime,
    /// The grid of draws of the preset in use.
    pub grid: grid::GridRuntime,
    /// What lies under the mouse pointer this frame (the status bar's readout).
    pub hover: Option<Hover>,
    /// When the current generation's work began (for the elapsed time of long work), and how
    /// far its whole-volume fill is.
    pub work_started: Option<(u64, Instant)>,
    pub progress: Option<Progress>,
    /// The built-in file browser.
    pub browse: browse::BrowseRuntime,
    pub help_open: bool,
    /// A screenshot was asked for and has not arrived.
    pub screenshot_pending: bool,
    /// Where the views are in the window (points), for the screenshot.
    pub views_rect: Option<egui::Rect>,
    pub pixels_per_point: f32,
    /// The zoom every view starts at (scripted screenshots).
    pub initial_zoom: Option<f32>,
    /// A scripted PNG of the window, taken when the work is done (then the app quits).
    pub auto_png: Option<AutoPng>,
    pub quit: bool,
    /// Wakes the UI when a background thread (a save, a screenshot) has sent its answer.
    pub egui_ctx: egui::Context,
}

/// A scripted screenshot: once the app has been idle for a second (and, with `nudge`, after one
/// more rotation step of 1.5° has been computed, so that the timings show a slider step), the
/// whole window goes to `path` and the app closes.
#[derive(Clone, Debug)]
pub struct AutoPng {
    pub path: PathBuf,
    pub nudge: bool,
    /// 0 waiting, 1 nudged and waiting, 2 screenshot asked for.
    pub stage: u8,
    pub idle_since: Option<Instant>,
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
                generation: 0,
                sent: None,
                full: None,
                shown: None,
                original: vec![],
                original_label: vec![],
                original_cursor: vec![],
                devices: None,
                memory: vec![],
                comparison: None,
                compare_sent: None,
                applied: None,
                nav: vec![],
                active_view: 0,
                latency: Latency::default(),
                has_wgpu,
                dialogs: channel(),
                sampled: None,
                hide_timings: false,
                filling: None,
                export: export::ExportRuntime::default(),
                code: code::CodeRuntime::default(),
                editor: preset_editor::EditorRuntime::default(),
                title: String::new(),
                masks: None,
                mask_sent: None,
                overlay: overlay::OverlayRuntime::default(),
                grid: grid::GridRuntime::default(),
                hover: None,
                work_started: None,
                progress: None,
                browse: browse::BrowseRuntime::default(),
                help_open: false,
                screenshot_pending: false,
                views_rect: None,
                pixels_per_point: 1.0,
                initial_zoom: None,
                auto_png: None,
                quit: false,
                egui_ctx,
            },
        };
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
        }
        let preset = match &self.state.draft {
            Some(d) => d.name.clone(),
            None => Path::new(&self.state.preset)
                .file_name()
                .map_or_else(String::new, |n| n.to_string_lossy().into_owned()),
        };
        if !preset.is_empty() {
            t.push_str(&format!(" — preset {preset}"));
            if self.rt.editor.unsaved(&self.state) {
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
                .full
                .as_ref()
                .is_none_or(|f| f.generation != rt.generation);
        let comparing = self.state.show_compare
            && rt
                .comparison
                .as_ref()
                .is_none_or(|c| c.generation != rt.generation);
        rt.loading.is_none()
            && !busy_worker
            && !computing
            && !comparing
            && !rt.export.running()
            && !self.masks_pending()
    }

    /// The FEBDS planes the views want masks of (original and augmented planes on screen), when
    /// the overlay is on.
    pub fn mask_planes(&self) -> Option<(crate::filter::FebdsMethod, Vec<Arc<DisplaySlice>>)> {
        let method = self.state.params.filter.febds()?;
        let rt = &self.rt;
        let shown = rt
            .shown
            .as_ref()
            .filter(|s| s.generation == rt.generation)?;
        let mut planes: Vec<Arc<DisplaySlice>> = shown.image.clone();
        if self.state.display.side_by_side {
            planes.extend(rt.original.iter().cloned());
        }
        Some((method, planes))
    }

    /// Whether masks were asked for and have not all arrived.
    fn masks_pending(&self) -> bool {
        let Some((method, planes)) = self.mask_planes() else {
            return false;
        };
        let ids: Vec<u64> = planes.iter().map(|p| p.id).collect();
        self.rt.masks.as_ref().is_none_or(|m| {
            m.method != method || ids.iter().any(|id| !m.masks.iter().any(|(i, _)| i == id))
        })
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

    /// Advances a scripted screenshot ([`AutoPng`]).
    fn auto_png(&mut self, ctx: &egui::Context) {
        let idle = self.is_idle()
            && self.rt.scan.is_some()
            && (!self.state.show_compare
                || self
                    .rt
                    .comparison
                    .as_ref()
                    .is_some_and(|c| c.generation == self.rt.generation));
        let Some(a) = self.rt.auto_png.as_mut() else {
            return;
        };
        if !idle || a.stage == 2 {
            a.idle_since = None;
            ctx.request_repaint_after(std::time::Duration::from_millis(100));
            return;
        }
        let since = *a.idle_since.get_or_insert_with(Instant::now);
        ctx.request_repaint_after(std::time::Duration::from_millis(100));
        if since.elapsed().as_secs_f64() < 1.0 {
            return;
        }
        a.idle_since = None;
        if a.nudge && a.stage == 0 {
            a.stage = 1;
            self.state.params.rotate_deg[0] += 1.5;
        } else {
            a.stage = 2;
            self.rt.screenshot_pending = true;
        }
    }

    /// Carries out one command (what the panels, menus and dialogs ask for).
    pub fn apply(&mut self, cmd: Command) {
        let App { state, rt } = self;
        match cmd {
            Command::Open(image, label) => {
                let label = label
                    .or_else(|| (image == Path::new(SAMPLE)).then(|| PathBuf::from(SAMPLE_LABEL)));
                match &rt.worker {
                    Some(w) => {
                        w.load(image.clone(), label);
                        rt.loading = Some(image);
                    }
                    None => rt.error = Some("the worker thread is not running".into()),
                }
            }
            Command::OpenDialog => self.apply(Command::Pick(browse::Purpose::Scan)),
            Command::OpenLabelDialog => {
                if let Some(img) = rt.scan.as_ref().map(|s| s.loaded.path.clone()) {
                    self.apply(Command::Pick(browse::Purpose::Label(img)));
                }
            }
            Command::Pick(purpose) => {
                let start = rt.scan.as_ref().map(|s| s.loaded.path.clone());
                if browse::system_dialog_available() {
                    if let Err(e) = browse::system_dialog(purpose.clone(), rt.dialogs.0.clone()) {
                        rt.browse.show(
                            purpose,
                            start.as_deref(),
                            Some(format!("the system file dialog cannot start ({e})")),
                        );
                    }
                } else {
                    rt.browse.show(
                        purpose,
                        start.as_deref(),
                        Some(
                            "no system file dialog (install xdg-desktop-portal-gtk or zenity): \
                             augscope's own browser"
                                .into(),
                        ),
                    );
                }
            }
            Command::SaveAugmented(path) => {
                let full = rt.full.as_ref().filter(|f| f.generation == rt.generation);
                match full {
                    None => {
                        rt.error =
                            Some("nothing to save yet: the transform is still running".into())
                    }
                    Some(f) => {
                        let (image, label) = (f.image.clone(), f.label.clone());
                        let tx = rt.dialogs.0.clone();
                        let ctx = rt.egui_ctx.clone();
                        let spawned = std::thread::Builder::new()
                            .name("augscope-save".into())
                            .spawn(move || {
                                let _ = tx.send(Command::Saved(save_augmented(
                                    &path,
                                    &image,
                                    label.as_deref(),
                                )));
                                ctx.request_repaint();
                            });
                        if let Err(e) = spawned {
                            rt.error = Some(format!("cannot start saving: {e}"));
                        }
                    }
                }
            }
            Command::Saved(Ok(note)) => rt.note = Some(note),
            Command::Saved(Err(e)) => rt.error = Some(e),
            Command::Screenshot => rt.screenshot_pending = true,
            Command::ScreenshotTaken(img) => {
                // A scripted screenshot is the whole window and ends the app; F12's is the views.
                let scripted = rt.auto_png.as_ref().is_some_and(|a| a.stage == 2);
                let (path, crop) = match rt.auto_png.take().filter(|_| scripted) {
                    Some(a) => (a.path, None),
                    None => {
                        let ppp = rt.pixels_per_point;
                        let scan = rt.scan.as_ref().map(|s| s.loaded.path.clone());
                        let crop = rt
                            .views_rect
                            .map(|r| egui::Rect::from_min_max(r.min * ppp, r.max * ppp));
                        (screenshot_path(scan.as_deref()), crop)
                    }
                };
                // Encoding a PNG takes tens of milliseconds: not on the UI thread.
                let tx = rt.dialogs.0.clone();
                let ctx = rt.egui_ctx.clone();
                let spawned = std::thread::Builder::new()
                    .name("augscope-screenshot".into())
                    .spawn(move || {
                        let r = write_png(&img, crop, &path)
                            .map(|()| format!("screenshot saved: {}", path.display()))
                            .map_err(|e| format!("screenshot not saved: {e}"));
                        if scripted {
                            if let Err(e) = &r {
                                eprintln!("augscope: error: {e}");
                            }
                            let _ = tx.send(Command::Quit);
                        } else {
                            let _ = tx.send(Command::Saved(r));
                        }
                        ctx.request_repaint();
                    });
                if let Err(e) = spawned {
                    rt.error = Some(format!("cannot start saving the screenshot: {e}"));
                }
            }
            Command::Quit => rt.quit = true,
            Command::ShowHelp => rt.help_open = true,
            Command::Browse(purpose, failed) => {
                let start = rt.scan.as_ref().map(|s| s.loaded.path.clone());
                let why = failed.then(|| {
                    "the system file dialog did not open (no XDG desktop portal or zenity \
                     answered): augscope's own browser"
                        .to_string()
                });
                rt.browse.show(purpose, start.as_deref(), why);
            }
            Command::SamplePreset => {
                let (nd, spacing) = rt.scan.as_ref().map_or((3, vec![1.0; 3]), |s| {
                    (s.loaded.image.ndim(), s.loaded.image.spacing_mm.clone())
                });
                let sampled = export::chosen_preset(state, nd, true).and_then(|p| {
                    p.sample(state.preset_seed, nd, &spacing)
                        .map_err(|e| format!("preset {}: {e}", p.name))
                });
                match sampled {
                    Ok(s) => {
                        state.params = Params::from_plan(&s.plan, nd, &state.params);
                        rt.sampled = Some((state.params.clone(), s.done));
                        state.preset_seed = state.preset_seed.wrapping_add(1);
                    }
                    Err(e) => rt.error = Some(e),
                }
            }
            Command::PresetDialog => self.apply(Command::Pick(browse::Purpose::Preset)),
            Command::SetPreset(p) => {
                if !crate::augment::preset::BUNDLED.iter().any(|(n, _)| *n == p) {
                    state.push_recent_preset(p.clone());
                }
                state.preset = p;
            }
            Command::OpenCode => rt.code.open = true,
            Command::OpenSavePreset => {
                let save = &mut rt.code.save;
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
            Command::OpenEditor => {
                if state.draft.is_none() {
                    let nd = rt.scan.as_ref().map_or(3, |s| s.loaded.image.ndim());
                    match export::chosen_preset(state, nd, true) {
                        Ok(p) => {
                            rt.editor.baseline = Some(p.clone());
                            state.draft = Some(p);
                        }
                        Err(e) => rt.error = Some(e),
                    }
                }
                rt.editor.open = state.draft.is_some();
            }
            Command::PresetFromPlan => {
                let nd = rt.scan.as_ref().map_or(3, |s| s.loaded.image.ndim());
                state.draft = Some(preset_editor::centred_on(state, nd));
                rt.editor.open = true;
            }
            Command::DiscardDraft => {
                state.draft = None;
                rt.editor.baseline = None;
                rt.editor.open = false;
            }
            Command::OpenExport => rt.export.open = true,
            Command::OpenGrid => rt.grid.open = true,
            Command::StartExport => {
                if let Err(e) = export::start(state, rt) {
                    rt.export.last = Some(Err(e));
                }
            }
            Command::CancelExport => rt.export.cancel(),
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

    fn receive(&mut self) {
        let mut replies = vec![];
        if let Some(w) = &self.rt.worker {
            while let Some(r) = w.try_recv() {
                replies.push(r);
            }
        }
        while let Ok(cmd) = self.rt.dialogs.1.try_recv() {
            self.apply(cmd);
        }
        let App { state, rt } = self;
        rt.export.poll();
        for r in replies {
            match r {
                Reply::Loaded(Ok(l)) => {
                    rt.loading = None;
                    rt.error = None;
                    rt.note = l.note.clone();
                    state.push_recent(l.path.clone(), l.label_path.clone());
                    let before = rt.scan.as_ref().map(|s| s.loaded.path.clone());
                    state.switch_scan(before.as_deref(), &l.path);
                    let views = slices::views(&l.image);
                    let cursor = l.image.shape.iter().map(|n| n / 2).collect();
                    if state.display.wl_path.as_deref() != Some(l.path.as_path())
                        || state.display.level.is_none()
                    {
                        // The file's own window (DICOM window centre and width) where it has
                        // one, else the percentiles; "Auto" always takes the percentiles.
                        match l.image.default_window {
                            Some((c, w)) if c.is_finite() && w.is_finite() && w > 0.0 => {
                                state.display.level = Some(c as f32);
                                state.display.width = Some(w as f32);
                            }
                            _ => {
                                let (lo, hi) = l.auto_window;
                                state.display.level = Some(0.5 * (lo + hi));
                                state.display.width = Some((hi - lo).max(1e-6));
                            }
                        }
                        state.display.wl_path = Some(l.path.clone());
                    }
                    let nav = Nav {
                        zoom: rt.initial_zoom.unwrap_or(1.0),
                        ..Nav::default()
                    };
                    rt.nav = vec![nav; views.len()];
                    rt.active_view = 0;
                    rt.scan = Some(Scan {
                        loaded: l,
                        views,
                        cursor,
                        frame: 0,
                    });
                    rt.full = None;
                    rt.shown = None;
                    rt.original_cursor.clear();
                    rt.comparison = None;
                    rt.compare_sent = None;
                    rt.sent = None;
                    rt.masks = None;
                    rt.mask_sent = None;
                    rt.generation += 1;
                }
                Reply::Loaded(Err(e)) => {
                    rt.loading = None;
                    rt.error = Some(e);
                }
                Reply::Slices(s) => {
                    if s.generation == rt.generation {
                        if let Some((g, _, t)) = &rt.sent
                            && *g == s.generation
                        {
                            rt.latency.last_ms = Some(t.elapsed().as_secs_f64() * 1e3);
                        }
                        rt.latency.slice_compute_ms = Some(s.elapsed_ms);
                        rt.shown = Some(s);
                    }
                }
                Reply::Filling(g) => rt.filling = Some(g),
                Reply::Progress {
                    generation,
                    done,
                    total,
                } => {
                    if generation == rt.generation {
                        let first = match rt.progress {
                            Some(p) if p.generation == generation => p.first,
                            _ => (Instant::now(), done),
                        };
                        rt.progress = Some(Progress {
                            generation,
                            done,
                            total,
                            first,
                        });
                    }
                }
                Reply::Full(f) => {
                    if f.generation == rt.generation {
                        if let Some((g, _, t)) = &rt.sent
                            && *g == f.generation
                            && rt.shown.as_ref().is_none_or(|s| s.generation != *g)
                        {
                            rt.latency.last_ms = Some(t.elapsed().as_secs_f64() * 1e3);
                        }
                        // A run's note, else the scan's own (e.g. why its label map was not
                        // used), which stays as long as the scan is open.
                        rt.note = f
                            .note
                            .clone()
                            .or_else(|| rt.scan.as_ref().and_then(|s| s.loaded.note.clone()));
                        rt.full = Some(f);
                        rt.shown = None;
                    }
                }
                Reply::Compared(c) => rt.comparison = Some(c),
                Reply::Masks(m) => rt.masks = Some(m),
                Reply::Failed {
                    generation,
                    message,
                } => {
                    if generation == rt.generation {
                        rt.error = Some(message);
                    }
                }
                Reply::Devices(d) => rt.devices = Some(d),
                Reply::Memory(m) => rt.memory = m,
            }
        }
    }

    /// Sends what the views need and extracts planes that are at hand.
    fn sync(&mut self) {
        let App { state, rt } = self;
        let Some(scan) = &rt.scan else {
            return;
        };
        if rt.applied.as_ref() != Some(&state.params) {
            if rt.applied.is_some() {
                rt.generation += 1;
            }
            rt.applied = Some(state.params.clone());
        }
        if rt.work_started.is_none_or(|(g, _)| g != rt.generation) {
            rt.work_started = Some((rt.generation, Instant::now()));
        }
        let img = &scan.loaded.image;
        if rt.original_cursor != scan.cursor || rt.original.len() != scan.views.len() {
            rt.original = scan
                .views
                .iter()
                .map(|v| {
                    let idx = v.normal.map_or(0, |a| scan.cursor[a]);
                    slices::extract(&img.data, &img.shape, img.channels, &img.spacing_mm, v, idx)
                })
                .collect();
            rt.original_label = scan
                .views
                .iter()
                .map(|v| {
                    let idx = v.normal.map_or(0, |a| scan.cursor[a]);
                    scan.loaded
                        .label
                        .as_ref()
                        .map(|l| slices::extract(&l.data, &l.shape, 1, &img.spacing_mm, v, idx))
                })
                .collect();
            rt.original_cursor = scan.cursor.clone();
        }
        let have_cuda = rt.devices.as_ref().is_some_and(|d| !d.devices.is_empty());
        let spec = state.params.backend.spec(have_cuda);
        let nd = img.ndim();
        let plan = state.params.to_plan(nd, &img.spacing_mm);
        let fp = &state.params.filter;
        let filter = fp
            .intensity_filter(scan.loaded.range.1)
            .map(|filter| FilterStep {
                filter,
                boundary: fp.boundary(),
                stage: fp.stage,
            });
        match &rt.full {
            Some(f) if f.generation == rt.generation => {
                let fresh = rt
                    .shown
                    .as_ref()
                    .is_some_and(|s| s.generation == f.generation && s.cursor == scan.cursor);
                if !fresh {
                    let image = scan
                        .views
                        .iter()
                        .map(|v| {
                            let idx = v.normal.map_or(0, |a| scan.cursor[a]);
                            slices::extract(
                                &f.image.data,
                                &f.image.shape,
                                f.image.channels,
                                &img.spacing_mm,
                                v,
                                idx,
                            )
                        })
                        .collect();
                    let label = scan
                        .views
                        .iter()
                        .map(|v| {
                            let idx = v.normal.map_or(0, |a| scan.cursor[a]);
                            f.label.as_ref().map(|l| {
                                slices::extract(&l.data, &l.shape, 1, &img.spacing_mm, v, idx)
                            })
                        })
                        .collect();
                    rt.shown = Some(SliceSet {
                        generation: f.generation,
                        cursor: scan.cursor.clone(),
                        image,
                        label,
                        elapsed_ms: 0.0,
                        filter: f.filter.clone(),
                        unfiltered: false,
                    });
                }
            }
            _ => {
                let sent = rt
                    .sent
                    .as_ref()
                    .is_some_and(|(g, c, _)| *g == rt.generation && *c == scan.cursor);
                if !sent && let Some(w) = &rt.worker {
                    w.compute(Compute {
                        generation: rt.generation,
                        plan: plan.clone(),
                        backend: spec.clone(),
                        precision: state.params.precision,
                        cursor: scan.cursor.clone(),
                        views: scan.views.clone(),
                        slices_first: nd == 3,
                        filter: filter.clone(),
                        model: state.params.preview_as,
                    });
                    rt.sent = Some((rt.generation, scan.cursor.clone(), Instant::now()));
                }
            }
        }
        if state.show_compare
            && rt.compare_sent != Some(rt.generation)
            && let Some(w) = &rt.worker
        {
            w.compare(Compute {
                generation: rt.generation,
                plan,
                backend: spec,
                precision: state.params.precision,
                cursor: scan.cursor.clone(),
                views: scan.views.clone(),
                slices_first: false,
                filter: None,
                model: Default::default(),
            });
            rt.compare_sent = Some(rt.generation);
        }
        self.request_masks();
    }

    /// Asks the worker for the FEBDS masks of the planes on screen when they changed.
    fn request_masks(&mut self) {
        let Some((method, planes)) = self.mask_planes() else {
            return;
        };
        let ids: Vec<u64> = planes.iter().map(|p| p.id).collect();
        if self.rt.mask_sent.as_ref() == Some(&(method, ids.clone())) {
            return;
        }
        let (offset, factor) = febds_map(self.scan_range());
        let have_cuda = self
            .rt
            .devices
            .as_ref()
            .is_some_and(|d| !d.devices.is_empty());
        if let Some(w) = &self.rt.worker {
            w.masks(MaskRequest {
                method,
                planes,
                offset,
                factor,
                backend: self.state.params.backend.spec(have_cuda),
                precision: self.state.params.precision,
            });
            self.rt.mask_sent = Some((method, ids));
        }
    }
}

/// FEBDS reads 12-bit intensities (0..4095: its gamma and Otsu histogram assume them). A scan
/// whose values lie in [0, 4095] with a maximum above 255 is taken as 12-bit data and passed
/// unchanged (`x ↦ x`); any other (8-bit images, floats, CT in HU) is mapped linearly from its
/// [min, max] onto [0, 4095]. Returns `(offset, factor)` of `x ↦ (x − offset) · factor`.
pub fn febds_map((lo, hi): (f32, f32)) -> (f32, f32) {
    if lo >= 0.0 && hi <= 4095.0 && hi > 255.0 {
        (0.0, 1.0)
    } else if hi > lo {
        (lo, 4095.0 / (hi - lo))
    } else {
        (lo, 1.0)
    }
}

/// Parameters from `rotate=a0,a1,a2;scale=s;translate=t0,t1,t2;elastic=alpha,sigma;seed=n;
/// filter=KIND[,VALUE[,after]]` (degrees, voxels; see `filter_spec`); the rest as in `base`.
/// Unknown or malformed parts are ignored.
pub fn preset_params(spec: &str, base: Params) -> Params {
    let mut p = Params {
        elastic: false,
        ..base
    };
    p.rotate_deg = [0.0; 3];
    p.translate_vox = [0.0; 3];
    p.scale = [1.0; 3];
    for part in spec.split(';') {
        let Some((k, v)) = part.split_once('=') else {
            continue;
        };
        if k.trim() == "filter" {
            filter_spec(v, &mut p.filter);
            continue;
        }
        let nums: Vec<f64> = v.split(',').filter_map(|t| t.trim().parse().ok()).collect();
        match (k.trim(), nums.as_slice()) {
            ("rotate", [a, b, c]) => p.rotate_deg = [*a, *b, *c],
            ("translate", [a, b, c]) => p.translate_vox = [*a, *b, *c],
            ("scale", [s]) => p.scale = [*s; 3],
            ("elastic", [a, s]) => {
                p.elastic = true;
                p.alpha = *a;
                p.sigma_vox = *s;
            }
            ("seed", [n]) => p.seed = *n as u64,
            ("order", [n]) => {
                p.order = match *n as u8 {
                    0 => crate::augment::Order::Nearest,
                    3 => crate::augment::Order::Cubic,
                    _ => crate::augment::Order::Linear,
                }
            }
            _ => {}
        }
    }
    p
}

/// `KIND[,VALUE[,after]]` of [`preset_params`]: gaussian or log (VALUE sigma), median (VALUE
/// the window), febds (VALUE 0 dog, 1 log, 2 fft); the filter is enabled, before the transform
/// unless `after`.
fn filter_spec(v: &str, f: &mut state::FilterParams) {
    let parts: Vec<&str> = v.split(',').map(str::trim).collect();
    let val: Option<f64> = parts.get(1).and_then(|t| t.parse().ok());
    let kind = match parts.first().copied() {
        Some("gaussian") => state::FilterKind::Gaussian,
        Some("log") => state::FilterKind::Log,
        Some("median") => state::FilterKind::Median,
        Some("febds") => state::FilterKind::Febds,
        _ => return,
    };
    f.enabled = true;
    f.kind = kind;
    match (kind, val) {
        (state::FilterKind::Gaussian | state::FilterKind::Log, Some(s)) => f.sigma_vox = s,
        (state::FilterKind::Median, Some(k)) => f.median_size = k as usize,
        (state::FilterKind::Febds, Some(m)) => {
            f.febds_method = match m as i64 {
                1 => crate::filter::FebdsMethod::Log,
                2 => crate::filter::FebdsMethod::Fft,
                _ => crate::filter::FebdsMethod::Dog,
            }
        }
        _ => {}
    }
    if parts.get(2) == Some(&"after") {
        f.stage = state::FilterStage::After;
    }
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
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
        cmds.extend(panels::shortcuts(ui, self.rt.active_view));
        cmds.extend(panels::menu_bar(ui, &mut self.state, &self.rt));
        panels::status_bar(ui, &self.state, &mut self.rt);
        cmds.extend(panels::controls(ui, &mut self.state, &self.rt));
        panels::info_panel(ui, &mut self.state, &self.rt);
        overlay::update(ui.ctx(), &self.state, &mut self.rt);
        cmds.extend(views::central(ui, &mut self.state, &mut self.rt));
        if self.state.show_compare {
            cmds.extend(views::compare_window(ui, &mut self.state, &mut self.rt));
        }
        if self.rt.export.open {
            cmds.extend(export::export_window(ui, &mut self.state, &mut self.rt));
        }
        if self.rt.code.open {
            code::code_window(ui, &mut self.state, &mut self.rt);
        }
        if self.rt.code.save.open {
            code::save_preset_window(ui, &mut self.state, &mut self.rt);
        }
        if self.rt.editor.open {
            cmds.extend(preset_editor::editor_window(
                ui,
                &mut self.state,
                &mut self.rt,
            ));
        }
        if self.rt.grid.open {
            grid::grid_window(ui, &mut self.state, &mut self.rt);
        }
        cmds.extend(browse::window(ui.ctx(), &mut self.rt.browse));
        panels::help_window(ui.ctx(), &mut self.rt.help_open);
        self.rt.pixels_per_point = ui.ctx().pixels_per_point();
        self.auto_png(ui.ctx());
        if self.rt.quit {
            ui.ctx().send_viewport_cmd(egui::ViewportCommand::Close);
        }
        if std::mem::take(&mut self.rt.screenshot_pending) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn screenshot_spec_sets_the_filter() {
        let p = preset_params("rotate=1,2,3;filter=log,1.5,after", Params::default());
        assert_eq!(p.rotate_deg, [1.0, 2.0, 3.0]);
        assert!(p.filter.enabled);
        assert_eq!(p.filter.kind, state::FilterKind::Log);
        assert_eq!(p.filter.sigma_vox, 1.5);
        assert_eq!(p.filter.stage, state::FilterStage::After);
        let p = preset_params("filter=febds,2", Params::default());
        assert_eq!(p.filter.kind, state::FilterKind::Febds);
        assert_eq!(p.filter.febds_method, crate::filter::FebdsMethod::Fft);
        assert_eq!(p.filter.stage, state::FilterStage::Before);
        let p = preset_params("filter=nonsense,3", Params::default());
        assert!(!p.filter.enabled);
    }
}
