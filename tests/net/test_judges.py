"""The judging helpers of ``serve --submit`` (pithlog.net.judges): real helper processes
fed by an event loop judge as an append's helpers do; a helper killed mid-way fails only
its waiting parts, which the write transaction then judges itself, and the next start
brings new helpers; closing them ends them."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
from collections.abc import Iterator
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

import pytest
from served import g

from pithlog.errors import HelperLost
from pithlog.net import judges
from pithlog.net.judges import LoopJudging, import_path, judged, until_judged
from pithlog.net.submit import GroupCommit, Limits
from pithlog.store import AppendResult, SentBatch, Store
from pithlog.store.append_judging import judge_lines


def _lines(seed: int) -> list[bytes]:
    events = g.mixed_events(random.Random(seed), piths=3, per_pith=5)
    lines = [g.encoded(e) for e in events]
    return lines + [g.encoded(g.forged(e)) for e in events[:4]] + [b"{not json"]


def _requests(lines: list[bytes], sizes: list[int]) -> list[list[bytes]]:
    out, at = [], 0
    for size in sizes:
        out.append(lines[at : at + size])
        at += size
    return out


async def _judged(judging: LoopJudging, requests: list[list[bytes]]) -> list[SentBatch]:
    sent = judging.send_each(requests)
    for batch in sent:
        await asyncio.wait_for(until_judged(batch), 60)
        assert judged(batch)
    return sent


def test_helpers_judge_as_the_store_would(tmp_path: Path) -> None:
    lines = _lines(1)
    held = lines[:3]
    with Store.open(tmp_path / "s") as store:
        store.append(held, g.KEYRING)
        expected = judge_lines(lines, g.KEYRING, store._read)
        judging = LoopJudging(str(store.path), g.KEYRING, 2)

        async def run() -> list[SentBatch]:
            await judging.start()
            assert judging.ready
            try:
                return await _judged(judging, _requests(lines, [1, 5, 2, len(lines) - 8]))
            finally:
                await judging.close()

        sent = asyncio.run(run())
        got = []
        for batch in sent:
            for part in batch.parts:
                assert part.future is not None
                tag, judgements = part.future.result()
                assert tag == expected[0]
                got += judgements[part.at : part.at + len(part.lines)]
        assert [repr(j) for j in got] == [repr(j) for j in expected[1]]
        # what the helpers said is what Store.append_judged writes
        results = store.append_judged(sent, g.KEYRING, judging)
    with Store.open(tmp_path / "plain") as plain:
        plain.append(held, g.KEYRING)
        assert results == plain.append(lines, g.KEYRING)


def test_a_killed_helper_costs_time_never_results(tmp_path: Path) -> None:
    lines = _lines(2)
    with Store.open(tmp_path / "plain") as plain:
        expected = plain.append(lines, g.KEYRING)
    with Store.open(tmp_path / "s") as store:
        judging = LoopJudging(str(store.path), g.KEYRING, 2)

        async def run() -> tuple[list[SentBatch], set[int], set[int]]:
            await judging.start()
            first = {h.process.pid for h in judging._helpers}
            await _judged(judging, [lines[:2]])  # both helpers have started
            for pid in first:
                os.kill(pid, signal.SIGKILL)
            for helper in judging._helpers:
                await helper.reading  # each sees its helper's end
            assert not judging.ready
            with pytest.raises(BrokenProcessPool):
                judging._submit(lines[:1])
            sent = await _judged(judging, [lines[:5]])  # no helper: judged by the writer
            assert all(part.future is None for part in sent[0].parts)
            await judging.start()  # what the next request does (GroupCommit.warm_up)
            assert judging.ready
            again = {h.process.pid for h in judging._helpers}
            sent += await _judged(judging, [lines[5:]])
            await judging.close()
            return sent, first, again

        sent, first, again = asyncio.run(run())
        assert not first & again
        got = store.append_judged(sent, g.KEYRING, judging)
        assert [(r.event_id, r.status, r.reason) for r in got] == [
            (r.event_id, r.status, r.reason) for r in expected]  # fmt: skip
        assert store.replay(g.KEYRING).ok


def test_a_helper_that_ends_mid_part_fails_what_it_held(tmp_path: Path) -> None:
    lines = _lines(3)
    with Store.open(tmp_path / "s") as store:
        judging = LoopJudging(str(store.path), g.KEYRING, 1)

        async def run() -> SentBatch:
            await judging.start()
            (helper,) = judging._helpers
            os.kill(helper.process.pid, signal.SIGSTOP)  # it holds the part, unanswered
            (sent,) = judging.send_each([lines])
            assert not judged(sent)
            os.kill(helper.process.pid, signal.SIGKILL)
            await asyncio.wait_for(until_judged(sent), 60)
            await judging.close()
            return sent

        sent = asyncio.run(run())
        for part in sent.parts:
            assert part.future is not None
            assert isinstance(part.future.exception(), BrokenProcessPool)
        with pytest.warns(HelperLost):  # judged by the writer, with the same results
            got = store.append_judged([sent], g.KEYRING, judging)
    with Store.open(tmp_path / "plain") as plain:
        assert got == plain.append(lines, g.KEYRING)


@contextlib.contextmanager
def _stopped(pids: list[int]) -> Iterator[None]:
    """The processes ``pids`` stopped (SIGSTOP) inside, killed on leaving: a test that
    fails leaves no stopped helper behind (stopped, it never reads its input's end)."""
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_a_silent_helper_is_killed_and_its_parts_judged_by_the_writer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A helper that holds parts and answers nothing (stopped, here) would hold the group
    commit, which waits for the judgement at the head of its queue, and with it every
    submission of the worker, for ever: after SILENT_SECONDS it is killed, its parts judged
    by the write transaction with the same results, and the next start replaces it."""
    monkeypatch.setattr(judges, "SILENT_SECONDS", 0.5)
    lines = _lines(5)
    with Store.open(tmp_path / "s") as store:
        judging = LoopJudging(str(store.path), g.KEYRING, 2)

        async def run() -> tuple[SentBatch, int | None, bool]:
            await judging.start()
            await _judged(judging, [lines[:2]])  # both helpers have started and answered
            hung, working = judging._helpers
            with _stopped([hung.process.pid]):
                (sent,) = judging.send_each([lines])  # parts for both helpers
                assert hung.waiting and not judged(sent)
                await asyncio.wait_for(judging.until_judged(sent), 30)
                code = await asyncio.wait_for(hung.process.wait(), 30)
            ready = judging.ready
            await judging.start()
            assert judging.ready and hung not in judging._helpers
            assert working in judging._helpers  # the one that answered is kept
            await judging.close()
            return sent, code, ready

        sent, code, ready = asyncio.run(run())
        assert code == -signal.SIGKILL and not ready
        assert any(part.future is not None and part.future.exception() is not None
                   for part in sent.parts)  # fmt: skip
        with pytest.warns(HelperLost):
            got = store.append_judged([sent], g.KEYRING, judging)
    with Store.open(tmp_path / "plain") as plain:
        assert got == plain.append(lines, g.KEYRING)


def test_silent_helpers_do_not_hold_a_servers_submissions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The group commit of ``serve --submit`` (helpers: more than one core) answers while
    every helper is stopped: they are killed once silent, the commit judges the lines
    itself, and the next submission starts new helpers."""
    monkeypatch.setenv("PITHLOG_CORES", "2")
    lines = _lines(6)
    with Store.open(tmp_path / "s") as store:
        group = GroupCommit.over(store, g.KEYRING, Limits())

        async def run() -> list[list[AppendResult]]:
            got = [await asyncio.wait_for(group.submit(lines[:2]), 30)]
            judging = group.start.__self__  # type: ignore[attr-defined]
            stopped = [h.process for h in judging._helpers]
            assert judging.ready
            monkeypatch.setattr(judges, "SILENT_SECONDS", 0.5)
            with _stopped([p.pid for p in stopped]), pytest.warns(HelperLost):
                got.append(await asyncio.wait_for(group.submit(lines[2:]), 30))
                assert [await asyncio.wait_for(p.wait(), 30) for p in stopped] == [-9, -9]
            monkeypatch.undo()  # new helpers, with the time to start that they need
            monkeypatch.setenv("PITHLOG_CORES", "2")
            got.append(await asyncio.wait_for(group.submit(lines[:1]), 30))
            assert judging.ready and not {h.process for h in judging._helpers} & set(stopped)
            await judging.close()
            return got

        got = asyncio.run(run())
    with Store.open(tmp_path / "plain") as plain:
        assert got[:2] == [plain.append(lines[:2], g.KEYRING), plain.append(lines[2:], g.KEYRING)]
    assert [r.status for r in got[2]] == ["duplicate"]


def test_helpers_that_cannot_be_started_cost_no_submission(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When the system refuses the helpers' processes (out of memory, a process limit),
    ``serve --submit`` judges each commit's lines itself, with the results it would have
    had, instead of failing every submission (a 500) until a process can be started."""
    monkeypatch.setenv("PITHLOG_CORES", "2")
    lines = _lines(7)

    async def refused(*args: object, **kwargs: object) -> asyncio.subprocess.Process:
        raise BlockingIOError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(asyncio, "create_subprocess_exec", refused)
    with Store.open(tmp_path / "s") as store:
        group = GroupCommit.over(store, g.KEYRING, Limits())

        async def run() -> list[AppendResult]:
            return await asyncio.wait_for(group.submit(lines), 60)

        got = asyncio.run(run())
        assert not group.start.__self__.ready  # type: ignore[attr-defined]
    with Store.open(tmp_path / "plain") as plain:
        assert got == plain.append(lines, g.KEYRING)


def test_closing_ends_the_helpers(tmp_path: Path) -> None:
    with Store.open(tmp_path / "s") as store:
        judging = LoopJudging(str(store.path), g.KEYRING, 2)

        async def run() -> list[asyncio.subprocess.Process]:
            await judging.start()
            processes = [h.process for h in judging._helpers]
            await _judged(judging, [_lines(4)[:3]])
            await judging.close()
            return processes

        processes = asyncio.run(run())
        assert [p.returncode for p in processes] == [0, 0]  # they read their input's end


def test_the_helpers_import_path_never_puts_a_site_folder_first() -> None:
    sites = ["/usr/lib/python3/site-packages", "/home/u/.local/lib/site-packages"]
    # installed: found on the site path as it is, nothing put before the standard library
    assert import_path(sites[0], sites, None) is None
    assert import_path(sites[0], sites, "/opt/extra") is None
    # a source checkout: first, before what the user set
    assert import_path("/src/pithlog-checkout", sites, None) == "/src/pithlog-checkout"
    assert import_path("/src/c", sites, "/opt/extra") == os.pathsep.join(["/src/c", "/opt/extra"])
