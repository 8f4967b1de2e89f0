"""Faults: SIGKILL during appends, damaged bytes, concurrent processes. A changed keyring
and replays run in parallel over damage: ``test_replay_faults.py``; the damaged store both
use: ``conftest.py`` and ``damage.py``."""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import select
import signal
import time
from pathlib import Path
from typing import Any

import eventgen as g
import pytest
from damage import attestation, lines, overwrite_copy, rewrite_summary, valid

from pithlog.errors import StoreError
from pithlog.protocol.canonical import jcs
from pithlog.store import Store
from pithlog.store.keyindex import entry_digest

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")

KEPT = ("stored", "duplicate", "replaced", "evidence")


# --- crash --------------------------------------------------------------------------------


def _append_until_killed(path: Path, pool: list[bytes], start: int, fd: int) -> None:
    """Child: append small batches; after each commit, report what it stored on ``fd``."""
    try:
        with Store.open(path, map_size=128 << 10) as store:
            position = start
            while True:
                batch = [pool[(position + i) % len(pool)] for i in range(4)]
                position += 4
                results = store.append(batch, g.KEYRING, keep_invalid=True)
                done = b"".join(r.event_id.encode() + b"\n" for r in results
                                if r.status in KEPT and r.event_id)  # fmt: skip
                os.write(fd, done)
    finally:
        os._exit(0)


def test_sigkill_during_appends_loses_nothing_reported(tmp_path: Path) -> None:
    rng = random.Random(11)
    events = g.mixed_events(rng, piths=30, per_pith=20)
    events += [g.forged(e) for e in rng.sample(events, 40)]
    rng.shuffle(events)
    pool = [g.encoded(e) for e in events]
    path = tmp_path / "crash"
    reported: set[str] = set()
    kills = 0
    for cycle in range(3):
        # a fresh store now and then keeps each replay small
        store_path = path / str(cycle)
        start = 0
        for _ in range(17):
            read_fd, write_fd = os.pipe()
            pid = os.fork()
            if pid == 0:  # pragma: no cover - the child never returns
                os.close(read_fd)
                _append_until_killed(store_path, pool, start, write_fd)
            os.close(write_fd)
            time.sleep(rng.uniform(0.005, 0.08))
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            kills += 1
            data = b""
            while select.select([read_fd], [], [], 0)[0]:
                chunk = os.read(read_fd, 1 << 16)
                if not chunk:
                    break
                data += chunk
            os.close(read_fd)
            complete = data[: data.rfind(b"\n") + 1]
            reported |= {line.decode() for line in complete.split()}
            try:
                opened = Store.open(store_path, create=False)
            except StoreError as exc:  # killed before the store's first commit
                assert exc.code == "store.missing", exc
                assert not reported
                continue
            with opened as store:
                report = store.replay(g.KEYRING)
                assert report.ok, [d.line() for d in report.discrepancies]
                missing = [e for e in reported if store.event(e) is None]
                assert not missing, f"reported as stored, then lost: {missing[:3]}"
                start = store.stats()["counts"]["seq"]  # go on with events not yet stored
        reported.clear()
    assert kills >= 50


# --- corruption ---------------------------------------------------------------------------


def test_flipped_byte_in_an_envelope_is_named(damaged: tuple[Store, list[Any]]) -> None:
    store, events = damaged
    victim = attestation(events)
    eid = bytes.fromhex(victim["event_id"][7:])
    data = bytearray(g.encoded(victim))
    at = data.index(b"https://") + 9
    data[at] ^= 0x01

    overwrite_copy(store, eid, bytes(data))
    found = lines(store)
    assert found
    assert any(victim["event_id"] in line for line in found)
    assert any(line.startswith(f"state: {victim['pith_number']}") for line in found)


def test_removed_index_entries_are_named(damaged: tuple[Store, list[Any]]) -> None:
    store, events = damaged
    victim = attestation(events)
    eid = bytes.fromhex(victim["event_id"][7:])
    key = victim["pith_number"].encode() + eid
    store._write(lambda txn, dbs: txn.delete(key, db=dbs["by_pith"]))
    found = lines(store)
    assert f"by_pith: {victim['event_id']}: not indexed under its pith {victim['pith_number']}" \
        in found  # fmt: skip
    assert any(line.startswith(f"state: {victim['pith_number']}") for line in found)

    def drop_seq(txn: Any, dbs: dict[str, Any]) -> None:
        for k, v in txn.cursor(db=dbs["seq"]):
            if v[:32] == eid:
                txn.delete(k, db=dbs["seq"])
                return

    store._write(drop_seq)
    assert any(line.startswith(f"seq: {victim['event_id']}: the preferred copy")
               for line in lines(store))  # fmt: skip


