//! The Preset section of the controls: the preset in use and its seed, one plan sampled from
//! it, and whose model of the transform the views show ("Preview as").

use eframe::egui;

use crate::app::Command;
use crate::export::preview::Model;

pub(super) fn preset_ui(
    ui: &mut egui::Ui,
    preset: &mut String,
    seed: &mut u64,
    draft: Option<&crate::augment::preset::Preset>,
    unsaved: bool,
) -> Vec<Command> {
    let mut out = vec![];
    if preset.is_empty() {
        *preset = "nnunet-v2".into();
    }
    if let Some(d) = draft {
        ui.horizontal(|ui| {
            ui.label(format!(
                "editing: {}{}",
                d.name,
                if unsaved { " *" } else { "" }
            ))
            .on_hover_text("the preset editor's preset is the one in use");
            if ui.button("Editor…").clicked() {
                out.push(Command::OpenEditor);
            }
        });
    }
    ui.add_enabled_ui(draft.is_none(), |ui| {
        ui.horizontal(|ui| {
            let l = ui.label("preset");
            let shown = std::path::Path::new(preset.as_str())
                .file_name()
                .map_or_else(|| preset.clone(), |n| n.to_string_lossy().into_owned());
            egui::ComboBox::from_id_salt("preset")
                .selected_text(shown)
                .show_ui(ui, |ui| {
                    for (name, _) in crate::augment::preset::BUNDLED {
                        ui.selectable_value(preset, (*name).to_string(), *name);
                    }
                })
                .response
                .labelled_by(l.id);
            if ui.button("Load…").clicked() {
                out.push(Command::PresetDialog);
            }
            if ui
                .button("Edit…")
                .on_hover_text("edit its probabilities and ranges")
                .clicked()
            {
                out.push(Command::OpenEditor);
            }
        })
    });
    ui.horizontal(|ui| {
        let l = ui.label("seed");
        ui.add(egui::DragValue::new(seed)).labelled_by(l.id);
        if ui
            .button("Sample from preset")
            .on_hover_text("draw one plan with the preset's probabilities and ranges")
            .clicked()
        {
            out.push(Command::SamplePreset);
        }
        if ui
            .button("Grid…")
            .on_hover_text("What training will see: a grid of draws of this preset")
            .clicked()
        {
            out.push(Command::OpenGrid);
        }
    });
    out
}

/// "Preview as": whose model of the transform the views show.
pub(super) fn preview_as_ui(ui: &mut egui::Ui, model: &mut Model) {
    ui.horizontal(|ui| {
        let l = ui.label("preview as");
        egui::ComboBox::from_id_salt("preview as")
            .selected_text(model.label())
            .show_ui(ui, |ui| {
                for m in Model::ALL {
                    ui.selectable_value(model, m, m.label());
                }
            })
            .response
            .labelled_by(l.id)
            .on_hover_text(
                "what the training library will really do with these parameters: its own \
                 elastic model, resample chain and padding (checked against the library); \
                 computed on the CPU over the whole volume",
            );
    });
}
