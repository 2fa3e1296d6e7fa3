"""augscope in the training loop: the explorer's transform, bit for bit.

The same engine as `augscope apply` and `augscope batch` (no second implementation): exact scipy
boundary modes, orders 0/1/3, the dense elastic field of reproducible noise, labels resampled with
order 0. Arrays are augscope's `[z, y, x]` (`[y, x]` in 2D), as SimpleITK and nnU-Net hand them to
numpy.

    import augscope
    aug = augscope.Augment("nnunet-v2", seed=0)          # a bundled name, a TOML path or a dict
    out = aug(image, label=seg, index=j, epoch=e)         # numpy arrays or CPU torch tensors
    out.image, out.label, out.plan, out.done              # the plan replays with augscope.apply

Inputs: numpy arrays, or torch tensors on the CPU (read through DLPack without a copy when they
are float32 and contiguous; outputs come back as tensors). Shapes, for `ndim` spatial axes (3 by
default): `(Z, Y, X)`, `(C, Z, Y, X)` (every channel with the same coordinates) and batches
`(B, C, Z, Y, X)` (item b draws index + b).

Seeds: sample `index` of epoch `epoch` uses seed `seed + index + epoch * 2**32` (mod 2**64), so a
DataLoader gives every sample the same draw whatever its worker count; `augscope batch --seed S`
draws sample j with seed S + j, the same plans as epoch 0 here.
"""
import json
from collections import namedtuple

import numpy as np

from . import _augscope as _core

__version__ = _core.__version__
__all__ = ["Augment", "Output", "apply", "sample", "preset", "filters", "febds", "devices",
           "set_threads", "BUNDLED"]

BUNDLED = ("nnunet-v2", "nnunet-v1-3d", "batchgenerators")
EPOCH_STRIDE = 1 << 32

Output = namedtuple("Output", ["image", "label", "plan", "done", "info"])
Output.__doc__ = ("One augmented sample: image and label (None without one) in the input's type, "
                  "the plan (a dict: replay it with augscope.apply), the done list and what ran.")


# --- arrays and tensors -------------------------------------------------------------------------

def _is_torch(x):
    return type(x).__module__.split(".")[0] == "torch"


def _as_numpy(x, dtype=np.float32):
    """(float32 C-order numpy array, the torch tensor it came from or None)."""
    if isinstance(x, np.ndarray):
        return np.ascontiguousarray(x, dtype=dtype), None
    if _is_torch(x):
        if x.device.type != "cpu":
            raise ValueError(
                f"augscope's Python package takes numpy arrays and CPU tensors; this tensor is on "
                f"{x.device}: pass tensor.cpu()")
        a = np.from_dlpack(x.detach())
        return np.ascontiguousarray(a, dtype=dtype), x
    return np.ascontiguousarray(np.asarray(x), dtype=dtype), None


def _like(a, src, dtype=None):
    """`a` as the kind `src` was (a tensor for a tensor), in `dtype` when given."""
    if dtype is not None and a.dtype != dtype:
        a = np.rint(a).astype(dtype) if np.issubdtype(dtype, np.integer) else a.astype(dtype)
    if src is not None:
        import torch
        return torch.from_numpy(np.ascontiguousarray(a))
    return a


def _dtype_of(x):
    if x is None:
        return None
    if isinstance(x, np.ndarray):
        return x.dtype
    if _is_torch(x):
        return np.dtype(str(x.dtype).replace("torch.", "")) if str(x.dtype) != "torch.bool" \
            else np.dtype(bool)
    return np.asarray(x).dtype


def _plan_text(plan):
    if isinstance(plan, str):
        return plan
    return json.dumps(plan)


def _preset_text(preset):
    if isinstance(preset, dict):
        return json.dumps(preset)
    return str(preset)


# --- one plan -----------------------------------------------------------------------------------

def apply(image, plan, label=None, *, channels=False, spacing=None, backend="cpu",
          precision="f32", model="augscope"):
    """Applies one plan (a dict or JSON: the `plan` of `augscope apply --report`, of a batch
    manifest line, of `augscope preset sample`, or of `Output.plan`) exactly as `augscope apply`
    does. `channels`: the first axis is channels. `spacing`: voxel size in mm per spatial axis
    (needed for plans in mm space). `model`: "augscope" (default), or "monai", "torchio",
    "nnunet" for that library's model ("Preview as"). Returns an `Output`."""
    img, src = _as_numpy(image)
    lab = None
    if label is not None:
        lab, _ = _as_numpy(label)
    out, out_lab, info = _core.apply(img, _plan_text(plan), lab, channels, spacing, backend,
                                     precision, model)
    info = json.loads(info)
    plan_d = json.loads(_plan_text(plan))
    return Output(_like(out, src), None if out_lab is None else _like(out_lab, src,
                                                                      _dtype_of(label)),
                  plan_d, info.get("done", []), info)


