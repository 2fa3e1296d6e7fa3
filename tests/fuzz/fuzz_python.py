#!/usr/bin/env python3
"""fuzz_python.py - a seeded fuzzer of the Python package's input contract.

Hostile calls of `augscope.apply`, `augscope.sample`, `augscope.Augment` (made and called),
`augscope.febds`, `augscope.filters`, `augscope.normalize` and the extension's own entry points
(`augscope._augscope`, reached without the package's checks): arrays of every dtype (complex, object, strings, dates
among them), shapes with empty and extra axes, NaN and infinity, views of 10^12 values that hold
no memory (a broadcast, a sparse memmap), plans with unknown keys and absurd values and output
shapes, presets, voxel sizes, dimension counts, seeds and devices. The contract:

- a call returns, or raises ValueError, TypeError or MemoryError with a one-line message;
- never a PanicException (a BaseException), another exception, an abort, a signal or a hang
  (--timeout seconds per call).

The calls are a pure function of --seed and the call's number, so a run is reproducible; CI runs
the default budget (--execs), a local run may take more. Each call runs in a worker process
(this script with --worker) under --mem-mb of address space beyond its imports; the supervisor restarts a worker
that died or hung and counts the call as a break. A break is printed with the command that
replays that one call in this process (--case N), and the exit code is 1.

    pip install ./python
    python3 tests/fuzz/fuzz_python.py --execs 10000 --seed 1
"""
import argparse
import json
import os
import random
import resource
import select
import subprocess
import sys
import tempfile
import time
import traceback
import warnings

ALLOWED = (ValueError, TypeError, MemoryError)
BIG = (10**4, 10**4, 10**4)  # 10^12 values

SPECIAL = [0.0, -0.0, 1.0, -1.0, 0.5, 2.0, 1e-30, 1e-3, 1e4, 1e5, 1e38, -1e38, 1e308,
           float("nan"), float("inf"), float("-inf"), 3.0, 7.5]
INTS = [0, 1, 2, 3, 4, -1, 7, 255, 2**31, 2**32 - 1, 2**63, 2**64 - 1, 2**64, 2**100, -2**63]
DTYPES = ["float32", "float64", "float16", "int8", "uint8", "int16", "uint16", "int32", "int64",
          "uint64", "bool", "complex64", "complex128", "object", "U3", "datetime64[s]"]
PLAN_KEYS = ["flip", "rotate_rad", "scale", "translate", "elastic", "order", "mode", "cval",
             "out_shape", "space", "spacing_mm"]
MODES = ["constant", "grid-constant", "nearest", "reflect", "mirror", "grid-wrap", "wrap",
         "bogus", "", 3]
BUNDLED = ["nnunet-v2", "nnunet-v1-3d", "batchgenerators", "monai-brats"]


# --- the calls --------------------------------------------------------------------------------

def one_of(r, xs):
    return xs[r.randrange(len(xs))]


def number(r):
    if r.random() < 0.6:
        return round(r.uniform(-3, 3), 3)
    return one_of(r, SPECIAL + INTS)


def vector(r, n=None):
    n = r.randrange(0, 5) if n is None or r.random() < 0.2 else n
    return [number(r) for _ in range(n)]


def shape(r):
    """A shape: mostly small 2D and 3D grids, with channel and batch axes, empty axes, too few
    or too many axes."""
    nd = one_of(r, [2, 3, 3, 3, 4, 4, 5, 1, 0, 6])
    return tuple(one_of(r, [1, 2, 3, 4, 5, 8, 9, 12, 16, 0] if r.random() < 0.1
                        else [1, 2, 3, 5, 6, 8, 11, 16]) for _ in range(nd))


