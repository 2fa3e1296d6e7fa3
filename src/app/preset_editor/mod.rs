//! The preset editor: every transform of the preset in use with its probability and ranges (per
//! axis where the preset has them), in the units of the preset file (degrees, voxels or mm, the
//! scale factor; elastic alpha and sigma with the RMS displacement they give). It edits
//! `State::draft`, so edits are undone like the sliders; it validates as it goes with the rules
//! and messages of loading a TOML file ([`Preset::validate`], [`Preset::check_ndim`]).

mod intensity;

pub use intensity::family_picker;

use std::sync::mpsc::{Receiver, Sender, channel};

use eframe::egui;

use super::{Command, Runtime, State};
use crate::augment::Mode;
use crate::augment::Space;
use crate::augment::preset::{
    ElasticSpec, FlipSpec, Preset, Range, RotateSpec, ScaleDistribution, ScaleSpec, TranslateSpec,
    Unit,
};
use crate::augment::{Elastic, Plan};
use crate::engine::Backend;
use crate::engine::cpu::CpuBackend;
use crate::export::interop::elastic_rms_vox;

/// The editor window (not persisted).
#[derive(Debug, Default)]
pub struct EditorRuntime {
    pub open: bool,
    /// The preset as last loaded or saved: the draft differs from it when it has unsaved edits.
    pub baseline: Option<Preset>,
    /// The realised displacement of the weakest and strongest elastic setting on the open scan.
    pub realised: Realised,
}

/// One elastic setting on the open scan: the plan of that elastic alone, and the scan's shape.
pub type RealisedKey = (Plan, Vec<usize>);

/// The realised displacement (max, RMS; voxels) of elastic settings on the open scan, measured
/// on a thread of its own with the CPU engine as the main views' readout does (the plan's unit
/// field, `displacement_stats(alpha)`), one field kept per setting (by sigma, seed and shape).
#[derive(Default)]
pub struct Realised {
    tx: Option<Sender<Vec<RealisedKey>>>,
    rx: Option<Receiver<(RealisedKey, (f64, f64))>>,
    asked: Vec<RealisedKey>,
    /// Figures measured so far (the newest last; a few kept).
    pub measured: Vec<(RealisedKey, (f64, f64))>,
}

impl std::fmt::Debug for Realised {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Realised")
            .field("asked", &self.asked.len())
            .field("measured", &self.measured.len())
            .finish()
    }
}

/// Figures kept before the oldest go.
const REALISED_KEPT: usize = 16;

impl Realised {
    /// The figure of `key`, once measured.
    pub fn get(&self, key: &RealisedKey) -> Option<(f64, f64)> {
        self.measured
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| *v)
    }

    /// Takes the thread's figures, and asks for those of `keys` not measured yet.
    fn ask(&mut self, keys: &[RealisedKey], ctx: &egui::Context) {
        if let Some(rx) = &self.rx {
            while let Ok(m) = rx.try_recv() {
                self.measured.push(m);
            }
            let extra = self.measured.len().saturating_sub(REALISED_KEPT);
            self.measured.drain(..extra);
        }
        let missing: Vec<RealisedKey> = keys
            .iter()
            .filter(|k| self.get(k).is_none())
            .cloned()
            .collect();
        // A setting asked for and still measuring is not asked again.
        if missing.iter().all(|k| self.asked.contains(k)) {
            return;
        }
        if self.tx.is_none() {
            let (tx, jobs) = channel::<Vec<RealisedKey>>();
            let (out, rx) = channel();
            let ctx = ctx.clone();
            let spawned = std::thread::Builder::new()
                .name("augscope-realised".into())
                .spawn(move || measure(&jobs, &out, &|| ctx.request_repaint()));
            if spawned.is_err() {
                return;
            }
            self.tx = Some(tx);
            self.rx = Some(rx);
        }
        if let Some(tx) = &self.tx {
            // The thread ends when this sender goes.
            let _ = tx.send(missing.clone());
            self.asked = missing;
        }
    }
}

