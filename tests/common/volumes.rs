//! Deterministic pseudo-random test data: volumes, label maps and a seeded generator of cases.
//! Arrays are `[z, y, x]` (2D `[y, x]`), channels leading. Tests compare these values with stored
//! numbers or with each other, so each generator keeps its exact recipe; where the recipes differ
//! (generator, seed mixing), they are separate functions, and none may change.

use augscope::Volume;

/// SplitMix64: the state advances by the golden-ratio increment and each value is mixed from
/// it, so a sequence is a pure function of the seed.
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    /// The next 64-bit value.
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A value in `0..n`.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// A value in [0, 1) with 53 random bits.
    pub fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// A value in [0, 1) with 24 random bits, exact in f32.
    pub fn unit_f32(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32
    }
}

/// `n` values in [0, 1) from SplitMix64 started at `seed` (the seed is not mixed first).
pub fn splitmix_values(n: usize, seed: u64) -> Vec<f32> {
    let mut rng = SplitMix64(seed);
    (0..n).map(|_| rng.unit_f32()).collect()
}

/// A volume of [`splitmix_values`], `channels` leading.
pub fn splitmix_volume(shape: &[usize], channels: usize, seed: u64) -> Volume {
    let n: usize = shape.iter().product();
    Volume::new(
        splitmix_values(n * channels, seed),
        shape.to_vec(),
        channels,
    )
}

/// `n` values in [0, 1) from xorshift64 (13, 7, 17) started at `start` (made odd), 24 bits each.
fn xorshift_from(n: usize, start: u64) -> Vec<f32> {
    let mut s = start | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 40) as f32 / (1u64 << 24) as f32
        })
        .collect()
}

/// `n` xorshift values in [0, 1), the seed mixed by the golden-ratio multiplier first (so that
/// small seeds give unrelated sequences). The CUDA tests' data.
pub fn random_values(n: usize, seed: u64) -> Vec<f32> {
    xorshift_from(n, seed.wrapping_mul(0x9E37_79B9_7F4A_7C15))
}

/// A volume of [`random_values`], `channels` leading.
pub fn random_volume(shape: &[usize], channels: usize, seed: u64) -> Volume {
    let n: usize = shape.iter().product::<usize>() * channels;
    Volume::new(random_values(n, seed), shape.to_vec(), channels)
}

/// A label map of five classes: [`random_volume`] of one channel times 5, floored.
pub fn random_labels(shape: &[usize], seed: u64) -> Volume {
    let mut v = random_volume(shape, 1, seed);
    for x in v.data.iter_mut() {
        *x = (*x * 5.0).floor();
    }
    v
}

/// A volume of xorshift values in [0, 1) like [`random_volume`], but the seed is used as it is
/// (only made odd), not mixed first: other values for the same seed.
pub fn xorshift_volume_unmixed(shape: &[usize], channels: usize, seed: u64) -> Volume {
    let n: usize = shape.iter().product::<usize>() * channels;
    Volume::new(xorshift_from(n, seed), shape.to_vec(), channels)
}
