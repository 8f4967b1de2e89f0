"""A store's LMDB environment: opening it, sharing it within a process, and running read and
write transactions on it (``docs/store.md``, "Map size, processes, crashes").

Only the environment modules import :mod:`lmdb`: this one (it registers the store's codes),
``environment_files`` (what an open checks in the store's files and brings up to date),
``environment_errors`` (LMDB's errors as :class:`pithlog.errors.StoreError`),
``environment_sweep`` (the slots of killed readers cleared while a store is open),
``environment_scratch``, ``environment_walk``; the other store modules work on its
transactions (:class:`pithlog.store.layout.Txn`).

- LMDB allows one ``Environment`` per file per process, so environments are shared through
  a process-wide registry, reference-counted (:func:`acquire`, :func:`release`); several
  :class:`pithlog.store.Store` objects (and threads) may use one store, and several
  processes may use it at once (LMDB's writer lock).
- A write transaction that does not fit the map is aborted, the map doubled and the work
  run again from the start; a transaction that finds the map grown by another process
  adopts its size (:meth:`SharedEnvironment.write`, :meth:`SharedEnvironment.read`).
- A read-only open uses LMDB's read-only mode and read transactions only: it never waits
  for a writer and never writes the store (:func:`acquire`, ``docs/store.md``, "Readers").
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import lmdb

from pithlog.errors import StoreError, register
from pithlog.store import codec, environment_sweep, format6, format7
from pithlog.store.environment_errors import _begin, _lmdb_errors, _store_error
from pithlog.store.environment_files import (
    _allocate_lock_file,
    _check_data_file,
    _check_format,
    _first_commit,
    _is_lmdb_file,
    _open_existing,
    _walk,
)
from pithlog.store.environment_gate import Gate
from pithlog.store.environment_walk import Walkers
from pithlog.store.layout import DB_NAMES, Txn
from pithlog.store.place import check_path, check_place, unreadable

register(
    {
        "store.missing": "no pithlog store there: check --store, or append to create one",
        "store.not_a_store": "the folder is not a pithlog store (or a newer format): check --store",
        "store.format": "the store was written by another store format version of pithlog",
        "store.keyring_changed": "the store's states were reduced under another keyring "
        "(for an append, a change too large to apply during it), or a change to another "
        "keyring is under way; the message names the keyrings: give the store's keyring, or "
        "run `pithlog --store DIR rekey --keyring KEYRING` (resumable) with the keyring the "
        "store is to keep, then run the command again",
        "store.readonly": "the store was opened read-only; open it for writing",
        "store.closed": "the store was closed; open it again",
        "store.no_state": "the pith is unknown to the store, or pending (no valid "
        "record_created yet): see `pithlog pending`",
        "store.corrupted": "the store's files are damaged: run `pithlog replay --verify`, "
        "restore from a backup or re-import an export",
        "store.readers_full": "too many processes read the store at once, or readers killed "
        "while reading left LMDB's table of readers full: the message says what to do",
        "store.txn_full": "the transaction is too large for LMDB: append in smaller batches",
        "store.disk": "the disk is full or failing: free space and retry",
        "store.lock": "the store's lock file cannot be used: check permissions",
        "store.moved": "the store's files were deleted, moved or replaced while this "
        "process held them open: nothing more is written to them; start it again on the "
        "store",
        "store.io": "the store's folder cannot be created or read: check the path",
        "store.lmdb": "LMDB refused the operation: the message names the cause",
        "store.forked": "the store was opened in the process this one was forked from "
        "(a prefork server's workers, multiprocessing's fork), and LMDB forbids using it "
        "in the child: open the store in each process after it is forked, or start child "
        "processes with the spawn method",
        "store.argument": "an argument of a Store method is not of its type (a keyring "
        "that is not a Keyring, an after that is not an int) or out of its range: the "
        "message names it",
        "store.upgrade": "the store needs its Merkle tree caught up or its format migrated, "
        "which a read-only open never does: open it once for writing (`pithlog --store DIR "
        "append --keyring KEYRING < /dev/null`, as a user who can write it), then read",
    }
)

DEFAULT_MAP_SIZE = 64 << 20
"""Initial map size of a new store; it doubles whenever a batch does not fit."""

MAX_MAP_SIZE = 1 << 40

T = TypeVar("T")

Work = Callable[[Txn, dict[str, Any]], T]
"""What runs in a transaction: the transaction and the store's named databases (``dbs``)."""


# --- one shared environment and its transactions ------------------------------------------


