//! `Plan`: fixed values of one spatial transform, and its composition into a coordinate map
//! (docs/design.md §3). Pure data; the engines interpret it.
//!
//! Every vector is in array-axis order `[z, y, x]` (2D: `[y, x]`): `rotate_rad[0]` rotates about
//! axis 0.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::field::FieldSpec;
use super::intensity::IntensityStep;
use super::mode::Mode;

/// Interpolation order: 0 nearest, 1 linear, 3 cubic B-spline (scipy prefilter).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "u32", into = "u32")]
pub enum Order {
    Nearest = 0,
    Linear = 1,
    Cubic = 3,
}

impl Order {
    pub fn as_u32(self) -> u32 {
        self as u32
    }
}

impl TryFrom<u32> for Order {
    type Error = String;
    fn try_from(v: u32) -> Result<Self, Self::Error> {
        match v {
            0 => Ok(Order::Nearest),
            1 => Ok(Order::Linear),
            3 => Ok(Order::Cubic),
            _ => Err(format!(
                "unsupported interpolation order {v} (expected 0, 1 or 3)"
            )),
        }
    }
}

impl From<Order> for u32 {
    fn from(o: Order) -> u32 {
        o as u32
    }
}

impl fmt::Display for Order {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", *self as u32)
    }
}

/// Where rotation, translation and the elastic deformation act.
///
/// `Voxel` (the default, as batchgenerators): on array indices, so a rotation of an anisotropic
/// volume shears it in millimetres. `Mm`: on physical coordinates `c_mm = S c` with
/// `S = diag(spacing_mm)`, so an anisotropic volume (e.g. 0.8 x 0.8 x 5 mm) rotates rigidly. In
/// `Mm` the rotation matrix on voxel coordinates is `S⁻¹ Rᵀ S`, translations are millimetres
/// (`t / spacing` voxels), and elastic sigma and alpha are millimetres: the field is smoothed with
/// `sigma / spacing_a` voxels along axis `a` and its component `a` moves `alpha G_a / spacing_a`
/// voxels, i.e. the displacement `alpha G` is isotropic in millimetres. Scale is a ratio and
/// means the same in both.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Space {
    #[default]
    Voxel,
    Mm,
}

impl Space {
    pub fn is_voxel(&self) -> bool {
        *self == Space::Voxel
    }
}

impl std::str::FromStr for Space {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "voxel" | "vox" | "voxels" => Ok(Space::Voxel),
            "mm" => Ok(Space::Mm),
            _ => Err(format!("unknown space '{s}' (expected voxel or mm)")),
        }
    }
}

impl fmt::Display for Space {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Space::Voxel => "voxel",
            Space::Mm => "mm",
        })
    }
}

/// Elastic deformation: displacement `alpha * G_sigma(noise)` (docs/design.md §4), in voxels, or in
/// millimetres when the plan's space is [`Space::Mm`].
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Elastic {
    pub alpha: f64,
    pub sigma: f64,
    pub seed: u64,
}

/// The largest values a plan may hold. They keep every sampling coordinate and kernel far inside
/// what f64 folds exactly and memory holds (a coordinate of 1e19 cannot be folded into an axis of
/// 200 voxels; a sigma of 1e12 asks for a kernel of 4e12 taps), while staying far beyond any
/// augmentation a pipeline uses. In mm space they hold both in millimetres and, once divided by
/// the voxel size, in voxels, where the engines apply them.
pub mod limits {
    /// |translation|, voxels or mm.
    pub const TRANSLATE: f64 = 1e6;
    pub const SCALE_MIN: f64 = 1e-3;
    pub const SCALE_MAX: f64 = 1e3;
    /// Elastic sigma, voxels or mm (a kernel radius of 4000).
    pub const SIGMA: f64 = 1e3;
    /// |elastic alpha|, voxels or mm.
    pub const ALPHA: f64 = 1e7;
    /// The voxel sizes of mm space, in mm: from a micro-CT's micrometre to a 10 m voxel. Outside
    /// them no scan exists, and a millimetre would be more voxels than any grid holds.
    pub const SPACING_MIN: f64 = 1e-3;
    pub const SPACING_MAX: f64 = 1e4;

