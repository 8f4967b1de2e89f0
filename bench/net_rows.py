"""The network rows of ``make bench`` (issue 18, item 7), each a ratio taken in one run on
loopback, with its target:

- ``pithlog mirror`` of the workload's store, served by ``pithlog serve``, ÷ ``pithlog
  append`` of the same file in batches of 1,000 (target >= 0.8);
- 32 concurrent single-event submitters (``POST /submit``, group commit) ÷ ``append`` of
  the same events in batches of 1,000 (target >= 0.5), against ``serve`` with one worker
  and with one worker per core; and the same with both stores on a memory file system
  (``/dev/shm``, where a flush costs nothing), which says how much of the gap is the disk;
- requests/s at 16 connections for a full tile, ``/checkpoint`` and a state ÷ a trivial
  route of the same framework under the same server (target >= 0.7 for tiles), with p50
  and p99 latency.

The commands being compared are timed in turns (append, then the other; ``repeat``
rounds), each divided by the raw verify rate measured around it, and the median of the
rounds' ratios is kept: the machine's speed drifts within a minute (on a shared machine,
by up to 2x), and these ratios keep that drift out. The submitters are also timed against
a trivial ``POST`` route of the same framework, storing nothing: the most the same clients
reach on the same cores, which bounds what the submitters' ratio can be; and the CPU
time per submitted event of the server's process and of its judging helpers, or of its
workers (from /proc), measured after one untimed event has started the helpers. Every
server is a process of its own (``pithlog serve`` as users run it), started before its
timing; the mirror and the append it is set against are each a process of their own (the
CLI as users run it, its start counted on both sides); the append the submitters are set
against is timed inside its process, its start left out as the server's is
(:func:`submit_bench.append_seconds`); the HTTP clients run in this process.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pithlog.protocol.keys import make_keyring
from pithlog.testing import test_keyring_entries

MIRROR = "mirror over loopback ÷ append in batches of 1,000 (target >= 0.8)"
SUBMIT = "32 single-event submitters ÷ append in batches of 1,000 (target >= 0.5)"
TILES = "full tile at 16 connections ÷ a trivial Starlette route (target >= 0.7)"
SUBMIT_EVENTS = 20_000
"""Events submitted at most per round (the first of the workload's file)."""
SUBMIT_SECONDS = 120.0
"""Seconds a round of submitters runs at most; the rate is of the events sent by then."""
ENDPOINT_SECONDS = 3.0
"""Seconds each endpoint is kept busy per round."""
CONNECTIONS = 16
SUBMITTERS = 32

Cli = Callable[[list[str]], None]


def net_missing() -> str | None:
    """Why the network rows cannot run (``None``: they can)."""
    try:
        import httpx  # noqa: F401
        import uvicorn  # noqa: F401

        import pithlog.net.app  # noqa: F401
    except ImportError:
        return "not measured: pithlog[net] is not installed"
    return None


def net_rows(table: Any, n: int, events: Path, keyring: Path, cli: Cli) -> None:
    """The three figures of the module's docstring, into ``table`` (bench.py's ``Table``)."""
    why = net_missing()
    if why is not None:
        for name in (MIRROR, SUBMIT, TILES):
            table.figure(name, why)
        return
    import net_bench

    folder = Path(tempfile.mkdtemp(prefix="pithlog-bench-net-"))
    try:
        lines = events.read_bytes().splitlines()
        origin, key, pith = _origin(folder, lines)
        server, url = net_bench.serve(origin, key)
        try:
            mirror_row(table, n, folder, events, keyring, url, cli)
            endpoint_rows(table, url, pith)
        finally:
            net_bench.stop(server)
        submit_row(table, folder, lines[:SUBMIT_EVENTS], key, keyring)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _origin(folder: Path, lines: list[bytes]) -> tuple[Path, Path, str]:
    """The served store (the workload's file, untimed), the log's key and a pith with a
    state."""
    import mirror_bench
    from net_bench import key_file

    from pithlog.store import Store

    key = key_file(folder)
    mirror_bench.fill(folder / "origin", lines, make_keyring(test_keyring_entries()))
    with Store.open(folder / "origin", readonly=True) as store:
        pith = next(p["pith_number"] for p in store.piths() if p["status"] == "state")
    return folder / "origin", key, pith


def _median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


def _rounds(values: list[float]) -> str:
    return "" if len(values) < 2 else f" (median of {len(values)}: " + ", ".join(
        f"{v:.2f}" for v in values) + ")"  # fmt: skip


def _timed_rate(table: Any, name: str, events: int, func: Callable[[], float | None],
                setup: Callable[[], object] | None = None) -> tuple[float, float]:  # fmt: skip
    """``func``'s events/s, and the same divided by the verify rate measured around it (the
    machine's speed drifts within a minute: ratios are taken between these); ``setup``
    runs first, untimed. The seconds are ``func``'s wall time, or those it returns (a
    command that times itself, its process's start left out)."""
    if setup is not None:
        setup()
    before = table.verify_rate()
    started = time.perf_counter()
    own = func()
    seconds = time.perf_counter() - started if own is None else own
    local = (before + table.verify_rate()) / 2
    print(f"  {name}: {events / seconds:,.0f} events/s ({events / seconds / local:.2f}x "
          f"verify, verify {local:,.0f}/s)", flush=True)  # fmt: skip
    return events / seconds, events / seconds / local


Timed = tuple[Callable[[], float | None], Callable[[], None]]
"""A command to time and its setup, which runs first, untimed (:func:`_timed_rate`)."""


def _append(folder: Path, events: Path, keyring: Path, cli: Cli) -> Timed:
    """``append`` of ``events`` into a fresh store, in batches of 1,000; the setup removes
    the store left by the round before (or by another row: the mirror's reference is 100,000
    events, 0.03 s to remove), which the append's time must not include."""
    store = folder / "appended"

    def fresh() -> None:
        shutil.rmtree(store, ignore_errors=True)

    def run() -> None:
        cli(["append", "--store", str(store), "--keyring", str(keyring), "--batch-size",
             "1000", str(events)])  # fmt: skip

    return run, fresh


def _append_started(folder: Path, events: Path, keyring: Path) -> Timed:
    """:func:`_append` timed inside its process (:func:`submit_bench.append_seconds`): the
    submitters' time starts once their server runs, so the append they are set against
    leaves out its interpreter's start and the import of the command line (about 0.25 s,
    a fifth of an append of 20,000 events, counted against append before)."""
    from submit_bench import append_seconds

    store = folder / "appended"

    def fresh() -> None:
        shutil.rmtree(store, ignore_errors=True)

    def run() -> float:
        return append_seconds(store, events, keyring)

    return run, fresh


def mirror_row(table: Any, n: int, folder: Path, events: Path, keyring: Path, url: str,
               cli: Cli) -> None:  # fmt: skip
    """Mirror ÷ append, in turns."""
    import mirror_bench

    append = _append(folder, events, keyring, cli)
    mirror = folder / "mirror"
    ratios: list[float] = []
    rates: list[tuple[float, float]] = []
    for _ in range(table.repeat):
        appended, a = _timed_rate(table, f"append {n:,} events, batches of 1,000", n,
                                  *append)  # fmt: skip
        shutil.rmtree(mirror, ignore_errors=True)
        argv = mirror_bench.mirror_argv(url, mirror, keyring)
        mirrored, m = _timed_rate(table, f"mirror {n:,} events over loopback", n,
                                  functools.partial(cli, argv))  # fmt: skip
        mirror_bench.require_same_tree(folder / "origin", mirror)  # each round's, untimed
        ratios.append(m / a)
        rates.append((mirrored, appended))
    mirrored, appended = rates[sorted(range(len(ratios)), key=ratios.__getitem__)[
        len(ratios) // 2]]  # fmt: skip
    table.figure(f"mirror of {n:,} events from pithlog serve on 127.0.0.1 (everything "
                 "verified)", f"{mirrored:,.0f} events/s; append {appended:,.0f} events/s")
    table.figure("  " + MIRROR, f"{_median(ratios):.2f}x{_rounds(ratios)}")


def submit_row(table: Any, folder: Path, lines: list[bytes], key: Path,
               keyring: Path) -> None:  # fmt: skip
    """Concurrent single-event submitters ÷ append of the same events, in turns: against
    ``serve --submit`` with one worker (the default: its judging helpers on every core)
    and with one worker per core (each judging in its own process: what
    ``docs/network.md`` advises for many small submitters)."""
    import net_bench
    from submit_bench import run, submit_each

    from pithlog.parallel import usable_cores

    subset = folder / "submitted.jsonl"
    subset.write_bytes(b"".join(line + b"\n" for line in lines))
    append = _append_started(folder, subset, keyring)
    choices = sorted({1, usable_cores()})
    runs: dict[int, list[_Submitted]] = {workers: [] for workers in choices}
    ceilings: list[float] = []
    bounds: list[float] = []
    trivial, trivial_url = net_bench.serve_trivial()
    try:
        for _ in range(table.repeat):
            appended, a = _timed_rate(table, f"append {len(lines):,} events, batches of "
                                      "1,000", len(lines), *append)  # fmt: skip
            # the same clients against a route that stores nothing: what the client and the
            # framework allow on this machine's cores
            before = table.verify_rate()
            bare = run(submit_each(trivial_url, lines, SUBMITTERS, SUBMIT_SECONDS))
            local = (before + table.verify_rate()) / 2
            ceilings.append(bare.events / bare.seconds)
            bounds.append(ceilings[-1] / local / a)
            print(f"  {SUBMITTERS} submitters against a trivial POST route: "
                  f"{ceilings[-1]:,.0f} requests/s", flush=True)  # fmt: skip
            for workers in choices:
                runs[workers].append(_submit_round(table, folder, lines, key, keyring,
                                                   workers, appended, a))  # fmt: skip
    finally:
        net_bench.stop(trivial)
    for workers in choices:
        done = runs[workers]
        ratios = [run.ratio for run in done]
        run = done[sorted(range(len(ratios)), key=ratios.__getitem__)[len(ratios) // 2]]
        shown = "one worker" if workers == 1 else f"{workers} workers, one per core"
        table.figure(f"{SUBMITTERS} concurrent submitters, one event per POST /submit (group "
                     f"commit), serve --workers {workers} ({shown}), {run.sent}",
                     f"{run.rate:,.0f} events/s; append {run.appended:,.0f} events/s")
        table.figure(f"  {SUBMIT}, --workers {workers}", f"{_median(ratios):.2f}x"
                     f"{_rounds(ratios)}")  # fmt: skip
        if workers == 1:
            table.figure("  CPU per submitted event, in us (raw verifies): the server's "
                         "process; its judging helpers", f"{run.own * 1e6:,.0f} "
                         f"({run.own * run.local:.2f}); {run.descendants * 1e6:,.0f} "
                         f"({run.descendants * run.local:.2f})")  # fmt: skip
        else:
            spent = run.own + run.descendants
            table.figure(f"  CPU per submitted event, in us (raw verifies): the {workers} "
                         "workers", f"{spent * 1e6:,.0f} ({spent * run.local:.2f})")
    table.figure(f"  the same clients against a trivial POST route ({ceilings[0]:,.0f} "
                 "requests/s in the first round, nothing stored), ÷ append: the most this "
                 "machine allows", f"{_median(bounds):.2f}x{_rounds(bounds)}")  # fmt: skip
    memory_disk_row(table, lines, key, keyring, max(choices))


MEMORY_DISK = Path("/dev/shm")
"""A memory file system (tmpfs) on Linux: there a flush returns at once."""


def _is_tmpfs(path: Path) -> bool:
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return False
    return any(line.split()[1:3] == [str(path), "tmpfs"] for line in mounts if
               len(line.split()) > 2)  # fmt: skip


def memory_disk_row(table: Any, lines: list[bytes], key: Path, keyring: Path,
                    workers: int) -> None:  # fmt: skip
    """The submitters ÷ append again, with both stores on a memory file system, where a
    flush costs nothing: how much of the gap between the two is this machine's disk
    (``docs/submit-speed.md``, "The disk's share"). A figure to read beside the target's,
    not one for it: a store on tmpfs is not durable."""
    name = (f"  the same, --workers {workers}, both stores on a memory file system "
            f"({MEMORY_DISK}: flushes cost nothing, not durable), ÷ append there")
    if not _is_tmpfs(MEMORY_DISK) or not os.access(MEMORY_DISK, os.W_OK):
        table.figure(name, f"not measured: {MEMORY_DISK} is not a writable tmpfs")
        return
    # the events' file and two stores of them (each about as large as the file), with room
    # to spare: a container's /dev/shm is often 64 MiB
    size = sum(len(line) + 1 for line in lines)
    vfs = os.statvfs(MEMORY_DISK)
    if vfs.f_bavail * vfs.f_frsize < 4 * size:
        table.figure(name, f"not measured: {MEMORY_DISK} has {vfs.f_bavail * vfs.f_frsize:,} "
                     f"bytes free, under {4 * size:,}")  # fmt: skip
        return
    folder = Path(tempfile.mkdtemp(prefix="pithlog-bench-memory-", dir=MEMORY_DISK))
    try:
        subset = folder / "submitted.jsonl"
        subset.write_bytes(b"".join(line + b"\n" for line in lines))
        append = _append_started(folder, subset, keyring)
        ratios = []
        for _ in range(table.repeat):
            appended, a = _timed_rate(table, f"append {len(lines):,} events, batches of "
                                      f"1,000, on {MEMORY_DISK}", len(lines),
                                      *append)  # fmt: skip
            ratios.append(_submit_round(table, folder, lines, key, keyring, workers,
                                        appended, a).ratio)  # fmt: skip
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    table.figure(name, f"{_median(ratios):.2f}x{_rounds(ratios)}")


@dataclass
class _Submitted:
    """One round of submitters against one server (:func:`_submit_round`)."""

    ratio: float
    rate: float
    appended: float
    sent: str
    own: float
    """CPU seconds per event of the process started (``pithlog serve``)."""
    descendants: float
    """CPU seconds per event of its descendants (helpers; with workers, the workers)."""
    local: float
    """The raw verify rate around the round."""


def _submit_round(table: Any, folder: Path, lines: list[bytes], key: Path, keyring: Path,
                  workers: int, appended: float, a: float) -> _Submitted:  # fmt: skip
    """Serve a fresh store with ``workers`` workers and submit ``lines`` to it, the first
    alone and untimed (a worker starts its judging helpers with its first submission)."""
    import net_bench
    from submit_bench import run, submit_each

    store = folder / "submit-store"
    shutil.rmtree(store, ignore_errors=True)
    server, url = net_bench.serve(store, key, "--submit", "--keyring", str(keyring),
                                  "--workers", str(workers))  # fmt: skip
    try:
        run(submit_each(url, lines[:1], 1, SUBMIT_SECONDS))
        cpu_before = net_bench.cpu_seconds(server.pid)
        before = table.verify_rate()
        got = run(submit_each(url, lines[1:], SUBMITTERS, SUBMIT_SECONDS))
        local = (before + table.verify_rate()) / 2
        cpu_after = net_bench.cpu_seconds(server.pid)
    finally:
        net_bench.stop(server)
    own, descendants = ((after - before) / got.events
                        for before, after in zip(cpu_before, cpu_after, strict=True))
    rate = got.events / got.seconds
    statuses = json.dumps(dict(sorted(got.statuses.items())))
    print(f"  {SUBMITTERS} submitters, --workers {workers}: {got.events:,} events in "
          f"{got.seconds:.1f} s, {rate:,.0f} events/s ({rate / local:.2f}x verify; "
          f"{statuses})", flush=True)  # fmt: skip
    require_stored(got.statuses)
    require_held(store, got.events + 1)  # the untimed first event and the round's
    return _Submitted(rate / local / a, rate, appended, f"{got.events:,} of "
                      f"{len(lines) - 1:,} sent", own, descendants, local)  # fmt: skip


def require_stored(statuses: Counter[str]) -> None:
    """Every event submitted was ``stored``: the store is fresh and the events distinct, as
    append's are, so any other answer (``rejected``, ``refused``: a ``200`` with the line's
    error) would make the rate one of refusals, cheaper than storing, set against append's
    stores."""
    others = {status: count for status, count in statuses.items() if status != "stored"}
    if others:
        raise SystemExit(f"/submit: not every event was stored: {json.dumps(others)}")


def require_held(store: Path, events: int) -> None:
    """The store the server wrote holds ``events`` events (its tree's size, read once the
    server has stopped): each answer ``stored`` is an event the store kept, not only the
    server's word for it."""
    from pithlog.store import Store

    with Store.open(store, readonly=True) as opened:
        held = opened.tree_size()
    if held != events:
        raise SystemExit(f"/submit: the store holds {held:,} events, not the {events:,} "
                         "answered stored")  # fmt: skip


def endpoint_rows(table: Any, url: str, pith: str) -> None:
    """Requests/s and latency of a full tile, /checkpoint and a state, each ÷ the trivial
    route; the trivial server runs beside ``pithlog serve``."""
    import net_bench

    trivial, trivial_url = net_bench.serve_trivial()
    try:
        runs = [net_bench.endpoints(url, trivial_url, pith, ENDPOINT_SECONDS, CONNECTIONS)
                for _ in range(table.repeat)]  # fmt: skip
    finally:
        net_bench.stop(trivial)
    for name in runs[0]:
        rates = [run[name][0] for run in runs]
        at = sorted(range(len(rates)), key=rates.__getitem__)[len(rates) // 2]
        rate, latencies = runs[at][name]
        value = (f"{rate:,} requests/s, p50 {net_bench.percentile(latencies, 0.5):.1f} ms, "
                 f"p99 {net_bench.percentile(latencies, 0.99):.1f} ms")  # fmt: skip
        table.figure(f"{name}, {CONNECTIONS} connections", value)
        if name != net_bench.TRIVIAL:
            ratios = [run[name][0] / run[net_bench.TRIVIAL][0] for run in runs]
            label = TILES if name == net_bench.TILE else f"{name} ÷ the trivial route"
            table.figure("  " + label, f"{_median(ratios):.2f}x{_rounds(ratios)}")