def sample(preset, seed, ndim=3, spacing=None, space=None):
    """One draw of a preset, as `augscope preset sample --seed SEED` draws it: (plan, done list,
    drawn values), dicts and lists."""
    plan, done, drawn = _core.sample(_preset_text(preset), int(seed) % (1 << 64), ndim, spacing,
                                     space)
    return json.loads(plan), json.loads(done), json.loads(drawn)


def preset(spec):
    """A preset (bundled name, TOML path, TOML text or dict), checked, as a dict."""
    return json.loads(_core.preset(_preset_text(spec)))


def devices():
    """The CUDA devices, as `augscope devices --json` reports them."""
    return json.loads(_core.devices())


def set_threads(n):
    """Threads augscope uses in this process (0: one per core). In DataLoader workers, 1 or 2
    keeps the workers from competing for the same cores."""
    _core.set_threads(int(n), True)


# --- the transform of a training loop -----------------------------------------------------------

class Augment:
    """A preset's random transform, drawn per sample as `augscope batch` draws it, applied by
    augscope's engine.

    preset: a bundled name (`augscope.BUNDLED`), a TOML path or text, or a dict of the TOML's
      tables. seed: the seed of sample 0 of epoch 0. ndim: spatial axes (3, or 2 for images).
    spacing: voxel size in mm per spatial axis (presets in mm space). backend: "cpu" (default),
      "cuda" or "cuda:N" (numpy and CPU tensors go to the GPU and back). patch_size: cut a patch
      of this shape in the same resample, as nnU-Net's SpatialTransform does, centred at
      `patch_center`: "centre" (the image centre), "random" (uniform within the image, drawn from
      the sample's seed) or a point in voxel indices. model: whose model of the transform
      ("augscope"; "monai", "torchio" or "nnunet" for that library's, on the CPU engine).
    """

    def __init__(self, preset="nnunet-v2", *, seed=0, ndim=3, spacing=None, space=None,
                 backend="cpu", precision="f32", patch_size=None, patch_center="centre",
                 model="augscope"):
        self.preset = _preset_text(preset)
        _core.preset(self.preset)  # checked now: a bad preset fails here, not in a worker
        self.seed = int(seed)
        self.ndim = int(ndim)
        self.spacing = None if spacing is None else [float(s) for s in spacing]
        self.space = space
        self.backend = backend
        self.precision = precision
        self.patch_size = None if patch_size is None else [int(p) for p in patch_size]
        if self.patch_size is not None and len(self.patch_size) != self.ndim:
            raise ValueError(f"patch_size {patch_size} needs {self.ndim} values")
        self.patch_center = patch_center
        self.model = model
        self._counter = 0

    def seed_for(self, index, epoch=0):
        """The seed of sample `index` of `epoch`."""
        return (self.seed + int(index) + int(epoch) * EPOCH_STRIDE) % (1 << 64)

    def draw(self, shape, index, epoch=0):
        """The plan (dict) and done list of sample `index` of `epoch` on a grid of `shape`
        (spatial), patch and centre included."""
        seed = self.seed_for(index, epoch)
        spacing = self.spacing or [1.0] * self.ndim
        plan, done, _ = sample(self.preset, seed, self.ndim, spacing, self.space)
        if self.patch_size is not None:
            shape = [int(n) for n in shape]
            ctr_in = [(n - 1) / 2 for n in shape]
            if isinstance(self.patch_center, str) and self.patch_center in ("centre", "center"):
                centre = ctr_in
            elif isinstance(self.patch_center, str) and self.patch_center == "random":
                rng = np.random.default_rng(seed)
                centre = [float(rng.uniform(0, n - 1)) for n in shape]
            else:
                centre = [float(c) for c in self.patch_center]
                if len(centre) != self.ndim:
                    raise ValueError(f"patch_center {self.patch_center} needs {self.ndim} values")
            # The patch's centre (p - 1) / 2 maps to `centre`: a shift of centre - ctr_in, in the
            # plan's space.
            t = list(plan.get("translate") or [0.0] * self.ndim)
            mm = plan.get("space") == "mm"
            for a in range(self.ndim):
                shift = centre[a] - ctr_in[a]
                t[a] = t[a] + (shift * spacing[a] if mm else shift)
            plan["translate"] = t
            plan["out_shape"] = list(self.patch_size)
            done = done + [{"transform": "patch", "values": {"shape": self.patch_size,
                                                              "centre_vox": centre}}]
        return plan, done

    def __call__(self, image, label=None, *, index=None, epoch=0, spacing=None):
        img, src = _as_numpy(image)
        lab = None if label is None else _as_numpy(label)[0]
        lead = img.ndim - self.ndim
        if lead not in (0, 1, 2):
            raise ValueError(
                f"shape {tuple(img.shape)}: expected {self.ndim} spatial axes, with an optional "
                f"channel axis and batch axis in front")
        if index is None:
            index = self._counter
            self._counter += 1 if lead < 2 else img.shape[0]
        spacing = spacing or self.spacing
        if lead == 2:
            outs = [self._one(img[b], None if lab is None else _label_item(lab, b, self.ndim),
                              True, index + b, epoch, spacing) for b in range(img.shape[0])]
            image_out = np.stack([o[0] for o in outs])
            label_out = None if lab is None else np.stack([o[1] for o in outs])
            plans = [o[2] for o in outs]
            dones = [o[3] for o in outs]
            infos = [o[4] for o in outs]
        else:
            l1 = None if lab is None else (lab if lab.ndim == self.ndim else lab[0])
            image_out, label_out, plans, dones, infos = self._one(img, l1, lead == 1, index,
                                                                   epoch, spacing)
            if label_out is not None and lab.ndim > self.ndim:
                label_out = label_out[None]
        return Output(_like(image_out, src),
                      None if label_out is None else _like(label_out, src, _dtype_of(label)),
                      plans, dones, infos)

    def _one(self, img, lab, channels, index, epoch, spacing):
        spatial = img.shape[1:] if channels else img.shape
        plan, done = self.draw(spatial, index, epoch)
        out, out_lab, info = _core.apply(img, json.dumps(plan), lab, channels, spacing,
                                         self.backend, self.precision, self.model)
        info = json.loads(info)
        return out, out_lab, plan, done, info


