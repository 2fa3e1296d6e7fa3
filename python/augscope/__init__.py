"""augscope in the training loop: the explorer's transform, bit for bit.

The same engine as `augscope apply` and `augscope batch` (no second implementation): exact scipy
boundary modes, orders 0/1/3, the dense elastic field of reproducible noise, labels resampled with
order 0. Arrays are augscope's `[z, y, x]` (`[y, x]` in 2D), as SimpleITK and nnU-Net hand them to
numpy.

    import augscope
    aug = augscope.Augment("nnunet-v2", seed=0)          # a bundled name, a TOML path or a dict
    out = aug(image, label=seg, index=j, epoch=e)         # numpy arrays or CPU torch tensors
    out.image, out.label, out.plan, out.done              # the plan replays with augscope.apply

Inputs: numpy arrays, torch tensors on the CPU (read through DLPack without a copy when they are
float32 and contiguous) and torch (or CuPy) tensors on a GPU, read and written on the device
through DLPack with no copy through the host; outputs come back as the input's kind, on its
device. Shapes, for `ndim` spatial axes (3 by default): `(Z, Y, X)`, `(C, Z, Y, X)` (every channel
with the same coordinates) and batches `(B, C, Z, Y, X)` (item b draws index + b).

Devices: an explicit `device=` wins ("cpu", "cuda", "cuda:N"), else the device the tensor lives
on, else the CPU. A GPU that runs out of memory is freed of augscope's caches and the call runs on
the CPU engine instead, with a `CpuFallbackWarning` (and the reason in `Output.info["note"]`).
`set_precision("f16")` sets the GPU storage precision of calls that name none.

Seeds: sample `index` of epoch `epoch` uses seed `seed + index + epoch * 2**32` (mod 2**64), so a
DataLoader gives every sample the same draw whatever its worker count; `augscope batch --seed S`
draws sample j with seed S + j, the same plans as epoch 0 here.
"""
import atexit
import contextlib
import json
import os
import warnings
from collections import namedtuple

import numpy as np

# Kernels compiled ahead, where the wheel carries them (scripts/build_wheels.sh --kernels): read
# by the engine on its first CUDA use, and by the `augscope` binary this process starts.
_KERNELS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "kernels")
if os.path.isfile(os.path.join(_KERNELS, "prebuilt.json")):
    os.environ.setdefault("AUGSCOPE_PREBUILT_KERNELS", _KERNELS)

from . import _augscope as _core  # noqa: E402

# Kernel compiles started ahead on other threads must end before the interpreter does: NVRTC torn
# down under a running compile crashes the process after its work is done.
atexit.register(_core.finish_background_compiles)

__version__ = _core.__version__
__all__ = ["Augment", "Output", "apply", "normalize", "sample", "preset", "filters", "febds",
           "devices",
           "set_threads", "set_precision", "get_precision", "memory_stats", "gpu_memory_scope",
           "CpuFallbackWarning", "GpuOutOfMemory", "BUNDLED"]

GpuOutOfMemory = _core.GpuOutOfMemory


class CpuFallbackWarning(RuntimeWarning):
    """A GPU call ran on the CPU engine instead (out of GPU memory, or no usable GPU). The result
    is the CPU engine's, equal to the GPU's to f32 rounding; the message says why."""


_PRECISION = ["f32"]

BUNDLED = ("nnunet-v2", "nnunet-v1-3d", "batchgenerators", "monai-brats")
EPOCH_STRIDE = 1 << 32

Output = namedtuple("Output", ["image", "label", "plan", "done", "info"])
Output.__doc__ = ("One augmented sample: image and label (None without one) in the input's type, "
                  "the plan (a dict: replay it with augscope.apply), the done list and what ran.")


# --- arrays and tensors -------------------------------------------------------------------------

def _is_torch(x):
    return type(x).__module__.split(".")[0] == "torch"


def _on_gpu(x):
    """The CUDA device index of a torch or CuPy array, else None."""
    if x is None or isinstance(x, np.ndarray):
        return None
    mod = type(x).__module__.split(".")[0]
    if mod == "torch" and x.device.type == "cuda":
        return x.device.index if x.device.index is not None else 0
    if mod == "cupy":
        return int(x.device.id)
    return None


def _device(requested, x=None):
    """The device rule: an explicit request wins, else the device `x` lives on, else the CPU.
    Returns "cpu" or "cuda:N" ("cuda" alone names the tensor's GPU, else GPU 0)."""
    if requested is not None and requested != "auto":
        r = str(requested)
        if r == "cuda":
            g = _on_gpu(x)
            return f"cuda:{0 if g is None else g}"
        return r
    g = _on_gpu(x)
    return "cpu" if g is None else f"cuda:{g}"


def _cuda_index(device):
    """N of "cuda:N" (a single device), else None."""
    if device.startswith("cuda:") and device[5:].isdigit():
        return int(device[5:])
    return None


def _precision(p):
    return _PRECISION[0] if p is None else p


def set_precision(p):
    """The GPU storage precision ("f32", "f16" or "bf16") of calls that pass `precision=None`
    (the default). Compute is f32 throughout; "f16"/"bf16" halve the device memory of the image
    and output."""
    if p not in ("f32", "f16", "bf16"):
        raise ValueError(f"precision {p!r}: f32, f16 or bf16")
    _PRECISION[0] = p


