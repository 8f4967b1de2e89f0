"""The LMDB log: append semantics, step 0 preference, cached states, export, map growth."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import eventgen as g
import lmdb
import pytest

from pithlog.errors import StoreError
from pithlog.protocol.checks import check_alone
from pithlog.protocol.events import admit
from pithlog.store import Store
from pithlog.store.layout import prefixed
from pithlog.testing import test_keyring


def valid(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if check_alone(admit(e), g.KEYRING) is None]


def assert_states(store: Store, expected: dict[str, bytes]) -> None:
    """The store holds exactly ``expected`` (pith -> state, b"" for pending)."""
    listed = {p["pith_number"]: p["status"] for p in store.piths()}
    assert set(listed) == set(expected)
    for pith, state in expected.items():
        if state:
            assert listed[pith] == "state"
            assert store.state(pith) == state, pith
        else:
            assert listed[pith] == "pending"
            assert store.state(pith) is None


def test_append_stores_and_reports_duplicates(tmp_path: Path) -> None:
    rec = g.record("2501.00001")
    att = g.attestation(rec["pith_number"], 500)
    with Store.open(tmp_path / "s") as store:
        results = store.append([g.encoded(rec), g.encoded(att), g.encoded(att)], g.KEYRING)
        assert [r.status for r in results] == ["stored", "stored", "duplicate"]
        assert [r.event_id for r in results] == [rec["event_id"], att["event_id"], att["event_id"]]
        again = store.append([g.encoded(att)], g.KEYRING)
        assert again[0].status == "duplicate"
        assert_states(store, g.expected_states([rec, att]))
        assert store.event(att["event_id"]) == g.encoded(att)
        stats = store.stats()
        assert stats["counts"]["events"] == 2 and stats["counts"]["seq"] == 2
        assert stats["next_seq"] == 3
        assert store.replay(g.KEYRING).ok


def test_door_refusals_are_never_stored(tmp_path: Path) -> None:
    rec = g.record("2501.00002")
    bad = [b'{"a":1,"a":2}', b"\xef\xbb\xbf{}", b"[1]", b'{"event_id":"sha256:00"}', b"1.5"]
    with Store.open(tmp_path / "s") as store:
        results = store.append([*bad, g.encoded(rec)], g.KEYRING)
        assert [r.status for r in results] == ["refused"] * len(bad) + ["stored"]
        assert all(r.event_id is None and r.reason.startswith("[door.") for r in results[:-1])
        assert store.stats()["counts"]["seq"] == 1


def test_invalid_events_rejected_by_default_kept_on_request(tmp_path: Path) -> None:
    rec = g.record("2501.00003")
    stranger = g.attestation(rec["pith_number"], 300, signer="stranger")
    early = g.attestation(rec["pith_number"], 0)  # predates the record: check 13, not 1-12
    with Store.open(tmp_path / "a") as store:
        results = store.append([g.encoded(e) for e in (rec, stranger, early)], g.KEYRING)
        assert [(r.status, r.reason) for r in results] == [
            ("stored", None), ("rejected", "unknown_key"), ("stored", None)]  # fmt: skip
        assert store.event(stranger["event_id"]) is None
        assert_states(store, g.expected_states([rec, early]))
    with Store.open(tmp_path / "b") as store:
        results = store.append([g.encoded(e) for e in (rec, stranger)], g.KEYRING,
                               keep_invalid=True)  # fmt: skip
        assert [(r.status, r.reason) for r in results] == [
            ("stored", None), ("stored", "unknown_key")]  # fmt: skip
        state = store.state(rec["pith_number"])
        assert state is not None and stranger["event_id"].encode() in state
        assert_states(store, g.expected_states([rec, stranger]))
        assert store.replay(g.KEYRING).ok


def _pairs() -> list[tuple[str, dict[str, Any], dict[str, Any], bool]]:
    """(name, preferred copy, other copy, keep_invalid) for one event_id."""
    rec = g.record("2501.00004")
    att = g.attestation(rec["pith_number"], 400)
    one, two = g.resigned(att, "author", b"n1"), g.resigned(att, "author", b"n2")
    small, large = sorted((one, two), key=g.encoded)
    return [
        ("valid beats forged", att, g.forged(att), True),
        ("both valid: smaller bytes", small, large, False),
        ("later check wins", g.forged(att), g.tampered(att), True),
        ("valid beats another pith's forgery", att, _other_pith(att), True),
    ]


def _other_pith(event: dict[str, Any]) -> dict[str, Any]:
    """A forgery under the event's id that claims another pith (fails check 3)."""
    other = g.record("2501.09999")
    copy = dict(event)
    copy["pith_number"] = other["pith_number"]
    return copy


