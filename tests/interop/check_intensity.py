#!/usr/bin/env python3
"""augscope's intensity steps against batchgeneratorsv2 itself, with the values fed: for each
step (noise, blur, brightness, contrast, low resolution, gamma with and without inversion and
retained statistics), on one- and two-channel volumes, alone and after a spatial transform,
`augscope apply` with the step's flags against batchgeneratorsv2's transform (its drawn values
fed through callables or ranges of one value, every channel applied) on augscope's own resample
of the same spatial plan. Bar: at least 99.9 % of the voxels within 1e-4 of the image's intensity
range. One line per (library, step, case).

The noise is augscope's own field (counters keyed by the seed), so batchgeneratorsv2's noise
transform runs its own code (the drawn sigma as the standard deviation, `index_add_` into the
channels) with torch's `Tensor.normal_` replaced, for that call only, by a fill with augscope's
standard normal field (`augscope apply` of `--noise 1` on zeros) times the call's `std` plus its
`mean`. Each case also checks which call batchgeneratorsv2 made: one `normal_()` of the applied
channels' shape for sigmas per channel (it multiplies afterwards), one `normal_(mean=0.0,
std=sigma)` for a synchronised sigma.

    python tests/interop/check_intensity.py [path/to/augscope]

Exit 0 at the bar, 1 below it, 77 when batchgeneratorsv2 or torch is missing.
"""
import contextlib
import os
import subprocess
import sys
import tempfile

import numpy as np

try:
    import torch
    import batchgeneratorsv2  # noqa: F401
    from batchgeneratorsv2.transforms.intensity.brightness import (
        MultiplicativeBrightnessTransform)
    from batchgeneratorsv2.transforms.intensity.contrast import ContrastTransform
    from batchgeneratorsv2.transforms.intensity.gamma import GammaTransform
    from batchgeneratorsv2.transforms.intensity.gaussian_noise import GaussianNoiseTransform
    from batchgeneratorsv2.transforms.noise.gaussian_blur import GaussianBlurTransform
    from batchgeneratorsv2.transforms.spatial.low_resolution import (
        SimulateLowResolutionTransform)
except ImportError as e:
    print(f"SKIP intensity: {e}")
    sys.exit(77)

from importlib.metadata import version

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BIN = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "target", "debug", "augscope")
VERSION = version("batchgeneratorsv2")
BAR, TOL = 0.999, 1e-4
NOISE_SEED = 20240611


def fed(values):
    """A callable that returns `values` one after another, whatever batchgeneratorsv2 passes it
    (an image, a shape, channel and dim keywords)."""
    it = iter(values)

    def draw(*_args, **_kwargs):
        return next(it)

    return draw


def csv(values):
    return ",".join(repr(float(v)) for v in values)


# --- the cases: augscope's flags and batchgeneratorsv2's transform with the same values ---------

class Case:
    """One step with fixed values: `name`, augscope's `flags` for `channels` channels, and
    `transform(channels)`, batchgeneratorsv2's transform with the values fed. `normal_call`,
    for the noise, is the (mean, std) batchgeneratorsv2 must pass to `normal_`."""

    def __init__(self, name, flags, transform, normal_call=None):
        self.name, self.flags, self.transform, self.normal_call = \
            name, flags, transform, normal_call


def scalar_cases():
    """Brightness, contrast and gamma: one value per channel, drawn per channel."""
    def brightness(vals):
        return Case(f"brightness {vals}", lambda c: ["--brightness", csv(vals[:c])],
                    lambda c: MultiplicativeBrightnessTransform(
                        multiplier_range=fed(vals[:c]), synchronize_channels=False,
                        p_per_channel=1))

    def contrast(vals, clip):
        name = "contrast" if clip else "contrast_unclipped"
        return Case(f"{name} {vals}",
                    lambda c: ["--contrast", csv(vals[:c])] + ([] if clip else
                                                                ["--contrast-unclipped"]),
                    lambda c: ContrastTransform(contrast_range=fed(vals[:c]),
                                                preserve_range=clip, synchronize_channels=False,
                                                p_per_channel=1))

    def gamma(vals, invert, retain):
        name = "gamma" + ("+invert" if invert else "") + ("+retain_stats" if retain else "")
        return Case(f"{name} {vals}",
                    lambda c: ["--gamma", csv(vals[:c])]
                    + (["--gamma-invert"] if invert else [])
                    + (["--gamma-retain-stats"] if retain else []),
                    lambda c: GammaTransform(gamma=fed(vals[:c]), p_invert_image=int(invert),
                                             synchronize_channels=False, p_per_channel=1,
                                             p_retain_stats=int(retain)))

    return [brightness([1.23, 0.81]),
            contrast([1.21, 0.78], True),
            contrast([1.3, 0.7], False),
            gamma([1.37, 0.74], False, False),
            gamma([1.37, 0.74], True, False),
            gamma([0.81, 1.45], False, True),
            gamma([0.81, 1.45], True, True)]


