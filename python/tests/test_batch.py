"""One plan per sample: `augscope.apply` with a list of plans, `Augment` on batches, and label
maps of several channels, on the CPU engine (the same calls on CUDA tensors are in
test_cuda_batch.py)."""
import numpy as np
import pytest

import augscope
from test_augscope import PRESET, labels, volume

SHAPE = (18, 21, 19)


def batch(b=3, c=2):
    return np.stack([np.stack([volume(SHAPE, 10 * j + k) for k in range(c)]) for j in range(b)])


def plans(b=3, patch=(12, 14, 10), c=2):
    aug = augscope.Augment("nnunet-v2", seed=5, patch_size=patch, patch_center="random")
    return [aug.draw(SHAPE, j, channels=c)[0] for j in range(b)]


def test_a_list_of_plans_applies_each_to_its_sample():
    x, ps = batch(), plans()
    lab = np.stack([labels(SHAPE), labels(SHAPE)[::-1].copy(), labels(SHAPE)])
    out = augscope.apply(x, ps, label=lab, channels=True)
    assert out.image.shape == (3, 2, 12, 14, 10) and out.label.shape == (3, 12, 14, 10)
    assert out.label.dtype == np.uint8 and len(out.plan) == len(out.done) == 3
    for j in range(3):
        one = augscope.apply(x[j], ps[j], label=lab[j], channels=True)
        assert np.array_equal(out.image[j], one.image)
        assert np.array_equal(out.label[j], one.label)
        assert out.done[j] == one.done
    # without a channel axis: (B, *grid)
    ps1 = plans(c=1)
    flat = augscope.apply(x[:, 0], ps1)
    assert flat.image.shape == (3, 12, 14, 10)
    for j in range(3):
        assert np.array_equal(flat.image[j], augscope.apply(x[j, 0], ps1[j]).image)


def test_label_maps_of_several_channels_keep_every_channel():
    """Each channel of a (K, *grid) label map is resampled with the sample's plan (order 0); none
    is dropped."""
    x, ps = batch(b=2), plans(b=2)
    one_hot = np.stack([np.stack([(labels(SHAPE) == k) for k in range(3)])] * 2).astype(np.int16)
    out = augscope.apply(x, ps, label=one_hot, channels=True)
    assert out.label.shape == (2, 3, 12, 14, 10) and out.label.dtype == np.int16
    for j in range(2):
        for k in range(3):
            alone = augscope.apply(x[j], ps[j], label=one_hot[j, k], channels=True).label
            assert np.array_equal(out.label[j, k], alone)
    # Augment: the same per channel, batched and one item at a time
    aug = augscope.Augment(PRESET, seed=3)
    got = aug(x, label=one_hot, index=0)
    assert got.label.shape[:2] == (2, 3)
    item = aug(x[1], label=one_hot[1], index=1)
    assert item.label.shape[0] == 3
    assert np.array_equal(got.label[1], item.label) and np.array_equal(got.image[1], item.image)
    for k in range(3):
        assert np.array_equal(item.label[k], aug(x[1], label=one_hot[1, k], index=1).label)


def test_bad_batches_are_value_errors():
    x, ps = batch(), plans()
    with pytest.raises(ValueError, match="one plan per sample"):
        augscope.apply(x, ps[:2], channels=True)
    with pytest.raises(ValueError, match="label shape"):
        augscope.apply(x, ps, label=np.zeros((3, 2, 2) + SHAPE, np.uint8), channels=True)
    with pytest.raises(ValueError, match="not a plan"):
        augscope.apply(x, ps[:2] + ["{"], channels=True)
    aug = augscope.Augment(PRESET, seed=3)
    with pytest.raises(ValueError, match="label shape"):
        aug(x, label=np.zeros((3, 1, 1) + SHAPE, np.uint8))
