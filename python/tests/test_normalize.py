"""A preset's normalisation (`[normalize]`) in the Python package: `augscope.normalize` gives what
`augscope apply --normalize` writes, bit for bit; `Augment` normalises each image before its
transform unless told the data is normalised already; the label map is never normalised; a bad
method is a ValueError. The methods' arithmetic is checked against nnU-Net, MONAI and TorchIO by
tests/interop/check_normalize.py."""

import json
import os
import subprocess

import numpy as np
import pytest

import augscope

SHAPE = (6, 7, 8)
ZSCORE = {"method": "nnunet_zscore"}
BIN = os.environ.get("AUGSCOPE")


def scan(c=None):
    rng = np.random.default_rng(7)
    shape = SHAPE if c is None else (c, *SHAPE)
    return rng.gamma(2.0, 50.0, shape).astype(np.float32)


def test_zscore_per_channel_and_whole_image_methods():
    img = scan(2)
    img[1] *= 3.0
    out = augscope.normalize(img, ZSCORE, channels=True)
    assert out.dtype == np.float32 and out.shape == img.shape
    for c in range(2):
        assert abs(float(out[c].mean())) < 1e-5 and abs(float(out[c].std()) - 1) < 1e-5
    tio = augscope.normalize(img, {"method": "torchio_z_normalization"}, channels=True)
    # Over the whole image: the channels keep their relation.
    assert abs(float(tio.mean())) < 1e-5 and abs(float(tio[1].mean()) - float(tio[0].mean())) > 0.5
    r = augscope.normalize(img, json.dumps({"method": "torchio_rescale_intensity"}),
                           channels=True)
    assert float(r.min()) == 0.0 and float(r.max()) == 1.0


@pytest.mark.skipif(not BIN, reason="needs the CLI (AUGSCOPE=path/to/augscope)")
def test_normalize_equals_the_cli(tmp_path):
    img = scan()
    src, dst = tmp_path / "in.npy", tmp_path / "out.npy"
    np.save(src, img)
    spec = {"method": "monai_scale_intensity_range", "a_min": 20.0, "a_max": 300.0,
            "b_min": 0.0, "b_max": 1.0, "clip": True}
    subprocess.run([BIN, "apply", str(src), str(dst), "--backend", "cpu", "--normalize",
                    json.dumps(spec)], check=True, capture_output=True)
    assert np.array_equal(augscope.normalize(img, spec), np.load(dst))


def test_augment_normalises_before_its_transform_unless_told_not_to():
    preset = {"version": 1, "name": "z", "flip": {"p": [1.0]}, "normalize": ZSCORE}
    img = scan()
    lab = (img > 100).astype(np.uint8)
    out = augscope.Augment(preset)(img, lab)
    want = augscope.normalize(img, ZSCORE)[::-1, ::-1, ::-1]
    assert np.array_equal(out.image, want)
    # The label map is mirrored, never normalised.
    assert np.array_equal(out.label, lab[::-1, ::-1, ::-1])
    raw = augscope.Augment(preset, normalize=False)(img)
    assert np.array_equal(raw.image, img[::-1, ::-1, ::-1])
    # The preset itself names it: normalize() takes it too.
    assert np.array_equal(augscope.normalize(img, preset), augscope.normalize(img, ZSCORE))


def test_bad_methods_are_value_errors():
    for bad in ({"method": "zscore"}, {"method": "nnunet_ct", "mean": 0.0}, "nnunet-v2",
                {"method": "torchio_rescale_intensity", "percentiles": [90, 10]}):
        with pytest.raises(ValueError):
            augscope.normalize(scan(), bad)
    with pytest.raises(ValueError):
        augscope.normalize(np.full(SHAPE, 3.0, np.float32),
                           {"method": "torchio_z_normalization"})
