#!/usr/bin/env python3
"""fuzz.py - a seeded mutation fuzzer of augscope's input contract, on stable Rust's binary.

Every loader (NIfTI, NIfTI .gz, DICOM file, DICOM folder, .npy, PNG, TIFF, JPEG), the preset
parser, `preset import` and the export of arbitrary presets get mutants of a seed corpus (the
small files committed under tests/data/io, tests/data/dicom, tests/data/retina.jpg and
assets/presets): bit flips, interesting integers written over header fields, deletions,
duplications, truncations and, for text, extreme numbers, stray quotes and newlines. Three more
targets make hostile cases of their own: presets with ranges on and past the plan limits
(hostile_preset), NIfTI voxel sizes no scan has under --space mm (tiny_spacing), and parameter
dicts with bad orders, axes and values (hostile_import). Each mutant
runs the CLI in a process of its own, and the contract is checked:

- the exit code is 0 or 2 (2: exactly one line on stderr, starting with "augscope: "), never a
  panic, an abort or a signal;
- it ends within --timeout seconds and within --mem-mb of address space;
- a failed `apply` leaves no output file; the input is never changed;
- an exported snippet that succeeded is valid Python.

The mutants are a pure function of --seed, so a run is reproducible: CI runs a short, fixed
budget (`--execs`), a longer local run takes more (`--execs 100000`, a release binary). A
contract break is saved under --crashes with the command that shows it, and the exit code is 1.

    python3 tests/fuzz/fuzz.py --bin target/debug/augscope --execs 1500

With --in-process WORKER (the `fuzz` example, examples/fuzz.rs), the same targets run through the
library in one process, thousands of mutants per second: --execs is then per target, each
target's worker runs under the memory limit, a panic or a contract break is reported by the
worker, and an abort, a signal or a hang ends it; the supervisor keeps that mutant and starts a
new worker after it. Exported snippets are parsed as Python at the end.

    cargo build --release --no-default-features --example fuzz
    python3 tests/fuzz/fuzz.py --in-process target/release/examples/fuzz --execs 100000
"""
import argparse
import ast
import hashlib
import os
import resource
import shutil
import struct
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
INTERESTING = [0, 1, 0x7F, 0x80, 0xFF, 0x7FFF, 0x8000, 0xFFFF, 0x7FFFFFFF, 0x80000000,
               0xFFFFFFFF]
NUMBERS = ["0", "-1", "1e308", "-1e308", "1e19", "nan", "inf", "-0.0", "18446744073709551615",
           "255", "1e-300", "3"]


class Rng:
    """xorshift64*: the mutants depend on the seed alone."""

    def __init__(self, seed):
        self.s = (seed * 0x9E3779B97F4A7C15 + 1) & (2**64 - 1) or 1

    def next(self):
        x = self.s
        x ^= (x >> 12)
        x ^= (x << 25) & (2**64 - 1)
        x ^= (x >> 27)
        self.s = x
        return (x * 0x2545F4914F6CDD1D) & (2**64 - 1)

    def below(self, n):
        return self.next() % max(1, n)

    def pick(self, seq):
        return seq[self.below(len(seq))]


def mutate_bytes(rng, data):
    b = bytearray(data)
    for _ in range(1 + rng.below(4)):
        if not b:
            b = bytearray(b"\x00")
        op = rng.below(7)
        i = rng.below(len(b))
        if op == 0:
            b[i] ^= 1 << rng.below(8)
        elif op == 1:
            v = rng.pick(INTERESTING)
            width = rng.pick([1, 2, 4])
            order = rng.pick(["little", "big"])
            chunk = (v & ((1 << (8 * width)) - 1)).to_bytes(width, order)
            b[i:i + width] = chunk
        elif op == 2:
            del b[i:i + 1 + rng.below(64)]
        elif op == 3:
            j = rng.below(len(b))
            b[i:i] = b[j:j + 1 + rng.below(64)]
        elif op == 4:
            del b[i:]
        elif op == 5:
            b[i] = rng.below(256)
        else:
            b[i:i] = bytes(rng.below(256) for _ in range(1 + rng.below(16)))
    return bytes(b)


