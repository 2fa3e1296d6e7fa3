//! `monai_scale_intensity`: MONAI 1.6.1 `RandScaleIntensity`, `x · f32(1 + f)`, one factor for the
//! image or (`channel_wise`) one per channel, drawn uniformly from `factors`.

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use super::{
    Arg, Call, DrawFor, Field, IntensitySpec, IntensityStep, PerChannel, StepSpec, StepValues,
    check_finite, check_p, check_range, draw_channel_wise, one_value, single,
};
use crate::core::draws::{Range, SplitMix64};

/// The drawn factors.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MonaiScale {
    pub factors: PerChannel<f64>,
}

impl StepValues for MonaiScale {
    fn count(&self) -> usize {
        self.factors.len()
    }
    fn check(&self, _: Option<usize>) -> Result<(), String> {
        check_finite(&self.factors, "factor")
    }
    fn apply_channel(&self, entry: usize, _: usize, x: &mut [f32], _: &[usize]) {
        if let Some(Some(f)) = self.factors.get(entry) {
            // `img * (1 + factor)`: the sum in f64 (Python), the product in f32 (torch).
            let m = (1.0 + *f) as f32;
            x.par_iter_mut().for_each(|v| *v *= m);
        }
    }
    fn needs_whole_channel(&self) -> bool {
        false
    }
    fn fixed(&self) -> Option<IntensitySpec> {
        Some(IntensitySpec::MonaiScaleIntensity(MonaiScaleSpec {
            p: 1.0,
            factors: one_value(single(&self.factors)?),
            channel_wise: false,
        }))
    }
}

/// When the scaling fires (`prob`) and how its factors are drawn.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MonaiScaleSpec {
    pub p: f64,
    pub factors: Range,
    /// One factor per channel.
    #[serde(default)]
    pub channel_wise: bool,
}

impl StepSpec for MonaiScaleSpec {
    fn library_default() -> Self {
        MonaiScaleSpec {
            p: 0.1,
            factors: [-0.1, 0.1],
            channel_wise: false,
        }
    }
    fn validate(&self) -> Result<(), String> {
        check_p("p", self.p)?;
        check_range("factors", self.factors, None)
    }
    fn p(&self) -> f64 {
        self.p
    }
    fn fields(&mut self) -> Vec<Field<'_>> {
        vec![
            Field::Prob("p", &mut self.p),
            Field::Range("factors", &mut self.factors, 0.01, ""),
            Field::Flag("one factor per channel", &mut self.channel_wise),
        ]
    }
    fn sample(
        &self,
        rng: &mut SplitMix64,
        img: &DrawFor<'_>,
    ) -> (Option<IntensityStep>, serde_json::Value) {
        let (fire, factors) =
            draw_channel_wise(rng, self.p, self.factors, self.channel_wise, img.channels);
        let drawn = serde_json::json!({ "fired": fire });
        (
            fire.then_some(IntensityStep::MonaiScaleIntensity(MonaiScale { factors })),
            drawn,
        )
    }
    fn monai(&self) -> Option<Call> {
        Some(Call {
            class: "RandScaleIntensityd",
            args: vec![
                ("factors", Arg::Range(self.factors)),
                ("prob", Arg::Float(self.p)),
                ("channel_wise", Arg::Bool(self.channel_wise)),
            ],
        })
    }
}