def get_precision():
    """The precision of calls that name none (`set_precision`)."""
    return _PRECISION[0]


def _warn_note(info):
    note = info.get("note") if isinstance(info, dict) else None
    if note:
        warnings.warn(note, CpuFallbackWarning, stacklevel=3)


def memory_stats():
    """augscope's memory on each CUDA device it has opened: a list of dicts with the driver's
    `driver_free_bytes` and `driver_total_bytes`, augscope's `reserved_bytes` (caches included),
    `allocated_bytes` (in use now), `peak_bytes`, `pinned_host_bytes` and `limit_bytes`
    (AUGSCOPE_GPU_MEM_LIMIT). Empty before the first GPU call."""
    return json.loads(_core.memory_stats())


@contextlib.contextmanager
def gpu_memory_scope():
    """A context that frees augscope's GPU caches (the cached elastic field, work buffers, pinned
    staging memory) when it exits, e.g. around a validation pass or before a memory-hungry step:

        with augscope.gpu_memory_scope():
            out = aug(batch)
    """
    try:
        yield
    finally:
        _core.free_caches()


# --- arrays in GPU memory (DLPack) --------------------------------------------------------------

def _array_lib(x):
    mod = type(x).__module__.split(".")[0]
    if mod == "torch":
        import torch
        return torch
    import cupy
    return cupy


def _f32_dense(x):
    """`x` as a contiguous float32 array on its device (itself when it already is)."""
    lib = _array_lib(x)
    if lib.__name__ == "torch":
        x = x.detach()
        if x.dtype != lib.float32:
            x = x.to(lib.float32)
        return x.contiguous()
    return lib.ascontiguousarray(x, dtype=lib.float32)


def _empty(like, shape):
    lib = _array_lib(like)
    try:
        if lib.__name__ == "torch":
            return lib.empty(tuple(shape), dtype=lib.float32, device=like.device)
        with lib.cuda.Device(like.device.id):
            return lib.empty(tuple(shape), dtype=lib.float32)
    except RuntimeError as e:  # torch's OutOfMemoryError, or a size it refuses
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise MemoryError(f"cannot allocate an output of shape {tuple(shape)} on the GPU: "
                          f"{first}") from None


@contextlib.contextmanager
def _on(x):
    """The array's device as the current one (DLPack's stream handshake uses it)."""
    lib = _array_lib(x)
    if lib.__name__ == "torch":
        with lib.cuda.device(x.device):
            yield
    else:
        with lib.cuda.Device(x.device.id):
            yield


def _capsules(stream, *arrays):
    """DLPack capsules of `arrays`, each producer asked to order its pending work before
    augscope's stream (the DLPack `stream` handshake; no host wait)."""
    return [None if a is None else a.__dlpack__(stream=stream) for a in arrays]


def _label_like(lab_out, dtype_src):
    """A float32 label map back in the label's own dtype (exact: order 0 copies values)."""
    if dtype_src is None or dtype_src.dtype == lab_out.dtype:
        return lab_out
    lib = _array_lib(lab_out)
    if lib.__name__ == "torch" and dtype_src.dtype.is_floating_point is False:
        return lab_out.round().to(dtype_src.dtype)
    return lab_out.astype(dtype_src.dtype) if lib.__name__ != "torch" else \
        lab_out.to(dtype_src.dtype)


def _real(dtype, what):
    """Refuses values that are not real numbers (complex would lose its imaginary part)."""
    if dtype.kind not in "biuf":
        raise ValueError(f"{what}: dtype {dtype} is not a real number type; augscope takes "
                         f"bool, integer or floating-point arrays")


def _as_numpy(x, dtype=np.float32, what="image"):
    """(float32 C-order numpy array, the torch tensor it came from or None). Refuses arrays of
    other than real numbers, and conversions larger than the machine's memory."""
    src = None
    if isinstance(x, np.ndarray):
        a = x
    elif _is_torch(x):
        # A GPU tensor comes to the host only when the CPU engine (or another GPU) was asked for.
        if x.is_complex():
            raise ValueError(f"{what}: dtype {x.dtype} is not a real number type; augscope "
                             f"takes bool, integer or floating-point tensors")
        import torch
        t = x.detach().cpu()
        if t.dtype in (torch.bfloat16, torch.float16, torch.bool):
            t = t.float()  # types numpy cannot take through DLPack
        a, src = np.from_dlpack(t), x
    elif type(x).__module__.split(".")[0] == "cupy":
        a, src = x.get(), x
    else:
        a = np.asarray(x)
    _real(a.dtype, what)
    if a.dtype != dtype or not a.flags.c_contiguous:
        _core.check_memory(int(a.size), f"{what} of shape {tuple(a.shape)} as float32")
    return np.ascontiguousarray(a, dtype=dtype), src


def _int_in(name, v, lo, hi):
    """`v` as an int within [lo, hi], else a ValueError."""
    n = int(v)
    if not lo <= n <= hi:
        raise ValueError(f"{name} {n}: must be between {lo} and {hi}")
    return n


