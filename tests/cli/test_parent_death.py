"""Helpers and workers die with their parent: ``kill -9`` of a process holding a pool
(each kind pithlog starts) leaves no process of it behind.

The parent is a real process running the real code path, stopped in the middle of its
command (its consumer waits while the pool is still open), then SIGKILLed. Its children
are read from ``/proc`` before the kill; a few seconds after it, none may be alive.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from storeevents import g

from pithlog.store import Store

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")

# Each kind stops in its consumer, the pool still open, and says so on stdout. The
# thresholds that keep pools for large inputs are lowered, and the machine is said to
# have another core (pools are only started where there is one).
CHILD = """
import os, sys, time

os.environ["PITHLOG_CORES"] = "2"

import pithlog.parallel
import pithlog.store.append_pipeline
import pithlog.store.replay
import pithlog.store.replay_processes
from pithlog.protocol.events import parse_envelope
from pithlog.store import Store
from pithlog.testing import test_keyring


def ready(*_):
    print("ready", flush=True)
    time.sleep(600)


def main(kind, events_path, store_path):
    keyring = test_keyring()
    with open(events_path, "rb") as file:
        lines = file.read().splitlines()
    envelopes = [parse_envelope(line) for line in lines]
    if kind == "reduce --jobs 2":
        results = pithlog.parallel.reduce_rendered(envelopes, keyring, jobs=2)
        next(results)
        ready()
    elif kind == "reduce, verifying helpers":
        pithlog.parallel.STREAM_MIN = 5
        pithlog.parallel.TAIL_EVENTS = 2
        results = pithlog.parallel.reduce_rendered(envelopes, keyring, jobs=1)
        next(results)
        ready()
    elif kind == "reduce, judging helpers":
        pithlog.parallel.STREAM_MIN = 5
        pithlog.parallel.JUDGE_PART = 2
        pithlog.parallel.TAIL_EVENTS = 2
        results = pithlog.parallel.reduce_lines(list(enumerate(lines)), keyring, lambda *_: None)
        next(results)
        ready()
    elif kind == "append, judging helpers":
        pithlog.store.append_pipeline.ALONE_POOL_MIN = 1
        with Store.open(store_path) as store:
            half = len(lines) // 2
            results = store.append_batches([lines[:half], lines[half:]], keyring)
            next(results)
            ready()
    elif kind == "serve --submit, judging helpers":
        import asyncio
        from pithlog.net.judges import LoopJudging, until_judged

        with Store.open(store_path) as store:
            judging = LoopJudging(str(store.path), keyring, 2)

            async def run():
                await judging.start()
                (sent,) = judging.send_each([lines])
                await until_judged(sent)
                ready()

            asyncio.run(run())
    elif kind == "replay --jobs 2":
        with Store.open(store_path, create=False) as store:
            store.replay(keyring, jobs=2, progress=lambda done, total: done and ready())
    elif kind == "replay, verifying helpers":
        pithlog.store.replay_processes.VERIFY_PROCESS_MIN_PITHS = 0
        pithlog.store.replay_processes.STRUCTURE_PROCESS_MIN_COPIES = 0
        pithlog.store.replay._CHUNK = 1
        with Store.open(store_path, create=False) as store:
            store.replay(keyring, jobs=1, progress=lambda done, total: done and ready())


if __name__ == "__main__":
    main(*sys.argv[1:])
"""

KINDS = [
    "reduce --jobs 2",
    "reduce, verifying helpers",
    "reduce, judging helpers",
    "append, judging helpers",
    "serve --submit, judging helpers",
    "replay --jobs 2",
    "replay, verifying helpers",
]


@contextlib.contextmanager
def _ready_child(
    args: list[str], scratch: Path
) -> Iterator[tuple[subprocess.Popen[bytes], list[int]]]:
    """A Python child of ``args`` with ``scratch`` as its $TMPDIR, once it printed ready, and
    the processes it started then; none is left behind, even when the test fails."""
    parent = subprocess.Popen([sys.executable, *args], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, start_new_session=True,
                              env={**os.environ, "TMPDIR": str(scratch)})  # fmt: skip
    children: list[int] = []
    try:
        assert parent.stdout is not None and parent.stderr is not None
        assert parent.stdout.readline() == b"ready\n", parent.stderr.read()
        children += _children(parent.pid)
        yield parent, children
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        for pid in children:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (``/proc/*/stat``)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # ended meanwhile
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def _alive(pid: int) -> bool:
    """``pid`` runs (a zombie waiting for its new parent to reap it has ended)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


