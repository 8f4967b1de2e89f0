"""Replays that must report exactly: under a keyring that revokes a key, and the same
damage replayed one way and another (in parallel, with verifying processes, with the
structure pass in its own process)."""

from __future__ import annotations

import json
import os
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import eventgen as g
import pytest
from damage import attestation, overwrite_copy, unindex, valid

import pithlog.errors
from pithlog.protocol.checks import check_alone
from pithlog.protocol.events import admit
from pithlog.store import Store
from pithlog.store.replay import _read_pith
from pithlog.testing import test_keyring

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")


def test_replay_under_a_revoking_keyring_names_exactly_the_changed_piths(tmp_path: Path) -> None:
    rng = random.Random(41)
    events = valid(g.mixed_events(rng, piths=14, per_pith=5))
    revoked = test_keyring(author={"revoked_at": g.ts(430)})
    before, after = g.expected_states(events), g.expected_states(events, revoked)
    changed = sorted(p for p in before if before[p] != after.get(p))
    assert changed and len(changed) < len(before)  # the test means something
    with Store.open(tmp_path / "s") as store:
        for i in range(0, len(events), 9):
            store.append([g.encoded(e) for e in events[i : i + 9]], g.KEYRING)
        for jobs in (1, 2):
            report = store.replay(revoked, jobs=jobs)
            assert not report.same_keyring
            assert report.changed_piths == changed
            assert {d.kind for d in report.discrepancies} <= {"state", "pith"}
        assert store.replay(g.KEYRING, jobs=2).ok
        store.rebuild(revoked)
        assert store.replay(revoked).ok
        assert all(store.state(p) == (s or None) for p, s in after.items())


def assert_same_report(a: Any, b: Any) -> None:
    """Two replays of one store, run differently, report the same, in the same order."""
    assert a.discrepancies == b.discrepancies
    assert (a.piths, a.events, a.copies) == (b.piths, b.events, b.copies)


def test_parallel_replay_reports_the_same(damaged: tuple[Store, list[Any]]) -> None:
    store, events = damaged
    unindex(store, attestation(events))
    one = store.replay(g.KEYRING, jobs=1)
    two = store.replay(g.KEYRING, jobs=3)
    assert not one.ok
    assert_same_report(one, two)


def test_replay_work_names_every_pith_and_the_evidence_claiming_it(
    damaged: tuple[Store, list[Any]],
) -> None:
    # Replay reads the piths to replay (and evidence that claims another pith than its
    # event) before the structure pass, which with --jobs N runs beside the workers.
    from pithlog.store.replay_structure import replay_work

    store, events = damaged
    victim = attestation(events)
    other = next(e for e in events if e["pith_number"] != victim["pith_number"])
    # A copy of the victim's event_id claiming another pith (it fails check 3): evidence.
    moved = {**victim, "pith_number": other["pith_number"]}
    store.append([g.encoded(moved)], g.KEYRING, keep_invalid=True)
    # Damage: an evidence copy whose preferred copy is gone, and one that is not JSON.
    gone = next(e for e in events if e["event_type"] == "record_created")
    gid = bytes.fromhex(gone["event_id"][7:])
    far = (10**6).to_bytes(8, "big")  # a copy under a sequence number seq does not hold

    def damage(txn: Any, dbs: dict[str, Any]) -> None:
        txn.put(far, b"{", db=dbs["copies"])
        txn.put(gid + b"\x01" * 32, far, db=dbs["evidence"])

    store._write(damage)

    piths, foreign = store._read(replay_work)
    assert piths == sorted({e["pith_number"] for e in events})
    assert foreign == {other["pith_number"]: [bytes.fromhex(victim["event_id"][7:])]}
    one, two = store.replay(g.KEYRING, jobs=1), store.replay(g.KEYRING, jobs=2)
    assert one.discrepancies == two.discrepancies and not one.ok


