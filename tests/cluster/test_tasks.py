"""The worker tasks of ``reduce --dask`` called in this process: what they refuse."""

from __future__ import annotations

import dataclasses
import json
import pickle
import random
import sys
from pathlib import Path
from typing import Any

import pytest

from pithlog.distributed import graph
from pithlog.distributed.graph import _numbered
from pithlog.distributed.sources import blocks, expand
from pithlog.distributed.tasks import (
    LISTED_PER_PITH,
    LISTED_REFUSALS,
    _hashes,
    _state,
    check_block,
    compare_range,
    event_bucket,
    read_published,
    step0,
    versions,
)
from pithlog.errors import DaskError, UsageError
from pithlog.lines import too_long
from pithlog.protocol.canonical import MAX_DEPTH, MAX_LINE_BYTES, jcs
from pithlog.protocol.events import sign_event
from pithlog.protocol.reduce import MERGE_VERSION
from pithlog.protocol.state import digest_document
from pithlog.testing import test_key, test_keyring_entries

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "store"))
import eventgen  # noqa: E402 - the store tests' signed events

KEYRING = jcs({"keyring_version": "1", "keys": test_keyring_entries()})


def test_a_task_refuses_to_run_under_another_pithlog(tmp_path: Path) -> None:
    """A worker that joined after the client checked the cluster still refuses: every task
    carries the client's versions."""
    (tmp_path / "e.jsonl").write_bytes(b"{}\n")
    block = blocks(expand([str(tmp_path / "e.jsonl")]), 1 << 20)[0]
    for other in (("0.0.0-other", MERGE_VERSION), (versions()[0], "another-merge-v2")):
        with pytest.raises(DaskError) as caught:
            check_block(block, KEYRING, other, 2)
        assert caught.value.code == "dask.version" and other[0] in caught.value.message
        with pytest.raises(DaskError):
            read_published(block, other)
    copies, report = check_block(block, KEYRING, versions(), 2)
    assert (copies, report.read, len(report.refused)) == ([], 0, 1)  # "{}" refused at the door


def test_a_file_a_worker_cannot_read_is_one_error(tmp_path: Path) -> None:
    (tmp_path / "e.jsonl").write_bytes(b"{}\n")
    block = blocks(expand([str(tmp_path / "e.jsonl")]), 1 << 20)[0]
    (tmp_path / "e.jsonl").unlink()  # listed by the client, gone where the worker looks
    with pytest.raises(UsageError) as caught:
        check_block(block, KEYRING, versions(), 2)
    assert caught.value.code == "usage.unreadable" and "e.jsonl" in caught.value.message


