//! nnU-Net v2's model (batchgeneratorsv2's `SpatialTransform`): normal noise smoothed by an FFT
//! gaussian and scaled to the snippet's magnitude, the matrix `R(b) S` without translation, and
//! torch `grid_sample`'s interpolation and padding.

use std::f64::consts::PI;

use rayon::prelude::*;

use super::{
    Model, Preview, PreviewError, has_affine, live_elastic, map_with_alpha, mean_square_weight,
    unit_field, voxel_plan,
};
use crate::augment::{Order, Plan};
use crate::core::volume::Volume;
use crate::engine::boundary::Mode;
use crate::engine::cpu::resample_map;
use crate::engine::noise::fill_normal;

/// `E[max |f|] / RMS(f)` of batchgeneratorsv2's field, as the snippet's `_expected_max_over_rms`
/// computes it (the expected Euler characteristic of its excursion sets, integrated by the
/// trapezoid rule on 4001 points of [0, 12]).
fn expected_max_over_rms(patch: &[usize], sigma: f64) -> f64 {
    let d = patch.len() as f64;
    let lam = 1.0 / (2.0 * sigma * sigma);
    let count: f64 = patch.iter().map(|&n| n as f64).product();
    let pts = 4001;
    let u: Vec<f64> = (0..pts)
        .map(|i| 12.0 * i as f64 / (pts - 1) as f64)
        .collect();
    let mut tail: Vec<f64> = u
        .iter()
        .map(|&u| {
            let hermite = if patch.len() == 2 { u } else { u * u - 1.0 };
            (2.0 * count * lam.powf(d / 2.0) * hermite * (-0.5 * u * u).exp()
                / (2.0 * PI).powf((d + 1.0) / 2.0))
            .clamp(0.0, 1.0)
        })
        .collect();
    // numpy's argmax: the first maximum.
    let mut arg = 0;
    for (i, &v) in tail.iter().enumerate() {
        if v > tail[arg] {
            arg = i;
        }
    }
    for v in tail.iter_mut().take(arg) {
        *v = 1.0;
    }
    let h = 12.0 / (pts - 1) as f64;
    tail.windows(2).map(|w| 0.5 * (w[0] + w[1]) * h).sum()
}

/// The maximum |displacement| (voxels) the nnU-Net snippet gives batchgeneratorsv2 for alpha and
/// sigma on a patch: the expected RMS of augscope's field times the expected max / RMS of
/// batchgeneratorsv2's.
pub fn nnunet_magnitude(alpha: f64, sigma: f64, patch: &[usize]) -> f64 {
    let ms: f64 = patch
        .iter()
        .map(|&n| mean_square_weight(n, sigma))
        .product();
    alpha * (ms / 3.0).sqrt() * expected_max_over_rms(patch, sigma)
}

/// `fourier_gaussian` of one axis of length `n` (scipy's `ni_fourier.c`): frequency index
/// `h` in `0..(n+1)/2` then `-(n/2)..0`, factor `exp(-2 (pi sigma h / n)^2)`.
fn fourier_gaussian_factors(n: usize, sigma: f64) -> Vec<f64> {
    let t = PI * sigma / n as f64;
    let t = -2.0 * t * t;
    (0..n)
        .map(|j| {
            let h = if j < n.div_ceil(2) {
                j as f64
            } else {
                j as f64 - n as f64
            };
            (t * h * h).exp()
        })
        .collect()
}

/// The frequencies of one axis that `fourier_gaussian` keeps (factor above 1e-18: the others
/// change no value of the result): (signed frequency `h`, factor).
fn kept_frequencies(n: usize, sigma: f64) -> Vec<(i64, f64)> {
    fourier_gaussian_factors(n, sigma)
        .into_iter()
        .enumerate()
        .filter(|&(_, f)| f > 1e-18)
        .map(|(j, f)| {
            let h = if j < n.div_ceil(2) {
                j as i64
            } else {
                j as i64 - n as i64
            };
            (h, f)
        })
        .collect()
}

/// `e^{-2 pi i j h / n}` for every kept `h` (rows) and `j` in `0..n`, the angle reduced mod n.
fn twiddles(n: usize, kept: &[(i64, f64)]) -> Vec<[f64; 2]> {
    let mut t = Vec::with_capacity(kept.len() * n);
    for &(h, _) in kept {
        let h = h.rem_euclid(n as i64) as usize;
        for j in 0..n {
            let a = -2.0 * PI * ((j * h) % n) as f64 / n as f64;
            t.push([a.cos(), a.sin()]);
        }
    }
    t
}

