//! The Jacobian determinant of the sampling map `p -> x` (output voxel to input coordinate,
//! docs/design.md §3) and the fraction of folded voxels.
//!
//! A strong elastic field with a small sigma folds the deformation: the map stops being one to
//! one and `det(∂x/∂p)` changes sign. The determinant is computed from the coordinates that
//! `--save-coords` writes (`(ndim, *shape)` f32, C order, from [`super::cpu::coordinates`] or the
//! CUDA engine), with the finite differences of `numpy.gradient(coords[k], axis=a)` and its
//! defaults (unit spacing, `edge_order=1`):
//!
//! - inside: `(f[i+1] - f[i-1]) / 2`, second-order central differences;
//! - at the two ends: `f[1] - f[0]` and `f[n-1] - f[n-2]`, first-order one-sided differences;
//! - an axis of length 1, where `numpy.gradient` raises: the identity, i.e. `∂x_k/∂p_a` is 1 for
//!   `k == a` and 0 otherwise (a single slice neither stretches nor folds along its normal).
//!
//! Differences and the determinant are evaluated in f64 from the f32 coordinates, and the
//! determinant is rounded to f32 once at the end.
//!
//! **Mirroring is not folding.** A flip (and, in principle, any orientation-reversing affine part)
//! makes the determinant negative everywhere, yet the mirrored image is not folded. [`determinant`]
//! and [`stats`] report the determinant as it is (`folded` means `det <= 0`); for a plan, use
//! [`stats_for_map`], which multiplies each determinant by [`orientation`] (`-1` for an odd number
//! of flipped axes, `+1` otherwise), i.e. judges the map without its mirroring. That factor is
//! exact in f32, so the result equals the raw statistics of the unflipped map's orientation.

use rayon::prelude::*;
use serde::Serialize;

use super::EngineError;
use crate::augment::CoordMap;

/// One entry `∂x_k/∂p_a` of the Jacobian, by `numpy.gradient`'s rule, from the value `at` of the
/// voxel and those of its neighbours along axis `a` (`None` where the grid ends); the identity
/// entry (`diagonal` ? 1 : 0) on an axis of length 1.
#[inline]
fn slope(prev: Option<f32>, at: f32, next: Option<f32>, diagonal: bool) -> f64 {
    match (prev, next) {
        (Some(p), Some(n)) => (n as f64 - p as f64) / 2.0,
        (None, Some(n)) => n as f64 - at as f64,
        (Some(p), None) => at as f64 - p as f64,
        (None, None) => {
            if diagonal {
                1.0
            } else {
                0.0
            }
        }
    }
}

/// `det(j)` of the leading `ndim × ndim` block (2 or 3), by cofactors along the first row.
#[inline]
fn det(j: &[[f64; 3]; 3], ndim: usize) -> f64 {
    if ndim == 2 {
        j[0][0] * j[1][1] - j[0][1] * j[1][0]
    } else {
        j[0][0] * (j[1][1] * j[2][2] - j[1][2] * j[2][1])
            - j[0][1] * (j[1][0] * j[2][2] - j[1][2] * j[2][0])
            + j[0][2] * (j[1][0] * j[2][1] - j[1][1] * j[2][0])
    }
}

