//! `gaussian_noise`: batchgeneratorsv2 0.3.6 `GaussianNoiseTransform`, `x + σ · n` per channel,
//! where `n` is standard normal noise. batchgeneratorsv2 calls σ's range `noise_variance` but
//! uses the drawn value as the standard deviation (`normal_(std=σ)`); augscope names it `std`.
//!
//! The noise is augscope's own, from counters: `n` at voxel `i` (C order) of channel `c` is
//! `core::philox::normal_value(seed, c, i)`, the same bits on the CPU and on CUDA; `seed` is drawn
//! from the step's stream (it is not the sample seed, so the noise never repeats the elastic
//! field's counters).

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use super::{
    DrawFor, Field, IntensitySpec, IntensityStep, PerChannel, StepSpec, StepValues, check_p,
    check_range, draw_channels, one_value, py_bool, py_float, py_range, single,
};
use crate::core::draws::{Range, SplitMix64};
use crate::core::philox::normal_value;

/// The drawn standard deviations and the noise's key.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Noise {
    pub std: PerChannel<f64>,
    pub seed: u64,
}

impl StepValues for Noise {
    fn count(&self) -> usize {
        self.std.len()
    }
    fn check(&self, _: Option<usize>) -> Result<(), String> {
        match self
            .std
            .iter()
            .flatten()
            .find(|s| !s.is_finite() || **s < 0.0)
        {
            Some(s) => Err(format!("std {s} is not a finite number of at least 0")),
            None => Ok(()),
        }
    }
    fn apply_channel(&self, entry: usize, channel: usize, x: &mut [f32], _: &[usize]) {
        let Some(Some(s)) = self.std.get(entry) else {
            return;
        };
        let s = *s as f32;
        add_field(x, self.seed, channel, |z| z * s);
    }
    fn needs_whole_channel(&self) -> bool {
        // The noise of a voxel is keyed by its index in the whole grid.
        true
    }
    fn fixed(&self) -> Option<IntensitySpec> {
        Some(IntensitySpec::GaussianNoise(NoiseSpec {
            p: 1.0,
            std: one_value(single(&self.std)?),
            p_per_channel: 1.0,
            synchronize_channels: true,
        }))
    }
}

/// When noise fires and how its standard deviation is drawn (nnU-Net v2: p 0.1, `[0, 0.1]`, one
/// σ for every channel).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoiseSpec {
    pub p: f64,
    /// The standard deviation's range (batchgeneratorsv2's `noise_variance`).
    pub std: Range,
    #[serde(default = "super::one")]
    pub p_per_channel: f64,
    #[serde(default)]
    pub synchronize_channels: bool,
}

impl StepSpec for NoiseSpec {
    fn library_default() -> Self {
        NoiseSpec {
            p: 0.1,
            std: [0.0, 0.1],
            p_per_channel: 1.0,
            synchronize_channels: true,
        }
    }
    fn validate(&self) -> Result<(), String> {
        check_p("p", self.p)?;
        check_p("p_per_channel", self.p_per_channel)?;
        check_range("std", self.std, None)?;
        if self.std[0] < 0.0 {
            return Err(format!(
                "std [{}, {}] is negative",
                self.std[0], self.std[1]
            ));
        }
        Ok(())
    }
    fn p(&self) -> f64 {
        self.p
    }
    fn fields(&mut self) -> Vec<Field<'_>> {
        vec![
            Field::Prob("p", &mut self.p),
            Field::Range("std", &mut self.std, 0.005, ""),
            Field::Prob("p per channel", &mut self.p_per_channel),
            Field::Flag(
                "one value for every channel",
                &mut self.synchronize_channels,
            ),
        ]
    }
    fn sample(
        &self,
        rng: &mut SplitMix64,
        img: &DrawFor<'_>,
    ) -> (Option<IntensityStep>, serde_json::Value) {
        let channels = img.channels;
        let (v, drawn) = draw_channels(
            rng,
            self.p,
            self.p_per_channel,
            self.synchronize_channels,
            channels,
            |r| r.range(self.std),
        );
        let seed = rng.next_u64();
        (
            v.map(|std| IntensityStep::GaussianNoise(Noise { std, seed })),
            drawn,
        )
    }
    fn batchgeneratorsv2(&self) -> Option<String> {
        Some(format!(
            "GaussianNoiseTransform(noise_variance={}, p_per_channel={}, synchronize_channels={})",
            py_range(self.std, Default::default()),
            py_float(self.p_per_channel),
            py_bool(self.synchronize_channels)
        ))
    }
}

/// `x[i] += noise(z)`, where `z` is the standard normal field of `seed` at voxel `i` of channel
/// `channel` (`core::philox::normal_value`): every noise family's loop.
pub(crate) fn add_field(
    x: &mut [f32],
    seed: u64,
    channel: usize,
    noise: impl Fn(f32) -> f32 + Sync,
) {
    const CHUNK: usize = 4096;
    let k = channel as u32;
    x.par_chunks_mut(CHUNK).enumerate().for_each(|(ci, c)| {
        let base = (ci * CHUNK) as u64;
        for (j, v) in c.iter_mut().enumerate() {
            *v += noise(normal_value(seed, k, base + j as u64));
        }
    });
}