/// Transforms every line of `data` (shape `shape`, line along `axis`) into a line of length
/// `m` with `f(input line, output line)`; returns the data with `shape[axis] = m`.
fn along_axis<T: Copy + Send + Sync + Default, U: Copy + Send + Sync + Default>(
    data: &[T],
    shape: &mut [usize],
    axis: usize,
    m: usize,
    f: impl Fn(&[T], &mut [U]) + Sync,
) -> Vec<U> {
    let n = shape[axis];
    let inner: usize = shape[axis + 1..].iter().product();
    let outer: usize = shape[..axis].iter().product();
    let mut lines = vec![U::default(); outer * inner * m];
    lines
        .par_chunks_mut(m)
        .enumerate()
        .for_each_init(Vec::new, |buf: &mut Vec<T>, (l, out)| {
            let (o, j) = (l / inner, l % inner);
            let base = o * n * inner + j;
            buf.clear();
            buf.extend((0..n).map(|i| data[base + i * inner]));
            f(buf, out);
        });
    let mut out = vec![U::default(); outer * inner * m];
    out.par_chunks_mut(inner)
        .enumerate()
        .for_each(|(c, chunk)| {
            let (o, i) = (c / m, c % m);
            for (j, v) in chunk.iter_mut().enumerate() {
                *v = lines[(o * inner + j) * m + i];
            }
        });
    shape[axis] = m;
    out
}

/// `real(ifftn(fourier_gaussian(fftn(x), sigma)))` (batchgeneratorsv2's smoothing of its
/// offsets, numpy's FFT and scipy's `fourier_gaussian`), as discrete Fourier sums restricted to
/// the frequencies the gaussian keeps: forward along the last axis (real input) to the first,
/// then back, each axis shrinking to its kept frequencies on the way in.
fn fft_gaussian(x: &[f32], shape: &[usize], sigma: f64) -> Vec<f64> {
    let nd = shape.len();
    let kept: Vec<Vec<(i64, f64)>> = shape.iter().map(|&n| kept_frequencies(n, sigma)).collect();
    let tw: Vec<Vec<[f64; 2]>> = shape
        .iter()
        .zip(&kept)
        .map(|(&n, k)| twiddles(n, k))
        .collect();
    let mut cur = shape.to_vec();
    let last = nd - 1;
    // Along the last axis the data is real, so its spectrum is Hermitian: X(-h) = conj X(h).
    // `partner[r]`: the kept index of -h, where there is one.
    let hs: Vec<i64> = kept[last].iter().map(|&(h, _)| h).collect();
    let partner: Vec<Option<usize>> = hs
        .iter()
        .map(|&h| hs.iter().position(|&g| g == -h && h != 0))
        .collect();
    // Forward, last axis: real input; each negative frequency with a partner is its conjugate.
    let (n, k) = (shape[last], kept[last].len());
    let mut spec: Vec<[f64; 2]> = along_axis(x, &mut cur, last, k, |line, out| {
        for r in 0..k {
            if hs[r] < 0 && partner[r].is_some() {
                continue;
            }
            let t = &tw[last][r * n..(r + 1) * n];
            let (mut re, mut im) = (0.0, 0.0);
            for (v, w) in line.iter().zip(t) {
                re += *v as f64 * w[0];
                im += *v as f64 * w[1];
            }
            let f = kept[last][r].1;
            out[r] = [re * f, im * f];
        }
        for r in 0..k {
            if hs[r] < 0
                && let Some(q) = partner[r]
            {
                out[r] = [out[q][0], -out[q][1]];
            }
        }
    });
    for a in (0..last).rev() {
        let (n, k) = (shape[a], kept[a].len());
        spec = along_axis(&spec, &mut cur, a, k, |line, out| {
            for (r, o) in out.iter_mut().enumerate() {
                let t = &tw[a][r * n..(r + 1) * n];
                let (mut re, mut im) = (0.0, 0.0);
                for (v, w) in line.iter().zip(t) {
                    re += v[0] * w[0] - v[1] * w[1];
                    im += v[0] * w[1] + v[1] * w[0];
                }
                let f = kept[a][r].1;
                *o = [re * f, im * f];
            }
        });
    }
    // The inverse sums run over the kept frequencies of one output value: the twiddles
    // transposed (`[j][r]`), so that they are read in order.
    let transposed = |a: usize, weight: &dyn Fn(usize) -> f64| -> Vec<[f64; 2]> {
        let (n, k) = (shape[a], kept[a].len());
        let mut t = vec![[0.0; 2]; n * k];
        for r in 0..k {
            for j in 0..n {
                let w = tw[a][r * n + j];
                t[j * k + r] = [w[0] * weight(r), w[1] * weight(r)];
            }
        }
        t
    };
    // Inverse: the conjugate twiddles, 1/n per axis.
    for a in 0..last {
        let (n, k) = (shape[a], kept[a].len());
        let itw = transposed(a, &|_| 1.0);
        spec = along_axis(&spec, &mut cur, a, n, |line, out| {
            let s = 1.0 / n as f64;
            for (j, o) in out.iter_mut().enumerate() {
                let (mut re, mut im) = (0.0, 0.0);
                for (v, w) in line.iter().zip(&itw[j * k..(j + 1) * k]) {
                    re += v[0] * w[0] + v[1] * w[1];
                    im += v[1] * w[0] - v[0] * w[1];
                }
                *o = [re * s, im * s];
            }
        });
    }
    let (n, k) = (shape[last], kept[last].len());
    // Inverse, last axis, to real values: a frequency and its partner add twice the real part.
    let weight: Vec<f64> = (0..k)
        .map(|r| match (hs[r], partner[r]) {
            (h, Some(_)) if h < 0 => 0.0,
            (h, Some(_)) if h > 0 => 2.0,
            _ => 1.0,
        })
        .collect();
    let itw = transposed(last, &|r| weight[r]);
    along_axis(&spec, &mut cur, last, n, |line, out: &mut [f64]| {
        let s = 1.0 / n as f64;
        for (j, o) in out.iter_mut().enumerate() {
            let mut re = 0.0;
            for (v, w) in line.iter().zip(&itw[j * k..(j + 1) * k]) {
                re += v[0] * w[0] + v[1] * w[1];
            }
            *o = re * s;
        }
    })
}