@pytest.mark.parametrize("kind", KINDS)
def test_no_helper_outlives_a_killed_parent(tmp_path: Path, kind: str) -> None:
    events = g.mixed_events(random.Random(5), piths=30, per_pith=6)
    lines = [g.encoded(e) for e in events]
    (tmp_path / "events.jsonl").write_bytes(b"".join(line + b"\n" for line in lines))
    store = tmp_path / "store"
    if kind.startswith("replay"):
        with Store.open(store) as opened:
            opened.append(lines, g.KEYRING, keep_invalid=True)
    (tmp_path / "child.py").write_text(CHILD)
    scratch = tmp_path / "tmp"  # the child's $TMPDIR: its pools' results' folders
    scratch.mkdir()
    with _ready_child([str(tmp_path / "child.py"), kind, str(tmp_path / "events.jsonl"),
                       str(store)], scratch) as (parent, children):  # fmt: skip
        workers = [pid for pid in children if "resource_tracker" not in _cmdline(pid)]
        assert workers, f"no pool was started: {[_cmdline(pid) for pid in children]}"
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(10)
        deadline = time.monotonic() + 10
        while any(_alive(pid) for pid in children) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [_cmdline(pid) for pid in children if _alive(pid)]
        # the killed parent could not remove its pool's results' folder: its workers did
        assert not list(scratch.glob("pithlog-results-*"))


# A pool's results' folder: none yet when the pool is made ("made"); made by the helper that
# sends back the first large result, then left to the helpers ("spilled").
FOLDER_CHILD = """
import sys, time
from pithlog.parallel.pool import Pool, leave_interrupts_to_parent

if __name__ == "__main__":
    pool = Pool(2, leave_interrupts_to_parent, ())
    if sys.argv[1] == "spilled":
        assert pool.submit(bytes, 1 << 20).result() == bytes(1 << 20)
    print("ready", flush=True)
    time.sleep(600)
"""


@pytest.mark.parametrize("stage", ["made", "spilled"])
def test_a_killed_parent_leaves_no_results_folder(tmp_path: Path, stage: str) -> None:
    scratch = tmp_path / "tmp"  # the child's $TMPDIR
    scratch.mkdir()
    (tmp_path / "child.py").write_text(FOLDER_CHILD)
    with _ready_child([str(tmp_path / "child.py"), stage], scratch) as (parent, _):
        folders = list(scratch.glob("pithlog-results-*"))
        # made, before any helper started, it was left for good by a kill -9 here
        assert len(folders) == (stage == "spilled"), folders
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(10)
        deadline = time.monotonic() + 10
        while list(scratch.glob("pithlog-results-*")) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not list(scratch.glob("pithlog-results-*"))


def test_a_folder_left_by_a_killed_process_group_is_removed_by_the_next_pool(
    tmp_path: Path,
) -> None:
    """``kill -9`` of the command's whole process group ends its workers too: none is left
    to remove the results' folder, so the next pool made (in another command) does; a
    folder of a command still alive is kept."""
    scratch = tmp_path / "tmp"  # the children's $TMPDIR
    scratch.mkdir()
    (tmp_path / "child.py").write_text(FOLDER_CHILD)
    with _ready_child([str(tmp_path / "child.py"), "spilled"], scratch) as (killed, children):
        (left,) = scratch.glob("pithlog-results-*")
        assert left.name.startswith(f"pithlog-results-{killed.pid}-")
        os.killpg(killed.pid, signal.SIGKILL)  # the child leads its own session's group
        killed.wait(10)
        deadline = time.monotonic() + 10
        while any(_alive(pid) for pid in children) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [_cmdline(pid) for pid in children if _alive(pid)]
        time.sleep(0.5)
        assert left.exists()  # no process was left to remove it
        with _ready_child([str(tmp_path / "child.py"), "spilled"], scratch) as (alive, _):
            assert not left.exists()  # removed by the next command's pool
            (kept,) = scratch.glob("pithlog-results-*")
            assert kept.name.startswith(f"pithlog-results-{alive.pid}-")
            # a third command's pool leaves the live command's folder alone
            with _ready_child([str(tmp_path / "child.py"), "made"], scratch):
                assert kept.exists()
                assert alive.poll() is None
