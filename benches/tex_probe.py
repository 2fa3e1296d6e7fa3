#!/usr/bin/env python3
"""Decision probe for the rotate-only resample: can fewer or wider gathers beat the engine's 8
scalar loads per voxel? (No: the results are in docs/performance.md, Decisions.)

Runs on the GPU machine with cupy. The same order-1 rotation of a 256x512x512 f32 volume
(constant mode, f64 coordinates, the interior fast path of kernels/boundary.cuh, fmad off as in
the engine) with several ways of reading the 2x2x2 taps:

  ldg        8 scalar loads, as the engine does
  ldg4       4 aligned float4 loads holding the x pairs (a 5th load when a pair straddles two)
  tex_atlas  2 hardware gathers (tld4) from one 2D gather array holding the z slices side by side
             (CUDA refuses a layered array with the gather flag; the probe reports it)
  tex_2d     2 gathers from per-slice 2D arrays through a table of texture objects
  hybrid     1 gather for layer z0 and 4 loads for layer z0 + 1
  split      whole warps on the gather path (ntex of every 4) and the rest on loads
  walk       each thread walks K voxels along z and does not reload the taps it shares with the
             previous voxel (predicated per lane)

Every variant must equal `ldg` bit for bit (gathers return exact texel values; the weights are
applied in f32 in the same order). Prints CUDA-event medians over several block shapes.

  python3 benches/tex_probe.py [--shape 256,512,512] [--reps 20] [--minb 5]
"""
import argparse
import math
import sys

import numpy as np
import cupy as cp

