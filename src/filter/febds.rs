//! FEBDS micro-calcification candidates (Lopez & Urcid 2016), as PyPI `medical-image-std` 0.8.2
//! implements it in `FebdsAlgorithm(method)` (`algorithms/FEBDS.py`), on a 2D image `[y, x]`
//! with 12-bit intensities (0..4095):
//!
//! 1. enhancement: `dog` = G(1.7) − G(2.0); `log` = the 3×3 Laplacian `[[0,1,0],[1,-4,1],[0,1,0]]`
//!    of G(2.0); `fft` = the real part of `ifft2(fft2(x) · H)` with the Butterworth band-pass
//!    `H = 1 / (1 + ((D² − 21²) / (8 · 32 · D))^6)`, `D` the distance of index `(v, u)` from
//!    `(h/2, w/2)` (applied to the unshifted spectrum, as the package does). G is the package's
//!    gaussian: truncate 4, edge-replicate padding (scipy `nearest`);
//! 2. `|·|`, then a 5×5 median with torch `reflect` padding (scipy `mirror`);
//! 3. gamma `(x / 4095)^1.25 · 4095`;
//! 4. threshold: Otsu on `torch.histc` (256 bins when the maximum is ≤ 255, else 4096; the
//!    threshold is `linspace(min, max, bins)[argmax]`, foreground `x > t`) for `dog`/`log`;
//!    `binarize` for `fft`: the 5×5 local variance (unbiased, `reflect` padding) squared
//!    `>=` the global (unbiased) variance squared;
//! 5. closing with a 7×7 square, zero padding in the dilation and in the erosion (so the three
//!    pixels next to the border always end 0), then `scipy.ndimage.binary_fill_holes`
//!    (4-connected background).
//!
//! The result is a 0/1 mask. Differences to the package come only from f32 rounding (separable
//! instead of 2D gaussian, f64 FFT instead of torch's f32 FFT), which can move pixels within
//! rounding of the threshold (see tests/febds.rs).

use rayon::prelude::*;

use super::fft::{self, C64};
use super::intensity;
use super::median::median;
use super::separable::{Boundary, gaussian};
use crate::engine::boundary::Mode;

/// The enhancement step of FEBDS.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Method {
    Dog,
    Log,
    Fft,
}

impl std::str::FromStr for Method {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "dog" => Ok(Method::Dog),
            "log" => Ok(Method::Log),
            "fft" => Ok(Method::Fft),
            _ => Err(format!(
                "unknown FEBDS method '{s}' (expected dog, log or fft)"
            )),
        }
    }
}

pub(crate) const NEAREST: Boundary = Boundary {
    mode: Mode::Nearest,
    cval: 0.0,
};
pub(crate) const MIRROR: Boundary = Boundary {
    mode: Mode::Mirror,
    cval: 0.0,
};

/// Step 1 for `dog` and `log`; `fft` is [`butterworth_bandpass`].
pub fn enhance(img: &[f32], shape: [usize; 2], method: Method) -> Vec<f32> {
    match method {
        Method::Dog => {
            let mut a = gaussian(img, &shape, &[1.7, 1.7], NEAREST);
            let b = gaussian(img, &shape, &[2.0, 2.0], NEAREST);
            a.par_iter_mut()
                .zip(b.par_iter())
                .for_each(|(x, &y)| *x -= y);
            a
        }
        Method::Log => laplacian3x3(&gaussian(img, &shape, &[2.0, 2.0], NEAREST), shape),
        Method::Fft => butterworth_bandpass(img, shape),
    }
}

/// The 3×3 discrete Laplacian with torch `reflect` (scipy `mirror`) padding.
pub fn laplacian3x3(g: &[f32], [h, w]: [usize; 2]) -> Vec<f32> {
    let mut out = vec![0f32; g.len()];
    let m = |i: i64, n: usize| super::separable::filter_tap(i, n, Mode::Mirror).unwrap_or(0);
    out.par_chunks_mut(w).enumerate().for_each(|(y, row)| {
        let (up, dn) = (m(y as i64 - 1, h), m(y as i64 + 1, h));
        for (x, o) in row.iter_mut().enumerate() {
            let (l, r) = (m(x as i64 - 1, w), m(x as i64 + 1, w));
            let c = g[y * w + x];
            *o = g[up * w + x] + g[y * w + l] + c * -4.0 + g[y * w + r] + g[dn * w + x];
        }
    });
    out
}

