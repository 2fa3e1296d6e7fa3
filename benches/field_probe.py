#!/usr/bin/env python3
"""Decision probe for the elastic field on the GPU: where do the field's milliseconds go, and
which pass variants are faster? (The results are in docs/performance.md: "The elastic field" and
Decisions.)

Runs on the GPU machine with cupy. Compiles kernels/field.cu as the engine does (NVRTC, fmad on,
no fast math, FIELD_R = the build radius of sigma) together with the variants below, and times
the engine's three passes over the three components of a 256x512x512 unit field (sigma 12:
radius 48), CUDA-event medians:

  col_noise   the first pass: Philox noise along axis 0, whole columns in a block (the engine's)
  mid         the pass along axis 1 (the engine's gauss_mid_f32)
  last        the pass along axis 2 (the engine's gauss_last_f32)
  last_4blocks, last_6blocks
              the engine's last pass built for 4 and 6 blocks of 256 threads per SM
              (-DLAST_MIN_BLOCKS; the engine builds it for 5 at R <= 48: 48 registers)
  noise_only  Philox alone: every noise value of the three components, summed per thread
  fp_only     a pass's arithmetic alone (SMOOTH_K): the register window filled from the thread
              index, no shared or global traffic but one store per output

Every variant that computes a pass must equal the engine's pass bit for bit, and every engine pass
must equal a one-output-per-thread reference that sums in the CPU engine's order (ref_strided,
ref_contig); the probe checks both.
The floor: 2R + 1 = 97 FP32 instructions per output (2R + 1 FFMAs along a strided axis; R FADDs,
R FFMAs and one FMUL along the contiguous one) at 128 per SM per clock.

  python3 benches/field_probe.py [--shape 256,512,512] [--sigma 12] [--reps 20]
"""
import argparse
import ctypes
import math
import os
import sys

import numpy as np
import cupy as cp

VARIANTS = r"""
#if FIELD_R <= TILED_MAX_R
// Philox alone over `total` voxels of `comps` components (grid-stride), one sum per thread.
extern "C" __global__ void __launch_bounds__(256) noise_only(float* __restrict__ out, long long total, int comps) {
    float s = 0.0f;
    const long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    for (long long g = tid; g < total; g += (long long)gridDim.x * blockDim.x) {
#pragma unroll
        for (int k = 0; k < 3; k++) if (k < comps) s += noise_value(12345u, 0u, (unsigned)k, (unsigned long long)g);
    }
    out[tid] = s;
}

// The arithmetic of one tiled pass alone: K outputs per thread from a register window made from
// the thread index; one store per output.
extern "C" __global__ void __launch_bounds__(256) fp_only(float* __restrict__ dst, long long outputs, FieldWeights wts) {
    const long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (t * FIELD_K >= outputs) return;
    float win[FIELD_K + 2 * FIELD_R];
#pragma unroll
    for (int i = 0; i < FIELD_K + 2 * FIELD_R; i++) win[i] = (float)((t + i * 7) & 1023) * 0.001f;
    float acc[FIELD_K];
    SMOOTH_K(WIN_REG, acc)
#pragma unroll
    for (int k = 0; k < FIELD_K; k++) dst[t * FIELD_K + k] = acc[k];
}

// The reference sums, one output per thread: along a strided axis (outer, n, inner) the CPU
// engine's acc = fma(w_|k-i|, x_k, acc) over the rows k in the array, ascending, from 0; with
// gen_noise the input is slab `o`'s Philox noise (component o of key 12345).
extern "C" __global__ void ref_strided(const float* __restrict__ src, float* __restrict__ dst,
    int outer, int n, long long inner, int gen_noise, FieldWeights wts) {
    const long long g = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (g >= (long long)outer * n * inner) return;
    const long long c = g % inner;
    const int i = (int)((g / inner) % n);
    const long long o = g / ((long long)n * inner);
    float acc = 0.0f;
    for (int k = max(i - FIELD_R, 0); k <= min(i + FIELD_R, n - 1); k++) {
        const long long at = (long long)k * inner + c;
        const float x = gen_noise ? noise_value(12345u, 0u, (unsigned)o, (unsigned long long)at)
                                  : src[o * n * inner + at];
        acc = fmaf(wts.w[abs(k - i)], x, acc);
    }
    dst[g] = acc;
}
// Along the contiguous axis, the CPU's order: w0 x_i, then acc = fma(w_j, lo + hi, acc).
extern "C" __global__ void ref_contig(const float* __restrict__ src, float* __restrict__ dst,
    long long lines, int n, FieldWeights wts) {
    const long long g = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (g >= lines * n) return;
    const int i = (int)(g % n);
    const float* l = src + (g - i);
    float acc = __fmul_rn(wts.w[0], l[i]);
    for (int j = 1; j <= FIELD_R; j++) {
        const float lo = i - j >= 0 ? l[i - j] : 0.0f, hi = i + j < n ? l[i + j] : 0.0f;
        acc = fmaf(wts.w[j], __fadd_rn(lo, hi), acc);
    }
    dst[g] = acc;
}
#endif
"""


