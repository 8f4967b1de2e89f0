"""``POST /submit`` (``docs/network.md``): signed events from anyone, through the same door
and checks as ``pithlog append``, answered after their commit; the limits of a request;
and group commit, so that concurrent submitters share one write transaction (one fsync).

Everything a stranger can send is bounded before it reaches the store: the body's bytes
(:attr:`Limits.max_body`, ``413``), the time to send it (:attr:`Limits.body_seconds`,
``408``), its lines (:attr:`Limits.max_lines`, ``413``). A refused request stores nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import anyio
import msgspec

from pithlog.errors import DoorError, ServeError, StoreError, register
from pithlog.lines import iter_lines
from pithlog.net.body_bytes import BodyBytes, NoRoom
from pithlog.net.judges import LoopJudging, judged
from pithlog.parallel import usable_cores, verifying_processes
from pithlog.protocol.keys import Keyring
from pithlog.store import REFUSED, AppendResult, SentBatch, Store

S = TypeVar("S")
"""A request as :attr:`GroupCommit.start` leaves it for :attr:`GroupCommit.append`."""

register(
    {
        "serve.too_large": "the request body is larger than the server accepts "
        "(docs/network.md, limits): send fewer events per request",
        "serve.too_many_lines": "the request holds more lines than the server accepts per "
        "request (docs/network.md, limits): split it",
        "serve.timeout": "the request (its head, or a POST body) did not arrive in time "
        "(docs/network.md, limits)",
        "serve.bad_request": "the request is malformed (its head is not HTTP/1.1 as the "
        "parser reads it, its Host missing or doubled, its Content-Length, or its body is "
        "not JSON Lines)",
        "serve.unsupported_encoding": "the request body was sent in a Content-Encoding "
        "(gzip, zstd, ...): the server reads request bodies only as they are; send it "
        "without one (docs/network.md, limits)",
    }
)


@dataclass(frozen=True)
class Limits:
    """What one ``POST /submit`` may hold (``docs/network.md``)."""

    max_body: int = 8 << 20
    """Bytes of a request body (8 MiB): larger is ``413 serve.too_large``."""
    max_lines: int = 10_000
    """Non-blank lines of a body: more is ``413 serve.too_many_lines``."""
    body_seconds: float = 30.0
    """Seconds to receive the whole body, from the request's start: ``408 serve.timeout``."""
    batch_lines: int = 10_000
    """Lines of one group commit at most (requests are never split across two)."""
    max_pending: int = 32
    """Submissions checked or committed at once, each taking its place once its body is
    whole: more wait for one, and after ``body_seconds`` get ``503 serve.busy``. The
    bodies a worker holds, being received or not, are bounded by ``max_pending *
    max_body`` bytes in all (:meth:`held_bytes`): a body being received holds the bytes
    it has sent, not a place (:mod:`pithlog.net.body_bytes`)."""

    def held_bytes(self) -> BodyBytes:
        """The bytes of bodies a worker holds at once: ``max_pending * max_body``."""
        return BodyBytes(self.max_pending * self.max_body)


def check_declared(content_length: str | None, limits: Limits) -> None:
    """A ``Content-Length`` over ``max_body`` is ``413`` at once, before the request waits
    for anything (a place among ``max_pending``, its body)."""
    if content_length is not None:
        if not content_length.isascii() or not content_length.isdigit():
            raise ServeError("bad_request", "Content-Length is not a decimal")
        if int(content_length) > limits.max_body:
            raise ServeError("too_large", f"the body is {content_length} bytes; the server "
                             f"accepts {limits.max_body}")  # fmt: skip


TAKEN_CODINGS = "identity"
"""The ``Content-Encoding`` a request body may be in: none but ``identity`` (its
``Accept-Encoding`` when refused, RFC 9110 15.5.16)."""


