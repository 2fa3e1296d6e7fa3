// Filters on the GPU: the twin of src/filter/{separable,median,intensity}.rs, same results as
// scipy.ndimage's gaussian_filter, gaussian_laplace and median_filter (to f32 rounding; the
// median exactly).
//
// Arrays are C order, axis 0 slowest ([z, y, x] or [y, x]); a batch (channels, or many images of
// one shape) is one more leading axis, so every launch covers the whole batch.
//
// Defines (from the host, src/filter/cuda.rs): the MODE_* values and MODE (augscope::Mode), one of
// STORE_F32 / STORE_F16 / STORE_BF16 (storage of the input and output; compute is f32), and for
// the median MED_K0, MED_K1, MED_K2 (odd window sizes, 1 on missing axes).
//
// Boundary: scipy's *filter* rule (ni_support.c NI_ExtendLine via
// _extend_mode_to_code(mode, is_filter=True)), not map_coordinates': wrap and grid-wrap are periodic
// with period n, constant and grid-constant read cval, reflect has period 2n, mirror 2n - 2 (n = 1:
// the one value), nearest clamps.

#if !defined(MODE_CONSTANT) || !defined(MODE_GRID_CONSTANT) || !defined(MODE_NEAREST) || \
    !defined(MODE_REFLECT) || !defined(MODE_MIRROR) || !defined(MODE_GRID_WRAP) || !defined(MODE_WRAP)
#error "the MODE_* values must be passed as -D defines from augscope::Mode"
#endif

// ---------------------------------------------------------------------------------------------
// Storage: f16 / bf16 as bit patterns in an unsigned short, round to nearest even.
// ---------------------------------------------------------------------------------------------
#if defined(STORE_F16)
typedef unsigned short store_t;
__device__ __forceinline__ float load_store(store_t v) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v));
    return f;
}
__device__ __forceinline__ store_t to_store(float v) {
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v));
    return h;
}
#elif defined(STORE_BF16)
typedef unsigned short store_t;
__device__ __forceinline__ float load_store(store_t v) { return __int_as_float(((unsigned int)v) << 16); }
__device__ __forceinline__ store_t to_store(float f) {
    unsigned int u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (unsigned short)(u >> 16);
}
#else
typedef float store_t;
__device__ __forceinline__ float load_store(store_t v) { return v; }
__device__ __forceinline__ store_t to_store(float v) { return v; }
#endif

// The input index of tap i on an axis of length n, or -1 for cval (scipy's filter rule).
__device__ __forceinline__ long long filter_tap(long long i, long long n) {
    if (i >= 0 && i < n) return i;
#if MODE == MODE_CONSTANT || MODE == MODE_GRID_CONSTANT
    return -1;
#else
    if (n <= 1) return 0;
#if MODE == MODE_NEAREST
    return i < 0 ? 0 : n - 1;
#elif MODE == MODE_WRAP || MODE == MODE_GRID_WRAP
    long long j = i % n;
    return j < 0 ? j + n : j;
#elif MODE == MODE_REFLECT
    const long long p = 2 * n;
    long long j = i % p;
    if (j < 0) j += p;
    return j < n ? j : p - 1 - j;
#else  // MODE_MIRROR
    const long long p = 2 * n - 2;
    long long j = i % p;
    if (j < 0) j += p;
    return j < n ? j : p - j;
#endif
#endif
}

// ---------------------------------------------------------------------------------------------
// Conversions between the storage type and the f32 work buffers.
// ---------------------------------------------------------------------------------------------
extern "C" __global__ void __launch_bounds__(256) from_store_f32(const store_t* __restrict__ src,
                                                                 float* __restrict__ dst, long long n) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = load_store(src[i]);
}

extern "C" __global__ void __launch_bounds__(256) to_store_f32(const float* __restrict__ src,
                                                               store_t* __restrict__ dst, long long n) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = to_store(src[i]);
}

// ---------------------------------------------------------------------------------------------
// Separable passes: out = w[0] x[i] + sum_j w[j] (x[i - j] + x[i + j]) along one axis, the array
// seen as [outer, n, inner]. w holds the half kernel w[0..=r] (symmetric kernels only: gaussian
// and its second derivative).
// ---------------------------------------------------------------------------------------------

