// The fused spatial transform (docs/design.md §3): for every output voxel p, in one pass,
//   q = flip(p); c_a = q_a - ctr_out_a + alpha_a * field_a(q); x = M c + offset;
// then boundary mode and order 0/1/3 sampling of every image channel with the same x, and order-0
// sampling of the label map (cval 0) in the same thread. No intermediate volume is written.
// Twin of `resample` / `row_coords` in src/engine/cpu.rs; boundary rules in boundary.cuh.
//
// Defines (from the host): the MODE_* values, MODE, ORDER, NDIM, STORE_F32|STORE_F16|STORE_BF16.
#ifndef AUGSCOPE_BOUNDARY_CUH
#include "boundary.cuh"
#endif

#ifndef ORDER
#error "ORDER must be defined"
#endif
#ifndef NDIM
#error "NDIM must be defined"
#endif
// Output voxels per thread along the last axis (strided by the block's width, so every store is
// coalesced); the host launches ceil(W / (bx * RS_K)) blocks along x (`resample_k` in cuda.rs).
#ifndef RS_K
#define RS_K 1
#endif
// Blocks per SM the resample entries are built for (a register cap; for measurements).
#ifndef RS_MINB
#define RS_MINB 1
#endif
// RS_ONLY keeps one entry of this file (1 resample, 2 plain, 3 plainf, 4 many, 5 many_plain,
// 6 coords), so a process compiles only the kernels it launches; undefined, every entry.
#ifdef RS_ONLY
#define RS_KEEP(k) (RS_ONLY == (k))
#else
#define RS_KEEP(k) 1
#endif

// Must match `ResampleParams` in src/engine/cuda.rs field for field (#[repr(C)]).
struct ResampleParams {
    double m[9];        // in_from_centered, row major; only the first NDIM x NDIM block is used
    double offset[3];   // translate + ctr_in
    double ctr_out[3];
    double alpha[3];    // elastic strength per axis (the unit field is `field`)
    double pad;         // scipy's nprepad of the image coefficient array
    long long n_out;    // voxels of one output channel
    long long n_in;     // elements of one (padded) image channel
    long long n_lab;    // voxels of one label channel
    int out_shape[3];
    int in_shape[3];    // (padded) image coefficient shape
    int lab_shape[3];
    int flip[3];
    int channels;
    int lab_channels;
    float cval;
    int has_field;
    int has_label;
    int field_slot;     // the sample's field in a batched launch (field + field_slot * field stride)
    int box_lo[3];      // the computed box of the output grid: voxels box_lo + [0, box_shape),
    int box_shape[3];   // written compactly (the whole grid, or one plane for the viewer)
    long long n_box;    // voxels of the box: the channel stride of out and lab_out
};

struct LoadStore {
    __device__ __forceinline__ float operator()(store_t v) const { return load_store(v); }
};
struct LoadF32 {
    __device__ __forceinline__ float operator()(float v) const { return v; }
};

// The output voxel of this thread from a 3D launch over the box (block (bx, by, bz) of 256
// threads, grid (ceil(W/bx), ceil(H/by), ceil(D/bz)) of the box shape; bz = 1 in 2D): no integer
// division per voxel. Returns false past the edge; `idx` receives the C-order linear index of p
// in the box (the whole grid unless the viewer asks for one plane).
// `bz` is the block's index along z (blockIdx.z, or its part within one sample of a batch).
__device__ __forceinline__ bool output_voxel(const ResampleParams& p, int bz, int* pv, long long* idx) {
    const int x = blockIdx.x * blockDim.x + threadIdx.x;
    const int y = blockIdx.y * blockDim.y + threadIdx.y;
#if NDIM == 3
    const int z = bz * blockDim.z + threadIdx.z;
    if (x >= p.box_shape[2] || y >= p.box_shape[1] || z >= p.box_shape[0]) return false;
    pv[0] = z + p.box_lo[0];
    pv[1] = y + p.box_lo[1];
    pv[2] = x + p.box_lo[2];
    *idx = ((long long)z * p.box_shape[1] + y) * p.box_shape[2] + x;
#else
    if (x >= p.box_shape[1] || y >= p.box_shape[0]) return false;
    pv[0] = y + p.box_lo[0];
    pv[1] = x + p.box_lo[1];
    *idx = (long long)y * p.box_shape[1] + x;
#endif
    return true;
}

