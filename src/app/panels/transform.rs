//! The Spatial transform, Elastic deformation and Sampling sections of the controls: flip,
//! rotation, scale and translation in voxels or mm, the elastic field with its realised
//! displacement, and the interpolation order and boundary mode.

use eframe::egui;

use crate::app::state::Params;
use crate::app::{Command, Runtime};
use crate::augment::{Mode, Order, Space};
use crate::core::intensity::{DrawFor, Field, IntensitySpec, IntensityStep};

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

pub(super) fn transform_ui(
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

pub(super) fn elastic_ui(
    ui: &mut egui::Ui,
    p: &mut Params,
    rt: &Runtime,
    spacing: &[f64],
) -> Vec<Command> {
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
        let full = rt
            .work
            .full
            .as_ref()
            .filter(|f| f.generation == rt.work.generation);
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
            // The engines give the readout in the plan's own unit (mm in mm space); the other
            // unit is an estimate through the mean voxel size.
            let (unit, other, to_other) = match p.space {
                Space::Mm => ("mm", "vox", 1.0 / mean_mm),
                Space::Voxel => ("vox", "mm", mean_mm),
            };
            match readout {
                Some((max, rms)) => {
                    ui.label(format!(
                        "realised displacement{whose}:\nmax {} {unit} (≈ {} {other}) · RMS {} \
                         {unit} (≈ {} {other})",
                        num2(max),
                        num2(max * to_other),
                        num2(rms),
                        num2(rms * to_other)
                    ))
                    .on_hover_text(format!(
                        "length of alpha·G_sigma(noise) over the grid, in {unit}; the {other} \
                         figure goes through the mean voxel size"
                    ));
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

pub(super) fn sampling_ui(ui: &mut egui::Ui, p: &mut Params) {
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

/// The Intensity section's title: what it holds.
pub(super) fn intensity_title(p: &Params) -> String {
    let mut parts = vec![];
    if p.normalize.is_some() {
        parts.push("normalised".to_string());
    }
    match p.intensity.len() {
        0 => {}
        1 => parts.push("1 step".into()),
        n => parts.push(format!("{n} steps")),
    }
    if parts.is_empty() {
        "Intensity".into()
    } else {
        format!("Intensity ({})", parts.join(", "))
    }
}

/// The normalisation of the scan (the units everything after it acts in) and the intensity
/// steps of the parameters (a preset sample's, or added here), in the order they act after the
/// resample: each with its library, its value controls where one value per field fixes it (the
/// direct mode: the family's preset section with ranges of one value, drawn again on each
/// change), else its drawn values, and a button that removes it.
pub(super) fn intensity_ui(ui: &mut egui::Ui, p: &mut Params, img: &DrawFor<'_>) {
    normalize_ui(ui, p);
    if p.intensity.is_empty() {
        ui.weak(
            "no steps: add one below, or \"Sample from preset\" brings a preset's with their \
             drawn values",
        );
    } else {
        ui.weak("steps after the resample, on the image only");
    }
    let mut remove = None;
    let seed = p.seed;
    for (i, step) in p.intensity.iter_mut().enumerate() {
        ui.push_id(("direct-step", i), |ui| {
            ui.horizontal_wrapped(|ui| {
                if ui
                    .small_button("x")
                    .on_hover_text("remove this step")
                    .clicked()
                {
                    remove = Some(i);
                }
                ui.strong(step.name()).on_hover_text(format!(
                    "{}'s {}",
                    step.library().label(),
                    step.class()
                ));
            });
            ui.indent("direct-step-body", |ui| {
                step_values_ui(ui, step, seed, i, img)
            });
        });
    }
    if let Some(i) = remove {
        p.intensity.remove(i);
    }
    let add = crate::app::preset_editor::family_picker(ui, "direct-intensity-add");
    if let Some(f) = add {
        let k = p.intensity.len();
        if let Some(step) = draw_fired(f, seed, k, img) {
            p.intensity.push(step);
        }
    }
    if !p.intensity.is_empty() && ui.button("remove all").clicked() {
        p.intensity.clear();
    }
}

/// The normalisation's choice: none, or a method without settings (a preset's own, with its
/// settings, stays selectable while chosen).
fn normalize_ui(ui: &mut egui::Ui, p: &mut Params) {
    use crate::core::intensity::{NoSettings, Normalize, RescaleSettings, ZscoreSettings};
    let mut choices = vec![
        None,
        Some(Normalize::NnunetZscore(ZscoreSettings::default())),
        Some(Normalize::NnunetZscore(ZscoreSettings {
            use_mask_for_norm: true,
        })),
        Some(Normalize::TorchioZNormalization(NoSettings {})),
        Some(Normalize::TorchioRescaleIntensity(RescaleSettings {
            out_min_max: [0.0, 1.0],
            percentiles: [0.0, 100.0],
        })),
    ];
    if !choices.contains(&p.normalize) {
        choices.push(p.normalize.clone());
    }
    let name = |n: &Option<Normalize>| match n {
        None => "none (the scan's own units)".to_string(),
        Some(Normalize::NnunetZscore(z)) if z.use_mask_for_norm => {
            "nnunet_zscore, nonzero mask (ZScoreNormalization)".to_string()
        }
        Some(n) => format!("{} ({})", n.name(), n.class()),
    };
    ui.horizontal(|ui| {
        let l = ui.label("normalise");
        egui::ComboBox::from_id_salt("normalize")
            .selected_text(name(&p.normalize))
            .width(170.0)
            .show_ui(ui, |ui| {
                for c in choices {
                    let label = name(&c);
                    ui.selectable_value(&mut p.normalize, c, label);
                }
            })
            .response
            .labelled_by(l.id)
            .on_hover_text(
                "the scan in a training pipeline's units, before the transform (a preset's \
                 [normalize] sets it; its settings are the preset's)",
            );
    });
    if let Some(n) = &p.normalize {
        ui.weak(format!("values: {}", n.units()));
    }
}

/// One step's values: one control per field where the family's section can fix them (drawn
/// again from the step's stream on each change), else the drawn values as text.
fn step_values_ui(
    ui: &mut egui::Ui,
    step: &mut IntensityStep,
    seed: u64,
    k: usize,
    img: &DrawFor<'_>,
) {
    let values = serde_json::to_value(&*step)
        .ok()
        .and_then(|v| v.get(step.name()).cloned())
        .unwrap_or_default();
    let Some(mut spec) = IntensitySpec::fixed(step) else {
        ui.label(crate::app::format::short(&values))
            .on_hover_text("values drawn per channel or with a noise field: as drawn");
        return;
    };
    let mut changed = false;
    for f in spec.fields() {
        changed |= match f {
            // The step fires: a direct value has no probability.
            Field::Prob(..) | Field::Distribution(_) => false,
            Field::Range(label, r, speed, unit) => {
                ui.horizontal(|ui| {
                    let l = ui.label(label);
                    let c = ui
                        .add(egui::DragValue::new(&mut r[0]).speed(speed).suffix(unit))
                        .labelled_by(l.id)
                        .changed();
                    r[1] = r[0];
                    c
                })
                .inner
            }
            Field::Number(label, v, speed, unit) => {
                ui.horizontal(|ui| {
                    let l = ui.label(label);
                    ui.add(egui::DragValue::new(v).speed(speed).suffix(unit))
                        .labelled_by(l.id)
                        .changed()
                })
                .inner
            }
            Field::Flag(label, v) => ui.checkbox(v, label).changed(),
            Field::Count(label, v, max) => {
                ui.horizontal(|ui| {
                    let l = ui.label(label);
                    ui.add(egui::DragValue::new(v).range(0..=max))
                        .labelled_by(l.id)
                        .changed()
                })
                .inner
            }
        };
    }
    if !changed {
        return;
    }
    match spec.validate() {
        Ok(()) => {
            if let Some(s) = draw_fired(spec, seed, k, img) {
                *step = s;
            }
        }
        Err(why) => {
            ui.colored_label(ui.visuals().error_fg_color, why);
        }
    }
}

/// The step `spec` draws from step `k`'s stream of `seed`, made to fire on every channel (its
/// `p` and `p per channel` 1; gamma's inversion and retained statistics keep their chances).
fn draw_fired(
    mut spec: IntensitySpec,
    seed: u64,
    k: usize,
    img: &DrawFor<'_>,
) -> Option<IntensityStep> {
    for f in spec.fields() {
        if let Field::Prob("p" | "p per channel", p) = f {
            *p = 1.0;
        }
    }
    let mut rng = crate::core::draws::SplitMix64::new(seed, 64 + k as u64);
    spec.sample(&mut rng, img).0
}

/// A displacement for display: two decimals at most, trailing zeros trimmed.
fn num2(x: f64) -> String {
    crate::app::format::num((x * 100.0).round() / 100.0)
}
