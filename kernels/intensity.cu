// The intensity steps on the device (docs/design.md §9): each kernel acts on one channel of one
// sample's resampled image, in place or into a second buffer, with the arithmetic of the CPU
// engine's formula in src/core/intensity/*.rs, operation for operation. Products and sums are
// written with the round-to-nearest intrinsics so that NVRTC does not contract them into fused
// multiply-adds the CPU does not make; the statistics are summed in f64 (their order differs
// from the CPU's, which moves a sum by a few ulps of f64 at most).
//
// Launched from src/engine/cuda/intensity.rs. Indices are C order over the channel's grid
// (n0, n1, n2); a 2D image has ndim = 2 and n0 = 1.

// ---------------------------------------------------------------------------------------------
// Philox4x32-10 (Random123), as src/core/philox.rs: the normal noise of counter
// (i lo, i hi, k, 1) under key (key0, key1), Box-Muller in f64 rounded to f32.
// ---------------------------------------------------------------------------------------------
__device__ __forceinline__ void philox(unsigned int key0, unsigned int key1, unsigned int c[4]) {
    const unsigned int M0 = 0xD2511F53u, M1 = 0xCD9E8D57u, W0 = 0x9E3779B9u, W1 = 0xBB67AE85u;
    unsigned int k0 = key0, k1 = key1;
#pragma unroll
    for (int round = 0; round < 10; round++) {
        if (round > 0) {
            k0 += W0;
            k1 += W1;
        }
        const unsigned int hi0 = __umulhi(M0, c[0]), lo0 = M0 * c[0];
        const unsigned int hi1 = __umulhi(M1, c[2]), lo1 = M1 * c[2];
        const unsigned int n0 = hi1 ^ c[1] ^ k0, n2 = hi0 ^ c[3] ^ k1;
        c[0] = n0;
        c[1] = lo1;
        c[2] = n2;
        c[3] = lo0;
    }
}

__device__ __forceinline__ float normal_value(unsigned int key0, unsigned int key1, unsigned int k,
                                              unsigned long long i) {
    unsigned int c[4] = {(unsigned int)i, (unsigned int)(i >> 32), k, 1u};
    philox(key0, key1, c);
    const double u1 = __dmul_rn((double)(c[0] >> 8) + 1.0, 1.0 / 16777216.0);
    const double u2 = __dmul_rn((double)(c[1] >> 8), 1.0 / 16777216.0);
    const double two_pi = 2.0 * 3.141592653589793;
    return (float)__dmul_rn(sqrt(__dmul_rn(-2.0, log(u1))), cos(__dmul_rn(two_pi, u2)));
}

// x += s * n(i): gaussian_noise.
extern "C" __global__ void int_noise(float* x, long long n, float s, unsigned int key0,
                                     unsigned int key1, unsigned int k) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        x[i] = __fadd_rn(x[i], __fmul_rn(normal_value(key0, key1, k, (unsigned long long)i), s));
    }
}

// x *= m: brightness. m = -1 negates (gamma's inversion).
extern "C" __global__ void int_mul(float* x, long long n, float m) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        x[i] = __fmul_rn(x[i], m);
    }
}

