//! Filters on `[z, y, x]` (or `[y, x]`) arrays, channel-wise (RGB, multi-channel volumes) and
//! over batches of same-shape images (the 1D gaussian kernel is the core's, the one the elastic
//! field uses). The filters live in `separable` (gaussian, LoG, DoG with every scipy filter
//! mode), `median`, `intensity` (gamma, contrast/brightness) and `febds` (the
//! micro-calcification pipeline of medical-image-std).
//!
//! One parameter struct, [`Filter`], and two interpreters: [`apply_cpu`] here and the CUDA
//! engine in `cuda`.

pub mod cuda;
pub mod febds;
pub mod fft;
pub mod intensity;
pub mod median;
pub mod separable;

pub use febds::Method as FebdsMethod;
pub use separable::Boundary;

/// A filter and its parameters (sigmas in voxels, one per axis).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Filter {
    /// `scipy.ndimage.gaussian_filter(x, sigma, mode, cval, truncate=4)`.
    Gaussian { sigma: Vec<f64> },
    /// `gaussian(sigma1) − gaussian(sigma2)`.
    Dog { sigma1: Vec<f64>, sigma2: Vec<f64> },
    /// `scipy.ndimage.gaussian_laplace(x, sigma, mode, cval)`.
    Log { sigma: Vec<f64> },
    /// `scipy.ndimage.median_filter(x, size, mode, cval)`, odd sizes.
    Median { size: Vec<usize> },
    /// `scale · (max(x, 0) / scale)^gamma`.
    Gamma { gamma: f32, scale: f32 },
    /// `contrast · x + brightness`.
    Contrast { contrast: f32, brightness: f32 },
    /// The FEBDS mask of a 2D grayscale 12-bit image.
    Febds(FebdsMethod),
}

/// `NAME:ARGS`, the intensity filters of `augscope batch --filter`: `gaussian:S`, `log:S`,
/// `dog:S1,S2`, `median:N`, `gamma:G[,SCALE]`, `contrast:C,B` (sigmas and sizes: one value or one
/// per axis, `;`-free comma lists). FEBDS makes a mask, not an image, so it is not one of them.
impl std::str::FromStr for Filter {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (name, args) = s.split_once(':').unwrap_or((s, ""));
        let nums = || -> Result<Vec<f64>, String> {
            args.split(',')
                .map(|t| {
                    t.trim()
                        .parse::<f64>()
                        .ok()
                        .filter(|v| v.is_finite())
                        .ok_or_else(|| format!("'{}' is not a finite number in '{s}'", t.trim()))
                })
                .collect()
        };
        let f = match name.trim() {
            "gaussian" => Filter::Gaussian { sigma: nums()? },
            "log" => Filter::Log { sigma: nums()? },
            "dog" => match nums()?[..] {
                [a, b] => Filter::Dog {
                    sigma1: vec![a],
                    sigma2: vec![b],
                },
                _ => return Err(format!("dog takes S1,S2, got '{args}'")),
            },
            "median" => {
                let size = args
                    .split(',')
                    .map(|t| t.trim().parse::<usize>())
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|_| format!("median takes odd whole sizes, got '{args}'"))?;
                Filter::Median { size }
            }
            "gamma" => match nums()?[..] {
                [g] => Filter::Gamma {
                    gamma: g as f32,
                    scale: 1.0,
                },
                [g, sc] => Filter::Gamma {
                    gamma: g as f32,
                    scale: sc as f32,
                },
                _ => return Err(format!("gamma takes G or G,SCALE, got '{args}'")),
            },
            "contrast" => match nums()?[..] {
                [c, b] => Filter::Contrast {
                    contrast: c as f32,
                    brightness: b as f32,
                },
                _ => return Err(format!("contrast takes C,B, got '{args}'")),
            },
            "febds" => {
                return Err("febds makes a mask, not an image: use augscope filter --febds".into());
            }
            other => {
                return Err(format!(
                    "unknown filter '{other}': gaussian:S, log:S, dog:S1,S2, median:N, gamma:G[,SCALE] or contrast:C,B"
                ));
            }
        };
        // The checks that need no data: any one of 1 to 3 axes must accept it.
        if (1..=3).any(|nd| f.resolved(nd, 1).is_ok()) {
            Ok(f)
        } else {
            Err(f
                .resolved(3, 1)
                .err()
                .map_or_else(|| "invalid filter".into(), |e| e.to_string()))
        }
    }
}

