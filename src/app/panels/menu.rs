//! The menu bar, the keyboard shortcuts and the Help window that lists what the keyboard and
//! mouse do.

use eframe::egui::{self, RichText};

use crate::app::state::State;
use crate::app::{Command, Runtime};

/// Keyboard: undo/redo, and slices of the active view with PgUp/PgDn and the arrow keys.
pub fn shortcuts(ui: &egui::Ui, active_view: usize) -> Vec<Command> {
    let mut out = vec![];
    if ui.ctx().egui_wants_keyboard_input() {
        return out;
    }
    ui.input_mut(|i| {
        let redo_y = egui::KeyboardShortcut::new(egui::Modifiers::COMMAND, egui::Key::Y);
        let redo_z = egui::KeyboardShortcut::new(
            egui::Modifiers::COMMAND | egui::Modifiers::SHIFT,
            egui::Key::Z,
        );
        let undo = egui::KeyboardShortcut::new(egui::Modifiers::COMMAND, egui::Key::Z);
        if i.consume_key(egui::Modifiers::NONE, egui::Key::F1) {
            out.push(Command::ShowHelp);
        }
        if i.consume_key(egui::Modifiers::NONE, egui::Key::F12) {
            out.push(Command::Screenshot);
        }
        if i.consume_shortcut(&redo_z) || i.consume_shortcut(&redo_y) {
            out.push(Command::Redo);
        } else if i.consume_shortcut(&undo) {
            out.push(Command::Undo);
        }
        for (key, delta) in [
            (egui::Key::PageUp, 10),
            (egui::Key::PageDown, -10),
            (egui::Key::ArrowUp, 1),
            (egui::Key::ArrowDown, -1),
        ] {
            if i.consume_key(egui::Modifiers::NONE, key) {
                out.push(Command::Step {
                    view: active_view,
                    delta,
                });
            }
        }
    });
    out
}

pub fn menu_bar(ui: &mut egui::Ui, state: &mut State, rt: &Runtime) -> Vec<Command> {
    let mut out = vec![];
    egui::Panel::top("menu").show(ui, |ui| {
        egui::MenuBar::new().ui(ui, |ui| {
            ui.menu_button("File", |ui| file_menu(ui, state, rt, &mut out));
            ui.menu_button("Edit", |ui| {
                if ui
                    .add_enabled(rt.history.can_undo(), egui::Button::new("Undo  (Ctrl+Z)"))
                    .clicked()
                {
                    out.push(Command::Undo);
                }
                if ui
                    .add_enabled(rt.history.can_redo(), egui::Button::new("Redo  (Ctrl+Y)"))
                    .clicked()
                {
                    out.push(Command::Redo);
                }
                if ui.button("Reset parameters").clicked() {
                    out.push(Command::ResetParams);
                }
            });
            ui.menu_button("View", |ui| {
                ui.checkbox(&mut state.display.side_by_side, "Original beside augmented");
                ui.checkbox(
                    &mut state.display.difference,
                    "Difference |augmented − original|",
                );
                ui.checkbox(&mut state.display.crosshair, "Crosshair");
                ui.checkbox(&mut state.hide_info_panel, "Hide information panel");
                let mut cmp = state.show_compare;
                if ui.checkbox(&mut cmp, "CPU vs GPU comparison").changed() {
                    out.push(Command::Compare(cmp));
                }
                if ui.button("What training will see…").clicked() {
                    out.push(Command::OpenGrid);
                }
                if ui.button("Screenshot of the views  (F12)").clicked() {
                    out.push(Command::Screenshot);
                }
            });
            ui.menu_button("Help", |ui| {
                if ui.button("Keyboard and mouse  (F1)").clicked() {
                    out.push(Command::ShowHelp);
                }
            });
            ui.with_layout(egui::Layout::right_to_left(egui::Align::Center), |ui| {
                if ui
                    .selectable_label(state.show_compare, "Compare CPU vs GPU")
                    .clicked()
                {
                    out.push(Command::Compare(!state.show_compare));
                }
            });
        });
    });
    out
}

