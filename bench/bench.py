"""`make bench`: pithlog's figures as ratios to the raw Ed25519 verify rate of the same run.

Prints one table and appends it, with the machine, versions and date, to bench/RESULTS.md.
Two workloads: ``mixed`` (every line in JCS, as ``pithlog sign`` writes it) and
``registry`` (citation-heavy, most lines in the forms producers write; see
bench/workload.py), each with the stage table of bench/stages.py, then the door's cost per
line in each form (bench/door.py), append and replay on a store that packs its copies
against one that keeps them unpacked (issue 17), and the network rows (bench/net_rows.py: mirror and
submitters against append, requests/s of ``pithlog serve``; ``--only-net`` for them alone;
``--only-registry`` for the registry workload's reduce, append and replay alone), and the
peak memory of reduce and replay (bench/memory_rows.py). The figures are kept as
bench/table.py says.
Sizes: `--scale` multiplies the event counts (1.0 = the documented sizes; CI never runs
this). `--repeat N` (default 3) times each throughput N times and keeps the median ratio:
the machine's speed moves by up to 30 % between timings. Workloads are cached in
bench/.cache (deterministic, so reusable).

Each throughput also shows its CPU time per event (this process and its helpers, on all
cores) in raw verifies, and how many cores it kept busy; for the two targets that compare
throughputs with each other, a row gives the most CPU per event that the target allows on
this machine's cores. A target whose command measures more than that cannot be met by
spreading the same work over the same cores, only by less work per event.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import datetime
import functools
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path

import rfc8785
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PublicKey,
)

sys.path.insert(0, str(Path(__file__).resolve().parent))

import door
import reaped
import stages
import workload
from memory_rows import reduce_memory, replay_memory
from net_rows import net_rows
from table import VERIFY_SAMPLE, Table, ceiling
from verify_rate import sodium_verify_rate, timed

from pithlog.protocol.canonical import jcs
from pithlog.protocol.events import sign_event
from pithlog.protocol.keys import Keyring, SigningKey, make_keyring
from pithlog.store import Store
from pithlog.testing import test_keyring_entries

HERE = Path(__file__).resolve().parent
CACHE = HERE / ".cache"



def straightforward(path: Path, public_keys: dict[str, object]) -> int:
    """The plain path: json.loads, rfc8785 for the event id, verify. No checks beyond."""
    count = 0
    with path.open("rb") as handle:
        for line in handle:
            event = json.loads(line)
            body = {k: v for k, v in event.items() if k not in ("event_id", "signature_b64")}
            body_digest = hashlib.sha256(rfc8785.dumps(body)).digest()
            assert event["event_id"] == "sha256:" + body_digest.hex()
            public_keys[event["signer"]["key_id"]].verify(  # type: ignore[attr-defined]
                base64.b64decode(event["signature_b64"]), body_digest
            )
            count += 1
    return count


def reduce_rows(table: Table, n: int, events: Path, keyring: Path, plain: float) -> None:
    """``reduce`` with ``--jobs 1`` and ``2``, and on a Dask cluster of two worker processes
    started and stopped by the command (``--dask local:2``: the cost of distribution on one
    machine, the cluster's start included), each as users run it."""

    def reduce(*options: str) -> None:
        _cli(["reduce", *options, "--keyring", str(keyring), str(events)])

    ratios = {}
    for jobs in (1, 2):
        ratios[jobs] = table.rate(f"reduce of a {n:,}-event file, --jobs {jobs}", n,
                                  functools.partial(reduce, "--jobs", str(jobs)))  # fmt: skip
        table.figure(f"  reduce --jobs {jobs} vs straightforward",
                     f"{ratios[jobs] / plain:.2f}x")  # fmt: skip
    ceiling(table, "3x straightforward", 3 * plain)
    try:
        import pithlog.distributed.graph  # noqa: F401 - the dask extra
    except ImportError:
        table.figure("reduce --dask local:2", "not measured: pithlog[dask] is not installed")
        return
    dask = table.rate(f"reduce of a {n:,}-event file, --dask local:2", n,
                      functools.partial(reduce, "--dask", "local:2"))  # fmt: skip
    table.figure("  reduce --dask local:2 ÷ reduce --jobs 2 (target >= 0.7)",
                 f"{dask / ratios[2]:.2f}x")  # fmt: skip


def run(scale: float, big: int, repeat: int = 1, only_reduce: bool = False,
        only_net: bool = False, only_registry: bool = False) -> Table:  # fmt: skip
    table = Table(repeat)
    n = max(1000, int(100_000 * scale))
    events = workload.write(CACHE / f"mixed-{n}.jsonl", workload.mixed(n))
    keyring = CACHE / "keyring.json"
    keyring.write_text(json.dumps({"keyring_version": "1", "keys": test_keyring_entries()}))
    if only_net:
        net_rows(table, n, events, keyring, _cli)
        return table
    sodium = sodium_verify_rate(VERIFY_SAMPLE)
    table.figure("raw Ed25519 verify (libsodium, 1 core), which pithlog asks first",
                 f"{sodium:,.0f} /s", f"{sodium / table.verify_rate():.2f}")  # fmt: skip
    if only_registry:
        registry_rows(table, n, keyring)
        return table
    ring = make_keyring(test_keyring_entries())
    keys = {k: Ed25519PublicKey.from_public_bytes(ring[k].public_key) for k in ring}
    plain = table.rate("straightforward json + rfc8785 + verify", n,
                       lambda: straightforward(events, keys))  # fmt: skip

    reduce_rows(table, n, events, keyring, plain)
    if only_reduce:
        return table
    reduce_memory(table, events, keyring)

    # append and replay as users run them: the CLI, in this process.
    for batch in (1000, 10000):
        folder = Path(tempfile.mkdtemp(prefix="pithlog-bench-"))
        store = str(folder / "store")
        try:
            append = ["append", "--store", store, "--keyring", str(keyring),
                      "--batch-size", str(batch), str(events)]  # fmt: skip
            fresh = functools.partial(shutil.rmtree, store, ignore_errors=True)
            table.rate(f"append {n:,} events, batches of {batch:,} (durable commits)", n,
                       functools.partial(_cli, append), setup=fresh)  # fmt: skip
            if batch == 1000:
                size = (folder / "store" / "data.mdb").stat().st_size
                mean = len(events.read_bytes()) / n
                table.figure("store size on disk per event",
                             f"{size / n:,.0f} bytes (an event is {mean:,.0f} bytes)")
                table.figure("  store bytes per event / JCS bytes per event (target <= 1.0)",
                             f"{size / n / mean:.2f}x")  # fmt: skip
                store_pages(table, Path(store), n)
                ratios = {}
                for jobs in (1, 2):
                    replay = ["replay", "--store", store, "--verify", "--keyring", str(keyring),
                              "--jobs", str(jobs)]  # fmt: skip
                    name = f"replay --verify --jobs {jobs}"
                    ratios[jobs] = table.rate(name, n, functools.partial(_cli, replay))
                table.figure("  replay --jobs 2 vs --jobs 1", f"{ratios[2] / ratios[1]:.2f}x")
                ceiling(table, "--jobs 2 at 1.6x this --jobs 1", 1.6 * ratios[1])
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    packing_rows(table, n, events, keyring)
    registry_rows(table, n, keyring)
    net_rows(table, n, events, keyring, _cli)
    keyring_change(table, events, n)
    top = max(1000, 100_000 * scale)
    grow(table, ring, [size for size in (1000, 10000, 100_000) if size <= top])
    replay_memory(table, ring, keyring, max(10_000, int(big * scale)))
    return table


def registry_rows(table: Table, n: int, keyring: Path) -> None:
    """reduce, append and replay --verify on the registry workload (:func:`workload.registry`:
    citation-heavy, most lines in the producer's compact form, the rest JCS, ASCII-escaped,
    spaced or slash-escaped), against the targets of issue 23."""
    events = workload.write(CACHE / f"registry-{n}.jsonl", workload.registry(n))
    data = events.read_bytes()
    kinds = [json.loads(line)["event_type"] for line in data.splitlines()]
    share = kinds.count("citation_signature") / n
    table.figure(f"registry workload: {n:,} events",
                 f"{share:.0%} citation signatures, {len(data) / n:,.0f} bytes per event")
    reduce = ["reduce", "--keyring", str(keyring), str(events)]
    table.rate(f"registry: reduce of a {n:,}-event file, --jobs 1 (target 1.0)", n,
               functools.partial(_cli, reduce))  # fmt: skip
    folder = Path(tempfile.mkdtemp(prefix="pithlog-bench-"))
    store = str(folder / "store")
    try:
        append = ["append", "--store", store, "--keyring", str(keyring),
                  "--batch-size", "1000", str(events)]  # fmt: skip
        fresh = functools.partial(shutil.rmtree, store, ignore_errors=True)
        table.rate(f"registry: append {n:,} events, batches of 1,000 (target 0.8)", n,
                   functools.partial(_cli, append), setup=fresh)  # fmt: skip
        # as a user runs it: without --jobs, one worker per core (docs/cli.md)
        replay = ["replay", "--store", store, "--verify", "--keyring", str(keyring)]
        table.rate("registry: replay --verify (target 0.9)", n,
                   functools.partial(_cli, replay))  # fmt: skip
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def store_pages(table: Table, path: Path, n: int) -> None:
    """Where a store's bytes are: pages per database (LMDB's ``stat``), per event, and the
    file's pages that no database holds (free pages left by copy-on-write commits)."""
    with Store.open(path, create=False) as store:
        stats = store.stats()
    psize = stats["page_size"]
    held = 0
    for name, pages in sorted(stats["pages"].items(), key=lambda kv: -sum(kv[1].values())):
        total = sum(pages.values())
        held += total
        if total:
            table.figure(f"  {name}: {total:,} pages", f"{total * psize / n:,.0f} bytes per event "
                         f"({pages['overflow']:,} overflow)")  # fmt: skip
    free = stats["file_size"] // psize - held
    table.figure(f"  not held by a database: {free:,} pages",
                 f"{free * psize / n:,.0f} bytes per event")


def _cli(argv: list[str]) -> None:
    """``pithlog ARGV`` as users run it: a process of its own (its start counted), output
    dropped. In this process instead, the helpers a command spawns would each import this
    script again as their ``__main__`` (``multiprocessing``'s spawn), which no user's
    command pays. Run by :func:`reaped.run`, so that the CPU time of the processes it
    leaves to end on their own (``--dask local:N``'s fork server and workers) is counted."""
    done = reaped.run([sys.executable, "-m", "pithlog", *argv], stdout=subprocess.DEVNULL,
                      stderr=subprocess.PIPE, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-2000:]


PACKING_ROUNDS = 3


def _cli_unpacked(argv: list[str]) -> None:
    """:func:`_cli` with every copy stored unpacked (``bench/unpacked/sitecustomize.py``)."""
    path = os.pathsep.join(p for p in (str(HERE / "unpacked"), os.environ.get("PYTHONPATH"))
                           if p)  # fmt: skip
    done = subprocess.run([sys.executable, "-m", "pithlog", *argv], stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, check=False,
                          env={**os.environ, "PYTHONPATH": path})  # fmt: skip
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-2000:]


