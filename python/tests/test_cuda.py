"""CUDA tensors in and out: the same bits as `augscope apply --backend cuda` and `augscope filter
--backend cuda`, with no copy through the host. Runs where torch sees a GPU (skipped elsewhere).

    AUGSCOPE=path/to/augscope pytest python/tests/test_cuda.py
"""
import json
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

import augscope
from test_augscope import (FILTER_CASES, MODES, PLAN_ARGS, PRESET, cli, cli_apply, labels,
                           volume)

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
DEV = "cuda:0"


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("augscope-cuda")


def on_gpu(a):
    return torch.from_numpy(np.ascontiguousarray(a)).to(DEV)


def cli_cuda(work, arr, args, **kw):
    return cli_apply(work, arr, args, backend=DEV, **kw)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("order", [0, 1, 3])
def test_cuda_tensors_equal_the_cli_on_cuda(work, mode, order):
    v, lab = volume((30, 34, 31)), labels((30, 34, 31))
    ours, our_lab, plan = cli_cuda(work, v, PLAN_ARGS + ["--mode", mode, "--order", str(order),
                                                         "--cval", "0.25"],
                                   lab=lab, tag=f"c{mode}{order}")
    out = augscope.apply(on_gpu(v), plan, label=on_gpu(lab))
    assert out.image.is_cuda and out.image.dtype == torch.float32
    assert out.info["backend"] == DEV
    assert np.array_equal(out.image.cpu().numpy(), ours)
    assert out.label.is_cuda and out.label.dtype == torch.uint8
    assert np.array_equal(out.label.cpu().numpy(), our_lab.astype(np.uint8))


def test_intensity_steps_on_cuda_tensors_equal_the_cli_on_cuda(work):
    """The intensity steps run on the device arrays themselves (f32 storage): the same bits as
    the CLI on CUDA, and the label map untouched by them."""
    v, lab = volume((30, 34, 31)), labels((30, 34, 31))
    steps = ["--noise", "0.2", "--blur", "0.8", "--contrast", "1.2", "--lowres",
             "0.6", "--gamma", "1.3", "--gamma-retain-stats"]
    ours, our_lab, plan = cli_cuda(work, v, PLAN_ARGS + steps, lab=lab, tag="int")
    assert [s for step in plan["intensity"] for s in step] == [
        "gaussian_noise", "gaussian_blur", "contrast", "low_resolution", "gamma"]
    out = augscope.apply(on_gpu(v), plan, label=on_gpu(lab))
    assert out.image.is_cuda
    assert np.array_equal(out.image.cpu().numpy(), ours)
    _, plain_lab, _ = cli_cuda(work, v, PLAN_ARGS, lab=lab, tag="int0")
    assert np.array_equal(out.label.cpu().numpy(), plain_lab.astype(np.uint8))


@pytest.mark.parametrize("precision", ["f16", "bf16"])
@pytest.mark.parametrize("order", [1, 3])
def test_half_precision_storage(work, precision, order):
    v = volume((24, 26, 25), 5)
    ours, _, plan = cli_cuda(work, v, PLAN_ARGS + ["--order", str(order), "--precision",
                                                   precision], tag=f"h{precision}{order}")
    out = augscope.apply(on_gpu(v), plan, precision=precision)
    assert np.array_equal(out.image.cpu().numpy(), ours)
    augscope.set_precision(precision)
    try:
        again = augscope.apply(on_gpu(v), plan)
    finally:
        augscope.set_precision("f32")
    assert np.array_equal(again.image.cpu().numpy(), ours)


def test_2d_rgb_identity_and_strided_input(work):
    img2 = volume((61, 57), 3)
    ours, _, plan = cli_cuda(work, img2, ["--rotate", "0.4", "--elastic", "30,2.5", "--seed",
                                          "4", "--mode", "mirror"], tag="c2d")
    assert np.array_equal(augscope.apply(on_gpu(img2), plan).image.cpu().numpy(), ours)
    rgb = np.stack([volume((40, 42), s) for s in range(3)])
    ours, _, plan = cli_cuda(work, rgb, ["--rotate", "-0.3", "--scale", "1.1", "--order", "3"],
                             channels=True, tag="crgb")
    out = augscope.apply(on_gpu(rgb), plan, channels=True)
    assert np.array_equal(out.image.cpu().numpy(), ours)
    # a transposed (non-contiguous) tensor and an identity plan
    v = volume((12, 14, 16), 2)
    t = on_gpu(v.transpose(2, 1, 0).copy()).permute(2, 1, 0)
    ident = augscope.sample({"version": 1, "name": "id"}, 0)[0]
    assert torch.equal(augscope.apply(t, ident).image.cpu(), torch.from_numpy(v))


