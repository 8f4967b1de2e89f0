"""A keyring change costs what it changes (docs/store.md, "A keyring change"): keys added
and revoked on a store of a few thousand events (100,000 with ``make test-large``), each
state compared byte for byte with a full reduction under the new keyring; a change killed
between its pieces resumes and ends equal."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import eventgen as g
import lmdb
import pytest
from oldformat import as_format_5

from pithlog.errors import StoreError
from pithlog.protocol.canonical import jcs
from pithlog.protocol.events import parse_envelope
from pithlog.protocol.keys import Keyring, make_keyring
from pithlog.protocol.reduce import Pending, reduce_events
from pithlog.protocol.state import render, state_document
from pithlog.store import Store, rekey
from pithlog.store.keyindex import key_hash, meaning
from pithlog.store.layout import FORMAT_VERSION
from pithlog.testing import TRUSTED, test_keyring_entries

ROOT = Path(__file__).resolve().parents[2]


def keyring(names: tuple[str, ...], **overrides: dict[str, Any]) -> Keyring:
    return make_keyring(test_keyring_entries(names, **overrides))


def reference(lines: list[bytes], ring: Keyring) -> dict[str, bytes | None]:
    """What `pithlog reduce` prints for these events under ``ring``: pith -> state, or
    ``None`` for a pending pith."""
    out: dict[str, bytes | None] = {}
    for pith, result in reduce_events([parse_envelope(b) for b in lines], ring).items():
        out[pith] = None if isinstance(result, Pending) else render(state_document(result))
    return out


def assert_reduced(store: Store, expected: dict[str, bytes | None]) -> None:
    """Every pith of the store, byte for byte the full reduction's."""
    listed = {p["pith_number"]: p["status"] for p in store.piths()}
    assert set(listed) == set(expected)
    for pith, state in expected.items():
        assert listed[pith] == ("pending" if state is None else "state"), pith
        assert store.state(pith) == state, pith


def sparse_log(piths: int, per_pith: int, seed: int = 7) -> list[bytes]:
    """``eventgen.mixed_events`` with the stranger's events (a key the keyring lacks) kept
    in one pith of ten, so that adding its key touches few piths."""
    events = g.mixed_events(random.Random(seed), piths, per_pith)
    pith_order = list(dict.fromkeys(e["pith_number"] for e in events))
    few = set(pith_order[::10])
    kept = [e for e in events if e["signer"]["key_id"] != "test-stranger"
            or e["pith_number"] in few]  # fmt: skip
    # a second, forged copy of some stranger events: evidence judged with them
    kept += [g.forged(e) for e in kept[::97] if e["signer"]["key_id"] == "test-stranger"]
    return [jcs(e) for e in kept]


def signed_by(lines: list[bytes], key_id: str) -> tuple[int, set[str]]:
    """Copies (distinct) signed by ``key_id`` and the piths they name."""
    copies = {b for b in lines if parse_envelope(b).value["signer"]["key_id"] == key_id}
    return len(copies), {parse_envelope(b).pith_number for b in copies}


def test_adding_and_revoking_keys_costs_what_it_changes(tmp_path: Path) -> None:
    """Adding a key re-judges the copies naming its key_id and re-reduces their piths
    only; revoking one re-reduces only the piths with events by it; every state then
    equals a full reduction under the new keyring."""
    lines = sparse_log(piths=220, per_pith=20)
    assert len(lines) > 4000
    before, added = keyring(TRUSTED), keyring((*TRUSTED, "stranger"))
    with Store.open(tmp_path / "s") as store:
        store.append(lines, before, keep_invalid=True)
        copies, piths = signed_by(lines, "test-stranger")
        assert 0 < len(piths) < 40
        planned = store.rekey_plan(added)
        assert planned is not None and (planned.copies, planned.keys) == (copies, 1)
        # an append under the new keyring applies the change itself (it is small)
        extra = g.attestation(next(iter(piths)), 450, "after the key", signer="author")
        assert store.append([jcs(extra)], added)[0].status == "stored"
        assert store.keyring_digest() == added.digest
        lines.append(jcs(extra))
        assert_reduced(store, reference(lines, added))
        assert store.replay(added, verify=False).ok

        # revoking the mirror's key: only the piths with mirror events are re-reduced
        revoked = keyring((*TRUSTED, "stranger"), mirror={"revoked_at": g.ts(300)})
        copies, piths = signed_by(lines, "test-mirror")
        planned = store.rekey_plan(revoked, count_events=True)
        assert planned is not None
        assert (planned.copies, planned.keys) == (copies, 1)
        assert planned.events == sum(store.status(p)["event_count"] for p in piths)
        with pytest.raises(StoreError) as large:  # few copies, but piths of many events
            store.apply_keyring(revoked, event_limit=planned.events - 1)
        assert f"piths of {planned.events:,} events to re-reduce" in large.value.message
        counts = store.rekey(revoked, piece_copies=150, piece_events=400)
        assert counts["copies"] == copies
        assert counts["piths"] == len(piths) < len(store.piths())
        assert counts["pieces"] > 3
        assert store.keyring_digest() == revoked.digest
        assert_reduced(store, reference(lines, revoked))
        assert store.replay(revoked, verify=False).ok
        # and back: the cached verdicts of the old entry serve again (no new ones)
        verdicts = store.stats()["counts"]["verdicts"]
        store.rekey(added)
        assert store.stats()["counts"]["verdicts"] == verdicts
        assert_reduced(store, reference(lines, added))
        assert store.rekey(added) == {"copies": 0, "piths": 0, "pieces": 0}


