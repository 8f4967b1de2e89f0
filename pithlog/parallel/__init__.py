"""Reduce an input across processes, split by pith (``pithlog reduce --jobs N``).

The reducer is a function of the set of envelopes (spec 7), and steps 1-4 look at one
pith at a time, so the piths of an input can be reduced apart. Step 0 is the one step that
crosses piths: the copies of one ``event_id`` may claim different piths, and the copy that
step 0 prefers decides which pith the event belongs to. So each part carries, besides its
piths, every copy of every ``event_id`` that has a copy claiming one of them; step 0 in the
worker then picks the same copy as step 0 over the whole input (``prefer`` is a total
order), and the worker keeps the piths of its part only. The parts are reduced in pith
order and their results read back in that order: the output is the output of ``--jobs 1``,
byte for byte.

No files and no clock here: the caller passes envelopes that passed the door and gets back
``(pith_number, state bytes | Pending)`` in pith order. The pool of a command and the
verifiers live in :mod:`pithlog.parallel.pool` (their names are re-exported here).
"""

from __future__ import annotations

import contextlib
import gc
import itertools
from collections.abc import Iterable, Iterator
from typing import Any

from pithlog.parallel.cores import usable_cores
from pithlog.parallel.pool import (  # the pool's names, as pithlog.parallel.X
    PROCESS_CHUNK,
    Pool,
    in_order,
    in_threads,
    leave_interrupts_to_parent,
    verifying_pool,
    verifying_processes,
    worker_pool,
)
from pithlog.protocol.events import Envelope, readmit
from pithlog.protocol.keys import Keyring, make_keyring
from pithlog.protocol.reduce import (
    Kept,
    Pending,
    Reduction,
    collapse_streamed,
    reduce_events,
    reduce_kept,
)
from pithlog.protocol.state import render_reduction

__all__ = [
    "PART_EVENTS", "PROCESS_CHUNK", "STREAM_MIN", "TAIL_EVENTS", "Pool", "Result", "in_order",
    "in_threads", "leave_interrupts_to_parent", "reduce_rendered", "split_by_pith",
    "threads_per_process", "usable_cores", "verifying_pool", "verifying_processes",
    "worker_pool",
]  # fmt: skip

Result = tuple[str, bytes | Pending]
"""A pith and its state document (display serialization), or :class:`Pending`."""

PART_EVENTS = 4000
"""Envelopes per part, at most (a part holds at least one pith, whatever its size)."""


def reduce_rendered(
    envelopes: Iterable[Envelope], keyring: Keyring, jobs: int = 1
) -> Iterator[Result]:
    """Steps 0-5 for every pith of ``envelopes``, in pith order; ``jobs`` processes.

    With ``jobs`` = 1 everything runs here; otherwise the piths are split into parts
    reduced by ``jobs`` worker processes (each verifies its signatures inline when the
    processes fill the machine's cores). Same results either way.
    """
    if jobs <= 1:
        yield from _reduce_here(envelopes, keyring)
        return
    parts = split_by_pith(envelopes, max(1, jobs) * 4)
    if len(parts) <= 1:  # one part is not worth a process
        for piths, blobs in parts:
            yield from _reduce_part(piths, blobs, keyring, None)
        return
    entries = [key.entry() for key in keyring.values()]
    threads = threads_per_process(jobs)

    def here(part: tuple[list[str], list[bytes]]) -> list[Result]:
        return _reduce_part(*part, keyring, threads)

    with contextlib.ExitStack() as stack:
        pool = worker_pool(stack, min(jobs, len(parts)), _worker_init, (entries, threads))
        for results in in_order(pool, _worker_run, here, parts):
            yield from results


def _reduce_here(envelopes: Iterable[Envelope], keyring: Keyring) -> Iterator[Result]:
    """``jobs`` = 1, holding the input as JCS bytes
    (:func:`pithlog.protocol.reduce.collapse_streamed`).

    An input of :data:`STREAM_MIN` envelopes or more, on a machine with more than one core,
    has its signatures verified in helper processes while it is still being read, and then
    its piths reduced and rendered by the same helpers, in parts of about
    :data:`TAIL_EVENTS` events (step 0 is over: this process alone would leave the other
    cores idle). A smaller input verifies in threads and is reduced here.
    """
    stream = iter(envelopes)
    head = list(itertools.islice(stream, STREAM_MIN))
    with contextlib.ExitStack() as stack:
        executor = None
        if len(head) == STREAM_MIN and usable_cores() > 1:
            executor = verifying_pool(stack, every_core=True)
        verifier = executor.verify if executor is not None else in_threads()
        by_pith = collapse_streamed(itertools.chain(head, stream), keyring, verifier)
        parts: list[list[tuple[str, Kept]]] = [[]]
        held = 0
        for pith in sorted(by_pith):
            if held >= TAIL_EVENTS:
                parts.append([])
                held = 0
            kept = by_pith.pop(pith)
            parts[-1].append((pith, kept))
            held += len(kept)
        if executor is None:
            for part in parts:
                yield from _reduce_kept_part(part)
            return
        for results in in_order(executor, _reduce_kept_part, _reduce_kept_part, parts):
            yield from results