/// A filter that cannot run on the given data.
#[derive(Debug, thiserror::Error)]
pub enum FilterError {
    #[error("{0}")]
    Invalid(String),
}

fn invalid(msg: impl Into<String>) -> FilterError {
    FilterError::Invalid(msg.into())
}

/// One value for every axis, or one per axis.
fn per_axis<T: Copy>(v: &[T], ndim: usize, what: &str) -> Result<Vec<T>, FilterError> {
    match v.len() {
        1 => Ok(vec![v[0]; ndim]),
        n if n == ndim => Ok(v.to_vec()),
        n => Err(invalid(format!(
            "{what} has {n} values; give one, or one per axis ({ndim})"
        ))),
    }
}

fn check_sigma(s: &[f64], ndim: usize) -> Result<Vec<f64>, FilterError> {
    let s = per_axis(s, ndim, "sigma")?;
    if s.iter().any(|v| !v.is_finite() || *v < 0.0) {
        return Err(invalid(format!("sigma must be finite and >= 0, got {s:?}")));
    }
    // A kernel of radius 4 sigma: 1000 is 4000 taps each side, far beyond any scan's use.
    if s.iter().any(|v| *v > crate::augment::limits::SIGMA) {
        return Err(invalid(format!("sigma must be at most 1000, got {s:?}")));
    }
    Ok(s)
}

impl Filter {
    /// The most values a median may gather: (voxels) × (window size). A 255-wide window over even
    /// a small volume would run for minutes on any engine; this bound is about a minute of CPU
    /// (a 256×512×512 volume takes a 9×9×9 window).
    pub const MAX_MEDIAN_READS: f64 = 5e10;

    /// Refuses work no filter run should take: a median whose window times the `values` it
    /// filters exceeds [`Self::MAX_MEDIAN_READS`].
    pub fn check_work(&self, values: usize) -> Result<(), FilterError> {
        if let Filter::Median { size } = self {
            let window: f64 = size.iter().map(|&k| k as f64).product();
            let reads = window * values as f64;
            if reads > Self::MAX_MEDIAN_READS {
                return Err(invalid(format!(
                    "median window {size:?} ({window} values) over {values} voxels is {reads:.2e} \
                     reads, above augscope's limit of {:.0e}; use a smaller window",
                    Self::MAX_MEDIAN_READS
                )));
            }
        }
        Ok(())
    }

