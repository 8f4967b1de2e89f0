"""LMDB's errors as :class:`pithlog.errors.StoreError` with stable codes (``docs/store.md``,
"Map size, processes, crashes"; the codes are registered by
:mod:`pithlog.store.environment`): a full or failing disk is ``store.disk``, damage
``store.corrupted``, a foreign file ``store.not_a_store``, and so on. Every environment
module raises LMDB's errors through here. A read that finds LMDB's table of readers full
clears the slots of dead processes first (:func:`_begin`); an open that finds it full says
what to do (:func:`_readers_full_at_open`).
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterator

import lmdb

from pithlog.errors import StoreError
from pithlog.store.environment_sweep import SWEEP_SECONDS

_DISK_ERRORS = (os.strerror(errno.EIO), os.strerror(errno.ENOSPC), os.strerror(errno.EDQUOT))
"""LMDB's error texts for a full or failing disk: a short write is EIO in LMDB
(``mdb_page_flush``: "short write, filesystem full?"), and py-lmdb has no class for EIO."""


def _store_error(exc: lmdb.Error, opening: str | None = None) -> StoreError:
    """``opening``: the store whose open (``lmdb.open``) failed."""
    text = str(exc)
    if isinstance(exc, (lmdb.CorruptedError, lmdb.PanicError, lmdb.PageNotFoundError)):
        return StoreError("corrupted", f"LMDB reports damage: {text}")
    if isinstance(exc, (lmdb.InvalidError, lmdb.VersionMismatchError, lmdb.IncompatibleError)):
        return StoreError("not_a_store", f"not an LMDB environment pithlog can open: {text}")
    if isinstance(exc, lmdb.ReadersFullError) and opening is not None:
        return _readers_full_at_open(opening, exc)
    if isinstance(exc, lmdb.ReadersFullError):
        # py-lmdb's hint ("use a larger Environment(max_readers=)") is for a program that
        # opens LMDB itself: pithlog's user can only have fewer processes read at once
        cause = text.split(" (Please use a larger", 1)[0]
        return StoreError("readers_full", f"too many processes are reading the store at "
                          f"once ({cause}): close some of them, or wait for their reads to "
                          "finish, and retry")  # fmt: skip
    if isinstance(exc, lmdb.TxnFullError):
        return StoreError("txn_full", text)
    if isinstance(exc, lmdb.ReadonlyError):
        return StoreError("readonly", text)
    if isinstance(exc, lmdb.DiskError) or text.endswith(_DISK_ERRORS):
        return StoreError("disk", text)
    if text.endswith(os.strerror(errno.EROFS)):
        return StoreError("readonly", text)
    if isinstance(exc, lmdb.LockError):
        return StoreError("lock", text)
    return StoreError("lmdb", text)


def _readers_full_at_open(real: str, exc: lmdb.ReadersFullError) -> StoreError:
    """An open that finds every slot of LMDB's table of readers taken: it cannot clear the
    slots of readers that died (``mdb_reader_check`` needs the environment, which py-lmdb
    returns only once a read transaction has begun on it), and LMDB starts the table afresh
    only when no process has the store open (``docs/store.md``, "Map size, processes,
    crashes")."""
    lock = os.path.join(real, "lock.mdb")
    cause = str(exc).split(" (Please use a larger", 1)[0]
    return StoreError("readers_full", f"cannot open the store at {real}: every slot of LMDB's "
                      f"table of readers in {lock} is taken ({cause}), by processes reading "
                      "it now, or left by readers killed while reading (SIGKILL), which an "
                      "open must get a slot to clear. Let the reads finish and retry; a "
                      "pithlog process that keeps the store open (`pithlog serve`, `mirror "
                      "--follow`) clears the slots of killed readers within "
                      f"{SWEEP_SECONDS:g} s; else stop the processes that keep it open "
                      f"(`fuser -v {lock}` lists them): once none has it open, the next "
                      "open starts the table afresh")  # fmt: skip


def _begin(env: lmdb.Environment, write: bool) -> lmdb.Transaction[bytes]:
    """``env.begin``; a read transaction that finds LMDB's table of readers full clears the
    slots of processes that died holding one (LMDB's ``mdb_reader_check``) and begins once
    more. Only an open clears them otherwise (``docs/store.md``, "Map size, processes,
    crashes"): a process that keeps a store open (``pithlog serve``) would fail its reads
    with ``store.readers_full`` once enough readers were killed meanwhile."""
    try:
        return env.begin(write=write)
    except lmdb.ReadersFullError:
        if write or not env.reader_check():
            raise
        return env.begin(write=write)


@contextlib.contextmanager
def _lmdb_errors() -> Iterator[None]:
    try:
        yield
    except lmdb.Error as exc:
        raise _store_error(exc) from exc
