#!/usr/bin/env python3
"""augscope's MONAI 1.6.1 and TorchIO 1.2.1 intensity families against the libraries themselves,
with the drawn values fed: for each family (MONAI shift, scale, Gaussian noise, Gaussian smooth,
adjust contrast with and without inversion and retained statistics, bias field, Gaussian sharpen,
histogram shift, simulated low resolution; TorchIO noise,
blur, gamma, bias field), on a 3D one-channel volume, a 3D two-channel volume (values per
channel where the family has them) and, for the families that depend on the axes, a 2D image,
`augscope apply --step` with the values against the library's random transform (probability 1)
whose draws return the same values. Bar: at least 99.9 % of the voxels within 1e-4 of the
library output's intensity range. One line per (library, family, case).

The libraries hold the spatial axes x first, augscope z first: an augscope array (C, D, H, W)
goes to the library with its spatial axes reversed (C, W, H, D), 2D (C, H, W) as (C, W, H), and
for TorchIO, which wants 4D, as (C, W, H, 1); the output comes back the same way. Sigmas, bias
field powers and blur stds are given to the library on its own axes (x = augscope's last).

The draws are fed so: MONAI's shift, scale, noise and bias field get a stand-in for their `R`
(numpy RandomState) whose `uniform` returns the fed values in turn and whose
`normal(loc, scale, size)` returns `loc + scale * z`, its smooth and contrast ranges of one value;
TorchIO's noise and blur get ranges of one float32-representable value (and `torch.randn`
replaced for the call by z), its bias field and gamma `sample_uniform` or `get_params` replaced
on the instance. z is augscope's own standard normal field for the step's seed (`augscope apply`
of `monai_gaussian_noise` with mean 0 and std 1 on zeros).

    python tests/interop/check_intensity_libs.py [path/to/augscope]

Exit 0 at the bar, 1 below it, 77 when MONAI, TorchIO or torch is missing.
"""
import contextlib
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

try:
    import torch
    import monai
    import monai.transforms as mt
    import torchio as tio
except ImportError as e:
    print(f"SKIP intensity_libs: {e}")
    sys.exit(77)

from importlib.metadata import version

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BIN = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "target", "debug", "augscope")
LIBS = {"MONAI": version("monai"), "TorchIO": version("torchio")}
BAR, TOL = 0.999, 1e-4
SHAPE3, SHAPE2 = (19, 24, 27), (33, 40)  # odd and even sizes catch off-by-one coordinates

monai.data.set_track_meta(False)  # plain tensors out of MONAI


def fed(values):
    """A callable that returns `values` one after another, whatever it is passed."""
    it = iter(values)
    return lambda *_args, **_kwargs: next(it)


class FedR:
    """A stand-in for a MONAI transform's `R`: `rand` fires it, `uniform` returns `values` in
    turn (an array of `size` of them when asked for one), `normal` is `loc + scale * z`."""

    def __init__(self, values=(), z=None):
        self.it, self.z = iter(values), z

    def rand(self, *_args):
        return 0.0

    def uniform(self, low=0.0, high=1.0, size=None):
        if size is None:
            return next(self.it)
        return np.array([next(self.it) for _ in range(int(np.prod(size)))]).reshape(size)

    def normal(self, loc=0.0, scale=1.0, size=None):
        assert tuple(size) == self.z.shape, f"normal of {size}, the field is {self.z.shape}"
        return loc + scale * self.z.astype(np.float64)


def with_r(transform, r):
    transform.R = r
    return transform


@contextlib.contextmanager
def fed_randn(z):
    """`torch.randn(*shape)` returning the float32 field `z` (library layout), for one call."""
    original = torch.randn

    def randn(*shape, **_kwargs):
        assert tuple(shape) == z.shape, f"randn{shape}, the field is {z.shape}"
        return torch.from_numpy(z.copy())

    torch.randn = randn
    try:
        yield
    finally:
        torch.randn = original


# --- layouts: augscope (C, z, y, x) <-> library (C, x, y, z) -------------------------------------

def to_monai(a):
    return np.ascontiguousarray(np.transpose(a, (0,) + tuple(range(a.ndim - 1, 0, -1))))


from_monai = to_monai  # reversing the spatial axes is its own inverse


def to_tio(a):
    lib = to_monai(a)
    return lib[..., None] if a.ndim == 3 else lib  # 2D: (C, W, H, 1)


