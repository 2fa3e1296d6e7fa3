//! "Preview as": what a training library does with a plan, run on augscope's samplers (docs/design.md §8).
//!
//! An exported snippet reproduces augscope's transform wherever the library can express it; where
//! it cannot, the library's own model runs in training, and this module computes that model so
//! that a user sees it before training with it:
//!
//! - **augscope** and **batchgenerators 0.25**: augscope's own model (the same field, matrices and
//!   single resample); computed by the selected engine, not here.
//! - **MONAI 1.6**: the affine part (translation, scale, rotation) is one lazy resample; its
//!   `Rand3DElasticd` cannot join it, so with both the image is resampled twice. The elastic
//!   field is the same uniform noise smoothed by MONAI's `GaussianFilter` (an unnormalised erf
//!   kernel truncated at 3 sigma, zero padding). MONAI pads with 0 and has no 2D elastic of
//!   smoothed noise. Labels pad with 0 (the snippet's `PADDING`).
//! - **nnU-Net v2 (batchgeneratorsv2 0.3)**: normal noise smoothed by an FFT gaussian (periodic),
//!   each component scaled to a maximum |displacement| (the snippet's magnitude for alpha and
//!   sigma) and its mean removed; the matrix `R(b) S` with `b = -a`, which is augscope's `Rᵀ`
//!   times the scale (augscope scales after it turns: `S Rᵀ`); torch `grid_sample` (bilinear,
//!   `align_corners=False`: order 3 becomes 1, padding zeros, border or reflection); no
//!   translation.
//! - **TorchIO 1.2**: the affine part is one SimpleITK resample (exact through the snippet's
//!   `ArrayAxisAffine`); the elastic deformation is a second resample through a cubic B-spline on
//!   a coarse control grid (TorchIO's `ElasticDeformation`) whose spacing and maximum
//!   displacement the snippet sets from alpha and sigma. SimpleITK interpolates up to half a
//!   voxel beyond the edge voxel centres (the edge repeated; cubic coefficients mirrored) and
//!   pads beyond with a constant or the nearest voxel.
//!
//! Every model is checked voxel by voxel against its library in `tests/interop/check_preview.py`,
//! to the bar of the exported snippets. The random parts (noise, control points) are augscope's
//! own streams ([`crate::engine::noise`]), which that check feeds through each library's random
//! calls; the distributions are the library's.

mod monai;
mod nnunet;
mod torchio;

use std::fmt;

use crate::augment::{CoordMap, Elastic, Plan, PlanError, Space};
use crate::core::intensity::Library;
use crate::core::volume::Volume;
use crate::engine::field::ElasticField;

pub use monai::monai_erf_kernel;
pub use nnunet::nnunet_magnitude;

/// Whose model of the transform to run.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Model {
    /// augscope's own (docs/design.md §3).
    #[default]
    Augscope,
    /// batchgenerators 0.25: augscope's own model.
    Batchgenerators,
    Monai,
    TorchIo,
    /// The nnU-Net v2 trainer (batchgeneratorsv2's SpatialTransform).
    Nnunet,
}

impl Model {
    pub const ALL: [Model; 5] = [
        Model::Augscope,
        Model::Monai,
        Model::TorchIo,
        Model::Nnunet,
        Model::Batchgenerators,
    ];

    /// The name and version the manifest and the report record (`"model": "torchio-1.2.1"`).
    pub fn id(self) -> &'static str {
        match self {
            Model::Augscope => "augscope",
            Model::Batchgenerators => "batchgenerators-0.25.5",
            Model::Monai => "monai-1.6.1",
            Model::TorchIo => "torchio-1.2.1",
            Model::Nnunet => "nnunetv2-2.8.1",
        }
    }

    /// The name shown in the explorer.
    pub fn label(self) -> &'static str {
        match self {
            Model::Augscope => "augscope",
            Model::Batchgenerators => "batchgenerators 0.25.5",
            Model::Monai => "MONAI 1.6.1",
            Model::TorchIo => "TorchIO 1.2.1",
            Model::Nnunet => "nnU-Net v2 2.8.1",
        }
    }

    /// Whether the model is augscope's own, run by the selected engine (GPU or CPU).
    pub fn is_own(self) -> bool {
        matches!(self, Model::Augscope | Model::Batchgenerators)
    }
}

