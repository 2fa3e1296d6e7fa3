"""An nnU-Net v2 trainer whose augmentation is augscope's, on the GPU.

`nnUNetTrainerAugscopeGPU` is nnU-Net's `nnUNetTrainer` with one change: the training
augmentation (nnU-Net's `SpatialTransform`, with its rotation, scaling, elastic deformation and
centre crop, its seven intensity transforms and `MirrorTransform`) leaves the CPU data-loader
processes and runs in `train_step` on the training GPU, through augscope: the preset you tuned in
the explorer, spatial part and `[[intensity]]` steps, exact scipy boundary modes, orders 0/1/3,
the dense elastic field and the noise made on the device, on the batch where it already is. The
rest of nnU-Net's pipeline follows on the device tensors, in nnU-Net's order (the mask of
`use_mask_for_norm`, which zeroes the image outside the nonzero region after the intensity steps,
the −1 label's removal, the cascade's and the regions' steps), and the deep-supervision targets
are made on the GPU by batchgeneratorsv2's own `DownsampleSegForDSTransform`. The data loader
transforms nothing.

Where nnU-Net uses its dummy-2D augmentation (3D patches whose first axis is much shorter than
the others: `do_dummy_2d_data_aug` of `configure_rotation_dummyDA_mirroring_and_inital_patch_size`),
so does this trainer: the preset's spatial part runs in 2D over the last two axes, each slice of
the first axis a channel (the preset's 2D rotation range, nnU-Net's ±180°), then its mirror and
intensity steps in 3D, low resolution leaving the first axis alone, as nnU-Net's
`Convert3DTo2DTransform`, `SpatialTransform`, `Convert2DTo3DTransform` and
`SimulateLowResolutionTransform(ignore_axes=(0,))` do. The two parts draw from two seeds
(`augscope_seed` and `augscope_seed` XOR `DUMMY_2D_SEED`).

The `nnunet-v2` preset mirrors after the intensity steps, in nnU-Net's order (its `[flip]`
section's `after_intensity`); a preset without it mirrors with the resample, before them.

The training cases stay on the GPU when they fit a quarter of its free memory
(`AUGSCOPE_RESIDENT`: "auto", the default; "1" always; "0" never): nnU-Net's own data loader
then only chooses the cases and boxes in the training process (its sampling and foreground
oversampling), the boxes are cut on the device, and no worker process loads or copies a case.
Otherwise nnU-Net's workers load and crop the larger initial patch, and the batch crosses to the
GPU as before. Validation keeps nnU-Net's loader.

Use: make the class visible to nnU-Net (it looks for trainers inside its own package) with
`python -m augscope.nnunet install`, then `nnUNetv2_train DATASET 3d_fullres FOLD -tr
nnUNetTrainerAugscopeGPU`. The preset and seed come from `AUGSCOPE_PRESET` (a bundled name or a
TOML path; default "nnunet-v2") and `AUGSCOPE_SEED` (default 0), or from a subclass's
`augscope_preset` and `augscope_seed`. Sample j of epoch e gets the draw of `augscope.Augment`'s
rule.

Importing this module imports nothing of nnU-Net; the trainer class is built on first access.
"""
import os
import sys

__all__ = ["nnUNetTrainerAugscopeGPU", "install", "DUMMY_2D_SEED"]

# The second seed of the dummy-2D mode (mirror and intensity steps) is the trainer's XOR this.
DUMMY_2D_SEED = 0x9E37_79B9_7F4A_7C15

_CLASS = []


