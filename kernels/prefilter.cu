// Cubic B-spline prefilter on the GPU: the twin of src/engine/spline.rs, same result as
// scipy.ndimage.spline_filter(x, order=3, mode=MODE) after scipy's _prepad_for_spline_filter
// (scipy/ndimage/src/ni_splines.c, scipy/ndimage/_interpolation.py).
//
// One thread per line; each line is filtered in f64 (as scipy does) in a scratch buffer laid out
// like the data, then stored as f32, one axis after the other, exactly as the CPU engine.
// Defines: the MODE_* values and MODE; store conversion from boundary.cuh.
#ifndef AUGSCOPE_BOUNDARY_CUH
#include "boundary.cuh"
#endif

// Which exact boundary scipy's prefilter uses for a mode (`apply_filter` in ni_splines.c).
#if MODE == MODE_GRID_WRAP
#define INIT_WRAP 1
#elif MODE == MODE_REFLECT || MODE == MODE_NEAREST
#define INIT_REFLECT 1
#else
#define INIT_MIRROR 1
#endif

// compiler-rt's __powidf2, which Rust's f64::powi calls: the same rounding as the CPU engine.
__device__ __forceinline__ double powi(double a, int b) {
    const bool recip = b < 0;
    double r = 1.0;
    while (1) {
        if (b & 1) r *= a;
        b /= 2;
        if (b == 0) break;
        a *= a;
    }
    return recip ? 1.0 / r : r;
}

// The pole of the cubic B-spline, sqrt(3) - 2, and the filter's gain (1 - z)(1 - 1/z).
#define PF_Z (-0.2679491924311227)
#define PF_GAIN ((1.0 - PF_Z) * (1.0 - 1.0 / PF_Z))

// The anti-causal pass's c[n - 1]: in closed form from the causal pass's c[n - 2] and c[n - 1]
// (mirror; reflect and nearest use c[n - 1] alone), or for wrap from the sum
// acc = c[n - 1] + sum_{i < n - 1} z^(i+1) c[i] and z_i = z^n. scipy's formulas, shared by both
// prefilter kernels.
__device__ __forceinline__ double anti_init_closed(double c_n2, double c_n1) {
    const double z = PF_Z;
#if defined(INIT_MIRROR)
    return (z * c_n2 + c_n1) * z / (z * z - 1.0);
#else
    return c_n1 * (z / (z - 1.0));
#endif
}
__device__ __forceinline__ double anti_init_wrap(double acc, double z_i) {
    const double z = PF_Z;
    return acc * z / (z_i - 1.0);
}

// Pads by P on every side, edge values (nearest) or cval (grid-constant), as np.pad.
// One thread per padded element; shapes are NDIM long.
struct PadParams {
    long long n_out;
    int in_shape[3];
    int out_shape[3];
    int pad;
    float cval;
};

extern "C" __global__ void __launch_bounds__(256) pad_f32(const float* __restrict__ src, float* __restrict__ dst,
                                                          int channels, long long n_in, PadParams p) {
    const long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= p.n_out) return;
    long long rem = idx, off = 0, stride = 1;
    bool inside = true;
#pragma unroll
    for (int a = NDIM - 1; a >= 0; a--) {
        const int i = (int)(rem % p.out_shape[a]) - p.pad;
        rem /= p.out_shape[a];
        const int n = p.in_shape[a];
        int j = i;
        if (i < 0 || i >= n) {
            inside = false;
            j = i < 0 ? 0 : n - 1;
        }
        off += (long long)j * stride;
        stride *= n;
    }
    for (int ch = 0; ch < channels; ch++) {
#if MODE == MODE_GRID_CONSTANT
        dst[ch * p.n_out + idx] = inside ? src[ch * n_in + off] : p.cval;
#else
        dst[ch * p.n_out + idx] = src[ch * n_in + off];
#endif
    }
}

