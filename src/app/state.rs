//! What the explorer saves across restarts (serde, `#[serde(default)]`): the parameters in UI
//! units, display settings, recent files and layout. Runtime resources live in `Runtime`.
//!
//! Vectors are in array-axis order `[z, y, x]` (2D `[y, x]`), as everywhere in augscope.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::augment::DoneList;
use crate::augment::preset::Preset;
use crate::augment::{Elastic, Mode, Order, Plan, Space};
use crate::core::intensity::{IntensityStep, Normalize};
use crate::engine::{BackendSpec, Precision};
use crate::export::preview::Model;

/// Every parameter of a [`Plan`], in the units a user thinks in (degrees, voxels).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Params {
    pub flip: [bool; 3],
    pub rotate_deg: [f64; 3],
    pub scale_isotropic: bool,
    pub scale: [f64; 3],
    /// Translation per axis, in `space`'s unit (voxels or mm).
    pub translate_vox: [f64; 3],
    pub elastic: bool,
    pub alpha: f64,
    /// Elastic sigma (and alpha) in `space`'s unit.
    pub sigma_vox: f64,
    pub seed: u64,
    /// Where rotation, translation and elastic act: voxels, or millimetres with the scan's
    /// spacing (an anisotropic scan then rotates rigidly instead of shearing).
    pub space: Space,
    pub order: Order,
    pub mode: Mode,
    pub cval: f32,
    pub backend: BackendChoice,
    pub precision: Precision,
    /// The intensity filter (or the FEBDS overlay), before or after the spatial transform.
    pub filter: FilterParams,
    /// Whose model of the transform the views show ("Preview as"): augscope's own, or a
    /// training library's (computed on the CPU engine over the whole volume).
    pub preview_as: Model,
    /// The intensity steps with their values, in the order they act after the resample: a
    /// preset sample's, kept until cleared.
    pub intensity: Vec<IntensityStep>,
    /// The normalisation of the scan before everything else: the units the steps act in (a
    /// preset's `[normalize]`, or chosen in the Intensity section).
    pub normalize: Option<Normalize>,
    /// The mirror acts after the intensity steps (a preset sample's, nnU-Net's order).
    pub flip_after_intensity: bool,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            flip: [false; 3],
            rotate_deg: [0.0; 3],
            scale_isotropic: true,
            scale: [1.0; 3],
            translate_vox: [0.0; 3],
            elastic: false,
            alpha: 800.0,
            sigma_vox: 12.0,
            seed: 42,
            space: Space::Voxel,
            order: Order::Linear,
            mode: Mode::Constant,
            cval: 0.0,
            backend: BackendChoice::Auto,
            precision: Precision::F32,
            filter: FilterParams::default(),
            preview_as: Model::Augscope,
            intensity: vec![],
            normalize: None,
            flip_after_intensity: false,
        }
    }
}

/// Which filter the panel applies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum FilterKind {
    Gaussian,
    Log,
    Dog,
    Median,
    Gamma,
    Contrast,
    /// The FEBDS mask, drawn over the image (the intensities stay as they are).
    Febds,
}

impl FilterKind {
    pub const ALL: [FilterKind; 7] = [
        FilterKind::Gaussian,
        FilterKind::Log,
        FilterKind::Dog,
        FilterKind::Median,
        FilterKind::Gamma,
        FilterKind::Contrast,
        FilterKind::Febds,
    ];

    pub fn label(self) -> &'static str {
        match self {
            FilterKind::Gaussian => "gaussian",
            FilterKind::Log => "LoG (gaussian laplace)",
            FilterKind::Dog => "DoG (difference of gaussians)",
            FilterKind::Median => "median",
            FilterKind::Gamma => "gamma",
            FilterKind::Contrast => "contrast / brightness",
            FilterKind::Febds => "FEBDS mask (overlay)",
        }
    }

    /// Whether the filter reads neighbours (and so has a boundary mode).
    pub fn has_boundary(self) -> bool {
        matches!(
            self,
            FilterKind::Gaussian | FilterKind::Log | FilterKind::Dog | FilterKind::Median
        )
    }

    /// Whether the filter changes each value on its own (so a plane of the result is the filter
    /// of the plane).
    pub fn pointwise(self) -> bool {
        matches!(self, FilterKind::Gamma | FilterKind::Contrast)
    }
}