def test_a_change_to_a_key_no_copy_names_is_one_small_transaction(tmp_path: Path) -> None:
    rec = g.record("2501.00001")
    with Store.open(tmp_path / "s") as store:
        store.append([jcs(rec)], keyring(TRUSTED))
        planned = store.rekey_plan(keyring((*TRUSTED, "stranger")))
        assert planned is not None and planned.copies == 0
        assert store.rekey(keyring((*TRUSTED, "stranger")))["pieces"] == 1
        assert store.keyring_digest() == keyring((*TRUSTED, "stranger")).digest


def test_damaged_keyring_entries_are_named_and_not_diffed_against(tmp_path: Path) -> None:
    """``meta[keyring]`` that does not hash to ``keyring_digest`` (damaged: here it already
    holds the revocation a change is about to make) is named by replay, and a change to a
    new keyring judges every key_id rather than a difference taken from it, so it still
    ends equal to a full reduction; garbage there is no traceback either."""
    lines = sparse_log(piths=30, per_pith=10)
    before = keyring(TRUSTED)
    revoked = keyring(TRUSTED, mirror={"revoked_at": g.ts(300)})
    with Store.open(tmp_path / "s") as store:
        store.append(lines, before, keep_invalid=True)
        lied = meaning(revoked)
        store._write(lambda txn, dbs: txn.put(b"keyring", lied, db=dbs["meta"]))
        assert [d.line() for d in store.replay(before).discrepancies] == [
            "meta: keyring: the stored keyring entries do not hash to keyring_digest (one of "
            "the two is damaged)"
        ]
        planned = store.rekey_plan(revoked)
        # every key_id a stored copy names, not the empty difference the entries give
        signers = {parse_envelope(b).value["signer"]["key_id"] for b in lines}
        assert planned is not None and planned.keys == len(signers) > 1
        store.rekey(revoked)
        assert_reduced(store, reference(lines, revoked))
        assert store.replay(revoked, verify=False).ok

        store._write(lambda txn, dbs: txn.put(b"keyring", b"\x00garbage", db=dbs["meta"]))
        store._write(lambda txn, dbs: txn.put(b"keyring_digest", b"\x01", db=dbs["meta"]))
        assert {d.line() for d in store.replay(revoked).discrepancies} >= {
            "meta: keyring_digest: is 1 bytes, not a 32-byte digest",
            "meta: keyring: the stored keyring entries do not hash to keyring_digest (one of "
            "the two is damaged)",
        }
        store.rekey(before)
        assert_reduced(store, reference(lines, before))
        assert store.replay(before, verify=False).ok