def mutate_text(rng, text):
    lines = text.split("\n")
    for _ in range(1 + rng.below(3)):
        op = rng.below(6)
        i = rng.below(len(lines))
        line = lines[i]
        if op == 0:
            # replace a number
            digits = [k for k, c in enumerate(line) if c.isdigit()]
            if digits:
                k = rng.pick(digits)
                j = k
                while j < len(line) and (line[j].isdigit() or line[j] in ".e-+"):
                    j += 1
                lines[i] = line[:k] + rng.pick(NUMBERS) + line[j:]
        elif op == 1:
            del lines[i]
            if not lines:
                lines = [""]
        elif op == 2:
            lines.insert(i, lines[rng.below(len(lines))])
        elif op == 3:
            k = rng.below(len(line) + 1)
            lines[i] = line[:k] + rng.pick(['"', "'", "\\n", "\n", '"""', "\\", "[", "]", "{",
                                            "=", "\x00", "é", "\ud7ff"]) + line[k:]
        elif op == 4:
            lines[i] = line[:rng.below(len(line) + 1)]
        else:
            b = mutate_bytes(rng, line.encode("utf-8", "surrogatepass"))
            lines[i] = b.decode("utf-8", "replace")
    return "\n".join(lines)


def seeds():
    """(target, file name, bytes or text) of the seed corpus."""
    out = []
    io_dir = os.path.join(ROOT, "tests", "data", "io")
    for name in sorted(os.listdir(io_dir)):
        path = os.path.join(io_dir, name)
        kind = {".nii": "nifti", ".gz": "nifti_gz", ".npy": "npy", ".png": "png",
                ".tif": "tiff"}.get(os.path.splitext(name)[1])
        if kind:
            with open(path, "rb") as fh:
                out.append((kind, name, fh.read()))
    with open(os.path.join(ROOT, "tests", "fuzz", "seeds", "nifti2.nii"), "rb") as fh:
        out.append(("nifti", "nifti2.nii", fh.read()))
    for name in ("MR_small.dcm", "CT_small.dcm"):
        with open(os.path.join(ROOT, "tests", "data", "dicom", name), "rb") as fh:
            out.append(("dicom", name, fh.read()))
    with open(os.path.join(ROOT, "tests", "data", "retina.jpg"), "rb") as fh:
        out.append(("jpeg", "retina.jpg", fh.read()))
    # The bundled presets, and the presets that fire every intensity family.
    for pdir in (os.path.join(ROOT, "assets", "presets"), os.path.join(ROOT, "scripts", "presets")):
        for name in sorted(os.listdir(pdir)):
            with open(os.path.join(pdir, name)) as fh:
                text = fh.read()
            out.append(("preset", name, text))
            out.append(("export", name, text))
    return out + hostile_io_seeds()


def _dicom_meta_implicit(preamble):
    """A DICOM file start whose meta group declares only an implicit VR transfer syntax."""
    ts = b"1.2.840.10008.1.2\0"
    ts_el = b"\x02\x00\x10\x00UI" + struct.pack("<H", len(ts)) + ts
    head = (b"\0" * 128 if preamble else b"") + b"DICM"
    return head + b"\x02\x00\x00\x00UL\x04\x00" + struct.pack("<I", len(ts_el)) + ts_el


def _dicom_hidden(preamble, payload):
    """A group length that ends the meta group before a group-0002 element which, read as meta
    (explicit VR, UN), spans `payload`, and read as the implicit VR data set is 4 bytes long."""
    return (_dicom_meta_implicit(preamble) + b"\x02\x00\x99\x00\x04\x00\x00\x00"
            + struct.pack("<I", len(payload)) + payload)


