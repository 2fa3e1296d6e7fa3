"""Shared pieces of the interop checks (tests/interop/check_*.py).

Each check runs what `augscope preset export` writes under the real training library and compares
its output with `augscope apply` of the same plan. This module holds what they share:

- `augscope(...)`: the binary (argv[1], $AUGSCOPE, or target/debug/augscope);
- `philox_uniform` / `elastic_noise`: augscope's elastic noise (docs/design.md §4) in numpy, so a check can
  feed it through a library's own random calls;
- the scans: `mni_small()` (the bundled MNI T1 downsampled, with a bright off-centre block so that
  a turn the wrong way cannot pass), `anisotropic()` and `oriented(code)` (the same anatomy stored
  as RAS, LAS or LPS, with its real affine);
- `write_preset`, `export_snippet`, `exec_snippet`, `apply`: one round trip;
- `agreement` and `Report`: the bar (>= 99 % of voxels within 1e-2 of the intensity range, label
  maps >= 99.5 % equal) and one printed line per (target, case).

Arrays are augscope's `[z, y, x]`; MONAI and TorchIO hold `v.T[None]` (channel first, x first).
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
MNI = os.path.join(ROOT, "assets", "mni152_t1.nii.gz")
MNI_LABELS = os.path.join(ROOT, "assets", "mni152_tissue_labels.nii.gz")

IMAGE_BAR = 0.99
LABEL_BAR = 0.995
TOLERANCE = 1e-2

SKIP = 77


def binary():
    if len(sys.argv) > 1 and not sys.argv[1].startswith("-"):
        return sys.argv[1]
    return os.environ.get("AUGSCOPE", os.path.join(ROOT, "target", "debug", "augscope"))


def require(module, pin):
    """Imports `module`, or exits 77 (skip) saying what to install."""
    try:
        return __import__(module)
    except ImportError:
        print(f"SKIP: {module} is not installed (pip install {pin})")
        sys.exit(SKIP)


def version(dist):
    from importlib.metadata import version as v
    return v(dist)


def run(*args, text=True):
    """Runs augscope with `args`; raises with its stderr on failure."""
    p = subprocess.run([binary(), *map(str, args)], capture_output=True, text=text)
    if p.returncode != 0:
        raise RuntimeError(f"augscope {' '.join(map(str, args))} exited {p.returncode}: {p.stderr}")
    return p.stdout


# --- augscope's elastic noise (docs/design.md §4) -------------------------------------------------------

_M0, _M1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)
_W0, _W1 = np.uint32(0x9E3779B9), np.uint32(0xBB67AE85)
_LO = np.uint64(0xFFFFFFFF)


def philox4x32_10(c0, c1, c2, c3, k0, k1):
    """Philox4x32-10 (Random123) on uint32 arrays; returns the four output words."""
    c0, c1, c2, c3 = (np.asarray(c, dtype=np.uint32) for c in (c0, c1, c2, c3))
    k0, k1 = np.uint32(k0), np.uint32(k1)
    with np.errstate(over="ignore"):
        for r in range(10):
            if r:
                k0 = np.uint32(k0 + _W0)
                k1 = np.uint32(k1 + _W1)
            p0 = _M0 * c0.astype(np.uint64)
            p1 = _M1 * c2.astype(np.uint64)
            hi0, lo0 = (p0 >> np.uint64(32)).astype(np.uint32), (p0 & _LO).astype(np.uint32)
            hi1, lo1 = (p1 >> np.uint64(32)).astype(np.uint32), (p1 & _LO).astype(np.uint32)
            c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
    return c0, c1, c2, c3


def philox_uniform(seed, k, n):
    """u in [0, 1) for component `k` and linear indices 0..n: augscope's noise is 2u - 1."""
    i = np.arange(n, dtype=np.uint64)
    x0 = philox4x32_10((i & _LO).astype(np.uint32), (i >> np.uint64(32)).astype(np.uint32),
                       np.full(n, k, np.uint32), np.zeros(n, np.uint32),
                       seed & 0xFFFFFFFF, seed >> 32)[0]
    return ((x0 >> np.uint32(8)).astype(np.float64) * 2.0 ** -24)


def elastic_noise(seed, shape):
    """The unsmoothed noise of every component, shape (ndim, *shape), in [-1, 1)."""
    n = int(np.prod(shape))
    return np.stack([2.0 * philox_uniform(seed, k, n).reshape(shape) - 1.0
                     for k in range(len(shape))])


