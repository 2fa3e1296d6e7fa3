"""The nnU-Net trainer's resident loader: the batches nnU-Net's own data loader makes (its cases,
boxes and padding, from the same numpy draws), cut from cases held on the device. Run here on
CPU tensors; on a GPU the same code runs on CUDA tensors."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("nnunetv2")

from nnunetv2.training.dataloading.data_loader import nnUNetDataLoader  # noqa: E402
from nnunetv2.utilities.label_handling.label_handling import LabelManager  # noqa: E402

from augscope.nnunet import _crop_pad, _ResidentLoader  # noqa: E402


class Cases:
    """A preprocessed dataset as nnU-Net's classes give it: identifiers and load_case."""

    def __init__(self):
        rng = np.random.default_rng(0)
        self.identifiers = ["a", "b", "c"]
        self.data, self.props = {}, {}
        for i, k in enumerate(self.identifiers):
            shape = (20 + 3 * i, 17, 22 - 2 * i)
            img = rng.random((2, *shape), dtype=np.float32)
            seg = np.zeros((1, *shape), np.int16)
            seg[0, 4:9, 5:11, 3:8] = 1
            seg[0, 10:14, 2:6, 9:15] = 2
            seg[0, 0, 0, :3] = -1
            locations = {c: np.argwhere(seg == c) for c in (1, 2)}
            self.data[k] = (img, seg)
            self.props[k] = {"class_locations": locations}

    def load_case(self, k):
        return self.data[k][0], self.data[k][1], None, self.props[k]


def loader(cases, transforms=None):
    lm = LabelManager({"background": 0, "one": 1, "two": 2}, regions_class_order=None)
    return nnUNetDataLoader(cases, 4, (24, 24, 24), (16, 16, 16), lm,
                            oversample_foreground_percent=0.5, transforms=transforms)


def test_crop_pad_is_nnunets():
    from acvl_utils.cropping_and_padding.bounding_boxes import crop_and_pad_nd
    rng = np.random.default_rng(1)
    a = rng.random((2, 11, 9, 13), dtype=np.float32)
    for _ in range(50):
        lbs = [int(v) for v in rng.integers(-8, 10, 3)]
        ubs = [lo + int(v) for lo, v in zip(lbs, rng.integers(1, 16, 3))]
        want = crop_and_pad_nd(a, [[lo, u] for lo, u in zip(lbs, ubs)], 0)
        got = _crop_pad(torch.from_numpy(a), lbs, ubs, 0.0).numpy()
        assert np.array_equal(got, want), (lbs, ubs)


def test_resident_batches_are_nnunets_own():
    cases = Cases()
    np.random.seed(7)
    theirs = [loader(cases).generate_train_batch() for _ in range(3)]
    np.random.seed(7)
    ours = _ResidentLoader(loader(cases), cases, torch.device("cpu"), None)
    for want in theirs:
        got = next(ours)
        assert list(got["keys"]) == list(want["keys"])
        assert torch.equal(got["data"], want["data"])
        assert torch.equal(got["target"], want["target"])
        assert got["target"].dtype == torch.int16 and (got["target"] == -1).any()