/// Where the filter acts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum FilterStage {
    /// On the loaded scan; the spatial transform then resamples the filtered scan.
    Before,
    /// On the transformed volume.
    After,
}

/// The filter panel's settings, in voxels and intensity units.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct FilterParams {
    pub enabled: bool,
    pub kind: FilterKind,
    pub stage: FilterStage,
    /// Gaussian and LoG sigma, the same on every axis.
    pub sigma_vox: f64,
    /// DoG: `gaussian(sigma1) − gaussian(sigma2)`.
    pub sigma1_vox: f64,
    pub sigma2_vox: f64,
    /// Median window edge (odd), the same on every axis.
    pub median_size: usize,
    /// `scale · (max(x, 0) / scale)^gamma` with `scale` the scan's maximum.
    pub gamma: f32,
    /// `contrast · x + brightness`.
    pub contrast: f32,
    pub brightness: f32,
    pub febds_method: crate::filter::FebdsMethod,
    /// Boundary of the gaussian, LoG, DoG and median (scipy's filter modes; scipy's default is
    /// reflect).
    pub mode: Mode,
    pub cval: f32,
}

impl Default for FilterParams {
    fn default() -> Self {
        FilterParams {
            enabled: false,
            kind: FilterKind::Gaussian,
            stage: FilterStage::Before,
            sigma_vox: 1.5,
            sigma1_vox: 1.0,
            sigma2_vox: 2.0,
            median_size: 3,
            gamma: 1.0,
            contrast: 1.0,
            brightness: 0.0,
            febds_method: crate::filter::FebdsMethod::Dog,
            mode: Mode::Reflect,
            cval: 0.0,
        }
    }
}

impl FilterParams {
    /// The intensity filter to run, or `None` when the panel is off or shows the FEBDS overlay.
    /// `scan_max` is the gamma's scale (the loaded scan's maximum).
    pub fn intensity_filter(&self, scan_max: f32) -> Option<crate::filter::Filter> {
        use crate::filter::Filter;
        if !self.enabled {
            return None;
        }
        Some(match self.kind {
            FilterKind::Gaussian => Filter::Gaussian {
                sigma: vec![self.sigma_vox],
            },
            FilterKind::Log => Filter::Log {
                sigma: vec![self.sigma_vox],
            },
            FilterKind::Dog => Filter::Dog {
                sigma1: vec![self.sigma1_vox],
                sigma2: vec![self.sigma2_vox],
            },
            FilterKind::Median => Filter::Median {
                size: vec![self.median_size],
            },
            FilterKind::Gamma => Filter::Gamma {
                gamma: self.gamma,
                scale: if scan_max.is_finite() && scan_max > 0.0 {
                    scan_max
                } else {
                    1.0
                },
            },
            FilterKind::Contrast => Filter::Contrast {
                contrast: self.contrast,
                brightness: self.brightness,
            },
            FilterKind::Febds => return None,
        })
    }

    /// The FEBDS method when the overlay is on.
    pub fn febds(&self) -> Option<crate::filter::FebdsMethod> {
        (self.enabled && self.kind == FilterKind::Febds).then_some(self.febds_method)
    }

    pub fn boundary(&self) -> crate::filter::Boundary {
        crate::filter::Boundary {
            mode: self.mode,
            cval: self.cval,
        }
    }

    /// The done-list entry of the intensity filter (values as the report shows them).
    pub fn done(&self, scan_max: f32) -> Option<crate::augment::Done> {
        let f = self.intensity_filter(scan_max)?;
        let mut values = serde_json::to_value(&f).unwrap_or(serde_json::Value::Null);
        if self.kind.has_boundary() {
            values = serde_json::json!({ "filter": values, "mode": self.mode.name(), "cval": self.cval });
        } else {
            values = serde_json::json!({ "filter": values });
        }
        values["stage"] = match self.stage {
            FilterStage::Before => "before the transform",
            FilterStage::After => "after the transform",
        }
        .into();
        Some(crate::augment::Done {
            transform: format!("filter: {}", f.name()),
            values,
        })
    }
}

/// The engine a user picked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum BackendChoice {
    /// The first CUDA device when there is one, else the CPU.
    Auto,
    Cpu,
    Cuda(usize),
}

impl BackendChoice {
    pub fn label(self) -> String {
        match self {
            BackendChoice::Auto => "auto".into(),
            BackendChoice::Cpu => "CPU".into(),
            BackendChoice::Cuda(i) => format!("CUDA {i}"),
        }
    }

