//! "What training will see": a grid of N draws (4, 9 or 16) of the preset in use, draw k with
//! seed `first_seed + k` — the samples `augscope batch --seed first_seed` writes — each shown as
//! one plane of the augmented scan (the main view's cursor), with its seed under it and its done
//! list on hover, and small histograms of the drawn angles, scale factors and realised elastic
//! displacement beneath.
//!
//! The tiles are computed on a thread of this module's own ([`GridWorker`]) with the engines'
//! plane path ([`Backend::apply_plane`](crate::engine::Backend::apply_plane): the CPU engine,
//! or the CUDA engine when the engine selection is CUDA and a device works), and fill in as they
//! finish. The newest request wins: a change of preset, scan, N, seed or plane bumps the
//! generation, and the thread abandons stale work between tiles. Arrays are `[z, y, x]` (2D
//! `[y, x]`).

mod histogram;
mod worker;

pub use histogram::{bins, histogram_values};
pub use worker::{GridJob, GridReply, GridWorker, OverlaySpec, TileOverlay};

use std::sync::Arc;
use std::time::Instant;

use eframe::egui;

use crate::augment::preset::{Preset, Sample};
use crate::core::volume::Volume;
use crate::engine::{BackendSpec, Precision};

use super::overlay;
use super::slices::{self, DisplaySlice};
use super::state::{Params, State};
use super::{Runtime, export};

use histogram::histograms;

/// The grid sizes offered.
pub const SIZES: [usize; 3] = [4, 9, 16];

/// Width of the grid window's content.
const GRID_WIDTH: f32 = 540.0;
/// Height under a tile for its seed caption.
const TILE_CAPTION: f32 = 18.0;
/// Height kept under the tiles for two rows of histograms and the timings.
const HISTOGRAMS_HEIGHT: f32 = 220.0;

/// One finished tile.
pub struct Tile {
    pub seed: u64,
    /// The plane as the engine wrote it: array order, channels leading (see [`GridReply::Tile`]).
    pub data: Vec<f32>,
    /// The same plane in display order (the main view's orientation).
    pub display: Arc<DisplaySlice>,
    pub ms: f64,
    texture: Option<(egui::TextureHandle, (f32, f32))>,
}

/// What identifies a grid: a change of any of these is a new request.
#[derive(Clone)]
struct GridKey {
    preset: Preset,
    image: Arc<Volume>,
    n: usize,
    first_seed: u64,
    plane: Option<(usize, usize)>,
    backend: BackendSpec,
    precision: Precision,
    /// The Display toggles of the overlays: (deformation grid, Jacobian).
    overlays: (bool, bool),
}

impl PartialEq for GridKey {
    fn eq(&self, o: &Self) -> bool {
        Arc::ptr_eq(&self.image, &o.image)
            && self.preset == o.preset
            && self.n == o.n
            && self.first_seed == o.first_seed
            && self.plane == o.plane
            && self.backend == o.backend
            && self.precision == o.precision
            && self.overlays == o.overlays
    }
}

/// The window's runtime side: settings, the thread, and the tiles of the newest request.
pub struct GridRuntime {
    pub open: bool,
    /// Draws shown: one of [`SIZES`].
    pub n: usize,
    /// Seed of draw 0; draw k uses `first_seed + k`.
    pub first_seed: u64,
    /// The main view whose plane the tiles show (index into the scan's views).
    pub view: usize,
    /// The generation of the newest request.
    pub generation: u64,
    /// The draws of the newest request (empty until the thread sent them).
    pub samples: Vec<Sample>,
    /// The affine map per channel of the preset's normalisation, which the tiles are in.
    pub normalized: Option<Vec<(f64, f64)>>,
    /// Tile k of the newest request, once computed.
    pub tiles: Vec<Option<Tile>>,
    /// Realised displacement (max, RMS) of draw k, for the draws with elastic.
    pub displacement: Vec<Option<(f64, f64)>>,
    /// The overlays of tile k, once computed (only while a Display overlay toggle is on).
    pub overlays: Vec<Option<TileOverlay>>,
    /// The plane `(axis, index)` the tiles hold (3D), `None` for a 2D image.
    pub plane: Option<(usize, usize)>,
    pub error: Option<String>,
    pub note: Option<String>,
    /// When the newest request was sent, and the milliseconds to its first and last tile.
    pub started: Option<Instant>,
    pub first_ms: Option<f64>,
    pub last_ms: Option<f64>,
    key: Option<GridKey>,
    image_key: u64,
    worker: Option<GridWorker>,
}

