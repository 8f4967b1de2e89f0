"""What a witness last cosigned, per origin (C2SP tlog-witness), kept in the store's
``meta`` database under ``witness:<origin>``: the tree size (8 bytes, big-endian) and root
(32 bytes). Read and written in the one write transaction that judges an
``add-checkpoint``, so the check and the update are atomic (docs/witness.md)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from pithlog.store.layout import SEQ, Txn

V = TypeVar("V")

PREFIX = b"witness:"


def _key(origin: str) -> bytes:
    return PREFIX + origin.encode("utf-8")


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
