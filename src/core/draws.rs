//! The random draws of sampling (docs/design.md §5): SplitMix64 streams keyed by `(seed, stream)`,
//! and the distributions a range is drawn with. Pure functions of their inputs, so a sample is the
//! same on every machine.

use serde::{Deserialize, Serialize};

/// A `[lo, hi]` range.
pub type Range = [f64; 2];

/// SplitMix64 (Steele, Lea, Flood 2014): tiny, fast and fully specified, so draws are the same
/// on every machine.
#[derive(Clone, Debug)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// The stream `stream` of the sample `seed`.
    pub fn new(seed: u64, stream: u64) -> Self {
        let mut s = SplitMix64(seed ^ stream.wrapping_mul(0xD1B5_4A32_D192_ED03));
        s.next_u64();
        s
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform on [0, 1) with 53 bits.
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform on `[r[0], r[1]]`, never past either end (which rounding could otherwise reach),
    /// so a draw of a range whose ends a plan may hold is one too.
    pub fn range(&mut self, r: Range) -> f64 {
        let v = r[0] + (r[1] - r[0]) * self.uniform();
        v.max(r[0].min(r[1])).min(r[0].max(r[1]))
    }

    /// Whether an event of probability `p` happens. Always draws, so the stream does not depend
    /// on `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        self.uniform() < p
    }

    /// A draw of `r` with `dist`. Both distributions take two numbers from the stream.
    pub fn draw(&mut self, r: Range, dist: Distribution) -> f64 {
        let below = self.chance(0.5);
        match dist {
            Distribution::Uniform => self.range(r),
            // batchgenerators' branches to the letter, also for ranges below 1 (where the second
            // one is U(1, hi), i.e. U(hi, 1)).
            Distribution::Split if below && r[0] < 1.0 => self.range([r[0], 1.0]),
            Distribution::Split => self.range([r[0].max(1.0), r[1]]),
        }
    }
}

/// How a factor is drawn from `[lo, hi]`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Distribution {
    /// Uniform on `[lo, hi]`.
    #[default]
    Uniform,
    /// batchgenerators' `augment_spatial` scale and batchgeneratorsv2's `BGContrast`: with
    /// probability 0.5 uniform on `[lo, 1]` (when `lo < 1`), else uniform between `max(lo, 1)` and
    /// `hi`, so shrinking and enlarging are equally likely (for `hi < 1` the second branch lies in
    /// `[hi, 1]`, as batchgenerators draws).
    Split,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix_is_stable() {
        // Reference values of SplitMix64 seeded with 0 (Vigna's splitmix64.c).
        let mut r = SplitMix64(0);
        assert_eq!(r.next_u64(), 0xE220_A839_7B1D_CDAF);
        assert_eq!(r.next_u64(), 0x6E78_9E6A_A1B9_65F4);
    }
}