// Mirrors `channels` volumes of n0 x n1 x n2 (C order, one after the other) in place along the
// axes whose flag f0, f1, f2 is set: each voxel swaps with its mirror image once (the lower index
// of the pair does it; a voxel that is its own image stays). A 2D image is 1 x n1 x n2.
extern "C" __global__ void int_flip(float* x, long long channels, int n0, int n1, int n2, int f0,
                                    int f1, int f2) {
    const long long plane = (long long)n1 * n2, n = (long long)n0 * plane, total = channels * n;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
         i += (long long)gridDim.x * blockDim.x) {
        const long long c = i / n, r = i - c * n;
        const int z = (int)(r / plane), y = (int)((r / n2) % n1), w = (int)(r % n2);
        const int mz = f0 ? n0 - 1 - z : z, my = f1 ? n1 - 1 - y : y, mw = f2 ? n2 - 1 - w : w;
        const long long j = c * n + ((long long)mz * n1 + my) * n2 + mw;
        if (i < j) {
            const float t = x[i];
            x[i] = x[j];
            x[j] = t;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Statistics: sum, minimum and maximum in one pass (and the sum of squares about the mean in a
// second), per block into partials, then one block sums the partials in a fixed order: the same
// result on every run. out: [sum, min, max, sum of squares].
// ---------------------------------------------------------------------------------------------
#define STATS_THREADS 256

extern "C" __global__ void int_partials(const float* x, long long n, double* psum, float* plo,
                                        float* phi) {
    __shared__ double ssum[STATS_THREADS];
    __shared__ float slo[STATS_THREADS], shi[STATS_THREADS];
    double s = 0.0;
    float lo = __int_as_float(0x7f800000), hi = -__int_as_float(0x7f800000);
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        const float v = x[i];
        s = __dadd_rn(s, (double)v);
        lo = fminf(lo, v);
        hi = fmaxf(hi, v);
    }
    ssum[threadIdx.x] = s;
    slo[threadIdx.x] = lo;
    shi[threadIdx.x] = hi;
    __syncthreads();
    for (int w = STATS_THREADS / 2; w > 0; w >>= 1) {
        if (threadIdx.x < w) {
            ssum[threadIdx.x] = __dadd_rn(ssum[threadIdx.x], ssum[threadIdx.x + w]);
            slo[threadIdx.x] = fminf(slo[threadIdx.x], slo[threadIdx.x + w]);
            shi[threadIdx.x] = fmaxf(shi[threadIdx.x], shi[threadIdx.x + w]);
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        psum[blockIdx.x] = ssum[0];
        plo[blockIdx.x] = slo[0];
        phi[blockIdx.x] = shi[0];
    }
}

// The sum of squares about the mean out[0] / n, per block.
extern "C" __global__ void int_sq_partials(const float* x, long long n, const double* out,
                                           double* pss) {
    __shared__ double sss[STATS_THREADS];
    const double mean = out[0] / (double)n;
    double s = 0.0;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        const double d = __dsub_rn((double)x[i], mean);
        s = __dadd_rn(s, __dmul_rn(d, d));
    }
    sss[threadIdx.x] = s;
    __syncthreads();
    for (int w = STATS_THREADS / 2; w > 0; w >>= 1) {
        if (threadIdx.x < w) sss[threadIdx.x] = __dadd_rn(sss[threadIdx.x], sss[threadIdx.x + w]);
        __syncthreads();
    }
    if (threadIdx.x == 0) pss[blockIdx.x] = sss[0];
}

// One thread sums the nb partials in order: with squares = 0 into out[0..3] (sum, min, max),
// with squares = 1 the sums of squares into out[3].
extern "C" __global__ void int_finish(const double* psum, const float* plo, const float* phi,
                                      int nb, int squares, double* out) {
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    double s = 0.0;
    float lo = __int_as_float(0x7f800000), hi = -__int_as_float(0x7f800000);
    for (int b = 0; b < nb; b++) {
        s = __dadd_rn(s, psum[b]);
        if (!squares) {
            lo = fminf(lo, plo[b]);
            hi = fmaxf(hi, phi[b]);
        }
    }
    if (squares) {
        out[3] = s;
    } else {
        out[0] = s;
        out[1] = (double)lo;
        out[2] = (double)hi;
    }
}

// (x - mean) * f + mean, clipped to [min, max] with preserve: contrast.
extern "C" __global__ void int_contrast(float* x, long long n, float f, const double* st,
                                        int preserve) {
    const float mean = (float)(st[0] / (double)n), lo = (float)st[1], hi = (float)st[2];
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        float y = __fadd_rn(__fmul_rn(__fsub_rn(x[i], mean), f), mean);
        if (preserve) {
            if (y < lo) y = lo;
            if (y > hi) y = hi;
        }
        x[i] = y;
    }
}

// ((x - min) / max(range, 1e-7))^g * range + min: gamma's power.
extern "C" __global__ void int_gamma(float* x, long long n, float g, const double* st) {
    const float lo = (float)st[1], hi = (float)st[2];
    const float range = __fsub_rn(hi, lo);
    const float denom = (float)fmax((double)range, 1e-7);
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        const float p = powf(__fdiv_rn(__fsub_rn(x[i], lo), denom), g);
        x[i] = __fadd_rn(__fmul_rn(p, range), lo);
    }
}