def _reduce_kept_part(part: list[tuple[str, Kept]]) -> list[Result]:
    """Steps 1-5 for the piths of ``part`` (what a helper runs after step 0)."""
    return [(pith, rendered(reduce_kept(pith, kept))) for pith, kept in part]


def rendered(result: Reduction | Pending) -> bytes | Pending:
    """Step 5: a reduction's state document (display serialization); a pending pith has
    none."""
    return render_reduction(result) if isinstance(result, Reduction) else result


TAIL_EVENTS = 2000
"""Events per part of the piths reduced by the helpers after step 0: large enough that
sending a part costs little beside reducing it, small enough that the parts spread."""


STREAM_MIN = 2000
"""Envelopes from which a one-process reduction verifies in helper processes (a process
start costs about as much as verifying a few thousand signatures)."""


def split_by_pith(
    envelopes: Iterable[Envelope], at_least: int
) -> list[tuple[list[str], list[bytes]]]:
    """The input as parts ``(piths, copies)``, in pith order: about ``at_least`` parts (or
    fewer when there are fewer piths), none above :data:`PART_EVENTS` copies unless one pith
    alone is. ``copies`` holds each distinct copy (JCS bytes) of every ``event_id`` that has
    a copy claiming one of ``piths``, so step 0 over a part agrees with step 0 over all."""
    copies: dict[str, dict[bytes, str]] = {}
    for envelope in envelopes:
        copies.setdefault(envelope.event_id, {})[envelope.encoded] = envelope.pith_number
    events_of: dict[str, list[str]] = {}
    for event_id, held in copies.items():
        for pith in set(held.values()):
            events_of.setdefault(pith, []).append(event_id)
    total = sum(len(held) for held in copies.values())
    size = max(1, min(PART_EVENTS, -(-total // max(1, at_least))))
    parts: list[tuple[list[str], list[bytes]]] = []
    piths: list[str] = []
    ids: dict[str, None] = {}
    held_copies = 0
    for pith in sorted(events_of):
        piths.append(pith)
        for event_id in events_of[pith]:
            if event_id not in ids:
                ids[event_id] = None
                held_copies += len(copies[event_id])
        if held_copies >= size:
            parts.append((piths, [blob for e in ids for blob in copies[e]]))
            piths, ids, held_copies = [], {}, 0
    if piths:
        parts.append((piths, [blob for e in ids for blob in copies[e]]))
    return parts


def threads_per_process(jobs: int) -> int | None:
    """Verification threads in each of ``jobs`` processes (:func:`in_threads`): when the
    processes already fill the cores, a thread more per process only adds switching, so
    each verifies inline; otherwise the default."""
    return 1 if jobs >= usable_cores() else None


def _reduce_part(
    piths: list[str], blobs: list[bytes], keyring: Keyring, threads: int | None
) -> list[Result]:
    # The copies are the JCS bytes of envelopes that passed the door in the parent, which
    # reported what it refused: decoding them again is enough.
    envelopes = [readmit(blob) for blob in blobs]
    reduced = reduce_events(envelopes, keyring, only=piths, verifier=in_threads(threads))
    return [(pith, rendered(result)) for pith, result in reduced.items()]


_WORKER: dict[str, Any] = {}


def _worker_init(entries: list[dict[str, Any]], threads: int | None) -> None:
    leave_interrupts_to_parent()
    gc.disable()  # a worker holds only acyclic decoded JSON: see pithlog.cli
    _WORKER["keyring"] = make_keyring(entries)
    _WORKER["threads"] = threads


def _worker_run(part: tuple[list[str], list[bytes]]) -> list[Result]:
    piths, blobs = part
    return _reduce_part(piths, blobs, _WORKER["keyring"], _WORKER["threads"])
