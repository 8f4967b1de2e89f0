"""What a witness last cosigned, per origin (C2SP tlog-witness), kept in the store's
``meta`` database under ``witness:<origin>`` (an origin too long for an LMDB key: under
``witness-sha256:`` and its SHA-256): the tree size (8 bytes, big-endian) and root (32
bytes). Beside it, under ``witness-checkpoint:`` and the SHA-256 of the origin (the key a
monitor asks by), the checkpoint the witness serves for that origin (tlog-witness, "Monitor
Retrieval Mechanism"): the note text, the log's signature lines the witness verified and
its cosignature. Both are read and written in the one write transaction that judges an
``add-checkpoint``, so the check and the update are atomic, and a checkpoint is served
only while its tree is the ``(size, root)`` recorded (docs/witness.md)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any, TypeVar

from pithlog.errors import CheckpointError
from pithlog.store.layout import SEQ, Txn
from pithlog.transparency.checkpoint import parse_checkpoint_text, parse_note

V = TypeVar("V")

PREFIX = b"witness:"
HASHED_PREFIX = b"witness-sha256:"
CHECKPOINT_PREFIX = b"witness-checkpoint:"
"""Meta key prefix of the served checkpoints: ``witness-checkpoint:`` + SHA-256 of the
origin (32 raw bytes). Neither of the prefixes above begins it (its 8th byte is ``-``, and
``witness-sha256:`` differs at its 9th), so no state's key is one."""
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


def _checkpoint_key(origin_sha256: bytes) -> bytes:
    return CHECKPOINT_PREFIX + origin_sha256


def record(
    txn: Txn, dbs: dict[str, Any], origin: str, size: int, root: bytes, served: bytes | None
) -> None:
    """Record ``(size, root)`` for ``origin`` and ``served``, the checkpoint monitors are
    then served (``None``: none, and the one before is dropped with the state it showed)."""
    txn.put(_key(origin), SEQ.pack(size) + root, db=dbs["meta"])
    key = _checkpoint_key(hashlib.sha256(origin.encode("utf-8")).digest())
    if served is None:
        txn.delete(key, db=dbs["meta"])
    else:
        txn.put(key, served, db=dbs["meta"])


def served_checkpoint(txn: Txn, dbs: dict[str, Any], origin_sha256: bytes) -> bytes | None:
    """The checkpoint served for the origin whose SHA-256 is ``origin_sha256``, or
    ``None``: never cosigned, or recorded by a pithlog that kept none (a state from before
    the witness served checkpoints, or one that a later such pithlog moved on: a stored
    checkpoint whose tree is not the ``(size, root)`` recorded is never served)."""
    raw = txn.get(_checkpoint_key(origin_sha256), db=dbs["meta"])
    if raw is None:
        return None
    served = bytes(raw)
    try:
        checkpoint = parse_checkpoint_text(parse_note(served).text, empty_root=False)
    except (CheckpointError, UnicodeDecodeError):
        return None
    if hashlib.sha256(checkpoint.origin.encode("utf-8")).digest() != origin_sha256:
        return None
    if known(txn, dbs, checkpoint.origin) != (checkpoint.size, checkpoint.root):
        return None
    return served


def witness_add(
    txn: Txn, dbs: dict[str, Any], judge: Callable[[Callable[[str], tuple[int, bytes] | None]], V]
) -> V:
    """:meth:`pithlog.store.Store.witness_add` in its write transaction: ``judge`` handed
    :func:`known`, and the ``(size, root)`` its verdict names recorded, with the
    checkpoint it names to serve (``served``)."""
    verdict = judge(lambda origin: known(txn, dbs, origin))
    to_record = getattr(verdict, "record", None)
    origin = getattr(verdict, "origin", None)
    if to_record is not None and origin is not None:
        size, root = to_record
        record(txn, dbs, origin, size, root, getattr(verdict, "served", None))
    return verdict