// Contiguous axis (inner == 1): a block of LINE_T threads makes LINE_T outputs of one line from a
// shared tile of LINE_T + 2r inputs, loaded coalesced with the boundary already applied.
// Grid: (lines, ceil(n / LINE_T)). Dynamic shared memory: (LINE_T + 2r) floats.
#define LINE_T 256
extern "C" __global__ void __launch_bounds__(LINE_T) sep_line_f32(const float* __restrict__ src,
                                                                  float* __restrict__ dst,
                                                                  const float* __restrict__ w, int r,
                                                                  long long n, float cval) {
    extern __shared__ float tile[];
    const long long line = blockIdx.x;
    const long long i0 = (long long)blockIdx.y * LINE_T;
    const float* in = src + line * n;
    for (int t = threadIdx.x; t < LINE_T + 2 * r; t += LINE_T) {
        const long long j = filter_tap(i0 + t - r, n);
        tile[t] = j < 0 ? cval : in[j];
    }
    __syncthreads();
    const long long i = i0 + threadIdx.x;
    if (i >= n) return;
    const float* c = tile + threadIdx.x + r;
    float acc = w[0] * c[0];
    for (int j = 1; j <= r; j++) acc += w[j] * (c[-j] + c[j]);
    dst[line * n + i] = acc;
}

// Strided axis (inner > 1): a block of (32, STR_Y) threads makes 32 neighbouring columns (coalesced
// along x) times STR_L outputs along the axis, from a shared tile of (STR_L + 2r) rows of 32.
// Grid: (ceil(inner / 32), ceil(n / STR_L), outer). Dynamic shared memory: (STR_L + 2r) * 32 floats.
#define STR_Y 8
#define STR_L 64
extern "C" __global__ void __launch_bounds__(32 * STR_Y) sep_strided_f32(const float* __restrict__ src,
                                                                         float* __restrict__ dst,
                                                                         const float* __restrict__ w,
                                                                         int r, long long n,
                                                                         long long inner, float cval) {
    extern __shared__ float tile[];
    const long long col = (long long)blockIdx.x * 32 + threadIdx.x;
    const long long i0 = (long long)blockIdx.y * STR_L;
    const long long base = (long long)blockIdx.z * n * inner;
    const bool live = col < inner;
    for (int t = threadIdx.y; t < STR_L + 2 * r; t += STR_Y) {
        const long long j = filter_tap(i0 + t - r, n);
        tile[t * 32 + threadIdx.x] = (j < 0 || !live) ? cval : src[base + j * inner + col];
    }
    __syncthreads();
    if (!live) return;
    for (int o = threadIdx.y; o < STR_L; o += STR_Y) {
        const long long i = i0 + o;
        if (i >= n) break;
        const float* c = tile + (o + r) * 32 + threadIdx.x;
        float acc = w[0] * c[0];
        for (int j = 1; j <= r; j++) acc += w[j] * (c[-j * 32] + c[j * 32]);
        dst[base + i * inner + col] = acc;
    }
}

// Any axis, without shared memory (radii too large for a tile): one thread per output.
// Grid: 1D over outer * n * inner.
extern "C" __global__ void __launch_bounds__(256) sep_direct_f32(const float* __restrict__ src,
                                                                 float* __restrict__ dst,
                                                                 const float* __restrict__ w, int r,
                                                                 long long n, long long inner,
                                                                 long long total, float cval) {
    const long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= total) return;
    const long long col = k % inner;
    const long long i = (k / inner) % n;
    const long long base = (k / (inner * n)) * n * inner + col;
    auto at = [&](long long t) {
        const long long j = filter_tap(t, n);
        return j < 0 ? cval : src[base + j * inner];
    };
    float acc = w[0] * at(i);
    for (int j = 1; j <= r; j++) acc += w[j] * (at(i - j) + at(i + j));
    dst[k] = acc;
}

// ---------------------------------------------------------------------------------------------
// Point-wise: acc += x (LoG terms), acc -= x (DoG), |x|, gamma, contrast.
// ---------------------------------------------------------------------------------------------
extern "C" __global__ void __launch_bounds__(256) axpy_f32(float* __restrict__ acc,
                                                           const float* __restrict__ x, float a,
                                                           long long n) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) acc[i] += a * x[i];
}