@dataclass(eq=False)
class SharedEnvironment:
    """One open LMDB environment, shared by every :class:`pithlog.store.Store` of this process."""

    key: tuple[Any, ...]
    path: str
    env: lmdb.Environment
    dbs: dict[str, Any]
    readonly: bool = False
    """Opened in LMDB's read-only mode: read transactions only."""
    refs: int = 0
    gate: Gate = field(default_factory=Gate)
    pid: int = field(default_factory=os.getpid)
    closed: bool = False
    """Closed by the last :func:`release`: a :class:`pithlog.store.Store` that another
    thread closed while this one was using it finds out here (:meth:`_require_open`)."""
    piths_counted: tuple[int, int, int] | None = None
    """The last count of the ``piths`` table by :func:`pithlog.store.reads.stats`: the id
    of the snapshot it read, the piths with a state, the pending ones."""

    def reopen_writable(self, map_size: int) -> None:
        """Reopen this read-only environment for writing, in place, once no transaction of
        this process is active (LMDB allows one environment per file per process, so the
        read-only one is closed first; if the writable open fails, it is opened read-only
        again and the error raised)."""
        with self.gate.write, self.gate.exclusive():
            self.env.close()
            try:
                self.env, self.dbs = _open_lmdb(self.path, False, map_size, False)
            except BaseException:
                self.env, self.dbs = _open_lmdb(self.path, False, map_size, True)
                raise
            self.readonly = False

    def _grow(self) -> None:
        size = self.env.info()["map_size"]
        if size >= MAX_MAP_SIZE:
            raise StoreError("disk", f"the map is already {size} bytes; refusing to grow it")
        with self.gate.exclusive():
            self.env.set_mapsize(min(size * 2, MAX_MAP_SIZE))

    def _adopt_size(self) -> None:
        """Another process grew the map: adopt its size (LMDB: set_mapsize(0))."""
        with self.gate.exclusive():
            self._require_open()
            self.env.set_mapsize(0)

    def _require_open(self) -> None:
        # with the gate held, so that the last release cannot close the environment
        # between this check and the use of it (LMDB's own error would say only "closed
        # object", as an lmdb.Error from outside a transaction)
        if self.closed:
            raise StoreError("closed", f"the store at {self.path} was closed")

    def _require_in_place(self) -> None:
        """Refuse to commit once the data file this environment holds is no longer the one
        at its path (deleted, the folder moved, a backup restored over it): LMDB would
        commit into the old inode, and whatever a server acknowledged after that would be
        lost with it, or missing from the store now at the path."""
        if len(self.key) < 3:
            return  # the opening's own runner, or a store whose data file was unreadable
        try:
            st = os.stat(os.path.join(self.path, "data.mdb"))
            there = (st.st_dev, st.st_ino) == self.key[1:]
        except OSError:
            there = False
        if not there:
            raise StoreError("moved", f"the store at {self.path} was deleted, moved or "
                             "replaced while this process held it open; nothing was "
                             "written: start the process again on the store")  # fmt: skip

    def write(self, work: Work[T]) -> T:
        """Run ``work`` in one write transaction and commit it durably. On a full map the
        transaction is aborted, the map doubled, and ``work`` run again from the start."""
        if self.readonly:
            raise StoreError("readonly", f"the store at {self.path} is open read-only")
        return self._run(work, write=True)

    def read(self, work: Work[T]) -> T:
        """Run ``work`` in a read transaction (a snapshot of the last commit)."""
        return self._run(work, write=False)

    def _run(self, work: Work[T], write: bool) -> T:
        """The one place a map is resized: a transaction that cannot begin because another
        process grew the map adopts its size; a write that does not fit is aborted, the map
        doubled (:data:`MAX_MAP_SIZE` at most) and ``work`` run again from the start. Both
        happen with no transaction of this process active (:class:`Gate`)."""
        with _lmdb_errors(), self.gate.write if write else contextlib.nullcontext():
            while True:
                with self.gate.shared():
                    self._require_open()
                    try:
                        txn = _begin(self.env, write)
                    except lmdb.MapResizedError:
                        resize = self._adopt_size
                    else:
                        try:
                            result = work(txn, self.dbs)
                            if write:
                                self._require_in_place()
                                txn.commit()
                            else:
                                txn.abort()
                            return result
                        except BaseException as exc:
                            with contextlib.suppress(lmdb.Error):
                                txn.abort()
                            if not (write and isinstance(exc, lmdb.MapFullError)):
                                raise
                            resize = self._grow
                resize()

    def usage(self) -> dict[str, int]:
        """The map's page size, size and bytes in use (``pithlog stats``)."""
        with _lmdb_errors(), self.gate.shared():
            self._require_open()
            info = self.env.info()
            page_size = self.env.stat()["psize"]
        return {
            "page_size": page_size,
            "map_size": info["map_size"],
            "map_used": (info["last_pgno"] + 1) * page_size,
        }


# --- the process-wide registry of environments --------------------------------------------