/// batchgeneratorsv2's offsets for one draw: per component (array axis) `d`, normal noise
/// smoothed by [`fft_gaussian`], divided by its max |value| over the magnitude, as float32; then
/// the mean of each component is removed (its grid is centred on its mean).
fn nnunet_field(shape: &[usize], sigma: f64, magnitude: f64, seed: u64) -> Vec<Vec<f32>> {
    let n: usize = shape.iter().product();
    (0..shape.len())
        .map(|k| {
            let mut noise = vec![0f32; n];
            fill_normal(seed, k as u32, &mut noise);
            let smooth: Vec<f32> = fft_gaussian(&noise, shape, sigma)
                .into_iter()
                .map(|v| v as f32)
                .collect();
            let mx = smooth.iter().fold(0f32, |m, v| m.max(v.abs()));
            let div = mx / magnitude.max(1e-8) as f32;
            let mut c: Vec<f32> = smooth.into_iter().map(|v| v / div).collect();
            let mean = c.iter().map(|&v| v as f64).sum::<f64>() / n.max(1) as f64;
            for v in &mut c {
                *v = (*v as f64 - mean) as f32;
            }
            c
        })
        .collect()
}

/// torch grid_sample's padding for a scipy mode, as the nnU-Net snippet maps it: zeros (taps
/// outside read cval: grid-constant), border (nearest) or reflection (`align_corners=False`:
/// reflect about the pixel edges, scipy's reflect).
fn grid_sample_mode(mode: Mode) -> Option<Mode> {
    match mode {
        Mode::Constant | Mode::GridConstant => Some(Mode::GridConstant),
        Mode::Nearest => Some(Mode::Nearest),
        Mode::Reflect => Some(Mode::Reflect),
        _ => None,
    }
}

