//! The filter rows of `augscope bench`: gaussian σ = 2 and σ = 12 and the 5³ median on a
//! 256×512×512 volume (`[z, y, x]`, f32 in [0, 1), mode reflect), and FEBDS (dog, log, fft) on a
//! 4096×3328 mammogram-sized synthetic 12-bit image (`[y, x]`). The peers (cupyx.scipy.ndimage,
//! medical-image-std on torch) are timed by `benches/peers_filters.py` on the same shapes.
//!
//! GPU: `device_ms` is the filter's kernels alone (CUDA events, the data already on the device, as
//! cupyx is timed), `host_ms` the wall time from the host array to the host result (upload,
//! kernels, download). Medians over `reps` runs after one warm-up.

use std::time::Instant;

use super::{BenchRow, median};
use crate::engine::{EngineError, Precision};
use crate::filter::{Boundary, FebdsMethod, Filter, apply_cpu, cuda};

/// The volume of the 3D rows.
pub const VOLUME_SHAPE: [usize; 3] = [256, 512, 512];
/// The mammogram of the FEBDS rows (`[y, x]`).
pub const MAMMOGRAM_SHAPE: [usize; 2] = [4096, 3328];

fn xorshift(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 40) as f32 / (1u64 << 24) as f32
        })
        .collect()
}

/// A 12-bit mammogram-like image: a breast-shaped half ellipse with smooth texture and noise,
/// dark background, and a few hundred calcification-like bright spots.
pub fn synthetic_mammogram([h, w]: [usize; 2]) -> Vec<f32> {
    let noise = xorshift(h * w, 7);
    let mut img: Vec<f32> = (0..h * w)
        .map(|i| {
            let (y, x) = ((i / w) as f32, (i % w) as f32);
            let r = (((y - h as f32 / 2.0) / (0.46 * h as f32)).powi(2)
                + (x / (0.82 * w as f32)).powi(2))
            .sqrt();
            if r < 1.0 {
                let tex = (y * 0.013).sin() * (x * 0.017).cos() * 300.0
                    + (y * 0.051 + x * 0.03).sin() * 120.0;
                1500.0 + 900.0 * (1.0 - r).sqrt() + tex + noise[i] * 60.0
            } else {
                80.0 + noise[i] * 20.0
            }
        })
        .collect();
    let spots = xorshift(600, 11);
    for s in spots.chunks(3) {
        let (cy, cx) = ((0.2 + 0.6 * s[0]) * h as f32, (0.1 + 0.5 * s[1]) * w as f32);
        let amp = 600.0 + 800.0 * s[2];
        for dy in -4i64..=4 {
            for dx in -4i64..=4 {
                let (y, x) = (cy as i64 + dy, cx as i64 + dx);
                if (0..h as i64).contains(&y) && (0..w as i64).contains(&x) {
                    let d2 = (dy * dy + dx * dx) as f32;
                    img[y as usize * w + x as usize] += amp * (-d2 / 2.0).exp();
                }
            }
        }
    }
    img.iter_mut()
        .for_each(|v| *v = v.round().clamp(0.0, 4095.0));
    img
}

/// The rows: (name, filter, 3D volume or mammogram, bytes a perfect kernel must move in volumes).
fn cases() -> Vec<(&'static str, Filter, bool, Option<f64>)> {
    vec![
        (
            "gaussian s=2",
            Filter::Gaussian { sigma: vec![2.0] },
            true,
            Some(6.0),
        ),
        (
            "gaussian s=12",
            Filter::Gaussian { sigma: vec![12.0] },
            true,
            Some(6.0),
        ),
        (
            "median 5^3",
            Filter::Median { size: vec![5] },
            true,
            Some(2.0),
        ),
        ("febds dog", Filter::Febds(FebdsMethod::Dog), false, None),
        ("febds log", Filter::Febds(FebdsMethod::Log), false, None),
        ("febds fft", Filter::Febds(FebdsMethod::Fft), false, None),
    ]
}

fn row(shape: &str, variant: &str, engine: String, reps: usize) -> BenchRow {
    BenchRow {
        shape: shape.into(),
        variant: variant.into(),
        engine,
        device_ms: None,
        resample_ms: None,
        field_ms: None,
        host_ms: f64::NAN,
        host_min_ms: f64::NAN,
        host_cached_ms: None,
        device_cached_ms: None,
        floor_ms: None,
        floor_cached_ms: None,
        peak_device_volumes: None,
        reps,
    }
}