def _dicom_ds(data, group, element, text):
    """An explicit VR little endian file with the DS element (group, element) set to `text`."""
    key = struct.pack("<HH", group, element) + b"DS"
    at = data.find(key)
    if at < 0:
        return data
    old = struct.unpack("<H", data[at + 6:at + 8])[0]
    value = text.encode() + (b" " if len(text) % 2 else b"")
    return data[:at + 6] + struct.pack("<H", len(value)) + value + data[at + 8 + old:]


def _multiband_tiff(samples):
    """A 1 x 1 min-is-black TIFF of `samples` samples of 8 bits (what the image crate calls
    multiband), with a SampleFormat of unsigned integers."""
    entries = [(256, 3, 1, 1), (257, 3, 1, 1), (258, 3, samples, 0), (259, 3, 1, 1),
               (262, 3, 1, 1), (273, 4, 1, 0), (277, 3, 1, samples), (278, 3, 1, 1),
               (279, 4, 1, samples), (339, 3, 1, 1)]
    bits_at = 8 + 2 + 12 * len(entries) + 4
    data_at = bits_at + 2 * samples
    b = b"II*\x00" + struct.pack("<I", 8) + struct.pack("<H", len(entries))
    for tag, typ, count, value in entries:
        value = {258: bits_at, 273: data_at}.get(tag, value)
        packed = struct.pack("<HH", value, 0) if typ == 3 and count == 1 else \
            struct.pack("<I", value)
        b += struct.pack("<HHI", tag, typ, count) + packed
    return b + struct.pack("<I", 0) + struct.pack("<H", 8) * samples + b"\x07" * samples


def hostile_io_seeds():
    """Seeds of the loaders' hostile classes: DICOM meta groups whose group length ends early
    (hiding nested sequences or a 4 GB pixel data length from a check that reads the meta group
    another way), with and without the preamble; DICOM geometry of 1e308, NaN or non-unit
    cosines; .npy files with trailing bytes or a header length of gigabytes; a TIFF of 257
    samples per pixel."""
    out = []
    nested = (b"\x08\x00\x15\x11\xff\xff\xff\xff\xfe\xff\x00\xe0\xff\xff\xff\xff" * 64
              + b"\xfe\xff\x0d\xe0\0\0\0\0\xfe\xff\xdd\xe0\0\0\0\0" * 64)
    huge = b"\xe0\x7f\x10\x00" + struct.pack("<I", 0xFFFFFFF0) + b"\0" * 64
    for preamble in (True, False):
        tag = "preamble" if preamble else "bare"
        out.append(("dicom", f"meta_early_nested_{tag}.dcm", _dicom_hidden(preamble, nested)))
        out.append(("dicom", f"meta_early_huge_{tag}.dcm", _dicom_hidden(preamble, huge)))
    with open(os.path.join(ROOT, "tests", "data", "dicom", "CT_small.dcm"), "rb") as fh:
        ct = fh.read()
    for name, (group, element), text in [
            ("between", (0x0018, 0x0088), "1e308"), ("thickness", (0x0018, 0x0050), "1e308"),
            ("cosines", (0x0020, 0x0037), "1e308\\0\\0\\0\\1\\0"),
            ("skew", (0x0020, 0x0037), "1\\0\\0\\0.6\\0.8\\0"),
            ("position", (0x0020, 0x0032), "nan\\0\\0"), ("spacing", (0x0028, 0x0030), "1e308\\1")]:
        out.append(("dicom", f"geometry_{name}.dcm", _dicom_ds(ct, group, element, text)))
    with open(os.path.join(ROOT, "tests", "data", "io", "gray8.png.expected.npy"), "rb") as fh:
        npy = fh.read()
    out.append(("npy", "trailing.npy", npy + b"trailing bytes \x00\xff" * 64))
    out.append(("npy", "long_header.npy", b"\x93NUMPY\x02\x00" + struct.pack("<I", 0xFFFFFFF0)
                + npy[10:]))
    out.append(("tiff", "multiband.tif", _multiband_tiff(257)))
    return out