def _floats(name, v, n=None):
    """`v` as a list of floats (of `n` values when given), else a ValueError."""
    if v is None:
        return None
    try:
        out = [float(x) for x in v]
    except TypeError:
        raise TypeError(f"{name} {v!r}: expected a sequence of numbers") from None
    if n is not None and len(out) != n:
        raise ValueError(f"{name} {v!r}: needs {n} values")
    return out


def _like(a, src, dtype=None):
    """`a` as the kind `src` was (a tensor for a tensor), in `dtype` when given."""
    if dtype is not None and a.dtype != dtype:
        a = np.rint(a).astype(dtype) if np.issubdtype(dtype, np.integer) else a.astype(dtype)
    if src is not None:
        if _is_torch(src):
            import torch
            return torch.from_numpy(np.ascontiguousarray(a)).to(src.device)
        return _array_lib(src).asarray(a)
    return a


def _dtype_of(x):
    if x is None:
        return None
    if isinstance(x, np.ndarray):
        return x.dtype
    if _is_torch(x):
        return np.dtype(str(x.dtype).replace("torch.", "")) if str(x.dtype) != "torch.bool" \
            else np.dtype(bool)
    if type(x).__module__.split(".")[0] == "cupy":
        return np.dtype(x.dtype)
    return np.asarray(x).dtype


def _plan_text(plan):
    if isinstance(plan, str):
        return plan
    return json.dumps(plan)


def _preset_text(preset):
    if isinstance(preset, dict):
        return json.dumps(preset)
    return str(preset)


def _apply_gpu_batch(img, lab, plan_texts, spacing, index, precision, model):
    """One plan per sample on a `(B, C, *grid)` array on GPU `index`, in one engine call (batched
    launches, one wait for the device): (image out, label out or None, info). `lab`: `(B, K,
    *grid)` or None, resampled with each sample's plan (order 0, cval 0)."""
    if model != "augscope":
        raise ValueError(f"model={model!r} runs on the CPU engine: pass numpy arrays or CPU "
                         f"tensors, or model='augscope'")
    if img.is_complex() if _is_torch(img) else img.dtype.kind == "c":
        raise ValueError(f"image: dtype {img.dtype} is not a real number type")
    b, item = img.shape[0], list(img.shape[1:])
    if len(plan_texts) != b:
        raise ValueError(f"{len(plan_texts)} plans for a batch of {b} samples: one plan per "
                         f"sample")
    checked = [json.loads(_core.check_plan(t, item, True, lab is not None, spacing, False))
               for t in plan_texts]
    x = _f32_dense(img)
    grid = tuple(checked[0].get("out_shape") or item[1:]) if b else tuple(item[1:])
    out = _empty(x, (b, item[0]) + grid)
    l_in = l_out = None
    if lab is not None:
        l_in = _f32_dense(lab)
        if tuple(l_in.shape[:1]) + tuple(l_in.shape[2:]) != (b,) + tuple(item[1:]):
            raise ValueError(f"label shape {tuple(l_in.shape)} is not (B, K) and the image's "
                             f"spatial shape {tuple(item[1:])} with B {b}")
        l_out = _empty(x, tuple(l_in.shape[:2]) + grid)
    try:
        with _on(x):
            stream = _core.cuda_stream(index)
            caps = _capsules(stream, x, out, l_in, l_out)
            info = _core.apply_cuda_batch(caps[0], caps[1], list(plan_texts), caps[2], caps[3],
                                          spacing, index, precision)
        info = json.loads(info)
        info["plan"] = checked
        return out, l_out, info
    except GpuOutOfMemory as e:
        # The engine freed its caches; each sample on the CPU engine, brought back.
        lib = _array_lib(x)
        host = np.from_dlpack(x.cpu()) if _is_torch(x) else x.get()
        host_lab = None if l_in is None else (np.from_dlpack(l_in.cpu()) if _is_torch(l_in)
                                              else l_in.get())
        outs, labs, dones = [], [], []
        for j, t in enumerate(plan_texts):
            o, _, one = _core.apply(np.ascontiguousarray(host[j]), t, None, True, spacing, "cpu",
                                    "f32", "augscope")
            outs.append(o)
            dones.append(json.loads(one).get("done", []))
            if host_lab is not None:
                lt = json.dumps(_label_only(checked[j]))
                labs.append(np.stack([_core.apply(np.ascontiguousarray(host_lab[j, k]), lt,
                                                  None, False, spacing, "cpu", "f32",
                                                  "augscope")[0]
                                      for k in range(host_lab.shape[1])]))
        back = (lambda a: lib.from_numpy(a).to(x.device)) if lib.__name__ == "torch" else \
            (lambda a: lib.asarray(a))
        info = {"backend": "cpu", "note": f"{e}; ran on the CPU engine", "plan": checked,
                "done": dones, "samples": b}
        return back(np.stack(outs)), None if not labs else back(np.stack(labs)), info


def _label_only(plan):
    """The plan of a label map: order 0, background 0, and no intensity step (what augscope does
    to labels)."""
    p = dict(plan)
    p["order"] = 0
    p["cval"] = 0.0
    p.pop("intensity", None)
    return p


# --- label maps beyond float32's exact integers ---------------------------------------------------

_F32_EXACT = 1 << 24


