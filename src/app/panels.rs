//! Menu, controls, information and status panels. Each returns the commands it wants applied;
//! parameters are edited in place (the app notices the change and recomputes).

use eframe::egui::{self, RichText};

use crate::augment::{Mode, Order, Space};
use crate::engine::Precision;
use crate::export::preview::Model;

use super::state::{BackendChoice, Colormap, FilterKind, FilterParams, FilterStage, Params, State};
use super::{Command, Runtime};

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
            ui.menu_button("File", |ui| {
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
                    .on_hover_text("a folder that holds the files of one series")
                    .clicked()
                {
                    out.push(Command::Pick(super::browse::Purpose::DicomFolder));
                }
                if ui
                    .button("Open path…")
                    .on_hover_text("augscope's own file browser, with a typed path")
                    .clicked()
                {
                    out.push(Command::Browse(super::browse::Purpose::Scan, false));
                }
                if ui.button("Open the bundled sample").clicked() {
                    out.push(Command::Open(super::SAMPLE.into(), None));
                }
                if ui
                    .add_enabled(has_scan, egui::Button::new("Save augmented volume…"))
                    .on_hover_text("the transformed scan (float32) and its label map beside it")
                    .clicked()
                {
                    out.push(Command::Pick(super::browse::Purpose::SaveVolume));
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
                        let name = img.file_name().map_or_else(
                            || img.display().to_string(),
                            |n| n.to_string_lossy().into(),
                        );
                        if ui
                            .button(name)
                            .on_hover_text(img.display().to_string())
                            .clicked()
                        {
                            out.push(Command::Open(img, label));
                        }
                    }
                });
            });
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

