//! The small histograms under the grid: their values from the draws and the realised
//! displacements ([`histogram_values`]), their bins, and their drawing.

use eframe::egui;

use crate::augment::Space;

use super::GridRuntime;

/// Values of the histograms under the grid: (title, unit, values).
pub fn histogram_values(g: &GridRuntime) -> Vec<(String, &'static str, Vec<f64>)> {
    let mut out = vec![];
    let nd = g
        .samples
        .iter()
        .find_map(|s| (!s.plan.rotate_rad.is_empty()).then_some(s.plan.rotate_rad.len()))
        .unwrap_or(0);
    for a in 0..nd {
        let v: Vec<f64> = g
            .samples
            .iter()
            .filter_map(|s| s.plan.rotate_rad.get(a).copied())
            .filter(|&r| r != 0.0)
            .map(f64::to_degrees)
            .collect();
        let title = if nd == 1 {
            "rotation".to_string()
        } else {
            format!("rotation about axis {a}")
        };
        out.push((title, "°", v));
    }
    let scales: Vec<f64> = g
        .samples
        .iter()
        .flat_map(|s| s.plan.scale.iter().copied())
        .filter(|&s| s != 1.0)
        .collect();
    out.push(("scale factor".into(), "×", scales));
    let mm = g.samples.iter().any(|s| s.plan.space == Space::Mm);
    let rms: Vec<f64> = g.displacement.iter().flatten().map(|d| d.1).collect();
    out.push((
        "elastic displacement RMS".into(),
        if mm { "mm" } else { "vox" },
        rms,
    ));
    out
}

/// Bin counts of `values` over `[lo, hi]`.
pub fn bins(values: &[f64], lo: f64, hi: f64, n: usize) -> Vec<usize> {
    let mut c = vec![0usize; n];
    let w = (hi - lo).max(1e-12);
    for &v in values {
        let i = (((v - lo) / w) * n as f64)
            .floor()
            .clamp(0.0, (n - 1) as f64) as usize;
        c[i] += 1;
    }
    c
}

/// Height of one histogram's cell: a title of up to two lines, the bars, the range.
const HISTOGRAM_CELL_HEIGHT: f32 = 86.0;

/// A small bar histogram drawn with the painter, its range under it.
fn histogram(
    ui: &mut egui::Ui,
    title: &str,
    unit: &str,
    values: &[f64],
    of: usize,
    pending: usize,
) {
    const BINS: usize = 12;
    // A cell of fixed size: the wrapped row places it by that size, and the window keeps its
    // height as the values arrive.
    let cell = egui::vec2(150.0, HISTOGRAM_CELL_HEIGHT);
    ui.allocate_ui_with_layout(cell, egui::Layout::top_down(egui::Align::Min), |ui| {
        ui.set_min_size(cell);
        let more = if pending > 0 {
            format!(", {pending} computing")
        } else {
            String::new()
        };
        ui.label(egui::RichText::new(format!("{title} ({} of {of}{more})", values.len())).small());
        let (rect, resp) = ui.allocate_exact_size(egui::vec2(150.0, 44.0), egui::Sense::hover());
        let p = ui.painter_at(rect);
        p.rect_filled(rect, 2.0, ui.visuals().extreme_bg_color);
        if values.is_empty() {
            p.text(
                rect.center(),
                egui::Align2::CENTER_CENTER,
                if pending > 0 {
                    "computing…"
                } else {
                    "none drawn"
                },
                egui::FontId::proportional(10.0),
                ui.visuals().weak_text_color(),
            );
            return;
        }
        let lo = values.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let (lo, hi) = if hi - lo < 1e-9 {
            (lo - 0.5 * lo.abs().max(1e-3), hi + 0.5 * hi.abs().max(1e-3))
        } else {
            (lo, hi)
        };
        let counts = bins(values, lo, hi, BINS);
        let top = counts.iter().copied().max().unwrap_or(1).max(1) as f32;
        let bw = rect.width() / BINS as f32;
        let color = ui.visuals().selection.bg_fill;
        for (i, &c) in counts.iter().enumerate() {
            if c == 0 {
                continue;
            }
            let h = (rect.height() - 2.0) * c as f32 / top;
            let x0 = rect.left() + i as f32 * bw;
            p.rect_filled(
                egui::Rect::from_min_max(
                    egui::pos2(x0 + 0.5, rect.bottom() - h),
                    egui::pos2(x0 + bw - 0.5, rect.bottom()),
                ),
                0.0,
                color,
            );
        }
        let f = crate::app::format::num;
        ui.label(
            egui::RichText::new(format!("{} … {} {unit}", f(lo), f(hi)))
                .small()
                .weak(),
        );
        let list: Vec<String> = values.iter().map(|v| f(*v)).collect();
        resp.on_hover_text(list.join(", "));
    });
}

/// The histograms under the grid, once the draws are there: the drawn angles and scale
/// factors, and the realised elastic displacement (with the draws still computing).
pub(super) fn histograms(ui: &mut egui::Ui, g: &GridRuntime) {
    ui.separator();
    let hists = histogram_values(g);
    let of = g.samples.len();
    let pending = g
        .samples
        .iter()
        .zip(&g.displacement)
        .filter(|(s, d)| d.is_none() && s.plan.elastic.is_some_and(|e| e.alpha != 0.0))
        .count();
    ui.horizontal_wrapped(|ui| {
        for (title, unit, values) in &hists {
            let pending = if title.starts_with("elastic") {
                pending
            } else {
                0
            };
            histogram(ui, title, unit, values, of, pending);
        }
    });
}
