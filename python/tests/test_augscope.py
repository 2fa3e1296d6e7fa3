"""The Python package against the CLI: the same plan gives the same bits.

Needs the `augscope` binary (AUGSCOPE, else target/debug/augscope of this checkout) and, for the
torch cases, torch (skipped without it).

    pip install ./python && pytest python/tests
"""
import json
import os
import subprocess

import numpy as np
import pytest

import augscope

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("AUGSCOPE", os.path.join(ROOT, "target", "debug", "augscope"))
MODES = ["constant", "grid-constant", "nearest", "reflect", "mirror", "grid-wrap", "wrap"]

PRESET = {
    "version": 1,
    "name": "python test",
    "flip": {"p": [0.5, 0.5, 0.5]},
    "rotate": {"p": 0.8, "range_deg": [[-20.0, 20.0], [-10.0, 15.0], [-25.0, 5.0]]},
    "scale": {"p": 0.7, "range": [[0.85, 1.2]]},
    "translate": {"p": 0.5, "range": [[-2.0, 2.0], [-1.0, 3.0], [-2.0, 1.0]]},
    "elastic": {"p": 0.6, "alpha": [60.0, 120.0], "sigma": [3.0, 4.0]},
    "sampling": {"order": 1, "mode": "reflect", "cval": 0.0, "label_order": 0},
}


def cli(*args):
    p = subprocess.run([BIN, *map(str, args)], capture_output=True, text=True)
    assert p.returncode == 0, f"augscope {' '.join(map(str, args))}: {p.stderr}"
    return p.stdout


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("augscope-py")


