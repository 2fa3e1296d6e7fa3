"""Small NIfTI and image fixtures for tests/io_roundtrip.rs, with what nibabel and PIL read.

Run from the repository root:  python3 tests/data/make_io_fixtures.py
(written with nibabel 5.3, numpy 2, Pillow 13).

For every file F it writes F.expected.npy: the values as float32 in augscope's order, i.e.
`np.asarray(nib.load(F).get_fdata())` with the NIfTI axes reversed ([x,y,z] -> [z,y,x]) and the 4th
axis / RGB moved first as channels, or `np.asarray(PIL.Image.open(F))` with colour moved first. And
one expected.json with, per file, nibabel's `img.affine`, the zooms in array order, the storage
dtype, the shape and the channel count.
"""

import json
import os

import nibabel as nib
import numpy as np
from PIL import Image

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "io")
os.makedirs(OUT, exist_ok=True)
rng = np.random.default_rng(7)
expected = {}


def rot(ax, deg):
    c, s = np.cos(np.radians(deg)), np.sin(np.radians(deg))
    m = np.eye(4)
    i, j = [(1, 2), (0, 2), (0, 1)][ax]
    m[i, i], m[i, j], m[j, i], m[j, j] = c, -s, s, c
    return m


def save_nifti(name, arr, affine, *, sform=None, qform=None, zooms=None, slope=None, inter=None,
               big_endian=False, dtype=None):
    img = nib.Nifti1Image(arr, affine, dtype=dtype)
    h = img.header
    if zooms is not None:
        h.set_zooms(zooms)
    if qform is not None:
        img.set_qform(affine if qform else None, code=qform)
    if sform is not None:
        img.set_sform(affine if sform else None, code=sform)
    if slope is not None:
        h.set_slope_inter(slope, inter)
    if big_endian:
        img = nib.Nifti1Image(arr, img.affine, header=h.as_byteswapped(">"))
        img.set_qform(*h.get_qform(coded=True)) if h["qform_code"] else None
        img.set_sform(*h.get_sform(coded=True)) if h["sform_code"] else None
        if slope is not None:
            img.header.set_slope_inter(slope, inter)
    path = os.path.join(OUT, name)
    nib.save(img, path)
    back = nib.load(path)
    data = back.get_fdata(dtype=np.float64) if back.get_data_dtype().names is None else None
    if data is None:  # RGB24: structured array -> (3, z, y, x)
        raw = np.asarray(back.dataobj)
        out = np.stack([raw[c].T for c in "RGB"]).astype(np.float32)
        channels = 3
    elif data.ndim == 4:
        out = data.transpose(3, 2, 1, 0).astype(np.float32)
        channels = data.shape[3]
    else:
        out = data.T.astype(np.float32)
        channels = 1
    np.save(path + ".expected.npy", np.ascontiguousarray(out))
    ndim = min(back.header["dim"][0], 3)
    expected[name] = {
        "affine": back.affine.tolist(),
        "spacing_mm": [float(z) for z in back.header.get_zooms()[:ndim]][::-1],
        "dtype": str(back.get_data_dtype().newbyteorder("=")) if channels != 3 or data is not None else "uint8",
        "shape": list(back.shape[:ndim])[::-1],
        "channels": int(channels),
        "datatype": int(back.header["datatype"]),
        "big_endian": back.header.endianness == ">",
    }


# uint8, sform (a rotation) and a qform
a = rng.integers(0, 256, (5, 4, 3)).astype(np.uint8)
aff = rot(2, 30) @ np.diag([0.8, 0.9, 1.1, 1]) + np.array([[0, 0, 0, -10], [0, 0, 0, 5], [0, 0, 0, 2], [0, 0, 0, 0]])
save_nifti("u8_sform.nii", a, aff, sform=2, qform=1)

# int8, 2D, no sform or qform: nibabel's base affine (x flipped, centred)
a = rng.integers(-128, 128, (6, 5)).astype(np.int8)
img = nib.Nifti1Image(a, np.diag([0.5, 0.7, 1, 1]))
save_nifti("i8_2d_nocode.nii", a, np.diag([0.5, 0.7, 1, 1]), sform=0, qform=0)

# uint16, 4D, qform only with a rotation and a mirrored axis (qfac = -1), gzip
a = rng.integers(0, 65536, (4, 3, 2, 2)).astype(np.uint16)
aff = rot(0, 20) @ rot(1, -15) @ np.diag([1.5, 2.0, -2.5, 1]) + np.array([[0, 0, 0, 3], [0, 0, 0, -4], [0, 0, 0, 7], [0, 0, 0, 0]])
save_nifti("u16_4d_qform.nii.gz", a, aff, sform=0, qform=1)

# int16, big-endian, scaled (slope 0.5, intercept -10)
a = rng.integers(-300, 300, (4, 3, 2)).astype(np.int16)
save_nifti("i16_be_scaled.nii", a, np.diag([2.0, 2.0, 3.0, 1]), sform=2, qform=2, slope=0.5, inter=-10.0,
           big_endian=True)

# int32 / uint32 beyond 2^24, float64, float32 with NaN and infinities
save_nifti("i32.nii", np.array([[[-2**31, 2**31 - 1], [0, -5]]], dtype=np.int32), np.eye(4), sform=1)
save_nifti("u32.nii", np.array([[[2**32 - 1, 2**24 + 1], [0, 7]]], dtype=np.uint32), np.eye(4), sform=1)
save_nifti("f64.nii.gz", rng.normal(size=(3, 3, 2)), np.diag([1.25, 1.25, 4, 1]), sform=1)
save_nifti("f32_nonfinite.nii", np.array([[[np.nan, np.inf], [-np.inf, -0.0]], [[1.5, 1e-30], [3e38, 2]]],
                                         dtype=np.float32), np.eye(4), sform=1)

# RGB24
rgb_t = np.dtype([("R", "u1"), ("G", "u1"), ("B", "u1")])
a = np.zeros((4, 3, 2), dtype=rgb_t)
for c in "RGB":
    a[c] = rng.integers(0, 256, (4, 3, 2))
save_nifti("rgb24.nii", a, np.diag([1, 1, 2, 1]), sform=2)

# Images, read back with PIL
def save_image(name, arr, mode=None):
    path = os.path.join(OUT, name)
    Image.fromarray(arr, mode).save(path) if mode else Image.fromarray(arr).save(path)
    back = np.asarray(Image.open(path))
    out = back[None] if back.ndim == 2 else back[..., :3].transpose(2, 0, 1)
    np.save(path + ".expected.npy", np.ascontiguousarray(out.astype(np.float32)))
    expected[name] = {"dtype": str(back.dtype), "shape": list(back.shape[:2]),
                      "channels": 1 if back.ndim == 2 else 3}


save_image("gray8.png", rng.integers(0, 256, (4, 5)).astype(np.uint8))
save_image("gray16.png", rng.integers(0, 65536, (4, 5)).astype(np.uint16))
save_image("rgba8.png", rng.integers(0, 256, (3, 4, 4)).astype(np.uint8))
save_image("gray16.tif", rng.integers(0, 65536, (3, 6)).astype(np.uint16))
save_image("rgb8.tif", rng.integers(0, 256, (3, 2, 3)).astype(np.uint8))

with open(os.path.join(OUT, "expected.json"), "w") as f:
    json.dump(expected, f, indent=1, sort_keys=True)
print(json.dumps(expected, indent=1, sort_keys=True))
