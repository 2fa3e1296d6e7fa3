//! Reproducible elastic noise (docs/design.md §4): the Philox4x32-10 noise of `core::philox`,
//! filled in parallel, with AVX2 and AVX-512 copies of the uniform noise.
//!
//! Arrays are `[z, y, x]` (or `[y, x]`); `i` is the C-order linear index of the output voxel.

use rayon::prelude::*;

pub use crate::core::philox::{
    PHILOX_M0, PHILOX_M1, PHILOX_W0, PHILOX_W1, noise_value, normal_value, philox4x32_10,
};

/// Fills `out` with the normal noise ([`normal_value`]) of component `k` for linear indices
/// `0..out.len()`.
pub fn fill_normal(seed: u64, k: u32, out: &mut [f32]) {
    const CHUNK: usize = 4096;
    out.par_chunks_mut(CHUNK)
        .enumerate()
        .for_each(|(ci, chunk)| {
            let base = (ci * CHUNK) as u64;
            for (j, v) in chunk.iter_mut().enumerate() {
                *v = normal_value(seed, k, base + j as u64);
            }
        });
}

/// Fills `out` with the noise of component `k` for linear indices `start..start + out.len()`.
pub fn fill_noise(seed: u64, k: u32, start: u64, out: &mut [f32]) {
    const CHUNK: usize = 4096;
    out.par_chunks_mut(CHUNK)
        .enumerate()
        .for_each(|(ci, chunk)| {
            noise_chunk(seed, k, start + (ci * CHUNK) as u64, chunk);
        });
}

/// Fills `out` with the noise of component `k` for linear indices `start..start + out.len()`, on
/// the calling thread (for callers that are already parallel).
pub fn fill_noise_run(seed: u64, k: u32, start: u64, out: &mut [f32]) {
    noise_chunk(seed, k, start, out);
}

/// Lanes of independent Philox streams computed in lockstep, so the 32x32->64 multiplies
/// vectorise.
const LANES: usize = 8;

/// One run of noise: the AVX-512 or AVX2 intrinsics where the CPU has them (the compiler's own
/// vectorisation of [`noise_lanes`] needs about 1.4x the instructions of the AVX2 version), else
/// the lanes. Same values, bit for bit.
#[allow(unsafe_code)] // calls of #[target_feature] functions, after the runtime check
fn noise_chunk(seed: u64, k: u32, base: u64, out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512f") {
        // SAFETY: avx512::noise_chunk only needs AVX-512F, which the CPU was just found to have.
        unsafe { avx512::noise_chunk(seed, k, base, out) };
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: avx2::noise_chunk only needs AVX2, which the CPU was just found to have.
        unsafe { avx2::noise_chunk(seed, k, base, out) };
        return;
    }
    noise_lanes(seed, k, base, out)
}

/// Lanes of Philox in lockstep, written so that the compiler vectorises the 32x32->64 multiplies.
#[multiversion::multiversion(targets("x86_64+avx"))]
fn noise_lanes(seed: u64, k: u32, base: u64, out: &mut [f32]) {
    let key0 = [seed as u32, (seed >> 32) as u32];
    let mut blocks = out.chunks_exact_mut(LANES);
    let mut i0 = base;
    for block in &mut blocks {
        let mut c0 = [0u32; LANES];
        let mut c1 = [0u32; LANES];
        let mut c2 = [k; LANES];
        let mut c3 = [0u32; LANES];
        for l in 0..LANES {
            let i = i0 + l as u64;
            c0[l] = i as u32;
            c1[l] = (i >> 32) as u32;
        }
        let mut key = key0;
        for round in 0..10 {
            if round > 0 {
                key[0] = key[0].wrapping_add(PHILOX_W0);
                key[1] = key[1].wrapping_add(PHILOX_W1);
            }
            for l in 0..LANES {
                let p0 = PHILOX_M0 as u64 * c0[l] as u64;
                let p1 = PHILOX_M1 as u64 * c2[l] as u64;
                let n0 = (p1 >> 32) as u32 ^ c1[l] ^ key[0];
                let n2 = (p0 >> 32) as u32 ^ c3[l] ^ key[1];
                c1[l] = p1 as u32;
                c3[l] = p0 as u32;
                c0[l] = n0;
                c2[l] = n2;
            }
        }
        for (v, &x0) in block.iter_mut().zip(&c0) {
            *v = 2.0 * ((x0 >> 8) as f32 * (1.0 / 16_777_216.0)) - 1.0;
        }
        i0 += LANES as u64;
    }
    let rem = blocks.into_remainder();
    for (j, v) in rem.iter_mut().enumerate() {
        *v = noise_value(seed, k, i0 + j as u64);
    }
}

