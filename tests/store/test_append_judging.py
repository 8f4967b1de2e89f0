"""An append of raw lines judged by helper processes (pithlog.store.append_judging): the
same verdicts as the door and checks 1-12 here, a copy the store holds left unjudged, and a
helper that dies costs time, never results."""

from __future__ import annotations

import os
import random
import signal
import time
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

import eventgen as g
import pytest

import pithlog.store.append_judging
import pithlog.store.append_pipeline
from pithlog.errors import DoorError, HelperLost, StoreError
from pithlog.protocol.checks import check_alone, reduction_hints
from pithlog.protocol.events import parse_envelope
from pithlog.protocol.keys import make_keyring
from pithlog.store import Store, codec
from pithlog.store.append_judging import STORED, judge_lines
from pithlog.store.layout import copy_hash
from pithlog.testing import test_keyring_entries


def _lines(seed: int) -> list[bytes]:
    events = g.mixed_events(random.Random(seed), piths=3, per_pith=5)
    lines = [g.encoded(e) for e in events]
    return lines + [g.encoded(g.forged(e)) for e in events[:4]]


def test_judge_lines_gives_the_door_and_checks_of_each_line(tmp_path: Path) -> None:
    lines = _lines(1)
    held = lines[:3]
    spaced = lines[5].replace(b'","', b'", "')  # another form of a line: the same copy
    asked = [*lines, lines[4], b"{not json", spaced]
    with Store.open(tmp_path / "s") as store:
        store.append(held, g.KEYRING)
        tag, judged = judge_lines(asked, g.KEYRING, store._read)
        pack = store._read(codec.packer)
    assert tag == pack.tag
    assert len(judged) == len(asked)
    assert isinstance(judged[-2], DoorError) and judged[-2].code.startswith("door.")
    for line, judgement in zip(asked, judged, strict=True):
        if line == b"{not json":
            continue
        assert not isinstance(judgement, DoorError)
        env = parse_envelope(line)
        encoded, h, verdict, stored, hints = judgement
        assert (encoded, h) == (env.encoded, copy_hash(env.encoded))
        # a copy the store holds is a duplicate, not judged again; the rest as here, and
        # packed as the store would keep it, with the hints of the checks made here
        assert verdict == (STORED if line in held else check_alone(env, g.KEYRING))
        assert stored == (None if line in held else pack(encoded))
        assert hints == (None if line in held else reduction_hints(env, verdict))
    reasons = {j[2] for j in judged if not isinstance(j, DoorError)}
    assert None in reasons and "bad_signature" in reasons and STORED in reasons
    assert any(j[4] is not None for j in judged if not isinstance(j, DoorError))


def _die(*_: object) -> None:
    """What a killed helper returns: nothing (it ends at once, mid-task)."""
    os._exit(1)


