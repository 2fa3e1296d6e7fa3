"""The device rule, the precision default, the CPU fallback's warning and the memory API, on any
machine (the GPU side of each is test_cuda.py's)."""
import warnings

import numpy as np
import pytest

import augscope
from test_augscope import PRESET, volume


def gpu_usable():
    try:
        return bool(augscope.devices().get("devices"))
    except Exception:  # noqa: BLE001
        return False


def test_the_device_rule():
    from augscope import _device
    assert _device(None, np.zeros(3)) == "cpu"
    assert _device("auto", np.zeros(3)) == "cpu"
    assert _device("cuda:1", np.zeros(3)) == "cuda:1"
    assert _device("cuda", np.zeros(3)) == "cuda:0"
    assert _device("cpu") == "cpu"
    torch = pytest.importorskip("torch")
    assert _device(None, torch.zeros(3)) == "cpu"


def test_numpy_and_cpu_tensors_stay_on_the_cpu_by_default():
    v = volume((9, 10, 11))
    plan = augscope.sample(PRESET, 4)[0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = augscope.apply(v, plan)
    assert out.info["backend"] == "cpu" and out.info["note"] is None


@pytest.mark.skipif(gpu_usable(), reason="a GPU is usable here")
def test_a_gpu_request_without_a_gpu_warns_and_runs_on_the_cpu():
    v = volume((9, 10, 11))
    plan = augscope.sample(PRESET, 4)[0]
    cpu = augscope.apply(v, plan)
    with pytest.warns(augscope.CpuFallbackWarning, match="CPU engine"):
        out = augscope.apply(v, plan, device="cuda")
    assert out.info["backend"] == "cpu" and np.array_equal(out.image, cpu.image)
    with pytest.warns(augscope.CpuFallbackWarning):
        f = augscope.filters.gaussian(v, 1.5, device="cuda:0")
    assert np.array_equal(f, augscope.filters.gaussian(v, 1.5))
    with pytest.warns(augscope.CpuFallbackWarning):
        augscope.Augment(PRESET, device="cuda")(v, index=0)
    # `backend=` is another name for `device=` everywhere
    with pytest.warns(augscope.CpuFallbackWarning):
        augscope.filters.contrast(v, 1.2, 0.1, backend="cuda")
    with pytest.warns(augscope.CpuFallbackWarning):
        augscope.Augment(PRESET, backend="cuda")(v, index=0)


def test_precision_default():
    assert augscope.get_precision() == "f32"
    with pytest.raises(ValueError, match="f16"):
        augscope.set_precision("f64")
    augscope.set_precision("bf16")
    try:
        assert augscope.get_precision() == "bf16"
        # the CPU engine computes and stores f32 whatever the GPU storage precision
        v = volume((8, 9, 10))
        plan = augscope.sample(PRESET, 2)[0]
        assert np.array_equal(augscope.apply(v, plan).image,
                              augscope.apply(v, plan, precision="f32").image)
    finally:
        augscope.set_precision("f32")


def test_memory_api_without_gpu_work():
    with augscope.gpu_memory_scope():
        augscope.apply(volume((6, 6, 6)), augscope.sample(PRESET, 1)[0])
    stats = augscope.memory_stats()
    assert isinstance(stats, list)
    for s in stats:
        assert {"driver_free_bytes", "reserved_bytes", "peak_bytes"} <= set(s)


def test_gpu_only_entry_points_refuse_host_memory_clearly():
    from augscope import _augscope as core
    with pytest.raises(ValueError, match="DLPack"):
        core.apply_cuda_batch(np.zeros(3), np.zeros(3), ["{}"])
    torch = pytest.importorskip("torch")
    t = torch.zeros((4, 4, 4))
    with pytest.raises(ValueError, match="not CUDA"):
        core.apply_cuda_batch(t.__dlpack__(), t.__dlpack__(), ["{}"])