SRC = r"""
struct P { double m[9]; double off[3]; double ctr[3]; int n[3]; float cval; };

__device__ __forceinline__ double fsplit(double x, int* i) { double f = floor(x); *i = (int)f; return f; }

__device__ __forceinline__ void coords(const P& p, int z, int y, int x, double* X) {
    const double c0 = (double)z - p.ctr[0], c1 = (double)y - p.ctr[1], c2 = (double)x - p.ctr[2];
#pragma unroll
    for (int i = 0; i < 3; i++) {
        double s = p.off[i];
        s += p.m[i * 3 + 0] * c0;
        s += p.m[i * 3 + 1] * c1;
        s += p.m[i * 3 + 2] * c2;
        X[i] = s;
    }
}

// The edge path: per tap, outside -> cval (grid-constant-like; timing only touches few voxels).
__device__ float edge(const float* __restrict__ img, const P& p, const double* X) {
    int i0, i1, i2;
    const double f0 = fsplit(X[0], &i0), f1 = fsplit(X[1], &i1), f2 = fsplit(X[2], &i2);
    if (!(X[0] > -1.0 && X[0] < p.n[0] && X[1] > -1.0 && X[1] < p.n[1] && X[2] > -1.0 && X[2] < p.n[2])) return p.cval;
    const float t0 = (float)(X[0] - f0), t1 = (float)(X[1] - f1), t2 = (float)(X[2] - f2);
    float v[8];
#pragma unroll
    for (int k = 0; k < 8; k++) {
        const int a = i0 + (k >> 2), b = i1 + ((k >> 1) & 1), c = i2 + (k & 1);
        const bool in = a >= 0 && a < p.n[0] && b >= 0 && b < p.n[1] && c >= 0 && c < p.n[2];
        v[k] = in ? img[((long long)a * p.n[1] + b) * p.n[2] + c] : p.cval;
    }
    const float a0 = fmaf(t2, v[1] - v[0], v[0]);
    const float b0 = fmaf(t2, v[3] - v[2], v[2]);
    const float a1 = fmaf(t2, v[5] - v[4], v[4]);
    const float b1 = fmaf(t2, v[7] - v[6], v[6]);
    const float c0 = fmaf(t1, b0 - a0, a0);
    const float c1 = fmaf(t1, b1 - a1, a1);
    return fmaf(t0, c1 - c0, c0);
}

__device__ __forceinline__ float combine(float t0, float t1, float t2, float q00, float q01, float q10, float q11,
                                         float r00, float r01, float r10, float r11) {
    // q: layer z0, r: layer z0+1; first index y (0: y0), second x.
    const float a0 = fmaf(t2, q01 - q00, q00);
    const float b0 = fmaf(t2, q11 - q10, q10);
    const float a1 = fmaf(t2, r01 - r00, r00);
    const float b1 = fmaf(t2, r11 - r10, r10);
    const float c0 = fmaf(t1, b0 - a0, a0);
    const float c1 = fmaf(t1, b1 - a1, a1);
    return fmaf(t0, c1 - c0, c0);
}

#define PROLOGUE                                                                 \
    const int x = blockIdx.x * blockDim.x + threadIdx.x;                         \
    const int y = blockIdx.y * blockDim.y + threadIdx.y;                         \
    const int z = blockIdx.z * blockDim.z + threadIdx.z;                         \
    if (x >= p.n[2] || y >= p.n[1] || z >= p.n[0]) return;                       \
    double X[3];                                                                 \
    coords(p, z, y, x, X);                                                       \
    int i0, i1, i2;                                                              \
    const double f0 = fsplit(X[0], &i0), f1 = fsplit(X[1], &i1), f2 = fsplit(X[2], &i2); \
    const long long o = ((long long)z * p.n[1] + y) * p.n[2] + x;                \
    const bool inside = f0 >= 0.0 && f0 <= p.n[0] - 2 && f1 >= 0.0 && f1 <= p.n[1] - 2 && f2 >= 0.0 && f2 <= p.n[2] - 2; \
    const float t0 = (float)(X[0] - f0), t1 = (float)(X[1] - f1), t2 = (float)(X[2] - f2);

extern "C" __global__ void __launch_bounds__(256, MINB) rot_ldg(const float* __restrict__ img, float* __restrict__ out, P p) {
    PROLOGUE
    if (!inside) { out[o] = edge(img, p, X); return; }
    const int sy = p.n[2], sz = p.n[1] * p.n[2];
    const float* __restrict__ q = img + ((i0 * p.n[1] + i1) * p.n[2] + i2);
    const float* __restrict__ r = q + sz;
    out[o] = combine(t0, t1, t2, q[0], q[1], q[sy], q[sy + 1], r[0], r[1], r[sy], r[sy + 1]);
}

__device__ __forceinline__ void pair4(const float* __restrict__ img, int idx, float* a, float* b) {
    const float4 v = __ldg(reinterpret_cast<const float4*>(img + (idx & ~3)));
    const int k = idx & 3;
    *a = k == 0 ? v.x : k == 1 ? v.y : k == 2 ? v.z : v.w;
    if (k == 3) *b = __ldg(img + idx + 1);
    else *b = k == 0 ? v.y : k == 1 ? v.z : v.w;
}

extern "C" __global__ void __launch_bounds__(256, MINB) rot_ldg4(const float* __restrict__ img, float* __restrict__ out, P p) {
    PROLOGUE
    if (!inside) { out[o] = edge(img, p, X); return; }
    const int sy = p.n[2], sz = p.n[1] * p.n[2];
    const int b = (i0 * p.n[1] + i1) * p.n[2] + i2;
    float q00, q01, q10, q11, r00, r01, r10, r11;
    pair4(img, b, &q00, &q01);
    pair4(img, b + sy, &q10, &q11);
    pair4(img, b + sz, &r00, &r01);
    pair4(img, b + sz + sy, &r10, &r11);
    out[o] = combine(t0, t1, t2, q00, q01, q10, q11, r00, r01, r10, r11);
}

// Hardware gather of the 2x2 footprint at texel (i, j) (x, y) of layer l: PTX returns the texels in
// the order (i, j+1), (i+1, j+1), (i+1, j), (i, j).
__device__ __forceinline__ float4 gather_a2d(unsigned long long tex, int l, int i, int j) {
    float4 r;
    const float u = (float)i + 1.0f, v = (float)j + 1.0f;
    asm volatile("tld4.r.a2d.v4.f32.f32 {%0, %1, %2, %3}, [%4, {%5, %6, %7, %7}];"
                 : "=f"(r.x), "=f"(r.y), "=f"(r.z), "=f"(r.w)
                 : "l"(tex), "r"(l), "f"(u), "f"(v));
    return r;
}

__device__ __forceinline__ float4 gather_2d(unsigned long long tex, int i, int j) {
    float4 r;
    const float u = (float)i + 1.0f, v = (float)j + 1.0f;
    asm volatile("tld4.r.2d.v4.f32.f32 {%0, %1, %2, %3}, [%4, {%5, %6}];"
                 : "=f"(r.x), "=f"(r.y), "=f"(r.z), "=f"(r.w)
                 : "l"(tex), "f"(u), "f"(v));
    return r;
}

extern "C" __global__ void __launch_bounds__(256, MINB) rot_tex_a2d(unsigned long long tex, const float* __restrict__ img,
                                                                   float* __restrict__ out, P p) {
    PROLOGUE
    if (!inside) { out[o] = edge(img, p, X); return; }
    const float4 g = gather_a2d(tex, i0, i2, i1);
    const float4 h = gather_a2d(tex, i0 + 1, i2, i1);
    out[o] = combine(t0, t1, t2, g.w, g.z, g.x, g.y, h.w, h.z, h.x, h.y);
}

// One 2D gather array holding the z slices side by side (an atlas: slice z at column block
// z % cols, row block z / cols); interior taps never leave their slice.
extern "C" __global__ void __launch_bounds__(256, MINB) rot_tex_atlas(unsigned long long tex, int cols,
                                                                     const float* __restrict__ img, float* __restrict__ out, P p) {
    PROLOGUE
    if (!inside) { out[o] = edge(img, p, X); return; }
    const int ua = (i0 % cols) * p.n[2] + i2, va = (i0 / cols) * p.n[1] + i1;
    const int ub = ((i0 + 1) % cols) * p.n[2] + i2, vb = ((i0 + 1) / cols) * p.n[1] + i1;
    const float4 g = gather_2d(tex, ua, va);
    const float4 h = gather_2d(tex, ub, vb);
    out[o] = combine(t0, t1, t2, g.w, g.z, g.x, g.y, h.w, h.z, h.x, h.y);
}

// Half the taps from each path: layer z0 by one hardware gather, layer z0 + 1 by four loads, so
// the texture pipe and the load path each carry half the work.
extern "C" __global__ void __launch_bounds__(256, MINB) rot_hybrid(unsigned long long tex, int cols,
                                                                  const float* __restrict__ img, float* __restrict__ out, P p) {
    PROLOGUE
    if (!inside) { out[o] = edge(img, p, X); return; }
    const int ua = (i0 % cols) * p.n[2] + i2, va = (i0 / cols) * p.n[1] + i1;
    const float4 g = gather_2d(tex, ua, va);
    const int sy = p.n[2], sz = p.n[1] * p.n[2];
    const float* __restrict__ r = img + ((i0 * p.n[1] + i1) * p.n[2] + i2) + sz;
    out[o] = combine(t0, t1, t2, g.w, g.z, g.x, g.y, r[0], r[1], r[sy], r[sy + 1]);
}

// Whole warps on one path: warp w of the block (threadIdx.y for 32-wide blocks) gathers through
// the texture when w % 4 < ntex, else loads.
extern "C" __global__ void __launch_bounds__(256, MINB) rot_split(unsigned long long tex, int cols, int ntex,
                                                                 const float* __restrict__ img, float* __restrict__ out, P p) {
    PROLOGUE
    if (!inside) { out[o] = edge(img, p, X); return; }
    const int w = (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x / 32 + threadIdx.x / 32;
    if ((w & 3) < ntex) {
        const int ua = (i0 % cols) * p.n[2] + i2, va = (i0 / cols) * p.n[1] + i1;
        const int ub = ((i0 + 1) % cols) * p.n[2] + i2, vb = ((i0 + 1) / cols) * p.n[1] + i1;
        const float4 g = gather_2d(tex, ua, va);
        const float4 h = gather_2d(tex, ub, vb);
        out[o] = combine(t0, t1, t2, g.w, g.z, g.x, g.y, h.w, h.z, h.x, h.y);
    } else {
        const int sy = p.n[2], sz = p.n[1] * p.n[2];
        const float* __restrict__ q = img + ((i0 * p.n[1] + i1) * p.n[2] + i2);
        const float* __restrict__ r = q + sz;
        out[o] = combine(t0, t1, t2, q[0], q[1], q[sy], q[sy + 1], r[0], r[1], r[sy], r[sy + 1]);
    }
}

// Each thread walks WALK_K output voxels along z and keeps the 2x2x2 taps of the last one in
// registers: a tap the next voxel shares (its floor moved by at most one per axis) is not loaded
// again. The loads stay predicated per lane, so a warp's request touches only the lanes that
// need the tap.
#ifndef WALK_K
#define WALK_K 4
#endif
__device__ __forceinline__ void shift_axis(float* v, unsigned* valid, int s, int bit) {
    // bit: the index bit of the axis in v[(z << 2) | (y << 1) | x]
    if (s == 0) return;
    if (s < -1 || s > 1) { *valid = 0; return; }
    unsigned m = *valid, nm = 0;
#pragma unroll
    for (int k = 0; k < 8; k++) {
        if (k & bit) continue;
        const int lo = k, hi = k | bit;
        if (s == 1) {
            v[lo] = v[hi];
            nm |= ((m >> hi) & 1u) << lo;
        } else {
            v[hi] = v[lo];
            nm |= ((m >> lo) & 1u) << hi;
        }
    }
    *valid = nm;
}

extern "C" __global__ void __launch_bounds__(256, MINB) rot_walk(const float* __restrict__ img, float* __restrict__ out, P p) {
    const int x = blockIdx.x * blockDim.x + threadIdx.x;
    const int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= p.n[2] || y >= p.n[1]) return;
    const int sy = p.n[2], sz = p.n[1] * p.n[2];
    float v[8];
    unsigned valid = 0;
    int pz = 0, py = 0, px = 0;
#pragma unroll
    for (int j = 0; j < WALK_K; j++) {
        const int z = blockIdx.z * WALK_K + j;
        if (z >= p.n[0]) return;
        double X[3];
        coords(p, z, y, x, X);
        int i0, i1, i2;
        const double f0 = fsplit(X[0], &i0), f1 = fsplit(X[1], &i1), f2 = fsplit(X[2], &i2);
        const long long o = ((long long)z * p.n[1] + y) * p.n[2] + x;
        const bool inside = f0 >= 0.0 && f0 <= p.n[0] - 2 && f1 >= 0.0 && f1 <= p.n[1] - 2 && f2 >= 0.0 && f2 <= p.n[2] - 2;
        if (!inside) { out[o] = edge(img, p, X); valid = 0; continue; }
        const float t0 = (float)(X[0] - f0), t1 = (float)(X[1] - f1), t2 = (float)(X[2] - f2);
        shift_axis(v, &valid, i0 - pz, 4);
        shift_axis(v, &valid, i1 - py, 2);
        shift_axis(v, &valid, i2 - px, 1);
        pz = i0; py = i1; px = i2;
        const float* __restrict__ q = img + ((i0 * p.n[1] + i1) * p.n[2] + i2);
#pragma unroll
        for (int k = 0; k < 8; k++) {
            if (!((valid >> k) & 1u)) v[k] = q[(k >> 2) * sz + ((k >> 1) & 1) * sy + (k & 1)];
        }
        valid = 0xffu;
        out[o] = combine(t0, t1, t2, v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]);
    }
}

extern "C" __global__ void __launch_bounds__(256, MINB) rot_tex_2d(const unsigned long long* __restrict__ texs,
                                                                  const float* __restrict__ img, float* __restrict__ out, P p) {
    PROLOGUE
    if (!inside) { out[o] = edge(img, p, X); return; }
    const float4 g = gather_2d(__ldg(texs + i0), i2, i1);
    const float4 h = gather_2d(__ldg(texs + i0 + 1), i2, i1);
    out[o] = combine(t0, t1, t2, g.w, g.z, g.x, g.y, h.w, h.z, h.x, h.y);
}
"""


