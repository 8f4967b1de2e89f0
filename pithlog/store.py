"""The durable log: an LMDB environment holding events, their evidence, indexes and the
cached state of every pith (``docs/store.md`` describes the layout byte for byte).

This is the only module that imports :mod:`lmdb`.

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
import multiprocessing
import os
import shutil
import struct
import tempfile
import threading
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar

import lmdb
import msgspec

from pithlog import merkle
from pithlog.canonical import jcs
from pithlog.checks import REASONS, CheckBatch, check_alone, start_checks
from pithlog.errors import DoorError, StoreError, register
from pithlog.events import Envelope, is_event_id, parse_envelope
from pithlog.keys import Keyring, make_keyring
from pithlog.layout import (
    DB_NAMES,
    FORMAT_VERSION,
    INDEX_DBS,
    META_FORMAT,
    META_KEYRING,
    META_MERGE,
    META_MERKLE_SIZE,
    META_NEXT_SEQ,
    PITH_BYTES,
    SEQ,
    VALID,
    copy_at,
    copy_hash,
    decode_ids,
    distinct_piths,
    eid_bytes,
    eid_str,
    evidence_of,
    pith_eids,
    stored_envelope,
    verdict_bytes,
    verdict_of,
    why,
)
from pithlog.parallel import threads_per_process, verifying_pool
from pithlog.records import is_pith_number
from pithlog.reduce import MERGE_VERSION, Judged, Pending, Reduction, prefer
from pithlog.state import render_reduction
from pithlog.stateindex import (
    INDEX_DAMAGE,
    assemble_state,
    index_add,
    index_clear,
    index_entries,
    index_stored,
    pith_summary,
    reduce_judged,
    rereduce,
)

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

# Append statuses (one per item of a batch).
STORED = "stored"
"""A new event_id: this copy is stored (with ``reason`` set when kept invalid)."""
DUPLICATE = "duplicate"
"""This exact envelope is already stored (or appeared earlier in the batch)."""
REPLACED = "replaced"
"""A different copy was stored under this event_id; this one is preferred (spec 7 step 0)
and is now the event's copy; the other is kept as evidence."""
EVIDENCE = "evidence"
"""A different copy is stored under this event_id and stays preferred; this one is kept as
evidence."""
REJECTED = "rejected"
"""Fails one of checks 1-12 (``reason``); not stored (see ``keep_invalid``)."""
REFUSED = "refused"
"""Refused at the door (spec 1, 4): not attributable, never stored."""

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


# --- results ------------------------------------------------------------------------------


@dataclass(frozen=True)
class AppendResult:
    """What became of one item of a batch (``index`` counts items from 0)."""

    index: int
    event_id: str | None
    status: str
    reason: str | None = None
    pith_number: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "event_id": self.event_id,
            "status": self.status,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class Discrepancy:
    """One place where the store disagrees with what its log implies."""

    kind: str
    subject: str
    detail: str

    def line(self) -> str:
        return f"{self.kind}: {self.subject}: {self.detail}"


@dataclass
class ReplayReport:
    """What :meth:`Store.replay` found. ``ok`` when there is no discrepancy."""

    keyring_digest: str
    stored_keyring_digest: str | None
    piths: int = 0
    events: int = 0
    copies: int = 0
    discrepancies: list[Discrepancy] = field(default_factory=list)
    notes: list[Discrepancy] = field(default_factory=list)
    """Under another keyring: pending piths whose counts would change (no state does)."""

    @property
    def same_keyring(self) -> bool:
        return self.stored_keyring_digest in (None, self.keyring_digest)

    @property
    def ok(self) -> bool:
        return not self.discrepancies

    @property
    def changed_piths(self) -> list[str]:
        """Piths whose cached state (or pending status) differs from the replayed one."""
        return sorted({d.subject for d in self.discrepancies if d.kind in ("state", "pith")})