/// The package's Butterworth kernel `1 / (1 + ((D² − D0²) / (8 W D))^(2n))`, D0 = 21, W = 32,
/// n = 3 (with `8 W D` replaced by 1e-6 where it is 0), in f32 as torch computes it.
pub fn butterworth(v: usize, u: usize, [h, w]: [usize; 2]) -> f32 {
    let (du, dv) = (u as f32 - w as f32 / 2.0, v as f32 - h as f32 / 2.0);
    let d = (du * du + dv * dv).sqrt();
    let band = d * d - 21.0 * 21.0;
    let mut cutoff = 8.0 * 32.0 * d;
    if cutoff == 0.0 {
        cutoff = 1e-6;
    }
    1.0 / (1.0 + (band / cutoff).powi(6))
}

/// Real part of `ifft2(fft2(x) · H)` (H from [`butterworth`]).
pub fn butterworth_bandpass(img: &[f32], shape: [usize; 2]) -> Vec<f32> {
    let [h, w] = shape;
    let mut a: Vec<C64> = img.par_iter().map(|&v| [v as f64, 0.0]).collect();
    fft::rows(&mut a, w, false);
    let mut t = fft::transpose(&a, h, w); // [u, v]
    drop(a);
    fft::rows(&mut t, h, false);
    t.par_chunks_mut(h).enumerate().for_each(|(u, col)| {
        for (v, c) in col.iter_mut().enumerate() {
            let k = butterworth(v, u, shape) as f64;
            *c = [c[0] * k, c[1] * k];
        }
    });
    fft::rows(&mut t, h, true);
    let mut a = fft::transpose(&t, w, h); // [v, u]
    drop(t);
    fft::rows(&mut a, w, true);
    a.par_iter().map(|c| c[0] as f32).collect()
}

/// Otsu's threshold as medical-image-std computes it with `torch.histc` (f32 arithmetic);
/// returns the mask `x > t`.
pub fn otsu_mask(x: &[f32]) -> Vec<f32> {
    let (mut lo, mut hi) = x
        .par_iter()
        .fold(
            || (f32::INFINITY, f32::NEG_INFINITY),
            |(a, b), &v| (a.min(v), b.max(v)),
        )
        .reduce(
            || (f32::INFINITY, f32::NEG_INFINITY),
            |(a, b), (c, d)| (a.min(c), b.max(d)),
        );
    let (min_val, max_val) = (lo, hi);
    let bins: usize = if max_val <= 255.0 { 256 } else { 4096 };
    if lo == hi {
        lo -= 1.0;
        hi += 1.0;
    }
    // histc: bin edges linspace(lo, hi, bins + 1); pos = (x − lo) · bins / (hi − lo).
    let edges = linspace(lo, hi, bins + 1);
    let (left, right) = (edges[0], edges[bins]);
    let hist = x
        .par_iter()
        .fold(
            || vec![0f64; bins],
            |mut hist, &v| {
                if v >= left && v <= right {
                    let mut pos = ((v - left) * bins as f32 / (right - left)) as usize;
                    if pos >= bins {
                        pos = bins - 1;
                    }
                    hist[pos] += 1.0;
                }
                hist
            },
        )
        .reduce(
            || vec![0f64; bins],
            |mut a, b| {
                a.iter_mut().zip(&b).for_each(|(x, y)| *x += y);
                a
            },
        );
    let centers = linspace(min_val, max_val, bins);
    let hc: Vec<f32> = hist
        .iter()
        .zip(&centers)
        .map(|(&c, &b)| c as f32 * b)
        .collect();
    let total = hist.iter().sum::<f64>() as f32;
    let total_hc = hc.iter().map(|&v| v as f64).sum::<f64>() as f32;
    let (mut c1, mut c2) = (0f64, 0f64);
    let mut best = (f32::NEG_INFINITY, 0usize);
    for i in 0..bins {
        c1 += hist[i];
        c2 += hc[i] as f64;
        let (w1, cs) = (c1 as f32, c2 as f32);
        let w2 = total - w1;
        let m1 = cs / w1.max(1e-6);
        let m2 = (total_hc - cs) / w2.max(1e-6);
        let d = m1 - m2;
        let var = w1 * w2 * (d * d);
        if var > best.0 {
            best = (var, i);
        }
    }
    let t = centers[best.1];
    x.par_iter().map(|&v| f32::from(v > t)).collect()
}