/// Times the filter rows on `gpu` (an ordinal, or none) and on the CPU (`cpu_reps` > 0) at
/// [`VOLUME_SHAPE`] and [`MAMMOGRAM_SHAPE`]. `d2d_bytes_per_s` gives the floor column.
pub fn rows(
    gpu: Option<usize>,
    precision: Precision,
    reps: usize,
    cpu_reps: usize,
    d2d_bytes_per_s: Option<f64>,
    progress: impl FnMut(&BenchRow),
) -> Result<Vec<BenchRow>, EngineError> {
    rows_at(
        &VOLUME_SHAPE,
        MAMMOGRAM_SHAPE,
        gpu,
        precision,
        reps,
        cpu_reps,
        d2d_bytes_per_s,
        progress,
    )
}

/// [`rows`] at other shapes.
#[allow(clippy::too_many_arguments)] // the bench options, passed through
pub fn rows_at(
    volume_shape: &[usize],
    mammogram_shape: [usize; 2],
    gpu: Option<usize>,
    precision: Precision,
    reps: usize,
    cpu_reps: usize,
    d2d_bytes_per_s: Option<f64>,
    mut progress: impl FnMut(&BenchRow),
) -> Result<Vec<BenchRow>, EngineError> {
    let b = Boundary::default();
    let vol = xorshift(volume_shape.iter().product(), 3);
    let mammo = synthetic_mammogram(mammogram_shape);
    let mut out = vec![];
    for (name, f, is_vol, moved) in cases() {
        let (data, shape): (&[f32], Vec<usize>) = if is_vol {
            (&vol, volume_shape.to_vec())
        } else {
            (&mammo, mammogram_shape.to_vec())
        };
        let shape_s = shape
            .iter()
            .map(|d| d.to_string())
            .collect::<Vec<_>>()
            .join("x");
        let f = f
            .resolved(shape.len(), 1)
            .map_err(|e| EngineError::Shape(e.to_string()))?;
        if let Some(ord) = gpu {
            cuda::apply_timed(&f, b, data, &shape, ord, precision)?;
            let (mut dev, mut host) = (vec![], vec![]);
            for _ in 0..reps {
                let t = Instant::now();
                let (_, tm) = cuda::apply_timed(&f, b, data, &shape, ord, precision)?;
                host.push(t.elapsed().as_secs_f64() * 1e3);
                dev.push(tm.compute_ms);
            }
            let variant = match f {
                Filter::Febds(FebdsMethod::Fft) if cuda::cufft_available() => "febds fft (cuFFT)",
                Filter::Febds(FebdsMethod::Fft) => "febds fft (host FFT)",
                _ => name,
            };
            let mut r = row(&shape_s, variant, format!("cuda:{ord} {precision:?}"), reps);
            r.device_ms = Some(median(&mut dev));
            r.host_min_ms = host.iter().cloned().fold(f64::INFINITY, f64::min);
            r.host_ms = median(&mut host);
            r.floor_ms = match (moved, d2d_bytes_per_s) {
                (Some(v), Some(bw)) => Some(v * (data.len() * 4) as f64 / bw * 1e3),
                _ => None,
            };
            progress(&r);
            out.push(r);
        }
        if cpu_reps > 0 {
            let mut host = vec![];
            for _ in 0..cpu_reps {
                let t = Instant::now();
                apply_cpu(&f, b, data, &shape).map_err(|e| EngineError::Shape(e.to_string()))?;
                host.push(t.elapsed().as_secs_f64() * 1e3);
            }
            let engine = format!("cpu ({} threads)", rayon::current_num_threads());
            let mut r = row(&shape_s, name, engine, cpu_reps);
            r.host_min_ms = host.iter().cloned().fold(f64::INFINITY, f64::min);
            r.host_ms = median(&mut host);
            progress(&r);
            out.push(r);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_synthetic_mammogram_is_12_bit_and_has_spots() {
        let img = synthetic_mammogram([256, 208]);
        assert!(img.iter().all(|&v| (0.0..=4095.0).contains(&v)));
        let mask = crate::filter::febds::febds(&img, [256, 208], FebdsMethod::Dog);
        assert!(mask.contains(&1.0));
    }

    #[test]
    fn cpu_rows_at_small_shapes() {
        let mut seen = vec![];
        let rows = rows_at(
            &[8, 12, 16],
            [96, 80],
            None,
            Precision::F32,
            10,
            1,
            None,
            |r| seen.push(r.variant.clone()),
        )
        .unwrap();
        assert_eq!(rows.len(), 6);
        assert_eq!(seen.len(), 6);
        assert_eq!(rows[2].variant, "median 5^3");
        assert_eq!(rows[5].shape, "96x80");
        assert!(
            rows.iter()
                .all(|r| r.host_ms >= 0.0 && r.device_ms.is_none())
        );
    }
}
