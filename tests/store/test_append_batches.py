"""Store.append_batches: the pipeline gives what append() gives, batch by batch."""

from __future__ import annotations

import os
import random
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import eventgen as g
import pytest

import pithlog.errors
import pithlog.protocol.checks
import pithlog.store.append_pipeline
from pithlog.store import AppendResult, Store
from pithlog.store.environment import SharedEnvironment


def batches_of(rng: random.Random) -> list[list[bytes]]:
    """Batches that cross each other: the same copy in two batches, a better or worse copy
    of an event in a later batch than the event, lines the door refuses, invalid events."""
    events = g.mixed_events(rng, piths=6, per_pith=8)
    lines = [g.encoded(e) for e in events]
    extra = []
    signers = {"record_created": "registry", "correction": "registry", "mirror_hint": "mirror"}
    for event in rng.sample([e for e in events if e["event_type"] in signers], 12):
        extra.append(g.encoded(g.forged(event)))  # loses to the stored copy
        resigned = g.resigned(event, signers[event["event_type"]], bytes([7]) * 32)
        extra.append(g.encoded(resigned))  # a second valid copy: one of the two is preferred
    lines += extra + rng.sample(lines, 10)  # exact duplicates, some in later batches
    lines += [b"{not json", b'{"event_id":1}']
    rng.shuffle(lines)
    cut = sorted(rng.sample(range(1, len(lines)), 5))
    return [lines[a:b] for a, b in zip([0, *cut], [*cut, len(lines)], strict=True)]


def snapshot(store: Store) -> tuple[Any, ...]:
    piths = [p["pith_number"] for p in store.piths()]
    stats = store.stats()
    return (
        [store.state(p) for p in piths],
        [stats[k] for k in ("counts", "piths_with_state", "piths_pending", "keyring_digest")],
        list(store.export()),
    )


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("keep_invalid", [False, True])
def test_pipeline_equals_batch_by_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int, keep_invalid: bool
) -> None:
    batches = batches_of(random.Random(seed))
    with Store.open(tmp_path / "one") as store:
        one: list[list[AppendResult]] = [
            store.append(b, g.KEYRING, keep_invalid=keep_invalid) for b in batches
        ]
        expected = snapshot(store)
        assert store.replay(g.KEYRING).ok
    # helper processes from batch 2
    monkeypatch.setattr(pithlog.store.append_pipeline, "PIPELINE_MIN", 0)
    with Store.open(tmp_path / "two") as store:
        two = list(store.append_batches(iter(batches), g.KEYRING, keep_invalid=keep_invalid))
        assert two == one
        assert snapshot(store) == expected
        assert store.replay(g.KEYRING).ok
    statuses = {r.status for results in one for r in results}
    assert {"stored", "duplicate", "refused", "evidence"} <= statuses


def test_a_large_first_batch_is_judged_in_helper_processes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A first batch has no batch before it to overlap: threads would leave it at about
    # one core.
    lines = [line for batch in batches_of(random.Random(5)) for line in batch]
    with Store.open(tmp_path / "one") as store:
        expected_results = store.append(lines, g.KEYRING)
        expected = snapshot(store)
    sent: list[int] = []
    real = pithlog.store.append_pipeline.judging_pool

    def counted(stack: Any, *args: Any) -> Any:
        pool = real(stack, *args)
        submit = pool.submit

        def counting(*a: Any, **k: Any) -> Any:
            sent.append(len(a[1]))  # the lines of a part, door and checks to run there
            return submit(*a, **k)

        pool.submit = counting  # type: ignore[method-assign]
        return pool

    monkeypatch.setattr(pithlog.store.append_pipeline, "judging_pool", counted)
    monkeypatch.setattr(pithlog.store.append_pipeline, "ALONE_POOL_MIN", len(lines))
    monkeypatch.setenv("PITHLOG_CORES", "2")
    with Store.open(tmp_path / "two") as store:
        assert list(store.append_batches([lines], g.KEYRING)) == [expected_results]
        assert snapshot(store) == expected
        assert store.replay(g.KEYRING).ok
    assert sum(sent) == len(lines)  # every line was judged by the helpers
    sent.clear()
    with Store.open(tmp_path / "three") as store:  # one item short; a length not known
        assert list(store.append_batches([lines[:-1]], g.KEYRING))
        assert list(store.append_batches([iter(lines)], g.KEYRING))
    assert not sent


def _until_broken(store: Store, batches: Any, failure: type[BaseException]) -> list[Any]:
    """The results ``append_batches`` hands out of ``batches``, whose input then breaks
    with ``failure`` ("the input broke"), raised after them."""
    done: list[Any] = []
    with pytest.raises(failure, match="the input broke"):
        for results in store.append_batches(batches, g.KEYRING):
            done.append(results)
    return done


