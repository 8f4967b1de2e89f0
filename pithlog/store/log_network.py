"""The methods of :class:`pithlog.store.Store` that the log on the network reads and
writes (docs/network.md, docs/witness.md): hash tiles, leaf data and copies by leaf, a
copy by its hash, the checkpoints a mirror
accepted from an origin and what a witness cosigned. :class:`NetworkReads` holds them
apart from the facade's other methods; :class:`~pithlog.store.log.Store` inherits them
and provides the transactions they run in."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from pithlog.store import accepted, leaves, tree, witnessed
from pithlog.store.arguments import (
    require_bytes,
    require_callable,
    require_count,
    require_int,
    require_str,
    require_tree_int,
)
from pithlog.store.environment import Work

V = TypeVar("V")
T = TypeVar("T")


class NetworkReads:
    """Reads and writes for the network, over :meth:`_read` and :meth:`_write`."""

    def _read(self, work: Work[T]) -> T:  # provided by Store
        raise NotImplementedError

    def _write(self, work: Work[T]) -> T:  # provided by Store
        raise NotImplementedError

    # --- reads for the network: tiles, bundles, copies (docs/network.md) ------------------

    def tile(self, level: int, index: int, width: int) -> bytes | None:
        """The bytes of tlog-tiles tile ``index`` of ``level`` with ``width`` hashes
        (:mod:`pithlog.transparency.tiles`), or ``None`` when the tree does not have that
        many yet. A partial tile is the first ``width`` hashes of its full tile, whatever
        the current size."""
        for name, value in (("level", level), ("index", index), ("width", width)):
            require_int(value, "tile", name)
        return self._read(lambda txn, dbs: leaves.tile(txn, dbs, level, index, width))

    def leaf_data(self, first: int, count: int) -> list[bytes] | None:
        """The 64-byte leaf data of leaves ``first`` to ``first + count`` (``None``: beyond
        the tree)."""
        require_tree_int(first, "leaf index")
        require_tree_int(count, "leaf count")
        return self._read(lambda txn, dbs: leaves.leaf_data(txn, dbs, first, count))

    def leaf_copies(self, first: int, count: int,
                    max_bytes: int | None = None) -> list[bytes] | None:  # fmt: skip
        """The JCS bytes of the copies of leaves ``first`` to ``first + count``, in leaf
        order (``None``: beyond the tree); with ``max_bytes``, the first of them, up to the
        copy that brings their bytes to ``max_bytes`` (one at least)."""
        require_tree_int(first, "leaf index")
        require_tree_int(count, "leaf count")
        require_count(max_bytes, "leaf_copies", "max_bytes", least=0, none=True)
        return self._read(lambda txn, dbs: leaves.leaf_copies(txn, dbs, first, count,
                                                              max_bytes))  # fmt: skip

    def copy(self, copy_sha256: bytes) -> bytes | None:
        """The stored copy whose JCS bytes hash to ``copy_sha256`` (preferred or evidence)."""
        require_bytes(copy_sha256, "copy", "copy_sha256")
        return self._read(lambda txn, dbs: tree.copy_by_hash(txn, dbs, copy_sha256))

    # --- checkpoints accepted from an origin (pithlog mirror, docs/network.md) ------------

    def accepted_checkpoint(self, origin: str) -> bytes | None:
        """The signed checkpoint of ``origin`` this store last accepted (its note, as
        served), or ``None``."""
        require_str(origin, "accepted_checkpoint", "origin")
        return self._read(lambda txn, dbs: accepted.accepted_checkpoint(txn, dbs, origin))

    def accept_checkpoint(self, origin: str, note: bytes, previous: bytes | None) -> bool:
        """Record ``note`` as the accepted checkpoint of ``origin``, in one write transaction,
        if the one accepted is still ``previous`` (compare and set: two mirrors of one
        store cannot both accept over the same checkpoint). Says whether it was recorded."""
        require_str(origin, "accept_checkpoint", "origin")
        require_bytes(note, "accept_checkpoint", "note")
        require_bytes(previous, "accept_checkpoint", "previous", none=True)
        return self._write(
            lambda txn, dbs: accepted.accept_checkpoint(txn, dbs, origin, note, previous)
        )

    # --- a witness's state (C2SP tlog-witness, docs/witness.md) ---------------------------

    def witness_add(self, judge: Callable[[Callable[[str], tuple[int, bytes] | None]], V]) -> V:
        """Run ``judge`` (:func:`pithlog.transparency.witness.judge_add_checkpoint`, bound
        to a request) in one write transaction, handing it what the witness last cosigned
        per origin, and record the ``(size, root)`` its verdict names before the commit: the
        check and the update are atomic, so no two requests can roll the size back."""
        require_callable(judge, "witness_add", "judge", none=False)
        return self._write(lambda txn, dbs: witnessed.witness_add(txn, dbs, judge))

    def witness_state(self, origin: str) -> tuple[int, bytes] | None:
        """``(size, root)`` this store's witness last cosigned for ``origin``, or ``None``."""
        require_str(origin, "witness_state", "origin")
        return self._read(lambda txn, dbs: witnessed.known(txn, dbs, origin))

    def witness_checkpoint(self, origin_sha256: bytes) -> bytes | None:
        """The checkpoint this store's witness serves monitors for the origin whose SHA-256
        is ``origin_sha256`` (tlog-witness, "Monitor Retrieval Mechanism"): the last it
        cosigned, with the log's signature lines it verified and its cosignature; ``None``
        when it cosigned none for that origin, or none since it kept them."""
        require_bytes(origin_sha256, "witness_checkpoint", "origin_sha256")
        return self._read(
            lambda txn, dbs: witnessed.served_checkpoint(txn, dbs, origin_sha256)
        )

