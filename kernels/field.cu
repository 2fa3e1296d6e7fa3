// The smoothed unit elastic field G_sigma(noise_k) (docs/design.md §4) on the GPU: the twin of
// src/engine/field.rs + src/filter/gaussian.rs + src/engine/noise.rs.
//
// Separable gaussian, zero outside the grid (scipy.ndimage.gaussian_filter(mode="constant",
// cval=0, truncate=4.0)), axis 0 first, then 1, then 2, like the CPU engine. The Philox noise is
// generated inside the first pass from its counter (seed, component, voxel): no noise volume is
// ever written. Every pass sums in the CPU engine's order (src/engine/gaussian.rs), with its f32
// weights and one rounding per fused multiply-add, so the field is the CPU's bit for bit:
//   along a strided axis (inner > 1):  acc = 0, then acc = fma(w_|k-i|, x_k, acc) for the rows
//                                      k = i - R .. i + R in ascending order (TAPS_K);
//   along the contiguous axis:         acc = w0 * x_i, then acc = fma(w_j, x_{i-j} + x_{i+j}, acc)
//                                      for j = 1 .. R (SMOOTH_K).
// A tap outside the grid is a zero: fma(w, 0, acc) = acc, as the CPU's skipped tap. The sums are
// written with explicit intrinsics (fmaf, __fmul_rn, __fadd_rn), so they do not depend on the
// compiler's contraction (the host builds this family with fmad on).
//
// Defines: FIELD_R, the radius a build serves. The tiled kernels (R <= TILED_MAX_R) take the
// weights w_0..w_R as a kernel parameter (FieldWeights, zero-padded): the host rounds a kernel's
// radius int(4 sigma + 0.5) up to a multiple of 8, so one build serves every sigma of 8 radii and
// moving sigma needs no new NVRTC compile; the padded taps add exact zeros, which changes no sum.
// Above TILED_MAX_R only the direct kernel exists, with the weights baked in as FIELD_W (the R + 1
// weights as f32 literals), one build per sigma. Weights are normalised on the host in f64
// exactly as gaussian_kernel() does.
#ifndef FIELD_R
#error "FIELD_R must be defined"
#endif
// FD_ONLY keeps one entry of this file (1 gauss_mid, 2 gauss_last, 3 gauss_col_noise,
// 4 gauss_direct, 5 field_stats), so that a field's passes compile as modules of their own, in
// parallel; undefined, every entry.
#ifdef FD_ONLY
#define FD_KEEP(k) (FD_ONLY == (k))
#else
#define FD_KEEP(k) 1
#endif

// Must match `FieldWeights` in src/engine/cuda/kernels.rs.
#define FIELD_WMAX 128
struct FieldWeights {
    float w[FIELD_WMAX];
};

// ---------------------------------------------------------------------------------------------
// Philox4x32-10 (Random123), as src/engine/noise.rs: key (seed lo, seed hi), counter
// (i lo, i hi, k, 0); noise = 2 u - 1 with u = (x0 >> 8) 2^-24.
// ---------------------------------------------------------------------------------------------
__device__ __forceinline__ float noise_value(unsigned int key0, unsigned int key1, unsigned int k,
                                             unsigned long long i) {
    const unsigned int M0 = 0xD2511F53u, M1 = 0xCD9E8D57u, W0 = 0x9E3779B9u, W1 = 0xBB67AE85u;
    unsigned int c0 = (unsigned int)i, c1 = (unsigned int)(i >> 32), c2 = k, c3 = 0u;
    unsigned int k0 = key0, k1 = key1;
#pragma unroll
    for (int round = 0; round < 10; round++) {
        if (round > 0) {
            k0 += W0;
            k1 += W1;
        }
        const unsigned int hi0 = __umulhi(M0, c0), lo0 = M0 * c0;
        const unsigned int hi1 = __umulhi(M1, c2), lo1 = M1 * c2;
        const unsigned int n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
        c0 = n0;
        c1 = lo1;
        c2 = n2;
        c3 = lo0;
    }
    const float u = (float)(c0 >> 8) * (1.0f / 16777216.0f);
    return 2.0f * u - 1.0f;
}