// (x - mean_after) * (std_before / max(std_after, 1e-7)) + mean_before: gamma's retained
// statistics (Bessel-corrected standard deviations).
extern "C" __global__ void int_retain(float* x, long long n, const double* before,
                                      const double* after) {
    const double dn = (double)n, dof = (double)(n < 2 ? 1 : n - 1);
    const double mean = before[0] / dn, mean_here = after[0] / dn;
    const double sd = sqrt(before[3] / dof), sd_here = sqrt(after[3] / dof);
    const float scale = (float)(sd / fmax(sd_here, 1e-7));
    const float m = (float)mean, mh = (float)mean_here;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        x[i] = __fadd_rn(__fmul_rn(__fsub_rn(x[i], mh), scale), m);
    }
}

// ---------------------------------------------------------------------------------------------
// Blur along one axis: taps w[0..taps) centred, summed in tap order from 0, the channel padded
// as `pad` says (src/core/intensity/conv.rs): every blur family.
// ---------------------------------------------------------------------------------------------
__device__ __forceinline__ long long mirror_index(long long i, long long n) {
    if (n == 1) return 0;
    const long long period = 2 * (n - 1);
    long long m = i % period;
    if (m < 0) m += period;
    return m < n ? m : period - m;
}

// Beyond the edge: pad 0 mirrors without the edge repeated, 1 reflects with it (scipy's reflect),
// 2 reads zeros (the index -1: the tap is skipped).
__device__ __forceinline__ long long pad_index(long long i, long long n, int pad) {
    if (i >= 0 && i < n) return i;
    if (pad == 2) return -1;
    if (pad == 0) return mirror_index(i, n);
    long long m = i % (2 * n);
    if (m < 0) m += 2 * n;
    return m < n ? m : 2 * n - 1 - m;
}

extern "C" __global__ void int_blur_axis(const float* src, float* dst, int n0, int n1, int n2,
                                         int axis, const float* w, int taps, int pad) {
    const long long total = (long long)n0 * n1 * n2;
    const long long inner = axis == 0 ? (long long)n1 * n2 : (axis == 1 ? n2 : 1);
    const long long len = axis == 0 ? n0 : (axis == 1 ? n1 : n2);
    const long long r = taps / 2;
    for (long long v = blockIdx.x * (long long)blockDim.x + threadIdx.x; v < total;
         v += (long long)gridDim.x * blockDim.x) {
        const long long i = (v / inner) % len;
        const long long base = v - i * inner;
        float acc = 0.0f;
        for (int t = 0; t < taps; t++) {
            const long long j = pad_index(i + t - r, len, pad);
            if (j < 0) continue;
            acc = __fadd_rn(acc, __fmul_rn(w[t], src[base + j * inner]));
        }
        dst[v] = acc;
    }
}

// ---------------------------------------------------------------------------------------------
// Low resolution: torch's nearest-exact down from (n0, n1, n2) to (m0, m1, m2), then its linear
// interpolation back up (align_corners=False), with the index and weight arithmetic of
// src/core/intensity/lowres.rs.
// ---------------------------------------------------------------------------------------------
__device__ __forceinline__ long long nearest_exact(long long o, long long n, long long m) {
    const float scale = (float)n / (float)m;
    long long s = (long long)floorf((float)(((double)o + 0.5) * (double)scale));
    return s < n - 1 ? s : n - 1;
}

