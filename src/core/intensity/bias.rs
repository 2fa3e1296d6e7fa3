//! The polynomial bias fields of MONAI's `RandBiasField` and TorchIO's `RandomBiasField`: a
//! multiplicative field `exp(Σ c · b_i(x₀) b_j(x₁) b_k(x₂))` over coordinates in [-1, 1] per axis.
//! The two libraries differ in the basis (MONAI Legendre polynomials, TorchIO monomials), in the
//! coordinates (MONAI's float32 `linspace(-1, 1, n)`, TorchIO's voxel centres over the largest)
//! and in the arithmetic of the product (MONAI multiplies in f64 and rounds, TorchIO rounds the
//! field to f32 first), which [`Convention`] names. Each family turns its library's
//! coefficients into [`Term`]s on augscope's axes when it draws; the field is evaluated per voxel
//! in f64, terms in their order, the same on the CPU and on CUDA (kernels/intensity.cu
//! `int_bias`).

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use super::StepValues;

/// The highest power of a term (the libraries' `degree`/`order`).
pub const MAX_BIAS_ORDER: usize = 8;

/// The largest sum of |coefficients|: it bounds the field's exponent (coordinates lie in
/// [-1, 1], where every basis function lies in [-1, 1]).
const MAX_EXPONENT: f64 = 40.0;

/// Whose basis, coordinates and arithmetic the field follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Convention {
    /// MONAI 1.6.1: Legendre polynomials on float32 `linspace(-1, 1, n)`;
    /// `f32(f64(x) · exp(field))`.
    Monai,
    /// TorchIO 1.2.1: monomials on `(i − n/2 + ½) / max`; `x · f32(exp(field))` in f32.
    Torchio,
}

impl Convention {
    /// The code `int_bias` takes.
    pub fn code(self) -> i32 {
        match self {
            Convention::Monai => 0,
            Convention::Torchio => 1,
        }
    }
}

/// One term of the field: its coefficient and its power on each of augscope's axes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Term {
    pub powers: Vec<usize>,
    pub c: f64,
}

/// A drawn bias field, the same for every channel.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BiasField {
    pub convention: Convention,
    pub terms: Vec<Term>,
}

/// The coordinates of an axis of `n` voxels under `convention`, in f64.
pub fn axis_coordinates(convention: Convention, n: usize) -> Vec<f64> {
    match convention {
        Convention::Monai => {
            // numpy's linspace in f64 (`i · step + start`, the last set to stop), cast to f32.
            if n == 1 {
                return vec![-1.0];
            }
            let step = 2.0 / (n - 1) as f64;
            (0..n)
                .map(|i| {
                    let v = if i == n - 1 {
                        1.0
                    } else {
                        i as f64 * step + -1.0
                    };
                    v as f32 as f64
                })
                .collect()
        }
        Convention::Torchio => {
            // `np.arange(-n/2, n/2) + 0.5`, divided by its largest when that is above 0.
            let h = n as f64 / 2.0;
            let v: Vec<f64> = (0..n).map(|i| (-h + i as f64) + 0.5).collect();
            let max = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            if max > 0.0 {
                v.iter().map(|x| x / max).collect()
            } else {
                v
            }
        }
    }
}

/// The basis functions of orders `0..=order` at `x`: Legendre polynomials (their three-term
/// recurrence) or monomials (repeated products), in f64.
pub fn basis(convention: Convention, x: f64, order: usize) -> Vec<f64> {
    let mut b = vec![1.0; order + 1];
    for k in 1..=order {
        b[k] = match convention {
            Convention::Torchio => b[k - 1] * x,
            Convention::Monai if k == 1 => x,
            Convention::Monai => {
                let n = (k - 1) as f64;
                ((2.0 * n + 1.0) * x * b[k - 1] - n * b[k - 2]) / (n + 1.0)
            }
        };
    }
    b
}