    /// Why translation `t` (voxels or mm) is refused, or `None` when it is allowed.
    pub fn translate(t: f64) -> Option<&'static str> {
        if !t.is_finite() {
            Some("it must be finite")
        } else if t.abs() > TRANSLATE {
            Some("it must be within ±1e6 (voxels or mm)")
        } else {
            None
        }
    }

    /// Why scale factor `s` is refused, or `None` when it is allowed.
    pub fn scale(s: f64) -> Option<&'static str> {
        if !s.is_finite() {
            Some("it must be finite")
        } else if s <= 0.0 {
            Some("it must be > 0")
        } else if !(SCALE_MIN..=SCALE_MAX).contains(&s) {
            Some("it must be between 0.001 and 1000")
        } else {
            None
        }
    }

    /// Why elastic sigma `s` (voxels or mm) is refused, or `None` when it is allowed.
    pub fn sigma(s: f64) -> Option<&'static str> {
        if !s.is_finite() {
            Some("it must be finite")
        } else if s <= 0.0 {
            Some("sigma must be > 0")
        } else if s > SIGMA {
            Some("sigma must be at most 1000 (voxels or mm)")
        } else {
            None
        }
    }

    /// Why elastic alpha `a` (voxels or mm) is refused, or `None` when it is allowed.
    pub fn alpha(a: f64) -> Option<&'static str> {
        if !a.is_finite() {
            Some("it must be finite")
        } else if a.abs() > ALPHA {
            Some("alpha must be within ±1e7")
        } else {
            None
        }
    }

    /// Whether `s` mm is a voxel size a scan has (finite, within the spacing limits).
    pub fn spacing_ok(s: f64) -> bool {
        (SPACING_MIN..=SPACING_MAX).contains(&s)
    }
}

/// Fixed values of one spatial transform.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Plan {
    /// Axes to mirror.
    pub flip: Vec<usize>,
    /// Rotation angles in radians: 3 for a volume (about axes 0, 1, 2), 1 for an image; empty for none.
    pub rotate_rad: Vec<f64>,
    /// Scale: empty (none), one value (isotropic) or one per axis. `s > 1` samples a larger region.
    pub scale: Vec<f64>,
    /// Translation per axis (content moves by `-t`), in the plan's space: voxels, or millimetres
    /// in [`Space::Mm`]; empty for none.
    pub translate: Vec<f64>,
    pub elastic: Option<Elastic>,
    pub order: Order,
    pub mode: Mode,
    pub cval: f32,
    /// Output grid shape; the input's when `None`.
    pub out_shape: Option<Vec<usize>>,
    /// Where rotation, translation and elastic act (see [`Space`]).
    pub space: Space,
    /// Voxel size per axis in millimetres, `[z, y, x]`; needed in [`Space::Mm`], ignored in
    /// [`Space::Voxel`] (empty there).
    pub spacing_mm: Vec<f64>,
    /// What happens to the image's values after the resample, in order (docs/design.md §9); the
    /// label map never receives these.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub intensity: Vec<IntensityStep>,
    /// Whether the mirror (`flip`) acts after the intensity steps, in nnU-Net's order (spatial
    /// transform, intensity, mirror), rather than with the resample before them. The two differ
    /// only where a step depends on the position (noise, low resolution, a bias field); the
    /// label map, which takes no step, is the same either way.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub flip_after_intensity: bool,
}

impl Default for Plan {
    fn default() -> Self {
        Plan {
            flip: vec![],
            rotate_rad: vec![],
            scale: vec![],
            translate: vec![],
            elastic: None,
            order: Order::Linear,
            mode: Mode::Constant,
            cval: 0.0,
            out_shape: None,
            space: Space::Voxel,
            spacing_mm: vec![],
            intensity: vec![],
            flip_after_intensity: false,
        }
    }
}