/// The thread: the newest list of settings wins (checked between settings). Setting i of a list
/// uses engine `min(i, 1)`, whose cache keeps its unit field while only alpha changes.
fn measure(
    jobs: &Receiver<Vec<RealisedKey>>,
    out: &Sender<(RealisedKey, (f64, f64))>,
    repaint: &dyn Fn(),
) {
    let engines = [CpuBackend::default(), CpuBackend::default()];
    let mut next: Option<Vec<RealisedKey>> = None;
    loop {
        let mut job = match next.take() {
            Some(j) => j,
            None => match jobs.recv() {
                Ok(j) => j,
                Err(_) => return,
            },
        };
        while let Ok(j) = jobs.try_recv() {
            job = j;
        }
        for (i, key) in job.into_iter().enumerate() {
            let stats = realised_stats(&engines[i.min(1)], &key.0, &key.1);
            if out.send((key, stats)).is_err() {
                return;
            }
            repaint();
            if let Ok(j) = jobs.try_recv() {
                next = Some(j);
                break;
            }
        }
    }
}

/// The realised displacement (max, RMS) of a plan's elastic field on `shape`, as the main views'
/// readout ([`Backend::displacement_stats`]); (0, 0) without a field (alpha 0).
pub fn realised_stats(engine: &dyn Backend, plan: &Plan, shape: &[usize]) -> (f64, f64) {
    engine
        .displacement_stats(plan, shape)
        .ok()
        .flatten()
        .unwrap_or((0.0, 0.0))
}

/// The weakest (alpha lo, sigma hi) and strongest (alpha hi, sigma lo) elastic settings of
/// `p` on a scan of `shape` and `spacing_mm`, with the elastic noise of `seed`.
pub fn realised_keys(
    p: &Preset,
    seed: u64,
    shape: &[usize],
    spacing_mm: &[f64],
) -> Option<[RealisedKey; 2]> {
    let e = p.elastic.as_ref()?;
    let plan = |alpha: f64, sigma: f64| Plan {
        elastic: Some(Elastic {
            alpha,
            sigma: sigma.max(1e-3),
            seed,
        }),
        space: p.space,
        spacing_mm: if p.space == Space::Mm {
            spacing_mm.to_vec()
        } else {
            vec![]
        },
        ..Plan::default()
    };
    Some([
        (plan(e.alpha[0], e.sigma[1]), shape.to_vec()),
        (plan(e.alpha[1], e.sigma[0]), shape.to_vec()),
    ])
}

/// The line the editor shows for one measured setting: voxels, and mm (with the mean voxel
/// spacing, as the main readout) in mm space.
pub fn realised_text(which: &str, stats: Option<(f64, f64)>, mean_mm: Option<f64>) -> String {
    let f = super::format::num;
    match stats {
        None => format!("realised length ({which}): measuring…"),
        Some((max, rms)) => match mean_mm {
            Some(mm) => format!(
                "realised length ({which}): max {} vox ({} mm) RMS {} vox ({} mm)",
                f(max),
                f(max * mm),
                f(rms),
                f(rms * mm)
            ),
            None => format!(
                "realised length ({which}): max {} RMS {} vox",
                f(max),
                f(rms)
            ),
        },
    }
}

/// What the editor shows of the realised displacement: the two lines, once a scan is open.
type RealisedLines = Option<[String; 2]>;

impl EditorRuntime {
    /// Whether the draft holds edits that are not in a file.
    pub fn unsaved(&self, state: &State) -> bool {
        self.unsaved_draft(state.draft.as_ref())
    }

    pub fn unsaved_draft(&self, draft: Option<&Preset>) -> bool {
        draft.is_some() && draft != self.baseline.as_ref()
    }
}

/// Whether two presets draw the same transforms (name, description and source aside).
pub fn same_transforms(a: &Preset, b: &Preset) -> bool {
    let bare = |p: &Preset| Preset {
        name: String::new(),
        description: String::new(),
        source: String::new(),
        ..p.clone()
    };
    bare(a) == bare(b)
}

