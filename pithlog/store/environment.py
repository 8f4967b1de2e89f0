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
- A read-only open uses LMDB's read-only mode and read transactions only: it never waits
  for a writer and never writes the store (:func:`acquire`, ``docs/store.md``, "Readers").
- A data file shorter than its newest meta page says is refused before it is mapped
  (:func:`_check_data_file`): reading past its end would kill the process (SIGBUS).
- LMDB's errors become :class:`pithlog.errors.StoreError` with stable codes.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import struct
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

import lmdb
import lmdb.verify

from pithlog.errors import StoreError, register
from pithlog.protocol.reduce import MERGE_VERSION
from pithlog.store import codec, format6, keyindex, tree
from pithlog.store.layout import (
    DB_NAMES,
    FORMAT_2,
    FORMAT_3,
    FORMAT_4,
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
from pithlog.store.replay_structure import ScratchIndex

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


# --- lmdb errors --------------------------------------------------------------------------


_DISK_ERRORS = (os.strerror(errno.EIO), os.strerror(errno.ENOSPC), os.strerror(errno.EDQUOT))
"""LMDB's error texts for a full or failing disk: a short write is EIO in LMDB
(``mdb_page_flush``: "short write, filesystem full?"), and py-lmdb has no class for EIO."""


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
    if isinstance(exc, lmdb.DiskError) or text.endswith(_DISK_ERRORS):
        return StoreError("disk", text)
    if text.endswith(os.strerror(errno.EROFS)):
        return StoreError("readonly", text)
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
    readonly: bool = False
    """Opened in LMDB's read-only mode: read transactions only."""
    refs: int = 0
    gate: _Gate = field(default_factory=_Gate)
    pid: int = field(default_factory=os.getpid)

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
            self.env.set_mapsize(0)

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


def acquire(
    path: str,
    create: bool,
    map_size: int = DEFAULT_MAP_SIZE,
    readonly: bool = False,
    check: bool = False,
) -> SharedEnvironment:
    """The environment of the store at ``path``, opened (and with ``create``, made) unless
    this process has it open already; each call is matched by one :func:`release`.

    ``readonly``: opened in LMDB's read-only mode (:func:`_open_env`) unless this process
    has it open for writing already. A writable ``acquire`` of a store this process holds
    read-only reopens it for writing in place (:meth:`SharedEnvironment.reopen_writable`).
    ``check``: when this process opens the environment now, every page of the data file is
    walked first (:func:`_walk`)."""
    real = os.path.realpath(path)
    with _REGISTRY_LOCK:
        key = _file_key(real)
        shared = _REGISTRY.get(key)
        if shared is None:
            shared = _open_env(real, create and not readonly, map_size, readonly, check)
            _REGISTRY[shared.key] = shared
        elif shared.readonly and not readonly:
            shared.reopen_writable(map_size)
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
    codec.forget(shared.dbs)
    with shared.gate.write, shared.gate.exclusive():
        shared.env.close()


def _open_env(
    real: str, create: bool, map_size: int, readonly: bool, check: bool = False
) -> SharedEnvironment:
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
    else:
        _check_data_file(real, data, create)
    _allocate_lock_file(real)
    env, dbs = _open_lmdb(real, create, map_size, readonly, check)
    return SharedEnvironment(_file_key(real), real, env, dbs, readonly=readonly)


def _open_lmdb(
    real: str, create: bool, map_size: int, readonly: bool, check: bool = False
) -> tuple[lmdb.Environment, dict[str, Any]]:
    """Open the environment and its named databases; a writable open also catches the
    Merkle tree up (or migrates the format), a read-only one refuses a store that needs it
    (``store.upgrade``). ``check``: the data file's pages are walked (:func:`_walk`)
    before LMDB reads any page but the meta pages."""
    env = _lmdb_open(real, create, map_size, readonly)
    try:
        if check:
            _walk(env, real)
        if readonly:
            dbs = _open_existing(env, real)
            with _lmdb_errors(), env.begin() as txn:
                _check_format(txn, dbs, real, readonly)
        else:
            env.reader_check()  # clear reader slots of processes that died (SIGKILL)
            # the store's own transaction runner (map growth in one place) for the opening
            opener = SharedEnvironment((), real, env, {})
            dbs = opener.write(lambda txn, _: _open_dbs(env, txn, real, create))
            opener.dbs = dbs
            opener.write(_catch_up_merkle)
            if opener.read(lambda txn, dbs: format6.migrating(txn, dbs)):
                # format 5 -> 6: the copies moved in bounded transactions, resumable
                while opener.write(lambda txn, dbs: format6.step(txn, dbs)):
                    pass
    except BaseException:
        env.close()
        raise
    return env, dbs


def _lmdb_open(real: str, create: bool, map_size: int, readonly: bool) -> lmdb.Environment:
    """``lmdb.open`` with the store's settings. Read-only: LMDB's read-only mode (the data
    file opened for reading, read transactions only), with the lock file when this user can
    write it, which registers the reader so that no writer reuses the pages of its
    snapshot; without it when the lock file cannot be opened for writing (another user's
    store: LMDB's ``MDB_NOLOCK``, see ``docs/store.md``, "Readers"). On a read-only file
    system LMDB itself leaves the lock file out."""
    lock = True
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
        except lmdb.ReadonlyError as exc:  # EACCES
            if readonly and lock:
                lock = False
                continue
            what = "read" if readonly else "write"
            raise StoreError("readonly" if not readonly else "io",
                             f"cannot {what} the store at {real}: {exc}") from exc  # fmt: skip
        except lmdb.Error as exc:
            if not create and isinstance(exc, (lmdb.InvalidError, lmdb.VersionMismatchError)):
                raise StoreError("not_a_store", f"{real} is not a pithlog store: {exc}") from exc
            raise _store_error(exc) from exc


LOCK_FILE_BYTES = 16 << 10
"""The size a new ``lock.mdb`` is allocated with: LMDB's table of readers (126 by default
take 8 KiB; a larger file holds more, LMDB sizes its table from it)."""


def _allocate_lock_file(real: str) -> None:
    """Make a missing ``lock.mdb`` with its blocks allocated. LMDB makes it with
    ``ftruncate`` (a sparse file) and writes it through a shared mapping: on a full disk
    that write is a SIGBUS, where allocating first is an error (``store.disk``). Where the
    lock file exists, or cannot be made here (a folder this user cannot write, a read-only
    file system), LMDB does as it would have."""
    path = os.path.join(real, "lock.mdb")
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    except OSError:
        return
    try:
        os.posix_fallocate(fd, 0, LOCK_FILE_BYTES)
    except OSError as exc:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(path)
        if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EIO):
            raise StoreError("disk", f"no room for the lock file of {real}: "
                             f"{exc.strerror}") from exc  # fmt: skip
        return  # a file system without fallocate: LMDB makes the file
    os.close(fd)


