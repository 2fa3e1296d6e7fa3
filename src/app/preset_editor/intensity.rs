//! The preset editor's Intensity section: the preset's `[[intensity]]` steps in the order they
//! act, each with its probability, its range and its choice of channels, in the units training
//! sees; a step is added from the families' list (with nnU-Net v2's values), moved up or
//! removed. The section checks as the rest of the editor does: through the preset's validation.

use eframe::egui;

use super::{prob, range};
use crate::core::draws::Distribution;
use crate::core::intensity::{Field, IntensitySpec};

/// The section, after the spatial transforms and their sampling.
pub fn intensity_section(ui: &mut egui::Ui, steps: &mut Vec<IntensitySpec>) {
    ui.separator();
    ui.label(egui::RichText::new("Intensity").strong())
        .on_hover_text(
            "after the resample, on the image only (never a label map), in this order; each step \
             is its library's transform (batchgeneratorsv2, MONAI or TorchIO), exact to the \
             library; values in the units training sees (nnU-Net's z-scored image)",
        );
    let (mut remove, mut up) = (None, None);
    for (i, s) in steps.iter_mut().enumerate() {
        ui.push_id(("intensity-step", i), |ui| {
            ui.horizontal(|ui| {
                ui.label(egui::RichText::new(format!("{}. {}", i + 1, s.name())).strong());
                ui.weak(format!("{} {}", s.library().label(), s.class()));
                if i > 0
                    && ui
                        .small_button("up")
                        .on_hover_text("act one step earlier")
                        .clicked()
                {
                    up = Some(i);
                }
                if ui.small_button("remove").clicked() {
                    remove = Some(i);
                }
            });
            ui.indent("intensity-step-body", |ui| step_body(ui, s));
        });
    }
    if let Some(i) = up {
        steps.swap(i - 1, i);
    }
    if let Some(i) = remove {
        steps.remove(i);
    }
    if let Some(f) = family_picker(ui, "intensity-add") {
        steps.push(f);
    }
}

/// "add a step": the families' list, every library's; the one picked, with its library's
/// defaults.
pub fn family_picker(ui: &mut egui::Ui, id: &str) -> Option<IntensitySpec> {
    let mut add = None;
    ui.horizontal(|ui| {
        let l = ui.label("add a step");
        egui::ComboBox::from_id_salt(id)
            .selected_text("family…")
            .show_ui(ui, |ui| {
                for f in IntensitySpec::families() {
                    if ui
                        .selectable_label(false, f.name())
                        .on_hover_text(format!("{} {}", f.library().label(), f.class()))
                        .clicked()
                    {
                        add = Some(f);
                    }
                }
            })
            .response
            .labelled_by(l.id)
    });
    add
}

/// The fields of one step, as its family lists them.
fn step_body(ui: &mut egui::Ui, s: &mut IntensitySpec) {
    for f in s.fields() {
        match f {
            Field::Prob(label, v) => prob(ui, label, v),
            Field::Range(label, v, speed, unit) => range(ui, label, v, speed, unit),
            Field::Number(label, v, speed, unit) => {
                ui.horizontal(|ui| {
                    let l = ui.label(label);
                    ui.add(egui::DragValue::new(v).speed(speed).suffix(unit))
                        .labelled_by(l.id);
                });
            }
            Field::Flag(label, v) => {
                ui.checkbox(v, label);
            }
            Field::Distribution(d) => distribution(ui, d),
            Field::Count(label, v, max) => {
                ui.horizontal(|ui| {
                    let l = ui.label(label);
                    ui.add(egui::DragValue::new(v).range(0..=max))
                        .labelled_by(l.id);
                });
            }
        }
    }
}

/// Uniform, or batchgeneratorsv2's `BGContrast` split draw.
fn distribution(ui: &mut egui::Ui, d: &mut Distribution) {
    ui.horizontal(|ui| {
        ui.radio_value(d, Distribution::Uniform, "uniform");
        ui.radio_value(d, Distribution::Split, "split")
            .on_hover_text(
                "below or above 1 with p ½ each, then uniform on that side (BGContrast)",
            );
    });
}
