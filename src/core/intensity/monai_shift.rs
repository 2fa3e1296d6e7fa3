//! `monai_shift_intensity`: MONAI 1.6.1 `RandShiftIntensity`, `x + o` in f32, one offset for the
//! image or (`channel_wise`) one per channel, drawn uniformly from `offsets`.

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use super::{
    Arg, Call, DrawFor, Field, IntensitySpec, IntensityStep, PerChannel, StepSpec, StepValues,
    check_finite, check_p, check_range, draw_channel_wise, one_value, single,
};
use crate::core::draws::{Range, SplitMix64};

/// The drawn offsets.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MonaiShift {
    pub offsets: PerChannel<f64>,
}

impl StepValues for MonaiShift {
    fn count(&self) -> usize {
        self.offsets.len()
    }
    fn check(&self, _: Option<usize>) -> Result<(), String> {
        check_finite(&self.offsets, "offset")
    }
    fn apply_channel(&self, entry: usize, _: usize, x: &mut [f32], _: &[usize]) {
        if let Some(Some(o)) = self.offsets.get(entry) {
            let o = *o as f32;
            x.par_iter_mut().for_each(|v| *v += o);
        }
    }
    fn needs_whole_channel(&self) -> bool {
        false
    }
    fn fixed(&self) -> Option<IntensitySpec> {
        Some(IntensitySpec::MonaiShiftIntensity(MonaiShiftSpec {
            p: 1.0,
            offsets: one_value(single(&self.offsets)?),
            channel_wise: false,
        }))
    }
}

/// When the shift fires (`prob`) and how its offsets are drawn.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MonaiShiftSpec {
    pub p: f64,
    pub offsets: Range,
    /// One offset per channel.
    #[serde(default)]
    pub channel_wise: bool,
}

impl StepSpec for MonaiShiftSpec {
    fn library_default() -> Self {
        MonaiShiftSpec {
            p: 0.1,
            offsets: [-0.1, 0.1],
            channel_wise: false,
        }
    }
    fn validate(&self) -> Result<(), String> {
        check_p("p", self.p)?;
        check_range("offsets", self.offsets, None)
    }
    fn p(&self) -> f64 {
        self.p
    }
    fn fields(&mut self) -> Vec<Field<'_>> {
        vec![
            Field::Prob("p", &mut self.p),
            Field::Range("offsets", &mut self.offsets, 0.01, ""),
            Field::Flag("one offset per channel", &mut self.channel_wise),
        ]
    }
    fn sample(
        &self,
        rng: &mut SplitMix64,
        img: &DrawFor<'_>,
    ) -> (Option<IntensityStep>, serde_json::Value) {
        let (fire, offsets) =
            draw_channel_wise(rng, self.p, self.offsets, self.channel_wise, img.channels);
        let drawn = serde_json::json!({ "fired": fire });
        (
            fire.then_some(IntensityStep::MonaiShiftIntensity(MonaiShift { offsets })),
            drawn,
        )
    }
    fn monai(&self) -> Option<Call> {
        Some(Call {
            class: "RandShiftIntensityd",
            args: vec![
                ("offsets", Arg::Range(self.offsets)),
                ("prob", Arg::Float(self.p)),
                ("channel_wise", Arg::Bool(self.channel_wise)),
            ],
        })
    }
}