def test_batches_and_patches_equal_the_host_path():
    v = np.stack([np.stack([volume((26, 30, 28), 10 * b + c) for c in range(2)])
                  for b in range(3)])
    lab = np.stack([labels((26, 30, 28))] * 3)
    aug = augscope.Augment(PRESET, seed=7, patch_size=(16, 20, 12), patch_center="random")
    gpu = aug(on_gpu(v), label=on_gpu(lab), index=4)
    host = aug(v, label=lab, index=4, )
    host_cuda = augscope.Augment(PRESET, seed=7, patch_size=(16, 20, 12),
                                 patch_center="random", device=DEV)(v, label=lab, index=4)
    assert gpu.image.shape == (3, 2, 16, 20, 12) and gpu.image.is_cuda
    assert gpu.plan == host.plan == host_cuda.plan
    assert np.array_equal(gpu.image.cpu().numpy(), host_cuda.image)
    assert np.array_equal(gpu.label.cpu().numpy(), host_cuda.label)
    # the CUDA engine agrees with the CPU engine to f32 rounding
    assert np.max(np.abs(gpu.image.cpu().numpy() - host.image)) < 1e-4 * np.abs(v).max()


def test_no_host_round_trip_and_its_time(work):
    """CUPTI (torch's profiler) sees every copy in the process, augscope's included."""
    from torch.profiler import ProfilerActivity, profile
    v = on_gpu(volume((128, 128, 128), 1))
    plan = augscope.sample(PRESET, 3)[0]
    plan["elastic"] = {"alpha": 300.0, "sigma": 6.0, "seed": 3}
    augscope.apply(v, plan)  # compile and cache the field
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        out = augscope.apply(v, plan)
        torch.cuda.synchronize()
    trace = os.path.join(str(work), "trace.json")
    prof.export_chrome_trace(trace)
    with open(trace) as fh:
        events = json.load(fh)["traceEvents"]
    copies, kernels = {}, set()
    for e in events:
        if e.get("cat") in ("gpu_memcpy", "gpu_memset"):
            n, b = copies.get(e["name"], (0, 0))
            copies[e["name"]] = (n + 1, b + int(e.get("args", {}).get("bytes", 0)))
        elif e.get("cat") == "kernel":
            kernels.add(e["name"])
    assert any("resample" in k for k in kernels), kernels  # CUPTI sees augscope's work
    host_copies = {k: v for k, v in copies.items() if "HtoD" in k or "DtoH" in k}
    assert not host_copies, host_copies
    t0 = torch.cuda.Event(enable_timing=True)
    t1 = torch.cuda.Event(enable_timing=True)
    t0.record()
    for _ in range(10):
        out = augscope.apply(v, plan)
    t1.record()
    torch.cuda.synchronize()
    ms = t0.elapsed_time(t1) / 10
    host = v.cpu().numpy()
    hv = augscope.apply(host, plan, device=DEV)
    assert np.array_equal(out.image.cpu().numpy(), hv.image)
    print(f"\n128^3 order {plan['order']}: device tensors {ms:.3f} ms per call, copies (count, "
          f"bytes) {copies}, kernels {sorted(kernels)}; "
          f"engine timings {json.dumps(out.info['timings_ms'])}; host path "
          f"{hv.info['timings_ms']['total_ms']:.3f} ms")


@pytest.mark.parametrize("name,args,cli_args", FILTER_CASES)
@pytest.mark.parametrize("precision", ["f32", "f16"])
def test_filters_on_cuda_tensors_equal_the_cli(work, name, args, cli_args, precision):
    v = volume((21, 23, 22), 21)
    src, dst = work / f"cf_{name}.npy", work / f"cf_{name}_{precision}_out.npy"
    np.save(src, v)
    cli("filter", src, dst, *cli_args, "--backend", DEV, "--precision", precision)
    got = getattr(augscope.filters, name)(on_gpu(v), *args, precision=precision)
    assert got.is_cuda
    assert np.array_equal(got.cpu().numpy(), np.load(dst))


@pytest.mark.parametrize("method", ["dog", "log", "fft"])
def test_febds_on_a_cuda_tensor_equals_the_cli(work, method):
    path = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "fixtures", "febds",
                        "input.npy")
    img = np.load(path).astype(np.float32)
    cli("filter", path, work / f"febds_{method}.npy", "--febds", method, "--backend", DEV)
    got = augscope.febds(on_gpu(img), method)
    assert got.is_cuda
    assert np.array_equal(got.cpu().numpy(), np.load(work / f"febds_{method}.npy"))