// torch's legacy nearest: the same size copies, twice the size halves, else floor(o * n/m) in f32.
__device__ __forceinline__ long long nearest_legacy(long long o, long long n, long long m) {
    if (n == m) return o;
    if (m == 2 * n) return o >> 1;
    const float scale = (float)n / (float)m;
    long long s = (long long)floorf(__fmul_rn((float)o, scale));
    return s < n - 1 ? s : n - 1;
}

__device__ __forceinline__ long long nearest_of(long long o, long long n, long long m, int exact) {
    return exact ? nearest_exact(o, n, m) : nearest_legacy(o, n, m);
}

// exact = 1: nearest-exact (low_resolution); 0: torch's legacy nearest
// (monai_simulate_low_resolution).
extern "C" __global__ void int_down(const float* src, float* dst, int n0, int n1, int n2, int m0,
                                    int m1, int m2, int exact) {
    const long long total = (long long)m0 * m1 * m2;
    for (long long v = blockIdx.x * (long long)blockDim.x + threadIdx.x; v < total;
         v += (long long)gridDim.x * blockDim.x) {
        const long long o2 = v % m2, o1 = (v / m2) % m1, o0 = v / ((long long)m1 * m2);
        const long long s0 = nearest_of(o0, n0, m0, exact), s1 = nearest_of(o1, n1, m1, exact),
                        s2 = nearest_of(o2, n2, m2, exact);
        dst[v] = src[(s0 * n1 + s1) * n2 + s2];
    }
}

struct Taps {
    long long i0, i1;
    float w0, w1;
};

__device__ __forceinline__ Taps linear_taps(long long o, long long n, long long m) {
    Taps t;
    if (n == m) {
        t.i0 = o;
        t.i1 = o;
        t.w0 = 1.0f;
        t.w1 = 0.0f;
        return t;
    }
    const float scale = (float)n / (float)m;
    float s = __fsub_rn(__fmul_rn(scale, __fadd_rn((float)o, 0.5f)), 0.5f);
    if (s < 0.0f) s = 0.0f;
    long long i0 = (long long)floorf(s);
    if (i0 > n - 1) i0 = n - 1;
    float l1 = __fsub_rn(s, (float)i0);
    l1 = l1 < 0.0f ? 0.0f : (l1 > 1.0f ? 1.0f : l1);
    t.i0 = i0;
    t.i1 = i0 < n - 1 ? i0 + 1 : i0;
    t.w0 = __fsub_rn(1.0f, l1);
    t.w1 = l1;
    return t;
}

// small (m0, m1, m2) up to dst (n0, n1, n2); ndim 2 leaves axis 0 (of size 1) out of the sum.
extern "C" __global__ void int_up(const float* small, float* dst, int m0, int m1, int m2, int n0,
                                  int n1, int n2, int ndim) {
    const long long total = (long long)n0 * n1 * n2;
    for (long long v = blockIdx.x * (long long)blockDim.x + threadIdx.x; v < total;
         v += (long long)gridDim.x * blockDim.x) {
        const long long o2 = v % n2, o1 = (v / n2) % n1, o0 = v / ((long long)n1 * n2);
        const Taps a = linear_taps(o0, m0, n0), b = linear_taps(o1, m1, n1),
                   c = linear_taps(o2, m2, n2);
#define AT(i, j, k) small[((i) * m1 + (j)) * m2 + (k)]
#define ROW(i, j) __fadd_rn(__fmul_rn(AT(i, j, c.i0), c.w0), __fmul_rn(AT(i, j, c.i1), c.w1))
#define PLANE(i) __fadd_rn(__fmul_rn(ROW(i, b.i0), b.w0), __fmul_rn(ROW(i, b.i1), b.w1))
        if (ndim == 2) {
            dst[v] = PLANE(0);
        } else {
            dst[v] = __fadd_rn(__fmul_rn(PLANE(a.i0), a.w0), __fmul_rn(PLANE(a.i1), a.w1));
        }
#undef PLANE
#undef ROW
#undef AT
    }
}

