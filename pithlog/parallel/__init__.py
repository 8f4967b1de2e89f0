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

``pithlog reduce`` without ``--jobs`` (:func:`reduce_lines`) instead hands the raw lines
to helper processes as they are read, which put them through the door and checks 1-12; this
process folds step 0 from what they say, and the helpers reduce the piths after it.

No files and no clock here: the caller passes envelopes that passed the door (or raw lines,
each with a tag of its own) and gets back ``(pith_number, state bytes | Pending)`` in pith
order. The pool of a command and the verifiers live in :mod:`pithlog.parallel.pool` (their
names are re-exported here).
"""

from __future__ import annotations

import collections
import contextlib
import gc
import hashlib
import itertools
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from concurrent.futures.process import BrokenProcessPool
from typing import Any, TypeVar

from pithlog.errors import DoorError, HelperLost
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
from pithlog.protocol.events import Envelope, parse_envelope, readmit
from pithlog.protocol.keys import Keyring, make_keyring
from pithlog.protocol.reduce import (
    Kept,
    LineJudgement,
    Pending,
    Reduction,
    StepZero,
    collapse_streamed,
    judge_lines,
    reduce_events,
    reduce_kept,
)
from pithlog.protocol.state import render_reduction

__all__ = [
    "PART_EVENTS", "PROCESS_CHUNK", "STREAM_MIN", "TAIL_EVENTS", "Pool", "Result", "admitted",
    "in_order",
    "in_threads", "leave_interrupts_to_parent", "reduce_lines", "reduce_rendered", "split_by_pith",
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
        parts = _tail_parts(collapse_streamed(itertools.chain(head, stream), keyring, verifier))
        if executor is None:
            for part in parts:
                yield from _reduce_kept_part(part)
            return
        for results in in_order(executor, _reduce_kept_part, _reduce_kept_part, parts):
            yield from results


T = TypeVar("T")

JUDGE_PART = 128
"""Lines per part that :func:`reduce_lines` hands to a helper: large enough that sending
a part costs little beside judging it, small enough that the helpers share the input
evenly and the last part is not long alone."""

AHEAD = 4
"""Parts per helper that :func:`reduce_lines` keeps handed out before it folds the oldest:
enough that no helper waits for the next while this process folds, few enough that the
lines held in flight stay a few thousand."""


def reduce_lines(
    lines: Iterable[tuple[T, bytes | DoorError]],
    keyring: Keyring,
    refused: Callable[[T, DoorError], None],
) -> Iterator[Result]:
    """:func:`reduce_rendered` (``jobs`` = 1) of raw lines, each with a tag of the caller's
    (its file and line number): ``refused(tag, error)`` for each line the door refuses, in
    the lines' order, before the first result. A line the caller refused already (one too
    long to read whole) comes as its error, and is said in its place among the others.

    An input of :data:`STREAM_MIN` lines or more, on a machine with more than one core,
    goes to helper processes in parts of :data:`JUDGE_PART` lines as it is read: each helper
    puts its lines through the door and runs checks 1-12 with their signatures
    (:func:`pithlog.protocol.reduce.judge_lines`), and this process only folds what they
    say into step 0 (:class:`pithlog.protocol.reduce.StepZero`), then hands the piths back
    to the same helpers to be reduced and rendered. With the door here instead, this process
    kept about 0.45 of a verification's time per event to itself, work that the helpers now
    share. A line that repeats an earlier admitted one is not sent again (this process
    keeps the SHA-256 of each distinct admitted line until step 0 ends, about 100 bytes a
    line, beside the kept copies themselves); a refused line is forgotten once no line
    in flight can repeat it (:func:`_judged_parts`). A part whose helper ended
    abruptly is judged here, with the same results (:class:`pithlog.errors.HelperLost`).
    A smaller input goes through the door here and on to :func:`reduce_rendered`.
    """
    stream = iter(lines)
    head = list(itertools.islice(stream, STREAM_MIN))
    if len(head) < STREAM_MIN or usable_cores() == 1:
        yield from _reduce_here(admitted(itertools.chain(head, stream), refused), keyring)
        return
    with contextlib.ExitStack() as stack:
        entries = [key.entry() for key in keyring.values()]
        pool = worker_pool(stack, verifying_processes(every_core=True), _judge_init, (entries,))
        zero = StepZero()
        for part, judged in _judged_parts(pool, itertools.chain(head, stream), keyring):
            for (tag, line), judgement in zip(part, judged, strict=True):
                if isinstance(judgement, DoorError):
                    refused(tag, judgement)
                elif judgement is not _ADMITTED:
                    assert isinstance(line, bytes)
                    event_id, pith, encoded, reason = judgement
                    zero.add(event_id, pith, line if encoded is None else encoded, reason)
        parts = _tail_parts(zero.by_pith())
        for results in in_order(pool, _reduce_kept_part, _reduce_kept_part, parts):
            yield from results


_Part = list[tuple[T, bytes | DoorError]]
"""Lines as :func:`reduce_lines` takes them, each with its tag."""

_ADMITTED = ("", "", None, None)
"""The judgement of a line that repeats an earlier admitted one: step 0 has its copy."""


def _judged_parts(
    pool: Pool, lines: Iterable[tuple[T, bytes | DoorError]], keyring: Keyring
) -> Iterator[tuple[list[tuple[T, bytes | DoorError]], list[LineJudgement]]]:
    """The lines in parts, each with its judgements, in order: at most
    :data:`AHEAD` parts per helper handed out at a time. A line equal to one before it
    is kept back and given that line's judgement (its refusal, or :data:`_ADMITTED`); a
    refusal passed in keeps its place.

    A refused line is remembered only while a line handed out may repeat it: once judged,
    its SHA-256 is forgotten (a later copy is sent and refused again, the same way:
    :func:`judge_lines` is a pure function), and its refusal once every part that may
    name it is received. Step 0 keeps nothing of a refused line, and an input of millions
    of distinct junk lines (41 MB of ``{"n":N}``) held a refusal and a hash for each to
    the end: 2.2 GB, against 40 MB with the door here."""
    first: dict[bytes, int] = {}  # SHA-256 of each line handed out -> its place
    refusals: dict[int, DoorError] = {}  # the place of a refused line -> its refusal
    # (lines given places so far when the line at place was refused, place): its refusal is
    # named by none of the lines from then on, so it goes once they are all received
    forget: collections.deque[tuple[int, int]] = collections.deque()
    assigned = 0  # lines given a place so far
    # a part: its lines, the place of each (a repeated line: the place of its first; -1: a
    # refusal passed in), where it starts, and the judgements of its first occurrences
    sent: collections.deque[tuple[_Part[T], list[int], int, Future[Any] | None]]
    sent = collections.deque()
    ahead = AHEAD * pool.processes

    def fresh(part: _Part[T], places: list[int], at: int) -> list[bytes]:
        return [line for i, ((_, line), place) in enumerate(zip(part, places, strict=True))
                if place == at + i and isinstance(line, bytes)]  # fmt: skip

    def send(part: _Part[T], places: list[int], at: int) -> None:
        future: Future[Any] | None
        try:
            future = pool.submit(_judge_run, fresh(part, places, at))
        except BrokenProcessPool:  # a helper ended before: judged where it is received
            future = None
        sent.append((part, places, at, future))

    def receive() -> tuple[_Part[T], list[LineJudgement]]:
        part, places, at, future = sent.popleft()
        judged: list[LineJudgement] | None = None
        if future is not None:
            with contextlib.suppress(BrokenProcessPool):
                judged = future.result()
        if judged is None:
            HelperLost.warn()
            judged = judge_lines(fresh(part, places, at), keyring)
        out: list[LineJudgement] = []
        it = iter(judged)
        for i, ((_, line), place) in enumerate(zip(part, places, strict=True)):
            if isinstance(line, DoorError):
                out.append(line)
            elif place == at + i:
                judgement = next(it)
                if isinstance(judgement, DoorError):
                    assert isinstance(line, bytes)
                    first.pop(hashlib.sha256(line).digest(), None)
                    refusals[place] = judgement
                    forget.append((assigned, place))
                out.append(judgement)
            else:  # its first occurrence came before: in this part, or one received
                out.append(refusals.get(place, _ADMITTED))
        while forget and forget[0][0] <= at + len(part):
            del refusals[forget.popleft()[1]]
        return part, out

    part: _Part[T] = []
    places: list[int] = []
    at = 0
    for count, (tag, line) in enumerate(lines):
        part.append((tag, line))
        places.append(-1 if isinstance(line, DoorError) else
                      first.setdefault(hashlib.sha256(line).digest(), count))  # fmt: skip
        assigned = count + 1
        if len(part) == JUDGE_PART:
            send(part, places, at)
            part, places, at = [], [], count + 1
            while len(sent) > ahead:
                yield receive()
    if part:
        send(part, places, at)
    while sent:
        yield receive()


def admitted(
    lines: Iterable[tuple[T, bytes | DoorError]], refused: Callable[[T, DoorError], None]
) -> Iterator[Envelope]:
    """The envelopes of tagged lines that pass the door here, ``refused(tag, error)`` for
    the others (a line refused before, as its error, included), in the lines' order."""
    for tag, line in lines:
        if isinstance(line, DoorError):
            refused(tag, line)
            continue
        try:
            yield parse_envelope(line)
        except DoorError as exc:
            refused(tag, exc)


def _tail_parts(by_pith: dict[str, Kept]) -> list[list[tuple[str, Kept]]]:
    """The piths after step 0, in order, in parts of about :data:`TAIL_EVENTS` events."""
    parts: list[list[tuple[str, Kept]]] = [[]]
    held = 0
    for pith in sorted(by_pith):
        if held >= TAIL_EVENTS:
            parts.append([])
            held = 0
        kept = by_pith.pop(pith)
        parts[-1].append((pith, kept))
        held += len(kept)
    return parts


def _judge_init(entries: list[dict[str, Any]]) -> None:
    leave_interrupts_to_parent()
    gc.disable()  # a helper holds only acyclic decoded JSON: see pithlog.cli
    _WORKER["keyring"] = make_keyring(entries)


def _judge_run(lines: list[bytes]) -> list[LineJudgement]:
    return judge_lines(lines, _WORKER["keyring"])


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