_REGISTRY: dict[tuple[Any, ...], SharedEnvironment] = {}
_REGISTRY_LOCK = threading.RLock()
"""Reentrant: a garbage collection may run in :func:`acquire`, which holds it while a store
is opened, and finalize a :class:`pithlog.store.Store` left in a reference cycle, whose
``__del__`` releases its environment in the same thread (a plain lock waited for itself)."""

_FORKED = False
"""Whether this process was made by fork() (:func:`_forget_inherited`)."""


def _forget_inherited() -> None:
    # LMDB: an environment must not be used after fork() in the child. A child process
    # starts with an empty registry and opens a store its parent did not hold afresh.
    global _REGISTRY_LOCK, _FORKED
    for shared in _REGISTRY.values():
        _never_free(shared.env)
    _REGISTRY.clear()
    _REGISTRY_LOCK = threading.RLock()
    _FORKED = True


def _never_free(env: lmdb.Environment) -> None:
    """Keep an environment inherited through fork() from ever being freed in the child: py-lmdb
    frees it as its own, aborting the read transaction it keeps for reuse, which gives back
    that transaction's slot in the reader table of the lock file the parent shares; the
    parent's next read then fails (``MDB_BAD_RSLOT``). A reference held by the interpreter
    itself outlives even the clearing of modules at its shutdown."""
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(env))


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_inherited)


def _file_key(real: str) -> tuple[Any, ...]:
    """The identity of a store's files: its real path and the inode of its data file (a
    store deleted and re-created at the same path is another store)."""
    try:
        st = os.stat(os.path.join(real, "data.mdb"))
    except OSError:
        return (real, None)
    return (real, st.st_dev, st.st_ino)


def acquire(
    path: str,
    create: bool,
    map_size: int = DEFAULT_MAP_SIZE,
    readonly: bool = False,
    check: bool = False,
    walkers: Walkers | None = None,
) -> SharedEnvironment:
    """The environment of the store at ``path``, opened (and with ``create``, made) unless
    this process has it open already; each call is matched by one :func:`release`.

    ``readonly``: opened in LMDB's read-only mode (:func:`_open_env`) unless this process
    has it open for writing already. A writable ``acquire`` of a store this process holds
    read-only reopens it for writing in place (:meth:`SharedEnvironment.reopen_writable`).
    ``check``: when this process opens the environment now, every page of the data file is
    walked first (:func:`_walk`; in parts by ``walkers`` when given)."""
    real = os.path.realpath(path)
    with _REGISTRY_LOCK:
        key = _file_key(real)
        shared = _REGISTRY.get(key)
        if shared is None:
            walk = walkers if check and walkers is not None else check
            shared = _open_env(real, create and not readonly, map_size, readonly, walk)
            _REGISTRY[shared.key] = shared
            shared.refs += 1
            environment_sweep.keep_sweeping(_open_now)
        else:
            # counted before the reopen: a Store of it finalized meanwhile by a garbage
            # collection in this thread must not close it (nor wait for the reopen's gate)
            shared.refs += 1
            if shared.readonly and not readonly:
                try:
                    shared.reopen_writable(map_size)
                except BaseException:
                    shared.refs -= 1
                    raise
        return shared


def _open_now() -> list[SharedEnvironment]:
    with _REGISTRY_LOCK:  # the environments environment_sweep clears: it ends when none is
        return list(_REGISTRY.values()) if _REGISTRY else environment_sweep.ended()


def release(shared: SharedEnvironment) -> None:
    """Undo one :func:`acquire`; the last one closes the environment."""
    with _REGISTRY_LOCK:
        shared.refs -= 1
        if shared.refs > 0:
            return
        if _REGISTRY.get(shared.key) is shared:
            del _REGISTRY[shared.key]
    if shared.pid != os.getpid():
        return  # inherited through fork(): the environment belongs to the parent
    codec.forget(shared.dbs)
    with shared.gate.write, shared.gate.exclusive():
        shared.env.close()
        shared.closed = True


def _open_env(
    real: str, create: bool, map_size: int, readonly: bool, check: bool | Walkers = False
) -> SharedEnvironment:
    check_path(real)
    data = os.path.join(real, "data.mdb")
    try:
        os.stat(data)
        there = True
    except FileNotFoundError:
        there = False
    except OSError as exc:  # a folder this user may not enter: not "no store"
        raise unreadable(real, exc) from exc
    if not there:
        if not create:
            raise StoreError("missing", f"no store at {real} (no data.mdb)")
        check_place(real)  # a file, or a folder of other files: refused before creating
        try:
            os.makedirs(real, exist_ok=True)
        except OSError as exc:
            raise StoreError("io", f"cannot create {real}: {exc.strerror or exc}") from exc
    elif not os.path.isdir(real):
        raise StoreError("not_a_store", f"{real} is not a folder")
    else:
        _check_data_file(real, data, create)
    _allocate_lock_file(real)
    env, dbs = _open_lmdb(real, create, map_size, readonly, check)
    return SharedEnvironment(_file_key(real), real, env, dbs, readonly=readonly)


