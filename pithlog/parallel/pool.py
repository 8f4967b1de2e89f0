"""The one process pool of a command, and the verifiers that say where a batch's Ed25519
verifications run (:data:`pithlog.protocol.checks.Verifier`).

Public API of :mod:`concurrent.futures` only, and nothing cancelled: before Python 3.12 a
pool that breaks while it still lists a cancelled task stops settling the tasks behind it
(CPython gh-107219). So a batch's verifications are shared out in fixed shares
(:meth:`Pool.verify`), and a pool left early stops its workers instead of cancelling their
tasks (:meth:`Pool.stop`). A worker ignores Ctrl-C, keeps SIGTERM's default action, and
ends when its parent ends (``docs/architecture.md``, "What pure means here").
"""

from __future__ import annotations

import collections
import contextlib
import functools
import itertools
import multiprocessing
import multiprocessing.connection
import os
import pickle
import shutil
import signal
import tempfile
import threading
import weakref
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from multiprocessing.connection import Connection
from types import TracebackType
from typing import Any, ParamSpec, TypeVar

from pithlog.errors import HelperLost
from pithlog.parallel import results_folder
from pithlog.parallel.cores import usable_cores
from pithlog.protocol.checks import SignatureCheck, Verifier, verify_batch


def verifying_pool(stack: contextlib.ExitStack, every_core: bool = False) -> Pool:
    """A pool of :func:`verifying_processes` helpers, closed with ``stack``
    (:func:`worker_pool`); its :meth:`Pool.verify` is the verifier to pass on."""
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
    return _results(sent, here)


def _results(
    sent: collections.deque[tuple[T, Future[R] | None]], here: Callable[[T], R]
) -> Iterator[R]:
    """The results of :func:`in_order`, in order, each future let go once its result is
    handed out (a reduction's states are not all held to the end)."""
    while sent:
        item, future = sent.popleft()
        if future is not None:
            try:
                result = future.result()
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
) -> Pool:
    """``processes`` workers (``spawn``) for :func:`in_order`, each set up by ``initializer``;
    closed with ``stack``: normally once their tasks are done; on an exception (an
    interrupt, a consumer that stopped reading) at once, each worker leaving its task
    (:meth:`Pool.stop`). A concurrent.futures pool rather than ``multiprocessing.Pool``:
    a ``Pool`` whose worker is killed waits forever for the task it held, where this pool
    reports it broken."""
    pool = Pool(processes, initializer, initargs)

    def leave(kind: type[BaseException] | None, exc: BaseException | None,
              tb: TracebackType | None) -> None:  # fmt: skip
        if kind is not None:
            pool.stop()
        pool.shutdown(wait=True)

    stack.push(leave)
    return pool


def _remove_here(pid: int, folder: str, reader: results_folder.Reader) -> None:
    """:func:`results_folder.remove`, in the process ``pid`` that made the pool only: the
    copy of a pool that a child made by fork() holds is its parent's, and the child
    removed the parent's folder at its exit, losing the results in it."""
    if os.getpid() == pid:
        results_folder.remove(folder, reader)


