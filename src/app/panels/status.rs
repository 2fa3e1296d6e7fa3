//! The status bar: the scan, what the engine is doing and how far it is, and the voxel under
//! the pointer.

use eframe::egui::{self, RichText};

use super::fmt_ms;
use crate::app::Runtime;
use crate::app::state::State;

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
                    .work
                    .full
                    .as_ref()
                    .is_none_or(|f| f.generation != rt.work.generation);
                if busy {
                    ui.spinner();
                    let progress = rt
                        .work
                        .progress
                        .filter(|p| p.generation == rt.work.generation);
                    let elapsed = rt
                        .work
                        .work_started
                        .filter(|(g, _)| *g == rt.work.generation)
                        .map_or(0.0, |(_, t)| t.elapsed().as_secs_f64());
                    match progress {
                        Some(p) if rt.work.filling == Some(rt.work.generation) => {
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
                            let what = if rt.work.filling == Some(rt.work.generation) {
                                "filling in the whole volume…"
                            } else {
                                "computing…"
                            };
                            // Work past half a second says how long it has run.
                            if elapsed > 0.5 && !rt.capture.hide_timings {
                                ui.label(format!("{what} {}", secs(elapsed)));
                            } else {
                                ui.label(what);
                            }
                        }
                    }
                    ui.ctx()
                        .request_repaint_after(std::time::Duration::from_millis(200));
                } else if let Some(f) = &rt.work.full {
                    ui.label(format!(
                        "{} in {} on {}",
                        "transform",
                        fmt_ms(rt, f.timings.total_ms),
                        f.backend
                    ));
                }
                ui.separator();
                match &rt.views.hover {
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
pub fn readout(v: &crate::core::volume::Volume, h: &crate::app::Hover) -> String {
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