// The input coordinate of output voxel p (FIELD: read the displacement field; else none).
template <bool FIELD>
__device__ __forceinline__ void input_coordinate_t(const ResampleParams& p, const float* __restrict__ field,
                                                   const int* pv, double* x) {
    int q[3];
#pragma unroll
    for (int a = 0; a < NDIM; a++) q[a] = p.flip[a] ? p.out_shape[a] - 1 - pv[a] : pv[a];
    double c[3];
    if (FIELD) {
        long long lin_q = 0;
#pragma unroll
        for (int a = 0; a < NDIM; a++) lin_q = lin_q * p.out_shape[a] + q[a];
#pragma unroll
        for (int a = 0; a < NDIM; a++) {
            c[a] = small_int_to_double(q[a]) - p.ctr_out[a];
            c[a] += p.alpha[a] * (double)__ldg(field + (long long)a * p.n_out + lin_q);
        }
    } else {
#pragma unroll
        for (int a = 0; a < NDIM; a++) c[a] = small_int_to_double(q[a]) - p.ctr_out[a];
    }
#pragma unroll
    for (int i = 0; i < NDIM; i++) {
        double s = p.offset[i];
#pragma unroll
        for (int j = 0; j < NDIM; j++) s += p.m[i * 3 + j] * c[j];
        x[i] = s;
    }
}

// The input coordinate of output voxel p, with the field when the plan has one.
__device__ __forceinline__ void input_coordinate(const ResampleParams& p, const float* __restrict__ field,
                                                 const int* pv, double* x) {
    if (p.has_field) {
        input_coordinate_t<true>(p, field, pv, x);
    } else {
        input_coordinate_t<false>(p, field, pv, x);
    }
}

// Entry names carry the storage type: resample_f32, resample_plain_f16, resample_many_bf16, ...
#if defined(STORE_F16)
#define STORE_NAME(base) base##_f16
#elif defined(STORE_BF16)
#define STORE_NAME(base) base##_bf16
#else
#define STORE_NAME(base) base##_f32
#endif
#define RESAMPLE_ENTRY STORE_NAME(resample)
// The arguments of the single-volume entries (general and plain): the host passes the same list
// to each and only swaps the name.
#define RESAMPLE_PARAMS                                                                      \
    const store_t *__restrict__ img, store_t *__restrict__ out, const float *__restrict__ lab, \
        float *__restrict__ lab_out, const float *__restrict__ field, ResampleParams p

// The general path of one voxel near or beyond the edge: scipy's two boundary steps per tap.
// Not inlined, and given scalars rather than the parameter struct (a reference to a kernel
// parameter would copy the whole struct to local memory: a rotate took 3.6 ms instead of 0.64 ms
// on the H200): its registers and any spills stay in its own frame, so the interior path, which
// nearly every voxel takes, is allocated on its own.
__device__ __noinline__ void resample_edge(const store_t* __restrict__ img, store_t* __restrict__ out, double x0,
                                           double x1, double x2, long long idx, int s0, int s1, int s2, double pad,
                                           float cval, int channels, long long n_in, long long n_box) {
    const double x[3] = {x0, x1, x2};
    const int shape[3] = {s0, s1, s2};
    Taps<ORDER> t;
    if (make_taps<ORDER>(x, shape, pad, t)) {
        for (int ch = 0; ch < channels; ch++) {
            out[(long long)ch * n_box + idx] = to_store(eval_taps<ORDER>(t, img + (long long)ch * n_in, cval, LoadStore()));
        }
    } else {
        const store_t cv = to_store(cval);
        for (int ch = 0; ch < channels; ch++) out[(long long)ch * n_box + idx] = cv;
    }
}

// The label map's general path (order 0, cval 0), as resample_edge.
__device__ __noinline__ void label_edge(const float* __restrict__ lab, float* __restrict__ lab_out, double x0, double x1,
                                        double x2, long long idx, int s0, int s1, int s2, int channels,
                                        long long n_lab, long long n_box) {
    const double x[3] = {x0, x1, x2};
    const int shape[3] = {s0, s1, s2};
    Taps<0> tl;
    if (make_taps<0>(x, shape, 0.0, tl)) {
        for (int ch = 0; ch < channels; ch++) {
            lab_out[(long long)ch * n_box + idx] = eval_taps<0>(tl, lab + (long long)ch * n_lab, 0.0f, LoadF32());
        }
    } else {
        for (int ch = 0; ch < channels; ch++) lab_out[(long long)ch * n_box + idx] = 0.0f;
    }
}

