//! TorchIO 1.2's model: one SimpleITK resample for the affine part, then `ElasticDeformation`'s
//! cubic B-spline on a coarse control grid, with SimpleITK's interpolation at the edges and its
//! padding beyond them.

use rayon::prelude::*;

use super::{
    ControlGrid, Model, Preview, PreviewError, affine_only, flip_only, has_affine, live_elastic,
    map_with_alpha, mean_square_weight, unit_field,
};
use crate::augment::{CoordMap, Order, Plan, Space};
use crate::core::volume::Volume;
use crate::engine::boundary::Mode;
use crate::engine::cpu::resample_map;
use crate::engine::field::ElasticField;
use crate::engine::noise::noise_value;

/// The cubic B-spline basis `B3`.
fn bspline3(t: f64) -> f64 {
    let t = t.abs();
    if t < 1.0 {
        2.0 / 3.0 - t * t + t * t * t / 2.0
    } else if t < 2.0 {
        (2.0 - t).powi(3) / 6.0
    } else {
        0.0
    }
}

/// SimpleITK's `BSplineTransformInitializer` grid along one axis of `n` voxels with `points`
/// control points (mesh `points - 3`): the box from voxel `-0.5 - 1/8` to `n - 0.5 + 1/8` cut
/// into the mesh, one node beyond each end. Returns (origin, spacing) in voxels.
fn bspline_grid(n: usize, points: usize) -> (f64, f64) {
    let gs = (n as f64 + 0.25) / (points - 3) as f64;
    (-0.625 - gs, gs)
}

/// The snippet's `_bspline_gain`: mean over the `n` voxels of one axis of `sum_k B3(t - k)^2`
/// over the control points that move.
fn bspline_gain(n: usize, mesh: usize, locked: bool) -> f64 {
    let (g0, gs) = bspline_grid(n, mesh + 3);
    let ks: Vec<usize> = if locked {
        (2..mesh + 1).collect()
    } else {
        (0..mesh + 3).collect()
    };
    let sum: f64 = (0..n)
        .map(|p| {
            let t = (p as f64 - g0) / gs;
            ks.iter()
                .map(|&k| bspline3(t - k as f64).powi(2))
                .sum::<f64>()
        })
        .sum();
    sum / n.max(1) as f64
}

/// The snippet's `RandomAlphaSigmaElastic.grid` in augscope's axes: control points per array
/// axis (`[z, y, x]`, a 2D image as `[1, y, x]`) and the maximum displacement, voxels per axis.
fn torchio_grid(
    shape3: [usize; 3],
    sigma_vox: [f64; 3],
    alpha_vox: [f64; 3],
    two_d: bool,
) -> ([usize; 3], [f64; 3]) {
    let mut points = [0usize; 3];
    let mut ratio = 1.0;
    for a in 0..3 {
        let moving = !(two_d && a == 0);
        let mesh = if moving {
            ((shape3[a] as f64 / (3f64.sqrt() * sigma_vox[a])).round_ties_even() as usize).max(2)
        } else {
            2
        };
        points[a] = mesh + 3;
        // TorchIO's locked borders zero its first two axes (x and y: array axes 2 and 1) only.
        ratio *= bspline_gain(shape3[a], mesh, a > 0);
        if moving {
            // The snippet's `_gaussian_gain`: augscope's smoothing of its noise.
            ratio /= mean_square_weight(shape3[a], sigma_vox[a]);
        }
    }
    let mut max = [0.0; 3];
    for a in 0..3 {
        if !(two_d && a == 0) {
            max[a] = alpha_vox[a] / ratio.sqrt();
        }
    }
    (points, max)
}