def _open_lmdb(
    real: str, create: bool, map_size: int, readonly: bool, check: bool | Walkers = False
) -> tuple[lmdb.Environment, dict[str, Any]]:
    """Open the environment and its named databases; a writable open also catches the
    Merkle tree up (or starts migrating the format) in the same first commit
    (``environment_files._first_commit``), a read-only one refuses a store that needs it
    (``store.upgrade``). ``check``: the data file's pages are walked (:func:`_walk`; in
    parts by the processes of ``check``, :class:`Walkers`) before LMDB reads any but its meta."""
    env = _lmdb_open(real, create, map_size, readonly)
    try:
        if check:
            _walk(env, real, None if check is True else check)
        with _lmdb_errors():  # the slots of readers that died (SIGKILL); read-only too
            env.reader_check()
        if readonly:
            dbs = _open_existing(env, real)
            with _lmdb_errors(), _begin(env, False) as txn:
                _check_format(txn, dbs, real, readonly)
        else:
            # the store's own transaction runner (map growth in one place) for the opening
            opener = SharedEnvironment((), real, env, {})
            dbs = opener.write(lambda txn, _: _first_commit(env, txn, real, create))
            opener.dbs = dbs
            if opener.read(lambda txn, dbs: format6.migrating(txn, dbs)):
                # format 5 -> 6: the copies moved in bounded transactions, resumable
                while opener.write(lambda txn, dbs: format6.step(txn, dbs)):
                    pass
            if opener.read(lambda txn, dbs: format7.migrating(txn, dbs)):
                # format 6 -> 7: the verdicts keyed anew, in bounded transactions too
                while opener.write(lambda txn, dbs: format7.step(txn, dbs)):
                    pass
    except BaseException:
        env.close()
        raise
    return env, dbs


OPEN_RESIZED_TRIES = 8
"""Opens of the environment tried while other processes keep growing the map
(:func:`_lmdb_open`)."""


def _lmdb_open(real: str, create: bool, map_size: int, readonly: bool) -> lmdb.Environment:
    """``lmdb.open`` with the store's settings. Read-only: LMDB's read-only mode (the data
    file opened for reading, read transactions only), with the lock file when this user can
    write it, which registers the reader so that no writer reuses the pages of its
    snapshot; without it when the lock file cannot be opened for writing (another user's
    store: LMDB's ``MDB_NOLOCK``, see ``docs/store.md``, "Readers"). On a read-only file
    system LMDB itself leaves the lock file out.

    Another process that grows the map between LMDB's read of the meta pages and the
    transaction ``lmdb.open`` begins makes that transaction ``MDB_MAP_RESIZED``: the open
    is made again, which reads the grown size (at most :data:`OPEN_RESIZED_TRIES` times)."""
    lock = True
    resized = 0
    while True:
        try:
            return lmdb.open(
                real,
                map_size=map_size,
                subdir=True,
                max_dbs=len(DB_NAMES) + 2,
                sync=True,
                metasync=True,
                readahead=False,
                create=create,
                max_spare_txns=1,
                readonly=readonly,
                lock=lock,
            )
        except lmdb.MapResizedError as exc:
            resized += 1
            if resized < OPEN_RESIZED_TRIES:
                continue
            raise _store_error(exc) from exc
        except lmdb.ReadonlyError as exc:  # EACCES
            if readonly and lock:
                lock = False
                continue
            what = "read" if readonly else "write"
            raise StoreError("readonly" if not readonly else "io",
                             f"cannot {what} the store at {real}: {exc}") from exc  # fmt: skip
        except lmdb.Error as exc:
            if isinstance(exc, lmdb.InvalidError) and _is_lmdb_file(real):
                raise StoreError("corrupted", f"{real}: the data file's meta page is damaged "
                                 f"({exc}); restore it from a backup") from exc  # fmt: skip
            if not create and isinstance(exc, (lmdb.InvalidError, lmdb.VersionMismatchError)):
                raise StoreError("not_a_store", f"{real} is not a pithlog store: {exc}") from exc
            if _FORKED and "already open in this process" in str(exc):
                # py-lmdb's own record of open environments crosses fork(), and pithlog
                # cannot clear it: the store was open in the process this one forked from
                raise StoreError("forked", f"{real} was open in the process this one was forked "
                                 "from, and LMDB (py-lmdb) refuses it in the child: start "
                                 "child processes with the spawn method, or open the store "
                                 "in the parent only after they are forked") from exc  # fmt: skip
            raise _store_error(exc, opening=real) from exc