// Samples every image channel and every label channel at input coordinate x into output `idx`.
__device__ __forceinline__ void sample_store(const ResampleParams& p, const double* x, long long idx,
                                             const store_t* __restrict__ img, store_t* __restrict__ out,
                                             const float* __restrict__ lab, float* __restrict__ lab_out) {
    idx_t base;
    float w[NDIM][ORDER + 1];
    if (interior_taps<ORDER>(x, p.in_shape, p.pad, &base, w)) {
        // One channel at a time: unrolled, the loop kept 4 channels' taps live (48 registers).
#pragma unroll 1
        for (int ch = 0; ch < p.channels; ch++) {
            out[(long long)ch * p.n_box + idx] =
                to_store(eval_interior<ORDER>(img + (long long)ch * p.n_in, base, p.in_shape, w, LoadStore()));
        }
    } else {
        resample_edge(img, out, x[0], x[1], x[2], idx, p.in_shape[0], p.in_shape[1], p.in_shape[2], p.pad, p.cval,
                      p.channels, p.n_in, p.n_box);
    }
    if (p.has_label) {
        idx_t lbase;
        float lw[NDIM][1];
        if (interior_taps<0>(x, p.lab_shape, 0.0, &lbase, lw)) {
#pragma unroll 1
            for (int ch = 0; ch < p.lab_channels; ch++) {
                lab_out[(long long)ch * p.n_box + idx] = lab[(long long)ch * p.n_lab + lbase];
            }
        } else {
            label_edge(lab, lab_out, x[0], x[1], x[2], idx, p.lab_shape[0], p.lab_shape[1], p.lab_shape[2],
                       p.lab_channels, p.n_lab, p.n_box);
        }
    }
}

#if RS_K == 1
// One output voxel (see output_voxel).
__device__ __forceinline__ void resample_voxel(const ResampleParams& p, int bz, const store_t* __restrict__ img,
                                               store_t* __restrict__ out, const float* __restrict__ lab,
                                               float* __restrict__ lab_out, const float* __restrict__ field) {
    int pv[3];
    long long idx;
    if (!output_voxel(p, bz, pv, &idx)) return;
    double x[3];
    input_coordinate(p, field, pv, x);
    sample_store(p, x, idx, img, out, lab, lab_out);
}
#else
// RS_K output voxels of one row, blockDim.x apart, software-pipelined: the coordinates and tap
// offsets of all of them first, then all their loads, then the interpolation, so that a thread
// has RS_K voxels' gathers in flight (the kernel waits on its gathers; on the H200 this gains at
// most 3 % and loses on small volumes, so RS_K = 1 is the default: docs/performance.md). Without a
// field, the part of the affine that depends on the row, (offset + m_i0 c_0) + m_i1 c_1 (2D:
// offset + m_i0 c_0), is computed once per row: the same f64 operations in the same order as
// input_coordinate, so the same x. A voxel near an edge, several channels or a label map take
// the one-voxel path (sample_store) for the whole group.
__device__ __forceinline__ void resample_voxel(const ResampleParams& p, int bz, const store_t* __restrict__ img,
                                               store_t* __restrict__ out, const float* __restrict__ lab,
                                               float* __restrict__ lab_out, const float* __restrict__ field) {
    constexpr int L = NDIM - 1;  // the last axis
    const int x0 = blockIdx.x * (blockDim.x * RS_K) + threadIdx.x;
    const int y = blockIdx.y * blockDim.y + threadIdx.y;
    const int w_box = p.box_shape[L];
    int pv[3];
    long long row;
#if NDIM == 3
    const int z = bz * blockDim.z + threadIdx.z;
    if (y >= p.box_shape[1] || z >= p.box_shape[0]) return;
    pv[0] = z + p.box_lo[0];
    pv[1] = y + p.box_lo[1];
    row = ((long long)z * p.box_shape[1] + y) * w_box;
#else
    if (y >= p.box_shape[0]) return;
    pv[0] = y + p.box_lo[0];
    row = (long long)y * w_box;
#endif
    double base[NDIM];
    {
        double c[NDIM];
#pragma unroll
        for (int a = 0; a < L; a++) {
            const int q = p.flip[a] ? p.out_shape[a] - 1 - pv[a] : pv[a];
            c[a] = small_int_to_double(q) - p.ctr_out[a];
        }
#pragma unroll
        for (int i = 0; i < NDIM; i++) {
            double s = p.offset[i];
#pragma unroll
            for (int j = 0; j < L; j++) s += p.m[i * 3 + j] * c[j];
            base[i] = s;
        }
    }
    // The input coordinate of voxel k of the group; false past the row's end.
    auto coord = [&](int k, double* x) -> bool {
        const int xo = x0 + k * (int)blockDim.x;
        if (xo >= w_box) return false;
        if (!p.has_field) {
            const int px = xo + p.box_lo[L];
            const int q = p.flip[L] ? p.out_shape[L] - 1 - px : px;
            const double cl = small_int_to_double(q) - p.ctr_out[L];
#pragma unroll
            for (int i = 0; i < NDIM; i++) x[i] = base[i] + p.m[i * 3 + L] * cl;
        } else {
            int pq[3] = {pv[0], pv[1], pv[2]};
            pq[L] = xo + p.box_lo[L];
            input_coordinate(p, field, pq, x);
        }
        return true;
    };
    idx_t tb[RS_K];
    float tw[RS_K][NDIM][ORDER + 1];
    bool fast = p.channels == 1 && !p.has_label;
#pragma unroll
    for (int k = 0; k < RS_K; k++) {
        double x[3];
        fast = fast && coord(k, x) && interior_taps<ORDER>(x, p.in_shape, p.pad, &tb[k], tw[k]);
    }
    if (fast) {
        float r[RS_K];
#pragma unroll
        for (int k = 0; k < RS_K; k++) r[k] = eval_interior<ORDER>(img, tb[k], p.in_shape, tw[k], LoadStore());
#pragma unroll
        for (int k = 0; k < RS_K; k++) out[row + x0 + k * (int)blockDim.x] = to_store(r[k]);
        return;
    }
#pragma unroll
    for (int k = 0; k < RS_K; k++) {
        double x[3];
        if (!coord(k, x)) return;
        sample_store(p, x, row + x0 + k * (int)blockDim.x, img, out, lab, lab_out);
    }
}
#endif

