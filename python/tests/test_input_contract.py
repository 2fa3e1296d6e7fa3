"""The Python package's input contract: the scan's voxel size reaches the draw and the apply;
bad input is a ValueError, TypeError or MemoryError of one line, before any large allocation;
never a PanicException (a BaseException that `except Exception` does not catch) or an aborted
interpreter.

Needs the `augscope` binary (AUGSCOPE, else target/debug/augscope of this checkout).
"""
import json
import os
import struct
import subprocess

import numpy as np
import pytest

import augscope
from augscope import _augscope as core

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("AUGSCOPE", os.path.join(ROOT, "target", "debug", "augscope"))

# A preset in mm space: a rotation about axis 0 (anisotropic voxels turn without shear only in
# mm) and a translation in mm.
MM_PRESET = {
    "version": 1,
    "name": "mm space",
    "space": "mm",
    "rotate": {"p": 1.0, "range_deg": [[12.0, 12.0], [0.0, 0.0], [0.0, 0.0]]},
    "translate": {"p": 1.0, "range": [[3.0, 3.0], [-2.0, -2.0], [1.5, 1.5]], "unit": "mm"},
    "scale": {"p": 1.0, "range": [[1.1, 1.1]]},
    "sampling": {"order": 1, "mode": "constant", "cval": 0.0, "label_order": 0},
}
# The same translation in mm, in a preset of voxel space.
VOXEL_MM_TRANSLATE = {
    "version": 1,
    "name": "mm translation",
    "translate": {"p": 1.0, "range": [[4.0, 4.0], [-3.0, -3.0], [2.0, 2.0]], "unit": "mm"},
    "sampling": {"order": 1, "mode": "constant", "cval": 0.0, "label_order": 0},
}