/// `torch.linspace(start, end, steps)` in f32: `start + step·i` for the first half,
/// `end − step·(steps − 1 − i)` for the second.
fn linspace(start: f32, end: f32, steps: usize) -> Vec<f32> {
    let step = (end - start) / (steps - 1).max(1) as f32;
    let half = steps / 2;
    (0..steps)
        .map(|i| {
            if i < half {
                start + step * i as f32
            } else {
                end - step * (steps - 1 - i) as f32
            }
        })
        .collect()
}

/// medical-image-std's `Threshold.binarize(alpha=1)`: 5×5 local variance (unbiased, torch
/// `reflect` padding), squared, `>=` the squared global variance (unbiased).
pub fn binarize_mask(x: &[f32], [h, w]: [usize; 2]) -> Vec<f32> {
    let n = x.len() as f64;
    let mean = x.par_iter().map(|&v| v as f64).sum::<f64>() / n;
    let gvar = (x
        .par_iter()
        .map(|&v| (v as f64 - mean).powi(2))
        .sum::<f64>()
        / (n - 1.0)) as f32;
    let g2 = gvar * gvar;
    let m = |i: i64, n: usize| super::separable::filter_tap(i, n, Mode::Mirror).unwrap_or(0);
    let mut out = vec![0f32; x.len()];
    out.par_chunks_mut(w).enumerate().for_each(|(y, row)| {
        let ys: [usize; 5] = std::array::from_fn(|k| m(y as i64 + k as i64 - 2, h));
        for (xi, o) in row.iter_mut().enumerate() {
            let xs: [usize; 5] = std::array::from_fn(|k| m(xi as i64 + k as i64 - 2, w));
            let mut s = 0f64;
            for &yy in &ys {
                for &xx in &xs {
                    s += x[yy * w + xx] as f64;
                }
            }
            let mu = s / 25.0;
            let mut q = 0f64;
            for &yy in &ys {
                for &xx in &xs {
                    q += (x[yy * w + xx] as f64 - mu).powi(2);
                }
            }
            let lv = (q / 24.0) as f32;
            *o = f32::from(lv * lv >= g2);
        }
    });
    out
}

/// Binary closing with a `k × k` square and zero padding in both steps (torch `max_pool2d` on a
/// zero-padded image, as the package does).
pub fn closing(mask: &[f32], [h, w]: [usize; 2], k: usize) -> Vec<f32> {
    let dil = box_extreme(mask, [h, w], k, true);
    box_extreme(&dil, [h, w], k, false)
}

/// Max (or min) over a `k × k` box with 0 outside the image; separable.
fn box_extreme(x: &[f32], [h, w]: [usize; 2], k: usize, max: bool) -> Vec<f32> {
    let r = (k / 2) as i64;
    let pick = |a: f32, b: f32| if max { a.max(b) } else { a.min(b) };
    let at = |line: &[f32], i: i64, n: usize| {
        if (0..n as i64).contains(&i) {
            line[i as usize]
        } else {
            0.0
        }
    };
    let mut tmp = vec![0f32; x.len()];
    tmp.par_chunks_mut(w)
        .zip(x.par_chunks(w))
        .for_each(|(o, line)| {
            for (i, v) in o.iter_mut().enumerate() {
                let i = i as i64;
                *v = (i - r..=i + r)
                    .map(|j| at(line, j, w))
                    .reduce(pick)
                    .unwrap_or(0.0);
            }
        });
    let mut out = vec![0f32; x.len()];
    out.par_chunks_mut(w).enumerate().for_each(|(y, o)| {
        for (xi, v) in o.iter_mut().enumerate() {
            *v = (y as i64 - r..=y as i64 + r)
                .map(|j| {
                    if (0..h as i64).contains(&j) {
                        tmp[j as usize * w + xi]
                    } else {
                        0.0
                    }
                })
                .reduce(pick)
                .unwrap_or(0.0);
        }
    });
    out
}