// One thread per output voxel of one volume (grid from the box shape).
#if RS_KEEP(1)
extern "C" __global__ void __launch_bounds__(256, RS_MINB) RESAMPLE_ENTRY(RESAMPLE_PARAMS) {
    resample_voxel(p, blockIdx.z, img, out, lab, lab_out, field);
}
#endif

// The common case in its own entries: one image channel, no label map (FIELD: with the
// displacement field or without). The general entry's channel and label loops and its flags cost
// registers that this path does not need; here the interior path fits in RS_PLAIN_MINB blocks
// per SM without spilling (rotate 256x512x512: 0.46 instead of 0.61 ms on the H200). The same
// operations as the general entry, so the same values bit for bit.
#ifndef RS_PLAIN_MINB
#define RS_PLAIN_MINB 1
#endif
#define RESAMPLE_PLAIN_ENTRY STORE_NAME(resample_plain)
#define RESAMPLE_PLAINF_ENTRY STORE_NAME(resample_plainf)
template <bool FIELD>
__device__ __forceinline__ void plain_voxel(const ResampleParams& p, int bz, const store_t* __restrict__ img,
                                            store_t* __restrict__ out, const float* __restrict__ field) {
    int pv[3];
    long long idx;
    if (!output_voxel(p, bz, pv, &idx)) return;
    double x[3];
    input_coordinate_t<FIELD>(p, field, pv, x);
    idx_t base;
    float w[NDIM][ORDER + 1];
    if (interior_taps<ORDER>(x, p.in_shape, p.pad, &base, w)) {
        out[idx] = to_store(eval_interior<ORDER>(img, base, p.in_shape, w, LoadStore()));
    } else {
        resample_edge(img, out, x[0], x[1], x[2], idx, p.in_shape[0], p.in_shape[1], p.in_shape[2], p.pad, p.cval, 1,
                      p.n_in, p.n_box);
    }
}

// Same arguments as RESAMPLE_ENTRY (lab and lab_out unused), so the host swaps only the name.
#if RS_KEEP(2)
extern "C" __global__ void __launch_bounds__(256, RS_PLAIN_MINB) RESAMPLE_PLAIN_ENTRY(RESAMPLE_PARAMS) {
    plain_voxel<false>(p, blockIdx.z, img, out, field);
}
#endif