def _label_item(lab, b, ndim):
    item = lab[b]
    return item if item.ndim == ndim else item[0]


# --- filters and FEBDS --------------------------------------------------------------------------

class _Filters:
    """The intensity filters of `augscope filter`, on numpy arrays and CPU tensors of `ndim`
    spatial axes (leading axes: channels or batch items, each filtered alone). Equal to the CLI
    bit for bit. mode/cval: the filter boundary (scipy.ndimage names)."""

    @staticmethod
    def _run(image, spec, ndim, mode, cval, backend, precision):
        a, src = _as_numpy(image)
        if ndim is None:
            ndim = min(a.ndim, 3)
        out, _ = _core.filter(a, spec, int(ndim), mode, float(cval), backend, precision)
        return _like(out, src)

    def gaussian(self, image, sigma, *, ndim=None, mode="reflect", cval=0.0, backend="cpu",
                 precision="f32"):
        return self._run(image, "gaussian:" + _nums(sigma), ndim, mode, cval, backend, precision)

    def log(self, image, sigma, *, ndim=None, mode="reflect", cval=0.0, backend="cpu",
            precision="f32"):
        return self._run(image, "log:" + _nums(sigma), ndim, mode, cval, backend, precision)

    def dog(self, image, sigma1, sigma2, *, ndim=None, mode="reflect", cval=0.0, backend="cpu",
            precision="f32"):
        return self._run(image, f"dog:{float(sigma1)!r},{float(sigma2)!r}", ndim, mode, cval,
                         backend, precision)

    def median(self, image, size, *, ndim=None, mode="reflect", cval=0.0, backend="cpu",
               precision="f32"):
        sizes = size if isinstance(size, (list, tuple)) else [size]
        return self._run(image, "median:" + ",".join(str(int(s)) for s in sizes), ndim, mode,
                         cval, backend, precision)

    def gamma(self, image, gamma, scale=1.0, *, ndim=None, backend="cpu", precision="f32"):
        return self._run(image, f"gamma:{float(gamma)!r},{float(scale)!r}", ndim, "reflect",
                         0.0, backend, precision)

    def contrast(self, image, contrast, brightness=0.0, *, ndim=None, backend="cpu",
                 precision="f32"):
        return self._run(image, f"contrast:{float(contrast)!r},{float(brightness)!r}", ndim,
                         "reflect", 0.0, backend, precision)


def _nums(v):
    v = v if isinstance(v, (list, tuple)) else [v]
    return ",".join(repr(float(x)) for x in v)


filters = _Filters()


def febds(image, method="dog", *, backend="cpu", precision="f32"):
    """The FEBDS micro-calcification mask (0/1, float32) of 2D images `[..., y, x]` with 12-bit
    intensities; method "dog", "log" or "fft". Equal to `augscope filter --febds` bit for bit."""
    a, src = _as_numpy(image)
    out, _ = _core.febds(a, method, backend, precision)
    return _like(out, src)