impl BiasField {
    /// The highest power of any term.
    pub fn order(&self) -> usize {
        self.terms
            .iter()
            .flat_map(|t| t.powers.iter().copied())
            .max()
            .unwrap_or(0)
    }

    /// The field's exponent at every voxel of `shape` (C order), in f64.
    pub fn exponent(&self, shape: &[usize]) -> Vec<f64> {
        let order = self.order();
        // Per axis, the basis at every coordinate: tables[a][i][k].
        let tables: Vec<Vec<Vec<f64>>> = shape
            .iter()
            .map(|&n| {
                axis_coordinates(self.convention, n)
                    .into_iter()
                    .map(|x| basis(self.convention, x, order))
                    .collect()
            })
            .collect();
        // Rows along the last axis: the leading axes' product is fixed along a row.
        let last = *shape.last().unwrap_or(&1);
        let n: usize = shape.iter().product();
        let mut out = vec![0.0; n];
        out.par_chunks_mut(last.max(1))
            .enumerate()
            .for_each(|(row, o)| {
                let mut idx = [0usize; 3];
                let mut r = row;
                for a in (0..shape.len().saturating_sub(1)).rev() {
                    idx[a] = r % shape[a];
                    r /= shape[a];
                }
                let l = shape.len() - 1;
                for (i, f) in o.iter_mut().enumerate() {
                    idx[l] = i;
                    let mut sum = 0.0;
                    for t in &self.terms {
                        let mut v = t.c;
                        for (a, &p) in t.powers.iter().enumerate() {
                            v *= tables[a][idx[a]][p];
                        }
                        sum += v;
                    }
                    *f = sum;
                }
            });
        out
    }
}

impl StepValues for BiasField {
    fn count(&self) -> usize {
        1
    }
    fn check(&self, ndim: Option<usize>) -> Result<(), String> {
        let mut sum = 0.0;
        for t in &self.terms {
            if let Some(nd) = ndim
                && t.powers.len() != nd
            {
                return Err(format!(
                    "a term has {} powers for an image of {nd} axes: give one per axis",
                    t.powers.len()
                ));
            }
            if t.powers.iter().any(|&p| p > MAX_BIAS_ORDER) {
                return Err(format!("a power above {MAX_BIAS_ORDER}"));
            }
            if !t.c.is_finite() {
                return Err(format!("coefficient {} is not a finite number", t.c));
            }
            sum += t.c.abs();
        }
        if sum > MAX_EXPONENT {
            return Err(format!(
                "the coefficients' magnitudes sum to {sum}, above {MAX_EXPONENT} (the field \
                 would overflow)"
            ));
        }
        Ok(())
    }
    fn apply_channel(&self, _: usize, _: usize, x: &mut [f32], shape: &[usize]) {
        let e = self.exponent(shape);
        match self.convention {
            Convention::Monai => x
                .par_iter_mut()
                .zip(&e)
                .for_each(|(v, f)| *v = (*v as f64 * f.exp()) as f32),
            Convention::Torchio => x
                .par_iter_mut()
                .zip(&e)
                .for_each(|(v, f)| *v *= f.exp() as f32),
        }
    }
    fn needs_whole_channel(&self) -> bool {
        // The field depends on the voxel's place in the whole grid.
        true
    }
}

/// Whether coefficients drawn from `range` (the preset's key `name`), `terms` of them, keep the
/// field finite: their sum is an exponent, held to 40 in magnitude.
pub(crate) fn check_coefficients(
    name: &str,
    range: [f64; 2],
    what: &str,
    terms: usize,
) -> Result<(), String> {
    super::check_range(name, range, None)?;
    let most = range[0].abs().max(range[1].abs());
    let sum = terms as f64 * most;
    if sum > 40.0 {
        return Err(format!(
            "{name} [{}, {}] with {what}: {terms} coefficients could sum to {sum}, above 40 \
             (the field would overflow)",
            range[0], range[1]
        ));
    }
    Ok(())
}
