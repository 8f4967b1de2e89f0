"""The reads of the log by leaf of its Merkle tree that :class:`pithlog.store.Store` answers
for a served log and for evidence (``docs/network.md``, ``docs/evidence.md``): a
tlog-tiles tile, the leaf data and the copies of a range of leaves (``None`` beyond the
tree), and the applied copies of a state with their leaves and inclusion paths.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from pithlog.errors import ProofError, StoreError
from pithlog.protocol.events import Envelope, readmit
from pithlog.store import tree
from pithlog.store.layout import Txn
from pithlog.transparency import tiles

if TYPE_CHECKING:
    from pithlog.store.log import Store


def tile(txn: Txn, dbs: dict[str, Any], level: int, index: int, width: int) -> bytes | None:
    """:meth:`Store.tile` in its read transaction."""
    if min(level, index) < 0 or not 1 <= width <= tiles.WIDTH:  # no such tile, as leaf_data
        return None
    if width > tiles.tile_width(level, index, tree.merkle_size(txn, dbs)):
        return None
    first = index * tiles.WIDTH
    return tree.tile_hashes(txn, dbs, tiles.HEIGHT * level, first, width)


def leaf_data(txn: Txn, dbs: dict[str, Any], first: int, count: int) -> list[bytes] | None:
    """:meth:`Store.leaf_data` in its read transaction."""
    if first < 0 or count < 0 or first + count > tree.merkle_size(txn, dbs):
        return None
    return tree.leaf_data(txn, dbs, first, count)


def leaf_copies(
    txn: Txn, dbs: dict[str, Any], first: int, count: int, max_bytes: int | None = None
) -> list[bytes] | None:
    """:meth:`Store.leaf_copies` in its read transaction."""
    if first < 0 or count < 0 or first + count > tree.merkle_size(txn, dbs):
        return None
    return tree.copies_of_leaves(txn, dbs, first, count, max_bytes)


def applied_copies_in_tree(
    store: Store, event_ids: Iterable[str], size: int
) -> list[tuple[Envelope, int, list[bytes]]]:
    """:meth:`Store.applied_copies_in_tree`: for each event, its copy, its leaf among the
    leaves of its event_id, and that leaf's inclusion path."""
    out = []
    for event_id in event_ids:
        copy = store.event(event_id)
        if copy is None:
            raise StoreError("corrupted", f"{event_id} is named by a state but not "
                             "stored")  # fmt: skip
        digest = hashlib.sha256(copy).digest()
        index = next((i for i, h in store.leaves_of(event_id) if h == digest), None)
        if index is None or index >= size:
            raise ProofError("not_found", f"the copy of {event_id} that the state applies "
                             f"is not a leaf of the log's tree of {size}")  # fmt: skip
        out.append((readmit(copy), index, store.inclusion_path(index, size)[1]))
    return out
