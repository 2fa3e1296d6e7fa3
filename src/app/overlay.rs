//! Overlays that show the deformation itself on the augmented views: the scan's voxel grid
//! carried by the transform, and the Jacobian determinant of the sampling map with the share of
//! folded voxels, on the plane on screen and over the whole volume.
//!
//! - **Deformation grid.** On the augmented plane, the lines where the input coordinate along the
//!   axis that runs across the view, or the one that runs down it, is a multiple of
//!   [`GRID_STEP`] voxels: the lines of a regular grid painted on the original scan, drawn where
//!   the transform puts them, so they bend with the anatomy under them (and cross where the map
//!   folds). Contours of the plane's sampling coordinates by marching squares, joined into
//!   polylines.
//! - **Jacobian.** `det(∂x/∂p)` of the plane by [`jacobian::determinant_plane`] from the
//!   coordinates of the plane and of its two neighbours, times [`jacobian::orientation`] (a flip
//!   mirrors, it does not fold: the rule of [`jacobian::stats_for_map`]), as colours: blue below 1,
//!   red above, yellow where `det <= 0` (folded). Once the worker's whole volume is there, the
//!   folded share of the whole volume too, swept plane by plane along axis 0 with three
//!   coordinate planes in memory (never the volume's coordinates).
//!
//! The coordinates are those of the CPU engine (`augscope apply --backend cpu --save-coords`,
//! bit for bit once the volume's unit field is in use): the plan's [`CoordMap`] and the unit
//! elastic field, on planes. While a slider moves, the field planes come from
//! [`ElasticField::compute_planes_axes`] (a slab of noise, equal to the volume's field to f32
//! rounding); when the worker has finished the volume, from the volume's field, computed once
//! per (seed, sigma, shape) and kept while an overlay is on.
//!
//! Everything runs on a thread of its own: the newest request replaces one that has not
//! started, and a running one stops between views and between planes of the volume sweep.

use std::collections::HashMap;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Instant;

use eframe::egui::{self, Color32, Pos2, Rect, Stroke, Vec2};

use super::slices::{self, ViewGeom};
use super::state::State;
use super::{Nav, Runtime, Scan};
use crate::augment::{CoordMap, Plan};
use crate::engine::cpu::coordinates;
use crate::engine::field::ElasticField;
use crate::engine::jacobian::{self, JacobianStats};

/// Spacing of the deformation grid, in input voxels.
pub const GRID_STEP: f32 = 8.0;
/// Height of the title strip above each view (as `views::view_ui` draws it).
const HEADER_H: f32 = 18.0;
/// At most this many grid levels are contoured through one cell (a folded cell may span many).
const MAX_LEVELS_PER_CELL: i64 = 16;
pub(crate) const GRID_COLOUR: Color32 = Color32::from_rgba_premultiplied(60, 230, 230, 200);
/// Colour of folded voxels (`det <= 0`).
pub const FOLDED: Color32 = Color32::from_rgba_premultiplied(240, 220, 0, 235);
const SHRINK: [u8; 3] = [40, 110, 255];
const GROW: [u8; 3] = [255, 50, 40];

/// One overlay request: what the views show and which overlays are on.
#[derive(Clone, Debug)]
pub struct Request {
    pub generation: u64,
    pub plan: Plan,
    /// The scan's shape and spacing.
    pub shape: Vec<usize>,
    pub spacing_mm: Vec<f64>,
    pub views: Vec<ViewGeom>,
    pub cursor: Vec<usize>,
    pub grid: bool,
    pub jacobian: bool,
    /// The worker's whole volume is there: use the volume's unit field (exact) and count the
    /// folded voxels of the whole volume.
    pub volume: bool,
}

/// The Jacobian of one plane, in display order.
pub struct JacobianPlane {
    /// `rows * cols` oriented determinants, display order (row-major, `width` per row).
    pub det: Vec<f32>,
    /// The colour image, until the UI uploads it.
    pub image: Option<egui::ColorImage>,
    pub folded: usize,
    pub voxels: usize,
    pub min: f64,
    pub max: f64,
}

/// The overlays of one view.
pub struct ViewOverlay {
    pub width: usize,
    pub height: usize,
    pub pixel_mm: [f32; 2],
    /// The array axis normal to the plane and the plane's index (`None` for a 2D image).
    pub plane: Option<(usize, usize)>,
    pub jacobian: Option<JacobianPlane>,
    /// Polylines in display texel coordinates (x across, y down; texel centres at +0.5).
    pub grid: Vec<Vec<[f32; 2]>>,
}

/// The overlays of the planes through one cursor.
pub struct PlaneOverlays {
    pub generation: u64,
    pub cursor: Vec<usize>,
    pub grid: bool,
    pub jacobian: bool,
    /// The field planes came from the volume's unit field (the exact `--save-coords` values).
    pub exact: bool,
    pub views: Vec<ViewOverlay>,
    pub elapsed_ms: f64,
}

/// The folded share of the whole volume.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct VolumeFolds {
    pub generation: u64,
    pub folded: usize,
    pub voxels: usize,
    pub min: f64,
    pub max: f64,
    pub elapsed_ms: f64,
}

pub enum Reply {
    Planes(PlaneOverlays),
    Volume(VolumeFolds),
    Failed { generation: u64, message: String },
}

/// What identifies a sent request: (generation, cursor, grid, jacobian, volume).
type SentKey = (u64, Vec<usize>, bool, bool, bool);

/// The overlay state of the running app (not persisted; the toggles are in `Display`).
#[derive(Default)]
pub struct OverlayRuntime {
    thread: Option<OverlayThread>,
    sent: Option<SentKey>,
    pub planes: Option<PlaneOverlays>,
    pub volume: Option<VolumeFolds>,
    /// The uploaded Jacobian textures, per view.
    pub textures: Vec<Option<egui::TextureHandle>>,
    pub error: Option<String>,
}

