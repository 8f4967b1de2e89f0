"""A store's LMDB environment: opening it, sharing it within a process, and running read and
write transactions on it (``docs/store.md``, "Map size, processes, crashes").

This is the only module that imports :mod:`lmdb`. The modules beside it work on the
transactions it opens (:class:`pithlog.store.layout.Txn`) without importing it.

- LMDB allows one ``Environment`` per file per process, so environments are shared through
  a process-wide registry, reference-counted (:func:`acquire`, :func:`release`); several
  :class:`pithlog.store.Store` objects (and threads) may use one store, and several
  processes may use it at once (LMDB's writer lock).
- A write transaction that does not fit the map is aborted, the map doubled and the work
  run again from the start; a transaction that finds the map grown by another process
  adopts its size (:meth:`SharedEnvironment.write`, :meth:`SharedEnvironment.read`).
- LMDB's errors become :class:`pithlog.errors.StoreError` with stable codes.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

import lmdb

from pithlog.errors import StoreError, register
from pithlog.protocol.reduce import MERGE_VERSION
from pithlog.store import aliases, keyindex, tree
from pithlog.store.layout import (
    DB_NAMES,
    FORMAT_VERSION,
    META_FORMAT,
    META_MERGE,
    META_MERKLE_SIZE,
    META_NEXT_SEQ,
    MIGRATES_FROM,
    SEQ,
    Txn,
)
from pithlog.store.place import check_place
from pithlog.store.replay import ScratchIndex

register(
    {
        "store.missing": "no pithlog store there: check --store, or append to create one",
        "store.not_a_store": "the folder is not a pithlog store (or a newer format): check --store",
        "store.format": "the store was written by another store format version of pithlog",
        "store.keyring_changed": "the store's states were reduced under another keyring and "
        "the change is too large to apply during an append (or under way): run `pithlog "
        "--store DIR rekey --keyring KEYRING` (resumable), then append",
        "store.readonly": "the store was opened read-only; open it for writing",
        "store.closed": "the store was closed; open it again",
        "store.no_state": "the pith is unknown to the store, or pending (no valid "
        "record_created yet): see `pithlog pending`",
        "store.corrupted": "the store's files are damaged: run `pithlog replay --verify`, "
        "restore from a backup or re-import an export",
        "store.readers_full": "too many processes read the store at once; retry",
        "store.txn_full": "the transaction is too large for LMDB: append in smaller batches",
        "store.disk": "the disk is full or failing: free space and retry",
        "store.lock": "the store's lock file cannot be used: check permissions",
        "store.io": "the store's folder cannot be created or read: check the path",
        "store.lmdb": "LMDB refused the operation: the message names the cause",
    }
)

DEFAULT_MAP_SIZE = 64 << 20
"""Initial map size of a new store; it doubles whenever a batch does not fit."""

MAX_MAP_SIZE = 1 << 40

T = TypeVar("T")

Work = Callable[[Txn, dict[str, Any]], T]
"""What runs in a transaction: the transaction and the store's named databases (``dbs``)."""


# --- lmdb errors --------------------------------------------------------------------------


def _store_error(exc: lmdb.Error) -> StoreError:
    text = str(exc)
    if isinstance(exc, (lmdb.CorruptedError, lmdb.PanicError, lmdb.PageNotFoundError)):
        return StoreError("corrupted", f"LMDB reports damage: {text}")
    if isinstance(exc, (lmdb.InvalidError, lmdb.VersionMismatchError, lmdb.IncompatibleError)):
        return StoreError("not_a_store", f"not an LMDB environment pithlog can open: {text}")
    if isinstance(exc, lmdb.ReadersFullError):
        return StoreError("readers_full", text)
    if isinstance(exc, lmdb.TxnFullError):
        return StoreError("txn_full", text)
    if isinstance(exc, lmdb.ReadonlyError):
        return StoreError("readonly", text)
    if isinstance(exc, lmdb.DiskError):
        return StoreError("disk", text)
    if isinstance(exc, lmdb.LockError):
        return StoreError("lock", text)
    return StoreError("lmdb", text)


@contextlib.contextmanager
def _lmdb_errors() -> Iterator[None]:
    try:
        yield
    except lmdb.Error as exc:
        raise _store_error(exc) from exc


# --- one shared environment and its transactions ------------------------------------------