def volume(shape, seed=0):
    rng = np.random.default_rng(seed)
    v = rng.random(shape, dtype=np.float32)
    sl = tuple(slice(n // 2, n // 2 + max(2, n // 4)) for n in shape)
    v[sl] += 2.0
    return v


def labels(shape):
    lab = np.zeros(shape, np.uint8)
    lab[tuple(slice(n // 3, 2 * n // 3) for n in shape)] = 1
    lab[tuple(slice(0, n // 4) for n in shape)] = 2
    return lab


def cli_apply(work, arr, args, lab=None, channels=False, tag="a", backend="cpu"):
    """`augscope apply` of `arr` with `args` on `backend`: (image, label or None, the report's
    plan)."""
    src, out, rep = work / f"{tag}_in.npy", work / f"{tag}_out.npy", work / f"{tag}.json"
    np.save(src, arr)
    argv = ["apply", src, out, *args, "--report", rep, "--backend", backend]
    if channels:
        argv.append("--channels")
    lab_out = None
    if lab is not None:
        lab_in, lab_out = work / f"{tag}_lab.npy", work / f"{tag}_lab_out.npy"
        np.save(lab_in, lab)
        argv += ["--label", lab_in, "--label-out", lab_out]
    cli(*argv)
    with open(rep) as fh:
        plan = json.load(fh)["plan"]
    return np.load(out), (np.load(lab_out) if lab_out else None), plan


PLAN_ARGS = ["--rotate", "0.21,-0.13,0.3", "--scale", "0.93", "--translate", "1.5,-2,0.25",
             "--elastic", "90,3.5", "--seed", "11", "--flip", "1"]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("order", [0, 1, 3])
def test_apply_equals_the_cli_for_every_mode_and_order(work, mode, order):
    v = volume((14, 17, 15))
    ours, _, plan = cli_apply(work, v, PLAN_ARGS + ["--mode", mode, "--order", str(order),
                                                     "--cval", "0.25"], tag=f"m{mode}{order}")
    out = augscope.apply(v, plan)
    assert out.image.dtype == np.float32 and out.image.shape == v.shape
    assert np.array_equal(out.image, ours)
    assert [d["transform"] for d in out.done] == ["flip", "elastic", "rotate", "scale",
                                                  "translate"]


def test_2d_rgb_and_labels(work):
    img2 = volume((31, 27), 3)
    ours, _, plan = cli_apply(work, img2, ["--rotate", "0.4", "--elastic", "30,2.5", "--seed",
                                           "4", "--mode", "mirror"], tag="two")
    assert np.array_equal(augscope.apply(img2, plan).image, ours)
    rgb = np.stack([volume((20, 22), s) for s in range(3)])
    ours, _, plan = cli_apply(work, rgb, ["--rotate", "-0.3", "--scale", "1.1"], channels=True,
                              tag="rgb")
    out = augscope.apply(rgb, plan, channels=True)
    assert out.image.shape == rgb.shape and np.array_equal(out.image, ours)
    v, lab = volume((12, 13, 14)), labels((12, 13, 14))
    ours, our_lab, plan = cli_apply(work, v, PLAN_ARGS, lab=lab, tag="lab")
    out = augscope.apply(v, plan, label=lab)
    assert np.array_equal(out.image, ours)
    assert out.label.dtype == np.uint8, "labels keep their type"
    assert np.array_equal(out.label, our_lab.astype(np.uint8))


def test_torch_cpu_tensors_in_and_out(work):
    torch = pytest.importorskip("torch")
    v = volume((10, 12, 11))
    ours, _, plan = cli_apply(work, v, PLAN_ARGS, tag="torch")
    t = torch.from_numpy(v.copy())
    out = augscope.apply(t, plan)
    assert isinstance(out.image, torch.Tensor) and out.image.dtype == torch.float32
    assert np.array_equal(out.image.numpy(), ours)
    lab = torch.from_numpy(labels((10, 12, 11)).astype(np.int64))
    out = augscope.Augment(PRESET, seed=3)(t[None], label=lab[None], index=0)
    assert out.image.shape == (1, 10, 12, 11) and out.label.dtype == torch.int64


def test_augment_draws_as_the_batch_command(work):
    """Sample j of `augscope batch --seed S` is Augment(seed=S) at index j, bit for bit."""
    v, lab = volume((12, 14, 13), 5), labels((12, 14, 13))
    preset_path = work / "preset.toml"
    preset_path.write_text(_toml(PRESET))
    np.save(work / "bimg.npy", v)
    np.save(work / "blab.npy", lab)
    out_dir = work / "batch"
    cli("batch", "--preset", preset_path, "--count", 6, "--seed", 40, "--out", out_dir,
        "--label", work / "blab.npy", "--quiet", "--backend", "cpu", work / "bimg.npy")
    aug = augscope.Augment(PRESET, seed=40)
    lines = [json.loads(ln) for ln in (out_dir / "manifest.jsonl").read_text().splitlines()]
    assert len(lines) == 6
    for ln in lines:
        j = ln["index"]
        out = aug(v, label=lab, index=j)
        assert out.plan == ln["plan"], j
        assert np.array_equal(out.image, np.load(ln["output"])), j
        assert np.array_equal(out.label, np.load(ln["label_output"]).astype(np.uint8)), j
        plan, done, _ = augscope.sample(PRESET, 40 + j)
        assert plan == out.plan and done == out.done


def test_the_exported_python_target_is_the_same_transform(work):
    """`augscope preset export --to python` runs this package over the preset itself."""
    preset_path = work / "export.toml"
    preset_path.write_text(_toml(PRESET))
    text = cli("preset", "export", "--to", "python", "--ndim", 3, preset_path)
    ns = {"__name__": "exported"}
    exec(compile(text, "exported.py", "exec"), ns)
    t = ns["get_transform"](seed=9)
    v = volume((10, 11, 12), 2)
    ref = augscope.Augment(PRESET, seed=9)
    for j in range(4):
        a, b = t(v, index=j), ref(v, index=j)
        assert a.plan == b.plan and np.array_equal(a.image, b.image)


def test_batches_and_channels():
    v = np.stack([np.stack([volume((9, 10, 11), 10 * b + c) for c in range(2)])
                  for b in range(3)])  # (B, C, Z, Y, X)
    aug = augscope.Augment(PRESET, seed=7)
    out = aug(v, index=5)
    assert out.image.shape == v.shape and len(out.plan) == 3
    for b in range(3):
        one = augscope.apply(v[b], out.plan[b], channels=True)
        assert np.array_equal(out.image[b], one.image)
        assert out.plan[b] == aug.draw(v.shape[2:], 5 + b)[0]


def test_patch_crop_is_the_cli_output_cropped(work):
    """A patch cut in the resample equals the full transform cropped around its centre."""
    rigid = {k: v for k, v in PRESET.items() if k != "elastic"}
    v = volume((20, 24, 22), 9)
    aug = augscope.Augment(rigid, seed=2, patch_size=(12, 16, 10))
    for j in range(4):
        out = aug(v, index=j)
        assert out.image.shape == (12, 16, 10)
        full_plan = dict(out.plan, out_shape=None)
        full = augscope.apply(v, full_plan).image
        off = [(n - p) // 2 for n, p in zip(v.shape, (12, 16, 10))]
        crop = full[off[0]:off[0] + 12, off[1]:off[1] + 16, off[2]:off[2] + 10]
        assert np.array_equal(out.image, crop), j
        args = []
        if out.plan["flip"]:
            args += ["--flip", ",".join(map(str, out.plan["flip"]))]
        if out.plan["rotate_rad"]:
            args += ["--rotate", ",".join(repr(a) for a in out.plan["rotate_rad"])]
        if out.plan["scale"]:
            args += ["--scale", ",".join(repr(a) for a in out.plan["scale"])]
        args += ["--translate", ",".join(repr(a) for a in out.plan["translate"]),
                 "--mode", "reflect"]
        ours, _, _ = cli_apply(work, v, args, tag=f"patch{j}")
        assert np.array_equal(full, ours), j
    rnd = augscope.Augment(rigid, seed=2, patch_size=(8, 8, 8), patch_center="random")
    a, b = rnd(v, index=1), rnd(v, index=1)
    assert np.array_equal(a.image, b.image) and a.plan == b.plan
    assert a.done[-1]["transform"] == "patch"


class _Data:
    def __init__(self, n):
        self.v = [volume((8, 9, 10), i) for i in range(n)]
        self.aug = augscope.Augment(PRESET, seed=123)

    def __len__(self):
        return len(self.v)

    def __getitem__(self, j):
        return self.aug(self.v[j], index=j, epoch=1).image


def test_the_same_draws_on_one_and_four_workers():
    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader
    data = _Data(12)
    augscope.apply(data.v[0], augscope.sample(PRESET, 0)[0])  # the parent's pool exists: fork
    runs = []
    for workers in (0, 1, 4):
        dl = DataLoader(data, batch_size=None, num_workers=workers)
        runs.append([t.numpy() for t in dl])
    for other in runs[1:]:
        assert all(np.array_equal(a, b) for a, b in zip(runs[0], other))


# (augscope.filters name, its arguments, the same filter's `augscope filter` flags)
FILTER_CASES = [
    ("gaussian", (1.5,), ["--gaussian", "1.5"]),
    ("log", (1.2,), ["--log", "1.2"]),
    ("dog", (1.0, 2.0), ["--dog", "1,2"]),
    ("median", (3,), ["--median", "3"]),
    ("gamma", (0.7, 2.0), ["--gamma", "0.7,2"]),
    ("contrast", (1.3, 0.1), ["--contrast", "1.3,0.1"]),
]


@pytest.mark.parametrize("name,args,cli_args", FILTER_CASES)
def test_filters_equal_the_cli(work, name, args, cli_args):
    v = volume((11, 13, 12), 21)
    np.save(work / f"f_{name}.npy", v)
    cli("filter", work / f"f_{name}.npy", work / f"f_{name}_out.npy", *cli_args,
        "--backend", "cpu")
    ours = np.load(work / f"f_{name}_out.npy")
    got = getattr(augscope.filters, name)(v, *args)
    assert np.array_equal(got, ours)
    batch = np.stack([v, v * 0.5])
    got = getattr(augscope.filters, name)(batch, *args, ndim=3)
    assert np.array_equal(got[0], ours)


def test_febds_equals_the_cli(work):
    path = os.path.join(ROOT, "tests", "fixtures", "febds", "input.npy")
    img = np.load(path).astype(np.float32)
    cli("filter", path, work / "febds.npy", "--febds", "dog", "--backend", "cpu")
    assert np.array_equal(augscope.febds(img, "dog"), np.load(work / "febds.npy"))


def test_bad_input_is_a_clear_error():
    with pytest.raises(ValueError, match="version"):
        augscope.Augment({"name": "no version"})
    with pytest.raises(ValueError, match="spatial"):
        augscope.Augment(PRESET)(np.zeros((2, 2, 2, 2, 2, 2), np.float32))
    with pytest.raises(ValueError, match="plan"):
        augscope.apply(np.zeros((4, 4, 4), np.float32), "{not json")
    with pytest.raises(ValueError):
        augscope.apply(np.zeros((4, 4, 4), np.float32), {"rotate_rad": [0.1, 0.2]})


def test_library_models_from_python():
    v = volume((12, 14, 13), 8)
    plan = augscope.sample(PRESET, 3)[0]
    plan["elastic"] = {"alpha": 80.0, "sigma": 3.0, "seed": 1}
    for model, id_ in (("torchio", "torchio-1.2.1"), ("monai", "monai-1.6.1"),
                       ("nnunet", "nnunetv2-2.8.1")):
        out = augscope.apply(v, plan, model=model)
        assert out.info["model"] == id_ and out.info["model_steps"]
        assert out.image.shape == v.shape


def _toml(d):
    """A small TOML writer for the test preset (tables of numbers and lists)."""
    lines = []
    for k, v in d.items():
        if not isinstance(v, dict):
            lines.append(f"{k} = {json.dumps(v)}")
    for k, v in d.items():
        if isinstance(v, dict):
            lines.append(f"[{k}]")
            lines += [f"{kk} = {json.dumps(vv)}" for kk, vv in v.items()]
    return "\n".join(lines) + "\n"
