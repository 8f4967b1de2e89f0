"""A helper or worker process that dies mid-task (killed by hand, or by the kernel's OOM
killer) costs time, never results: its work is done again in the process that started it,
with a :class:`~pithlog.errors.HelperLost` warning. Here the processes really die: the
function they are given ends them with ``os._exit``."""

from __future__ import annotations

import contextlib
import io
import json
import multiprocessing
import os
import subprocess
import sys
import threading
import time
import weakref
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

import pytest

import pithlog.parallel
import pithlog.parallel.pool
import pithlog.protocol.checks
import pithlog.store.replay_processes
from pithlog.cli import main
from pithlog.errors import HelperLost
from pithlog.parallel import in_order, reduce_rendered, worker_pool
from pithlog.protocol.checks import check_many, start_checks
from pithlog.protocol.events import admit
from pithlog.store import Store
from pithlog.testing import test_keyring_entries

from .builders import KEYRING, canonical_record, event, record_event


def _die(*_: object) -> None:
    """What a killed process returns: nothing (it ends at once, mid-task)."""
    os._exit(1)


def _tenfold_but_three(item: int) -> int:
    if item == 3:
        _die()
    return item * 10


def _values() -> list[dict[str, Any]]:
    records = [record_event(canonical_record(source_id=f"2401.0000{i}", version=1))
               for i in range(4)]  # fmt: skip
    return [*records, *(event(t, r) for r in records for t in ("mirror_hint", "correction"))]


def test_in_order_does_here_what_a_dead_process_held() -> None:
    with contextlib.ExitStack() as stack:
        pool = worker_pool(stack, 1, pithlog.parallel.leave_interrupts_to_parent, ())
        with pytest.warns(HelperLost):
            got = list(in_order(pool, _tenfold_but_three, lambda i: i * 10, list(range(7))))
    assert got == [i * 10 for i in range(7)]


def test_in_order_sends_every_item_before_the_first_result_is_asked_for() -> None:
    # replay --jobs N checks the structure while the workers take the piths
    started = [threading.Event() for _ in range(3)]
    with ThreadPoolExecutor(3) as executor:
        results = in_order(executor, lambda i: started[i].set(), lambda i: None, [0, 1, 2])
        assert all(event.wait(5) for event in started)
        assert list(results) == [None, None, None]


@pytest.mark.parametrize("then", ["removed", "replaced by a link"])
def test_a_spilled_result_whose_folder_went_with_its_helper_is_done_here(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, then: str
) -> None:
    """The helper that sent a large result's file name is killed before the file is read:
    with no helper left, its folder is free for another command's pool to remove, and its
    name then free for another user to take with a link to a folder of theirs. The result
    is lost with the helper (done here, not a traceback), never read from elsewhere."""
    import pickle
    import signal
    import tempfile

    import pithlog.parallel.pool as pool_module
    from pithlog.parallel import results_folder

    scratch, elsewhere = tmp_path / "tmp", tmp_path / "elsewhere"
    scratch.mkdir()
    elsewhere.mkdir()
    monkeypatch.setattr(tempfile, "gettempdir", lambda: str(scratch))
    unspill = pool_module._unspill

    def helper_killed_first(reader: Any, outer: Any, inner: Any) -> None:
        name = inner.result()[1]  # the helper's pid, then its count of spilled results
        os.kill(int(name.split("-")[0]), signal.SIGKILL)
        deadline = time.monotonic() + 10
        while list(scratch.iterdir()) and time.monotonic() < deadline:
            results_folder.remove_stale(str(scratch))  # its lock goes once it is dead
            time.sleep(0.05)
        assert not list(scratch.iterdir())
        if then != "removed":
            (elsewhere / name).write_bytes(pickle.dumps(b"not the result"))
            os.symlink(elsewhere, pool._spill)
        unspill(reader, outer, inner)

    monkeypatch.setattr(pool_module, "_unspill", helper_killed_first)
    with contextlib.ExitStack() as stack:
        pool = worker_pool(stack, 1, pithlog.parallel.leave_interrupts_to_parent, ())
        with pytest.warns(HelperLost):
            got = list(in_order(pool, bytes, bytes, [1 << 20]))
    assert got == [bytes(1 << 20)]
    assert len(list(elsewhere.iterdir())) == (then != "removed")  # left alone


class _Result:
    """A result that can be watched (weakref) to see when ``in_order`` lets go of it."""


def test_in_order_lets_go_of_each_result_once_handed_out() -> None:
    with ThreadPoolExecutor(2) as executor:
        results = in_order(executor, lambda _: _Result(), lambda _: _Result(), [1, 2, 3])
        first = weakref.ref(next(results))  # the caller drops it at once
        second = next(results)
        assert first() is None  # not held to the end (a reduction's states add up)
        assert isinstance(second, _Result) and len(list(results)) == 1


def test_a_batch_is_verified_here_when_its_helper_dies(monkeypatch: pytest.MonkeyPatch) -> None:
    envelopes = [admit(v) for v in _values()] * 40  # several tasks of verifications
    expected = check_many(envelopes, KEYRING)
    monkeypatch.setattr(pithlog.parallel.pool, "verify_batch", _die)
    with contextlib.ExitStack() as stack:
        pool = worker_pool(stack, 1, pithlog.parallel.leave_interrupts_to_parent, ())
        pool._share = 0.0  # every verification sent
        with pytest.warns(HelperLost):
            assert start_checks(envelopes, KEYRING, pool.verify).reasons() == expected
        # The pool is broken now: a batch sent to it is verified here from the start.
        with pytest.warns(HelperLost):
            assert start_checks(envelopes, KEYRING, pool.verify).reasons() == expected