class _Gate:
    """Readers share; a map resize is exclusive (LMDB: no transaction of this process may
    be active while ``set_mapsize`` runs). The single writer also holds ``write``."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._exclusive = False
        self.write = threading.RLock()

    @contextlib.contextmanager
    def shared(self) -> Iterator[None]:
        with self._cond:
            while self._exclusive:
                self._cond.wait()
            self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                self._cond.notify_all()

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        with self._cond:
            while self._exclusive or self._readers:
                self._cond.wait()
            self._exclusive = True
        try:
            yield
        finally:
            with self._cond:
                self._exclusive = False
                self._cond.notify_all()


@dataclass(eq=False)
class SharedEnvironment:
    """One open LMDB environment, shared by every :class:`pithlog.store.Store` on it in this
    process."""

    key: tuple[Any, ...]
    path: str
    env: lmdb.Environment
    dbs: dict[str, Any]
    refs: int = 0
    gate: _Gate = field(default_factory=_Gate)
    pid: int = field(default_factory=os.getpid)

    def _grow(self) -> None:
        size = self.env.info()["map_size"]
        if size >= MAX_MAP_SIZE:
            raise StoreError("disk", f"the map is already {size} bytes; refusing to grow it")
        with self.gate.exclusive():
            self.env.set_mapsize(min(size * 2, MAX_MAP_SIZE))

    def _adopt_size(self) -> None:
        """Another process grew the map: adopt its size (LMDB: set_mapsize(0))."""
        with self.gate.exclusive():
            self.env.set_mapsize(0)

    def write(self, work: Work[T]) -> T:
        """Run ``work`` in one write transaction and commit it durably. On a full map the
        transaction is aborted, the map doubled, and ``work`` run again from the start."""
        return self._run(work, write=True)

    def read(self, work: Work[T]) -> T:
        """Run ``work`` in a read transaction (a snapshot of the last commit)."""
        return self._run(work, write=False)

    def _run(self, work: Work[T], write: bool) -> T:
        """The one place a map is resized: a transaction that cannot begin because another
        process grew the map adopts its size; a write that does not fit is aborted, the map
        doubled (:data:`MAX_MAP_SIZE` at most) and ``work`` run again from the start. Both
        happen with no transaction of this process active (:class:`_Gate`)."""
        with _lmdb_errors(), self.gate.write if write else contextlib.nullcontext():
            while True:
                with self.gate.shared():
                    try:
                        txn = self.env.begin(write=write)
                    except lmdb.MapResizedError:
                        resize = self._adopt_size
                    else:
                        try:
                            result = work(txn, self.dbs)
                            if write:
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
        info = self.env.info()
        page_size = self.env.stat()["psize"]
        return {
            "page_size": page_size,
            "map_size": info["map_size"],
            "map_used": (info["last_pgno"] + 1) * page_size,
        }


# --- the process-wide registry of environments --------------------------------------------


_REGISTRY: dict[tuple[Any, ...], SharedEnvironment] = {}
_REGISTRY_LOCK = threading.Lock()


def _forget_inherited() -> None:
    # LMDB: an environment must not be used after fork() in the child. A child process
    # starts with an empty registry and opens the store afresh.
    global _REGISTRY_LOCK
    _REGISTRY.clear()
    _REGISTRY_LOCK = threading.Lock()


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


def acquire(path: str, create: bool, map_size: int = DEFAULT_MAP_SIZE) -> SharedEnvironment:
    """The environment of the store at ``path``, opened (and with ``create``, made) unless
    this process has it open already; each call is matched by one :func:`release`."""
    real = os.path.realpath(path)
    with _REGISTRY_LOCK:
        key = _file_key(real)
        shared = _REGISTRY.get(key)
        if shared is None:
            shared = _open_env(real, create, map_size)
            _REGISTRY[shared.key] = shared
        shared.refs += 1
        return shared


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
    with shared.gate.write, shared.gate.exclusive():
        shared.env.close()


def _open_env(real: str, create: bool, map_size: int) -> SharedEnvironment:
    data = os.path.join(real, "data.mdb")
    if not os.path.exists(data):
        if not create:
            raise StoreError("missing", f"no store at {real} (no data.mdb)")
        check_place(real)  # a file, or a folder of other files: refused before creating
        try:
            os.makedirs(real, exist_ok=True)
        except OSError as exc:
            raise StoreError("io", f"cannot create {real}: {exc.strerror or exc}") from exc
    elif not os.path.isdir(real):
        raise StoreError("not_a_store", f"{real} is not a folder")
    try:
        env = lmdb.open(
            real,
            map_size=map_size,
            subdir=True,
            max_dbs=len(DB_NAMES) + 2,
            sync=True,
            metasync=True,
            readahead=False,
            create=create,
            max_spare_txns=1,
        )
    except lmdb.Error as exc:
        if not create and isinstance(exc, (lmdb.InvalidError, lmdb.VersionMismatchError)):
            raise StoreError("not_a_store", f"{real} is not a pithlog store: {exc}") from exc
        raise _store_error(exc) from exc
    shared = SharedEnvironment(_file_key(real), real, env, {})
    try:
        env.reader_check()  # clear reader slots of processes that died (SIGKILL)
        shared.dbs = shared.write(lambda txn, _: _open_dbs(env, txn, real, create))
        shared.write(_catch_up_merkle)
    except BaseException:
        env.close()
        raise
    return shared


def _open_dbs(env: lmdb.Environment, txn: Txn, real: str, create: bool) -> dict[str, Any]:
    """The store's named databases, opened (and for a new store, its meta written) in the
    write transaction ``txn``; a folder that holds no store, or another format, is refused."""
    ltxn = cast("lmdb.Transaction[bytes]", txn)  # what SharedEnvironment.write began
    if not create:
        try:
            env.open_db(b"meta", txn=ltxn, create=False)
        except lmdb.NotFoundError:
            # An environment with nothing in it at all is a store whose creation was
            # interrupted (killed between making data.mdb and committing its first
            # transaction): no store yet, as if nothing had been made, and the next append
            # creates it. Anything else is someone else's data.
            if env.stat()["entries"]:
                raise StoreError("not_a_store", f"{real} holds no pithlog store") from None
            raise StoreError("missing", f"no store at {real} yet: its creation was "
                             "interrupted before the first commit") from None
    dbs = {name: env.open_db(name.encode("ascii"), txn=ltxn) for name in DB_NAMES}
    meta = dbs["meta"]
    fmt = txn.get(META_FORMAT, db=meta)
    if fmt is None:
        if txn.stat(dbs["events"])["entries"] or txn.stat(dbs["seq"])["entries"]:
            raise StoreError("not_a_store", f"{real} has events but no meta format")
        txn.put(META_FORMAT, FORMAT_VERSION, db=meta)
        txn.put(META_MERGE, MERGE_VERSION.encode("ascii"), db=meta)
        txn.put(META_NEXT_SEQ, SEQ.pack(1), db=meta)
    elif fmt != FORMAT_VERSION and fmt not in MIGRATES_FROM:  # the older: _migrate
        raise StoreError(
            "format",
            f"store format {fmt.decode('ascii', 'replace')!r}; this pithlog reads "
            f"{FORMAT_VERSION.decode()!r}",
        )
    merge = txn.get(META_MERGE, db=meta)
    if merge != MERGE_VERSION.encode("ascii"):
        raise StoreError(
            "format",
            f"store merge_version {merge!r}; this pithlog implements {MERGE_VERSION}",
        )
    return dbs


def _catch_up_merkle(txn: Txn, dbs: dict[str, Any]) -> None:
    """On open: build the tree of a store that lacks it (or was appended to by a pithlog
    without it), or migrate a store of the format before (:func:`_migrate`). Nothing to do
    for a current one."""
    if _migrate(txn, dbs):
        return
    size = tree.merkle_size(txn, dbs)
    if (txn.get(META_MERKLE_SIZE, db=dbs["meta"]) is not None
            and txn.get(SEQ.pack(size + 1), db=dbs["seq"]) is None):  # fmt: skip
        return
    tree.merkle_sync(txn, dbs)


def _migrate(txn: Txn, dbs: dict[str, Any]) -> bool:
    """Bring a store of a format in :data:`MIGRATES_FROM` to :data:`FORMAT_VERSION` in
    ``txn`` (the caller's write transaction, retried whole on a full map), one step after
    the other: 2 -> 3 (leaves of 64 bytes and ``by_copy``, then the alias index), 3 -> 5
    (``by_key``, verdicts per key entry). ``True`` when it did."""
    fmt = txn.get(META_FORMAT, db=dbs["meta"])
    if fmt not in MIGRATES_FROM:
        return False
    if fmt == b"2":
        tree.migrate_leaf_data(txn, dbs)
        aliases.rebuild_aliases(txn, dbs)
    keyindex.migrate_3_to_5(txn, dbs)  # records FORMAT_VERSION
    return True


# --- a throwaway environment --------------------------------------------------------------


@contextlib.contextmanager
def scratch_index(entries: int) -> Iterator[ScratchIndex]:
    """The temporary on-disk index of replay's structure pass
    (:data:`pithlog.store.replay.ScratchFactory`): a write transaction on a throwaway
    environment, for ``entries`` keys or so."""
    tmp = tempfile.mkdtemp(prefix="pithlog-replay-")
    try:
        # One write transaction holds every seq entry; writemap puts its dirty pages in the
        # file's mapping instead of the heap, so memory does not grow with the log (without
        # it, a replay of 1M events held 135 MiB of them).
        index_env = lmdb.open(tmp, map_size=max(64 << 20, entries * 512), sync=False,
                              metasync=False, lock=False, subdir=True,
                              writemap=True)  # fmt: skip
        try:
            with index_env.begin(write=True) as itx:
                yield itx
        finally:
            index_env.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
