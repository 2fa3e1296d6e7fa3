"""The `augscope` console command: runs the CLI and explorer binary that the wheel carries
(`augscope/bin/augscope`, with the sample scan in `augscope/assets/`), as `augscope view`,
`augscope apply`, `augscope batch` and the rest."""
import os
import subprocess
import sys
from pathlib import Path

_HERE = Path(__file__).resolve().parent


def binary():
    """The path of the bundled `augscope` binary, or None where this installation has none (a
    source build of the Python package, `pip install ./python`, carries only the library)."""
    name = "augscope.exe" if os.name == "nt" else "augscope"
    exe = _HERE / "bin" / name
    return exe if exe.is_file() else None


def main(argv=None):
    args = sys.argv[1:] if argv is None else list(argv)
    exe = binary()
    if exe is None:
        print("augscope: this installation of the Python package carries no augscope binary (it "
              "was built from source); install the release wheel (scripts/build_wheels.sh "
              "builds it), or build the binary with `cargo build --release`",
              file=sys.stderr)
        return 2
    if os.name == "posix" and argv is None:
        # The binary takes this process's place: signals, the exit code and the terminal are its.
        os.execv(exe, [str(exe), *args])
    return subprocess.call([str(exe), *args])


if __name__ == "__main__":
    sys.exit(main())
