"""What a witness last cosigned, per origin (C2SP tlog-witness), kept in the store's
``meta`` database under ``witness:<origin>`` (an origin too long for an LMDB key: under
``witness-sha256:`` and its SHA-256): the tree size (8 bytes, big-endian) and root (32
bytes). Read and written in the one write transaction that judges an ``add-checkpoint``,
so the check and the update are atomic (docs/witness.md)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any, TypeVar

from pithlog.store.layout import SEQ, Txn

V = TypeVar("V")

PREFIX = b"witness:"
HASHED_PREFIX = b"witness-sha256:"
MAX_KEY_BYTES = 511
"""LMDB's largest key (``MDB_MAXKEYSIZE``)."""


def _key(origin: str) -> bytes:
    key = PREFIX + origin.encode("utf-8")
    if len(key) <= MAX_KEY_BYTES:
        return key
    # an origin a log may sign, but too long for an LMDB key (MDB_BAD_VALSIZE, a 500 for
    # every add-checkpoint of that log): kept under its hash, as the accepted checkpoints
    # are; the prefix differs from PREFIX at its 8th byte, so no origin's plain key is it
    return HASHED_PREFIX + hashlib.sha256(origin.encode("utf-8")).digest()


def known(txn: Txn, dbs: dict[str, Any], origin: str) -> tuple[int, bytes] | None:
    """``(size, root)`` last cosigned for ``origin``, or ``None``."""
    raw = txn.get(_key(origin), db=dbs["meta"])
    if raw is None or len(raw) != SEQ.size + 32:
        return None
    return SEQ.unpack(raw[: SEQ.size])[0], bytes(raw[SEQ.size :])


def record(txn: Txn, dbs: dict[str, Any], origin: str, size: int, root: bytes) -> None:
    txn.put(_key(origin), SEQ.pack(size) + root, db=dbs["meta"])


def witness_add(
    txn: Txn, dbs: dict[str, Any], judge: Callable[[Callable[[str], tuple[int, bytes] | None]], V]
) -> V:
    """:meth:`pithlog.store.Store.witness_add` in its write transaction: ``judge`` handed
    :func:`known`, and the ``(size, root)`` its verdict names recorded."""
    verdict = judge(lambda origin: known(txn, dbs, origin))
    to_record = getattr(verdict, "record", None)
    origin = getattr(verdict, "origin", None)
    if to_record is not None and origin is not None:
        record(txn, dbs, origin, *to_record)
    return verdict