def import_seeds(bin_path, work):
    """A report and a manifest line of this build, for `preset import`."""
    src = os.path.join(ROOT, "tests", "data", "io", "i32.nii")
    rep = os.path.join(work, "seed_report.json")
    subprocess.run([bin_path, "apply", src, os.path.join(work, "seed_out.npy"), "--rotate",
                    "0.1,0.2,0.3", "--elastic", "50,3", "--report", rep, "--backend", "cpu"],
                   capture_output=True, check=True)
    with open(rep) as fh:
        return [("import", "report.json", fh.read())]


def limits(mem_mb):
    def apply():
        resource.setrlimit(resource.RLIMIT_AS, (mem_mb << 20, mem_mb << 20))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    return apply


def sha(path):
    if os.path.isdir(path):
        h = hashlib.sha256()
        for n in sorted(os.listdir(path)):
            h.update(n.encode())
            h.update(sha(os.path.join(path, n)).encode())
        return h.hexdigest()
    with open(path, "rb") as fh:
        return hashlib.sha256(fh.read()).hexdigest()


def check(bin_path, argv, inputs, out, args, text_out=False):
    """Runs one command; returns None, or what broke the contract."""
    before = {p: sha(p) for p in inputs}
    t = time.perf_counter()
    try:
        p = subprocess.run([bin_path, *argv], capture_output=True, timeout=args.timeout,
                           preexec_fn=limits(args.mem_mb), env=dict(os.environ,
                                                                      RUST_BACKTRACE="0"))
    except subprocess.TimeoutExpired:
        return f"no answer within {args.timeout} s"
    dt = time.perf_counter() - t
    EXITS[p.returncode] = EXITS.get(p.returncode, 0) + 1
    err = p.stderr.decode("utf-8", "replace")
    if p.returncode not in (0, 2):
        return f"exit {p.returncode} ({err.strip()[-300:]})"
    if "panicked" in err:
        return f"panic: {err.strip()[-300:]}"
    if p.returncode == 2:
        lines = err.strip().splitlines()
        if len(lines) != 1 or not lines[0].startswith("augscope: "):
            return f"exit 2 with {len(lines)} lines: {err.strip()[-300:]}"
        if out and os.path.exists(out):
            return "a failed command left its output"
    for path, h in before.items():
        if sha(path) != h:
            return f"input changed: {path}"
    if text_out and p.returncode == 0:
        try:
            ast.parse(p.stdout.decode("utf-8"))
        except (SyntaxError, UnicodeDecodeError, ValueError) as e:
            return f"the exported snippet is not valid Python: {e}"
    return None if dt < args.timeout else f"took {dt:.1f} s"


EXITS = {}

EXT = {"nifti": ".nii", "nifti_gz": ".nii.gz", "npy": ".npy", "png": ".png", "tiff": ".tif",
       "jpeg": ".jpg", "dicom": ".dcm", "preset": ".toml", "export": ".toml", "import": ".json"}
TARGETS = ["nifti", "nifti_gz", "npy", "png", "tiff", "jpeg", "dicom", "dicom_folder", "preset",
           "import", "export", "hostile_preset", "tiny_spacing", "hostile_import"]


