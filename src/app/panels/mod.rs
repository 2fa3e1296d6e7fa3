//! Menu, controls, information and status panels. Each returns the commands it wants applied;
//! parameters are edited in place (the app notices the change and recomputes). The left panel
//! stacks the sections of its submodules; the menu, the status bar and the information panel
//! have files of their own.

mod backend;
mod display;
mod done;
mod filter;
mod histogram;
mod info;
mod menu;
mod preset;
mod status;
mod transform;

use eframe::egui;

use super::state::State;
use super::{Command, Runtime};

pub use info::info_panel;
pub use menu::{SHORTCUTS, help_window, menu_bar, shortcuts};
pub use status::{position, readout, status_bar};

/// The controls of every plan parameter, and the display settings.
pub fn controls(ui: &mut egui::Ui, state: &mut State, rt: &Runtime) -> Vec<Command> {
    let mut out = vec![];
    let nd = rt.scan.as_ref().map_or(3, |s| s.loaded.image.ndim());
    let shape = rt
        .scan
        .as_ref()
        .map_or(vec![64; 3], |s| s.loaded.image.shape.clone());
    let spacing = rt
        .scan
        .as_ref()
        .map_or(vec![1.0; 3], |s| s.loaded.image.spacing_mm.clone());
    // Narrower panels on a small screen: at 1280 px the views keep about 60 % of the width.
    let w = ui.ctx().content_rect().width();
    egui::Panel::left("controls")
        .resizable(true)
        .default_size((0.22 * w).clamp(270.0, 330.0))
        .min_size(250.0)
        .show(ui, |ui| {
            egui::ScrollArea::vertical().show(ui, |ui| {
                ui.spacing_mut().slider_width = 170.0;
                let State {
                    params,
                    display,
                    preset,
                    preset_seed,
                    draft,
                    ..
                } = state;
                ui.horizontal(|ui| {
                    if ui
                        .add_enabled(rt.history.can_undo(), egui::Button::new("Undo"))
                        .clicked()
                    {
                        out.push(Command::Undo);
                    }
                    if ui
                        .add_enabled(rt.history.can_redo(), egui::Button::new("Redo"))
                        .clicked()
                    {
                        out.push(Command::Redo);
                    }
                    if ui.button("Reset").clicked() {
                        out.push(Command::ResetParams);
                    }
                });
                egui::CollapsingHeader::new("Preset")
                    .default_open(true)
                    .show(ui, |ui| {
                        out.extend(preset::preset_ui(
                            ui,
                            preset,
                            preset_seed,
                            draft.as_ref(),
                            rt.windows.editor.unsaved_draft(draft.as_ref()),
                        ));
                        preset::preview_as_ui(ui, &mut params.preview_as);
                    });
                egui::CollapsingHeader::new("Spatial transform")
                    .default_open(true)
                    .show(ui, |ui| {
                        transform::transform_ui(ui, params, rt, nd, &shape, &spacing)
                    });
                egui::CollapsingHeader::new("Elastic deformation")
                    .default_open(true)
                    .show(ui, |ui| {
                        out.extend(transform::elastic_ui(ui, params, rt, &spacing))
                    });
                egui::CollapsingHeader::new("Sampling")
                    .default_open(true)
                    .show(ui, |ui| transform::sampling_ui(ui, params));
                egui::CollapsingHeader::new(transform::intensity_title(params))
                    .id_salt("intensity steps")
                    .default_open(false)
                    .show(ui, |ui| {
                        let channels = rt.scan.as_ref().map_or(1, |s| s.loaded.image.channels);
                        let img = crate::core::intensity::DrawFor {
                            channels,
                            ndim: nd,
                            spacing_mm: &spacing,
                        };
                        transform::intensity_ui(ui, params, &img)
                    });
                // Closed at first unless a filter is on, so that the panel fits a 940-pixel
                // window; the title says what runs.
                egui::CollapsingHeader::new(filter::filter_title(&params.filter))
                    .id_salt("filter section")
                    .default_open(params.filter.enabled)
                    .show(ui, |ui| {
                        filter::filter_ui(ui, &mut params.filter, display, rt, nd)
                    });
                egui::CollapsingHeader::new("Engine")
                    .default_open(true)
                    .show(ui, |ui| backend::engine_ui(ui, params, rt));
                egui::CollapsingHeader::new("Display")
                    .default_open(true)
                    .show(ui, |ui| out.extend(display::display_ui(ui, display, rt)));
            });
        });
    out
}

/// Milliseconds for display; hidden in snapshot tests, where they differ from run to run.
pub fn fmt_ms(rt: &Runtime, ms: f64) -> String {
    if rt.capture.hide_timings {
        "– ms".into()
    } else {
        format!("{ms:.1} ms")
    }
}