/// Once `draft` draws other transforms than `base` (the preset it was opened from) while still
/// carrying `base`'s description and source, those are no longer true: the description is
/// prefixed `Derived from FROM: ` and the source becomes `edited in augscope from SOURCE`. A
/// description or source the user typed is kept, and a preset augscope wrote (its source says
/// so) is the user's own: it is not marked again.
pub fn mark_derived(draft: &mut Preset, base: &Preset, from: &str) {
    let own = base.source.starts_with("augscope") || base.source.starts_with("edited in augscope");
    if own
        || same_transforms(draft, base)
        || draft.description != base.description
        || draft.source != base.source
    {
        return;
    }
    let from = if from.is_empty() { &base.name } else { from };
    draft.description = if base.description.is_empty() {
        format!("Derived from {from}")
    } else {
        format!("Derived from {from}: {}", base.description)
    };
    draft.source = if base.source.is_empty() {
        format!("edited in augscope from {from}")
    } else {
        format!("edited in augscope from {}", base.source)
    };
}

/// A preset centred on the parameters on screen: every transform that acts fires (p = 1) with a
/// range around its value: ±10° per angle, ±0.1 on the scale, ±2 voxels of translation, ±25 % of
/// alpha and ±10 % of sigma; flips stay as they are.
pub fn centred_on(state: &State, ndim: usize) -> Preset {
    let mut p = super::export::preset_from_params(&state.params, ndim);
    let around = |r: &mut Range, w: f64| *r = [r[0] - w, r[1] + w];
    if let Some(r) = &mut p.rotate {
        for g in &mut r.range_deg {
            around(g, 10.0);
        }
    }
    if let Some(s) = &mut p.scale {
        for g in &mut s.range {
            around(g, 0.1);
            g[0] = g[0].max(0.05);
        }
    }
    if let Some(t) = &mut p.translate {
        for g in &mut t.range {
            around(g, 2.0);
        }
    }
    if let Some(e) = &mut p.elastic {
        let (a, s) = (e.alpha[0], e.sigma[0]);
        e.alpha = [0.75 * a, 1.25 * a];
        e.sigma = [0.9 * s, 1.1 * s];
    }
    p.name = "centred on the current plan".into();
    p.source = "augscope explorer".into();
    p.description.clear();
    p
}

fn axis_names(ndim: usize) -> &'static [&'static str] {
    if ndim == 3 {
        &["axis 0", "axis 1", "axis 2"]
    } else {
        &["axis 0", "axis 1"]
    }
}

/// A probability slider.
fn prob(ui: &mut egui::Ui, label: &str, p: &mut f64) {
    ui.horizontal(|ui| {
        let l = ui.label(label);
        ui.add(egui::Slider::new(p, 0.0..=1.0).fixed_decimals(2))
            .labelled_by(l.id);
    });
}

/// A `[lo, hi]` range as two drag values with a unit.
fn range(ui: &mut egui::Ui, label: &str, r: &mut Range, speed: f64, unit: &str) {
    ui.horizontal(|ui| {
        let l = ui.label(label);
        ui.add(
            egui::DragValue::new(&mut r[0])
                .speed(speed)
                .suffix(unit)
                .max_decimals(4),
        )
        .labelled_by(l.id);
        let to = ui.label("to");
        ui.add(
            egui::DragValue::new(&mut r[1])
                .speed(speed)
                .suffix(unit)
                .max_decimals(4),
        )
        .labelled_by(to.id)
        .on_hover_text(format!("{label}: upper end"));
    });
}

/// A per-axis list (one entry for every axis, or one per axis) with a "per axis" switch.
fn per_axis<T: Clone>(
    ui: &mut egui::Ui,
    id: &str,
    v: &mut Vec<T>,
    ndim: usize,
    mut edit: impl FnMut(&mut egui::Ui, &str, &mut T),
) {
    let mut split = v.len() > 1;
    if ui
        .checkbox(&mut split, "per axis")
        .on_hover_text(format!("{id}: one value for every axis, or one per axis"))
        .changed()
    {
        if split {
            let first = v[0].clone();
            *v = vec![first; ndim];
        } else {
            v.truncate(1);
        }
    }
    if v.len() > 1 {
        for (a, item) in v.iter_mut().enumerate().take(ndim) {
            edit(ui, axis_names(ndim)[a], item);
        }
    } else if let Some(item) = v.first_mut() {
        edit(ui, "all axes", item);
    }
}

