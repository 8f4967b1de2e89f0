"""Format 5 -> 6 (``docs/store.md``, "Format 5 to 6"): every copy moved from ``events`` and
``evidence`` into ``copies`` under its sequence number, ``events`` and ``evidence`` left
holding that number, ``by_key`` built again with that number, ``slots`` rewritten in
binary and ``merkle`` keyed in append order (``copy_seq``, which the pointers replace, is
deleted on open: :data:`pithlog.store.environment_files.LEGACY_DBS`).

The step runs in write transactions of at most :data:`MIGRATE_CHUNK` entries each, from a
cursor in ``meta`` (:data:`META_MIGRATING`), so a store of any size migrates within LMDB's
transaction limit and a crash resumes where the last commit left it. The first transaction
sets the cursor (:func:`start`), and the same transaction records format 7 with the
cursor of the step that follows this one (:func:`pithlog.store.format7.start`): a pithlog
of format 5 then refuses the
store (``store.format``) rather than read pointers as copies, and a read-only open refuses
it (``store.upgrade``) until a writable open has finished the steps
(:func:`pithlog.store.environment._open_lmdb` runs them before it returns).

This module does not import :mod:`lmdb`; it works on a transaction the store opens.
"""

from __future__ import annotations

from typing import Any

import msgspec

from pithlog.store import aliases, codec, tree
from pithlog.store.keyindex import index_stored
from pithlog.store.layout import (
    META_MERKLE_SIZE,
    META_REKEY_CURSOR,
    SEQ,
    Txn,
    eid_bytes,
    put_in_order,
)
from pithlog.store.stateindex import slot_value

META_MIGRATING = b"format6_from"
"""``meta`` key while a store is being brought to format 6: the phase (1 byte: 0 the copies,
in ``seq`` order; 1 the slots; 2 the Merkle tree) + the last key done in it (empty: none
yet; in phase 2, ``0x01`` once the old tree is dropped)."""

MIGRATE_CHUNK = 10_000
"""Entries moved or rewritten per write transaction of the migration."""

_OLD_TAGS = (codec.RAW, codec.PLAIN, codec.DICT)
"""The first bytes of a format-5 value of ``events``, ``evidence`` (a packed copy) and
``slots`` (a packed JSON object); a format-6 pointer is 8 bytes, a format-6 slots value
begins with a created_at (an ASCII digit)."""


def start(txn: Txn, dbs: dict[str, Any]) -> None:
    """In the transaction that migrates a store to format 5 (or opens a format-5 one):
    set the cursor of :func:`step` and empty ``by_key``, which the step fills again in its
    new form (:func:`pithlog.store.format7.start`, in the same transaction, records the
    format). A format-3 store whose copies format 5 was still packing
    (``compress_from``) needs that no more: :func:`step` packs what it moves."""
    txn.put(META_MIGRATING, b"\x00", db=dbs["meta"])
    txn.delete(codec.META_MIGRATING, db=dbs["meta"])
    # by_key named a copy by event_id + copy hash: emptied (LMDB frees its pages without
    # reading each entry) and filled again as the copies move; a keyring change under way
    # starts its walk of by_key again (the copies it judged keep their verdicts)
    txn.drop(dbs["by_key"], delete=False)
    txn.delete(META_REKEY_CURSOR, db=dbs["meta"])


def migrating(txn: Txn, dbs: dict[str, Any]) -> bool:
    return txn.get(META_MIGRATING, db=dbs["meta"]) is not None