def build_radius(sigma):
    r = int(4.0 * sigma + 0.5)
    return ((r + 7) // 8) * 8 if r <= 120 else r


def weights(sigma, rb):
    r = int(4.0 * sigma + 0.5)
    x = np.arange(-r, r + 1, dtype=np.float64)
    phi = np.exp(-0.5 / (sigma * sigma) * x * x)
    phi /= phi.sum()
    w = np.zeros(128, dtype=np.float32)
    w[: r + 1] = phi[r:].astype(np.float32)
    return w


class Launcher:
    """cuLaunchKernel with by-value struct parameters (FieldWeights), which RawKernel cannot pass."""

    def __init__(self, mod):
        self.mod = mod
        self.fns = {}

    def __call__(self, name, grid, block, args):
        f = self.fns.get(name) or self.fns.setdefault(name, self.mod.get_function(name))
        holders = []
        for a in args:
            if isinstance(a, cp.ndarray):
                holders.append(ctypes.c_void_p(a.data.ptr))
            else:
                holders.append(a)
        params = (ctypes.c_void_p * len(holders))(*[ctypes.addressof(h) for h in holders])
        cp.cuda.driver.launchKernel(
            f.kernel.ptr, grid[0], grid[1], grid[2], block[0], block[1], block[2], 0,
            cp.cuda.get_current_stream().ptr, ctypes.addressof(params), 0)


def timed(fn, reps):
    fn()
    cp.cuda.Device().synchronize()
    ts = []
    for _ in range(reps):
        e0, e1 = cp.cuda.Event(), cp.cuda.Event()
        e0.record()
        fn()
        e1.record()
        e1.synchronize()
        ts.append(cp.cuda.get_elapsed_time(e0, e1))
    return float(np.median(ts)), float(np.min(ts))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="256,512,512")
    ap.add_argument("--sigma", type=float, default=12.0)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--field-cu", default=None)
    a = ap.parse_args()
    shape = tuple(int(s) for s in a.shape.split(","))
    assert len(shape) == 3
    here = os.path.dirname(os.path.abspath(__file__))
    path = a.field_cu or next(
        p for p in (os.path.join(here, "..", "kernels", "field.cu"), "kernels/field.cu")
        if os.path.exists(p))
    src = open(path).read() + VARIANTS
    rb = build_radius(a.sigma)
    cc = cp.cuda.Device().compute_capability
    opts = ("--ftz=false", "--prec-sqrt=true", "--prec-div=true", "--fmad=true",
            f"-DFIELD_R={rb}", "--std=c++17")
    mod = cp.RawModule(code=src, options=opts, backend="nvrtc")
    L = Launcher(mod)
    field_cu = open(path).read()
    blocks = {b: Launcher(cp.RawModule(code=field_cu, backend="nvrtc",
                                       options=opts + ("-DFD_ONLY=2", f"-DLAST_MIN_BLOCKS={b}")))
              for b in (4, 6)}
    W = (ctypes.c_float * 128)(*weights(a.sigma, rb).tolist())
    n0, n1, n2 = shape
    vox = n0 * n1 * n2
    comps = 3
    keys = cp.asarray(np.array([12345, 0], dtype=np.uint32))
    A = cp.empty(comps * vox, dtype=cp.float32)
    B = cp.empty_like(A)
    C = cp.empty_like(A)
    TL = 128
    I32, I64 = ctypes.c_int32, ctypes.c_int64
    print(f"device {cp.cuda.runtime.getDeviceProperties(0)['name'].decode()} cc {cc}, shape {shape}, "
          f"sigma {a.sigma}, build radius {rb}, 3 components, median/min of {a.reps} (ms)")

    def col_noise():
        L("gauss_col_noise_f32", (math.ceil(n1 * n2 / 32), comps, 1), (32, 8, 1),
          [A, I32(n0), I64(n1 * n2), keys, I32(0), I32(3), W])

    def mid():
        L("gauss_mid_f32", (math.ceil(n2 / 32), math.ceil(n1 / TL), comps * n0), (32, 8, 1),
          [A, B, I32(comps * n0), I32(n1), I64(n2), I32(0), keys, I32(0), I32(n0), I32(3), W, I32(0)])

    def last(launcher=L):
        return lambda: launcher("gauss_last_f32", (math.ceil(comps * n0 * n1 / 32), math.ceil(n2 / TL), 1),
                                (32, 8, 1), [B, C, I64(comps * n0 * n1), I32(n2), W])

    assert n0 + 2 * rb <= 352, "the whole-column noise pass needs n0 + 2R <= 352"
    rows = {}
    rows["col_noise"] = timed(col_noise, a.reps)
    rows["mid"] = timed(mid, a.reps)
    rows["last"] = timed(last(), a.reps)
    ref = C.copy()
    same = True
    for b, launcher in blocks.items():
        rows[f"last_{b}blocks"] = timed(last(launcher), a.reps)
        same = same and bool(cp.array_equal(ref, C))
    R = cp.empty_like(A)
    checks = {}

    def diff(name, got, want):
        d = cp.abs(got - want)
        checks[name] = (int(cp.count_nonzero(got.view(cp.uint32) != want.view(cp.uint32))), float(d.max()))

    def ref_strided(src, outer, n, inner, gen_noise):
        total = outer * n * inner
        L("ref_strided", (math.ceil(total / 256), 1, 1), (256, 1, 1),
          [src, R, I32(outer), I32(n), I64(inner), I32(gen_noise), W])

    col_noise()
    ref_strided(A, comps, n0, n1 * n2, 1)
    diff("engine col_noise vs CPU order", A, R)
    col_noise()
    mid()
    ref_strided(A, comps * n0, n1, n2, 0)
    diff("engine mid vs CPU order", B, R)
    last()()
    L("ref_contig", (math.ceil(comps * vox / 256), 1, 1), (256, 1, 1), [B, R, I64(comps * n0 * n1), I32(n2), W])
    diff("engine last vs CPU order", C, R)
    rows["all three (engine)"] = timed(lambda: (col_noise(), mid(), last()()), a.reps)
    out = cp.empty(132 * 8 * 256, dtype=cp.float32)
    rows["noise_only"] = timed(lambda: L("noise_only", (132 * 8, 1, 1), (256, 1, 1),
                                         [out, I64(vox), I32(comps)]), a.reps)
    outputs = comps * vox
    rows["fp_only"] = timed(lambda: L("fp_only", (math.ceil(outputs / 16 / 256), 1, 1), (256, 1, 1),
                                      [B, I64(outputs), W]), a.reps)
    props = cp.cuda.runtime.getDeviceProperties(0)
    sms, clk = props["multiProcessorCount"], props["clockRate"] * 1e3
    floor = outputs * (2 * rb + 1) / (sms * 128 * clk) * 1e3
    for k, (med, mn) in rows.items():
        print(f"  {k:20s} {med:7.3f} / {mn:7.3f}")
    print(f"  the last-pass variants equal the engine's bit for bit: {same}")
    for k, (nd, mx) in checks.items():
        print(f"  {k:40s} {nd} values differ in their bits, largest difference {mx:.3g}")
    print(f"  FP32 floor of one pass ({2 * rb + 1} instructions per output, {sms} SMs at "
          f"{clk / 1e9:.2f} GHz): {floor:.3f} ms")
    return 0 if same and all(nd == 0 for nd, _ in checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
