//! `torchio_bias_field`: TorchIO 1.2.1 `RandomBiasField`, `x · f32(exp(Σ c · x^i y^j z^k))` over
//! monomials of the voxel centres of each axis divided by the largest (see `bias.rs`), the same
//! field for every channel. Its coefficients are drawn uniformly from `coefficients` for every
//! `(i, j, k)` with `i + j + k ≤ order`, `k` innermost, on TorchIO's axes: augscope's the other
//! way round, x first (`(W, H, D)`). A 2D image is its `(W, H, 1)`, whose z coordinate is 0, so
//! the terms with `k > 0` vanish there (their coefficients are still drawn).

use serde::{Deserialize, Serialize};

use super::bias::{BiasField, Convention, MAX_BIAS_ORDER, Term, check_coefficients};
use super::{Arg, Call, DrawFor, Field, IntensityStep, StepSpec, check_p};
use crate::core::draws::{Range, SplitMix64};

/// When the field fires, its order and the range of its coefficients.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TorchioBiasSpec {
    pub p: f64,
    pub order: usize,
    pub coefficients: Range,
}

/// TorchIO's `(i, j, k)` in its coefficient order.
fn torchio_powers(order: usize) -> Vec<[usize; 3]> {
    let mut out = vec![];
    for i in 0..=order {
        for j in 0..=order - i {
            for k in 0..=order - i - j {
                out.push([i, j, k]);
            }
        }
    }
    out
}

impl StepSpec for TorchioBiasSpec {
    fn library_default() -> Self {
        TorchioBiasSpec {
            p: 1.0,
            order: 3,
            coefficients: [-0.5, 0.5],
        }
    }
    fn validate(&self) -> Result<(), String> {
        check_p("p", self.p)?;
        if self.order > MAX_BIAS_ORDER {
            return Err(format!("order {} is above {MAX_BIAS_ORDER}", self.order));
        }
        check_coefficients(
            "coefficients",
            self.coefficients,
            &format!("order {}", self.order),
            torchio_powers(self.order).len(),
        )
    }
    fn p(&self) -> f64 {
        self.p
    }
    fn fields(&mut self) -> Vec<Field<'_>> {
        vec![
            Field::Prob("p", &mut self.p),
            Field::Count("order", &mut self.order, MAX_BIAS_ORDER),
            Field::Range("coefficients", &mut self.coefficients, 0.01, ""),
        ]
    }
    fn sample(
        &self,
        rng: &mut SplitMix64,
        img: &DrawFor<'_>,
    ) -> (Option<IntensityStep>, serde_json::Value) {
        let fire = rng.chance(self.p);
        let mut terms = vec![];
        for [i, j, k] in torchio_powers(self.order) {
            let c = rng.range(self.coefficients);
            if img.ndim == 3 {
                terms.push(Term {
                    powers: vec![k, j, i],
                    c,
                });
            } else if k == 0 {
                terms.push(Term {
                    powers: vec![j, i],
                    c,
                });
            }
        }
        let step = IntensityStep::TorchioBiasField(BiasField {
            convention: Convention::Torchio,
            terms,
        });
        (fire.then_some(step), serde_json::json!({ "fired": fire }))
    }
    fn torchio(&self) -> Option<Call> {
        Some(Call {
            class: "RandomBiasField",
            args: vec![
                ("coefficients", Arg::Range(self.coefficients)),
                ("order", Arg::Int(self.order)),
                ("p", Arg::Float(self.p)),
            ],
        })
    }
}