pub(super) fn nnunet(
    image: &Volume,
    label: Option<&Volume>,
    plan: &Plan,
) -> Result<Preview, PreviewError> {
    let mut steps = vec![];
    let mut p = voxel_plan(plan, image, "nnU-Net", &mut steps);
    let ndim = image.ndim();
    if has_affine(&Plan {
        rotate_rad: vec![],
        scale: vec![],
        ..p.clone()
    }) {
        steps.push("nnU-Net's SpatialTransform has no translation: it is left out".into());
    }
    p.translate.clear();
    if p.order == Order::Cubic {
        steps.push("grid_sample has no cubic B-spline: order 3 becomes bilinear (order 1)".into());
        p.order = Order::Linear;
    }
    match grid_sample_mode(p.mode) {
        Some(m) => {
            if m != p.mode {
                steps.push(format!(
                    "grid_sample pads as scipy's mode {m} (the plan's {})",
                    p.mode
                ));
            }
            p.mode = m;
        }
        None => {
            steps.push(format!(
                "grid_sample cannot pad as mode {}: constant padding with cval {}",
                p.mode, p.cval
            ));
            p.mode = Mode::GridConstant;
        }
    }
    let scale: Vec<f64> = match p.scale.len() {
        0 => vec![1.0; ndim],
        1 => vec![p.scale[0]; ndim],
        _ => p.scale.clone(),
    };
    if scale.windows(2).any(|w| w[0] != w[1]) && p.rotate_rad.iter().any(|&a| a != 0.0) {
        steps.push(
            "batchgeneratorsv2 scales before it turns (Rᵀ S; augscope: S Rᵀ): per-axis factors \
             stretch other directions"
                .into(),
        );
    }
    if ndim == 3 {
        let mx = image.shape.iter().copied().max().unwrap_or(1) as f64;
        if mx / image.shape[0].max(1) as f64 > 3.0 {
            steps.push(
                "nnU-Net augments a patch this anisotropic slice by slice (do_dummy_2d_data_aug); \
                 the preview shows the 3D transform"
                    .into(),
            );
        }
    }
    let elastic = live_elastic(&p);
    let mut map = map_with_alpha(&p, &image.shape, 1.0)?;
    // batchgeneratorsv2's matrix R(b) S = Rᵀ S: compose gives diag(s) Rᵀ, m[i][j] = s_i r_ji.
    for i in 0..ndim {
        for j in 0..ndim {
            map.in_from_centered[i][j] *= scale[j] / scale[i];
        }
    }
    let mut field = None;
    let mut displacement = None;
    if let Some(e) = elastic {
        let magnitude = nnunet_magnitude(e.alpha, e.sigma, &map.out_shape);
        let comps = nnunet_field(&map.out_shape, e.sigma, magnitude, e.seed);
        steps.push(format!(
            "elastic: normal noise, FFT gaussian sigma {} voxels (periodic), each component \
             scaled to max |displacement| {magnitude:.3} voxels, mean removed",
            e.sigma
        ));
        let f = unit_field(&map.out_shape, e.sigma, e.seed, comps);
        displacement = Some(f.displacement_stats(1.0));
        field = Some(f);
    }
    let (img, lab) = resample_map(
        image,
        label,
        &map,
        field.as_ref(),
        (p.order, p.mode, p.cval),
        // The snippet pads labels as the image (label 0 for constant padding).
        p.mode,
    );
    Ok(Preview {
        image: img,
        label: lab,
        model: Model::Nnunet,
        steps,
        control_grid: None,
        displacement,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nnunet_magnitude_is_the_snippets() {
        // The nnU-Net snippet's _magnitude(400, 5, (63, 78, 66)) and _magnitude(30, 3, (40, 50)),
        // run in Python.
        let m = nnunet_magnitude(400.0, 5.0, &[63, 78, 66]);
        assert!((m - 11.199_356_755_215_52).abs() < 1e-9, "{m}");
        let m = nnunet_magnitude(30.0, 3.0, &[40, 50]);
        assert!((m - 4.811_153_974_500_525).abs() < 1e-9, "{m}");
    }

    #[test]
    fn normal_noise_is_standard() {
        let n = 200_000;
        let mut v = vec![0f32; n];
        fill_normal(7, 1, &mut v);
        let mean = v.iter().map(|&x| x as f64).sum::<f64>() / n as f64;
        let var = v.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / n as f64;
        assert!(
            mean.abs() < 0.01 && (var - 1.0).abs() < 0.02,
            "{mean} {var}"
        );
        assert!(v.iter().all(|x| x.is_finite()));
    }

    #[test]
    fn fourier_factors_follow_numpy_frequencies() {
        let f = fourier_gaussian_factors(5, 1.0);
        // frequencies 0, 1, 2, -2, -1
        assert_eq!(f[0], 1.0);
        assert!((f[1] - f[4]).abs() < 1e-15 && (f[2] - f[3]).abs() < 1e-15);
        let f = fourier_gaussian_factors(4, 1.0);
        // frequencies 0, 1, -2, -1
        assert!((f[1] - f[3]).abs() < 1e-15 && f[2] < f[1]);
    }
}
