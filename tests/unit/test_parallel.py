"""Reducing by pith in parts (pithlog.parallel): the same results as the whole input."""

from __future__ import annotations

import contextlib
import itertools
import random
import signal
from pathlib import Path
from typing import Any

import pytest

import pithlog.parallel
import pithlog.store.replay_processes as replay_processes
from pithlog.parallel import (
    PART_EVENTS,
    _reduce_part,
    reduce_rendered,
    split_by_pith,
    verifying_pool,
)
from pithlog.protocol.events import Envelope, admit
from pithlog.protocol.reduce import Pending
from pithlog.protocol.text_forms import encode_b64
from pithlog.store import Store

from .builders import KEYRING, canonical_record, event, record_event

A = record_event()
B = record_event(canonical_record(source_id="2301.00001", version=1))
C = record_event(canonical_record(source_id="2302.00002", version=1))


def crossing() -> list[dict[str, Any]]:
    """Events of three piths, with one event_id whose copies claim two piths, where the copy
    that step 0 prefers claims the other pith than the first copy does."""
    good = event("mirror_hint", A)
    # Claims A and fails check 1 (an extra member); the copy claiming B fails check 3,
    # a later check: step 0 keeps the B copy, so the event counts for B, not for A.
    at_1 = {**good, "zz": 1}
    at_3 = {**good, "pith_number": B["pith_number"]}
    return [
        A, B, C, at_1, at_3,
        event("storage_attestation", A), event("mirror_hint", B), event("correction", C),
        event("mirror_hint", C, created_at="2026-04-01T00:00:00Z"),
    ]  # fmt: skip


def whole(envelopes: list[Envelope]) -> list[tuple[str, bytes | Pending]]:
    return list(reduce_rendered(envelopes, KEYRING, jobs=1))


def in_parts(envelopes: list[Envelope], at_least: int) -> list[tuple[str, bytes | Pending]]:
    """What ``--jobs N`` computes, each part reduced here instead of in a process."""
    out = []
    for piths, blobs in split_by_pith(envelopes, at_least):
        out += _reduce_part(piths, blobs, KEYRING, 1)
    return out


def test_the_crossing_copy_counts_for_the_pith_step_0_gives_it() -> None:
    results = dict(whole([admit(v) for v in crossing()]))
    assert b'"event_count":2' in results[A["pith_number"]]  # A and its storage attestation
    assert b'"event_count":3' in results[B["pith_number"]]  # B, its hint, the crossing copy
    assert b'"event_id_mismatch"' in results[B["pith_number"]]


@pytest.mark.parametrize("at_least", [1, 2, 3, 8])
def test_parts_reduce_to_the_same_bytes_as_the_whole_input(at_least: int) -> None:
    values = crossing()
    for seed in range(5):
        random.Random(seed).shuffle(values)
        envelopes = [admit(v) for v in values]
        assert in_parts(envelopes, at_least) == whole(envelopes)


def test_each_pith_is_in_exactly_one_part_in_pith_order() -> None:
    envelopes = [admit(v) for v in crossing()]
    parts = split_by_pith(envelopes, 3)
    piths = [p for part_piths, _ in parts for p in part_piths]
    assert piths == sorted({e.pith_number for e in envelopes})
    assert len(parts) == 3


def test_a_part_holds_every_copy_of_each_event_id_claiming_its_piths() -> None:
    envelopes = [admit(v) for v in crossing()]
    for piths, blobs in split_by_pith(envelopes, 3):
        held = set(blobs)
        ids = {e.event_id for e in envelopes if e.pith_number in piths}
        assert {e.encoded for e in envelopes if e.event_id in ids} <= held
        assert len(blobs) == len(held)  # each copy once


def test_identical_copies_are_sent_once() -> None:
    envelopes = [admit(v) for v in crossing()]
    doubled = envelopes + envelopes
    assert split_by_pith(doubled, 1) == split_by_pith(envelopes, 1)


def test_parts_stay_under_the_size_bound_unless_one_pith_is_bigger() -> None:
    many = [event("mirror_hint", A, created_at=f"2026-05-01T00:00:{s:02d}Z") for s in range(60)]
    envelopes = [admit(v) for v in [A, B, *many, event("mirror_hint", B)]]
    parts = split_by_pith(envelopes, 100)
    assert [len(blobs) for _, blobs in parts] == [61, 2]
    assert PART_EVENTS >= 61


def test_pending_piths_come_back_in_order_from_parts() -> None:
    orphan = event("mirror_hint", C)  # C's record is not in the input: C is pending
    values = [A, B, orphan, event("mirror_hint", A)]
    for order in itertools.permutations(values):
        envelopes = [admit(v) for v in order]
        results = in_parts(envelopes, 4)
        assert results == whole(envelopes)
        assert isinstance(dict(results)[C["pith_number"]], Pending)