def check_coding(content_encodings: list[str]) -> None:
    """A body in a content coding (RFC 9110 8.4: ``gzip``, ``zstd``, ``br``, ...) is
    ``415`` at once, before any byte of it is read: read as it came, a gzipped body of
    events was refused line by line at the door, a sync message answered as malformed.
    ``content_encodings``: the values of every ``Content-Encoding`` header (a list of
    codings each, in the order applied)."""
    codings = [coding.strip().lower() for value in content_encodings
               for coding in value.split(",")]  # fmt: skip
    sent = [coding for coding in codings if coding not in ("", TAKEN_CODINGS)]
    if sent:
        raise ServeError("unsupported_encoding", f"the body is in Content-Encoding "
                         f"{', '.join(sent)[:80]!r}; send it as it is "
                         f"({TAKEN_CODINGS})")  # fmt: skip


async def read_body(chunks: AsyncIterator[bytes], content_length: str | None,
                    limits: Limits, seconds: float | None = None,
                    held: BodyBytes | None = None) -> bytes:  # fmt: skip
    """The body, or a :class:`ServeError` before more than ``max_body`` bytes are
    held or once ``seconds`` (by default ``body_seconds``) have passed. With ``held``, its
    bytes are taken from there as they arrive (:mod:`pithlog.net.body_bytes`), for the
    caller to give back once done with the body; an error gives them back here. A time-out
    while waiting for room there, not for the client, is ``503 serve.busy``, as is a body
    refused its room (:class:`~pithlog.net.body_bytes.NoRoom`)."""
    check_declared(content_length, limits)
    seconds = limits.body_seconds if seconds is None else seconds
    if seconds <= 0:
        raise ServeError("timeout", f"the body did not arrive within {limits.body_seconds:g} "
                         "s of the request's start")  # fmt: skip
    body = bytearray()
    waiting = False
    try:
        # asyncio's own timeout: anyio's costs the event loop several times as much per
        # request (it asks which async library runs, each time)
        async with asyncio.timeout(seconds):
            async for chunk in chunks:
                if len(body) + len(chunk) > limits.max_body:
                    raise ServeError("too_large", f"the body is over {limits.max_body} bytes")
                if held is not None:
                    waiting = True
                    await held.take(len(chunk), len(body))
                    waiting = False
                body += chunk
    except (TimeoutError, NoRoom) as exc:
        if held is not None:
            held.give(len(body))
        if isinstance(exc, NoRoom):
            raise ServeError("busy", "the bodies being received hold all the memory the "
                             "server gives them, each waiting for more of it; retry "
                             "later") from None  # fmt: skip
        if waiting:
            raise ServeError("busy", "the bodies being received hold all the memory the "
                             "server gives them; retry later") from None  # fmt: skip
        raise ServeError("timeout", f"the body took more than {limits.body_seconds:g} s "
                         f"({len(body)} bytes received)") from None  # fmt: skip
    except BaseException:
        if held is not None:
            held.give(len(body))
        raise
    return bytes(body)


def split_lines(body: bytes, limits: Limits) -> list[tuple[int, bytes | None]]:
    """The body's non-blank lines with their numbers (JSON Lines framing of
    :mod:`pithlog.lines`; ``None``: a line over the door's limit), refused as soon as one
    more than ``max_lines`` is found."""
    lines: list[tuple[int, bytes | None]] = []
    for line in iter_lines(io.BytesIO(body)):
        lines.append(line)
        if len(lines) > limits.max_lines:
            raise ServeError("too_many_lines", f"more than {limits.max_lines} lines; the "
                             f"server accepts {limits.max_lines} per request")  # fmt: skip
    return lines


SPLIT_APART_BYTES = 64 << 10
"""A body at least this large is split into lines in a worker thread (:func:`lines_of`):
8 MiB of newlines took 2.2 s to split, which on the event loop held every other request
of the worker, /checkpoint and the tiles included. A submitter's single event is split on
the loop, where a thread's hand-off would cost more than the split."""


