//! The filter fixtures of `tests/fixtures/filters/` (written by
//! `tests/fixtures/gen_filter_fixtures.py`): their schema, the filter and boundary each case
//! describes, the loaders, and the comparison with a tolerance. Used by tests/filters.rs (CPU
//! against scipy) and tests/filters_cuda.rs (CUDA against the CPU). Arrays are `[z, y, x]` (2D
//! `[y, x]`), channels or batch items leading.

use std::path::PathBuf;

use augscope::Mode;
use augscope::filter::{Boundary, Filter};
use serde::Deserialize;

#[derive(Deserialize)]
pub struct Fixtures {
    pub scipy: String,
    pub tolerance: f64,
    pub min_pass_fraction: f64,
    pub cases: Vec<Case>,
}

#[derive(Deserialize)]
pub struct Case {
    pub name: String,
    pub op: String,
    pub input: String,
    pub channels: usize,
    pub mode: String,
    pub cval: f32,
    pub expected: String,
    pub sigma: Option<Vec<f64>>,
    pub sigma2: Option<Vec<f64>>,
    pub size: Option<Vec<usize>>,
    pub gamma: Option<f32>,
    pub scale: Option<f32>,
    pub contrast: Option<f32>,
    pub brightness: Option<f32>,
}

pub fn dir() -> PathBuf {
    super::fixtures::tests_dir("fixtures/filters")
}

pub fn load_fixtures() -> Fixtures {
    let path = dir().join("cases.json");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text).expect("cases.json matches the generator's schema")
}

/// An array: values and shape.
pub fn load(name: &str) -> (Vec<f32>, Vec<usize>) {
    super::fixtures::npy_at(&dir(), name)
}

impl Case {
    pub fn filter(&self) -> Filter {
        let need =
            |o: Option<f32>, what: &str| o.unwrap_or_else(|| panic!("{}: no {what}", self.name));
        match self.op.as_str() {
            "gaussian" => Filter::Gaussian {
                sigma: self.sigma.clone().expect("sigma"),
            },
            "laplace" => Filter::Log {
                sigma: self.sigma.clone().expect("sigma"),
            },
            "dog" => Filter::Dog {
                sigma1: self.sigma.clone().expect("sigma"),
                sigma2: self.sigma2.clone().expect("sigma2"),
            },
            "median" => Filter::Median {
                size: self.size.clone().expect("size"),
            },
            "gamma" => Filter::Gamma {
                gamma: need(self.gamma, "gamma"),
                scale: need(self.scale, "scale"),
            },
            "contrast" => Filter::Contrast {
                contrast: need(self.contrast, "contrast"),
                brightness: need(self.brightness, "brightness"),
            },
            op => panic!("{}: unknown op {op}", self.name),
        }
    }

    pub fn boundary(&self) -> Boundary {
        Boundary {
            mode: self.mode.parse::<Mode>().expect("a scipy mode name"),
            cval: self.cval,
        }
    }

    /// The input values and the spatial shape (the channel axis dropped).
    pub fn input(&self) -> (Vec<f32>, Vec<usize>) {
        let (data, shape) = load(&self.input);
        let spatial = if self.channels > 1 {
            shape[1..].to_vec()
        } else {
            shape
        };
        (data, spatial)
    }
}

/// Compares `got` with `want`: (voxels off by more than `tol` or NaN, the largest error).
pub fn compare(got: &[f32], want: &[f32], tol: f64) -> (usize, f64) {
    assert_eq!(got.len(), want.len());
    let mut bad = 0;
    let mut worst = 0f64;
    for (&g, &w) in got.iter().zip(want) {
        let e = (g as f64 - w as f64).abs();
        if e.is_nan() || e > tol {
            bad += 1;
        }
        if e.is_nan() {
            worst = f64::INFINITY;
        } else {
            worst = worst.max(e);
        }
    }
    (bad, worst)
}