    /// A short name for reports and file names.
    pub fn name(&self) -> &'static str {
        match self {
            Filter::Gaussian { .. } => "gaussian",
            Filter::Dog { .. } => "dog",
            Filter::Log { .. } => "log",
            Filter::Median { .. } => "median",
            Filter::Gamma { .. } => "gamma",
            Filter::Contrast { .. } => "contrast",
            Filter::Febds(_) => "febds",
        }
    }

    /// The filter with its per-axis parameters expanded to `ndim` axes, checked against the
    /// data (`channels` images of `ndim` axes).
    pub fn resolved(&self, ndim: usize, channels: usize) -> Result<Filter, FilterError> {
        if !(1..=3).contains(&ndim) {
            return Err(invalid(format!(
                "filters take 1 to 3 spatial axes, the image has {ndim}"
            )));
        }
        Ok(match self {
            Filter::Gaussian { sigma } => Filter::Gaussian {
                sigma: check_sigma(sigma, ndim)?,
            },
            Filter::Log { sigma } => Filter::Log {
                sigma: check_sigma(sigma, ndim)?,
            },
            Filter::Dog { sigma1, sigma2 } => Filter::Dog {
                sigma1: check_sigma(sigma1, ndim)?,
                sigma2: check_sigma(sigma2, ndim)?,
            },
            Filter::Median { size } => {
                let size = per_axis(size, ndim, "median size")?;
                if size.iter().any(|&k| k % 2 == 0 || k > 255) {
                    return Err(invalid(format!(
                        "median sizes must be odd and at most 255, got {size:?}"
                    )));
                }
                Filter::Median { size }
            }
            Filter::Gamma { gamma, scale } => {
                if !gamma.is_finite() || *gamma <= 0.0 || !scale.is_finite() || *scale <= 0.0 {
                    return Err(invalid(format!(
                        "gamma and its scale must be finite and > 0, got {gamma}, {scale}"
                    )));
                }
                self.clone()
            }
            Filter::Contrast {
                contrast,
                brightness,
            } => {
                if !contrast.is_finite() || !brightness.is_finite() {
                    return Err(invalid("contrast and brightness must be finite"));
                }
                self.clone()
            }
            Filter::Febds(_) => {
                if ndim != 2 || channels != 1 {
                    return Err(invalid(format!(
                        "FEBDS needs a 2D grayscale image, got {ndim} axes and {channels} channels"
                    )));
                }
                self.clone()
            }
        })
    }
}

/// Applies `filter` on the CPU to `data`: `channels` consecutive arrays of `shape` (channels of
/// one image or items of a batch), each filtered on its own.
pub fn apply_cpu(
    filter: &Filter,
    b: Boundary,
    data: &[f32],
    shape: &[usize],
) -> Result<Vec<f32>, FilterError> {
    let n: usize = shape.iter().product();
    if n == 0 || !data.len().is_multiple_of(n) {
        return Err(invalid(format!(
            "{} values do not fill whole arrays of shape {shape:?}",
            data.len()
        )));
    }
    let channels = data.len() / n;
    let f = filter.resolved(shape.len(), channels)?;
    f.check_work(data.len())?;
    Ok(match &f {
        Filter::Gaussian { sigma } => separable::gaussian(data, shape, sigma, b),
        Filter::Log { sigma } => separable::gaussian_laplace(data, shape, sigma, b),
        Filter::Dog { sigma1, sigma2 } => {
            separable::difference_of_gaussians(data, shape, sigma1, sigma2, b)
        }
        Filter::Median { size } => median::median(data, shape, size, b),
        Filter::Gamma { gamma, scale } => {
            let mut out = data.to_vec();
            intensity::gamma(&mut out, *gamma, *scale);
            out
        }
        Filter::Contrast {
            contrast,
            brightness,
        } => {
            let mut out = data.to_vec();
            intensity::contrast(&mut out, *contrast, *brightness);
            out
        }
        Filter::Febds(m) => febds::febds(data, [shape[0], shape[1]], *m),
    })
}

/// The result of [`run`]: the filtered values, the engine that made them and, when it is not the
/// one asked for, why.
pub struct FilterRun {
    pub out: Vec<f32>,
    /// `cpu` or `cuda:N`.
    pub backend: String,
    /// One line for the user and the report (CUDA unavailable, out of GPU memory).
    pub note: Option<String>,
}