extern "C" __global__ void __launch_bounds__(256) abs_f32(float* __restrict__ x, long long n) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = fabsf(x[i]);
}

// scale * (max(x, 0) / scale)^g, as src/filter/intensity.rs.
extern "C" __global__ void __launch_bounds__(256) gamma_f32(float* __restrict__ x, float g, float scale,
                                                            long long n) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = powf(fmaxf(x[i], 0.0f) / scale, g) * scale;
}

// c * x + b (fmad off: the CPU's multiply then add).
extern "C" __global__ void __launch_bounds__(256) contrast_f32(float* __restrict__ x, float c, float b,
                                                               long long n) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = __fadd_rn(__fmul_rn(c, x[i]), b);
}

// The 3x3 Laplacian [[0,1,0],[1,-4,1],[0,1,0]] of FEBDS `log` on [batch, h, w], mirror boundary
// (torch's "reflect" padding), as src/filter/febds.rs. Grid: 1D over batch * h * w.
extern "C" __global__ void __launch_bounds__(256) laplace3x3_f32(const float* __restrict__ g,
                                                                 float* __restrict__ out, long long h,
                                                                 long long w, long long total) {
    const long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= total) return;
    const long long x = k % w, y = (k / w) % h, b = k / (w * h);
    auto m = [](long long i, long long n) {
        if (i >= 0 && i < n) return i;
        if (n <= 1) return 0LL;
        const long long p = 2 * n - 2;
        long long j = i % p;
        if (j < 0) j += p;
        return j < n ? j : p - j;
    };
    const float* p = g + b * h * w;
    const float c = p[y * w + x];
    const float up = p[m(y - 1, h) * w + x], dn = p[m(y + 1, h) * w + x];
    const float l = p[y * w + m(x - 1, w)], r = p[y * w + m(x + 1, w)];
    out[k] = (((up + l) + c * -4.0f) + r) + dn;
}

// ---------------------------------------------------------------------------------------------
// Median over a MED_K0 x MED_K1 x MED_K2 box (odd sizes, N taps), by forgetful selection: of the
// N = 2k + 1 window values keep the first k + 2; repeatedly drop the smallest and the largest
// (neither can be the median) and take in the next value; the one value left is the median. The
// result is one of the inputs, exactly the CPU engine's: values are compared as the integer keys
// of f32::total_cmp (-0 < +0, NaN above +inf), not with `<`.
//
// Windows of up to 125 taps (k + 2 <= 64: 5^3, 11x11, ...) run a network unrolled at compile
// time, so the k + 2 values live in registers: each step pairs the values low/high and brings the
// minimum of the lows to slot 0 and the maximum of the highs to the last slot with two tournament
// trees (1.5 LEN compare-exchanges, depth log2 LEN), then the new value replaces slot 0 and the
// last slot is dropped. With MED_PAIR = 0 (or 1) a thread makes two outputs next to each other
// along axis 0 (or 1): their windows share all but one plane (row), and the steps that take in
// the shared values are done once for both (valid for both windows, as the kept set is a subset
// of each); only the last steps run twice. Larger windows keep the values in local memory.
//
// Shape [outer, d, h, w] with d = 1 for 2D. Block (32, 8); grid (ceil(w / 32), ceil(h / 8),
// outer * d), with h / 16 for MED_PAIR = 1 and outer * ceil(d / 2) for MED_PAIR = 0.
// ---------------------------------------------------------------------------------------------
#ifdef MED_K0
#define MED_N (MED_K0 * MED_K1 * MED_K2)
#define MED_KEEP (MED_N / 2 + 2)
#ifndef MED_PAIR
#define MED_PAIR (-1)
#endif
#ifndef MED_MINB  // blocks per SM the register network is built for (measurements)
#define MED_MINB 2
#endif

// f32::total_cmp's order as a signed integer order (an involution).
__device__ __forceinline__ int med_key(float f) {
    const int i = __float_as_int(f);
    return i ^ ((i >> 31) & 0x7fffffff);
}
__device__ __forceinline__ float med_unkey(int k) { return __int_as_float(k ^ ((k >> 31) & 0x7fffffff)); }

