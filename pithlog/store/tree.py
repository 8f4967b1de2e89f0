"""The storage of the Merkle tree over a store's append sequence (``docs/store.md``,
``docs/transparency.md``): its subtree hashes and ``by_copy``, read, extended as appends
add ``seq`` entries, and checked by replay. :mod:`pithlog.transparency.merkle` is the arithmetic.

Functions over an open transaction (:class:`pithlog.store.layout.Txn`) and the store's named
databases (``dbs``); :mod:`pithlog.store` opens the transactions.
"""

from __future__ import annotations

import struct
from typing import Any

from pithlog.errors import StoreError, register
from pithlog.store.arguments import require_tree_int
from pithlog.store.codec import unpack
from pithlog.store.layout import (
    FORMAT_3,
    META_FORMAT,
    META_MERKLE_SIZE,
    SEQ,
    Txn,
    copy_pointer,
    eid_str,
    prefixed,
    stored_copy,
)
from pithlog.store.replay_report import Discrepancy
from pithlog.transparency import merkle

# --- the Merkle tree over the append sequence ---------------------------------------------
# RFC 9162 section 2.1 over the append sequence: leaf i (from 0) is seq i + 1; its leaf data
# is the seq value, event_id (32 raw bytes) || SHA-256(the copy's JCS bytes) (the 64-byte
# item sync reconciles), its leaf hash SHA-256(0x00 || leaf data). The leaf commits to the
# exact bytes of one copy, signature included, so a checkpoint pins which copy was logged
# (format 3; format 2 hashed the event_id alone: migrate_leaf_data).
#   merkle    last leaf (8 bytes big-endian) + level (1 byte, >= 1) -> the 32-byte hash of
#             the perfect subtree of leaves [index * 2**level, (index + 1) * 2**level) (its
#             last leaf is (index + 1) * 2**level - 1), for every such subtree that is
#             complete: keys in the order appends complete them (node_key). Level 0 (the
#             leaf hashes) comes from seq.
#   by_copy   copy hash (32) -> seq (8 bytes big-endian): a copy found by its SHA-256 alone
#             (what a mirror asks for, `GET /copy/<hex>`).
# meta merkle_size: how many seq entries the two cover. Appends extend them in their own
# transaction (merkle_sync); opening a store catches up a store written without them.
# The leaves of one event and the items of sync (event_id + copy hash -> seq) are the
# pointers of events and evidence (format 6; formats 2-5 kept them in copy_seq too).

register({
    "store.tree_size": "a tree size or leaf index that is not an int, or beyond the store's "
    "log: `pithlog stats` shows next_seq, and the log holds next_seq - 1 leaves",
})  # fmt: skip

_NODE = struct.Struct(">QB")


def node_key(level: int, index: int) -> bytes:
    """The ``merkle`` key of the perfect subtree of leaves ``[index * 2**level, (index + 1) *
    2**level)``: its last leaf (8 bytes big-endian) + its level (1 byte), the order in which
    appends complete subtrees (leaf k completes levels 1, 2, ... at once), so keys only grow
    and pages fill as ``seq``'s do (format 6; formats 2-5 keyed level + index, which put
    every new hash of a level before those of the next level and split pages in half)."""
    return _NODE.pack(((index + 1) << level) - 1, level)


def merkle_size(txn: Txn, dbs: dict[str, Any]) -> int:
    raw = txn.get(META_MERKLE_SIZE, db=dbs["meta"])
    return SEQ.unpack(raw)[0] if raw is not None and len(raw) == SEQ.size else 0


def tree_size_arg(txn: Txn, dbs: dict[str, Any], size: int | None) -> int:
    current = merkle_size(txn, dbs)
    if size is None:
        return current
    require_tree_int(size, "tree size")
    if not 0 <= size <= current:
        raise StoreError("tree_size", f"tree size {size} is not between 0 and the store's "
                         f"{current}")  # fmt: skip
    return size