def test_a_damaged_cached_verdict_is_checked_again_not_read(tmp_path: Path) -> None:
    """A ``verdicts`` value that is no verdict (damaged) stopped a rekey, a rebuild (the
    repair replay asks for) and an append with a ValueError; each now checks the copy
    again and writes its verdict over the damaged one."""
    lines = sparse_log(piths=20, per_pith=10)
    before = keyring(TRUSTED)
    revoked = keyring(TRUSTED, mirror={"revoked_at": g.ts(300)})

    def damage(txn: Any, dbs: dict[str, Any]) -> None:
        for key in list(txn.cursor(db=dbs["verdicts"]).iternext(values=False)):
            txn.put(key, b"valif", db=dbs["verdicts"])

    with Store.open(tmp_path / "s") as store:
        store.append(lines, before, keep_invalid=True)
        store._write(damage)
        assert any("is not one of checks 1-12" in d.detail
                   for d in store.replay(before).discrepancies)  # fmt: skip
        store.rekey(revoked)
        assert_reduced(store, reference(lines, revoked))
        store._write(damage)
        store.rebuild(before)
        assert_reduced(store, reference(lines, before))
        # what is left is the damage under the revoked entry's judge, which this keyring
        # does not use (and replay still names)
        left = store.replay(before).discrepancies
        assert left and all(d.detail == "verdict b'valif' is not one of checks 1-12"
                            for d in left)  # fmt: skip
        store._write(damage)
        extra = g.attestation(parse_envelope(lines[0]).pith_number, 450, "later",
                              signer="author")  # fmt: skip
        store.append([jcs(extra), *lines[:50]], before, keep_invalid=True)
        lines.append(jcs(extra))
        assert_reduced(store, reference(lines, before))


def test_a_damaged_summary_stops_a_change_with_a_line_and_a_rebuild_repairs_it(
    tmp_path: Path,
) -> None:
    """A pith whose cached summary is damaged, met by a keyring change (an append's, or
    ``pithlog rekey``'s), is ``store.corrupted``, not a msgspec traceback; a rebuild, which
    re-reduces it whole, repairs it."""
    lines = sparse_log(piths=20, per_pith=10)
    before = keyring(TRUSTED)
    revoked = keyring(TRUSTED, mirror={"revoked_at": g.ts(300)})
    _, piths = signed_by(lines, "test-mirror")
    victim = sorted(piths)[0].encode()
    with Store.open(tmp_path / "s") as store:
        store.append(lines, before, keep_invalid=True)
        store._write(lambda txn, dbs: txn.put(victim, b'{"status": "st', db=dbs["piths"]))
        with pytest.raises(StoreError) as caught:
            store.append([lines[0]], revoked)  # the change applied first, inline
        assert caught.value.code == "store.corrupted"
        with pytest.raises(StoreError) as caught:
            store.rekey(revoked)
        assert caught.value.code == "store.corrupted"
        store.rebuild(revoked)
        assert_reduced(store, reference(lines, revoked))
        assert store.replay(revoked).ok


def test_stray_marks_in_rekey_are_named_and_passed_over(tmp_path: Path) -> None:
    """``rekey`` holds the piths a change under way still has to re-reduce: a mark with
    no change under way, or one that is no pith number (not even ASCII, when damaged), is
    named by replay, and a change passes over the latter instead of failing to decode it."""
    lines = sparse_log(piths=10, per_pith=5)
    before = keyring(TRUSTED)
    pith = parse_envelope(lines[0]).pith_number
    with Store.open(tmp_path / "s") as store:
        store.append(lines, before, keep_invalid=True)
        store._write(lambda txn, dbs: txn.put(pith.encode(), b"", db=dbs["rekey"]))
        stray = b"pith:\xff"
        store._write(lambda txn, dbs: txn.put(stray, b"", db=dbs["rekey"]))
        assert sorted(d.line() for d in store.replay(before).discrepancies) == [
            f"rekey: key {stray.hex()}: is not a pith number",
            f"rekey: {pith}: marked for a keyring change, but none is under way",
        ]
        revoked = keyring(TRUSTED, mirror={"revoked_at": g.ts(300)})
        store.rekey(revoked)
        assert_reduced(store, reference(lines, revoked))
        assert store.replay(revoked).ok


_KILLED_REKEY = textwrap.dedent("""
    import os, signal, sys
    from pithlog.protocol.keys import load_keyring
    from pithlog.store import Store
    path, ring, stage = sys.argv[1], load_keyring(open(sys.argv[2], "rb").read()), sys.argv[3]
    pieces = []
    def progress(at, done, total):
        pieces.append(at)
        if pieces.count(stage) >= 2:
            os.kill(os.getpid(), signal.SIGKILL)  # between two pieces, after a commit
    with Store.open(path, create=False) as store:
        store.rekey(ring, progress=progress, piece_copies=100, piece_events=300)
""")


