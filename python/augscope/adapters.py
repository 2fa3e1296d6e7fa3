"""augscope's transform inside MONAI, TorchIO and nnU-Net v2 pipelines.

Nothing here imports MONAI, TorchIO or nnU-Net when the module is imported: the MONAI transform
becomes a subclass of MONAI's `Randomizable` and `MapTransform` when it is made, if MONAI is
installed (so `Compose.set_random_state` and MONAI's DataLoader seed it); the TorchIO transform
takes TorchIO's subjects and images as it finds them; the nnU-Net trainer lives in
`augscope.nnunet`, which imports nnU-Net itself.

Axis order. augscope's arrays and presets are `[z, y, x]` (NIfTI `(k, j, i)`), as SimpleITK and
nnU-Net hand them to numpy. MONAI's `LoadImage` and TorchIO keep nibabel's `(i, j, k)` order
(x first), so both adapters reverse the spatial axes around augscope's call by default
(`spatial_order="xyz"`): a preset's "axis 0" is the same anatomical axis in the explorer and in
training. Pass `spatial_order="zyx"` for arrays that are already augscope's order.

Records. Each transformed sample carries what was drawn as JSON text, one string per sample, so
that a DataLoader batches samples whose draws differ (torch's collate makes a list of strings):
`augscope_done` (the done list) and, for MONAI, `augscope_plan` (the plan, replayed by
`augscope.apply(x, json.loads(plan))`). `json.loads` gives back the lists and dicts.
"""
import json

import numpy as np

from . import Augment
from . import _label_only as _label_plan

__all__ = ["RandAugscoped", "AugscopeTransform"]


def _reverse_spatial(x, ndim):
    """`x` with its last `ndim` axes reversed (a view for numpy and torch)."""
    lead = len(x.shape) - ndim
    order = list(range(lead)) + [lead + ndim - 1 - a for a in range(ndim)]
    if isinstance(x, np.ndarray):
        return x.transpose(order)
    return x.permute(*order)


class _Keyed:
    """The shared part of the adapters: one draw per call, applied to every image and label."""

    def _setup(self, preset, seed, ndim, spacing, device, precision, patch_size, patch_center,
               spatial_order, normalize=True):
        if spatial_order not in ("xyz", "zyx"):
            raise ValueError(f"spatial_order {spatial_order!r}: 'xyz' (MONAI, TorchIO) or 'zyx'")
        self.spatial_order = spatial_order
        self.ndim = int(ndim)
        if spatial_order == "xyz":
            # Given in the arrays' order, as everything else of the caller's.
            patch_size = None if patch_size is None else list(patch_size)[::-1]
            if not isinstance(patch_center, str):
                patch_center = list(patch_center)[::-1]
        self.aug = Augment(preset, seed=seed, ndim=ndim, spacing=spacing, device=device,
                           precision=precision, patch_size=patch_size,
                           patch_center=patch_center, normalize=normalize)

    def _to_aug(self, x):
        return _reverse_spatial(x, self.ndim) if self.spatial_order == "xyz" else x

    def _from_aug(self, x):
        return self._to_aug(x)  # reversing is its own inverse

    def _grid(self, x):
        """The spatial grid of `x` (channel first) in augscope's order."""
        shape = list(x.shape[-self.ndim:])
        return shape[::-1] if self.spatial_order == "xyz" else shape

    def _spacing(self, spacing):
        if spacing is None:
            return None
        s = [float(v) for v in spacing][:self.ndim]
        return s[::-1] if self.spatial_order == "xyz" else s

    def _run(self, x, plan, spacing, label):
        """One array (channel first) through `plan`, back in its own axis order and type; or a
        batch `(B, C, *spatial)` through a list of plans, one per sample, in one call."""
        many = isinstance(plan, list)
        p = plan
        if label:
            p = [_label_plan(q) for q in plan] if many else _label_plan(plan)
        from . import _stack, apply, normalize
        dtype = getattr(x, "dtype", None)
        x = self._to_aug(x)
        if not label and self.aug._normalize is not None:
            # The preset's training units, as `Augment` and `augscope batch` give them.
            norm = self.aug._normalize
            x = _stack([normalize(x[b], norm, channels=True) for b in range(x.shape[0])]) \
                if many else normalize(x, norm, channels=True)
        out = apply(x, p, channels=True, spacing=spacing,
                    device=self.aug.device, precision=self.aug.precision).image
        out = self._from_aug(out)
        if label and dtype is not None and out.dtype != dtype:
            out = out.round().astype(dtype) if isinstance(out, np.ndarray) else \
                out.round().to(dtype)
        return out