def run_one(rng, corpus, target, work, bin_path, args):
    """Makes one mutant for `target` and checks the contract. Returns (cmd, problem)."""
    if target in HOSTILE:
        return HOSTILE[target](rng, work, bin_path, args)
    kind = "dicom" if target == "dicom_folder" else target
    pool = [s for s in corpus if s[0] == kind]
    _, name, seed = rng.pick(pool)
    case = os.path.join(work, "case")
    shutil.rmtree(case, ignore_errors=True)
    os.makedirs(case)
    out = os.path.join(case, "out.npy")
    if target == "nifti_gz":
        import gzip
        raw = gzip.decompress(seed) if seed[:2] == b"\x1f\x8b" else seed
        mutant = gzip.compress(mutate_bytes(rng, raw), mtime=0) if rng.below(4) else \
            mutate_bytes(rng, seed)
    elif isinstance(seed, bytes):
        mutant = mutate_bytes(rng, seed)
    else:
        mutant = mutate_text(rng, seed)
    if target == "dicom_folder":
        src = os.path.join(case, "series")
        os.makedirs(src)
        for k in range(3):
            data = mutant if k == 1 else seed
            with open(os.path.join(src, f"s{k}.dcm"), "wb") as fh:
                fh.write(data)
    else:
        src = os.path.join(case, "in" + EXT[target])
        mode = "wb" if isinstance(mutant, bytes) else "w"
        with open(src, mode, **({} if mode == "wb" else {"encoding": "utf-8",
                                                           "errors": "surrogatepass"})) as fh:
            fh.write(mutant)
    if target == "preset":
        argv = ["preset", "sample", src, "--count", "2"] if rng.below(2) else \
            ["batch", "--preset", src, "--count", "1", "--out", os.path.join(case, "b"),
             os.path.join(ROOT, "tests", "data", "io", "i32.nii"), "--quiet"]
        return argv, check(bin_path, argv, [src], None, args)
    if target == "import":
        argv = ["preset", "import", src]
        return argv, check(bin_path, argv, [src], None, args)
    if target == "export":
        to = rng.pick(["monai", "torchio", "batchgenerators", "nnunet", "python"])
        argv = ["preset", "export", "--to", to, src]
        return argv, check(bin_path, argv, [src], None, args, text_out=True)
    if rng.below(4) == 0:
        angle = "0.2" if target in ("png", "jpeg", "tiff") else "0.2,0.1,0.3"
        argv = ["apply", src, out, "--rotate", angle, "--backend", "cpu"]
        return argv, check(bin_path, argv, [src], out, args)
    argv = ["info", src]
    return argv, check(bin_path, argv, [src], None, args)


# Hostile values: presets whose ranges sit on and past the plan limits, voxel sizes no scan has,
# and parameter dicts whose orders and axes must be refused, not coerced. Each generator makes
# its own case (no seed corpus) and the same contract is checked.

# Range ends on, just past and far past the limits (translate 1e6, scale 1e-3..1e3, sigma 1e3,
# alpha 1e7), and numbers that overflow a draw.
HOSTILE_NUMBERS = ["1e6", "-1e6", "1000000.0001", "2e6", "-2e6", "1e-3", "0.0009999", "1e3",
                   "1000.5", "1e7", "-1e7", "1.0000001e7", "1e300", "-1.7e308", "1.7e308",
                   "5e-324", "0.5", "3.0"]
# Voxel sizes in mm: tiny, huge, on the edges of a scan's, and broken.
SPACINGS = [1e-30, 1e-12, 1e-6, 1e-4, 9.9e-4, 1e-3, 0.5, 1.0, 3.0, 1e4, 1.1e4, 1e30,
            float("nan"), float("inf"), 0.0, -1.0]
# Order values of a parameter dict: the only good ones are 0, 1 and 3.
ORDERS = ["-1", "3.9", "0.5", "2", "4", "6", "1e30", "true", "\"3\"", "null", "[3]", "0", "1",
          "3"]


def hostile_preset_text(rng):
    """A preset with extreme ranges in voxel or mm space."""
    def pair():
        a, b = rng.pick(HOSTILE_NUMBERS), rng.pick(HOSTILE_NUMBERS)
        return f"[{a}, {b}]" if rng.below(3) else f"[-{b.lstrip('-')}, {b.lstrip('-')}]"
    parts = ["version = 1"]
    if rng.below(2):
        parts.append('space = "mm"')
    if rng.below(2):
        parts.append(f"[translate]\np = {rng.pick(['0.01', '1.0'])}\nrange = [{pair()}]\n"
                     f"unit = \"{rng.pick(['voxel', 'mm'])}\"")
    if rng.below(2):
        parts.append(f"[scale]\nrange = [{pair()}]\n"
                     f"distribution = \"{rng.pick(['uniform', 'split'])}\"")
    if rng.below(2):
        parts.append(f"[elastic]\np = 0.5\nalpha = {pair()}\nsigma = {pair()}")
    if rng.below(2):
        parts.append(f"[rotate]\nrange_deg = [{pair()}]")
    return "\n".join(parts) + "\n"


