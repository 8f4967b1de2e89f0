"""Concurrent single-event submitters against ``pithlog serve --submit``, against a local
append (issue 18, item 7): C clients (default 32), each sending one signed event per ``POST
/submit`` and the next once its answer came, until the events are sent or the time is up,
into a fresh store served on 127.0.0.1. Concurrent submissions share one write transaction
(group commit, ``pithlog/net/submit.py``). The reference is ``pithlog append`` of the same
events into a fresh store in batches of 1,000. Printed: both rates and submitters ÷ append
(target >= 0.5), one run, same machine (server, client and disk shared). The server runs
``--workers W`` (default: one per core, as ``docs/network.md`` advises for many small
submitters).

    .venv/bin/python bench/submit_bench.py [N] [--clients 32] [--seconds 60] [--workers W]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse
from collections import Counter
from collections.abc import Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, cast

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parent))

import workload
from net_bench import serve, stop

from pithlog.parallel import usable_cores
from pithlog.testing import test_key, test_keyring_entries, write_key_file

CLIENTS = 32
SECONDS = 60.0
"""The most a run submits for: the events not sent by then are left out of the rate."""

T = TypeVar("T")


@dataclass
class Submitted:
    events: int
    seconds: float
    statuses: Counter[str]


async def submit_each(url: str, lines: list[bytes], clients: int, seconds: float) -> Submitted:
    """``clients`` submitters sharing ``lines``, one event per request, for at most
    ``seconds``: every answer must be ``200`` with one status line.

    Each submitter is one kept-alive HTTP/1.1 connection driven by an :class:`asyncio.Protocol`
    (:class:`_Submitter`), which sends its next request from the callback that completes an
    answer; :func:`run` runs them on uvloop where ``pithlog[net]`` installed it, as the server
    runs. The clients share the server's cores, so what they spend is taken from what is
    measured: httpx's async client spent about 1.6 ms of CPU per request, several times what
    the server spends on a submitted event; asyncio's streams (a coroutine per request, a
    ``readuntil`` and a ``readexactly`` per answer) 20-22 us, and this protocol on uvloop
    13.6-14.3 us (``docs/submit-speed.md``). Answers are read by their
    ``Content-Length`` (every answer of ``POST /submit`` has one)."""
    split = urllib.parse.urlsplit(url)
    host, port = split.hostname or "127.0.0.1", split.port or 80
    loop = asyncio.get_running_loop()
    feed = _Feed(lines)
    submitters: list[_Submitter] = []
    try:
        for _ in range(clients):
            _, submitter = await loop.create_connection(
                lambda: _Submitter(feed, host.encode(), loop.create_future()), host, port)
            submitters.append(submitter)
        started = time.perf_counter()
        feed.deadline = started + seconds
        for submitter in submitters:
            submitter.send_next()
        await asyncio.gather(*(submitter.done for submitter in submitters))
        elapsed = time.perf_counter() - started
    finally:
        for submitter in submitters:
            submitter.close()
    statuses: Counter[str] = Counter()
    for submitter in submitters:
        statuses.update(submitter.statuses)
    return Submitted(sum(statuses.values()), elapsed, statuses)


def run(submitting: Coroutine[Any, Any, T]) -> T:
    """Run the clients' coroutine on uvloop where it is installed (``pithlog[net]`` installs
    it on Linux and macOS), else on asyncio's own loop."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(submitting)
    return uvloop.run(submitting)


class _Feed:
    """The events that the submitters share, each sent once, until :attr:`deadline`."""

    def __init__(self, lines: list[bytes]) -> None:
        self.lines = lines
        self.at = 0
        self.deadline = float("inf")

    def next(self) -> bytes | None:
        if self.at >= len(self.lines) or time.perf_counter() >= self.deadline:
            return None
        self.at += 1
        return self.lines[self.at - 1]