#if MED_N > 1 && MED_KEEP <= 64
// The window's planes and rows: one more on the pairing axis.
#define MED_P0 (MED_K0 + (MED_PAIR == 0 ? 1 : 0))
#define MED_P1 (MED_K1 + (MED_PAIR == 1 ? 1 : 0))
// Taps shared by both outputs of a pair (all N without pairing).
#define MED_C (MED_PAIR == 0 ? (MED_K0 - 1) * MED_K1 * MED_K2 : MED_PAIR == 1 ? MED_K0 * (MED_K1 - 1) * MED_K2 : MED_N)
// Taps of one output only.
#define MED_U (MED_N - MED_C)

__device__ __forceinline__ void med_cx(int& a, int& b) {
    const int lo = min(a, b);
    b = max(a, b);
    a = lo;
}

// Brings the minimum of a[0..LEN) to a[0] and the maximum to a[LEN - 1], keeping all values.
template <int LEN>
__device__ __forceinline__ void med_ends(int* a) {
#pragma unroll
    for (int i = 0; i < LEN / 2; i++) med_cx(a[i], a[LEN - 1 - i]);
    // The lows (with the middle value when LEN is odd) hold the minimum, the highs the maximum.
    constexpr int ML = (LEN + 1) / 2, MH = LEN - LEN / 2;
#pragma unroll
    for (int s = 1; s < ML; s *= 2) {
#pragma unroll
        for (int i = 0; i + s < ML; i += 2 * s) med_cx(a[i], a[i + s]);
    }
#pragma unroll
    for (int s = 1; s < MH; s *= 2) {
#pragma unroll
        for (int i = 0; i + s < MH; i += 2 * s) med_cx(a[LEN - 1 - i - s], a[LEN - 1 - i]);
    }
}

// Tap t of phase ph (0: the shared taps, 1: the first output's own, 2: the second's) as the
// (plane, row, column) of the window.
__device__ constexpr int med_ti(int ph, int t) {
    return MED_PAIR == 0   ? (ph == 0 ? 1 + t / (MED_K1 * MED_K2) : ph == 1 ? 0 : MED_K0)
           : MED_PAIR == 1 ? (ph == 0 ? t / ((MED_K1 - 1) * MED_K2) : t / MED_K2)
                           : t / (MED_K1 * MED_K2);
}
__device__ constexpr int med_tj(int ph, int t) {
    return MED_PAIR == 0   ? (ph == 0 ? (t / MED_K2) % MED_K1 : t / MED_K2)
           : MED_PAIR == 1 ? (ph == 0 ? 1 + (t / MED_K2) % (MED_K1 - 1) : ph == 1 ? 0 : MED_K1)
                           : (t / MED_K2) % MED_K1;
}
__device__ constexpr int med_tk(int t) { return t % MED_K2; }

struct MedWin {
    const float* p;
    // Offsets of the window's planes, rows and columns (-1: outside, cval, constant modes only).
    long long zo[MED_P0], yo[MED_P1], xo[MED_K2];
    float cval;
    __device__ __forceinline__ int key(int i, int j, int k) const {
#if MODE == MODE_CONSTANT || MODE == MODE_GRID_CONSTANT
        if (zo[i] < 0 || yo[j] < 0 || xo[k] < 0) return med_key(cval);
#endif
        return med_key(__ldg(p + zo[i] + yo[j] + xo[k]));
    }
};

// Takes in the taps T..TEND of phase PH, one per step, into a[0..LEN).
template <int PH, int LEN, int T, int TEND>
__device__ __forceinline__ void med_take(int* a, const MedWin& win) {
    if constexpr (T < TEND) {
        med_ends<LEN>(a);
        a[0] = win.key(med_ti(PH, T), med_tj(PH, T), med_tk(T));
        med_take<PH, LEN - 1, T + 1, TEND>(a, win);
    }
}