// ---------------------------------------------------------------------------------------------
// The MONAI and TorchIO families (src/core/intensity/monai_*.rs, torchio_*.rs), with the CPU
// engine's arithmetic: every f32 and f64 operation rounded as written (no contraction into fma).
// ---------------------------------------------------------------------------------------------

// x += o: monai_shift_intensity.
extern "C" __global__ void int_add(float* x, long long n, float o) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        x[i] = __fadd_rn(x[i], o);
    }
}

// x += noise(z) with z the standard normal field: mode 0 (MONAI) f32(mean + std * z) in f64,
// mode 1 (TorchIO) z * f32(std) + f32(mean) in f32.
extern "C" __global__ void int_noise_mean(float* x, long long n, double mean, double sd,
                                          unsigned int key0, unsigned int key1, unsigned int k,
                                          int mode) {
    const float m32 = (float)mean, s32 = (float)sd;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        const float z = normal_value(key0, key1, k, (unsigned long long)i);
        const float v = mode == 0 ? (float)__dadd_rn(mean, __dmul_rn(sd, (double)z))
                                  : __fadd_rn(__fmul_rn(z, s32), m32);
        x[i] = __fadd_rn(x[i], v);
    }
}

// sign(x) |x|^g: torchio_gamma.
extern "C" __global__ void int_signpow(float* x, long long n, float g) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        const float v = x[i];
        x[i] = v > 0.0f ? powf(v, g) : (v < 0.0f ? -powf(-v, g) : __fmul_rn(v, 0.0f));
    }
}

// ((x - min) / (range + 1e-7))^g * range + min, all in f32: monai_adjust_contrast.
extern "C" __global__ void int_monai_contrast(float* x, long long n, float g, const double* st) {
    const float lo = (float)st[1], hi = (float)st[2];
    const float range = __fsub_rn(hi, lo);
    const float denom = __fadd_rn(range, 1e-7f);
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        const float p = powf(__fdiv_rn(__fsub_rn(x[i], lo), denom), g);
        x[i] = __fadd_rn(__fmul_rn(p, range), lo);
    }
}

// std_before * ((x - mean_after) / (std_after + 1e-8)) + mean_before: monai_adjust_contrast's
// retained statistics (Bessel-corrected standard deviations, rounded to f32 first).
extern "C" __global__ void int_monai_retain(float* x, long long n, const double* before,
                                            const double* after) {
    const double dn = (double)n, dof = (double)(n < 2 ? 1 : n - 1);
    const float mn = (float)(before[0] / dn), sd = (float)sqrt(before[3] / dof);
    const float m = (float)(after[0] / dn);
    const float s = __fadd_rn((float)sqrt(after[3] / dof), 1e-8f);
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        x[i] = __fadd_rn(__fmul_rn(sd, __fdiv_rn(__fsub_rn(x[i], m), s)), mn);
    }
}