def _stored(done: list[list[AppendResult]]) -> int:
    return sum(r.status == "stored" for results in done for r in results)


@pytest.mark.parametrize("helpers", [False, True])
@pytest.mark.parametrize("failure", [RuntimeError, KeyboardInterrupt])
def test_batches_taken_before_the_input_fails_are_written_and_handed_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, helpers: bool,
    failure: type[BaseException],
) -> None:  # fmt: skip
    """An input that yields two batches, then fails (a mirror's origin gone, an audit out
    of time, Ctrl-C while the input is read): the first batch was being written, the
    second taken, through the door and started, not yet written. Only the first was kept:
    the second, verified, was thrown away, and a mirror that gets one batch a run never
    advanced. Both are written, their results handed out, then the error raised."""
    if helpers:  # the second batch is started in helper processes
        monkeypatch.setattr(pithlog.store.append_pipeline, "PIPELINE_MIN", 0)
        monkeypatch.setenv("PITHLOG_CORES", "2")
    events = g.mixed_events(random.Random(3), piths=2, per_pith=4)
    lines = [g.encoded(e) for e in events]

    def batches() -> Any:
        yield lines[:5]
        yield lines[5:]
        raise failure("the input broke")

    with Store.open(tmp_path / "s") as store:
        done = _until_broken(store, batches(), failure)
        assert [len(results) for results in done] == [5, len(lines) - 5]
        assert _stored(done) > 0 and store.stats()["counts"]["seq"] == _stored(done)
        assert store.replay(g.KEYRING).ok
    with Store.open(tmp_path / "all") as whole:
        assert whole.append(lines[:5], g.KEYRING) + whole.append(lines[5:], g.KEYRING) == [
            r for results in done for r in results]  # fmt: skip


def test_an_input_failing_at_its_first_batch_writes_that_batch(tmp_path: Path) -> None:
    """The one batch taken (no writer yet) is written too."""
    lines = _lines(8)

    def batches() -> Any:
        yield lines
        raise RuntimeError("the input broke")

    with Store.open(tmp_path / "s") as store:
        done = _until_broken(store, batches(), RuntimeError)
        assert [len(results) for results in done] == [len(lines)]
        assert store.stats()["counts"]["seq"] == _stored(done) > 0


def test_a_batch_the_store_refuses_stops_after_the_batches_before_it(tmp_path: Path) -> None:
    """A batch refused when it is started (an item that is not one: ``store.item``) is
    raised once the batches taken before it, which it does not concern, are written and
    handed out; nothing of it, or after it, is read or written."""
    lines = _lines(9)
    taken: list[int] = []

    def batches() -> Any:
        for number, batch in enumerate([lines[:4], lines[4:8], ["a str"], lines[8:]]):
            taken.append(number)
            yield batch

    with Store.open(tmp_path / "s") as store:
        done = []
        with pytest.raises(pithlog.errors.StoreError) as caught:
            for results in store.append_batches(batches(), g.KEYRING):
                done.append(results)
        assert caught.value.code == "store.item"
        assert [len(results) for results in done] == [4, 4] and taken == [0, 1, 2]
        assert store.stats()["counts"]["seq"] == _stored(done) > 0


def _lines(seed: int, piths: int = 3) -> list[bytes]:
    return [g.encoded(e) for e in g.mixed_events(random.Random(seed), piths=piths, per_pith=4)]


def test_a_consumer_that_stops_abandons_the_batch_being_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lines = _lines(4)
    batches = [lines[:4], lines[4:8], lines[8:]]
    finish = Store._finish_append
    seen: list[Any] = []

    def held(self: Store, started: Any, keyring: Any, keep: bool, abandon: Any = None,
             vet: Any = None) -> Any:  # fmt: skip
        if abandon is not None:  # written in the pipeline's thread
            seen.append(abandon)
            if len(seen) == 2:  # batch 2: its transaction waits for the close (or 5 s)
                abandon.wait(5)
        return finish(self, started, keyring, keep, abandon, vet)

    monkeypatch.setattr(Store, "_finish_append", held)
    with Store.open(tmp_path / "s") as store:
        pipeline = store.append_batches(iter(batches), g.KEYRING)
        first = next(pipeline)  # batch 1 committed; batch 2 is being written
        pipeline.close()
        assert len(seen) == 2  # batch 2 was in the writing thread, then abandoned
        stored = sum(r.status == "stored" for r in first)
        assert stored > 0
        assert store.stats()["counts"]["seq"] == stored
        assert store.replay(g.KEYRING).ok