/// A plan that does not fit the data it is applied to.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum PlanError {
    /// An intensity step whose values cannot act (see [`IntensityStep::validate`]).
    #[error("{0}")]
    Intensity(String),
    #[error("only 2D and 3D grids can be transformed, got {0} dimensions")]
    Dimensions(usize),
    #[error("--flip axis {axis} does not exist in a {ndim}D grid")]
    FlipAxis { axis: usize, ndim: usize },
    #[error("--rotate needs {want} angle(s) for a {ndim}D grid, got {got}")]
    RotateLen {
        want: usize,
        got: usize,
        ndim: usize,
    },
    #[error("--{name} needs {want} value(s) for a {ndim}D grid, got {got}")]
    VectorLen {
        name: &'static str,
        want: String,
        got: usize,
        ndim: usize,
    },
    #[error("--{name} value {value} is not allowed: {why}")]
    Value {
        name: &'static str,
        value: f64,
        why: &'static str,
    },
    #[error("output shape {got:?} does not have {ndim} positive axes")]
    OutShape { got: Vec<usize>, ndim: usize },
    #[error(
        "--space mm needs a voxel spacing between 0.001 and 10000 mm (as every scan has) on \
         each of the {ndim} axes, got [{}] mm",
        brief_list(got)
    )]
    Spacing { got: Vec<f64>, ndim: usize },
    #[error(
        "--{name} value {} mm is {} voxels on axis {axis} at a spacing of {} mm, beyond the \
         limit of {limit:e} voxels", brief(*value), brief(*vox), brief(*spacing)
    )]
    Voxels {
        name: &'static str,
        value: f64,
        axis: usize,
        spacing: f64,
        vox: f64,
        limit: f64,
    },
}

/// `v` to four significant digits, as a message shows it: `0.0010000000474974513` (an f32
/// voxel size) reads `0.001`, `1999.999905` reads `2000`, `1e-30` stays `1e-30`.
pub fn brief(v: f64) -> String {
    if !v.is_finite() || v == 0.0 {
        return v.to_string();
    }
    let e = format!("{v:.3e}");
    let (mantissa, exp) = e.split_once('e').unwrap_or((&e, "0"));
    let mantissa = mantissa.trim_end_matches('0').trim_end_matches('.');
    match exp.parse::<i32>() {
        // Plain digits where they are short (0.001 to 99999), else the exponent.
        Ok(x) if (-3..5).contains(&x) => format!("{mantissa}e{x}")
            .parse::<f64>()
            .map_or(e.clone(), |r| r.to_string()),
        _ => format!("{mantissa}e{exp}"),
    }
}

/// `brief` of each value, joined by `, `.
pub fn brief_list(v: &[f64]) -> String {
    v.iter().map(|&x| brief(x)).collect::<Vec<_>>().join(", ")
}

impl Plan {
    /// The identity: no flip, rotation, scale, translation or elastic.
    pub fn identity() -> Self {
        Plan::default()
    }

