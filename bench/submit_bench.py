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
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import workload
from net_bench import serve, stop

from pithlog.parallel import usable_cores
from pithlog.protocol.keys import dump_key_file
from pithlog.testing import test_key, test_keyring_entries

CLIENTS = 32
SECONDS = 60.0
"""The most a run submits for: the events not sent by then are left out of the rate."""


@dataclass
class Submitted:
    events: int
    seconds: float
    statuses: Counter[str]


async def submit_each(url: str, lines: list[bytes], clients: int, seconds: float) -> Submitted:
    """``clients`` submitters sharing ``lines``, one event per request, for at most
    ``seconds``: every answer must be ``200`` with one status line.

    Each submitter is one kept-alive HTTP/1.1 connection written to and read from with
    asyncio's streams (:func:`_post`), not an httpx client: httpx's async client spends
    about 1.6 ms of CPU per request, several times what the server spends on a submitted
    event, so on the server's own cores it measured the clients. Responses are read by
    their ``Content-Length`` (every answer of ``POST /submit`` has one)."""
    statuses: Counter[str] = Counter()
    at = 0
    split = urllib.parse.urlsplit(url)
    host, port = split.hostname or "127.0.0.1", split.port or 80
    streams = [await asyncio.open_connection(host, port) for _ in range(clients)]
    try:
        deadline = time.perf_counter() + seconds

        async def submitter(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            nonlocal at
            while at < len(lines) and time.perf_counter() < deadline:
                line, at = lines[at], at + 1
                status, body = await _post(reader, writer, host.encode(), line + b"\n")
                if status != 200:
                    raise SystemExit(f"/submit: {status} {body[:200]!r}")
                (answer,) = body.splitlines()
                statuses[json.loads(answer)["status"]] += 1

        started = time.perf_counter()
        await asyncio.gather(*(submitter(r, w) for r, w in streams))
        elapsed = time.perf_counter() - started
    finally:
        for _, writer in streams:
            writer.close()
    return Submitted(sum(statuses.values()), elapsed, statuses)


async def _post(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, host: bytes, body: bytes
) -> tuple[int, bytes]:
    """One ``POST /submit`` on a kept-alive connection: its status and body."""
    writer.write(b"POST /submit HTTP/1.1\r\nHost: %s\r\nContent-Type: application/x-ndjson"
                 b"\r\nContent-Length: %d\r\n\r\n%s" % (host, len(body), body))  # fmt: skip
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head[9:12])
    length = 0
    for field in head.split(b"\r\n")[1:]:
        name, _, value = field.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    return status, await reader.readexactly(length)


def submitted(folder: Path, lines: list[bytes], key: Path, keyring: Path, clients: int = CLIENTS,
              seconds: float = SECONDS, workers: int = 1) -> Submitted:  # fmt: skip
    """Serve a fresh store in ``folder`` with ``workers`` workers and submit ``lines`` to
    it (:func:`submit_each`)."""
    store = folder / "submitted"
    shutil.rmtree(store, ignore_errors=True)
    server, url = serve(store, key, "--submit", "--keyring", str(keyring),
                        "--workers", str(workers))  # fmt: skip
    try:
        return asyncio.run(submit_each(url, lines, clients, seconds))
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
        key.write_bytes(dump_key_file(test_key("registry")))
        export = workload.write(root / "events.jsonl", workload.mixed(args.events))
        lines = export.read_bytes().splitlines()
        started = time.perf_counter()
        subprocess.run([sys.executable, "-m", "pithlog", "--store", str(root / "appended"),
                        "append", "--keyring", str(keyring), "--batch-size", "1000",
                        str(export)], check=True, stdout=subprocess.DEVNULL)  # fmt: skip
        append_rate = len(lines) / (time.perf_counter() - started)
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