// Tiles: 32 columns x 8 thread rows, each thread FIELD_K consecutive outputs along the axis
// (TL = 128 outputs per block along the axis: FIELD_TL in src/engine/cuda/kernels.rs).
#define TX 32
#define TY 8
#define FIELD_K 16
#define TL (TY * FIELD_K)
#define TROWS (TL + 2 * FIELD_R)
// Up to this radius a thread of the last-axis pass keeps its whole window in registers (fully
// unrolled); above it, it reads the window from shared memory.
#define WINDOW_MAX_R 56
// A thread's window: in registers (`win`, the last-axis pass) or in the shared tile of
// gauss_mid_f32 (`tile`, read once per value by TAPS_K).
#define WIN_REG(t) win[t]
#define WIN_SMEM(t) tile[(ty * FIELD_K + (t)) * TX + tx]
// The largest radius the shared tiles hold (48 KiB of static shared memory).
#define TILED_MAX_R 120

// The K outputs of one thread along the contiguous axis, from its window win(t) = value at
// (first output - R + t): symmetric pairs, the CPU's contiguous order.
#define SMOOTH_K(WIN, ACC)                                                              \
    _Pragma("unroll") for (int k = 0; k < FIELD_K; k++) {                               \
        float a = __fmul_rn(wts.w[0], WIN(k + FIELD_R));                                \
        _Pragma("unroll") for (int j = 1; j <= FIELD_R; j++) {                          \
            a = fmaf(wts.w[j], __fadd_rn(WIN(k + FIELD_R - j), WIN(k + FIELD_R + j)), a); \
        }                                                                               \
        ACC[k] = a;                                                                     \
    }

// The K outputs of one thread along a strided axis, tap by tap: every window value X(t) (as in
// SMOOTH_K) is read once and added into each output it reaches, in ascending order of t, from 0:
// the CPU's strided order. The conditions are resolved at compile time (both loops unrolled):
// K * (2R + 1) fused multiply-adds, each weight an operand from the constant bank.
#define TAPS_K(X, ACC)                                                                  \
    _Pragma("unroll") for (int k = 0; k < FIELD_K; k++) ACC[k] = 0.0f;                  \
    _Pragma("unroll") for (int t = 0; t < FIELD_K + 2 * FIELD_R; t++) {                 \
        const float x_ = X(t);                                                          \
        _Pragma("unroll") for (int k = 0; k < FIELD_K; k++) {                           \
            const int d = t - k - FIELD_R;                                              \
            if (d >= -FIELD_R && d <= FIELD_R) ACC[k] = fmaf(wts.w[d < 0 ? -d : d], x_, ACC[k]); \
        }                                                                               \
    }

#if FIELD_R <= TILED_MAX_R

// The Philox key (seed lo, seed hi) of each sample of a batch, and the noise component: slab g
// of a batched field ([sample][component][grid]) is component g % ndim of sample g / ndim.
struct SlabNoise {
    unsigned int key0, key1, k;
};
__device__ __forceinline__ SlabNoise slab_noise(const unsigned int* __restrict__ keys, int g, int ndim) {
    const int sample = g / ndim;
    return SlabNoise{__ldg(keys + 2 * sample), __ldg(keys + 2 * sample + 1), (unsigned int)(g % ndim)};
}

