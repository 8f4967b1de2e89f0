"""What ``replay --verify`` compares of a pith, one damage at a time: the copy ``events``
prefers (spec 7 step 0), the pith ``by_pith`` lists an event under, the ``piths`` summary
(``docs/store.md``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import eventgen as g
import pytest
from damage import attestation, lines, rewrite_summary

from pithlog.errors import StoreError
from pithlog.store import Store
from pithlog.store.layout import copy_hash, prefer, prefixed


def _eid(event: dict[str, Any]) -> bytes:
    return bytes.fromhex(event["event_id"][7:])


def test_replay_names_a_preferred_copy_step_0_does_not_prefer(tmp_path: Path) -> None:
    rec = g.record("2501.00003", at=10)
    other = g.resigned(rec, "registry", bytes([7]) * 32)  # a second valid copy
    hint = g.mirror_hint(rec["pith_number"], 20, "https://m.test.invalid/")
    with Store.open(tmp_path / "s") as store:
        store.append([g.encoded(e) for e in (rec, other, hint)], g.KEYRING)
        assert store.replay(g.KEYRING).ok
        eid = _eid(rec)
        held = store._read(lambda txn, dbs: txn.get(txn.get(eid, db=dbs["events"]),
                                                    db=dbs["seq"]))  # fmt: skip
        held_h = held[32:]
        new_h = next(copy_hash(g.encoded(e)) for e in (rec, other)
                     if copy_hash(g.encoded(e)) != held_h)  # fmt: skip
        # Damage: events points at the copy step 0 does not prefer, evidence at the other.
        store._write(lambda txn, dbs: prefer(txn, dbs, eid, held_h, new_h))
        found = lines(store)
        assert any(line.startswith(f"preference: {rec['event_id']}: events holds a copy "
                                   "that section 7 step 0 does not prefer")
                   for line in found), found  # fmt: skip


def test_replay_names_an_event_indexed_under_another_pith(
    damaged: tuple[Store, list[Any]],
) -> None:
    store, events = damaged
    victim = attestation(events)
    elsewhere = next(e["pith_number"] for e in events
                     if e["pith_number"] != victim["pith_number"])  # fmt: skip
    eid = _eid(victim)

    def move(txn: Any, dbs: dict[str, Any]) -> None:
        txn.delete(victim["pith_number"].encode() + eid, db=dbs["by_pith"])
        txn.put(elsewhere.encode() + eid, b"", db=dbs["by_pith"])

    store._write(move)
    found = lines(store)
    assert (f"by_pith: {victim['event_id']}: indexed under {elsewhere} but its envelope "
            f"says {victim['pith_number']}") in found, found  # fmt: skip


def test_replay_names_a_summary_whose_counts_differ(
    damaged: tuple[Store, list[Any]],
) -> None:
    # Counts the state document does not carry (equivocation_count, invalid_event_count)
    # are compared in the piths entry itself.
    store, events = damaged
    pith = attestation(events)["pith_number"]
    raw = store._read(lambda txn, dbs: txn.get(pith.encode(), db=dbs["piths"]))
    summary = json.loads(raw)
    assert summary["status"] == "state"
    for member in ("equivocation_count", "invalid_event_count"):
        was = rewrite_summary(store, pith, {**summary, member: summary[member] + 1})
        found = [line for line in lines(store) if line.startswith(f"pith: {pith}: ")]
        assert found and f'"{member}":{summary[member] + 1}' in found[0], found
        store._write(lambda txn, dbs, w=was: txn.put(pith.encode(), w, db=dbs["piths"]))
    assert store.replay(g.KEYRING).ok


def test_an_applied_key_without_its_event_id_is_index_damage(
    damaged: tuple[Store, list[Any]],
) -> None:
    """The event_id of an applied key was looked up as it was cut: an empty one is a key
    LMDB refuses (MDB_BAD_VALSIZE), which stopped replay with store.lmdb and made state
    say store.lmdb, where the index is damaged."""
    store, events = damaged
    pith = next(e["pith_number"] for e in events if e["event_type"] == "record_created")
    first = store._read(lambda txn, dbs: next(iter(prefixed(txn, dbs["applied"],
                                                            pith.encode()))))  # fmt: skip
    cut = first[0][: len(pith) + 21]  # pith + list index + created_at, no event_id
    store._write(lambda txn, dbs: txn.put(cut, first[1], db=dbs["applied"]))
    found = lines(store)
    assert (f"index: {pith}: the state cannot be assembled from the index: an index key "
            "names nothing, not an event id") in found, found  # fmt: skip
    with pytest.raises(StoreError) as refused:
        store.state(pith)
    assert refused.value.code == "store.corrupted"


def test_a_by_pith_key_without_its_event_id_is_named_and_left_out(
    damaged: tuple[Store, list[Any]],
) -> None:
    """by_pith's event_ids were looked up as cut from the keys: a key holding the pith
    alone gave an empty one, a key LMDB refuses (MDB_BAD_VALSIZE), which stopped replay
    with store.lmdb, and an append that re-reduces the pith too."""
    store, _ = damaged
    rec = g.record("2501.00003", at=100)  # the fixture's pending pith gets its record
    pith = rec["pith_number"]
    assert store.status(pith) is not None and store.state(pith) is None
    key = pith.encode()
    store._write(lambda txn, dbs: txn.put(key, b"", db=dbs["by_pith"]))
    said = f"by_pith: key {key.hex()}: is not pith_number + event id"
    assert lines(store) == [said]
    assert [r.status for r in store.append([g.encoded(rec)], g.KEYRING)] == ["stored"]
    assert store.state(pith) is not None
    assert lines(store) == [said]