/// Philox4x32-10 on eight counters at once with AVX2 intrinsics: the 32x32->64 products of even
/// and odd lanes (`_mm256_mul_epu32`) blended into the high and low words.
#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use super::{PHILOX_M0, PHILOX_M1, PHILOX_W0, PHILOX_W1, noise_value};

    /// High and low words of `a * m` per 32-bit lane.
    #[target_feature(enable = "avx2")]
    fn mulhilo8(a: __m256i, m: __m256i) -> (__m256i, __m256i) {
        let pe = _mm256_mul_epu32(a, m);
        let po = _mm256_mul_epu32(_mm256_srli_epi64::<32>(a), m);
        let hi = _mm256_blend_epi32::<0b1010_1010>(_mm256_srli_epi64::<32>(pe), po);
        let lo = _mm256_blend_epi32::<0b1010_1010>(pe, _mm256_slli_epi64::<32>(po));
        (hi, lo)
    }

    /// [`super::fill_noise_run`] for indices `base..base + out.len()`.
    #[target_feature(enable = "avx2")]
    pub fn noise_chunk(seed: u64, k: u32, base: u64, out: &mut [f32]) {
        let m0 = _mm256_set1_epi32(PHILOX_M0 as i32);
        let m1 = _mm256_set1_epi32(PHILOX_M1 as i32);
        let lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        let sign = _mm256_set1_epi32(i32::MIN);
        let mut blocks = out.chunks_exact_mut(8);
        let mut i0 = base;
        for block in &mut blocks {
            // Counter words (i lo, i hi) of i0 + lane; a lane whose low word wrapped carries.
            let lo = _mm256_set1_epi32(i0 as u32 as i32);
            let c0 = _mm256_add_epi32(lo, lanes);
            let wrapped =
                _mm256_cmpgt_epi32(_mm256_xor_si256(lo, sign), _mm256_xor_si256(c0, sign));
            let c1 = _mm256_sub_epi32(_mm256_set1_epi32((i0 >> 32) as u32 as i32), wrapped);
            let (mut c0, mut c1, mut c2, mut c3) =
                (c0, c1, _mm256_set1_epi32(k as i32), _mm256_setzero_si256());
            let (mut k0, mut k1) = (seed as u32, (seed >> 32) as u32);
            for round in 0..10 {
                if round > 0 {
                    k0 = k0.wrapping_add(PHILOX_W0);
                    k1 = k1.wrapping_add(PHILOX_W1);
                }
                let (hi0, lo0) = mulhilo8(c0, m0);
                let (hi1, lo1) = mulhilo8(c2, m1);
                let n0 = _mm256_xor_si256(_mm256_xor_si256(hi1, c1), _mm256_set1_epi32(k0 as i32));
                let n2 = _mm256_xor_si256(_mm256_xor_si256(hi0, c3), _mm256_set1_epi32(k1 as i32));
                c1 = lo1;
                c3 = lo0;
                c0 = n0;
                c2 = n2;
            }
            let x = [
                _mm256_extract_epi32::<0>(c0),
                _mm256_extract_epi32::<1>(c0),
                _mm256_extract_epi32::<2>(c0),
                _mm256_extract_epi32::<3>(c0),
                _mm256_extract_epi32::<4>(c0),
                _mm256_extract_epi32::<5>(c0),
                _mm256_extract_epi32::<6>(c0),
                _mm256_extract_epi32::<7>(c0),
            ];
            for (v, &x0) in block.iter_mut().zip(&x) {
                *v = 2.0 * (((x0 as u32) >> 8) as f32 * (1.0 / 16_777_216.0)) - 1.0;
            }
            i0 += 8;
        }
        for (j, v) in blocks.into_remainder().iter_mut().enumerate() {
            *v = noise_value(seed, k, i0 + j as u64);
        }
    }
}

/// Philox4x32-10 on sixteen counters at once with AVX-512F: [`avx2`] twice as wide, the two
/// xors of a round in one ternary-logic instruction, and the conversion to floats vectorised
/// (`2 (x >> 8) 2^-24 - 1` is exact in any order).
#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)] // one unaligned vector store into a slice of 16 floats
mod avx512 {
    use std::arch::x86_64::*;

    use super::{PHILOX_M0, PHILOX_M1, PHILOX_W0, PHILOX_W1, noise_value};