extern "C" __global__ void __launch_bounds__(256, MED_MINB) median_f32(const float* __restrict__ src,
                                                             float* __restrict__ dst, long long d,
                                                             long long h, long long w, float cval) {
    const long long x = (long long)blockIdx.x * 32 + threadIdx.x;
    const long long y = ((long long)blockIdx.y * 8 + threadIdx.y) * (MED_PAIR == 1 ? 2 : 1);
    if (x >= w || y >= h) return;
    const long long dz = MED_PAIR == 0 ? (d + 1) / 2 : d;
    const long long z = (blockIdx.z % dz) * (MED_PAIR == 0 ? 2 : 1);
    const long long b = blockIdx.z / dz;
    MedWin win;
    win.p = src + b * d * h * w;
    win.cval = cval;
#pragma unroll
    for (int i = 0; i < MED_P0; i++) {
        const long long t = filter_tap(z + i - MED_K0 / 2, d);
        win.zo[i] = t < 0 ? -1 : t * h * w;
    }
#pragma unroll
    for (int j = 0; j < MED_P1; j++) {
        const long long t = filter_tap(y + j - MED_K1 / 2, h);
        win.yo[j] = t < 0 ? -1 : t * w;
    }
#pragma unroll
    for (int k = 0; k < MED_K2; k++) win.xo[k] = filter_tap(x + k - MED_K2 / 2, w);
    int a[MED_KEEP];
#pragma unroll
    for (int t = 0; t < MED_KEEP; t++) a[t] = win.key(med_ti(0, t), med_tj(0, t), med_tk(t));
    med_take<0, MED_KEEP, MED_KEEP, MED_C>(a, win);
    float* q = dst + b * d * h * w;
#if MED_PAIR < 0
    med_ends<3>(a);
    q[(z * h + y) * w + x] = med_unkey(a[1]);
#else
    constexpr int L = 2 * MED_KEEP - MED_C;  // values kept after the shared taps
    int c[L];
#pragma unroll
    for (int t = 0; t < L; t++) c[t] = a[t];
    med_take<1, L, 0, MED_U>(a, win);
    med_take<2, L, 0, MED_U>(c, win);
    med_ends<3>(a);
    med_ends<3>(c);
    q[(z * h + y) * w + x] = med_unkey(a[1]);
#if MED_PAIR == 0
    if (z + 1 < d) q[((z + 1) * h + y) * w + x] = med_unkey(c[1]);
#else
    if (y + 1 < h) q[(z * h + y + 1) * w + x] = med_unkey(c[1]);
#endif
#endif
}

#else  // one tap, or windows too large for registers
extern "C" __global__ void __launch_bounds__(256) median_f32(const float* __restrict__ src,
                                                             float* __restrict__ dst, long long d,
                                                             long long h, long long w, float cval) {
    const long long x = (long long)blockIdx.x * 32 + threadIdx.x;
    const long long y = (long long)blockIdx.y * 8 + threadIdx.y;
    if (x >= w || y >= h) return;
    const long long z = blockIdx.z % d;
    const long long b = blockIdx.z / d;
    const float* p = src + b * d * h * w;
    // The window in C order, tap t -> (t / (K1 K2), (t / K2) % K1, t % K2).
    auto tap = [&](int t) {
        const long long zz = filter_tap(z + t / (MED_K1 * MED_K2) - MED_K0 / 2, d);
        const long long yy = filter_tap(y + (t / MED_K2) % MED_K1 - MED_K1 / 2, h);
        const long long xx = filter_tap(x + t % MED_K2 - MED_K2 / 2, w);
        return med_key((zz < 0 || yy < 0 || xx < 0) ? cval : p[(zz * h + yy) * w + xx]);
    };
#if MED_N == 1
    dst[((b * d + z) * h + y) * w + x] = med_unkey(tap(0));
#else
    int a[MED_KEEP];
    int len = MED_KEEP;
    for (int t = 0; t < MED_KEEP; t++) a[t] = tap(t);
    int next = MED_KEEP;
    while (true) {
        // Drop the smallest and the largest of a[0..len).
        int lo = 0, hi = 0;
        for (int t = 1; t < len; t++) {
            if (a[t] < a[lo]) lo = t;
            if (a[t] > a[hi]) hi = t;
        }
        if (lo == hi) hi = (lo == 0) ? 1 : 0;  // all equal: drop any two
        // Remove hi then lo by moving the last elements into their slots.
        const int first = lo > hi ? lo : hi, second = lo > hi ? hi : lo;
        a[first] = a[len - 1];
        len--;
        a[second] = a[len - 1];
        len--;
        if (next >= MED_N) break;
        a[len++] = tap(next++);
    }
    dst[((b * d + z) * h + y) * w + x] = med_unkey(a[0]);
#endif
}
#endif
#endif

