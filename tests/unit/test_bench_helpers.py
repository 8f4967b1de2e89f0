"""The helpers of ``make bench`` (``bench/``) measure what their rows say."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import reaped  # noqa: E402

ORPHAN = """
import os, time
if os.fork() == 0:  # a helper left to end on its own, as a fork server is
    end = time.process_time() + 0.4
    while time.process_time() < end:
        pass
    os._exit(0)
"""


def _children_cpu() -> float:
    t = os.times()
    return t.children_user + t.children_system


@pytest.mark.skipif(not reaped.reaping(), reason="child subreapers are Linux's")
def test_the_cpu_of_a_commands_orphans_is_counted() -> None:
    """``reduce --dask local:N`` leaves its fork server and workers to end after it: their
    CPU time must reach the row's "CPU per event", not be lost with the orphans."""
    before = _children_cpu()
    done = reaped.run([sys.executable, "-c", ORPHAN], check=False)
    assert done.returncode == 0
    assert _children_cpu() - before >= 0.35


def test_the_commands_exit_status_is_kept() -> None:
    done = reaped.run([sys.executable, "-c", "import sys; sys.exit(3)"], check=False)
    assert done.returncode == 3
    out = reaped.run([sys.executable, "-c", "print('x')"], capture_output=True, check=True)
    assert out.stdout == b"x\n"
    with pytest.raises(subprocess.CalledProcessError):
        reaped.run([sys.executable, "-c", "raise SystemExit(1)"], check=True)
