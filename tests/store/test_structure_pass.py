"""Replay's structure pass: the one pass over ``seq`` and ``copies`` that proves a healthy
store's tables agree (``_copies_at_once``) says exactly what the table-by-table checks say,
on a healthy store and on stores damaged at random, because it hands every store it cannot
prove healthy to them."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import eventgen as g
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pithlog.store.replay_structure as structure
from pithlog.store import Store
from pithlog.store.environment_scratch import scratch_index
from pithlog.store.layout import META_NEXT_SEQ, SEQ
from pithlog.store.replay_report import Discrepancy
from pithlog.store.replay_structure import check_structure, replay_start

TABLES = ("seq", "copies", "events", "evidence", "by_pith")


class _Abort(Exception):
    """Raised at the end of a write transaction's work so that it is never committed."""

    def __init__(self, result: Any) -> None:
        self.result = result


def _events() -> list[dict[str, Any]]:
    rng = random.Random(7)
    events = g.mixed_events(rng, piths=6, per_pith=5)
    # other copies of stored event_ids: evidence (a second valid signature, a forged one
    # kept invalid, another body under the same event_id)
    some = [e for e in events if e["event_type"] != "record_created"][:6]
    events += [g.resigned(e, e["signer"]["key_id"].removeprefix("test-"), bytes([i + 1]) * 32)
               for i, e in enumerate(some[:2])]  # fmt: skip
    events += [g.forged(e) for e in some[2:4]] + [g.tampered(e) for e in some[4:6]]
    return events


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    path: Path = tmp_path_factory.mktemp("structure") / "store"
    opened = Store.open(path)
    opened.append([g.encoded(e) for e in _events()], g.KEYRING, keep_invalid=True)
    return opened


def _passes(txn: Any, dbs: dict[str, Any]) -> tuple[list[Discrepancy], list[Discrepancy], bool]:
    """Both ways of the structure pass in ``txn``, and whether the one pass proved the
    copies' tables healthy."""
    piths = set(replay_start(txn, dbs).piths)
    at_once: list[Discrepancy] = []
    one_by_one: list[Discrepancy] = []
    check_structure(txn, dbs, at_once, piths, scratch_index)
    check_structure(txn, dbs, one_by_one, piths, scratch_index, at_once=False)
    return at_once, one_by_one, structure._copies_at_once(txn, dbs, _next_seq(txn, dbs))


def _next_seq(txn: Any, dbs: dict[str, Any]) -> int | None:
    raw = txn.get(META_NEXT_SEQ, db=dbs["meta"])
    return SEQ.unpack(raw)[0] if raw is not None and len(raw) == SEQ.size else None


def _damaged(store: Store, damage: Callable[[Any, dict[str, Any]], None]) -> Any:
    """Both passes over the store with ``damage`` done, in a write transaction that is then
    aborted (the store is left as it was)."""

    def work(txn: Any, dbs: dict[str, Any]) -> None:
        damage(txn, dbs)
        raise _Abort(_passes(txn, dbs))

    try:
        store._write(work)
    except _Abort as aborted:
        return aborted.result
    raise AssertionError("the damage was committed")


def test_a_healthy_store_is_proven_in_one_pass(store: Store) -> None:
    at_once, one_by_one, proven = store._read(_passes)
    assert proven
    assert at_once == one_by_one == []
    assert store._read(lambda txn, dbs: txn.stat(dbs["evidence"])["entries"]) >= 4
    assert store.replay(g.KEYRING).ok


def _keys(txn: Any, db: Any) -> list[bytes]:
    return list(txn.cursor(db=db).iternext(values=False))