/// Applies `filter` to `data` (`data.len() / prod(shape)` arrays of `shape`: channels or batch
/// items, all in one launch on a GPU) on the engine `spec` asks for (docs/design.md §6): `cuda[:N]` runs
/// on that device, `cuda:0,1` splits the arrays between the devices, `cpu` and `auto` on the CPU (the data lives on the host). A CUDA request that
/// cannot be met (no driver, no device, NVRTC failing) and a GPU out of memory fall back to the
/// CPU with a note, never an error. `precision` is the GPU storage type.
pub fn run(
    filter: &Filter,
    b: Boundary,
    data: &[f32],
    shape: &[usize],
    spec: &crate::engine::BackendSpec,
    precision: crate::engine::Precision,
) -> Result<FilterRun, FilterError> {
    use crate::engine::{BackendSpec, EngineError};
    let cpu = |note: Option<String>| -> Result<FilterRun, FilterError> {
        Ok(FilterRun {
            out: apply_cpu(filter, b, data, shape)?,
            backend: "cpu".into(),
            note,
        })
    };
    let ids = match spec {
        BackendSpec::Cpu | BackendSpec::Auto => return cpu(None),
        BackendSpec::Cuda(ids) => ids,
    };
    // Invalid parameters are the user's error on every engine.
    let n: usize = shape.iter().product();
    if n == 0 || !data.len().is_multiple_of(n) {
        return apply_cpu(filter, b, data, shape).map(|out| FilterRun {
            out,
            backend: "cpu".into(),
            note: None,
        });
    }
    let count = data.len() / n;
    let f = filter.resolved(shape.len(), count)?;
    f.check_work(data.len())?;
    // Several devices split the arrays (batch items or channels) between them, contiguous
    // shares, one thread each; one device takes them all in one launch.
    let ids: Vec<usize> = if ids.is_empty() { vec![0] } else { ids.clone() };
    let parts = ids.len().min(count).max(1);
    let share = count.div_ceil(parts);
    let names: Vec<String> = ids[..parts].iter().map(|i| i.to_string()).collect();
    let backend = format!("cuda:{}", names.join(","));
    let result: Result<Vec<f32>, EngineError> = if parts == 1 {
        cuda::apply(&f, b, data, shape, ids[0], precision)
    } else {
        std::thread::scope(|s| {
            let handles: Vec<_> = data
                .chunks(share * n)
                .zip(&ids)
                .map(|(chunk, &ordinal)| {
                    let f = &f;
                    s.spawn(move || cuda::apply(f, b, chunk, shape, ordinal, precision))
                })
                .collect();
            let mut out = Vec::with_capacity(data.len());
            for h in handles {
                match h.join() {
                    Ok(Ok(part)) => out.extend(part),
                    Ok(Err(e)) => return Err(e),
                    Err(_) => return Err(EngineError::Cuda("a device worker stopped".into())),
                }
            }
            Ok(out)
        })
    };
    match result {
        Ok(out) => Ok(FilterRun {
            out,
            backend,
            note: None,
        }),
        Err(EngineError::OutOfMemory(why)) => cpu(Some(format!(
            "{backend} ran out of memory ({why}); retried on the CPU engine"
        ))),
        Err(e) => {
            let why = match &e {
                EngineError::CudaUnavailable(m) => m.clone(),
                other => other.to_string(),
            };
            let first = why.lines().next().unwrap_or("").trim().to_string();
            cpu(Some(format!(
                "CUDA filters unavailable ({first}); using the CPU engine"
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_filter_specs_parse_and_bad_ones_say_why() {
        assert_eq!(
            "gaussian:1.5".parse::<Filter>(),
            Ok(Filter::Gaussian { sigma: vec![1.5] })
        );
        assert_eq!(
            "median:3,5,5".parse::<Filter>(),
            Ok(Filter::Median {
                size: vec![3, 5, 5]
            })
        );
        assert_eq!(
            "dog:1,2".parse::<Filter>(),
            Ok(Filter::Dog {
                sigma1: vec![1.0],
                sigma2: vec![2.0]
            })
        );
        assert_eq!(
            "gamma:0.8".parse::<Filter>(),
            Ok(Filter::Gamma {
                gamma: 0.8,
                scale: 1.0
            })
        );
        for (bad, why) in [
            ("median:4", "odd"),
            ("median:x", "odd whole"),
            ("gaussian:-1", "sigma"),
            ("gaussian:nan", "finite"),
            ("dog:1", "S1,S2"),
            ("febds:dog", "mask"),
            ("blur:2", "unknown filter"),
            ("gamma:0", "gamma"),
            ("gaussian:1,1,1,1", "sigma"),
        ] {
            let e = bad.parse::<Filter>().expect_err(bad);
            assert!(e.contains(why), "{bad}: {e}");
        }
    }
}
