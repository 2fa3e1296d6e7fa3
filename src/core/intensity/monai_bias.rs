//! `monai_bias_field`: MONAI 1.6.1 `RandBiasField`, `x · exp(Σ c · P_i P_j P_k)` over Legendre
//! polynomials of the float32 `linspace(-1, 1, n)` of each axis (see `bias.rs`), the same field
//! for every channel. Its `(degree + ndim choose ndim)` coefficients are drawn uniformly from
//! `coeff_range`, in MONAI's order: in 3D every `(i, j, k)` with `i + j + k ≤ degree` on MONAI's
//! axes (x first: augscope's axes reversed), `k` innermost; in 2D numpy's lower triangle
//! `(i, j)`, `j ≤ i ≤ degree`, row by row.

use serde::{Deserialize, Serialize};

use super::bias::{BiasField, Convention, MAX_BIAS_ORDER, Term, check_coefficients};
use super::{Arg, Call, DrawFor, Field, IntensityStep, StepSpec, check_p};
use crate::core::draws::{Range, SplitMix64};

/// When the field fires (`prob`), its degree and the range of its coefficients.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MonaiBiasSpec {
    pub p: f64,
    pub degree: usize,
    pub coeff_range: Range,
}

/// MONAI's powers, in its coefficient order, on augscope's axes.
fn monai_powers(degree: usize, ndim: usize) -> Vec<Vec<usize>> {
    let mut out = vec![];
    if ndim == 3 {
        for i in 0..=degree {
            for j in 0..=degree - i {
                for k in 0..=degree - i - j {
                    out.push(vec![k, j, i]);
                }
            }
        }
    } else {
        for i in 0..=degree {
            for j in 0..=i {
                out.push(vec![j, i]);
            }
        }
    }
    out
}

impl StepSpec for MonaiBiasSpec {
    fn library_default() -> Self {
        MonaiBiasSpec {
            p: 0.1,
            degree: 3,
            coeff_range: [0.0, 0.1],
        }
    }
    fn validate(&self) -> Result<(), String> {
        check_p("p", self.p)?;
        if !(1..=MAX_BIAS_ORDER).contains(&self.degree) {
            return Err(format!(
                "degree {} is not in 1..={MAX_BIAS_ORDER}",
                self.degree
            ));
        }
        check_coefficients(
            "coeff_range",
            self.coeff_range,
            &format!("degree {}", self.degree),
            monai_powers(self.degree, 3).len(),
        )
    }
    fn p(&self) -> f64 {
        self.p
    }
    fn fields(&mut self) -> Vec<Field<'_>> {
        vec![
            Field::Prob("p", &mut self.p),
            Field::Count("degree", &mut self.degree, MAX_BIAS_ORDER),
            Field::Range("coefficients", &mut self.coeff_range, 0.01, ""),
        ]
    }
    fn sample(
        &self,
        rng: &mut SplitMix64,
        img: &DrawFor<'_>,
    ) -> (Option<IntensityStep>, serde_json::Value) {
        let fire = rng.chance(self.p);
        let terms: Vec<Term> = monai_powers(self.degree, img.ndim)
            .into_iter()
            .map(|powers| Term {
                powers,
                c: rng.range(self.coeff_range),
            })
            .collect();
        let step = IntensityStep::MonaiBiasField(BiasField {
            convention: Convention::Monai,
            terms,
        });
        (fire.then_some(step), serde_json::json!({ "fired": fire }))
    }
    fn monai(&self) -> Option<Call> {
        Some(Call {
            class: "RandBiasFieldd",
            args: vec![
                ("degree", Arg::Int(self.degree)),
                ("coeff_range", Arg::Range(self.coeff_range)),
                ("prob", Arg::Float(self.p)),
            ],
        })
    }
}