def from_tio(a, ndim):
    return from_monai(a[..., 0] if ndim == 2 else a)


def monai_call(transform):
    """Run a MONAI array transform on the library layout of `img`, return augscope's layout."""
    return lambda img: from_monai(np.asarray(transform(torch.from_numpy(to_monai(img)))))


def tio_call(transform, feed=contextlib.nullcontext):
    def call(img):
        subject = tio.Subject(image=tio.ScalarImage(tensor=torch.from_numpy(to_tio(img))))
        with feed():
            out = transform(subject).image.data.numpy()
        return from_tio(out, img.ndim - 1)
    return call


# --- the cases: (library, family, case, image, augscope's step, the library's run) --------------

def cases(rng, z_field):
    def vol(c, shape=SHAPE3, loc=100.0, scale=50.0):
        return (rng.normal(0, 1, (c, *shape)) * scale + loc).astype(np.float32)

    def positive(c, shape=SHAPE3):
        """A smooth positive field plus noise, per channel (values about 20 to 200)."""
        g = np.meshgrid(*[np.linspace(-1, 1, n) for n in shape], indexing="ij")
        base = 100 + 60 * np.cos(2 * g[0]) * np.sin(3 * g[-1] + 1)
        return np.stack([base * (1 + 0.3 * i) + rng.uniform(0, 20, shape)
                         for i in range(c)]).astype(np.float32)

    def coeffs(n):
        return [float(v) for v in rng.integers(-19, 20, n) / 64]  # in [-0.3, 0.3], exact in f32

    out = []
    # MONAI shift and scale: one value for all channels, or channel_wise.
    for tag, c, vals, cw in (("3d-1ch", 1, [2.5], False), ("3d-2ch", 2, [1.5, -0.75], True),
                             ("3d-2ch-shared", 2, [-0.375], False)):
        out.append(("MONAI", "monai_shift_intensity", tag, vol(c),
                    {"monai_shift_intensity": {"offsets": vals}},
                    monai_call(with_r(mt.RandShiftIntensity(offsets=(-3, 3), prob=1.0,
                                                            channel_wise=cw), FedR(vals)))))
    for tag, c, vals, cw in (("3d-1ch", 1, [0.25], False), ("3d-2ch", 2, [-0.375, 0.75], True),
                             ("3d-2ch-shared", 2, [1.5], False)):
        out.append(("MONAI", "monai_scale_intensity", tag, vol(c),
                    {"monai_scale_intensity": {"factors": vals}},
                    monai_call(with_r(mt.RandScaleIntensity(factors=(-1, 2), prob=1.0,
                                                            channel_wise=cw), FedR(vals)))))
    # Noise: the library's own arithmetic on augscope's standard normal field.
    for tag, c in (("3d-1ch", 1), ("3d-2ch", 2)):
        m, s, seed = 0.5, 3.0, 7
        z = to_monai(z_field((c, *SHAPE3), seed))
        out.append(("MONAI", "monai_gaussian_noise", tag, vol(c),
                    {"monai_gaussian_noise": {"mean": m, "std": s, "seed": seed}},
                    monai_call(with_r(mt.RandGaussianNoise(prob=1.0, mean=m, std=s,
                                                           sample_std=False), FedR(z=z)))))
        m, s, seed = 0.25, 2.0, 3
        z = to_tio(z_field((c, *SHAPE3), seed))
        out.append(("TorchIO", "torchio_noise", tag, vol(c),
                    {"torchio_noise": {"mean": m, "std": s, "seed": seed}},
                    tio_call(tio.RandomNoise(mean=(m, m), std=(s, s)),
                             lambda z=z: fed_randn(z))))
    # Gaussian smooth / blur: sigmas per augscope axis, the library's reversed (x first).
    for tag, img, sig in (("3d-1ch", vol(1), [1.0, 0.5, 2.25]),
                          ("3d-2ch", vol(2), [1.5, 0.75, 1.25]),
                          ("2d-1ch", vol(1, SHAPE2), [1.25, 0.75])):
        lib = sig[::-1] + [0.0] * (3 - len(sig))
        out.append(("MONAI", "monai_gaussian_smooth", tag, img,
                    {"monai_gaussian_smooth": {"sigmas": sig}},
                    monai_call(mt.RandGaussianSmooth(sigma_x=(lib[0],) * 2, sigma_y=(lib[1],) * 2,
                                                     sigma_z=(lib[2],) * 2, prob=1.0))))
        lib = sig[::-1] + [1.0] * (3 - len(sig))  # 2D: TorchIO's z is the size-1 axis
        out.append(("TorchIO", "torchio_blur", tag, img,
                    {"torchio_blur": {"sigmas": sig}},
                    tio_call(tio.RandomBlur(std=tuple(s for s in lib for _ in (0, 1))))))
    # MONAI adjust contrast: statistics over the whole image, all channels.
    for tag, c in (("3d-1ch", 1), ("3d-2ch", 2)):
        for g, inv, keep in ((1.75, False, False), (0.75, True, False), (1.5, False, True),
                             (0.625, True, True)):
            flags = ("+invert" if inv else "") + ("+retain_stats" if keep else "")
            out.append(("MONAI", "monai_adjust_contrast", f"{tag} gamma {g}{flags}", vol(c),
                        {"monai_adjust_contrast": {"gamma": g, "invert": inv,
                                                   "retain_stats": keep}},
                        monai_call(mt.RandAdjustContrast(prob=1.0, gamma=(g, g), invert_image=inv,
                                                         retain_stats=keep))))
    # TorchIO gamma: sign(x)|x|^g where a channel has negative values.
    for tag, img, gs in (("3d-1ch", positive(1), [1.375]),
                         ("3d-1ch-negative", vol(1, loc=20.0), [0.75]),
                         ("3d-2ch", positive(2), [1.375, 0.625]),
                         ("3d-2ch-negative", vol(2, loc=10.0), [0.625, 1.25])):
        t = tio.RandomGamma()
        t.get_params = fed(gs)
        out.append(("TorchIO", "torchio_gamma", tag, img, {"torchio_gamma": {"gammas": gs}},
                    tio_call(t)))
    # Bias fields, degree/order 3. MONAI 3D: (i, j, k) on (x, y, z), k innermost -> powers
    # [k, j, i]; 2D: numpy's lower triangle (i, j) on (x, y) -> [j, i]. TorchIO: (x, y, z)
    # orders, z innermost -> [z, y, x]; in 2D z is 0, so only z == 0 terms remain, as [y, x].
    d = 3
    for tag, img in (("3d-1ch", positive(1)), ("3d-2ch", positive(2)),
                     ("2d-1ch", positive(1, SHAPE2))):
        ndim = img.ndim - 1
        if ndim == 3:
            ijk = [(i, j, k) for i in range(d + 1) for j in range(d + 1 - i)
                   for k in range(d + 1 - i - j)]
        else:
            ijk = list(zip(*np.tril_indices(d + 1)))
        cs = coeffs(len(ijk))
        terms = [{"powers": [int(p) for p in t[::-1]], "c": c} for t, c in zip(ijk, cs)]
        out.append(("MONAI", "monai_bias_field", tag, img,
                    {"monai_bias_field": {"convention": "monai", "terms": terms}},
                    monai_call(with_r(mt.RandBiasField(prob=1.0, degree=d,
                                                       coeff_range=(-0.3, 0.3)), FedR(cs)))))
        xyz = [(x, y, zz) for x in range(d + 1) for y in range(d + 1 - x)
               for zz in range(d + 1 - x - y)]
        cs = coeffs(len(xyz))
        terms = [{"powers": [zz, y, x][3 - ndim:], "c": c}
                 for (x, y, zz), c in zip(xyz, cs) if ndim == 3 or zz == 0]
        t = tio.RandomBiasField(coefficients=(-0.3, 0.3), order=d)
        t.sample_uniform = fed(cs)
        out.append(("TorchIO", "torchio_bias_field", tag, img,
                    {"torchio_bias_field": {"convention": "torchio", "terms": terms}},
                    tio_call(t)))
    # MONAI sharpen: two erf blurs (sigmas per augscope axis, MONAI's reversed) and a weight.
    for tag, img, s1, s2, a in (("3d-1ch", vol(1), [1.0, 0.75, 1.25], [0.5, 0.625, 0.75], 12.5),
                                ("3d-2ch", vol(2), [0.875, 1.0, 0.5], [0.5, 0.5, 0.5], 27.25),
                                ("2d-1ch", vol(1, SHAPE2), [1.25, 0.75], [0.625, 0.5], 18.0)):
        l1 = s1[::-1] + [0.5] * (3 - len(s1))
        l2 = s2[::-1] + [0.5] * (3 - len(s2))
        out.append(("MONAI", "monai_gaussian_sharpen", tag, img,
                    {"monai_gaussian_sharpen": {"sigma1": s1, "sigma2": s2, "alpha": a}},
                    monai_call(with_r(mt.RandGaussianSharpen(prob=1.0),
                                      FedR(l1 + l2 + [a])))))
    # MONAI histogram shift: control points over the whole image's range, every channel.
    for tag, img, n in (("3d-1ch 10 points", vol(1), 10), ("3d-2ch 5 points", positive(2), 5),
                        ("2d-1ch 3 points", vol(1, SHAPE2), 3)):
        ref = np.linspace(0, 1, n)
        pts = ref.copy()
        for i in range(1, n - 1):
            pts[i] = pts[i - 1] + (ref[i + 1] - pts[i - 1]) * float(rng.uniform(0.1, 0.9))
        t = mt.RandHistogramShift(num_control_points=n, prob=1.0)
        t.R = FedR(list(pts[1:-1]))
        t.R.randint = lambda lo, hi, n=n: n
        out.append(("MONAI", "monai_histogram_shift", tag, img,
                    {"monai_histogram_shift": {"points": [float(v) for v in pts]}},
                    monai_call(t)))
    # MONAI low resolution: legacy nearest down, (tri)linear up; 2D with bilinear up.
    for tag, img, zoom in (("3d-1ch zoom 0.5", vol(1), 0.5), ("3d-2ch zoom 0.7", vol(2), 0.7),
                           ("3d-1ch zoom 0.83", positive(1), 0.83),
                           ("2d-1ch zoom 0.6", vol(1, SHAPE2), 0.6)):
        mode = "trilinear" if img.ndim == 4 else "bilinear"
        out.append(("MONAI", "monai_simulate_low_resolution", tag, img,
                    {"monai_simulate_low_resolution": {"zoom": zoom}},
                    monai_call(mt.RandSimulateLowResolution(prob=1.0, zoom_range=(zoom, zoom),
                                                            upsample_mode=mode))))
    return out