def packing_rows(table: Table, n: int, events: Path, keyring: Path) -> None:
    """Issue 17's "append and replay no slower": the same commands on a store that packs its
    copies (zstd with the store's dictionary) and on one that keeps them unpacked, in turns
    (``PACKING_ROUNDS`` rounds), as the packed store's rate ÷ the unpacked one's, each
    pair timed back to back."""
    folder = Path(tempfile.mkdtemp(prefix="pithlog-bench-"))
    ratios: dict[str, list[float]] = {"append": [], "replay": []}
    sizes: dict[str, int] = {}
    try:
        for _ in range(PACKING_ROUNDS):
            seconds: dict[tuple[str, str], float] = {}
            for kind, cli in (("packed", _cli), ("unpacked", _cli_unpacked)):
                store = folder / kind
                shutil.rmtree(store, ignore_errors=True)
                append = ["append", "--store", str(store), "--keyring", str(keyring),
                          "--batch-size", "1000", str(events)]  # fmt: skip
                replay = ["replay", "--store", str(store), "--verify", "--keyring",
                          str(keyring)]  # fmt: skip
                seconds[kind, "append"] = timed(functools.partial(cli, append))
                seconds[kind, "replay"] = timed(functools.partial(cli, replay))
                sizes[kind] = (store / "data.mdb").stat().st_size
            for command in ratios:
                ratios[command].append(seconds["unpacked", command] / seconds["packed", command])
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    table.figure(f"store packed ÷ unpacked, {n:,} events: bytes on disk",
                 f"{sizes['packed'] / sizes['unpacked']:.2f}x")  # fmt: skip
    for command, label in (("append", "append in batches of 1,000"),
                           ("replay", "replay --verify")):  # fmt: skip
        got = sorted(ratios[command])
        shown = ", ".join(f"{r:.2f}" for r in ratios[command])
        table.figure(f"  {label}: packed store's rate ÷ unpacked store's (issue 17: no "
                     "slower, >= 1.0)", f"{got[len(got) // 2]:.2f}x (rounds: {shown})")  # fmt: skip


