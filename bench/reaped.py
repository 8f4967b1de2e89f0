"""A command run so that the CPU time of every process it starts reaches this process's
``os.times()`` (``children_user``, ``children_system``), orphans included.

A process's CPU time is added to its parent's children times when the parent waits for it,
and only then. ``reduce --dask local:N`` starts its workers from a fork server
(``pithlog.distributed.local``), which outlives the command for a moment and is then waited
for by no one: without this, the bench counted its workers' CPU as nothing (0.09 raw
verifies per event, less than the one signature every event needs). Here a small parent
marks itself a child subreaper (Linux ``prctl(PR_SET_CHILD_SUBREAPER)``), so the command's
orphans become its children, runs the command, and waits for every one of them before it
exits with the command's status.
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any

REAPER = """
import ctypes, os, sys
if ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) != 0:  # PR_SET_CHILD_SUBREAPER
    sys.exit(f"prctl(PR_SET_CHILD_SUBREAPER): {os.strerror(ctypes.get_errno())}")
pid = os.posix_spawn(sys.argv[1], sys.argv[1:], os.environ)
status = os.waitpid(pid, 0)[1]
while True:  # the command's orphans, reparented here: their CPU time counted once they end
    try:
        os.wait()
    except ChildProcessError:
        break
sys.exit(os.waitstatus_to_exitcode(status))
"""


def reaping() -> bool:
    """Whether :func:`run` counts orphans here (Linux only: elsewhere it runs the command
    as :func:`subprocess.run` does)."""
    return sys.platform.startswith("linux")


def run(argv: list[str], **options: Any) -> subprocess.CompletedProcess[Any]:
    """:func:`subprocess.run` of ``argv`` (``argv[0]`` a path), its descendants' CPU time
    all counted in this process's children times once it returns."""
    if reaping():
        argv = [sys.executable, "-S", "-c", REAPER, *argv]
    return subprocess.run(argv, **options)