def _encode_label(lab):
    """`(label, table)`: a label map that float32 holds exactly is itself (`table` None); an
    integer map with values beyond 2^24 (which float32 would round: 16777217 -> 16777216) becomes
    codes 0, 1, 2, ... into `table`, its exact values, of the label's own kind (numpy, torch,
    CuPy) and on its device. Code 0 is the value 0, the background written outside the grid. The
    engine copies the codes (order 0); `_decode_label` turns them back into the values."""
    if lab is None:
        return None, None
    dt = _dtype_of(lab)
    if dt.kind not in "iu" or dt.itemsize < 4 or 0 in tuple(lab.shape):
        return lab, None
    torch_like = _is_torch(lab)
    if torch_like or type(lab).__module__.split(".")[0] == "cupy":
        lib = _array_lib(lab)
    else:
        lib, lab = np, np.asarray(lab)
    big = bool(lab.max() > _F32_EXACT) or bool(lab.min() < -_F32_EXACT)
    if not big:
        return lab, None
    if torch_like:
        values, inverse = lib.unique(lab, sorted=True, return_inverse=True)
        nonzero = values != 0
        rank = lib.cumsum(nonzero.to(lib.int64), 0) * nonzero
        table = lib.cat([values[:1] * 0, values[nonzero]])
        codes = rank[inverse].to(lib.float32)
    else:
        values, inverse = lib.unique(lab.reshape(-1), return_inverse=True)
        nonzero = values != 0
        rank = lib.cumsum(nonzero.astype(np.int64)) * nonzero
        table = lib.concatenate([values[:1] * 0, values[nonzero]])
        codes = rank[inverse.reshape(-1)].reshape(lab.shape).astype(np.float32)
    if int(nonzero.sum()) >= _F32_EXACT:
        raise ValueError(f"the label map has {int(nonzero.sum()) + 1} distinct values; at most "
                         f"{_F32_EXACT} can be carried exactly")
    return codes, table


def _decode_label(lab_out, table):
    """The exact values of a label map of codes (see `_encode_label`), of `lab_out`'s kind."""
    if table is None or lab_out is None:
        return lab_out
    if _is_torch(lab_out):
        import torch
        if not _is_torch(table):
            table = torch.from_numpy(np.asarray(table))
        return table.to(lab_out.device)[lab_out.round().to(torch.int64)]
    if isinstance(lab_out, np.ndarray):
        if _is_torch(table):
            table = np.from_dlpack(table.detach().cpu())
        elif not isinstance(table, np.ndarray):
            table = table.get()
        return table[np.rint(lab_out).astype(np.int64)]
    lib = _array_lib(lab_out)
    return lib.asarray(table)[lib.rint(lab_out).astype(lib.int64)]


def _labels_exact(out, table):
    """`out` (an `Output`) with its label map's codes turned back into the exact values."""
    return out if table is None else out._replace(label=_decode_label(out.label, table))


# --- one plan -----------------------------------------------------------------------------------

def apply(image, plan, label=None, *, channels=False, spacing=None, device=None,
          precision=None, model="augscope", backend=None):
    """Applies one plan (a dict or JSON: the `plan` of `augscope apply --report`, of a batch
    manifest line, of `augscope preset sample`, or of `Output.plan`) exactly as `augscope apply`
    does. `channels`: the first axis is channels. `spacing`: the scan's voxel size in mm per
    spatial axis (each within [0.001, 10000]); a plan in mm space runs with it (in place of the
    plan's own `spacing_mm`, which is used when `spacing` is not given). Every key of the plan
    must be one of a plan's (`rotate_rad`, not `rotate`). `device`: "cpu", "cuda" or "cuda:N"; by default the device
    the image lives on (`backend` is another name for it). `precision`: GPU storage ("f32",
    "f16", "bf16"; default `get_precision()`). `model`: "augscope" (default), or "monai",
    "torchio", "nnunet" for that library's model ("Preview as", CPU engine). Returns an
    `Output`."""
    label, table = _encode_label(label)
    dev = _device(device if device is not None else backend, image)
    if isinstance(plan, (list, tuple)):
        return _apply_many(image, list(plan), label, table, channels, _floats("spacing", spacing),
                           dev, precision, model)
    text = _plan_text(plan)
    try:
        json.loads(text)
    except ValueError as e:
        raise ValueError(f"not a plan: {e}") from None
    spacing = _floats("spacing", spacing)
    gpu = _on_gpu(image)
    if gpu is not None and _cuda_index(dev) == gpu:
        # A batch of one: (1, C, *grid).
        spatial = tuple(image.shape[1:]) if channels else tuple(image.shape)
        x = image[None] if channels else image[None, None]
        if label is not None and tuple(label.shape) != spatial:
            raise ValueError(f"label shape {tuple(label.shape)} differs from the image's "
                             f"spatial shape {spatial}")
        lab = None if label is None else label[None, None]
        out, out_lab, info = _apply_gpu_batch(x, lab, [text], spacing, gpu,
                                              _precision(precision), model)
        _warn_note(info)
        plan_d, info["done"] = info.pop("plan")[0], info.get("done", [[]])[0]
        info.pop("samples", None)
        out = out[0] if channels else out[0, 0]
        out_lab = None if out_lab is None else _label_like(out_lab[0, 0], label)
        return _labels_exact(Output(out, out_lab, plan_d, info["done"], info), table)
    img, src = _as_numpy(image)
    lab = None
    if label is not None:
        lab, _ = _as_numpy(label, what="label")
    out, out_lab, info = _core.apply(img, text, lab, channels, spacing, dev,
                                     _precision(precision), model)
    info = json.loads(info)
    _warn_note(info)
    return _labels_exact(Output(_like(out, src),
                                None if out_lab is None else _like(out_lab, src, _dtype_of(label)),
                                info.pop("plan"), info.get("done", []), info), table)