@pytest.mark.parametrize("stage", ["judge", "reduce"])
def test_a_rekey_killed_between_pieces_resumes_and_ends_equal(tmp_path: Path,
                                                             stage: str) -> None:  # fmt: skip
    """A process killed after a piece (the second of the judging step, or of the
    reducing step) leaves the store under its old keyring digest, each pith's state that
    of the old keyring or of the new one (whole); running the change again finishes it."""
    lines = sparse_log(piths=80, per_pith=15, seed=11)
    old = keyring(TRUSTED)
    new = keyring(TRUSTED, author={"revoked_at": g.ts(250)})
    ring_file = tmp_path / "new.json"
    ring_file.write_bytes(jcs({"keyring_version": "1", "keys": test_keyring_entries(
        TRUSTED, author={"revoked_at": g.ts(250)})}))  # fmt: skip
    with Store.open(tmp_path / "s") as store:
        store.append(lines, old, keep_invalid=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", _KILLED_REKEY, str(tmp_path / "s"),
                           str(ring_file), stage], env=env, timeout=300)  # fmt: skip
    assert done.returncode == -9
    was, will = reference(lines, old), reference(lines, new)
    with Store.open(tmp_path / "s", create=False) as store:
        assert store.keyring_digest() == old.digest
        assert store.stats()["rekey_target"] == new.digest
        planned = store.rekey_plan(new)
        assert planned is not None and planned.resumed
        states = {p["pith_number"]: store.state(p["pith_number"]) for p in store.piths()}
        if stage == "reduce":  # some piths are new already
            assert any(states[p] != was[p] for p in states)
        assert all(states[p] in (was[p], will[p]) for p in states)
        with pytest.raises(StoreError) as refused:  # large: an append does not take it on
            store.apply_keyring(old, limit=10)
        assert refused.value.code == "store.keyring_changed"
        store.rekey(new)
        assert store.keyring_digest() == new.digest
        assert store.stats()["rekey_target"] is None
        assert_reduced(store, reference(lines, new))
        assert store.replay(new, verify=False).ok


def test_a_format_3_store_is_migrated_and_then_rekeyed(tmp_path: Path) -> None:
    """Opening a format-3 store builds by_key and keeps its verdicts (under the keyring's
    digest) until the keyring changes; the first change then judges every copy."""
    lines = sparse_log(piths=30, per_pith=8, seed=3)
    ring = keyring(TRUSTED)
    path = tmp_path / "s"
    with Store.open(path) as store:
        store.append(lines, ring, keep_invalid=True)
        listed = store._read(lambda txn, dbs: sorted(
            txn.cursor(db=dbs["by_key"]).iternext(values=False)))  # fmt: skip
        states = {p["pith_number"]: store.state(p["pith_number"]) for p in store.piths()}
    as_format_3(path, ring)
    with Store.open(path, create=False) as store:
        assert store.stats()["format"] == FORMAT_VERSION.decode()
        assert store._read(lambda txn, dbs: sorted(
            txn.cursor(db=dbs["by_key"]).iternext(values=False))) == listed  # fmt: skip
        assert {p: store.state(p) for p in states} == states
        assert store.replay(ring, verify=False).ok  # the format-3 verdicts serve
        added = keyring((*TRUSTED, "stranger"))
        planned = store.rekey_plan(added)
        assert planned is not None and planned.copies == len(listed)
        store.rekey(added)
        assert_reduced(store, reference(lines, added))
        assert store.replay(added, verify=False).ok


def as_format_3(path: Path, ring: Keyring) -> None:
    """Rewrite a store as format 3 wrote it: verdicts keyed by the keyring's digest, no
    by_key, no rekey, no keyring entries in meta."""
    kd = bytes.fromhex(ring.digest)
    as_format_5(path)  # copies in events and evidence, as format 3 also held them
    env = lmdb.open(str(path), max_dbs=32, subdir=True)
    with env.begin(write=True) as txn:
        meta = env.open_db(b"meta", txn=txn)
        verdicts = env.open_db(b"verdicts", txn=txn)
        old = list(txn.cursor(db=verdicts))
        txn.drop(verdicts, delete=False)
        for key, value in old:
            txn.put(kd + key[32:], value, db=verdicts)
        for name in (b"by_key", b"rekey"):
            txn.drop(env.open_db(name, txn=txn), delete=True)
        txn.delete(b"keyring", db=meta)
        txn.put(b"format", b"3", db=meta)
    env.close()