class RandAugscoped(_Keyed):
    """A MONAI dictionary transform: one draw of the preset per call, the same plan for every
    key; `keys` are images (the preset's order, mode and cval), `label_keys` label maps (order 0,
    background 0). Arrays are channel first, `(C, *spatial)`: numpy, torch or MONAI MetaTensors,
    on the CPU or a GPU (transformed where they live).

    Seeding: `set_random_state(seed)` (MONAI's Compose and DataLoader call it) sets the seed of
    the draws; each call then takes the next sample index. With `index_key`, the sample's index
    is read from the dictionary instead, so sample j of epoch `epoch` gets the same draw in any
    worker (`augscope.Augment`'s rule). The done list goes to `data["augscope_done"]` and the
    plan to `data["augscope_plan"]`, each as JSON text (one string per sample, so that MONAI's
    and torch's collate batch samples of different draws; `json.loads` reads them back). Both
    keys are always set ("[]" and "{}", the identity, when no key was present).

    `spacing`: voxel size in mm per axis in the arrays' order (for presets in mm space or with
    translations in mm); by default a MetaTensor's `pixdim`. The draw and the apply use it.

    A collated batch, `(B, C, *spatial)` arrays (after `ThreadDataLoader` or a DataLoader, on
    the GPU after `ToDeviced`), gets a draw per sample (the next B indices, or the batch's
    `index_key` values) and runs in one engine call per key (batched launches on a GPU);
    `augscope_done` and `augscope_plan` are then lists of JSON strings, one per sample.

    The intensity steps draw per channel of the first image key, and act on images only. A
    preset's `[normalize]` is applied to each image first (`normalize=False`: your pipeline
    normalises already, e.g. with MONAI's `ScaleIntensityRanged`).
    """

    backend = ["torch", "numpy"]

    def __new__(cls, *args, **kwargs):
        return object.__new__(_monai_class(cls))

    def __init__(self, keys, preset="nnunet-v2", *, label_keys=(), seed=0, ndim=3,
                 spacing=None, device=None, precision=None, patch_size=None,
                 patch_center="centre", spatial_order="xyz", index_key=None, epoch=0,
                 allow_missing_keys=False, normalize=True):
        self.keys = tuple([keys] if isinstance(keys, str) else keys)
        self.label_keys = tuple([label_keys] if isinstance(label_keys, str) else label_keys)
        if not self.keys and not self.label_keys:
            raise ValueError("keys must name at least one image or label")
        self.allow_missing_keys = bool(allow_missing_keys)
        self.index_key = index_key
        self.epoch = int(epoch)
        self.spacing = spacing
        self._setup(preset, seed, ndim, spacing, device, precision, patch_size, patch_center,
                    spatial_order, normalize)
        self._init = dict(keys=keys, preset=preset, label_keys=label_keys, seed=seed, ndim=ndim,
                          spacing=spacing, device=device, precision=precision,
                          patch_size=patch_size, patch_center=patch_center,
                          spatial_order=spatial_order, index_key=index_key, epoch=epoch,
                          allow_missing_keys=allow_missing_keys, normalize=normalize)

    def __reduce__(self):
        # The class made with MONAI's bases is not importable by name: rebuild from arguments
        # (spawned DataLoader workers pickle the transform).
        return (_rebuild, (self._init, self.aug.seed, self.aug._counter))

    def set_random_state(self, seed=None, state=None):
        """MONAI's seeding: `seed`, or a draw from `state`, becomes the seed of sample 0; the
        sample counter starts again."""
        if seed is not None:
            self.aug.seed = int(seed) % (1 << 64)
        elif state is not None:
            self.aug.seed = int(state.randint(0, 2**31 - 1))
        else:
            self.aug.seed = int(np.random.default_rng().integers(0, 2**63))
        self.aug._counter = 0
        return self

    def randomize(self, data=None):
        """Draws happen per call from the sample index (nothing to do ahead)."""

    def __call__(self, data):
        d = dict(data)
        present = [k for k in self.keys + self.label_keys if k in d]
        missing = [k for k in self.keys + self.label_keys if k not in d]
        if missing and not self.allow_missing_keys:
            raise KeyError(f"keys {missing} are not in the data (allow_missing_keys=True skips "
                           f"them)")
        if not present:
            d["augscope_done"] = "[]"
            d["augscope_plan"] = "{}"
            return d
        first = d[present[0]]
        # A collated batch (after ThreadDataLoader or DataLoader): (B, C, *spatial).
        batched = len(first.shape) == self.ndim + 2
        count = int(first.shape[0]) if batched else 1
        if self.index_key is not None:
            ix = d[self.index_key]
            indices = [int(i) for i in ix] if batched else [int(ix)]
        else:
            indices = [self.aug._counter + b for b in range(count)]
            self.aug._counter += count
        item = first[0] if batched else first
        spacing = self._spacing(self.spacing if self.spacing is not None
                                else _meta_pixdim(item, self.ndim))
        # The intensity steps draw per channel: as many as the images have.
        images = [d[k] for k in self.keys if k in d]
        channels = int(images[0].shape[1 if batched else 0]) if images else 1
        drawn = [self.aug.draw(self._grid(item), i, self.epoch, spacing, channels)
                 for i in indices]
        plans = [p for p, _ in drawn]
        for k in present:
            d[k] = _rewrap(d[k], self._run(_unwrap(d[k]), plans if batched else plans[0],
                                           spacing, k in self.label_keys))
        if batched:
            d["augscope_done"] = [json.dumps(done) for _, done in drawn]
            d["augscope_plan"] = [json.dumps(p) for p in plans]
        else:
            d["augscope_done"] = json.dumps(drawn[0][1])
            d["augscope_plan"] = json.dumps(plans[0])
        return d


