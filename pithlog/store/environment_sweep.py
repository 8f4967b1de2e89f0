"""The slots of killed readers swept from LMDB's table of readers while a process keeps a
store open (``docs/store.md``, "Map size, processes, crashes").

An open clears the slots of readers killed while reading (SIGKILL), and so does a read that
finds the table full; but a process that keeps the store open and idles (``pithlog serve``,
``mirror --follow``, a registry embedding :class:`pithlog.store.Store`) opens nothing and
never finds the table full (py-lmdb keeps its own slot for the next read), and while it
holds the store LMDB never starts the table afresh: once the slots were all taken by killed
readers, every other process's open failed (``store.readers_full``) until it was restarted.

So every process with a store open runs one thread (``pithlog-readers``) that clears them
every :data:`SWEEP_SECONDS` (LMDB's ``mdb_reader_check``: a scan of the table, which takes
its mutex only when it finds a dead reader) in each environment of the process-wide registry
(:func:`pithlog.store.environment.acquire`). It runs beside the event loop of a server, not
on it, and touches no request; it holds an environment's gate as a reader does, so that the
environment is never closed (nor reopened for writing) under it, and skips one closed
before. It ends once no store is open in the process, and with the process (a daemon
thread); a child made by ``fork()`` starts its own when it opens a store.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import lmdb

if TYPE_CHECKING:
    from pithlog.store.environment import SharedEnvironment

SWEEP_SECONDS = 30.0
"""How often the slots of killed readers are cleared while a store is open: 254 readers
killed within that time (the table of pithlog's lock file) stop other processes' opens
until the next sweep at worst."""

_running_in: int | None = None
"""The process whose sweeper thread runs (a child made by ``fork()`` has none)."""


def keep_sweeping(open_now: Callable[[], Sequence[SharedEnvironment]]) -> None:
    """Start this process's sweeper unless it runs; called with the registry's lock held, as
    ``open_now`` (the environments open now, :func:`ended` when there are none) takes it."""
    global _running_in
    if _running_in == os.getpid():
        return
    _running_in = os.getpid()
    threading.Thread(target=_sweeper, args=(open_now,), name="pithlog-readers",
                     daemon=True).start()  # fmt: skip


def ended() -> list[SharedEnvironment]:
    """No store is open (said with the registry's lock held): the sweeper ends; no
    environment to sweep."""
    global _running_in
    _running_in = None
    return []


def _sweeper(open_now: Callable[[], Sequence[SharedEnvironment]]) -> None:
    while True:
        time.sleep(SWEEP_SECONDS)
        environments = open_now()
        if not environments:
            return
        for shared in environments:
            sweep(shared)


def sweep(shared: SharedEnvironment) -> int:
    """Clear the slots of dead readers in ``shared``'s table: how many, 0 once it is closed."""
    with shared.gate.shared():
        if shared.closed or shared.pid != os.getpid():
            return 0
        try:
            return int(shared.env.reader_check())
        except lmdb.Error:  # the next open or read says what is wrong
            return 0