def _perfect(txn: Txn, dbs: dict[str, Any]) -> merkle.PerfectHash:
    """``perfect(level, index)`` from ``seq`` (level 0) and ``merkle``."""

    def perfect(level: int, index: int) -> bytes:
        if level == 0:
            value = txn.get(SEQ.pack(index + 1), db=dbs["seq"])
            if value is None or len(value) != 64:
                raise StoreError("corrupted", f"seq {index + 1} is missing or damaged; run "
                                 "`pithlog replay --verify`")  # fmt: skip
            return merkle.leaf_hash(value)
        value = txn.get(node_key(level, index), db=dbs["merkle"])
        if value is None or len(value) != merkle.HASH_SIZE:
            raise StoreError("corrupted", f"merkle node {level}/{index} is missing or damaged; "
                             "run `pithlog replay --verify`")  # fmt: skip
        return value

    return perfect


def subtree(txn: Txn, dbs: dict[str, Any]) -> merkle.SubtreeHash:
    return merkle.subtree_from_perfect(_perfect(txn, dbs))


def merkle_sync(
    txn: Txn, dbs: dict[str, Any], limit: int | None = None, by_copy: bool = True
) -> int:
    """Extend ``merkle`` and ``by_copy`` over the seq entries they do not cover yet (those
    of this transaction's append; all of them for a store written without them), at most
    ``limit`` of them; without ``by_copy``, ``by_copy`` is left as it is (a tree rebuilt
    over a ``seq`` it already inverts). Stops at the first missing sequence number: a
    damaged seq is replay's to report. Returns the size the tree covers."""
    raw = txn.get(META_MERKLE_SIZE, db=dbs["meta"])
    size = start = merkle_size(txn, dbs)
    stored = _perfect(txn, dbs)
    # The last hash this sync made at each level: a new leaf's left siblings are those
    # (once the sync has made one at their level), so they are neither read back nor (a
    # leaf) hashed again; one per level, however many leaves a sync adds.
    made: dict[int, tuple[int, bytes]] = {}

    def perfect(level: int, index: int) -> bytes:
        found = made.get(level)
        return found[1] if found is not None and found[0] == index else stored(level, index)

    while limit is None or size - start < limit:
        value = txn.get(SEQ.pack(size + 1), db=dbs["seq"])
        if value is None or len(value) != 64:
            break
        leaf = merkle.leaf_hash(value)
        # all of them before the frontier moves: each asks for its left sibling there
        completed = list(merkle.completed_subtrees(size, leaf, perfect))
        made[0] = (size, leaf)
        for level, index, node in completed:
            # keys only grow here, but a plain put: a tree caught up after damage may
            # write a hash below one that is left
            txn.put(node_key(level, index), node, db=dbs["merkle"])
            made[level] = (index, node)
        if by_copy:
            txn.put(value[32:], SEQ.pack(size + 1), db=dbs["by_copy"])
        size += 1
    if raw is None or size != start:
        txn.put(META_MERKLE_SIZE, SEQ.pack(size), db=dbs["meta"])
    return size


def migrate_leaf_data(txn: Txn, dbs: dict[str, Any]) -> bytes:
    """Format 2 -> 3 (``docs/store.md``): format 2 hashed only the event_id into a leaf, so
    every stored subtree hash is of another tree. Drop them all and rebuild ``merkle`` from
    ``seq`` with the 64-byte leaf data (and ``by_copy``, new in format 3); ``seq`` does not
    change. Run in the
    write transaction that also records the new format, so a store is either format 2 with
    its old tree or format 3 with the new one. Returns the format it leaves."""
    cursor = txn.cursor(db=dbs["merkle"])
    while cursor.first():
        cursor.delete()
    txn.delete(META_MERKLE_SIZE, db=dbs["meta"])
    txn.put(META_FORMAT, FORMAT_3, db=dbs["meta"])
    merkle_sync(txn, dbs)
    return FORMAT_3


# --- reads: roots, proofs, the copies of sync ---------------------------------------------


def tree_root(txn: Txn, dbs: dict[str, Any], size: int | None) -> tuple[int, bytes]:
    """What :meth:`pithlog.store.Store.tree_root` returns."""
    n = tree_size_arg(txn, dbs, size)
    return n, merkle.root(n, subtree(txn, dbs))