    pub fn spec(self, have_cuda: bool) -> BackendSpec {
        match self {
            BackendChoice::Auto if have_cuda => BackendSpec::Cuda(vec![0]),
            BackendChoice::Auto | BackendChoice::Cpu => BackendSpec::Cpu,
            BackendChoice::Cuda(i) => BackendSpec::Cuda(vec![i]),
        }
    }
}

impl Params {
    /// The plan for a grid of `ndim` spatial axes (2 or 3): only what differs from the identity.
    /// The plan of these parameters on a grid of `ndim` axes with voxel size `spacing_mm`
    /// (used in [`Space::Mm`] only).
    pub fn to_plan(&self, ndim: usize, spacing_mm: &[f64]) -> Plan {
        let nd = ndim.clamp(2, 3);
        // A 2D image rotates in its own plane: the one angle is the third slider's (about the
        // axis normal to the screen).
        let flip = (0..nd).filter(|&a| self.flip[a]).collect();
        let rotate_rad = if nd == 3 {
            self.rotate_deg.map(f64::to_radians).to_vec()
        } else {
            vec![self.rotate_deg[2].to_radians()]
        };
        let rotate_rad = if rotate_rad.iter().all(|&a| a == 0.0) {
            vec![]
        } else {
            rotate_rad
        };
        let scale: Vec<f64> = if self.scale_isotropic {
            vec![self.scale[0]; nd]
        } else {
            self.scale[3 - nd..].to_vec()
        };
        let scale = if scale.iter().all(|&s| s == 1.0) {
            vec![]
        } else {
            scale
        };
        let translate: Vec<f64> = self.translate_vox[3 - nd..].to_vec();
        let translate = if translate.iter().all(|&t| t == 0.0) {
            vec![]
        } else {
            translate
        };
        Plan {
            flip,
            rotate_rad,
            scale,
            translate,
            elastic: (self.elastic && self.alpha != 0.0).then_some(Elastic {
                alpha: self.alpha,
                sigma: self.sigma_vox,
                seed: self.seed,
            }),
            order: self.order,
            mode: self.mode,
            cval: self.cval,
            out_shape: None,
            space: self.space,
            spacing_mm: match self.space {
                Space::Mm => spacing_mm.iter().map(|s| s.abs()).collect(),
                Space::Voxel => vec![],
            },
            intensity: self.intensity.clone(),
            flip_after_intensity: self.flip_after_intensity,
        }
    }

    /// The parameters of a fixed plan (e.g. one sample of a preset) for a grid of `ndim` axes;
    /// engine settings are kept from `base`.
    pub fn from_plan(plan: &Plan, ndim: usize, base: &Params) -> Params {
        let nd = ndim.clamp(2, 3);
        let off = 3 - nd;
        let mut p = Params {
            backend: base.backend,
            precision: base.precision,
            alpha: base.alpha,
            sigma_vox: base.sigma_vox,
            seed: base.seed,
            filter: base.filter.clone(),
            preview_as: base.preview_as,
            normalize: base.normalize.clone(),
            ..Params::default()
        };
        for &a in &plan.flip {
            if a < nd {
                p.flip[a] = true;
            }
        }
        p.flip_after_intensity = plan.flip_after_intensity;
        match plan.rotate_rad.as_slice() {
            [a] => p.rotate_deg[2] = a.to_degrees(),
            [a, b, c] => p.rotate_deg = [a.to_degrees(), b.to_degrees(), c.to_degrees()],
            _ => {}
        }
        match plan.scale.as_slice() {
            [] => {}
            [s] => p.scale = [*s; 3],
            v => {
                p.scale_isotropic = v.windows(2).all(|w| w[0] == w[1]);
                for (i, s) in v.iter().enumerate().take(nd) {
                    p.scale[off + i] = *s;
                }
                if p.scale_isotropic {
                    p.scale = [v[0]; 3];
                }
            }
        }
        for (i, t) in plan.translate.iter().enumerate().take(nd) {
            p.translate_vox[off + i] = *t;
        }
        if let Some(e) = plan.elastic {
            p.elastic = true;
            p.alpha = e.alpha;
            p.sigma_vox = e.sigma;
            p.seed = e.seed;
        }
        p.order = plan.order;
        p.mode = plan.mode;
        p.cval = plan.cval;
        p.space = plan.space;
        p.intensity = plan.intensity.clone();
        p
    }