// A pass along an axis that is not the last: the data is [outer][n][inner], with inner > 1
// contiguous; `outer` covers every slab (component of a sample) of the launch, comp_outer of it
// per slab. Grid (ceil(inner/32), ceil(n/TL), outer), block (32, 8).
// With gen_noise (the first pass; src unused), the input is the Philox noise of each slab:
// global slab slab0 + o / comp_outer, keys from `keys` (see slab_noise), counter the voxel's
// index within its component.
// `o0`: the first outer index of this launch (the grid's z extent is at most 65535, so the host
// launches longer runs in parts).
#if FD_KEEP(1)
extern "C" __global__ void __launch_bounds__(256) gauss_mid_f32(
    const float* __restrict__ src, float* __restrict__ dst, int outer, int n, long long inner,
    int gen_noise, const unsigned int* __restrict__ keys, int slab0, int comp_outer, int ndim,
    FieldWeights wts, int o0) {
    __shared__ float tile[TROWS * TX];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int o = o0 + blockIdx.z;
    const long long col = (long long)blockIdx.x * TX + tx;
    const int i0 = blockIdx.y * TL;
    const long long slab = (long long)o * n * inner;
    SlabNoise sn = {0u, 0u, 0u};
    long long comp_base = 0;
    if (gen_noise) {
        sn = slab_noise(keys, slab0 + o / comp_outer, ndim);
        comp_base = (long long)(o % comp_outer) * n * inner;
    }
    const bool cols_full = (long long)(blockIdx.x + 1) * TX <= inner;
    if (!gen_noise && cols_full && i0 >= FIELD_R && i0 + TL + FIELD_R <= n) {
        // The tile and its halo lie inside the axis and every column exists: plain loads, no
        // check per row.
        const float* p = src + slab + (long long)(i0 - FIELD_R + ty) * inner + col;
        const long long step = (long long)TY * inner;
#pragma unroll
        for (int r = 0; r < TROWS / TY; r++) tile[(ty + r * TY) * TX + tx] = __ldg(p + r * step);
        if (ty < TROWS % TY) tile[(TROWS / TY * TY + ty) * TX + tx] = __ldg(p + TROWS / TY * step);
    } else if (!gen_noise && cols_full) {
        // Every column of the block exists: one offset step per row and one row check (the
        // general loop below costs about 3x the instructions per load).
        const int ifirst = i0 - FIELD_R + ty;
        long long off = slab + (long long)ifirst * inner + col;
        const long long step = (long long)TY * inner;
#pragma unroll
        for (int r = 0; r < TROWS / TY; r++) {
            const int i = ifirst + r * TY;
            tile[(ty + r * TY) * TX + tx] = (i >= 0 && i < n) ? __ldg(src + off) : 0.0f;
            off += step;
        }
        const int i = ifirst + TROWS / TY * TY;
        if (ty < TROWS % TY) tile[(TROWS / TY * TY + ty) * TX + tx] = (i >= 0 && i < n) ? __ldg(src + off) : 0.0f;
    } else
    for (int r = ty; r < TROWS; r += TY) {
        const int i = i0 - FIELD_R + r;
        float v = 0.0f;
        if (i >= 0 && i < n && col < inner) {
            const long long at = (long long)i * inner + col;
            v = gen_noise ? noise_value(sn.key0, sn.key1, sn.k, (unsigned long long)(comp_base + at))
                          : src[slab + at];
        }
        tile[r * TX + tx] = v;
    }
    __syncthreads();
    if (col >= inner) return;
    float acc[FIELD_K];
    TAPS_K(WIN_SMEM, acc)
    float* q = dst + slab + (long long)(i0 + ty * FIELD_K) * inner + col;
    if (i0 + TL <= n) {
#pragma unroll
        for (int k = 0; k < FIELD_K; k++) q[k * inner] = acc[k];
    } else {
#pragma unroll
        for (int k = 0; k < FIELD_K; k++)
            if (i0 + ty * FIELD_K + k < n) q[k * inner] = acc[k];
    }
}
#endif