Progress = Callable[[int, int], None]
"""``progress(done, total)``: piths replayed so far, out of ``total``."""


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
        copy of a stored event_id is resolved by :func:`pithlog.reduce.prefer`. Every pith
        whose events changed is re-reduced in the same transaction. Results are returned
        only after the commit is durable.
        """
        return self._finish_append(self._start_append(batch, keyring), keyring, keep_invalid)

    def append_batches(
        self,
        batches: Iterable[Iterable[bytes | bytearray | memoryview | Envelope]],
        keyring: Keyring,
        keep_invalid: bool = False,
    ) -> Iterator[list[AppendResult]]:
        """:meth:`append` of each batch in turn, as a pipeline: each batch is still ONE
        durable transaction, and its results are yielded after its commit; meanwhile the
        next batch goes through the door and checks 1-12, its signatures verified in
        helper processes beside this process's writing (from the second batch on, on a
        machine with more than one core, for batches of :data:`PIPELINE_MIN` or more).
        Nothing of a batch is written before the batches ahead of it are committed;
        stopping between batches loses only batches not yet committed."""
        cores = os.cpu_count() or 1
        with contextlib.ExitStack() as stack:
            executor: Executor | None = None
            previous: _StartedBatch | None = None
            for number, batch in enumerate(batches):
                first_large = previous is not None and len(previous.items) >= PIPELINE_MIN
                if number == 1 and cores > 1 and first_large:
                    executor = verifying_pool(stack)
                started = self._start_append(batch, keyring, executor)
                if previous is not None:
                    yield self._finish_append(previous, keyring, keep_invalid)
                previous = started
            if previous is not None:
                yield self._finish_append(previous, keyring, keep_invalid)

    def _start_append(
        self,
        batch: Iterable[bytes | bytearray | memoryview | Envelope],
        keyring: Keyring,
        executor: Executor | None = None,
    ) -> _StartedBatch:
        """A batch through the door, and checks 1-12 started on its copies that the store
        does not hold yet (a copy already stored is a duplicate, not judged again)."""
        items: list[Envelope | DoorError] = []
        for item in batch:
            if isinstance(item, Envelope):
                items.append(item)
                continue
            try:
                items.append(parse_envelope(bytes(item)))
            except DoorError as exc:
                items.append(exc)
        envelopes = {copy_hash(i.encoded): i for i in items if isinstance(i, Envelope)}

        def unseen(txn: _Txn, dbs: dict[str, Any]) -> list[bytes]:
            return [
                h
                for h, env in envelopes.items()
                if txn.get(eid_bytes(env.event_id), db=dbs["events"]) != env.encoded
                and txn.get(eid_bytes(env.event_id) + h, db=dbs["evidence"]) is None
            ]

        fresh = self._read(unseen) if envelopes else []
        checks = start_checks([envelopes[h] for h in fresh], keyring, executor=executor)
        return _StartedBatch(items, fresh, checks)

    def _finish_append(
        self, started: _StartedBatch, keyring: Keyring, keep_invalid: bool
    ) -> list[AppendResult]:
        """The write transaction of a started batch, once its verdicts are in."""
        items = started.items
        kd = bytes.fromhex(keyring.digest)
        # copy hash -> checks 1-12, kept across retries of the transaction
        verdicts: dict[bytes, str | None] = dict(
            zip(started.fresh, started.checks.reasons(), strict=True)
        )

        def judged(env: Envelope, h: bytes) -> Judged:
            if h not in verdicts:
                verdicts[h] = check_alone(env, keyring)
            return Judged(env, verdicts[h])

        def work(txn: _Txn, dbs: dict[str, Any]) -> list[AppendResult]:
            meta = dbs["meta"]
            stored_kd = txn.get(META_KEYRING, db=meta)
            if stored_kd != kd:
                if stored_kd is not None and txn.stat(dbs["events"])["entries"]:
                    raise StoreError(
                        "keyring_changed",
                        f"the store's states were reduced under keyring {stored_kd.hex()[:16]}"
                        f"..., this keyring is {keyring.digest[:16]}...: run `pithlog replay "
                        "--rebuild --keyring KEYRING` to re-reduce the store under it",
                    )
                txn.put(META_KEYRING, kd, db=meta)
            raw_next = txn.get(META_NEXT_SEQ, db=meta)
            if raw_next is None or len(raw_next) != SEQ.size:
                raise StoreError("corrupted", "meta next_seq is missing or damaged; run "
                                 "`pithlog replay --verify`")  # fmt: skip
            next_seq = SEQ.unpack(raw_next)[0]
            results: list[AppendResult] = []
            added: dict[str, list[Judged]] = {}  # pith -> events new to the store
            rebuild: set[str] = set()  # piths whose copies changed: re-reduce them whole
            for index, item in enumerate(items):
                if isinstance(item, DoorError):
                    results.append(AppendResult(index, None, REFUSED, item.describe()))
                    continue
                env, h, eid = item, copy_hash(item.encoded), eid_bytes(item.event_id)
                current = txn.get(eid, db=dbs["events"])
                if current == env.encoded or (
                    current is not None and txn.get(eid + h, db=dbs["evidence"]) is not None
                ):
                    results.append(AppendResult(index, env.event_id, DUPLICATE, None,
                                                env.pith_number))  # fmt: skip
                    continue
                new = judged(env, h)
                if new.reason is not None and not keep_invalid:
                    results.append(AppendResult(index, env.event_id, REJECTED, new.reason,
                                                env.pith_number))  # fmt: skip
                    continue
                txn.put(kd + h, verdict_bytes(new.reason), db=dbs["verdicts"])
                txn.put(SEQ.pack(next_seq), eid + h, db=dbs["seq"])
                next_seq += 1
                if current is None:
                    txn.put(eid, env.encoded, db=dbs["events"])
                    txn.put(env.pith_number.encode("ascii") + eid, b"", db=dbs["by_pith"])
                    added.setdefault(env.pith_number, []).append(new)
                    results.append(AppendResult(index, env.event_id, STORED, new.reason,
                                                env.pith_number))  # fmt: skip
                    continue
                old_env = stored_envelope(current)
                old_h = copy_hash(current)
                cached = txn.get(kd + old_h, db=dbs["verdicts"])
                if cached is None or old_h in verdicts:
                    old = judged(old_env, old_h)
                    txn.put(kd + old_h, verdict_bytes(old.reason), db=dbs["verdicts"])
                else:
                    old = Judged(old_env, verdict_of(cached))
                if prefer(new, old) is new:
                    txn.put(eid, env.encoded, db=dbs["events"])
                    txn.put(eid + old_h, current, db=dbs["evidence"])
                    if old_env.pith_number != env.pith_number:
                        txn.delete(old_env.pith_number.encode("ascii") + eid, db=dbs["by_pith"])
                        txn.put(env.pith_number.encode("ascii") + eid, b"", db=dbs["by_pith"])
                        rebuild.add(old_env.pith_number)
                    rebuild.add(env.pith_number)
                    results.append(AppendResult(
                        index, env.event_id, REPLACED,
                        f"preferred to the stored copy: {why(new, old)}", env.pith_number,
                    ))  # fmt: skip
                else:
                    txn.put(eid + h, env.encoded, db=dbs["evidence"])
                    results.append(AppendResult(
                        index, env.event_id, EVIDENCE,
                        f"the stored copy is preferred: {why(old, new)}", env.pith_number,
                    ))  # fmt: skip
            for pith in sorted(added.keys() | rebuild):
                if pith in rebuild or not index_add(txn, dbs, pith, added[pith]):
                    rereduce(txn, dbs, pith, kd, keyring, verdicts, added.get(pith, ()))
            txn.put(META_NEXT_SEQ, SEQ.pack(next_seq), db=meta)
            _merkle_sync(txn, dbs)  # the Merkle tree and copy_seq follow seq
            return results

        return self._write(work)

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
        ctx = _ReplayContext(keyring, report.same_keyring, verify, report.stored_keyring_digest)

        piths, foreign = self._read(_replay_work)
        chunks = _chunks(piths, foreign, jobs)

        def structure() -> None:
            replayed = set(piths)
            self._read(lambda txn, dbs: _check_structure(txn, dbs, report, replayed))
            self._read(lambda txn, dbs: _check_merkle(txn, dbs, report.discrepancies))

        with contextlib.ExitStack() as stack:
            if jobs > 1:
                # The workers start on the piths while this process checks the structure,
                # so the structure pass is not a serial prefix of the whole replay.
                outcomes = self._replay_pool(stack, chunks, ctx, jobs)
                structure()
            else:
                structure()
                outcomes = self._replay_here(stack, chunks, ctx)
            total = len(piths)
            done = 0
            if progress is not None:
                progress(0, total)
            for outcome in outcomes:
                for _pith, found, events, copies in outcome:
                    report.discrepancies.extend(d for d in found if d.kind != "note")
                    report.notes.extend(d for d in found if d.kind == "note")
                    report.events += events
                    report.copies += copies
                    report.piths += 1
                done += len(outcome)
                if progress is not None:
                    progress(done, total)
        return report

    def _replay_here(
        self,
        stack: contextlib.ExitStack,
        chunks: list[list[tuple[str, list[bytes]]]],
        ctx: _ReplayContext,
    ) -> Iterator[list[_PithOutcome]]:
        """``jobs=1``: the chunks in this process, as a pipeline. When signatures are to be
        verified and the machine has another core, they are verified in helper processes
        (one per other core) while this process reads the next chunk and puts it through
        the door and checks, and judges the chunk before; threads could not overlap that
        Python work (a verifying thread waits for the GIL after each signature)."""
        cores = os.cpu_count() or 1
        large = sum(len(chunk) for chunk in chunks) >= VERIFY_PROCESS_MIN_PITHS
        if (ctx.verify or not ctx.same_keyring) and cores > 1 and len(chunks) > 1 and large:
            ctx = dataclasses.replace(ctx, executor=verifying_pool(stack))
        previous: _Started | None = None
        for chunk in chunks:
            started = self._read(functools.partial(_start_chunk, chunk=chunk, ctx=ctx))
            if previous is not None:
                yield self._read(functools.partial(_finish_chunk, started=previous, ctx=ctx))
            previous = started
        if previous is not None:
            yield self._read(functools.partial(_finish_chunk, started=previous, ctx=ctx))

    def _replay_pool(
        self,
        stack: contextlib.ExitStack,
        chunks: list[list[tuple[str, list[bytes]]]],
        ctx: _ReplayContext,
        jobs: int,
    ) -> Iterator[list[_PithOutcome]]:
        """Hand ``chunks`` to worker processes now; their outcomes, in order."""
        if len(chunks) <= 1:
            return iter([_run_chunk(self, chunk, ctx) for chunk in chunks])
        entries = [key.entry() for key in ctx.keyring.values()]
        mp = multiprocessing.get_context("spawn")
        pool = stack.enter_context(mp.Pool(
            processes=min(jobs, len(chunks)),
            initializer=_worker_init,
            initargs=(self.path, entries, ctx.same_keyring, ctx.verify, ctx.stored_kd,
                      threads_per_process(jobs)),
        ))  # fmt: skip
        return pool.imap(_worker_run, chunks)

    # --- rebuild under another keyring ----------------------------------------------------

    def rebuild(self, keyring: Keyring, progress: Progress | None = None) -> dict[str, int]:
        """Re-judge every stored copy under ``keyring`` (signatures verified), re-pick the
        preferred copy of every event_id, re-reduce every pith and record the keyring: one
        write transaction, so readers see the old store or the new one, never a mixture.
        Returns counts: copies judged, preferred copies changed, piths reduced."""
        kd = bytes.fromhex(keyring.digest)
        verdicts: dict[bytes, str | None] = {}

        def work(txn: _Txn, dbs: dict[str, Any]) -> dict[str, int]:
            def verdict(env: Envelope, h: bytes) -> Judged:
                if h not in verdicts:
                    cached = txn.get(kd + h, db=dbs["verdicts"])
                    verdicts[h] = (
                        check_alone(env, keyring) if cached is None else verdict_of(cached)
                    )
                return Judged(env, verdicts[h])

            swaps: list[tuple[bytes, bytes, bytes, Envelope, Envelope]] = []
            copies = 0
            for eid, data in txn.cursor(db=dbs["events"]):
                h = copy_hash(data)
                best = held = verdict(stored_envelope(data), h)
                txn.put(kd + h, verdict_bytes(held.reason), db=dbs["verdicts"])
                copies += 1
                best_h = h
                for key, other in evidence_of(txn, dbs, eid):
                    candidate = verdict(stored_envelope(other), key[32:])
                    txn.put(kd + key[32:], verdict_bytes(candidate.reason), db=dbs["verdicts"])
                    copies += 1
                    if prefer(candidate, best) is candidate:
                        best, best_h = candidate, key[32:]
                if best is not held:
                    swaps.append((eid, h, best_h, held.envelope, best.envelope))
            for eid, old_h, new_h, old, new in swaps:
                txn.put(eid, new.encoded, db=dbs["events"])
                txn.delete(eid + new_h, db=dbs["evidence"])
                txn.put(eid + old_h, old.encoded, db=dbs["evidence"])
                if old.pith_number != new.pith_number:
                    txn.delete(old.pith_number.encode("ascii") + eid, db=dbs["by_pith"])
                    txn.put(new.pith_number.encode("ascii") + eid, b"", db=dbs["by_pith"])
            piths = distinct_piths(txn, dbs)
            if progress is not None:
                progress(0, len(piths))
            for i, pith in enumerate(piths):
                rereduce(txn, dbs, pith, kd, keyring, verdicts)
                if progress is not None:
                    progress(i + 1, len(piths))
            known = set(piths)
            stale = [k.decode("ascii", "replace")
                     for k in txn.cursor(db=dbs["piths"]).iternext(values=False)]  # fmt: skip
            for pith in stale:
                if pith not in known:
                    index_clear(txn, dbs, pith)
            txn.put(META_KEYRING, kd, db=dbs["meta"])
            return {"copies": copies, "preferred_changed": len(swaps), "piths": len(piths)}

        return self._write(work)

    # --- transparency: the Merkle tree over the append sequence ---------------------------

    def tree_size(self) -> int:
        """Leaves of the Merkle tree: one per ``seq`` entry (every distinct stored copy)."""
        return self._read(lambda txn, dbs: _merkle_size(txn, dbs))

    def tree_root(self, size: int | None = None) -> tuple[int, bytes]:
        """``(size, MTH(D[size]))`` of the log's first ``size`` leaves (default: all), from
        O(log n) stored subtree hashes."""

        def work(txn: _Txn, dbs: dict[str, Any]) -> tuple[int, bytes]:
            n = _tree_size_arg(txn, dbs, size)
            return n, merkle.root(n, _subtree(txn, dbs))

        return self._read(work)

    def leaves_of(self, event_id: str) -> list[tuple[int, bytes]]:
        """``(leaf index, copy hash)`` of every stored copy of ``event_id`` (leaf index =
        seq - 1), in append order. Two copies of one event_id are two leaves with the same
        leaf hash."""
        if not is_event_id(event_id):
            return []
        eid = eid_bytes(event_id)

        def work(txn: _Txn, dbs: dict[str, Any]) -> list[tuple[int, bytes]]:
            out: list[tuple[int, bytes]] = []
            cursor = txn.cursor(db=dbs["copy_seq"])
            found = cursor.set_range(eid)
            while found and cursor.key()[:32] == eid:
                out.append((SEQ.unpack(cursor.value())[0] - 1, cursor.key()[32:]))
                found = cursor.next()
            return sorted(out)

        return self._read(work)

    def inclusion_path(self, index: int, size: int | None = None) -> tuple[int, list[bytes]]:
        """``(size, PATH(index, D[size]))`` (RFC 9162 2.1.3.1)."""

        def work(txn: _Txn, dbs: dict[str, Any]) -> tuple[int, list[bytes]]:
            n = _tree_size_arg(txn, dbs, size)
            if not 0 <= index < n:
                raise StoreError("tree_size", f"leaf {index} is not in the tree of {n} leaves")
            return n, merkle.inclusion_path(index, n, _subtree(txn, dbs))

        return self._read(work)

    def consistency_path(self, old: int, new: int | None = None) -> tuple[int, list[bytes]]:
        """``(new, PROOF(old, D[new]))`` (RFC 9162 2.1.4.1)."""

        def work(txn: _Txn, dbs: dict[str, Any]) -> tuple[int, list[bytes]]:
            n = _tree_size_arg(txn, dbs, new)
            if not 0 <= old <= n:
                raise StoreError("tree_size", f"size {old} is not between 0 and {n}")
            return n, merkle.consistency_path(old, n, _subtree(txn, dbs))

        return self._read(work)

    def copy_keys(self) -> list[bytes]:
        """Every distinct stored copy as event_id (32) + copy hash (32), in that byte order:
        the items :mod:`pithlog.sync` reconciles."""
        return self._read(
            lambda txn, dbs: list(txn.cursor(db=dbs["copy_seq"]).iternext(values=False))
        )

    def copy_seqs(self, keys: Iterable[bytes]) -> list[int | None]:
        """The sequence number of each copy named by ``keys`` (``None``: not stored)."""
        wanted = list(keys)

        def work(txn: _Txn, dbs: dict[str, Any]) -> list[int | None]:
            raw = [txn.get(key, db=dbs["copy_seq"]) for key in wanted]
            return [None if r is None else SEQ.unpack(r)[0] for r in raw]

        return self._read(work)

    def copies(self, keys: Iterable[bytes]) -> list[tuple[int, bytes]]:
        """``(seq, JCS bytes)`` of the stored copies named by ``keys`` (event_id + copy
        hash), in append order; keys of copies not stored are left out."""
        wanted = list(keys)

        def work(txn: _Txn, dbs: dict[str, Any]) -> list[tuple[int, bytes]]:
            out: list[tuple[int, bytes]] = []
            for key in wanted:
                raw_seq = txn.get(key, db=dbs["copy_seq"])
                data = copy_at(txn, dbs, key) if raw_seq is not None else None
                if raw_seq is not None and data is not None:
                    out.append((SEQ.unpack(raw_seq)[0], data))
            out.sort()
            return out

        return self._read(work)


# --- replay: structure --------------------------------------------------------------------

_CHUNK = 32
"""Piths per unit of replay work (and per read transaction), at most."""

VERIFY_PROCESS_MIN_PITHS = 100
"""A one-process replay of fewer piths verifies in threads: starting a verifying process
costs about as much as verifying a few thousand signatures."""


def _chunks(
    piths: list[str], foreign: dict[str, list[bytes]], jobs: int
) -> list[list[tuple[str, list[bytes]]]]:
    """The replay work, ``(pith, event_ids of evidence claiming it)``, in chunks of piths:
    at most :data:`_CHUNK`, and about four chunks per process."""
    work = [(pith, foreign.get(pith, [])) for pith in piths]
    size = max(1, min(_CHUNK, -(-len(work) // (max(jobs, 1) * 4))))
    return [work[i : i + size] for i in range(0, len(work), size)]


def _replay_work(txn: _Txn, dbs: dict[str, Any]) -> tuple[list[str], dict[str, list[bytes]]]:
    """The piths to replay (every pith in ``by_pith``, and every pith that an evidence copy
    claims) and, per pith, the event_ids that have an evidence copy claiming that pith
    while their preferred copy claims another."""
    foreign: dict[str, set[bytes]] = {}
    for key, data in txn.cursor(db=dbs["evidence"]):
        preferred = txn.get(key[:32], db=dbs["events"]) if len(key) == 64 else None
        ids = decode_ids(data)
        pref_ids = None if preferred is None else decode_ids(preferred)
        if (
            ids is not None
            and pref_ids is not None
            and is_pith_number(ids.pith_number)
            and pref_ids.pith_number != ids.pith_number
        ):
            foreign.setdefault(ids.pith_number, set()).add(key[:32])
    known = set(distinct_piths(txn, dbs))
    return sorted(known | set(foreign)), {p: sorted(eids) for p, eids in foreign.items()}


def _check_structure(
    txn: _Txn, dbs: dict[str, Any], report: ReplayReport, replayed: Collection[str]
) -> None:
    """The checks that need no signature: meta, seq against the copies, the indexes against
    each other. ``replayed``: the piths replay goes through (:func:`_replay_work`); an
    index entry of any other pith is reported."""
    found = report.discrepancies

    def say(kind: str, subject: str, detail: str) -> None:
        found.append(Discrepancy(kind, subject, detail))

    meta = dbs["meta"]
    if txn.get(META_FORMAT, db=meta) != FORMAT_VERSION:
        say("meta", "format", f"is {txn.get(META_FORMAT, db=meta)!r}, expected {FORMAT_VERSION!r}")
    if txn.get(META_MERGE, db=meta) != MERGE_VERSION.encode("ascii"):
        say("meta", "merge_version", f"is {txn.get(META_MERGE, db=meta)!r}")
    raw_next = txn.get(META_NEXT_SEQ, db=meta)
    next_seq = SEQ.unpack(raw_next)[0] if raw_next is not None and len(raw_next) == 8 else None
    if next_seq is None:
        say("meta", "next_seq", f"is {raw_next!r}, not an 8-byte counter")
    kd = txn.get(META_KEYRING, db=meta)
    if kd is None and txn.stat(dbs["events"])["entries"]:
        say("meta", "keyring_digest", "missing although the store holds events")

    # seq -> copies, with a temporary on-disk index copy -> seq (memory stays bounded).
    seq_entries = txn.stat(dbs["seq"])["entries"]
    tmp = tempfile.mkdtemp(prefix="pithlog-replay-")
    try:
        # One write transaction holds every seq entry; writemap puts its dirty pages in the
        # file's mapping instead of the heap, so memory does not grow with the log (without
        # it, a replay of 1M events held 135 MiB of them).
        index_env = lmdb.open(tmp, map_size=max(64 << 20, seq_entries * 512), sync=False,
                              metasync=False, lock=False, subdir=True,
                              writemap=True)  # fmt: skip
        try:
            with index_env.begin(write=True) as itx:
                last = 0
                for key, value in txn.cursor(db=dbs["seq"]):
                    if len(key) != 8:
                        say("seq", f"key {key.hex()}", "is not an 8-byte sequence number")
                        continue
                    n = SEQ.unpack(key)[0]
                    last = n
                    if len(value) != 64:
                        say("seq", f"seq {n}", f"value of {len(value)} bytes, not 64")
                        continue
                    if copy_at(txn, dbs, value) is None:
                        say("seq", f"seq {n}", f"names copy {value[32:].hex()[:16]} of "
                            f"{eid_str(value[:32])}, which is not stored")  # fmt: skip
                    if not itx.put(value, key, overwrite=False):
                        other = SEQ.unpack(itx.get(value, b"\0" * 8))[0]
                        say("seq", f"seq {n}", f"names the same copy of {eid_str(value[:32])} "
                            f"as seq {other}")  # fmt: skip
                if next_seq is not None and last >= next_seq:
                    say("meta", "next_seq", f"is {next_seq} but seq already holds {last}")

                def has_seq(eid: bytes, h: bytes) -> bool:
                    return itx.get(eid + h) is not None

                # events: each preferred copy is its own event, has a seq entry, is indexed.
                for eid, data in txn.cursor(db=dbs["events"]):
                    subject = eid_str(eid) if len(eid) == 32 else f"key {eid.hex()}"
                    if len(eid) != 32:
                        say("events", subject, "key is not a 32-byte event id")
                        continue
                    h = copy_hash(data)
                    if not has_seq(eid, h):
                        say("seq", subject, f"the preferred copy {h.hex()[:16]} has no seq entry")
                    ids = decode_ids(data)
                    if ids is None or not is_pith_number(ids.pith_number):
                        say("events", subject, "the stored copy does not decode as an envelope")
                        continue
                    if ids.event_id != subject:
                        say("events", subject, f"the stored copy says event_id {ids.event_id}")
                    pith_key = ids.pith_number.encode("ascii") + eid
                    if txn.get(pith_key, db=dbs["by_pith"]) is None:
                        say("by_pith", subject, f"not indexed under its pith {ids.pith_number}")

                # evidence: hash, owner, not the preferred copy itself, a seq entry.
                for key, data in txn.cursor(db=dbs["evidence"]):
                    if len(key) != 64:
                        say("evidence", f"key {key.hex()}", "is not event id + copy hash")
                        continue
                    eid, h = key[:32], key[32:]
                    subject = eid_str(eid)
                    if copy_hash(data) != h:
                        say("evidence", subject, f"copy {h.hex()[:16]} does not hash to its key "
                            f"(its bytes hash to {copy_hash(data).hex()[:16]})")  # fmt: skip
                    if not has_seq(eid, h):
                        say("seq", subject, f"evidence copy {h.hex()[:16]} has no seq entry")
                    preferred = txn.get(eid, db=dbs["events"])
                    if preferred is None:
                        say("evidence", subject, f"copy {h.hex()[:16]} is evidence of an event "
                            "with no preferred copy in events")  # fmt: skip
                        continue
                    if preferred == data:
                        say("evidence", subject, "an evidence copy equals the preferred copy")
                    ids = decode_ids(data)
                    if ids is None or not is_pith_number(ids.pith_number):
                        say("evidence", subject, f"copy {h.hex()[:16]} does not decode as an "
                            "envelope")  # fmt: skip
                        continue
                    if ids.event_id != subject:
                        say("evidence", subject, f"copy {h.hex()[:16]} says event_id "
                            f"{ids.event_id}")  # fmt: skip
        finally:
            index_env.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    # by_pith: well-formed keys naming stored events (their pith is checked per pith).
    for key in txn.cursor(db=dbs["by_pith"]).iternext(values=False):
        pith = key[:PITH_BYTES].decode("ascii", "replace")
        if len(key) != PITH_BYTES + 32 or not is_pith_number(pith):
            say("by_pith", f"key {key.hex()}", "is not pith_number + event id")
            continue
        if txn.get(key[PITH_BYTES:], db=dbs["events"]) is None:
            say("by_pith", eid_str(key[PITH_BYTES:]), f"indexed under {pith} but not in events")
    for name in ("piths", *INDEX_DBS):
        for key in txn.cursor(db=dbs[name]).iternext(values=False):
            pith = key[:PITH_BYTES].decode("ascii", "replace")
            if pith not in replayed:
                say(name, pith, "cached for a pith that has no events in by_pith")
    for key, value in txn.cursor(db=dbs["verdicts"]):
        if len(key) != 64:
            say("verdicts", f"key {key.hex()}", "is not keyring digest + copy hash")
        elif value != VALID and value.decode("ascii", "replace") not in REASONS[:12]:
            say("verdicts", f"copy {key[32:].hex()[:16]}", f"verdict {value!r} is not one of "
                "checks 1-12")  # fmt: skip


# --- replay: one pith ---------------------------------------------------------------------


@dataclass(frozen=True)
class _ReplayContext:
    keyring: Keyring
    same_keyring: bool
    verify: bool
    stored_kd: str | None
    threads: int | None = None
    """Verification threads per process (:func:`check_many`; ``None``: its default)."""
    executor: Executor | None = None
    """Verifying processes (:func:`start_checks`) of a one-process replay, if any."""

    @property
    def kd(self) -> bytes:
        return bytes.fromhex(self.keyring.digest)


_PithOutcome = tuple[str, list[Discrepancy], int, int]
"""``(pith, discrepancies, events, copies)``."""


@dataclass
class _PithCopies:
    """One pith's stored copies as replay reads them, each through the door."""

    pith: str
    indexed: set[bytes]
    by_event: dict[bytes, list[tuple[bytes | None, bytes]]]
    """event_id -> its copies: ``(None, preferred)`` first, then ``(copy hash, evidence)``."""
    passed: dict[bytes, Envelope | DoorError]