def leaves_of(txn: Txn, dbs: dict[str, Any], eid: bytes) -> list[tuple[int, bytes]]:
    """What :meth:`pithlog.store.Store.leaves_of` returns, for the raw event_id ``eid``: the
    sequence numbers the pointers of ``events`` and ``evidence`` hold."""
    found: list[tuple[int, bytes]] = []
    pointer = txn.get(eid, db=dbs["events"])
    if pointer is not None and len(pointer) == SEQ.size:
        named = txn.get(pointer, db=dbs["seq"])
        if named is not None and named[:32] == eid and len(named) == 64:
            found.append((SEQ.unpack(pointer)[0] - 1, named[32:]))
    for key, other in prefixed(txn, dbs["evidence"], eid):
        if len(other) == SEQ.size:
            found.append((SEQ.unpack(other)[0] - 1, key[32:]))
    return sorted(found)


def inclusion_path(
    txn: Txn, dbs: dict[str, Any], index: int, size: int | None
) -> tuple[int, list[bytes]]:
    """What :meth:`pithlog.store.Store.inclusion_path` returns."""
    n = tree_size_arg(txn, dbs, size)
    require_tree_int(index, "leaf index")
    if not 0 <= index < n:
        raise StoreError("tree_size", f"leaf {index} is not in the tree of {n} leaves")
    return n, merkle.inclusion_path(index, n, subtree(txn, dbs))


def consistency_path(
    txn: Txn, dbs: dict[str, Any], old: int, new: int | None
) -> tuple[int, list[bytes]]:
    """What :meth:`pithlog.store.Store.consistency_path` returns."""
    n = tree_size_arg(txn, dbs, new)
    require_tree_int(old, "old size")
    if not 0 <= old <= n:
        # n may be the NEW asked for, not the store's size: say which it is
        raise StoreError("tree_size", f"old size {old} is not between 0 and the new size {n}")
    return n, merkle.consistency_path(old, n, subtree(txn, dbs))


def copy_seqs(txn: Txn, dbs: dict[str, Any], wanted: list[bytes]) -> list[int | None]:
    """What :meth:`pithlog.store.Store.copy_seqs` returns."""
    raw = [copy_pointer(txn, dbs, key) for key in wanted]
    return [None if r is None or len(r) != SEQ.size else SEQ.unpack(r)[0] for r in raw]


def copy_keys(txn: Txn, dbs: dict[str, Any]) -> list[bytes]:
    """What :meth:`pithlog.store.Store.copy_keys` returns: event_id + copy hash of every
    stored copy, in that byte order."""
    keys = []
    for eid, pointer in txn.cursor(db=dbs["events"]):
        named = txn.get(pointer, db=dbs["seq"])
        if named is not None and named[:32] == eid:
            keys.append(named)
    keys.extend(txn.cursor(db=dbs["evidence"]).iternext(values=False))
    keys.sort()
    return keys


def copies(txn: Txn, dbs: dict[str, Any], wanted: list[bytes]) -> list[tuple[int, bytes]]:
    """What :meth:`pithlog.store.Store.copies` returns."""
    out: list[tuple[int, bytes]] = []
    for key in wanted:
        pointer = copy_pointer(txn, dbs, key)
        data = stored_copy(txn, dbs, pointer) if pointer is not None else None
        if pointer is not None and data is not None:
            out.append((SEQ.unpack(pointer)[0], data))
    out.sort()
    return out


# --- reads by leaf range: tiles, bundles, copies (docs/network.md) ----------------------


def tile_hashes(txn: Txn, dbs: dict[str, Any], level: int, first: int, count: int) -> bytes:
    """The hashes of Merkle level ``level`` (0 or a multiple of 8 for tiles), indexes
    ``first`` to ``first + count``, concatenated: leaf hashes from ``seq`` for level 0, else
    the stored subtree hashes, one get each. The caller keeps the range inside the tree
    (:func:`merkle_size`)."""
    out = bytearray()
    if level == 0:
        for value in leaf_data(txn, dbs, first, count):
            out += merkle.leaf_hash(value)
        return bytes(out)
    for index in range(first, first + count):
        node = txn.get(node_key(level, index), db=dbs["merkle"])
        if node is None or len(node) != merkle.HASH_SIZE:
            raise StoreError("corrupted", f"merkle node {level}/{index} is missing or "
                             "damaged; run `pithlog replay --verify`")  # fmt: skip
        out += node
    return bytes(out)


