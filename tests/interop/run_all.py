#!/usr/bin/env python3
"""Runs every interop check (check_*.py beside this file) under the real training libraries and
prints their lines: one per (target, case), with the agreement and the library version.

    python tests/interop/run_all.py [path/to/augscope] [--allow-skip]

Exit 0 when every check is at the bar; 1 when any is below it or fails to run. A check whose
library is missing exits 77: that is a failure here unless --allow-skip is given (CI installs
every library from tests/interop/requirements.txt, so nothing may be skipped there).
"""
import glob
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    allow_skip = "--allow-skip" in sys.argv[1:]
    checks = sorted(glob.glob(os.path.join(HERE, "check_*.py")))
    failed, skipped = [], []
    for path in checks:
        name = os.path.basename(path)
        t0 = time.monotonic()
        print(f"== {name}", flush=True)
        code = subprocess.run([sys.executable, path, *args]).returncode
        print(f"== {name}: exit {code} in {time.monotonic() - t0:.0f} s", flush=True)
        if code == 77:
            skipped.append(name)
        elif code != 0:
            failed.append(name)
    if skipped and not allow_skip:
        failed += skipped
    print(f"interop: {len(checks) - len(failed) - (len(skipped) if allow_skip else 0)} of "
          f"{len(checks)} checks at the bar"
          + (f"; below the bar or not run: {', '.join(failed)}" if failed else "")
          + (f"; skipped: {', '.join(skipped)}" if skipped and allow_skip else ""))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
