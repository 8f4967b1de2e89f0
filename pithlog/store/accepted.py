"""The checkpoint a mirror last accepted from each origin (``pithlog mirror``,
``docs/network.md``), kept in the store's ``meta`` database under :data:`META_ACCEPTED` +
SHA-256 of the origin, and replaced only by compare and set in one write transaction, so
two mirrors of one store cannot both accept over the same checkpoint."""

from __future__ import annotations

import hashlib
from typing import Any

from pithlog.store.layout import Txn

META_ACCEPTED = b"accepted:"
"""Meta key prefix of the accepted checkpoints: ``accepted:`` + SHA-256 of the origin (an
origin may be longer than an LMDB key)."""


def _accepted_key(origin: str) -> bytes:
    return META_ACCEPTED + hashlib.sha256(origin.encode("utf-8")).digest()


def accepted_checkpoint(txn: Txn, dbs: dict[str, Any], origin: str) -> bytes | None:
    """:meth:`pithlog.store.Store.accepted_checkpoint` in its read transaction."""
    return txn.get(_accepted_key(origin), db=dbs["meta"])


def accept_checkpoint(
    txn: Txn, dbs: dict[str, Any], origin: str, note: bytes, previous: bytes | None
) -> bool:
    """:meth:`pithlog.store.Store.accept_checkpoint` in its write transaction."""
    key = _accepted_key(origin)
    if txn.get(key, db=dbs["meta"]) != previous:
        return False
    txn.put(key, note, db=dbs["meta"])
    return True
