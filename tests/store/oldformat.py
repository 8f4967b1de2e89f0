"""Formats 6 and 5 as pithlog wrote them, made from a store of the current format.
Format 6: ``verdicts`` keyed by judge + copy hash. Format 5, with format 5's own writes
besides: every copy held in ``events`` (the preferred one) or ``evidence`` itself, packed
as it is stored, no ``copies``, a ``copy_seq``, ``by_key`` by event_id + copy hash,
``merkle`` keyed level + index; ``slots`` as the packed JCS ``{"members": [[created_at,
event_id], ...], "slot": [...]}`` (``docs/store.md``, "Format 5 to 6" and "Format 6 to
7"). Formats 4, 3 and 2 (:func:`as_format_4`, ...) go further back from format 5. The tests
of older formats start from these."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lmdb

from pithlog.protocol.canonical import jcs
from pithlog.protocol.events import readmit
from pithlog.protocol.reduce import slot_of
from pithlog.store import codec
from pithlog.store.layout import (
    DB_NAMES,
    FORMAT_2,
    FORMAT_3,
    FORMAT_4,
    FORMAT_5,
    FORMAT_6,
    eid_str,
)
from pithlog.transparency import merkle


def rewrite_as_format_6(txn: Any, dbs: dict[str, Any]) -> None:
    """In a write transaction on a store of the current format: its layout of format 6,
    ``verdicts`` keyed by judge + copy hash (the hash from ``seq``)."""
    old = list(txn.cursor(db=dbs["verdicts"]))
    txn.drop(dbs["verdicts"], delete=False)
    for key, value in old:
        txn.put(key[:32] + txn.get(key[32:], db=dbs["seq"])[32:], value, db=dbs["verdicts"])
    txn.put(b"format", FORMAT_6, db=dbs["meta"])


def rewrite_as_format_5(txn: Any, dbs: dict[str, Any], copy_seq: Any = None) -> None:
    """In a write transaction on a store of the current format: its layout of format 5
    (``copy_seq``: format 5's database of event_id + copy hash -> seq, filled when given)."""
    rewrite_as_format_6(txn, dbs)  # verdicts keyed by copy hash
    copies = dict(txn.cursor(db=dbs["copies"]))
    pointers = {name: list(txn.cursor(db=dbs[name])) for name in ("events", "evidence")}
    pack = codec.packer(txn, dbs)
    for key, value in list(txn.cursor(db=dbs["slots"])):
        members = [(value[i : i + 20].decode("ascii"), eid_str(value[i + 20 : i + 52]))
                   for i in range(0, len(value), 52)]  # fmt: skip
        first = dict(pointers["events"])[bytes.fromhex(members[0][1][7:])]
        slot = slot_of(readmit(codec.unpack(txn, dbs, copies[first])))
        entry = {"slot": list(slot), "members": [list(m) for m in members]}
        txn.put(key, pack(jcs(entry)), db=dbs["slots"])
    for name, entries in pointers.items():
        for key, pointer in entries:
            txn.put(key, copies[pointer], db=dbs[name])
    txn.drop(dbs["copies"], delete=False)
    # by_key named a copy by event_id + copy hash
    listed = list(txn.cursor(db=dbs["by_key"]).iternext(values=False))
    txn.drop(dbs["by_key"], delete=False)
    for key in listed:
        txn.put(key[:32] + txn.get(key[32:], db=dbs["seq"]), b"", db=dbs["by_key"])
    # merkle keyed level (1) + index (8): before format 6 keyed it by last leaf + level
    nodes = list(txn.cursor(db=dbs["merkle"]))
    txn.drop(dbs["merkle"], delete=False)
    for key, node in nodes:
        last, level = int.from_bytes(key[:8], "big"), key[8]
        txn.put(bytes([level]) + (((last + 1) >> level) - 1).to_bytes(8, "big"), node,
                db=dbs["merkle"])  # fmt: skip
    if copy_seq is not None:
        for seq, target in txn.cursor(db=dbs["seq"]):
            txn.put(target, seq, db=copy_seq)
    txn.put(b"format", FORMAT_5, db=dbs["meta"])


def as_format_5(path: Path) -> None:
    """:func:`rewrite_as_format_5` of the store at ``path`` (not open in this process)."""
    env = lmdb.open(str(path), max_dbs=32, subdir=True)
    dbs: dict[str, Any] = {}
    try:
        with env.begin(write=True) as txn:
            dbs.update({name: env.open_db(name.encode("ascii"), txn=txn) for name in DB_NAMES})
            rewrite_as_format_5(txn, dbs, env.open_db(b"copy_seq", txn=txn))
    finally:
        codec.forget(dbs)
        env.close()


def as_format_6(path: Path) -> None:
    """:func:`rewrite_as_format_6` of the store at ``path`` (not open in this process)."""
    env = lmdb.open(str(path), max_dbs=32, subdir=True)
    try:
        with env.begin(write=True) as txn:
            dbs = {name: env.open_db(name.encode("ascii"), txn=txn) for name in DB_NAMES}
            rewrite_as_format_6(txn, dbs)
    finally:
        env.close()


def _rewrite(path: Path, work: Any) -> None:
    """``work(env, txn, dbs)`` in one write transaction of plain LMDB on ``path`` (a map
    large enough for the copies unpacked)."""
    env = lmdb.open(str(path), max_dbs=32, subdir=True, map_size=1 << 30)
    dbs: dict[str, Any] = {}
    try:
        with env.begin(write=True) as txn:
            dbs.update({name: env.open_db(name.encode("ascii"), txn=txn) for name in DB_NAMES})
            work(env, txn, dbs)
    finally:
        codec.forget(dbs)
        env.close()


def as_format_4(path: Path) -> None:
    """The store at ``path`` as format 4 wrote it (after :func:`as_format_5`): verdicts
    keyed by the whole keyring's digest (``meta[keyring_digest]``) + copy hash, no
    ``by_key``, no ``rekey``, no ``meta[keyring]``."""
    as_format_5(path)

    def work(env: Any, txn: Any, dbs: dict[str, Any]) -> None:
        kd = txn.get(b"keyring_digest", db=dbs["meta"])
        old = list(txn.cursor(db=dbs["verdicts"]))
        txn.drop(dbs["verdicts"], delete=False)
        for key, value in old:
            txn.put(kd + key[32:], value, db=dbs["verdicts"])
        for name in ("by_key", "rekey"):
            txn.drop(dbs[name], delete=True)
        txn.delete(b"keyring", db=dbs["meta"])
        txn.put(b"format", FORMAT_4, db=dbs["meta"])

    _rewrite(path, work)


def as_format_3(path: Path) -> None:
    """:func:`as_format_4`, and then every copy and slot as its JCS bytes, no dictionary."""
    as_format_4(path)

    def work(env: Any, txn: Any, dbs: dict[str, Any]) -> None:
        for name in ("events", "evidence", "slots"):
            for key, stored in list(txn.cursor(db=dbs[name])):
                txn.put(key, codec.unpack(txn, dbs, stored), db=dbs[name])
        txn.drop(dbs["dicts"], delete=False)
        txn.delete(codec.META_DICT, db=dbs["meta"])
        txn.put(b"format", FORMAT_3, db=dbs["meta"])

    _rewrite(path, work)


def as_format_2(path: Path) -> None:
    """:func:`as_format_3`, and then a Merkle tree over leaves of the event_id alone
    (keyed level + index), no ``by_copy``, no ``aliases``."""
    as_format_3(path)

    def work(env: Any, txn: Any, dbs: dict[str, Any]) -> None:
        txn.drop(dbs["merkle"], delete=False)
        nodes: dict[tuple[int, int], bytes] = {}
        leaves: list[bytes] = []
        for _key, value in txn.cursor(db=dbs["seq"]):
            leaves.append(merkle.leaf_hash(value[:32]))

            def perfect(level: int, index: int) -> bytes:
                return leaves[index] if level == 0 else nodes[(level, index)]

            for level, index, node in merkle.completed_subtrees(len(leaves) - 1, leaves[-1],
                                                                perfect):  # fmt: skip
                nodes[(level, index)] = node
                txn.put(bytes([level]) + index.to_bytes(8, "big"), node, db=dbs["merkle"])
        for name in ("by_copy", "aliases"):
            txn.drop(dbs[name], delete=True)
        txn.put(b"format", FORMAT_2, db=dbs["meta"])

    _rewrite(path, work)


def kill_migration_at(monkeypatch: Any, at: int, module: Any = None) -> list[int]:
    """Make the ``at``-th step of a migration (``module``'s ``step``: format 6's by default,
    :mod:`pithlog.store.format7` too) raise ``KeyboardInterrupt`` (a process killed between
    two of its transactions); the steps taken are counted in the returned list (``at`` = 0:
    none killed). ``monkeypatch.undo`` or a later ``setattr`` restores the real step."""
    from pithlog.store import format6

    module = format6 if module is None else module
    real_step, steps = module.step, []

    def step(txn: Any, dbs: dict[str, Any], limit: int | None = None) -> bool:
        steps.append(1)
        if len(steps) == at:
            raise KeyboardInterrupt  # killed between two steps
        return bool(real_step(txn, dbs, limit))

    monkeypatch.setattr(module, "step", step)
    return steps