impl Default for GridRuntime {
    fn default() -> Self {
        GridRuntime {
            open: false,
            n: 9,
            first_seed: 0,
            view: 0,
            generation: 0,
            samples: vec![],
            normalized: None,
            tiles: vec![],
            displacement: vec![],
            overlays: vec![],
            plane: None,
            error: None,
            note: None,
            started: None,
            first_ms: None,
            last_ms: None,
            key: None,
            image_key: 0,
            worker: None,
        }
    }
}

impl GridRuntime {
    /// Whether every tile of the newest request is there, and the displacement of every draw
    /// with elastic (or the request failed).
    pub fn complete(&self) -> bool {
        if self.key.is_none() {
            return false;
        }
        if self.error.is_some() {
            return true;
        }
        let wants_overlays = self
            .key
            .as_ref()
            .is_some_and(|k| k.overlays != (false, false));
        let overlays_done = !wants_overlays
            || (self.overlays.len() == self.n && self.overlays.iter().all(Option::is_some));
        overlays_done
            && self.samples.len() == self.n
            && self.tiles.len() == self.n
            && self.tiles.iter().all(Option::is_some)
            && self
                .samples
                .iter()
                .zip(&self.displacement)
                .all(|(s, d)| d.is_some() || s.plan.elastic.is_none_or(|e| e.alpha == 0.0))
    }

    /// Stops the computation and forgets the request (the window closed); the thread ends and
    /// takes its caches (the scan's cubic coefficients among them) along.
    pub fn close(&mut self) {
        self.open = false;
        self.generation += 1;
        self.worker = None;
        self.key = None;
        self.tiles.clear();
        self.samples.clear();
        self.displacement.clear();
        self.overlays.clear();
    }

    /// Tiles the thread computed so far, over all requests (stale ones included).
    pub fn tiles_computed(&self) -> usize {
        self.worker.as_ref().map_or(0, GridWorker::tiles_computed)
    }

    /// Tile overlays the thread computed so far, over all requests.
    pub fn overlays_computed(&self) -> usize {
        self.worker
            .as_ref()
            .map_or(0, GridWorker::overlays_computed)
    }

    /// Moves the first seed past the draws shown.
    pub fn reseed(&mut self) {
        self.first_seed = self.first_seed.wrapping_add(self.n as u64);
    }