impl fmt::Display for Model {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Model::Augscope => "augscope",
            Model::Batchgenerators => "batchgenerators",
            Model::Monai => "monai",
            Model::TorchIo => "torchio",
            Model::Nnunet => "nnunet",
        })
    }
}

impl std::str::FromStr for Model {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "augscope" => Ok(Model::Augscope),
            "batchgenerators" | "bg" => Ok(Model::Batchgenerators),
            "monai" => Ok(Model::Monai),
            "torchio" => Ok(Model::TorchIo),
            "nnunet" | "nnu-net" | "nnunetv2" => Ok(Model::Nnunet),
            _ => Err(format!(
                "unknown model '{s}' (expected augscope, monai, torchio, nnunet or batchgenerators)"
            )),
        }
    }
}

/// TorchIO's coarse control grid of one preview, for drawing over the slice.
#[derive(Clone, Debug, PartialEq)]
pub struct ControlGrid {
    /// Control points per array axis (`[z, y, x]`; a 2D image has 1 on axis 0 and is `[y, x]`
    /// in `position`).
    pub shape: [usize; 3],
    /// Position of control point `k` along array axis `a`: `origin[a] + k * spacing[a]`, in
    /// output voxel indices (points outside the grid included).
    pub origin: [f64; 3],
    pub spacing: [f64; 3],
    /// Displacement of every control point, voxels per array axis, C order over `shape`.
    pub displacement: Vec<[f64; 3]>,
}

/// One preview: the outputs and what the library does differently from augscope.
#[derive(Debug)]
pub struct Preview {
    pub image: Volume,
    pub label: Option<Volume>,
    pub model: Model,
    /// Where the library's model departs from augscope's, one line each, in order.
    pub steps: Vec<String>,
    pub control_grid: Option<ControlGrid>,
    /// Max and RMS of the model's elastic displacement (Euclidean norm per voxel), voxels.
    pub displacement: Option<(f64, f64)>,
}

#[derive(Debug, thiserror::Error)]
pub enum PreviewError {
    #[error(transparent)]
    Plan(#[from] PlanError),
    #[error("{0} is augscope's own model: run it through the engine")]
    Own(&'static str),
    #[error(
        "{0} has no transform with the semantics of intensity step {1} ({2}'s): preview as \
         {3}, or preview the spatial part"
    )]
    Intensity(&'static str, &'static str, &'static str, &'static str),
}

/// Runs a library's model of `plan` on the CPU. For [`Model::is_own`] models, use the engine.
pub fn preview(
    model: Model,
    image: &Volume,
    label: Option<&Volume>,
    plan: &Plan,
) -> Result<Preview, PreviewError> {
    plan.validate(image.ndim())?;
    if !plan.intensity.is_empty() {
        let library = match model {
            Model::Nnunet => Some(Library::Batchgeneratorsv2),
            Model::Monai => Some(Library::Monai),
            Model::TorchIo => Some(Library::Torchio),
            Model::Augscope | Model::Batchgenerators => None,
        };
        if let Some(step) = plan.intensity.iter().find(|s| Some(s.library()) != library) {
            let own = step.library();
            return Err(PreviewError::Intensity(
                model.label(),
                step.name(),
                own.label(),
                own.target(),
            ));
        }
        for step in &plan.intensity {
            step.validate(Some(image.channels), Some(image.ndim()))
                .map_err(|why| PreviewError::Plan(PlanError::Intensity(why)))?;
        }
        // Every step is a family of the model's library, whose formula it follows: the spatial
        // model, then the steps on its image.
        let spatial = Plan {
            intensity: vec![],
            ..plan.clone()
        };
        let mut p = match model {
            Model::Monai => monai::monai(image, label, &spatial)?,
            Model::TorchIo => torchio::torchio(image, label, &spatial)?,
            _ => nnunet::nnunet(image, label, &spatial)?,
        };
        // The steps as the engines run them (a mirror after them included), on the model's image.
        let shape = p.image.shape.clone();
        crate::engine::intensity_after(plan, &mut p.image.data, &shape, p.image.channels);
        for step in &plan.intensity {
            p.steps.push(format!(
                "{}: {}'s {}, as augscope's",
                step.name(),
                step.library().label(),
                step.class()
            ));
        }
        if plan.flip_around_steps().is_some() {
            p.steps
                .push("flip: after the intensity steps, as the preset orders it".into());
        }
        return Ok(p);
    }
    match model {
        Model::Augscope | Model::Batchgenerators => Err(PreviewError::Own(model.label())),
        Model::Monai => monai::monai(image, label, plan),
        Model::Nnunet => nnunet::nnunet(image, label, plan),
        Model::TorchIo => torchio::torchio(image, label, plan),
    }
}

