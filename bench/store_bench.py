"""Figures of the LMDB store: append rate, re-reduce cost per batch in one large pith, replay.

    .venv/bin/python bench/store_bench.py [--events 10000] [--batch 100]

Builds signed events with the fixed public test keys, appends them to a fresh store in a
temporary folder, and prints one line per figure. docs/store.md quotes its output.
"""

from __future__ import annotations

import argparse
import datetime
import tempfile
import time
from typing import Any

from pithlog.canonical import jcs
from pithlog.events import prepare_record_created, sign_event
from pithlog.store import Store
from pithlog.testing import test_key, test_keyring

BASE = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


def ts(seconds: int) -> str:
    return (BASE + datetime.timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def record(source_id: str) -> dict[str, Any]:
    key = test_key("registry")
    canonical = {
        "metadata": {"submitted_at": "2025-06-01T10:00:00Z", "title_canon_sha256": "ab" * 32},
        "schema_version": "1.0",
        "source": {"id": source_id, "kind": "arxiv", "version": 1},
    }
    pith, payload = prepare_record_created(key, {"canonical_record": canonical})
    return sign_event(key, "record_created", pith, "record", ts(0), payload)


def pith_events(source_id: str, count: int) -> list[bytes]:
    """A record and ``count - 1`` author attestations about it, as JCS lines."""
    rec = record(source_id)
    author = test_key("author")
    out = [jcs(rec)]
    for i in range(1, count):
        event = sign_event(author, "author_attestation", rec["pith_number"], f"claim:c{i % 50}",
                           ts(100 + i), {"statement": f"statement number {i} " + "x" * 200})
        out.append(jcs(event))
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=10000)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--piths", type=int, default=100)
    args = parser.parse_args()
    keyring = test_keyring()

    # 1. Many piths: the append rate (signature checks, writes, re-reduce of touched piths).
    per = max(2, args.events // args.piths)
    spread = [line for p in range(args.piths) for line in pith_events(f"2501.{p:05d}", per)]
    spread = spread[0::2] + spread[1::2]  # interleave piths a little
    with tempfile.TemporaryDirectory() as tmp, Store.open(tmp) as store:
        for size in (1000,):
            start = time.perf_counter()
            for i in range(0, len(spread), size):
                store.append(spread[i : i + size], keyring)
            took = time.perf_counter() - start
            print(f"append {len(spread)} events over {args.piths} piths, batches of {size}: "
                  f"{took:.2f} s, {len(spread) / took:.0f} events/s")
        start = time.perf_counter()
        report = store.replay(keyring)
        took = time.perf_counter() - start
        print(f"replay --verify of {report.events} events, {report.piths} piths, jobs=1: "
              f"{took:.2f} s, {report.events / took:.0f} events/s, ok={report.ok}")
        start = time.perf_counter()
        report = store.replay(keyring, jobs=2)
        took = time.perf_counter() - start
        print(f"replay --verify jobs=2: {took:.2f} s, ok={report.ok}")

    # 2. One pith, appended in batches: each batch re-reduces the whole pith.
    lines = pith_events("2502.00001", args.events)
    with tempfile.TemporaryDirectory() as tmp, Store.open(tmp) as store:
        marks = {1000, args.events}
        total = time.perf_counter()
        for i in range(0, len(lines), args.batch):
            start = time.perf_counter()
            store.append(lines[i : i + args.batch], keyring)
            took = time.perf_counter() - start
            held = min(i + args.batch, len(lines))
            if held in marks:
                print(f"one pith, batch of {args.batch} bringing it to {held} events: "
                      f"{took * 1000:.0f} ms")
        took = time.perf_counter() - total
        print(f"one pith, {len(lines)} events in batches of {args.batch}: {took:.1f} s in all")
        state = store.state(record("2502.00001")["pith_number"])
        print(f"its state document: {len(state or b'')} bytes")


if __name__ == "__main__":
    main()