def test_a_helper_that_dies_costs_time_not_results(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lines = _lines(2)
    batches = [lines[:6], lines[6:12], lines[12:]]
    with Store.open(tmp_path / "one") as store:
        expected = [store.append(b, g.KEYRING, keep_invalid=True) for b in batches]
        exported = list(store.export())
    monkeypatch.setattr(pithlog.store.append_pipeline, "PIPELINE_MIN", 0)
    monkeypatch.setenv("PITHLOG_CORES", "2")
    monkeypatch.setattr(pithlog.store.append_judging, "helper_judge", _die)  # what helpers are sent
    with Store.open(tmp_path / "two") as store, pytest.warns(HelperLost):
        got = list(store.append_batches(iter(batches), g.KEYRING, keep_invalid=True))
        assert got == expected
        assert list(store.export()) == exported
        assert store.replay(g.KEYRING).ok


def test_envelopes_have_only_their_signatures_sent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Envelopes went through the door already (a mirror's): the helpers that verify
    # signatures take them, not the helpers that judge raw lines.
    lines = _lines(3)
    envelopes = [parse_envelope(line) for line in lines]
    pools: list[str] = []
    judging, verifying = (pithlog.store.append_pipeline.judging_pool,
                          pithlog.store.append_pipeline.verifying_pool)  # fmt: skip
    monkeypatch.setattr(pithlog.store.append_pipeline, "judging_pool",
                        lambda *a: pools.append("judging") or judging(*a))  # fmt: skip
    monkeypatch.setattr(pithlog.store.append_pipeline, "verifying_pool",
                        lambda *a: pools.append("verifying") or verifying(*a))  # fmt: skip
    monkeypatch.setattr(pithlog.store.append_pipeline, "PIPELINE_MIN", 0)
    monkeypatch.setenv("PITHLOG_CORES", "2")
    with Store.open(tmp_path / "a") as store:
        from_envelopes = list(store.append_batches([envelopes[:9], envelopes[9:]], g.KEYRING))
    with Store.open(tmp_path / "b") as store:
        from_lines = list(store.append_batches([lines[:9], lines[9:]], g.KEYRING))
    assert pools == ["verifying", "judging"]
    assert from_envelopes == from_lines


@pytest.mark.skipif(not hasattr(os, "nice"), reason="os.nice is POSIX only")
def test_the_helpers_yield_the_cores_to_the_writing_process(tmp_path: Path) -> None:
    # The write transactions are the critical path: the helpers, which work ahead of
    # them, run at a lower priority.
    import contextlib

    from pithlog.store.append_judging import HELPER_NICE, judging_pool

    with Store.open(tmp_path / "s") as store, contextlib.ExitStack() as stack:
        pool = judging_pool(stack, store.path, g.KEYRING)
        here = os.nice(0)
        assert pool.submit(os.nice, 0).result() == min(19, here + HELPER_NICE)


def test_appends_with_kept_judging_helpers_give_what_appends_give(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A server's group commits: many small batches, one set of helpers kept between them.
    monkeypatch.setenv("PITHLOG_CORES", "2")
    lines = _lines(4)
    batches = [lines[:5], lines[5:6], lines[6:15], lines[15:], lines[:3]]  # the last: dups
    with Store.open(tmp_path / "one") as store:
        expected = [store.append(b, g.KEYRING) for b in batches]
        exported = list(store.export())
    sent: list[int] = []
    real = pithlog.store.append_judging.send
    monkeypatch.setattr(pithlog.store.append_pipeline, "send",
                        lambda submit, helpers, part: sent.append(len(part))
                        or real(submit, helpers, part))  # fmt: skip
    with Store.open(tmp_path / "two") as store:
        judging = store.judging(g.KEYRING)
        try:
            got = [store.append(b, g.KEYRING, judging=judging) for b in batches]
        finally:
            judging.close()
        assert got == expected
        assert list(store.export()) == exported
        assert store.replay(g.KEYRING).ok
    assert sent == [len(b) for b in batches]  # every batch went to the helpers


@pytest.mark.parametrize("sizes", [[1] * 7, [3, 0, 5, 1, 2], [12], [2, 9, 1]])
def test_requests_sent_together_are_written_as_appends_of_them_would_be(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sizes: list[int]
) -> None:
    # A server's requests: sent to the helpers together as they arrive (Judging.send_each,
    # one task holding lines of several requests), written later, in commits that group
    # them otherwise (Store.append_judged), the last commit's copies already stored.
    monkeypatch.setenv("PITHLOG_CORES", "2")
    lines = _lines(5)
    requests, at = [], 0
    for size in sizes:
        requests.append(lines[at : at + size])
        at += size
    requests.append(lines[:4])  # duplicates by the time they are written
    commits = [requests[: len(requests) // 2], requests[len(requests) // 2 :]]
    with Store.open(tmp_path / "one") as store:
        expected = [store.append([x for r in c for x in r], g.KEYRING) for c in commits]
        exported = list(store.export())
    with Store.open(tmp_path / "two") as store:
        judging = store.judging(g.KEYRING)
        try:
            sent = judging.send_each(requests)  # all of them judged before any commit
            assert [len(s) for s in sent] == [len(r) for r in requests]
            assert [line for s in sent for part in s.parts for line in part.lines] == [
                line for r in requests for line in r]  # fmt: skip
            half = len(requests) // 2
            got = [store.append_judged(sent[:half], g.KEYRING, judging),
                   store.append_judged(sent[half:], g.KEYRING, judging)]  # fmt: skip
        finally:
            judging.close()
        assert got == expected
        assert list(store.export()) == exported
        assert store.replay(g.KEYRING).ok


def test_kept_helpers_that_broke_are_started_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A server keeps its helpers for months: one killed (the OOM killer) must not leave
    # every later request judged in the server's own process.
    monkeypatch.setenv("PITHLOG_CORES", "2")
    lines = _lines(7)
    batches = [lines[:6], lines[6:12], lines[12:]]
    with Store.open(tmp_path / "one") as store:
        expected = [store.append(b, g.KEYRING) for b in batches]
    with Store.open(tmp_path / "two") as store:
        judging = store.judging(g.KEYRING)
        try:
            got = [store.append_judged(judging.send_each([batches[0]]), g.KEYRING, judging)]
            first = judging.pool()
            os.kill(first.submit(os.getpid).result(), signal.SIGKILL)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:  # until the pool knows it is broken
                try:
                    first.submit(int).result(timeout=10)
                except BrokenProcessPool:
                    break
            sent = judging.send_each([batches[1]])  # refused by the broken pool
            assert all(part.future is None for part in sent[0].parts)
            got.append(store.append_judged(sent, g.KEYRING, judging))  # judged here
            sent = judging.send_each([batches[2]])
            assert judging.pool() is not first
            assert all(part.future is not None for part in sent[0].parts)  # new helpers
            got.append(store.append_judged(sent, g.KEYRING, judging))
        finally:
            judging.close()
        assert got == expected
        assert store.replay(g.KEYRING).ok


def test_append_judged_refuses_helpers_of_another_keyring(tmp_path: Path) -> None:
    other = make_keyring(test_keyring_entries(("registry",)))  # the registry's key alone
    assert other.digest != g.KEYRING.digest
    with Store.open(tmp_path / "s") as store:
        judging = store.judging(other)
        try:
            sent = judging.send_each([_lines(6)[:2]])
            with pytest.raises(StoreError) as raised:  # it was a bare ValueError
                store.append_judged(sent, g.KEYRING, judging)
            assert raised.value.code == "store.judging_keyring"
        finally:
            judging.close()
        assert store.stats()["counts"]["events"] == 0


def test_values_packed_by_the_helpers_are_the_bytes_the_writer_would_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The dictionary is trained mid-stream (at 20 copies here): parts packed before it
    # by the helpers carry the plain tag, and the write transaction packs those itself.
    monkeypatch.setattr(codec, "TRAIN_AT", 20)
    lines = _lines(8) + _lines(9)
    batches = [lines[i : i + 7] for i in range(0, len(lines), 7)]

    def stored(store: Store) -> list[tuple[bytes, bytes]]:
        return store._read(lambda txn, dbs: list(txn.cursor(db=dbs["copies"])))

    with Store.open(tmp_path / "one") as store:
        for b in batches:
            store.append(b, g.KEYRING)
        expected = stored(store)
    monkeypatch.setattr(pithlog.store.append_pipeline, "PIPELINE_MIN", 0)
    monkeypatch.setenv("PITHLOG_CORES", "2")
    with Store.open(tmp_path / "two") as store:
        list(store.append_batches(iter(batches), g.KEYRING))
        got = stored(store)
    assert got == expected
    tags = {value[:1] for _, value in got}
    assert codec.DICT in tags and codec.PLAIN in tags  # both sides of the training



@pytest.mark.parametrize("cores", ["1", "2"])
def test_append_refuses_helpers_of_another_keyring_before_starting_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cores: str
) -> None:
    """``append(judging=)`` raised a bare ValueError for helpers of another keyring; it is
    now ``store.judging_keyring``, before any helper starts or anything is written. On one
    core, where the helpers are not used, it was taken and the batch written: a program
    tested there was refused on a machine of two."""
    monkeypatch.setenv("PITHLOG_CORES", cores)  # the helpers are used only with two cores
    other = make_keyring(test_keyring_entries(("registry",)))
    with Store.open(tmp_path / "s") as store:
        judging = store.judging(other)
        try:
            with pytest.raises(StoreError) as raised:
                store.append(_lines(12), g.KEYRING, judging=judging)
            assert raised.value.code == "store.judging_keyring"
            assert judging._pool is None and store.tree_size() == 0
        finally:
            judging.close()