pub fn status_bar(ui: &mut egui::Ui, state: &State, rt: &mut Runtime) {
    egui::Panel::bottom("status").show(ui, |ui| {
        ui.horizontal(|ui| {
            if let Some(p) = &rt.loading {
                ui.spinner();
                ui.label(format!("loading {}", p.display()));
            } else if let Some(s) = &rt.scan {
                let v = &s.loaded.image;
                let name = s
                    .loaded
                    .path
                    .file_name()
                    .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
                ui.label(RichText::new(name).strong());
                ui.label(match v.channels {
                    1 => format!("{:?}", v.shape),
                    _ if v.is_colour() => format!("{:?} × RGB", v.shape),
                    n => format!("{:?} × {n} volumes", v.shape),
                });
                let busy = rt
                    .full
                    .as_ref()
                    .is_none_or(|f| f.generation != rt.generation);
                if busy {
                    ui.spinner();
                    let progress = rt.progress.filter(|p| p.generation == rt.generation);
                    let elapsed = rt
                        .work_started
                        .filter(|(g, _)| *g == rt.generation)
                        .map_or(0.0, |(_, t)| t.elapsed().as_secs_f64());
                    match progress {
                        Some(p) if rt.filling == Some(rt.generation) => {
                            let left = p
                                .seconds_left()
                                .map_or(String::new(), |s| format!(" · {} left", secs(s)));
                            ui.add(
                                egui::ProgressBar::new(p.fraction())
                                    .desired_width(220.0)
                                    .text(format!(
                                        "whole volume {:.0} %{left}",
                                        100.0 * p.fraction()
                                    )),
                            );
                        }
                        _ => {
                            let what = if rt.filling == Some(rt.generation) {
                                "filling in the whole volume…"
                            } else {
                                "computing…"
                            };
                            // Work past half a second says how long it has run.
                            if elapsed > 0.5 && !rt.hide_timings {
                                ui.label(format!("{what} {}", secs(elapsed)));
                            } else {
                                ui.label(what);
                            }
                        }
                    }
                    ui.ctx()
                        .request_repaint_after(std::time::Duration::from_millis(200));
                } else if let Some(f) = &rt.full {
                    ui.label(format!(
                        "{} in {} on {}",
                        "transform",
                        fmt_ms(rt, f.timings.total_ms),
                        f.backend
                    ));
                }
                ui.separator();
                match &rt.hover {
                    Some(h) => ui.label(readout(v, h)),
                    None => ui.label(format!("cursor {}", position(v, &s.cursor))),
                };
            } else {
                ui.label("no scan");
            }
            if let Some(n) = &rt.note {
                ui.label(RichText::new(n).color(ui.visuals().warn_fg_color));
            }
            let _ = state;
        });
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

/// A duration in seconds as a person reads it: "0.8 s", "12 s", "2 min 05 s".
fn secs(s: f64) -> String {
    if s < 10.0 {
        format!("{s:.1} s")
    } else if s < 60.0 {
        format!("{s:.0} s")
    } else {
        let t = s.round() as u64;
        format!("{} min {:02} s", t / 60, t % 60)
    }
}

/// An array index and, for a scan placed in the world, its position in mm.
pub fn position(v: &crate::core::volume::Volume, index: &[usize]) -> String {
    let idx: Vec<String> = index.iter().map(|i| i.to_string()).collect();
    let mut s = format!("[{}]", idx.join(", "));
    if v.oriented {
        let w = v.world_mm(index);
        s.push_str(&format!(
            " · ({:.1}, {:.1}, {:.1}) mm RAS",
            w[0], w[1], w[2]
        ));
    }
    s
}

/// The status bar's line for the voxel under the pointer: where it is and what it holds.
pub fn readout(v: &crate::core::volume::Volume, h: &super::Hover) -> String {
    let vals = |x: &[f32]| {
        let s: Vec<String> = x.iter().map(|v| num_short(*v)).collect();
        s.join(" ")
    };
    let mut s = format!("{} · original {}", position(v, &h.voxel), vals(&h.original));
    if let Some(a) = &h.augmented {
        s.push_str(&format!(" · augmented {}", vals(a)));
    }
    if let Some((o, a)) = h.label {
        s.push_str(&format!(" · label {}", num_short(o)));
        if let Some(a) = a {
            s.push_str(&format!(" -> {}", num_short(a)));
        }
    }
    s
}

/// A value with the digits that matter: integers as integers, others to 4 significant digits.
fn num_short(x: f32) -> String {
    let a = x.abs();
    if x.fract() == 0.0 && a < 1e7 {
        format!("{x:.0}")
    } else if !x.is_finite() || !(1e-3..1e6).contains(&a) {
        format!("{x:.3e}")
    } else {
        let decimals = (3 - a.log10().floor() as i32).max(0) as usize;
        let s = format!("{x:.decimals$}");
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s
        }
    }
}

fn axis_name(rt: &Runtime, axis: usize) -> String {
    let Some(s) = &rt.scan else {
        return format!("axis {axis}");
    };
    let v = &s.loaded.image;
    if v.ndim() != 3 {
        return ["y (rows)", "x (columns)"]
            .get(axis)
            .map_or("", |s| s)
            .to_string();
    }
    let codes = v.axis_codes();
    let c = codes.get(2 - axis).copied().unwrap_or('?');
    let pair = match c {
        'R' | 'L' => "L–R",
        'A' | 'P' => "P–A",
        _ => "I–S",
    };
    format!("axis {axis} ({pair})")
}

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
                        out.extend(preset_ui(
                            ui,
                            preset,
                            preset_seed,
                            draft.as_ref(),
                            rt.editor.unsaved_draft(draft.as_ref()),
                        ));
                        preview_as_ui(ui, &mut params.preview_as);
                    });
                egui::CollapsingHeader::new("Spatial transform")
                    .default_open(true)
                    .show(ui, |ui| transform_ui(ui, params, rt, nd, &shape, &spacing));
                egui::CollapsingHeader::new("Elastic deformation")
                    .default_open(true)
                    .show(ui, |ui| out.extend(elastic_ui(ui, params, rt, &spacing)));
                egui::CollapsingHeader::new("Sampling")
                    .default_open(true)
                    .show(ui, |ui| sampling_ui(ui, params));
                // Closed at first unless a filter is on, so that the panel fits a 940-pixel
                // window; the title says what runs.
                egui::CollapsingHeader::new(filter_title(&params.filter))
                    .id_salt("filter section")
                    .default_open(params.filter.enabled)
                    .show(ui, |ui| filter_ui(ui, &mut params.filter, display, rt, nd));
                egui::CollapsingHeader::new("Engine")
                    .default_open(true)
                    .show(ui, |ui| engine_ui(ui, params, rt));
                egui::CollapsingHeader::new("Display")
                    .default_open(true)
                    .show(ui, |ui| out.extend(display_ui(ui, display, rt)));
            });
        });
    out
}

