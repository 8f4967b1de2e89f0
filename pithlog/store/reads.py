"""What :class:`pithlog.store.Store`'s reads of the log's contents do (``docs/api.md``): a
pith's state assembled from its reduction index, the status of one pith or of all, the
export in chunks of short transactions, the counts, sizes and map use of ``stats``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from hashlib import sha256
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from pithlog.errors import StoreError, shown
from pithlog.protocol.reduce import MERGE_VERSION
from pithlog.store.layout import (
    DB_NAMES,
    FORMAT_VERSION,
    META_KEYRING,
    META_NEXT_SEQ,
    META_REKEY_TARGET,
    SEQ,
    Txn,
    eid_str,
    stored_copy,
)
from pithlog.store.stateindex import INDEX_DAMAGE, assemble_state, damage_said, stored_summary

if TYPE_CHECKING:
    from pithlog.store.environment import SharedEnvironment
    from pithlog.store.log import Store


def state(txn: Txn, dbs: dict[str, Any], pith_number: str) -> bytes | None:
    """:meth:`Store.state` in its read transaction: the state assembled from the index, a
    damaged index reported as ``store.corrupted``."""
    try:
        return assemble_state(txn, dbs, pith_number)
    except INDEX_DAMAGE as exc:
        raise StoreError("corrupted", f"the index of {pith_number} is damaged "
                         f"({damage_said(exc)}); "
                         "run `pithlog replay --verify`") from exc  # fmt: skip


def _summary(key: bytes, raw: bytes) -> dict[str, Any]:
    """A ``piths`` entry as the reads give it, its pith_number first, or ``store.corrupted``
    naming what is damaged: read as it was, a damaged entry was a traceback (a TypeError
    or a KeyError) of ``stats``, ``piths`` and ``pending``."""
    pith = key.decode("ascii", "replace")  # a key not ASCII is itself damage, said here
    summary = stored_summary(raw, pith)
    if not pith.isascii():
        raise StoreError("corrupted", f"the index of {shown(pith)} is damaged (a piths key "
                         "is not ASCII); run `pithlog replay --verify`")  # fmt: skip
    return {"pith_number": pith, **summary}


def status(txn: Txn, dbs: dict[str, Any], pith_number: str) -> dict[str, Any] | None:
    """:meth:`Store.status` in its read transaction."""
    key = pith_number.encode("ascii")
    raw = txn.get(key, db=dbs["piths"])
    return None if raw is None else _summary(key, raw)


def piths(txn: Txn, dbs: dict[str, Any]) -> list[dict[str, Any]]:
    """:meth:`Store.piths` in its read transaction."""
    return [_summary(key, raw) for key, raw in txn.cursor(db=dbs["piths"])]


def pith_totals(txn: Txn, dbs: dict[str, Any]) -> dict[str, int]:
    """:meth:`Store.pith_totals` in its read transaction: summed as the summaries are read,
    none kept (a list of them is about 540 bytes a pith: 540 MB for a million)."""
    out = {"piths": 0, "pending": 0, "events": 0, "invalid": 0, "equivocations": 0}
    for key, raw in txn.cursor(db=dbs["piths"]):
        pith = _summary(key, raw)
        out["piths" if pith["status"] == "state" else "pending"] += 1
        out["events"] += pith.get("event_count", 0)
        out["invalid"] += pith.get("invalid_event_count", 0)
        out["equivocations"] += pith.get("equivocation_count", 0)
    return out


R = TypeVar("R")


def _in_chunks(
    store: Store,
    chunk: int,
    read: Callable[[Txn, dict[str, Any], Any], list[R]],
    first: Any,
    after: Callable[[R], Any],
) -> Iterator[R]:
    """The rows ``read(txn, dbs, start)`` gives, each chunk of ``chunk`` read in a short
    transaction of its own (an old snapshot is not pinned for a whole walk), from ``first``
    and then from ``after(the last row read)``, until a chunk comes back short."""
    start = first
    while True:

        def work(txn: Txn, dbs: dict[str, Any], at: Any = start) -> list[R]:
            return read(txn, dbs, at)

        rows = store._read(work)
        yield from rows
        if len(rows) < chunk:
            return
        start = after(rows[-1])


def each_pith(store: Store, chunk: int) -> Iterator[dict[str, Any]]:
    """:meth:`Store.each_pith`: each chunk of ``chunk`` summaries read in a transaction of
    its own, after the last pith number of the one before."""

    def read(txn: Txn, dbs: dict[str, Any], start: bytes | None) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        cursor = txn.cursor(db=dbs["piths"])
        # keys are pith numbers (ASCII): the next one after ``start`` sorts after
        # ``start + b"\x00"``
        if not (cursor.first() if start is None else cursor.set_range(start + b"\x00")):
            return out
        for key, raw in cursor:
            out.append(_summary(key, raw))
            if len(out) >= chunk:
                break
        return out

    return _in_chunks(store, chunk, read, None,
                      lambda row: row["pith_number"].encode("ascii"))  # fmt: skip


def export(store: Store, after: int, chunk: int) -> Iterator[tuple[int, bytes]]:
    """:meth:`Store.export`: each chunk of ``chunk`` copies read in a transaction of its
    own."""
    position = max(after, 0) + 1
    if position >= 1 << (8 * SEQ.size):
        # past any sequence number a store can hold (and past what SEQ can pack)
        return iter(())

    def read(txn: Txn, dbs: dict[str, Any], start: int) -> list[tuple[int, bytes]]:
        out: list[tuple[int, bytes]] = []
        cursor = txn.cursor(db=dbs["seq"])
        if not cursor.set_range(SEQ.pack(start)):
            return out
        for key, value in cursor:
            if len(key) != SEQ.size:
                # a damaged key sorts among the sequence numbers: no struct.error from it
                raise StoreError("corrupted", f"seq key {key.hex()} is not an 8-byte sequence "
                                 "number; run `pithlog replay --verify`")  # fmt: skip
            data = stored_copy(txn, dbs, key)
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

    return _in_chunks(store, chunk, read, position, lambda row: row[0] + 1)


def _piths_counted(shared: SharedEnvironment, txn: Txn, piths: Any) -> tuple[int, int]:
    """The piths with a state and the pending ones, in the snapshot of ``txn``: a scan of
    every pith (about 0.15 s for 100,000), so the count is kept with the snapshot's id and
    read again only once a commit made a new one (``/stats`` on a server is anyone's to
    ask, as often as they like)."""
    snapshot = txn.id()
    counted = shared.piths_counted
    if counted is not None and counted[0] == snapshot:
        return counted[1], counted[2]
    states = pending = 0
    for key, raw in txn.cursor(db=piths):
        if _summary(key, raw)["status"] == "state":
            states += 1
        else:
            pending += 1
    shared.piths_counted = (snapshot, states, pending)
    return states, pending


def stats(store: Store) -> dict[str, Any]:
    """:meth:`Store.stats`: the counts of one read transaction, then the map's use and the
    data file's size."""
    shared = store._env

    def work(txn: Txn, dbs: dict[str, Any]) -> dict[str, Any]:
        counts = {name: txn.stat(dbs[name])["entries"] for name in DB_NAMES}
        pages = {}
        for name in DB_NAMES:
            st = txn.stat(dbs[name])
            pages[name] = {k: st[f"{k}_pages"] for k in ("branch", "leaf", "overflow")}
        states, pending = _piths_counted(shared, txn, dbs["piths"])
        kd = txn.get(META_KEYRING, db=dbs["meta"])
        target = txn.get(META_REKEY_TARGET, db=dbs["meta"])
        next_seq = txn.get(META_NEXT_SEQ, db=dbs["meta"])
        if next_seq is not None and len(next_seq) != SEQ.size:
            # as a damaged piths entry is (_summary): an error, never a struct.error
            raise StoreError("corrupted", f"meta next_seq is {len(next_seq)} bytes, not an "
                             "8-byte counter; run `pithlog replay --verify`")  # fmt: skip
        return {
            "counts": counts,
            "pages": pages,
            "piths_with_state": states,
            "piths_pending": pending,
            "keyring_digest": None if kd is None else kd.hex(),
            # a keyring change under way (pithlog rekey): the digest it goes to
            "rekey_target": None if target is None else sha256(target).hexdigest(),
            "next_seq": None if next_seq is None else SEQ.unpack(next_seq)[0],
        }

    out = store._read(work)
    usage = shared.usage()
    data_file = Path(shared.path) / "data.mdb"
    out.update(
        {
            "path": shared.path,
            "format": FORMAT_VERSION.decode(),
            "merge_version": MERGE_VERSION,
            **usage,
            "map_use": round(usage["map_used"] / usage["map_size"], 4),
            "file_size": data_file.stat().st_size if data_file.exists() else 0,
        }
    )
    return out
