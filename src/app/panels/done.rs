//! The done list of the information panel: the transforms the parameters (or the last preset
//! sample) apply, in order, and the model of the training library the views preview.

use eframe::egui::{self, RichText};

use crate::app::Runtime;
use crate::app::state::State;
use crate::export::preview::Model;

/// The Done list section: what fires, with its values, and the preview's model.
/// It describes the plan of the augmented views, which lag the sliders while the worker computes.
pub(super) fn done_list(ui: &mut egui::Ui, state: &State, rt: &Runtime) {
    let nd = rt.scan.as_ref().map_or(3, |s| s.loaded.image.ndim());
    let scan_max = rt.scan.as_ref().map_or(1.0, |s| s.loaded.range.1);
    let params = crate::app::params_on_screen(state, rt);
    if !params.same_result(&state.params) {
        ui.weak("the views show the previous parameters until the new ones are computed");
    }
    let done = match &rt.sampled {
        Some((p, d, from)) if p == params => {
            ui.weak(format!("sampled from {from}"));
            params.with_filter(d.clone(), scan_max)
        }
        _ => {
            let sp = rt
                .scan
                .as_ref()
                .map_or(vec![1.0; nd], |s| s.loaded.image.spacing_mm.clone());
            params.done_list(nd, &sp, scan_max)
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
                let line = crate::app::format::done_line(&d, &spacing);
                match dropped_by(params.preview_as, &d.transform) {
                    Some(why) => {
                        ui.label(RichText::new(&d.transform).strikethrough().weak());
                        ui.label(RichText::new(format!("{line} · {why}")).weak())
                            .on_hover_text(d.values.to_string());
                    }
                    None => {
                        ui.label(RichText::new(&d.transform).strong());
                        ui.label(line).on_hover_text(d.values.to_string());
                    }
                }
                ui.end_row();
            }
        });
    model_lines(ui, params, rt);
}

/// Why the previewed library's model leaves a transform of the done list out, if it does
/// (the views show its model, so the list must not claim the transform acts).
pub fn dropped_by(model: Model, transform: &str) -> Option<&'static str> {
    match (model, transform) {
        (Model::Nnunet, "translate") => {
            Some("left out: nnU-Net's SpatialTransform has no translation")
        }
        _ => None,
    }
}

/// The done list's model: which library's model the views show, and where it departs from
/// augscope's (from the last whole volume computed with it).
fn model_lines(ui: &mut egui::Ui, params: &crate::app::Params, rt: &Runtime) {
    let model = params.preview_as;
    if model == Model::Augscope {
        return;
    }
    ui.label(RichText::new(format!("model: {}", model.id())).strong());
    match &rt.work.full {
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
