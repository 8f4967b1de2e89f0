"""A Store shared by the threads of one process (docs/api.md, "Threads, processes and
closing"), as a registry's web application uses it."""

from __future__ import annotations

import random
import threading
from pathlib import Path
from typing import Any

import eventgen as g

from pithlog.store import Store

WAIT = 2.0
"""Seconds a step waits for what it expects before going on without it: never reached when
the store behaves, only a bound on a test that would otherwise hang."""


def test_a_map_growth_waits_for_the_reads_under_way_not_for_reads_begun_after_it(
    tmp_path: Path,
) -> None:
    """An append whose batch does not fit the map grows it once no transaction of the
    process is active. A read begun while the growth waited went ahead of it, so threads
    whose reads overlap (a web application's) kept it waiting: with one thread reading in
    a loop, an append of 0.04 s took 28 s, with two it had not finished after 30 s, and
    every other append of the process waited behind it. A read begun after the growth
    asked now waits for it."""
    events = g.mixed_events(random.Random(5), piths=20, per_pith=15)
    lines = [g.encoded(e) for e in events]
    store = Store.open(tmp_path / "s", map_size=256 << 10)
    store.append(lines[:40], g.KEYRING)
    shared = store._env
    first_size = shared.env.info()["map_size"]

    growth_waits = threading.Event()
    writer: list[threading.Thread] = []
    cond = shared.gate._cond
    wait = cond.wait

    def spied_wait(timeout: float | None = None) -> bool:
        if writer and threading.current_thread() is writer[0]:
            growth_waits.set()  # the appending thread waits for the reads to end
        return wait(timeout)

    cond.wait = spied_wait  # type: ignore[method-assign]

    first_in, first_out = threading.Event(), threading.Event()

    def first_read(txn: Any, dbs: dict[str, Any]) -> None:
        first_in.set()
        first_out.wait(WAIT * 5)

    seen_sizes: list[int] = []
    second_in = threading.Event()

    def second_read(txn: Any, dbs: dict[str, Any]) -> None:
        seen_sizes.append(shared.env.info()["map_size"])
        second_in.set()

    failures: list[BaseException] = []

    def run(job: Any) -> None:
        try:
            job()
        except BaseException as exc:  # pragma: no cover - reported below
            failures.append(exc)

    reading = threading.Thread(target=run, args=(lambda: store._read(first_read),))
    reading.start()
    assert first_in.wait(WAIT * 5)
    results: list[Any] = []
    writer.append(threading.Thread(target=run, args=(
        lambda: results.extend(store.append(lines[40:], g.KEYRING)),)))  # fmt: skip
    writer[0].start()
    assert growth_waits.wait(WAIT * 5), "the append never waited to grow the map"
    later = threading.Thread(target=run, args=(lambda: store._read(second_read),))
    later.start()
    second_in.wait(WAIT)  # before: it went in at once, beside the first read
    first_out.set()
    for thread in (reading, writer[0], later):
        thread.join(WAIT * 30)
        assert not thread.is_alive()
    del cond.wait
    assert failures == []
    assert seen_sizes and seen_sizes[0] > first_size  # it read after the growth
    assert len(results) == len(lines) - 40
    assert store.replay(g.KEYRING).ok
    store.close()
