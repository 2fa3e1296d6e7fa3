//! The Intensity section of the information panel: the histogram of the image the transform read
//! (a line) and of the image on screen (bars), on one value axis, with each one's mean and
//! standard deviation, so that what the intensity steps did to the values can be seen.

use eframe::egui::{self, Color32, Pos2, Rect, Sense, Stroke, vec2};

use crate::app::Runtime;
use crate::app::format::num;
use crate::app::worker::histogram::{BINS, Histograms};

/// The bars' colour (after) and the line's (before).
const AFTER: Color32 = Color32::from_rgb(90, 160, 230);
const BEFORE: Color32 = Color32::from_rgb(235, 170, 70);

/// The section: the histograms of the last whole volume, or why there are none.
pub(super) fn intensity_section(ui: &mut egui::Ui, rt: &Runtime) {
    let Some(full) = rt.work.full.as_ref() else {
        ui.weak("the histograms come with the first whole volume");
        return;
    };
    let Some(h) = full.histograms.as_deref() else {
        ui.weak("no finite value to count");
        return;
    };
    let units = match &full.normalized {
        Some(n) => n.units.clone(),
        None => "the scan's own units".to_string(),
    };
    draw(ui, h);
    ui.horizontal_wrapped(|ui| {
        ui.label(egui::RichText::new("before (line)").color(BEFORE))
            .on_hover_text(
                "the image the transform reads (normalised, and filtered by a filter set to act \
             before)",
            );
        ui.label(egui::RichText::new("after (bars)").color(AFTER))
            .on_hover_text("the image on screen: transformed, with its intensity steps");
    });
    egui::Grid::new("intensity_moments")
        .num_columns(2)
        .show(ui, |ui| {
            for (name, s) in [("before", &h.before), ("after", &h.after)] {
                ui.label(name);
                ui.label(format!("mean {}, std {}", num(s.mean), num(s.std)));
                ui.end_row();
            }
            ui.label("range");
            ui.label(format!("{} to {}", num(h.lo as f64), num(h.hi as f64)));
            ui.end_row();
        });
    ui.weak(format!("values: {units}; counts on a log scale"));
}

/// Both histograms in one plot: `after` as bars, `before` as a line, counts as `ln(1 + c)`.
fn draw(ui: &mut egui::Ui, h: &Histograms) {
    let (rect, resp) = ui.allocate_exact_size(vec2(ui.available_width(), 80.0), Sense::hover());
    let p = ui.painter_at(rect);
    p.rect_filled(rect, 2.0, ui.visuals().extreme_bg_color);
    let top = h
        .before
        .counts
        .iter()
        .chain(&h.after.counts)
        .map(|&c| (1.0 + c as f64).ln())
        .fold(0.0, f64::max)
        .max(1e-9);
    let y = |c: u64| rect.bottom() - (((1.0 + c as f64).ln() / top) as f32) * (rect.height() - 4.0);
    let w = rect.width() / BINS as f32;
    for (i, &c) in h.after.counts.iter().enumerate() {
        if c > 0 {
            let x = rect.left() + i as f32 * w;
            let bar = Rect::from_min_max(Pos2::new(x, y(c)), Pos2::new(x + w, rect.bottom()));
            p.rect_filled(bar.shrink2(vec2(0.5, 0.0)), 0.0, AFTER.gamma_multiply(0.8));
        }
    }
    let line: Vec<Pos2> = h
        .before
        .counts
        .iter()
        .enumerate()
        .map(|(i, &c)| Pos2::new(rect.left() + (i as f32 + 0.5) * w, y(c)))
        .collect();
    p.add(egui::Shape::line(line, Stroke::new(1.5, BEFORE)));
    if let Some(pos) = resp.hover_pos() {
        let i = (((pos.x - rect.left()) / w) as usize).min(BINS - 1);
        let step = (h.hi - h.lo) as f64 / BINS as f64;
        let from = h.lo as f64 + i as f64 * step;
        resp.on_hover_text(format!(
            "{} to {}: {} before, {} after",
            num(from),
            num(from + step),
            h.before.counts[i],
            h.after.counts[i]
        ));
    }
}