NEWCOMER = SigningKey.from_seed(hashlib.sha256(b"pithlog bench: a new author").digest(),
                                "bench-newcomer", "newcomer.test.invalid", "author")
"""The key added by :func:`keyring_change`: an author new to the registry."""


def keyring_change(table: Table, events: Path, n: int) -> None:
    """Adding one key to the ``n``-event store (``docs/store.md``, "A keyring change"), as
    a registry does daily: a new author whose 50 attestations about 10 piths the store
    kept while the key was unknown (``--keep-invalid``: ``unknown_key``). The store is
    copied, and the key added to one copy by ``Store.rekey`` and to the other by a full
    rebuild (``replay --rebuild``), one after the other."""
    lines = events.read_bytes().splitlines()
    piths = list(dict.fromkeys(json.loads(line)["pith_number"] for line in lines[:5000]))
    lines += [jcs(sign_event(NEWCOMER, "author_attestation", pith, f"claim:new{j}",
                             workload.ts(5000 + j), {"statement": f"new claim {j}"}))
              for pith in piths[:10] for j in range(5)]  # fmt: skip
    before = make_keyring(test_keyring_entries())
    after = make_keyring([*test_keyring_entries(), NEWCOMER.keyring_entry()])
    folder = Path(tempfile.mkdtemp(prefix="pithlog-bench-"))
    try:
        with Store.open(folder / "a") as store:
            batches = (lines[i : i + 10_000] for i in range(0, len(lines), 10_000))
            for _ in store.append_batches(batches, before, keep_invalid=True):
                pass
            planned = store.rekey_plan(after)
        assert planned is not None
        shutil.copytree(folder / "a", folder / "b")
        with Store.open(folder / "a") as store:
            counts: dict[str, int] = {}
            rekey_seconds = timed(lambda: counts.update(store.rekey(after)))
        with Store.open(folder / "b") as store:
            rebuild_seconds = timed(lambda: store.rebuild(after))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    table.figure(f"add one key to the {len(lines):,}-event store ({counts['copies']} copies "
                 f"judged, {counts['piths']} piths re-reduced)",
                 f"{rekey_seconds:.3f} s")  # fmt: skip
    table.figure("  a full rebuild under the same keyring (replay --rebuild)",
                 f"{rebuild_seconds:.2f} s")  # fmt: skip
    table.figure("  add one key vs full rebuild",
                 f"{rekey_seconds / rebuild_seconds:.4f}x the time")  # fmt: skip