// ---------------------------------------------------------------------------------------------
// FEBDS `fft`: multiplies the half spectrum X[v][u] (u < w/2 + 1, from cuFFT's R2C of an h x w
// image) by medical-image-std's Butterworth band-pass H(v, u) = 1 / (1 + ((D^2 - 21^2) /
// (8 * 32 * D))^6), D the distance of (v, u) from (h/2, w/2) (8 * 32 * D replaced by 1e-6 where
// it is 0), and by `scale` (1 / (h w): cuFFT's C2R does not normalise). H is even in (v, u) modulo
// (h, w), so the half spectrum carries all of it. As src/filter/febds.rs::butterworth.
// Grid: 1D over h * wc.
// ---------------------------------------------------------------------------------------------
extern "C" __global__ void __launch_bounds__(256) butterworth_mul_f32(float2* __restrict__ X, long long h,
                                                                      long long w, long long wc,
                                                                      float scale) {
    const long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= h * wc) return;
    const long long u = k % wc, v = k / wc;
    const float du = (float)u - (float)w / 2.0f;
    const float dv = (float)v - (float)h / 2.0f;
    const float d = sqrtf(du * du + dv * dv);
    const float band = d * d - 21.0f * 21.0f;
    float cutoff = 256.0f * d;
    if (cutoff == 0.0f) cutoff = 1e-6f;
    const float t = band / cutoff;
    const float t2 = t * t;
    const float hk = 1.0f / (1.0f + t2 * t2 * t2) * scale;
    X[k].x *= hk;
    X[k].y *= hk;
}

// ---------------------------------------------------------------------------------------------
// FEBDS steps 4-5 on the GPU, as src/filter/febds.rs::segment: the threshold (Otsu's histogram
// or the local-variance test), the 7x7 closing with zero padding, and the hole filling. Masks are
// bytes (0/1). The host reads back only the minimum and maximum, the histogram (<= 4096 counts),
// two f64 sums and one flag per round of the hole filling.
// ---------------------------------------------------------------------------------------------

// f32 -> u32 keys in the order of the values (-0 below +0), for atomicMin / atomicMax.
__device__ __forceinline__ unsigned int f32_key(float v) {
    const unsigned int b = __float_as_uint(v);
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

// mm[0] = min key, mm[1] = max key over the non-NaN values of x (the host sets them to
// 0xffffffff and 0 first). Grid-stride, any 1D grid of 256-thread blocks.
extern "C" __global__ void __launch_bounds__(256) minmax_f32(const float* __restrict__ x, long long n,
                                                             unsigned int* __restrict__ mm) {
    unsigned int lo = 0xffffffffu, hi = 0u;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        const float v = x[i];
        if (v == v) {
            const unsigned int k = f32_key(v);
            lo = min(lo, k);
            hi = max(hi, k);
        }
    }
    for (int s = 16; s > 0; s >>= 1) {
        lo = min(lo, __shfl_xor_sync(0xffffffffu, lo, s));
        hi = max(hi, __shfl_xor_sync(0xffffffffu, hi, s));
    }
    if ((threadIdx.x & 31) == 0) {
        atomicMin(&mm[0], lo);
        atomicMax(&mm[1], hi);
    }
}

// torch.histc's bins (febds.rs Histc::bin, f32 arithmetic, fmad off): pos = (v - left) * bins /
// (right - left), truncated (NaN -> 0, saturating), clamped to bins - 1, for left <= v <= right.
// hist holds bins (<= 4096) zeroed counts. Grid-stride, 256-thread blocks.
#define HIST_MAX 4096
extern "C" __global__ void __launch_bounds__(256) histc_f32(const float* __restrict__ x, long long n,
                                                            float left, float right, int bins,
                                                            unsigned int* __restrict__ hist) {
    __shared__ unsigned int h[HIST_MAX];
    for (int i = threadIdx.x; i < bins; i += blockDim.x) h[i] = 0;
    __syncthreads();
    const float span = right - left, fb = (float)bins;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        const float v = x[i];
        if (v >= left && v <= right) {
            unsigned int pos = __float2uint_rz((v - left) * fb / span);
            if (pos >= (unsigned int)bins) pos = bins - 1;
            atomicAdd(&h[pos], 1u);
        }
    }
    __syncthreads();
    for (int i = threadIdx.x; i < bins; i += blockDim.x)
        if (h[i]) atomicAdd(&hist[i], h[i]);
}

