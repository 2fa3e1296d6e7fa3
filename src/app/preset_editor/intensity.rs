//! The preset editor's Intensity section: the preset's `[[intensity]]` steps in the order they
//! act, each with its probability, its range and its choice of channels, in the units training
//! sees; a step is added from the families' list (with nnU-Net v2's values), moved up or
//! removed. The section checks as the rest of the editor does: through the preset's validation.

use eframe::egui;

use super::{prob, range};
use crate::core::draws::Distribution;
use crate::core::intensity::{
    BlurSpec, BrightnessSpec, ContrastSpec, GammaSpec, IntensitySpec, LowResolutionSpec, NoiseSpec,
};

/// Every family, as added: nnU-Net v2's values (its default pipeline).
fn families() -> Vec<IntensitySpec> {
    vec![
        IntensitySpec::GaussianNoise(NoiseSpec {
            p: 0.1,
            std: [0.0, 0.1],
            p_per_channel: 1.0,
            synchronize_channels: true,
        }),
        IntensitySpec::GaussianBlur(BlurSpec {
            p: 0.2,
            sigma: [0.5, 1.0],
            p_per_channel: 0.5,
            synchronize_channels: false,
            synchronize_axes: false,
        }),
        IntensitySpec::Brightness(BrightnessSpec {
            p: 0.15,
            multiplier: [0.75, 1.25],
            distribution: Distribution::Split,
            p_per_channel: 1.0,
            synchronize_channels: false,
        }),
        IntensitySpec::Contrast(ContrastSpec {
            p: 0.15,
            factor: [0.75, 1.25],
            distribution: Distribution::Split,
            preserve_range: true,
            p_per_channel: 1.0,
            synchronize_channels: false,
        }),
        IntensitySpec::LowResolution(LowResolutionSpec {
            p: 0.25,
            scale: [0.5, 1.0],
            p_per_channel: 0.5,
            synchronize_channels: false,
            synchronize_axes: true,
            ignore_axes: vec![],
        }),
        IntensitySpec::Gamma(GammaSpec {
            p: 0.3,
            gamma: [0.7, 1.5],
            distribution: Distribution::Split,
            p_invert: 0.0,
            p_retain_stats: 1.0,
            p_per_channel: 1.0,
            synchronize_channels: false,
        }),
    ]
}

/// The section, after the spatial transforms and their sampling.
pub fn intensity_section(ui: &mut egui::Ui, steps: &mut Vec<IntensitySpec>) {
    ui.separator();
    ui.label(egui::RichText::new("Intensity").strong())
        .on_hover_text(
            "after the resample, on the image only (never a label map), in this order; each step \
             is batchgeneratorsv2's transform of that name, exact to the library; values in the \
             units training sees (nnU-Net's z-scored image)",
        );
    let (mut remove, mut up) = (None, None);
    for (i, s) in steps.iter_mut().enumerate() {
        ui.push_id(("intensity-step", i), |ui| {
            ui.horizontal(|ui| {
                ui.label(egui::RichText::new(format!("{}. {}", i + 1, s.name())).strong());
                ui.weak(s.batchgenerators_class());
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
    let mut add = None;
    ui.horizontal(|ui| {
        let l = ui.label("add a step");
        egui::ComboBox::from_id_salt("intensity-add")
            .selected_text("family…")
            .show_ui(ui, |ui| {
                for f in families() {
                    if ui
                        .selectable_label(false, f.name())
                        .on_hover_text(f.batchgenerators_class())
                        .clicked()
                    {
                        add = Some(f);
                    }
                }
            })
            .response
            .labelled_by(l.id);
    });
    if let Some(f) = add {
        steps.push(f);
    }
}

/// The fields of one step.
fn step_body(ui: &mut egui::Ui, s: &mut IntensitySpec) {
    match s {
        IntensitySpec::GaussianNoise(n) => {
            prob(ui, "p", &mut n.p);
            range(ui, "std", &mut n.std, 0.005, "");
            channels(ui, &mut n.p_per_channel, &mut n.synchronize_channels);
        }
        IntensitySpec::GaussianBlur(b) => {
            prob(ui, "p", &mut b.p);
            range(ui, "sigma", &mut b.sigma, 0.01, " vox");
            channels(ui, &mut b.p_per_channel, &mut b.synchronize_channels);
            ui.checkbox(&mut b.synchronize_axes, "one sigma for every axis");
        }
        IntensitySpec::Brightness(b) => {
            prob(ui, "p", &mut b.p);
            range(ui, "multiplier", &mut b.multiplier, 0.01, "");
            distribution(ui, &mut b.distribution);
            channels(ui, &mut b.p_per_channel, &mut b.synchronize_channels);
        }
        IntensitySpec::Contrast(c) => {
            prob(ui, "p", &mut c.p);
            range(ui, "factor", &mut c.factor, 0.01, "");
            distribution(ui, &mut c.distribution);
            ui.checkbox(&mut c.preserve_range, "clip to the channel's range");
            channels(ui, &mut c.p_per_channel, &mut c.synchronize_channels);
        }
        IntensitySpec::LowResolution(l) => {
            prob(ui, "p", &mut l.p);
            range(ui, "scale", &mut l.scale, 0.01, "");
            channels(ui, &mut l.p_per_channel, &mut l.synchronize_channels);
            ui.checkbox(&mut l.synchronize_axes, "one factor for every axis");
        }
        IntensitySpec::Gamma(g) => {
            prob(ui, "p", &mut g.p);
            range(ui, "gamma", &mut g.gamma, 0.01, "");
            distribution(ui, &mut g.distribution);
            prob(ui, "p invert", &mut g.p_invert);
            prob(ui, "p retain stats", &mut g.p_retain_stats);
            channels(ui, &mut g.p_per_channel, &mut g.synchronize_channels);
        }
    }
}

/// `p_per_channel` and `synchronize_channels`.
fn channels(ui: &mut egui::Ui, p: &mut f64, sync: &mut bool) {
    prob(ui, "p per channel", p);
    ui.checkbox(sync, "one value for every channel");
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