def _stack(items):
    """numpy arrays or torch tensors stacked on a new first axis."""
    if _is_torch(items[0]):
        import torch
        return torch.stack(items)
    return np.stack(items)


def _apply_many(image, plans, label, table, channels, spacing, dev, precision, model):
    """`apply` with one plan per sample: `image` `(B, C, *grid)` with `channels`, else
    `(B, *grid)`; `label` `(B, *grid)` or `(B, K, *grid)`. A GPU tensor runs in one engine call
    (batched launches); host arrays run sample by sample."""
    texts = [_plan_text(p) for p in plans]
    for j, t in enumerate(texts):
        try:
            obj = json.loads(t)
        except ValueError as e:
            raise ValueError(f"not a plan: {e}") from None
        if not isinstance(obj, dict):
            raise ValueError(f"not a plan: item {j} of the list is {t[:40]}; a plan is a JSON "
                             f"object (a dict), and a list holds one per sample")
    nd = len(image.shape) - (2 if channels else 1)
    if nd not in (2, 3) or image.shape[0] != len(texts):
        raise ValueError(f"image shape {tuple(image.shape)} with {len(texts)} plans: a batch is "
                         f"(B, C, *grid) with channels=True, else (B, *grid), of 2 or 3 spatial "
                         f"axes, and one plan per sample")
    lab_nd = None if label is None else len(label.shape)
    if label is not None and (lab_nd not in (nd + 1, nd + 2) or label.shape[0] != len(texts)):
        raise ValueError(f"label shape {tuple(label.shape)}: (B, *grid) or (B, K, *grid)")
    gpu = _on_gpu(image)
    if gpu is not None and _cuda_index(dev) == gpu:
        x = image if channels else image[:, None]
        lab = None if label is None else (label if lab_nd == nd + 2 else label[:, None])
        out, lo, info = _apply_gpu_batch(x, lab, texts, spacing, gpu, _precision(precision),
                                         model)
        _warn_note(info)
        out = out if channels else out[:, 0]
        if lo is not None:
            lo = _label_like(lo if lab_nd == nd + 2 else lo[:, 0], label)
        return _labels_exact(Output(out, lo, info.pop("plan"), info.get("done", []), info),
                             table)
    outs, labs = [], []
    for j, t in enumerate(texts):
        lab_j = None if label is None else label[j]
        first = lab_j if lab_j is None or lab_nd == nd + 1 else lab_j[0]
        o = apply(image[j], t, first, channels=channels, spacing=spacing, device=dev,
                  precision=precision, model=model)
        outs.append(o)
        if lab_j is not None and lab_nd == nd + 2:
            lt = _label_only(o.plan)
            rest = [apply(lab_j[k], lt, channels=False, spacing=spacing, device=dev,
                          model=model).image for k in range(1, lab_j.shape[0])]
            labs.append(_stack([o.label] + [_like(r, None, o.label.dtype)
                                            if isinstance(r, np.ndarray) else
                                            _label_like(r, o.label) for r in rest]))
        elif lab_j is not None:
            labs.append(o.label)
    info = {"backend": outs[0].info.get("backend"), "note": None, "samples": len(outs),
            "done": [o.done for o in outs], "per_sample": [o.info for o in outs]}
    return _labels_exact(Output(_stack([o.image for o in outs]),
                                _stack(labs) if labs else None, [o.plan for o in outs],
                                info["done"], info), table)


def normalize(image, method, *, channels=False):
    """`image` in a preset's normalisation, as `augscope apply --normalize` and a preset's
    `[normalize]` make it: `method` is the table as a dict (or JSON), e.g.
    `{"method": "nnunet_zscore"}`, or a preset (name, TOML, dict) that has one. `channels`: the
    first axis is channels. Returns float32 of the input's kind (numpy, or a tensor on the
    input's device; a GPU tensor goes through the host)."""
    if isinstance(method, dict) and "method" in method:
        spec = json.dumps(method)
    elif isinstance(method, str) and method.lstrip().startswith("{") and '"method"' in method:
        spec = method
    else:
        table = preset(method).get("normalize")
        if table is None:
            raise ValueError("the preset has no [normalize] table")
        spec = json.dumps(table)
    img, src = _as_numpy(image)
    out, _ = _core.normalize(img, spec, bool(channels))
    return _like(out, src)


def sample(preset, seed, ndim=3, spacing=None, space=None, channels=1):
    """One draw of a preset, as `augscope preset sample --seed SEED` (and `augscope batch` for a
    scan of voxel size `spacing`, mm per axis, ones by default, and `channels` channels: the
    intensity steps draw per channel) draws it: (plan, done list, drawn values), dicts and
    lists."""
    ndim = _int_in("ndim", ndim, 2, 3)
    channels = _int_in("channels", channels, 1, 4096)
    plan, done, drawn = _core.sample(_preset_text(preset), int(seed) % (1 << 64), ndim,
                                     _floats("spacing", spacing), space, channels)
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
    _core.set_threads(_int_in("threads", n, 0, 4096), True)