// acc[0] += sum of x (squares == 0) or of (x - mean)^2 (squares == 1), in f64. Grid-stride,
// 256-thread blocks; the order of the sum is not the CPU's (f64 rounding only).
extern "C" __global__ void __launch_bounds__(256) sum_f64(const float* __restrict__ x, long long n,
                                                          double mean, int squares,
                                                          double* __restrict__ acc) {
    double s = 0.0;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        const double v = (double)x[i];
        if (squares) {
            const double d = v - mean;
            s += d * d;
        } else {
            s += v;
        }
    }
    for (int k = 16; k > 0; k >>= 1) s += __shfl_xor_sync(0xffffffffu, s, k);
    if ((threadIdx.x & 31) == 0) atomicAdd(acc, s);
}

// m = x > t (Otsu's mask). Grid: 1D over n.
extern "C" __global__ void __launch_bounds__(256) above_u8(const float* __restrict__ x,
                                                           unsigned char* __restrict__ m, float t,
                                                           long long n) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) m[i] = x[i] > t ? 1 : 0;
}

// The binarize mask of an h x w image: the unbiased variance of the 5x5 window (mirror boundary,
// f64 sums in the CPU's order, fmad off), rounded to f32 and squared, >= g2. Grid: 1D over h * w.
extern "C" __global__ void __launch_bounds__(256) local_var_u8(const float* __restrict__ x,
                                                               unsigned char* __restrict__ m,
                                                               long long h, long long w, float g2) {
    const long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= h * w) return;
    const long long px = k % w, py = k / w;
    auto mir = [](long long i, long long n) {
        if (i >= 0 && i < n) return i;
        if (n <= 1) return 0LL;
        const long long p = 2 * n - 2;
        long long j = i % p;
        if (j < 0) j += p;
        return j < n ? j : p - j;
    };
    long long ys[5], xs[5];
    for (int d = 0; d < 5; ++d) {
        ys[d] = mir(py + d - 2, h) * w;
        xs[d] = mir(px + d - 2, w);
    }
    double s = 0.0;
    for (int a = 0; a < 5; ++a)
        for (int b = 0; b < 5; ++b) s += (double)x[ys[a] + xs[b]];
    const double mu = s / 25.0;
    double q = 0.0;
    for (int a = 0; a < 5; ++a)
        for (int b = 0; b < 5; ++b) {
            const double d = (double)x[ys[a] + xs[b]] - mu;
            q += d * d;
        }
    const float lv = (float)(q / 24.0);
    m[k] = lv * lv >= g2 ? 1 : 0;
}

// One pass of a (2r + 1)-box max (mx = 1) or min (mx = 0) along x (axis 1) or y (axis 0) of an
// h x w mask, 0 outside the image (torch max_pool2d on a zero-padded mask). Grid: 1D over h * w.
extern "C" __global__ void __launch_bounds__(256) box_u8(const unsigned char* __restrict__ src,
                                                         unsigned char* __restrict__ dst, long long h,
                                                         long long w, int axis, int r, int mx) {
    const long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= h * w) return;
    const long long px = k % w, py = k / w;
    const long long n = axis ? w : h, at = axis ? px : py, step = axis ? 1 : w;
    unsigned char acc = mx ? 0 : 1;
    for (int d = -r; d <= r; ++d) {
        const long long j = at + d;
        const unsigned char v = (j >= 0 && j < n) ? src[k + d * step] : 0;
        acc = mx ? max(acc, v) : min(acc, v);
    }
    dst[k] = acc;
}

// Hole filling (scipy binary_fill_holes, 4-connected background) by propagation from the border.
// State bytes: 0 foreground, 1 background not yet reached, 2 background reached from the border.
// holes_init_u8: the state of an h x w mask, its border background reached. Grid: 1D over h * w.
extern "C" __global__ void __launch_bounds__(256) holes_init_u8(const unsigned char* __restrict__ mask,
                                                                unsigned char* __restrict__ st,
                                                                long long h, long long w) {
    const long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= h * w) return;
    const long long px = k % w, py = k / w;
    const bool edge = px == 0 || py == 0 || px == w - 1 || py == h - 1;
    st[k] = mask[k] ? 0 : (edge ? 2 : 1);
}

