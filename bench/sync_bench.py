"""Bytes a sync exchanges, against a full export, for stores that differ by a fraction.

    .venv/bin/python bench/sync_bench.py [--events 100000] [--fractions 0.001,0.01,0.1]

Store A holds N events of the seed-shaped workload (bench/workload.py); store B_p holds the
same events but a random fraction p of them. B_p pulls from A (`pithlog sync --from A`):
the reconciliation messages, the fetch messages (the missing copies themselves) and the
round trips are counted by the in-memory channel, and compared with the bytes of a full
export of A (what a follower without sync would download). The reverse direction (A pulls
from B_p: nothing to fetch) shows the cost of reconciliation alone. Then a few timings of
the Merkle tree at size N.
"""

from __future__ import annotations

import argparse
import platform
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import workload

from pithlog.net import sync_pull as sp
from pithlog.net.sources import store_responder
from pithlog.net.syncmsg import SHORT
from pithlog.protocol.keys import make_keyring
from pithlog.store import Store
from pithlog.testing import test_keyring_entries
from pithlog.transparency import merkle

CACHE = Path(__file__).resolve().parent / ".cache"


def build(path: Path, lines: list[bytes], ring: object) -> float:
    start = time.perf_counter()
    with Store.open(path) as store:
        for i in range(0, len(lines), 10000):
            store.append(lines[i : i + 10000], ring)  # type: ignore[arg-type]
    return time.perf_counter() - start


def kib(n: int) -> str:
    return f"{n / 1024:,.1f} KiB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--fractions", default="0.001,0.01,0.1")
    args = parser.parse_args()
    n = args.events
    fractions = [float(x) for x in args.fractions.split(",")]
    ring = make_keyring(test_keyring_entries())
    source = workload.write(CACHE / f"mixed-{n}.jsonl", workload.mixed(n))
    lines = source.read_bytes().splitlines()
    folder = Path(tempfile.mkdtemp(prefix="pithlog-sync-bench-"))
    print(f"# sync bench: {n:,} events, Python {platform.python_version()}, "
          f"{platform.machine()}")  # fmt: skip
    try:
        seconds = build(folder / "a", lines, ring)
        print(f"store A: {n:,} events appended in {seconds:.1f} s")
        with Store.open(folder / "a", create=False, readonly=True) as a:
            export_bytes = sum(len(data) + 1 for _, data in a.export())
            items = len(a.copy_keys())
            print(f"full export of A: {export_bytes:,} bytes ({kib(export_bytes)}), "
                  f"{items:,} copies; listing every copy's short id would be "
                  f"{kib(items * SHORT)}")  # fmt: skip
            print()
            print("| B lacks | copies fetched | rounds | reconcile bytes | fetch bytes | "
                  "total exchanged | total / full export | reconcile bytes per missing copy "
                  "| A pulls from B (reconcile only) | sync time |")  # fmt: skip
            print("|---|---|---|---|---|---|---|---|---|---|")
            rng = random.Random(1)
            for p in fractions:
                missing = set(rng.sample(range(n), max(1, round(n * p))))
                kept = [line for i, line in enumerate(lines) if i not in missing]
                b_path = folder / f"b-{p}"
                build(b_path, kept, ring)
                with Store.open(b_path, create=False) as b:
                    back = sp.Channel(store_responder(b))
                    need, back_rounds = sp.reconcile(a.copy_keys(), back)
                    assert not need
                    start = time.perf_counter()
                    report = sp.pull(b, store_responder(a), ring)
                    took = time.perf_counter() - start
                    assert report.needed == len(missing), (report.needed, len(missing))
                    assert b.copy_keys() == a.copy_keys()
                recon = report.reconcile_sent + report.reconcile_received
                fetch = report.fetch_sent + report.fetch_received
                total = report.bytes_exchanged
                print(f"| {p:.1%} ({len(missing):,}) | {report.needed:,} | {report.rounds} | "
                      f"{kib(recon)} | {kib(fetch)} | {kib(total)} | "
                      f"{total / export_bytes:.2%} | {recon / len(missing):,.0f} B | "
                      f"{kib(back.sent + back.received)} in {back_rounds} rounds | "
                      f"{took:.1f} s |")  # fmt: skip
                shutil.rmtree(b_path, ignore_errors=True)
            print()
            timings(a, n)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def timings(a: Store, n: int) -> None:
    size = a.tree_size()
    rng = random.Random(2)

    def per_call(func: object, calls: int = 200) -> float:
        start = time.perf_counter()
        for _ in range(calls):
            func()  # type: ignore[operator]
        return (time.perf_counter() - start) / calls * 1000

    root_ms = per_call(lambda: a.tree_root(rng.randrange(1, size + 1)))
    incl_ms = per_call(lambda: a.inclusion_path(rng.randrange(size), size))
    cons_ms = per_call(lambda: a.consistency_path(rng.randrange(1, size), size))
    start = time.perf_counter()
    recomputed = merkle.root_of([k[:32] for k in sorted(a.copy_keys())])  # all leaves, hashed
    whole_ms = (time.perf_counter() - start) * 1000
    assert len(recomputed) == 32
    print(f"Merkle tree of {size:,} leaves: root of any size {root_ms:.3f} ms, inclusion path "
          f"{incl_ms:.3f} ms, consistency proof {cons_ms:.3f} ms (hashing all leaves "
          f"again: {whole_ms:,.0f} ms)")  # fmt: skip


if __name__ == "__main__":
    main()