# --- running both -------------------------------------------------------------------------------

def main():
    failed = 0
    with tempfile.TemporaryDirectory() as d:
        src, dst = os.path.join(d, "in.npy"), os.path.join(d, "out.npy")

        def apply(img, step):
            """`augscope apply --step` on `img` (C, *spatial), in augscope's layout."""
            np.save(src, img if img.shape[0] > 1 else img[0])
            args = [BIN, "apply", src, dst, "--backend", "cpu", "--step", json.dumps(step)]
            r = subprocess.run(args + (["--channels"] if img.shape[0] > 1 else []),
                               capture_output=True, text=True)
            if r.returncode != 0:
                raise SystemExit(f"augscope apply --step {json.dumps(step)}: {r.stderr.strip()}")
            return np.load(dst).reshape(img.shape)

        def z_field(shape, seed):
            """augscope's standard normal field for `seed` on (C, *spatial)."""
            z = apply(np.zeros(shape, np.float32),
                      {"monai_gaussian_noise": {"mean": 0.0, "std": 1.0, "seed": seed}})
            # A field of zeros would let every noise case pass with nothing added on both sides.
            moments = [(float(f.mean()), float(f.std())) for f in z]
            if not all(abs(m) < 0.05 and abs(s - 1) < 0.05 for m, s in moments) or (
                    shape[0] > 1 and np.array_equal(z[0], z[1])):
                nonlocal failed
                failed += 1
                print(f"FAIL augscope's noise field, seed {seed}, {shape}: (mean, std) per "
                      f"channel {moments}, not standard normal noise of its own per channel")
            return z.astype(np.float32)

        for lib, family, tag, img, step, run_lib in cases(np.random.default_rng(20240611),
                                                          z_field):
            got = apply(img, step)
            want = run_lib(img.copy()).astype(np.float64)
            assert want.shape == got.shape, f"{family} {tag}: {want.shape} vs {got.shape}"
            span = float(want.max() - want.min()) or 1.0
            diff = np.abs(got.astype(np.float64) - want) / span
            frac = float((diff <= TOL).mean())
            ok = frac >= BAR and bool(np.isfinite(got).all())
            failed += not ok
            print(f"{lib} {LIBS[lib]} {family} {tag}: {100 * frac:.3f}% within {TOL:g} of range "
                  f"(worst {diff.max():.1e}) {'ok' if ok else 'FAIL'}", flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
