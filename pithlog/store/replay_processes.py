"""Where :meth:`pithlog.store.Store.replay` does its work: which process checks the
structure (:mod:`pithlog.store.replay_structure`) and which the piths
(:mod:`pithlog.store.replay`) (``docs/store.md``, "Replay").

- ``jobs=1``: the chunks of piths in this process, as a pipeline; a large log has its
  signatures verified in helper processes and its structure pass run in a process of its
  own beside the piths.
- ``jobs`` > 1: the chunks in worker processes, each with the store open read-only, while
  this process checks the structure.
- ``jobs=None``: one worker per core for a large log whose signatures are verified, else
  ``jobs=1`` (:func:`replay_jobs`); the CLI may start the workers before it opens the store
  (:func:`early_workers`).

A helper or worker that dies costs time, not results: its work is done again here
(:class:`pithlog.errors.HelperLost`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import gc
import multiprocessing
import os
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from concurrent.futures.process import BrokenProcessPool
from typing import TYPE_CHECKING, Any, TypeVar

from pithlog.errors import HelperLost
from pithlog.parallel import (
    Pool,
    in_order,
    leave_interrupts_to_parent,
    threads_per_process,
    usable_cores,
    verifying_pool,
    worker_pool,
)
from pithlog.protocol.keys import Keyring, make_keyring
from pithlog.store import aliases, tree
from pithlog.store.environment import Work, acquire, release
from pithlog.store.environment_scratch import scratch_index
from pithlog.store.environment_walk import Found, Part, Walkers, walk_part
from pithlog.store.layout import Txn
from pithlog.store.replay import (
    PithOutcome,
    ReplayContext,
    Started,
    finish_chunk,
    make_chunks,
    replay_chunk,
    start_chunk,
)
from pithlog.store.replay_report import Discrepancy, Progress, ReplayReport
from pithlog.store.replay_structure import check_structure, replay_start

if TYPE_CHECKING:
    from pithlog.store.log import Store

T = TypeVar("T")

Read = Callable[[Work[T]], T]
"""A store's read transactions: ``read(work)`` runs ``work`` in one and returns its result."""

Chunk = list[tuple[str, list[bytes]]]
"""Piths with the copies each holds, as :func:`pithlog.store.replay.make_chunks` cuts them."""

STRUCTURE_PROCESS_MIN_COPIES = 20_000
"""From this many stored copies, a one-process replay runs its structure pass in a process
of its own beside the piths (about 0.35 s of work at this size, above the cost of starting
a process); smaller logs check their structure first, in the replaying process."""

POOL_MIN_COPIES = 5_000
"""From this many stored copies, a replay whose ``jobs`` is not given runs its piths in one
worker process per core (:func:`replay_jobs`); a smaller log is replayed in this process
(with helpers that verify, from :data:`VERIFY_PROCESS_MIN_PITHS` piths), where starting
the workers (0.2-0.3 s of CPU each: pithlog imported, the store opened) costs as much as
they save: on two cores, ``--verify`` of the registry bench's first 2,000 events took
about as long either way, of its first 5,000 1.1-1.25x less time in two workers."""

VERIFY_PROCESS_MIN_PITHS = 100
"""A one-process replay of fewer piths verifies in threads: starting a verifying process
costs about as much as verifying a few thousand signatures."""


COPIES_PER_WORKER = POOL_MIN_COPIES // 2
"""Stored copies per worker process, at least, when ``jobs`` is not given: the share at
which two workers paid for their start above (so a log of 6,000 copies gets two workers
on a machine of 64 cores, not 64 interpreters that each start (0.2-0.3 s of CPU) for
about 100 copies of work)."""


