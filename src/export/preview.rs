//! "Preview as": what a training library does with a plan, run on augscope's samplers (DESIGN §8).
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

use std::f64::consts::PI;
use std::fmt;

use rayon::prelude::*;

use crate::augment::{CoordMap, Elastic, Order, Plan, PlanError, Space};
use crate::core::volume::Volume;
use crate::engine::boundary::Mode;
use crate::engine::cpu::resample_map;
use crate::engine::field::ElasticField;
use crate::engine::noise::{fill_noise, fill_normal, noise_value};

/// Whose model of the transform to run.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Model {
    /// augscope's own (DESIGN §3).
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
}

/// Runs a library's model of `plan` on the CPU. For [`Model::is_own`] models, use the engine.
pub fn preview(
    model: Model,
    image: &Volume,
    label: Option<&Volume>,
    plan: &Plan,
) -> Result<Preview, PreviewError> {
    plan.validate(image.ndim())?;
    match model {
        Model::Augscope | Model::Batchgenerators => Err(PreviewError::Own(model.label())),
        Model::Monai => monai(image, label, plan),
        Model::Nnunet => nnunet(image, label, plan),
        Model::TorchIo => torchio(image, label, plan),
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

// --- MONAI ------------------------------------------------------------------------------------

/// MONAI's `gaussian_1d(sigma, truncated=3.0, approx="erf")` (not normalised): tail
/// `int(max(3 sigma, 0.5) + 0.5)`, weights `(erf((x + 0.5) t) - erf((x - 0.5) t)) / 2` with
/// `t = 0.70710678 / sigma`.
pub fn monai_erf_kernel(sigma: f64) -> Vec<f64> {
    let tail = ((sigma * 3.0).max(0.5) + 0.5) as i64;
    // MONAI's own literal (not 1/sqrt(2) to f64 precision).
    #[allow(clippy::approx_constant)]
    let t = 0.707_106_78 / sigma.abs();
    (-tail..=tail)
        .map(|x| {
            let x = x as f64;
            (0.5 * (libm::erf(t * (x + 0.5)) - libm::erf(t * (x - 0.5)))).max(0.0)
        })
        .collect()
}

/// `Rand3DElasticd`'s smoothed offset: augscope's uniform noise of component `k`, separably
/// correlated with [`monai_erf_kernel`] on every axis, zero outside the grid.
fn monai_field(shape: &[usize], sigma: f64, seed: u64) -> Vec<Vec<f32>> {
    let n: usize = shape.iter().product();
    let w = monai_erf_kernel(sigma);
    (0..shape.len())
        .map(|k| {
            let mut c = vec![0f32; n];
            fill_noise(seed, k as u32, 0, &mut c);
            let mut tmp = vec![0f32; n];
            for axis in 0..shape.len() {
                crate::engine::gaussian::correlate_axis_zero(&c, &mut tmp, shape, axis, &w);
                std::mem::swap(&mut c, &mut tmp);
            }
            c
        })
        .collect()
}

fn monai(image: &Volume, label: Option<&Volume>, plan: &Plan) -> Result<Preview, PreviewError> {
    let mut steps = vec![];
    let mut p = voxel_plan(plan, image, "MONAI", &mut steps);
    let ndim = image.ndim();
    if p.cval != 0.0 {
        steps.push(format!("MONAI pads with 0, not the plan's cval {}", p.cval));
        p.cval = 0.0;
    }
    let mut elastic = live_elastic(&p);
    if elastic.is_some() && ndim == 2 {
        steps.push(
            "MONAI has no 2D elastic deformation of smoothed noise: the elastic part is left out"
                .into(),
        );
        elastic = None;
        p.elastic = None;
    }
    let sampling = (p.order, p.mode, p.cval);
    let Some(e) = elastic else {
        let map = p.compose(&image.shape)?;
        let (img, lab) = resample_map(image, label, &map, None, sampling, Mode::Constant);
        return Ok(Preview {
            image: img,
            label: lab,
            model: Model::Monai,
            steps,
            control_grid: None,
            displacement: None,
        });
    };
    let field = unit_field(
        &image.shape,
        e.sigma,
        e.seed,
        monai_field(&image.shape, e.sigma, e.seed),
    );
    let displacement = Some(field.displacement_stats(e.alpha));
    steps.push(format!(
        "elastic: MONAI's GaussianFilter (erf kernel truncated at 3 sigma, {} taps, not \
         normalised) smooths the noise",
        monai_erf_kernel(e.sigma).len()
    ));
    let (img, lab) = if has_affine(&p) {
        steps.push(
            "two resamples: translation, scale and rotation first (one lazy resample), then the \
             elastic deformation (Rand3DElasticd is not lazy) and the flip"
                .into(),
        );
        let first = affine_only(&p).compose(&image.shape)?;
        let (mid, mid_lab) = resample_map(image, label, &first, None, sampling, Mode::Constant);
        let mut second = flip_only(&p);
        second.elastic = Some(e);
        let map = map_with_alpha(&second, &image.shape, e.alpha)?;
        resample_map(
            &mid,
            mid_lab.as_ref(),
            &map,
            Some(&field),
            sampling,
            Mode::Constant,
        )
    } else {
        let map = map_with_alpha(&p, &image.shape, e.alpha)?;
        resample_map(image, label, &map, Some(&field), sampling, Mode::Constant)
    };
    Ok(Preview {
        image: img,
        label: lab,
        model: Model::Monai,
        steps,
        control_grid: None,
        displacement,
    })
}

// --- nnU-Net v2 (batchgeneratorsv2) -----------------------------------------------------------

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

fn nnunet(image: &Volume, label: Option<&Volume>, plan: &Plan) -> Result<Preview, PreviewError> {
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
        let magnitude = nnunet_magnitude(e.alpha, e.sigma, &image.shape);
        let comps = nnunet_field(&image.shape, e.sigma, magnitude, e.seed);
        steps.push(format!(
            "elastic: normal noise, FFT gaussian sigma {} voxels (periodic), each component \
             scaled to max |displacement| {magnitude:.3} voxels, mean removed",
            e.sigma
        ));
        let f = unit_field(&image.shape, e.sigma, e.seed, comps);
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

// --- TorchIO ----------------------------------------------------------------------------------

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

fn torchio(image: &Volume, label: Option<&Volume>, plan: &Plan) -> Result<Preview, PreviewError> {
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
    if affine || elastic.is_none() {
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
        let src_lab = if affine {
            cur_lab.take()
        } else {
            label.cloned()
        };
        let two_d = ndim == 2;
        let shape3 = if two_d {
            [1, image.shape[0], image.shape[1]]
        } else {
            [image.shape[0], image.shape[1], image.shape[2]]
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
        let (points, max) = torchio_grid(shape3, sigma_vox, alpha_vox, two_d);
        let count: usize = points.iter().product();
        let mut cps: Vec<Vec<f64>> = Vec::with_capacity(3);
        for (a, &m) in max.iter().enumerate() {
            let mut c: Vec<f64> = (0..count)
                .map(|i| m * noise_value(e.seed, a as u32, i as u64) as f64)
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
        control_grid = Some(ControlGrid {
            shape: points,
            origin,
            spacing,
            displacement: (0..count)
                .map(|i| [cps[0][i], cps[1][i], cps[2][i]])
                .collect(),
        });
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
        let field = unit_field(&image.shape, e.sigma, e.seed, comps);
        displacement = Some(field.displacement_stats(1.0));
        let map = map_with_alpha(&flip_only(p), &image.shape, 1.0)?;
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
    fn names_round_trip() {
        for m in Model::ALL {
            assert_eq!(m.to_string().parse::<Model>().unwrap(), m);
        }
        assert!("keras".parse::<Model>().is_err());
        assert_eq!(Model::TorchIo.id(), "torchio-1.2.1");
    }

    #[test]
    fn erf_kernel_is_monais() {
        // monai.networks.layers.convutils.gaussian_1d(2.0, truncated=3.0): 13 taps, centre
        // 0.19741265, sum 0.99884593 (not normalised).
        let k = monai_erf_kernel(2.0);
        assert_eq!(k.len(), 13);
        assert!((k[6] - 0.197_412_7).abs() < 1e-6, "{}", k[6]);
        let s: f64 = k.iter().sum();
        assert!((s - 0.998_845_93).abs() < 1e-6, "{s}");
    }

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