# --- the transform of a training loop -----------------------------------------------------------

class Augment:
    """A preset's random transform, drawn per sample as `augscope batch` draws it, applied by
    augscope's engine.

    preset: a bundled name (`augscope.BUNDLED`), a TOML path or text, or a dict of the TOML's
      tables. seed: the seed of sample 0 of epoch 0. ndim: spatial axes (3, or 2 for images).
    spacing: the scans' voxel size in mm per spatial axis (each within [0.001, 10000]; ones by
      default), for presets in mm space or with translations in mm; a call's own `spacing=`
      wins. The draw and the apply both use it, as `augscope batch` uses a scan's header.
      device: "cpu", "cuda" or
      "cuda:N"; by default the device the input lives on (a CUDA tensor is transformed where it
      is; numpy arrays and CPU tensors sent to a GPU come back to the host). `backend` is another
      name for it. precision: GPU storage, "f32", "f16" or "bf16" (default `get_precision()`).
      patch_size: cut a patch
      of this shape in the same resample, as nnU-Net's SpatialTransform does, centred at
      `patch_center`: "centre" (the image centre), "random" (uniform within the image, drawn from
      the sample's seed) or a point in voxel indices. model: whose model of the transform
      ("augscope"; "monai", "torchio" or "nnunet" for that library's, on the CPU engine).
      normalize: apply the preset's `[normalize]` (its training units) to each image before the
      transform, as `augscope batch` does (default True; False for images your dataset
      normalised already). A GPU tensor is normalised on the host: one copy each way.
    """

    def __init__(self, preset="nnunet-v2", *, seed=0, ndim=3, spacing=None, space=None,
                 device=None, precision=None, patch_size=None, patch_center="centre",
                 model="augscope", backend=None, normalize=True):
        self.preset = _preset_text(preset)
        method = globals()["preset"](self.preset).get("normalize") if normalize else None
        self._normalize = None if method is None else json.dumps(method)
        self.seed = int(seed)
        self.ndim = _int_in("ndim", ndim, 2, 3)
        self.spacing = _floats("spacing", spacing, self.ndim)
        self.space = space
        # Checked now (preset, spacing, space): a bad one fails here, not in a worker.
        _core.sample(self.preset, 0, self.ndim, self.spacing, space)
        self.device = device if device is not None else backend
        self.precision = precision
        self.patch_size = None if patch_size is None else [int(p) for p in patch_size]
        if self.patch_size is not None and (len(self.patch_size) != self.ndim
                                            or min(self.patch_size) < 1):
            raise ValueError(f"patch_size {patch_size} needs {self.ndim} positive values")
        self.patch_center = patch_center
        if not (isinstance(patch_center, str) and patch_center in ("centre", "center",
                                                                     "random")):
            if isinstance(patch_center, str):
                raise ValueError(f"patch_center {patch_center!r}: 'centre', 'random' or a point")
            centre = _floats("patch_center", patch_center, self.ndim)
            if not all(np.isfinite(centre)):
                raise ValueError(f"patch_center {patch_center}: finite voxel indices")
        self.model = model
        self._counter = 0

    def seed_for(self, index, epoch=0):
        """The seed of sample `index` of `epoch`."""
        return (self.seed + int(index) + int(epoch) * EPOCH_STRIDE) % (1 << 64)

    def _spacing_of(self, spacing):
        """A call's voxel size, else the transform's, else ones."""
        if spacing is not None:
            return _floats("spacing", spacing, self.ndim)
        return self.spacing or [1.0] * self.ndim

    def draw(self, shape, index, epoch=0, spacing=None, channels=1):
        """The plan (dict) and done list of sample `index` of `epoch` on a grid of `shape`
        (spatial) with the voxel size `spacing` (else the transform's), for an image of
        `channels` channels (the intensity steps draw per channel), patch and centre
        included."""
        seed = self.seed_for(index, epoch)
        spacing = self._spacing_of(spacing)
        plan, done, _ = sample(self.preset, seed, self.ndim, spacing, self.space, channels)
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
        """The transform of sample `index` (else the next of a counter) of `epoch`; `spacing`:
        this scan's voxel size in mm (else the transform's)."""
        spacing = self._spacing_of(spacing)
        label, table = _encode_label(label)
        dev = _device(self.device, image)
        gpu = _on_gpu(image)
        if gpu is not None and _cuda_index(dev) == gpu:
            return _labels_exact(self._call_gpu(image, label, index, epoch, spacing, gpu), table)
        img, src = _as_numpy(image)
        lead = self._lead(img.shape)
        lab = None if label is None else _as_numpy(label, what="label")[0]
        if index is None:
            index = self._counter
            self._counter += 1 if lead < 2 else img.shape[0]
        k_axes = None if lab is None else lab.ndim - self.ndim - (1 if lead == 2 else 0)
        if k_axes not in (None, 0, 1):
            raise ValueError(f"label shape {lab.shape} for an image of {img.shape}: the image's "
                             f"spatial shape, with an optional channel axis (after the batch "
                             f"axis)")
        # Every label map seen as (B, K, *grid).
        lk = None if lab is None else (lab[None] if lead < 2 else lab)
        lk = lk if k_axes != 0 else lk[:, None]
        imgs = img[None] if lead < 2 else img
        outs = []
        for b in range(imgs.shape[0]):
            o = self._one(imgs[b], None if lk is None else lk[b, 0], lead > 0, index + b, epoch,
                          spacing)
            if lk is not None:
                o = (o[0], self._more_labels(lk[b], o[1], o[2], spacing)) + tuple(o[2:])
            outs.append(o)
        image_out = np.stack([o[0] for o in outs])
        label_out = None if lab is None else np.stack([o[1] for o in outs])
        plans, dones, infos = ([o[k] for o in outs] for k in (2, 3, 4))
        if label_out is not None:
            label_out = label_out.reshape(lab.shape[:lab.ndim - self.ndim] + label_out.shape[2:])
        if lead < 2:
            image_out = image_out[0]
            plans, dones, infos = plans[0], dones[0], infos[0]
        return _labels_exact(Output(
            _like(image_out, src),
            None if label_out is None else _like(label_out, src, _dtype_of(label)),
            plans, dones, infos), table)

    def _lead(self, shape):
        lead = len(shape) - self.ndim
        if lead not in (0, 1, 2):
            raise ValueError(
                f"shape {tuple(shape)}: expected {self.ndim} spatial axes, with an optional "
                f"channel axis and batch axis in front")
        if 0 in tuple(shape):
            raise ValueError(f"shape {tuple(shape)} is empty")
        return lead

    def _call_gpu(self, image, label, index, epoch, spacing, gpu):
        """The transform on a GPU tensor, where it lives: the whole batch (or the one item) in
        one engine call, read and written on the device (batched launches, one wait for the
        device). A label map of K channels has each channel resampled with its sample's plan."""
        lead = self._lead(image.shape)
        if index is None:
            index = self._counter
            self._counter += 1 if lead < 2 else image.shape[0]
        lab_nd = None if label is None else len(label.shape)
        # Seen as (B, C, *grid) and (B, K, *grid): views, no copies.
        x = image[(None,) * (2 - lead)] if lead < 2 else image
        lab = None
        if label is not None:
            k_axes = lab_nd - self.ndim - (1 if lead == 2 else 0)
            if k_axes not in (0, 1):
                raise ValueError(f"label shape {tuple(label.shape)} for an image of "
                                 f"{tuple(image.shape)}: the image's spatial shape, with an "
                                 f"optional channel axis (after the batch axis)")
            lab = label[None] if lead < 2 else label
            lab = lab if k_axes == 1 else lab[:, None]
        if self._normalize is not None:
            x = _stack([normalize(x[b], self._normalize, channels=True)
                        for b in range(x.shape[0])])
        spatial, c = tuple(x.shape[2:]), x.shape[1]
        drawn = [self.draw(spatial, index + b, epoch, spacing, c) for b in range(x.shape[0])]
        out, label_out, info = _apply_gpu_batch(x, lab, [json.dumps(p) for p, _ in drawn],
                                                spacing, gpu, _precision(self.precision),
                                                self.model)
        _warn_note(info)
        plans, dones = [p for p, _ in drawn], [d for _, d in drawn]
        infos = [dict(info, plan=p, done=d) for p, d in drawn]
        if label_out is not None:
            label_out = label_out.reshape(tuple(label.shape[:lab_nd - self.ndim])
                                          + tuple(label_out.shape[2:]))
            label_out = _label_like(label_out, label)
        if lead < 2:
            out = out[0] if lead == 1 else out[0, 0]
            plans, dones, infos = plans[0], dones[0], infos[0]
        return Output(out, label_out, plans, dones, infos)

    def _more_labels(self, lab, first, plan, spacing):
        """The K channels `(K, *grid)` of a label map resampled with a sample's plan: channel 0
        came with the image (`first`), the others are resampled here (order 0, f32)."""
        if lab.shape[0] == 1:
            return first[None]
        lt = json.dumps(_label_only(plan))
        rest = [_core.apply(np.ascontiguousarray(lab[k], dtype=np.float32), lt, None, False,
                            spacing, _device(self.device), "f32", "augscope")[0]
                for k in range(1, lab.shape[0])]
        return np.stack([first] + rest)

    def _one(self, img, lab, channels, index, epoch, spacing):
        if self._normalize is not None:
            img, _ = _core.normalize(img, self._normalize, channels)
        spatial = img.shape[1:] if channels else img.shape
        plan, done = self.draw(spatial, index, epoch, spacing, img.shape[0] if channels else 1)
        dev = _device(self.device)
        out, out_lab, info = _core.apply(img, json.dumps(plan), lab, channels, spacing, dev,
                                         _precision(self.precision), self.model)
        info = json.loads(info)
        _warn_note(info)
        return out, out_lab, plan, done, info