def tiny_spacing_nifti(rng):
    """i32.nii with its sform and qform off and voxel sizes from SPACINGS."""
    import struct
    with open(os.path.join(ROOT, "tests", "data", "io", "i32.nii"), "rb") as fh:
        b = bytearray(fh.read())
    b[252:256] = struct.pack("<hh", 0, 0)
    for k in range(3):
        b[80 + 4 * k:84 + 4 * k] = struct.pack("<f", rng.pick(SPACINGS))
    return bytes(b)


def hostile_import_text(rng):
    """A parameter dict or an augscope plan with bad orders, axes and out-of-limit values."""
    import json
    if rng.below(2):
        d = {"do_rotation": True, "order_data": "@O", "order_seg": "@S"}
        if rng.below(2):
            d["mirror_axes"] = [rng.pick([0, 1, 2, 3, 5, -1])]
        if rng.below(2):
            d.update(do_elastic_deform=True, alpha=[0, float(rng.pick(HOSTILE_NUMBERS))],
                     sigma=[1, float(rng.pick(HOSTILE_NUMBERS))])
        if rng.below(2):
            d.update(do_scale=True, scale=[float(rng.pick(HOSTILE_NUMBERS)), 1.5])
        text = json.dumps(d)
        return text.replace('"@O"', rng.pick(ORDERS)).replace('"@S"', rng.pick(ORDERS))
    ndim = rng.pick([2, 3])
    plan = {"flip": [rng.pick([0, 1, 2, 3, 7])]}
    if rng.below(2):
        plan["translate"] = [float(rng.pick(HOSTILE_NUMBERS))] + [0.0] * (ndim - 1)
    if rng.below(2):
        plan["elastic"] = {"alpha": float(rng.pick(HOSTILE_NUMBERS)),
                           "sigma": float(rng.pick(HOSTILE_NUMBERS)), "seed": 1}
    if rng.below(3) == 0:
        plan.update(space="mm", spacing_mm=[rng.pick(SPACINGS)] * ndim)
    return json.dumps({"shape": [5] * ndim, "seed": 1, "plan": plan}).replace("NaN", "1e999")


def run_hostile_preset(rng, work, bin_path, args):
    case = fresh_case(work)
    src = os.path.join(case, "in.toml")
    with open(src, "w") as fh:
        fh.write(hostile_preset_text(rng))
    nii = os.path.join(ROOT, "tests", "data", "io", "i32.nii")
    argv = rng.pick([["preset", "sample", src, "--count", "40"],
                     ["batch", "--preset", src, "--count", "3", "--backend", "cpu", "--quiet",
                      "--out", os.path.join(case, "b"), nii]])
    # A refused batch leaves no folder behind; a refused sample prints nothing.
    return argv, check(bin_path, argv, [src], os.path.join(case, "b"), args)


def run_tiny_spacing(rng, work, bin_path, args):
    case = fresh_case(work)
    src = os.path.join(case, "in.nii")
    with open(src, "wb") as fh:
        fh.write(tiny_spacing_nifti(rng))
    out = os.path.join(case, "out.npy")
    if rng.below(3) == 0:
        preset = os.path.join(case, "mm.toml")
        with open(preset, "w") as fh:
            fh.write('version = 1\nspace = "mm"\n[rotate]\nrange_deg = [[-10.0, 10.0]]\n'
                     '[translate]\nunit = "mm"\nrange = [[-3.0, 3.0]]\n'
                     '[elastic]\nalpha = [1.0, 4.0]\nsigma = [2.0, 3.0]\n')
        argv = ["batch", "--preset", preset, "--count", "2", "--backend", "cpu", "--quiet",
                "--out", os.path.join(case, "b"), src]
        return argv, check(bin_path, argv, [src], os.path.join(case, "b"), args)
    t = rng.pick([["--elastic", "5,2"], ["--translate=1,0,-2"], ["--rotate", "0.1,0.2,0.3"],
                  ["--elastic", "100,8", "--rotate", "0.3,0,0"]])
    argv = ["apply", src, out, "--space", "mm", "--backend", "cpu", *t]
    return argv, check(bin_path, argv, [src], out, args)