def test_a_failed_transaction_stops_the_pipeline_before_the_next_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lines = _lines(5)
    batches = [lines[:4], lines[4:8], lines[8:]]
    real = pithlog.store.append_pipeline.append_work
    calls: list[int] = []

    def failing_second(started: Any, keyring: Any, keep: bool) -> Any:
        calls.append(len(started.items))
        work = real(started, keyring, keep)
        if len(calls) != 2:
            return work

        def broken(txn: Any, dbs: Any) -> Any:
            work(txn, dbs)  # written, then refused: the transaction is aborted
            raise pithlog.errors.StoreError("io", "the disk went away")

        return broken

    monkeypatch.setattr(pithlog.store.append_pipeline, "append_work", failing_second)
    with Store.open(tmp_path / "s") as store:
        done = []
        with pytest.raises(pithlog.errors.StoreError, match="disk went away"):
            for results in store.append_batches(iter(batches), g.KEYRING):
                done.append(results)
        assert len(done) == 1 and len(calls) == 2  # batch 3 was never written
        assert store.stats()["counts"]["seq"] == sum(r.status == "stored" for r in done[0])
        assert store.replay(g.KEYRING).ok


@pytest.mark.parametrize("helpers", [False, True])
def test_a_vet_that_raises_stops_the_pipeline_before_that_batch_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, helpers: bool
) -> None:
    if helpers:  # batches after the first judged by helper processes
        monkeypatch.setattr(pithlog.store.append_pipeline, "PIPELINE_MIN", 0)
        monkeypatch.setenv("PITHLOG_CORES", "2")
    lines = _lines(6)
    batches = [lines[:4], lines[4:8], lines[8:]]
    seen: list[list[bytes | None]] = []

    def vet(items: list[Any], hashes: list[bytes | None]) -> None:
        assert len(items) == len(hashes) == len(batches[len(seen)])
        seen.append(hashes)
        if len(seen) == 2:
            raise ValueError("not the copies this batch should hold")

    with Store.open(tmp_path / "s") as store:
        done = []
        with pytest.raises(ValueError, match="not the copies"):
            for results in store.append_batches(iter(batches), g.KEYRING, vet=vet):
                done.append(results)
        assert len(done) == 1 and len(seen) == 2  # the third batch never reached its write
        stored = sum(r.status == "stored" for r in done[0])
        assert stored > 0 and store.stats()["counts"]["seq"] == stored
        assert store.replay(g.KEYRING).ok


def _second_refused(lines: list[bytes], failure: type[BaseException]) -> tuple[Any, Any, list[int]]:
    """An input of two batches (five lines, then the rest) that then raises ``failure``
    ("the input broke"), a vet that refuses the second batch, and the batch sizes the vet
    saw."""
    seen: list[int] = []

    def batches() -> Any:
        yield lines[:5]
        yield lines[5:]
        raise failure("the input broke")

    def vet(items: list[Any], hashes: list[bytes | None]) -> None:
        seen.append(len(items))
        if len(seen) == 2:
            raise ValueError("not the copies this batch should hold")

    return batches(), vet, seen


@pytest.mark.parametrize("helpers", [False, True])
def test_a_taken_batch_the_vet_refuses_outranks_the_input_s_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, helpers: bool
) -> None:
    """An input that yields two batches, then fails, and a vet that refuses the second
    (finished after the input's error): the input's error was raised and the vet's
    dropped, so a mirror whose origin served a copy not matching its leaf, then failed a
    fetch, said only ``mirror.fetch`` ("run it again"). The vet's error is raised, the
    input's as its cause; the first batch is stored, nothing of the second."""
    if helpers:
        monkeypatch.setattr(pithlog.store.append_pipeline, "PIPELINE_MIN", 0)
        monkeypatch.setenv("PITHLOG_CORES", "2")
    lines = _lines(10)
    batches, vet, seen = _second_refused(lines, RuntimeError)
    with Store.open(tmp_path / "s") as store:
        done = []
        with pytest.raises(ValueError, match="not the copies") as caught:
            for results in store.append_batches(batches, g.KEYRING, vet=vet):
                done.append(results)
        assert isinstance(caught.value.__cause__, RuntimeError)
        assert seen == [5, len(lines) - 5] and [len(results) for results in done] == [5]
        assert store.stats()["counts"]["seq"] == _stored(done) > 0
        assert store.replay(g.KEYRING).ok


@pytest.mark.parametrize("failure", [KeyboardInterrupt, SystemExit])
def test_an_interrupt_outranks_a_taken_batch_s_failure(
    tmp_path: Path, failure: type[BaseException]
) -> None:
    """An interrupt is not made an exception a caller may catch and go on from: it is
    raised, and the batch the vet refused is not written."""
    lines = _lines(11)
    batches, vet, seen = _second_refused(lines, failure)
    with Store.open(tmp_path / "s") as store:
        done = []
        with pytest.raises(failure, match="the input broke"):
            for results in store.append_batches(batches, g.KEYRING, vet=vet):
                done.append(results)
        assert seen == [5, len(lines) - 5] and [len(results) for results in done] == [5]
        assert store.stats()["counts"]["seq"] == _stored(done) > 0


