"""Group commit (pithlog.net.submit.GroupCommit) with a stand-in for Store.append_judged:
requests that arrive during a commit share the next one, up to batch_lines, never split;
each gets its own results in order; a failed commit fails exactly its own requests; the
requests of one turn of the event loop are started together, before their commit."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from pithlog.net import submit
from pithlog.net.submit import GroupCommit
from pithlog.store import STORED, AppendResult


class Appender:
    def __init__(self, fail_on: bytes | None = None) -> None:
        self.batches: list[list[bytes]] = []
        self.release = threading.Event()
        self.fail_on = fail_on

    def __call__(self, requests: list[list[bytes]]) -> list[AppendResult]:
        lines = [line for request in requests for line in request]
        self.batches.append(lines)
        self.release.wait(5)  # the first commit is slow: the others queue behind it
        if self.fail_on in lines:
            raise OSError("disk full")
        return [AppendResult(i, line.decode(), STORED) for i, line in enumerate(lines)]


def test_requests_arriving_during_a_commit_share_the_next() -> None:
    appender = Appender()
    group = GroupCommit(appender, batch_lines=5)

    async def run() -> list[list[AppendResult]]:
        first = asyncio.create_task(group.submit([b"a0"]))
        await asyncio.sleep(0.05)  # the first commit has started and waits
        rest = [asyncio.create_task(group.submit([b"r%d" % i, b"s%d" % i])) for i in range(4)]
        await asyncio.sleep(0.05)
        appender.release.set()
        return [await first, *[await t for t in rest]]

    answers = asyncio.run(run())
    # 1 line, then 4 requests of 2 lines with batch_lines 5: two of them, then two more
    assert [len(b) for b in appender.batches] == [1, 4, 4]
    assert group.commits == 3 and group.requests == 5
    assert [r.event_id for r in answers[0]] == ["a0"]
    for i, results in enumerate(answers[1:]):
        assert [r.event_id for r in results] == [f"r{i}", f"s{i}"]  # its own, in order


def test_a_request_larger_than_a_batch_is_not_split() -> None:
    appender = Appender()
    appender.release.set()
    group = GroupCommit(appender, batch_lines=2)
    got = asyncio.run(group.submit([b"x", b"y", b"z"]))
    assert appender.batches == [[b"x", b"y", b"z"]] and len(got) == 3


def test_a_failed_commit_fails_its_requests_only() -> None:
    appender = Appender(fail_on=b"bad")
    group = GroupCommit(appender, batch_lines=2)

    async def run() -> tuple[BaseException | list[AppendResult], ...]:
        first = asyncio.create_task(group.submit([b"ok0"]))
        await asyncio.sleep(0.05)
        tasks = [asyncio.create_task(group.submit(lines))
                 for lines in ([b"bad"], [b"ok1"], [b"ok2", b"ok3"])]  # fmt: skip
        await asyncio.sleep(0.05)
        appender.release.set()
        return tuple(await asyncio.gather(first, *tasks, return_exceptions=True))

    first, bad, same_batch, later = asyncio.run(run())
    assert appender.batches == [[b"ok0"], [b"bad", b"ok1"], [b"ok2", b"ok3"]]
    assert isinstance(bad, OSError) and isinstance(same_batch, OSError)
    assert not isinstance(first, BaseException) and not isinstance(later, BaseException)
    assert [r.event_id for r in later] == ["ok2", "ok3"]
    assert group.commits == 2


@pytest.mark.parametrize("lines", [[], [b"a"]])
def test_nothing_to_commit(lines: list[bytes]) -> None:
    appender = Appender()
    appender.release.set()
    group = GroupCommit(appender)
    assert len(asyncio.run(group.submit(lines))) == len(lines)
    assert appender.batches == ([lines] if lines else [])  # no empty transaction


def test_submitters_that_wait_for_their_answers_share_one_commit_each_round(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Eight submitters, each sending again as soon as it is answered, come back one after
    the other; the commit waits for the ones it answered last time (GroupCommit._gather),
    so the rounds settle at one commit of all eight (without the wait: 1, 7, 1, 7, ...).
    The wait and the commit are ten times their size in a server here, so that a busy
    machine, slow to wake the submitters, does not outlast the wait."""
    batches: list[int] = []
    monkeypatch.setattr(submit, "GATHER_SECONDS", 0.02)

    def append(requests: list[list[bytes]]) -> list[AppendResult]:
        lines = [line for request in requests for line in request]
        batches.append(len(lines))
        time.sleep(0.08)  # a commit's work: the others queue meanwhile
        return [AppendResult(i, line.decode(), STORED) for i, line in enumerate(lines)]

    group = GroupCommit(append)

    async def submitter(n: int) -> None:
        for r in range(6):
            await asyncio.sleep(0.0002 * n)  # the answers reach them one after the other
            got = await group.submit([b"%d.%d" % (n, r)])
            assert [x.event_id for x in got] == [f"{n}.{r}"]

    async def run() -> None:
        await asyncio.gather(*(submitter(n) for n in range(8)))

    asyncio.run(run())
    assert sum(batches) == 48
    assert batches.count(8) >= 4 and len(batches) <= 8, batches