# LMDB's meta page (lmdb.h / mdb.c, MDB_meta after the 16-byte page header, on a 64-bit
# build): magic and version (2 x uint32), address, map size, two MDB_db of 48 bytes each
# (the first's md_pad holds the page size), the last page number and the transaction id.
_META = struct.Struct("<II8xQ4x44x48xQQ")
_META_OFFSET = 16
_MDB_MAGIC = 0xBEEFC0DE
_MDB_DATA_VERSION = 1
_PAGE_SIZE_AT = _META_OFFSET + 24  # mm_dbs[0].md_pad


def _check_data_file(real: str, data: str, create: bool = False) -> None:
    """Refuse a data file shorter than its newest meta page says, before LMDB maps it:
    LMDB reads every page below the last through its memory map, and a page past the end
    of the file kills the process with SIGBUS (a truncated copy, a damaged disk). A file
    with no valid meta page is left to LMDB (``store.not_a_store``); an empty one is a store
    whose creation never reached its first commit (``store.missing``), unless this open
    may create the store: then another process may be making it right now, and LMDB's
    lock file orders the two (the first to hold it writes the meta pages)."""
    try:
        with open(data, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            head = f.read(_PAGE_SIZE_AT + 4)
            if size == 0 or (create and len(head) < _PAGE_SIZE_AT + 4):
                if create:
                    return  # being made, by this open or another process's
                raise StoreError("missing", f"no store at {real} yet: its data file is empty")
            if len(head) < _PAGE_SIZE_AT + 4:
                raise StoreError("corrupted", f"{data} is {size} bytes, shorter than one "
                                 "LMDB meta page")  # fmt: skip
            (page_size,) = struct.unpack_from("<I", head, _PAGE_SIZE_AT)
            metas = []
            for page in (0, 1):
                if page_size < 512 or page_size & (page_size - 1):
                    break
                f.seek(page * page_size + _META_OFFSET)
                raw = f.read(_META.size)
                if len(raw) < _META.size:
                    raise StoreError("corrupted", f"{data} is {size} bytes, shorter than its "
                                     f"two meta pages of {page_size} bytes")  # fmt: skip
                metas.append(_META.unpack(raw))
    except OSError as exc:
        raise StoreError("io", f"cannot read {data}: {exc.strerror or exc}") from exc
    valid = [m for m in metas if m[0] == _MDB_MAGIC and m[1] == _MDB_DATA_VERSION]
    if not valid:
        return  # not LMDB's (or another build's): LMDB says so
    last_page = max(valid, key=lambda m: m[4])[3]  # LMDB uses the meta of the newest txn
    needed = (last_page + 1) * page_size
    if size < needed:
        raise StoreError("corrupted", f"{data} is {size} bytes but its meta page names page "
                         f"{last_page} ({needed} bytes): the file is truncated; restore it "
                         "from a backup")  # fmt: skip


def _walk(env: lmdb.Environment, real: str) -> None:
    """Walk every page of the data file in Python (py-lmdb's offline verifier,
    :func:`lmdb.verify.verify`, which never hands the file to LMDB) and refuse it
    (``store.corrupted``) when any invariant LMDB relies on fails: a damaged page read
    through LMDB's memory map can kill the process (SIGBUS, SIGSEGV) where this walk only
    reports it. A read transaction is held meanwhile, so that a writer in another process
    reuses none of the pages the walk reads (LMDB keeps every page of a snapshot that a
    registered reader may see); LMDB reads only the meta pages to start it."""
    with env.begin():
        try:
            problems: list[str] = lmdb.verify.verify(real, subdir=True)  # type: ignore[no-untyped-call]
        except lmdb.verify.VerifyError as exc:
            raise StoreError("not_a_store", f"{real}: {exc}") from exc
        except OSError as exc:
            raise StoreError("io", f"cannot read {real}: {exc.strerror or exc}") from exc
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise StoreError("corrupted", f"the data file of {real} is damaged: {problems[0]}"
                         f"{more}")  # fmt: skip


def _open_dbs(env: lmdb.Environment, txn: Txn, real: str, create: bool) -> dict[str, Any]:
    """The store's named databases, opened (and for a new store, its meta written) in the
    write transaction ``txn``; a folder that holds no store, or another format, is refused."""
    ltxn = cast("lmdb.Transaction[bytes]", txn)  # what SharedEnvironment.write began
    if not create:
        try:
            env.open_db(b"meta", txn=ltxn, create=False)
        except lmdb.NotFoundError:
            _no_meta(txn, real)
    dbs = {name: env.open_db(name.encode("ascii"), txn=ltxn) for name in DB_NAMES}
    _check_format(txn, dbs, real, False)
    for name in LEGACY_DBS:
        try:
            legacy = env.open_db(name, txn=ltxn, create=False)
        except lmdb.NotFoundError:
            continue
        ltxn.drop(legacy, delete=True)
    return dbs


LEGACY_DBS = (b"copy_seq",)
"""Databases of older formats that format 6 does without, deleted by a writable open:
``copy_seq`` (event_id + copy hash -> seq) is what the pointers of ``events`` and
``evidence`` now hold."""


def _no_meta(txn: Txn, real: str) -> None:
    if not txn.stat()["entries"]:
        # data.mdb exists but nothing was ever committed to it: a first append killed
        # before its commit. No store yet, rather than a foreign one.
        raise StoreError("missing", f"no store at {real} yet: its creation was "
                         "interrupted before the first commit") from None  # fmt: skip
    raise StoreError("not_a_store", f"{real} holds no pithlog store") from None


def _open_existing(env: lmdb.Environment, real: str) -> dict[str, Any]:
    """The named databases of a store opened read-only. Each is opened in a transaction of
    py-lmdb's own (a handle opened in a read transaction of ours would be closed when the
    transaction goes back to py-lmdb's spare list). A store made by a pithlog that lacked
    one of them needs a writable open first, which creates it."""
    dbs = {}
    with _lmdb_errors():
        for name in DB_NAMES:
            try:
                dbs[name] = env.open_db(name.encode("ascii"), create=False)
            except lmdb.NotFoundError:
                if name == "meta":
                    with env.begin() as txn:
                        _no_meta(txn, real)
                raise StoreError("upgrade", f"the store at {real} has no {name!r} database "
                                 "yet") from None  # fmt: skip
    return dbs


def _check_format(txn: Txn, dbs: dict[str, Any], real: str, readonly: bool) -> None:
    """The store's format and merge version; a new store (a writable open) gets them."""
    meta = dbs["meta"]
    fmt = txn.get(META_FORMAT, db=meta)
    if fmt is None:
        if txn.stat(dbs["events"])["entries"] or txn.stat(dbs["seq"])["entries"]:
            raise StoreError("not_a_store", f"{real} has events but no meta format")
        if readonly:
            raise StoreError("upgrade", f"the store at {real} was never initialized")
        txn.put(META_FORMAT, FORMAT_VERSION, db=meta)
        txn.put(META_MERGE, MERGE_VERSION.encode("ascii"), db=meta)
        txn.put(META_NEXT_SEQ, SEQ.pack(1), db=meta)
    elif fmt not in (FORMAT_VERSION, *MIGRATES_FROM):  # the older: _migrate
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
    if readonly and _needs_catch_up(txn, dbs):
        what = (f"is of format {fmt.decode()}, to be migrated" if fmt in MIGRATES_FROM
                else "has a Merkle tree behind its log, to be caught up")  # fmt: skip
        raise StoreError("upgrade", f"the store at {real} {what}; a read-only open does not "
                         "write it")  # fmt: skip


def _needs_catch_up(txn: Txn, dbs: dict[str, Any]) -> bool:
    """What a writable open would write: a store of an older format, or one whose move to
    format 6 is under way (:mod:`pithlog.store.format6`), or a tree behind seq."""
    if txn.get(META_FORMAT, db=dbs["meta"]) in MIGRATES_FROM or format6.migrating(txn, dbs):
        return True
    size = tree.merkle_size(txn, dbs)
    return (txn.get(META_MERKLE_SIZE, db=dbs["meta"]) is None
            or txn.get(SEQ.pack(size + 1), db=dbs["seq"]) is not None)  # fmt: skip


def _catch_up_merkle(txn: Txn, dbs: dict[str, Any]) -> None:
    """On open: build the tree of a store that lacks it (or was appended to by a pithlog
    without it), or migrate a store of the format before (:func:`_migrate`). Nothing to do
    for a current one."""
    if _migrate(txn, dbs) or format6.migrating(txn, dbs) or not _needs_catch_up(txn, dbs):
        return  # a move to format 6 under way rebuilds the tree in steps of its own
    tree.merkle_sync(txn, dbs)


def _migrate(txn: Txn, dbs: dict[str, Any]) -> bool:
    """Bring a store of a format in :data:`MIGRATES_FROM` to :data:`FORMAT_VERSION`, one step
    after the other, in ``txn`` (the caller's write transaction, retried whole on a full map):
    2 -> 3 (leaves of 64 bytes and ``by_copy``); 3 -> 4 (the dictionary); 4 -> 5 (``by_key``,
    verdicts per key entry); then 5 -> 6 is started (:func:`pithlog.store.format6.start`:
    format 6 recorded with a cursor from which :func:`pithlog.store.format6.step` moves the
    copies to ``copies`` and rewrites ``slots`` in transactions of their own, packing copies
    still stored raw, and finally builds the alias index). ``True`` when it did."""
    fmt = txn.get(META_FORMAT, db=dbs["meta"])
    if fmt not in MIGRATES_FROM:
        return False
    if fmt == FORMAT_2:
        fmt = tree.migrate_leaf_data(txn, dbs)  # records FORMAT_3
    if fmt == FORMAT_3:
        codec.start_migration(txn, dbs)
        fmt = FORMAT_4
    if fmt == FORMAT_4:
        keyindex.migrate_3_to_5(txn, dbs)  # records FORMAT_5
    format6.start(txn, dbs)  # records FORMAT_VERSION
    return True


# --- a throwaway environment --------------------------------------------------------------


SCRATCH_BYTES_PER_ENTRY = 256
"""Room reserved in replay's scratch index per ``seq`` entry: a key of 64 bytes and a value
of 8 take about 120 bytes of B-tree leaf in random order; twice that, and a MiB besides."""


@contextlib.contextmanager
def scratch_index(entries: int) -> Iterator[ScratchIndex]:
    """The temporary on-disk index of replay's structure pass
    (:data:`pithlog.store.replay_structure.ScratchFactory`): a write transaction on a throwaway
    environment in ``$TMPDIR``, for ``entries`` keys or so.

    One write transaction holds every seq entry; ``writemap`` puts its dirty pages in the
    file's mapping instead of the heap, so memory does not grow with the log (without it,
    a replay of 1M events held 135 MiB of them). A write into a mapping of a sparse file on
    a full disk kills the process with SIGBUS, so the whole file is allocated first
    (``posix_fallocate``): no room is ``store.disk`` before any work. The files are unlinked
    as soon as LMDB holds them open, so no exit (an error, an interrupt, a kill) leaves them
    behind."""
    map_size = entries * SCRATCH_BYTES_PER_ENTRY + (1 << 20)
    tmp = tempfile.mkdtemp(prefix="pithlog-replay-")
    try:
        try:
            index_env = lmdb.open(tmp, map_size=map_size, sync=False, metasync=False,
                                  lock=False, subdir=True, writemap=True)  # fmt: skip
        except lmdb.Error as exc:
            raise _store_error(exc) from exc
        try:
            _allocate(os.path.join(tmp, "data.mdb"), map_size)
        except BaseException:
            index_env.close()
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    try:
        with _lmdb_errors(), index_env.begin(write=True) as itx:
            yield itx
    finally:
        index_env.close()


def _allocate(path: str, size: int) -> None:
    """Give every byte of the file at ``path`` up to ``size`` its blocks on disk."""
    try:
        fd = os.open(path, os.O_RDWR)
        try:
            os.posix_fallocate(fd, 0, size)
        finally:
            os.close(fd)
    except OSError as exc:
        where = os.path.dirname(os.path.dirname(path))
        if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EFBIG):
            raise StoreError("disk", f"no room for replay's scratch index ({size} bytes) in "
                             f"{where}: free space there or set TMPDIR to a larger "
                             f"disk ({exc.strerror})") from exc  # fmt: skip
        raise StoreError("io", f"cannot allocate replay's scratch index in {where}: "
                         f"{exc.strerror or exc}") from exc  # fmt: skip
