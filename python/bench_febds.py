#!/usr/bin/env python3
"""bench_febds.py - the FEBDS micro-calcification mask from Python on one GPU: augscope against
medical-image-std's `FebdsAlgorithm(method, device="cuda")`, in one run, on a 12-bit synthetic
mammogram of --shape (4096x3328).

Two ways in for each: host to host (a numpy image in, the mask back in host memory) and device
resident (a CUDA tensor in, the mask left on the device). Median wall time of --reps calls after
one warm-up, with the device synchronised; the masks are compared (voxels that differ).

Needs torch with CUDA, augscope (pip install ./python) and medical-image-std 0.8.2 (its wheel and
pydicom's are enough: pip install --no-deps).
"""
import argparse
import json
import statistics
import time

import numpy as np


def synthetic_mammogram(h, w):
    """The 12-bit synthetic mammogram of `augscope bench --rows filters`, as
    benches/peers_filters.py makes it."""
    import importlib.util
    import os
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benches",
                        "peers_filters.py")
    spec = importlib.util.spec_from_file_location("peers_filters", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.synthetic_mammogram(h, w)


def timed(fn, reps, sync):
    fn()
    sync()
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        out = fn()
        sync()
        ts.append((time.perf_counter() - t) * 1e3)
    return statistics.median(ts), out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--shape", default="4096x3328")
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--json")
    args = p.parse_args()
    import torch

    import augscope
    h, w = (int(v) for v in args.shape.lower().split("x"))
    img = synthetic_mammogram(h, w)
    dev = torch.device("cuda:0")
    img_t = torch.from_numpy(img).to(dev)
    sync = torch.cuda.synchronize
    res = {"shape": [h, w], "gpu": torch.cuda.get_device_name(0), "rows": []}
    try:
        from medical_image.algorithms.FEBDS import FebdsAlgorithm
        from medical_image.data.in_memory_image import InMemoryImage
    except ImportError as e:
        FebdsAlgorithm = None
        res["notes"] = [f"medical-image-std unavailable: {e}"]
    for method in ("dog", "log", "fft"):
        row = {"method": method}
        row["augscope_host_ms"], mask = timed(
            lambda: augscope.febds(img, method, device="cuda:0"), args.reps, sync)
        row["augscope_device_ms"], mask_t = timed(
            lambda: augscope.febds(img_t, method), args.reps, sync)
        assert mask_t.is_cuda
        row["augscope_host_vs_device_differ"] = int((mask_t.cpu().numpy() != mask).sum())
        if FebdsAlgorithm is not None:
            def mis_host():
                src, out = InMemoryImage(array=img), InMemoryImage(array=img)
                FebdsAlgorithm(method, device="cuda")(src, out)
                return out.pixel_data.cpu().numpy()

            def mis_device():
                src, out = InMemoryImage(array=img_t), InMemoryImage(array=img_t.clone())
                FebdsAlgorithm(method, device="cuda")(src, out)
                return out.pixel_data
            row["mis_host_ms"], ref = timed(mis_host, max(3, args.reps // 2), sync)
            row["mis_device_ms"], ref_t = timed(mis_device, max(3, args.reps // 2), sync)
            row["masks_differ"] = int((np.asarray(ref, np.float32) != mask).sum())
            row["mask_pixels"] = int(mask.sum())
            row["x_host"] = row["mis_host_ms"] / row["augscope_host_ms"]
            row["x_device"] = row["mis_device_ms"] / row["augscope_device_ms"]
        res["rows"].append(row)
        print(json.dumps(row), flush=True)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(res, fh, indent=1)


if __name__ == "__main__":
    main()