    /// The done list of what runs on the scan, in order: the plan's transforms, with the
    /// intensity filter first or last as its stage says (`scan_max`: see
    /// [`FilterParams::intensity_filter`]).
    pub fn done_list(
        &self,
        ndim: usize,
        spacing_mm: &[f64],
        scan_max: f32,
    ) -> Vec<crate::augment::Done> {
        self.with_filter(self.to_plan(ndim, spacing_mm).done_list(), scan_max)
    }

    /// `spatial` (a done list of the spatial transforms) with the filter placed by its stage.
    pub fn with_filter(
        &self,
        mut spatial: Vec<crate::augment::Done>,
        scan_max: f32,
    ) -> Vec<crate::augment::Done> {
        if let Some(f) = self.filter.done(scan_max) {
            match self.filter.stage {
                FilterStage::Before => spatial.insert(0, f),
                FilterStage::After => spatial.push(f),
            }
        }
        spatial
    }

    /// Whether the parameters that change the result (not the engine) are equal.
    pub fn same_result(&self, other: &Params) -> bool {
        let strip = |p: &Params| Params {
            backend: BackendChoice::Auto,
            precision: Precision::F32,
            ..p.clone()
        };
        strip(self) == strip(other)
    }
}

/// Colour map of the image views.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Colormap {
    Gray,
    Viridis,
}

/// How the slices are displayed; changing any of it never recomputes the transform.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Display {
    /// Window centre and width; `None` until the first scan sets them from its percentiles.
    pub level: Option<f32>,
    pub width: Option<f32>,
    pub colormap: Colormap,
    pub label_opacity: f32,
    pub show_label: bool,
    /// Opacity of the FEBDS mask overlay.
    pub mask_opacity: f32,
    /// Show the original above the augmented planes.
    pub side_by_side: bool,
    /// Show |augmented − original| instead of the augmented image.
    pub difference: bool,
    pub crosshair: bool,
    /// Draw the scan's voxel grid, moved by the transform, over the augmented views.
    pub deformation_grid: bool,
    /// Colour the augmented views by the Jacobian determinant and state the folded share.
    pub jacobian: bool,
    /// Draw TorchIO's control grid over the augmented views while previewing as TorchIO.
    pub control_grid: bool,
    /// The scan the window was last set for: reopening it keeps the window.
    pub wl_path: Option<PathBuf>,
    /// Voxels drawn as they are (flat squares) instead of bilinear: order 0 against order 3
    /// and small volumes are seen as they are.
    pub nearest: bool,
    /// Display as the transform samples: nearest for order 0, bilinear otherwise (overrides
    /// `nearest`).
    pub follow_order: bool,
}

impl Default for Display {
    fn default() -> Self {
        Display {
            level: None,
            width: None,
            colormap: Colormap::Gray,
            label_opacity: 0.2,
            show_label: true,
            mask_opacity: 0.6,
            side_by_side: true,
            difference: false,
            crosshair: true,
            deformation_grid: false,
            jacobian: false,
            control_grid: true,
            wl_path: None,
            nearest: false,
            follow_order: false,
        }
    }
}

/// Everything persisted across restarts.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct State {
    pub params: Params,
    pub display: Display,
    /// Most recent first: (image, label).
    pub recent: Vec<(PathBuf, Option<PathBuf>)>,
    pub hide_info_panel: bool,
    pub show_compare: bool,
    /// A bundled preset's name or a preset file, and the seed of the next sample.
    pub preset: String,
    pub preset_seed: u64,
    /// The batch export dialog's settings.
    pub export: ExportSettings,
    /// Preset files saved or loaded, most recent first.
    pub recent_presets: Vec<String>,
    /// The preset being edited in the preset editor; while it is there it is the preset in use
    /// (sampling, export, code), in place of `preset`.
    pub draft: Option<Preset>,
    /// The translation last used on each scan (most recent first): it belongs to a scan's size
    /// and content, so another scan starts from its own (or none), while every other parameter,
    /// the augmentation being tuned, carries over.
    pub scan_translation: Vec<(PathBuf, [f64; 3], Space)>,
}

impl State {
    pub const MAX_RECENT: usize = 8;