/// Whether the overlays on screen are those the toggles ask for, of the parameters and planes
/// on screen: with the volume's exact field and its folded count once the worker's whole volume
/// is there (Jacobian on). True when both overlays are off or no scan is open.
pub fn is_current(state: &State, rt: &Runtime) -> bool {
    let d = &state.display;
    if !(d.deformation_grid || d.jacobian) {
        return true;
    }
    let Some(scan) = &rt.scan else {
        return true;
    };
    let Some(p) = &rt.overlay.planes else {
        return false;
    };
    let g = rt.generation;
    let volume = rt.full.as_ref().is_some_and(|f| f.generation == g);
    let planes = p.generation == g
        && p.cursor == scan.cursor
        && p.grid == d.deformation_grid
        && p.jacobian == d.jacobian;
    let whole =
        !volume || !d.jacobian || (p.exact && rt.overlay.volume.is_some_and(|v| v.generation == g));
    planes && whole
}

impl OverlayRuntime {
    /// Whether any overlay result or texture is held.
    pub fn holds_anything(&self) -> bool {
        self.planes.is_some() || self.volume.is_some() || self.textures.iter().any(Option::is_some)
    }

    fn clear(&mut self) {
        self.planes = None;
        self.volume = None;
        self.textures.clear();
        self.error = None;
    }
}

/// Once per frame, before the views: takes the thread's replies (uploading each Jacobian image
/// once), and posts a request when what the views show or the toggles changed.
pub fn update(ctx: &egui::Context, state: &State, rt: &mut Runtime) {
    let d = &state.display;
    let on = d.deformation_grid || d.jacobian;
    let ov = &mut rt.overlay;
    if let Some(t) = &ov.thread {
        while let Ok(r) = t.replies.try_recv() {
            match r {
                Reply::Planes(mut p) => {
                    if ov
                        .planes
                        .as_ref()
                        .is_some_and(|o| o.generation > p.generation)
                    {
                        continue;
                    }
                    ov.textures = p
                        .views
                        .iter_mut()
                        .enumerate()
                        .map(|(vi, v)| {
                            let image = v.jacobian.as_mut()?.image.take()?;
                            Some(ctx.load_texture(
                                format!("jacobian-{vi}"),
                                image,
                                egui::TextureOptions::NEAREST,
                            ))
                        })
                        .collect();
                    ov.planes = Some(p);
                    ov.error = None;
                }
                Reply::Volume(v) => ov.volume = Some(v),
                Reply::Failed {
                    generation,
                    message,
                } => {
                    if generation == rt.generation {
                        ov.error = Some(message);
                    }
                }
            }
        }
    }
    if !on {
        if ov.holds_anything() || ov.sent.is_some() {
            ov.clear();
            ov.sent = None;
            // Lets the thread drop the fields it keeps.
            if let Some(t) = &ov.thread {
                t.post(None);
            }
        }
        return;
    }
    let Some(scan) = &rt.scan else {
        return;
    };
    let volume = rt
        .full
        .as_ref()
        .is_some_and(|f| f.generation == rt.generation);
    let key: SentKey = (
        rt.generation,
        scan.cursor.clone(),
        d.deformation_grid,
        d.jacobian,
        volume,
    );
    if ov.sent.as_ref() == Some(&key) {
        return;
    }
    if ov.thread.is_none() {
        let c = ctx.clone();
        match OverlayThread::spawn(move || c.request_repaint()) {
            Ok(t) => ov.thread = Some(t),
            Err(e) => {
                ov.error = Some(format!("cannot start the overlay thread: {e}"));
                return;
            }
        }
    }
    let img = &scan.loaded.image;
    let params = rt.applied.as_ref().unwrap_or(&state.params);
    let req = Request {
        generation: rt.generation,
        plan: params.to_plan(img.ndim(), &img.spacing_mm),
        shape: img.shape.clone(),
        spacing_mm: img.spacing_mm.clone(),
        views: scan.views.clone(),
        cursor: scan.cursor.clone(),
        grid: d.deformation_grid,
        jacobian: d.jacobian,
        volume,
    };
    if let Some(t) = &ov.thread {
        t.post(Some(req));
        ov.sent = Some(key);
    }
}

/// The folded count as the views state it: `N/M (P %)`.
pub fn fraction_text(folded: usize, voxels: usize) -> String {
    let pct = if voxels == 0 {
        0.0
    } else {
        100.0 * folded as f64 / voxels as f64
    };
    format!("{folded}/{voxels} ({pct:.2} %)")
}

/// Where [`paint`] draws: the cell of view `view` (title strip included), its zoom and pan, the
/// current generation and the scan on screen.
pub struct At<'a> {
    pub rect: Rect,
    pub nav: Nav,
    pub view: usize,
    pub generation: u64,
    pub scan: &'a Scan,
}

