"""The durable log: an LMDB environment holding events, their evidence, indexes and the
cached state of every pith (``docs/store.md`` describes the layout byte for byte).

This is the only module that imports :mod:`lmdb`: it opens the environment and the
transactions, and the modules beside it do their work on those transactions without
importing :mod:`lmdb` (:mod:`pithlog.store.layout`: the layout and its codecs;
:mod:`pithlog.store.stateindex`: the per-pith reduction index; :mod:`pithlog.store.append`: what an
append and a rebuild write; :mod:`pithlog.store.replay`: replay; :mod:`pithlog.store.tree`: the
Merkle tree's storage).

- :meth:`Store.append` takes a batch (raw lines or envelopes), applies the door, checks 1-12
  and the step 0 preference of spec section 7, and commits it as ONE durable write
  transaction together with the re-reduced state of every pith it touched. Nothing is
  reported before the commit.
- :meth:`Store.replay` reads the whole log back through the same pure path (door, checks,
  reduce, render) and reports every place where what is stored disagrees with what the
  log implies.
- :meth:`Store.rebuild` re-judges the log under another keyring (``replay --rebuild``).

LMDB allows one ``Environment`` per file per process, so environments are shared through
a process-wide registry, reference-counted; several :class:`Store` objects (and threads)
may use one store, and several processes may use it at once (LMDB's writer lock).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import gc
import itertools
import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Generator, Iterable, Iterator, Sized
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar

import lmdb
import msgspec

from pithlog.errors import DoorError, HelperLost, StoreError, register
from pithlog.parallel import (
    Pool,
    in_order,
    in_threads,
    leave_interrupts_to_parent,
    threads_per_process,
    verifying_pool,
    worker_pool,
)
from pithlog.protocol.checks import CheckBatch, start_checks
from pithlog.protocol.events import Envelope, is_event_id, parse_envelope
from pithlog.protocol.keys import Keyring, make_keyring
from pithlog.protocol.records import is_pith_number
from pithlog.protocol.reduce import MERGE_VERSION
from pithlog.store import tree
from pithlog.store.append import DUPLICATE as DUPLICATE
from pithlog.store.append import EVIDENCE as EVIDENCE
from pithlog.store.append import REFUSED as REFUSED
from pithlog.store.append import REJECTED as REJECTED
from pithlog.store.append import REPLACED as REPLACED
from pithlog.store.append import STORED as STORED
from pithlog.store.append import AppendResult as AppendResult
from pithlog.store.append import StartedBatch, append_work, rebuild_work
from pithlog.store.layout import (
    DB_NAMES,
    FORMAT_VERSION,
    META_FORMAT,
    META_KEYRING,
    META_MERGE,
    META_MERKLE_SIZE,
    META_NEXT_SEQ,
    SEQ,
    copy_at,
    copy_hash,
    eid_bytes,
    eid_str,
    evidence_of,
)
from pithlog.store.replay import Discrepancy as Discrepancy
from pithlog.store.replay import (
    PithOutcome,
    ReplayContext,
    Started,
    check_structure,
    finish_chunk,
    make_chunks,
    replay_chunk,
    replay_work,
    start_chunk,
)
from pithlog.store.replay import Progress as Progress
from pithlog.store.replay import ReplayReport as ReplayReport
from pithlog.store.stateindex import INDEX_DAMAGE, assemble_state

register(
    {
        "store.missing": "no pithlog store there: check --store, or append to create one",
        "store.not_a_store": "the folder is not a pithlog store (or a newer format): check --store",
        "store.format": "the store was written by another store format version of pithlog",
        "store.keyring_changed": "the store's states were reduced under another keyring: "
        "run `pithlog replay --rebuild --keyring KEYRING` once, then append",
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

if TYPE_CHECKING:
    _Txn: TypeAlias = lmdb.Transaction[bytes]


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


# --- the process-wide registry of environments --------------------------------------------


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
class _Shared:
    """One open LMDB environment, shared by every :class:`Store` on it in this process."""

    key: tuple[Any, ...]
    path: str
    env: lmdb.Environment
    dbs: dict[str, Any]
    refs: int = 0
    gate: _Gate = field(default_factory=_Gate)
    pid: int = field(default_factory=os.getpid)


_REGISTRY: dict[tuple[Any, ...], _Shared] = {}
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


def _acquire(path: str, create: bool, map_size: int) -> _Shared:
    real = os.path.realpath(path)
    with _REGISTRY_LOCK:
        key = _file_key(real)
        shared = _REGISTRY.get(key)
        if shared is None:
            shared = _open_env(real, create, map_size)
            _REGISTRY[shared.key] = shared
        shared.refs += 1
        return shared


def _release(shared: _Shared) -> None:
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


def _open_env(real: str, create: bool, map_size: int) -> _Shared:
    data = os.path.join(real, "data.mdb")
    if not os.path.exists(data):
        if not create:
            raise StoreError("missing", f"no store at {real} (no data.mdb)")
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
    try:
        env.reader_check()  # clear reader slots of processes that died (SIGKILL)
        while True:
            try:
                dbs = _open_dbs(env, real, create)
                break
            except StoreError as exc:
                if not isinstance(exc.__cause__, lmdb.MapResizedError):
                    raise
                env.set_mapsize(0)  # another process grew the map: adopt its size
        _catch_up_merkle(env, dbs)
    except BaseException:
        env.close()
        raise
    return _Shared(_file_key(real), real, env, dbs)


def _open_dbs(env: lmdb.Environment, real: str, create: bool) -> dict[str, Any]:
    with _lmdb_errors(), env.begin(write=True) as txn:
        if not create:
            try:
                env.open_db(b"meta", txn=txn, create=False)
            except lmdb.NotFoundError:
                raise StoreError("not_a_store", f"{real} holds no pithlog store") from None
        dbs = {name: env.open_db(name.encode("ascii"), txn=txn) for name in DB_NAMES}
        meta = dbs["meta"]
        fmt = txn.get(META_FORMAT, db=meta)
        if fmt is None:
            if txn.stat(dbs["events"])["entries"] or txn.stat(dbs["seq"])["entries"]:
                raise StoreError("not_a_store", f"{real} has events but no meta format")
            txn.put(META_FORMAT, FORMAT_VERSION, db=meta)
            txn.put(META_MERGE, MERGE_VERSION.encode("ascii"), db=meta)
            txn.put(META_NEXT_SEQ, SEQ.pack(1), db=meta)
        elif fmt != FORMAT_VERSION:
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


def _catch_up_merkle(env: lmdb.Environment, dbs: dict[str, Any]) -> None:
    """On open: build the tree of a store that lacks it (or was appended to by a pithlog
    without it), growing the map when it does not fit. Nothing to do for a current one."""
    while True:
        try:
            with _lmdb_errors(), env.begin(write=True) as txn:
                size = tree.merkle_size(txn, dbs)
                if (txn.get(META_MERKLE_SIZE, db=dbs["meta"]) is not None
                        and txn.get(SEQ.pack(size + 1), db=dbs["seq"]) is None):  # fmt: skip
                    return
                tree.merkle_sync(txn, dbs)
                return
        except StoreError as exc:
            cause = exc.__cause__
            if isinstance(cause, lmdb.MapFullError):
                size_now = env.info()["map_size"]
                if size_now >= MAX_MAP_SIZE:
                    raise
                env.set_mapsize(min(size_now * 2, MAX_MAP_SIZE))
            elif isinstance(cause, lmdb.MapResizedError):
                env.set_mapsize(0)
            else:
                raise


class Abandoned(Exception):
    """A batch of :meth:`Store.append_batches` whose consumer stopped before its commit:
    its transaction is aborted. Internal; it never leaves the pipeline."""


# --- the store ----------------------------------------------------------------------------


class Store:
    """A pithlog store: one LMDB environment directory. Use as a context manager."""

    def __init__(self, shared: _Shared, readonly: bool) -> None:
        self._shared: _Shared | None = shared
        self.readonly = readonly
        self.path = shared.path

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        create: bool = True,
        readonly: bool = False,
        map_size: int = DEFAULT_MAP_SIZE,
    ) -> Store:
        """Open (and with ``create``, make) the store at ``path``.

        Opening one store twice in a process is safe: both share one environment.
        ``readonly`` refuses writes through this object.
        """
        return cls(_acquire(os.fspath(path), create and not readonly, map_size), readonly)

    def close(self) -> None:
        shared, self._shared = self._shared, None
        if shared is not None:
            _release(shared)

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()

    # --- transactions ---------------------------------------------------------------------

    @property
    def _env(self) -> _Shared:
        if self._shared is None:
            raise StoreError("closed", "the store is closed")
        return self._shared

    def _grow(self, shared: _Shared) -> None:
        size = shared.env.info()["map_size"]
        if size >= MAX_MAP_SIZE:
            raise StoreError("disk", f"the map is already {size} bytes; refusing to grow it")
        with shared.gate.exclusive():
            shared.env.set_mapsize(min(size * 2, MAX_MAP_SIZE))

    def _adopt_size(self, shared: _Shared) -> None:
        """Another process grew the map: adopt its size (LMDB: set_mapsize(0))."""
        with shared.gate.exclusive():
            shared.env.set_mapsize(0)

    def _write(self, work: Callable[[_Txn, dict[str, Any]], T]) -> T:
        """Run ``work`` in one write transaction and commit it durably. On a full map the
        transaction is aborted, the map doubled, and ``work`` run again from the start."""
        if self.readonly:
            raise StoreError("readonly", "this store was opened read-only")
        shared = self._env
        with _lmdb_errors(), shared.gate.write:
            while True:
                with shared.gate.shared():
                    try:
                        txn = shared.env.begin(write=True)
                    except lmdb.MapResizedError:
                        resized = True
                    else:
                        resized = False
                        try:
                            result = work(txn, shared.dbs)
                            txn.commit()
                            return result
                        except lmdb.MapFullError:
                            with contextlib.suppress(lmdb.Error):
                                txn.abort()
                        except BaseException:
                            with contextlib.suppress(lmdb.Error):
                                txn.abort()
                            raise
                if resized:
                    self._adopt_size(shared)
                else:
                    self._grow(shared)

    def _read(self, work: Callable[[_Txn, dict[str, Any]], T]) -> T:
        shared = self._env
        with _lmdb_errors():
            while True:
                with shared.gate.shared():
                    try:
                        txn = shared.env.begin()
                    except lmdb.MapResizedError:
                        pass
                    else:
                        try:
                            return work(txn, shared.dbs)
                        finally:
                            txn.abort()
                self._adopt_size(shared)

    # --- reading --------------------------------------------------------------------------

    def state(self, pith_number: str) -> bytes | None:
        """The cached state document of a pith (exactly what ``pithlog reduce`` prints for
        it, without the newline), or ``None`` when it has none (unknown or pending)."""
        if not is_pith_number(pith_number):
            return None

        def work(txn: _Txn, dbs: dict[str, Any]) -> bytes | None:
            try:
                return assemble_state(txn, dbs, pith_number)
            except INDEX_DAMAGE as exc:
                raise StoreError("corrupted", f"the index of {pith_number} is damaged ({exc}); "
                                 "run `pithlog replay --verify`") from exc  # fmt: skip

        return self._read(work)

    def event(self, event_id: str) -> bytes | None:
        """The preferred copy stored under ``event_id`` (JCS bytes), or ``None``."""
        if not is_event_id(event_id):
            return None
        key = eid_bytes(event_id)
        return self._read(lambda txn, dbs: txn.get(key, db=dbs["events"]))

    def evidence(self, event_id: str) -> list[bytes]:
        """The other copies kept under ``event_id`` (evidence), in copy-hash order."""
        if not is_event_id(event_id):
            return []
        key = eid_bytes(event_id)
        return self._read(lambda txn, dbs: [v for _, v in evidence_of(txn, dbs, key)])

    def status(self, pith_number: str) -> dict[str, Any] | None:
        """The ``piths`` entry of a pith: status, event counts (``None`` when unknown)."""
        if not is_pith_number(pith_number):
            return None
        key = pith_number.encode("ascii")
        raw = self._read(lambda txn, dbs: txn.get(key, db=dbs["piths"]))
        if raw is None:
            return None
        value: dict[str, Any] = msgspec.json.decode(raw)
        return {"pith_number": pith_number, **value}

    def piths(self) -> list[dict[str, Any]]:
        """Every pith with its status, sorted by pith_number."""

        def work(txn: _Txn, dbs: dict[str, Any]) -> list[dict[str, Any]]:
            out = []
            for key, raw in txn.cursor(db=dbs["piths"]):
                out.append({"pith_number": key.decode("ascii"), **msgspec.json.decode(raw)})
            return out

        return self._read(work)

    def pending(self) -> list[dict[str, Any]]:
        """Piths whose events hold no valid record_created yet (spec 7 step 2)."""
        return [p for p in self.piths() if p["status"] == "pending"]

    def keyring_digest(self) -> str | None:
        """Digest of the keyring the cached states were reduced under (``None``: empty)."""
        raw = self._read(lambda txn, dbs: txn.get(META_KEYRING, db=dbs["meta"]))
        return None if raw is None else raw.hex()

    def export(self, after: int = 0, chunk: int = 1000) -> Iterator[tuple[int, bytes]]:
        """Every distinct stored envelope (preferred copies and evidence) in append order,
        as ``(seq, JCS bytes)``, starting after sequence number ``after``. Each chunk is read
        in its own short transaction, so an export does not pin old pages for long."""
        position = max(after, 0) + 1
        while True:

            def work(
                txn: _Txn, dbs: dict[str, Any], start: int = position
            ) -> list[tuple[int, bytes]]:
                out: list[tuple[int, bytes]] = []
                cursor = txn.cursor(db=dbs["seq"])
                if not cursor.set_range(SEQ.pack(start)):
                    return out
                for key, value in cursor:
                    data = copy_at(txn, dbs, value)
                    if data is None:
                        raise StoreError(
                            "corrupted",
                            f"seq {SEQ.unpack(key)[0]} names a copy that is not stored "
                            f"({eid_str(value[:32])}); run `pithlog replay --verify`",
                        )
                    out.append((SEQ.unpack(key)[0], data))
                    if len(out) >= chunk:
                        break
                return out

            rows = self._read(work)
            yield from rows
            if len(rows) < chunk:
                return
            position = rows[-1][0] + 1

    def stats(self) -> dict[str, Any]:
        """Counts, sizes and map use, as a JSON object."""
        shared = self._env

        def work(txn: _Txn, dbs: dict[str, Any]) -> dict[str, Any]:
            counts = {name: txn.stat(dbs[name])["entries"] for name in DB_NAMES}
            states = pending = 0
            for _, raw in txn.cursor(db=dbs["piths"]):
                if msgspec.json.decode(raw)["status"] == "state":
                    states += 1
                else:
                    pending += 1
            kd = txn.get(META_KEYRING, db=dbs["meta"])
            next_seq = txn.get(META_NEXT_SEQ, db=dbs["meta"])
            return {
                "counts": counts,
                "piths_with_state": states,
                "piths_pending": pending,
                "keyring_digest": None if kd is None else kd.hex(),
                "next_seq": None if next_seq is None else SEQ.unpack(next_seq)[0],
            }

        out = self._read(work)
        info = shared.env.info()
        stat = shared.env.stat()
        used = (info["last_pgno"] + 1) * stat["psize"]
        data_file = Path(shared.path) / "data.mdb"
        out.update(
            {
                "path": shared.path,
                "format": FORMAT_VERSION.decode(),
                "merge_version": MERGE_VERSION,
                "page_size": stat["psize"],
                "map_size": info["map_size"],
                "map_used": used,
                "map_use": round(used / info["map_size"], 4),
                "file_size": data_file.stat().st_size if data_file.exists() else 0,
            }
        )
        return out

    # --- appending ------------------------------------------------------------------------

    def append(
        self,
        batch: Iterable[bytes | bytearray | memoryview | Envelope],
        keyring: Keyring,
        keep_invalid: bool = False,
    ) -> list[AppendResult]:
        """Append a batch as ONE durable transaction; one :class:`AppendResult` per item.

        Raw bytes go through the door (refused ones are reported, never stored). A copy
        that fails checks 1-12 is ``rejected`` (not stored) unless ``keep_invalid``, which
        stores it so that it enters the reduction as an invalid event. A second, different
        copy of a stored event_id is resolved by :func:`pithlog.protocol.reduce.prefer`. Every pith
        whose events changed is re-reduced in the same transaction. Results are returned
        only after the commit is durable.
        """
        return self._finish_append(self._start_append(batch, keyring), keyring, keep_invalid)

    def append_batches(
        self,
        batches: Iterable[Iterable[bytes | bytearray | memoryview | Envelope]],
        keyring: Keyring,
        keep_invalid: bool = False,
    ) -> Generator[list[AppendResult], None, None]:
        """:meth:`append` of each batch in turn, as a pipeline: each batch is still ONE
        durable transaction, and its results are yielded after its commit. Meanwhile the
        next batch goes through the door and checks 1-12, its signatures verified in
        helper processes (on a machine with more than one core: from the second batch on
        for batches of :data:`PIPELINE_MIN` or more, from the first for a first batch, a
        list, of :data:`ALONE_POOL_MIN` or more), and the transactions are written and
        committed in a thread of their own, so that a commit's wait for the disk overlaps
        the door's work on the batch after it.

        Nothing of a batch is written before the batches ahead of it are committed, and a
        batch whose transaction fails stops the pipeline before the next one is written.
        When the input (or starting a batch) fails, the batch being written is finished
        and its results yielded before the error is raised; when the consumer stops
        between batches, the batch being written is abandoned before its commit if it has
        not reached it (a batch whose results were not yielded is committed only when its
        commit had already begun)."""
        cores = os.cpu_count() or 1
        with contextlib.ExitStack() as stack:
            executor: Pool | None = None
            writer: ThreadPoolExecutor | None = None
            abandon = threading.Event()
            previous: StartedBatch | None = None
            writing: Future[list[AppendResult]] | None = None
            try:
                for number, batch in enumerate(batches):
                    if number == 0 and cores > 1 and _at_least(batch, ALONE_POOL_MIN):
                        # a large first batch has nothing to overlap with: its
                        # signatures need the helpers as much
                        executor = verifying_pool(stack)
                    if number == 1:
                        large = previous is not None and len(previous.items) >= PIPELINE_MIN
                        if cores > 1 and large and executor is None:
                            executor = verifying_pool(stack)
                        # after the helper pool, so that it is shut down (waited for) first
                        writer = stack.enter_context(
                            ThreadPoolExecutor(1, thread_name_prefix="pithlog-append")
                        )
                    started = self._start_append(batch, keyring, executor)
                    if previous is not None:
                        assert writer is not None
                        # ``writing`` is cleared only once its results are in hand, so that an
                        # interrupt while waiting for them still hands them out (below)
                        committed = writing.result() if writing is not None else None
                        writing = writer.submit(
                            self._finish_append, previous, keyring, keep_invalid, abandon
                        )
                        if committed is not None:
                            yield committed
                    previous = started
                if writing is not None:
                    committed = writing.result()
                    writing = None
                    yield committed
                if previous is not None:
                    last, previous = previous, None
                    yield self._finish_append(last, keyring, keep_invalid)
            except GeneratorExit:
                abandon.set()
                raise
            except BaseException:
                if writing is not None:
                    # the input failed (or an interrupt came) while a batch was being written:
                    # finish it and hand out its results, then raise; when that batch's own
                    # transaction failed, its error is the one raised
                    try:
                        finished = writing.result()
                    except BaseException:
                        finished = None
                    if finished is not None:
                        yield finished
                raise

    def _start_append(
        self,
        batch: Iterable[bytes | bytearray | memoryview | Envelope],
        keyring: Keyring,
        executor: Pool | None = None,
    ) -> StartedBatch:
        """A batch through the door, and checks 1-12 started on its copies that the store
        does not hold yet (a copy already stored is a duplicate, not judged again)."""
        items: list[Envelope | DoorError] = []
        hashes: list[bytes | None] = []  # each copy hashed once, for the write as well
        seen: set[bytes] = set()
        fresh: list[bytes] = []
        started: list[CheckBatch] = []
        # With helpers, part by part: the first signatures reach them while the rest of
        # the batch is still going through the door (threads take the batch whole).
        size = START_PART if executor is not None else None
        for part in _parts(batch, size):
            envelopes: dict[bytes, Envelope] = {}  # the part's copies new to the batch
            for item in part:
                if isinstance(item, Envelope):
                    env = item
                else:
                    try:
                        env = parse_envelope(bytes(item))
                    except DoorError as exc:
                        items.append(exc)
                        hashes.append(None)
                        continue
                h = copy_hash(env.encoded)
                items.append(env)
                hashes.append(h)
                if h not in seen:
                    seen.add(h)
                    envelopes[h] = env
            if not envelopes:
                continue
            new = self._read(functools.partial(_unseen, envelopes))
            fresh += new
            started.append(
                start_checks([envelopes[h] for h in new], keyring,
                             executor.verify if executor is not None else in_threads())
            )
        return StartedBatch(items, hashes, fresh, CheckBatch.joined(started))

    def _finish_append(
        self,
        started: StartedBatch,
        keyring: Keyring,
        keep_invalid: bool,
        abandon: threading.Event | None = None,
    ) -> list[AppendResult]:
        """The write transaction of a started batch, once its verdicts are in; with
        ``abandon`` set before the commit, the transaction is aborted (:class:`Abandoned`)."""
        work = append_work(started, keyring, keep_invalid)
        if abandon is None:
            return self._write(work)

        def guarded(txn: _Txn, dbs: dict[str, Any]) -> list[AppendResult]:
            results = work(txn, dbs)
            if abandon.is_set():
                raise Abandoned("the consumer stopped before this batch was committed")
            return results

        return self._write(guarded)

    # --- replay ---------------------------------------------------------------------------

    def replay(
        self,
        keyring: Keyring,
        verify: bool = True,
        jobs: int = 1,
        progress: Progress | None = None,
    ) -> ReplayReport:
        """Read the whole log back and report every disagreement (:class:`ReplayReport`).

        Structure first (meta; ``seq`` against the stored copies; ``events``, ``evidence``,
        ``by_pith``, ``piths``, ``states`` against each other), then pith by pith: every
        copy through the door, its event_id and checks 1-12 recomputed (``verify``: for
        real, signatures included; otherwise from the cached verdicts), the preferred copy
        against :func:`prefer`, the pith re-reduced and compared byte for byte with its
        cached state. Under a keyring other than the store's, preference and cached
        verdicts are not compared (they belong to the store's keyring), so what is
        reported beyond structure is exactly the piths whose state would change.

        ``jobs`` > 1 splits the piths across that many processes (each opens the store
        read-only); the report is the same as with ``jobs=1``.
        """
        report = ReplayReport(keyring.digest, self.keyring_digest())
        ctx = ReplayContext(keyring, report.same_keyring, verify, report.stored_keyring_digest)

        piths, foreign = self._read(replay_work)
        chunks = make_chunks(piths, foreign, jobs)
        found: list[Discrepancy] = []  # pith by pith, in pith order

        with contextlib.ExitStack() as stack:
            if jobs > 1:
                # The workers start on the piths while this process checks the structure,
                # so the structure pass is not a serial prefix of the whole replay.
                outcomes = self._replay_pool(stack, chunks, ctx, jobs)
                structure = self._structure(stack, piths, apart=False)
            else:
                structure = self._structure(stack, piths, apart=True)
                outcomes = self._replay_here(stack, chunks, ctx)
            total = len(piths)
            done = 0
            if progress is not None:
                progress(0, total)
            for outcome in outcomes:
                for _pith, pith_found, events, copies in outcome:
                    found.extend(d for d in pith_found if d.kind != "note")
                    report.notes.extend(d for d in pith_found if d.kind == "note")
                    report.events += events
                    report.copies += copies
                    report.piths += 1
                done += len(outcome)
                if progress is not None:
                    progress(done, total)
            try:
                structural = structure.result()
            except BrokenProcessPool:
                HelperLost.warn()
                structural = _structure_here(self, piths)
            report.discrepancies = structural + found
        return report

    def _structure(
        self, stack: contextlib.ExitStack, piths: list[str], apart: bool
    ) -> Future[list[Discrepancy]]:
        """Replay's structure pass. With ``apart``, on a machine with another core and a log
        of at least :data:`STRUCTURE_PROCESS_MIN_COPIES` copies, it is started in a process
        of its own (which reads the store in its own read transaction, as each chunk of
        piths does in its own); otherwise it runs here, now, and the future is done."""
        if apart and (os.cpu_count() or 1) > 1:
            copies = self._read(lambda txn, dbs: txn.stat(dbs["seq"])["entries"])
            if copies >= STRUCTURE_PROCESS_MIN_COPIES:
                pool = worker_pool(stack, 1, leave_interrupts_to_parent, ())
                return pool.submit(_structure_at, self.path, piths)
        done: Future[list[Discrepancy]] = Future()
        done.set_result(_structure_here(self, piths))
        return done

    def _replay_here(
        self,
        stack: contextlib.ExitStack,
        chunks: list[list[tuple[str, list[bytes]]]],
        ctx: ReplayContext,
    ) -> Iterator[list[PithOutcome]]:
        """``jobs=1``: the chunks in this process, as a pipeline. When signatures are to be
        verified and the machine has another core, they are verified in helper processes
        (one per other core) while this process reads the next chunk and puts it through
        the door and checks, and judges the chunk before; threads could not overlap that
        Python work (a verifying thread waits for the GIL after each signature)."""
        cores = os.cpu_count() or 1
        large = sum(len(chunk) for chunk in chunks) >= VERIFY_PROCESS_MIN_PITHS
        if (ctx.verify or not ctx.same_keyring) and cores > 1 and len(chunks) > 1 and large:
            ctx = dataclasses.replace(ctx, verifier=verifying_pool(stack).verify)
        previous: Started | None = None
        for chunk in chunks:
            started = self._read(functools.partial(start_chunk, chunk=chunk, ctx=ctx))
            if previous is not None:
                yield self._read(functools.partial(finish_chunk, started=previous, ctx=ctx))
            previous = started
        if previous is not None:
            yield self._read(functools.partial(finish_chunk, started=previous, ctx=ctx))

    def _replay_pool(
        self,
        stack: contextlib.ExitStack,
        chunks: list[list[tuple[str, list[bytes]]]],
        ctx: ReplayContext,
        jobs: int,
    ) -> Iterator[list[PithOutcome]]:
        """Hand ``chunks`` to worker processes now; their outcomes, in order."""
        if len(chunks) <= 1:
            return iter([_run_chunk(self, chunk, ctx) for chunk in chunks])
        entries = [key.entry() for key in ctx.keyring.values()]
        pool = worker_pool(stack, min(jobs, len(chunks)), _worker_init,
                           (self.path, entries, ctx.same_keyring, ctx.verify, ctx.stored_kd,
                            threads_per_process(jobs)))  # fmt: skip
        return in_order(pool, _worker_run, functools.partial(_run_chunk, self, ctx=ctx), chunks)

    # --- rebuild under another keyring ----------------------------------------------------

    def rebuild(self, keyring: Keyring, progress: Progress | None = None) -> dict[str, int]:
        """Re-judge every stored copy under ``keyring`` (signatures verified), re-pick the
        preferred copy of every event_id, re-reduce every pith and record the keyring: one
        write transaction, so readers see the old store or the new one, never a mixture.
        Returns counts: copies judged, preferred copies changed, piths reduced."""
        return self._write(rebuild_work(keyring, progress))

    # --- transparency: the Merkle tree over the append sequence ---------------------------

    def tree_size(self) -> int:
        """Leaves of the Merkle tree: one per ``seq`` entry (every distinct stored copy)."""
        return self._read(lambda txn, dbs: tree.merkle_size(txn, dbs))

    def tree_root(self, size: int | None = None) -> tuple[int, bytes]:
        """``(size, MTH(D[size]))`` of the log's first ``size`` leaves (default: all), from
        O(log n) stored subtree hashes."""
        return self._read(lambda txn, dbs: tree.tree_root(txn, dbs, size))

    def leaves_of(self, event_id: str) -> list[tuple[int, bytes]]:
        """``(leaf index, copy hash)`` of every stored copy of ``event_id`` (leaf index =
        seq - 1), in append order. Two copies of one event_id are two leaves with the same
        leaf hash."""
        if not is_event_id(event_id):
            return []
        eid = eid_bytes(event_id)
        return self._read(lambda txn, dbs: tree.leaves_of(txn, dbs, eid))

    def inclusion_path(self, index: int, size: int | None = None) -> tuple[int, list[bytes]]:
        """``(size, PATH(index, D[size]))`` (RFC 9162 2.1.3.1)."""
        return self._read(lambda txn, dbs: tree.inclusion_path(txn, dbs, index, size))

    def consistency_path(self, old: int, new: int | None = None) -> tuple[int, list[bytes]]:
        """``(new, PROOF(old, D[new]))`` (RFC 9162 2.1.4.1)."""
        return self._read(lambda txn, dbs: tree.consistency_path(txn, dbs, old, new))

    def copy_keys(self) -> list[bytes]:
        """Every distinct stored copy as event_id (32) + copy hash (32), in that byte order:
        the items :mod:`pithlog.net.sync` reconciles."""
        return self._read(
            lambda txn, dbs: list(txn.cursor(db=dbs["copy_seq"]).iternext(values=False))
        )

    def copy_seqs(self, keys: Iterable[bytes]) -> list[int | None]:
        """The sequence number of each copy named by ``keys`` (``None``: not stored)."""
        wanted = list(keys)
        return self._read(lambda txn, dbs: tree.copy_seqs(txn, dbs, wanted))

    def copies(self, keys: Iterable[bytes]) -> list[tuple[int, bytes]]:
        """``(seq, JCS bytes)`` of the stored copies named by ``keys`` (event_id + copy
        hash), in append order; keys of copies not stored are left out."""
        wanted = list(keys)
        return self._read(lambda txn, dbs: tree.copies(txn, dbs, wanted))


PIPELINE_MIN = 500
"""Batches of at least this many items (judged by the first) are verified in helper
processes from the second batch on; smaller ones in threads, as :meth:`Store.append`
does (a process start costs about as much as verifying a few thousand signatures)."""


def _unseen(envelopes: dict[bytes, Envelope], txn: _Txn, dbs: dict[str, Any]) -> list[bytes]:
    """The copy hashes of ``envelopes`` that the store holds neither as an event's copy nor
    as evidence (a read transaction's work)."""
    out = []
    for h, env in envelopes.items():
        eid = eid_bytes(env.event_id)
        current = txn.get(eid, db=dbs["events"])
        # evidence holds other copies of stored event_ids only
        if current is None or (
            current != env.encoded and txn.get(eid + h, db=dbs["evidence"]) is None
        ):
            out.append(h)
    return out


START_PART = 1024
"""Items per part of a batch started with helper processes (:meth:`Store._start_append`)."""


def _parts(items: Iterable[T], size: int | None) -> Iterator[list[T]]:
    """``items`` in lists of ``size`` (``None``: one list of them all)."""
    it = iter(items)
    while part := list(itertools.islice(it, size)):
        yield part
        if size is None:
            return


ALONE_POOL_MIN = 2000
"""A first batch of at least this many items (when its length is known: a list) is
verified in helper processes too: it has no batch before it to overlap with, and in
threads, which hold the GIL between signatures, it would use little more than one core."""


def _at_least(batch: object, n: int) -> bool:
    return isinstance(batch, Sized) and len(batch) >= n


STRUCTURE_PROCESS_MIN_COPIES = 20_000
"""From this many stored copies, a one-process replay runs its structure pass in a process
of its own beside the piths (about 0.35 s of work at this size, above the cost of starting
a process); smaller logs check their structure first, in the replaying process."""

VERIFY_PROCESS_MIN_PITHS = 100
"""A one-process replay of fewer piths verifies in threads: starting a verifying process
costs about as much as verifying a few thousand signatures."""


# --- replay: the scratch index and worker processes ---------------------------------------


@contextlib.contextmanager
def _scratch_index(entries: int) -> Iterator[_Txn]:
    """The temporary on-disk index of the structure pass
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


def _structure_here(store: Store, piths: list[str]) -> list[Discrepancy]:
    """Replay's structure pass (:func:`pithlog.store.replay.check_structure`, then the Merkle
    tree) over ``store``; ``piths``: the piths replay goes through."""
    found: list[Discrepancy] = []
    replayed = set(piths)
    store._read(lambda txn, dbs: check_structure(txn, dbs, found, replayed, _scratch_index))
    store._read(lambda txn, dbs: tree.check_merkle(txn, dbs, found))
    return found


def _structure_at(path: str, piths: list[str]) -> list[Discrepancy]:
    """:func:`_structure_here` in a process of its own (:meth:`Store._structure`)."""
    gc.disable()  # see pithlog.cli: nothing cyclic is held
    with Store.open(path, create=False, readonly=True) as store:
        return _structure_here(store, piths)


_WORKER: dict[str, Any] = {}


def _worker_init(
    path: str,
    entries: list[dict[str, Any]],
    same: bool,
    verify: bool,
    stored_kd: str | None,
    threads: int | None,
) -> None:
    leave_interrupts_to_parent()
    gc.disable()  # a worker holds only acyclic decoded JSON: see pithlog.cli
    _WORKER["store"] = Store.open(path, create=False, readonly=True)
    _WORKER["ctx"] = ReplayContext(make_keyring(entries), same, verify, stored_kd, threads)


def _run_chunk(
    store: Store, chunk: list[tuple[str, list[bytes]]], ctx: ReplayContext
) -> list[PithOutcome]:
    def work(txn: _Txn, dbs: dict[str, Any]) -> list[PithOutcome]:
        return replay_chunk(txn, dbs, chunk, ctx)

    return store._read(work)


def _worker_run(chunk: list[tuple[str, list[bytes]]]) -> list[PithOutcome]:
    return _run_chunk(_WORKER["store"], chunk, _WORKER["ctx"])