def test_by_key_lists_every_copy_and_replay_checks_it(tmp_path: Path) -> None:
    lines = sparse_log(piths=10, per_pith=6, seed=5)
    with Store.open(tmp_path / "s") as store:
        store.append(lines, keyring(TRUSTED), keep_invalid=True)
        listed = store._read(lambda txn, dbs: list(
            txn.cursor(db=dbs["by_key"]).iternext(values=False)))  # fmt: skip
        expected = sorted(key_hash(parse_envelope(b).value["signer"]["key_id"])
                          + seq.to_bytes(8, "big") for seq, b in store.export())  # fmt: skip
        assert sorted(b for _, b in store.export()) == sorted(set(lines))
        assert listed == expected
        store._write(lambda txn, dbs: txn.delete(listed[0], db=dbs["by_key"]))
        report = store.replay(keyring(TRUSTED), verify=False)
        assert [d.kind for d in report.discrepancies] == ["by_key"]


@pytest.mark.large
def test_adding_and_revoking_keys_on_a_100k_store(tmp_path: Path) -> None:
    """``make test-large``: the bench's 100,000 events; a key added (its copies kept
    invalid until then), then one revoked, every state compared with a full reduction."""
    sys.path.insert(0, str(ROOT / "bench"))
    import workload

    lines = [line.rstrip(b"\n") for line in workload.mixed(100_000)]
    without = keyring(tuple(n for n in TRUSTED if n != "replicator"))
    with Store.open(tmp_path / "s") as store:
        for i in range(0, len(lines), 10_000):
            store.append(lines[i : i + 10_000], without, keep_invalid=True)
        full = keyring(TRUSTED)
        # every pith holds replicator events: all 100,000 events, at the inline limit
        planned = store.rekey_plan(full, count_events=True)
        assert planned is not None and planned.events == len(lines)
        assert planned.copies == signed_by(lines, "test-replicator")[0]
        assert store.apply_keyring(full) == planned
        assert store.keyring_digest() == full.digest
        assert_reduced(store, reference(lines, full))
        revoked = keyring(TRUSTED, tsa={"revoked_at": workload.ts(20)})
        counts = store.rekey(revoked)
        assert counts["copies"] == signed_by(lines, "test-tsa")[0]
        assert_reduced(store, reference(lines, revoked))