def blur_cases(ndim=3):
    """Sigmas per axis, the same for every channel (augscope's --blur is one entry for all).
    batchgeneratorsv2 draws per channel and axis (`blur_sigma(shape, dim=d)`), or with
    synchronize_channels once per axis (`blur_sigma(shape[d])`). Kernel sizes: 0.5 -> 3 taps
    (6σ + 0.5 = 3.5 rounds to 4, even, down), 0.77 -> 5, 1.0 -> 7 (6.5 -> 6, up), 2.5 -> 15."""
    out = []
    for sig in ([0.5] * ndim, [0.77] * ndim, [1.0] * ndim, [2.5] * ndim, [0.6, 1.3, 2.0],
                [2.5, 0.5, 1.0]):
        out.append(Case(f"gaussian_blur sigmas {sig}", lambda c, s=sig: ["--blur", csv(s)],
                        lambda c, s=sig: GaussianBlurTransform(
                            blur_sigma=fed(s * c), synchronize_channels=False,
                            synchronize_axes=False, p_per_channel=1, benchmark=False)))
    sig = [0.77, 2.5, 1.0]
    out.append(Case(f"gaussian_blur sigmas {sig} synchronize_channels",
                    lambda c: ["--blur", csv(sig)],
                    lambda c: GaussianBlurTransform(
                        blur_sigma=fed(sig), synchronize_channels=True, synchronize_axes=False,
                        p_per_channel=1, benchmark=False)))
    return out


def lowres_shape(shape, scales):
    """batchgeneratorsv2's low-resolution shape: round(n · s) of the float32 factor."""
    return tuple(round(n * float(np.float32(s))) for n, s in zip(shape, scales))


def lowres_cases(shape):
    """Factors per axis. On (20, 24, 22): 0.525 and 0.575 make 20 · s a tie in f64 (10.5 and
    11.5) but not in f32 (10.4999995, 11.4999998), which batchgeneratorsv2 rounds; 0.625
    (20 -> 12.5), 0.5625 (24 -> 13.5) and 0.75 (22 -> 16.5) are exact ties (half to even)."""
    out = []
    for sc in ([0.525] * 3, [0.575] * 3, [0.625] * 3, [0.75] * 3, [0.5] * 3, [0.9, 0.7, 0.55],
               [0.525, 0.5625, 0.75]):
        out.append(Case(f"low_resolution scales {sc} -> {lowres_shape(shape, sc)}",
                        lambda c, s=sc: ["--lowres", csv(s)],
                        lambda c, s=sc: SimulateLowResolutionTransform(
                            scale=fed(s * c), synchronize_channels=False, synchronize_axes=False,
                            ignore_axes=None, allowed_channels=None, p_per_channel=1)))
    sc = 0.575
    out.append(Case(f"low_resolution scale {sc} synchronized (channels, axes) -> "
                    f"{lowres_shape(shape, [sc] * 3)}",
                    lambda c: ["--lowres", csv([sc])],
                    lambda c: SimulateLowResolutionTransform(
                        scale=fed([sc]), synchronize_channels=True, synchronize_axes=True,
                        ignore_axes=None, allowed_channels=None, p_per_channel=1)))
    return out


def noise_cases():
    """A synchronised sigma (nnU-Net's: one normal_(mean=0, std=sigma) for every channel) and
    sigmas per channel (normal_(), then multiplied)."""
    sync, own = 0.07, [0.05, 0.09]
    return [
        Case(f"gaussian_noise sigma {sync} synchronize_channels",
             lambda c: ["--noise", csv([sync]), "--seed", str(NOISE_SEED)],
             lambda c: GaussianNoiseTransform(noise_variance=fed([sync]), p_per_channel=1,
                                              synchronize_channels=True),
             normal_call=(0.0, sync)),
        Case(f"gaussian_noise sigmas {own} per channel",
             lambda c: ["--noise", csv(own[:c]), "--seed", str(NOISE_SEED)],
             lambda c: GaussianNoiseTransform(noise_variance=fed(own[:c]), p_per_channel=1,
                                              synchronize_channels=False),
             normal_call=(0.0, 1.0)),
    ]


# --- running both -------------------------------------------------------------------------------