def test_out_of_memory_falls_back_to_the_cpu_with_a_warning():
    code = """
import warnings, numpy as np, torch, augscope, json
v = torch.rand((40, 44, 42), device="cuda:0")
plan = augscope.sample({"version": 1, "name": "e", "elastic": {"p": 1.0, "alpha": [50, 50],
                        "sigma": [4, 4]}}, 1)[0]
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    out = augscope.apply(v, plan)
cpu = augscope.apply(v.cpu(), plan, device="cpu")
print(json.dumps({"warned": [str(x.category.__name__) for x in w], "note": out.info["note"],
                  "cuda": out.image.is_cuda,
                  "equal_cpu": bool(torch.equal(out.image.cpu(), cpu.image))}))
"""
    env = dict(os.environ, AUGSCOPE_GPU_MEM_LIMIT="1M")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert p.returncode == 0, p.stderr
    r = json.loads(p.stdout.strip().splitlines()[-1])
    assert r["warned"] == ["CpuFallbackWarning"] and "memory" in r["note"]
    assert r["cuda"] and r["equal_cpu"]


def test_memory_stats_and_the_scope_that_frees_the_caches():
    v = on_gpu(volume((64, 64, 64), 2))
    plan = augscope.sample(PRESET, 3)[0]
    plan["elastic"] = {"alpha": 100.0, "sigma": 4.0, "seed": 1}
    with augscope.gpu_memory_scope():
        augscope.apply(v, plan)
        held = augscope.memory_stats()
        assert held and held[0]["reserved_bytes"] >= 64 ** 3 * 4 * 3  # the cached field
    after = augscope.memory_stats()
    assert after[0]["reserved_bytes"] < held[0]["reserved_bytes"]
    assert after[0]["driver_total_bytes"] > 0


def test_a_forked_child_is_refused_cuda_clearly():
    import multiprocessing as mp
    augscope.apply(on_gpu(volume((8, 8, 8))), augscope.sample(PRESET, 1)[0])
    ctx = mp.get_context("fork")
    q = ctx.Queue()

    def child(q):
        try:
            augscope.apply(volume((8, 8, 8)), augscope.sample(PRESET, 1)[0], device=DEV)
            q.put("ran")
        except RuntimeError as e:
            q.put(str(e))
    p = ctx.Process(target=child, args=(q,))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p.start()
    msg = q.get(timeout=60)
    p.join()
    assert "spawn" in msg


class SpawnData:
    """Samples transformed on the GPU inside spawned DataLoader workers."""

    def __init__(self, n):
        self.v = [volume((16, 18, 17), i) for i in range(n)]
        self.aug = augscope.Augment(PRESET, seed=99, device=DEV)

    def __len__(self):
        return len(self.v)

    def __getitem__(self, j):
        return self.aug(self.v[j], index=j).image


def test_spawned_workers_run_on_cuda_with_the_same_draws():
    from torch.utils.data import DataLoader
    data = SpawnData(6)
    main = [data[j] for j in range(6)]
    dl = DataLoader(data, batch_size=None, num_workers=2, multiprocessing_context="spawn")
    got = list(dl)
    assert all(np.array_equal(a, b.numpy()) for a, b in zip(main, got))


def _one_rank(rank, world, n, q):
    """One data-parallel process: binds the GPU of its rank and transforms its shard."""
    import torch
    dev = f"cuda:{rank % torch.cuda.device_count()}"
    torch.cuda.set_device(dev)
    aug = augscope.Augment(PRESET, seed=123, device=dev)
    out = {}
    for j in range(rank, n, world):
        x = torch.from_numpy(volume((16, 18, 17), j)).to(dev)
        out[j] = aug(x, index=j).image.cpu().numpy()
    q.put(out)


def test_one_process_per_gpu_gives_the_draws_of_one_process():
    """Data-parallel training: one process per GPU (two; on a machine with one GPU both bind it),
    each on its own device with its shard of the indices, gives the samples one process gives."""
    import multiprocessing as mp
    n, world = 8, 2
    aug = augscope.Augment(PRESET, seed=123, device=DEV)
    want = {j: aug(on_gpu(volume((16, 18, 17), j)), index=j).image.cpu().numpy()
            for j in range(n)}
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    ps = [ctx.Process(target=_one_rank, args=(r, world, n, q)) for r in range(world)]
    for p in ps:
        p.start()
    got = {}
    for _ in ps:
        got.update(q.get(timeout=180))
    for p in ps:
        p.join(60)
    assert sorted(got) == list(range(n))
    assert all(np.array_equal(want[j], got[j]) for j in range(n))
    # The samples differ from each other: the shards did not all get one draw.
    assert not np.array_equal(got[0], got[1])
