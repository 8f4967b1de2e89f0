"""The slots that readers killed while reading (SIGKILL) leave in LMDB's table of readers
(docs/store.md, "Map size, processes, crashes"): every open that gets a slot clears them,
read-only ones too; an open that finds every slot taken says what to do; a reader who cannot
write the lock file takes no slot; a process that keeps the store open (``pithlog serve``)
clears them every ``SWEEP_SECONDS``, idle too.

LMDB starts the table afresh when a process opens the store while no other process has it
open, so each test keeps it open in a process of its own (as ``pithlog serve`` would) while
readers are killed beside it. The table holds as many readers as the lock file pithlog makes
has room for (254); the readers are forked from one process, each opening the store and
beginning a read transaction, until LMDB refuses one."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest
from test_readers import NOBODY, in_child, keyring_file, make_store, run, world_readable_folder

from pithlog.store import environment, environment_sweep

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")

HOLD_OPEN = """
import sys, lmdb
env = lmdb.open(sys.argv[1], readonly=True, max_dbs=32)
print("open", flush=True)
sys.stdin.read()
"""

FILL = """
import os, signal, sys
path, limit, free = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "free"
readers = []
for _ in range(limit):
    said_r, said_w = os.pipe()
    quit_r, quit_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(said_r)
        os.close(quit_w)
        try:
            import lmdb
            env = lmdb.open(path, readonly=True, max_dbs=32)
            txn = env.begin()
        except lmdb.ReadersFullError:
            os._exit(1)
        os.write(said_w, b"r")
        os.read(quit_r, 1)
        txn.abort()
        env.close()
        os._exit(0)
    os.close(said_w)
    os.close(quit_r)
    said = os.read(said_r, 1)
    os.close(said_r)
    if said != b"r":
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 1, status
        break
    readers.append((pid, quit_w))
else:
    sys.exit("the table of readers never filled")
held = len(readers)
if free:
    pid, quit_w = readers.pop(0)
    os.write(quit_w, b"q")
    os.waitpid(pid, 0)
for pid, _ in readers:
    os.kill(pid, signal.SIGKILL)
for pid, _ in readers:
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, status
print(held)
"""

LIMIT = 1024
"""Readers forked at most: four times the table pithlog's lock file makes room for."""