def grow(table: Table, ring: Keyring, sizes: list[int]) -> None:
    """One pith grown by batches of 100 citation signatures: time per batch at sizes.

    A store is grown to each size (untimed), then the batches are timed in rounds, one
    batch per store in each round, and the median of :data:`GROW_ROUNDS` per size is kept.
    The machine's speed (its disk's most of all: a batch is one durable commit) drifts
    within minutes, and timing the sizes side by side keeps that drift out of the growth.
    """
    top = max(sizes)
    lines = list(workload.one_pith(top + GROW_ROUNDS * 100, p=900_000))
    folder = Path(tempfile.mkdtemp(prefix="pithlog-bench-"))
    try:
        with contextlib.ExitStack() as stack:
            stores = {size: stack.enter_context(Store.open(folder / str(size))) for size in sizes}
            for size, store in stores.items():
                for i in range(0, size, 100):
                    store.append(lines[i : min(i + 100, size)], ring)
            samples: dict[int, list[float]] = {size: [] for size in sizes}
            for round_ in range(GROW_ROUNDS):
                for size, store in stores.items():
                    batch = lines[size + round_ * 100 : size + (round_ + 1) * 100]
                    samples[size].append(timed(lambda s=store, b=batch: s.append(b, ring)))
        per_batch = {size: sorted(s)[len(s) // 2] for size, s in samples.items()}
        for held, seconds in sorted(per_batch.items()):
            table.figure(f"one pith at {held:,} events: append a batch of 100",
                         f"{seconds * 1000:,.0f} ms")  # fmt: skip
        first = per_batch[min(per_batch)]
        table.figure("  growth of that time, largest vs smallest size",
                     f"{per_batch[max(per_batch)] / first:.2f}x")  # fmt: skip
    finally:
        shutil.rmtree(folder, ignore_errors=True)


GROW_ROUNDS = 7
"""Timed batches per size in :func:`grow`."""



def environment() -> str:
    names = ("cryptography", "msgspec", "rfc8785", "lmdb")
    versions = ", ".join(f"{name} {metadata.version(name)}" for name in names)
    return (f"{datetime.date.today().isoformat()} · {platform.machine()} · "
            f"{platform.python_implementation()} {platform.python_version()} · "
            f"{versions}")  # fmt: skip


def main_bench(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--scale", type=float, default=1.0, help="multiply event counts")
    parser.add_argument("--no-record", action="store_true", help="do not append RESULTS.md")
    parser.add_argument("--replay-events", type=int, default=1_000_000,
                        help="events in the store whose replay's memory is measured")  # fmt: skip
    parser.add_argument("--repeat", type=int, default=3, metavar="N",
                        help="time each throughput N times and keep the median ratio "
                        "(the machine's speed moves by up to 30 %% between timings)")  # fmt: skip
    parser.add_argument("--only-reduce", action="store_true",
                        help="time the reduce rows only (straightforward, --jobs, --dask); "
                        "nothing is recorded")
    parser.add_argument("--only-registry", action="store_true",
                        help="time the registry workload's rows only (reduce, append, replay "
                        "--verify: issue 23's targets); nothing is recorded")
    parser.add_argument("--only-net", action="store_true",
                        help="time the network rows only (mirror, submitters, requests/s of "
                        "pithlog serve; bench/net_rows.py); nothing is recorded")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    print(f"pithlog bench, scale {args.scale}, repeat {args.repeat}: {environment()}",
          flush=True)  # fmt: skip
    table = run(args.scale, args.replay_events, args.repeat, args.only_reduce, args.only_net,
                args.only_registry)
    text = table.markdown()
    print(text)
    if args.only_reduce or args.only_net or args.only_registry:  # a part: not recorded
        return 0
    samples = sorted(table.verify_samples)
    verify_us = 1e6 / samples[len(samples) // 2]
    n = max(1000, int(100_000 * args.scale))
    lines = (CACHE / f"mixed-{n}.jsonl").read_bytes().splitlines()[:20000]
    where = stages.table(lines, verify_us)
    print(where)
    text += ("\n\nWhere the time goes, each stage alone on one core over "
             f"{len(lines):,} events of the same workload:\n\n{where}")  # fmt: skip
    lines = (CACHE / f"registry-{n}.jsonl").read_bytes().splitlines()[:20000]
    where = stages.table(lines, verify_us)
    print(where)
    text += ("\n\nThe same on the registry workload (most lines not in JCS), over "
             f"{len(lines):,} events:\n\n{where}")  # fmt: skip
    forms = door.table()
    print(forms)
    text += ("\n\nThe door's cost per line in each form producers write (CPU time, one "
             f"core, the same events in every form):\n\n{forms}")  # fmt: skip
    if not args.no_record:
        with (HERE / "RESULTS.md").open("a", encoding="utf-8") as handle:
            handle.write(f"\n## {environment()} · scale {args.scale} · repeat {args.repeat}"
                         f"\n\n{text}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main_bench())