def _damage(data: st.DataObject) -> Callable[[Any, dict[str, Any]], None]:
    """One damage to one of the tables the one pass reads, drawn by Hypothesis."""
    table = data.draw(st.sampled_from(TABLES), "table")
    kind = data.draw(st.sampled_from(["delete", "copy_value", "flip", "truncate", "add_key",
                                      "swap", "lower_next_seq"]), "kind")  # fmt: skip
    pick = data.draw(st.integers(0, 10**6), "pick")
    other = data.draw(st.integers(0, 10**6), "other")
    byte = data.draw(st.integers(0, 10**6), "byte")

    def damage(txn: Any, dbs: dict[str, Any]) -> None:
        db = dbs[table]
        keys = _keys(txn, db)
        if not keys:
            return
        key, key2 = keys[pick % len(keys)], keys[other % len(keys)]
        value = txn.get(key, db=db)
        if kind == "delete":
            txn.delete(key, db=db)
        elif kind == "copy_value":
            txn.put(key, txn.get(key2, db=db), db=db)
        elif kind == "flip" and value:
            at = byte % len(value)
            txn.put(key, value[:at] + bytes([value[at] ^ (1 << (byte % 8))]) + value[at + 1 :],
                    db=db)  # fmt: skip
        elif kind == "truncate":
            txn.put(key, value[:-1], db=db)
        elif kind == "add_key":
            at = byte % len(key)
            txn.put(key[:at] + bytes([key[at] ^ 0x01]) + key[at + 1 :], value, db=db)
        elif kind == "swap":
            value2 = txn.get(key2, db=db)
            txn.put(key, value2, db=db)
            txn.put(key2, value, db=db)
        elif kind == "lower_next_seq":
            last = _keys(txn, dbs["seq"])[-1]
            txn.put(META_NEXT_SEQ, SEQ.pack(SEQ.unpack(last)[0] - byte % 3), db=dbs["meta"])

    return damage


@settings(max_examples=120, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
@given(data=st.data())
def test_one_pass_says_what_the_tables_one_by_one_say(store: Store, data: st.DataObject) -> None:
    damages = [_damage(data) for _ in range(data.draw(st.integers(1, 2), "damages"))]

    def damage(txn: Any, dbs: dict[str, Any]) -> None:
        for one in damages:
            one(txn, dbs)

    at_once, one_by_one, proven = _damaged(store, damage)
    assert at_once == one_by_one
    # the one pass proves a store healthy only when the tables one by one find nothing
    # in the copies' tables (what it says is theirs, word for word)
    if proven:
        assert not [d for d in one_by_one if d.kind in {*TABLES, "meta"}
                    and not (d.kind == "meta" and d.subject != "next_seq")]


def test_every_kind_of_damage_is_handed_to_the_tables_one_by_one(store: Store) -> None:
    """Each damage of a few fixed ones is not proven healthy, and is said as before."""
    def unindex(txn: Any, dbs: dict[str, Any]) -> None:
        txn.delete(_keys(txn, dbs["by_pith"])[0], db=dbs["by_pith"])

    def second_pointer(txn: Any, dbs: dict[str, Any]) -> None:
        # an evidence pointer at the preferred copy's sequence number
        eid, pointer = next(iter(txn.cursor(db=dbs["events"])))
        txn.put(eid + bytes(32), pointer, db=dbs["evidence"])

    def stray_copy(txn: Any, dbs: dict[str, Any]) -> None:
        last = _keys(txn, dbs["copies"])[-1]
        txn.put(SEQ.pack(SEQ.unpack(last)[0] + 5), b"{}", db=dbs["copies"])

    def damaged_copy(txn: Any, dbs: dict[str, Any]) -> None:
        key = _keys(txn, dbs["copies"])[3]
        txn.put(key, b"\x02" + bytes(40), db=dbs["copies"])

    def next_seq_ahead(txn: Any, dbs: dict[str, Any]) -> None:
        # the next append would leave a gap in seq, where the Merkle tree stops
        last = _keys(txn, dbs["seq"])[-1]
        txn.put(META_NEXT_SEQ, SEQ.pack(SEQ.unpack(last)[0] + 3), db=dbs["meta"])

    for damage, expected in ((unindex, "by_pith"), (second_pointer, "evidence"),
                             (stray_copy, "copies"), (damaged_copy, "events"),
                             (next_seq_ahead, "meta")):  # fmt: skip
        at_once, one_by_one, proven = _damaged(store, damage)
        assert not proven
        assert at_once == one_by_one
        assert any(d.kind == expected for d in at_once), (expected, at_once)


def test_an_empty_pointer_is_said_not_looked_up(store: Store) -> None:
    """A pointer emptied in ``events`` (an event with evidence copies) cannot be looked up
    in LMDB, which refuses an empty key: both passes say it instead of failing with
    ``store.lmdb``."""

    def empty_pointer(txn: Any, dbs: dict[str, Any]) -> None:
        key = _keys(txn, dbs["evidence"])[0]
        txn.put(key[:32], b"", db=dbs["events"])

    at_once, one_by_one, proven = _damaged(store, empty_pointer)
    assert not proven
    assert at_once == one_by_one
    assert any(d.kind == "events" and "is not an 8-byte sequence number" in d.detail
               for d in at_once), at_once  # fmt: skip