def __getattr__(name):
    if name == "nnUNetTrainerAugscopeGPU":
        if not _CLASS:
            _CLASS.append(_build())
        return _CLASS[0]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _build():
    import torch
    from batchgeneratorsv2.transforms.intensity.brightness import \
        MultiplicativeBrightnessTransform
    from batchgeneratorsv2.transforms.intensity.contrast import ContrastTransform
    from batchgeneratorsv2.transforms.intensity.gamma import GammaTransform
    from batchgeneratorsv2.transforms.intensity.gaussian_noise import GaussianNoiseTransform
    from batchgeneratorsv2.transforms.noise.gaussian_blur import GaussianBlurTransform
    from batchgeneratorsv2.transforms.spatial.low_resolution import \
        SimulateLowResolutionTransform
    from batchgeneratorsv2.transforms.spatial.mirroring import MirrorTransform
    from batchgeneratorsv2.transforms.spatial.spatial import SpatialTransform
    from batchgeneratorsv2.transforms.utils.deep_supervision_downsampling import \
        DownsampleSegForDSTransform
    from batchgeneratorsv2.transforms.utils.pseudo2d import (Convert2DTo3DTransform,
                                                             Convert3DTo2DTransform)
    from nnunetv2.training.nnUNetTrainer.nnUNetTrainer import nnUNetTrainer

    from batchgeneratorsv2.transforms.utils.random import RandomTransform

    from . import Augment

    moved = (SpatialTransform, MirrorTransform, Convert3DTo2DTransform, Convert2DTo3DTransform)
    intensity = (GaussianNoiseTransform, GaussianBlurTransform, MultiplicativeBrightnessTransform,
                 ContrastTransform, SimulateLowResolutionTransform, GammaTransform)

    def runs_on_the_gpu(t):
        return isinstance(t, moved) or (isinstance(t, RandomTransform)
                                        and isinstance(t.transform, intensity))

    class nnUNetTrainerAugscopeGPU(nnUNetTrainer):
        """nnUNetTrainer with augscope's spatial augmentation on the training GPU (see the
        module's text)."""

        augscope_preset = os.environ.get("AUGSCOPE_PRESET", "nnunet-v2")
        augscope_seed = int(os.environ.get("AUGSCOPE_SEED", "0"))

        @staticmethod
        def get_training_transforms(patch_size, rotation_for_DA, deep_supervision_scales,
                                    mirror_axes, do_dummy_2d_data_aug, *args, **kwargs):
            """Nothing for the data loader: nnU-Net's whole training pipeline runs in
            `augscope_batch` on the GPU (augscope's transform, then `augscope_after`)."""
            compose = nnUNetTrainer.get_training_transforms(
                patch_size, rotation_for_DA, None, mirror_axes, do_dummy_2d_data_aug, *args,
                **kwargs)
            compose.transforms = []
            return compose

        def augscope_after(self):
            """What nnU-Net applies after its spatial, intensity and mirror transforms (the mask
            of `use_mask_for_norm`, the −1 label's removal, the cascade's and the regions'
            steps), in its order, without the deep-supervision downsampling: run on the device
            tensors of each sample once augscope's transform is done, as nnU-Net runs them."""
            after = getattr(self, "_augscope_after", None)
            if after is None:
                lm = self.label_manager
                after = nnUNetTrainer.get_training_transforms(
                    self.configuration_manager.patch_size, None, None, None, False,
                    use_mask_for_norm=self.configuration_manager.use_mask_for_norm,
                    is_cascaded=self.is_cascaded, foreground_labels=lm.foreground_labels,
                    regions=lm.foreground_regions if lm.has_regions else None,
                    ignore_label=lm.ignore_label)
                after.transforms = [t for t in after.transforms if not runs_on_the_gpu(t)]
                self._augscope_after = after
            return after

        def augscope_augment(self):
            """The transform of this trainer: the preset, seeded, cutting nnU-Net's patch from
            the centre of the data loader's larger initial patch (as nnU-Net's SpatialTransform
            does), on the trainer's device; in nnU-Net's dummy-2D mode, its spatial part in 2D
            and the rest in 3D (`Dummy2D`)."""
            aug = getattr(self, "_augscope", None)
            if aug is None:
                patch = [int(i) for i in self.configuration_manager.patch_size]
                dev = self.device
                device = f"cuda:{dev.index or 0}" if dev.type == "cuda" else "cpu"
                dummy_2d = len(patch) == 3 and bool(
                    self.configure_rotation_dummyDA_mirroring_and_inital_patch_size()[1])
                if dummy_2d:
                    aug = Dummy2D(self.augscope_preset, self.augscope_seed, patch, device)
                else:
                    aug = Augment(self.augscope_preset, seed=self.augscope_seed,
                                  ndim=len(patch), device=device, patch_size=patch,
                                  patch_center="centre")
                self._augscope = aug
                self._augscope_epoch = None
                self._augscope_seen = 0
            return aug

        def augscope_batch(self, batch):
            """One training batch (`data` (B, C, *initial), `target` (B, K, *initial)) through
            augscope on the trainer's device in one engine call (batched launches, no wait for
            the device per sample): each sample its own draw, image and every target channel
            with the same plan (targets with order 0, background 0), then nnU-Net's
            deep-supervision targets. Returns the batch `train_step` expects."""
            aug = self.augscope_augment()
            epoch = int(getattr(self, "current_epoch", 0))
            if self._augscope_epoch != epoch:
                self._augscope_epoch, self._augscope_seen = epoch, 0
            data = batch["data"].to(self.device, non_blocking=True)
            target = batch["target"]
            if isinstance(target, list):
                raise RuntimeError("nnUNetTrainerAugscopeGPU makes the deep-supervision targets "
                                   "itself: the data loader must give one target per sample")
            target = target.to(self.device, non_blocking=True)
            # The whole batch in one call: every sample its own draw, the image and the target
            # channels in the same batched launches (targets with order 0, background 0).
            out = aug(data, target, index=self._augscope_seen, epoch=epoch)
            self._augscope_seen += data.shape[0]
            data, seg = out.image, out.label
            after = self.augscope_after()
            if after.transforms:
                done = [after(**{"image": data[b], "segmentation": seg[b]})
                        for b in range(data.shape[0])]
                data = torch.stack([d["image"] for d in done])
                seg = torch.stack([d["segmentation"] for d in done])
            scales = self._get_deep_supervision_scales() \
                if getattr(self, "enable_deep_supervision", False) else None
            if scales is not None:
                ds = DownsampleSegForDSTransform(ds_scales=scales)
                per = [ds._apply_to_segmentation(s) for s in seg]
                seg = [torch.stack([p[k] for p in per]) for k in range(len(scales))]
            out = dict(batch)
            out["data"], out["target"] = data, seg
            return out

        def train_step(self, batch):
            return super().train_step(self.augscope_batch(batch))

        def get_dataloaders(self):
            """nnU-Net's loaders, or, when the training cases fit the GPU (`augscope_resident`),
            a loader that keeps them there: no worker processes, each batch cut on the device
            at nnU-Net's own choice of cases and boxes."""
            mode = str(self.augscope_resident).lower()
            if self.device.type != "cuda" or mode in ("0", "false", "off"):
                return super().get_dataloaders()
            from batchgenerators.dataloading.nondet_multi_threaded_augmenter import \
                NonDetMultiThreadedAugmenter
            from batchgenerators.dataloading.single_threaded_augmenter import \
                SingleThreadedAugmenter
            from nnunetv2.training.dataloading.data_loader import nnUNetDataLoader
            from nnunetv2.utilities.default_n_proc_DA import get_allowed_n_proc_DA
            from nnunetv2.training.dataloading.nnunet_dataset import infer_dataset_class
            if self.dataset_class is None:
                self.dataset_class = infer_dataset_class(self.preprocessed_dataset_folder)
            if self.is_cascaded:
                return super().get_dataloaders()
            dataset_tr, dataset_val = self.get_tr_and_val_datasets()
            free, _ = torch.cuda.mem_get_info(self.device)
            need = _resident_bytes(dataset_tr)
            if mode != "1" and need > free // 4:
                self.print_to_log_file(f"augscope: the training cases ({need / 2**30:.1f} GiB) "
                                       f"do not fit a quarter of the GPU's free memory; they "
                                       f"stay in the data-loader workers")
                return super().get_dataloaders()
            _, _, initial, _ = self.configure_rotation_dummyDA_mirroring_and_inital_patch_size()
            patch = self.configuration_manager.patch_size

            def loader(dataset, size, transforms):
                """nnU-Net's data loader, as its get_dataloaders makes it."""
                return nnUNetDataLoader(
                    dataset, self.batch_size, size, patch, self.label_manager,
                    oversample_foreground_percent=self.oversample_foreground_percent,
                    sampling_probabilities=None, pad_sides=None, transforms=transforms,
                    probabilistic_oversampling=self.probabilistic_oversampling)

            # nnU-Net's own loader picks the cases and boxes (foreground oversampling included);
            # it loads nothing itself.
            picker = loader(dataset_tr, initial, None)
            train = _ResidentLoader(picker, dataset_tr, self.device, None)
            self.print_to_log_file(f"augscope: {len(train.cases)} training cases resident on "
                                   f"{self.device} ({need / 2**30:.2f} GiB)")
            # nnU-Net's validation loader, as nnU-Net makes it.
            lm = self.label_manager
            val_transforms = self.get_validation_transforms(
                self._get_deep_supervision_scales(), is_cascaded=self.is_cascaded,
                foreground_labels=lm.foreground_labels,
                regions=lm.foreground_regions if lm.has_regions else None,
                ignore_label=lm.ignore_label)
            dl_val = loader(dataset_val, patch, val_transforms)
            n = get_allowed_n_proc_DA()
            val = SingleThreadedAugmenter(dl_val, None) if n == 0 else \
                NonDetMultiThreadedAugmenter(data_loader=dl_val, transform=None,
                                             num_processes=max(1, n // 2),
                                             num_cached=max(3, n // 4), seeds=None,
                                             pin_memory=True, wait_time=0.002)
            _ = next(val)
            return train, val

    nnUNetTrainerAugscopeGPU.augscope_resident = os.environ.get("AUGSCOPE_RESIDENT", "auto")
    nnUNetTrainerAugscopeGPU.__module__ = __name__
    return nnUNetTrainerAugscopeGPU


class Dummy2D:
    """nnU-Net's dummy-2D augmentation with a preset: the preset's spatial part (rotation,
    scaling, elastic deformation, translation, with the patch cut) in 2D over the last two axes
    of `(B, C, X, Y, Z)`, the X slices as channels, then its mirror and intensity steps in 3D,
    low resolution leaving axis 0 alone (and a `[normalize]` normalising the 3D patch after the
    2D part). `spatial` and `rest` are the two `Augment`s."""

    def __init__(self, preset, seed, patch, device):
        from . import Augment
        from . import preset as load
        p = load(preset)
        spatial = {k: v for k, v in p.items() if k not in ("flip", "intensity", "normalize")}
        rest = {k: v for k, v in p.items()
                if k not in ("rotate", "scale", "elastic", "translate")}
        rest["intensity"] = [
            dict(s, ignore_axes=sorted(set(s.get("ignore_axes") or []) | {0}))
            if s.get("step") == "low_resolution" else s
            for s in p.get("intensity") or []]
        self.spatial = Augment(spatial, seed=seed, ndim=2, device=device,
                               patch_size=list(patch[1:]), patch_center="centre",
                               normalize=False)
        # A `[normalize]` normalises each channel of the whole 3D patch (never a slice): after
        # the 2D part, before the mirror and the intensity steps.
        self.rest = Augment(rest, seed=(int(seed) ^ DUMMY_2D_SEED) % (1 << 64), ndim=3,
                            device=device)

    def __call__(self, data, target, index, epoch):
        """The batch `data` (B, C, X, Yi, Zi) and `target` (B, K, X, Yi, Zi): the patch (B, C,
        X, Y, Z) and its target, sample b with the draws of index + b."""
        b, c, x = data.shape[:3]
        k = target.shape[1]
        flat = self.spatial(data.reshape(b, c * x, *data.shape[3:]),
                            target.reshape(b, k * x, *target.shape[3:]), index=index,
                            epoch=epoch)
        image = flat.image.reshape(b, c, x, *flat.image.shape[2:])
        label = flat.label.reshape(b, k, x, *flat.label.shape[2:])
        return self.rest(image, label, index=index, epoch=epoch)


def _resident_bytes(dataset):
    """The device memory the cases of `dataset` take: float32 images and int16 label maps."""
    import numpy as np
    total = 0
    for key in dataset.identifiers:
        data, seg, _, _ = dataset.load_case(key)
        total += int(np.prod(data.shape)) * 4 + int(np.prod(seg.shape)) * 2
    return total


class _ResidentLoader:
    """Training batches cut from cases that stay in GPU memory: nnU-Net's data loader chooses the
    cases and the boxes (its sampling and foreground oversampling, in this process), and the
    boxes are cut on the device (padded with 0, label maps with -1, as nnU-Net pads); then
    `transforms`, if any, per sample."""

    def __init__(self, picker, dataset, device, transforms):
        import numpy as np
        import torch
        self.picker, self.device, self.transforms = picker, device, transforms
        self.cases = {}
        for key in dataset.identifiers:
            data, seg, _, props = dataset.load_case(key)
            self.cases[key] = (
                torch.from_numpy(np.ascontiguousarray(data[:], dtype=np.float32)).to(device),
                torch.from_numpy(np.ascontiguousarray(seg[:]).astype(np.int16)).to(device),
                props["class_locations"])

    def __iter__(self):
        return self

    def __next__(self):
        import torch
        keys = self.picker.get_indices()
        images, segs = [], []
        for j, key in enumerate(keys):
            data, seg, locations = self.cases[key]
            lbs, ubs = self.picker.get_bbox(data.shape[1:], self.picker.get_do_oversample(j),
                                            locations)
            img, lab = _crop_pad(data, lbs, ubs, 0.0), _crop_pad(seg, lbs, ubs, -1)
            if self.transforms is not None:
                out = self.transforms(**{"image": img, "segmentation": lab})
                img, lab = out["image"], out["segmentation"]
            images.append(img)
            segs.append(lab)
        return {"data": torch.stack(images), "target": torch.stack(segs), "keys": keys}


def _crop_pad(t, lbs, ubs, value):
    """The box [lbs, ubs) of `t` (C, *shape) on its device, what lies outside `t` set to
    `value` (nnU-Net's crop_and_pad_nd)."""
    import torch
    out = torch.full((t.shape[0], *[u - lo for lo, u in zip(lbs, ubs)]), value, dtype=t.dtype,
                     device=t.device)
    src, dst = [slice(None)], [slice(None)]
    for lo, u, n in zip(lbs, ubs, t.shape[1:]):
        a, b = max(lo, 0), min(u, n)
        if a >= b:
            return out
        src.append(slice(a, b))
        dst.append(slice(a - lo, b - lo))
    out[tuple(dst)] = t[tuple(src)]
    return out


_SHIM = '''"""augscope's GPU trainer, made visible to nnU-Net's trainer search (augscope.nnunet)."""
from augscope.nnunet import nnUNetTrainerAugscopeGPU  # noqa: F401
'''


def install():
    """Writes a two-line module into nnU-Net's trainer folder that imports
    `nnUNetTrainerAugscopeGPU` (nnU-Net finds `-tr` classes only there). Returns its path."""
    import nnunetv2
    folder = os.path.join(nnunetv2.__path__[0], "training", "nnUNetTrainer", "variants",
                          "augscope")
    os.makedirs(folder, exist_ok=True)
    for name, text in (("__init__.py", ""), ("nnUNetTrainerAugscopeGPU.py", _SHIM)):
        path = os.path.join(folder, name)
        tmp = path + ".tmp"
        with open(tmp, "w") as fh:
            fh.write(text)
        os.replace(tmp, path)
    return os.path.join(folder, "nnUNetTrainerAugscopeGPU.py")


if __name__ == "__main__":
    if sys.argv[1:] != ["install"]:
        print("usage: python -m augscope.nnunet install", file=sys.stderr)
        sys.exit(2)
    print(install())