/// Evaluates the B-spline field of `cp` (one component, C order over `points`) on the voxel grid
/// `shape3`, separably: along axis 2, then 1, then 0.
fn bspline_field(cp: &[f64], points: [usize; 3], shape3: [usize; 3]) -> Vec<f32> {
    // Per axis and voxel: the first tap and 4 weights (every voxel has 1 <= t <= n - 2).
    let taps: Vec<Vec<(usize, [f64; 4])>> = (0..3)
        .map(|a| {
            let (g0, gs) = bspline_grid(shape3[a], points[a]);
            (0..shape3[a])
                .map(|p| {
                    let t = (p as f64 - g0) / gs;
                    let i = t.floor() as i64 - 1;
                    let mut w = [0.0; 4];
                    for (k, wk) in w.iter_mut().enumerate() {
                        *wk = bspline3(t - (i + k as i64) as f64);
                    }
                    (i.max(0) as usize, w)
                })
                .collect()
        })
        .collect();
    let [n0, n1, n2] = points;
    let [s0, s1, s2] = shape3;
    // t1[k0][k1][p2]
    let mut t1 = vec![0.0; n0 * n1 * s2];
    for k01 in 0..n0 * n1 {
        for (p2, (i, w)) in taps[2].iter().enumerate() {
            t1[k01 * s2 + p2] = (0..4).map(|k| w[k] * cp[k01 * n2 + i + k]).sum();
        }
    }
    // t2[k0][p1][p2]
    let mut t2 = vec![0.0; n0 * s1 * s2];
    for k0 in 0..n0 {
        for (p1, (i, w)) in taps[1].iter().enumerate() {
            for p2 in 0..s2 {
                t2[(k0 * s1 + p1) * s2 + p2] =
                    (0..4).map(|k| w[k] * t1[(k0 * n1 + i + k) * s2 + p2]).sum();
            }
        }
    }
    let mut out = vec![0f32; s0 * s1 * s2];
    out.par_chunks_mut(s1 * s2)
        .enumerate()
        .for_each(|(p0, plane)| {
            let (i, w) = taps[0][p0];
            for (j, v) in plane.iter_mut().enumerate() {
                *v = (0..4)
                    .map(|k| w[k] * t2[(i + k) * s1 * s2 + j])
                    .sum::<f64>() as f32;
            }
        });
    out
}

/// TorchIO's B-spline deformation of one sample on `shape3` (a 2D image as `[1, y, x]`): the
/// control grid with the random displacement of every control point, the field's components on
/// the voxels (`[y, x]` only for a 2D image) and the maximum displacement per axis, voxels.
fn bspline_deformation(
    seed: u64,
    shape3: [usize; 3],
    sigma_vox: [f64; 3],
    alpha_vox: [f64; 3],
    two_d: bool,
) -> (ControlGrid, Vec<Vec<f32>>, [f64; 3]) {
    let (points, max) = torchio_grid(shape3, sigma_vox, alpha_vox, two_d);
    let count: usize = points.iter().product();
    let mut cps: Vec<Vec<f64>> = Vec::with_capacity(3);
    for (a, &m) in max.iter().enumerate() {
        let mut c: Vec<f64> = (0..count)
            .map(|i| m * noise_value(seed, a as u32, i as u64) as f64)
            .collect();
        for (i, v) in c.iter_mut().enumerate() {
            let k1 = (i / points[2]) % points[1];
            let k2 = i % points[2];
            let locked = |k: usize, n: usize| k < 2 || k + 2 >= n;
            if locked(k1, points[1]) || locked(k2, points[2]) {
                *v = 0.0;
            }
        }
        cps.push(c);
    }
    let comps3: Vec<Vec<f32>> = cps
        .iter()
        .map(|c| bspline_field(c, points, shape3))
        .collect();
    let comps: Vec<Vec<f32>> = if two_d { comps3[1..].to_vec() } else { comps3 };
    let mut origin = [0.0; 3];
    let mut spacing = [0.0; 3];
    for a in 0..3 {
        (origin[a], spacing[a]) = bspline_grid(shape3[a], points[a]);
    }
    let grid = ControlGrid {
        shape: points,
        origin,
        spacing,
        displacement: (0..count)
            .map(|i| [cps[0][i], cps[1][i], cps[2][i]])
            .collect(),
    };
    (grid, comps, max)
}

/// What SimpleITK's resampler does where a point leaves the buffer `[-0.5, n - 0.5)`.
#[derive(Clone, Copy)]
enum ItkPad {
    /// The default pixel value, per channel.
    Value(f32),
    PerChannel,
    /// The nearest-neighbour extrapolator: the voxel at the clamped rounded index.
    Nearest,
}