def test_a_by_pith_key_of_no_pith_number_is_named(damaged: tuple[Store, list[Any]]) -> None:
    """A by_pith key whose pith part is not a pith number (a byte flipped out of ASCII) is
    said by the structure pass, not replayed as a pith (it cannot name one)."""
    store, events = damaged
    victim = attestation(events)
    key = bytearray(victim["pith_number"].encode() + bytes.fromhex(victim["event_id"][7:]))
    key[10] = 0xC3
    store._write(lambda txn, dbs: txn.put(bytes(key), b"", db=dbs["by_pith"]))
    assert lines(store) == [f"by_pith: key {bytes(key).hex()}: is not pith_number + event id"]


def test_altered_cached_state_and_verdict_are_named(damaged: tuple[Store, list[Any]]) -> None:
    store, events = damaged
    victim = attestation(events)
    pith = victim["pith_number"]
    summary = store._read(lambda txn, dbs: txn.get(pith.encode(), db=dbs["piths"]))
    assert summary is not None
    altered = json.loads(summary)
    altered["event_count"] += 1
    store._write(lambda txn, dbs: txn.put(pith.encode(), jcs(altered), db=dbs["piths"]))
    found = lines(store)
    assert len(found) == 1 and found[0].startswith(f"state: {pith}: differs in event_count")
    store._write(lambda txn, dbs: txn.put(pith.encode(), summary, db=dbs["piths"]))
    assert store.replay(g.KEYRING).ok

    # An applied event dropped from the index: named as index damage, and the state differs.
    def drop_applied(txn: Any, dbs: dict[str, Any]) -> bytes:
        cursor = txn.cursor(db=dbs["applied"])
        assert cursor.set_range(pith.encode())
        key: bytes = cursor.key()
        value: bytes = cursor.value()
        cursor.delete()
        return key + value

    removed = store._write(drop_applied)
    found = lines(store)
    assert f"index: {pith}: applied: 1 entries missing, 0 extra, 0 differing from a full " \
        "reduction" in found
    assert any(line.startswith(f"state: {pith}: differs in ") for line in found)
    store._write(lambda txn, dbs: txn.put(removed[:-16], removed[-16:], db=dbs["applied"]))
    assert store.replay(g.KEYRING).ok
    # the verdict is kept under the digest of the one keyring entry that judged it and the
    # copy's sequence number
    digest = entry_digest(g.KEYRING[victim["signer"]["key_id"]].entry())
    eid = bytes.fromhex(victim["event_id"].removeprefix("sha256:"))
    pointer = store._read(lambda txn, dbs: txn.get(eid, db=dbs["events"]))
    assert store._read(lambda txn, dbs: txn.get(digest + pointer, db=dbs["verdicts"])) == b"valid"
    store._write(lambda txn, dbs: txn.put(digest + pointer, b"bad_signature",
                                          db=dbs["verdicts"]))  # fmt: skip
    assert lines(store) == [
        f"verdicts: {victim['event_id']}: the preferred copy: cached verdict 'bad_signature', "
        "checks 1-12 give 'valid'"
    ]
    # a verdict of bytes that are not UTF-8 is shown, not decoded strictly
    store._write(lambda txn, dbs: txn.put(digest + pointer, b"\xc4\x01", db=dbs["verdicts"]))
    assert lines(store) == [
        f"verdicts: copy {int.from_bytes(pointer, 'big')}: verdict b'\\xc4\\x01' is not one of "
        "checks 1-12",
        f"verdicts: {victim['event_id']}: the preferred copy: cached verdict '\ufffd\\x01', "
        "checks 1-12 give 'valid'",
    ]
    # a verdict keyed as format 6 keyed them (judge + copy hash), or naming no copy
    store._write(lambda txn, dbs: txn.put(digest + pointer, b"valid", db=dbs["verdicts"]))
    copy_hash = __import__("hashlib").sha256(g.encoded(victim)).digest()
    store._write(lambda txn, dbs: txn.put(digest + copy_hash, b"valid", db=dbs["verdicts"]))
    nowhere = digest + b"\xff" * 8
    store._write(lambda txn, dbs: txn.put(nowhere, b"valid", db=dbs["verdicts"]))
    assert sorted(lines(store)) == sorted([
        f"verdicts: key {(digest + copy_hash).hex()}: is not key entry digest + sequence number",
        f"verdicts: key {nowhere.hex()[:24]}: names no stored copy",
    ])