def _read_pith(txn: _Txn, dbs: dict[str, Any], pith: str, foreign: Sequence[bytes]) -> _PithCopies:
    """Every stored copy that claims ``pith`` (or is evidence of an event it indexes),
    through the door."""
    indexed = set(pith_eids(txn, dbs, pith))
    by_event: dict[bytes, list[tuple[bytes | None, bytes]]] = {}
    passed: dict[bytes, Envelope | DoorError] = {}
    for eid in sorted(indexed | set(foreign)):
        preferred = txn.get(eid, db=dbs["events"])
        if preferred is None:
            continue  # reported by the structure pass
        by_event[eid] = [(None, preferred), *((k[32:], v) for k, v in evidence_of(txn, dbs, eid))]
        for _, data in by_event[eid]:
            try:
                passed[data] = parse_envelope(data)
            except DoorError as exc:
                passed[data] = exc
    return _PithCopies(pith, indexed, by_event, passed)


@dataclass
class _Started:
    """A chunk read and through the door, its checks 1-12 started (:func:`_start_chunk`)."""

    read: list[_PithCopies]
    fresh: list[bytes]
    batch: CheckBatch | None


def _start_chunk(
    txn: _Txn,
    dbs: dict[str, Any],
    chunk: Sequence[tuple[str, Sequence[bytes]]],
    ctx: _ReplayContext,
) -> _Started:
    """Every copy of the chunk's piths through the door, then checks 1-12 started on all of
    them at once (``verify``, or another keyring): one batch of signatures for threads or
    a verifying process (:func:`start_checks`)."""
    read = [_read_pith(txn, dbs, pith, foreign) for pith, foreign in chunk]
    if not (ctx.verify or not ctx.same_keyring):
        return _Started(read, [], None)
    fresh = {data: e for r in read for data, e in r.passed.items() if isinstance(e, Envelope)}
    batch = start_checks(list(fresh.values()), ctx.keyring, ctx.threads, ctx.executor)
    return _Started(read, list(fresh), batch)