def test_a_lone_submitter_is_not_made_to_wait() -> None:
    """After a commit that answered one request, the next commits at once: nothing is
    expected besides it (one commit per request, each of one line)."""
    appender = Appender()
    appender.release.set()
    group = GroupCommit(appender)

    async def run() -> None:
        for i in range(5):
            await group.submit([b"%d" % i])

    asyncio.run(run())
    assert appender.batches == [[b"%d" % i] for i in range(5)]
    assert group._answered == 1


def test_requests_of_one_turn_are_started_together_before_their_commit() -> None:
    """``start`` (the helpers' judging, Judging.send_each) takes the requests that arrived
    in one turn of the event loop at once, as they arrive, while a commit is running;
    ``append`` gets what ``start`` made of them, in order."""
    events: list[tuple[str, list[str]]] = []
    release = threading.Event()

    def start(requests: list[list[bytes]]) -> list[str]:
        events.append(("start", [b"+".join(r).decode() for r in requests]))
        return [b"+".join(r).decode() for r in requests]

    def append(started: list[str]) -> list[AppendResult]:
        events.append(("commit", started))
        release.wait(5)
        return [AppendResult(i, s, STORED) for i, s in enumerate(x for s in started
                                                                  for x in s.split("+"))]

    group = GroupCommit(append, start)

    async def run() -> list[list[AppendResult]]:
        first = asyncio.create_task(group.submit([b"a"]))
        await asyncio.sleep(0.05)  # its commit runs and waits
        same_turn = [asyncio.create_task(group.submit(lines))
                     for lines in ([b"b", b"c"], [b"d"])]  # fmt: skip
        await asyncio.sleep(0.05)
        later = asyncio.create_task(group.submit([b"e"]))
        await asyncio.sleep(0.05)
        release.set()
        return [await first, *[await t for t in same_turn], await later]

    answers = asyncio.run(run())
    assert events == [("start", ["a"]), ("commit", ["a"]), ("start", ["b+c", "d"]),
                      ("start", ["e"]), ("commit", ["b+c", "d", "e"])]  # fmt: skip
    assert [[r.event_id for r in a] for a in answers] == [["a"], ["b", "c"], ["d"], ["e"]]


def test_a_start_that_fails_fails_its_requests_only() -> None:
    def start(requests: list[list[bytes]]) -> list[list[bytes]]:
        if [b"bad"] in requests:
            raise OSError("the helpers could not start")
        return requests

    appender = Appender()
    appender.release.set()
    group = GroupCommit(appender, start)

    async def run() -> tuple[BaseException | list[AppendResult], ...]:
        bad = asyncio.gather(group.submit([b"bad"]), group.submit([b"same turn"]),
                             return_exceptions=True)  # fmt: skip
        failed = await bad
        return (*failed, await group.submit([b"next"]))

    bad, same_turn, later = asyncio.run(run())
    assert isinstance(bad, OSError) and isinstance(same_turn, OSError)
    assert not isinstance(later, BaseException) and [r.event_id for r in later] == ["next"]
    assert appender.batches == [[b"next"]]


def _loop_errors() -> list[dict[str, object]]:
    """What the running loop's exception handler is handed from now on (an error raised
    in a callback, such as an answer set on a future already cancelled)."""
    errors: list[dict[str, object]] = []
    asyncio.get_running_loop().set_exception_handler(lambda _loop, context: errors.append(context))
    return errors


def test_a_request_cancelled_while_queued_leaves_its_commit_to_the_others() -> None:
    """A waiter cancelled (the server shutting down on it) cancels only its own answer: the
    commit it was queued for still takes its lines, as it would with the client gone, and
    the other requests of that commit are answered."""
    appender = Appender()
    group = GroupCommit(appender)

    async def run() -> tuple[list[AppendResult], list[AppendResult], bool, list[object]]:
        errors = _loop_errors()
        first = asyncio.create_task(group.submit([b"first"]))
        await asyncio.sleep(0.05)  # the first commit has started and waits
        gone = asyncio.create_task(group.submit([b"gone"]))
        stays = asyncio.create_task(group.submit([b"stays"]))
        await asyncio.sleep(0.05)  # both queued behind it
        gone.cancel()
        appender.release.set()
        # bounded: were a cancelled answer set, the commit's task would fail unanswered
        answered = (await asyncio.wait_for(first, 5), await asyncio.wait_for(stays, 5))
        try:
            await gone
        except asyncio.CancelledError:
            cancelled = True
        else:
            cancelled = False
        return (*answered, cancelled, errors)

    first, stays, cancelled, errors = asyncio.run(run())
    assert appender.batches == [[b"first"], [b"gone", b"stays"]]
    assert [r.event_id for r in first] == ["first"] and [r.event_id for r in stays] == ["stays"]
    assert cancelled and errors == []
    assert group.commits == 2