def test_reduction_with_verifying_processes_gives_the_same_bytes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # jobs=1 on a large input starts checks on batches of copies while reading, verified in
    # a helper process; here "large" is made small enough for a test.
    import pithlog.parallel
    import pithlog.protocol.reduce

    values = crossing() + [
        event("mirror_hint", A, created_at=f"2026-06-01T00:00:{s:02d}Z") for s in range(20)
    ]
    unsigned = {**values[-1], "signature_b64": encode_b64(bytes(64))}  # fails check 6 alone
    values[-1] = unsigned
    random.Random(4).shuffle(values)
    envelopes = [admit(v) for v in values]
    threads = whole(envelopes)
    monkeypatch.setattr(pithlog.parallel, "STREAM_MIN", 5)
    monkeypatch.setattr(pithlog.protocol.reduce, "STREAM_BATCH", 3)
    monkeypatch.setattr(pithlog.parallel, "TAIL_EVENTS", 2)  # each pith a part of its own
    processes = whole(envelopes + envelopes[:4])  # repeats change nothing
    assert processes == threads
    assert b'"bad_signature"' in dict(threads)[A["pith_number"]]


_BORN_WITH: set[int] = set()


def _record_mask_then_leave() -> None:
    _BORN_WITH.update(signal.pthread_sigmask(signal.SIG_BLOCK, []))
    pithlog.parallel.leave_interrupts_to_parent()


def _born_with() -> set[int]:
    return _BORN_WITH


def test_helpers_start_with_ctrl_c_blocked_until_they_ignore_it() -> None:
    # A helper still starting (importing pithlog) would die of a Ctrl-C with a traceback.
    with contextlib.ExitStack() as stack:
        pool = pithlog.parallel.worker_pool(stack, 1, _record_mask_then_leave, ())
        assert signal.SIGINT in pool.submit(_born_with).result()
        now = pool.submit(signal.pthread_sigmask, signal.SIG_BLOCK, []).result()
        assert not {signal.SIGINT, signal.SIGTERM} & now
    assert not {signal.SIGINT, signal.SIGTERM} & signal.pthread_sigmask(signal.SIG_BLOCK, [])


def test_helpers_and_workers_leave_ctrl_c_to_their_parent_and_die_of_sigterm(
    tmp_path: Path,
) -> None:
    # A terminal sends Ctrl-C to every process of a command: a helper that took it would
    # die mid-task (tests/cli/test_interrupt.py sees the whole). SIGTERM keeps its default
    # action, so that a worker can be stopped as any process is.
    with contextlib.ExitStack() as stack:
        pool = verifying_pool(stack)
        assert pool.submit(signal.getsignal, signal.SIGINT).result() == signal.SIG_IGN
        assert pool.submit(signal.getsignal, signal.SIGTERM).result() == signal.SIG_DFL
    Store.open(tmp_path / "s").close()
    entries = [key.entry() for key in KEYRING.values()]
    for initializer, initargs in [
        (pithlog.parallel._worker_init, (entries, None)),  # reduce --jobs N
        (pithlog.parallel._judge_init, (entries,)),  # reduce's judging helpers
        (replay_processes._worker_init, (str(tmp_path / "s"), entries, True, True, None, None)),
    ]:  # replay --jobs N
        with contextlib.ExitStack() as stack:
            workers = pithlog.parallel.worker_pool(stack, 1, initializer, initargs)
            assert workers.submit(signal.getsignal, signal.SIGINT).result() == signal.SIG_IGN
            assert workers.submit(signal.getsignal, signal.SIGTERM).result() == signal.SIG_DFL


def test_large_results_come_back_through_files_that_are_removed(tmp_path: Path) -> None:
    import os

    with contextlib.ExitStack() as stack:
        quiet = pithlog.parallel.leave_interrupts_to_parent
        pool = pithlog.parallel.worker_pool(stack, 1, quiet, ())
        folder = pool._spill
        assert folder is not None
        small, large = pool.submit(bytes, 10), pool.submit(bytes, 3 << 20)
        assert small.result() == bytes(10) and large.result() == bytes(3 << 20)
        assert os.listdir(folder) == []  # each file removed once read
        assert os.stat(folder).st_mode & 0o077 == 0  # the results are this user's alone
        with pytest.raises(ValueError):  # a worker's exception, as before
            pool.submit(int, "not a number").result()
    assert not os.path.exists(folder)  # the folder goes with the pool


@pytest.mark.parametrize("where", ["no temporary folder", "folder not made"])
def test_without_a_folder_for_results_they_come_back_through_the_pipe(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, where: str
) -> None:
    import tempfile

    def none_usable() -> str:
        raise FileNotFoundError(2, "No usable temporary directory found")

    def gone() -> str:  # the worker cannot make the pool's folder in it
        return str(tmp_path / "gone")

    monkeypatch.setattr(tempfile, "gettempdir", none_usable if where[0] == "n" else gone)
    with contextlib.ExitStack() as stack:
        quiet = pithlog.parallel.leave_interrupts_to_parent
        pool = pithlog.parallel.worker_pool(stack, 1, quiet, ())
        assert (pool._spill is None) == (where == "no temporary folder")
        assert pool.submit(bytes, 1 << 20).result() == bytes(1 << 20)
    assert not (tmp_path / "gone").exists()