def run_hostile_import(rng, work, bin_path, args):
    case = fresh_case(work)
    src = os.path.join(case, "in.json")
    text = hostile_import_text(rng)
    with open(src, "w") as fh:
        fh.write(text)
    out = os.path.join(case, "out.toml")
    argv = ["preset", "import", "--output", out, src]
    problem = check(bin_path, argv, [src], out, args)
    if problem is None and os.path.exists(out) and import_must_refuse(text):
        problem = "the import accepted an order or a flipped axis it must refuse"
    return argv, problem


def import_must_refuse(text):
    """Whether a dict holds an order that is not 0, 1 or 3 (labels: 0 to 5), or a plan flips an
    axis its shape does not have: the import must refuse it, never round or drop it."""
    import json
    try:
        d = json.loads(text)
    except ValueError:
        return False

    def bad_order(key, ok):
        v = d.get(key)
        return v is not None and not (type(v) is int and v in ok)
    ndim = len(d.get("shape", [0, 0, 0]))
    flips = d.get("plan", {}).get("flip", [])
    bad_flip = any(not (type(a) is int and 0 <= a < ndim) for a in flips)
    return bad_order("order_data", (0, 1, 3)) or bad_order("order_seg", range(6)) or bad_flip


def fresh_case(work):
    case = os.path.join(work, "case")
    shutil.rmtree(case, ignore_errors=True)
    os.makedirs(case)
    return case


HOSTILE = {"hostile_preset": run_hostile_preset, "tiny_spacing": run_tiny_spacing,
           "hostile_import": run_hostile_import}