    /// Sends a request when what the grid depends on changed; takes the thread's replies.
    pub fn sync(
        &mut self,
        state: &State,
        rt_scan: Option<&super::Scan>,
        have_cuda: bool,
        ctx: &egui::Context,
    ) {
        self.receive(rt_scan);
        let Some(scan) = rt_scan else {
            return;
        };
        let image = &scan.loaded.image;
        let nd = image.ndim();
        let preset = match export::chosen_preset(state, nd, true) {
            Ok(p) => p,
            Err(e) => {
                self.error = Some(e);
                return;
            }
        };
        self.view = self.view.min(scan.views.len().saturating_sub(1));
        let plane = if nd == 3 {
            scan.views[self.view]
                .normal
                .map(|a| (a, scan.cursor[a].min(image.shape[a].saturating_sub(1))))
        } else {
            None
        };
        let key = GridKey {
            preset,
            image: image.clone(),
            n: self.n,
            first_seed: self.first_seed,
            plane,
            backend: state.params.backend.spec(have_cuda),
            precision: state.params.precision,
            overlays: (state.display.deformation_grid, state.display.jacobian),
        };
        if self.key.as_ref() == Some(&key) {
            return;
        }
        if self
            .key
            .as_ref()
            .is_none_or(|k| !Arc::ptr_eq(&k.image, &key.image))
        {
            self.image_key += 1;
        }
        if self.worker.is_none() {
            let ctx = ctx.clone();
            match GridWorker::spawn(move || ctx.request_repaint()) {
                Ok(w) => self.worker = Some(w),
                Err(e) => {
                    self.error = Some(format!("cannot start the grid thread: {e}"));
                    return;
                }
            }
        }
        self.generation += 1;
        self.samples.clear();
        self.tiles = (0..key.n).map(|_| None).collect();
        self.displacement = vec![None; key.n];
        self.overlays = (0..key.n).map(|_| None).collect();
        self.plane = key.plane;
        self.error = None;
        self.note = None;
        self.started = Some(Instant::now());
        self.first_ms = None;
        self.last_ms = None;
        let (deformation_grid, jacobian) = key.overlays;
        let spec = (deformation_grid || jacobian).then(|| OverlaySpec {
            view: scan.views[self.view].clone(),
            deformation_grid,
            jacobian,
        });
        if let Some(w) = &self.worker {
            w.request_with_overlays(
                GridJob {
                    generation: self.generation,
                    image: key.image.clone(),
                    image_key: self.image_key,
                    preset: key.preset.clone(),
                    n: key.n,
                    first_seed: key.first_seed,
                    plane: key.plane,
                    backend: key.backend.clone(),
                    precision: key.precision,
                },
                spec,
            );
        }
        self.key = Some(key);
    }

    /// Takes the replies of the newest request; older ones are dropped.
    fn receive(&mut self, scan: Option<&super::Scan>) {
        let Some(w) = &self.worker else {
            return;
        };
        while let Some(r) = w.try_recv() {
            match r {
                GridReply::Samples {
                    generation,
                    samples,
                    normalized,
                } if generation == self.generation => {
                    self.samples = samples;
                    self.normalized = normalized;
                }
                GridReply::Tile {
                    generation,
                    k,
                    data,
                    ms,
                    note,
                } if generation == self.generation && k < self.tiles.len() => {
                    let Some(scan) = scan else { continue };
                    let img = &scan.loaded.image;
                    let view = &scan.views[self.view.min(scan.views.len() - 1)];
                    let display = slices::extract_from_plane(
                        &data,
                        &img.shape,
                        img.channels,
                        &img.spacing_mm,
                        view,
                    );
                    self.note = note;
                    let elapsed = self.started.map(|t| t.elapsed().as_secs_f64() * 1e3);
                    if self.first_ms.is_none() {
                        self.first_ms = elapsed;
                    }
                    let seed = self
                        .samples
                        .get(k)
                        .map_or(self.first_seed + k as u64, |s| s.seed);
                    self.tiles[k] = Some(Tile {
                        seed,
                        data,
                        display,
                        ms,
                        texture: None,
                    });
                    if self.tiles.iter().all(Option::is_some) {
                        self.last_ms = elapsed;
                    }
                }
                GridReply::Overlay {
                    generation,
                    k,
                    overlay,
                } if generation == self.generation && k < self.overlays.len() => {
                    self.overlays[k] = Some(overlay);
                }
                GridReply::Displacement {
                    generation,
                    k,
                    stats,
                } if generation == self.generation && k < self.displacement.len() => {
                    self.displacement[k] = Some(stats);
                }
                GridReply::Failed {
                    generation,
                    message,
                } if generation == self.generation => self.error = Some(message),
                _ => {}
            }
        }
    }
}