def replay_jobs(jobs: int | None, copies: int, signatures: bool) -> int:
    """The processes a replay runs its piths in: ``jobs`` when given; otherwise, when
    ``signatures`` are verified, one per usable core
    (:func:`pithlog.parallel.usable_cores`) for a log of at least :data:`POOL_MIN_COPIES`
    copies, but no more than one per :data:`COPIES_PER_WORKER`, and this process alone for
    a smaller log or for a replay on cached verdicts (a third of the work per event, which
    a one-process replay already shares with its structure process: workers gained
    nothing measurable over 40,000 registry events on two cores) (``docs/store.md``,
    "Replay")."""
    if jobs is not None:
        return jobs
    if not signatures or copies < POOL_MIN_COPIES:
        return 1
    return max(1, min(usable_cores(), copies // COPIES_PER_WORKER))


EARLY_MIN_BYTES = POOL_MIN_COPIES * 1024
"""A data file of at least this size (a stored copy takes well over 1 KiB of it) has its
replay's workers started before the store is opened (:func:`early_workers`)."""


@dataclasses.dataclass
class EarlyWorkers:
    """Replay's worker processes, started before the store was opened and walked
    (:func:`early_workers`). Meanwhile they may take parts of that walk (:meth:`walk`,
    which reads the data file without LMDB); each opens the store only with its first
    chunk of piths, with the setup :meth:`start` queued once the walk has passed (the
    arguments of :func:`_worker_init`)."""

    pool: Pool
    setups: Any
    """A ``multiprocessing`` queue: one setup per process, taken with its first chunk."""
    processes: int
    sent: bool = False

    def start(self, setup: tuple[Any, ...]) -> None:
        """Queue the setup for every process, once (a worker that replay does not use
        takes none, and ends with the pool)."""
        if not self.sent:
            self.sent = True
            for _ in range(self.processes):
                self.setups.put(setup)

    def walkers(self) -> Walkers:
        """These processes as takers of the page walk's parts."""
        return Walkers(self.processes, self.walk)

    def walk(self, parts: list[Part]) -> list[Found | None] | None:
        """Each part of the page walk by one of the processes; ``None`` when one was lost
        or failed (the walk is then done whole in this process, which reports why)."""
        try:
            futures = [self.pool.submit(walk_part, part) for part in parts]
            return [future.result() for future in futures]
        except BrokenProcessPool:
            HelperLost.warn()
            return None
        except Exception:  # the whole walk, here, meets it again and says what it is
            return None


def early_workers(
    stack: contextlib.ExitStack, path: str, jobs: int | None
) -> EarlyWorkers | None:
    """Start the worker processes of a replay in ``jobs`` processes (``None``: one per core)
    now, before the store at ``path`` is opened, when a replay will likely run in more
    than one (a data file of :data:`EARLY_MIN_BYTES` or more, or ``jobs`` > 1 asked for):
    a ``--verify`` open walks every page of the data file first (about 0.4 s of CPU per
    100,000 registry copies), and the workers take its parts (:meth:`EarlyWorkers.walk`,
    which reads the file without LMDB), their start (a new interpreter importing pithlog,
    0.2-0.3 s of CPU each) having run meanwhile instead of after the walk. No worker reads the store
    through LMDB before :meth:`EarlyWorkers.start`, which replay calls once the walk has
    passed (the walk is there so that no damaged page is read through LMDB's map). Closed
    with ``stack``."""
    try:
        size = os.stat(os.path.join(path, "data.mdb")).st_size
    except OSError:
        return None  # opening the store will say what is wrong
    if jobs is None and size < EARLY_MIN_BYTES:
        return None
    # without jobs, replay_jobs' rule on the most copies the file can hold (a stored copy
    # takes well over 1 KiB of it); replay then runs in these processes (_replay_pool)
    processes = jobs if jobs is not None else replay_jobs(None, size // 1024, True)
    if processes <= 1:
        return None
    setups = multiprocessing.get_context("spawn").SimpleQueue()
    pool = worker_pool(stack, processes, _worker_wait, (setups,))
    early = EarlyWorkers(pool, setups, processes)
    for _ in range(processes):
        pool.submit(_ready)  # a pool starts a process per task sent, up to its size
    return early


def replay(
    store: Store,
    keyring: Keyring,
    verify: bool,
    jobs: int | None,
    progress: Progress | None,
    early: EarlyWorkers | None = None,
) -> ReplayReport:
    """:meth:`Store.replay` (whose docstring says what it checks)."""
    # One snapshot names what the report speaks of: the piths, the keyring the states were
    # reduced under, and the last seq. The passes after it read in transactions of their
    # own, and respect it (docs/store.md, "Replay beside appends").
    start = store._read(replay_start)
    piths = start.piths
    report = ReplayReport(keyring.digest, start.keyring_digest,
                          rekey_target=start.rekey_target)
    # under another keyring than the store's, every copy is checked, signatures included
    jobs = replay_jobs(jobs, start.copies, verify or not report.same_keyring)
    ctx = ReplayContext(keyring, report.same_keyring, verify, report.stored_keyring_digest,
                        high_water=start.high_water)  # fmt: skip
    chunks = make_chunks(piths, start.foreign, jobs)
    found: list[Discrepancy] = []  # pith by pith, in pith order

    with contextlib.ExitStack() as stack:
        if jobs > 1:
            # The workers start on the piths while this process checks the structure,
            # so the structure pass is not a serial prefix of the whole replay.
            outcomes = _replay_pool(store, stack, chunks, ctx, jobs, early)
            structure = store._structure(stack, piths, apart=False)
        else:
            # One pool for the command: the verifying helpers, when there are any, also
            # take the structure pass (one task among their shares of signatures).
            pool = _verifying_helpers(stack, chunks, ctx)
            if pool is not None:
                ctx = dataclasses.replace(ctx, verifier=pool.verify)
            structure = store._structure(stack, piths, apart=True, pool=pool)
            outcomes = _replay_here(store._read, chunks, ctx)
        total = len(piths)
        done = 0
        if progress is not None:
            progress(0, total)
        for outcome in outcomes:
            for _pith, pith_found, events, copies in outcome:
                found.extend(d for d in pith_found if d.kind != "note")
                report.notes.extend(d for d in pith_found if d.kind == "note")
                report.events += events
                report.copies += copies
                report.piths += 1
            done += len(outcome)
            if progress is not None:
                progress(done, total)
        try:
            structural = structure.result()
        except BrokenProcessPool:
            HelperLost.warn()
            structural = _structure_here(store._read, piths)
        report.discrepancies = structural + found
    return report


def structure(
    store: Store,
    stack: contextlib.ExitStack,
    piths: list[str],
    apart: bool,
    pool: Pool | None = None,
) -> Future[list[Discrepancy]]:
    """Replay's structure pass. With ``apart``, on a machine with another core and a log
    of at least :data:`STRUCTURE_PROCESS_MIN_COPIES` copies, it is started in another
    process (which reads the store in its own read transaction, as each chunk of piths
    does in its own): one of ``pool``'s, the command's pool, or else a pool of one, the
    command's only one; otherwise it runs here, now, and the future is done."""
    if apart and usable_cores() > 1:
        copies = store._read(lambda txn, dbs: txn.stat(dbs["seq"])["entries"])
        if copies >= STRUCTURE_PROCESS_MIN_COPIES:
            if pool is None:
                pool = worker_pool(stack, 1, leave_interrupts_to_parent, ())
            return pool.submit(_structure_at, store.path, piths)
    done: Future[list[Discrepancy]] = Future()
    done.set_result(_structure_here(store._read, piths))
    return done


def _verifying_helpers(
    stack: contextlib.ExitStack, chunks: list[Chunk], ctx: ReplayContext
) -> Pool | None:
    """``jobs=1``: helper processes that verify signatures (one per other core), when
    signatures are to be verified and the machine has another core: they verify while this
    process reads the next chunk and puts it through the door and checks, and judges the
    chunk before; threads could not overlap that Python work (a verifying thread waits for
    the GIL after each signature)."""
    cores = usable_cores()
    large = sum(len(chunk) for chunk in chunks) >= VERIFY_PROCESS_MIN_PITHS
    if (ctx.verify or not ctx.same_keyring) and cores > 1 and len(chunks) > 1 and large:
        return verifying_pool(stack)
    return None


def _replay_here(
    read: Read[Any], chunks: list[Chunk], ctx: ReplayContext
) -> Iterator[list[PithOutcome]]:
    """``jobs=1``: the chunks in this process, as a pipeline (signatures verified by
    ``ctx.verifier``: :func:`_verifying_helpers`)."""
    previous: Started | None = None
    for chunk in chunks:
        started: Started = read(functools.partial(start_chunk, chunk=chunk, ctx=ctx))
        if previous is not None:
            yield read(functools.partial(finish_chunk, started=previous, ctx=ctx))
        previous = started
    if previous is not None:
        yield read(functools.partial(finish_chunk, started=previous, ctx=ctx))


def _replay_pool(
    store: Store,
    stack: contextlib.ExitStack,
    chunks: list[Chunk],
    ctx: ReplayContext,
    jobs: int,
    early: EarlyWorkers | None = None,
) -> Iterator[list[PithOutcome]]:
    """Hand ``chunks`` to worker processes now (``early``'s when they were started: as
    many as ``jobs`` asked, or :func:`replay_jobs` judged from the data file's size); their
    outcomes, in order."""
    if len(chunks) <= 1:
        return iter([_run_chunk(store._read, chunk, ctx) for chunk in chunks])
    entries = [key.entry() for key in ctx.keyring.values()]
    setup = (store.path, entries, ctx.same_keyring, ctx.verify, ctx.stored_kd,
             threads_per_process(jobs), ctx.high_water)  # fmt: skip
    if early is not None and not early.sent:
        early.start(setup)
        pool = early.pool
    else:
        pool = worker_pool(stack, min(jobs, len(chunks)), _worker_init, setup)
    return in_order(
        pool, _worker_run, functools.partial(_run_chunk, store._read, ctx=ctx), chunks
    )


# --- the structure pass and the worker processes ------------------------------------------


def _structure_here(read: Read[Any], piths: list[str]) -> list[Discrepancy]:
    """Replay's structure pass (:func:`pithlog.store.replay_structure.check_structure`, then
    the Merkle tree) over the store ``read`` reads; ``piths``: the piths replay goes
    through."""
    found: list[Discrepancy] = []
    replayed = set(piths)
    read(lambda txn, dbs: check_structure(txn, dbs, found, replayed, scratch_index))
    read(lambda txn, dbs: tree.check_merkle(txn, dbs, found))
    read(lambda txn, dbs: aliases.check_aliases(txn, dbs, found))
    return found


def _structure_at(path: str, piths: list[str]) -> list[Discrepancy]:
    """:func:`_structure_here` in a process of its own (:func:`structure`)."""
    gc.disable()  # see pithlog.cli: nothing cyclic is held
    shared = acquire(path, create=False, readonly=True)
    try:
        return _structure_here(shared.read, piths)
    finally:
        release(shared)


_WORKER: dict[str, Any] = {}


def _worker_init(
    path: str,
    entries: list[dict[str, Any]],
    same: bool,
    verify: bool,
    stored_kd: str | None,
    threads: int | None,
    high_water: int | None = None,
) -> None:
    leave_interrupts_to_parent()
    gc.disable()  # a worker holds only acyclic decoded JSON: see pithlog.cli
    # the store, read-only, for the life of the worker
    _WORKER["read"] = acquire(path, create=False, readonly=True).read
    _WORKER["ctx"] = ReplayContext(make_keyring(entries), same, verify, stored_kd, threads,
                                   high_water=high_water)  # fmt: skip


def _worker_wait(setups: Any) -> None:
    """An early worker's initializer (:func:`early_workers`): its setup comes later, through
    ``setups``, with its first chunk (:func:`_worker_run`)."""
    leave_interrupts_to_parent()
    _WORKER["setups"] = setups


def _ready() -> None:
    """The task that makes a pool start a process (:func:`early_workers`)."""


def _run_chunk(read: Read[Any], chunk: Chunk, ctx: ReplayContext) -> list[PithOutcome]:
    def work(txn: Txn, dbs: dict[str, Any]) -> list[PithOutcome]:
        return replay_chunk(txn, dbs, chunk, ctx)

    result: list[PithOutcome] = read(work)
    return result


def _worker_run(chunk: Chunk) -> list[PithOutcome]:
    if "read" not in _WORKER:  # an early worker: its setup was queued after the walk
        _worker_init(*_WORKER["setups"].get())
    return _run_chunk(_WORKER["read"], chunk, _WORKER["ctx"])