def array(r, np, memmap):
    """An array; now and then one of 10^12 values that holds no memory."""
    k = r.random()
    if k < 0.03:
        return np.broadcast_to(np.float32(1.0), BIG)
    if k < 0.05 and memmap is not None:
        return memmap
    if k < 0.06:
        return [[1.0, 2.0], [3.0]]  # ragged
    if k < 0.07:
        return "not an array"
    sh = shape(r)
    dt = one_of(r, DTYPES) if r.random() < 0.3 else "float32"
    rng = np.random.default_rng(r.randrange(2**32))
    a = np.asarray(rng.random(sh) * 4096, dtype=np.float64)
    if r.random() < 0.2 and a.size:
        a.flat[rng.integers(0, a.size, size=max(1, a.size // 10))] = \
            one_of(r, [np.nan, np.inf, -np.inf, 1e38, -1e38])
    try:
        with np.errstate(all="ignore"):
            a = a.astype(dt)
    except (TypeError, ValueError):
        a = a.astype(np.float32)
    if r.random() < 0.1 and a.ndim >= 2:
        a = a[..., ::-1]  # a strided view
    return a


def hostile_value(r, key, nd):
    """A value of a plan's `key`, good or absurd."""
    if key == "flip":
        return [one_of(r, [0, 1, 2, 3, -1, 2**64]) for _ in range(r.randrange(3))]
    if key in ("rotate_rad", "scale", "translate"):
        return vector(r, {"rotate_rad": 3 if nd == 3 else 1}.get(key, nd))
    if key == "elastic":
        return None if r.random() < 0.2 else {
            "alpha": number(r) if r.random() < 0.3 else r.uniform(0, 50),
            "sigma": number(r) if r.random() < 0.2 else r.uniform(0.5, 4),
            "seed": one_of(r, INTS[:8])}
    if key == "order":
        return one_of(r, [0, 1, 3, 3, 2, -1, 5, "linear"])
    if key == "mode":
        return one_of(r, MODES)
    if key == "cval":
        return number(r)
    if key == "out_shape":
        return one_of(r, [None, [4] * nd, [6, 5, 7][:nd], [0] * nd, [10**6] * nd,
                          [2**62] * nd, [2**64 - 1] * nd, [3], [-1] * nd])
    if key == "space":
        return one_of(r, ["voxel", "mm", "mm", "bogus"])
    return vector(r, nd)  # spacing_mm


def good_value(r, key, nd):
    """A value of a plan's `key` that a grid of `nd` axes takes."""
    if key == "flip":
        return sorted(set(r.randrange(nd) for _ in range(r.randrange(nd + 1))))
    if key == "rotate_rad":
        return [r.uniform(-3.2, 3.2) for _ in range(3 if nd == 3 else 1)]
    if key == "scale":
        return [r.uniform(0.5, 2.0) for _ in range(one_of(r, [1, nd]))]
    if key == "translate":
        return [r.uniform(-5, 5) for _ in range(nd)]
    if key == "elastic":
        return {"alpha": r.uniform(0, 60), "sigma": r.uniform(0.5, 5),
                "seed": r.randrange(2**64)}
    if key == "order":
        return one_of(r, [0, 1, 3])
    if key == "mode":
        return one_of(r, MODES[:7])
    if key == "cval":
        return r.uniform(-1, 1)
    if key == "out_shape":
        return [r.randrange(1, 17) for _ in range(nd)]
    if key == "space":
        return one_of(r, ["voxel", "mm"])
    return [r.uniform(0.2, 4) for _ in range(nd)]  # spacing_mm


def plan(r, nd):
    """A plan dict: half of them good but for at most one key, the others absurd anywhere; now
    and then an unknown key or not a dict at all."""
    keys = [k for k in PLAN_KEYS if r.random() < 0.65]
    if r.random() < 0.5:
        bad = one_of(r, keys + [None]) if keys else None
        p = {k: hostile_value(r, k, nd) if k == bad else good_value(r, k, nd) for k in keys}
    else:
        p = {k: hostile_value(r, k, nd) for k in keys}
    if r.random() < 0.1:
        p[one_of(r, ["rotate", "translation", "zoom", "Flip"])] = vector(r, nd)
    if r.random() < 0.03:
        return one_of(r, [[1, 2], "{not json", 3, None, "null"])
    return p


def preset(r):
    k = r.random()
    if k < 0.3:
        return one_of(r, BUNDLED)
    if k < 0.4:
        return one_of(r, ["", "{", "=", "version = 1\n", "/nonexistent/preset.toml", "[x]\ny=1"])
    d = {"version": one_of(r, [1, 1, 1, 2]), "name": "fuzz"}
    if r.random() < 0.5:
        d["space"] = one_of(r, ["mm", "voxel", "bogus"])
    if r.random() < 0.6:
        d["rotate"] = {"p": one_of(r, [1.0, 0.5, 2.0, -1.0, float("nan")]),
                       "range_deg": [[-20.0, 20.0], [number(r), number(r)], [0.0, 5.0]]}
    if r.random() < 0.6:
        d["translate"] = {"p": 1.0, "range": [[number(r), number(r)]],
                          "unit": one_of(r, ["mm", "voxel"])}
    if r.random() < 0.5:
        d["scale"] = {"p": 1.0, "range": [[one_of(r, [0.8, 1e-9, 1e9, -1.0]), 1.2]]}
    if r.random() < 0.4:
        d["elastic"] = {"p": 1.0, "alpha": [0.0, one_of(r, [10.0, 1e12, float("inf")])],
                        "sigma": [one_of(r, [2.0, 0.0, -1.0]), 4.0]}
    if r.random() < 0.5:
        d["sampling"] = {"order": one_of(r, [0, 1, 3, 4]), "mode": one_of(r, MODES[:8])}
    return d


def spacing(r, nd):
    k = r.random()
    if k < 0.4:
        return None
    if k < 0.45:
        return one_of(r, [2.0, "1,1,1", [None] * nd])
    return vector(r, nd)


def call(seed, n, np, augscope, memmap):
    """The `n`th call of a run: (description, a function that makes it)."""
    r = random.Random(seed * 1_000_003 + n)
    core = augscope._augscope
    op = one_of(r, ["apply", "apply", "augment", "augment", "sample", "febds", "filter",
                    "normalize", "core_apply", "core_sample", "core_febds", "core_filter"])
    if r.random() < 0.4:
        # A call that is good but for its plan's one bad key at most: it reaches the engine.
        nd = one_of(r, [2, 3])
        ch = r.random() < 0.3
        grid = tuple(r.randrange(1, 13) for _ in range(nd))
        rng = np.random.default_rng(r.randrange(2**32))
        x = rng.random(((r.randrange(1, 4),) if ch else ()) + grid, dtype=np.float32) * 4096
        lab = rng.integers(0, 4, grid).astype(one_of(r, [np.uint8, np.int64, np.float32])) \
            if r.random() < 0.3 else None
        sp = None if r.random() < 0.5 else [r.uniform(0.2, 4) for _ in range(nd)]
        dev = None
        pl = plan(r, nd)
        if isinstance(pl, dict) and r.random() < 0.5:
            pl = {k: good_value(r, k, nd) for k in pl if k in PLAN_KEYS}
    else:
        nd = one_of(r, [3, 3, 2, 2, 1, 4])
        x = array(r, np, memmap)
        pl = plan(r, nd)
        sp = spacing(r, nd)
        dev = one_of(r, [None, None, None, "cpu", "cuda", "cuda:7", "bogus"])
        lab = array(r, np, None) if r.random() < 0.2 else None
        ch = r.random() < 0.2
    if op == "apply":
        model = one_of(r, ["augscope"] * 5 + ["monai", "torchio", "nnunet", "bogus"])
        what = (f"apply(x, {pl!r}, label={_d(lab)}, channels={ch}, spacing={sp!r}, "
                f"device={dev!r}, model={model!r})")
        return what, x, lambda: augscope.apply(x, pl, label=lab, channels=ch, spacing=sp,
                                               device=dev, model=model)
    if op == "augment":
        ps = preset(r)
        kw = dict(seed=one_of(r, INTS + [1.5, "x", None]) if r.random() < 0.2 else 0,
                  ndim=nd if r.random() < 0.6 else one_of(r, [3, 2, 1, 4, 2**64 - 1, "3"]),
                  spacing=sp, device=dev)
        if r.random() < 0.3:
            kw["patch_size"] = one_of(r, [[8] * 3, [4] * 2, [0, 4, 4], [10**5] * 3,
                                          [2**64] * 3, [-3] * 3])
            kw["patch_center"] = one_of(r, ["centre", "random", "bogus", [1.0] * 3,
                                            [float("nan")] * 3, [1e300] * 3, 3])
        csp = spacing(r, nd)
        index = one_of(r, [None, 0, 5, 2**64, -1, 2**100])
        what = f"Augment({ps!r}, **{kw!r})(x, label={_d(lab)}, index={index!r}, spacing={csp!r})"
        return what, x, lambda: augscope.Augment(ps, **kw)(x, label=lab, index=index,
                                                          spacing=csp)
    if op == "sample":
        ps = preset(r)
        sd = one_of(r, INTS + [1.5, "x"])
        ndim = one_of(r, [3, 2, 0, 1, 4, 2**64 - 1, -1, 2**70, "3", 2.5])
        space = one_of(r, [None, "mm", "voxel", "bogus", 3])
        what = f"sample({ps!r}, {sd!r}, ndim={ndim!r}, spacing={sp!r}, space={space!r})"
        return what, x, lambda: augscope.sample(ps, sd, ndim=ndim, spacing=sp, space=space)
    if op == "normalize":
        m = one_of(r, [
            {"method": "nnunet_zscore"}, {"method": "torchio_z_normalization"},
            {"method": "torchio_rescale_intensity", "percentiles": [number(r), number(r)]},
            {"method": "monai_scale_intensity_range", "a_min": number(r), "a_max": number(r),
             "b_min": number(r), "b_max": number(r), "clip": r.random() < 0.5},
            {"method": "nnunet_ct", "mean": number(r), "std": number(r),
             "percentile_00_5": number(r), "percentile_99_5": number(r)},
            {"method": "bogus"}, {"method": "nnunet_zscore", "x": 1}, "nnunet-v2", 3, None,
            json.dumps({"method": "nnunet_zscore"})[:r.randrange(1, 30)]])
        what = f"normalize(x, {m!r}, channels={ch})"
        return what, x, lambda: augscope.normalize(x, m, channels=ch)
    if op == "febds":
        m = one_of(r, ["dog", "log", "fft", "bogus"])
        what = f"febds(x, {m!r}, device={dev!r})"
        return what, x, lambda: augscope.febds(x, m, device=dev)
    if op == "filter":
        name, args = one_of(r, [("gaussian", (number(r),)), ("log", (number(r),)),
                                ("dog", (number(r), number(r))), ("median", (3,)),
                                ("median", (one_of(r, [0, -1, 2**40]),)),
                                ("gamma", (number(r), number(r))),
                                ("contrast", (number(r), number(r)))])
        fnd = one_of(r, [None, None, 2, 3, 0, -1, 2**64])
        kw = {"ndim": fnd, "device": dev}
        if name not in ("gamma", "contrast"):
            kw.update(mode=one_of(r, MODES), cval=number(r))
        what = f"filters.{name}(x, *{args!r}, **{kw!r})"
        return what, x, lambda: getattr(augscope.filters, name)(x, *args, **kw)
    # The extension itself: float32 arrays only (its signature), no checks of the package.
    f32 = x if isinstance(x, np.ndarray) and x.dtype == np.float32 else \
        np.zeros(shape(r), np.float32)
    text = json.dumps(pl) if r.random() < 0.9 else "{\"rotate_rad\": [1e999]}"
    if op == "core_apply":
        what = f"_augscope.apply(x, {text!r}, None, {ch}, {sp!r})"
        return what, f32, lambda: core.apply(f32, text, None, ch, sp)
    if op == "core_sample":
        ps = json.dumps(preset(r)) if r.random() < 0.8 else one_of(r, BUNDLED)
        ndim = one_of(r, [3, 2, 0, 4, 2**64 - 1])
        sd = one_of(r, [n for n in INTS if 0 <= n < 2**64])  # the signature's u64
        what = f"_augscope.sample({ps!r}, {sd}, {ndim}, {sp!r}, None)"
        return what, f32, lambda: core.sample(ps, sd, ndim, sp, None)
    if op == "core_febds":
        what = "_augscope.febds(x, 'dog')"
        return what, f32, lambda: core.febds(f32, "dog")
    spec = one_of(r, ["gaussian:1.5", "log:1e308", "dog:1,nan", "median:99999", "gamma:inf",
                      "contrast:1,1", "gaussian:", "bogus:1"])
    fnd = one_of(r, [1, 2, 3, 0, 9])
    what = f"_augscope.filter(x, {spec!r}, {fnd})"
    return what, f32, lambda: core.filter(f32, spec, fnd)


def _d(a):
    """A short description of an argument."""
    if a is None:
        return "None"
    s = getattr(a, "shape", None)
    return f"<{type(a).__name__} {getattr(a, 'dtype', '')} {s}>" if s is not None else repr(a)


def run_case(seed, n, np, augscope, memmap):
    """One call: (its outcome, None when it kept the contract, else what broke it)."""
    what, x, fn = call(seed, n, np, augscope, memmap)
    what = f"{what} with x = {_d(x)}"
    try:
        fn()
    except ALLOWED as e:
        msg = str(e)
        kind = next(k.__name__ for k in ALLOWED if isinstance(e, k))
        if "\n" in msg.strip() or not msg.strip():
            return kind, f"{what}: {type(e).__name__} without a one-line message: {msg!r}"
        return kind, None
    except BaseException as e:  # noqa: BLE001 - PanicException is a BaseException
        if isinstance(e, KeyboardInterrupt):
            raise
        return "broken", f"{what}: {type(e).__module__}.{type(e).__name__}: {str(e)[:300]!r}"
    return "returned", None


# --- the worker and the supervisor ------------------------------------------------------------

def worker(seed, mem_mb):
    """Runs the calls named on stdin, one JSON line on stdout for each, within `mem_mb` of
    address space beyond what the imports and the sparse memmap take."""
    warnings.simplefilter("ignore")
    import numpy as np

    import augscope
    path = os.path.join(tempfile.gettempdir(), f"augscope-fuzz-python-{os.getpid()}.f32")
    try:
        memmap = np.memmap(path, dtype=np.float32, mode="w+", shape=BIG)
    except (OSError, ValueError, MemoryError):
        memmap = None
    with open("/proc/self/status") as fh:
        vm = next((int(ln.split()[1]) << 10 for ln in fh if ln.startswith("VmSize:")), 0)
    limit = vm + (mem_mb << 20)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    try:
        for line in sys.stdin:
            n = int(line)
            outcome, broke = run_case(seed, n, np, augscope, memmap)
            sys.stdout.write(json.dumps({"n": n, "outcome": outcome, "break": broke}) + "\n")
            sys.stdout.flush()
    finally:
        del memmap
        if os.path.exists(path):
            os.remove(path)


class Worker:
    def __init__(self, args):
        # stderr goes to a file: a pipe nobody reads until the end would fill and block the
        # worker. Without RUST_BACKTRACE the extension keeps its panics (ValueErrors) quiet.
        self.err = tempfile.TemporaryFile(mode="w+")
        env = {k: v for k, v in os.environ.items() if k != "RUST_BACKTRACE"}
        self.p = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--worker", "--seed", str(args.seed),
             "--mem-mb", str(args.mem_mb)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.err, text=True, env=env)

    def ask(self, n, timeout):
        """(reply dict) or (None, why) when the worker died or hung."""
        try:
            self.p.stdin.write(f"{n}\n")
            self.p.stdin.flush()
        except BrokenPipeError:
            return None, self.death()
        ready, _, _ = select.select([self.p.stdout], [], [], timeout)
        if not ready:
            self.p.kill()
            self.p.wait()
            return None, f"no answer within {timeout} s (a hang)"
        line = self.p.stdout.readline()
        if not line:
            return None, self.death()
        return json.loads(line), None

    def death(self):
        self.p.wait()
        self.err.seek(0)
        err = self.err.read()[-600:].strip().replace("\n", " | ")
        code = self.p.returncode
        how = f"signal {-code}" if code < 0 else f"exit {code}"
        return f"the worker died ({how}): {err}"

    def close(self):
        if self.p.poll() is None:
            self.p.stdin.close()
            try:
                self.p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        self.err.close()


def supervise(args):
    t0 = time.perf_counter()
    breaks = 0
    outcomes = {}
    w = Worker(args)
    # The first call waits for the worker's imports as well.
    timeout = args.timeout + 60
    for n in range(args.execs):
        reply, why = w.ask(n, timeout)
        timeout = args.timeout
        if reply is None:
            breaks += 1
            outcomes["died or hung"] = outcomes.get("died or hung", 0) + 1
            w.close()
            print(f"CONTRACT BROKEN [#{n}]: {why}\n    replay: python3 {sys.argv[0]} "
                  f"--seed {args.seed} --case {n}", flush=True)
            w = Worker(args)
            timeout = args.timeout + 60
            continue
        outcomes[reply["outcome"]] = outcomes.get(reply["outcome"], 0) + 1
        if reply["break"]:
            breaks += 1
            print(f"CONTRACT BROKEN [#{n}]: {reply['break']}\n    replay: python3 "
                  f"{sys.argv[0]} --seed {args.seed} --case {n}", flush=True)
        if (n + 1) % args.report_every == 0 and n + 1 < args.execs:
            print(f"fuzz_python: {n + 1} executions, {breaks} contract breaks, "
                  f"{time.perf_counter() - t0:.0f} s", flush=True)
    w.close()
    tally = ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items()))
    print(f"fuzz_python: {args.execs} executions in {time.perf_counter() - t0:.0f} s ({tally}), "
          f"seed {args.seed}: {breaks} contract breaks", flush=True)
    return 1 if breaks else 0


def replay(args):
    """One call in this process, with its traceback."""
    import numpy as np

    import augscope
    what, x, fn = call(args.seed, args.case, np, augscope, None)
    print(f"call #{args.case}: {what} with x = {_d(x)}")
    try:
        fn()
        print("returned")
    except BaseException:  # noqa: BLE001 - show whatever it was
        traceback.print_exc()
    outcome, broke = run_case(args.seed, args.case, np, augscope, None)
    print(f"outcome: {outcome}; contract:", broke or "kept")
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--execs", type=int, default=10000, help="calls in all")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--timeout", type=float, default=30.0, help="seconds a call may take")
    p.add_argument("--mem-mb", type=int, default=4096, help="address space of the worker")
    p.add_argument("--report-every", type=int, default=1000, help="a progress line every N")
    p.add_argument("--case", type=int, help="replay call N of --seed in this process")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        worker(args.seed, args.mem_mb)
        return 0
    if args.case is not None:
        return replay(args)
    return supervise(args)


if __name__ == "__main__":
    sys.exit(main())
