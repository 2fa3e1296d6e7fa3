"""A batch of CUDA tensors in one engine call (batched launches on the device): the same bits as
the samples one by one, for every order, with intensity steps and label maps of several
channels; and the shapes the batch call refuses."""
import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import augscope  # noqa: E402
from test_augscope import PRESET, labels, volume  # noqa: E402

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
DEV = "cuda:0"
SHAPE = (26, 30, 28)


def on_gpu(a):
    return torch.from_numpy(np.ascontiguousarray(a)).to(DEV)


def batch(b, c=2):
    return np.stack([np.stack([volume(SHAPE, 10 * j + k) for k in range(c)]) for j in range(b)])


@pytest.mark.parametrize("preset", ["nnunet-v2", "batchgenerators", PRESET])
@pytest.mark.parametrize("order", [0, 1, 3])
def test_a_batch_in_one_call_equals_its_samples_one_by_one(preset, order):
    aug = augscope.Augment(preset, seed=11, patch_size=(16, 20, 12), patch_center="random")
    ps = []
    for j in range(5):
        p = aug.draw(SHAPE, j, channels=2)[0]
        p["order"] = order
        ps.append(p)
    x = batch(5)
    lab = np.stack([np.stack([labels(SHAPE), labels(SHAPE)[::-1].copy()])] * 5)
    out = augscope.apply(on_gpu(x), ps, label=on_gpu(lab), channels=True)
    assert out.image.is_cuda and out.image.shape == (5, 2, 16, 20, 12)
    assert out.label.dtype == torch.uint8 and out.label.shape == (5, 2, 16, 20, 12)
    assert out.info["samples"] == 5
    for j in range(5):
        one = augscope.apply(on_gpu(x[j]), ps[j], label=on_gpu(lab[j, 0]), channels=True)
        assert torch.equal(out.image[j], one.image), j
        assert torch.equal(out.label[j, 0], one.label), j
        other = augscope.apply(on_gpu(x[j]), ps[j], label=on_gpu(lab[j, 1]), channels=True)
        assert torch.equal(out.label[j, 1], other.label), j
        # and the CPU engine's host path on CUDA, sample by sample
        host = augscope.apply(x[j], ps[j], label=lab[j, 0], channels=True, device=DEV)
        assert np.array_equal(out.image[j].cpu().numpy(), host.image), j


def test_augment_on_a_cuda_batch_takes_one_call_and_keeps_the_draws():
    aug = augscope.Augment("nnunet-v2", seed=2, patch_size=(16, 20, 12))
    x = batch(4)
    lab = np.stack([labels(SHAPE)[None]] * 4).astype(np.int16)
    got = aug(on_gpu(x), label=on_gpu(lab), index=8)
    assert got.label.shape == (4, 1, 16, 20, 12) and got.label.dtype == torch.int16
    for j in range(4):
        plan, done = aug.draw(SHAPE, 8 + j, channels=2)
        assert got.plan[j] == plan and got.done[j] == done
        one = aug(on_gpu(x[j]), label=on_gpu(lab[j]), index=8 + j)
        assert torch.equal(got.image[j], one.image) and torch.equal(got.label[j], one.label)
    assert all(i["samples"] == 4 for i in got.info)


def test_identity_samples_and_half_precision_run_sample_by_sample_with_the_same_bits():
    x = batch(3)
    ident = augscope.sample({"version": 1, "name": "id"}, 0)[0]
    moving = augscope.Augment(PRESET, seed=1).draw(SHAPE, 0, channels=2)[0]
    out = augscope.apply(on_gpu(x), [moving, ident, moving], channels=True)
    assert torch.equal(out.image[1].cpu(), torch.from_numpy(x[1]))
    for j in (0, 2):
        one = augscope.apply(on_gpu(x[j]), moving, channels=True)
        assert torch.equal(out.image[j], one.image), j
    half = augscope.apply(on_gpu(x), [moving] * 3, channels=True, precision="f16")
    one = augscope.apply(on_gpu(x[2]), moving, channels=True, precision="f16")
    assert torch.equal(half.image[2], one.image)


def test_a_batch_the_engine_cannot_take_is_a_value_error():
    x = on_gpu(batch(2))
    a = augscope.Augment(PRESET, seed=1).draw(SHAPE, 0, channels=2)[0]
    b = dict(a, out_shape=[10, 10, 10])
    with pytest.raises(ValueError, match="share their output grid"):
        augscope.apply(x, [a, b], channels=True)
    with pytest.raises(ValueError, match="one plan per sample"):
        augscope.apply(x, [a], channels=True)
    with pytest.raises(ValueError, match="rotate"):
        augscope.apply(x, [a, json.dumps({"rotate": [0.1, 0, 0]})], channels=True)