def test_a_summary_that_lacks_a_member_is_said_in_words(damaged: tuple[Store, list[Any]]) -> None:
    """A piths entry without a member the state is assembled from: replay's finding and
    store.corrupted said it as the KeyError's key, "'event_count'"."""
    store, events = damaged
    pith = attestation(events)["pith_number"]
    summary = json.loads(store._read(lambda txn, dbs: txn.get(pith.encode(), db=dbs["piths"])))
    said = f"index: {pith}: the state cannot be assembled from the index: "
    for damage, why in (
        ({m: v for m, v in summary.items() if m != "event_count"},
         "the piths entry of a state pith has no event_count"),
        ({m: v for m, v in summary.items() if m not in ("record", "valid_event_count")},
         "the piths entry of a state pith has no record, valid_event_count"),
        ({**summary, "record": 5}, "the piths entry's record is not an event_id"),
        ({**summary, "record": attestation(events)["event_id"]},
         f"the piths entry's record {attestation(events)['event_id']} is a mirror_hint "
         "event, not a record_created"),
        ({m: v for m, v in summary.items() if m != "status"},
         "the piths entry has no status 'state' or 'pending'"),
        ([summary], "the piths entry is not a JSON object"),
    ):
        was = rewrite_summary(store, pith, damage)
        assert said + why in lines(store), (why, lines(store))
        with pytest.raises(StoreError) as refused:
            store.state(pith)
        assert f"is damaged ({why})" in refused.value.message
        store._write(lambda txn, dbs, w=was: txn.put(pith.encode(), w, db=dbs["piths"]))
    assert store.replay(g.KEYRING).ok


@pytest.mark.parametrize("damage", [[1], {}, {"status": "state"}, {"status": "pending"}])
def test_the_reads_of_a_damaged_summary_are_store_corrupted(
    damaged: tuple[Store, list[Any]], damage: Any
) -> None:
    """stats, piths, pending, status and the totals read every piths entry: a damaged one
    was a TypeError or a KeyError, a traceback of the CLI, where state says
    store.corrupted."""
    store, events = damaged
    pith = attestation(events)["pith_number"]
    rewrite_summary(store, pith, damage)
    for read in (store.stats, store.piths, store.pending, store.pith_totals,
                 lambda: store.status(pith), lambda: store.state(pith)):  # fmt: skip
        with pytest.raises(StoreError) as refused:
            read()
        assert refused.value.code == "store.corrupted"
        assert f"the index of {pith} is damaged (the piths entry " in refused.value.message
    assert any(line.startswith(f"index: {pith}: ") for line in lines(store))


@pytest.mark.parametrize("damage", [b"\x01", b"\x00" * 9])
def test_stats_of_a_damaged_next_seq_is_store_corrupted(
    damaged: tuple[Store, list[Any]], damage: bytes
) -> None:
    """stats unpacked meta next_seq as it found it: a struct.error, a traceback of the CLI
    and a 500 from a server's /stats, where replay names the damage."""
    store, _ = damaged
    store._write(lambda txn, dbs: txn.put(b"next_seq", damage, db=dbs["meta"]))
    with pytest.raises(StoreError) as refused:
        store.stats()
    assert refused.value.code == "store.corrupted"
    assert "meta next_seq" in refused.value.message
    assert f"meta: next_seq: is {damage!r}, not an 8-byte counter" in lines(store)


def test_a_summary_count_equal_in_python_but_not_in_bytes_is_a_state_difference(
    tmp_path: Path,
) -> None:
    # Replay compares the parts a state is assembled from, not the documents; a count the
    # summary writes as true or 1.0 equals 1 in Python but assembles other bytes.
    with Store.open(tmp_path / "s") as store:
        record = g.record("2501.00077")
        store.append([g.encoded(record)], g.KEYRING)
        pith = record["pith_number"]
        summary = store._read(lambda txn, dbs: txn.get(pith.encode(), db=dbs["piths"]))
        assert summary is not None and b'"event_count":1,' in summary
        for written in (b"true", b"1.0"):
            altered = summary.replace(b'"event_count":1,', b'"event_count":' + written + b",")
            store._write(lambda txn, dbs, a=altered: txn.put(pith.encode(), a, db=dbs["piths"]))
            found = store.replay(g.KEYRING).discrepancies
            assert [(d.kind, d.subject) for d in found] == [("state", pith)], found
        store._write(lambda txn, dbs: txn.put(pith.encode(), summary, db=dbs["piths"]))
        assert store.replay(g.KEYRING).ok