/// The enable switch of one transform: `Some` while ticked.
fn section<T>(
    ui: &mut egui::Ui,
    title: &str,
    spec: &mut Option<T>,
    default: impl FnOnce() -> T,
    body: impl FnOnce(&mut egui::Ui, &mut T),
) {
    let mut on = spec.is_some();
    if ui
        .checkbox(&mut on, egui::RichText::new(title).strong())
        .changed()
    {
        *spec = if on { Some(default()) } else { None };
    }
    if let Some(s) = spec {
        ui.indent(title, |ui| body(ui, s));
    }
}

/// The editor's fields of `p`, family by family, with the values a draw realised beside them.
/// A sentence on its length: egui lays the window out as it runs, so the function is the window
/// from top to bottom; the parts with logic of their own are functions beside it.
fn editor_body(ui: &mut egui::Ui, p: &mut Preset, ndim: usize, realised: &RealisedLines) {
    egui::Grid::new("preset-meta")
        .num_columns(2)
        .show(ui, |ui| {
            // Ids of their own: a line that comes or goes above them keeps the focus and the
            // cursor of the field being typed in.
            let l = ui.label("name");
            ui.add(egui::TextEdit::singleline(&mut p.name).id_salt("preset-name"))
                .labelled_by(l.id);
            ui.end_row();
            let l = ui.label("description");
            ui.add(
                egui::TextEdit::multiline(&mut p.description)
                    .id_salt("preset-description")
                    .desired_rows(2),
            )
            .labelled_by(l.id);
            ui.end_row();
            let l = ui.label("source");
            ui.add(
                egui::TextEdit::multiline(&mut p.source)
                    .id_salt("preset-source")
                    .desired_rows(1),
            )
            .labelled_by(l.id)
            .on_hover_text("where the preset's values come from (written to the TOML and the header of every exported file)");
            ui.end_row();
            let l = ui.label("space");
            egui::ComboBox::from_id_salt("preset-space")
                .selected_text(match p.space {
                    Space::Voxel => "voxel",
                    Space::Mm => "mm",
                })
                .show_ui(ui, |ui| {
                    ui.selectable_value(&mut p.space, Space::Voxel, "voxel")
                        .on_hover_text("rotation, translation and elastic act on array indices");
                    ui.selectable_value(&mut p.space, Space::Mm, "mm")
                        .on_hover_text("they act in millimetres (the scan's spacing)");
                })
                .response
                .labelled_by(l.id);
            ui.end_row();
        });
    let len_unit = if p.space == Space::Mm { " mm" } else { " vox" };
    ui.separator();
    section(
        ui,
        "Flip",
        &mut p.flip,
        || FlipSpec {
            p: vec![0.5],
            after_intensity: false,
        },
        |ui, f| per_axis(ui, "flip p", &mut f.p, ndim, prob),
    );
    section(
        ui,
        "Rotate",
        &mut p.rotate,
        || RotateSpec {
            p: 1.0,
            p_axis: vec![1.0],
            range_deg: vec![[-15.0, 15.0]],
            range_deg_2d: None,
        },
        |ui, r| {
            prob(ui, "p", &mut r.p);
            if ndim == 3 {
                ui.label("probability that an axis turns once the rotation fires");
                per_axis(ui, "rotate p_axis", &mut r.p_axis, 3, prob);
                ui.label("angles (degrees)");
                per_axis(ui, "rotate range", &mut r.range_deg, 3, |ui, n, g| {
                    range(ui, n, g, 0.5, "°")
                });
            } else {
                let g = r.range_deg_2d.get_or_insert(r.range_deg[0]);
                range(ui, "angle", g, 0.5, "°");
            }
        },
    );
    section(
        ui,
        "Scale",
        &mut p.scale,
        || ScaleSpec {
            p: 1.0,
            range: vec![[0.9, 1.1]],
            per_axis: false,
            distribution: ScaleDistribution::Uniform,
        },
        |ui, s| {
            prob(ui, "p", &mut s.p);
            ui.checkbox(&mut s.per_axis, "a factor per axis (else one for all)");
            if !s.per_axis && s.range.len() > 1 {
                s.range.truncate(1);
            }
            ui.label("factor (> 1 samples a larger region: content smaller)");
            if s.per_axis {
                per_axis(ui, "scale range", &mut s.range, ndim, |ui, n, g| {
                    range(ui, n, g, 0.01, "×")
                });
            } else {
                range(ui, "all axes", &mut s.range[0], 0.01, "×");
            }
            ui.horizontal(|ui| {
                ui.radio_value(&mut s.distribution, ScaleDistribution::Uniform, "uniform");
                ui.radio_value(&mut s.distribution, ScaleDistribution::Split, "split")
                    .on_hover_text("below and above 1 with equal chance, as batchgenerators");
            });
        },
    );
    section(
        ui,
        "Translate",
        &mut p.translate,
        || TranslateSpec {
            p: 1.0,
            range: vec![[-2.0, 2.0]],
            unit: Unit::Voxel,
        },
        |ui, t| {
            prob(ui, "p", &mut t.p);
            ui.horizontal(|ui| {
                ui.label("unit");
                ui.radio_value(&mut t.unit, Unit::Voxel, "voxels");
                ui.radio_value(&mut t.unit, Unit::Mm, "mm");
            });
            let unit = if t.unit == Unit::Mm { " mm" } else { " vox" };
            per_axis(ui, "translate range", &mut t.range, ndim, |ui, n, g| {
                range(ui, n, g, 0.1, unit)
            });
        },
    );
    section(
        ui,
        "Elastic",
        &mut p.elastic,
        || ElasticSpec {
            p: 1.0,
            alpha: [0.0, 200.0],
            sigma: [9.0, 13.0],
        },
        |ui, e| {
            prob(ui, "p", &mut e.p);
            range(ui, "alpha", &mut e.alpha, 1.0, len_unit);
            range(ui, "sigma", &mut e.sigma, 0.1, len_unit);
            // The weakest and the strongest setting: small alpha with wide sigma, and back.
            let lo = elastic_rms_vox(e.alpha[0], e.sigma[1].max(1e-3), ndim);
            let hi = elastic_rms_vox(e.alpha[1], e.sigma[0].max(1e-3), ndim);
            let root = (ndim as f64).sqrt();
            ui.weak(format!(
                "expected RMS per axis {lo:.2} to {hi:.2}{len_unit} (length {:.2} to \
                 {:.2}{len_unit}) away from the border",
                lo * root,
                hi * root
            ))
            .on_hover_text(
                "per axis: alpha / sqrt(3) · (2 sqrt(pi) sigma)^(-ndim/2), what one component of \
                 alpha · G_sigma(U(-1, 1)) gives inside the volume; the length of the vector is \
                 sqrt(ndim) times that. The realised figures below and in the main view are \
                 lengths",
            );
            for line in realised.iter().flatten() {
                ui.label(line).on_hover_text(
                    "weakest: alpha lo with sigma hi; strongest: alpha hi with sigma lo; the \
                     length of alpha·G_sigma(noise) over the open scan's grid, with the views' seed",
                );
            }
        },
    );
    ui.separator();
    ui.label(egui::RichText::new("Sampling").strong());
    let s = &mut p.sampling;
    ui.horizontal(|ui| {
        let l = ui.label("order");
        egui::ComboBox::from_id_salt("preset-order")
            .selected_text(s.order.to_string())
            .show_ui(ui, |ui| {
                for o in [0, 1, 3] {
                    ui.selectable_value(&mut s.order, o, o.to_string());
                }
            })
            .response
            .labelled_by(l.id);
        let l = ui.label("mode");
        egui::ComboBox::from_id_salt("preset-mode")
            .selected_text(s.mode.clone())
            .show_ui(ui, |ui| {
                for m in Mode::ALL {
                    ui.selectable_value(&mut s.mode, m.name().to_string(), m.name());
                }
            })
            .response
            .labelled_by(l.id);
    });
    ui.horizontal(|ui| {
        let l = ui.label("cval");
        ui.add(egui::DragValue::new(&mut s.cval).speed(0.01))
            .labelled_by(l.id);
        let l = ui.label("label order (exports)");
        egui::ComboBox::from_id_salt("preset-label-order")
            .selected_text(s.label_order.to_string())
            .show_ui(ui, |ui| {
                for o in [0, 1] {
                    ui.selectable_value(&mut s.label_order, o, o.to_string());
                }
            })
            .response
            .labelled_by(l.id);
    });
    intensity::intensity_section(ui, &mut p.intensity);
}