class FailingRead:
    """A file of object storage whose read fails once its first chunk is read."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.reads = 0

    def open(self, path: str, mode: str) -> FailingRead:
        return self

    def __enter__(self) -> FailingRead:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def seek(self, offset: int) -> None:
        pass

    def read(self, size: int = -1) -> bytes:
        self.reads += 1
        if self.reads > 1:
            raise ConnectionResetError(104, "Connection reset by peer")
        return self.data


def test_a_file_that_fails_mid_read_is_one_error(tmp_path: Path) -> None:
    (tmp_path / "e.jsonl").write_bytes(b"{}\n" * 4)
    block = blocks(expand([str(tmp_path / "e.jsonl")]), 1 << 20)[0]
    for task in (lambda b: check_block(b, KEYRING, versions(), 2),
                 lambda b: read_published(b, versions())):  # fmt: skip
        failing = dataclasses.replace(block, fs=FailingRead(b"{}\n"))
        with pytest.raises(UsageError) as caught:
            task(failing)
        assert caught.value.code == "usage.unreadable" and "e.jsonl" in caught.value.message
        assert "reset by peer" in caught.value.message


def test_a_range_of_refused_lines_lists_the_first_and_counts_the_rest(tmp_path: Path) -> None:
    """The reasons of a range's refused lines are bounded, not about 100 times the range
    (a reason is some 60 bytes, a refused line may be 2)."""
    (tmp_path / "junk.jsonl").write_bytes(b"x\n" * (1 << 18))
    block = blocks(expand([str(tmp_path / "junk.jsonl")]), 1 << 20)[0]
    for task in (lambda b: check_block(b, KEYRING, versions(), 2)[1],
                 lambda b: read_published(b, versions())[1]):  # fmt: skip
        report = task(block)
        assert len(report.refused) == LISTED_REFUSALS and report.refused[-1][0] == 1000
        assert report.unlisted == (1 << 18) - LISTED_REFUSALS
        assert report.unlisted_lines == (1001, 1 << 18)
        assert len(pickle.dumps(report)) < 200_000


def test_copies_leave_a_range_packed_by_bucket_and_step0_joins_the_ranges(
    tmp_path: Path,
) -> None:
    """A range's copies leave it as one packed item per bucket of the event shuffle (one
    pickle each: a list of copies would be serialized item by item by the worker that
    sends it); step 0 over the items of one bucket from several ranges keeps the copy
    that ``pithlog reduce`` keeps, whatever range it came from."""
    rng = random.Random(5)
    events = eventgen.mixed_events(rng, piths=6, per_pith=4)
    (tmp_path / "all.jsonl").write_bytes(b"".join(jcs(e) + b"\n" for e in events))
    whole = blocks(expand([str(tmp_path / "all.jsonl")]), 1 << 20)[0]
    valid = {c[0] for _, _, d in check_block(whole, KEYRING, versions(), 1)[0]
             for c in pickle.loads(d) if c[1] is None}  # fmt: skip
    genuine = next(e for e in events[:4] if e["event_id"] in valid)
    other = next(e["pith_number"] for e in events if e["pith_number"] != genuine["pith_number"])
    forgery = {**genuine, "pith_number": other}  # the same event_id under another pith
    (tmp_path / "a.jsonl").write_bytes(b"".join(jcs(e) + b"\n" for e in [forgery, *events[4:]]))
    (tmp_path / "b.jsonl").write_bytes(b"".join(jcs(e) + b"\n" for e in events[:4]))
    buckets = 3
    ranges = blocks(expand([str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl")]), 1 << 20)
    packed = [check_block(r, KEYRING, versions(), buckets)[0] for r in ranges]
    for items in packed:
        assert [b for b, _, _ in items] == sorted({b for b, _, _ in items})  # one per bucket
        for bucket, kind, data in items:
            assert kind == "c" and isinstance(data, bytes)
            assert {event_bucket(buckets, copy) for copy in pickle.loads(data)} == {bucket}
    wanted = event_bucket(buckets, (genuine["event_id"], None, "", b""))
    items = [item for part in packed for item in part if item[0] == wanted]
    assert len(items) == 2  # the forgery's range and the genuine copy's
    winners = step0([(wanted, items)])
    ((pith, reason, data),) = [w for w in winners if w[2] == jcs(genuine)]
    assert (pith, reason) == (genuine["pith_number"], None)
    assert not [w for w in winners if w[2] == jcs(forgery)]
    all_copies = [copy for part in packed for _, _, d in part for copy in pickle.loads(d)]
    assert len(winners) == len({c[0] for c in all_copies if event_bucket(buckets, c) == wanted})


def test_an_overlong_line_is_named_by_its_line_in_the_file(tmp_path: Path) -> None:
    """The refusal of a line over the limit says where it is ("at line N"), as reduce's
    does: its line in the file, not in the range that read it."""
    path = tmp_path / "long.jsonl"
    path.write_bytes(b"x\n" * 5 + b"y" * (MAX_LINE_BYTES + 1) + b"\nz\n")
    files = expand([str(path)])
    whole = blocks(files, files[0].size)[0]
    ranges = [dataclasses.replace(whole, end=6), dataclasses.replace(whole, index=1, start=6)]
    reports = [check_block(b, KEYRING, versions(), 2)[1] for b in ranges]
    refused = {r.line: r.message for r in _numbered(reports, files, {})}
    assert sorted(refused) == [1, 2, 3, 4, 5, 6, 7]
    assert refused[6] == too_long(6).describe() and "(at line 6)" in refused[6]


def compared(events: list[dict[str, Any]], published: list[bytes]) -> list[dict[str, Any]]:
    """``compare_range`` over one range holding ``events`` (all valid) and ``published``."""
    winners = [(e["pith_number"], None, jcs(e)) for e in events]
    states = [(json.loads(line)["pith_number"], (0, 0, n), _hashes(line, _state(line)), 0)
              for n, line in enumerate(published, 1)]  # fmt: skip
    packed = [(0, "e", pickle.dumps(winners)), (0, "p", pickle.dumps(states))]
    return compare_range([(0, packed)], versions())[0]


def test_a_differing_state_shows_its_claimed_and_its_recomputed_hash() -> None:
    """A published state edited without its state_sha256 updated still claims the expected
    hash: ``published_sha256`` is the hash recomputed from what was published, and the
    claim is reported apart, as ``claimed_sha256``."""
    record = eventgen.record("2411.00001")
    events = [record, eventgen.attestation(record["pith_number"], 5)]
    ((pith, state),) = eventgen.expected_states(events).items()
    value = json.loads(state)
    assert compared(events, [state]) == []
    edited = {**value, "event_count": value["event_count"] + 1}
    reclaimed = {**value, "state_sha256": "0" * 64}
    consistent = {**edited, "state_sha256": digest_document(edited)}
    for document, published, claimed in (
        (edited, digest_document(edited), value["state_sha256"]),
        (reclaimed, value["state_sha256"], "0" * 64),
        (consistent, digest_document(edited), digest_document(edited)),
    ):
        (found,) = compared(events, [jcs(document)])
        assert found == {"pith_number": pith, "status": "differs",
                         "expected_sha256": value["state_sha256"], "published_sha256": published,
                         "claimed_sha256": claimed, "where": (0, 0, 1)}  # fmt: skip
    assert digest_document(edited) != value["state_sha256"]
    (found,) = compared(events, [jcs({k: v for k, v in edited.items() if k != "state_sha256"})])
    assert found["claimed_sha256"] is None


def test_a_state_deeper_or_longer_than_an_event_line_is_read_and_compared(
    tmp_path: Path,
) -> None:
    """Published states are read with a state's limits, as ``verify-state`` reads them: a
    payload may nest as deep as its envelope allows, three levels deeper in the state, and
    a pith's state may hold more than the 8 MiB of one event line. Both were refused as
    unreadable (and their pith reported missing) though the log gives exactly them."""
    deep: Any = "x"
    for _ in range(MAX_DEPTH - 3):
        deep = [deep]
    nested = eventgen.record("2411.00001")
    large = eventgen.record("2411.00002")
    events = [nested, large,
              sign_event(test_key("author"), "author_attestation", nested["pith_number"],
                         "record", eventgen.ts(1), {"statement": "s", "deep": deep}),
              *(eventgen.attestation(large["pith_number"], n, "y" * 1_000_000, f"claim:{n}")
                for n in range(9))]  # fmt: skip
    states = sorted(s for s in eventgen.expected_states(events).values())
    assert max(len(s) for s in states) > MAX_LINE_BYTES
    (tmp_path / "published.jsonl").write_bytes(b"".join(s + b"\n" for s in states))
    block = blocks(expand([str(tmp_path / "published.jsonl")]), 1 << 30)[0]
    published, report = read_published(block, versions())
    assert (report.read, report.refused) == (2, [])
    assert len(published) == 2
    assert compared(events, states) == []


def test_a_pith_published_many_times_is_counted_not_held(tmp_path: Path) -> None:
    """PUBLISHED comes from the registry being checked: the lines of one pith are all
    compared by one task, so a range passes on its first two (the compared one and the
    first duplicate) as hashes, and counts the others; the report lists the first
    duplicate with the count of them all."""
    record = eventgen.record("2411.00001")
    events = [record, eventgen.attestation(record["pith_number"], 5)]
    ((pith, state),) = eventgen.expected_states(events).items()
    copies = 50_000
    path = tmp_path / "published.jsonl"
    path.write_bytes(state + b"\n" + b"".join(jcs({"pith_number": pith, "n": n}) + b"\n"
                                              for n in range(copies)))  # fmt: skip
    files = expand([str(path)])
    whole = blocks(files, files[0].size)[0]
    half = files[0].size // 2
    ranges = [dataclasses.replace(whole, end=half),
              dataclasses.replace(whole, index=1, start=half)]  # fmt: skip
    read = [read_published(r, versions()) for r in ranges]
    assert sum(report.read for _, report in read) == copies + 1
    records = [record for held, _ in read for record in held]
    assert len(records) == 2 * LISTED_PER_PITH
    assert len(pickle.dumps(records)) < 2_000
    packed = [(0, "e", pickle.dumps([(e["pith_number"], None, jcs(e)) for e in events])),
              (0, "p", pickle.dumps(records))]  # fmt: skip
    report, counts = compare_range([(0, packed)], versions())
    (duplicate,) = report
    assert duplicate["status"] == "duplicate" and duplicate["where"] == (0, 0, 2)
    assert duplicate["count"] == copies and counts["published"] == copies + 1
    assert counts["equal"] == 1
    assert duplicate["published_sha256"] == digest_document({"pith_number": pith, "n": 0})



def test_the_client_lists_a_bounded_number_of_refused_lines_in_all(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each range lists up to LISTED_REFUSALS lines; over thousands of ranges the client
    lists LISTED_IN_ALL in all and counts the rest, one line per file, every line counted."""
    monkeypatch.setattr(graph, "LISTED_IN_ALL", 5)
    for name in ("a", "b"):
        (tmp_path / f"{name}.jsonl").write_bytes(b"x\n" * 4000)
    files = expand([str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl")])
    reports = [check_block(b, KEYRING, versions(), 2)[1] for b in blocks(files, 2000)]
    assert len(reports) == 8 and len(reports[0].refused) == 1000
    refused = _numbered(iter(reports), files, {})
    assert [(r.line, r.count) for r in refused[:5]] == [(n, 1) for n in range(1, 6)]
    assert [(r.source, r.line, r.last, r.count) for r in refused[5:]] == [
        (files[0].name, 6, 4000, 3995), (files[1].name, 1, 4000, 4000)]
    assert refused[5].message == "3995 lines refused, not listed: at most 5 refused lines " \
        "are listed in all"  # fmt: skip
    assert sum(r.count for r in refused) == 8000
