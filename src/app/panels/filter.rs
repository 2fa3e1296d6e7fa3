//! The Filter section of the controls: one intensity filter (gaussian, DoG, LoG, median, gamma,
//! contrast) before or after the spatial transform, or the FEBDS mask drawn over the planes.

use eframe::egui::{self, RichText};

use super::fmt_ms;
use crate::app::Runtime;
use crate::app::state::{Display, FilterKind, FilterParams, FilterStage};
use crate::augment::Mode;
use crate::filter::FebdsMethod;

/// The Filter section's title: what runs, so that it shows while the section is closed.
pub(super) fn filter_title(f: &FilterParams) -> String {
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
pub(super) fn filter_ui(
    ui: &mut egui::Ui,
    f: &mut FilterParams,
    display: &mut Display,
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
                    crate::app::format::num(hi as f64)
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
            FilterKind::Febds => febds_ui(ui, febds_method, display, rt, nd, (lo, hi)),
        }
        boundary_and_stage_ui(ui, kind, stage, mode, cval, nd, span);
    });
}

/// The FEBDS settings: its method, the mask's opacity, how the scan's intensities are mapped to
/// 12 bits, and what the masks on screen came to.
fn febds_ui(
    ui: &mut egui::Ui,
    febds_method: &mut FebdsMethod,
    display: &mut Display,
    rt: &Runtime,
    nd: usize,
    (lo, hi): (f32, f32),
) {
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
    ui.add(egui::Slider::new(&mut display.mask_opacity, 0.0..=1.0).text("mask opacity"));
    let (offset, factor) = crate::app::febds_map((lo, hi));
    let map = if (offset, factor) == (0.0, 1.0) {
        "12-bit values, passed unchanged".to_string()
    } else {
        format!(
            "[{}, {}] mapped linearly onto 0..4095",
            crate::app::format::num(lo as f64),
            crate::app::format::num(hi as f64)
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
    if let Some(m) = &rt.febds.masks {
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

/// The boundary mode of the filters that have one, and whether the filter runs before or after
/// the transform.
fn boundary_and_stage_ui(
    ui: &mut egui::Ui,
    kind: &FilterKind,
    stage: &mut FilterStage,
    mode: &mut Mode,
    cval: &mut f32,
    nd: usize,
    span: f32,
) {
    if kind.has_boundary() {
        ui.horizontal(|ui| {
            let l = ui.label("filter mode");
            egui::ComboBox::from_id_salt("filter mode")
                .selected_text(mode.name())
                .show_ui(ui, |ui| {
                    // scipy.ndimage's filter modes (wrap = grid-wrap there).
                    for m in [
                        Mode::Reflect,
                        Mode::Constant,
                        Mode::Nearest,
                        Mode::Mirror,
                        Mode::Wrap,
                    ] {
                        ui.selectable_value(mode, m, m.name());
                    }
                })
                .response
                .labelled_by(l.id);
            if *mode == Mode::Constant {
                let l = ui.label("cval");
                ui.add(
                    egui::DragValue::new(cval)
                        .speed(0.01 * span)
                        .max_decimals(3),
                )
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
}