def in_process(args):
    """Runs the in-process worker per target, restarting it after each mutant that ends it."""
    worker = os.path.abspath(args.in_process)
    work = tempfile.mkdtemp(prefix="augscope-fuzz-")
    snippets = os.path.join(work, "snippets")
    os.makedirs(snippets)
    problems = 0
    t0 = time.perf_counter()
    report = []
    for target in args.targets.split(","):
        start, done, slowest, t_target = 0, 0, 0.0, time.perf_counter()
        while start < args.execs:
            end = min(args.execs, start + args.report_every)
            log = os.path.join(work, "progress")
            with open(log, "w") as fh:
                try:
                    p = subprocess.run([worker, target, str(args.seed), str(start), str(end), work,
                                        snippets], stdout=fh, stderr=subprocess.PIPE,
                                       timeout=args.timeout + (end - start) * 0.05,
                                       preexec_fn=limits(args.mem_mb),
                                       env=dict(os.environ, RUST_BACKTRACE="0"))
                    code, err = p.returncode, p.stderr.decode("utf-8", "replace")
                except subprocess.TimeoutExpired:
                    code, err = "timeout", ""
            with open(log) as fh:
                lines = fh.read().splitlines()
            last = start
            for line in lines:
                if line.startswith("BREAK "):
                    _, idx, what = line.split(" ", 2)
                    problems += 1
                    keep = os.path.join(args.crashes, f"{target}-{args.seed}-{idx}")
                    shutil.rmtree(keep, ignore_errors=True)
                    src = os.path.join(work, f"break-{idx}")
                    if os.path.isdir(src):
                        shutil.move(src, keep)
                    print(f"CONTRACT BROKEN [{target} #{idx}]: {what}\n    kept in {keep}",
                          flush=True)
                elif line.startswith("DONE "):
                    slowest = max(slowest, float(line.split()[2]))
                elif line.isdigit():
                    last = int(line)
            if code == 0 and lines and lines[-1].startswith("DONE "):
                done += end - start
                start = end
                print(f"fuzz: {target} {done} executions, {problems} contract breaks, "
                      f"{time.perf_counter() - t0:.0f} s", flush=True)
                continue
            problems += 1
            keep = os.path.join(args.crashes, f"{target}-{args.seed}-{last}")
            shutil.rmtree(keep, ignore_errors=True)
            if os.path.isdir(os.path.join(work, "case")):
                shutil.copytree(os.path.join(work, "case"), keep)
            why = f"no answer within {args.timeout} s" if code == "timeout" else \
                f"the worker ended with {code} ({err.strip()[-300:]})"
            print(f"CONTRACT BROKEN [{target} #{last}]: {why}\n    kept in {keep}", flush=True)
            done += last + 1 - start
            start = last + 1
        report.append(f"{target} {done} in {time.perf_counter() - t_target:.0f} s "
                      f"(slowest {slowest:.0f} ms)")
    parsed = 0
    for name in sorted(os.listdir(snippets)):
        path = os.path.join(snippets, name)
        with open(path, encoding="utf-8", errors="surrogatepass") as fh:
            text = fh.read()
        try:
            if name.endswith(".json"):
                raise ValueError("an exported JSON snippet is not valid JSON")
            ast.parse(text)
            parsed += 1
        except (SyntaxError, ValueError) as e:
            problems += 1
            keep = os.path.join(args.crashes, f"snippet-{name}")
            os.makedirs(args.crashes, exist_ok=True)
            shutil.copy(path, keep)
            print(f"CONTRACT BROKEN [export]: {e}\n    kept in {keep}", flush=True)
    shutil.rmtree(work, ignore_errors=True)
    print(f"fuzz: in process, seed {args.seed}, {time.perf_counter() - t0:.0f} s: "
          f"{'; '.join(report)}; {parsed} distinct exported snippets parsed as Python: "
          f"{problems} contract breaks")
    sys.exit(1 if problems else 0)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bin", help="the augscope binary")
    p.add_argument("--in-process", metavar="WORKER",
                   help="the in-process worker (examples/fuzz.rs); --execs is then per target")
    p.add_argument("--execs", type=int, default=1500, help="mutants in all, spread over targets")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--targets", default=",".join(TARGETS))
    p.add_argument("--timeout", type=float, default=30.0)
    p.add_argument("--mem-mb", type=int, default=4096)
    p.add_argument("--report-every", type=int, default=10000, help="a progress line every N")
    p.add_argument("--crashes", default=os.path.join(tempfile.gettempdir(), "augscope-fuzz"))
    args = p.parse_args()
    if args.in_process:
        in_process(args)
    if not args.bin:
        p.error("--bin or --in-process is needed")
    targets = args.targets.split(",")
    bin_path = os.path.abspath(args.bin)
    work = tempfile.mkdtemp(prefix="augscope-fuzz-")
    corpus = seeds() + import_seeds(bin_path, work)
    problems = 0
    counts = {t: 0 for t in targets}
    t0 = time.perf_counter()
    for n in range(args.execs):
        target = targets[n % len(targets)]
        rng = Rng(args.seed * 1_000_003 + n)
        argv, problem = run_one(rng, corpus, target, work, bin_path, args)
        counts[target] += 1
        if (n + 1) % args.report_every == 0:
            print(f"fuzz: {n + 1} executions, {problems} contract breaks, "
                  f"{time.perf_counter() - t0:.0f} s", flush=True)
        if problem:
            problems += 1
            keep = os.path.join(args.crashes, f"{target}-{args.seed}-{n}")
            shutil.rmtree(keep, ignore_errors=True)
            shutil.copytree(os.path.join(work, "case"), keep)
            print(f"CONTRACT BROKEN [{target} #{n}]: {problem}\n    augscope {' '.join(argv)}"
                  f"\n    kept in {keep}", flush=True)
    shutil.rmtree(work, ignore_errors=True)
    dt = time.perf_counter() - t0
    per = ", ".join(f"{t} {c}" for t, c in counts.items())
    codes = ", ".join(f"exit {k}: {v}" for k, v in sorted(EXITS.items()))
    print(f"fuzz: {args.execs} executions in {dt:.0f} s ({per}; {codes}), seed {args.seed}: "
          f"{problems} contract breaks")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