/// The line of the done list for augscope's own models.
pub fn own_step(model: Model) -> Option<String> {
    (model == Model::Batchgenerators).then(|| {
        "batchgenerators 0.25.5 samples as augscope does: the same field, matrices and single \
         resample"
            .to_string()
    })
}

fn has_affine(p: &Plan) -> bool {
    p.rotate_rad.iter().any(|&a| a != 0.0)
        || p.scale.iter().any(|&s| s != 1.0)
        || p.translate.iter().any(|&t| t != 0.0)
}

fn live_elastic(p: &Plan) -> Option<Elastic> {
    p.elastic.filter(|e| e.alpha != 0.0)
}

/// The plan as a library that transforms array indices takes it: an mm plan's angles, sigma and
/// alpha are used as voxels (as the snippets pass them), its translation converted to voxels.
fn voxel_plan(plan: &Plan, image: &Volume, library: &str, steps: &mut Vec<String>) -> Plan {
    let mut p = plan.clone();
    if plan.space == Space::Mm {
        if !plan.rotate_rad.is_empty() || live_elastic(plan).is_some() {
            steps.push(format!(
                "{library} rotates and deforms array indices: the plan's mm-space angles, sigma \
                 and alpha act on voxels"
            ));
        }
        p.translate = plan
            .translate
            .iter()
            .zip(&image.spacing_mm)
            .map(|(t, s)| t / s)
            .collect();
        p.space = Space::Voxel;
        p.spacing_mm.clear();
    }
    p
}

/// The map of `p` without its elastic part, with the unit field of strength `alpha` (voxels).
fn map_with_alpha(p: &Plan, shape: &[usize], alpha: f64) -> Result<CoordMap, PlanError> {
    let mut q = p.clone();
    q.elastic = None;
    let mut m = q.compose(shape)?;
    for a in 0..shape.len() {
        m.alpha[a] = alpha;
    }
    Ok(m)
}

/// Flip only (the other parts already applied).
fn flip_only(p: &Plan) -> Plan {
    Plan {
        flip: p.flip.clone(),
        order: p.order,
        mode: p.mode,
        cval: p.cval,
        ..Plan::default()
    }
}

/// Without flip and elastic (the first resample of a chain).
fn affine_only(p: &Plan) -> Plan {
    Plan {
        flip: vec![],
        elastic: None,
        ..p.clone()
    }
}

fn unit_field(shape: &[usize], sigma: f64, seed: u64, components: Vec<Vec<f32>>) -> ElasticField {
    ElasticField {
        shape: shape.to_vec(),
        sigma_vox: vec![sigma; shape.len()],
        seed,
        components,
    }
}

/// The mean over an axis of `n` voxels of the summed squared weights of scipy's gaussian
/// (truncate 4, taps outside the axis read 0): the snippet's `_mean_square_weight`.
fn mean_square_weight(n: usize, sigma: f64) -> f64 {
    let w = crate::core::gaussian::gaussian_kernel1d(sigma, 0, 4.0);
    let radius = w.len() / 2;
    let mut c = vec![0.0; w.len() + 1];
    for (i, v) in w.iter().enumerate() {
        c[i + 1] = c[i] + v * v;
    }
    let mut sum = 0.0;
    for q in 0..n {
        let lo = radius.saturating_sub(q);
        let hi = (2 * radius).min(radius + n - 1 - q);
        sum += c[hi + 1] - c[lo];
    }
    sum / n.max(1) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for m in Model::ALL {
            assert_eq!(m.to_string().parse::<Model>().unwrap(), m);
        }
        assert!("keras".parse::<Model>().is_err());
        assert_eq!(Model::TorchIo.id(), "torchio-1.2.1");
    }
}
