//! The Display section of the controls: window and level with the histogram, the frame of a 4D
//! scan, colormap, labels, and the toggles of the views and their overlays.

use eframe::egui;

use crate::app::state::{Colormap, Display};
use crate::app::{Command, Runtime};

pub(super) fn display_ui(ui: &mut egui::Ui, d: &mut Display, rt: &Runtime) -> Vec<Command> {
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
            crate::app::legend::histogram_ui(ui, &s.loaded.histogram, level, width, d.colormap)
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
            .show(ui, |ui| crate::app::legend::legend_ui(ui, &s.loaded.labels));
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