def test_a_pith_whose_summary_went_missing_is_re_reduced_whole_on_append(
    damaged: tuple[Store, list[Any]],
) -> None:
    """An append treats a pith without a ``piths`` entry as new to the store (its events are
    the batch's) only when by_pith agrees; a store that lost the entry is re-reduced whole,
    which repairs it, instead of being indexed from the new events alone."""
    store, events = damaged
    victim = attestation(events)
    pith = victim["pith_number"]
    store._write(lambda txn, dbs: txn.delete(pith.encode(), db=dbs["piths"]))
    assert any(line.startswith(f"state: {pith}:") for line in lines(store))
    late = g.attestation(pith, at=900, statement="added after the damage")
    assert [r.status for r in store.append([g.encoded(late)], g.KEYRING)] == ["stored"]
    assert store.state(pith) == g.expected_states([*events, late])[pith]
    assert store.replay(g.KEYRING).ok

# --- concurrency --------------------------------------------------------------------------


def _appender(path: str, batches: list[list[bytes]]) -> None:
    with Store.open(path, map_size=64 << 10) as store:
        for batch in batches:
            store.append(batch, g.KEYRING)


def _reader(path: str, piths: list[str], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not os.path.exists(os.path.join(path, "data.mdb")):
        time.sleep(0.01)
    with Store.open(path, map_size=64 << 10) as store:
        while time.monotonic() < deadline:
            for pith in piths:
                store.state(pith)
            sum(1 for _ in store.export())
            store.stats()


def test_two_appenders_and_a_reader_at_once(tmp_path: Path) -> None:
    rng = random.Random(31)
    events = valid(g.mixed_events(rng, piths=10, per_pith=10))
    rng.shuffle(events)
    halves = [events[0::2], events[1::2]]
    path = str(tmp_path / "s")
    ctx = multiprocessing.get_context("fork")
    piths = sorted({e["pith_number"] for e in events})
    procs = [ctx.Process(target=_reader, args=(path, piths, 1.0))]
    for half in halves:
        batches = [[g.encoded(e) for e in half[i : i + 5]] for i in range(0, len(half), 5)]
        procs.append(ctx.Process(target=_appender, args=(path, batches)))
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    with Store.open(path) as store:
        assert all(store.event(e["event_id"]) == g.encoded(e) for e in events)
        expected = g.expected_states(events)
        assert {p["pith_number"] for p in store.piths()} == set(expected)
        assert all(store.state(p) == (s or None) for p, s in expected.items())
        assert store.replay(g.KEYRING).ok
        assert store.stats()["map_size"] > 64 << 10



def test_an_open_that_meets_a_map_grown_meanwhile_is_made_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race of the test above, made certain: ``lmdb.open`` fails with MDB_MAP_RESIZED
    (another process grew the map between LMDB's read of the meta pages and the
    transaction the open begins) a few times, then succeeds; a store that never stops
    failing so is ``store.lmdb``, not a hang."""
    import lmdb

    import pithlog.store.environment as environment

    path = tmp_path / "s"
    with Store.open(path) as store:
        store.append([g.encoded(e) for e in valid(g.mixed_events(random.Random(2), 2, 2))],
                     g.KEYRING)  # fmt: skip
    real_open = lmdb.open
    failures = [environment.OPEN_RESIZED_TRIES - 1]

    def resized_open(*args: Any, **kwargs: Any) -> Any:
        if failures[0] > 0:
            failures[0] -= 1
            raise lmdb.MapResizedError("mdb_txn_begin: MDB_MAP_RESIZED")
        return real_open(*args, **kwargs)

    monkeypatch.setattr(lmdb, "open", resized_open)
    with Store.open(path) as store:
        assert store.replay(g.KEYRING).ok
    assert failures == [0]
    failures[0] = environment.OPEN_RESIZED_TRIES
    with pytest.raises(StoreError) as raised:
        Store.open(tmp_path / "s")
    assert raised.value.code == "store.lmdb"


# --- the store's files taken away while it is open ----------------------------------------


@pytest.mark.parametrize("how", ["deleted", "moved", "replaced"])
def test_a_store_whose_files_went_away_while_open_takes_no_more_writes(
    tmp_path: Path, how: str
) -> None:
    """A store deleted, moved or restored from a backup under a running server (``serve
    --submit``, ``mirror --follow``): LMDB goes on committing into the data file it holds
    open, an unlinked inode or one no longer at the path, and every append after that was
    reported stored and then lost. Each write transaction now checks the path first."""
    path = tmp_path / "s"
    events = [g.encoded(e) for e in g.mixed_events(random.Random(5), piths=4, per_pith=3)]
    with Store.open(path) as store:
        store.append(events[:4], g.KEYRING)
        held = store.stats()["counts"]["seq"]
        if how == "deleted":
            for name in os.listdir(path):
                os.unlink(path / name)
            os.rmdir(path)
        elif how == "moved":
            os.rename(path, tmp_path / "elsewhere")
        else:
            os.rename(path, tmp_path / "old")
            with Store.open(tmp_path / "backup") as backup:
                backup.append(events[:2], g.KEYRING)
                restored_held = backup.stats()["counts"]["seq"]
            os.rename(tmp_path / "backup", path)
        with pytest.raises(StoreError) as gone:
            store.append(events[4:], g.KEYRING)
        assert gone.value.code == "store.moved"
        assert store.stats()["counts"]["seq"] == held  # reads go on, from the files it holds
    if how == "replaced":
        with Store.open(path, create=False) as restored:  # the new one, unwritten by the old
            assert restored.stats()["counts"]["seq"] == restored_held
            restored.append(events[4:], g.KEYRING)


@pytest.mark.parametrize("damage", [[1], {}, {"status": "state"}, {"status": "pending"}])
def test_an_append_to_a_pith_of_a_damaged_summary_is_store_corrupted(
    damaged: tuple[Store, list[Any]], damage: Any
) -> None:
    """An append to a pith whose piths entry is damaged indexed the entry as it was: a
    KeyError ('record') or a TypeError, a traceback of the CLI. It is store.corrupted, as
    the reads of that entry are, and writes nothing."""
    store, events = damaged
    pith = attestation(events)["pith_number"]
    rewrite_summary(store, pith, damage)
    size = store.tree_size()
    late = g.mirror_hint(pith, 10_000, "https://mirror.example/late")
    with pytest.raises(StoreError) as refused:
        store.append([g.encoded(late)], g.KEYRING)
    assert refused.value.code == "store.corrupted"
    assert f"the index of {pith} is damaged (the piths entry " in refused.value.message
    assert store.tree_size() == size


def test_replay_names_damaged_meta_and_copies(damaged: tuple[Store, list[Any]]) -> None:
    """What the structure pass and the replay of a pith each claim to compare, one damage
    at a time, each put back after: the merge version and the sequence counter in
    ``meta``, a copy whose bytes no longer hash to the copy ``seq`` logs or are not its
    JCS encoding, and a preferred copy stored under another event's id."""
    store, events = damaged
    victim, other = attestation(events), events[0]
    eid = bytes.fromhex(victim["event_id"][7:])

    def meta(key: bytes, value: bytes) -> bytes:
        was: bytes = store._read(lambda txn, dbs: txn.get(key, db=dbs["meta"]))
        store._write(lambda txn, dbs: txn.put(key, value, db=dbs["meta"]))
        return was

    was = meta(b"merge_version", b"0")
    assert any(line.startswith("meta: merge_version: ") for line in lines(store))
    meta(b"merge_version", was)
    was = meta(b"next_seq", (len(events) - 1).to_bytes(8, "big"))
    assert f"meta: next_seq: is {len(events) - 1} but seq already holds {len(events)}" \
        in lines(store)  # fmt: skip
    meta(b"next_seq", was)
    assert store.replay(g.KEYRING).ok

    stored = store._read(lambda txn, dbs: txn.get(txn.get(eid, db=dbs["events"]),
                                                  db=dbs["copies"]))  # fmt: skip
    spaced = json.dumps(victim, indent=1).encode()
    overwrite_copy(store, eid, spaced)
    found = lines(store)
    assert any("does not hash to the copy seq names" in line for line in found), found
    assert any(line.endswith("the preferred copy is not stored in its JCS encoding")
               for line in found), found  # fmt: skip
    overwrite_copy(store, eid, g.encoded(other))
    found = lines(store)
    assert any(f"the preferred copy says event_id {other['event_id']}" in line
               for line in found), found  # fmt: skip
    overwrite_copy(store, eid, stored)
    assert store.replay(g.KEYRING).ok