// Filters the lines along one axis of `data` ([outer][n][inner] per channel; `lines` =
// channels * outer * inner threads), with `scratch` (f64, same layout) holding the causal pass.
// The f64 operations of src/engine/spline.rs in the same order, with the data read straight from
// `data` (scaled by the gain as it is read) and the running value kept in a register: per element
// 2 reads of the f32 input for the initialisation, one for the causal pass, one f64 write and one
// f64 read of the causal result, and the f32 store: about 32 bytes per element and axis against
// 88 when the whole line is first staged in f64 (the prefilter of 256x512x512 takes 5.6 instead of
// 8.7 ms on the H200).
extern "C" __global__ void __launch_bounds__(128) prefilter_axis_f32(float* __restrict__ data, double* __restrict__ scratch,
                                                                     long long lines, int n, long long inner) {
    const long long L = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (L >= lines || n <= 1) return;
    const double z = PF_Z;
    const double gain = PF_GAIN;
    const long long o = L / inner, col = L % inner;
    const long long base = o * n * inner + col;
    float* __restrict__ d = data + base;
    double* __restrict__ c = scratch + base;
#define D(i) ((double)d[(long long)(i) * inner] * gain)
#define C(i) c[(long long)(i) * inner]

    // Causal initialisation of c[0].
    double c0;
#if defined(INIT_MIRROR)
    {
        const double z_n_1 = powi(z, n - 1);
        double acc = D(0) + z_n_1 * D(n - 1);
        double z_i = z;
        for (int i = 1; i < n - 1; i++) {
            acc += z_i * (D(i) + z_n_1 * D(n - 1 - i));
            z_i *= z;
        }
        c0 = acc / (1.0 - z_n_1 * z_n_1);
    }
#elif defined(INIT_WRAP)
    {
        double acc = D(0);
        double z_i = z;
        for (int i = 1; i < n; i++) {
            acc += z_i * D(n - i);
            z_i *= z;
        }
        c0 = acc / (1.0 - z_i);
    }
#else  // INIT_REFLECT
    {
        const double z_n = powi(z, n);
        const double d0 = D(0);
        double acc = d0 + z_n * D(n - 1);
        double z_i = z;
        for (int i = 1; i < n; i++) {
            acc += z_i * (D(i) + z_n * D(n - 1 - i));
            z_i *= z;
        }
        c0 = acc * (z / (1.0 - z_n * z_n)) + d0;
    }
#endif
    // Causal recursion: c[i] = d[i] * gain + z * c[i - 1].
    double prev2 = 0.0, prev = c0;
    C(0) = c0;
    for (int i = 1; i < n; i++) {
        prev2 = prev;
        prev = D(i) + z * prev;
        C(i) = prev;
    }
    // Anti-causal initialisation of c[n - 1] (prev = c[n - 1], prev2 = c[n - 2] of the causal pass).
#if defined(INIT_WRAP)
    double acc = prev, z_i = z;
    for (int i = 0; i < n - 1; i++) {
        acc += z_i * C(i);
        z_i *= z;
    }
    double next = anti_init_wrap(acc, z_i);
#else
    double next = anti_init_closed(prev2, prev);
#endif
    // Anti-causal recursion, c[i] = z * (c[i + 1] - c[i]), stored as f32 as it goes.
    d[(long long)(n - 1) * inner] = (float)next;
    for (int i = n - 2; i >= 0; i--) {
        next = z * (next - C(i));
        d[(long long)i * inner] = (float)next;
    }
#undef C
#undef D
}

// The same filter along the last axis (`inner` = 1), where one thread per line would read and
// write 32 lines a whole line apart: each warp filters 32 consecutive lines and moves their data
// through shared tiles of 32 lines x 32 elements, so that every global access is a row of 32
// consecutive elements (the prefilter of 256x512x512: 2.4 instead of 5.7 ms on the H200). Each
// lane runs exactly the operations of prefilter_axis_f32 on its line, in the same order, so the
// result is the same bit for bit.
#define PF_WARPS 2
struct PfTiles {
    float f[32][33];   // forward window of the input (later: the f32 results)
    float b[32][33];   // backward window of the input (the initialisation's far end)
    double c[32][33];  // the causal result, to and from `scratch`
};

// tile[r][j] = src[(row0 + r) * n + col0 + j] for the rows below `rows` and 0 <= col0 + j < n.
__device__ __forceinline__ void pf_load(float (*tile)[33], const float* __restrict__ src, long long row0, int rows,
                                        int col0, int n, int lane) {
    const int col = col0 + lane;
    const bool ok = col >= 0 && col < n;
    for (int r = 0; r < rows; r++) tile[r][lane] = ok ? src[(row0 + r) * n + col] : 0.0f;
    __syncwarp();
}