def test_a_results_folder_name_taken_by_a_link_is_not_written_through(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The pool's folder name taken (before the first large result) by a symbolic link to
    a folder: results are not written where it points; they come back through the pipe."""
    import os

    import pithlog.parallel.pool as pool_module

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    seen: list[list[str]] = []
    unspill = pool_module._unspill

    def looking(*args: Any) -> None:  # in this process, as each result comes back
        seen.append(os.listdir(elsewhere))
        unspill(*args)

    monkeypatch.setattr(pool_module, "_unspill", looking)
    with contextlib.ExitStack() as stack:
        quiet = pithlog.parallel.leave_interrupts_to_parent
        pool = pithlog.parallel.worker_pool(stack, 1, quiet, ())
        assert pool._spill is not None
        os.symlink(elsewhere, pool._spill)
        try:
            assert pool.submit(bytes, 1 << 20).result() == bytes(1 << 20)
        finally:
            os.unlink(pool._spill)
    assert seen == [[]]


def test_another_users_folders_leave_no_descriptor_open(tmp_path: Path) -> None:
    """Folders named as results' folders but of another user (anyone may make them in a
    shared ``/tmp``) are skipped: each one's descriptor closed, or enough of them would
    leave no descriptor for the command itself."""
    import os

    from pithlog.parallel import results_folder

    if os.getuid() != 0:
        pytest.skip("making another user's folders needs root")
    for n in range(20):
        folder = tmp_path / f"{results_folder.PREFIX}{n}-{n:016x}"
        folder.mkdir()
        os.chown(folder, 65534, 65534)
    before = len(os.listdir("/proc/self/fd"))
    results_folder.remove_stale(str(tmp_path))
    assert len(os.listdir("/proc/self/fd")) == before
    assert len(list(tmp_path.iterdir())) == 20  # and none removed


def test_a_stale_folder_made_again_meanwhile_is_not_removed(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Two pools remove stale folders at once: the second opened a folder that the first
    removed before the second locked it, and a live pool's helper made a folder of that
    name again meanwhile (its first attempt failed: it tries again at its next result).
    The lock the second takes is the old folder's: the new one, in use, is kept."""
    import fcntl
    import os
    import types

    from pithlog.parallel import results_folder

    folder = tmp_path / results_folder.name()
    folder.mkdir(0o700)
    held: list[int] = []

    def flock(fd: int, operation: int) -> None:
        if operation & fcntl.LOCK_EX and not held:
            folder.rmdir()  # by the other pool
            folder.mkdir(0o700)  # by the live pool's helper, which then holds it
            fd_new = results_folder._locked(str(folder))
            assert fd_new is not None
            held.append(fd_new)
            (folder / "result").write_bytes(b"in use")
        fcntl.flock(fd, operation)

    constants = {k: getattr(fcntl, k) for k in ("LOCK_EX", "LOCK_SH", "LOCK_NB")}
    monkeypatch.setattr(results_folder, "fcntl", types.SimpleNamespace(flock=flock, **constants))
    try:
        results_folder.remove_stale(str(tmp_path))
        assert (folder / "result").read_bytes() == b"in use"
    finally:
        for fd in held:
            os.close(fd)


def _files_of_64_kib_at_most() -> None:
    """A worker's initializer: a disk that fills up at 64 KiB into any file it writes."""
    import resource

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past it fails (EFBIG) instead
    resource.setrlimit(resource.RLIMIT_FSIZE, (64 << 10, 64 << 10))
    pithlog.parallel.leave_interrupts_to_parent()


def test_a_result_that_cannot_be_written_whole_leaves_no_part_behind() -> None:
    import os

    with contextlib.ExitStack() as stack:
        pool = pithlog.parallel.worker_pool(stack, 1, _files_of_64_kib_at_most, ())
        assert pool.submit(bytes, 1 << 20).result() == bytes(1 << 20)  # through the pipe
        assert pool._spill is not None
        assert os.listdir(pool._spill) == []  # not 64 KiB of it until the command ends


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs fork()")
def test_a_forked_child_that_exits_leaves_the_parents_results_folder(tmp_path: Path) -> None:
    """A pool's folder of large results was removed by its finalizer at the end of any
    child made by fork() while the pool lived (the finalizer runs at exit, and the
    child's copy of it is the parent's): a result in flight was lost, and the parent
    redid the work with a HelperLost warning. Only the process that made the pool
    removes it."""
    import subprocess
    import sys

    script = (
        "import contextlib, os, sys\n"
        "import pithlog.parallel\n"
        "if __name__ == '__main__':\n"
        "    with contextlib.ExitStack() as stack:\n"
        "        quiet = pithlog.parallel.leave_interrupts_to_parent\n"
        "        pool = pithlog.parallel.worker_pool(stack, 1, quiet, ())\n"
        "        assert pool.submit(bytes, 3 << 20).result() == bytes(3 << 20)\n"
        "        if os.fork() == 0:\n"
        "            os.close(2)  # multiprocessing's own complaint at a fork child's exit\n"
        "            sys.exit(0)  # the interpreter's exit runs the finalizers\n"
        "        os.wait()\n"
        "        print(os.path.isdir(pool._spill))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=120)
    assert (done.returncode, done.stdout, done.stderr) == (0, b"True\n", b"")
