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
``(pith_number, state bytes | Pending)`` in pith order.
"""

from __future__ import annotations

import collections
import contextlib
import gc
import itertools
import multiprocessing
import os
import signal
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from types import TracebackType
from typing import Any, ParamSpec, TypeVar

from pithlog.errors import HelperLost
from pithlog.protocol.checks import settled
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
        if len(head) == STREAM_MIN and (os.cpu_count() or 1) > 1:
            executor = verifying_pool(stack, every_core=True)
        by_pith = collapse_streamed(itertools.chain(head, stream), keyring, executor=executor)
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


def verifying_pool(stack: contextlib.ExitStack, every_core: bool = False) -> Executor:
    """A pool of :func:`verifying_processes` helpers, closed with ``stack``
    (:func:`worker_pool`)."""
    return worker_pool(stack, verifying_processes(every_core), leave_interrupts_to_parent, ())


T = TypeVar("T")
R = TypeVar("R")


def in_order(
    executor: Executor, remote: Callable[[T], R], here: Callable[[T], R], items: list[T]
) -> Iterator[R]:
    """``remote(item)`` of each item on ``executor``'s processes, all sent now, the results
    in the items' order. An item whose process ended abruptly (the pool is then broken,
    and so is every item it still held) is done by ``here(item)`` in this process: the
    work is pure, so the results are the same (:class:`~pithlog.errors.HelperLost`)."""
    # Sent here, not at the first result: a caller may do other work meanwhile (replay's
    # structure pass while the workers take the piths).
    sent: collections.deque[tuple[T, Future[R] | None]] = collections.deque()
    for item in items:
        try:
            sent.append((item, executor.submit(remote, item)))
        except BrokenProcessPool:
            sent.append((item, None))
    return _results(sent, executor, here)


def _results(
    sent: collections.deque[tuple[T, Future[R] | None]], executor: Executor,
    here: Callable[[T], R],
) -> Iterator[R]:  # fmt: skip
    """The results of :func:`in_order`, in order, each future let go once its result is
    handed out (a reduction's states are not all held to the end)."""
    while sent:
        item, future = sent.popleft()
        if future is not None:
            try:
                result = settled(future, executor)
            except BrokenProcessPool:
                future = None
        if future is None:
            HelperLost.warn()
            result = here(item)
        yield result


def worker_pool(
    stack: contextlib.ExitStack,
    processes: int,
    initializer: Callable[..., None],
    initargs: tuple[Any, ...],
) -> ProcessPoolExecutor:
    """``processes`` workers (``spawn``) for :func:`in_order`, each set up by ``initializer``;
    closed with ``stack``. A concurrent.futures pool rather than ``multiprocessing.Pool``:
    a ``Pool`` whose worker is killed waits forever for the task it held, where this pool
    reports it broken. Leaving ``stack`` cancels the tasks not started; on an exception (an
    interrupt), or when the pool broke, it also stops the workers at once rather than let
    them finish their tasks (a broken pool may not have stopped them all itself)."""
    pool = _Pool(
        processes,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=initializer,
        initargs=initargs,
    )

    def leave(kind: type[BaseException] | None, exc: BaseException | None,
              tb: TracebackType | None) -> None:  # fmt: skip
        if kind is not None or getattr(pool, "_broken", False):
            _stop_workers(pool)
        pool.shutdown(wait=True, cancel_futures=True)

    stack.push(leave)
    return pool


P = ParamSpec("P")


class _Pool(ProcessPoolExecutor):
    """A process pool whose helpers start with Ctrl-C and SIGTERM blocked: it starts them
    in :meth:`submit`, as it needs them (the initializer must be
    :func:`leave_interrupts_to_parent` or call it)."""

    def submit(self, fn: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> Future[R]:
        with _stopping_signals_blocked():
            return super().submit(fn, *args, **kwargs)


def _stop_workers(pool: ProcessPoolExecutor) -> None:
    """Kill the pool's processes and reap them: SIGKILL, since they ignore SIGTERM
    (``kill_workers`` from Python 3.14; before it, each of the processes the pool keeps)."""
    processes = list((pool._processes or {}).values())
    # Tasks still queued for the killed processes are dropped: a queue that waits, at
    # exit, for its last task to be written to processes that no longer read it would
    # keep pithlog from exiting.
    queue = getattr(pool, "_call_queue", None)  # concurrent.futures keeps it private
    if queue is not None:
        queue.cancel_join_thread()
    kill = getattr(pool, "kill_workers", None)
    if kill is not None:
        kill()
    else:
        for process in processes:
            process.kill()
    for process in processes:  # reaped before pithlog exits: none outlives the command
        process.join(5)


def verifying_processes(every_core: bool = False) -> int:
    """Helper processes that verify signatures beside a one-process pipeline: one per other
    core, or with ``every_core`` one per core. A reduction's own process only reads, parses
    and checks, and idles while the signatures are verified, so its helpers may take every
    core; an append or a replay also writes or compares, and a helper on every core only
    slows that process down (measured on 2 cores: reduce 0.88-0.99x the raw verify rate
    with one helper, 1.09-1.18x with two; append 0.66-0.70x with one, 0.63-0.66x with
    two)."""
    cores = os.cpu_count() or 1
    return cores if every_core else max(1, cores - 1)


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
    """Verification threads in each of ``jobs`` processes (:func:`check_many`): when the
    processes already fill the cores, a thread more per process only adds switching, so
    each verifies inline; otherwise the default."""
    return 1 if jobs >= (os.cpu_count() or 1) else None


def _reduce_part(
    piths: list[str], blobs: list[bytes], keyring: Keyring, threads: int | None
) -> list[Result]:
    # The copies are the JCS bytes of envelopes that passed the door in the parent, which
    # reported what it refused: decoding them again is enough.
    envelopes = [readmit(blob) for blob in blobs]
    reduced = reduce_events(envelopes, keyring, only=piths, threads=threads)
    return [(pith, rendered(result)) for pith, result in reduced.items()]


_STOPPING = (signal.SIGINT, signal.SIGTERM)
_HAVE_SIGMASK = hasattr(signal, "pthread_sigmask")


@contextlib.contextmanager
def _stopping_signals_blocked() -> Iterator[None]:
    """Block Ctrl-C and SIGTERM in this thread while it may start a helper: the helper is
    born with them blocked (a signal mask survives fork and exec) until
    :func:`leave_interrupts_to_parent` ignores them, so one that comes while it is still
    starting cannot kill it with a traceback. Here a signal that comes meanwhile is only
    delayed. (CPython starts its resource tracker the same way.)"""
    if not _HAVE_SIGMASK:
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, _STOPPING)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def leave_interrupts_to_parent() -> None:
    """In a helper or worker process: ignore Ctrl-C and SIGTERM, then unblock them (they
    were blocked from its birth: :func:`_stopping_signals_blocked`). A terminal sends
    Ctrl-C to every process of a command, and a service manager its SIGTERM; the process
    that started the helpers stops them (its pool's shutdown, :func:`_stop_workers`, or the
    end of their input if it dies), so none dies mid-task, printing a traceback of its own
    or leaving its work to be done again."""
    for signum in _STOPPING:
        signal.signal(signum, signal.SIG_IGN)
    if _HAVE_SIGMASK:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOPPING)


_WORKER: dict[str, Any] = {}


def _worker_init(entries: list[dict[str, Any]], threads: int | None) -> None:
    leave_interrupts_to_parent()
    gc.disable()  # a worker holds only acyclic decoded JSON: see pithlog.cli
    _WORKER["keyring"] = make_keyring(entries)
    _WORKER["threads"] = threads


def _worker_run(part: tuple[list[str], list[bytes]]) -> list[Result]:
    piths, blobs = part
    return _reduce_part(piths, blobs, _WORKER["keyring"], _WORKER["threads"])