@pytest.mark.parametrize("case", range(4))
def test_step0_preference_is_independent_of_arrival_order(tmp_path: Path, case: int) -> None:
    name, preferred, other, keep = _pairs()[case]
    rec = g.record("2501.00004")
    holdings = []
    for i, order in enumerate(([preferred, other], [other, preferred])):
        for split in (True, False):
            with Store.open(tmp_path / f"{i}-{split}") as store:
                store.append([g.encoded(rec)], g.KEYRING)
                batches = [[e] for e in order] if split else [order]
                results = [r for b in batches
                           for r in store.append([g.encoded(e) for e in b], g.KEYRING,
                                                 keep_invalid=keep)]  # fmt: skip
                statuses = [r.status for r in results]
                assert statuses == (["stored", "evidence"] if order[0] is preferred
                                    else ["stored", "replaced"]), name  # fmt: skip
                assert store.event(preferred["event_id"]) == g.encoded(preferred), name
                assert store.evidence(preferred["event_id"]) == [g.encoded(other)], name
                report = store.replay(g.KEYRING)
                assert report.ok, (name, [d.line() for d in report.discrepancies])
                holdings.append((store.state(rec["pith_number"]), store.piths()))
    assert all(h == holdings[0] for h in holdings), name
    expected = g.expected_states([rec, preferred, other])
    assert holdings[0][0] == expected[rec["pith_number"]]


@pytest.mark.parametrize("keep_invalid", [False, True])
def test_states_equal_reduce_for_random_batchings(tmp_path: Path, keep_invalid: bool) -> None:
    rng = random.Random(7 + keep_invalid)
    events = g.mixed_events(rng, piths=12, per_pith=8)
    forgeries = [g.forged(e) for e in rng.sample(events, 10)]
    events += forgeries
    expected = g.expected_states(events if keep_invalid else valid(events))
    for trial in range(3):
        shuffled = events + rng.sample(events, 20)  # and some duplicates
        rng.shuffle(shuffled)
        with Store.open(tmp_path / f"t{trial}") as store:
            position = 0
            while position < len(shuffled):
                size = rng.randint(1, 40)
                store.append([g.encoded(e) for e in shuffled[position : position + size]],
                             g.KEYRING, keep_invalid=keep_invalid)  # fmt: skip
                position += size
            assert_states(store, expected)
            report = store.replay(g.KEYRING)
            assert report.ok, [d.line() for d in report.discrepancies]


def test_export_import_round_trip(tmp_path: Path) -> None:
    rng = random.Random(3)
    events = g.mixed_events(rng, piths=6, per_pith=6)
    events += [g.forged(e) for e in events[:5]]
    with Store.open(tmp_path / "a") as a:
        for i in range(0, len(events), 17):
            a.append([g.encoded(e) for e in events[i : i + 17]], g.KEYRING, keep_invalid=True)
        exported = list(a.export())
        assert [n for n, _ in exported] == list(range(1, len(exported) + 1))
        assert list(a.export(after=10)) == exported[10:]
        assert list(a.export(after=10, chunk=3)) == exported[10:]
        with Store.open(tmp_path / "b") as b:
            results = b.append([data for _, data in exported], g.KEYRING, keep_invalid=True)
            assert Counter(r.status for r in results)["duplicate"] == 0
            assert b.piths() == a.piths()
            for p in a.piths():
                assert b.state(p["pith_number"]) == a.state(p["pith_number"])
            assert sorted(d for _, d in b.export()) == sorted(d for _, d in exported)
            assert b.replay(g.KEYRING).ok