/// The Jacobian determinant `det(∂x/∂p)` of every output voxel, `prod(shape)` values in C order.
///
/// `coords` holds the input coordinate of every output voxel as `(ndim, *shape)` f32 in C order
/// (component-major), exactly what `--save-coords` writes; `ndim` is 2 or 3 and `shape` the
/// output grid. Derivatives follow `numpy.gradient` (see the module documentation; an axis of
/// length 1 contributes the identity). Parallel over rows of the last axis.
///
/// # Panics
/// When `ndim` is not 2 or 3, `shape.len() != ndim`, or `coords.len() != ndim * prod(shape)`.
pub fn determinant(coords: &[f32], ndim: usize, shape: &[usize]) -> Vec<f32> {
    assert!(
        (2..=3).contains(&ndim) && shape.len() == ndim,
        "the Jacobian needs a 2D or 3D grid, got ndim {ndim} and shape {shape:?}"
    );
    let n: usize = shape.iter().product();
    assert_eq!(
        coords.len(),
        ndim * n,
        "coordinates of a {shape:?} grid hold ndim * prod(shape) values"
    );
    let mut out = vec![0f32; n];
    if n == 0 {
        return out;
    }
    let row_len = shape[ndim - 1];
    let mut strides = [0usize; 3];
    let mut s = 1;
    for a in (0..ndim).rev() {
        strides[a] = s;
        s *= shape[a];
    }
    let comp: Vec<&[f32]> = coords.chunks_exact(n).collect();
    out.par_chunks_mut(row_len)
        .enumerate()
        .for_each(|(r, row)| {
            let mut p = [0usize; 3];
            let mut rem = r;
            for a in (0..ndim - 1).rev() {
                p[a] = rem % shape[a];
                rem /= shape[a];
            }
            let base = r * row_len;
            for (col, o) in row.iter_mut().enumerate() {
                p[ndim - 1] = col;
                let lin = base + col;
                let mut j = [[0f64; 3]; 3];
                for a in 0..ndim {
                    let st = strides[a];
                    let has_prev = p[a] > 0;
                    let has_next = p[a] + 1 < shape[a];
                    for (k, f) in comp.iter().enumerate() {
                        j[k][a] = slope(
                            has_prev.then(|| f[lin - st]),
                            f[lin],
                            has_next.then(|| f[lin + st]),
                            k == a,
                        );
                    }
                }
                *o = det(&j, ndim) as f32;
            }
        });
    out
}

/// The Jacobian determinant on the plane `index` normal to `axis` of a 3D output grid `shape`,
/// from the coordinates of that plane and of its neighbours along `axis`, the same values bit
/// for bit as that plane of [`determinant`] of the whole grid.
///
/// Each plane argument holds the input coordinates of one plane, `(3, rows, cols)` f32 in C
/// order (component-major), where `rows` and `cols` are the lengths of the two other axes in
/// increasing order (axis 0: `(y, x)`, axis 1: `(z, x)`, axis 2: `(z, y)`): the same values as
/// that plane of the whole grid's coordinates. `at` is the plane `index`; `prev` the plane
/// `index - 1` and `next` the plane `index + 1`, each given exactly when it exists in the grid
/// (`numpy.gradient`'s one-sided difference at the ends of `axis` needs only one neighbour, and
/// a grid one plane thick needs none: the identity along `axis`). The caller computes the planes
/// with the engine (at most three adjacent planes).
///
/// Returns `rows * cols` determinants in C order, or an error naming what does not fit.
pub fn determinant_plane(
    shape: &[usize],
    axis: usize,
    index: usize,
    prev: Option<&[f32]>,
    at: &[f32],
    next: Option<&[f32]>,
) -> Result<Vec<f32>, EngineError> {
    if shape.len() != 3 || axis >= 3 || index >= shape[axis] {
        return Err(EngineError::Shape(format!(
            "plane {index} along axis {axis} does not exist in a grid of shape {shape:?}"
        )));
    }
    let (ra, ca) = match axis {
        0 => (1, 2),
        1 => (0, 2),
        _ => (0, 1),
    };
    let (rows, cols) = (shape[ra], shape[ca]);
    let m = rows * cols;
    let want_prev = index > 0;
    let want_next = index + 1 < shape[axis];
    if prev.is_some() != want_prev || next.is_some() != want_next {
        return Err(EngineError::Shape(format!(
            "plane {index} along axis {axis} of {shape:?} needs the previous plane: {want_prev}, \
             the next plane: {want_next}"
        )));
    }
    for (name, p) in [("previous", prev), ("current", Some(at)), ("next", next)] {
        if let Some(p) = p
            && p.len() != 3 * m
        {
            return Err(EngineError::Shape(format!(
                "the {name} plane holds {} coordinates, a {rows}x{cols} plane has {}",
                p.len(),
                3 * m
            )));
        }
    }
    let mut out = vec![0f32; m];
    if m == 0 {
        return Ok(out);
    }
    out.par_chunks_mut(cols).enumerate().for_each(|(r, row)| {
        for (c, o) in row.iter_mut().enumerate() {
            let u = r * cols + c;
            let mut j = [[0f64; 3]; 3];
            for k in 0..3 {
                let f = &at[k * m..(k + 1) * m];
                let pick = |pl: Option<&[f32]>| pl.map(|pl| pl[k * m + u]);
                j[k][axis] = slope(pick(prev), f[u], pick(next), k == axis);
                j[k][ra] = slope(
                    (r > 0).then(|| f[u - cols]),
                    f[u],
                    (r + 1 < rows).then(|| f[u + cols]),
                    k == ra,
                );
                j[k][ca] = slope(
                    (c > 0).then(|| f[u - 1]),
                    f[u],
                    (c + 1 < cols).then(|| f[u + 1]),
                    k == ca,
                );
            }
            *o = det(&j, 3) as f32;
        }
    });
    Ok(out)
}