/// Draws the overlays of view `at.view` over its augmented image.
pub fn paint(ui: &mut egui::Ui, state: &State, ov: &OverlayRuntime, at: At<'_>) {
    let d = &state.display;
    if !(d.deformation_grid || d.jacobian) {
        return;
    }
    let At {
        rect,
        nav,
        view,
        generation,
        scan,
    } = at;
    let body = Rect::from_min_max(Pos2::new(rect.min.x, rect.min.y + HEADER_H), rect.max);
    let painter = ui.painter_at(body);
    let small = egui::FontId::proportional(11.0);
    let model = state.params.preview_as;
    if !model.is_own() {
        // These overlays are computed from augscope's own map; the library's differs.
        painter.text(
            body.left_bottom() + Vec2::new(4.0, -4.0),
            egui::Align2::LEFT_BOTTOM,
            format!(
                "grid and Jacobian: augscope's model only (previewing as {})",
                model.label()
            ),
            small,
            Color32::from_rgb(255, 200, 120),
        );
        return;
    }
    if let Some(e) = &ov.error {
        painter.text(
            body.left_bottom() + Vec2::new(4.0, -4.0),
            egui::Align2::LEFT_BOTTOM,
            format!("overlay: {e}"),
            small,
            Color32::from_rgb(255, 120, 120),
        );
        return;
    }
    let Some(p) = &ov.planes else {
        return;
    };
    let Some(v) = p.views.get(view) else {
        return;
    };
    // The overlay must fit the plane on screen (a new scan may have arrived).
    let fits = scan.views.get(view).is_some_and(|g| {
        let sh = &scan.loaded.image.shape;
        sh.get(g.across) == Some(&v.width) && sh.get(g.down) == Some(&v.height)
    });
    if !fits {
        return;
    }
    let size_mm = Vec2::new(
        v.width as f32 * v.pixel_mm[0],
        v.height as f32 * v.pixel_mm[1],
    );
    let ir = super::views::image_rect(body, size_mm, nav);
    let to_screen = |t: [f32; 2]| {
        Pos2::new(
            ir.min.x + t[0] / v.width as f32 * ir.width(),
            ir.min.y + t[1] / v.height as f32 * ir.height(),
        )
    };
    if d.jacobian
        && let Some(Some(tex)) = ov.textures.get(view)
    {
        painter.image(
            tex.id(),
            ir,
            Rect::from_min_max(Pos2::ZERO, Pos2::new(1.0, 1.0)),
            Color32::WHITE,
        );
    }
    if d.deformation_grid {
        let stroke = Stroke::new(1.0, GRID_COLOUR);
        for line in &v.grid {
            let pts: Vec<Pos2> = line.iter().map(|&t| to_screen(t)).collect();
            painter.add(egui::Shape::line(pts, stroke));
        }
    }
    // Readouts, top right (labels: a screen reader and the tests read them).
    let stale = p.generation != generation || scan.cursor != p.cursor;
    let mut lines: Vec<String> = vec![];
    if d.jacobian
        && let Some(j) = &v.jacobian
    {
        let name = scan
            .views
            .get(view)
            .map_or("plane".to_string(), |g| g.name.clone());
        lines.push(format!(
            "{name} plane folded {}",
            fraction_text(j.folded, j.voxels)
        ));
        lines.push(match ov.volume {
            Some(vf) if vf.generation == p.generation && v.plane.is_some() => {
                format!("volume folded {}", fraction_text(vf.folded, vf.voxels))
            }
            _ if v.plane.is_none() => String::new(),
            _ => "volume folded: computing…".to_string(),
        });
        lines.retain(|l| !l.is_empty());
        lines.push(format!("det {:.3} … {:.3}", j.min, j.max));
    }
    if d.deformation_grid && !p.grid {
        lines.push("grid: computing…".into());
    }
    if stale {
        lines.push("updating…".into());
    }
    if !lines.is_empty() {
        let corner = Rect::from_min_max(
            Pos2::new(body.center().x, body.min.y + 20.0),
            Pos2::new(body.max.x - 4.0, body.min.y + 90.0),
        );
        let mut child = ui.new_child(
            egui::UiBuilder::new()
                .max_rect(corner)
                .layout(egui::Layout::top_down(egui::Align::Max)),
        );
        child.spacing_mut().item_spacing.y = 0.0;
        for l in lines {
            child.add(
                egui::Label::new(
                    egui::RichText::new(l)
                        .size(11.0)
                        .color(Color32::WHITE)
                        .background_color(Color32::from_black_alpha(150)),
                )
                .selectable(false)
                .wrap_mode(egui::TextWrapMode::Extend),
            );
        }
    }
    // Legend, bottom left.
    let mut y = body.max.y - 30.0;
    if d.jacobian {
        let x0 = body.min.x + 6.0;
        let (w, h) = (90.0, 8.0);
        let n = 30;
        for i in 0..n {
            let t = -1.0 + 2.0 * (i as f32 + 0.5) / n as f32;
            let r = Rect::from_min_size(
                Pos2::new(x0 + w * i as f32 / n as f32, y),
                Vec2::new(w / n as f32 + 0.5, h),
            );
            painter.rect_filled(r, 0.0, ramp(t));
        }
        painter.rect_stroke(
            Rect::from_min_size(Pos2::new(x0, y), Vec2::new(w, h)),
            0.0,
            Stroke::new(1.0, Color32::from_gray(200)),
            egui::StrokeKind::Outside,
        );
        let fold = Rect::from_min_size(Pos2::new(x0 + w + 8.0, y), Vec2::new(h, h));
        painter.rect_filled(fold, 0.0, FOLDED);
        let below = y + h + 1.0;
        for (t, s, a) in [
            (0.0, "≤0.5", egui::Align2::LEFT_TOP),
            (0.5, "det 1", egui::Align2::CENTER_TOP),
            (1.0, "≥2", egui::Align2::RIGHT_TOP),
        ] {
            painter.text(
                Pos2::new(x0 + w * t, below),
                a,
                s,
                small.clone(),
                Color32::WHITE,
            );
        }
        painter.text(
            Pos2::new(fold.max.x + 3.0, y - 2.0),
            egui::Align2::LEFT_TOP,
            "folded (det ≤ 0)",
            small.clone(),
            Color32::WHITE,
        );
        y -= 14.0;
    }
    if d.deformation_grid {
        painter.text(
            Pos2::new(body.min.x + 6.0, y),
            egui::Align2::LEFT_TOP,
            format!("grid: scan voxels every {GRID_STEP}, as moved"),
            small,
            GRID_COLOUR,
        );
    }
}

/// The colour of `t = log2(det)` clamped to [-1, 1]: transparent at det 1, blue towards 0.5,
/// red towards 2.
/// Colour of TorchIO's control grid: the lattice where it rests, and where each node samples.
const CONTROL_REST: Color32 = Color32::from_rgba_premultiplied(120, 120, 120, 120);
const CONTROL_MOVED: Color32 = Color32::from_rgb(90, 220, 255);

