//! Where a NIfTI header places its voxels: the affine nibabel reports (sform, qform or the base
//! affine), with the pixdim and xform code fixes it applies on load.

use ::nifti::NiftiHeader;

use super::header::Version;
use crate::core::volume::Nifti2Fields;

/// The spatial pixdims as nibabel's header check fixes them on load: 0 → 1, negative → |p|.
pub(super) fn fixed_pixdim(w: &Nifti2Fields) -> [f64; 3] {
    std::array::from_fn(|i| {
        let p = w.pixdim[i + 1];
        if p == 0.0 { 1.0 } else { p.abs() }
    })
}

/// A valid NIFTI_XFORM code (1..=4), else 0, as nibabel's `_chk_xform_code` fixes it.
pub(super) fn xform_code(c: i32) -> i32 {
    if (0..=4).contains(&c) { c } else { 0 }
}

/// `world_from_voxel` for NIfTI voxel indices `(i, j, k)`, the same matrix as nibabel's
/// `img.affine` (`Nifti1Header.get_best_affine`): the sform if `sform_code > 0`, else the qform
/// (`quat2mat(fillpositive(b, c, d)) · diag(pixdim[1], pixdim[2], qfac · pixdim[3])` plus the
/// qoffsets) if `qform_code > 0`, else `get_base_affine`: `diag(-pixdim[1], pixdim[2],
/// pixdim[3])` centred on the middle voxel (`shape_zoom_affine` with the x flip). Note that this
/// last case is nibabel's, not NIfTI method 1's `diag(pixdim)` at the corner.
pub fn world_from_voxel(h: &NiftiHeader) -> Result<[[f64; 4]; 4], String> {
    affine(
        &Nifti2Fields::widen(h, h.dim.map(|d| d as i64)),
        Version::One,
    )
}

/// [`world_from_voxel`] of the wide fields, in f64 throughout; `version` sets the threshold
/// below which the quaternion's `w` is taken as 0 (nibabel's, by the header's float type).
pub(super) fn affine(h: &Nifti2Fields, version: Version) -> Result<[[f64; 4]; 4], String> {
    let mut m = crate::core::volume::identity4();
    if xform_code(h.sform_code) > 0 {
        for (row, s) in m.iter_mut().zip(h.srow) {
            row.copy_from_slice(&s);
        }
    } else if xform_code(h.qform_code) > 0 {
        let [b, c, d] = h.quatern;
        // fillpositive with nibabel's threshold.
        let w2 = 1.0 - (b * b + c * c + d * d);
        let a = if w2.abs() < version.quaternion_threshold() {
            0.0
        } else if w2 < 0.0 || w2.is_nan() {
            return Err(format!(
                "qform quaternion ({b}, {c}, {d}) is not a unit quaternion"
            ));
        } else {
            w2.sqrt()
        };
        let r = quat_to_mat(a, b, c, d);
        let qfac = if h.pixdim[0] == -1.0 { -1.0 } else { 1.0 };
        let mut zoom = fixed_pixdim(h);
        zoom[2] *= qfac;
        for i in 0..3 {
            for j in 0..3 {
                m[i][j] = r[i][j] * zoom[j];
            }
        }
        for (i, o) in h.qoffset.iter().enumerate() {
            m[i][3] = *o;
        }
    } else {
        let ndim = h.dim[0].clamp(1, 3) as usize;
        let zoom = fixed_pixdim(h);
        for i in 0..ndim {
            let z = if i == 0 { -zoom[0] } else { zoom[i] };
            let origin = (h.dim[i + 1] as f64 - 1.0) / 2.0;
            m[i][i] = z;
            m[i][3] = -origin * z;
        }
    }
    if m.iter().flatten().any(|v| !v.is_finite()) {
        return Err("the affine (sform or qform) holds NaN or infinite values".into());
    }
    Ok(m)
}

/// nibabel's `quaternions.quat2mat`.
fn quat_to_mat(w: f64, x: f64, y: f64, z: f64) -> [[f64; 3]; 3] {
    let nq = w * w + x * x + y * y + z * z;
    if nq < f64::EPSILON {
        return [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]];
    }
    let s = 2.0 / nq;
    let (xs, ys, zs) = (x * s, y * s, z * s);
    let (wx, wy, wz) = (w * xs, w * ys, w * zs);
    let (xx, xy, xz) = (x * xs, x * ys, x * zs);
    let (yy, yz, zz) = (y * ys, y * zs, z * zs);
    [
        [1.0 - (yy + zz), xy - wz, xz + wy],
        [xy + wz, 1.0 - (xx + zz), yz - wx],
        [xz - wy, yz + wx, 1.0 - (xx + yy)],
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quaternion_of_identity_is_identity() {
        let r = quat_to_mat(1.0, 0.0, 0.0, 0.0);
        assert_eq!(r, [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]);
        // nibabel: quat2mat([0, 1, 0, 0]) == diag(1, -1, -1)
        let r = quat_to_mat(0.0, 1.0, 0.0, 0.0);
        assert_eq!(r, [[1.0, 0.0, 0.0], [0.0, -1.0, 0.0], [0.0, 0.0, -1.0]]);
    }
}