def volume(shape, seed=0):
    rng = np.random.default_rng(seed)
    v = rng.random(shape, dtype=np.float32)
    v[tuple(slice(n // 3, 2 * n // 3) for n in shape)] += 2.0
    return v


def cli(*args):
    p = subprocess.run([BIN, *map(str, args)], capture_output=True, text=True)
    assert p.returncode == 0, f"augscope {' '.join(map(str, args))}: {p.stderr}"
    return p.stdout


def write_nifti(path, arr, spacing):
    """A NIfTI-1 file of a float32 `[z, y, x]` array with voxel size `spacing` (`[z, y, x]`,
    mm) in pixdim alone (no qform, no sform), as the format lays it out."""
    nz, ny, nx = arr.shape
    hdr = bytearray(348)
    struct.pack_into("<i", hdr, 0, 348)
    struct.pack_into("<8h", hdr, 40, 3, nx, ny, nz, 1, 1, 1, 1)
    struct.pack_into("<hh", hdr, 70, 16, 32)  # float32
    struct.pack_into("<8f", hdr, 76, 1.0, spacing[2], spacing[1], spacing[0], 1.0, 1.0, 1.0,
                     1.0)
    struct.pack_into("<ff", hdr, 108, 352.0, 1.0)  # vox_offset, scl_slope
    hdr[344:348] = b"n+1\0"
    with open(path, "wb") as fh:
        fh.write(bytes(hdr) + b"\0" * 4 + np.ascontiguousarray(arr, "<f4").tobytes())


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("augscope-contract")


def batch_of_nifti(work, preset, arr, spacing, seed, tag):
    """`augscope batch` of one NIfTI with voxel size `spacing`: (plan, image) of sample 0."""
    src = work / f"{tag}.nii"
    write_nifti(src, arr, spacing)
    toml = work / f"{tag}.toml"
    toml.write_text(_toml(preset))
    out = work / f"{tag}_out"
    cli("batch", "--preset", toml, "--count", 1, "--seed", seed, "--out", out, "--ext", "npy",
        "--quiet", "--backend", "cpu", src)
    line = json.loads((out / "manifest.jsonl").read_text().splitlines()[0])
    return line["plan"], np.load(line["output"])


@pytest.mark.parametrize("preset", [MM_PRESET, VOXEL_MM_TRANSLATE], ids=["mm", "voxel"])
def test_the_scans_spacing_reaches_the_draw_and_the_apply(work, preset):
    v = volume((12, 14, 16), 1)
    spacing = [2.0, 1.0, 0.5]
    aug = augscope.Augment(preset, seed=5)
    one = aug(v, index=0)
    two = aug(v, index=0, spacing=spacing)
    assert not np.array_equal(one.image, two.image), "the voxel size changes the geometry"
    plan, image = batch_of_nifti(work, preset, v, spacing, 5, "sp" + preset["name"].replace(" ", "_"))
    assert two.plan == plan
    assert np.array_equal(two.image, image)
    # The transform's own spacing, and a plan drawn for it, replayed with the plan's spacing.
    assert np.array_equal(augscope.Augment(preset, seed=5, spacing=spacing)(v, index=0).image,
                          image)
    assert np.array_equal(augscope.apply(v, plan).image, image)
    assert augscope.sample(preset, 5, spacing=spacing)[0] == plan


def test_an_explicit_spacing_is_the_plans_in_mm_space(work):
    v = volume((12, 14, 16), 2)
    spacing = [2.0, 1.0, 0.5]
    plan_1mm = augscope.sample(MM_PRESET, 5)[0]
    assert plan_1mm["spacing_mm"] == [1.0, 1.0, 1.0]
    _, image = batch_of_nifti(work, MM_PRESET, v, spacing, 5, "explicit")
    out = augscope.apply(v, plan_1mm, spacing=spacing)
    assert out.plan["spacing_mm"] == spacing
    assert np.array_equal(out.image, image)


def test_unknown_plan_keys_are_refused():
    v = volume((6, 7, 8))
    with pytest.raises(ValueError, match="rotate_rad"):
        augscope.apply(v, {"rotate": [0.1, 0.2, 0.3]})
    with pytest.raises(ValueError, match="alpha"):
        augscope.apply(v, {"elastic": {"alpha": 1.0, "sigma": 2.0, "seed": 0, "sigm": 3}})
    with pytest.raises(ValueError, match="dict"):
        augscope.apply(v, [1, 2])
    assert np.array_equal(augscope.apply(v, {}).image, v)


def test_complex_input_is_refused():
    z = volume((6, 7, 8)).astype(np.complex64) * (1 + 1j)
    with pytest.raises(ValueError, match="complex"):
        augscope.apply(z, {})
    with pytest.raises(ValueError, match="complex"):
        augscope.Augment(MM_PRESET)(z)
    with pytest.raises(ValueError, match="complex"):
        augscope.febds(z[0])
    with pytest.raises(ValueError, match="complex"):
        augscope.apply(volume((6, 7, 8)), {}, label=z)
    torch = pytest.importorskip("torch")
    with pytest.raises(ValueError, match="complex"):
        augscope.apply(torch.from_numpy(z), {})


def test_sizes_beyond_memory_are_refused_before_allocating():
    v = volume((6, 7, 8))
    with pytest.raises(MemoryError, match="memory"):
        augscope.apply(v, {"out_shape": [10**6, 10**6, 10**6]})
    with pytest.raises(MemoryError):
        augscope.apply(v, {"out_shape": [2**62, 2**62, 2**62]})
    with pytest.raises(MemoryError, match="memory"):
        augscope.Augment(MM_PRESET, patch_size=(10**5, 10**5, 10**5))(v)
    with pytest.raises(ValueError, match="patch_size"):
        augscope.Augment(MM_PRESET, patch_size=(0, 4, 4))


def test_a_huge_sparse_memmap_is_refused(tmp_path):
    try:
        big = np.memmap(tmp_path / "big.f32", dtype=np.float32, mode="w+",
                        shape=(10**4, 10**4, 10**4))
    except (OSError, ValueError) as e:
        pytest.skip(f"this file system holds no sparse file of 4 TB: {e}")
    with pytest.raises(MemoryError):
        augscope.apply(big, {})
    with pytest.raises(MemoryError):
        augscope.filters.gaussian(big, 1.0)
    with pytest.raises(MemoryError):
        augscope.febds(big)
    small = np.memmap(tmp_path / "big.u8", dtype=np.uint8, mode="w+",
                      shape=(10**4, 10**4, 10**4))
    with pytest.raises(MemoryError):
        augscope.apply(small, {})


def test_what_panicked_is_a_value_error():
    v = volume((6, 7, 8))
    mm = augscope.sample(MM_PRESET, 1)[0]
    for bad in ([1e-30] * 3, [1e5] * 3, [float("nan"), 1.0, 1.0], [1.0, 1.0]):
        with pytest.raises(ValueError, match="spacing"):
            augscope.apply(v, mm, spacing=bad)
        with pytest.raises(ValueError, match="spacing"):
            augscope.Augment(MM_PRESET, spacing=bad)
        with pytest.raises(ValueError, match="spacing"):
            augscope.Augment(MM_PRESET)(v, spacing=bad)
        with pytest.raises(ValueError, match="spacing"):
            augscope.sample(MM_PRESET, 0, spacing=bad)
    with pytest.raises(ValueError, match="spacing"):
        augscope.apply(v, dict(mm, spacing_mm=[1e-30] * 3))
    for empty in ((0, 4, 4), (4, 0, 4), (0, 0)):
        with pytest.raises(ValueError, match="empty"):
            augscope.apply(np.zeros(empty, np.float32), {"order": 3})
        with pytest.raises(ValueError, match="empty"):
            augscope.febds(np.zeros(empty, np.float32))
    with pytest.raises(ValueError, match="empty"):
        augscope.Augment(MM_PRESET)(np.zeros((0, 4, 4), np.float32))
    for ndim in (2**64 - 1, 0, 4, -1):
        with pytest.raises(ValueError, match="ndim"):
            augscope.sample(MM_PRESET, 0, ndim=ndim)
        with pytest.raises(ValueError, match="ndim"):
            augscope.Augment(MM_PRESET, ndim=ndim)
    # The extension's own entry points check as much, without the package around them.
    with pytest.raises(ValueError, match="ndim"):
        core.sample(json.dumps(MM_PRESET), 0, 2**64 - 1, None, None)
    with pytest.raises(ValueError, match="empty"):
        core.apply(np.zeros((0, 4, 4), np.float32), '{"order": 3}')
    with pytest.raises(ValueError, match="spacing"):
        core.apply(v, json.dumps(mm), None, False, [1e-30] * 3)


def test_a_panic_left_in_the_library_is_a_value_error():
    """What the checks do not foresee still reaches Python as a ValueError of one line, never a
    PanicException: here nnU-Net's model of an elastic deformation onto an output grid larger
    than the input (a case its model indexed out of bounds)."""
    v = volume((6, 7, 8))
    plan = {"elastic": {"alpha": 10.0, "sigma": 2.0, "seed": 1}, "out_shape": [13, 11, 14]}
    try:
        out = augscope.apply(v, plan, model="nnunet")
    except ValueError as e:
        assert str(e) and "\n" not in str(e)
    else:
        assert out.image.shape == (13, 11, 14)


def test_febds_takes_stacks_as_documented(work):
    img = np.load(os.path.join(ROOT, "tests", "fixtures", "febds", "input.npy"))
    img = img[:96, :80].astype(np.float32)
    stack = np.stack([img, img[::-1].copy(), np.ascontiguousarray(img[:, ::-1])])
    out = augscope.febds(stack, "dog")
    assert out.shape == stack.shape
    for k in range(3):
        assert np.array_equal(out[k], augscope.febds(stack[k], "dog")), k
    np.save(work / "febds_one.npy", stack[1])
    cli("filter", work / "febds_one.npy", work / "febds_one_out.npy", "--febds", "dog",
        "--backend", "cpu")
    assert np.array_equal(out[1], np.load(work / "febds_one_out.npy"))
    assert augscope.febds(stack[None]).shape == (1, 3, 96, 80)


def _toml(d):
    """A small TOML writer for the test presets (tables of numbers, strings and lists)."""
    lines = [f"{k} = {json.dumps(v)}" for k, v in d.items() if not isinstance(v, dict)]
    for k, v in d.items():
        if isinstance(v, dict):
            lines.append(f"[{k}]")
            lines += [f"{kk} = {json.dumps(vv)}" for kk, vv in v.items()]
    return "\n".join(lines) + "\n"