/// `scipy.ndimage.binary_fill_holes` in 2D: background pixels not 4-connected to the border
/// become foreground.
pub fn fill_holes(mask: &[f32], [h, w]: [usize; 2]) -> Vec<f32> {
    let mut outside = vec![false; mask.len()];
    let mut stack: Vec<usize> = Vec::new();
    let seed = |i: usize, outside: &mut Vec<bool>, stack: &mut Vec<usize>| {
        if mask[i] == 0.0 && !outside[i] {
            outside[i] = true;
            stack.push(i);
        }
    };
    for x in 0..w {
        seed(x, &mut outside, &mut stack);
        seed((h - 1) * w + x, &mut outside, &mut stack);
    }
    for y in 0..h {
        seed(y * w, &mut outside, &mut stack);
        seed(y * w + w - 1, &mut outside, &mut stack);
    }
    while let Some(i) = stack.pop() {
        let (y, x) = (i / w, i % w);
        if y > 0 {
            seed(i - w, &mut outside, &mut stack);
        }
        if y + 1 < h {
            seed(i + w, &mut outside, &mut stack);
        }
        if x > 0 {
            seed(i - 1, &mut outside, &mut stack);
        }
        if x + 1 < w {
            seed(i + 1, &mut outside, &mut stack);
        }
    }
    outside.iter().map(|&o| f32::from(!o)).collect()
}

/// Steps 2–3: `|·|`, the 5×5 median (mirror), gamma 1.25 on the 12-bit scale.
pub fn denoise(mut e: Vec<f32>, shape: [usize; 2]) -> Vec<f32> {
    e.par_iter_mut().for_each(|v| *v = v.abs());
    let mut m = median(&e, &shape, &[5, 5], MIRROR);
    intensity::gamma(&mut m, GAMMA, SCALE_12BIT);
    m
}

/// Gamma of step 3.
pub const GAMMA: f32 = 1.25;
/// The 12-bit scale of the gamma of step 3.
pub const SCALE_12BIT: f32 = 4095.0;

/// Steps 4–5: threshold (Otsu or binarize), 7×7 closing, hole filling.
pub fn segment(m: &[f32], shape: [usize; 2], method: Method) -> Vec<f32> {
    let bin = match method {
        Method::Fft => binarize_mask(m, shape),
        Method::Dog | Method::Log => otsu_mask(m),
    };
    let closed = closing(&bin, shape, 7);
    fill_holes(&closed, shape)
}

/// The FEBDS mask (0/1) of a 2D image `[y, x]` with 12-bit intensities.
pub fn febds(img: &[f32], shape: [usize; 2], method: Method) -> Vec<f32> {
    assert_eq!(img.len(), shape[0] * shape[1]);
    if img.is_empty() {
        return vec![];
    }
    segment(&denoise(enhance(img, shape, method), shape), shape, method)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_holes_fills_only_enclosed_background() {
        #[rustfmt::skip]
        let m = [
            0., 0., 0., 0., 0.,
            0., 1., 1., 1., 0.,
            0., 1., 0., 1., 0.,
            0., 1., 1., 0., 0.,
            0., 0., 0., 0., 0.,
        ];
        let f = fill_holes(&m, [5, 5]);
        assert_eq!(f[12], 1.0); // enclosed on 4 sides
        let mut m2 = m;
        m2[13] = 0.0; // opened to the outside through a 4-neighbour
        assert_eq!(fill_holes(&m2, [5, 5])[12], 0.0);
    }

    #[test]
    fn closing_clears_the_border_band() {
        let m = vec![1f32; 20 * 20];
        let c = closing(&m, [20, 20], 7);
        assert_eq!(c[0], 0.0);
        assert_eq!(c[3 * 20 + 3], 1.0);
        assert_eq!(c[2 * 20 + 10], 0.0);
    }
}