/// The File menu: open a scan, a label map or a DICOM folder, save, export, presets and the
/// recent files.
fn file_menu(ui: &mut egui::Ui, state: &State, rt: &Runtime, out: &mut Vec<Command>) {
    if ui.button("Open scan…").clicked() {
        out.push(Command::OpenDialog);
    }
    let has_scan = rt.scan.is_some();
    if ui
        .add_enabled(has_scan, egui::Button::new("Open label map…"))
        .clicked()
    {
        out.push(Command::OpenLabelDialog);
    }
    if ui
        .button("Open DICOM folder…")
        .on_hover_text("a folder of DICOM files; of several series, a picker offers them")
        .clicked()
    {
        out.push(Command::Pick(crate::app::browse::Purpose::DicomFolder));
    }
    if ui
        .button("Open path…")
        .on_hover_text("augscope's own file browser, with a typed path")
        .clicked()
    {
        out.push(Command::Browse(crate::app::browse::Purpose::Scan, false));
    }
    if ui.button("Open the bundled sample").clicked() {
        out.push(Command::Open(crate::app::sample(), None));
    }
    if ui
        .add_enabled(has_scan, egui::Button::new("Save augmented volume…"))
        .on_hover_text("the transformed scan (float32) and its label map beside it")
        .clicked()
    {
        out.push(Command::Pick(crate::app::browse::Purpose::SaveVolume));
    }
    ui.separator();
    if ui
        .add_enabled(has_scan, egui::Button::new("Export batch…"))
        .on_hover_text("N augmented samples and a manifest, as `augscope batch`")
        .clicked()
    {
        out.push(Command::OpenExport);
    }
    ui.separator();
    if ui
        .button("Save preset…")
        .on_hover_text("the current parameters or the chosen preset, as a TOML file")
        .clicked()
    {
        out.push(Command::OpenSavePreset);
    }
    if ui
        .button("Export code…")
        .on_hover_text(
            "the preset as MONAI, TorchIO, batchgenerators or nnU-Net code, as \
             `augscope preset export`",
        )
        .clicked()
    {
        out.push(Command::OpenCode);
    }
    ui.menu_button("Recent presets", |ui| {
        if state.recent_presets.is_empty() {
            ui.label("(none)");
        }
        for p in state.recent_presets.clone() {
            let name = std::path::Path::new(&p)
                .file_name()
                .map_or_else(|| p.clone(), |n| n.to_string_lossy().into());
            if ui.button(name).on_hover_text(&p).clicked() {
                out.push(Command::SetPreset(p));
            }
        }
    });
    ui.menu_button("Recent", |ui| {
        if state.recent.is_empty() {
            ui.label("(none)");
        }
        for (img, label) in state.recent.clone() {
            let name = img
                .file_name()
                .map_or_else(|| img.display().to_string(), |n| n.to_string_lossy().into());
            if ui
                .button(name)
                .on_hover_text(img.display().to_string())
                .clicked()
            {
                out.push(Command::Open(img, label));
            }
        }
    });
}

/// What the keyboard and mouse do, in the Help window.
pub const SHORTCUTS: [(&str, &str); 16] = [
    ("Ctrl+Z / Ctrl+Y", "undo / redo a parameter change"),
    (
        "wheel, Up / Down",
        "next / previous slice of the view under the pointer",
    ),
    ("PgUp / PgDn", "ten slices on / back"),
    ("Ctrl+wheel", "zoom the view"),
    ("middle drag", "pan the view"),
    ("double click", "fit the view again"),
    ("click, left drag", "move the crosshair (all views follow)"),
    ("right drag", "window (left/right) and level (up/down)"),
    (
        "Shift+drag on a slider",
        "a tenth of the speed, for fine values",
    ),
    ("Tab, then Left / Right", "step the focused slider"),
    ("double click a value", "type it"),
    (
        "drop files",
        "open the first as the scan, the second as its label map",
    ),
    ("F12", "save a PNG of the views (in ~/Pictures)"),
    ("F1", "this help"),
    (
        "Compare CPU vs GPU",
        "both engines on the same plan, their |Δ| and times",
    ),
    (
        "View, What training will see",
        "a grid of draws of the preset",
    ),
];

/// The Help window: every shortcut and mouse action.
pub fn help_window(ctx: &egui::Context, open: &mut bool) {
    egui::Window::new("Keyboard and mouse")
        .open(open)
        .collapsible(false)
        .resizable(false)
        .show(ctx, |ui| {
            egui::Grid::new("shortcuts").striped(true).show(ui, |ui| {
                for (keys, what) in SHORTCUTS {
                    ui.label(RichText::new(keys).strong());
                    ui.label(what);
                    ui.end_row();
                }
            });
        });
}