class Pool(ProcessPoolExecutor):
    """One command's helper or worker processes, on the public API of
    :class:`~concurrent.futures.ProcessPoolExecutor` only: no task is ever cancelled
    (before Python 3.12 a pool that breaks while it lists a cancelled task stops settling
    the others: CPython gh-107219), so a task sent is a task done, by its process or, when
    that process ended abruptly, again in this one.

    Each worker (:func:`_worker_start`) is born with Ctrl-C blocked (:meth:`submit` starts
    it), ignores Ctrl-C once set up and keeps SIGTERM's default action; a thread in it
    ends it at once when this process ends, however it ends, or when :meth:`stop` is
    called (``multiprocessing.connection.wait`` on the parent's sentinel and on a pipe
    whose only writer is this process)."""

    def __init__(
        self, processes: int, initializer: Callable[..., None], initargs: tuple[Any, ...]
    ) -> None:
        context = multiprocessing.get_context("spawn")
        self._stop_reader, self._stop_writer = context.Pipe(duplex=False)
        try:
            # Only named here: the first worker to spill a result makes it (made), so it
            # never exists without a live worker to remove it should this process be
            # killed. Made here, a kill -9 before the first worker watched left it for good.
            tmpdir = tempfile.gettempdir()
            self._spill: str | None = os.path.join(tmpdir, results_folder.name())
        except OSError:  # no $TMPDIR to write to: results come back through the pipe
            self._spill = None
            self._reader: results_folder.Reader | None = None
        else:
            self._reader = results_folder.Reader(self._spill)
            # removed at shutdown, or when the pool is collected or the program ends first
            # (in this process only: a child made by fork() runs its copy at its exit)
            self._removal = weakref.finalize(self, _remove_here, os.getpid(), self._spill,
                                             self._reader)  # fmt: skip
            # and those of commands killed with all their workers, by this one
            results_folder.remove_stale(tmpdir)
        super().__init__(
            processes,
            mp_context=context,
            initializer=_worker_start,
            initargs=(self._stop_reader, self._spill, initializer, initargs),
        )
        self.processes = processes
        self._share = 1 / (processes + 1)
        """The part of each batch of verifications that this process keeps
        (:meth:`verify`): at first as one helper more, then as the batches before showed."""

    def submit(self, fn: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> Future[R]:
        """``fn(*args, **kwargs)`` in a worker. Its result comes back through the pool's
        result pipe only when it is small (:data:`INLINE_RESULT`, one write, which a
        worker cannot die in the middle of); a larger one is written to a file of the
        pool's own folder, and only the file's name goes through the pipe. A worker killed
        in the middle of writing a large result to the pipe would leave a partial message
        there that the pool's reader waits for the rest of forever (this process holds the
        pipe's other end, so no end of file comes): the pool would hang instead of
        reporting the worker lost. The folder is made by the first worker that needs it
        (:func:`~pithlog.parallel.results_folder.made`), and removed by :meth:`shutdown`,
        or when this process is killed by every worker (:func:`_exit_with_parent`), or
        when they were all killed too by the next pool made
        (:func:`~pithlog.parallel.results_folder.remove_stale`)."""
        with _interrupts_blocked():  # it may start a worker: see _interrupts_blocked
            inner = super().submit(_spilling, self._spill, fn, args, kwargs)
        outer: Future[R] = Future()
        inner.add_done_callback(functools.partial(_unspill, self._reader, outer))
        return outer

    def stop(self) -> None:
        """End every worker now, whatever it is doing: closing the pipe's one writer wakes
        the thread in each that waits on it. The tasks they held end the pool broken
        (whoever waits for them gets :class:`BrokenProcessPool`)."""
        self._stop_writer.close()

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        super().shutdown(wait, cancel_futures=cancel_futures)
        if wait:  # every worker has ended: the pipe and the results' folder are not needed
            self._stop_writer.close()
            self._stop_reader.close()
            if self._spill is not None:
                self._removal()

    def verify(self, parts: Iterator[list[SignatureCheck]]) -> Callable[[], None]:
        """A :data:`~pithlog.protocol.checks.Verifier` with fixed shares: of each batch,
        this process keeps its share (run when the batch's reasons are asked for) and the
        pool gets the rest, in tasks of :data:`PROCESS_CHUNK` verifications sent as the
        batch is prepared. Nothing is taken back: the share is set before a batch starts,
        from the batches before it (:meth:`_adapt`)."""
        share = self._share
        kept: list[SignatureCheck] = []
        sent: list[tuple[list[SignatureCheck], Future[list[bool]] | None]] = []
        pending: list[SignatureCheck] = []
        total = 0
        for part in parts:
            total += len(part)
            if len(kept) + len(part) <= share * total:  # early parts go to the pool
                kept += part
                continue
            pending += part
            if len(pending) >= PROCESS_CHUNK:
                sent.append(self._send(pending))
                pending = []
        if pending:
            sent.append(self._send(pending))
        return functools.partial(self._collect, kept, sent)

    def _send(
        self, checks: list[SignatureCheck]
    ) -> tuple[list[SignatureCheck], Future[list[bool]] | None]:
        try:
            triples = [(c.public_key, c.signature, c.message) for c in checks]
            return checks, self.submit(verify_batch, triples)
        except BrokenProcessPool:  # a helper died before: this part is verified here
            HelperLost.warn()
            return checks, None

    def _collect(
        self,
        kept: list[SignatureCheck],
        sent: list[tuple[list[SignatureCheck], Future[list[bool]] | None]],
    ) -> None:
        """This process's share first, then the pool's results; a part whose helper died
        is verified here (:class:`~pithlog.errors.HelperLost`)."""
        for check in kept:
            check.run()
        self._adapt(
            sum(len(checks) for checks, f in sent if f is not None and not f.done()),
            len(kept) + sum(len(checks) for checks, _ in sent),
        )
        for checks, future in sent:
            results = None
            if future is not None:
                try:
                    results = future.result()
                except BrokenProcessPool:
                    HelperLost.warn()
            if results is None:
                for check in checks:
                    check.run()
            else:
                for check, ok in zip(checks, results, strict=True):
                    check.ok = ok

    def _adapt(self, lagging: int, total: int) -> None:
        """The next batches' share, from how this one went: when this process, its share
        done, still had ``lagging`` verifications to wait for, it could have run a
        ``1/(processes + 1)`` part of them itself; when it had none, the pool had time to
        spare (or this process has other work: the next batch, a commit), so the share
        shrinks."""
        if total == 0:
            return
        if lagging:
            self._share = min(1.0, self._share + lagging / total / (self.processes + 1))
        else:
            self._share *= SHARE_DECAY


INLINE_RESULT = 2048
"""Bytes of a pickled result that a worker sends through the result pipe itself: at most
``PIPE_BUF`` (4,096 on Linux) with the pool's framing, so one write, all or nothing."""

_SPILLED = 0


def _spilling(folder: str | None, fn: Callable[..., R], args: tuple[Any, ...],
              kwargs: dict[str, Any]) -> tuple[bool, Any]:  # fmt: skip
    """In a worker: ``fn``'s result as ``(False, result)`` when small, else ``(True, name)``
    of the file of ``folder`` that holds it pickled (:meth:`Pool.submit`). A folder that
    cannot be written (a full disk) sends it inline."""
    global _SPILLED
    data = pickle.dumps(fn(*args, **kwargs), protocol=pickle.HIGHEST_PROTOCOL)
    if len(data) <= INLINE_RESULT or folder is None or not results_folder.made(folder):
        return False, data
    _SPILLED += 1
    name = f"{os.getpid()}-{_SPILLED}"
    if not results_folder.write(name, data):
        return False, data
    return True, name


def _unspill(reader: results_folder.Reader | None, outer: Future[Any],
             inner: Future[tuple[bool, Any]]) -> None:  # fmt: skip
    """The result of :func:`_spilling` into ``outer``: read (and the file removed) when it
    was written to a file. Runs in the pool's thread that collects results (or the
    caller's, for a task already done). A file that cannot be read (its folder removed
    once every helper of the pool had died) is a helper lost: ``outer`` breaks as the pool
    does, and its work is done again in this process."""
    try:
        spilled, value = inner.result()
        if spilled:
            assert reader is not None
            value = reader.take(value)
            if value is None:
                raise BrokenProcessPool("a helper's result was lost with its results' folder")
        result = pickle.loads(value)
    except BaseException as exc:  # the worker's exception, a broken pool, an unreadable file
        outer.set_exception(exc)
        return
    outer.set_result(result)


PROCESS_CHUNK = 256
"""Verifications per task sent to a helper (large enough that pickling is negligible)."""

SHARE_DECAY = 0.75
"""Factor of :attr:`Pool._share` after a batch whose helpers were done first."""

P = ParamSpec("P")


def in_threads(workers: int | None = None) -> Verifier:
    """A :data:`~pithlog.protocol.checks.Verifier` that verifies each batch in up to
    ``workers`` threads (default: the cores, at most 4), the batch complete when the call
    returns: ``cryptography`` releases the GIL while it verifies, so the threads overlap
    each other and the preparation of the batch's later parts, but would not overlap this
    thread's Python work after it (a verifying thread waits for the GIL after each
    signature, up to the interpreter's switch interval). A batch of one part, or
    ``workers`` = 1, is verified here: a thread pool would cost more than it saves."""
    count = workers if workers is not None else min(4, usable_cores())

    def verify(parts: Iterator[list[SignatureCheck]]) -> Callable[[], None]:
        if count <= 1:
            return _nothing
        first, second = next(parts, None), next(parts, None)
        if first is None or second is None:
            return _nothing
        with ThreadPoolExecutor(count, thread_name_prefix="pithlog-verify") as threads:
            for part in itertools.chain((first, second), parts):
                threads.submit(_run_all, part)
        return _nothing

    return verify


def _run_all(checks: list[SignatureCheck]) -> None:
    for check in checks:
        check.run()


def _nothing() -> None:
    pass


def verifying_processes(every_core: bool = False) -> int:
    """Helper processes that verify signatures beside a one-process pipeline: one per other
    core, or with ``every_core`` one per core. A reduction's own process only reads, parses
    and checks, and idles while the signatures are verified, so its helpers may take every
    core; an append or a replay also writes or compares, and a helper on every core only
    slows that process down (measured on 2 cores: reduce 0.88-0.99x the raw verify rate
    with one helper, 1.09-1.18x with two; append 0.66-0.70x with one, 0.63-0.66x with
    two)."""
    cores = usable_cores()
    return cores if every_core else max(1, cores - 1)


_HAVE_SIGMASK = hasattr(signal, "pthread_sigmask")


@contextlib.contextmanager
def _interrupts_blocked() -> Iterator[None]:
    """Block Ctrl-C in this thread while it may start a worker: the worker is born with it
    blocked (a signal mask survives fork and exec) until :func:`leave_interrupts_to_parent`
    ignores it, so one that comes while the worker is still starting cannot kill it with a
    traceback. Here a Ctrl-C that comes meanwhile is only delayed. (CPython starts its
    resource tracker the same way.)"""
    if not _HAVE_SIGMASK:
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def leave_interrupts_to_parent() -> None:
    """In a helper or worker process: ignore Ctrl-C, then unblock it (it was blocked from
    the process's birth: :func:`_interrupts_blocked`), and give SIGTERM its default action.
    A terminal sends Ctrl-C to every process of a command: the process that started the
    workers decides what becomes of them (its pool's shutdown, :meth:`Pool.stop`), so none
    dies mid-task printing a traceback of its own. SIGTERM stops a worker as it stops any
    process: the pool that loses one does its work again or, when the command is ending
    anyway, the console script's handler ends it (``pithlog.cli.edge``)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if _HAVE_SIGMASK:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


PARENT_GONE = 70
"""A worker's exit status when it ends because its parent ended or stopped it."""


def _worker_start(
    stop: Connection,
    spill: str | None,
    initializer: Callable[..., None],
    initargs: tuple[Any, ...],
) -> None:
    """Every worker's initializer: the watch on its parent first, then ``initializer``
    (Ctrl-C still blocked), then :func:`leave_interrupts_to_parent`."""
    threading.Thread(target=_exit_with_parent, args=(stop, spill), name="pithlog-parent",
                     daemon=True).start()  # fmt: skip
    initializer(*initargs)
    leave_interrupts_to_parent()


def _exit_with_parent(stop: Connection, spill: str | None) -> None:
    """Wait until the parent ends (its sentinel, a pipe that its end closes) or stops this
    worker (the ``stop`` pipe), then end the process at once. Without this a worker whose
    parent was killed would wait on its call queue forever: it holds both ends of that
    pipe itself and never sees it close. A parent that ended without its shutdown (killed)
    left its pool's results' folder behind: the workers remove it, holding
    :data:`~pithlog.parallel.results_folder.LOCK` to the end so that this one cannot make
    it again meanwhile."""
    watched: list[Any] = [stop]
    parent = multiprocessing.parent_process()
    if parent is not None:
        watched.append(parent.sentinel)
    ready = multiprocessing.connection.wait(watched)
    results_folder.LOCK.acquire()
    if spill is not None and parent is not None and parent.sentinel in ready:
        shutil.rmtree(spill, ignore_errors=True)
    os._exit(PARENT_GONE)