    /// High and low words of `a * m` per 32-bit lane.
    #[target_feature(enable = "avx512f")]
    fn mulhilo16(a: __m512i, m: __m512i) -> (__m512i, __m512i) {
        let pe = _mm512_mul_epu32(a, m);
        let po = _mm512_mul_epu32(_mm512_srli_epi64::<32>(a), m);
        let hi = _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64::<32>(pe), po);
        let lo = _mm512_mask_blend_epi32(0xAAAA, pe, _mm512_slli_epi64::<32>(po));
        (hi, lo)
    }

    /// [`super::fill_noise_run`] for indices `base..base + out.len()`.
    #[target_feature(enable = "avx512f")]
    pub fn noise_chunk(seed: u64, k: u32, base: u64, out: &mut [f32]) {
        let m0 = _mm512_set1_epi32(PHILOX_M0 as i32);
        let m1 = _mm512_set1_epi32(PHILOX_M1 as i32);
        let lanes = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
        let scale = _mm512_set1_ps(1.0 / 16_777_216.0);
        let two = _mm512_set1_ps(2.0);
        let one = _mm512_set1_ps(1.0);
        let mut blocks = out.chunks_exact_mut(16);
        let mut i0 = base;
        for block in &mut blocks {
            // Counter words (i lo, i hi) of i0 + lane; a lane whose low word wrapped carries.
            let lo = _mm512_set1_epi32(i0 as u32 as i32);
            let c0 = _mm512_add_epi32(lo, lanes);
            let wrapped = _mm512_cmplt_epu32_mask(c0, lo);
            let hi = _mm512_set1_epi32((i0 >> 32) as u32 as i32);
            let c1 = _mm512_mask_add_epi32(hi, wrapped, hi, _mm512_set1_epi32(1));
            let (mut c0, mut c1, mut c2, mut c3) =
                (c0, c1, _mm512_set1_epi32(k as i32), _mm512_setzero_si512());
            let (mut k0, mut k1) = (seed as u32, (seed >> 32) as u32);
            for round in 0..10 {
                if round > 0 {
                    k0 = k0.wrapping_add(PHILOX_W0);
                    k1 = k1.wrapping_add(PHILOX_W1);
                }
                let (hi0, lo0) = mulhilo16(c0, m0);
                let (hi1, lo1) = mulhilo16(c2, m1);
                let n0 = _mm512_ternarylogic_epi32::<0x96>(hi1, c1, _mm512_set1_epi32(k0 as i32));
                let n2 = _mm512_ternarylogic_epi32::<0x96>(hi0, c3, _mm512_set1_epi32(k1 as i32));
                c1 = lo1;
                c3 = lo0;
                c0 = n0;
                c2 = n2;
            }
            let u = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32::<8>(c0)), scale);
            let v = _mm512_sub_ps(_mm512_mul_ps(two, u), one);
            let dst: &mut [f32; 16] = block.try_into().expect("a block of 16");
            // SAFETY: dst holds 16 floats.
            unsafe { _mm512_storeu_ps(dst.as_mut_ptr(), v) };
            i0 += 16;
        }
        for (j, v) in blocks.into_remainder().iter_mut().enumerate() {
            *v = noise_value(seed, k, i0 + j as u64);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn philox_known_answer_zero() {
        // Random123 kat_vectors: philox4x32 10 rounds, counter 0, key 0.
        assert_eq!(
            philox4x32_10([0; 4], [0; 2]),
            [0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8]
        );
    }

    #[test]
    fn philox_known_answer_pi() {
        // Random123 kat_vectors: philox4x32 10 rounds, counter and key from the digits of pi.
        assert_eq!(
            philox4x32_10(
                [0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344],
                [0xa4093822, 0x299f31d0]
            ),
            [0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1]
        );
    }

    #[test]
    fn vector_lanes_equal_the_scalar_generator() {
        let mut v = vec![0f32; 8195];
        fill_noise(0x1234_5678_9abc, 2, (1u64 << 32) - 3, &mut v);
        for (j, &x) in v.iter().enumerate() {
            assert_eq!(
                x,
                noise_value(0x1234_5678_9abc, 2, (1u64 << 32) - 3 + j as u64)
            );
        }
    }

    #[test]
    #[allow(unsafe_code)] // the AVX2 path, where the CPU has AVX2, on a CPU that may prefer AVX-512
    fn avx2_lanes_equal_the_scalar_generator() {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            let mut v = vec![0f32; 4099];
            // SAFETY: the CPU has AVX2.
            unsafe { avx2::noise_chunk(7, 1, (1u64 << 32) - 9, &mut v) };
            for (j, &x) in v.iter().enumerate() {
                assert_eq!(x, noise_value(7, 1, (1u64 << 32) - 9 + j as u64));
            }
        }
    }

    #[test]
    fn portable_lanes_equal_the_scalar_generator() {
        // The path of CPUs without AVX2 (fill_noise takes the intrinsics where there is AVX2).
        let mut v = vec![0f32; 1029];
        noise_lanes(99, 1, (1u64 << 32) - 5, &mut v);
        for (j, &x) in v.iter().enumerate() {
            assert_eq!(x, noise_value(99, 1, (1u64 << 32) - 5 + j as u64));
        }
    }

    #[test]
    fn design_known_answer_seed_42() {
        // docs/design.md §4: seed 42, component 0, the first three voxels of a 2x3 grid.
        let want = [0.2259197f32, 0.9754373, 0.6517336];
        for (i, w) in want.iter().enumerate() {
            let got = noise_value(42, 0, i as u64);
            assert!((got - w).abs() < 1e-6, "voxel {i}: {got} vs {w}");
        }
    }
}
