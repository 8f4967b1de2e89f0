"""The on-disk layout of a store (``docs/store.md`` describes it byte for byte): database
names, meta keys, the small codecs of keys and values, and the reads of an open transaction
that the store, its reduction index (:mod:`pithlog.store.stateindex`), its Merkle tree
(:mod:`pithlog.store.tree`) and replay (:mod:`pithlog.store.replay`) share.

These modules work on a transaction the store opens; they do not import :mod:`lmdb`
(only the environment modules do, :mod:`pithlog.store.environment` and those beside it):
:class:`Txn` is what they use of one.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Literal, Protocol

import msgspec

from pithlog.errors import StoreError
from pithlog.protocol.checks import CHECK_NUMBER
from pithlog.protocol.reduce import Judged
from pithlog.store.codec import unpack

FORMAT_VERSION = b"7"
"""``meta[format]``: the layout of ``docs/store.md`` (format 7: ``verdicts`` keyed by the copy's
sequence number; every copy in ``copies`` under its sequence number since format 6,
``events`` and ``evidence`` pointing at it, ``slots`` in binary; verdicts per key entry
since format 5, copies packed by :mod:`pithlog.store.codec` since format 4)."""

FORMAT_6 = b"6"
"""Verdicts keyed by the copy's hash: keyed anew on a writable open, in bounded
transactions (:mod:`pithlog.store.format7`)."""

FORMAT_5 = b"5"
"""Copies held in ``events`` and ``evidence`` themselves, ``slots`` as packed JSON: migrated to
format 6 on a writable open, in bounded transactions (:mod:`pithlog.store.format6`)."""

FORMAT_4 = b"4"
"""Verdicts under the digest of the whole keyring: brought to format 5 on a writable open
(:func:`pithlog.store.keyindex.migrate_3_to_5` keeps them as legacy verdicts), then on."""

FORMAT_3 = b"3"
"""Copies stored as their JCS bytes; migrated on a writable open: the dictionary trained
(:func:`pithlog.store.codec.start_migration`), then on; the copies are packed as the
5 -> 6 step moves them (:mod:`pithlog.store.format6`)."""

FORMAT_2 = b"2"
"""Leaves of the event_id alone, no ``by_copy``, no ``aliases``: brought to format 3 in one
write transaction (:func:`pithlog.store.tree.migrate_leaf_data` rebuilds ``merkle`` and builds
``by_copy``), then on; the last transaction of the 5 -> 6 step builds the alias index."""

MIGRATES_FROM = (FORMAT_2, FORMAT_3, FORMAT_4, FORMAT_5, FORMAT_6)
"""The formats a store is migrated from on a writable open, step by step: up to format 5 in
one write transaction, then 5 -> 6 and 6 -> 7 in transactions of a bounded size
(:func:`pithlog.store.environment_files._migrate`; ``docs/store.md``)."""

DB_NAMES = (
    "events",
    "evidence",
    "by_pith",
    "seq",
    "piths",
    "applied",
    "slots",
    "equivocated",
    "invalid",
    "verdicts",
    "meta",
    "merkle",
    "by_copy",
    "aliases",
    "dicts",
    "by_key",
    "rekey",
    "copies",
)
INDEX_DBS = ("applied", "slots", "equivocated", "invalid")
"""The per-pith reduction index: a pith's state document is assembled from it on read."""

META_FORMAT = b"format"
META_MERGE = b"merge_version"
META_KEYRING = b"keyring_digest"
META_NEXT_SEQ = b"next_seq"
META_MERKLE_SIZE = b"merkle_size"
META_KEYRING_ENTRIES = b"keyring"
"""JCS of the keyring's meaning (``{"keyring_version": "1", "keys": [...]}``, keys sorted by
key_id): the bytes whose SHA-256 is ``keyring_digest``, so that a keyring change can be
diffed key by key (:mod:`pithlog.store.rekey`)."""
META_LEGACY_KEYRING = b"legacy_keyring_digest"
"""A store migrated from format 3 keeps its verdicts under this keyring digest until they
are judged again per key entry (:func:`pithlog.store.keyindex.cached_verdict`)."""
META_REKEY_TARGET = b"rekey_target"
META_REKEY_KEYS = b"rekey_keys"
META_REKEY_CURSOR = b"rekey_cursor"
META_REKEY_JUDGED = b"rekey_judged"

VALID = b"valid"
"""The verdict value of a copy that passes checks 1-12 (otherwise: its reason code)."""

PITH_BYTES = 36
"""``pith:YYYY:`` + 26 base32 characters, ASCII."""

SEQ = struct.Struct(">Q")


# --- what the modules beside the store use of an LMDB transaction -------------------------