    /// Keeps the translation of the scan at `from` and sets that of the scan at `to` (its own
    /// from before, else none).
    pub fn switch_scan(&mut self, from: Option<&std::path::Path>, to: &std::path::Path) {
        if from == Some(to) {
            return;
        }
        if let Some(from) = from {
            self.scan_translation.retain(|(p, _, _)| p != from);
            self.scan_translation.insert(
                0,
                (
                    from.to_path_buf(),
                    self.params.translate_vox,
                    self.params.space,
                ),
            );
            self.scan_translation.truncate(4 * Self::MAX_RECENT);
        }
        self.params.translate_vox = match self.scan_translation.iter().find(|(p, _, _)| p == to) {
            // Saved in another unit: the translation is dropped rather than misread.
            Some((_, t, space)) if *space == self.params.space => *t,
            Some(_) => [0.0; 3],
            // The first scan of a start keeps the saved parameters.
            None if from.is_none() => self.params.translate_vox,
            None => [0.0; 3],
        };
    }

    pub fn push_recent(&mut self, image: PathBuf, label: Option<PathBuf>) {
        self.recent.retain(|(p, _)| *p != image);
        self.recent.insert(0, (image, label));
        self.recent.truncate(Self::MAX_RECENT);
    }

    pub fn push_recent_preset(&mut self, preset: String) {
        self.recent_presets.retain(|p| *p != preset);
        self.recent_presets.insert(0, preset);
        self.recent_presets.truncate(Self::MAX_RECENT);
    }
}

/// Undo/redo of parameter changes. A change is recorded when it settles (a drag ends), so one
/// drag of a slider is one step.
#[derive(Default)]
pub struct History {
    undo: Vec<Snapshot>,
    redo: Vec<Snapshot>,
    /// The state as of the last recorded step.
    settled: Option<Snapshot>,
}

/// What one undo step restores: the parameters and the preset being edited.
#[derive(Clone, Debug, PartialEq)]
pub struct Snapshot {
    pub params: Params,
    pub draft: Option<Preset>,
}

impl Snapshot {
    pub fn of(state: &State) -> Snapshot {
        Snapshot {
            params: state.params.clone(),
            draft: state.draft.clone(),
        }
    }

    fn is(&self, state: &State) -> bool {
        self.params == state.params && self.draft == state.draft
    }
}

impl History {
    const MAX: usize = 200;

    /// Records `now` as a step if it differs from the last settled state.
    pub fn settle(&mut self, now: &State) {
        match &self.settled {
            Some(prev) if prev.is(now) => {}
            Some(prev) => {
                self.undo.push(prev.clone());
                if self.undo.len() > Self::MAX {
                    self.undo.remove(0);
                }
                self.redo.clear();
                self.settled = Some(Snapshot::of(now));
            }
            None => self.settled = Some(Snapshot::of(now)),
        }
    }

    pub fn undo(&mut self, now: &State) -> Option<Snapshot> {
        let prev = self.undo.pop()?;
        self.redo.push(Snapshot::of(now));
        self.settled = Some(prev.clone());
        Some(prev)
    }

    pub fn redo(&mut self, now: &State) -> Option<Snapshot> {
        let next = self.redo.pop()?;
        self.undo.push(Snapshot::of(now));
        self.settled = Some(next.clone());
        Some(next)
    }

    pub fn can_undo(&self) -> bool {
        !self.undo.is_empty()
    }

    pub fn can_redo(&self) -> bool {
        !self.redo.is_empty()
    }
}

#[cfg(test)]
mod tests;

/// The export dialog's settings, kept across restarts.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ExportSettings {
    /// Samples to write.
    pub count: usize,
    /// Seed of the first sample; sample j uses seed + j.
    pub seed: u64,
    pub out_dir: String,
    /// Draw from the preset of the controls (with its probabilities) instead of the current
    /// parameters.
    pub from_preset: bool,
    /// Write the transformed label map beside each image.
    pub include_label: bool,
    /// Continue a batch in a folder that already holds its manifest.
    pub resume: bool,
    /// Output format: `""` for the scan's own kind, else `nii.gz`, `nii`, `npy` or `png`
    /// (`augscope batch --ext`).
    pub ext: String,
    /// Write in the scan's own type instead of float32 (`--dtype keep`).
    pub keep_dtype: bool,
}

impl Default for ExportSettings {
    fn default() -> Self {
        ExportSettings {
            count: 10,
            seed: 42,
            out_dir: String::new(),
            from_preset: false,
            include_label: true,
            resume: false,
            ext: String::new(),
            keep_dtype: false,
        }
    }
}