def leaf_data(txn: Txn, dbs: dict[str, Any], first: int, count: int) -> list[bytes]:
    """The 64-byte leaf data (``seq`` values) of leaves ``first`` to ``first + count``."""
    out: list[bytes] = []
    cursor = txn.cursor(db=dbs["seq"])
    found = cursor.set_range(SEQ.pack(first + 1))
    for index in range(first, first + count):
        key, value = cursor.item() if found else (b"", b"")
        if key != SEQ.pack(index + 1) or len(value) != 64:
            raise StoreError("corrupted", f"seq {index + 1} is missing or damaged; run "
                             "`pithlog replay --verify`")  # fmt: skip
        out.append(value)
        found = cursor.next()
    return out


def copies_of_leaves(
    txn: Txn, dbs: dict[str, Any], first: int, count: int, max_bytes: int | None = None
) -> list[bytes]:
    """The JCS bytes of the copies of leaves ``first`` to ``first + count``, in leaf order:
    one walk of ``copies``, which holds them in that order. With ``max_bytes``, only the
    first of them: the walk stops after the copy that brings their bytes to ``max_bytes``
    (one copy at least)."""
    out: list[bytes] = []
    held = 0
    cursor = txn.cursor(db=dbs["copies"])
    found = cursor.set_range(SEQ.pack(first + 1))
    for index in range(first, first + count):
        key, stored = cursor.item() if found else (b"", b"")
        if key != SEQ.pack(index + 1):
            raise StoreError("corrupted", f"seq {index + 1} names a copy that is not stored; "
                             "run `pithlog replay --verify`")  # fmt: skip
        out.append(unpack(txn, dbs, stored))
        held += len(out[-1])
        if max_bytes is not None and held >= max_bytes:
            break
        found = cursor.next()
    return out


def copy_by_hash(txn: Txn, dbs: dict[str, Any], h: bytes) -> bytes | None:
    """The stored copy whose JCS bytes hash to ``h`` (``None``: no such copy)."""
    raw = txn.get(h, db=dbs["by_copy"]) if len(h) == 32 else None
    return stored_copy(txn, dbs, raw) if raw is not None else None


# --- replay's check -----------------------------------------------------------------------

_MAX_MERKLE_LINES = 20


def check_merkle(txn: Txn, dbs: dict[str, Any], found: list[Discrepancy]) -> None:
    """Replay: recompute the tree from seq (O(log n) memory) and compare every stored
    subtree hash; ``by_copy`` must invert ``seq``; ``merkle_size`` must cover seq."""
    lines: list[Discrepancy] = []

    def say(subject: str, detail: str) -> None:
        lines.append(Discrepancy("merkle", subject, detail))

    size = merkle_size(txn, dbs)
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
        if txn.get(value[32:], db=dbs["by_copy"]) != key:
            say(eid_str(value[:32]), f"by_copy does not map copy {value[32:].hex()[:16]} to "
                f"seq {checked + 1}")  # fmt: skip
        node, level, position = merkle.leaf_hash(value), 0, checked
        while position & 1:
            node = merkle.node_hash(frontier.pop(level), node)
            level += 1
            position >>= 1
            if txn.get(node_key(level, position), db=dbs["merkle"]) != node:
                say(f"node {level}/{position}", "differs from the hash recomputed from seq")
        frontier[level] = node
    expected_nodes = size - bin(size).count("1")
    nodes = txn.stat(dbs["merkle"])["entries"]
    if nodes != expected_nodes:
        say("merkle", f"holds {nodes} subtree hashes; a tree of {size} leaves has "
            f"{expected_nodes}")  # fmt: skip
    held = txn.stat(dbs["by_copy"])["entries"]
    if held != size:
        say("by_copy", f"holds {held} entries; the tree has {size} leaves")
    found.extend(lines[:_MAX_MERKLE_LINES])
    if len(lines) > _MAX_MERKLE_LINES:
        found.append(Discrepancy("merkle", "more", f"{len(lines) - _MAX_MERKLE_LINES} more "
                                 "merkle discrepancies"))  # fmt: skip
