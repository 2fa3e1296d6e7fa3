#!/usr/bin/env python3
"""peers_filters.py - the peers of `augscope bench --rows filters` on one GPU, in the same call.

Times, on float32 data already on the device (CUDA events, median of --reps after one warm-up),
and host->host (numpy in, numpy out, wall clock):
  * cupyx.scipy.ndimage.gaussian_filter(x, 2) and (x, 12), mode='reflect', truncate=4,
    on a 256x512x512 volume of U[0,1) values;
  * cupyx.scipy.ndimage.median_filter(x, size=5, mode='reflect') on the same volume;
  * FEBDS (dog, log, fft) of medical-image-std (PyPI medical-image-std, FebdsAlgorithm(method,
    device='cuda'), torch) on a 4096x3328 12-bit synthetic mammogram, host->host;
and, with --augscope BIN, runs `BIN bench --rows filters --backend cuda --json ...` right after,
so that both tables come from the same machine and the same call. Agreement: with --check, the
cupyx results are compared with scipy.ndimage on a 64x128x128 crop (|diff| < 1e-4 fraction).

Usage (GPU machine):
    python3 benches/peers_filters.py --augscope target/release/augscope --json peers_filters.json
Options: --shape DxHxW, --mammo HxW, --reps N, --skip-cupy, --skip-torch, --check.
Missing packages (cupy, torch, medical-image-std) are reported and their rows skipped.
medical-image-std's own requirements pull in much more than FEBDS needs; on a machine that has
torch but no network, its wheel and pydicom's are enough (`pip download --no-deps` elsewhere):
    pip install --no-deps --target /tmp/mis medical_image_std-0.8.2-py3-none-any.whl \
        pydicom-3.0.2-py3-none-any.whl
    PYTHONPATH=/tmp/mis python3 benches/peers_filters.py --augscope BIN
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

RESULTS = {"rows": [], "notes": []}
T0 = time.perf_counter()


def log(*a):
    print(f"[{time.perf_counter() - T0:7.1f}s]", *a, flush=True)


def parse_shape(s):
    return tuple(int(v) for v in s.lower().split("x"))


def shape_str(shape):
    return "x".join(str(v) for v in shape)


def synthetic_mammogram(h, w, seed=7):
    """12-bit: breast half ellipse, smooth texture, noise, calcification-like spots (as
    src/filter/bench.rs::synthetic_mammogram, in numpy)."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    r = np.sqrt(((y - h / 2) / (0.46 * h)) ** 2 + (x / (0.82 * w)) ** 2)
    tex = np.sin(y * 0.013) * np.cos(x * 0.017) * 300 + np.sin(y * 0.051 + x * 0.03) * 120
    inside = 1500 + 900 * np.sqrt(np.clip(1 - r, 0, 1)) + tex + rng.random((h, w)) * 60
    img = np.where(r < 1, inside, 80 + rng.random((h, w)) * 20).astype(np.float32)
    for _ in range(200):
        cy, cx = int((0.2 + 0.6 * rng.random()) * h), int((0.1 + 0.5 * rng.random()) * w)
        amp = 600 + 800 * rng.random()
        yy, xx = np.mgrid[-4:5, -4:5]
        y0, y1, x0, x1 = cy - 4, cy + 5, cx - 4, cx + 5
        if y0 >= 0 and x0 >= 0 and y1 <= h and x1 <= w:
            img[y0:y1, x0:x1] += amp * np.exp(-(yy ** 2 + xx ** 2) / 2.0)
    return np.clip(np.round(img), 0, 4095).astype(np.float32)


def record(shape, impl, variant, device_ms=None, host_ms=None, **extra):
    row = dict(shape=shape_str(shape), impl=impl, variant=variant, device_ms=device_ms,
               host_ms=host_ms, **extra)
    RESULTS["rows"].append(row)
    dev = "-" if device_ms is None else f"{device_ms:10.3f}"
    host = "-" if host_ms is None else f"{host_ms:10.3f}"
    log(f"{row['shape']:>12} {impl:<28} {variant:<14} device {dev} ms  host->host {host} ms")