def rotation(angles):
    a, b, c = angles
    rx = np.array([[1, 0, 0], [0, math.cos(a), -math.sin(a)], [0, math.sin(a), math.cos(a)]])
    ry = np.array([[math.cos(b), 0, math.sin(b)], [0, 1, 0], [-math.sin(b), 0, math.cos(b)]])
    rz = np.array([[math.cos(c), -math.sin(c), 0], [math.sin(c), math.cos(c), 0], [0, 0, 1]])
    return rz @ ry @ rx


def params(shape, m):
    ctr = [(n - 1) / 2 for n in shape]
    dt = np.dtype([("m", "<f8", 9), ("off", "<f8", 3), ("ctr", "<f8", 3), ("n", "<i4", 3), ("cval", "<f4"),
                   ("pad", "<i4")])
    p = np.zeros((), dt)
    p["m"] = m.reshape(-1)
    p["off"] = ctr
    p["ctr"] = ctr
    p["n"] = shape
    p["cval"] = 0.0
    return p


def median_ms(fn, reps):
    for _ in range(3):
        fn()
    ts = []
    for _ in range(reps):
        a, b = cp.cuda.Event(), cp.cuda.Event()
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(cp.cuda.get_elapsed_time(a, b))
    return float(np.median(ts))


def check(out, ref):
    if bool(cp.all(out.view(cp.uint32) == ref.view(cp.uint32))):
        return "bit-identical to ldg"
    return f"DIFFERS from ldg in {int(cp.count_nonzero(out != ref))} voxels"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="256,512,512")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--minb", type=int, default=5, help="blocks per SM of the probe kernels")
    args = ap.parse_args()
    shape = tuple(int(s) for s in args.shape.split(","))
    nz, ny, nx = shape
    n = nz * ny * nx
    rng = np.random.default_rng(0)
    img = cp.zeros(n + 4, cp.float32)  # +4: the aligned float4 loads of ldg4 may read past the end
    img[:n] = cp.asarray(rng.random(n, dtype=np.float32))
    names = ("ldg", "ldg4", "tex_atlas", "tex_2d", "hybrid", "split", "walk")
    out = {k: cp.empty(n, cp.float32) for k in names}
    p = params(shape, rotation((0.3, 0.2, 0.4)))
    floor_ms = 2 * n * 4 / 4.28e12 * 1e3
    print(f"shape {shape}, {n * 4 / 1e6:.0f} MB per volume, byte floor {floor_ms:.3f} ms")

    rt = cp.cuda.runtime
    tex = cp.cuda.texture
    ch = tex.ChannelFormatDescriptor(32, 0, 0, 0, rt.cudaChannelFormatKindFloat)
    tdesc = tex.TextureDescriptor((rt.cudaAddressModeClamp,) * 3, rt.cudaFilterModePoint, rt.cudaReadModeElementType,
                                  normalizedCoords=0)
    keep = []  # the arrays behind the texture objects
    try:
        keep.append(tex.CUDAarray(ch, nx, ny, nz, flags=1 | 8))  # cudaArrayLayered | cudaArrayTextureGather
        print("layered gather array: created (no kernel uses it)")
    except Exception as e:  # noqa: BLE001 - report and go on with the other variants
        print(f"layered gather array: {type(e).__name__}: {e}")
    cols = max(1, min(nz, 32768 // nx))
    rows = (nz + cols - 1) // cols
    atlas_obj = None
    try:
        atlas = tex.CUDAarray(ch, nx * cols, ny * rows, 0, flags=8)
        keep.append(atlas)

        def fill_atlas():
            for z in range(nz):
                rt.memcpy2DToArray(atlas.ptr, (z % cols) * nx * 4, (z // cols) * ny, img.data.ptr + z * ny * nx * 4,
                                   nx * 4, nx * 4, ny, rt.memcpyDeviceToDevice)
        fill_atlas()
        atlas_obj = tex.TextureObject(tex.ResourceDescriptor(rt.cudaResourceTypeArray, cuArr=atlas), tdesc)
        print(f"atlas {nx * cols}x{ny * rows} ({cols} slices per row); filled from linear memory by {nz} 2D copies "
              f"in {median_ms(fill_atlas, 5):.3f} ms")
    except Exception as e:  # noqa: BLE001
        print(f"atlas gather array: {type(e).__name__}: {e}")
    slice_handles = None
    try:
        objs = []
        for z in range(nz):
            a = tex.CUDAarray(ch, nx, ny, 0, flags=8)
            a.copy_from(img[z * ny * nx:(z + 1) * ny * nx].reshape(ny, nx))
            keep.append(a)
            objs.append(tex.TextureObject(tex.ResourceDescriptor(rt.cudaResourceTypeArray, cuArr=a), tdesc))
        keep.extend(objs)
        slice_handles = cp.asarray(np.array([o.ptr for o in objs], dtype=np.uint64))
    except Exception as e:  # noqa: BLE001
        print(f"per-slice gather arrays: {type(e).__name__}: {e}")

    def module(minb, *extra):
        return cp.RawModule(code=SRC, options=("--std=c++17", f"-DMINB={minb}", "--fmad=false") + extra)

    mod = module(args.minb)
    k = {name: mod.get_function("rot_" + name) for name in names if name != "walk"}
    print("registers: " + ", ".join(f"{name} {f.num_regs}" for name, f in k.items()))
    c = np.int32(cols)
    variants = [("ldg", (img, out["ldg"], p)), ("ldg4", (img, out["ldg4"], p))]
    if atlas_obj is not None:
        variants += [("tex_atlas", (atlas_obj, c, img, out["tex_atlas"], p)),
                     ("hybrid", (atlas_obj, c, img, out["hybrid"], p))]
        variants += [("split", (atlas_obj, c, np.int32(j), img, out["split"], p)) for j in range(5)]
    if slice_handles is not None:
        variants.append(("tex_2d", (slice_handles, img, out["tex_2d"], p)))
    for bx, by, bz in ((32, 8, 1), (16, 16, 1), (16, 4, 4), (8, 8, 4), (4, 8, 8)):
        grid = ((nx + bx - 1) // bx, (ny + by - 1) // by, (nz + bz - 1) // bz)
        ref = None
        for name, a in variants:
            if name == "tex_2d" and (bx, by, bz) != (32, 8, 1):
                continue
            ms = median_ms(lambda: k[name](grid, (bx, by, bz), a), args.reps)
            if ref is None:
                ref = out["ldg"].copy()
            tag = name + (f" ntex={int(a[2])}/4" if name == "split" else "")
            print(f"{tag:16s} block {(bx, by, bz)}: {ms:.3f} ms ({ms / floor_ms:.1f}x floor) {check(out[name], ref)}")
        if (bx, by, bz) == (32, 8, 1):
            for wk in (2, 4, 8, 16):
                for minb in (1, 5, 8):
                    f = module(minb, f"-DWALK_K={wk}").get_function("rot_walk")
                    g3 = (grid[0], grid[1], (nz + wk - 1) // wk)
                    ms = median_ms(lambda: f(g3, (bx, by, bz), (img, out["walk"], p)), args.reps)
                    print(f"walk K={wk:<2d} MINB={minb} ({f.num_regs} registers, {f.local_size_bytes} B local) "
                          f"block {(bx, by, bz)}: {ms:.3f} ms ({ms / floor_ms:.1f}x floor) {check(out['walk'], ref)}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