// A pass along the last (contiguous) axis: `lines` lines of length n (of every slab of the
// launch).
// Grid (ceil(lines/32), ceil(n/TL)), block (32, 8): 32 lines per block, loaded and stored
// coalesced through a shared tile (odd row stride: no bank conflicts), line by line: each warp
// reads 32 consecutive elements of one line per step, every step unrolled (no index division per
// element). Built for 5 blocks per SM at R <= 48 (48 registers): the loads of one block wait
// while the others compute. (LAST_MIN_BLOCKS defined outside: benches/field_probe.py.)
#ifndef LAST_MIN_BLOCKS
#if FIELD_R <= 48
#define LAST_MIN_BLOCKS 5
#else
#define LAST_MIN_BLOCKS 4
#endif
#endif
#if FD_KEEP(2)
extern "C" __global__ void __launch_bounds__(256, LAST_MIN_BLOCKS) gauss_last_f32(
    const float* __restrict__ src, float* __restrict__ dst, long long lines, int n, FieldWeights wts) {
    __shared__ float tile[TX * (TROWS + 1)];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int i0 = blockIdx.y * TL;
    const long long line0 = (long long)blockIdx.x * TX;
    if (line0 + TX <= lines && i0 >= FIELD_R && i0 + TL + FIELD_R <= n) {
        // Every line of the block exists and the tile's halo lies inside them: no checks.
#pragma unroll
        for (int l = ty; l < TX; l += TY) {
            const float* s = src + (line0 + l) * n + (i0 - FIELD_R);
#pragma unroll
            for (int pos = tx; pos < TROWS; pos += TX) tile[l * (TROWS + 1) + pos] = __ldg(s + pos);
        }
    } else {
#pragma unroll
        for (int l = ty; l < TX; l += TY) {
            const long long line = line0 + l;
#pragma unroll
            for (int pos = tx; pos < TROWS; pos += TX) {
                const int i = i0 - FIELD_R + pos;
                tile[l * (TROWS + 1) + pos] = (i >= 0 && i < n && line < lines) ? src[line * n + i] : 0.0f;
            }
        }
    }
    __syncthreads();
    float acc[FIELD_K];
#if FIELD_R <= WINDOW_MAX_R
    float win[FIELD_K + 2 * FIELD_R];
#pragma unroll
    for (int t = 0; t < FIELD_K + 2 * FIELD_R; t++) win[t] = tile[tx * (TROWS + 1) + ty * FIELD_K + t];
    SMOOTH_K(WIN_REG, acc)
#else
#define WIN_SMEM_LAST(t) tile[tx * (TROWS + 1) + ty * FIELD_K + (t)]
    SMOOTH_K(WIN_SMEM_LAST, acc)
#endif
    __syncthreads();
#pragma unroll
    for (int k = 0; k < FIELD_K; k++) tile[tx * (TROWS + 1) + ty * FIELD_K + k] = acc[k];
    __syncthreads();
#pragma unroll
    for (int l = ty; l < TX; l += TY) {
        const long long line = line0 + l;
#pragma unroll
        for (int pos = tx; pos < TL; pos += TX) {
            const int i = i0 + pos;
            if (i < n && line < lines) dst[line * n + i] = tile[l * (TROWS + 1) + pos];
        }
    }
}
#endif

// The first pass (axis 0, the noise) when a block can hold whole columns: all n rows of 32
// columns plus R zero rows above and below, so every noise value is made exactly once (the
// tiled gauss_mid_f32 makes the halo rows of each tile again: (TL + 2R) / TL = 1.75x at R = 48).
// Grid (ceil(inner/32), slabs), block (32, 8): blockIdx.y is the slab (global slab
// slab0 + blockIdx.y, see slab_noise) of n * inner voxels. The host uses it when
// n + 2R <= COL_ROWS.
#define COL_ROWS 352
#if FD_KEEP(3)
static_assert(FIELD_R % TY == 0, "the tiled builds' radius is a multiple of 8");
extern "C" __global__ void __launch_bounds__(256) gauss_col_noise_f32(
    float* __restrict__ dst, int n, long long inner, const unsigned int* __restrict__ keys, int slab0,
    int ndim, FieldWeights wts) {
    __shared__ float tile[COL_ROWS * TX];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const long long col = (long long)blockIdx.x * TX + tx;
    const SlabNoise sn = slab_noise(keys, slab0 + (int)blockIdx.y, ndim);
    dst += (long long)blockIdx.y * n * inner;
    // The R zero rows above and below the column (R is a multiple of 8, TY), then its noise: one
    // counter step per row, no check (a column past the grid's edge is never read).
    for (int r = ty; r < FIELD_R; r += TY) {
        tile[r * TX + tx] = 0.0f;
        tile[(n + FIELD_R + r) * TX + tx] = 0.0f;
    }
    if (col < inner) {
        unsigned long long at = (unsigned long long)((long long)ty * inner + col);
        const unsigned long long step = (unsigned long long)((long long)TY * inner);
        for (int i = ty; i < n; i += TY) {
            tile[(i + FIELD_R) * TX + tx] = noise_value(sn.key0, sn.key1, sn.k, at);
            at += step;
        }
    }
    __syncthreads();
    if (col >= inner) return;
    for (int c = ty; c * FIELD_K < n; c += TY) {
        float acc[FIELD_K];
#define WIN_COL(t) tile[(c * FIELD_K + (t)) * TX + tx]
        TAPS_K(WIN_COL, acc)
        float* q = dst + (long long)(c * FIELD_K) * inner + col;
        if ((c + 1) * FIELD_K <= n) {
#pragma unroll
            for (int k = 0; k < FIELD_K; k++) q[k * inner] = acc[k];
        } else {
#pragma unroll
            for (int k = 0; k < FIELD_K; k++)
                if (c * FIELD_K + k < n) q[k * inner] = acc[k];
        }
    }
}
#endif