async def lines_of(body: bytes, limits: Limits) -> list[tuple[int, bytes | None]]:
    """:func:`split_lines`, off the event loop for a large body."""
    if len(body) < SPLIT_APART_BYTES:
        return split_lines(body, limits)
    return await anyio.to_thread.run_sync(split_lines, body, limits)


def result_line(number: int, result: AppendResult) -> bytes:
    """One status line, as ``pithlog append`` prints it."""
    doc = {"line": number, "event_id": result.event_id, "status": result.status,
           "reason": result.reason}  # fmt: skip
    return msgspec.json.encode(doc) + b"\n"


def answer(lines: list[tuple[int, bytes | None]], results: list[AppendResult]) -> bytes:
    """The JSON Lines answer: one status per line of the request, in order."""
    out = bytearray()
    it = iter(results)
    for number, raw in lines:
        if raw is None:
            refused = DoorError("line_too_long", "line is longer than 8 MiB", f"line {number}")
            out += result_line(number, AppendResult(-1, None, REFUSED, refused.describe()))
        else:
            out += result_line(number, next(it))
    return bytes(out)


@contextlib.contextmanager
def _fixed_keyring() -> Iterator[None]:
    """A commit refused because the store is no longer under the server's keyring
    (``store.keyring_changed``, from the write transaction: a ``pithlog rekey`` ran or
    runs beside the server), told as the submitter and the operator need it."""
    try:
        yield
    except StoreError as exc:
        if exc.code != "store.keyring_changed":
            raise
        raise StoreError("keyring_changed", "the store was brought under another keyring "
                         "since this server started (pithlog rekey), or is being: it takes "
                         "no submissions until it is restarted with the store's keyring; "
                         "retry later") from exc  # fmt: skip


@dataclass
class _Waiting(Generic[S]):
    lines: list[bytes]
    done: asyncio.Future[list[AppendResult]]
    started: S | None = None


GATHER_SECONDS = 0.002
"""The longest a commit waits for the requests it expects (:meth:`GroupCommit._gather`)."""


def _as_they_are(requests: list[list[bytes]]) -> list[list[bytes]]:
    return requests