def _self_test():
    # docs/design.md §4 known answers.
    w = philox4x32_10([0], [0], [0], [0], 0, 0)
    assert [int(x[0]) for x in w] == [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8], w
    u = 2.0 * philox_uniform(42, 0, 3) - 1.0
    assert np.allclose(u, [0.2259197, 0.9754373, 0.6517336], atol=1e-7), u


_self_test()


# --- scans --------------------------------------------------------------------------------------

def _nib():
    return require("nibabel", "nibabel")


def with_block(vol):
    """`vol` scaled to [0, 1] with a bright block off every centre line and plane, so a turn
    or a flip the wrong way moves it somewhere else."""
    v = vol.astype(np.float64)
    v = (v - v.min()) / max(v.max() - v.min(), 1e-12)
    sl = tuple(slice(int(n * 0.62), int(n * 0.62) + max(2, n // 8)) for n in v.shape)
    v[sl] = 1.0
    return v.astype(np.float32)


def mni_small(step=3):
    """The bundled MNI T1 (RAS, 1 mm) every `step` voxels, [z, y, x] in [0, 1] with the block;
    its tissue labels on the same grid; the affine of the subsampled grid."""
    nib = _nib()
    img = nib.load(MNI)
    vol = np.asarray(img.dataobj).T[::step, ::step, ::step]
    lab = np.asarray(nib.load(MNI_LABELS).dataobj).T[::step, ::step, ::step]
    aff = img.affine.copy()
    aff[:3, :3] *= step
    return with_block(vol), lab.astype(np.uint8), aff


def anisotropic(spacing=(3.0, 1.0, 1.0)):
    """The MNI sample resliced onto anisotropic voxels ([z, y, x] spacing in mm, RAS)."""
    nib = _nib()
    img = nib.load(MNI)
    full = np.asarray(img.dataobj).T
    lab_full = np.asarray(nib.load(MNI_LABELS).dataobj).T
    steps = [int(round(s * 2)) for s in spacing]  # every 2 mm in-plane on the 1 mm template
    sl = tuple(slice(None, None, s) for s in steps)
    aff = img.affine.copy()
    for a, s in enumerate(reversed(steps)):
        aff[:3, a] *= s
    return with_block(full[sl]), lab_full[sl].astype(np.uint8), aff


def oriented(vol, lab, aff, code):
    """The same anatomy stored in orientation `code` ("RAS", "LAS", "LPS"): the array's axes are
    flipped where the code differs from RAS, and the affine follows, so world positions are kept.
    `vol` and `aff` are an RAS scan's [z, y, x] array and affine."""
    out_v, out_l, out_a = vol, lab, aff.copy()
    # NIfTI axis i (x first) is array axis 2 - i.
    for i, (have, want) in enumerate(zip("RAS", code)):
        if have != want:
            a = 2 - i
            n = vol.shape[a]
            out_v = np.flip(out_v, a)
            out_l = np.flip(out_l, a)
            flip = np.eye(4)
            flip[i, i] = -1
            flip[i, 3] = n - 1
            out_a = out_a @ flip
    return np.ascontiguousarray(out_v), np.ascontiguousarray(out_l), out_a


def save_nifti(path, vol, aff):
    """Writes a [z, y, x] array as NIfTI with `aff` as sform and qform."""
    nib = _nib()
    img = nib.Nifti1Image(np.asarray(vol).T, aff)
    img.set_sform(aff, code=1)
    img.set_qform(aff, code=1)
    nib.save(img, path)


# --- one round trip -----------------------------------------------------------------------------

def _toml_value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return repr(float(v)) if isinstance(v, float) else str(v)


def preset_toml(name, sections, space=None):
    """A preset file's text: `sections` maps a table name (flip, rotate, ...) to its keys."""
    lines = ["version = 1", f"name = {json.dumps(name)}"]
    if space:
        lines.append(f"space = {json.dumps(space)}")
    for table, keys in sections.items():
        lines.append(f"[{table}]")
        lines += [f"{k} = {_toml_value(v)}" for k, v in keys.items()]
    return "\n".join(lines) + "\n"


class Workdir:
    """A temporary folder with helpers that write into it."""

    def __init__(self):
        self._tmp = tempfile.TemporaryDirectory(prefix="augscope-interop-")
        self.path = self._tmp.name

    def file(self, name):
        return os.path.join(self.path, name)

    def preset(self, name, sections, space=None):
        path = self.file(name.replace(" ", "_") + ".toml")
        with open(path, "w") as fh:
            fh.write(preset_toml(name, sections, space))
        return path

    def npy(self, name, arr):
        path = self.file(name + ".npy")
        np.save(path, arr)
        return path

    def close(self):
        self._tmp.cleanup()


def export_snippet(target, preset_path, ndim):
    return run("preset", "export", "--to", target, "--ndim", ndim, preset_path)


def exec_snippet(text, name="snippet"):
    ns = {"__name__": f"augscope_{name}"}
    exec(compile(text, f"{name}.py", "exec"), ns)
    return ns


def apply(work, image_path, args, label_path=None, tag="out", ext="npy"):
    """`augscope apply` on the CPU engine; returns (image, labels or None) as arrays."""
    out = work.file(f"{tag}.{ext}")
    argv = ["apply", image_path, out, *args, "--backend", "cpu"]
    lab_out = None
    if label_path is not None:
        lab_out = work.file(f"{tag}_labels.{ext}")
        argv += ["--label", label_path, "--label-out", lab_out]
    run(*argv)
    return _load(out), (_load(lab_out) if lab_out else None)


def _load(path):
    if path.endswith(".npy"):
        return np.load(path)
    return np.asarray(_nib().load(path).dataobj).T


# --- the bar ------------------------------------------------------------------------------------

def agreement(ours, theirs, value_range=1.0, tol=TOLERANCE):
    """Fraction of voxels within `tol * value_range`, and the largest difference."""
    ours = np.asarray(ours, dtype=np.float64)
    theirs = np.asarray(theirs, dtype=np.float64)
    if ours.shape != theirs.shape:
        raise AssertionError(f"shapes differ: augscope {ours.shape}, library {theirs.shape}")
    d = np.abs(ours - theirs)
    return float((d <= tol * value_range).mean()), float(d.max())


def label_agreement(ours, theirs):
    ours, theirs = np.asarray(ours), np.asarray(theirs)
    if ours.shape != theirs.shape:
        raise AssertionError(f"label shapes differ: augscope {ours.shape}, library {theirs.shape}")
    return float((ours.astype(np.int64) == np.rint(theirs).astype(np.int64)).mean())


class Report:
    """Collects one line per (target, case); `finish()` exits 1 if any line is below the bar."""

    def __init__(self, target, library_version):
        self.target = target
        self.version = library_version
        self.failed = []
        self.count = 0

    def case(self, name, image_frac, label_frac=None, extra="", tol=TOLERANCE):
        self.count += 1
        ok = image_frac >= IMAGE_BAR and (label_frac is None or label_frac >= LABEL_BAR)
        labels = "" if label_frac is None else f", labels {100 * label_frac:6.2f} % equal"
        line = (f"{self.target} {self.version} | {name}: {100 * image_frac:6.2f} % within "
                f"{tol:g}{labels}{(' | ' + extra) if extra else ''}  {'ok' if ok else 'FAIL'}")
        print(line, flush=True)
        if not ok:
            self.failed.append(name)
        return ok

    def stat(self, name, ok, detail):
        """A distribution check (KS test or moments) as one line."""
        self.count += 1
        print(f"{self.target} {self.version} | {name}: {detail}  {'ok' if ok else 'FAIL'}",
              flush=True)
        if not ok:
            self.failed.append(name)
        return ok

    def finish(self):
        if self.failed:
            print(f"{self.target}: {len(self.failed)} of {self.count} below the bar: "
                  f"{', '.join(self.failed)}")
            sys.exit(1)
        print(f"{self.target}: all {self.count} cases at the bar")


def ks_2samp(a, b):
    """Two-sample Kolmogorov-Smirnov p-value (scipy's, asymptotic for ties-free large samples)."""
    from scipy.stats import ks_2samp as ks
    return float(ks(np.asarray(a, float), np.asarray(b, float)).pvalue)


def preset_samples(preset_path, count, seed=0, ndim=3):
    """`augscope preset sample` for seeds seed..seed+count: a list of the JSON samples."""
    out = []
    for s in range(seed, seed + count):
        out.append(json.loads(run("preset", "sample", "--seed", s, "--ndim", ndim, preset_path)))
    return out


def check_verified_line(snippet, dists):
    """The snippet's `# Verified against:` line must name exactly the installed versions of
    `dists` (distribution names as pip knows them), so a snippet never claims a check that this
    run did not make."""
    line = next((ln for ln in snippet.splitlines() if ln.startswith("# Verified against: ")), None)
    if line is None:
        raise AssertionError("the snippet has no '# Verified against:' line")
    claimed = line[len("# Verified against: "):].split(" (")[0]
    pairs = dict(part.strip().split(" ", 1) for part in claimed.split(","))
    installed = {d: version(d) for d in dists}
    want = {d.lower(): v for d, v in installed.items()}
    got = {d.lower(): v for d, v in pairs.items()}
    if got != want:
        raise AssertionError(f"the snippet claims {claimed!r}; installed: {installed}")
    return claimed
