"""nnU-Net's dummy-2D augmentation: the augscope trainer against nnU-Net's own pipeline, as
distributions.

For an anisotropic patch (6, 32, 32), nnU-Net v2 (`nnUNetTrainer.get_training_transforms` with
`do_dummy_2d_data_aug=True` and its ±180° rotation) folds axis 0 into the channels, runs its
spatial transform in 2D, unfolds, then applies its seven intensity steps and the mirror in 3D.
`nnUNetTrainerAugscopeGPU` on the same input (CPU engine) does the same with the nnunet-v2
preset. Per sample: the standard deviation, 1st and 99th percentiles, mean, in-plane gradient
magnitude and the mean difference between neighbouring slices of axis 0 (which a 3D rotation
would smooth); two-sample KS tests, p > 0.01 each, while the 3D preset on the same patch is
rejected (p < 1e-6). Seeded: the same numbers every run.
"""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("nnunetv2")
scipy_stats = pytest.importorskip("scipy.stats")

import augscope  # noqa: E402,F401

N = 320
PATCH = [6, 32, 32]
INITIAL = (6, 44, 44)


def volume():
    """A smooth, structured, z-scored volume of the initial patch's shape: blobs of varied
    brightness (what rotation, scaling and blur change) over noise."""
    rng = np.random.default_rng(3)
    z, y, x = np.meshgrid(*[np.arange(n, dtype=np.float64) for n in INITIAL], indexing="ij")
    v = 0.2 * rng.standard_normal(INITIAL)
    for _ in range(12):
        c = [rng.uniform(0, n) for n in INITIAL]
        r = rng.uniform(3, 9)
        v += rng.uniform(-2, 2) * np.exp(-(((z - c[0]) * 3) ** 2 + (y - c[1]) ** 2
                                           + (x - c[2]) ** 2) / (2 * r * r))
    v += (y - INITIAL[1] / 2) / INITIAL[1]  # a gradient: orientation is visible
    return ((v - v.mean()) / v.std()).astype(np.float32)


def stats(v):
    v = np.asarray(v, np.float64)
    gy, gx = np.gradient(v, axis=(1, 2))
    return [v.std(), np.percentile(v, 1), np.percentile(v, 99), v.mean(),
            np.sqrt(gy ** 2 + gx ** 2).mean(), np.abs(np.diff(v, axis=0)).mean()]


NAMES = ["std", "1st percentile", "99th percentile", "mean", "in-plane gradient",
         "axis-0 neighbour difference"]


def nnunet_samples(img):
    from nnunetv2.training.nnUNetTrainer.nnUNetTrainer import nnUNetTrainer
    rotation = (-np.pi, np.pi)
    compose = nnUNetTrainer.get_training_transforms(
        PATCH, rotation, None, (0, 1, 2), True, use_mask_for_norm=None, is_cascaded=False,
        foreground_labels=[1], regions=None, ignore_label=None)
    out = []
    for i in range(N):
        np.random.seed(70_000 + i)
        torch.manual_seed(70_000 + i)
        d = compose(image=torch.from_numpy(img[None].copy()),
                    segmentation=torch.zeros((1, *INITIAL), dtype=torch.int16))
        assert tuple(d["image"].shape) == (1, *PATCH)
        out.append(stats(d["image"][0].numpy()))
    return np.array(out)


def trainer_on(device, dummy=True):
    """The augscope trainer as `nnUNetTrainer.initialize` would leave it, for the patch."""
    from types import SimpleNamespace

    import augscope.nnunet as an
    cls = an.nnUNetTrainerAugscopeGPU
    trainer = cls.__new__(cls)
    trainer.configuration_manager = SimpleNamespace(patch_size=PATCH, use_mask_for_norm=[False])
    trainer.label_manager = SimpleNamespace(foreground_labels=[1], has_regions=False,
                                            foreground_regions=None, ignore_label=None)
    trainer.print_to_log_file = lambda *a, **k: None
    if not dummy:  # the 3D preset on the same patch: what the trainer did before dummy 2D
        trainer.configure_rotation_dummyDA_mirroring_and_inital_patch_size = \
            lambda: (None, False, None, None)
    trainer.is_cascaded = False
    trainer.device = torch.device(device)
    trainer.current_epoch = 0
    trainer.enable_deep_supervision = False
    trainer.augscope_preset = "nnunet-v2"
    trainer.augscope_seed = 9
    return trainer


def augscope_samples(img, dummy):
    trainer = trainer_on("cpu", dummy)
    batch = 16
    data = torch.from_numpy(np.stack([img[None]] * batch))
    target = torch.zeros((batch, 1, *INITIAL), dtype=torch.int16)
    out = []
    for _ in range(N // batch):
        o = trainer.augscope_batch({"data": data, "target": target})
        out += [stats(o["data"][b, 0].numpy()) for b in range(batch)]
    return np.array(out)


def test_dummy_2d_matches_nnunets_own_pipeline():
    img = volume()
    theirs = nnunet_samples(img)
    ours = augscope_samples(img, dummy=True)
    ps = [scipy_stats.ks_2samp(ours[:, k], theirs[:, k]).pvalue for k in range(len(NAMES))]
    low = [f"{n}: KS p {p:.3g}" for n, p in zip(NAMES, ps) if p <= 0.01]
    assert not low, low
    # The test tells the modes apart: the 3D preset on the same anisotropic patch (±30° about
    # every axis, interpolating across axis 0) is far from nnU-Net's dummy-2D pipeline.
    flat = augscope_samples(img, dummy=False)
    ps3 = [scipy_stats.ks_2samp(flat[:, k], theirs[:, k]).pvalue for k in range(len(NAMES))]
    assert min(ps3) < 1e-6, dict(zip(NAMES, ps3))


def test_dummy_2d_on_the_gpu_equals_the_cpu():
    """The same batches on a CUDA device (the image's 6 slices and the target's as channels of
    one batched call each) as on the CPU engine, to f32 rounding."""
    if not torch.cuda.is_available():
        pytest.skip("no usable CUDA device")
    img = volume()
    data = torch.from_numpy(np.stack([img[None]] * 4))
    target = torch.from_numpy(np.stack([(img[None] > 0.5).astype(np.int16)] * 4))
    cpu, gpu = trainer_on("cpu"), trainer_on("cuda")
    for _ in range(6):
        a = cpu.augscope_batch({"data": data, "target": target})
        b = gpu.augscope_batch({"data": data.cuda(), "target": target.cuda()})
        assert b["data"].is_cuda and b["target"].is_cuda
        assert torch.allclose(b["data"].cpu(), a["data"], atol=1e-4, rtol=0)
        # A label voxel whose source point sits within f32 rounding of a tie may take the
        # other neighbour.
        differ = (b["target"].cpu() != a["target"]).float().mean().item()
        assert differ < 1e-3, differ