#else  // FIELD_R > TILED_MAX_R

#ifndef FIELD_W
#error "FIELD_W must be defined above TILED_MAX_R"
#endif
__constant__ float c_w[FIELD_R + 1] = {FIELD_W};

// Any radius, one output per thread straight from global memory (slow; for sigma > 29.9), on one
// component of n_comp voxels, [outer][n][inner]; grid-stride. ncomp must be 1 (one component per
// launch, like the tiled kernels); noise_k is the noise component.
#if FD_KEEP(4)
extern "C" __global__ void __launch_bounds__(256) gauss_direct_f32(
    const float* __restrict__ src, float* __restrict__ dst, long long n_comp, int ncomp, int n,
    long long inner, int gen_noise, unsigned int key0, unsigned int key1, unsigned int noise_k) {
    const long long total = n_comp * ncomp;
    for (long long g = (long long)blockIdx.x * blockDim.x + threadIdx.x; g < total;
         g += (long long)gridDim.x * blockDim.x) {
        const int i = (int)((g / inner) % n);
        const long long line_base = g - (long long)i * inner;
#define AT(ii) (((ii) < 0 || (ii) >= n) ? 0.0f                                                   \
                : (gen_noise ? noise_value(key0, key1, noise_k, (unsigned long long)(line_base + (long long)(ii) * inner)) \
                             : src[line_base + (long long)(ii) * inner]))
        float a;
        if (inner == 1) {
            // The contiguous axis: symmetric pairs (SMOOTH_K's order).
            a = __fmul_rn(c_w[0], AT(i));
            for (int j = 1; j <= FIELD_R; j++) a = fmaf(c_w[j], __fadd_rn(AT(i - j), AT(i + j)), a);
        } else {
            // A strided axis: tap by tap in ascending order from 0 (TAPS_K's order).
            a = 0.0f;
            for (int d = -FIELD_R; d <= FIELD_R; d++) a = fmaf(c_w[d < 0 ? -d : d], AT(i + d), a);
        }
        dst[g] = a;
#undef AT
    }
}
#endif

#endif  // FIELD_R <= TILED_MAX_R

// Largest and summed squared displacement length of the unit field (ncomp components of n):
// max_bits receives the bits of the largest |f|^2 as a double (non-negative doubles order like
// their bits), sum the sum of |f|^2, both in f64 like ElasticField::displacement_stats.
#if FD_KEEP(5)
extern "C" __global__ void __launch_bounds__(256) field_stats_f32(
    const float* __restrict__ field, long long n, int ncomp, unsigned long long* max_bits, double* sum) {
    double mx = 0.0, sm = 0.0;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        double l2 = 0.0;
        for (int k = 0; k < ncomp; k++) {
            const double v = (double)field[k * n + i];
            l2 += v * v;
        }
        mx = fmax(mx, l2);
        sm += l2;
    }
    for (int off = 16; off > 0; off >>= 1) {
        mx = fmax(mx, __shfl_down_sync(0xffffffffu, mx, off));
        sm += __shfl_down_sync(0xffffffffu, sm, off);
    }
    if ((threadIdx.x & 31) == 0) {
        atomicMax(max_bits, (unsigned long long)__double_as_longlong(mx));
        atomicAdd(sum, sm);
    }
}
#endif