def test_reduce_jobs_when_a_worker_dies(monkeypatch: pytest.MonkeyPatch) -> None:
    envelopes = [admit(v) for v in _values()]
    expected = list(reduce_rendered(envelopes, KEYRING, jobs=1))
    monkeypatch.setattr(pithlog.parallel, "_worker_run", _die)
    with pytest.warns(HelperLost):
        assert list(reduce_rendered(envelopes, KEYRING, jobs=2)) == expected


@pytest.fixture
def damaged(tmp_path: Path) -> str:
    """A store of four piths, one of whose cached pith status is damaged."""
    path = str(tmp_path / "store")
    with Store.open(path) as store:
        store.append([admit(v) for v in _values()], KEYRING)
        pith = _values()[0]["pith_number"].encode()
        store._write(lambda txn, dbs: txn.put(pith, b"{}", db=dbs["piths"]))
    return path


def _lines(report: Any) -> list[str]:
    return [d.line() for d in report.discrepancies]


def test_replay_jobs_when_a_worker_dies(damaged: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with Store.open(damaged, readonly=True) as store:
        expected = store.replay(KEYRING, verify=True, jobs=1)
        assert len(expected.discrepancies) == 1
        monkeypatch.setattr(pithlog.store.replay_processes, "_worker_run", _die)
        with pytest.warns(HelperLost):
            report = store.replay(KEYRING, verify=True, jobs=2)
    assert _lines(report) == _lines(expected)
    assert (report.piths, report.events, report.copies) == (
        expected.piths, expected.events, expected.copies)  # fmt: skip


def test_replay_when_the_structure_pass_process_dies(
    damaged: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Store.open(damaged, readonly=True) as store:
        expected = store.replay(KEYRING, verify=True, jobs=1)
        monkeypatch.setattr(pithlog.store.replay_processes, "STRUCTURE_PROCESS_MIN_COPIES", 1)
        monkeypatch.setenv("PITHLOG_CORES", "2")
        monkeypatch.setattr(pithlog.store.replay_processes, "_structure_at", _die)
        with pytest.warns(HelperLost):
            report = store.replay(KEYRING, verify=True, jobs=1)
    assert _lines(report) == _lines(expected)


def test_the_cli_says_it_once_and_prints_the_same(
    damaged: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    keyring = tmp_path / "keyring.json"
    keyring.write_text(json.dumps({"keyring_version": "1", "keys": test_keyring_entries()}))
    argv = ["replay", "--store", damaged, "--verify", "--keyring", str(keyring), "--jobs", "2"]

    def run() -> tuple[int, bytes, list[str]]:
        out, err = io.BytesIO(), io.StringIO()
        status = main(argv, stdout=out, stderr=err)
        return status, out.getvalue(), err.getvalue().splitlines()

    status, out, err = run()
    assert not any("warning" in line for line in err)
    monkeypatch.setattr(pithlog.store.replay_processes, "_worker_run", _die)
    assert run()[:2] == (status, out)  # every chunk was lost: each warned, one line said
    assert status == 1 and out
    lost = [line for line in run()[2] if line.startswith("pithlog: warning: ")]
    assert lost == [f"pithlog: warning: {HelperLost.MESSAGE}"]


def test_leaving_on_an_exception_ends_the_workers_without_their_queued_tasks() -> None:
    # Ctrl-C while the workers still hold an hour of work: nothing is cancelled, the
    # workers are stopped, and the pool is left at once.
    before = time.monotonic()
    with pytest.raises(KeyboardInterrupt), contextlib.ExitStack() as stack:
        pool = worker_pool(stack, 2, pithlog.parallel.leave_interrupts_to_parent, ())
        futures = [pool.submit(time.sleep, 60) for _ in range(60)]
        time.sleep(1)  # the first two have started
        raise KeyboardInterrupt
    assert time.monotonic() - before < 30
    assert all(f.done() for f in futures)
    assert not multiprocessing.active_children()  # ended and reaped
    with pytest.raises(BrokenProcessPool):
        futures[0].result()


_KILLED_WHILE_SENDING = """
import contextlib, os, signal, threading, time, warnings
import pithlog.parallel
from pithlog.parallel import in_order, worker_pool

def big_then_killed(size):
    # the worker is killed 30 ms after its function returns: while its 4 MB result is on
    # its way back, since this process's pool thread reads it slowly (below)
    def kill():
        time.sleep(0.03)
        os.kill(os.getpid(), signal.SIGKILL)
    threading.Thread(target=kill, daemon=True).start()
    return b"x" * size

if __name__ == "__main__":
    warnings.simplefilter("ignore")
    with contextlib.ExitStack() as stack:
        pool = worker_pool(stack, 1, pithlog.parallel.leave_interrupts_to_parent, ())
        pool.submit(len, b"").result()  # the worker is up
        results = in_order(pool, big_then_killed, lambda size: b"here", [4 << 20])
        end = time.monotonic() + 1.0  # busy in Python: the pool's thread gets the GIL late
        while time.monotonic() < end:
            sum(range(1000))
        got = list(results)
    print(got[0][:4].decode())
"""


def test_a_worker_killed_while_its_large_result_is_sent_costs_time_not_a_hang(
    tmp_path: Path,
) -> None:
    # Through the pool's result pipe, a result cut short by the worker's death would be a
    # partial message that the pool waits for the rest of forever: large results come
    # back through files instead (Pool.submit).
    script = tmp_path / "killed.py"
    script.write_text(_KILLED_WHILE_SENDING)
    for _ in range(3):  # the kill lands at a different point of the sending each time
        done = subprocess.run([sys.executable, str(script)], capture_output=True, timeout=30,
                              check=False)  # fmt: skip
        assert done.returncode == 0, done.stderr.decode()[-2000:]
        assert done.stdout.decode().split() in (["here"], ["xxxx"])
