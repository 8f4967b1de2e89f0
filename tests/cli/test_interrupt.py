"""An interrupted `pithlog append` (SIGINT to a real process): status 130, one line on
stderr, and a store that holds every event it printed as stored, and nothing half-written."""

from __future__ import annotations

import fcntl
import json
import os
import random
import signal
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path
from typing import Any

import pytest
from storeevents import g

from pithlog.cli.edge import interrupt_held
from pithlog.store import Store
from pithlog.testing import test_keyring_entries

# The child restores Python's SIGINT handler: a process started in the background of a
# non-interactive shell inherits SIGINT ignored, and Python then leaves it ignored.
CHILD = """
import signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)
from pithlog.cli import main
sys.exit(main(sys.argv[1:]))
"""

BATCH = 20


def _appending(tmp_path: Path, events: list[Any], *options: str) -> subprocess.Popen[bytes]:
    """A child process appending ``events`` to the store ``tmp_path / "store"``."""
    log = tmp_path / "events.jsonl"
    log.write_bytes(b"".join(g.encoded(e) + b"\n" for e in events))
    keyring = tmp_path / "keyring.json"
    keyring.write_text(json.dumps({"keyring_version": "1", "keys": test_keyring_entries()}))
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, "append", "--store", str(tmp_path / "store"),
         "--keyring", str(keyring), *options, str(log)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
    )  # fmt: skip


def test_an_interrupted_append_stores_what_it_printed(tmp_path: Path) -> None:
    events = g.mixed_events(random.Random(11), piths=80, per_pith=40)
    store = tmp_path / "store"
    child = _appending(tmp_path, events, "--batch-size", str(BATCH))
    assert child.stdout is not None
    printed = [child.stdout.readline()]  # the first batch is committed: interrupt now
    child.send_signal(signal.SIGINT)
    rest, err = child.communicate(timeout=60)
    printed += rest.splitlines(keepends=True)
    results = [json.loads(line) for line in printed]

    assert child.returncode == 130, err
    assert err.decode().splitlines()[-1] == "pithlog: interrupted"
    assert 0 < len(results) < len(events)  # it stopped part of the way
    stored = {r["event_id"] for r in results if r["status"] == "stored"}
    with Store.open(store, create=False) as opened:
        held = {json.loads(data)["event_id"] for _, data in opened.export()}
        assert stored <= held  # every line printed is committed
        # unprinted, at most: the rest of the batch being printed when the interrupt landed
        # and the batch being written then (aborted, unless its commit had begun)
        assert len(held - stored) < 2 * BATCH
        assert opened.replay(g.KEYRING).ok


def test_an_interrupt_while_a_batch_is_printed_prints_every_committed_batch_whole(
    tmp_path: Path,
) -> None:
    # The child's lines fill the pipe, which is not read until after the interrupt: it
    # lands while the first committed batch is being printed. That batch is printed whole,
    # then the batch being written is finished and printed, and nothing else is stored.
    batch = 1000  # about 120 KB of lines: more than a pipe holds
    events = g.mixed_events(random.Random(12), piths=75, per_pith=40)
    store = tmp_path / "store"
    child = _appending(tmp_path, events, "--keep-invalid", "--batch-size", str(batch))
    assert child.stdout is not None
    waiting, last = time.monotonic() + 60, -1
    while time.monotonic() < waiting:  # until the pipe stays full: the child is blocked
        time.sleep(0.2)
        queued = struct.unpack("i", fcntl.ioctl(child.stdout, termios.FIONREAD, b"\0" * 4))[0]
        if queued == last and queued > 0:
            break
        last = queued
    # Ctrl-C at a terminal reaches every process of the command: the helper processes
    # verifying the next batch too. They leave it to pithlog, which stops them.
    os.killpg(child.pid, signal.SIGINT)
    out, err = child.communicate(timeout=60)
    results = [json.loads(line) for line in out.splitlines()]

    assert child.returncode == 130, err
    assert b"Traceback" not in err and err.decode().splitlines() == ["pithlog: interrupted"]
    assert len(results) % batch == 0 and 0 < len(results) < len(events)  # whole batches
    with Store.open(store, create=False) as opened:
        held = [json.loads(data)["event_id"] for _, data in opened.export()]
        assert len(held) == sum(r["status"] in ("stored", "replaced", "evidence")
                                for r in results)  # fmt: skip
        assert {r["event_id"] for r in results} == set(held)
        assert opened.replay(g.KEYRING).ok


def _signal_self() -> None:
    os.kill(os.getpid(), signal.SIGINT)
    for _ in range(1000):  # Python runs the handler between bytecodes of the main thread
        time.sleep(0.001)


def test_interrupt_held_holds_the_first_interrupt_and_not_the_second() -> None:
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    with interrupt_held() as came:
        assert not came()
        _signal_self()
        assert came()
        with pytest.raises(KeyboardInterrupt):
            _signal_self()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    # A program that embeds pithlog and handles SIGINT itself keeps its handler.
    seen: list[int] = []
    signal.signal(signal.SIGINT, lambda signum, frame: seen.append(signum))
    try:
        with interrupt_held() as came:
            _signal_self()
            assert seen == [signal.SIGINT] and not came()
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