/// Puts draw `k`'s plan into the main views, as "Sample from preset" does.
pub fn pick(state: &mut State, rt: &mut Runtime, k: usize) {
    let nd = rt.scan.as_ref().map_or(3, |s| s.loaded.image.ndim());
    let from = super::code::preset_in_use(state, rt);
    let Some(s) = rt.windows.grid.samples.get(k) else {
        return;
    };
    state.params = Params::from_plan(&s.plan, nd, &state.params);
    // The preset's units, as the tiles show them.
    state.params.normalize = super::export::chosen_preset(state, nd, true)
        .ok()
        .and_then(|p| p.normalize);
    rt.sampled = Some((state.params.clone(), s.done.clone(), from));
}

/// A grayscale (or RGB) image of a display slice through the window `[lo, hi]`.
fn tile_image(s: &DisplaySlice, lo: f32, hi: f32) -> egui::ColorImage {
    let scale = 255.0 / (hi - lo).max(1e-12);
    let byte = |v: f32| ((v - lo) * scale).clamp(0.0, 255.0) as u8;
    let n = s.width * s.height;
    if s.channels >= 3 {
        let rgb: Vec<u8> = (0..n)
            .flat_map(|i| {
                [
                    byte(s.data[i]),
                    byte(s.data[n + i]),
                    byte(s.data[2 * n + i]),
                ]
            })
            .collect();
        egui::ColorImage::from_rgb([s.width, s.height], &rgb)
    } else {
        let gray: Vec<u8> = s.data[..n].iter().map(|&v| byte(v)).collect();
        egui::ColorImage::from_gray([s.width, s.height], &gray)
    }
}

/// Draws a tile's overlays over its image at `rect`: the Jacobian colours (uploaded once) and
/// the deformation-grid lines, each while its Display toggle is on.
fn paint_tile_overlay(
    ui: &egui::Ui,
    display: &super::state::Display,
    k: usize,
    o: &mut TileOverlay,
    rect: egui::Rect,
) {
    let painter = ui.painter_at(rect);
    if display.jacobian {
        if o.texture.is_none()
            && let Some(image) = o.view.jacobian.as_mut().and_then(|j| j.image.take())
        {
            o.texture = Some(ui.ctx().load_texture(
                format!("grid-jacobian-{k}"),
                image,
                egui::TextureOptions::NEAREST,
            ));
        }
        if let Some(tex) = &o.texture {
            painter.image(
                tex.id(),
                rect,
                egui::Rect::from_min_max(egui::Pos2::ZERO, egui::pos2(1.0, 1.0)),
                egui::Color32::WHITE,
            );
        }
    }
    if display.deformation_grid {
        let (w, h) = (o.view.width.max(1) as f32, o.view.height.max(1) as f32);
        let stroke = egui::Stroke::new(1.0, overlay::GRID_COLOUR);
        for line in &o.view.grid {
            let pts: Vec<egui::Pos2> = line
                .iter()
                .map(|t| {
                    egui::pos2(
                        rect.min.x + t[0] / w * rect.width(),
                        rect.min.y + t[1] / h * rect.height(),
                    )
                })
                .collect();
            painter.add(egui::Shape::line(pts, stroke));
        }
    }
}

/// The done list of a draw, one transform a line, with units.
fn done_text(s: &Sample, spacing_mm: &[f64]) -> String {
    if s.done.is_empty() {
        return format!("seed {}: identity (nothing fired)", s.seed);
    }
    let mut t = format!("seed {}", s.seed);
    for d in &s.done {
        t.push_str(&format!(
            "\n{}: {}",
            d.transform,
            super::format::done_line(d, spacing_mm)
        ));
    }
    t
}

/// Uploads tile `k` through the window `[lo, hi]` when it has no texture yet or its texture
/// was made for another window.
fn tile_texture(ui: &egui::Ui, t: &mut Tile, k: usize, (lo, hi): (f32, f32)) {
    let stale_tex = t.texture.as_ref().is_none_or(|(_, w)| *w != (lo, hi));
    if stale_tex {
        let img = tile_image(&t.display, lo, hi);
        match &mut t.texture {
            Some((h, w)) => {
                h.set(img, egui::TextureOptions::LINEAR);
                *w = (lo, hi);
            }
            None => {
                let h = ui.ctx().load_texture(
                    format!("grid-tile-{k}"),
                    img,
                    egui::TextureOptions::LINEAR,
                );
                t.texture = Some((h, (lo, hi)));
            }
        }
    }
}