// Spreads "reached" along every row of an h x w state, left to right then right to left, through
// runs of background. One warp per row, 32 pixels per step: with B the background bits and S the
// reached bits of a step (S within B, the carry from the previous step at bit 0), the reached bits
// after the step are S plus the bits of B from each bit of S to the end of its run:
// ((B + S) ^ B) & B | S (the addition carries through each run above its lowest seed). The right
// to left sweep is the same on bit-reversed words. *changed = 1 where a pixel was reached.
// Block (32, 8): eight rows per block; grid ceil(h / 8).
__device__ __forceinline__ unsigned int spread_up(unsigned int b, unsigned int s) {
    const unsigned long long t = (unsigned long long)b + s;
    return ((unsigned int)t ^ b) & b | s;
}

extern "C" __global__ void __launch_bounds__(256) holes_rows_u8(unsigned char* __restrict__ st,
                                                                long long h, long long w,
                                                                unsigned int* __restrict__ changed) {
    const long long y = (long long)blockIdx.x * 8 + threadIdx.y;
    if (y >= h) return;
    const unsigned int lane = threadIdx.x;
    unsigned char* row = st + y * w;
    bool any = false;
    unsigned int carry = 0;
    for (long long x0 = 0; x0 < w; x0 += 32) {
        const long long x = x0 + lane;
        const unsigned char v = x < w ? row[x] : 0;
        const unsigned int b = __ballot_sync(0xffffffffu, v != 0);
        const unsigned int s = (__ballot_sync(0xffffffffu, v == 2) | (carry & b & 1u)) & b;
        const unsigned int r = spread_up(b, s);
        if (v == 1 && ((r >> lane) & 1u)) {
            row[x] = 2;
            any = true;
        }
        carry = r >> 31;
    }
    carry = 0;
    const long long last = ((w - 1) / 32) * 32;
    for (long long x0 = last; x0 >= 0; x0 -= 32) {
        const long long x = x0 + lane;
        const unsigned char v = x < w ? row[x] : 0;
        // Bit 31 - lane holds pixel x0 + lane: the sweep runs up the reversed word.
        const unsigned int b = __brev(__ballot_sync(0xffffffffu, v != 0));
        const unsigned int s = (__brev(__ballot_sync(0xffffffffu, v == 2)) | (carry & b & 1u)) & b;
        const unsigned int r = spread_up(b, s);
        if (v == 1 && ((r >> (31 - lane)) & 1u)) {
            row[x] = 2;
            any = true;
        }
        carry = r >> 31;
    }
    if (__any_sync(0xffffffffu, any) && lane == 0) *changed = 1;
}

// dst (w x h) = the transpose of src (h x w), bytes. Block (32, 8), grid (ceil(w / 32),
// ceil(h / 32)).
extern "C" __global__ void __launch_bounds__(256) transpose_u8(const unsigned char* __restrict__ src,
                                                               unsigned char* __restrict__ dst,
                                                               long long h, long long w) {
    __shared__ unsigned char tile[32][33];
    const long long bx = (long long)blockIdx.x * 32, by = (long long)blockIdx.y * 32;
    for (int j = threadIdx.y; j < 32; j += 8) {
        const long long y = by + j, x = bx + threadIdx.x;
        if (y < h && x < w) tile[j][threadIdx.x] = src[y * w + x];
    }
    __syncthreads();
    for (int j = threadIdx.y; j < 32; j += 8) {
        const long long x = bx + j, y = by + threadIdx.x;
        if (x < w && y < h) dst[x * h + y] = tile[threadIdx.x][j];
    }
}

// The FEBDS mask: 0 where the state is background reached from the border, else 1. Grid: 1D.
extern "C" __global__ void __launch_bounds__(256) holes_out_f32(const unsigned char* __restrict__ st,
                                                                float* __restrict__ out, long long n) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = st[i] == 2 ? 0.0f : 1.0f;
}
