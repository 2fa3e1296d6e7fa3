"""The adapters run by the real MONAI, TorchIO and nnU-Net v2, against augscope's own transform.

Each adapter must give exactly `augscope.apply` of the plan it drew (the CLI equality of
`augscope.apply` is test_augscope.py's), in the library's own axis order, inside the library's own
machinery (MONAI's Compose and seeding, TorchIO's subjects, nnU-Net's training pipeline).
Skipped where the library is not installed.
"""
import json
import subprocess
import sys

import numpy as np
import pytest

import augscope
from augscope.adapters import AugscopeTransform, RandAugscoped

torch = pytest.importorskip("torch")

PRESET = {
    "version": 1,
    "name": "adapter test",
    "flip": {"p": [0.5, 0.5, 0.5]},
    "rotate": {"p": 1.0, "range_deg": [[-20.0, 20.0], [-10.0, 15.0], [-25.0, 5.0]]},
    "scale": {"p": 0.7, "range": [[0.85, 1.2]]},
    "elastic": {"p": 0.6, "alpha": [60.0, 120.0], "sigma": [3.0, 4.0]},
    "sampling": {"order": 3, "mode": "reflect", "cval": 0.0, "label_order": 0},
}


def scan(shape, seed=0):
    rng = np.random.default_rng(seed)
    v = rng.random(shape, dtype=np.float32)
    v[tuple(slice(n // 3, 2 * n // 3) for n in shape)] += 2.0
    return v


def seg(shape):
    s = np.zeros(shape, np.int64)
    s[tuple(slice(n // 4, n // 2) for n in shape)] = 1
    s[tuple(slice(n // 2, 3 * n // 4) for n in shape)] = 2
    return s


def zyx(a):
    """(C, x, y, z) -> (C, z, y, x)."""
    return np.ascontiguousarray(np.asarray(a).transpose(0, 3, 2, 1))


def expected(img_xyz, lab_xyz, plan):
    """augscope.apply in augscope's own order, brought back to (C, x, y, z)."""
    out = augscope.apply(zyx(img_xyz), plan, channels=True).image
    lp = dict(plan, order=0, cval=0.0)
    lab = augscope.apply(zyx(lab_xyz).astype(np.float32), lp, channels=True).image
    return out.transpose(0, 3, 2, 1), lab.transpose(0, 3, 2, 1)


def test_importing_augscope_imports_no_training_library():
    code = ("import sys, augscope, augscope.adapters, augscope.nnunet; "
            "bad = [m for m in ('monai', 'torchio', 'nnunetv2', 'batchgeneratorsv2', 'torch') "
            "if m in sys.modules]; print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_monai_dictionary_transform_in_compose():
    monai = pytest.importorskip("monai")
    from monai.data import MetaTensor
    from monai.transforms import Compose, Randomizable

    img = scan((1, 20, 18, 16), 1)
    lab = seg((1, 20, 18, 16))
    t = RandAugscoped(keys=["image"], label_keys=["label"], preset=PRESET)
    assert isinstance(t, Randomizable)
    pipeline = Compose([t])
    pipeline.set_random_state(seed=123)
    data = {"image": MetaTensor(torch.from_numpy(img), affine=torch.eye(4)),
            "label": MetaTensor(torch.from_numpy(lab), affine=torch.eye(4)), "id": 7}
    outs = [pipeline(data) for _ in range(3)]
    plans = [json.loads(o["augscope_plan"]) for o in outs]
    assert plans[0] != plans[1]
    for o, plan in zip(outs, plans):
        assert isinstance(o["image"], MetaTensor) and o["id"] == 7
        want_img, want_lab = expected(img, lab, plan)
        assert np.array_equal(o["image"].numpy(), want_img)
        assert o["label"].dtype == torch.int64
        assert np.array_equal(o["label"].numpy(), want_lab.astype(np.int64))
    # MONAI's seeding replays the same draws; the index key makes them independent of order
    pipeline.set_random_state(seed=123)
    assert json.loads(pipeline(data)["augscope_plan"]) == plans[0]
    keyed = RandAugscoped(keys="image", preset=PRESET, index_key="id", seed=5)
    a = keyed({"image": img, "id": 7})
    b = keyed({"image": img, "id": 7})
    assert a["augscope_plan"] == b["augscope_plan"]
    assert a["augscope_plan"] == json.dumps(augscope.Augment(PRESET, seed=5).draw(
        [16, 18, 20], 7)[0])


def test_monai_records_batch_in_a_dataloader():
    """Samples of different draws (done lists of different lengths and keys) batch: each
    record is one JSON string per sample."""
    pytest.importorskip("monai")
    from monai.data import DataLoader as MonaiLoader
    from monai.data import Dataset
    from torch.utils.data import DataLoader

    data = [{"image": scan((1, 10, 9, 8), i), "id": i} for i in range(4)]
    for loader in (DataLoader, MonaiLoader):
        t = RandAugscoped(keys="image", preset=PRESET, index_key="id", seed=1)
        dataset = Dataset(data, transform=t)
        # MONAI's Dataset wraps the transform in a Compose, which reseeds it from an unseeded
        # generator (unless monai.utils.set_determinism ran): seed it again after.
        t.set_random_state(seed=1)
        # A seeded generator: MONAI's loader draws the transform's seed from it (from torch's
        # global generator otherwise, which would make the draws, and this test, random).
        batches = list(loader(dataset, batch_size=2, num_workers=0,
                              generator=torch.Generator().manual_seed(5)))
        assert len(batches) == 2 and batches[0]["image"].shape == (2, 1, 10, 9, 8)
        # MONAI's loader seeds the transform: the draws are those of its seed now.
        want = [t.aug.draw([8, 9, 10], i) for i in range(4)]
        assert len({json.dumps(sorted(d["transform"] for d in w[1])) for w in want}) > 1, \
            "the draws must differ for this test to mean something"
        dones = [json.loads(s) for b in batches for s in b["augscope_done"]]
        plans = [json.loads(s) for b in batches for s in b["augscope_plan"]]
        assert dones == [w[1] for w in want]
        assert plans == [w[0] for w in want]


MM_PRESET = {
    "version": 1,
    "name": "mm space",
    "space": "mm",
    "rotate": {"p": 1.0, "range_deg": [[12.0, 12.0], [0.0, 0.0], [0.0, 0.0]]},
    "translate": {"p": 1.0, "range": [[3.0, 3.0], [-2.0, -2.0], [1.5, 1.5]], "unit": "mm"},
    "sampling": {"order": 1, "mode": "constant", "cval": 0.0, "label_order": 0},
}


def test_the_voxel_size_of_metatensors_and_torchio_images_reaches_the_draw():
    """MONAI's pixdim and TorchIO's spacing (x first) are the scan's voxel size in the draw and
    the apply: augscope's transform of the scan with that spacing."""
    img = scan((1, 16, 14, 12), 2)  # (C, x, y, z)
    affine = np.diag([0.5, 1.0, 2.0, 1.0])
    spacing_zyx = [2.0, 1.0, 0.5]
    want = augscope.Augment(MM_PRESET, seed=4)(zyx(img), index=0, spacing=spacing_zyx)
    want_xyz = want.image.transpose(0, 3, 2, 1)
    iso = augscope.Augment(MM_PRESET, seed=4)(zyx(img), index=0).image.transpose(0, 3, 2, 1)
    assert not np.array_equal(want_xyz, iso)
    got = []
    if _has("monai"):
        from monai.data import MetaTensor
        t = RandAugscoped(keys="image", preset=MM_PRESET, seed=4, index_key="id")
        out = t({"image": MetaTensor(torch.from_numpy(img), affine=torch.from_numpy(affine)),
                 "id": 0})
        assert json.loads(out["augscope_plan"])["spacing_mm"] == spacing_zyx
        got.append(out["image"].numpy())
    if _has("torchio"):
        import torchio as tio
        subject = tio.Subject(t1=tio.ScalarImage(tensor=torch.from_numpy(img), affine=affine))
        out = AugscopeTransform(MM_PRESET, seed=4)(subject, index=0)
        assert json.loads(out["augscope_done"]) == want.done
        got.append(out["t1"].data.numpy())
    if not got:
        pytest.skip("neither MONAI nor TorchIO is installed")
    for g in got:
        assert np.array_equal(g, want_xyz)


def _has(module):
    try:
        __import__(module)
    except ImportError:
        return False
    return True


def test_monai_transform_survives_pickling_for_spawned_workers():
    pytest.importorskip("monai")
    import pickle
    t = RandAugscoped(keys="image", preset=PRESET, seed=9)
    t({"image": scan((1, 8, 9, 10))})
    u = pickle.loads(pickle.dumps(t))
    img = scan((1, 8, 9, 10), 3)
    assert u({"image": img})["augscope_plan"] == t({"image": img})["augscope_plan"]


def test_monai_missing_keys_are_an_error_unless_allowed():
    t = RandAugscoped(keys=["image", "other"], preset=PRESET)
    with pytest.raises(KeyError, match="other"):
        t({"image": scan((1, 6, 6, 6))})
    t2 = RandAugscoped(keys=["image", "other"], preset=PRESET, allow_missing_keys=True)
    assert "other" not in t2({"image": scan((1, 6, 6, 6))})


def test_torchio_subject_images_and_label_maps():
    tio = pytest.importorskip("torchio")
    img = scan((1, 18, 16, 14), 4)
    lab = seg((1, 18, 16, 14))
    affine = np.diag([2.0, 1.0, 1.5, 1.0])
    subject = tio.Subject(t1=tio.ScalarImage(tensor=torch.from_numpy(img), affine=affine),
                          seg=tio.LabelMap(tensor=torch.from_numpy(lab), affine=affine))
    t = AugscopeTransform(PRESET, seed=3)
    out = tio.Compose([t])(subject)
    plan, done = t.aug.draw([14, 16, 18], 0)
    assert json.loads(out["augscope_done"]) == done
    want_img, want_lab = expected(img, lab, plan)
    assert np.array_equal(out["t1"].data.numpy(), want_img)
    assert np.array_equal(out["seg"].data.numpy(), want_lab.astype(np.int64))
    assert np.array_equal(out["t1"].affine, affine)
    # the input subject is untouched
    assert np.array_equal(subject["t1"].data.numpy(), img)
    # an explicit index replays; exclude leaves an image alone
    again = AugscopeTransform(PRESET, seed=3, exclude=["seg"])(subject, index=0)
    assert np.array_equal(again["t1"].data.numpy(), want_img)
    assert np.array_equal(again["seg"].data.numpy(), lab)


def test_patch_size_in_the_arrays_order():
    img = scan((1, 20, 16, 12), 6)
    t = RandAugscoped(keys="image", preset=PRESET, patch_size=(10, 8, 6), seed=2)
    out = t({"image": img})
    assert out["image"].shape == (1, 10, 8, 6)
    plan = json.loads(out["augscope_plan"])
    assert plan["out_shape"] == [6, 8, 10]


def test_nnunet_trainer_moves_the_spatial_part_to_augscope():
    pytest.importorskip("nnunetv2")
    from types import SimpleNamespace

    from batchgeneratorsv2.transforms.spatial.mirroring import MirrorTransform
    from batchgeneratorsv2.transforms.spatial.spatial import SpatialTransform
    from batchgeneratorsv2.transforms.utils.deep_supervision_downsampling import \
        DownsampleSegForDSTransform
    from nnunetv2.training.nnUNetTrainer.nnUNetTrainer import nnUNetTrainer

    import augscope.nnunet as an
    cls = an.nnUNetTrainerAugscopeGPU
    assert issubclass(cls, nnUNetTrainer)
    patch = [16, 16, 16]
    scales = [[1, 1, 1], [0.5, 0.5, 0.5], [0.25, 0.25, 0.25]]
    compose = cls.get_training_transforms(patch, ((-0.5, 0.5),) * 3, scales, (0, 1, 2), False,
                                          use_mask_for_norm=None, is_cascaded=False,
                                          foreground_labels=[1, 2], regions=None,
                                          ignore_label=None)
    kinds = [type(t) for t in compose.transforms]
    assert SpatialTransform not in kinds and MirrorTransform not in kinds
    assert DownsampleSegForDSTransform not in kinds
    # nnU-Net's intensity transforms leave the CPU pipeline too: augscope runs the preset's.
    inner = [type(getattr(t, "transform", t)).__name__ for t in compose.transforms]
    assert not {"GaussianNoiseTransform", "GaussianBlurTransform", "GammaTransform",
                "ContrastTransform", "MultiplicativeBrightnessTransform",
                "SimulateLowResolutionTransform"} & set(inner), inner

    assert compose.transforms == [], "the data loader transforms nothing"

    trainer = cls.__new__(cls)
    # nnU-Net's use_mask_for_norm: its MaskImageTransform zeroes the image where the label map
    # is -1 after the intensity steps, then RemoveLabelTansform makes -1 a 0
    trainer.configuration_manager = SimpleNamespace(patch_size=patch, use_mask_for_norm=[True])
    trainer.label_manager = SimpleNamespace(foreground_labels=[1, 2], has_regions=False,
                                            foreground_regions=None, ignore_label=None)
    trainer.print_to_log_file = lambda *a, **k: None
    trainer.is_cascaded = False
    trainer.device = torch.device("cpu")
    trainer.current_epoch = 2
    trainer.enable_deep_supervision = True
    trainer._get_deep_supervision_scales = lambda: scales
    trainer.augscope_preset = json.dumps(PRESET)
    trainer.augscope_seed = 11
    data = torch.from_numpy(np.stack([scan((1, 22, 24, 20), s) for s in range(2)]))
    target = np.stack([seg((1, 22, 24, 20))] * 2).astype(np.int16)
    target[:, :, :6] = -1  # outside nnU-Net's nonzero mask
    target = torch.from_numpy(target)

    def expect(b, plan):
        """augscope's transform, then nnU-Net's mask and -1 removal."""
        img = augscope.apply(data[b], plan, channels=True).image
        lab = augscope.apply(target[b].float(), dict(plan, order=0, cval=0.0, intensity=[]),
                             channels=True).image.round().to(torch.int16)
        img[:, lab[0] < 0] = 0
        lab[lab == -1] = 0
        return img, lab

    out = trainer.augscope_batch({"data": data, "target": target, "keys": ["a", "b"]})
    assert out["data"].shape == (2, 1, 16, 16, 16) and out["keys"] == ["a", "b"]
    assert [tuple(t.shape) for t in out["target"]] == [(2, 1, 16, 16, 16), (2, 1, 8, 8, 8),
                                                      (2, 1, 4, 4, 4)]
    aug = augscope.Augment(json.dumps(PRESET), seed=11, patch_size=patch)
    ds = DownsampleSegForDSTransform(ds_scales=scales)
    masked = 0
    for b in range(2):
        plan, _ = aug.draw([22, 24, 20], b, 2)
        want, lab = expect(b, plan)
        masked += int((want == 0).sum())
        assert torch.equal(out["data"][b], want)
        assert (out["target"][0][b] >= 0).all()
        for k, w in enumerate(ds._apply_to_segmentation(lab)):
            assert torch.equal(out["target"][k][b], w)
    # the next batch of the epoch continues the sample count
    out2 = trainer.augscope_batch({"data": data, "target": target})
    assert masked > 0, "no voxel of the -1 region reached the patches"
    plan2, _ = aug.draw([22, 24, 20], 2, 2)
    assert torch.equal(out2["data"][0], expect(0, plan2)[0])
    # nnunet-v2: the intensity steps reach the image, never the target.
    trainer._augscope = None
    trainer.augscope_preset = "nnunet-v2"
    aug = augscope.Augment("nnunet-v2", seed=11, patch_size=patch)
    seen = 0
    for k in range(6):
        out = trainer.augscope_batch({"data": data, "target": target})
        for b in range(2):
            plan, _ = aug.draw([22, 24, 20], 2 * k + b, 2, channels=1)
            seen += bool(plan.get("intensity"))
            want, lab = expect(b, plan)
            assert torch.equal(out["data"][b], want)
            assert torch.equal(out["target"][0][b], ds._apply_to_segmentation(lab)[0])
    assert seen > 0, "no draw of twelve had an intensity step"


def test_nnunet_trainer_dummy_2d_runs_the_spatial_part_in_2d():
    """An anisotropic patch (nnU-Net's do_dummy_2d_data_aug): the preset's spatial part in 2D
    over the last two axes, each slice of axis 0 a channel, with the preset's 2D rotation range
    (nnU-Net's ±180°); then its mirror and intensity steps in 3D, low resolution leaving axis 0
    alone, from the second seed. Sample for sample, the two augscope calls it is made of."""
    pytest.importorskip("nnunetv2")
    from types import SimpleNamespace

    import augscope.nnunet as an
    cls = an.nnUNetTrainerAugscopeGPU
    patch = [6, 24, 24]  # 24 / 6 = 4 > nnU-Net's ANISO_THRESHOLD (3)
    trainer = cls.__new__(cls)
    trainer.configuration_manager = SimpleNamespace(patch_size=patch, use_mask_for_norm=[False])
    trainer.label_manager = SimpleNamespace(foreground_labels=[1, 2], has_regions=False,
                                            foreground_regions=None, ignore_label=None)
    trainer.print_to_log_file = lambda *a, **k: None
    assert trainer.configure_rotation_dummyDA_mirroring_and_inital_patch_size()[1]
    trainer.is_cascaded = False
    trainer.device = torch.device("cpu")
    trainer.current_epoch = 1
    trainer.enable_deep_supervision = False
    trainer.augscope_preset = "nnunet-v2"
    trainer.augscope_seed = 5
    data = torch.from_numpy(np.stack([scan((1, 6, 34, 30), s) for s in range(2)]))
    target = torch.from_numpy(np.stack([seg((1, 6, 34, 30))] * 2).astype(np.int16))

    p = augscope.preset("nnunet-v2")
    spatial = {k: v for k, v in p.items() if k not in ("flip", "intensity")}
    rest = {k: v for k, v in p.items() if k not in ("rotate", "scale")}
    rest["intensity"] = [dict(s, ignore_axes=[0]) if s["step"] == "low_resolution" else s
                         for s in p["intensity"]]
    a2 = augscope.Augment(spatial, seed=5, ndim=2, patch_size=[24, 24])
    a3 = augscope.Augment(rest, seed=5 ^ an.DUMMY_2D_SEED)
    angles, lowres = [], 0
    for k in range(8):
        out = trainer.augscope_batch({"data": data, "target": target})
        assert out["data"].shape == (2, 1, 6, 24, 24) and out["target"].shape == (2, 1, 6, 24, 24)
        for b in range(2):
            plan2, _ = a2.draw([34, 30], 2 * k + b, 1)
            angles += plan2.get("rotate_rad") or []
            img = augscope.apply(data[b].reshape(6, 34, 30), plan2, channels=True).image
            lab = augscope.apply(target[b].reshape(6, 34, 30).float(),
                                 dict(plan2, order=0, cval=0.0), channels=True).image
            plan3, _ = a3.draw([6, 24, 24], 2 * k + b, 1, channels=1)
            lowres += any("low_resolution" in s for s in plan3.get("intensity") or [])
            want = augscope.apply(img.reshape(1, 6, 24, 24), plan3, channels=True).image
            want_lab = augscope.apply(lab.reshape(1, 6, 24, 24),
                                      dict(plan3, order=0, cval=0.0, intensity=[]),
                                      channels=True).image.round().to(torch.int16)
            assert torch.equal(out["data"][b], want), (k, b)
            assert torch.equal(out["target"][b], want_lab), (k, b)
    # The 2D rotation is one in-plane angle from nnU-Net's ±180°, beyond the 3D preset's ±30°.
    assert angles and max(abs(a) for a in angles) > np.radians(30), angles
    assert lowres > 0, "no draw of sixteen had the low-resolution step"


INTENSITY = dict(PRESET, normalize={"method": "nnunet_zscore"}, intensity=[
    {"step": "gaussian_noise", "p": 1.0, "std": [0.05, 0.2], "p_per_channel": 1.0,
     "synchronize_channels": False},
    {"step": "brightness", "p": 1.0, "multiplier": [0.7, 1.3], "p_per_channel": 1.0,
     "synchronize_channels": False}])


def test_adapters_draw_per_channel_and_normalise_images_only():
    """A two-channel image gets a draw per channel (not one draw shared by both), the preset's
    normalisation reaches the images (never the label maps), and normalize=False leaves it."""
    img = np.stack([scan((18, 16, 14), 1), 5 * scan((18, 16, 14), 2) + 3])
    lab = seg((1, 18, 16, 14))
    t = RandAugscoped(keys="image", label_keys="label", preset=INTENSITY, seed=4)
    out = t({"image": img, "label": lab})
    plan = json.loads(out["augscope_plan"])
    mults = [s["brightness"]["multipliers"] for s in plan["intensity"] if "brightness" in s]
    assert len(mults[0]) == 2 and mults[0][0] != mults[0][1], plan["intensity"]
    norm = augscope.normalize(zyx(img), {"method": "nnunet_zscore"}, channels=True)
    want = augscope.apply(norm, plan, channels=True).image.transpose(0, 3, 2, 1)
    assert np.array_equal(out["image"], want)
    lp = dict(plan, order=0, cval=0.0, intensity=[])
    want_lab = augscope.apply(zyx(lab).astype(np.float32), lp, channels=True).image
    assert np.array_equal(out["label"], want_lab.transpose(0, 3, 2, 1).astype(lab.dtype))
    raw = RandAugscoped(keys="image", preset=INTENSITY, seed=4, normalize=False)({"image": img})
    want_raw = augscope.apply(zyx(img), plan, channels=True).image.transpose(0, 3, 2, 1)
    assert np.array_equal(raw["image"], want_raw)

    tio = pytest.importorskip("torchio")
    subject = tio.Subject(t1=tio.ScalarImage(tensor=torch.from_numpy(img)),
                          seg=tio.LabelMap(tensor=torch.from_numpy(lab)))
    tt = AugscopeTransform(INTENSITY, seed=4)
    got = tt(subject, index=0)
    plan_t, _ = tt.aug.draw([14, 16, 18], 0, channels=2)
    want_t = augscope.apply(augscope.normalize(zyx(img), {"method": "nnunet_zscore"},
                                               channels=True), plan_t, channels=True).image
    assert np.array_equal(got["t1"].data.numpy(), want_t.transpose(0, 3, 2, 1))


def test_monai_transform_on_a_collated_batch_draws_per_sample_in_one_call():
    """After ThreadDataLoader (or a DataLoader) the dictionary holds (B, C, *spatial) arrays:
    sample b gets the draw of index counter + b (or of its index_key value), the same as the
    transform on the sample alone."""
    imgs = np.stack([np.stack([scan((18, 16, 14), 2 * b), scan((18, 16, 14), 2 * b + 1)])
                     for b in range(3)])
    labs = np.stack([seg((1, 18, 16, 14))] * 3)
    t = RandAugscoped(keys="image", label_keys="label", preset=INTENSITY, seed=9)
    out = t({"image": torch.from_numpy(imgs), "label": torch.from_numpy(labs)})
    assert out["image"].shape == (3, 2, 18, 16, 14) and len(out["augscope_plan"]) == 3
    one = RandAugscoped(keys="image", label_keys="label", preset=INTENSITY, seed=9,
                        index_key="i")
    for b in range(3):
        alone = one({"image": torch.from_numpy(imgs[b]), "label": torch.from_numpy(labs[b]),
                     "i": b})
        assert torch.equal(out["image"][b], alone["image"]), b
        assert torch.equal(out["label"][b], alone["label"]), b
        assert out["augscope_plan"][b] == alone["augscope_plan"]
    # index_key on a batch: the indices it holds
    again = one({"image": torch.from_numpy(imgs), "label": torch.from_numpy(labs),
                 "i": torch.tensor([0, 1, 2])})
    assert torch.equal(again["image"], out["image"])