    /// Checks the plan against a grid of `ndim` dimensions.
    pub fn validate(&self, ndim: usize) -> Result<(), PlanError> {
        for step in &self.intensity {
            step.validate(None, Some(ndim))
                .map_err(PlanError::Intensity)?;
        }
        if !(2..=3).contains(&ndim) {
            return Err(PlanError::Dimensions(ndim));
        }
        if self.space == Space::Mm
            && (self.spacing_mm.len() != ndim
                || !self.spacing_mm.iter().all(|&s| limits::spacing_ok(s)))
        {
            return Err(PlanError::Spacing {
                got: self.spacing_mm.clone(),
                ndim,
            });
        }
        if let Some(&axis) = self.flip.iter().find(|&&a| a >= ndim) {
            return Err(PlanError::FlipAxis { axis, ndim });
        }
        let want_rot = if ndim == 3 { 3 } else { 1 };
        if !self.rotate_rad.is_empty() && self.rotate_rad.len() != want_rot {
            return Err(PlanError::RotateLen {
                want: want_rot,
                got: self.rotate_rad.len(),
                ndim,
            });
        }
        if !self.scale.is_empty() && self.scale.len() != 1 && self.scale.len() != ndim {
            return Err(PlanError::VectorLen {
                name: "scale",
                want: format!("1 or {ndim}"),
                got: self.scale.len(),
                ndim,
            });
        }
        if !self.translate.is_empty() && self.translate.len() != ndim {
            return Err(PlanError::VectorLen {
                name: "translate",
                want: ndim.to_string(),
                got: self.translate.len(),
                ndim,
            });
        }
        let check = |name, v: f64, why: Option<&'static str>| match why {
            None => Ok(()),
            Some(why) => Err(PlanError::Value {
                name,
                value: v,
                why,
            }),
        };
        for &a in &self.rotate_rad {
            check("rotate", a, (!a.is_finite()).then_some("it must be finite"))?;
        }
        for &t in &self.translate {
            check("translate", t, limits::translate(t))?;
        }
        for &s in &self.scale {
            check("scale", s, limits::scale(s))?;
        }
        if let Some(e) = &self.elastic {
            check("elastic", e.alpha, limits::alpha(e.alpha))?;
            check("elastic", e.sigma, limits::sigma(e.sigma))?;
        }
        if self.space == Space::Mm {
            self.validate_voxels(ndim)?;
        }
        if let Some(s) = &self.out_shape
            && (s.len() != ndim || s.contains(&0))
        {
            return Err(PlanError::OutShape {
                got: s.clone(),
                ndim,
            });
        }
        Ok(())
    }

    /// The mm-space limits once more in voxels, where the engines apply them: a millimetre is
    /// `1 / spacing` voxels, so a translation, sigma or alpha within the limits in millimetres
    /// can still be far beyond them in voxels. Assumes a checked spacing.
    fn validate_voxels(&self, ndim: usize) -> Result<(), PlanError> {
        let over = |name, value: f64, axis: usize, limit: f64| {
            let spacing = self.spacing_mm[axis];
            let vox = value / spacing;
            if vox.abs() <= limit {
                Ok(())
            } else {
                Err(PlanError::Voxels {
                    name,
                    value,
                    axis,
                    spacing,
                    vox,
                    limit,
                })
            }
        };
        for (a, &t) in self.translate.iter().enumerate().take(ndim) {
            over("translate", t, a, limits::TRANSLATE)?;
        }
        if let Some(e) = &self.elastic {
            for a in 0..ndim {
                over("elastic", e.sigma, a, limits::SIGMA)?;
                over("elastic", e.alpha, a, limits::ALPHA)?;
            }
        }
        Ok(())
    }

    /// The voxel size that converts this plan's units to voxels: `spacing_mm` in [`Space::Mm`],
    /// ones in [`Space::Voxel`]. Assumes a validated plan.
    fn unit_vox(&self, ndim: usize) -> Vec<f64> {
        match self.space {
            Space::Mm => self.spacing_mm.clone(),
            Space::Voxel => vec![1.0; ndim],
        }
    }

    /// The elastic field's gaussian sigma per axis in voxels, `[z, y, x]`: the plan's sigma on
    /// every axis in [`Space::Voxel`], `sigma / spacing_mm[a]` in [`Space::Mm`]. `None` without an
    /// elastic deformation. The unit field depends only on (seed, this, grid shape).
    pub fn field_sigma_vox(&self, ndim: usize) -> Option<Vec<f64>> {
        let e = self.elastic?;
        Some(match self.space {
            Space::Voxel => vec![e.sigma; ndim],
            Space::Mm => (0..ndim)
                .map(|a| e.sigma / self.spacing_mm.get(a).copied().unwrap_or(1.0))
                .collect(),
        })
    }

    /// The unit field this plan deforms with on an output grid of `out_shape`: `None` without an
    /// elastic deformation or with alpha 0 (nothing moves, so no field is computed).
    pub fn field_spec(&self, out_shape: &[usize]) -> Option<FieldSpec> {
        let e = self.elastic.filter(|e| e.alpha != 0.0)?;
        Some(FieldSpec {
            seed: e.seed,
            sigma_vox: self.field_sigma_vox(out_shape.len())?,
            shape: out_shape.to_vec(),
        })
    }

    /// The axes the intensity steps must see unmirrored: the plan's `flip` where it acts after
    /// steps it has ([`Plan::flip_after_intensity`]). The engines resample with the mirror, then
    /// mirror the image back, run the steps and mirror it again: the mirror is an exact
    /// permutation, so that is the steps on the unmirrored resample, mirrored.
    pub fn flip_around_steps(&self) -> Option<&[usize]> {
        (self.flip_after_intensity && !self.flip.is_empty() && !self.intensity.is_empty())
            .then_some(self.flip.as_slice())
    }

    /// Whether the intensity steps need the whole image at once, so that one plane alone cannot
    /// be computed: a step reads statistics of the whole channel, or the mirror acts after the
    /// steps.
    pub fn steps_need_whole_volume(&self) -> bool {
        self.flip_around_steps().is_some() || self.intensity.iter().any(|s| s.needs_whole_channel())
    }

    /// Whether the plan does nothing at all: it moves no voxel and changes no value.
    pub fn does_nothing(&self) -> bool {
        self.is_spatial_identity() && self.intensity.is_empty()
    }

    /// Whether the plan moves no voxel (its intensity steps may still change values).
    pub fn is_spatial_identity(&self) -> bool {
        self.flip.is_empty()
            && self.rotate_rad.iter().all(|&a| a == 0.0)
            && self.scale.iter().all(|&s| s == 1.0)
            && self.translate.iter().all(|&t| t == 0.0)
            && self.elastic.is_none_or(|e| e.alpha == 0.0)
    }

    /// Composes the plan for an input grid into one coordinate map (host, f64).
    pub fn compose(&self, in_shape: &[usize]) -> Result<CoordMap, PlanError> {
        let ndim = in_shape.len();
        self.validate(ndim)?;
        let out_shape = self.out_shape.clone().unwrap_or_else(|| in_shape.to_vec());
        let mut flip = [false; 3];
        for &a in &self.flip {
            flip[a] = true;
        }
        // R = Rx(a0) Ry(a1) Rz(a2) (batchgenerators), then M = diag(s) R^T; in mm space
        // M = diag(s) S⁻¹ Rᵀ S with S = diag(spacing_mm) (see `Space`).
        let r: [[f64; 3]; 3] = if ndim == 3 {
            let a = if self.rotate_rad.is_empty() {
                vec![0.0; 3]
            } else {
                self.rotate_rad.clone()
            };
            let (c0, s0) = (a[0].cos(), a[0].sin());
            let (c1, s1) = (a[1].cos(), a[1].sin());
            let (c2, s2) = (a[2].cos(), a[2].sin());
            let rx = [[1.0, 0.0, 0.0], [0.0, c0, -s0], [0.0, s0, c0]];
            let ry = [[c1, 0.0, s1], [0.0, 1.0, 0.0], [-s1, 0.0, c1]];
            let rz = [[c2, -s2, 0.0], [s2, c2, 0.0], [0.0, 0.0, 1.0]];
            matmul3(&matmul3(&rx, &ry), &rz)
        } else {
            let a = self.rotate_rad.first().copied().unwrap_or(0.0);
            let (c, s) = (a.cos(), a.sin());
            [[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]]
        };
        let scale: Vec<f64> = match self.scale.len() {
            0 => vec![1.0; ndim],
            1 => vec![self.scale[0]; ndim],
            _ => self.scale.clone(),
        };
        let mut m = [[0.0; 3]; 3];
        for i in 0..ndim {
            for j in 0..ndim {
                m[i][j] = scale[i] * r[j][i];
            }
        }
        let unit = self.unit_vox(ndim);
        if self.space == Space::Mm {
            // The spacing ratio first: isotropic spacing multiplies by exactly 1.
            for i in 0..ndim {
                for j in 0..ndim {
                    m[i][j] *= unit[j] / unit[i];
                }
            }
        }
        let mut b = [0.0; 3];
        let mut ctr_out = [0.0; 3];
        let e_alpha = self.elastic.map_or(0.0, |e| e.alpha);
        let mut alpha = [0.0; 3];
        for i in 0..ndim {
            let t = self.translate.get(i).copied().unwrap_or(0.0);
            let t = if self.space == Space::Mm {
                t / unit[i]
            } else {
                t
            };
            b[i] = t + (in_shape[i] as f64 - 1.0) / 2.0;
            ctr_out[i] = (out_shape[i] as f64 - 1.0) / 2.0;
            alpha[i] = if self.space == Space::Mm {
                e_alpha / unit[i]
            } else {
                e_alpha
            };
        }
        Ok(CoordMap {
            ndim,
            in_shape: in_shape.to_vec(),
            out_shape,
            flip,
            in_from_centered: m,
            offset: b,
            ctr_out,
            alpha,
        })
    }
}

