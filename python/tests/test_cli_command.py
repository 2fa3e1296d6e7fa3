"""The `augscope` console command (augscope/_cli.py): it runs the binary the wheel carries, with
the arguments and the exit status passed through, and where an installation has no binary (a
source build) it says so in one line and exits with status 2."""
import subprocess
import sys

import pytest

import augscope._cli as cli


def test_an_installation_without_the_binary_says_so(monkeypatch, capsys):
    monkeypatch.setattr(cli, "binary", lambda: None)
    assert cli.main(["--version"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "carries no augscope binary" in err[0], err


def test_the_binary_runs_with_the_arguments_and_its_exit_status():
    if cli.binary() is None:
        pytest.skip("a source build of the package: no bundled binary")
    out = subprocess.run([sys.executable, "-m", "augscope._cli", "--version"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == f"augscope {cli_version()}", out
    bad = subprocess.run([sys.executable, "-m", "augscope._cli", "info", "/nonexistent.nii"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, bad


def cli_version():
    import augscope
    return augscope.__version__