class _Submitter(asyncio.Protocol):
    """One submitter: ``POST /submit`` of the feed's next event each time its answer is in,
    until the feed is empty (then :attr:`done` holds)."""

    def __init__(self, feed: _Feed, host: bytes, done: asyncio.Future[None]) -> None:
        self.feed = feed
        self.host = host
        self.done = done
        self.statuses: Counter[str] = Counter()
        self.transport: asyncio.Transport | None = None
        self.buffer = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports do not subclass asyncio's; both are what a stream is written on
        self.transport = cast(asyncio.Transport, transport)

    def send_next(self) -> None:
        line = self.feed.next()
        if line is None:
            self._end(None)
            return
        assert self.transport is not None
        self.transport.write(b"POST /submit HTTP/1.1\r\nHost: %s\r\nContent-Type: "
                             b"application/x-ndjson\r\nContent-Length: %d\r\n\r\n%s\n"
                             % (self.host, len(line) + 1, line))  # fmt: skip

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while not self.done.done():
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buffer[:end]
            at = head.lower().find(b"\r\ncontent-length:")
            if at < 0:
                self._end(SystemExit(f"/submit: an answer without Content-Length: {head!r}"))
                return
            length = int(head[at + 17 :].split(b"\r\n", 1)[0])
            if len(self.buffer) < end + 4 + length:
                return
            body = self.buffer[end + 4 : end + 4 + length]
            self.buffer = self.buffer[end + 4 + length :]
            if head[9:12] != b"200":
                self._end(SystemExit(f"/submit: {head[9:12]!r} {body[:200]!r}"))
                return
            try:
                (answer,) = body.splitlines()
                status = _STATUS.decode(answer).status
            except (ValueError, msgspec.MsgspecError):
                self._end(SystemExit(f"/submit: not one status line: {body[:200]!r}"))
                return
            self.statuses[status] += 1
            self.send_next()

    def connection_lost(self, exc: Exception | None) -> None:
        self._end(SystemExit(f"/submit: the server closed the connection ({exc})"))

    def _end(self, error: BaseException | None) -> None:
        if not self.done.done():
            if error is None:
                self.done.set_result(None)
            else:
                self.done.set_exception(error)

    def close(self) -> None:
        # ended first: after another submitter's failure, a future still open would take
        # the closed connection's error with nobody awaiting it (asyncio logs it as lost)
        self._end(None)
        if self.transport is not None:
            self.transport.close()


class _Status(msgspec.Struct):
    status: str


_STATUS = msgspec.json.Decoder(_Status)
"""An answer line's status (its other members are not read)."""


APPEND_CHILD = """
import os, sys, time
from pithlog.cli.program import main  # the command line imported before the clock starts

with open(os.devnull, "wb") as sink:
    started = time.perf_counter()
    status = main(sys.argv[1:], stdout=sink)
    seconds = time.perf_counter() - started
if status:
    sys.exit(status)
print(seconds)
"""


def append_seconds(store: Path, events: Path, keyring: Path) -> float:
    """Seconds of ``pithlog append`` of ``events`` into the fresh ``store`` in batches of
    1,000 (its judging helpers started, the store made, the commits durable), in a process
    of its own whose start is left out: the interpreter and the import of the command line
    (about 0.25 s on the 2-core development machine, a fifth of an append of 20,000
    events) are paid once by a server too, before the submitters' time starts."""
    argv = ["--store", str(store), "append", "--keyring", str(keyring), "--batch-size",
            "1000", str(events)]  # fmt: skip
    done = subprocess.run([sys.executable, "-c", APPEND_CHILD, *argv], capture_output=True,
                          check=False)  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"append: exit status {done.returncode}: "
                         f"{done.stderr.decode(errors='replace')[-2000:]}")  # fmt: skip
    return float(done.stdout)


def submitted(folder: Path, lines: list[bytes], key: Path, keyring: Path, clients: int = CLIENTS,
              seconds: float = SECONDS, workers: int = 1) -> Submitted:  # fmt: skip
    """Serve a fresh store in ``folder`` with ``workers`` workers and submit ``lines`` to
    it (:func:`submit_each`)."""
    store = folder / "submitted"
    shutil.rmtree(store, ignore_errors=True)
    server, url = serve(store, key, "--submit", "--keyring", str(keyring),
                        "--workers", str(workers))  # fmt: skip
    try:
        return run(submit_each(url, lines, clients, seconds))
    finally:
        stop(server)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("events", type=int, nargs="?", default=20_000)
    parser.add_argument("--clients", type=int, default=CLIENTS)
    parser.add_argument("--seconds", type=float, default=SECONDS)
    parser.add_argument("--workers", type=int, default=usable_cores())
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="pithlog-submit-bench-"))
    try:
        keyring = root / "keyring.json"
        keyring.write_text(json.dumps({"keyring_version": "1", "keys": test_keyring_entries()}))
        key = root / "registry.key"
        write_key_file(key, test_key("registry"))
        export = workload.write(root / "events.jsonl", workload.mixed(args.events))
        lines = export.read_bytes().splitlines()
        append_rate = len(lines) / append_seconds(root / "appended", export, keyring)
        got = submitted(root, lines, key, keyring, args.clients, args.seconds, args.workers)
        rate = got.events / got.seconds
        print(f"{got.events:,} of {len(lines):,} events by {args.clients} submitters "
              f"(serve --workers {args.workers}) in "
              f"{got.seconds:.1f} s: {rate:,.0f} events/s ({dict(got.statuses)}); append in "
              f"batches of 1,000: {append_rate:,.0f} events/s; submitters / append "
              f"{rate / append_rate:.2f} (target >= 0.5)")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