def _finish_chunk(
    txn: _Txn, dbs: dict[str, Any], started: _Started, ctx: _ReplayContext
) -> list[_PithOutcome]:
    """The started chunk, pith by pith, once its signatures are verified."""
    checked: dict[bytes, str | None] = {}
    if started.batch is not None:
        checked = dict(zip(started.fresh, started.batch.reasons(), strict=True))
    return [_replay_pith(txn, dbs, r, checked, ctx) for r in started.read]


def _replay_chunk(
    txn: _Txn,
    dbs: dict[str, Any],
    chunk: Sequence[tuple[str, Sequence[bytes]]],
    ctx: _ReplayContext,
) -> list[_PithOutcome]:
    """Replay the piths of ``chunk`` (what a worker process does with one)."""
    return _finish_chunk(txn, dbs, _start_chunk(txn, dbs, chunk, ctx), ctx)


def _replay_pith(
    txn: _Txn,
    dbs: dict[str, Any],
    copies_of: _PithCopies,
    checked: dict[bytes, str | None],
    ctx: _ReplayContext,
) -> _PithOutcome:
    found: list[Discrepancy] = []

    def say(kind: str, subject: str, detail: str) -> None:
        found.append(Discrepancy(kind, subject, detail))

    pith, indexed_set = copies_of.pith, copies_of.indexed
    by_event, passed = copies_of.by_event, copies_of.passed
    stored_kd = bytes.fromhex(ctx.stored_kd) if ctx.stored_kd else None
    judged: list[Judged] = []
    copies = 0
    for eid, stored_copies in by_event.items():
        subject = eid_str(eid)
        candidates: list[tuple[Judged, bytes | None]] = []
        for h_key, data in stored_copies:
            copies += 1
            label = "the preferred copy" if h_key is None else f"evidence copy {h_key.hex()[:16]}"
            env = passed[data]
            if isinstance(env, DoorError):
                say("door", subject, f"{label} no longer passes the door: {env.describe()}")
                continue
            if env.encoded != data:
                say("events" if h_key is None else "evidence", subject,
                    f"{label} is not stored in its JCS encoding")  # fmt: skip
            if env.event_id != subject:
                say("events" if h_key is None else "evidence", subject,
                    f"{label} says event_id {env.event_id}")  # fmt: skip
                continue
            h = copy_hash(data)
            cached_raw = None if stored_kd is None else txn.get(stored_kd + h, db=dbs["verdicts"])
            if data in checked:
                reason = checked[data]
            elif ctx.verify or not ctx.same_keyring or cached_raw not in _VERDICT_VALUES:
                reason = check_alone(env, ctx.keyring)
            else:
                reason = verdict_of(cached_raw)
            if ctx.same_keyring and stored_kd is not None:
                if cached_raw is None:
                    say("verdicts", subject, f"{label} has no cached verdict")
                elif cached_raw != verdict_bytes(reason):
                    say("verdicts", subject, f"{label}: cached verdict {cached_raw.decode()!r}, "
                        f"checks 1-12 give {verdict_bytes(reason).decode()!r}")  # fmt: skip
            candidates.append((Judged(env, reason), h_key))
        if not candidates:
            continue
        held = candidates[0][0] if candidates[0][1] is None else None
        if eid in indexed_set and held is not None and held.envelope.pith_number != pith:
            say("by_pith", subject, f"indexed under {pith} but its envelope says "
                f"{held.envelope.pith_number}")  # fmt: skip
        winner, winner_h = candidates[0]
        for candidate, h_key in candidates[1:]:
            if prefer(candidate, winner) is candidate:
                winner, winner_h = candidate, h_key
        if ctx.same_keyring and held is not None and winner_h is not None and eid in indexed_set:
            say("preference", subject, f"events holds a copy that section 7 step 0 does not "
                f"prefer; evidence copy {winner_h.hex()[:16]} wins: "
                f"{why(winner, candidates[0][0])}")  # fmt: skip
        if winner.envelope.pith_number == pith:
            judged.append(winner)
    result = reduce_judged(pith, judged)
    state = render_reduction(result) if isinstance(result, Reduction) else None
    key = pith.encode("ascii")
    try:
        cached_state = assemble_state(txn, dbs, pith)
    except INDEX_DAMAGE as exc:
        say("index", pith, f"the state cannot be assembled from the index: {exc!r}")
        return pith, found, len(judged), copies
    cached_status = txn.get(key, db=dbs["piths"])
    expected_status = None if result is None else jcs(pith_summary(result))
    if ctx.same_keyring:
        expected_index = index_entries(pith, result)
        for name, entries in index_stored(txn, dbs, pith).items():
            want = expected_index[name]
            missing = len(want.keys() - entries.keys())
            extra = len(entries.keys() - want.keys())
            differ = sum(1 for k in want.keys() & entries.keys() if want[k] != entries[k])
            if name != "piths" and (missing or extra or differ):
                say("index", pith, f"{name}: {missing} entries missing, {extra} extra, "
                    f"{differ} differing from a full reduction")  # fmt: skip
    if cached_state != state:
        say("state", pith, _state_difference(cached_state, state, result))
    elif cached_status != expected_status:
        shown = f"piths says {_show(cached_status)}, replay gives {_show(expected_status)}"
        # Under another keyring, a pending pith whose counts change has no state that
        # changes: a note, not a discrepancy. Under the store's keyring it is damage.
        say("pith" if ctx.same_keyring or state is not None else "note", pith, shown)
    return pith, found, len(judged), copies