/// Range of the Jacobian determinant and the share of folded voxels.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct JacobianStats {
    /// Smallest determinant (NaN for an empty grid).
    pub min: f64,
    /// Largest determinant (NaN for an empty grid).
    pub max: f64,
    /// Fraction of voxels with `det <= 0`, in [0, 1] (0 for an empty grid).
    pub folded_fraction: f64,
}

/// Min, max and the fraction of voxels with `det <= 0`, of the determinants as given (a
/// mirrored map counts as folded here: see [`stats_for_map`]). NaN determinants are left out of
/// min and max and are not folded.
pub fn stats(det: &[f32]) -> JacobianStats {
    stats_oriented(det, 1.0)
}

/// The orientation of the map's non-elastic part, `+1` or `-1`: `(-1)^(flipped axes)` times the
/// sign of the determinant of its affine part (positive for rotations and positive scales, the
/// only ones a valid plan has). Multiplying a determinant by it removes the mirroring.
pub fn orientation(map: &CoordMap) -> f64 {
    let d = map.ndim.clamp(2, 3);
    let mut j = [[0f64; 3]; 3];
    for (i, row) in j.iter_mut().enumerate().take(d) {
        row[..d].copy_from_slice(&map.in_from_centered[i][..d]);
    }
    let flips = map.flip[..d].iter().filter(|&&f| f).count();
    let affine = if det(&j, d) < 0.0 { -1.0 } else { 1.0 };
    if flips % 2 == 1 { -affine } else { affine }
}

/// [`stats`] of the map without its mirroring: every determinant times [`orientation`]`(map)`,
/// so that a flipped but otherwise smooth map has `folded_fraction` 0 and positive min and max.
/// This is what the `apply --report` readout shows.
pub fn stats_for_map(det: &[f32], map: &CoordMap) -> JacobianStats {
    stats_oriented(det, orientation(map))
}