# --- filters and FEBDS --------------------------------------------------------------------------

class _Filters:
    """The intensity filters of `augscope filter`, of `ndim` spatial axes (leading axes: channels
    or batch items, each filtered alone), in the way medical-image-std's users call them. Equal
    to the CLI bit for bit. Inputs: numpy arrays, CPU tensors and GPU tensors (filtered where they
    live, no copy through the host). `device`: "cpu", "cuda" or "cuda:N"; by default where the
    input lives. `precision`: GPU storage ("f32", "f16", "bf16"; default `get_precision()`).
    mode/cval: the filter boundary (scipy.ndimage names). `backend` is another name for `device`."""

    @staticmethod
    def _run(image, spec, ndim, mode, cval, device, precision):
        dev = _device(device, image)
        prec = _precision(precision)
        if ndim is not None:
            ndim = _int_in("ndim", ndim, 1, 3)
        gpu = _on_gpu(image)
        if gpu is not None and _cuda_index(dev) == gpu:
            ndim = min(len(image.shape), 3) if ndim is None else ndim
            return _filter_gpu(image, spec, ndim, mode, float(cval), gpu, prec)
        a, src = _as_numpy(image)
        ndim = min(a.ndim, 3) if ndim is None else ndim
        out, info = _core.filter(a, spec, int(ndim), mode, float(cval), dev, prec)
        _warn_note(json.loads(info))
        return _like(out, src)

    def gaussian(self, image, sigma, *, ndim=None, mode="reflect", cval=0.0, device=None,
                 precision=None, backend=None):
        return self._run(image, "gaussian:" + _nums(sigma), ndim, mode, cval, device or backend,
                         precision)

    def log(self, image, sigma, *, ndim=None, mode="reflect", cval=0.0, device=None,
            precision=None, backend=None):
        return self._run(image, "log:" + _nums(sigma), ndim, mode, cval, device or backend,
                         precision)

    def dog(self, image, sigma1, sigma2, *, ndim=None, mode="reflect", cval=0.0, device=None,
            precision=None, backend=None):
        return self._run(image, f"dog:{float(sigma1)!r},{float(sigma2)!r}", ndim, mode, cval,
                         device or backend, precision)

    def median(self, image, size, *, ndim=None, mode="reflect", cval=0.0, device=None,
               precision=None, backend=None):
        sizes = size if isinstance(size, (list, tuple)) else [size]
        return self._run(image, "median:" + ",".join(str(int(s)) for s in sizes), ndim, mode,
                         cval, device or backend, precision)

    def gamma(self, image, gamma, scale=1.0, *, ndim=None, device=None, precision=None,
              backend=None):
        return self._run(image, f"gamma:{float(gamma)!r},{float(scale)!r}", ndim, "reflect",
                         0.0, device or backend, precision)

    def contrast(self, image, contrast, brightness=0.0, *, ndim=None, device=None,
                 precision=None, backend=None):
        return self._run(image, f"contrast:{float(contrast)!r},{float(brightness)!r}", ndim,
                         "reflect", 0.0, device or backend, precision)