fn matmul3(a: &[[f64; 3]; 3], b: &[[f64; 3]; 3]) -> [[f64; 3]; 3] {
    let mut c = [[0.0; 3]; 3];
    for i in 0..3 {
        for j in 0..3 {
            c[i][j] = (0..3).map(|k| a[i][k] * b[k][j]).sum();
        }
    }
    c
}

/// The fused map from an output voxel `p` to an input coordinate `x` (docs/design.md §3):
/// `q = flip(p)`, `c_a = q_a - ctr_out_a + alpha_a * field_a(q)`, `x = in_from_centered · c + offset`.
/// Only the first `ndim` entries of each array are used.
#[derive(Clone, Debug, PartialEq)]
pub struct CoordMap {
    pub ndim: usize,
    pub in_shape: Vec<usize>,
    pub out_shape: Vec<usize>,
    pub flip: [bool; 3],
    /// `diag(scale) · Rᵀ` (mm space: `diag(scale) · S⁻¹ Rᵀ S`).
    pub in_from_centered: [[f64; 3]; 3],
    /// `translate + ctr_in` (translate in voxels).
    pub offset: [f64; 3],
    pub ctr_out: [f64; 3],
    /// Elastic strength per axis, voxels per unit field value: alpha on every axis in voxel
    /// space, `alpha / spacing_mm[a]` in mm space; the unit field is supplied by the engine.
    pub alpha: [f64; 3],
}

