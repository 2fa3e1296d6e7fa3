//! The geometry of a DICOM slice as its header gives it: every attribute that feeds the affine
//! (ImagePositionPatient, ImageOrientationPatient, PixelSpacing, SliceThickness,
//! SpacingBetweenSlices), each absent or checked to be plausible, so that a damaged header is
//! one clear error rather than an affine augscope itself would refuse once written (a voxel of
//! 1e308 mm is infinite in a NIfTI file's 32-bit floats) or a silently wrong one.

use std::path::Path;

use dicom_dictionary_std::tags;
use dicom_object::{DefaultDicomObject, Tag};

use super::IoError;

/// The largest voxel size read as such (1 m); a larger one is a damaged header.
pub(super) const MAX_SPACING_MM: f64 = 1000.0;

fn err(why: impl Into<String>, path: &Path) -> IoError {
    IoError::read("DICOM", why, path)
}

/// A header's number as a reader writes it: `1e308`, not 309 digits.
fn num(v: f64) -> String {
    if v != 0.0 && v.is_finite() && !(1e-4..1e6).contains(&v.abs()) {
        format!("{v:e}")
    } else {
        format!("{v}")
    }
}

/// A derived number to 4 decimals, or in exponent form where it is huge.
fn four(v: f64) -> String {
    if v.abs() < 1e6 {
        format!("{v:.4}")
    } else {
        format!("{v:.3e}")
    }
}

/// Numbers separated by commas, each as [`num`] writes it.
fn list(v: &[f64]) -> String {
    v.iter().map(|&x| num(x)).collect::<Vec<_>>().join(", ")
}

fn dot(a: [f64; 3], b: [f64; 3]) -> f64 {
    a[0] * b[0] + a[1] * b[1] + a[2] * b[2]
}

/// The largest distance from the scanner's origin read as a position (10 m); a larger one is a
/// damaged header.
const MAX_POSITION_MM: f64 = 10_000.0;

/// How far ImageOrientationPatient's cosines may be from unit length and from orthogonal
/// (their dot product): cosines written with 4 decimals pass; a damaged header does not.
const COSINE_TOLERANCE: f64 = 1e-3;

/// What a slice's header says of its place in the patient: every attribute that feeds the
/// affine, each absent (or empty) or checked to be plausible.
pub(super) struct Geometry {
    pub(super) position: Option<[f64; 3]>,
    pub(super) orientation: Option<[f64; 6]>,
    pub(super) pixel_spacing: Option<[f64; 2]>,
    pub(super) thickness: Option<f64>,
    pub(super) between: Option<f64>,
}

impl Geometry {
    /// The checked geometry of a slice; an attribute that is present but not finite numbers,
    /// implausibly large, or (the orientation) not two orthogonal unit vectors is an error, since
    /// the affine written from it would be one augscope itself refuses, or the wrong one.
    pub(super) fn of(obj: &DefaultDicomObject, path: &Path) -> Result<Geometry, IoError> {
        let damaged = |what: String| err(format!("{what}; the header is damaged"), path);
        let position = affine_numbers::<3>(
            obj,
            tags::IMAGE_POSITION_PATIENT,
            "ImagePositionPatient",
            path,
        )?;
        if let Some(p) = position
            && p.iter().any(|x| x.abs() > MAX_POSITION_MM)
        {
            return Err(damaged(format!(
                "implausible ImagePositionPatient ({}) mm (at most {MAX_POSITION_MM} mm \
                 from the origin is read)",
                list(&p)
            )));
        }
        let orientation = affine_numbers::<6>(
            obj,
            tags::IMAGE_ORIENTATION_PATIENT,
            "ImageOrientationPatient",
            path,
        )?;
        if let Some(o) = orientation {
            let (r, c) = ([o[0], o[1], o[2]], [o[3], o[4], o[5]]);
            let (lr, lc, cos) = (dot(r, r).sqrt(), dot(c, c).sqrt(), dot(r, c));
            let off = |x: f64| x.is_nan() || x.abs() > COSINE_TOLERANCE;
            if off(lr - 1.0) || off(lc - 1.0) || off(cos) {
                return Err(damaged(format!(
                    "ImageOrientationPatient ({}) is not two orthogonal unit \
                     vectors (lengths {} and {}, dot product {})",
                    list(&o),
                    four(lr),
                    four(lc),
                    four(cos)
                )));
            }
        }
        let size = |name: &str, v: f64| {
            if v <= MAX_SPACING_MM {
                Ok(())
            } else {
                Err(damaged(format!(
                    "implausible {name} {} mm (a voxel of up to {MAX_SPACING_MM} mm is read)",
                    num(v)
                )))
            }
        };
        let pixel_spacing = affine_numbers::<2>(obj, tags::PIXEL_SPACING, "PixelSpacing", path)?;
        if let Some(sp) = pixel_spacing {
            if sp.iter().any(|&x| x <= 0.0) {
                return Err(damaged(format!(
                    "implausible PixelSpacing {}, {} mm (not positive)",
                    num(sp[0]),
                    num(sp[1])
                )));
            }
            size("PixelSpacing", sp[0].max(sp[1]))?;
        }
        // Zero or negative slice sizes (older scanners write a signed spacing) say nothing of the
        // grid and are passed over, as before; only a positive size is used, and checked.
        let positive = |tag: Tag, name: &str| -> Result<Option<f64>, IoError> {
            let t = affine_numbers::<1>(obj, tag, name, path)?
                .map(|[t]| t)
                .filter(|t| *t > 0.0);
            if let Some(t) = t {
                size(name, t)?;
            }
            Ok(t)
        };
        Ok(Geometry {
            position,
            orientation,
            pixel_spacing,
            thickness: positive(tags::SLICE_THICKNESS, "SliceThickness")?,
            between: positive(tags::SPACING_BETWEEN_SLICES, "SpacingBetweenSlices")?,
        })
    }
}

/// The first `N` numbers of an attribute that feeds the affine: `None` where it is absent or
/// empty, an error where it holds fewer than `N` numbers or one that is not finite.
fn affine_numbers<const N: usize>(
    obj: &DefaultDicomObject,
    tag: Tag,
    name: &str,
    path: &Path,
) -> Result<Option<[f64; N]>, IoError> {
    let Some(e) = obj.element_opt(tag).ok().flatten() else {
        return Ok(None);
    };
    if e.to_str()
        .is_ok_and(|t| t.trim().trim_end_matches('\0').is_empty())
    {
        return Ok(None);
    }
    let v = e.to_multi_float64().map_err(|_| {
        err(
            format!("{name} is not a list of numbers; the header is damaged"),
            path,
        )
    })?;
    if v.is_empty() {
        return Ok(None);
    }
    let Some(first) = v.get(..N).and_then(|s| <[f64; N]>::try_from(s).ok()) else {
        return Err(err(
            format!(
                "{name} holds {} numbers, {N} are needed; the header is damaged",
                v.len()
            ),
            path,
        ));
    };
    if let Some(x) = first.iter().find(|x| !x.is_finite()) {
        return Err(err(
            format!(
                "{name} holds {}, not a finite number; the header is damaged",
                num(*x)
            ),
            path,
        ));
    }
    Ok(Some(first))
}