def test_a_piece_run_again_after_the_map_grew_keeps_its_verdicts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A piece whose transaction is aborted (the map full) and run again writes every
    verdict it judged the first time (replay finds one for every copy)."""
    from pithlog.store import rekey

    real = rekey.piece_work

    def full_once(*args: Any, **kwargs: Any) -> Any:
        work, tries = real(*args, **kwargs), []

        def wrapped(txn: Any, dbs: Any) -> Any:
            step = work(txn, dbs)
            tries.append(step)
            if len(tries) == 1:
                raise lmdb.MapFullError("the map is full (test)")
            return step

        return wrapped

    monkeypatch.setattr(rekey, "piece_work", full_once)
    lines = sparse_log(piths=20, per_pith=8, seed=9)
    revoked = keyring(TRUSTED, author={"revoked_at": g.ts(250)})
    with Store.open(tmp_path / "s") as store:
        store.append(lines, keyring(TRUSTED), keep_invalid=True)
        counts = store.rekey(revoked, piece_copies=20)
        assert counts["pieces"] > 2
        assert store.replay(revoked, verify=False).ok
        assert_reduced(store, reference(lines, revoked))


def _first_piece_only(store: Store) -> tuple[list[bytes], Keyring, Keyring]:
    """A log appended under one keyring, and the first piece only of a change to another
    that revokes the author key (as when a rekey is killed between its pieces): the whole
    log (its last five lines not appended), the old keyring and the new."""
    lines = sparse_log(piths=20, per_pith=6, seed=5)
    old = keyring(TRUSTED)
    new = keyring(TRUSTED, author={"revoked_at": g.ts(250)})
    store.append(lines[:-5], old, keep_invalid=True)
    step = store._write(rekey.piece_work(new, piece_copies=5))
    assert not step.done and store.stats()["rekey_target"] == new.digest
    return lines, old, new


def test_an_append_beside_a_change_under_way_says_so(tmp_path: Path) -> None:
    """An append under the store's own keyring whose transaction finds another process's
    change under way (``change_keyring=False``, as a server's, or a change that began
    after the append checked) is ``store.keyring_changed`` naming the change and its target:
    it said the states were reduced under a keyring other than its own, with the same
    digest on both sides."""
    with Store.open(tmp_path / "s") as store:
        lines, old, new = _first_piece_only(store)
        with pytest.raises(StoreError) as refused:
            store.append(lines[-5:], old, keep_invalid=True, change_keyring=False)
        assert refused.value.code == "store.keyring_changed"
        message = refused.value.message
        assert "under way" in message and new.digest[:16] in message
        assert f"{old.digest[:16]}..., this keyring is {old.digest[:16]}" not in message


def _two_changes() -> tuple[list[bytes], Keyring, Keyring]:
    """A log appended under the trusted keyring, and two other keyrings to change it to."""
    return (sparse_log(piths=40, per_pith=10, seed=3),
            keyring(TRUSTED, author={"revoked_at": g.ts(250)}),
            keyring(TRUSTED, replicator={"revoked_at": g.ts(300)}))  # fmt: skip


def test_two_changes_to_two_keyrings_by_turns_end(tmp_path: Path) -> None:
    """Two rekeys to two keyrings whose pieces alternate: each piece took the other's
    change over and began its judging again, so that neither ever ended (a livelock). A
    rekey's later pieces no longer take a change over: the one taken over stops with
    store.keyring_changed, and the other ends."""
    lines, first, second = _two_changes()
    with Store.open(tmp_path / "s") as store:
        store.append(lines, keyring(TRUSTED), keep_invalid=True)
        turns = 0

        def the_other_takes_a_piece(stage: str, done: int, total: int) -> None:
            nonlocal turns
            turns += 1
            assert turns < 50, "the two changes restart each other without end"
            store._write(rekey.piece_work(second, piece_copies=20))

        with pytest.raises(StoreError) as stopped:
            store.rekey(first, progress=the_other_takes_a_piece, piece_copies=20)
        assert stopped.value.code == "store.keyring_changed"
        assert "another change took this one over" in stopped.value.message
        assert second.digest[:16] in stopped.value.message  # the keyring it goes to
        assert store.stats()["rekey_target"] == second.digest
        store.rekey(second)
        assert store.keyring_digest() == second.digest
        assert_reduced(store, reference(lines, second))


def test_a_rekey_takes_over_a_change_to_another_keyring_under_way(tmp_path: Path) -> None:
    """A change to one keyring begun (a rekey interrupted, or taken over: 'run this one
    again to take the change back'): a rekey to another keyring takes it over in its
    first piece, where its later pieces would stop, and ends under its keyring."""
    lines, first, second = _two_changes()
    with Store.open(tmp_path / "s") as store:
        store.append(lines, keyring(TRUSTED), keep_invalid=True)
        store._write(rekey.piece_work(first, piece_copies=20))  # a change to first begun
        assert store.stats()["rekey_target"] == first.digest
        store.rekey(second, piece_copies=20)
        assert store.keyring_digest() == second.digest
        assert store.stats()["rekey_target"] is None
        assert_reduced(store, reference(lines, second))


def test_a_change_ended_by_another_rekey_to_the_same_keyring_ends_this_one(
    tmp_path: Path,
) -> None:
    """Two rekeys to one keyring: when the other ends the change between two of this one's
    pieces, this one's next piece finds no change under way and the store under its
    keyring, and ends (it is no change taken over by another keyring)."""
    lines = sparse_log(piths=40, per_pith=10, seed=3)
    old = keyring(TRUSTED)
    new = keyring(TRUSTED, author={"revoked_at": g.ts(250)})
    with Store.open(tmp_path / "s") as store:
        store.append(lines, old, keep_invalid=True)
        ended = []

        def the_other_ends_the_change(stage: str, done: int, total: int) -> None:
            if not ended:
                ended.append(store.rekey(new))

        store.rekey(new, progress=the_other_ends_the_change, piece_copies=20)
        assert ended and store.keyring_digest() == new.digest
        assert_reduced(store, reference(lines, new))


def test_an_append_that_may_not_change_the_keyring_is_refused_under_another(
    tmp_path: Path,
) -> None:
    """``change_keyring=False`` (a server's appends) under a keyring other than the one the
    store's states were reduced under is ``store.keyring_changed`` from the write
    transaction: nothing is stored and the store's keyring stays as it was."""
    lines = sparse_log(piths=10, per_pith=4, seed=11)
    old = keyring(TRUSTED)
    new = keyring(TRUSTED, author={"revoked_at": g.ts(250)})
    with Store.open(tmp_path / "s") as store:
        store.append(lines[:-3], old, keep_invalid=True)
        before = store.stats()["counts"]
        with pytest.raises(StoreError) as refused:
            store.append(lines[-3:], new, keep_invalid=True, change_keyring=False)
        assert refused.value.code == "store.keyring_changed"
        assert "pithlog rekey" in refused.value.message
        assert store.keyring_digest() == old.digest
        assert store.stats()["counts"] == before


def test_a_format_3_store_learns_its_keyring_entries_from_an_append(tmp_path: Path) -> None:
    """A format-3 store holds no keyring entries, so its first change judges every copy;
    an append under its own keyring (same digest) records the entries, after which a
    change judges only the copies of the key_ids it changes."""
    lines = sparse_log(piths=30, per_pith=8, seed=3)
    ring = keyring(TRUSTED)
    path = tmp_path / "s"
    with Store.open(path) as store:
        store.append(lines[:-1], ring, keep_invalid=True)
    as_format_3(path, ring)
    added = keyring((*TRUSTED, "stranger"))
    with Store.open(path, create=False) as store:
        store.append(lines[-1:], ring, keep_invalid=True)
        planned = store.rekey_plan(added)
        assert planned is not None and planned.keys == 1
        assert planned.copies == signed_by(lines, "test-stranger")[0]
        store.rekey(added)
        assert_reduced(store, reference(lines, added))


def test_a_rebuild_supersedes_a_change_under_way(tmp_path: Path) -> None:
    """A rebuild re-judges everything under its keyring, so a change under way (killed
    between its pieces) is dropped with its marks: the store is under the rebuild's
    keyring alone, and an append under it is not refused as beside a change."""
    with Store.open(tmp_path / "s") as store:
        lines, old, _ = _first_piece_only(store)
        store.rebuild(old)
        assert store.stats()["rekey_target"] is None
        assert store.stats()["counts"]["rekey"] == 0
        assert store.rekey_plan(old) is None
        store.append(lines[-5:], old, keep_invalid=True, change_keyring=False)
        assert_reduced(store, reference(lines, old))


def test_a_replay_beside_a_change_under_way_names_it(tmp_path: Path) -> None:
    """A rekey killed midway leaves some piths under the new keyring: a replay under the
    store's keyring (or the new one) then reports them as differing, and said nothing else,
    so that a store with a change to finish read as a damaged one. The replay now names
    the change under way and how to finish it; once it ends, the replay passes without it."""
    from tests.cli.test_cli import run

    lines = sparse_log(piths=30, per_pith=8, seed=5)
    old = keyring(TRUSTED)
    new = keyring(TRUSTED, author={"revoked_at": g.ts(250)})
    files = {}
    for name, ring in (("old", old), ("new", new)):
        files[name] = tmp_path / f"{name}.json"
        overrides = {} if ring is old else {"author": {"revoked_at": g.ts(250)}}
        files[name].write_bytes(jcs({"keyring_version": "1",
                                     "keys": test_keyring_entries(TRUSTED, **overrides)}))
    path = str(tmp_path / "s")
    with Store.open(path) as store:
        store.append(lines, old, keep_invalid=True)
        while True:  # judged, then a few piths re-reduced: a change stopped midway
            step = store._write(rekey.piece_work(new, piece_copies=10_000, piece_events=20))
            if step.reduced:
                break
        assert not step.done and store.stats()["rekey_target"] == new.digest
    for name in ("old", "new"):
        status, _, err = run(["--store", path, "replay", "--keyring", str(files[name])])
        assert status == 1, err
        said = [line for line in err.splitlines() if "under way" in line]
        assert len(said) == 1, err
        assert new.digest[:16] in said[0] and "rekey --keyring" in said[0]
    status, _, err = run(["--store", path, "rekey", "--keyring", str(files["new"])])
    assert status == 0, err
    status, _, err = run(["--store", path, "replay", "--verify", "--keyring",
                          str(files["new"])])  # fmt: skip
    assert status == 0 and "under way" not in err, err