def test_map_grows_from_a_tiny_map(tmp_path: Path) -> None:
    rng = random.Random(5)
    events = valid(g.mixed_events(rng, piths=20, per_pith=15))
    with Store.open(tmp_path / "s", map_size=64 << 10) as store:
        first = store.stats()["map_size"]
        for i in range(0, len(events), 50):
            store.append([g.encoded(e) for e in events[i : i + 50]], g.KEYRING)
        stats = store.stats()
        assert stats["map_size"] > first
        assert stats["counts"]["events"] == len({e["event_id"] for e in events})
        assert_states(store, g.expected_states(events))
        assert store.replay(g.KEYRING).ok


def test_a_map_grown_by_another_process_is_adopted(tmp_path: Path) -> None:
    # Another process grows the map while this one holds the store open: this process's
    # next read and write begin on the larger map (LMDB's MDB_MAP_RESIZED) instead of failing.
    events = valid(g.mixed_events(random.Random(6), piths=20, per_pith=15))
    lines = [g.encoded(e) for e in events]
    path = tmp_path / "s"
    with Store.open(path, map_size=64 << 10) as store:
        store.append(lines[:5], g.KEYRING)
        before = store.stats()["map_size"]
        script = (
            "import sys, json\n"
            "from pithlog.store import Store\n"
            "from pithlog.testing import test_keyring\n"
            "lines = [line.encode() for line in json.load(sys.stdin)]\n"
            "with Store.open(sys.argv[1], map_size=64 << 10) as store:\n"
            "    for i in range(0, len(lines), 50):\n"
            "        store.append(lines[i : i + 50], test_keyring())\n"
            "    print(store.stats()['map_size'])\n"
        )
        grown = subprocess.run(
            [sys.executable, "-c", script, str(path)],
            input=json.dumps([line.decode() for line in lines[5:-1]]),
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        assert int(grown.stdout) > before
        assert store.stats()["counts"]["events"] == len(lines) - 1  # read: adopted the size
        store.append(lines[-1:], g.KEYRING)  # and a write
        assert store.stats()["map_size"] >= int(grown.stdout)
        assert_states(store, g.expected_states(events))
        assert store.replay(g.KEYRING).ok


def test_opening_twice_in_one_process_is_safe(tmp_path: Path) -> None:
    rec = g.record("2501.00005")
    path = tmp_path / "s"
    one = Store.open(path)
    two = Store.open(str(path) + "/")  # another spelling of the same folder
    one.append([g.encoded(rec)], g.KEYRING)
    assert two.state(rec["pith_number"]) is not None
    one.close()
    assert two.state(rec["pith_number"]) is not None  # still open through the other
    two.append([g.encoded(g.attestation(rec["pith_number"], 200))], g.KEYRING)
    two.close()
    with pytest.raises(StoreError) as closed:
        two.state(rec["pith_number"])
    assert closed.value.code == "store.closed"
    with pytest.raises(StoreError) as closed:  # was a Judging, for a store closed
        two.judging(g.KEYRING)
    assert closed.value.code == "store.closed"
    with Store.open(path, create=False) as three:
        assert three.stats()["counts"]["events"] == 2


def test_open_refuses_a_path_with_nul_and_a_map_size_lmdb_cannot_take(tmp_path: Path) -> None:
    """A NUL in the path raised ValueError (os.stat), a map size below 0 or of 2^64 or
    more OverflowError (py-lmdb): store.io and store.argument, and nothing is made."""
    with pytest.raises(StoreError) as caught:
        Store.open(str(tmp_path / "s") + "\0x")
    assert caught.value.code == "store.io" and "NUL" in caught.value.message
    for size in (-1, 1 << 64):
        with pytest.raises(StoreError) as caught:
            Store.open(tmp_path / "s", map_size=size)
        assert caught.value.code == "store.argument" and "map_size" in caught.value.message
    assert not (tmp_path / "s").exists()
    with Store.open(tmp_path / "s", map_size=1 << 20) as store:
        assert store.stats()["counts"]["events"] == 0


def test_open_refuses_an_empty_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``Store.open("")`` (a variable left unset) made a store in the current folder, as
    ``realpath("")`` is that folder: store.argument, and nothing is made; ``"."`` still
    names the current folder."""
    monkeypatch.chdir(tmp_path)
    for create in (True, False):
        with pytest.raises(StoreError) as caught:
            Store.open("", create=create)
        assert caught.value.code == "store.argument" and "empty" in caught.value.message
    assert list(tmp_path.iterdir()) == []
    with Store.open(".") as store:
        assert store.path == str(tmp_path.resolve())


def test_open_refuses_a_path_lmdb_cannot_take_before_making_anything(tmp_path: Path) -> None:
    """A path that is not UTF-8 (a file name of other bytes, which Python holds as lone
    surrogates) made the store's folder and then raised UnicodeEncodeError from py-lmdb,
    which takes only UTF-8 paths: store.io, and nothing is made."""
    os.mkdir(tmp_path / "\udcff")  # the byte 0xFF: a folder that exists
    for where in (str(tmp_path / "s") + "\udcff", tmp_path / "\udcff" / "s"):
        with pytest.raises(StoreError) as caught:
            Store.open(where)
        assert caught.value.code == "store.io" and "UTF-8" in caught.value.message
    assert sorted(os.listdir(tmp_path)) == ["\udcff"]
    assert os.listdir(tmp_path / "\udcff") == []


def test_open_missing_and_readonly(tmp_path: Path) -> None:
    with pytest.raises(StoreError) as missing:
        Store.open(tmp_path / "nothing", create=False)
    assert missing.value.code == "store.missing"
    # a store this user may not enter is not "no store" (as root no folder is closed: a
    # file in the path's way stands in for one, failing the same stat)
    (tmp_path / "a file").write_bytes(b"")
    for create in (False, True):
        with pytest.raises(StoreError) as hidden:
            Store.open(tmp_path / "a file" / "store", create=create)
        assert hidden.value.code == "store.io" and "cannot read" in hidden.value.message
    with pytest.raises(StoreError) as a_file:
        Store.open(tmp_path / "a file", create=False)
    assert a_file.value.code == "store.not_a_store"
    with Store.open(tmp_path / "s"):
        pass
    with Store.open(tmp_path / "s", readonly=True) as ro, pytest.raises(StoreError) as refused:
        ro.append([g.encoded(g.record("2501.00006"))], g.KEYRING)
    assert refused.value.code == "store.readonly"


def test_pending_piths(tmp_path: Path) -> None:
    rec = g.record("2501.00007")
    att = g.attestation(rec["pith_number"], 300)
    with Store.open(tmp_path / "s") as store:
        store.append([g.encoded(att)], g.KEYRING)
        assert store.pending() == [{"pith_number": rec["pith_number"], "status": "pending",
                                    "event_count": 1, "invalid_event_count": 0}]  # fmt: skip
        assert store.state(rec["pith_number"]) is None
        store.append([g.encoded(rec)], g.KEYRING)
        assert store.pending() == []
        assert_states(store, g.expected_states([rec, att]))


def test_a_forgery_in_another_pith_moves_out_when_the_real_copy_arrives(tmp_path: Path) -> None:
    rec = g.record("2501.00008")
    att = g.attestation(rec["pith_number"], 300)
    fake = _other_pith(att)
    with Store.open(tmp_path / "s") as store:
        store.append([g.encoded(rec), g.encoded(fake)], g.KEYRING, keep_invalid=True)
        assert {p["pith_number"] for p in store.piths()} == {rec["pith_number"],
                                                             fake["pith_number"]}  # fmt: skip
        results = store.append([g.encoded(att)], g.KEYRING)
        assert results[0].status == "replaced"
        assert [p["pith_number"] for p in store.piths()] == [rec["pith_number"]]
        assert_states(store, g.expected_states([rec, att, fake]))
        assert store.replay(g.KEYRING).ok


def test_a_large_keyring_change_is_refused_and_rebuild_applies_it(tmp_path: Path) -> None:
    """Above the limit an append refuses a changed keyring, naming the size of the work and
    the command; a rebuild (or a rekey) applies it."""
    rec = g.record("2501.00009")
    late = g.attestation(rec["pith_number"], 900)
    revoked = test_keyring(author={"revoked_at": g.ts(600)})
    with Store.open(tmp_path / "s") as store:
        store.append([g.encoded(rec), g.encoded(late)], g.KEYRING)
        with pytest.raises(StoreError) as changed:
            store.apply_keyring(revoked, limit=0)
        assert changed.value.code == "store.keyring_changed"
        assert "more than 0" in changed.value.message
        assert f"pithlog --store {store.path} rekey --keyring" in changed.value.message
        assert store.keyring_digest() == g.KEYRING.digest
        counts = store.rebuild(revoked)
        assert counts["piths"] == 1
        assert store.keyring_digest() == revoked.digest
        assert_states(store, g.expected_states([rec, late], revoked))
        assert store.replay(revoked).ok
        store.append([g.encoded(g.attestation(rec["pith_number"], 200))], revoked)
        assert store.replay(revoked).ok


def test_a_store_whose_creation_never_committed_is_missing_not_foreign(tmp_path: Path) -> None:
    """A first append killed between creating data.mdb and its first commit leaves an
    environment with nothing in it: that is no store yet (store.missing), and an append
    creates it; a folder with another LMDB database in it is not a store."""

    empty = tmp_path / "empty"
    lmdb.open(str(empty), max_dbs=2).close()  # data.mdb, nothing committed
    for readonly in (False, True):  # a reader (stats, serve) too: not store.upgrade
        with pytest.raises(StoreError) as missing:
            Store.open(empty, create=False, readonly=readonly)
        assert missing.value.code == "store.missing"
    with Store.open(empty) as store:
        assert store.stats()["counts"]["seq"] == 0
    foreign = tmp_path / "foreign"
    env = lmdb.open(str(foreign), max_dbs=2)
    with env.begin(write=True) as txn:
        txn.put(b"someone", b"else's")
    env.close()
    for readonly in (False, True):
        with pytest.raises(StoreError) as other:
            Store.open(foreign, create=False, readonly=readonly)
        assert other.value.code == "store.not_a_store"
    env = lmdb.open(str(foreign), max_dbs=2)  # left untouched
    with env.begin() as txn:
        assert list(txn.cursor()) == [(b"someone", b"else's")]
    env.close()


@pytest.mark.parametrize(("key", "value"), [(b"format", b"99"),
                                          (b"merge_version", b"pith-open-graph-merge-v9")])
def test_a_store_of_another_format_is_refused_by_the_cli_in_one_line(
    tmp_path: Path, key: bytes, value: bytes
) -> None:
    """A store written by another pithlog (a newer store format, another merge version):
    every command refuses it with ``store.format`` in one line, exit 2, writing nothing."""
    store_dir = tmp_path / "s"
    with Store.open(store_dir) as store:
        store.append([g.encoded(g.record("2501.00002"))], g.KEYRING)
    env = lmdb.open(str(store_dir), max_dbs=64)
    with env.begin(write=True) as txn:
        txn.put(key, value, db=env.open_db(b"meta", txn=txn, create=False))
    env.close()
    for command in (["stats"], ["export"]):
        done = subprocess.run([sys.executable, "-m", "pithlog", "--store", str(store_dir),
                               *command], capture_output=True, text=True, timeout=120)  # fmt: skip
        assert done.returncode == 2, done.stderr
        assert done.stderr.startswith("pithlog: [store.format] "), done.stderr
        assert done.stderr.count("\n") == 1 and done.stdout == "", done.stderr
    with pytest.raises(StoreError) as caught:
        Store.open(store_dir, create=False)
    assert caught.value.code == "store.format"
    assert value.decode() in caught.value.message


def test_the_prefix_scan_stops_at_the_first_key_without_the_prefix(tmp_path: Path) -> None:
    # layout.prefixed is the one prefix scan behind evidence, by_pith, the index of a pith
    # and the leaves of an event: neighbours on both sides stay out, and delete=True
    # removes exactly the entries it yields.
    keys = [b"ab", b"abc\x00", b"abc\x01", b"abc\xff", b"abd", b"b"]
    with Store.open(tmp_path / "s") as store:
        store._write(lambda txn, dbs: [txn.put(k, k * 2, db=dbs["slots"]) for k in keys])

        def scan(prefix: bytes, delete: bool = False) -> Any:
            def work(txn: Any, dbs: dict[str, Any]) -> list[tuple[bytes, bytes]]:
                return list(prefixed(txn, dbs["slots"], prefix, delete=delete))

            return store._write(work) if delete else store._read(work)

        assert scan(b"abc") == [(k, k * 2) for k in keys[1:4]]
        assert scan(b"abe") == [] and scan(b"c") == []
        assert scan(b"abc", delete=True) == [(k, k * 2) for k in keys[1:4]]
        assert scan(b"") == [(k, k * 2) for k in (b"ab", b"abd", b"b")]


@pytest.mark.parametrize(("value", "code"), [
    (2**60, "door.number_range"), (0.5, "door.number_form"), (float("nan"), "door.number_form"),
    ("\ud800", "door.lone_surrogate"), ({"a": [[[[[[[[[[]]]]]]]]]]} , None),
    (b"bytes", "door.syntax"),
])  # fmt: skip
def test_an_event_given_as_a_dict_meets_the_door_as_bytes_do(
    tmp_path: Path, value: Any, code: str | None
) -> None:
    """A dict item went through the door's attribution alone: a payload of 2^60 was stored
    as valid, and then every replay refused it and no import could copy the log. It is now
    written as JSON and read back by the door, as bytes are."""
    from pithlog.errors import DoorError
    from pithlog.protocol.events import sign_event
    from pithlog.testing import test_key

    rec = g.record("2512.00001")
    event = sign_event(test_key("author"), "author_attestation", rec["pith_number"], "record",
                       g.ts(5), {"statement": "s"})  # fmt: skip
    nested: Any = value
    for _ in range(70 if code is None else 0):  # past the door's 64 levels
        nested = [nested]
    event["payload"]["n"] = nested
    with Store.open(tmp_path / "s") as store:
        results = store.append([rec, event], g.KEYRING)
        assert [r.status for r in results] == ["stored", "refused"]
        assert (results[1].reason or "").startswith(f"[{code or 'door.too_deep'}]")
        assert store.event(event["event_id"]) is None and store.replay(g.KEYRING).ok
    with pytest.raises(DoorError):  # and sign_event makes no such event in the first place
        sign_event(test_key("author"), "author_attestation", rec["pith_number"], "record",
                   g.ts(5), {"statement": "s", "n": nested})  # fmt: skip


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs fork()")
def test_a_forked_child_opens_other_stores_and_says_why_not_its_parents(tmp_path: Path) -> None:
    """py-lmdb's record of open environments crosses fork(), and pithlog cannot clear it:
    a child cannot open a store its parent holds open. It says so (store.forked, a code
    of its own rather than LMDB's catch-all store.lmdb, naming fork and spawn), and opens
    any other store."""
    import os

    with Store.open(tmp_path / "held"):
        pid = os.fork()
        if pid == 0:  # the child: its verdict is its exit status
            status = 1
            try:
                try:
                    Store.open(tmp_path / "held", readonly=True)
                except StoreError as exc:
                    if exc.code == "store.forked" and "forked" in exc.message \
                            and "spawn" in exc.message:  # fmt: skip
                        with Store.open(tmp_path / "other") as other:
                            status = 0 if other.tree_size() == 0 else 1
            finally:
                os._exit(status)
        _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_stats_counts_the_piths_once_per_commit_and_again_after_any(tmp_path: Path) -> None:
    """``stats`` keeps its count of the piths with the snapshot it read (``/stats`` is
    anyone's to ask, and the count is a scan of every pith): the same snapshot reuses it,
    and a commit, of this process or of another, is counted afresh."""
    rec, other = g.record("2501.00011"), g.record("2501.00012")
    path = tmp_path / "s"
    with Store.open(path) as store:
        store.append([g.encoded(rec)], g.KEYRING)
        first = store.stats()
        assert (first["piths_with_state"], first["piths_pending"]) == (1, 0)
        shared = store._env
        counted = shared.piths_counted
        assert counted is not None
        # the same snapshot: the count kept is the one given (no second scan)
        shared.piths_counted = (counted[0], 7, 9)
        again = store.stats()
        assert (again["piths_with_state"], again["piths_pending"]) == (7, 9)
        # a commit of this process: counted afresh
        store.append([g.encoded(g.attestation(other["pith_number"], 200))], g.KEYRING)
        after = store.stats()
        assert (after["piths_with_state"], after["piths_pending"]) == (1, 1)
        # a commit of another process, while this one holds the store open
        script = (
            "import sys\n"
            "from pithlog.store import Store\n"
            "from pithlog.testing import test_keyring\n"
            "with Store.open(sys.argv[1]) as store:\n"
            "    store.append([sys.stdin.buffer.read()], test_keyring())\n"
        )
        subprocess.run([sys.executable, "-c", script, str(path)], input=g.encoded(other),
                       capture_output=True, check=True)  # fmt: skip
        last = store.stats()
        assert (last["piths_with_state"], last["piths_pending"]) == (2, 0)


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs fork()")
def test_a_forked_child_cannot_use_its_parents_store_object(tmp_path: Path) -> None:
    """A Store object the child inherits through fork() shared the parent's LMDB
    environment, which LMDB forbids in a child: reads and even appends ran on it. Every
    use in the child is now refused (store.forked, a code a server can tell from LMDB's
    catch-all store.lmdb, naming fork), iterators taken before the fork included, and
    nothing is written."""
    import os

    rec, other = g.record("2501.00021"), g.record("2501.00022")
    with Store.open(tmp_path / "s") as store:
        store.append([g.encoded(rec)], g.KEYRING)
        walk, piths = store.export(chunk=1), store.each_pith(chunk=1)
        pid = os.fork()
        if pid == 0:  # the child: its verdict is its exit status
            status = 1
            try:
                refused = 0
                for use in (lambda: store.state(rec["pith_number"]),
                            lambda: store.append([g.encoded(other)], g.KEYRING),
                            lambda: next(walk), lambda: next(piths)):  # fmt: skip
                    try:
                        use()
                    except StoreError as exc:
                        refused += exc.code == "store.forked" and "forked" in exc.message
                status = 0 if refused == 4 else 1
            finally:
                os._exit(status)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert store.event(other["event_id"]) is None and store.tree_size() == 1


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs fork()")
@pytest.mark.parametrize("ending", ["close", "exit", "with"])
def test_a_forked_child_that_lets_go_of_its_parents_store_leaves_it_usable(
    tmp_path: Path, ending: str
) -> None:
    """py-lmdb frees the environment a child inherited as if it were the child's own: the
    read transaction it keeps for reuse gave back the parent's slot in the reader table,
    and every read of the parent then failed (``store.lmdb``, ``MDB_BAD_RSLOT``). A child
    that closed its copy of the Store, left a ``with`` block on it or simply exited
    (its objects freed at shutdown) broke a server that forks workers. The child's copy
    is now never freed."""
    script = (
        "import os, sys\n"
        "from pithlog.store import Store\n"
        "from pithlog.testing import test_keyring\n"
        "with Store.open(sys.argv[1]) as store:\n"
        "    store.append([sys.stdin.buffer.read()], test_keyring())\n"
        "    store.tree_size()\n"
        "    if os.fork() == 0:\n"
        "        if sys.argv[2] == 'close':\n"
        "            store.close()\n"
        "            del store\n"
        "        if sys.argv[2] == 'with':\n"
        "            raise SystemExit(0)  # leaves the with block: closes the Store\n"
        "        sys.exit(0)  # the interpreter's shutdown frees what is left\n"
        "    os.wait()\n"
        "    print(store.tree_size(), store.event('sha256:' + '0' * 64))\n"
    )
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path / "s"), ending],
                          input=g.encoded(g.record("2501.00023")), capture_output=True,
                          timeout=60)  # fmt: skip
    assert (done.returncode, done.stdout, done.stderr) == (0, b"1 None\n", b"")


def test_a_store_closed_by_another_thread_meanwhile_is_store_closed(tmp_path: Path) -> None:
    """A thread that took a Store's environment just before another thread closed the
    Store (stats between its read and its look at the map; any read between the check
    for a closed Store and its transaction) got a bare ``lmdb.Error`` ("Attempt to operate
    on closed/deleted/dropped object"), or ``store.lmdb``: it is ``store.closed``."""
    store = Store.open(tmp_path / "s")
    store.append([g.encoded(g.record("2501.00031"))], g.KEYRING)
    shared = store._env  # what a thread holds while the other one closes the Store
    store.close()
    for use in (shared.usage, lambda: shared.read(lambda txn, dbs: txn.id()),
                lambda: shared.write(lambda txn, dbs: txn.id())):  # fmt: skip
        with pytest.raises(StoreError) as raised:
            use()
        assert raised.value.code == "store.closed"


def test_export_after_a_cursor_past_any_sequence_number_yields_nothing(tmp_path: Path) -> None:
    """``export(after=N)`` with N of 2^64 - 1 or more (a cursor a registry passes on from its
    users) raised a bare ``struct.error``: it yields nothing, as any cursor past the end."""
    with Store.open(tmp_path / "s") as store:
        store.append([g.encoded(g.record("2501.00041"))], g.KEYRING)
        assert [seq for seq, _ in store.export(after=0)] == [1]
        for after in (2**64 - 2, 2**64 - 1, 2**64, 2**70):
            assert list(store.export(after=after)) == []


def test_an_export_chunk_below_one_is_refused(tmp_path: Path) -> None:
    """``export(chunk=0)`` read no copy and then took the last of none (IndexError):
    a chunk below 1 is StoreError store.argument, at the call."""
    with Store.open(tmp_path / "s") as store:
        store.append([g.encoded(g.record("2501.00042"))], g.KEYRING)
        for chunk in (0, -1):
            with pytest.raises(StoreError) as caught:
                store.export(chunk=chunk)
            assert caught.value.code == "store.argument" and "chunk" in caught.value.message
        assert [seq for seq, _ in store.export(chunk=1)] == [1]


def test_an_export_after_that_is_not_a_whole_number_is_refused(tmp_path: Path) -> None:
    """``export(after=1.5)`` raised a bare ``struct.error`` from packing the key, and
    ``after="3"`` (a cursor of a query string not converted) or ``None`` a TypeError from
    inside: each is StoreError store.argument, at the call, as a chunk out of range is."""
    with Store.open(tmp_path / "s") as store:
        store.append([g.encoded(g.record("2501.00043"))], g.KEYRING)
        for after in (1.5, "3", None, b"1"):
            with pytest.raises(StoreError) as caught:
                store.export(after=after)  # type: ignore[arg-type]
            assert caught.value.code == "store.argument" and "after" in caught.value.message
        assert [seq for seq, _ in store.export(after=-1)] == [1]


def test_a_store_finalized_by_a_collection_during_an_open_does_not_hang_it(
    tmp_path: Path,
) -> None:
    """A Store left in a reference cycle is closed by its ``__del__`` when a garbage
    collection finds it, which may be during any allocation, such as those of opening
    another store: the open held the registry's lock, and the finalizer waited for it in
    the same thread, forever; a reopen for writing waited for its own gate the same way.
    In a process of its own, since a hang would keep the lock."""
    script = (
        "import gc, sys\n"
        "from pithlog.store import Store, environment\n"
        "real = environment._open_lmdb\n"
        "def opening(*a, **k):\n"
        "    gc.collect()  # what a collection started by any allocation here does\n"
        "    return real(*a, **k)\n"
        "environment._open_lmdb = opening\n"
        "base = sys.argv[1]\n"
        "Store.open(base + '/a').close()\n"
        "class Cycle: pass\n"
        "for readonly in (False, True):\n"
        "    c = Cycle(); c.c = c; c.store = Store.open(base + '/a', readonly=readonly)\n"
        "    del c\n"
        "    # another store opened, then this one reopened for writing, while the cycle\n"
        "    # holds a Store of it\n"
        "    Store.open(base + ('/a' if readonly else '/b')).close()\n"
        "print('done')\n"
    )
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True,
                          text=True, timeout=30, check=False)  # fmt: skip
    assert done.stdout == "done\n", done.stderr