/// Sets every output voxel whose input point lies outside SimpleITK's buffer (`-0.5 <= c <
/// n - 0.5` on every axis) as the resampler does there.
fn itk_outside<const D: usize>(
    out: &mut Volume,
    src: &Volume,
    map: &CoordMap,
    field: Option<&ElasticField>,
    pad: ItkPad,
    per_channel: &[f32],
) {
    let shape = map.out_shape.clone();
    let row_len = shape[D - 1];
    let n: usize = shape.iter().product();
    if n == 0 {
        return;
    }
    let in_shape = &src.shape;
    let in_n: usize = in_shape.iter().product();
    let mut strides = [0usize; D];
    let mut st = 1;
    for a in (0..D).rev() {
        strides[a] = st;
        st *= in_shape[a];
    }
    let channels = out.channels;
    let rows = n / row_len;
    // Per row: the voxels to set and their values per channel.
    let fixes: Vec<(usize, Vec<f32>)> = (0..rows)
        .into_par_iter()
        .flat_map_iter(|r| {
            let mut buf: Vec<[f64; D]> = Vec::with_capacity(row_len);
            crate::engine::cpu::row_coords::<D>(map, field, r, &mut buf);
            let mut local = vec![];
            for (i, x) in buf.iter().enumerate() {
                let inside = (0..D).all(|a| x[a] >= -0.5 && x[a] < in_shape[a] as f64 - 0.5);
                if inside {
                    continue;
                }
                let vals: Vec<f32> = match pad {
                    ItkPad::Value(v) => vec![v; channels],
                    ItkPad::PerChannel => per_channel.to_vec(),
                    ItkPad::Nearest => {
                        let mut off = 0;
                        for a in 0..D {
                            let j = (x[a] + 0.5).floor().clamp(0.0, in_shape[a] as f64 - 1.0);
                            off += j as usize * strides[a];
                        }
                        (0..channels).map(|c| src.data[c * in_n + off]).collect()
                    }
                };
                local.push((r * row_len + i, vals));
            }
            local
        })
        .collect();
    for (i, vals) in fixes {
        for (c, v) in vals.into_iter().enumerate() {
            out.data[c * n + i] = v;
        }
    }
}

/// One SimpleITK resample as TorchIO runs it: inside the buffer order 0 and 1 clamp their taps
/// (scipy's `nearest`), order 3 mirrors (`mirror`); outside, `image_pad` and `label_pad`.
fn itk_resample(
    image: &Volume,
    label: Option<&Volume>,
    map: &CoordMap,
    field: Option<&ElasticField>,
    order: Order,
    image_pad: ItkPad,
    label_pad: ItkPad,
) -> (Volume, Option<Volume>) {
    let mode = if order == Order::Cubic {
        Mode::Mirror
    } else {
        Mode::Nearest
    };
    let (mut img, mut lab) =
        resample_map(image, label, map, field, (order, mode, 0.0), Mode::Nearest);
    let mins = |v: &Volume| -> Vec<f32> {
        let n: usize = v.shape.iter().product();
        (0..v.channels)
            .map(|c| {
                v.data[c * n..(c + 1) * n]
                    .iter()
                    .fold(f32::INFINITY, |m, &x| m.min(x))
            })
            .collect()
    };
    let fix = |out: &mut Volume, src: &Volume, pad: ItkPad| {
        let per = mins(src);
        match map.ndim {
            2 => itk_outside::<2>(out, src, map, field, pad, &per),
            _ => itk_outside::<3>(out, src, map, field, pad, &per),
        }
    };
    fix(&mut img, image, image_pad);
    if let (Some(l), Some(src)) = (lab.as_mut(), label) {
        fix(l, src, label_pad);
    }
    (img, lab)
}