/// Draws TorchIO's coarse control grid over augmented view `at.view`: the plane of control
/// points nearest the slice, the lattice at rest (grey), each node where its B-spline
/// displacement takes it (cyan dots joined as a lattice; locked nodes hollow). Output voxel `p`
/// samples the input at `p + displacement(p)`.
pub fn paint_control_grid(
    ui: &mut egui::Ui,
    grid: &crate::export::preview::ControlGrid,
    flip: &[bool; 3],
    at: At<'_>,
) {
    let At {
        rect,
        nav,
        view,
        scan,
        ..
    } = at;
    let Some(g) = scan.views.get(view) else {
        return;
    };
    let shape = &scan.loaded.image.shape;
    let sp = &scan.loaded.image.spacing_mm;
    let nd = shape.len();
    // Array axis a of the scan is grid axis a + off (a 2D image is the grid's [1, y, x]).
    let off = 3 - nd;
    let body = Rect::from_min_max(Pos2::new(rect.min.x, rect.min.y + HEADER_H), rect.max);
    let painter = ui.painter_at(body);
    let (w, h) = (shape[g.across], shape[g.down]);
    let size_mm = Vec2::new(w as f32 * sp[g.across] as f32, h as f32 * sp[g.down] as f32);
    let ir = super::views::image_rect(body, size_mm, nav);
    // Continuous q index (before the flip) -> screen.
    let screen = |axis: usize, x: f64, n: usize, flip_screen: bool| -> f32 {
        let xp = if flip[axis] { n as f64 - 1.0 - x } else { x };
        let c = if flip_screen { n as f64 - 1.0 - xp } else { xp };
        (c + 0.5) as f32
    };
    let to_screen = |xa: f64, xd: f64| {
        let tx = screen(g.across, xa, w, g.across_flip);
        let ty = screen(g.down, xd, h, g.down_flip);
        Pos2::new(
            ir.min.x + tx / w as f32 * ir.width(),
            ir.min.y + ty / h as f32 * ir.height(),
        )
    };
    let ga = g.across + off;
    let gd = g.down + off;
    // The control plane nearest the slice along the normal.
    let mut k = [0usize; 3];
    if let Some(n) = g.normal {
        let gn = n + off;
        let i = scan.cursor.get(n).copied().unwrap_or(0);
        let iq = if flip[n] { shape[n] - 1 - i } else { i } as f64;
        let kn = ((iq - grid.origin[gn]) / grid.spacing[gn]).round();
        k[gn] = kn.clamp(0.0, grid.shape[gn] as f64 - 1.0) as usize;
    } else {
        k[0] = grid.shape[0] / 2;
    }
    let node = |ka: usize, kd: usize| {
        let mut kk = k;
        kk[ga] = ka;
        kk[gd] = kd;
        let idx = (kk[0] * grid.shape[1] + kk[1]) * grid.shape[2] + kk[2];
        let rest = (
            grid.origin[ga] + ka as f64 * grid.spacing[ga],
            grid.origin[gd] + kd as f64 * grid.spacing[gd],
        );
        let d = grid.displacement[idx];
        (rest, (rest.0 + d[ga], rest.1 + d[gd]), d == [0.0; 3])
    };
    let (na, nd_) = (grid.shape[ga], grid.shape[gd]);
    let rest_stroke = Stroke::new(1.0, CONTROL_REST);
    let moved_stroke = Stroke::new(1.0, CONTROL_MOVED);
    for ka in 0..na {
        for kd in 0..nd_ {
            let (r0, m0, _) = node(ka, kd);
            for (ka2, kd2) in [(ka + 1, kd), (ka, kd + 1)] {
                if ka2 < na && kd2 < nd_ {
                    let (r1, m1, _) = node(ka2, kd2);
                    painter
                        .line_segment([to_screen(r0.0, r0.1), to_screen(r1.0, r1.1)], rest_stroke);
                    painter
                        .line_segment([to_screen(m0.0, m0.1), to_screen(m1.0, m1.1)], moved_stroke);
                }
            }
        }
    }
    for ka in 0..na {
        for kd in 0..nd_ {
            let (_, m, locked) = node(ka, kd);
            let p = to_screen(m.0, m.1);
            if locked {
                painter.circle_stroke(p, 3.0, Stroke::new(1.0, CONTROL_MOVED));
            } else {
                painter.circle_filled(p, 2.5, CONTROL_MOVED);
            }
        }
    }
    let galley = painter.layout_no_wrap(
        format!(
            "TorchIO control grid {}×{}×{}, plane {}",
            grid.shape[0],
            grid.shape[1],
            grid.shape[2],
            g.normal.map_or(k[0], |n| k[n + off])
        ),
        egui::FontId::proportional(11.0),
        CONTROL_MOVED,
    );
    let at = body.left_bottom() + Vec2::new(4.0, -4.0 - galley.size().y);
    painter.rect_filled(
        Rect::from_min_size(at, galley.size()).expand(2.0),
        2.0,
        Color32::from_black_alpha(170),
    );
    painter.galley(at, galley, CONTROL_MOVED);
}

fn ramp(t: f32) -> Color32 {
    let t = t.clamp(-1.0, 1.0);
    let c = if t < 0.0 { SHRINK } else { GROW };
    Color32::from_rgba_unmultiplied(c[0], c[1], c[2], (t.abs() * 150.0) as u8)
}

/// The overlay colour of an oriented determinant.
pub fn det_colour(d: f32) -> Color32 {
    if d <= 0.0 {
        FOLDED
    } else if d.is_finite() {
        ramp(d.log2())
    } else {
        Color32::TRANSPARENT
    }
}

// ---------------------------------------------------------------------------------------------
// The thread.

#[derive(Default)]
struct Slot {
    /// `Some(None)`: drop what is kept; `Some(Some(r))`: compute `r`.
    request: Option<Option<Request>>,
    shutdown: bool,
}

struct Shared {
    slot: Mutex<Slot>,
    wake: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Slot> {
        self.slot.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether a newer request (or a shutdown) waits.
    fn superseded(&self) -> bool {
        let s = self.lock();
        s.shutdown || s.request.is_some()
    }
}

/// The UI's handle on the overlay thread.
struct OverlayThread {
    shared: Arc<Shared>,
    replies: Receiver<Reply>,
    thread: Option<JoinHandle<()>>,
}

impl OverlayThread {
    fn spawn(repaint: impl Fn() + Send + 'static) -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            slot: Mutex::new(Slot::default()),
            wake: Condvar::new(),
        });
        let (tx, replies) = channel();
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name("augscope-overlay".into())
            .spawn(move || run(s, tx, repaint))?;
        Ok(OverlayThread {
            shared,
            replies,
            thread: Some(thread),
        })
    }

    fn post(&self, req: Option<Request>) {
        self.shared.lock().request = Some(req);
        self.shared.wake.notify_one();
    }
}

