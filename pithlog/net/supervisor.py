"""The supervisor of ``pithlog serve --workers N`` (``docs/network.md``, "The command"):
uvicorn's, which starts the workers, replaces one that dies and stops them all on SIGINT
or SIGTERM, with how the command ends when it stops. On SIGHUP it replaced every worker,
one at a time (a replacement that could not start was dropped, the old worker kept, where
one started for a worker that died stops the server): it now says that ``serve`` does not
reload, as with one worker (:func:`~pithlog.net.held_signals.no_reload`), and the workers
ignore it (:func:`~pithlog.net.server.app_from_environment`).

uvicorn's supervisor starts a worker in the place of one that died, and that worker reads
the key, the keyring and the store again. When it cannot start (the key file removed
meanwhile, the keyring changed, the store gone), it says why in one line and ends with
uvicorn's status for a worker that failed to start (``app_from_environment`` in
:mod:`pithlog.net.server`); uvicorn's supervisor then stops every worker, and
:class:`Supervisor` ends the command with ``serve.worker_failed``, not status 0. Before,
such a worker ended with a traceback and was replaced again, and again (25 processes and
46 tracebacks in 15 s), the server serving at half its workers for ever.

A worker that dies (``kill -9``, the kernel out of memory) and is replaced is said in one
line at ``warning``, its process id, how it ended and its replacement's
(:meth:`Supervisor.keep_subprocess_alive`): uvicorn says it at ``info``, below the
``warning`` serve logs at, and an operator never learnt of it.
"""

from __future__ import annotations

import logging
import os
import signal
from socket import socket

from uvicorn.config import Config
from uvicorn.supervisors import Multiprocess
from uvicorn.supervisors.multiprocess import SIGNALS, Process

from pithlog.errors import ServeError, StoreError, register
from pithlog.net.held_signals import say_no_reload
from pithlog.store import Store

register({"serve.worker_failed": "a worker of serve --workers N could not start (the line "
          "before says why: the key file, the keyring or the store changed since the server "
          "started); the server stopped: put that right and start it again"})  # fmt: skip

logger = logging.getLogger("uvicorn.error")


class Supervisor(Multiprocess):
    """uvicorn's supervisor, which tells why it stopped (:meth:`run`)."""

    failed = False
    """Whether it stopped because a worker could not start."""

    def __init__(self, config: Config, sockets: list[socket]) -> None:
        # uvicorn's handlers, set here, stay after it returns: the command's are put back
        self._before = {sig: signal.getsignal(sig) for sig in SIGNALS}
        self.stopped_by: list[int] = []
        super().__init__(config, sockets)

    def handle_int(self) -> None:
        self.stopped_by.append(signal.SIGINT)
        super().handle_int()

    def handle_term(self) -> None:
        self.stopped_by.append(signal.SIGTERM)
        super().handle_term()

    def handle_hup(self) -> None:
        say_no_reload()

    def keep_subprocess_alive(self) -> None:
        """uvicorn's: a worker that ended, or answers no health check in time (killed
        then), is replaced; each replaced is said in one line at ``warning``."""
        stopping = self.should_exit.is_set()
        before = list(self.processes)
        running = [process.process.is_alive() for process in before]
        super().keep_subprocess_alive()
        # uvicorn stops everything when a worker ends with its status for a failed start
        if not stopping and self.should_exit.is_set():
            self.failed = True
        for old, was_running, new in zip(before, running, self.processes, strict=False):
            if new is not old:
                logger.warning("a worker (pid %s) ended, %s; a new one (pid %s) was started "
                               "in its place", old.pid, self._how(old, was_running),
                               new.pid)  # fmt: skip

    def _how(self, process: Process, was_running: bool) -> str:
        """How ``process`` ended: killed by a signal, an exit status, or, ``was_running``
        as uvicorn looked at it and killed by SIGKILL, killed for want of an answer."""
        code = process.exitcode
        if code is None:  # pragma: no cover - joined before it is replaced
            return "how unknown"
        if was_running and code == -signal.SIGKILL:
            return (f"killed by the supervisor: it answered no health check within "
                    f"{self.config.timeout_worker_healthcheck:g} s")  # fmt: skip
        if code < 0:
            try:
                return f"killed by signal {signal.Signals(-code).name}"
            except ValueError:
                return f"killed by signal {-code}"
        return f"exit status {code}"

    def run(self) -> None:
        """Run until stopped; then, when a signal stopped it, that signal raised again with
        the handlers from before (the command ends with its line and status, 143 or 130, as
        with one worker: it ended with status 0 and no line), else ``serve.worker_failed``
        when a worker could not start."""
        try:
            super().run()
        finally:
            for sig, handler in self._before.items():
                if handler is not None:
                    signal.signal(sig, handler)
        if self.stopped_by:
            signal.raise_signal(self.stopped_by[0])
        if self.failed:
            raise ServeError("worker_failed", "a worker could not start (uvicorn's "
                             "line above, 'a worker could not start: ...', says why): every "
                             "worker stopped; put right what it names and start the "
                             "server again")  # fmt: skip


def require_started_on(store: Store, path: str, started_on: list[int] | None) -> None:
    """Refuse (``store.moved``, ``store`` closed) the store at ``path`` when it is not the
    one the command opened, whose data file was ``started_on`` (:func:`data_file`; ``None``:
    the command itself, nothing to compare with)."""
    if started_on is not None and data_file(path) != started_on:
        store.close()
        raise StoreError("moved", f"the store at {path} is not the one this server "
                         "started on (deleted, moved or replaced since): start the server "
                         "again on the store")  # fmt: skip


def data_file(store: str) -> list[int] | None:
    """The device and inode of the data file of the store at ``store``, if any."""
    try:
        status = os.stat(os.path.join(store, "data.mdb"))
    except OSError:
        return None
    return [status.st_dev, status.st_ino]