/// [`stats`] of `sign * det` (sign is ±1, exact in f32).
fn stats_oriented(det: &[f32], sign: f64) -> JacobianStats {
    let sign = sign as f32;
    let (min, max, folded) = det
        .par_iter()
        .fold(
            || (f32::INFINITY, f32::NEG_INFINITY, 0usize),
            |(lo, hi, n), &d| {
                let d = sign * d;
                (lo.min(d), hi.max(d), n + usize::from(d <= 0.0))
            },
        )
        .reduce(
            || (f32::INFINITY, f32::NEG_INFINITY, 0usize),
            |a, b| (a.0.min(b.0), a.1.max(b.1), a.2 + b.2),
        );
    if det.is_empty() || min > max {
        return JacobianStats {
            min: f64::NAN,
            max: f64::NAN,
            folded_fraction: if det.is_empty() {
                0.0
            } else {
                folded as f64 / det.len() as f64
            },
        };
    }
    JacobianStats {
        min: min as f64,
        max: max as f64,
        folded_fraction: folded as f64 / det.len() as f64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::augment::{Elastic, Plan};
    use crate::engine::cpu::{CpuBackend, coordinates};

    /// The map of `plan` on `shape` and its coordinates (with the CPU engine's elastic field).
    fn coords_of(plan: &Plan, shape: &[usize]) -> (CoordMap, Vec<f32>) {
        let map = plan.compose(shape).unwrap();
        let field = CpuBackend::new()
            .field(plan, &map.out_shape)
            .map(|(f, _)| f);
        let c = coordinates(&map, field.as_deref());
        (map, c)
    }

    const SHAPES: [&[usize]; 4] = [&[9, 11], &[1, 7], &[6, 7, 8], &[5, 1, 6]];

    #[test]
    fn identity_has_determinant_one() {
        for shape in SHAPES {
            let (map, c) = coords_of(&Plan::identity(), shape);
            let d = determinant(&c, map.ndim, shape);
            assert!(d.iter().all(|&v| v == 1.0), "{shape:?}");
            let s = stats(&d);
            assert_eq!((s.min, s.max, s.folded_fraction), (1.0, 1.0, 0.0));
        }
    }

    #[test]
    fn scale_gives_its_power() {
        for shape in SHAPES {
            let plan = Plan {
                scale: vec![1.25],
                ..Plan::default()
            };
            let (map, c) = coords_of(&plan, shape);
            let d = determinant(&c, map.ndim, shape);
            // Axes of length 1 contribute the identity, not the scale.
            let stretched = shape.iter().filter(|&&n| n > 1).count() as i32;
            let want = 1.25f64.powi(stretched);
            for &v in &d {
                assert!((v as f64 - want).abs() < 1e-6, "{shape:?}: {v} vs {want}");
            }
        }
    }

    #[test]
    fn rotation_keeps_volume() {
        let cases: [(&[usize], Vec<f64>); 2] = [
            (&[17, 19], vec![0.7]),
            (&[10, 12, 14], vec![0.3, -0.5, 1.1]),
        ];
        for (shape, rot) in cases {
            let plan = Plan {
                rotate_rad: rot,
                ..Plan::default()
            };
            let (map, c) = coords_of(&plan, shape);
            let d = determinant(&c, map.ndim, shape);
            for &v in &d {
                assert!((v - 1.0).abs() < 1e-5, "{shape:?}: {v}");
            }
            assert_eq!(orientation(&map), 1.0);
        }
    }

    #[test]
    fn a_flip_is_mirroring_not_folding() {
        for (shape, flip) in [
            (&[8usize, 9][..], vec![1]),
            (&[6, 7, 8], vec![0]),
            (&[6, 7, 8], vec![0, 2]),
            (&[6, 7, 8], vec![0, 1, 2]),
        ] {
            let plan = Plan {
                flip: flip.clone(),
                rotate_rad: if shape.len() == 3 {
                    vec![0.2, 0.1, -0.3]
                } else {
                    vec![0.4]
                },
                ..Plan::default()
            };
            let (map, c) = coords_of(&plan, shape);
            let d = determinant(&c, map.ndim, shape);
            let want = if flip.len() % 2 == 1 { -1.0 } else { 1.0 };
            for &v in &d {
                assert!((v - want).abs() < 1e-5, "{flip:?}: {v}");
            }
            assert_eq!(orientation(&map), want as f64);
            // The raw readout counts a mirrored map as folded; the map's readout does not.
            let raw = stats(&d);
            assert_eq!(raw.folded_fraction, if want < 0.0 { 1.0 } else { 0.0 });
            let s = stats_for_map(&d, &map);
            assert_eq!(s.folded_fraction, 0.0);
            assert!((s.min - 1.0).abs() < 1e-5 && (s.max - 1.0).abs() < 1e-5);
        }
    }

    #[test]
    fn finite_differences_are_numpy_gradient() {
        // x_k = p_k^2 along one axis: numpy.gradient gives [1, 2, 4, 6, 7] for [0, 1, 4, 9, 16].
        let shape = [3usize, 5];
        let n = 15;
        let mut c = vec![0f32; 2 * n];
        for i in 0..3 {
            for jx in 0..5 {
                c[i * 5 + jx] = i as f32; // x_0 = p_0
                c[n + i * 5 + jx] = (jx * jx) as f32; // x_1 = p_1^2
            }
        }
        let d = determinant(&c, 2, &shape);
        assert_eq!(&d[..5], &[1.0, 2.0, 4.0, 6.0, 7.0]);
        assert_eq!(&d[5..10], &d[..5]);
    }

    #[test]
    fn strong_elastic_folds_and_mirroring_does_not_hide_it() {
        let shape = [12usize, 14, 16];
        let mut plan = Plan {
            elastic: Some(Elastic {
                alpha: 300.0,
                sigma: 2.0,
                seed: 7,
            }),
            ..Plan::default()
        };
        let (map, c) = coords_of(&plan, &shape);
        let s = stats_for_map(&determinant(&c, 3, &shape), &map);
        assert!(s.folded_fraction > 0.01 && s.min < 0.0, "{s:?}");
        plan.flip = vec![1];
        let (map_f, c_f) = coords_of(&plan, &shape);
        let s_f = stats_for_map(&determinant(&c_f, 3, &shape), &map_f);
        // Mirroring reorders the voxels, not their set of local deformations.
        assert_eq!(s, s_f);
    }

    #[test]
    fn plane_equals_the_volume_bit_for_bit() {
        for shape in [[7usize, 6, 5], [1, 6, 5], [2, 4, 3]] {
            let plan = Plan {
                elastic: Some(Elastic {
                    alpha: 60.0,
                    sigma: 1.5,
                    seed: 3,
                }),
                rotate_rad: vec![0.3, 0.2, -0.1],
                flip: vec![2],
                ..Plan::default()
            };
            let (_, c) = coords_of(&plan, &shape);
            let whole = determinant(&c, 3, &shape);
            let n: usize = shape.iter().product();
            let idx = |p: [usize; 3]| (p[0] * shape[1] + p[1]) * shape[2] + p[2];
            for axis in 0..3 {
                let (ra, ca) = match axis {
                    0 => (1, 2),
                    1 => (0, 2),
                    _ => (0, 1),
                };
                // The coordinates of plane `i` along `axis`, cut from the whole grid's.
                let plane = |i: usize| -> Vec<f32> {
                    let mut v = Vec::new();
                    for k in 0..3 {
                        for r in 0..shape[ra] {
                            for col in 0..shape[ca] {
                                let mut p = [0; 3];
                                p[axis] = i;
                                p[ra] = r;
                                p[ca] = col;
                                v.push(c[k * n + idx(p)]);
                            }
                        }
                    }
                    v
                };
                for i in 0..shape[axis] {
                    let prev = (i > 0).then(|| plane(i - 1));
                    let next = (i + 1 < shape[axis]).then(|| plane(i + 1));
                    let got = determinant_plane(
                        &shape,
                        axis,
                        i,
                        prev.as_deref(),
                        &plane(i),
                        next.as_deref(),
                    )
                    .unwrap();
                    let mut want = Vec::new();
                    for r in 0..shape[ra] {
                        for col in 0..shape[ca] {
                            let mut p = [0; 3];
                            p[axis] = i;
                            p[ra] = r;
                            p[ca] = col;
                            want.push(whole[idx(p)]);
                        }
                    }
                    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                    assert_eq!(bits(&got), bits(&want), "{shape:?} axis {axis} plane {i}");
                }
            }
        }
    }

    #[test]
    fn plane_refuses_missing_or_extra_neighbours() {
        let shape = [3usize, 2, 2];
        let p = vec![0f32; 12];
        assert!(determinant_plane(&shape, 0, 0, None, &p, None).is_err());
        assert!(determinant_plane(&shape, 0, 0, Some(&p), &p, Some(&p)).is_err());
        assert!(determinant_plane(&shape, 0, 1, Some(&p), &p, Some(&p)).is_ok());
        assert!(determinant_plane(&shape, 0, 2, Some(&p), &p, None).is_ok());
        assert!(determinant_plane(&shape, 0, 3, Some(&p), &p, None).is_err());
        assert!(determinant_plane(&shape, 1, 0, None, &p[..6], Some(&p)).is_err());
        assert!(determinant_plane(&[3, 2], 0, 0, None, &p, Some(&p)).is_err());
    }
}