@contextlib.contextmanager
def held_open(path: Path) -> Iterator[None]:
    """The store kept open by another process, which holds no reader slot."""
    holder = subprocess.Popen([sys.executable, "-c", HOLD_OPEN, str(path)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE)  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"open\n"
        yield
    finally:
        holder.communicate(timeout=60)
        assert holder.returncode == 0


def kill_readers(path: Path, free: bool = False) -> int:
    """Fill the table of readers, then SIGKILL every reader (but the first, which closes the
    store and gives its slot back, with ``free``); how many readers held a slot."""
    filled = subprocess.run([sys.executable, "-c", FILL, str(path), str(LIMIT),
                             "free" if free else "kill"],
                            capture_output=True, text=True, timeout=120)  # fmt: skip
    assert filled.returncode == 0, filled.stderr
    return int(filled.stdout)


def cli(argv: list[str], uid: int | None = None) -> Any:
    """A command run in a forked child (this process keeps no store open): its status and
    what it said on stderr."""
    return in_child(lambda: run(argv)[::2], uid=uid)["ok"]


def test_a_read_only_open_clears_the_slots_of_killed_readers(tmp_path: Path) -> None:
    """All but one slot taken by killed readers: a reader gets the free one, and clears the
    others (LMDB's reader_check), so that as many readers fit after it as at first; before,
    a read-only open left them, and one reader fit after ``pithlog stats``."""
    path = tmp_path / "s"
    make_store(path)
    with held_open(path):
        slots = kill_readers(path, free=True)
        assert slots >= 126  # LMDB's default table; pithlog's lock file holds 254
        assert cli(["--store", str(path), "stats"])[0] == 0
        assert kill_readers(path) == slots


def test_an_open_that_finds_every_slot_taken_says_what_to_do(tmp_path: Path) -> None:
    """Every slot taken by killed readers: an open cannot clear them (py-lmdb begins a read
    transaction before it returns the environment), read-only or writable; it says so and
    what to do, and doing it (the process keeping the store open stopped) is enough."""
    path = tmp_path / "s"
    pith = make_store(path)[0]["pith_number"]
    lock = str(path / "lock.mdb")
    with held_open(path):
        assert kill_readers(path) >= 126
        for argv in (["stats"], ["state", pith],
                     ["append", "--keyring", keyring_file(tmp_path)]):  # fmt: skip
            status, err = cli(["--store", str(path), *argv])
            assert status != 0 and "[store.readers_full]" in err, (argv, err)
            assert "killed while reading" in err and f"fuser -v {lock}" in err, err
            assert "Please use a larger" not in err
    assert cli(["--store", str(path), "stats"])[0] == 0


def test_a_reader_who_cannot_write_the_lock_file_reads_beside_a_full_table() -> None:
    """A reader who cannot write ``lock.mdb`` opens the store without it (LMDB's
    MDB_NOLOCK, docs/store.md, "Readers") and takes no slot: a table full of killed
    readers does not stop it. As root, that reader is user nobody (chmod does not stop
    root); as another user, the lock file is made read-only."""
    with world_readable_folder() as base:
        path = base / "s"
        pith = make_store(path)[0]["pith_number"]
        with held_open(path):
            assert kill_readers(path) >= 126
            assert cli(["--store", str(path), "stats"])[0] != 0  # this user takes a slot
            if os.geteuid() == 0:
                uid: int | None = NOBODY
            else:
                uid = None
                (path / "lock.mdb").chmod(0o444)
            status, err = cli(["--store", str(path), "stats"], uid=uid)
            assert status == 0, err
            status, err = cli(["--store", str(path), "state", pith], uid=uid)
            assert status == 0, err


# --- a process that keeps the store open sweeps them (pithlog.store.environment_sweep) ----

SWEPT_SOON = "import pithlog.store.environment_sweep as s; s.SWEEP_SECONDS = 0.2"
"""Run in ``pithlog serve``'s process before it starts: a sweep every 0.2 s, not 30."""
SWEPT_WITHIN = 60.0
"""Seconds the test waits for the server's sweep at most."""
STOP_SECONDS = 30.0


def test_a_sweep_clears_the_slots_of_killed_readers_and_leaves_a_closed_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a process that holds the store open (a forked child: no store of this one's),
    one sweep clears every slot that the killed readers left; once the store is closed, a
    sweep leaves it alone. The sweeper thread does not run meanwhile (an hour apart)."""
    path = tmp_path / "s"
    make_store(path)
    monkeypatch.setattr(environment_sweep, "SWEEP_SECONDS", 3600.0)

    def job() -> list[int]:
        shared = environment.acquire(str(path), create=False, readonly=True)
        slots = kill_readers(path)
        cleared = environment_sweep.sweep(shared)
        again = environment_sweep.sweep(shared)
        environment.release(shared)
        return [slots, cleared, again, environment_sweep.sweep(shared)]

    slots, cleared, again, closed = in_child(job)["ok"]
    assert slots >= 126 and cleared == slots and again == 0 and closed == 0


def test_the_sweeper_runs_while_a_store_is_open_and_ends_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One thread per process sweeps, started by the first open and ended once no store is
    open there (a forked child: the stores of this process are not its own)."""
    path = tmp_path / "s"
    make_store(path)
    monkeypatch.setattr(environment_sweep, "SWEEP_SECONDS", 0.05)

    def job() -> list[int]:
        def sweepers() -> list[threading.Thread]:
            return [t for t in threading.enumerate() if t.name == "pithlog-readers"]

        before = len(sweepers())
        first = environment.acquire(str(path), create=False, readonly=True)
        second = environment.acquire(str(path), create=False, readonly=True)
        running = sweepers()
        environment.release(first)
        environment.release(second)
        for thread in running:
            thread.join(STOP_SECONDS)
        return [before, len(running), len(sweepers())]

    assert in_child(job)["ok"] == [0, 1, 0]


def _served() -> ModuleType:
    """tests/net/served.py (a real ``pithlog serve`` on 127.0.0.1), loaded by path as the
    network tests import it."""
    if "served" in sys.modules:
        return sys.modules["served"]
    where = Path(__file__).resolve().parents[1] / "net" / "served.py"
    spec = importlib.util.spec_from_file_location("served", where)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["served"] = module
    spec.loader.exec_module(module)
    return module


def test_a_server_kept_idle_clears_the_slots_of_readers_killed_beside_it(
    tmp_path: Path,
) -> None:
    """``pithlog serve`` holds the store and is asked nothing while readers killed beside
    it take every slot: ``pithlog stats`` fails while the server is stopped (SIGSTOP, so
    that it cannot sweep), and succeeds once it runs again and has swept (every
    ``SWEEP_SECONDS``, shortened here). Before, the server never cleared them: every
    open failed until it was restarted."""
    served = _served()
    files = served.make_files(tmp_path, piths=4, per_pith=4)
    stats = ["--store", str(files.store), "stats"]
    with served.serving(files, before=SWEPT_SOON) as server:
        assert httpx.get(f"{server.url}/checkpoint", timeout=STOP_SECONDS).status_code == 200
        os.kill(server.process.pid, signal.SIGSTOP)
        try:
            assert kill_readers(files.store) >= 126
            status, err = cli(stats)
            assert status != 0 and "[store.readers_full]" in err, err
        finally:
            os.kill(server.process.pid, signal.SIGCONT)
        deadline = time.monotonic() + SWEPT_WITHIN
        while (answer := cli(stats))[0] != 0:
            assert "[store.readers_full]" in answer[1], answer
            assert time.monotonic() < deadline, "the server never cleared the slots"
            time.sleep(0.05)
        assert httpx.get(f"{server.url}/checkpoint", timeout=STOP_SECONDS).status_code == 200
        assert server.process.poll() is None
