#!/usr/bin/env python3
"""bench_train_loop.py - the spatial augmentation of an nnU-Net-v2-like training loop: augscope on
the GPU against batchgeneratorsv2's SpatialTransform + MirrorTransform on CPU worker processes,
on the same host, in one run.

The loop: patches of --patch (128^3) from one scan (the bundled MNI brain, --image as .npy, with
its --label), batch --batch (2), every batch fresh parameters: rotation about every axis in
+-30 degrees, isotropic scale 0.7-1.4, elastic deformation, mirroring on every axis with p 0.5,
image order 1 (nnU-Net's bilinear) and labels order 0. Each sample's patch is centred at a
random point of the scan, as nnU-Net's loader picks it.

- augscope: `augscope.Augment` on a CUDA tensor (the scan resident on the GPU, as a GPU data
  pipeline keeps it), and host -> GPU (a numpy scan each batch, result on the GPU: what a CPU
  loader feeding the GPU gives). Reported: samples/s, the GPU time per batch (CUDA events), and
  the CPU time of the process per batch (how much of a core augscope takes).
- batchgeneratorsv2 0.3.6 (nnU-Net v2's): SpatialTransform(p_rotation=1, p_scaling=1,
  p_elastic_deform=1, nnU-Net's other settings) then MirrorTransform, in torch DataLoader worker
  processes (one torch thread each, as nnU-Net sets them) on 1 and on --workers (16) processes.

Writes a JSON summary to --json and prints a table. Needs torch with CUDA and batchgeneratorsv2.
"""
import argparse
import json
import math
import os
import time

import numpy as np

ROT = math.radians(30)


def augscope_preset(elastic_alpha, elastic_sigma):
    return {
        "version": 1, "name": "train-loop bench",
        "flip": {"p": [0.5, 0.5, 0.5]},
        "rotate": {"p": 1.0, "range_deg": [[-30.0, 30.0]] * 3},
        "scale": {"p": 1.0, "range": [[0.7, 1.4]]},
        "elastic": {"p": 1.0, "alpha": list(elastic_alpha), "sigma": list(elastic_sigma)},
        "sampling": {"order": 1, "mode": "constant", "cval": 0.0, "label_order": 0},
    }


def bench_augscope(args, image, label, resident):
    import torch

    import augscope
    dev = torch.device("cuda:0")
    aug = augscope.Augment(augscope_preset(args.alpha, args.sigma), seed=1,
                           patch_size=[args.patch] * 3, patch_center="random", device="cuda:0")
    img_t = torch.from_numpy(image[None]).to(dev)
    lab_t = torch.from_numpy(label.astype(np.float32)).to(dev)
    seen = 0

    def one_batch():
        nonlocal seen
        outs, labs = [], []
        for _ in range(args.batch):
            if resident:
                o = aug(img_t, label=lab_t, index=seen)
            else:
                o = aug(torch.from_numpy(image[None]).to(dev, non_blocking=False),
                        label=torch.from_numpy(label.astype(np.float32)).to(dev), index=seen)
            seen += 1
            outs.append(o.image)
            labs.append(o.label)
        return torch.stack(outs), torch.stack(labs)

    for _ in range(args.warmup):
        one_batch()
    torch.cuda.synchronize()
    gpu_ms, wall_ms, cpu_ms = [], [], []
    for _ in range(args.batches):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        c0, t0 = time.process_time(), time.perf_counter()
        e0.record()
        data, seg = one_batch()
        e1.record()
        torch.cuda.synchronize()
        wall_ms.append((time.perf_counter() - t0) * 1e3)
        cpu_ms.append((time.process_time() - c0) * 1e3)
        gpu_ms.append(e0.elapsed_time(e1))
    assert tuple(data.shape) == (args.batch, 1, args.patch, args.patch, args.patch)
    med = float(np.median(wall_ms))
    return {"samples_per_s": args.batch * 1e3 / med, "wall_ms_per_batch": med,
            "gpu_ms_per_batch": float(np.median(gpu_ms)),
            "cpu_ms_per_batch": float(np.median(cpu_ms)), "batches": args.batches}