pub(super) fn torchio(
    image: &Volume,
    label: Option<&Volume>,
    plan: &Plan,
) -> Result<Preview, PreviewError> {
    let mut steps = vec![];
    let ndim = image.ndim();
    let p = plan;
    let order = p.order;
    let (image_pad, label_pad) = match p.mode {
        Mode::Nearest => (ItkPad::Nearest, ItkPad::Nearest),
        Mode::Constant | Mode::GridConstant => (ItkPad::Value(p.cval), ItkPad::Value(0.0)),
        m => {
            steps.push(format!(
                "SimpleITK pads with a constant or the nearest voxel: mode {m} becomes constant \
                 cval {}",
                p.cval
            ));
            (ItkPad::Value(p.cval), ItkPad::Value(0.0))
        }
    };
    steps.push(
        "SimpleITK interpolates up to half a voxel beyond the edge voxel centres (the edge \
         repeated; order 3 with mirrored coefficients) and pads beyond"
            .into(),
    );
    let elastic = live_elastic(p);
    let affine = has_affine(p);
    let (mut cur, mut cur_lab) = (None::<Volume>, None::<Volume>);
    // A grid of another shape comes from the first resample (TorchIO's elastic keeps its grid).
    if affine || elastic.is_none() || p.out_shape.is_some() {
        let first = if elastic.is_some() {
            affine_only(p)
        } else {
            p.clone()
        };
        let map = first.compose(&image.shape)?;
        let (a, b) = itk_resample(image, label, &map, None, order, image_pad, label_pad);
        cur = Some(a);
        cur_lab = b;
    }
    let mut control_grid = None;
    let mut displacement = None;
    if let Some(e) = elastic {
        let src = cur.take().unwrap_or_else(|| image.clone());
        let src_lab = if affine || p.out_shape.is_some() {
            cur_lab.take()
        } else {
            label.cloned()
        };
        let two_d = ndim == 2;
        let shape3 = if two_d {
            [1, src.shape[0], src.shape[1]]
        } else {
            [src.shape[0], src.shape[1], src.shape[2]]
        };
        let spacing3: Vec<f64> = if two_d {
            let mut v = vec![1.0];
            v.extend_from_slice(&image.spacing_mm);
            v
        } else {
            image.spacing_mm.clone()
        };
        let mm = p.space == Space::Mm;
        let mut sigma_vox = [e.sigma; 3];
        let mut alpha_vox = [e.alpha; 3];
        if mm {
            for a in 0..3 {
                let s = spacing3.get(a).copied().unwrap_or(1.0);
                sigma_vox[a] = e.sigma / s;
                alpha_vox[a] = e.alpha / s;
            }
        }
        let (grid, comps, max) = bspline_deformation(e.seed, shape3, sigma_vox, alpha_vox, two_d);
        let (points, spacing) = (grid.shape, grid.spacing);
        control_grid = Some(grid);
        steps.push(format!(
            "elastic: TorchIO's cubic B-spline on {} x {} x {} control points ({:.1} voxels apart \
             on axis {}), max displacement {} voxels, axis 0 not locked (TorchIO locks its \
             first two axes only)",
            points[0],
            points[1],
            points[2],
            spacing[2],
            2,
            max.iter()
                .map(|m| format!("{m:.2}"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
        if affine {
            steps.push(
                "two resamples: the turn, scale and shift first (one SimpleITK resample), then \
                 the elastic deformation, which pads with each image's minimum"
                    .into(),
            );
        } else {
            steps.push("the elastic resample pads with the image's minimum".into());
        }
        let field = unit_field(&src.shape, e.sigma, e.seed, comps);
        displacement = Some(field.displacement_stats(1.0));
        let map = map_with_alpha(&flip_only(p), &src.shape, 1.0)?;
        let (a, b) = itk_resample(
            &src,
            src_lab.as_ref(),
            &map,
            Some(&field),
            order,
            ItkPad::PerChannel,
            ItkPad::PerChannel,
        );
        cur = Some(a);
        cur_lab = b;
    }
    let img = cur.expect("one resample ran");
    Ok(Preview {
        image: img,
        label: cur_lab,
        model: Model::TorchIo,
        steps,
        control_grid,
        displacement,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn torchio_grid_is_the_snippets() {
        // RandomAlphaSigmaElastic.grid of a 66 x 78 x 63 (x, y, z) image of 3 mm voxels for alpha
        // 400, sigma 5 (voxels), run in Python: control points (11, 12, 10) x first, max
        // displacement 51.55430336735257 mm on every axis.
        let (points, max) = torchio_grid([63, 78, 66], [5.0; 3], [400.0; 3], false);
        assert_eq!(points, [10, 12, 11]);
        for m in max {
            assert!((m * 3.0 - 51.554_303_367_352_57).abs() < 1e-9, "{m}");
        }
    }

    #[test]
    fn bspline_weights_sum_to_one_inside() {
        for (n, points) in [(66, 10), (7, 5), (1, 5)] {
            let (g0, gs) = bspline_grid(n, points);
            for p in 0..n {
                let t = (p as f64 - g0) / gs;
                let i = t.floor() - 1.0;
                let s: f64 = (0..4).map(|k| bspline3(t - (i + k as f64))).sum();
                assert!((s - 1.0).abs() < 1e-12);
                assert!(
                    i >= 0.0 && i + 3.0 <= (points - 1) as f64,
                    "taps inside the grid"
                );
            }
        }
    }
}