def _filter_gpu(image, spec, ndim, mode, cval, gpu, precision, items=False):
    """A filter (or "febds:METHOD") on a GPU array where it lives; `items`: one call per image
    of the leading axes (FEBDS). Falls back to the CPU engine after a GPU out-of-memory."""
    x = _f32_dense(image)
    out = _empty(x, x.shape)
    try:
        with _on(x):
            stream = _core.cuda_stream(gpu)
            if items and x.ndim > 2:
                xs, os_ = x.reshape(-1, *x.shape[-2:]), out.reshape(-1, *x.shape[-2:])
                for b in range(xs.shape[0]):
                    ci, co = _capsules(stream, xs[b], os_[b])
                    _core.filter_cuda(ci, co, spec, ndim, mode, cval, gpu, precision)
            else:
                ci, co = _capsules(stream, x, out)
                _core.filter_cuda(ci, co, spec, ndim, mode, cval, gpu, precision)
        return out
    except GpuOutOfMemory as e:
        warnings.warn(f"{e}; ran on the CPU engine", CpuFallbackWarning, stacklevel=3)
        a, src = _as_numpy(image)
        if spec.startswith("febds:"):
            o, _ = _core.febds(a, spec[6:], "cpu", "f32")
        else:
            o, _ = _core.filter(a, spec, ndim, mode, cval, "cpu", "f32")
        return _like(o, src)


def _nums(v):
    v = v if isinstance(v, (list, tuple)) else [v]
    return ",".join(repr(float(x)) for x in v)


filters = _Filters()


def febds(image, method="dog", *, device=None, precision=None, backend=None):
    """The FEBDS micro-calcification mask (0/1, float32) of 2D images `[..., y, x]` with 12-bit
    intensities: one image `(Y, X)` or a stack of them (any leading axes, each image segmented
    alone); method "dog", "log" or "fft". Equal to `augscope filter --febds` bit for bit, image
    by image.
    `device`: as for the filters (a GPU tensor is segmented where it lives, every step on the
    GPU). FEBDS computes in f32 whatever the precision."""
    dev = _device(device if device is not None else backend, image)
    gpu = _on_gpu(image)
    if gpu is not None and _cuda_index(dev) == gpu:
        return _filter_gpu(image, "febds:" + method, 2, "reflect", 0.0, gpu,
                           _precision(precision), items=True)
    a, src = _as_numpy(image)
    out, info = _core.febds(a, method, dev, _precision(precision))
    _warn_note(json.loads(info))
    return _like(out, src)