def _rebuild(init, seed, counter):
    t = RandAugscoped(**init)
    t.aug.seed = seed
    t.aug._counter = counter
    return t


_MONAI_CLASSES = {}


def _monai_class(cls):
    """`cls` with MONAI's `Randomizable` and `MapTransform` among its bases when MONAI is
    installed (imported now, when a transform is made, not when augscope is imported)."""
    try:
        from monai.transforms import MapTransform, Randomizable
    except ImportError:
        return cls
    if issubclass(cls, Randomizable):
        return cls
    sub = _MONAI_CLASSES.get(cls)
    if sub is None:
        sub = type(cls.__name__, (cls, Randomizable, MapTransform),
                   {"__module__": cls.__module__, "__new__": _plain_new,
                    "__init__": cls.__init__, "__call__": cls.__call__,
                    "set_random_state": cls.set_random_state, "randomize": cls.randomize})
        _MONAI_CLASSES[cls] = sub
    return sub


def _plain_new(cls, *args, **kwargs):
    return object.__new__(cls)


def _unwrap(x):
    """A MONAI MetaTensor as a plain tensor (its metadata is put back by `_rewrap`)."""
    if type(x).__name__ == "MetaTensor":
        return x.as_tensor()
    return x


def _rewrap(orig, new):
    if type(orig).__name__ == "MetaTensor":
        from monai.data import MetaTensor
        return MetaTensor(new, meta=orig.meta, applied_operations=list(orig.applied_operations))
    return new


