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
from pithlog.cli.stops import terminate_as_interrupt
from pithlog.errors import Terminated
from pithlog.store import Store
from pithlog.testing import test_keyring_entries

# The child restores Python's SIGINT handler: a process started in the background of a
# non-interactive shell inherits SIGINT ignored, and Python then leaves it ignored.
# It runs the console script's entry point, which also makes SIGTERM stop a command as an
# interrupt does.
CHILD = """
import signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)
from pithlog.cli import entry
entry()
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


@pytest.mark.parametrize(
    ("signum", "status", "said"),
    [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")],
)
def test_an_interrupt_while_a_batch_is_printed_prints_every_committed_batch_whole(
    tmp_path: Path, signum: int, status: int, said: str
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
    # Ctrl-C at a terminal, or a service manager's SIGTERM, reaches every process of the
    # command: the helper processes verifying the next batch too. They leave it to
    # pithlog, which stops them.
    os.killpg(child.pid, signum)
    out, err = child.communicate(timeout=60)
    results = [json.loads(line) for line in out.splitlines()]

    assert child.returncode == status, err
    assert b"Traceback" not in err and err.decode().splitlines() == [f"pithlog: {said}"]
    assert len(results) % batch == 0 and 0 < len(results) < len(events)  # whole batches
    with Store.open(store, create=False) as opened:
        held = [json.loads(data)["event_id"] for _, data in opened.export()]
        assert len(held) == sum(r["status"] in ("stored", "replaced", "evidence")
                                for r in results)  # fmt: skip
        assert {r["event_id"] for r in results} == set(held)
        assert opened.replay(g.KEYRING).ok


def _signal_self(signum: int = signal.SIGINT) -> None:
    os.kill(os.getpid(), signum)
    for _ in range(1000):  # Python runs the handler between bytecodes of the main thread
        time.sleep(0.001)


def test_interrupt_held_holds_the_first_interrupt_and_not_the_second() -> None:
    # Python's own handler, as an interactive or foreground run has it (a shell's background
    # job starts with SIGINT ignored): what interrupt_held must give back afterwards.
    started_with = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        _held_and_given_back()
    finally:
        signal.signal(signal.SIGINT, started_with)


def _held_and_given_back() -> None:
    with interrupt_held() as came:
        assert came() is None
        _signal_self()
        assert came() is KeyboardInterrupt
        with pytest.raises(KeyboardInterrupt):
            _signal_self()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    # A program that embeds pithlog and handles SIGINT itself keeps its handler.
    seen: list[int] = []
    signal.signal(signal.SIGINT, lambda signum, frame: seen.append(signum))
    try:
        with interrupt_held() as came:
            _signal_self()
            assert seen == [signal.SIGINT] and came() is None
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def test_sigterm_under_the_console_script_is_held_and_raised_as_terminated() -> None:
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    terminate_as_interrupt()
    try:
        with pytest.raises(Terminated):
            _signal_self(signal.SIGTERM)
        with interrupt_held() as came:
            _signal_self(signal.SIGTERM)
            assert came() is Terminated
            with pytest.raises(Terminated):
                _signal_self(signal.SIGTERM)
        with pytest.raises(Terminated):  # the console script's handler is back
            _signal_self(signal.SIGTERM)
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def test_a_sigterm_while_stop_said_ignores_sigint_is_not_raised_out_of_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``stop_said`` ignores SIGINT, then SIGTERM. A SIGTERM between the two went to the
    console script's handler, which raised Terminated out of the handler that says the
    stop, and out of ``main``, which never raises. While a stop is said, that handler
    raises nothing; once said, it raises again."""
    from pithlog.cli import stops

    real = signal.signal
    sent: list[int] = []

    def signal_then(sig: int, handler: Any) -> Any:
        previous = real(sig, handler)
        if sig == signal.SIGINT and handler is signal.SIG_IGN and not sent:
            sent.append(sig)
            _signal_self(signal.SIGTERM)  # SIGINT ignored, SIGTERM not yet
        return previous

    terminate_as_interrupt()
    try:
        monkeypatch.setattr(stops.signal, "signal", signal_then)
        with stops.stop_said(console=False):
            pass
        monkeypatch.undo()
        assert sent
        assert signal.getsignal(signal.SIGTERM) is stops.raise_terminated
        with pytest.raises(Terminated):
            _signal_self(signal.SIGTERM)
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
