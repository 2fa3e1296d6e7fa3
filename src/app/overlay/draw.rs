//! Drawing the deformation grid and the Jacobian over an augmented view: the lines and the
//! colour image, the folded counts top right, and the legend bottom left.

use eframe::egui::{self, Color32, Pos2, Rect, Stroke, Vec2};

use super::{GRID_STEP, OverlayRuntime};
use crate::app::state::{Display, State};
use crate::app::{Nav, Scan};

/// Height of the title strip above each view (as `views::view_ui` draws it).
pub(super) const HEADER_H: f32 = 18.0;
pub(crate) const GRID_COLOUR: Color32 = Color32::from_rgba_premultiplied(60, 230, 230, 200);
/// Colour of folded voxels (`det <= 0`).
pub const FOLDED: Color32 = Color32::from_rgba_premultiplied(240, 220, 0, 235);
const SHRINK: [u8; 3] = [40, 110, 255];
const GROW: [u8; 3] = [255, 50, 40];

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
#[derive(Clone, Copy)]
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
    let ir = crate::app::views::image_rect(body, size_mm, nav);
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
    corner_labels(ui, body, lines);
    // Legend, bottom left.
    legend(&painter, body, d, small);
}

/// The readouts, top right: white lines on a dark band.
fn corner_labels(ui: &mut egui::Ui, body: Rect, lines: Vec<String>) {
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
}

/// The legend, bottom left: the Jacobian's colour ramp and folded colour, and the grid's step.
fn legend(painter: &egui::Painter, body: Rect, d: &Display, small: egui::FontId) {
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
