//! Philox4x32-10 (Random123) and the noise made from it (docs/design.md §4): a pure function of
//! (key, counter), identical on every backend and machine. The elastic field's uniform noise and
//! every normal noise field (the intensity noise, the libraries' previews) come from here; the
//! CUDA kernels compute the same words (`kernels/common/philox.cuh`), and the CPU engine's SIMD
//! copies of the uniform noise are in `engine/noise.rs`.

/// Philox4x32's multipliers and Weyl key increments (Random123).
pub const PHILOX_M0: u32 = 0xD251_1F53;
pub const PHILOX_M1: u32 = 0xCD9E_8D57;
pub const PHILOX_W0: u32 = 0x9E37_79B9;
pub const PHILOX_W1: u32 = 0xBB67_AE85;

#[inline(always)]
fn mulhilo(a: u32, b: u32) -> (u32, u32) {
    let p = a as u64 * b as u64;
    ((p >> 32) as u32, p as u32)
}

/// Philox4x32 with 10 rounds, as Random123's `philox4x32_R(10, ctr, key)`.
#[inline]
pub fn philox4x32_10(ctr: [u32; 4], key: [u32; 2]) -> [u32; 4] {
    let mut c = ctr;
    let mut k = key;
    for round in 0..10 {
        if round > 0 {
            k[0] = k[0].wrapping_add(PHILOX_W0);
            k[1] = k[1].wrapping_add(PHILOX_W1);
        }
        let (hi0, lo0) = mulhilo(PHILOX_M0, c[0]);
        let (hi1, lo1) = mulhilo(PHILOX_M1, c[2]);
        c = [hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0];
    }
    c
}

/// Uniform noise in [-1, 1) for (seed, component k, linear voxel index i):
/// `u = (x0 >> 8) * 2^-24`, `noise = 2u - 1` (exact in f32).
#[inline]
pub fn noise_value(seed: u64, k: u32, i: u64) -> f32 {
    let key = [seed as u32, (seed >> 32) as u32];
    let x0 = philox4x32_10([i as u32, (i >> 32) as u32, k, 0], key)[0];
    let u = (x0 >> 8) as f32 * (1.0 / 16_777_216.0);
    2.0 * u - 1.0
}

/// Standard normal noise for (seed, component k, linear voxel index i): Philox counter
/// `(i & 0xffffffff, i >> 32, k, 1)` (the uniform noise has 0 there), first two output words
/// `x0, x1`, `u1 = ((x0 >> 8) + 1) 2^-24` in (0, 1], `u2 = (x1 >> 8) 2^-24`, and Box-Muller
/// `sqrt(-2 ln u1) cos(2 pi u2)` in f64, rounded to f32.
#[inline]
pub fn normal_value(seed: u64, k: u32, i: u64) -> f32 {
    let key = [seed as u32, (seed >> 32) as u32];
    let x = philox4x32_10([i as u32, (i >> 32) as u32, k, 1], key);
    let u1 = ((x[0] >> 8) as f64 + 1.0) * (1.0 / 16_777_216.0);
    let u2 = (x[1] >> 8) as f64 * (1.0 / 16_777_216.0);
    ((-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()) as f32
}
