//! The done list of the information panel: the transforms the parameters (or the last preset
//! sample) apply, in order, and the model of the training library the views preview.

use eframe::egui::{self, RichText};

use crate::app::Runtime;
use crate::app::state::State;
use crate::export::preview::Model;

/// The Done list section: what fires, with its values, and the preview's model.
pub(super) fn done_list(ui: &mut egui::Ui, state: &State, rt: &Runtime) {
    let nd = rt.scan.as_ref().map_or(3, |s| s.loaded.image.ndim());
    let scan_max = rt.scan.as_ref().map_or(1.0, |s| s.loaded.range.1);
    let done = match &rt.sampled {
        Some((p, d)) if *p == state.params => {
            ui.weak(format!("sampled from {}", state.preset));
            state.params.with_filter(d.clone(), scan_max)
        }
        _ => {
            let sp = rt
                .scan
                .as_ref()
                .map_or(vec![1.0; nd], |s| s.loaded.image.spacing_mm.clone());
            state.params.done_list(nd, &sp, scan_max)
        }
    };
    if done.is_empty() {
        ui.label("identity (nothing fires)");
    }
    let spacing = rt
        .scan
        .as_ref()
        .map_or(vec![], |s| s.loaded.image.spacing_mm.clone());
    egui::Grid::new("done")
        .num_columns(2)
        .max_col_width(0.62 * ui.available_width())
        .show(ui, |ui| {
            for d in done {
                ui.label(RichText::new(&d.transform).strong());
                ui.label(crate::app::format::done_line(&d, &spacing))
                    .on_hover_text(d.values.to_string());
                ui.end_row();
            }
        });
    model_lines(ui, state, rt);
}

/// The done list's model: which library's model the views show, and where it departs from
/// augscope's (from the last whole volume computed with it).
fn model_lines(ui: &mut egui::Ui, state: &State, rt: &Runtime) {
    let model = state.params.preview_as;
    if model == Model::Augscope {
        return;
    }
    ui.label(RichText::new(format!("model: {}", model.id())).strong());
    match &rt.full {
        Some(f) if f.model == model => {
            for s in &f.model_steps {
                ui.add(egui::Label::new(RichText::new(format!("• {s}")).small()).wrap());
            }
        }
        _ => {
            ui.weak("computing the library's model…");
        }
    }
}