@contextlib.contextmanager
def fed_normal(field, calls):
    """`torch.Tensor.normal_` filling its tensor with `field` (augscope's standard normal noise,
    one row per channel) times `std` plus `mean`, as torch's own fill does; every call's
    (shape, mean, std) goes to `calls`."""
    original = torch.Tensor.normal_

    def normal_(self, mean=0.0, std=1.0, *, generator=None):
        calls.append((tuple(self.shape), float(mean), float(std)))
        if tuple(self.shape) != field.shape:
            raise AssertionError(f"normal_ on {tuple(self.shape)}, augscope's field is "
                                 f"{field.shape}")
        with torch.no_grad():
            self.copy_(torch.from_numpy(field).to(self.dtype) * std + mean)
        return self

    torch.Tensor.normal_ = normal_
    try:
        yield
    finally:
        torch.Tensor.normal_ = original


def run(args):
    r = subprocess.run([BIN, "apply", *args], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"augscope apply {' '.join(args)}: {r.stderr.strip()}")


def volume(rng, channels, shape):
    """A z-scored, MRI-like volume: smooth structure plus noise, per channel."""
    z, y, x = np.meshgrid(*[np.linspace(-1, 1, n) for n in shape], indexing="ij")
    base = np.exp(-(x ** 2 + y ** 2 + z ** 2) * 2) * 3
    return np.stack([base * (1 + c) + rng.normal(0, 0.3, base.shape) - 0.5 * c
                     for c in range(channels)]).astype(np.float32)


def main():
    rng = np.random.default_rng(7)
    shape = (20, 24, 22)
    spatial_cases = {"alone": [], "after a rotation": ["--rotate", "0.3,-0.2,0.1",
                                                       "--scale", "1.1", "--order", "3"]}
    cases = noise_cases() + blur_cases() + scalar_cases() + lowres_cases(shape)
    failed = 0
    with tempfile.TemporaryDirectory() as d:
        for channels in (1, 2):
            img = volume(rng, channels, shape)
            src = os.path.join(d, "img.npy")
            np.save(src, img if channels > 1 else img[0])
            ch = ["--channels"] if channels > 1 else []
            # augscope's standard normal field on this grid: --noise 1 on zeros.
            zeros, field_path = os.path.join(d, "zeros.npy"), os.path.join(d, "field.npy")
            np.save(zeros, np.zeros_like(img if channels > 1 else img[0]))
            run([zeros, field_path, "--noise", "1", "--seed", str(NOISE_SEED), *ch])
            field = np.load(field_path).reshape(img.shape).astype(np.float32)
            # A field of zeros would let every noise case pass with nothing added on both sides.
            moments = [(float(f.mean()), float(f.std())) for f in field]
            if not all(abs(m) < 0.05 and abs(s - 1) < 0.05 for m, s in moments) or (
                    channels > 1 and np.array_equal(field[0], field[1])):
                print(f"FAIL augscope's noise field (--noise 1 on zeros), {channels} channel(s): "
                      f"(mean, std) per channel {moments}, not standard normal noise of its own "
                      f"per channel", flush=True)
                failed += 1
            for case, spatial in spatial_cases.items():
                # augscope's own resample, the input of batchgeneratorsv2's step.
                ref = os.path.join(d, "spatial.npy")
                if spatial:
                    run([src, ref, *spatial, *ch])
                    resampled = np.load(ref)
                else:
                    resampled = np.load(src)
                resampled = resampled.reshape((channels,) + resampled.shape[-3:])
                for c in cases:
                    out = os.path.join(d, "out.npy")
                    run([src, out, *spatial, *ch, *c.flags(channels)])
                    got = np.load(out).reshape(resampled.shape)
                    t = c.transform(channels)
                    calls = []
                    feed = fed_normal(field, calls) if c.normal_call else contextlib.nullcontext()
                    with feed:
                        want = t(image=torch.from_numpy(resampled.copy()))["image"].numpy()
                    called = ""
                    calls_ok = True
                    if c.normal_call:
                        expect = [(tuple(img.shape), *c.normal_call)]
                        calls_ok = calls == expect
                        called = (f"; normal_ calls {calls}" if not calls_ok else
                                  f"; normal_(mean={c.normal_call[0]:g}, "
                                  f"std={c.normal_call[1]:g}) once on {tuple(img.shape)}")
                    rng_ = float(want.max() - want.min()) or 1.0
                    diff = np.abs(got.astype(np.float64) - want) / rng_
                    frac = float((diff <= TOL).mean())
                    ok = frac >= BAR and np.isfinite(got).all() and calls_ok
                    failed += not ok
                    print(f"{'ok  ' if ok else 'FAIL'} batchgeneratorsv2 {VERSION} {c.name}, "
                          f"{channels} channel(s), {case}: {100 * frac:.3f} % within {TOL} of "
                          f"the range (worst {diff.max():.2e}){called}", flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