class Cursor(Protocol):
    """The part of ``lmdb.Cursor`` used outside the environment modules."""

    def __iter__(self) -> Iterator[tuple[bytes, bytes]]: ...
    def key(self) -> bytes: ...
    def value(self) -> bytes: ...
    def item(self) -> tuple[bytes, bytes]: ...
    def first(self) -> bool: ...
    def last(self) -> bool: ...
    def next(self) -> bool: ...
    def set_range(self, key: bytes, /) -> bool: ...
    def delete(self) -> bool: ...
    def iternext(
        self, keys: Literal[True] = True, *, values: Literal[False]
    ) -> Iterator[bytes]: ...


class Txn(Protocol):
    """The part of ``lmdb.Transaction`` used outside the environment modules;
    ``db`` is one of the store's named databases (the ``dbs`` dict, keyed by
    :data:`DB_NAMES`)."""

    def get(self, key: bytes, default: None = None, db: Any = None) -> bytes | None: ...
    def put(self, key: bytes, value: bytes, *, db: Any = None, append: bool = False) -> bool: ...
    def delete(self, key: bytes, *, db: Any = None) -> bool: ...
    def cursor(self, db: Any = None) -> Cursor: ...
    def drop(self, db: Any, delete: bool = True) -> None: ...
    def stat(self, db: Any = None) -> Mapping[str, Any]: ...
    def id(self) -> int: ...


# --- small codecs -------------------------------------------------------------------------


def eid_bytes(event_id: str) -> bytes:
    return bytes.fromhex(event_id[len("sha256:") :])


def eid_str(raw: bytes) -> str:
    return "sha256:" + raw.hex()


