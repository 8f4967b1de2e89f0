"""Ctrl-C or SIGTERM while the ``pithlog`` program is still importing its command line
(about half a second of every command): the one line and exit status of an interrupt later
in the command, not a traceback of the import (Ctrl-C) or an end without a word (SIGTERM)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# The child runs what the console script runs (the entry point of pyproject.toml), or what
# `python -m pithlog` runs. Before that it makes the import of one module slow (an import
# hook, which says on stdout when the import has begun and then sleeps): `pithlog.cli.edge`,
# which every command imports, or `lmdb`, deeper. The signal then lands inside the import,
# every time, on a busy machine too. It restores Python's SIGINT handler: a process started
# in the background of a non-interactive shell inherits SIGINT ignored, and Python then
# leaves it ignored.
CHILD = """
import importlib, os, runpy, signal, sys, time
signal.signal(signal.SIGINT, signal.default_int_handler)

class Slow:
    def find_spec(self, name, path, target=None):
        if name == SLOW:
            os.write(1, b"importing\\n")
            time.sleep(30)
        return None

SLOW = sys.argv.pop(1)
sys.meta_path.insert(0, Slow())
how = sys.argv.pop(1)
if how == "-m":
    runpy.run_module("pithlog", run_name="__main__", alter_sys=True)
else:
    module, _, name = how.partition(":")
    sys.exit(getattr(importlib.import_module(module), name)())
"""


def _console_script() -> str:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    script: str = pyproject["project"]["scripts"]["pithlog"]
    return script


def python_child(code: str, *args: str) -> subprocess.Popen[bytes]:
    """``python -c code args...`` with this checkout's pithlog, its stdout and stderr
    piped (the child says on stdout where it stands)."""
    return subprocess.Popen(
        [sys.executable, "-c", code, *args],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip


@pytest.mark.parametrize("slow", ["pithlog.cli.edge", "lmdb"])
@pytest.mark.parametrize("how", ["console script", "-m"])
@pytest.mark.parametrize(
    ("signum", "status", "said"),
    [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")],
)
def test_a_signal_while_the_command_line_is_imported_is_one_line_and_its_status(
    how: str, slow: str, signum: int, status: int, said: str
) -> None:
    entry = _console_script() if how == "console script" else "-m"
    child = python_child(CHILD, slow, entry, "--version")
    assert child.stdout is not None
    try:
        assert child.stdout.readline() == b"importing\n"
        child.send_signal(signum)
        out, err = child.communicate(timeout=20)
    finally:
        child.kill()
    assert child.returncode == status, err
    assert err.decode().splitlines() == [f"pithlog: {said}"]
    assert out == b""