#if RS_KEEP(3)
extern "C" __global__ void __launch_bounds__(256, RS_PLAIN_MINB) RESAMPLE_PLAINF_ENTRY(RESAMPLE_PARAMS) {
    plain_voxel<true>(p, blockIdx.z, img, out, field);
}
#endif

// Element strides between the samples of a batched launch (0: every sample reads the same image
// or label map). Must match `ManyStrides` in src/engine/cuda.rs.
struct ManyStrides {
    long long img, out, lab, lab_out, field;
    int zblocks;  // grid blocks along z of one sample (1 in 2D)
    int samples;
};

// The sample of this block in a batched launch (blockIdx.z / zblocks), its parameters copied to
// `sp` in shared memory; -1 for the blocks past the last sample (uniform over the block, so the
// barrier is reached by all or none of its threads).
__device__ __forceinline__ int many_sample(const ResampleParams* __restrict__ ps, const ManyStrides& st,
                                           ResampleParams* sp) {
    const int s = blockIdx.z / st.zblocks;
    if (s >= st.samples) return -1;
    const int tid = (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
    constexpr int words = sizeof(ResampleParams) / sizeof(long long);
    if (tid < words) reinterpret_cast<long long*>(sp)[tid] = __ldg(reinterpret_cast<const long long*>(ps + s) + tid);
    __syncthreads();
    return s;
}

#define RESAMPLE_MANY_ENTRY STORE_NAME(resample_many)
// The arguments of the batched entries (general and plain), as RESAMPLE_PARAMS.
#define RESAMPLE_MANY_PARAMS                                                                 \
    const store_t *__restrict__ img, store_t *__restrict__ out, const float *__restrict__ lab, \
        float *__restrict__ lab_out, const float *__restrict__ field,                        \
        const ResampleParams *__restrict__ ps, ManyStrides st

// Many volumes of one output shape in one launch: sample s = blockIdx.z / zblocks, with its own
// parameters ps[s] (plan, field slot) and its own image, outputs and field at the strides `st`.
// Every sample's voxels get exactly the single-volume kernel's operations.
#if RS_KEEP(4)
extern "C" __global__ void __launch_bounds__(256, RS_MINB) RESAMPLE_MANY_ENTRY(RESAMPLE_MANY_PARAMS) {
    __shared__ ResampleParams sp;
    const int s = many_sample(ps, st, &sp);
    if (s < 0) return;
    resample_voxel(sp, blockIdx.z - s * st.zblocks, img + s * st.img, out + s * st.out, lab + s * st.lab,
                   lab_out + s * st.lab_out, field + (long long)sp.field_slot * st.field);
}
#endif

#define RESAMPLE_MANY_PLAIN_ENTRY STORE_NAME(resample_many_plain)

// The batched launch of one-channel, label-free samples through the plain path (the field or
// not per sample: a branch uniform over the block). Same arguments as RESAMPLE_MANY_ENTRY.
#if RS_KEEP(5)
extern "C" __global__ void __launch_bounds__(256, RS_PLAIN_MINB) RESAMPLE_MANY_PLAIN_ENTRY(RESAMPLE_MANY_PARAMS) {
    __shared__ ResampleParams sp;
    const int s = many_sample(ps, st, &sp);
    if (s < 0) return;
    const int bz = blockIdx.z - s * st.zblocks;
    if (sp.has_field) {
        plain_voxel<true>(sp, bz, img + s * st.img, out + s * st.out, field + (long long)sp.field_slot * st.field);
    } else {
        plain_voxel<false>(sp, bz, img + s * st.img, out + s * st.out, field);
    }
}
#endif

// `--save-coords`: the input coordinate of every output voxel, (NDIM, n_out) f32, as
// `coordinates` in src/engine/cpu.rs.
#if RS_KEEP(6)
extern "C" __global__ void __launch_bounds__(256) coords_f32(float* __restrict__ out,
                                                             const float* __restrict__ field,
                                                             ResampleParams p) {
    int pv[3];
    long long idx;
    if (!output_voxel(p, blockIdx.z, pv, &idx)) return;
    double x[3];
    input_coordinate(p, field, pv, x);
#pragma unroll
    for (int a = 0; a < NDIM; a++) out[(long long)a * p.n_box + idx] = (float)x[a];
}
#endif