def test_replay_with_verifying_processes_reports_the_same(
    damaged: tuple[Store, list[Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A large one-process replay verifies in helper processes, pipelined by chunk; a
    # small one in threads. Same report, damage included.
    import pithlog.store.replay
    import pithlog.store.replay_processes

    store, events = damaged
    victim = attestation(events)
    eid = bytes.fromhex(victim["event_id"][7:])
    data = bytearray(g.encoded(victim))
    at = data.index(b'"signature_b64":"') + 20
    data[at] = ord("A") if data[at] != ord("A") else ord("B")  # still base64: fails check 6
    assert check_alone(admit(json.loads(data)), g.KEYRING) == "bad_signature"
    overwrite_copy(store, eid, bytes(data))
    threads = store.replay(g.KEYRING, jobs=1)
    monkeypatch.setattr(pithlog.store.replay_processes, "VERIFY_PROCESS_MIN_PITHS", 0)
    monkeypatch.setattr(pithlog.store.replay, "_CHUNK", 1)
    processes = store.replay(g.KEYRING, jobs=1)
    assert any("applied: 0 entries missing, 1 extra" in d.line() for d in threads.discrepancies)
    assert_same_report(threads, processes)


def test_replay_with_the_structure_pass_in_its_own_process_reports_the_same(
    damaged: tuple[Store, list[Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A large one-process replay checks the structure in a process of its own beside the
    # piths; its findings come first in the report, as when it runs first, here.
    import pithlog.store.replay_processes

    store, events = damaged
    unindex(store, attestation(events))
    store._write(lambda txn, dbs: txn.put(b"\x00" * 8, b"short", db=dbs["seq"]))
    here = store.replay(g.KEYRING, jobs=1)
    started = []
    structure = Store._structure

    def spy(self: Store, stack: Any, piths: list[str], apart: bool, pool: Any = None) -> Any:
        future = structure(self, stack, piths, apart, pool)
        started.append(future.running() or not future.done())
        return future

    monkeypatch.setattr(pithlog.store.replay_processes, "STRUCTURE_PROCESS_MIN_COPIES", 0)
    monkeypatch.setattr(Store, "_structure", spy)
    apart = store.replay(g.KEYRING, jobs=1)
    assert started == [True]  # handed to a process, not done here before the piths
    kinds = [d.kind for d in here.discrepancies]
    assert "seq" in kinds and "by_pith" in kinds and "state" in kinds
    assert kinds.index("seq") < kinds.index("state")
    assert_same_report(here, apart)


def test_replay_by_default_uses_a_worker_per_core_above_the_threshold(
    damaged: tuple[Store, list[Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    # jobs not given: one worker per core from POOL_MIN_COPIES copies (lowered here), this
    # process alone below it; the report is that of jobs=1 either way, damage included.
    import pithlog.store.replay_processes as rp

    store, events = damaged
    unindex(store, attestation(events))
    one = store.replay(g.KEYRING, jobs=1)
    pools: list[int] = []
    replay_pool = rp._replay_pool

    def spy(store: Store, stack: Any, chunks: Any, ctx: Any, jobs: int, *rest: Any) -> Any:
        pools.append(jobs)
        return replay_pool(store, stack, chunks, ctx, jobs, *rest)

    monkeypatch.setattr(rp, "_replay_pool", spy)
    monkeypatch.setenv("PITHLOG_CORES", "2")
    small = store.replay(g.KEYRING)
    assert pools == []  # below the threshold: in this process
    monkeypatch.setattr(rp, "POOL_MIN_COPIES", len(events))
    monkeypatch.setattr(rp, "COPIES_PER_WORKER", len(events))
    default = store.replay(g.KEYRING)
    assert pools == []  # one worker per COPIES_PER_WORKER copies: one, so this process
    assert_same_report(one, default)
    monkeypatch.setattr(rp, "COPIES_PER_WORKER", len(events) // 2)
    default = store.replay(g.KEYRING)
    assert pools == [2]  # one worker per core
    assert not one.ok
    assert_same_report(one, small)
    assert_same_report(one, default)
    cached = store.replay(g.KEYRING, verify=False)  # on cached verdicts: in this process
    assert pools == [2]
    assert_same_report(store.replay(g.KEYRING, verify=False, jobs=1), cached)


def test_stored_copies_the_door_refuses_are_freed_with_the_collector_paused(
    tmp_path: Path, collector_paused: Callable[[], int]
) -> None:
    """Replay and its workers run with the cyclic collector paused. A stored copy that no
    longer passes the door was kept with its traceback, whose frame holds the pith's
    copies: a cycle, so each one stayed for the replay's life."""
    refusals = collector_paused
    rng = random.Random(42)
    events = valid(g.mixed_events(rng, piths=1, per_pith=12))
    pith = events[0]["pith_number"]
    with Store.open(tmp_path / "s") as store:
        store.append([g.encoded(e) for e in events], g.KEYRING)
        for e in events:
            eid = e["event_id"]
            overwrite_copy(store, bytes.fromhex(eid[7:]), b"junk " + eid.encode())
        before = refusals()
        read = store._read(lambda txn, dbs: _read_pith(txn, dbs, pith, []))
        assert sum(isinstance(v, pithlog.errors.DoorError) for v in read.passed.values()) > 5
        del read
        assert refusals() == before