def test_a_start_that_fails_skips_a_request_cancelled_meanwhile() -> None:
    """A request cancelled in the turn its start fails gets no error set on its cancelled
    answer (which would raise in the loop's callback and leave the others unanswered)."""

    def start(requests: list[list[bytes]]) -> list[list[bytes]]:
        raise OSError("the helpers could not start")

    appender = Appender()
    appender.release.set()
    group = GroupCommit(appender, start)

    async def run() -> tuple[BaseException | None, bool, list[object]]:
        errors = _loop_errors()
        gone = asyncio.create_task(group.submit([b"gone"]))
        failed = asyncio.create_task(group.submit([b"fails"]))
        await asyncio.sleep(0)  # both submitted; the start runs in the next turn
        gone.cancel()
        # bounded: were the error raised in the callback, ``failed`` would never be answered
        got = await asyncio.gather(asyncio.wait_for(failed, 5), return_exceptions=True)
        return got[0] if isinstance(got[0], BaseException) else None, gone.cancelled(), errors

    error, cancelled, errors = asyncio.run(run())
    assert isinstance(error, OSError) and cancelled
    assert errors == [] and appender.batches == []


def test_the_helpers_are_started_before_a_request_first_and_after_they_broke() -> None:
    """``warm_up`` (the helpers' start: LoopJudging.start) is awaited before a request is
    started whenever ``warm`` says the helpers do not run: the first time, and again after
    one ended (LoopJudging.ready); requests that arrive meanwhile wait for that one start."""
    state = {"running": False}
    starts: list[int] = []

    async def warm_up() -> None:
        starts.append(len(starts))
        await asyncio.sleep(0.02)  # the others arrive meanwhile
        state["running"] = True

    appender = Appender()
    appender.release.set()
    group = GroupCommit(appender, warm_up=warm_up, warm=lambda: state["running"])

    async def run() -> None:
        await asyncio.gather(*(group.submit([b"%d" % i]) for i in range(3)))
        state["running"] = False  # a helper was killed
        await asyncio.gather(*(group.submit([b"again %d" % i]) for i in range(4)))

    asyncio.run(run())
    assert starts == [0, 1]  # once, then once again
    assert sum(len(b) for b in appender.batches) == 7


class Judgement:
    """A started request whose judgement arrives when the test says (``settle``)."""

    def __init__(self, lines: list[bytes]) -> None:
        self.lines = lines
        self.settled = asyncio.Event()

    async def wait(self) -> None:
        await self.settled.wait()


def test_a_commit_takes_only_judged_requests() -> None:
    """A commit writes the judged requests at the head of the queue and leaves the rest
    for the next: its write transaction never waits on a helper."""
    started: list[Judgement] = []
    committed: list[list[bytes]] = []

    def start(requests: list[list[bytes]]) -> list[Judgement]:
        made = [Judgement(r) for r in requests]
        started.extend(made)
        return made

    def append(judged: list[Judgement]) -> list[AppendResult]:
        assert all(j.settled.is_set() for j in judged)
        lines = [line for j in judged for line in j.lines]
        committed.append(lines)
        return [AppendResult(i, line.decode(), STORED) for i, line in enumerate(lines)]

    group = GroupCommit(append, start, judged=lambda j: j.settled.is_set(),
                        until_judged=Judgement.wait)  # fmt: skip

    async def run() -> list[list[AppendResult]]:
        tasks = [asyncio.create_task(group.submit([b"%d" % i])) for i in range(4)]
        await asyncio.sleep(0.02)
        assert len(started) == 4 and not committed  # nothing judged, nothing written
        for j in started[:2]:
            j.settled.set()
        await asyncio.sleep(0.02)
        assert committed == [[b"0", b"1"]]
        started[3].settled.set()  # judged, but behind one that is not
        await asyncio.sleep(0.02)
        assert committed == [[b"0", b"1"]]
        started[2].settled.set()
        return [await t for t in tasks]

    answers = asyncio.run(run())
    assert committed == [[b"0", b"1"], [b"2", b"3"]]
    assert [[r.event_id for r in a] for a in answers] == [["0"], ["1"], ["2"], ["3"]]


def test_a_group_served_again_on_another_event_loop_works_there() -> None:
    """Its places and events are asyncio objects, each bound to the loop it first waited on:
    the same group run again on a new loop (an app served twice, as a program embedding it
    or a test may) starts them afresh, where the old ones raised on every wait."""
    appender = Appender()
    appender.release.set()
    group = GroupCommit(appender, max_pending=1)
    limits = submit.Limits(body_seconds=5)

    async def two_at_once() -> list[int]:
        async def one(line: bytes) -> int:
            slot = await group.take_slot(limits)  # the second waits for the first's place
            try:
                return len(await group.submit([line]))
            finally:
                slot.release()

        return list(await asyncio.gather(one(b"a"), one(b"b")))

    for _ in range(2):
        assert asyncio.run(two_at_once()) == [1, 1]
    assert [line for batch in appender.batches for line in batch] == [b"a", b"b"] * 2