def _meta_pixdim(x, ndim):
    """A MetaTensor's voxel size (its affine's column norms), else None."""
    if type(x).__name__ != "MetaTensor":
        return None
    pixdim = getattr(x, "pixdim", None)
    if pixdim is None:
        return None
    return [float(v) for v in list(pixdim)[:ndim]]


class AugscopeTransform(_Keyed):
    """A TorchIO-style transform: called on a `torchio.Subject` (or a dict of TorchIO images),
    it applies one draw of the preset to every image of the subject, `ScalarImage`s with the
    preset's order and `LabelMap`s with order 0 and background 0, and returns a new subject
    (the input is not changed). Images keep their affine; each image's voxel size is its own
    `spacing` (TorchIO's `(sx, sy, sz)`). Data stay on their device (TorchIO keeps them on the
    CPU; a GPU tensor set by the user is transformed there).

    `include`/`exclude`: image names to transform or to leave alone. `p`: probability of the
    whole transform (drawn from the sample's seed, so a replay agrees). Seeding and indices as
    `augscope.Augment`: call `transform(subject, index=j, epoch=e)` for the draw of sample j, or
    let the transform count calls. The done list is stored in `subject["augscope_done"]` as
    JSON text (one string per subject, so that a DataLoader batches subjects of different draws;
    "[]" when the transform did not fire). The draw uses the first transformed image's spacing,
    and the intensity steps draw per channel of the first `ScalarImage` (they never touch a
    `LabelMap`). A preset's `[normalize]` is applied to each `ScalarImage` first
    (`normalize=False`: your pipeline normalises already, e.g. with `tio.ZNormalization`).
    """

    def __init__(self, preset="nnunet-v2", *, seed=0, ndim=3, device=None, precision=None,
                 patch_size=None, patch_center="centre", spatial_order="xyz", include=None,
                 exclude=None, p=1.0, normalize=True):
        self._setup(preset, seed, ndim, None, device, precision, patch_size, patch_center,
                    spatial_order, normalize)
        self.include = None if include is None else set(include)
        self.exclude = set(exclude or ())
        if not 0.0 <= float(p) <= 1.0:
            raise ValueError(f"p {p} must be in [0, 1]")
        self.p = float(p)

    def __call__(self, subject, *, index=None, epoch=0):
        import copy
        subject = copy.copy(subject)
        images = _torchio_images(subject)
        names = [n for n in images if (self.include is None or n in self.include)
                 and n not in self.exclude]
        if index is None:
            index = self.aug._counter
            self.aug._counter += 1
        seed = self.aug.seed_for(index, epoch)
        subject["augscope_done"] = "[]"
        if self.p < 1.0 and np.random.default_rng([seed, 1]).random() >= self.p:
            return subject
        if not names:
            return subject
        first = images[names[0]]
        scalars = [images[n] for n in names if not _is_label(images[n])]
        channels = int(scalars[0].data.shape[0]) if scalars else 1
        plan, done = self.aug.draw(self._grid(first.data), index, epoch,
                                   self._spacing(first.spacing), channels)
        for n in names:
            img = images[n]
            out = self._run(img.data, plan, self._spacing(img.spacing), _is_label(img))
            new = copy.copy(img)
            new.set_data(out)
            subject[n] = new
        subject["augscope_done"] = json.dumps(done)
        return subject


def _is_label(img):
    return type(img).__name__ == "LabelMap" or getattr(img, "type", "") == "label"


def _torchio_images(subject):
    """The TorchIO images of a subject (or dict), by name."""
    if hasattr(subject, "get_images_dict"):
        return dict(subject.get_images_dict(intensity_only=False))
    return {k: v for k, v in subject.items() if hasattr(v, "set_data") and hasattr(v, "data")}