@dataclass
class _StartedBatch:
    """A batch through the door with checks 1-12 started (:meth:`Store._start_append`)."""

    items: list[Envelope | DoorError]
    fresh: list[bytes]
    """Copy hashes of the copies the store did not hold when the batch was started."""
    checks: CheckBatch


PIPELINE_MIN = 500
"""Batches of at least this many items (judged by the first) are verified in helper
processes from the second batch on; smaller ones in threads, as :meth:`Store.append`
does (a process start costs about as much as verifying a few thousand signatures)."""


_VERDICT_VALUES = frozenset([VALID, *(r.encode("ascii") for r in REASONS[:12])])


def _show(raw: bytes | None) -> str:
    return "nothing" if raw is None else raw.decode("utf-8", "replace")


def _state_difference(
    cached: bytes | None, replayed: bytes | None, result: Reduction | Pending | None
) -> str:
    """Say precisely how a cached state differs from the replayed one."""
    if replayed is None:
        now = "no events" if result is None else f"pending ({result.event_count} events)"
        if cached is None:
            return f"no cached state, and replay gives none ({now})"
        return f"a state is cached but replay gives {now}"
    if cached is None:
        return f"no state is cached but replay gives one ({len(replayed)} bytes)"
    try:
        old = msgspec.json.decode(cached)
    except (msgspec.MsgspecError, ValueError):
        return "the cached state is not JSON (damaged bytes)"
    new = msgspec.json.decode(replayed)
    if not isinstance(old, dict) or old.keys() != new.keys():
        return "the cached state does not have the state document's members"
    differing = [m for m in new if jcs(old[m]) != jcs(new[m])]
    if not differing:
        return "the cached bytes differ from the rendering of the same document"
    counts = [
        f"{m} cached {old[m]}, replayed {new[m]}"
        for m in ("event_count", "valid_event_count", "invalid_event_count", "equivocation_count")
        if old[m] != new[m]
    ]
    detail = f"differs in {', '.join(differing)}"
    return f"{detail} ({'; '.join(counts)})" if counts else detail