extern "C" __global__ void __launch_bounds__(32 * PF_WARPS) prefilter_rows_f32(float* __restrict__ data,
                                                                               double* __restrict__ scratch,
                                                                               long long lines, int n) {
    __shared__ PfTiles tiles[PF_WARPS];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    PfTiles& t = tiles[warp];
    const long long row0 = ((long long)blockIdx.x * PF_WARPS + warp) * 32;
    if (row0 >= lines || n <= 1) return;
    const int rows = (int)min(32LL, lines - row0);
    const double z = PF_Z;
    const double gain = PF_GAIN;
    const float* __restrict__ line = data + (row0 + min(lane, rows - 1)) * n;  // a valid row for every lane
    // Window w (forward): elements [32w, 32w + 32); backward window of w: the 32 elements ending
    // at n - 1 - 32w + SH (SH = 1 when the far-end index is n - i, 0 when it is n - 1 - i).
#define FWD(j) ((double)t.f[lane][j] * gain)
    const int windows = (n + 31) / 32;

    // Causal initialisation of c[0], streaming i forward (and n - 1 - i or n - i backward).
    double c0;
#if defined(INIT_MIRROR) || defined(INIT_REFLECT)
    {
#if defined(INIT_MIRROR)
        const double zf = powi(z, n - 1);  // z^(n-1)
        const int i_end = n - 1;
#else
        const double zf = powi(z, n);  // z^n
        const int i_end = n;
#endif
        const double d0 = (double)line[0] * gain;
        double acc = d0 + zf * ((double)line[n - 1] * gain);
        double z_i = z;
        for (int w = 0; w < windows; w++) {
            const int col0 = 32 * w, b0 = n - 32 - col0;
            __syncwarp();
            pf_load(t.f, data, row0, rows, col0, n, lane);
            pf_load(t.b, data, row0, rows, b0, n, lane);
            const int jn = min(32, i_end - col0);
            for (int j = (w == 0 ? 1 : 0); j < jn; j++) {
                // i = col0 + j; n - 1 - i = b0 + 31 - j
                acc += z_i * (FWD(j) + zf * ((double)t.b[lane][31 - j] * gain));
                z_i *= z;
            }
        }
#if defined(INIT_MIRROR)
        c0 = acc / (1.0 - zf * zf);
#else
        c0 = acc * (z / (1.0 - zf * zf)) + d0;
#endif
    }
#else  // INIT_WRAP: acc = d[0] + sum_{i=1}^{n-1} z^i d[n - i]
    {
        double acc = (double)line[0] * gain;
        double z_i = z;
        for (int w = 0; w < windows; w++) {
            // i = 1 + 32w + j, n - i = n - 1 - 32w - j = b0 + 31 - j with b0 = n - 32 - 32w
            const int b0 = n - 32 - 32 * w;
            __syncwarp();
            pf_load(t.b, data, row0, rows, b0, n, lane);
            const int jn = min(32, n - 1 - 32 * w);
            for (int j = 0; j < jn; j++) {
                acc += z_i * ((double)t.b[lane][31 - j] * gain);
                z_i *= z;
            }
        }
        c0 = acc / (1.0 - z_i);
    }
#endif

    // Causal recursion, c[i] = d[i] * gain + z * c[i - 1], written to `scratch` a window at a time.
    double prev2 = 0.0, prev = c0;
    for (int w = 0; w < windows; w++) {
        const int col0 = 32 * w;
        __syncwarp();
        pf_load(t.f, data, row0, rows, col0, n, lane);
        const int jn = min(32, n - col0);
        for (int j = 0; j < jn; j++) {
            if (w > 0 || j > 0) {
                prev2 = prev;
                prev = FWD(j) + z * prev;
            }
            t.c[lane][j] = prev;
        }
        __syncwarp();
        if (col0 + lane < n) {
            for (int r = 0; r < rows; r++) scratch[(row0 + r) * n + col0 + lane] = t.c[r][lane];
        }
    }
    __syncwarp();

    // Anti-causal initialisation of c[n - 1]; wrap sums the causal line, read back a window at a
    // time.
#if defined(INIT_WRAP)
    double next;
    {
        double acc = prev, z_i = z;
        for (int w = 0; w < windows; w++) {
            const int col0 = 32 * w;
            __syncwarp();
            if (col0 + lane < n) {
                for (int r = 0; r < rows; r++) t.c[r][lane] = scratch[(row0 + r) * n + col0 + lane];
            }
            __syncwarp();
            const int jn = min(32, n - 1 - col0);
            for (int j = 0; j < jn; j++) {
                acc += z_i * t.c[lane][j];
                z_i *= z;
            }
        }
        next = anti_init_wrap(acc, z_i);
    }
#else
    double next = anti_init_closed(prev2, prev);
#endif

    // Anti-causal recursion c[i] = z * (c[i + 1] - c[i]) from the end, stored as f32.
    for (int w = windows - 1; w >= 0; w--) {
        const int col0 = 32 * w;
        __syncwarp();
        if (col0 + lane < n) {
            for (int r = 0; r < rows; r++) t.c[r][lane] = scratch[(row0 + r) * n + col0 + lane];
        }
        __syncwarp();
        const int jn = min(32, n - col0);
        for (int j = jn - 1; j >= 0; j--) {
            if (col0 + j < n - 1) next = z * (next - t.c[lane][j]);
            t.f[lane][j] = (float)next;
        }
        __syncwarp();
        if (col0 + lane < n) {
            for (int r = 0; r < rows; r++) data[(row0 + r) * n + col0 + lane] = t.f[r][lane];
        }
    }
#undef FWD
}

// f32 -> storage type (f16/bf16 coefficients after the prefilter).
extern "C" __global__ void __launch_bounds__(256) to_store_f32(const float* __restrict__ src, store_t* __restrict__ dst,
                                                               long long n) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = to_store(src[i]);
}