def test_an_append_on_one_core_verifies_before_its_write_transaction(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On one core (a ``serve --workers N`` worker whose share is one core:
    docs/network.md), an append verifies its signatures before its write transaction
    begins: processes appending to one store do not hold LMDB's writer lock, which orders
    their commits, while they verify."""
    monkeypatch.setenv("PITHLOG_CORES", "1")
    writing: list[bool] = [False]
    seen: list[bool] = []  # whether a write transaction was open at each verification
    real_verify = pithlog.protocol.checks.verify_signature
    real_write = SharedEnvironment.write

    def verify(*args: Any) -> bool:
        seen.append(writing[0])
        return bool(real_verify(*args))

    def write(self: SharedEnvironment, work: Any) -> Any:
        writing[0] = True
        try:
            return real_write(self, work)
        finally:
            writing[0] = False

    monkeypatch.setattr(pithlog.protocol.checks, "verify_signature", verify)
    monkeypatch.setattr(SharedEnvironment, "write", write)
    lines = [line for batch in batches_of(random.Random(7)) for line in batch]
    with Store.open(tmp_path / "s") as store:
        results = store.append(lines, g.KEYRING)
    assert {"stored", "rejected"} <= {r.status for r in results}
    assert seen and not any(seen)


def test_refused_lines_of_an_append_are_freed_with_the_collector_paused(
    tmp_path: Path, collector_paused: Callable[[], int]
) -> None:
    """Every command runs with the cyclic collector paused. An append in this process (no
    helpers: one core) kept each refusal with its traceback, whose frame holds the batch's
    list of items: a reference cycle, so every refused line stayed for the command's life
    (400,000 junk lines: 1.4 GB of RSS)."""
    refusals = collector_paused
    before = refusals()
    with Store.open(tmp_path / "s") as store:
        results = store.append([b"junk %d" % n for n in range(500)], g.KEYRING)
    assert {r.status for r in results} == {"refused"}
    assert refusals() == before


@pytest.mark.parametrize("count", [1, 3])
def test_an_interrupt_after_the_last_commit_still_hands_out_its_results(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, count: int
) -> None:
    """Ctrl-C while the last batch is committed (its fsync): the batch is stored, so its
    results are yielded before the interrupt is raised. Written in the interrupted thread
    itself, they were lost with the interrupt, and a mirror's line (each poll of
    ``--follow`` is one batch) left the batch out of ``appended``."""
    lines = _lines(5)
    size = -(-len(lines) // count)
    batches = [lines[i : i + size] for i in range(0, len(lines), size)]
    write = Store._write
    writes: list[int] = []

    def interrupted(self: Store, work: Any) -> Any:
        done = write(self, work)
        writes.append(1)
        if len(writes) == len(batches):  # after the last commit, as SIGINT would come
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)  # the handler runs in the main thread, at its next bytecode
        return done

    monkeypatch.setattr(Store, "_write", interrupted)
    with Store.open(tmp_path / "s") as store:
        done: list[AppendResult] = []
        with pytest.raises(KeyboardInterrupt):
            for results in store.append_batches(iter(batches), g.KEYRING):
                done += results
        assert len(writes) == len(batches)
        assert len(done) == len(lines)
        assert store.stats()["counts"]["seq"] == sum(r.status == "stored" for r in done)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_a_pipeline_taken_before_fork_is_store_forked_in_the_child(tmp_path: Path) -> None:
    """``append_batches`` taken before fork() and resumed in the child waited for ever:
    its writer thread is not in the child, so the batch handed to it was never written
    and its result never came. It is ``store.forked`` at its next use in the child, as
    the Store's other iterators are, nothing is written, and the parent's pipeline goes
    on. (The child is bounded by an alarm: a hang kills it.)"""
    first, second = g.record("2501.00061"), g.record("2501.00062")
    with Store.open(tmp_path / "s") as store:
        pipeline = store.append_batches([[g.encoded(first)], [g.encoded(second)]], g.KEYRING)
        assert [r.status for r in next(pipeline)] == ["stored"]
        pid = os.fork()
        if pid == 0:  # the child: its verdict is its exit status
            status = 1
            try:
                signal.alarm(30)
                try:
                    next(pipeline)
                except pithlog.errors.StoreError as exc:
                    status = 0 if exc.code == "store.forked" else 1
            finally:
                os._exit(status)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert store.tree_size() == 1 and store.event(second["event_id"]) is None
        assert [r.status for r in next(pipeline)] == ["stored"]
        assert store.tree_size() == 2
