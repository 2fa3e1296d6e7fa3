"""A training batch on the GPU through augscope: one engine call for the batch (batched
launches, one wait for the device) against one call per sample, with nnU-Net's shapes (batch 2,
one channel, a 181^3 initial patch cut to 128^3, the label map in the same call) and a preset's
whole pipeline (spatial part and intensity steps). Prints one JSON line.

  python benches/batch_call.py [--preset nnunet-v2] [--batch 2] [--reps 30]
"""
import argparse
import json
import statistics
import time

import numpy as np
import torch

import augscope

ap = argparse.ArgumentParser()
ap.add_argument("--preset", default="nnunet-v2")
ap.add_argument("--batch", type=int, default=2)
ap.add_argument("--initial", type=int, default=181)
ap.add_argument("--patch", type=int, default=128)
ap.add_argument("--reps", type=int, default=30)
a = ap.parse_args()

dev = "cuda:0"
n = a.initial
g = torch.Generator(device=dev).manual_seed(0)
x = torch.randn((a.batch, 1, n, n, n), device=dev, generator=g)
lab = (torch.rand((a.batch, 1, n, n, n), device=dev, generator=g) * 4).to(torch.int16)
aug = augscope.Augment(a.preset, seed=0, patch_size=[a.patch] * 3, patch_center="centre")


def whole(i):
    return aug(x, lab, index=i * a.batch)


def per_sample(i):
    return [aug(x[b], lab[b], index=i * a.batch + b) for b in range(a.batch)]


def timed(f):
    for i in range(3):
        f(i)
    torch.cuda.synchronize()
    ms = []
    for i in range(a.reps):
        t = time.perf_counter()
        f(i)
        torch.cuda.synchronize()
        ms.append(1e3 * (time.perf_counter() - t))
    return round(statistics.median(ms), 2), round(min(ms), 2)


one = whole(0)
for b, item in enumerate(per_sample(0)):
    assert torch.equal(one.image[b], item.image) and torch.equal(one.label[b], item.label)
w, p = timed(whole), timed(per_sample)
print(json.dumps({"preset": a.preset, "batch": a.batch, "initial": n, "patch": a.patch,
                  "one_call_ms_median_min": w, "per_sample_ms_median_min": p,
                  "engine_timings_ms": one.info[0]["timings_ms"],
                  "device": torch.cuda.get_device_name(0)}))