@dataclass
class GroupCommit(Generic[S]):
    """Concurrent submissions, batched: while one write transaction is being committed,
    the requests that arrive wait together, and the next transaction takes all of them (up
    to :attr:`Limits.batch_lines` lines, never splitting a request), so N concurrent
    submitters pay about one fsync per commit, not N. Each request's results are its own
    slice of the batch's, in order, handed out only after the commit.

    Requests are started as they arrive (``start``: their lines sent to the judging
    helpers, :meth:`pithlog.store.Judging.send_each`), so that their door, checks and
    signatures run while the commit before them is written; the requests that arrived in
    one turn of the event loop are started together, in parts shared out among the
    helpers (one task per request would cost the server more to hand out than to judge).
    ``append`` then writes the started requests of one commit
    (:meth:`pithlog.store.Store.append_judged`, in a worker thread: the event loop keeps
    serving while a batch is written).

    A commit also waits, briefly, for the requests it expects (:meth:`_gather`): submitters
    that each wait for their answer before sending again all come back after the same
    commit, a few at a time, and without the wait the first few would take a commit of
    their own while the rest queue behind it."""

    append: Callable[[list[S]], list[AppendResult]]
    start: Callable[[list[list[bytes]]], list[S]] = _as_they_are  # type: ignore[assignment]
    batch_lines: int = 10_000
    max_pending: int = 32
    warm_up: Callable[[], Awaitable[None]] | None = None
    """Awaited before a request is started whenever ``warm`` says so: the helpers' start
    (the first time, and again after one ended). An :class:`OSError` from it (no process
    could be started) leaves the request to be judged by its commit."""
    warm: Callable[[], bool] = lambda: True
    """Whether ``warm_up`` has nothing to do (the helpers run)."""
    judged: Callable[[S], bool] = lambda started: True
    """Whether a started request's judgement is in: a commit takes only judged requests,
    so that its write transaction never waits on a helper."""
    until_judged: Callable[[S], Awaitable[None]] | None = None
    """Wait until ``judged`` is true of a started request."""
    requests: int = 0
    commits: int = 0
    _queue: list[_Waiting[S]] = field(default_factory=list)
    """Started requests, in order, waiting for a commit."""
    _arriving: list[_Waiting[S]] = field(default_factory=list)
    """Requests of this turn of the event loop, not started yet (:meth:`_start`)."""
    _loop: asyncio.AbstractEventLoop | None = None
    _warming: asyncio.Lock | None = None
    _writer: asyncio.Task[None] | None = None
    _slots: asyncio.Semaphore | None = None
    _arrived: asyncio.Event | None = None
    _answered: int = 0
    """Requests the last commit answered: as many are expected back."""
    _since: int = 0
    """Requests started since the last commit was answered: those come back (a request
    that waited through that commit in the queue is not one of them)."""
    _took: float = 0.0
    """Seconds the last commit took."""

    @classmethod
    def over(cls, store: Store, keyring: Keyring, limits: Limits) -> GroupCommit[Any]:
        # The server's keyring is fixed at its start: a store brought under another one
        # meanwhile (`pithlog rekey` beside the server) is refused, never changed back, or
        # the first submission after a revocation would undo it (_fixed_keyring)
        if usable_cores() == 1:  # no helpers: each commit judges its lines itself

            def append_lines(requests: list[list[bytes]]) -> list[AppendResult]:
                lines = [line for request in requests for line in request]
                with _fixed_keyring():
                    return store.append(lines, keyring, keep_invalid=False,
                                        change_keyring=False)  # fmt: skip

            return GroupCommit(append_lines, batch_lines=limits.batch_lines,
                               max_pending=limits.max_pending)  # fmt: skip
        # The door, checks and signatures of each request in helper processes kept for
        # the server's life, fed by the event loop (pithlog.net.judges): this process's
        # one core-at-a-time (the GIL) serves the requests and writes the transactions.
        judging = LoopJudging(str(store.path), keyring, verifying_processes(every_core=True))

        def append_sent(requests: list[SentBatch]) -> list[AppendResult]:
            with _fixed_keyring():
                return store.append_judged(requests, keyring, judging, keep_invalid=False,
                                           change_keyring=False)  # fmt: skip

        return GroupCommit(append_sent, judging.send_each, limits.batch_lines,
                           limits.max_pending, judging.start, lambda: judging.ready,
                           judged, judging.until_judged)  # fmt: skip

    async def take_slot(self, limits: Limits) -> asyncio.Semaphore:
        """One of :attr:`Limits.max_pending` places for a submission whose body is whole,
        or ``serve.busy`` once ``body_seconds`` have passed without one: the semaphore to
        ``release()`` when
        the submission is answered. (Not a context manager: this runs once per request,
        and ``asynccontextmanager``'s generator cost the event loop more than the rest of
        the slot's work.)"""
        self._on_this_loop()
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.max_pending)
        slots = self._slots
        if not slots.locked():  # a place is free: taken at once, no timer
            await slots.acquire()
            return slots
        try:
            async with asyncio.timeout(limits.body_seconds):
                await slots.acquire()
        except TimeoutError:
            raise ServeError("busy", f"{self.max_pending} submissions are in progress; "
                             "retry later") from None  # fmt: skip
        return slots

    def _on_this_loop(self) -> None:
        """The asyncio objects of the event loop that runs now: each binds to the loop it
        first waits on, so an app served again on another loop (a program embedding it, a
        test) starts them afresh, where the old ones would raise on every wait."""
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            self._loop = loop
            self._slots, self._arrived, self._warming, self._writer = None, None, None, None

    async def submit(self, lines: list[bytes]) -> list[AppendResult]:
        """Append ``lines`` in the next group commit; their results once it is durable."""
        if not lines:
            return []
        self._on_this_loop()
        if self.warm_up is not None and not self.warm():
            self._warming = self._warming or asyncio.Lock()
            async with self._warming:
                if not self.warm():
                    # no helper could be started (the system refused a process: memory,
                    # a process limit): the lines are judged by the write transaction, as
                    # a dead helper's are, and the next request tries again; without
                    # helpers is slower, never a failed submission
                    with contextlib.suppress(OSError):
                        await self.warm_up()
        self.requests += 1
        loop = asyncio.get_running_loop()
        waiting: _Waiting[S] = _Waiting(lines, loop.create_future())
        if not self._arriving:
            loop.call_soon(self._start)
        self._arriving.append(waiting)
        # Not shielded: a waiter cancelled (the server shutting down) cancels only its own
        # future, which the commit then leaves alone (it answers a future not yet done)
        return await waiting.done

    def _start(self) -> None:
        """Start the requests that arrived in this turn of the event loop, together, and
        queue them for the writer."""
        arriving, self._arriving = self._arriving, []
        try:
            started = self.start([w.lines for w in arriving])
        except Exception as exc:  # each request gets the error; nothing was queued
            for w in arriving:
                if not w.done.done():
                    w.done.set_exception(exc)
            return
        for w, handle in zip(arriving, started, strict=True):
            w.started = handle
        self._queue += arriving
        self._since += len(arriving)
        if self._arrived is not None:
            self._arrived.set()
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write())

    async def _gather(self) -> None:
        """Wait until as many requests came since the last commit's answers as it answered
        (or a batch's lines are queued), for at most :data:`GATHER_SECONDS` and a quarter
        of the last commit's time: a lone submitter, or one after a pause, is not kept
        waiting. Counted since the answers, not in the queue: a request left over from
        the round before would otherwise stand in for one still on its way, and the rounds
        would settle one short of all the submitters, one request always a round late."""
        expected = self._answered
        if expected <= 1:
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + min(GATHER_SECONDS, self._took / 4)
        arrived = self._arrived = self._arrived or asyncio.Event()
        while self._since < expected and sum(len(w.lines) for w in self._queue) \
                < self.batch_lines:  # fmt: skip
            remaining = deadline - loop.time()
            if remaining <= 0:
                return
            arrived.clear()
            try:
                await asyncio.wait_for(arrived.wait(), remaining)
            except TimeoutError:
                return

    async def _write(self) -> None:
        # the commits' own thread, one at a time as the writer runs them: in anyio's pool
        # (40 threads, shared with the store reads and others' work), a commit waited
        # behind every thread queued before it, 6.0 s for one event while 900 clients
        # asked for copies of 960 KB
        thread = anyio.CapacityLimiter(1)
        while self._queue:
            await self._gather()
            head = self._queue[0]
            if self.until_judged is not None and head.started is not None:
                await self.until_judged(head.started)
            # the judged requests at the head of the queue, up to a batch's lines
            batch: list[_Waiting[S]] = []
            count = 0
            while self._queue and (not batch or count + len(self._queue[0].lines)
                                   <= self.batch_lines):  # fmt: skip
                handle = self._queue[0].started
                if batch and handle is not None and not self.judged(handle):
                    break
                batch.append(self._queue.pop(0))
                count += len(batch[-1].lines)
            requests = [w.started for w in batch if w.started is not None]
            started = time.monotonic()
            try:
                results = await anyio.to_thread.run_sync(self.append, requests,
                                                         limiter=thread)  # fmt: skip
            except Exception as exc:  # every waiter of this batch gets the store's error
                for w in batch:
                    if not w.done.done():
                        w.done.set_exception(exc)
                continue
            finally:
                self._answered, self._took = len(batch), time.monotonic() - started
                self._since = 0
            self.commits += 1
            at = 0
            for w in batch:
                if not w.done.done():
                    w.done.set_result(results[at : at + len(w.lines)])
                at += len(w.lines)