// The polynomial bias fields (src/core/intensity/bias.rs): per voxel, the basis of each axis up
// to `order` at its coordinate (coords: n0 + n1 + n2 doubles), the terms (4 doubles each: the
// powers on axes 0, 1, 2 and the coefficient) summed in order as ((c b0) b1) b2, then
// convention 0 (MONAI) f32(x exp(f)) in f64, 1 (TorchIO) x f32(exp(f)) in f32. Legendre for 0,
// monomials for 1.
#define BIAS_MAX_ORDER 8
extern "C" __global__ void int_bias(float* x, int n0, int n1, int n2, const double* coords,
                                    const double* terms, int nterms, int order, int convention) {
    const long long total = (long long)n0 * n1 * n2;
    for (long long v = blockIdx.x * (long long)blockDim.x + threadIdx.x; v < total;
         v += (long long)gridDim.x * blockDim.x) {
        const int i2 = (int)(v % n2), i1 = (int)((v / n2) % n1), i0 = (int)(v / ((long long)n1 * n2));
        const double c[3] = {coords[i0], coords[n0 + i1], coords[n0 + n1 + i2]};
        double b[3][BIAS_MAX_ORDER + 1];
        for (int a = 0; a < 3; a++) {
            b[a][0] = 1.0;
            for (int k = 1; k <= order; k++) {
                if (convention == 1) {
                    b[a][k] = __dmul_rn(b[a][k - 1], c[a]);
                } else if (k == 1) {
                    b[a][k] = c[a];
                } else {
                    const double m = (double)(k - 1);
                    b[a][k] = __ddiv_rn(__dsub_rn(__dmul_rn(__dmul_rn(__dadd_rn(2.0 * m, 1.0), c[a]),
                                                            b[a][k - 1]),
                                                  __dmul_rn(m, b[a][k - 2])),
                                        __dadd_rn(m, 1.0));
                }
            }
        }
        double f = 0.0;
        for (int t = 0; t < nterms; t++) {
            const double* tt = terms + 4 * t;
            double p = tt[3];
            p = __dmul_rn(p, b[0][(int)tt[0]]);
            p = __dmul_rn(p, b[1][(int)tt[1]]);
            p = __dmul_rn(p, b[2][(int)tt[2]]);
            f = __dadd_rn(f, p);
        }
        x[v] = convention == 0 ? (float)__dmul_rn((double)x[v], exp(f))
                               : __fmul_rn(x[v], (float)exp(f));
    }
}

// x = x + alpha * (x - b2), x the first blur and b2 the second: monai_gaussian_sharpen.
extern "C" __global__ void int_sharpen(float* x, const float* b2, long long n, float alpha) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        x[i] = __fadd_rn(x[i], __fmul_rn(alpha, __fsub_rn(x[i], b2[i])));
    }
}

// MONAI's histogram shift (src/core/intensity/monai_histogram.rs): the np reference points
// pts[0..np] and the moved points pts[np..2np], in [0, 1], scaled to the range of st (set 0:
// [sum, min, max, ...]) as p * (max - min) + min; each voxel through the torch interpolation.
__device__ __forceinline__ float hist_scaled(float p, float r, float lo) {
    return __fadd_rn(__fmul_rn(p, r), lo);
}

extern "C" __global__ void int_hist_shift(float* x, long long n, const double* st,
                                          const float* pts, int np) {
    const float lo = (float)st[1], hi = (float)st[2];
    if (lo == hi) return;
    const float r = __fsub_rn(hi, lo);
    const float x0 = hist_scaled(pts[0], r, lo), xl = hist_scaled(pts[np - 1], r, lo);
    const float y0 = hist_scaled(pts[np], r, lo), yl = hist_scaled(pts[2 * np - 1], r, lo);
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        const float v = x[i];
        if (v < x0) {
            x[i] = y0;
            continue;
        }
        if (v > xl) {
            x[i] = yl;
            continue;
        }
        // The first point not below v (searchsorted, left), minus one, within the segments.
        int a = 0, b = np;
        while (a < b) {
            const int mid = (a + b) / 2;
            if (hist_scaled(pts[mid], r, lo) < v) a = mid + 1; else b = mid;
        }
        int k = a > 0 ? a - 1 : 0;
        if (k > np - 2) k = np - 2;
        const float xa = hist_scaled(pts[k], r, lo), xb = hist_scaled(pts[k + 1], r, lo);
        const float ya = hist_scaled(pts[np + k], r, lo), yb = hist_scaled(pts[np + k + 1], r, lo);
        const float m = __fdiv_rn(__fsub_rn(yb, ya), __fsub_rn(xb, xa));
        const float c = __fsub_rn(ya, __fmul_rn(m, xa));
        x[i] = __fadd_rn(__fmul_rn(m, v), c);
    }
}