impl Drop for OverlayThread {
    fn drop(&mut self) {
        self.shared.lock().shutdown = true;
        self.shared.wake.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn run(shared: Arc<Shared>, tx: Sender<Reply>, repaint: impl Fn()) {
    let mut engine = OverlayEngine::default();
    loop {
        let req = {
            let mut s = shared.lock();
            while !s.shutdown && s.request.is_none() {
                s = shared.wake.wait(s).unwrap_or_else(|p| p.into_inner());
            }
            if s.shutdown {
                return;
            }
            s.request.take().flatten()
        };
        let Some(req) = req else {
            engine = OverlayEngine::default();
            continue;
        };
        let stop = || shared.superseded();
        let send = |r: Reply| {
            let _ = tx.send(r);
            repaint();
        };
        // The volume's field takes seconds on a large scan: the planes from field planes first.
        if req.jacobian && req.volume && !engine.has_volume_field(&req) {
            let quick = Request {
                volume: false,
                ..req.clone()
            };
            match engine.planes(&quick, &stop) {
                Ok(Some(p)) => send(Reply::Planes(p)),
                Ok(None) => continue,
                Err(_) => {}
            }
        }
        match engine.planes(&req, &stop) {
            Ok(Some(p)) => send(Reply::Planes(p)),
            Ok(None) => continue,
            Err(message) => {
                send(Reply::Failed {
                    generation: req.generation,
                    message,
                });
                continue;
            }
        }
        if req.jacobian && req.volume {
            match engine.volume(&req, &stop) {
                Ok(Some(v)) => send(Reply::Volume(v)),
                Ok(None) => {}
                Err(message) => send(Reply::Failed {
                    generation: req.generation,
                    message,
                }),
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The computation (public for tests and measurements; no egui context needed).

/// What a unit field depends on: (output shape, per-axis sigma bits, seed).
type FieldKey = (Vec<usize>, Vec<u64>, u64);

/// Per-component planes of the unit field.
type FieldPlane = Arc<Vec<Vec<f32>>>;

/// Field planes by (axis, flipped index).
type FieldPlanes = HashMap<(usize, usize), FieldPlane>;

/// The overlay computation with its caches: the volume's unit field (once the worker's volume is
/// there) and field planes of the slice path, both for one (seed, sigma, shape).
#[derive(Default)]
pub struct OverlayEngine {
    volume_field: Option<Arc<ElasticField>>,
    plane_key: Option<FieldKey>,
    planes: HashMap<(usize, usize), FieldPlane>,
}

/// The two axes of a plane normal to `axis`, in increasing order (rows, columns).
fn others(axis: usize) -> (usize, usize) {
    match axis {
        0 => (1, 2),
        1 => (0, 2),
        _ => (0, 1),
    }
}

fn field_key(plan: &Plan, out_shape: &[usize]) -> Option<FieldKey> {
    let e = plan.elastic.filter(|e| e.alpha != 0.0)?;
    let sigma = plan.field_sigma_vox(out_shape.len())?;
    Some((
        out_shape.to_vec(),
        sigma.iter().map(|s| s.to_bits()).collect(),
        e.seed,
    ))
}

/// The input coordinates of the output plane `index` normal to `axis` of a 3D map, `(3, rows,
/// cols)` f32 (component-major, the other two axes in increasing order), from the unit field's
/// plane at the flipped index (`None` without elastic): the values `coordinates` gives there.
pub fn plane_coords(
    map: &CoordMap,
    field: Option<&[Vec<f32>]>,
    axis: usize,
    index: usize,
) -> Vec<f32> {
    let (ra, ca) = others(axis);
    let (rows, cols) = (map.out_shape[ra], map.out_shape[ca]);
    let m = rows * cols;
    let mut out = vec![0f32; 3 * m];
    let qa = map.flip_index(axis, index);
    for r in 0..rows {
        for c in 0..cols {
            let mut q = [0usize; 3];
            q[axis] = qa;
            q[ra] = map.flip_index(ra, r);
            q[ca] = map.flip_index(ca, c);
            let mut d = [0f32; 3];
            if let Some(f) = field {
                let u = q[ra] * cols + q[ca];
                for (a, da) in d.iter_mut().enumerate() {
                    *da = f[a][u];
                }
            }
            let x = map.input_coord(&q, &d);
            let u = r * cols + c;
            for (k, xk) in x.iter().enumerate() {
                out[k * m + u] = *xk as f32;
            }
        }
    }
    out
}

/// Folded count and range of oriented determinants.
fn folds(det: &[f32], map: &CoordMap) -> (usize, JacobianStats) {
    let s = jacobian::stats_for_map(det, map);
    let n = (s.folded_fraction * det.len() as f64).round() as usize;
    (n, s)
}

impl OverlayEngine {
    /// Whether the volume's unit field of `req`'s plan is at hand (or none is needed).
    pub fn has_volume_field(&self, req: &Request) -> bool {
        let Ok(map) = req.plan.compose(&req.shape) else {
            return true;
        };
        let (Some(_), Some(sigma), Some(e)) = (
            field_key(&req.plan, &map.out_shape),
            req.plan.field_sigma_vox(map.ndim),
            req.plan.elastic,
        ) else {
            return true;
        };
        map.ndim != 3
            || self
                .volume_field
                .as_ref()
                .is_some_and(|f| f.matches(&map.out_shape, &sigma, e.seed))
    }

    /// The unit field's planes `(axis, q)` (q: flipped indices), from the volume's field when
    /// `exact` (computing it once per key), else from the slice path's planes.
    fn field_planes(
        &mut self,
        plan: &Plan,
        map: &CoordMap,
        needs: &[(usize, usize)],
        exact: bool,
    ) -> Option<(FieldPlanes, bool)> {
        let key = field_key(plan, &map.out_shape)?;
        let (shape, _, seed) = key.clone();
        let sigma = plan.field_sigma_vox(3)?;
        let have_volume = self
            .volume_field
            .as_ref()
            .is_some_and(|f| f.matches(&shape, &sigma, seed));
        if exact && !have_volume {
            self.volume_field = Some(Arc::new(ElasticField::compute_axes(&shape, &sigma, seed)));
        }
        if let Some(f) = self
            .volume_field
            .as_ref()
            .filter(|f| f.matches(&shape, &sigma, seed))
        {
            return Some((
                needs
                    .iter()
                    .map(|&(a, q)| ((a, q), Arc::new(f.plane(a, q))))
                    .collect(),
                true,
            ));
        }
        if self.plane_key.as_ref() != Some(&key) {
            self.planes.clear();
            self.plane_key = Some(key);
        }
        let missing: Vec<(usize, usize)> = needs
            .iter()
            .copied()
            .filter(|k| !self.planes.contains_key(k))
            .collect();
        // Per axis, the q's still missing; computed three orthogonal planes at a time (the
        // noise their slabs share is made once).
        let mut per_axis: [Vec<usize>; 3] = Default::default();
        for &(a, q) in &missing {
            per_axis[a].push(q);
        }
        let rounds = per_axis.iter().map(Vec::len).max().unwrap_or(0);
        for t in 0..rounds {
            let axes: Vec<usize> = (0..3).filter(|&a| per_axis[a].get(t).is_some()).collect();
            if axes.len() == 1 {
                let a = axes[0];
                let q = per_axis[a][t];
                let p = ElasticField::compute_plane_axes(&shape, &sigma, seed, a, q);
                self.planes.insert((a, q), Arc::new(p));
                continue;
            }
            let q3: [usize; 3] = std::array::from_fn(|a| {
                per_axis[a]
                    .get(t)
                    .copied()
                    .unwrap_or(shape[a].saturating_sub(1) / 2)
            });
            let planes = ElasticField::compute_planes_axes(&shape, &sigma, seed, q3);
            for (a, p) in planes.into_iter().enumerate() {
                if per_axis[a].get(t).is_some() {
                    self.planes.insert((a, q3[a]), Arc::new(p));
                }
            }
        }
        Some((
            needs
                .iter()
                .filter_map(|k| self.planes.get(k).map(|p| (*k, p.clone())))
                .collect(),
            false,
        ))
    }

    /// The overlays of the planes through `req.cursor`; `Ok(None)` when `stop` said a newer
    /// request waits.
    pub fn planes(
        &mut self,
        req: &Request,
        stop: &dyn Fn() -> bool,
    ) -> Result<Option<PlaneOverlays>, String> {
        let t = Instant::now();
        req.plan
            .validate(req.shape.len())
            .map_err(|e| e.to_string())?;
        let map = req.plan.compose(&req.shape).map_err(|e| e.to_string())?;
        let shape = map.out_shape.clone();
        let sign = jacobian::orientation(&map) as f32;
        let mut views = Vec::with_capacity(req.views.len());
        let exact;
        if map.ndim == 2 {
            let field = field_key(&req.plan, &shape)
                .and_then(|_| req.plan.field_sigma_vox(2))
                .zip(req.plan.elastic)
                .map(|(sigma, e)| ElasticField::compute_axes(&shape, &sigma, e.seed));
            let coords = coordinates(&map, field.as_ref());
            let n: usize = shape.iter().product();
            let det = req
                .jacobian
                .then(|| jacobian::determinant(&coords, 2, &shape));
            for g in &req.views {
                views.push(view_overlay(
                    req,
                    g,
                    &shape,
                    None,
                    &coords,
                    n,
                    det.as_deref(),
                    &map,
                    sign,
                ));
            }
            exact = true;
        } else {
            // The field planes of each view and, for the Jacobian, of its neighbours.
            let mut needs = vec![];
            for g in &req.views {
                let Some(axis) = g.normal else { continue };
                let i = req
                    .cursor
                    .get(axis)
                    .copied()
                    .unwrap_or(0)
                    .min(shape[axis] - 1);
                let lo = if req.jacobian { i.saturating_sub(1) } else { i };
                let hi = if req.jacobian {
                    (i + 1).min(shape[axis] - 1)
                } else {
                    i
                };
                for j in lo..=hi {
                    needs.push((axis, map.flip_index(axis, j)));
                }
            }
            needs.sort_unstable();
            needs.dedup();
            let exact_wanted = req.volume && req.jacobian;
            let fields = self.field_planes(&req.plan, &map, &needs, exact_wanted);
            exact = fields.as_ref().is_none_or(|(_, e)| *e);
            let fields = fields.map(|(f, _)| f);
            if stop() {
                return Ok(None);
            }
            let coords_of = |axis: usize, j: usize| {
                let f = fields
                    .as_ref()
                    .and_then(|f| f.get(&(axis, map.flip_index(axis, j))));
                plane_coords(&map, f.map(|p| p.as_slice()), axis, j)
            };
            for g in &req.views {
                if stop() {
                    return Ok(None);
                }
                let Some(axis) = g.normal else {
                    return Err("a 3D view without a normal axis".into());
                };
                let i = req
                    .cursor
                    .get(axis)
                    .copied()
                    .unwrap_or(0)
                    .min(shape[axis] - 1);
                let at = coords_of(axis, i);
                let (ra, ca) = others(axis);
                let m = shape[ra] * shape[ca];
                let det = if req.jacobian {
                    let prev = (i > 0).then(|| coords_of(axis, i - 1));
                    let next = (i + 1 < shape[axis]).then(|| coords_of(axis, i + 1));
                    Some(
                        jacobian::determinant_plane(
                            &shape,
                            axis,
                            i,
                            prev.as_deref(),
                            &at,
                            next.as_deref(),
                        )
                        .map_err(|e| e.to_string())?,
                    )
                } else {
                    None
                };
                views.push(view_overlay(
                    req,
                    g,
                    &shape,
                    Some((axis, i)),
                    &at,
                    m,
                    det.as_deref(),
                    &map,
                    sign,
                ));
            }
        }
        Ok(Some(PlaneOverlays {
            generation: req.generation,
            cursor: req.cursor.clone(),
            grid: req.grid,
            jacobian: req.jacobian,
            exact,
            views,
            elapsed_ms: t.elapsed().as_secs_f64() * 1e3,
        }))
    }

    /// The folded share of the whole output grid, from the volume's unit field, one plane along
    /// axis 0 at a time (the same determinants as `determinant` of the whole grid); `Ok(None)`
    /// when `stop` said a newer request waits.
    pub fn volume(
        &mut self,
        req: &Request,
        stop: &dyn Fn() -> bool,
    ) -> Result<Option<VolumeFolds>, String> {
        let t = Instant::now();
        let map = req.plan.compose(&req.shape).map_err(|e| e.to_string())?;
        let shape = map.out_shape.clone();
        if map.ndim != 3 {
            // 2D: the plane is the whole image.
            let field = field_key(&req.plan, &shape)
                .and_then(|_| req.plan.field_sigma_vox(2))
                .zip(req.plan.elastic)
                .map(|(sigma, e)| ElasticField::compute_axes(&shape, &sigma, e.seed));
            let det = jacobian::determinant(&coordinates(&map, field.as_ref()), 2, &shape);
            let (folded, s) = folds(&det, &map);
            return Ok(Some(VolumeFolds {
                generation: req.generation,
                folded,
                voxels: det.len(),
                min: s.min,
                max: s.max,
                elapsed_ms: t.elapsed().as_secs_f64() * 1e3,
            }));
        }
        let field = match (field_key(&req.plan, &shape), req.plan.field_sigma_vox(3)) {
            (Some((_, _, seed)), Some(sigma)) => {
                let ok = self
                    .volume_field
                    .as_ref()
                    .is_some_and(|f| f.matches(&shape, &sigma, seed));
                if !ok {
                    self.volume_field =
                        Some(Arc::new(ElasticField::compute_axes(&shape, &sigma, seed)));
                }
                self.volume_field.clone()
            }
            _ => None,
        };
        let n0 = shape[0];
        let coords = |z: usize| {
            let f = field.as_ref().map(|f| f.plane(0, map.flip_index(0, z)));
            plane_coords(&map, f.as_deref(), 0, z)
        };
        let (mut folded, mut voxels) = (0usize, 0usize);
        let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
        let mut prev: Option<Vec<f32>> = None;
        let mut at = coords(0);
        let mut next = (n0 > 1).then(|| coords(1));
        for z in 0..n0 {
            if stop() {
                return Ok(None);
            }
            let det =
                jacobian::determinant_plane(&shape, 0, z, prev.as_deref(), &at, next.as_deref())
                    .map_err(|e| e.to_string())?;
            let (f, s) = folds(&det, &map);
            folded += f;
            voxels += det.len();
            if s.min.is_finite() {
                lo = lo.min(s.min);
                hi = hi.max(s.max);
            }
            let Some(n) = next.take() else { break };
            prev = Some(std::mem::replace(&mut at, n));
            next = (z + 2 < n0).then(|| coords(z + 2));
        }
        Ok(Some(VolumeFolds {
            generation: req.generation,
            folded,
            voxels,
            min: if lo <= hi { lo } else { f64::NAN },
            max: if lo <= hi { hi } else { f64::NAN },
            elapsed_ms: t.elapsed().as_secs_f64() * 1e3,
        }))
    }
}

/// The overlays of one view from its plane's coordinates (`(ndim, plane)`, component-major,
/// `m` values per component, array order) and determinants (array order).
#[allow(clippy::too_many_arguments)]
fn view_overlay(
    req: &Request,
    g: &ViewGeom,
    shape: &[usize],
    plane: Option<(usize, usize)>,
    coords: &[f32],
    m: usize,
    det: Option<&[f32]>,
    map: &CoordMap,
    sign: f32,
) -> ViewOverlay {
    let sp = &req.spacing_mm;
    let display = |values: &[f32]| match plane {
        Some(_) => slices::extract_from_plane(values, shape, 1, sp, g),
        None => slices::extract(values, shape, 1, sp, g, 0),
    };
    let geom = display(&coords[..m]);
    let (w, h) = (geom.width, geom.height);
    let jacobian = det.map(|det| {
        let (folded, s) = folds(det, map);
        let oriented: Vec<f32> = display(det).data.iter().map(|&d| sign * d).collect();
        let pixels = oriented.iter().map(|&d| det_colour(d)).collect();
        JacobianPlane {
            image: Some(egui::ColorImage::new([w, h], pixels)),
            det: oriented,
            folded,
            voxels: det.len(),
            min: s.min,
            max: s.max,
        }
    });
    let grid = if req.grid {
        let mut lines = vec![];
        for axis in [g.across, g.down] {
            if axis < map.ndim {
                let comp = display(&coords[axis * m..(axis + 1) * m]);
                // The scan's grid lines exist inside the scan only.
                let inside = (0.0, map.in_shape[axis].saturating_sub(1) as f32);
                lines.extend(contours(&comp.data, w, h, GRID_STEP, inside));
            }
        }
        lines
    } else {
        vec![]
    };
    ViewOverlay {
        width: w,
        height: h,
        pixel_mm: geom.pixel_mm,
        plane,
        jacobian,
        grid,
    }
}

/// The polylines where `f` (`h` rows of `w` values, the value of texel `(c, r)` at its centre
/// `(c + 0.5, r + 0.5)`) equals a multiple of `step` within `range` (inclusive): marching
/// squares (a corner counts as above a level it equals; a saddle is split by the cell's mean),
/// segments joined into polylines in texel coordinates `[x, y]`.
pub fn contours(f: &[f32], w: usize, h: usize, step: f32, range: (f32, f32)) -> Vec<Vec<[f32; 2]>> {
    if w < 2 || h < 2 || f.len() < w * h || step <= 0.0 {
        return vec![];
    }
    // Edge ids: horizontal (r, c)-(r, c+1) first, then vertical (r, c)-(r+1, c).
    let nh = h * (w - 1);
    let hedge = |r: usize, c: usize| (r * (w - 1) + c) as u32;
    let vedge = |r: usize, c: usize| (nh + r * w + c) as u32;
    let at = |r: usize, c: usize| f[r * w + c];
    let pos = |r: usize, c: usize| [c as f32 + 0.5, r as f32 + 0.5];
    type Key = (i64, u32);
    let mut points: HashMap<Key, [f32; 2]> = HashMap::new();
    let mut segs: Vec<(Key, Key)> = vec![];
    for r in 0..h - 1 {
        for c in 0..w - 1 {
            let corners = [(r, c), (r, c + 1), (r + 1, c + 1), (r + 1, c)];
            let v = corners.map(|(rr, cc)| at(rr, cc));
            if v.iter().any(|x| !x.is_finite()) {
                continue;
            }
            let lo = v.iter().copied().fold(f32::INFINITY, f32::min);
            let hi = v.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let k0 = (lo.max(range.0) / step).ceil() as i64;
            let k1 = ((hi.min(range.1) / step).floor() as i64).min(k0 + MAX_LEVELS_PER_CELL - 1);
            // Edges: top (0-1), right (1-2), bottom (3-2), left (0-3).
            let edges = [
                (0usize, 1usize, hedge(r, c)),
                (1, 2, vedge(r, c + 1)),
                (3, 2, hedge(r + 1, c)),
                (0, 3, vedge(r, c)),
            ];
            for k in k0..=k1 {
                let level = k as f32 * step;
                let above = v.map(|x| x >= level);
                let mut crossed: Vec<usize> = vec![];
                for (e, &(a, b, id)) in edges.iter().enumerate() {
                    if above[a] != above[b] {
                        crossed.push(e);
                        points.entry((k, id)).or_insert_with(|| {
                            let (pa, pb) = (
                                pos(corners[a].0, corners[a].1),
                                pos(corners[b].0, corners[b].1),
                            );
                            let t = ((level - v[a]) / (v[b] - v[a])).clamp(0.0, 1.0);
                            [pa[0] + t * (pb[0] - pa[0]), pa[1] + t * (pb[1] - pa[1])]
                        });
                    }
                }
                let key = |e: usize| (k, edges[e].2);
                match crossed.len() {
                    2 => segs.push((key(crossed[0]), key(crossed[1]))),
                    4 => {
                        // The corners on the other side than the centre are cut off, each by
                        // the segment between its two edges.
                        let centre = v.iter().sum::<f32>() / 4.0 >= level;
                        // Corner -> its two edges: 0 top+left, 1 top+right, 2 right+bottom,
                        // 3 bottom+left.
                        let around = [(0, 3), (0, 1), (1, 2), (2, 3)];
                        for (corner, &(e0, e1)) in around.iter().enumerate() {
                            if above[corner] != centre {
                                segs.push((key(e0), key(e1)));
                            }
                        }
                    }
                    _ => {}
                }
            }
        }
    }
    // Join segments that share an end point (at most two per point).
    let mut ends: HashMap<Key, Vec<usize>> = HashMap::new();
    for (i, (a, b)) in segs.iter().enumerate() {
        ends.entry(*a).or_default().push(i);
        ends.entry(*b).or_default().push(i);
    }
    let mut used = vec![false; segs.len()];
    let mut lines = vec![];
    for start in 0..segs.len() {
        if used[start] {
            continue;
        }
        used[start] = true;
        let (a, b) = segs[start];
        let walk = |from: Key, used: &mut Vec<bool>| {
            let mut out = vec![];
            let mut cur = from;
            while let Some(&next) = ends.get(&cur).and_then(|v| v.iter().find(|&&s| !used[s])) {
                used[next] = true;
                let (p, q) = segs[next];
                cur = if p == cur { q } else { p };
                out.push(cur);
            }
            out
        };
        let forward = walk(b, &mut used);
        let backward = walk(a, &mut used);
        let keys: Vec<Key> = backward
            .into_iter()
            .rev()
            .chain([a, b])
            .chain(forward)
            .collect();
        lines.push(keys.iter().filter_map(|k| points.get(k).copied()).collect());
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contours_of_a_ramp_are_straight_lines() {
        // f = column index: levels 8 and 16 cross at the texel centres 8.5 and 16.5 (level 0
        // equals the first column, which counts as above it: no crossing); 24 is out of range.
        let (w, h) = (30, 5);
        let f: Vec<f32> = (0..w * h).map(|i| (i % w) as f32).collect();
        let lines = contours(&f, w, h, 8.0, (0.0, 20.0));
        let mut xs: Vec<f32> = lines.iter().map(|l| l[0][0]).collect();
        xs.sort_by(f32::total_cmp);
        assert_eq!(xs, [8.5, 16.5]);
        for l in &lines {
            assert_eq!(l.len(), h);
            assert!(l.iter().all(|p| p[0] == l[0][0]));
            assert_eq!(
                (l[0][1].min(l[h - 1][1]), l[0][1].max(l[h - 1][1])),
                (0.5, 4.5)
            );
        }
    }

    #[test]
    fn a_closed_contour_closes() {
        // A bump: one level circles the centre.
        let (w, h) = (11, 11);
        let f: Vec<f32> = (0..w * h)
            .map(|i| {
                let (x, y) = ((i % w) as f32 - 5.0, (i / w) as f32 - 5.0);
                20.0 - (x * x + y * y)
            })
            .collect();
        let lines = contours(&f, w, h, 8.0, (-100.0, 100.0));
        // Levels 0, 8 and 16 circle the centre (radius < 5); -8 and below reach the border.
        let closed = lines
            .iter()
            .filter(|l| l.first() == l.last() && l.len() > 3)
            .count();
        assert_eq!(closed, 3, "{lines:?}");
    }
}
