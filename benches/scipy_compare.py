"""augscope vs scipy on the README's benchmark workload ("Speed"), timed in one run on one machine.

Workload: a 48x240x240 float32 volume, elastic (alpha 800, sigma 12) + rotation + scale, order 1,
mode constant — the batchgenerators recipe in scipy (single-threaded, as batchgenerators runs):
    noise_k = uniform(-1, 1)                                   for k in 0..3
    d_k     = scipy.ndimage.gaussian_filter(noise_k, 12, mode="constant", cval=0) * 800
    coords  = R^T (grid - ctr + d) * scale + ctr
    out     = scipy.ndimage.map_coordinates(vol, coords, order=1, mode="constant")
augscope runs `augscope apply` with the same parameters (its own Philox noise) through the CLI,
and its compute time is read from the --report JSON (file reading and writing excluded, like
the scipy timing, which excludes them too).

Usage (from the repository root, after `cargo build --release --no-default-features`):
    python3 benches/scipy_compare.py [--bin target/release/augscope] [--repeat 3]
"""
import argparse
import json
import os
import subprocess
import tempfile
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
import numpy as np  # noqa: E402
from scipy import ndimage as ndi  # noqa: E402

SHAPE = (48, 240, 240)
ALPHA, SIGMA = 800.0, 12.0
ANGLES = (0.2, -0.1, 0.3)
SCALE = 1.1


def rot(a0, a1, a2):
    c0, s0, c1, s1, c2, s2 = np.cos(a0), np.sin(a0), np.cos(a1), np.sin(a1), np.cos(a2), np.sin(a2)
    rx = np.array([[1, 0, 0], [0, c0, -s0], [0, s0, c0]])
    ry = np.array([[c1, 0, s1], [0, 1, 0], [-s1, 0, c1]])
    rz = np.array([[c2, -s2, 0], [s2, c2, 0], [0, 0, 1]])
    return rx @ ry @ rz


def scipy_pipeline(vol, rng):
    ctr = (np.array(vol.shape) - 1) / 2.0
    grid = np.meshgrid(*[np.arange(n, dtype=np.float64) for n in vol.shape], indexing="ij")
    c = np.stack([g - m for g, m in zip(grid, ctr)])
    for k in range(3):
        noise = rng.random(vol.shape) * 2 - 1
        c[k] += ndi.gaussian_filter(noise, SIGMA, mode="constant", cval=0) * ALPHA
    m = SCALE * rot(*ANGLES).T
    x = np.einsum("ij,j...->i...", m, c) + ctr[:, None, None, None]
    return ndi.map_coordinates(vol, x, order=1, mode="constant", cval=0.0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="target/release/augscope")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    vol = rng.random(SHAPE).astype(np.float32)
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "in.npy")
        np.save(src, vol)
        ours = []
        for i in range(args.repeat):
            rep = os.path.join(d, f"r{i}.json")
            cmd = [args.bin, "apply", src, os.path.join(d, f"o{i}.npy"),
                   "--elastic", f"{ALPHA},{SIGMA}", "--seed", str(i),
                   "--rotate", ",".join(map(str, ANGLES)), "--scale", str(SCALE),
                   "--order", "1", "--mode", "constant", "--backend", "cpu", "--report", rep]
            t = time.perf_counter()
            subprocess.run(cmd, check=True)
            wall = time.perf_counter() - t
            r = json.load(open(rep))
            ours.append((r["timings_ms"]["compute"], wall * 1e3, r["timings_ms"]["engine"]))
    theirs = []
    for _ in range(args.repeat):
        t = time.perf_counter()
        scipy_pipeline(vol, rng)
        theirs.append((time.perf_counter() - t) * 1e3)
    best_ours = min(ours, key=lambda o: o[0])
    best_scipy = min(theirs)
    print(f"shape {SHAPE}, elastic alpha {ALPHA} sigma {SIGMA} + rotate {ANGLES} + scale {SCALE}, order 1")
    print(f"cores: {os.cpu_count()}")
    print(f"scipy (1 thread)      compute: {best_scipy:9.1f} ms   (all: {', '.join(f'{t:.0f}' for t in theirs)})")
    print(f"augscope apply (cpu)  compute: {best_ours[0]:9.1f} ms   whole CLI incl. npy I/O: {best_ours[1]:.0f} ms")
    e = best_ours[2]
    print(f"  field {e['field_ms']:.1f} ms, prefilter {e['prefilter_ms']:.1f} ms, resample {e['resample_ms']:.1f} ms")
    print(f"speed-up: {best_scipy / best_ours[0]:.1f}x")


if __name__ == "__main__":
    main()
