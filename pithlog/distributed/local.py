"""The fork server of a ``local[:N]`` cluster, which can start before Dask is imported.

Nothing heavy is imported here (not Dask): ``pithlog reduce --dask local`` starts the fork
server first, so that it imports Dask and the tasks (:data:`FORKSERVER_PRELOAD`) on one
core while this process imports Dask for its client on the other, instead of after it.
The workers of the local cluster are then forked from it (docs/distributed.md, "On one
machine").
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.forkserver
import re

FORKSERVER_PRELOAD = ["distributed", "pithlog.distributed.tasks", "__main__"]
"""What the process that forks a local cluster's workers imports once: Dask, the tasks,
and the command's main module (which each worker would otherwise run again, as
multiprocessing does for a worker it starts)."""

_LOCAL = re.compile(r"local(?::([0-9]+))?")


def local_workers(address: str) -> str | None:
    """For ``local`` or ``local:N``, the N given (``""`` when none); else ``None``."""
    local = _LOCAL.fullmatch(address)
    return None if local is None else (local.group(1) or "")


def has_fork_server() -> bool:
    """Whether this platform starts processes from a fork server (not Windows)."""
    return "forkserver" in multiprocessing.get_all_start_methods()


def start_fork_server() -> bool:
    """Start this process's fork server with :data:`FORKSERVER_PRELOAD`, unless it runs
    already (then it keeps what it imported). ``False`` where there is none."""
    if not has_fork_server():
        return False
    multiprocessing.get_context("forkserver").set_forkserver_preload(FORKSERVER_PRELOAD)
    multiprocessing.forkserver.ensure_running()
    return True