# --- replay: worker processes -------------------------------------------------------------

_WORKER: dict[str, Any] = {}


def _worker_init(
    path: str,
    entries: list[dict[str, Any]],
    same: bool,
    verify: bool,
    stored_kd: str | None,
    threads: int | None,
) -> None:
    gc.disable()  # a worker holds only acyclic decoded JSON: see pithlog.cli
    _WORKER["store"] = Store.open(path, create=False, readonly=True)
    _WORKER["ctx"] = _ReplayContext(make_keyring(entries), same, verify, stored_kd, threads)


def _run_chunk(
    store: Store, chunk: list[tuple[str, list[bytes]]], ctx: _ReplayContext
) -> list[_PithOutcome]:
    def work(txn: _Txn, dbs: dict[str, Any]) -> list[_PithOutcome]:
        return _replay_chunk(txn, dbs, chunk, ctx)

    return store._read(work)


def _worker_run(chunk: list[tuple[str, list[bytes]]]) -> list[_PithOutcome]:
    return _run_chunk(_WORKER["store"], chunk, _WORKER["ctx"])


# --- the Merkle tree over the append sequence ---------------------------------------------
# RFC 9162 section 2.1 over the append sequence: leaf i (from 0) is seq i + 1, its leaf hash
# SHA-256(0x00 || the 32 raw bytes of the copy's event_id). Two copies of one event_id are
# two leaves with the same hash; the copy hash is not in the leaf.
#   merkle    level (1 byte, >= 1) + index (8 bytes big-endian) -> the 32-byte hash of the
#             perfect subtree of leaves [index * 2**level, (index + 1) * 2**level), for
#             every such subtree that is complete. Level 0 (the leaf hashes) comes from seq.
#   copy_seq  event_id (32) + copy hash (32) -> seq (8 bytes big-endian): seq inverted,
#             in (event_id, copy hash) order (the leaves of an event; the items of sync).
# meta merkle_size: how many seq entries the two cover. Appends extend them in their own
# transaction (_merkle_sync); opening a store catches up a store written without them.