impl CoordMap {
    /// The input coordinate `x` of the flipped output index `q` with the unit elastic field `d`
    /// at `q` (zero without elastic): `x = in_from_centered · (q - ctr_out + alpha ⊙ d) + offset`.
    #[inline]
    pub fn input_coord<const D: usize>(&self, q: &[usize; D], d: &[f32; D]) -> [f64; D] {
        let mut c = [0f64; D];
        for a in 0..D {
            c[a] = q[a] as f64 - self.ctr_out[a] + self.alpha[a] * d[a] as f64;
        }
        let mut x = [0f64; D];
        for (i, xi) in x.iter_mut().enumerate() {
            let mut s = self.offset[i];
            for (j, cj) in c.iter().enumerate() {
                s += self.in_from_centered[i][j] * cj;
            }
            *xi = s;
        }
        x
    }

    /// The flipped index `q` of output index `p` along `axis`.
    #[inline]
    pub fn flip_index(&self, axis: usize, p: usize) -> usize {
        if self.flip[axis] {
            self.out_shape[axis] - 1 - p
        } else {
            p
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation_names_the_bad_value() {
        let p = Plan {
            rotate_rad: vec![0.1, 0.2],
            ..Plan::default()
        };
        assert!(matches!(p.validate(3), Err(PlanError::RotateLen { .. })));
        let p = Plan {
            flip: vec![3],
            ..Plan::default()
        };
        assert!(matches!(p.validate(3), Err(PlanError::FlipAxis { .. })));
        let p = Plan {
            scale: vec![0.0],
            ..Plan::default()
        };
        assert!(p.validate(2).is_err());
        assert!(Plan::identity().validate(2).is_ok());
        assert!(Plan::identity().validate(4).is_err());
    }

    #[test]
    fn brief_numbers_read_short() {
        assert_eq!(brief(0.0010000000474974513), "0.001");
        assert_eq!(brief(1999.999905005102), "2000");
        assert_eq!(brief(1e-30), "1e-30");
        assert_eq!(brief(-2e6), "-2e6");
        assert_eq!(brief(1.5), "1.5");
        assert_eq!(brief(f64::NAN), "NaN");
        assert_eq!(brief_list(&[1.0, 3e-7]), "1, 3e-7");
    }

    #[test]
    fn rotation_matrix_is_batchgenerators() {
        // A rotation of 90° about axis 0 maps c = (0, 1, 0) to Rᵀ c = (0, cos, -sin) = (0, 0, -1).
        let p = Plan {
            rotate_rad: vec![std::f64::consts::FRAC_PI_2, 0.0, 0.0],
            ..Plan::default()
        };
        let m = p.compose(&[5, 5, 5]).unwrap().in_from_centered;
        assert!((m[2][1] + 1.0).abs() < 1e-12 && m[1][1].abs() < 1e-12);
    }
}
