"""An nnU-Net v2 trainer whose augmentation is augscope's, on the GPU.

`nnUNetTrainerAugscopeGPU` is nnU-Net's `nnUNetTrainer` with one change: the training
augmentation (nnU-Net's `SpatialTransform`, with its rotation, scaling, elastic deformation and
centre crop, its seven intensity transforms and `MirrorTransform`) leaves the CPU data-loader
processes and runs in `train_step` on the training GPU, through augscope: the preset you tuned in
the explorer, spatial part and `[[intensity]]` steps, exact scipy boundary modes, orders 0/1/3,
the dense elastic field and the noise made on the device, on the batch where it already is. The
deep-supervision targets are then made on the GPU by batchgeneratorsv2's own
`DownsampleSegForDSTransform`. Everything else (masks, regions, the cascade) stays where nnU-Net
puts it.

Differences from nnU-Net's own pipeline, by design:
- augscope mirrors before the intensity steps, nnU-Net after them (the distributions are the
  same; see the nnunet-v2 preset's description);
- the preset is applied in 3D also where nnU-Net would use its dummy-2D augmentation.

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

__all__ = ["nnUNetTrainerAugscopeGPU", "install"]

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
            """nnU-Net's CPU pipeline without the spatial transform, the intensity transforms, the
            mirroring and the deep-supervision downsampling (all of them run in `augscope_batch`
            on the GPU)."""
            compose = nnUNetTrainer.get_training_transforms(
                patch_size, rotation_for_DA, None, mirror_axes, do_dummy_2d_data_aug, *args,
                **kwargs)
            compose.transforms = [t for t in compose.transforms if not runs_on_the_gpu(t)]
            return compose

        def augscope_augment(self):
            """The transform of this trainer: the preset, seeded, cutting nnU-Net's patch from
            the centre of the data loader's larger initial patch (as nnU-Net's SpatialTransform
            does), on the trainer's device."""
            aug = getattr(self, "_augscope", None)
            if aug is None:
                patch = [int(i) for i in self.configuration_manager.patch_size]
                dev = self.device
                device = f"cuda:{dev.index or 0}" if dev.type == "cuda" else "cpu"
                aug = Augment(self.augscope_preset, seed=self.augscope_seed, ndim=len(patch),
                              device=device, patch_size=patch, patch_center="centre")
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

    nnUNetTrainerAugscopeGPU.__module__ = __name__
    return nnUNetTrainerAugscopeGPU


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
