//! TorchIO's coarse control grid over an augmented view, while previewing as TorchIO: its
//! B-spline control points at rest and where their displacement takes them.

use eframe::egui::{self, Color32, Pos2, Rect, Stroke, Vec2};

use super::At;
use super::draw::HEADER_H;

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
    let ir = crate::app::views::image_rect(body, size_mm, nav);
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