register({
    "store.tree_size": "a tree size or leaf index beyond the store's log: see `pithlog stats` "
    "(merkle_size)",
})  # fmt: skip

_NODE = struct.Struct(">BQ")


def _merkle_size(txn: _Txn, dbs: dict[str, Any]) -> int:
    raw = txn.get(META_MERKLE_SIZE, db=dbs["meta"])
    return SEQ.unpack(raw)[0] if raw is not None and len(raw) == SEQ.size else 0


def _tree_size_arg(txn: _Txn, dbs: dict[str, Any], size: int | None) -> int:
    current = _merkle_size(txn, dbs)
    if size is None:
        return current
    if not 0 <= size <= current:
        raise StoreError("tree_size", f"tree size {size} is not between 0 and the store's "
                         f"{current}")  # fmt: skip
    return size


def _perfect(txn: _Txn, dbs: dict[str, Any]) -> merkle.PerfectHash:
    """``perfect(level, index)`` from ``seq`` (level 0) and ``merkle``."""

    def perfect(level: int, index: int) -> bytes:
        if level == 0:
            value = txn.get(SEQ.pack(index + 1), db=dbs["seq"])
            if value is None or len(value) != 64:
                raise StoreError("corrupted", f"seq {index + 1} is missing or damaged; run "
                                 "`pithlog replay --verify`")  # fmt: skip
            return merkle.leaf_hash(value[:32])
        value = txn.get(_NODE.pack(level, index), db=dbs["merkle"])
        if value is None or len(value) != merkle.HASH_SIZE:
            raise StoreError("corrupted", f"merkle node {level}/{index} is missing or damaged; "
                             "run `pithlog replay --verify`")  # fmt: skip
        return value

    return perfect


