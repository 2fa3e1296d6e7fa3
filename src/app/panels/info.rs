//! The information panel on the right: the scan's facts, the last run's timings, the done list
//! and GPU memory.

use eframe::egui::{self, RichText};

use super::fmt_ms;
use crate::app::Runtime;
use crate::app::state::{FilterStage, State};

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
                    .show(ui, |ui| scan_facts(ui, rt));
                egui::CollapsingHeader::new("Last run")
                    .default_open(true)
                    .show(ui, |ui| last_run(ui, rt));
                egui::CollapsingHeader::new("Done list")
                    .default_open(true)
                    .show(ui, |ui| super::done::done_list(ui, state, rt));
                // While something changes the values: intensity steps or a filter.
                let on_screen = crate::app::params_on_screen(state, rt);
                if !on_screen.intensity.is_empty()
                    || on_screen.filter.enabled
                    || on_screen.normalize.is_some()
                {
                    egui::CollapsingHeader::new("Intensity")
                        .default_open(true)
                        .show(ui, |ui| super::histogram::intensity_section(ui, rt));
                }
                egui::CollapsingHeader::new("GPU memory")
                    .default_open(true)
                    .show(ui, |ui| {
                        super::backend::gpu_memory_ui(ui, rt);
                    });
            });
        });
}

/// The Scan section: shape, spacing, orientation, type and label map.
fn scan_facts(ui: &mut egui::Ui, rt: &Runtime) {
    let Some(s) = &rt.scan else {
        ui.label("no scan loaded");
        return;
    };
    let v = &s.loaded.image;
    egui::Grid::new("scan")
        .num_columns(2)
        .max_col_width(0.62 * ui.available_width())
        .show(ui, |ui| {
            if let Some(series) = &s.loaded.series {
                ui.label("series");
                let label = series.label();
                ui.add(egui::Label::new(&label).truncate())
                    .on_hover_text(format!("{label}\nSeriesInstanceUID {}", series.uid));
                ui.end_row();
            }
            ui.label("shape");
            ui.label(format!("{:?}", v.shape));
            ui.end_row();
            ui.label("spacing");
            let sp: Vec<String> = v
                .spacing_mm
                .iter()
                .map(|s| crate::app::format::num(*s))
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
                ui.add(egui::Label::new(&name).truncate())
                    .on_hover_text(&name);
            }
            ui.end_row();
        });
}

/// The Last run section: the engine and the time of each step, the filter's and the slices'.
fn last_run(ui: &mut egui::Ui, rt: &Runtime) {
    let Some(f) = &rt.work.full else {
        ui.label("—");
        return;
    };
    if let Some(n) = f.filter.as_ref().and_then(|r| r.note.as_ref()) {
        ui.label(RichText::new(n).color(ui.visuals().warn_fg_color));
    }
    let t = &f.timings;
    egui::Grid::new("timings")
        .num_columns(2)
        .max_col_width(0.62 * ui.available_width())
        .show(ui, |ui| {
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
                    FilterStage::Before => {
                        "before the transform: the scan is filtered once per filter setting"
                    }
                    FilterStage::After => "after the transform: the transformed volume is filtered",
                });
                ui.end_row();
            }
            if let Some(ms) = rt.work.latency.slice_compute_ms {
                ui.label("slices only");
                ui.label(fmt_ms(rt, ms));
                ui.end_row();
            }
            if let Some(ms) = rt.work.latency.last_ms {
                ui.label("change to view");
                ui.label(fmt_ms(rt, ms));
                ui.end_row();
            }
        });
}