/// The editor window (while `rt.windows.editor.open`).
pub fn editor_window(ui: &mut egui::Ui, state: &mut State, rt: &mut Runtime) -> Vec<Command> {
    let mut out = vec![];
    let ndim = rt
        .scan
        .as_ref()
        .map_or(3, |s| s.loaded.image.ndim().clamp(2, 3));
    let mut open = rt.windows.editor.open;
    let unsaved = rt.windows.editor.unsaved(state);
    // What an edited preset says it was derived from: the bundled name, else the preset's name.
    let from = if crate::augment::preset::BUNDLED
        .iter()
        .any(|(n, _)| *n == state.preset)
    {
        state.preset.clone()
    } else {
        rt.windows
            .editor
            .baseline
            .as_ref()
            .map_or_else(String::new, |b| b.name.clone())
    };
    let realised: RealisedLines = match (&rt.scan, state.draft.as_ref()) {
        (Some(scan), Some(p)) => {
            let img = &scan.loaded.image;
            realised_keys(p, state.params.seed, &img.shape, &img.spacing_mm).map(|keys| {
                rt.windows.editor.realised.ask(&keys, ui.ctx());
                let sp = &img.spacing_mm;
                let mean_mm = (p.space == Space::Mm && !sp.is_empty())
                    .then(|| sp.iter().map(|s| s.abs()).sum::<f64>() / sp.len() as f64);
                let r = &rt.windows.editor.realised;
                [
                    realised_text("weakest", r.get(&keys[0]), mean_mm),
                    realised_text("strongest", r.get(&keys[1]), mean_mm),
                ]
            })
        }
        _ => None,
    };
    egui::Window::new("Preset editor")
        .open(&mut open)
        .default_pos([360.0, 60.0])
        .default_width(420.0)
        .show(ui.ctx(), |ui| {
            ui.horizontal(|ui| {
                if ui
                    .button("From current plan")
                    .on_hover_text("a preset centred on the parameters on screen")
                    .clicked()
                {
                    out.push(Command::PresetFromPlan);
                }
                if ui
                    .button("Sample")
                    .on_hover_text("draw one plan from this preset into the sliders")
                    .clicked()
                {
                    out.push(Command::SamplePreset);
                }
                if ui.button("Save preset…").clicked() {
                    out.push(Command::OpenSavePreset);
                }
                if ui
                    .button("Discard")
                    .on_hover_text("drop the edits and use the chosen preset as it is")
                    .clicked()
                {
                    out.push(Command::DiscardDraft);
                }
            });
            let Some(p) = state.draft.as_mut() else {
                ui.label("no preset is being edited");
                return;
            };
            // Always one line: a line that appeared with the first edit would move every widget
            // below it while the user types.
            ui.weak(if unsaved {
                "unsaved edits"
            } else {
                "no unsaved edits"
            });
            egui::ScrollArea::vertical()
                .max_height(560.0)
                .show(ui, |ui| editor_body(ui, p, ndim, &realised));
            if let Some(base) = &rt.windows.editor.baseline {
                mark_derived(p, base, &from);
            }
            ui.separator();
            match p.validate().and_then(|()| p.check_ndim(ndim)) {
                Ok(()) => {
                    ui.weak(format!("valid for this {ndim}D scan"));
                }
                Err(e) => {
                    ui.colored_label(ui.visuals().error_fg_color, e.to_string());
                }
            }
        });
    if !open {
        rt.windows.editor.open = false;
    }
    out
}