def cupy_rows(args):
    try:
        import cupy as cp
        import cupyx.scipy.ndimage as cndi
    except Exception as e:  # noqa: BLE001 - any import failure skips the rows
        RESULTS["notes"].append(f"cupy unavailable: {e}")
        log("cupy unavailable:", e)
        return
    RESULTS["cupy"] = cp.__version__
    shape = parse_shape(args.shape)
    host = np.random.default_rng(3).random(shape, dtype=np.float32)
    x = cp.asarray(host)
    cases = [
        ("gaussian s=2", lambda a: cndi.gaussian_filter(a, 2.0, mode="reflect", truncate=4.0)),
        ("gaussian s=12", lambda a: cndi.gaussian_filter(a, 12.0, mode="reflect", truncate=4.0)),
        ("median 5^3", lambda a: cndi.median_filter(a, size=5, mode="reflect")),
    ]
    for name, fn in cases:
        fn(x)  # warm-up (kernel compilation)
        cp.cuda.runtime.deviceSynchronize()
        dev, wall = [], []
        for _ in range(args.reps):
            s, e = cp.cuda.Event(), cp.cuda.Event()
            s.record()
            y = fn(x)
            e.record()
            e.synchronize()
            dev.append(cp.cuda.get_elapsed_time(s, e))
            del y
        for _ in range(max(3, args.reps // 3)):
            t = time.perf_counter()
            out = cp.asnumpy(fn(cp.asarray(host)))
            wall.append((time.perf_counter() - t) * 1e3)
            del out
        record(shape, f"cupyx.scipy.ndimage {cp.__version__}", name,
               statistics.median(dev), statistics.median(wall), reps=args.reps)
        cp.get_default_memory_pool().free_all_blocks()
    if args.check:
        import scipy.ndimage as sndi
        crop = host[:64, :128, :128]
        for name, fn, ref in [
            ("gaussian s=2", cases[0][1], lambda a: sndi.gaussian_filter(a, 2.0, mode="reflect")),
            ("median 5^3", cases[2][1], lambda a: sndi.median_filter(a, size=5, mode="reflect")),
        ]:
            got = cp.asnumpy(fn(cp.asarray(crop)))
            ok = float(np.mean(np.abs(got - ref(crop)) < 1e-4))
            RESULTS.setdefault("check", {})[name] = ok
            log(f"cupyx vs scipy {name}: {100 * ok:.4f} % within 1e-4")


def torch_febds_rows(args):
    try:
        import torch
        from medical_image.algorithms.FEBDS import FebdsAlgorithm
        from medical_image.data.in_memory_image import InMemoryImage
    except Exception as e:  # noqa: BLE001
        RESULTS["notes"].append(f"medical-image-std / torch unavailable: {e}")
        log("medical-image-std / torch unavailable:", e)
        return
    if not torch.cuda.is_available():
        RESULTS["notes"].append("torch has no CUDA device")
        log("torch has no CUDA device")
        return
    h, w = parse_shape(args.mammo)
    img = synthetic_mammogram(h, w)
    for method in ["dog", "log", "fft"]:
        def once():
            src = InMemoryImage(array=img)
            out = InMemoryImage(array=img)
            FebdsAlgorithm(method, device="cuda")(src, out)
            return out.pixel_data.cpu().numpy()
        once()
        torch.cuda.synchronize()
        wall = []
        for _ in range(max(3, args.reps // 3)):
            t = time.perf_counter()
            once()
            torch.cuda.synchronize()
            wall.append((time.perf_counter() - t) * 1e3)
        record((h, w), f"medical-image-std (torch {torch.__version__})", f"febds {method}",
               None, statistics.median(wall), reps=len(wall))


def augscope_rows(args):
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "augscope.json")
        cmd = [args.augscope, "bench", "--rows", "filters", "--backend", "cuda",
               "--reps", str(max(10, args.reps)), "--cpu-reps", str(args.cpu_reps), "--json", out]
        log("running", " ".join(cmd))
        r = subprocess.run(cmd, capture_output=True, text=True)
        sys.stderr.write(r.stderr)
        if r.returncode != 0:
            RESULTS["notes"].append(f"augscope bench failed: {r.stderr.strip()[-500:]}")
            return
        print(r.stdout)
        with open(out) as f:
            RESULTS["augscope"] = json.load(f)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", default="256x512x512")
    ap.add_argument("--mammo", default="4096x3328")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--cpu-reps", type=int, default=0,
                    help="CPU repetitions of augscope's own rows (0: GPU rows only)")
    ap.add_argument("--skip-cupy", action="store_true")
    ap.add_argument("--skip-torch", action="store_true")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--augscope", help="path of the augscope binary: run its filter rows too")
    ap.add_argument("--json")
    args = ap.parse_args()
    if not args.skip_cupy:
        cupy_rows(args)
    if not args.skip_torch:
        torch_febds_rows(args)
    if args.augscope:
        augscope_rows(args)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(RESULTS, f, indent=1)
        log("wrote", args.json)


if __name__ == "__main__":
    main()
