"""Format 6 (docs/store.md): every copy in ``copies`` under its sequence number, ``events``
and ``evidence`` pointing at it, ``slots`` in binary. A format-5 store migrates to it in
bounded, resumable transactions with every state, export line and root unchanged; replay
names every way the pointers can be wrong."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import eventgen as g
import lmdb
import pytest
from oldformat import as_format_5, kill_migration_at

from pithlog.errors import StoreError
from pithlog.store import Store, format6
from pithlog.store.layout import FORMAT_VERSION, SEQ

# --- a log with evidence and equivocations ------------------------------------------------


def _lines() -> list[bytes]:
    events = g.mixed_events(random.Random(23), piths=8, per_pith=7)
    out = [g.encoded(e) for e in events]
    # second valid copies of a few events (evidence, or preferred in their place) and a
    # second record of one paper (the record slot holds two events)
    out += [g.encoded(g.resigned(e, e["signer"]["key_id"], bytes([i + 1]) * 32))
            for i, e in enumerate(events[:30:6])]  # fmt: skip
    out.append(g.encoded(g.record("2501.00000", at=170)))
    return out


def _filled(path: Path) -> None:
    lines = _lines()
    with Store.open(path) as store:
        for i in range(0, len(lines), 9):
            store.append(lines[i : i + 9], g.KEYRING, keep_invalid=True)


def _snapshot(path: Path) -> dict[str, Any]:
    with Store.open(path, create=False) as store:
        piths = [p["pith_number"] for p in store.piths()]
        eids = {json.loads(data)["event_id"] for _, data in store.export()}
        return {
            "piths": store.piths(),
            "states": {p: store.state(p) for p in piths if store.status(p)["status"] == "state"},
            "events": {eid: (store.event(eid), store.evidence(eid)) for eid in eids},
            "export": list(store.export()),
            "root": store.tree_root(),
            "aliases": store.piths_for_alias("arxiv:2501.00000"),
        }


def test_a_format_5_store_migrates_to_6_in_steps_with_every_state_unchanged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "s"
    _filled(path)
    original = _snapshot(path)
    assert any(json.loads(s)["equivocations"] for s in original["states"].values())
    assert any(evidence for _, evidence in original["events"].values())
    as_format_5(path)
    with pytest.raises(StoreError) as caught:  # a reader never migrates
        Store.open(path, create=False, readonly=True)
    assert caught.value.code == "store.upgrade"

    monkeypatch.setattr(format6, "MIGRATE_CHUNK", 10)  # several transactions
    real_step = format6.step
    steps = kill_migration_at(monkeypatch, 4)
    with pytest.raises(KeyboardInterrupt):
        Store.open(path, create=False)
    with pytest.raises(StoreError) as caught:  # half-way: still not for readers
        Store.open(path, create=False, readonly=True)
    assert caught.value.code == "store.upgrade"
    # the format recorded is already 7: said as a migration under way, not a tree behind
    assert "is being migrated to format 7, not yet finished" in str(caught.value)
    monkeypatch.setattr(format6, "step", real_step)

    assert _snapshot(path) == original  # resumed, finished, every byte as before
    assert len(steps) >= 3
    env = lmdb.open(str(path), max_dbs=32, subdir=True, readonly=True, lock=False)
    with env.begin() as txn, pytest.raises(lmdb.NotFoundError):
        env.open_db(b"copy_seq", txn=txn, create=False)  # what the pointers now hold
    env.close()
    with Store.open(path, create=False) as store:
        stats = store.stats()
        assert stats["format"] == FORMAT_VERSION.decode()
        assert stats["counts"]["copies"] == stats["counts"]["seq"]
        assert store._read(lambda txn, dbs: format6.migrating(txn, dbs)) is False
        report = store.replay(g.KEYRING, verify=True)
        assert report.ok, [d.line() for d in report.discrepancies]
        # and it goes on as a format-6 store
        store.append([g.encoded(g.record("2599.00001"))], g.KEYRING)
        assert store.replay(g.KEYRING).ok
    reference = tmp_path / "r"
    _filled(reference)
    assert _snapshot(reference) == original


# --- replay names every broken pointer ----------------------------------------------------


@pytest.fixture
def store(tmp_path: Path) -> Store:
    _filled(tmp_path / "s")
    opened = Store.open(tmp_path / "s", create=False)
    assert opened.replay(g.KEYRING).ok
    yield opened
    opened.close()


def _with_evidence(txn: Any, dbs: dict[str, Any]) -> tuple[bytes, bytes, bytes, bytes]:
    """An event with an evidence copy: event_id, its events pointer, evidence key, pointer."""
    key, pointer = next(iter(txn.cursor(db=dbs["evidence"])))
    return key[:32], txn.get(key[:32], db=dbs["events"]), bytes(key), bytes(pointer)


def _plain_event(txn: Any, dbs: dict[str, Any], skip: int = 0) -> tuple[bytes, bytes]:
    """An event without evidence: its event_id and pointer."""
    with_evidence = {k[:32] for k in txn.cursor(db=dbs["evidence"]).iternext(values=False)}
    found = [(k, p) for k, p in txn.cursor(db=dbs["events"]) if k not in with_evidence]
    return found[skip]


def _seq_of(pointer: bytes) -> int:
    return int(SEQ.unpack(pointer)[0])


Damage = Callable[[Any, dict[str, Any]], str]
"""Damages the store in a write transaction; returns a line replay must print (a part)."""


def _copy_without_pointer(txn: Any, dbs: dict[str, Any]) -> str:
    eid, _, key, pointer = _with_evidence(txn, dbs)
    txn.delete(key, db=dbs["evidence"])
    return (f"seq: seq {_seq_of(pointer)}: names copy {key[32:].hex()[:16]} of "
            f"sha256:{eid.hex()}, which no events or evidence pointer names")  # fmt: skip


def _copy_without_seq(txn: Any, dbs: dict[str, Any]) -> str:
    far = SEQ.pack(10**6)
    txn.put(far, txn.get(SEQ.pack(1), db=dbs["copies"]), db=dbs["copies"])
    return f"copies: key {far.hex()}: is not the sequence number of a seq entry"


def _seq_without_copy(txn: Any, dbs: dict[str, Any]) -> str:
    eid, pointer = _plain_event(txn, dbs)
    txn.delete(pointer, db=dbs["copies"])
    return (f"events: sha256:{eid.hex()}: the stored copy at seq {_seq_of(pointer)} is not "
            "in copies")  # fmt: skip


def _pointer_to_another_event(txn: Any, dbs: dict[str, Any]) -> str:
    eid, _ = _plain_event(txn, dbs)
    _, other = _plain_event(txn, dbs, skip=1)
    txn.put(eid, other, db=dbs["events"])
    return (f"events: sha256:{eid.hex()}: the stored copy: the pointer names seq "
            f"{_seq_of(other)}, which logs copy")  # fmt: skip


def _pointer_past_seq(txn: Any, dbs: dict[str, Any]) -> str:
    eid, _ = _plain_event(txn, dbs)
    txn.put(eid, SEQ.pack(10**6), db=dbs["events"])
    return f"seq: sha256:{eid.hex()}: the preferred copy has no seq entry (the pointer names seq"


def _malformed_pointer(txn: Any, dbs: dict[str, Any]) -> str:
    eid, _, key, _ = _with_evidence(txn, dbs)
    txn.put(key, b"xyz", db=dbs["evidence"])
    return (f"evidence: sha256:{eid.hex()}: copy {key[32:].hex()[:16]}: the pointer 78797a "
            "is not an 8-byte sequence number")  # fmt: skip


def _other_bytes_under_a_seq(txn: Any, dbs: dict[str, Any]) -> str:
    eid, pointer = _plain_event(txn, dbs)
    _, other = _plain_event(txn, dbs, skip=1)
    txn.put(pointer, txn.get(other, db=dbs["copies"]), db=dbs["copies"])
    return (f"events: sha256:{eid.hex()}: the stored copy at seq {_seq_of(pointer)} does not "
            "hash to the copy seq names")  # fmt: skip


def _two_pointers_one_copy(txn: Any, dbs: dict[str, Any]) -> str:
    eid, held, _, _ = _with_evidence(txn, dbs)
    txn.put(eid + txn.get(held, db=dbs["seq"])[32:], held, db=dbs["evidence"])
    return f"evidence: sha256:{eid.hex()}: an evidence copy equals the preferred copy"


def _evidence_without_event(txn: Any, dbs: dict[str, Any]) -> str:
    eid, _, key, _ = _with_evidence(txn, dbs)
    txn.delete(eid, db=dbs["events"])
    return (f"evidence: sha256:{eid.hex()}: copy {key[32:].hex()[:16]} is evidence of an "
            "event with no preferred copy in events")  # fmt: skip


@pytest.mark.parametrize("damage", [
    _copy_without_pointer, _copy_without_seq, _seq_without_copy, _pointer_to_another_event,
    _pointer_past_seq, _malformed_pointer, _other_bytes_under_a_seq, _two_pointers_one_copy,
    _evidence_without_event,
])  # fmt: skip
def test_replay_names_each_broken_pointer(store: Store, damage: Damage) -> None:
    expected = store._write(damage)
    report = store.replay(g.KEYRING)
    lines = [d.line() for d in report.discrepancies]
    assert not report.ok
    assert any(line.startswith(expected) for line in lines), (expected, lines)


def test_an_append_after_a_damaged_next_seq_is_refused(store: Store) -> None:
    """``copies`` and ``seq`` are written in LMDB's append mode: a key not above the last
    (meta next_seq moved back) is refused, never written over another copy."""
    before = list(store.export())
    store._write(lambda txn, dbs: txn.put(b"next_seq", SEQ.pack(3), db=dbs["meta"]))
    with pytest.raises(StoreError) as caught:
        store.append([g.encoded(g.record("2599.00002"))], g.KEYRING)
    assert caught.value.code == "store.corrupted"
    assert list(store.export()) == before


def test_preferring_another_copy_swaps_pointers(tmp_path: Path) -> None:
    """A copy preferred over the stored one (spec 7 step 0) is written once, in append
    order; the copy it replaces stays where it was stored: two pointers swap."""
    rec = g.record("2501.00001")
    event = g.attestation(rec["pith_number"], 200)
    # valid copies compare by their JCS bytes: appended largest first, each one replaces
    copies = sorted((g.encoded(g.resigned(event, "author", bytes([i + 1]) * 32))
                     for i in range(3)), reverse=True)  # fmt: skip
    eid = bytes.fromhex(event["event_id"][7:])
    with Store.open(tmp_path / "s") as store:
        store.append([g.encoded(rec), copies[0]], g.KEYRING)
        for i, copy in enumerate(copies[1:], 1):
            before = store._read(lambda txn, dbs: dict(txn.cursor(db=dbs["copies"])))
            assert store.append([copy], g.KEYRING)[0].status == "replaced"
            after = store._read(lambda txn, dbs: dict(txn.cursor(db=dbs["copies"])))
            assert {k: after[k] for k in before} == before  # nothing moved or rewritten
            (new_key,) = after.keys() - before.keys()
            assert new_key > max(before)
            pointers = store._read(lambda txn, dbs: (
                txn.get(eid, db=dbs["events"]),
                sorted(v for _, v in txn.cursor(db=dbs["evidence"]))))  # fmt: skip
            assert pointers[0] == new_key
            assert pointers[1] == sorted(k for k in before if k != min(before))[-i:]
        assert store.event(event["event_id"]) == copies[-1]
        assert sorted(store.evidence(event["event_id"])) == sorted(copies[:-1])
        assert store.replay(g.KEYRING, verify=True).ok


def test_merkle_keys_and_by_key_grow_in_append_order(tmp_path: Path) -> None:
    """Each append adds merkle keys above every key before it (last leaf + level), and
    by_key keys above every key before it under the same key_id (key_id hash + seq): pages
    fill as seq's do instead of splitting in half."""
    lines = _lines()
    seen: dict[str, list[bytes]] = {"merkle": [], "by_key": []}
    with Store.open(tmp_path / "s") as store:
        for i in range(0, len(lines), 9):
            store.append(lines[i : i + 9], g.KEYRING, keep_invalid=True)
            for name, before in seen.items():
                now = store._read(lambda txn, dbs, n=name: list(
                    txn.cursor(db=dbs[n]).iternext(values=False)))  # fmt: skip
                new = sorted(set(now) - set(before))
                if name == "merkle":
                    assert not before or not new or new[0] > max(before)
                else:
                    for key in new:
                        under = [k for k in before if k[:32] == key[:32]]
                        assert not under or key > max(under)
                seen[name] = now
        assert len(seen["merkle"]) == store.tree_size() - bin(store.tree_size()).count("1")
        assert store.replay(g.KEYRING).ok