/// The "What training will see" window (while `rt.windows.grid.open`).
/// A sentence on its length: egui lays the window out as it runs, so the function is the window
/// from top to bottom; the parts with logic of their own are functions beside it.
pub fn grid_window(ui: &mut egui::Ui, state: &mut State, rt: &mut Runtime) {
    let have_cuda = rt
        .gpu
        .devices
        .as_ref()
        .is_some_and(|d| !d.devices.is_empty());
    let ctx = ui.ctx().clone();
    rt.windows
        .grid
        .sync(state, rt.scan.as_ref(), have_cuda, &ctx);
    let mut open = rt.windows.grid.open;
    let mut picked = None;
    let (lo, hi) = {
        let (alo, ahi) = rt
            .scan
            .as_ref()
            .map_or((0.0, 1.0), |s| s.loaded.auto_window);
        let level = state.display.level.unwrap_or(0.5 * (alo + ahi));
        let width = state.display.width.unwrap_or((ahi - alo).max(1e-6));
        // Tiles in a normalisation's units: the window mapped through it.
        let (a, b) = rt
            .windows
            .grid
            .normalized
            .as_ref()
            .and_then(|m| m.first().copied())
            .unwrap_or((1.0, 0.0));
        let ends = [level - 0.5 * width, level + 0.5 * width].map(|v| (a * v as f64 + b) as f32);
        (ends[0].min(ends[1]), ends[0].max(ends[1]))
    };
    let preset_name = match &state.draft {
        Some(d) => d.name.clone(),
        None if state.preset.is_empty() => "nnunet-v2".into(),
        None => std::path::Path::new(&state.preset).file_name().map_or_else(
            || state.preset.clone(),
            |n| n.to_string_lossy().into_owned(),
        ),
    };
    egui::Window::new("What training will see")
        .open(&mut open)
        .default_pos([360.0, 80.0])
        .resizable(false)
        .min_width(GRID_WIDTH)
        .show(&ctx, |ui| {
            ui.set_max_width(GRID_WIDTH);
            let g = &mut rt.windows.grid;
            ui.weak(format!(
                "draws of preset {preset_name}; draw k uses seed first seed + k, as augscope batch"
            ));
            ui.horizontal(|ui| {
                ui.label("draws");
                for n in SIZES {
                    let side = (n as f64).sqrt().round() as usize;
                    ui.selectable_value(&mut g.n, n, format!("{side}×{side}"))
                        .on_hover_text(format!("{n} draws"));
                }
                let l = ui.label("first seed");
                ui.add(egui::DragValue::new(&mut g.first_seed))
                    .labelled_by(l.id);
                if ui
                    .button("Reseed")
                    .on_hover_text(format!("the next {} draws", g.n))
                    .clicked()
                {
                    g.reseed();
                }
            });
            if let Some(scan) = &rt.scan
                && scan.views.len() > 1
            {
                ui.horizontal(|ui| {
                    ui.label("plane");
                    for (i, v) in scan.views.iter().enumerate() {
                        ui.selectable_value(&mut g.view, i, v.name.as_str());
                    }
                    if let Some((axis, index)) = g.plane {
                        ui.weak(format!("slice {index} of axis {axis} (the views' cursor)"));
                    }
                });
            }
            if rt.scan.is_none() {
                ui.label("open a scan first");
                return;
            }
            if let Some(e) = &g.error {
                ui.colored_label(ui.visuals().error_fg_color, e);
            }
            if let Some(n) = &g.note {
                ui.weak(n);
            }
            let spacing = rt
                .scan
                .as_ref()
                .map_or(vec![], |s| s.loaded.image.spacing_mm.clone());
            let cols = (g.n as f64).sqrt().ceil() as usize;
            let rows = g.n.div_ceil(cols);
            // The window never grows past the bottom of the screen, where egui would push it up
            // as tiles and histograms arrive and move its buttons from under the pointer: the
            // tiles are sized to leave room below them for the histograms.
            let room = ctx.content_rect().bottom() - ui.cursor().top() - HISTOGRAMS_HEIGHT;
            let side = ((GRID_WIDTH / cols as f32).floor() - 8.0)
                .min((room / rows as f32).floor() - TILE_CAPTION - 6.0)
                .max(48.0);
            egui::Grid::new("training_grid")
                .num_columns(cols)
                .spacing([6.0, 6.0])
                .show(ui, |ui| {
                    for k in 0..g.n {
                        let seed = g.first_seed.wrapping_add(k as u64);
                        let layout = egui::Layout::top_down(egui::Align::Center);
                        let cell = egui::vec2(side, side + TILE_CAPTION);
                        ui.allocate_ui_with_layout(cell, layout, |ui| {
                            // Every cell keeps its size while its tile computes.
                            ui.set_min_size(cell);
                            match g.tiles.get_mut(k).and_then(Option::as_mut) {
                                Some(t) => {
                                    tile_texture(ui, t, k, (lo, hi));
                                    let d = &t.display;
                                    let wmm = d.width as f32 * d.pixel_mm[0];
                                    let hmm = d.height as f32 * d.pixel_mm[1];
                                    let f = side / wmm.max(hmm).max(1e-6);
                                    let size = egui::vec2(wmm * f, hmm * f);
                                    if let Some((h, _)) = &t.texture {
                                        let r = ui.add(
                                            egui::Image::new((h.id(), size))
                                                .sense(egui::Sense::click())
                                                .alt_text(format!("draw {k}, seed {}", t.seed)),
                                        );
                                        let ov = g.overlays.get_mut(k).and_then(Option::as_mut);
                                        let folded = ov
                                            .as_ref()
                                            .and_then(|o| o.view.jacobian.as_ref())
                                            .filter(|_| state.display.jacobian)
                                            .map(|j| {
                                                format!(
                                                    "\nplane folded {}",
                                                    overlay::fraction_text(j.folded, j.voxels)
                                                )
                                            })
                                            .unwrap_or_default();
                                        if let Some(o) = ov {
                                            paint_tile_overlay(ui, &state.display, k, o, r.rect);
                                        }
                                        let tip = g
                                            .samples
                                            .get(k)
                                            .map(|s| done_text(s, &spacing) + &folded)
                                            .unwrap_or_default();
                                        let r = r.on_hover_text(format!(
                                            "{tip}\n\nclick: these parameters into the views"
                                        ));
                                        if r.clicked() {
                                            picked = Some(k);
                                        }
                                    }
                                }
                                None => {
                                    let (rect, _) = ui.allocate_exact_size(
                                        egui::vec2(side, side * 0.8),
                                        egui::Sense::hover(),
                                    );
                                    ui.painter().rect_filled(
                                        rect,
                                        2.0,
                                        ui.visuals().extreme_bg_color,
                                    );
                                    if g.error.is_none() {
                                        ui.put(rect, egui::Spinner::new());
                                    }
                                }
                            }
                            ui.label(egui::RichText::new(format!("seed {seed}")).small());
                        });
                        if (k + 1) % cols == 0 {
                            ui.end_row();
                        }
                    }
                });
            if !g.samples.is_empty() {
                histograms(ui, g);
            }
            if !rt.capture.hide_timings
                && let Some(first) = g.first_ms
            {
                let last = g
                    .last_ms
                    .map_or_else(|| "…".to_string(), |l| format!("{l:.0} ms"));
                ui.weak(format!("first tile {first:.0} ms, all tiles {last}"));
            }
        });
    if let Some(k) = picked {
        pick(state, rt, k);
    }
    if !open {
        rt.windows.grid.close();
    }
}