def copy_hash(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def verdict_bytes(reason: str | None) -> bytes:
    return VALID if reason is None else reason.encode("ascii")


def verdict_of(raw: bytes) -> str | None:
    if raw == VALID:
        return None
    reason = raw.decode("ascii", "replace")
    if reason not in CHECK_NUMBER:
        raise ValueError(f"not a verdict: {raw!r}")
    return reason


def is_verdict(raw: bytes) -> bool:
    """Whether a ``verdicts`` value is one :func:`verdict_of` reads (not damaged)."""
    return raw == VALID or raw.decode("ascii", "replace") in CHECK_NUMBER


class Ids(msgspec.Struct):
    event_id: str
    pith_number: str


_IDS = msgspec.json.Decoder(Ids)


def decode_ids(data: bytes) -> Ids | None:
    """``event_id`` and ``pith_number`` of stored bytes, or ``None`` when they do not decode."""
    try:
        return _IDS.decode(data)
    except (msgspec.MsgspecError, ValueError):
        return None


def why(winner: Judged, loser: Judged) -> str:
    """Why section 7 step 0 prefers ``winner`` to ``loser``, in words."""
    if winner.reason is None and loser.reason is not None:
        return f"passes checks 1-12; the other copy fails ({loser.reason})"
    if winner.reason is not None and loser.reason is not None and winner.reason != loser.reason:
        return (
            f"fails at a later check ({winner.reason}, check {CHECK_NUMBER[winner.reason]}) "
            f"than the other copy ({loser.reason}, check {CHECK_NUMBER[loser.reason]})"
        )
    state = "both pass checks 1-12" if winner.reason is None else f"both fail ({winner.reason})"
    return f"{state}; its JCS encoding is the smaller byte string"


# --- reads of an open transaction ---------------------------------------------------------


Unpack = Callable[[Txn, dict[str, Any], bytes], bytes]
"""How a stored value becomes a copy's JCS bytes (:func:`pithlog.store.codec.unpack`; replay
reads with :func:`pithlog.store.codec.readable`)."""

# Format 6: every stored copy is a value of ``copies`` under its sequence number (written in
# append order, so its pages fill as ``seq``'s do); ``events`` holds, per event_id, the
# sequence number of its preferred copy, and ``evidence``, per event_id + copy hash, that of
# every other copy (8 bytes big-endian each). Preferring another copy swaps two pointers.


def stored_copy(
    txn: Txn, dbs: dict[str, Any], pointer: bytes, read: Unpack = unpack
) -> bytes | None:
    """The JCS bytes of the copy in ``copies`` under ``pointer`` (a sequence number, 8
    bytes), or ``None``."""
    stored = txn.get(pointer, db=dbs["copies"]) if len(pointer) == SEQ.size else None
    return None if stored is None else read(txn, dbs, stored)


def event_copy(txn: Txn, dbs: dict[str, Any], eid: bytes, read: Unpack = unpack) -> bytes | None:
    """The JCS bytes of the preferred copy of the raw event_id ``eid``, or ``None``."""
    pointer = txn.get(eid, db=dbs["events"])
    return None if pointer is None else stored_copy(txn, dbs, pointer, read)


def copy_pointer(txn: Txn, dbs: dict[str, Any], target: bytes) -> bytes | None:
    """The sequence number (8 bytes) of the stored copy a ``seq`` value (event_id + copy
    hash) names, from the pointers of ``events`` and ``evidence``, or ``None`` when the
    store holds no such copy. Which copy a pointer names is read from ``seq``, so no copy
    is unpacked or hashed."""
    if len(target) != 64:
        return None
    pointer = txn.get(target[:32], db=dbs["events"])
    # a damaged pointer of another length names no copy (and LMDB refuses an empty key)
    if pointer is not None and len(pointer) == SEQ.size and txn.get(
            pointer, db=dbs["seq"]) == target:  # fmt: skip
        return pointer
    return txn.get(target, db=dbs["evidence"])


def prefer(txn: Txn, dbs: dict[str, Any], eid: bytes, held_h: bytes, new_h: bytes) -> None:
    """Make the evidence copy ``new_h`` of the raw event_id ``eid`` its preferred copy, and
    the preferred copy ``held_h`` evidence (spec 7 step 0): the two pointers swap, the copies
    stay where they are stored."""
    held = txn.get(eid, db=dbs["events"])
    new = txn.get(eid + new_h, db=dbs["evidence"])
    if held is None or new is None:
        raise StoreError("corrupted", f"{eid_str(eid)} has no pointer to the copy to swap; "
                         "run `pithlog replay --verify`")  # fmt: skip
    txn.put(eid, new, db=dbs["events"])
    txn.delete(eid + new_h, db=dbs["evidence"])
    txn.put(eid + held_h, held, db=dbs["evidence"])


def put_in_order(txn: Txn, db: Any, key: bytes, value: bytes, name: str) -> None:
    """Put an entry whose key is above every key of ``db`` (``seq``, ``copies``: sequence
    numbers only grow) with LMDB's append mode: no search, and pages filled whole. A key that
    is not above the last one (a damaged ``meta`` ``next_seq``) is refused
    (``store.corrupted``), never written elsewhere."""
    if not txn.put(key, value, db=db, append=True):
        raise StoreError("corrupted", f"{name} already holds a key at or after "
                         f"{key.hex()}: meta next_seq is behind; run "
                         "`pithlog replay --verify`")  # fmt: skip


def prefixed(
    txn: Txn, db: Any, prefix: bytes, *, delete: bool = False
) -> Iterator[tuple[bytes, bytes]]:
    """Every entry of ``db`` whose key starts with ``prefix``, as ``(key, value)`` in key
    order: one seek to the first key at or after ``prefix``, then a walk that stops at the
    first key without it. With ``delete``, each entry is deleted once yielded (the cursor
    deletes in place, no second seek). The one prefix scan of the store's indexes (every
    key of a pith, every copy of an event_id)."""
    cursor = txn.cursor(db=db)
    found = cursor.set_range(prefix)
    while found:
        key = cursor.key()
        if not key.startswith(prefix):
            return
        yield key, cursor.value()
        found = cursor.delete() if delete else cursor.next()


def evidence_of(
    txn: Txn, dbs: dict[str, Any], eid: bytes, read: Unpack = unpack
) -> list[tuple[bytes, bytes, bytes]]:
    """``(event_id + copy hash, pointer, copy)`` of every evidence copy of the raw event_id
    ``eid`` (its sequence number and JCS bytes); a pointer naming no copy is left out
    (replay reports it)."""
    out = []
    for key, pointer in prefixed(txn, dbs["evidence"], eid):
        data = stored_copy(txn, dbs, pointer, read)
        if data is not None:
            out.append((key, pointer, data))
    return out


def pith_eids(txn: Txn, dbs: dict[str, Any], pith: str) -> list[bytes]:
    """The raw event_ids ``by_pith`` lists under ``pith``, in order. A damaged key whose
    tail is not 32 bytes names no event and is left out (replay's structure pass reports
    it): looked up, an empty one is a key LMDB refuses (``MDB_BAD_VALSIZE``)."""
    prefix = pith.encode("ascii")
    n = len(prefix)
    return [key[n:] for key, _ in prefixed(txn, dbs["by_pith"], prefix) if len(key) == n + 32]


def distinct_piths(txn: Txn, dbs: dict[str, Any]) -> list[str]:
    """Every pith with at least one entry in ``by_pith``, in order (one seek per pith)."""
    out: list[str] = []
    cursor = txn.cursor(db=dbs["by_pith"])
    found = cursor.first()
    while found:
        key = cursor.key()
        prefix = key[:PITH_BYTES]
        out.append(prefix.decode("ascii", "replace"))
        found = cursor.set_range(prefix + b"\xff" * 33)
    return out
