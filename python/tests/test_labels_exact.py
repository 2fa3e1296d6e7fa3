"""Integer label maps keep their exact values through every path of the package, whatever their
type: values beyond float32's 2^24 (16777217 would come back as 16777216) are carried as codes
into a table of the exact values, and come back as they went in."""

import numpy as np
import pytest

import augscope

SHAPE = (6, 7, 8)
PLANS = [
    {},
    {"flip": [0, 2]},
    {"rotate_rad": [0.3, 0.2, -0.1], "scale": [1.1], "order": 3},
    {"elastic": {"alpha": 3.0, "sigma": 2.0, "seed": 4}, "translate": [1.3, -0.4, 2.0],
     "mode": "reflect"},
]
VALUES = {
    np.int32: [16_777_217, 123_456_789, -2_147_483_648, 5],
    np.int64: [(1 << 40) + 1, 16_777_217, -(1 << 50) - 3, 2],
    np.uint64: [np.iinfo(np.uint64).max, (1 << 63) + 7, 16_777_219, 1],
}


def maps(dtype):
    """A label map of large values in blobs, and the same map with each value's rank (small)."""
    values = VALUES[dtype]
    z, y, x = np.indices(SHAPE)
    idx = (z * 3 + y + x // 3) % len(values)
    big = np.array(values, dtype=dtype)[idx]
    big[((z + y) % 3 == 0) & (x > 1)] = 0
    order = sorted(values)
    rank = np.zeros(SHAPE, dtype=np.int32)
    for r, v in enumerate(order):
        rank[big == np.array(v, dtype=dtype)] = r + 1
    return big, rank, np.array([0] + order, dtype=dtype)


@pytest.mark.parametrize("dtype", list(VALUES))
@pytest.mark.parametrize("k", range(len(PLANS)))
def test_apply_keeps_large_label_values(dtype, k):
    image = np.arange(np.prod(SHAPE), dtype=np.float32).reshape(SHAPE)
    big, rank, table = maps(dtype)
    got = augscope.apply(image, PLANS[k], label=big, device="cpu")
    want = augscope.apply(image, PLANS[k], label=rank, device="cpu")
    assert got.label.dtype == big.dtype
    np.testing.assert_array_equal(got.label, table[want.label.astype(np.int64)])
    if not PLANS[k]:
        np.testing.assert_array_equal(got.label, big)


def test_augment_keeps_large_label_values_of_tensors():
    torch = pytest.importorskip("torch")
    image = np.random.default_rng(0).random(SHAPE, dtype=np.float32)
    big, rank, table = maps(np.int64)
    aug = augscope.Augment("nnunet-v2", seed=3, ndim=3)
    got = aug(torch.from_numpy(image), label=torch.from_numpy(big), index=5)
    want = aug(torch.from_numpy(image), label=torch.from_numpy(rank), index=5)
    assert got.label.dtype == torch.int64
    np.testing.assert_array_equal(got.label.numpy(), table[want.label.numpy().astype(np.int64)])
    values = set(np.unique(got.label.numpy()).tolist())
    assert values <= set(table.tolist())
    assert any(abs(v) > (1 << 24) for v in values)


def test_intensity_steps_act_on_the_image_only():
    image = np.arange(np.prod(SHAPE), dtype=np.float32).reshape(SHAPE) / 10
    big, _, _ = maps(np.int64)
    plan = {"rotate_rad": [0.2, 0.0, 0.0],
            "intensity": [{"brightness": {"multipliers": [2.0]}},
                          {"gamma": {"channels": [{"gamma": 1.5, "retain_stats": True}]}}]}
    spatial = augscope.apply(image, {"rotate_rad": [0.2, 0.0, 0.0]}, label=big, device="cpu")
    got = augscope.apply(image, plan, label=big, device="cpu")
    np.testing.assert_array_equal(got.label, spatial.label)
    assert [d["transform"] for d in got.done][-2:] == ["brightness", "gamma"]
    x = spatial.image.astype(np.float64) * 2
    lo, hi = x.min(), x.max()
    y = ((x - lo) / (hi - lo)) ** 1.5 * (hi - lo) + lo
    y = (y - y.mean()) * (x.std(ddof=1) / y.std(ddof=1)) + x.mean()
    np.testing.assert_allclose(got.image, y, atol=1e-4 * (hi - lo))
    with pytest.raises(ValueError, match="gamma"):
        augscope.apply(image, {"intensity": [{"gamma": {"channels": [{"gamma": 0.0}]}}]})


def test_monai_and_torchio_steps_act_on_the_image_only():
    """The other libraries' families run from a plan dict too, on the image alone."""
    image = np.arange(np.prod(SHAPE), dtype=np.float32).reshape(SHAPE) / 10 + 1
    big, _, _ = maps(np.int64)
    plan = {"rotate_rad": [0.2, 0.0, 0.0],
            "intensity": [{"monai_shift_intensity": {"offsets": [1.5]}},
                          {"torchio_gamma": {"gammas": [1.25]}}]}
    spatial = augscope.apply(image, {"rotate_rad": [0.2, 0.0, 0.0]}, label=big, device="cpu")
    got = augscope.apply(image, plan, label=big, device="cpu")
    np.testing.assert_array_equal(got.label, spatial.label)
    assert [d["transform"] for d in got.done][-2:] == ["monai_shift_intensity", "torchio_gamma"]
    x = spatial.image.astype(np.float32) + np.float32(1.5)
    y = np.sign(x) * np.abs(x) ** np.float32(1.25)
    np.testing.assert_allclose(got.image, y, rtol=1e-6)
    with pytest.raises(ValueError, match="torchio_gamma"):
        augscope.apply(image, {"intensity": [{"torchio_gamma": {"gammas": [-1.0]}}]})