class _BgDataset:
    """One augmented sample per item: a random patch centre, nnU-Net's SpatialTransform and
    MirrorTransform (batchgeneratorsv2) on the whole scan."""

    def __init__(self, image, label, args):
        self.image, self.label, self.args = image, label, args

    def __len__(self):
        return 1 << 30

    def __getitem__(self, j):
        import torch
        from batchgeneratorsv2.transforms.spatial.mirroring import MirrorTransform
        from batchgeneratorsv2.transforms.spatial.spatial import SpatialTransform
        if not hasattr(self, "t"):
            torch.set_num_threads(1)
            a = self.args
            self.t = [
                SpatialTransform(
                    [a.patch] * 3, patch_center_dist_from_border=0, random_crop=True,
                    p_elastic_deform=1.0, elastic_deform_scale=(0, 0.2),
                    elastic_deform_magnitude=(0, 0.2), p_rotation=1.0,
                    rotation=(-ROT, ROT), p_scaling=1.0, scaling=(0.7, 1.4),
                    p_synchronize_scaling_across_axes=1, bg_style_seg_sampling=False,
                    border_mode_seg="constant", padding_value_seg=-1),
                MirrorTransform(allowed_axes=(0, 1, 2)),
            ]
        d = {"image": torch.from_numpy(self.image[None].copy()),
             "segmentation": torch.from_numpy(self.label[None].astype(np.int16))}
        for t in self.t:
            d = t(**d)
        return d["image"], d["segmentation"]


def bench_batchgenerators(args, image, label, workers):
    import torch
    from torch.utils.data import DataLoader
    ds = _BgDataset(image, label, args)
    dl = DataLoader(ds, batch_size=args.batch, num_workers=workers,
                    prefetch_factor=2, persistent_workers=True)
    it = iter(dl)
    for _ in range(max(1, workers // args.batch) + args.warmup):
        next(it)
    n = max(args.cpu_batches, 2 * workers // args.batch)
    c0, t0 = time.process_time(), time.perf_counter()
    for _ in range(n):
        data, seg = next(it)
    wall = time.perf_counter() - t0
    assert tuple(data.shape) == (args.batch, 1, args.patch, args.patch, args.patch)
    del it, dl
    return {"samples_per_s": n * args.batch / wall, "wall_ms_per_batch": wall * 1e3 / n,
            "workers": workers, "batches": n,
            "main_cpu_ms_per_batch": (time.process_time() - c0) * 1e3 / n}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--image", required=True, help="the scan as a float32 .npy [z, y, x]")
    p.add_argument("--label", required=True, help="its label map as a .npy")
    p.add_argument("--patch", type=int, default=128)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--batches", type=int, default=50, help="timed augscope batches")
    p.add_argument("--cpu-batches", type=int, default=8, help="timed CPU batches (at least)")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--workers", type=int, default=16)
    p.add_argument("--alpha", type=float, nargs=2, default=[0.0, 900.0])
    p.add_argument("--sigma", type=float, nargs=2, default=[9.0, 13.0])
    p.add_argument("--skip-cpu", action="store_true")
    p.add_argument("--json")
    args = p.parse_args()
    image = np.ascontiguousarray(np.load(args.image), dtype=np.float32)
    label = np.ascontiguousarray(np.load(args.label))
    res = {"scan": list(image.shape), "patch": args.patch, "batch": args.batch,
           "cpu_cores": os.cpu_count()}
    import torch
    res["gpu"] = torch.cuda.get_device_name(0)
    res["augscope_resident"] = bench_augscope(args, image, label, True)
    print("augscope, scan on the GPU:", json.dumps(res["augscope_resident"]), flush=True)
    res["augscope_host_to_gpu"] = bench_augscope(args, image, label, False)
    print("augscope, scan from the host:", json.dumps(res["augscope_host_to_gpu"]), flush=True)
    if not args.skip_cpu:
        for w in (1, args.workers):
            r = bench_batchgenerators(args, image, label, w)
            res[f"batchgeneratorsv2_{w}_workers"] = r
            print(f"batchgeneratorsv2, {w} workers:", json.dumps(r), flush=True)
        one = res["batchgeneratorsv2_1_workers"]["samples_per_s"]
        many = res[f"batchgeneratorsv2_{args.workers}_workers"]["samples_per_s"]
        for k in ("augscope_resident", "augscope_host_to_gpu"):
            s = res[k]["samples_per_s"]
            res[k]["x_one_worker"] = s / one
            res[k][f"x_{args.workers}_workers"] = s / many
    print(json.dumps(res, indent=1))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(res, fh, indent=1)


if __name__ == "__main__":
    main()