fn preset_ui(
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
fn preview_as_ui(ui: &mut egui::Ui, model: &mut Model) {
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

/// How much slower Shift-drag moves a slider than a plain drag.
const FINE: f64 = 0.1;

/// A linear slider with a fine mode: with Shift held, a drag moves the value a tenth as fast
/// (a plain drag follows the pointer). Arrow keys step a focused slider by its step.
fn fine_slider(
    ui: &mut egui::Ui,
    value: &mut f64,
    range: std::ops::RangeInclusive<f64>,
    build: impl FnOnce(egui::Slider<'_>) -> egui::Slider<'_>,
) -> egui::Response {
    let before = *value;
    let (lo, hi) = (*range.start(), *range.end());
    let width = ui.spacing().slider_width.max(1.0) as f64;
    let r = ui.add(build(egui::Slider::new(value, range)));
    if r.dragged() && ui.input(|i| i.modifiers.shift) {
        let dx = r.drag_delta().x as f64;
        *value = (before + dx * (hi - lo) / width * FINE).clamp(lo.min(before), hi.max(before));
    }
    r
}

/// The spatial unit's name in slider suffixes.
fn unit(space: Space) -> &'static str {
    match space {
        Space::Voxel => "vox",
        Space::Mm => "mm",
    }
}

/// Switches the parameters to `to`, converting translation, sigma and alpha with the scan's
/// spacing so that the picture stays as it is (sigma and alpha exactly for isotropic voxels,
/// with the mean spacing otherwise).
fn switch_space(p: &mut Params, to: Space, spacing: &[f64]) {
    if p.space == to {
        return;
    }
    let nd = spacing.len().clamp(2, 3);
    let sp = |a: usize| spacing.get(a).map_or(1.0, |s| s.abs().max(1e-9));
    let mean = (0..nd).map(sp).sum::<f64>() / nd as f64;
    let f = if to == Space::Mm { mean } else { 1.0 / mean };
    for a in 3 - nd..3 {
        let s = sp(a - (3 - nd));
        p.translate_vox[a] *= if to == Space::Mm { s } else { 1.0 / s };
    }
    p.sigma_vox *= f;
    p.alpha *= f;
    p.space = to;
}

fn transform_ui(
    ui: &mut egui::Ui,
    p: &mut Params,
    rt: &Runtime,
    nd: usize,
    shape: &[usize],
    spacing: &[f64],
) {
    let axes: Vec<usize> = (0..nd).collect();
    ui.horizontal(|ui| {
        ui.label("units");
        let mut to = p.space;
        ui.selectable_value(&mut to, Space::Voxel, "voxels")
            .on_hover_text(
                "translation and elastic sigma/alpha in voxels; rotation on the voxel grid",
            );
        ui.selectable_value(&mut to, Space::Mm, "mm").on_hover_text(
            "translation and elastic sigma/alpha in millimetres; an anisotropic scan \
                 rotates rigidly (space = \"mm\" in presets and the CLI)",
        );
        switch_space(p, to, spacing);
    });
    ui.label("Flip");
    ui.horizontal(|ui| {
        for &a in &axes {
            ui.checkbox(&mut p.flip[a], axis_name(rt, a))
                .on_hover_text(format!("mirror array axis {a}"));
        }
    });
    ui.label("Rotation (degrees)").on_hover_text(
        "Shift-drag for a tenth of the speed; arrow keys on a focused slider step 0.5°",
    );
    // A plan drawn from a preset keeps its exact values: these sliders never round or clamp
    // what they did not edit.
    fn rot(s: egui::Slider<'_>) -> egui::Slider<'_> {
        s.clamping(egui::SliderClamping::Edits)
            .step_by(0.5)
            .max_decimals(2)
            .suffix("°")
    }
    if nd == 3 {
        for a in 0..3 {
            let name = format!("about {}", axis_name(rt, a));
            fine_slider(ui, &mut p.rotate_deg[a], -180.0..=180.0, |s| {
                rot(s).text(name)
            })
            .on_hover_text(format!(
                "rotation about array axis {a}, about the volume centre"
            ));
        }
    } else {
        fine_slider(ui, &mut p.rotate_deg[2], -180.0..=180.0, |s| {
            rot(s).text("in plane")
        })
        .on_hover_text("rotation about the image centre");
    }
    ui.horizontal(|ui| {
        ui.label("Scale");
        ui.checkbox(&mut p.scale_isotropic, "isotropic")
            .on_hover_text(
                "s > 1 samples a larger region: content looks smaller (batchgenerators)",
            );
    });
    if p.scale_isotropic {
        ui.add(
            egui::Slider::new(&mut p.scale[0], 0.5..=2.0)
                .clamping(egui::SliderClamping::Edits)
                .logarithmic(true)
                .max_decimals(3)
                .text("all axes"),
        );
    } else {
        for a in 3 - nd..3 {
            let arr = a - (3 - nd);
            ui.add(
                egui::Slider::new(&mut p.scale[a], 0.5..=2.0)
                    .clamping(egui::SliderClamping::Edits)
                    .logarithmic(true)
                    .max_decimals(3)
                    .text(axis_name(rt, arr)),
            );
        }
    }
    let u = unit(p.space);
    ui.label(format!("Translation ({u}; content moves by −t)"));
    for a in 3 - nd..3 {
        let arr = a - (3 - nd);
        let sp = match p.space {
            Space::Voxel => 1.0,
            Space::Mm => spacing.get(arr).map_or(1.0, |s| s.abs()),
        };
        let half = (shape.get(arr).copied().unwrap_or(64) / 2) as f64 * sp;
        fine_slider(ui, &mut p.translate_vox[a], -half..=half, |s| {
            s.clamping(egui::SliderClamping::Edits)
                .step_by(0.5)
                .max_decimals(2)
                .suffix(format!(" {u}"))
                .text(axis_name(rt, arr))
        })
        .on_hover_text(format!(
            "shift along array axis {arr} in {u}: the content moves by −t (scipy's offset); \
             Shift-drag for fine steps"
        ));
    }
}

fn elastic_ui(ui: &mut egui::Ui, p: &mut Params, rt: &Runtime, spacing: &[f64]) -> Vec<Command> {
    let mut out = vec![];
    ui.checkbox(&mut p.elastic, "enabled").on_hover_text(
        "batchgenerators' elastic deformation: alpha · gaussian_sigma(uniform noise)",
    );
    let u = unit(p.space);
    ui.add_enabled_ui(p.elastic, |ui| {
        fine_slider(ui, &mut p.alpha, 0.0..=2000.0, |s| {
            s.clamping(egui::SliderClamping::Edits)
                .max_decimals(1)
                .suffix(format!(" {u}"))
                .text("alpha")
        })
        .on_hover_text(format!(
            "magnitude: the smoothed noise field (values in −1..1 before smoothing) times alpha, \
             in {u}; the realised displacement is shown below"
        ));
        fine_slider(ui, &mut p.sigma_vox, 1.0..=30.0, |s| {
            s.clamping(egui::SliderClamping::Edits)
                .step_by(0.5)
                .max_decimals(2)
                .suffix(format!(" {u}"))
                .text("sigma")
        })
        .on_hover_text(format!(
            "smoothness: the gaussian's standard deviation in {u}; larger is smoother"
        ));
        ui.horizontal(|ui| {
            let l = ui.label("seed");
            ui.add(egui::DragValue::new(&mut p.seed)).labelled_by(l.id);
            if ui.button("New seed").clicked() {
                out.push(Command::NewSeed);
            }
        });
        let full = rt.full.as_ref().filter(|f| f.generation == rt.generation);
        let readout = full.and_then(|f| f.displacement_vox);
        // Previewing as a library: its own field's displacement.
        let whose = full
            .filter(|f| !f.model.is_own())
            .map_or(String::new(), |f| format!(" ({})", f.model.label()));
        let mean_mm = if spacing.is_empty() {
            1.0
        } else {
            spacing.iter().map(|s| s.abs()).sum::<f64>() / spacing.len() as f64
        };
        // Two lines whether the value is there or still computing, so that nothing below moves
        // (and no click lands on the wrong control) while it is computed.
        let line = ui.text_style_height(&egui::TextStyle::Body);
        let h = 2.0 * line + ui.spacing().item_spacing.y;
        ui.allocate_ui(egui::vec2(ui.available_width(), h), |ui| {
            ui.set_min_height(h);
            match readout {
                Some((max, rms)) => {
                    ui.label(format!(
                        "realised displacement{whose}:\nmax {} vox ({} mm) · RMS {} vox ({} mm)",
                        num2(max),
                        num2(max * mean_mm),
                        num2(rms),
                        num2(rms * mean_mm)
                    ))
                    .on_hover_text(
                        "length of alpha·G_sigma(noise) over the grid; mm with the mean voxel spacing",
                    );
                }
                None if p.elastic => {
                    ui.weak("realised displacement:\ncomputing…");
                }
                None => {}
            }
        });
    });
    out
}

fn sampling_ui(ui: &mut egui::Ui, p: &mut Params) {
    ui.horizontal(|ui| {
        ui.label("order");
        for (o, name) in [
            (Order::Nearest, "0 nearest"),
            (Order::Linear, "1 linear"),
            (Order::Cubic, "3 cubic"),
        ] {
            ui.selectable_value(&mut p.order, o, name);
        }
    });
    ui.horizontal(|ui| {
        let l = ui.label("mode");
        egui::ComboBox::from_id_salt("mode")
            .selected_text(p.mode.name())
            .show_ui(ui, |ui| {
                for m in Mode::ALL {
                    ui.selectable_value(&mut p.mode, m, m.name());
                }
            })
            .response
            .labelled_by(l.id);
        let l = ui.label("cval");
        ui.add(egui::DragValue::new(&mut p.cval).speed(1.0).max_decimals(3))
            .labelled_by(l.id);
    });
}

/// The Filter section's title: what runs, so that it shows while the section is closed.
fn filter_title(f: &FilterParams) -> String {
    if !f.enabled {
        return "Filter (off)".into();
    }
    match f.kind {
        FilterKind::Febds => "Filter: FEBDS overlay".into(),
        k => format!(
            "Filter: {} {}",
            k.label().split(' ').next().unwrap_or(""),
            match f.stage {
                FilterStage::Before => "before",
                FilterStage::After => "after",
            }
        ),
    }
}

/// The filter panel: one intensity filter before or after the spatial transform, or the FEBDS
/// mask drawn over the planes.
fn filter_ui(
    ui: &mut egui::Ui,
    f: &mut FilterParams,
    display: &mut super::Display,
    rt: &Runtime,
    nd: usize,
) {
    let FilterParams {
        enabled,
        kind,
        stage,
        sigma_vox,
        sigma1_vox,
        sigma2_vox,
        median_size,
        gamma,
        contrast,
        brightness,
        febds_method,
        mode,
        cval,
    } = f;
    ui.checkbox(enabled, "filter enabled")
        .on_hover_text("label maps are never filtered");
    ui.add_enabled_ui(*enabled, |ui| {
        ui.horizontal(|ui| {
            let l = ui.label("filter");
            egui::ComboBox::from_id_salt("filter kind")
                .selected_text(kind.label())
                .show_ui(ui, |ui| {
                    for k in FilterKind::ALL {
                        ui.selectable_value(kind, k, k.label());
                    }
                })
                .response
                .labelled_by(l.id);
        });
        let (lo, hi) = rt.scan.as_ref().map_or((0.0, 1.0), |s| s.loaded.range);
        let span = (hi - lo).abs().max(1e-6);
        match kind {
            FilterKind::Gaussian | FilterKind::Log => {
                ui.add(
                    egui::Slider::new(sigma_vox, 0.0..=10.0)
                        .step_by(0.1)
                        .max_decimals(2)
                        .suffix(" vox")
                        .text("filter sigma"),
                );
            }
            FilterKind::Dog => {
                ui.add(
                    egui::Slider::new(sigma1_vox, 0.0..=10.0)
                        .step_by(0.1)
                        .max_decimals(2)
                        .suffix(" vox")
                        .text("sigma 1"),
                );
                ui.add(
                    egui::Slider::new(sigma2_vox, 0.0..=10.0)
                        .step_by(0.1)
                        .max_decimals(2)
                        .suffix(" vox")
                        .text("sigma 2"),
                );
                ui.weak("G(sigma 1) − G(sigma 2)");
            }
            FilterKind::Median => {
                ui.add(
                    egui::Slider::new(median_size, 1..=9)
                        .step_by(2.0)
                        .suffix(" vox")
                        .text("median size"),
                );
                if *median_size % 2 == 0 {
                    *median_size += 1;
                }
                ui.weak(format!(
                    "a {} window",
                    vec![median_size.to_string(); nd.max(1)].join("×")
                ));
            }
            FilterKind::Gamma => {
                ui.add(
                    egui::Slider::new(gamma, 0.2..=5.0)
                        .logarithmic(true)
                        .max_decimals(3)
                        .text("gamma"),
                );
                ui.weak(format!(
                    "scale · (max(x, 0) / scale)^gamma, scale = the scan's maximum ({})",
                    super::format::num(hi as f64)
                ));
            }
            FilterKind::Contrast => {
                ui.add(
                    egui::Slider::new(contrast, 0.1..=10.0)
                        .logarithmic(true)
                        .max_decimals(3)
                        .text("contrast"),
                );
                ui.add(
                    egui::Slider::new(brightness, -span..=span)
                        .max_decimals(3)
                        .text("brightness"),
                );
                ui.weak("contrast · x + brightness");
            }
            FilterKind::Febds => {
                ui.horizontal(|ui| {
                    ui.label("method");
                    for (m, name) in [
                        (crate::filter::FebdsMethod::Dog, "dog"),
                        (crate::filter::FebdsMethod::Log, "log"),
                        (crate::filter::FebdsMethod::Fft, "fft"),
                    ] {
                        ui.selectable_value(febds_method, m, name);
                    }
                });
                ui.add(
                    egui::Slider::new(&mut display.mask_opacity, 0.0..=1.0).text("mask opacity"),
                );
                let (offset, factor) = super::febds_map((lo, hi));
                let map = if (offset, factor) == (0.0, 1.0) {
                    "12-bit values, passed unchanged".to_string()
                } else {
                    format!(
                        "[{}, {}] mapped linearly onto 0..4095",
                        super::format::num(lo as f64),
                        super::format::num(hi as f64)
                    )
                };
                ui.weak(format!(
                    "micro-calcification candidates (medical-image-std FEBDS), drawn over the \
                     image, which stays unfiltered. Computed on each plane on screen{}; \
                     intensities: {map}.",
                    if nd == 3 {
                        " (a 2D method: per displayed plane of the volume)"
                    } else {
                        " (the whole image)"
                    }
                ));
                if let Some(m) = &rt.masks {
                    let n: usize = m
                        .masks
                        .iter()
                        .filter_map(|(_, m)| m.as_ref())
                        .map(|m| m.data.iter().filter(|&&v| v >= 0.5).count())
                        .sum();
                    ui.weak(format!(
                        "{n} mask pixels on screen · {} in {}",
                        m.backend,
                        fmt_ms(rt, m.elapsed_ms)
                    ));
                    if let Some(note) = &m.note {
                        ui.label(RichText::new(note).color(ui.visuals().warn_fg_color));
                    }
                }
            }
        }
        if kind.has_boundary() {
            ui.horizontal(|ui| {
                let l = ui.label("filter mode");
                egui::ComboBox::from_id_salt("filter mode")
                    .selected_text(mode.name())
                    .show_ui(ui, |ui| {
                        // scipy.ndimage's filter modes (wrap = grid-wrap there).
                        for m in [Mode::Reflect, Mode::Constant, Mode::Nearest, Mode::Mirror, Mode::Wrap] {
                            ui.selectable_value(mode, m, m.name());
                        }
                    })
                    .response
                    .labelled_by(l.id);
                if *mode == Mode::Constant {
                    let l = ui.label("cval");
                    ui.add(egui::DragValue::new(cval).speed(0.01 * span).max_decimals(3))
                        .labelled_by(l.id);
                }
            });
        }
        if *kind != FilterKind::Febds {
            ui.horizontal(|ui| {
                ui.label("apply");
                ui.selectable_value(stage, FilterStage::Before, "before the transform")
                    .on_hover_text("filter the scan once; the transform resamples the filtered scan");
                ui.selectable_value(stage, FilterStage::After, "after the transform")
                    .on_hover_text("filter the transformed volume");
            });
            if *stage == FilterStage::After && !kind.pointwise() && nd == 3 {
                ui.weak("after: the filter applies when the slider rests (the planes shown while a slider moves are unfiltered)");
            }
            if nd == 3 && kind.has_boundary() {
                ui.weak("3D filter over the whole volume (sigma and size in voxels on every axis)");
            }
        }
    });
}

fn engine_ui(ui: &mut egui::Ui, p: &mut Params, rt: &Runtime) {
    let n_dev = rt.devices.as_ref().map_or(0, |d| d.devices.len());
    ui.horizontal(|ui| {
        let lb = ui.label("backend");
        egui::ComboBox::from_id_salt("backend")
            .selected_text(p.backend.label())
            .show_ui(ui, |ui| {
                ui.selectable_value(&mut p.backend, BackendChoice::Auto, "auto");
                ui.selectable_value(&mut p.backend, BackendChoice::Cpu, "CPU");
                for i in 0..n_dev.max(1) {
                    ui.selectable_value(
                        &mut p.backend,
                        BackendChoice::Cuda(i),
                        format!("CUDA {i}"),
                    );
                }
            })
            .response
            .labelled_by(lb.id);
        let lp = ui.label("precision");
        egui::ComboBox::from_id_salt("precision")
            .selected_text(format!("{:?}", p.precision).to_lowercase())
            .show_ui(ui, |ui| {
                for pr in [Precision::F32, Precision::F16, Precision::Bf16] {
                    ui.selectable_value(&mut p.precision, pr, format!("{pr:?}").to_lowercase());
                }
            })
            .response
            .labelled_by(lp.id);
    });
    if n_dev == 0
        && let Some(why) = rt.devices.as_ref().and_then(|d| d.unavailable_reason())
    {
        ui.weak(format!("no CUDA: {why}"));
    }
}

fn display_ui(ui: &mut egui::Ui, d: &mut super::Display, rt: &Runtime) -> Vec<Command> {
    let mut out = vec![];
    let (mut level, mut width) = (d.level.unwrap_or(0.5), d.width.unwrap_or(1.0));
    let span = rt.scan.as_ref().map_or(1.0, |s| {
        (s.loaded.auto_window.1 - s.loaded.auto_window.0)
            .abs()
            .max(1.0)
    });
    ui.horizontal(|ui| {
        ui.label("window");
        let a = ui.add(
            egui::DragValue::new(&mut width)
                .speed(span * 0.005)
                .range(1e-6..=f32::MAX)
                .prefix("W "),
        );
        let b = ui.add(
            egui::DragValue::new(&mut level)
                .speed(span * 0.005)
                .prefix("L "),
        );
        if a.changed() || b.changed() {
            out.push(Command::SetWindow { level, width });
        }
        if ui
            .button("Auto")
            .on_hover_text("0.5–99.5 percentile")
            .clicked()
        {
            out.push(Command::AutoWindow);
        }
    });
    if let Some(s) = &rt.scan {
        if let Some(l) =
            super::legend::histogram_ui(ui, &s.loaded.histogram, level, width, d.colormap)
        {
            out.push(Command::SetWindow { level: l, width });
        }
        // CT windows in HU for a CT; percentile windows for every other scan.
        ui.horizontal_wrapped(|ui| {
            for (name, w, l) in &s.loaded.windows {
                if ui
                    .button(name)
                    .on_hover_text(format!("W {w:.5} / L {l:.5}"))
                    .clicked()
                {
                    out.push(Command::SetWindow {
                        level: *l,
                        width: *w,
                    });
                }
            }
        });
        let v = &s.loaded.image;
        if v.channels > 1 && !v.is_colour() {
            let mut f = s.frame;
            let r = ui
                .add(egui::Slider::new(&mut f, 0..=v.channels - 1).text("volume"))
                .on_hover_text("which volume of the 4D scan the views show (all are transformed)");
            if r.changed() {
                out.push(Command::SetFrame(f));
            }
        }
    }
    ui.weak("right-drag on a view: window/level");
    ui.horizontal(|ui| {
        ui.label("colormap");
        ui.selectable_value(&mut d.colormap, Colormap::Gray, "gray");
        ui.selectable_value(&mut d.colormap, Colormap::Viridis, "viridis");
    });
    let has_label = rt.scan.as_ref().is_some_and(|s| s.loaded.label.is_some());
    ui.add_enabled_ui(has_label, |ui| {
        ui.horizontal(|ui| {
            ui.checkbox(&mut d.show_label, "labels");
            ui.add(egui::Slider::new(&mut d.label_opacity, 0.0..=1.0).text("opacity"));
        });
    });
    if let Some(s) = rt.scan.as_ref().filter(|s| !s.loaded.labels.is_empty())
        && d.show_label
    {
        egui::CollapsingHeader::new("label legend")
            .default_open(s.loaded.labels.len() <= 8)
            .show(ui, |ui| super::legend::legend_ui(ui, &s.loaded.labels));
    }
    ui.checkbox(&mut d.side_by_side, "original beside augmented");
    ui.checkbox(&mut d.difference, "difference map |aug − orig|");
    ui.checkbox(&mut d.crosshair, "crosshair");
    ui.add_enabled_ui(!d.follow_order, |ui| {
        ui.checkbox(&mut d.nearest, "voxels as they are (nearest)")
            .on_hover_text(
                "each voxel a flat square instead of bilinear display: tells order 0 from 3",
            );
    });
    ui.checkbox(&mut d.follow_order, "display as the sampling order")
        .on_hover_text("nearest while the order is 0, bilinear otherwise");
    ui.checkbox(&mut d.deformation_grid, "deformation grid")
        .on_hover_text("the scan's voxel grid, every 8 voxels, where the transform moves it");
    ui.checkbox(&mut d.jacobian, "Jacobian")
        .on_hover_text("det of the sampling map, on the CPU engine: blue < 1 < red, yellow folded");
    ui.checkbox(&mut d.control_grid, "TorchIO control grid")
        .on_hover_text("while previewing as TorchIO: its B-spline control points, at rest (grey) and displaced (cyan)");
    out
}

/// Scan facts, the last run's timings, the done list and GPU memory.
pub fn info_panel(ui: &mut egui::Ui, state: &mut State, rt: &Runtime) {
    if state.hide_info_panel {
        return;
    }
    // A fixed width: a long done-list line wraps instead of widening the panel (and moving the
    // views).
    let w = ui.ctx().content_rect().width();
    let width = (0.18 * w).clamp(220.0, 270.0);
    egui::Panel::right("info")
        .resizable(false)
        .exact_size(width)
        .show(ui, |ui| {
            egui::ScrollArea::vertical().show(ui, |ui| {
                // Nothing may widen the panel: long text wraps, file names are cut ("…").
                ui.set_max_width(ui.available_width());
                egui::CollapsingHeader::new("Scan")
                    .default_open(true)
                    .show(ui, |ui| {
                        let Some(s) = &rt.scan else {
                            ui.label("no scan loaded");
                            return;
                        };
                        let v = &s.loaded.image;
                        egui::Grid::new("scan").num_columns(2).max_col_width(0.62 * ui.available_width()).show(ui, |ui| {
                            ui.label("shape");
                            ui.label(format!("{:?}", v.shape));
                            ui.end_row();
                            ui.label("spacing");
                            let sp: Vec<String> = v
                                .spacing_mm
                                .iter()
                                .map(|s| super::format::num(*s))
                                .collect();
                            ui.label(format!("{} mm", sp.join(" × ")));
                            ui.end_row();
                            ui.label("orientation");
                            ui.label(v.axis_codes().iter().collect::<String>());
                            ui.end_row();
                            ui.label("dtype");
                            ui.label(v.dtype.name());
                            ui.end_row();
                            ui.label("label map");
                            let name = s.loaded.label_path.as_ref().map_or("none".into(), |p| {
                                p.file_name()
                                    .map_or(String::new(), |n| n.to_string_lossy().into_owned())
                            });
                            if s.loaded.label_path.is_some() && s.loaded.label.is_none() {
                                // Named but not used (another shape, unreadable): say so here too.
                                ui.add(
                                    egui::Label::new(
                                        RichText::new(format!("{name} (ignored)"))
                                            .color(ui.visuals().warn_fg_color),
                                    )
                                    .truncate(),
                                )
                                .on_hover_text(s.loaded.note.clone().unwrap_or_default());
                            } else {
                                ui.add(egui::Label::new(&name).truncate()).on_hover_text(&name);
                            }
                            ui.end_row();
                        });
                    });
                egui::CollapsingHeader::new("Last run")
                    .default_open(true)
                    .show(ui, |ui| {
                        let Some(f) = &rt.full else {
                            ui.label("—");
                            return;
                        };
                        if let Some(n) = f.filter.as_ref().and_then(|r| r.note.as_ref()) {
                            ui.label(RichText::new(n).color(ui.visuals().warn_fg_color));
                        }
                        let t = &f.timings;
                        egui::Grid::new("timings").num_columns(2).max_col_width(0.62 * ui.available_width()).show(ui, |ui| {
                            for (k, v) in [
                                ("engine", f.backend.clone()),
                                ("field", fmt_ms(rt, t.field_ms)),
                                ("prefilter", fmt_ms(rt, t.prefilter_ms)),
                                ("resample", fmt_ms(rt, t.resample_ms)),
                                ("upload", fmt_ms(rt, t.upload_ms)),
                                ("download", fmt_ms(rt, t.download_ms)),
                                ("total", fmt_ms(rt, t.total_ms)),
                            ] {
                                ui.label(k);
                                ui.label(v);
                                ui.end_row();
                            }
                            if let Some(r) = &f.filter {
                                ui.label(format!("filter {}", r.name));
                                ui.label(format!(
                                    "{}{} on {}",
                                    fmt_ms(rt, r.elapsed_ms),
                                    if r.cached { " (cached)" } else { "" },
                                    r.backend
                                ))
                                .on_hover_text(match r.stage {
                                    FilterStage::Before => "before the transform: the scan is filtered once per filter setting",
                                    FilterStage::After => "after the transform: the transformed volume is filtered",
                                });
                                ui.end_row();
                            }
                            if let Some(ms) = rt.latency.slice_compute_ms {
                                ui.label("slices only");
                                ui.label(fmt_ms(rt, ms));
                                ui.end_row();
                            }
                            if let Some(ms) = rt.latency.last_ms {
                                ui.label("change to view");
                                ui.label(fmt_ms(rt, ms));
                                ui.end_row();
                            }
                        });
                    });
                egui::CollapsingHeader::new("Done list")
                    .default_open(true)
                    .show(ui, |ui| {
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
                                egui::Grid::new("done").num_columns(2).max_col_width(0.62 * ui.available_width()).show(ui, |ui| {
                            for d in done {
                                ui.label(RichText::new(&d.transform).strong());
                                ui.label(super::format::done_line(&d, &spacing))
                                    .on_hover_text(d.values.to_string());
                                ui.end_row();
                            }
                        });
                        model_lines(ui, state, rt);
                    });
                egui::CollapsingHeader::new("GPU memory")
                    .default_open(true)
                    .show(ui, |ui| {
                        gpu_memory_ui(ui, rt);
                    });
            });
        });
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

/// A displacement for display: two decimals at most, trailing zeros trimmed.
fn num2(x: f64) -> String {
    super::format::num((x * 100.0).round() / 100.0)
}

/// Milliseconds for display; hidden in snapshot tests, where they differ from run to run.
pub fn fmt_ms(rt: &Runtime, ms: f64) -> String {
    if rt.hide_timings {
        "– ms".into()
    } else {
        format!("{ms:.1} ms")
    }
}

fn mib(b: usize) -> String {
    format!("{:.0} MiB", b as f64 / (1024.0 * 1024.0))
}

fn gpu_memory_ui(ui: &mut egui::Ui, rt: &Runtime) {
    let Some(d) = &rt.devices else {
        ui.spinner();
        return;
    };
    if d.devices.is_empty() {
        ui.label(
            d.unavailable_reason()
                .unwrap_or_else(|| "no CUDA device".into()),
        );
        ui.weak("the CPU engine computes everything");
        return;
    }
    for dev in &d.devices {
        let live = rt.memory.iter().find(|m| m.ordinal == dev.ordinal);
        let (free, total) = live.map_or((dev.free_bytes, dev.total_bytes), |m| {
            (m.driver_free_bytes, m.driver_total_bytes)
        });
        ui.label(RichText::new(format!("cuda:{} {}", dev.ordinal, dev.name)).strong());
        let used = total.saturating_sub(free);
        ui.add(
            egui::ProgressBar::new(if total > 0 {
                used as f32 / total as f32
            } else {
                0.0
            })
            .text(format!("driver: {} free of {}", mib(free), mib(total))),
        );
        if let Some(m) = live {
            ui.label(format!(
                "augscope: {} reserved, {} in use, peak {}",
                mib(m.reserved_bytes),
                mib(m.allocated_bytes),
                mib(m.peak_bytes)
            ));
        }
    }
}