def step(txn: Txn, dbs: dict[str, Any], limit: int | None = None) -> bool:
    """Move or rewrite up to ``limit`` entries from the cursor in ``meta``; ``True`` while
    there is more to do. The last step rebuilds the alias index (a format-2 store's is
    built here, from the chosen records in their new place) and deletes the cursor."""
    raw = txn.get(META_MIGRATING, db=dbs["meta"])
    if raw is None:
        return False
    phase, after = raw[0], raw[1:]
    limit = MIGRATE_CHUNK if limit is None else limit
    if phase == 2:
        return _rebuild_tree(txn, dbs, after, limit)
    name = "seq" if phase == 0 else "slots"
    cursor = txn.cursor(db=dbs[name])
    found = cursor.set_range(after + b"\x00") if after else cursor.first()
    batch: list[tuple[bytes, bytes]] = []
    while found and len(batch) < limit:
        batch.append(cursor.item())
        found = cursor.next()
    if phase == 0:
        pack = codec.packer(txn, dbs)
        for key, value in batch:
            _move_copy(txn, dbs, key, value, pack)
    else:
        for key, value in batch:
            _rewrite_slot(txn, dbs, key, value)
    if found:
        txn.put(META_MIGRATING, bytes([phase]) + batch[-1][0], db=dbs["meta"])
        return True
    txn.put(META_MIGRATING, bytes([phase + 1]), db=dbs["meta"])
    return True


def _rebuild_tree(txn: Txn, dbs: dict[str, Any], after: bytes, limit: int) -> bool:
    """Phase 2: ``merkle`` keyed anew (:func:`pithlog.store.tree.node_key`): the old tree
    dropped (LMDB frees its pages without a write per entry), then rebuilt from ``seq``,
    ``limit`` leaves a transaction (the hashes are those the store had: the leaves do not
    change). The last step builds the alias index and ends the migration."""
    if not after:
        txn.drop(dbs["merkle"], delete=False)
        txn.delete(META_MERKLE_SIZE, db=dbs["meta"])
        txn.put(META_MIGRATING, b"\x02\x01", db=dbs["meta"])
        return True
    size = tree.merkle_sync(txn, dbs, limit=limit, by_copy=False)
    if txn.get(SEQ.pack(size + 1), db=dbs["seq"]) is not None:
        return True
    aliases.rebuild_aliases(txn, dbs)
    txn.delete(META_MIGRATING, db=dbs["meta"])
    return False


def _move_copy(txn: Txn, dbs: dict[str, Any], key: bytes, target: bytes, pack: Any) -> None:
    """The copy that the ``seq`` entry ``key`` names (``target``: event_id + copy hash) to
    ``copies`` under ``key``, and its pointer in its place. In format 5 a logged copy is
    either evidence (``evidence`` holds it under ``target``) or the preferred copy of its
    event_id, so no copy is unpacked to tell which. A copy stored raw (a format-3 store's)
    is packed on the way. A seq entry naming nothing is left for replay to report."""
    if len(key) != SEQ.size or len(target) != 64:
        return
    where, db_key = "evidence", target
    stored = txn.get(target, db=dbs["evidence"])
    if stored is None:
        where, db_key = "events", target[:32]
        stored = txn.get(db_key, db=dbs["events"])
    if stored is None or stored[:1] not in _OLD_TAGS or len(stored) == SEQ.size:
        return
    data = codec.readable(txn, dbs, stored)
    if stored[:1] == codec.RAW:
        stored = pack(stored)
    put_in_order(txn, dbs["copies"], key, stored, "copies")
    txn.put(db_key, key, db=dbs[where])
    index_stored(txn, dbs, key, data)


def _rewrite_slot(txn: Txn, dbs: dict[str, Any], key: bytes, stored: bytes) -> None:
    """A format-5 ``slots`` value (JCS ``{"members": [[created_at, event_id], ...], "slot":
    ...}``, packed) in binary; a value that does not decode is left for replay to report."""
    if stored[:1] not in _OLD_TAGS:
        return
    try:
        entry = msgspec.json.decode(codec.unpack(txn, dbs, stored))
        members = [(m[0].encode("ascii"), eid_bytes(m[1])) for m in entry["members"]]
    except (codec.CorruptCopy, msgspec.MsgspecError, ValueError, TypeError, KeyError,
            IndexError, AttributeError):  # fmt: skip
        return
    txn.put(key, slot_value(members), db=dbs["slots"])