def _subtree(txn: _Txn, dbs: dict[str, Any]) -> merkle.SubtreeHash:
    return merkle.subtree_from_perfect(_perfect(txn, dbs))


def _merkle_sync(txn: _Txn, dbs: dict[str, Any]) -> int:
    """Extend ``merkle`` and ``copy_seq`` over the seq entries they do not cover yet (those
    of this transaction's append; all of them for a store written without them). Stops at
    the first missing sequence number: a damaged seq is replay's to report."""
    raw = txn.get(META_MERKLE_SIZE, db=dbs["meta"])
    size = start = _merkle_size(txn, dbs)
    perfect = _perfect(txn, dbs)
    while True:
        value = txn.get(SEQ.pack(size + 1), db=dbs["seq"])
        if value is None or len(value) != 64:
            break
        for level, index, node in merkle.completed_subtrees(
            size, merkle.leaf_hash(value[:32]), perfect
        ):
            txn.put(_NODE.pack(level, index), node, db=dbs["merkle"])
        txn.put(value, SEQ.pack(size + 1), db=dbs["copy_seq"])
        size += 1
    if raw is None or size != start:
        txn.put(META_MERKLE_SIZE, SEQ.pack(size), db=dbs["meta"])
    return size


def _catch_up_merkle(env: lmdb.Environment, dbs: dict[str, Any]) -> None:
    """On open: build the tree of a store that lacks it (or was appended to by a pithlog
    without it), growing the map when it does not fit. Nothing to do for a current one."""
    while True:
        try:
            with _lmdb_errors(), env.begin(write=True) as txn:
                size = _merkle_size(txn, dbs)
                if (txn.get(META_MERKLE_SIZE, db=dbs["meta"]) is not None
                        and txn.get(SEQ.pack(size + 1), db=dbs["seq"]) is None):  # fmt: skip
                    return
                _merkle_sync(txn, dbs)
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


_MAX_MERKLE_LINES = 20


def _check_merkle(txn: _Txn, dbs: dict[str, Any], found: list[Discrepancy]) -> None:
    """Replay: recompute the tree from seq (O(log n) memory) and compare every stored
    subtree hash; ``copy_seq`` must invert ``seq``; ``merkle_size`` must cover seq."""
    lines: list[Discrepancy] = []

    def say(subject: str, detail: str) -> None:
        lines.append(Discrepancy("merkle", subject, detail))

    size = _merkle_size(txn, dbs)
    entries = txn.stat(dbs["seq"])["entries"]
    if size != entries:
        say("merkle_size", f"covers {size} leaves but seq holds {entries} entries")
    frontier: dict[int, bytes] = {}
    for checked, (key, value) in enumerate(txn.cursor(db=dbs["seq"])):
        if checked >= size:
            break
        if key != SEQ.pack(checked + 1) or len(value) != 64:
            say("seq", f"seq is not consecutive from 1 at leaf {checked}; the tree cannot "
                "be checked beyond it")  # fmt: skip
            break
        if txn.get(value, db=dbs["copy_seq"]) != key:
            say(eid_str(value[:32]), f"copy_seq does not map copy {value[32:].hex()[:16]} to "
                f"seq {checked + 1}")  # fmt: skip
        node, level, position = merkle.leaf_hash(value[:32]), 0, checked
        while position & 1:
            node = merkle.node_hash(frontier.pop(level), node)
            level += 1
            position >>= 1
            if txn.get(_NODE.pack(level, position), db=dbs["merkle"]) != node:
                say(f"node {level}/{position}", "differs from the hash recomputed from seq")
        frontier[level] = node
    expected_nodes = size - bin(size).count("1")
    nodes = txn.stat(dbs["merkle"])["entries"]
    if nodes != expected_nodes:
        say("merkle", f"holds {nodes} subtree hashes; a tree of {size} leaves has "
            f"{expected_nodes}")  # fmt: skip
    copies = txn.stat(dbs["copy_seq"])["entries"]
    if copies != size:
        say("copy_seq", f"holds {copies} entries; the tree has {size} leaves")
    found.extend(lines[:_MAX_MERKLE_LINES])
    if len(lines) > _MAX_MERKLE_LINES:
        found.append(Discrepancy("merkle", "more", f"{len(lines) - _MAX_MERKLE_LINES} more "
                                 "merkle discrepancies"))  # fmt: skip
