"""The gate of one shared LMDB environment's transactions in this process: reads share it,
a map resize (LMDB's ``set_mapsize``: no transaction of the process may be active) takes
it alone, and the single writer also holds its ``write`` lock (``environment``)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator


class Gate:
    """Readers share; a map resize is exclusive (LMDB: no transaction of this process may
    be active while ``set_mapsize`` runs). The single writer also holds ``write``.

    A resize asked for waits for the transactions under way, and transactions begun after
    it wait for it: were they let in, threads whose reads overlap (a web application's)
    would never leave it a moment with none active, and the append that needs it (holding
    ``write``, so every other append of the process too) would wait for ever. A thread
    already inside goes on without waiting, as the resize waits for it."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._exclusive = False
        self._asking = 0
        """Threads waiting for :meth:`exclusive`."""
        self._inside = threading.local()
        """``depth``: how many :meth:`shared` this thread is in."""
        self.write = threading.RLock()

    @contextlib.contextmanager
    def shared(self) -> Iterator[None]:
        depth: int = getattr(self._inside, "depth", 0)
        with self._cond:
            while self._exclusive or (self._asking and not depth):
                self._cond.wait()
            self._readers += 1
        try:
            self._inside.depth = depth + 1
            yield
        finally:
            self._inside.depth = depth
            with self._cond:
                self._readers -= 1
                self._cond.notify_all()

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        with self._cond:
            self._asking += 1
            try:
                while self._exclusive or self._readers:
                    self._cond.wait()
            finally:
                self._asking -= 1
                self._cond.notify_all()  # an interrupt while waiting: let the readers in
            self._exclusive = True
        try:
            yield
        finally:
            with self._cond:
                self._exclusive = False
                self._cond.notify_all()
