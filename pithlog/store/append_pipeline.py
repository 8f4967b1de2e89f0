"""How :meth:`pithlog.store.Store.append` and :meth:`~pithlog.store.Store.append_batches` run
the work of :mod:`pithlog.store.append`: a batch through the door, checks 1-12 started on
its copies new to the store (in threads, or in helper processes for large batches), then
its one write transaction; for a stream of batches, as a pipeline in which the next batch
is judged while the one before it is written and committed (``docs/store.md``,
"Appending").
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import threading
from collections import deque
from collections.abc import Callable, Generator, Iterable, Iterator, Sized
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar

from pithlog.errors import DoorError, StoreError, register
from pithlog.parallel import Pool, in_threads, usable_cores, verifying_pool
from pithlog.protocol.checks import CheckBatch, start_checks
from pithlog.protocol.events import Envelope, admit_value, parse_envelope
from pithlog.protocol.keys import Keyring
from pithlog.store.append import (
    AppendResult,
    Decided,
    KeepInvalid,
    StartedBatch,
    append_work,
)
from pithlog.store.append_judging import (
    RAW,
    Helpers,
    Judging,
    SentBatch,
    judging_pool,
    not_an_item,
    receive,
    require_batch,
    send,
    submitter,
    unseen,
)
from pithlog.store.layout import Txn, copy_hash

if TYPE_CHECKING:
    from pithlog.store.log import Store

register({"store.judging_keyring": "the judging helpers judge under another keyring than "
          "the append's: make them with store.judging(keyring) of the append's keyring"})

T = TypeVar("T")

Item = bytes | bytearray | memoryview | Envelope | dict[str, Any]
"""One item of a batch: a raw line (through the door) or an envelope already through it."""

Started = StartedBatch | SentBatch
"""A batch started: judged here (its signatures maybe still being verified), or sent whole
to the helpers of :mod:`pithlog.store.append_judging`."""

Vet = Callable[[list[Envelope | DoorError], list[bytes | None]], None]
"""A look at each batch of :meth:`Store.append_batches` after the door and checks 1-12 and
before its write transaction: its items and their copy hashes (``None`` for a refused
item). What it raises stops the pipeline before that batch is written (a mirror's check
that every copy is the one its leaf commits to). An item of raw lines judged by the
helpers may come decoded without its payload
(:func:`pithlog.protocol.events.readmit_light`): its JCS bytes, ids and other members are
there."""

PIPELINE_MIN = 500
"""Batches of at least this many items (judged by the first) are verified in helper
processes from the second batch on; smaller ones in threads, as :meth:`Store.append`
does (a process start costs about as much as verifying a few thousand signatures)."""

START_PART = 1024
"""Items per part of a batch started with helper processes (:func:`start_append`)."""

ALONE_POOL_MIN = 2000
"""A first batch of at least this many items (when its length is known: a list) is
verified in helper processes too: it has no batch before it to overlap with, and in
threads, which hold the GIL between signatures, it would use little more than one core."""


class Abandoned(Exception):
    """A batch of :meth:`Store.append_batches` whose consumer stopped before its commit:
    its transaction is aborted. Internal; it never leaves the pipeline."""


def _parts(items: Iterable[T], size: int | None) -> Iterator[list[T]]:
    """``items`` in lists of ``size`` (``None``: one list of them all)."""
    it = iter(items)
    while part := list(itertools.islice(it, size)):
        yield part
        if size is None:
            return


def _at_least(batch: object, n: int) -> bool:
    return isinstance(batch, Sized) and len(batch) >= n


def append(
    store: Store,
    batch: Iterable[Item],
    keyring: Keyring,
    keep_invalid: KeepInvalid,
    judging: Judging | None,
) -> list[AppendResult]:
    """:meth:`Store.append` under the store's keyring: the batch judged by the helpers of
    ``judging`` (on a machine with more than one core), else here, then written. Its
    arguments were checked by :func:`require_append` (before the keyring's change)."""
    if judging is not None and usable_cores() > 1:
        started = store._start_append(batch, keyring, judging.pool(), True)
        if isinstance(started, SentBatch):
            judging.watch(started)
    else:
        started = store._start_append(batch, keyring)
    return store._finish_append(started, keyring, keep_invalid)


def require_append(batch: object, keyring: Keyring, judging: Helpers | None) -> None:
    """The argument checks of :meth:`Store.append`, made before its keyring is applied: a
    refused call changes nothing, not even the store's keyring (a rekey of up to
    :data:`~pithlog.store.rekey.INLINE_MAX_COPIES` copies)."""
    require_batch(batch)
    if judging is not None:
        # on one core too, where the helpers are not used: the same call is refused on
        # every machine
        _same_keyring(judging, keyring)


def require_judged(sent: object, keyring: Keyring, judging: Helpers) -> None:
    """The argument checks of :meth:`Store.append_judged`, made before its keyring is
    applied (as :func:`require_append`)."""
    _same_keyring(judging, keyring)
    if not isinstance(sent, list) or not all(isinstance(b, SentBatch) for b in sent):
        raise StoreError("item", "append_judged takes a list of the SentBatch objects "
                         "judging.send_each returned")  # fmt: skip


def _same_keyring(judging: Helpers, keyring: Keyring) -> None:
    # the helpers' verdicts would be written as the append's: refused before any is used
    if not isinstance(getattr(judging, "keyring", None), Keyring):  # an AttributeError
        raise StoreError("argument", f"judging is a {type(judging).__name__}, not judging "
                         "helpers: make them with store.judging(keyring)")  # fmt: skip
    if judging.keyring.digest != keyring.digest:
        raise StoreError("judging_keyring", f"the judging helpers judge under keyring "
                         f"{judging.keyring.digest}, this append is under {keyring.digest}")


def append_judged(
    store: Store, sent: list[SentBatch], keyring: Keyring, judging: Helpers,
    keep_invalid: KeepInvalid,
) -> list[AppendResult]:  # fmt: skip
    """:meth:`Store.append_judged`: the batches ``judging`` was sent, as one batch (its
    arguments checked by :func:`require_judged`, before the keyring's change)."""
    joined = SentBatch([part for batch in sent for part in batch.parts])
    return store._finish_append(joined, keyring, keep_invalid)


def append_batches(
    store: Store,
    batches: Iterable[Iterable[Item]],
    keyring: Keyring,
    keep_invalid: KeepInvalid,
    vet: Vet | None = None,
) -> Generator[list[AppendResult], None, None]:
    """:meth:`Store.append_batches` (whose docstring says what it promises)."""
    cores = usable_cores()
    here = os.getpid()
    with contextlib.ExitStack() as stack:
        executor: Pool | None = None
        judging = False  # the executor's helpers judge raw lines whole (append_judging)
        writer: ThreadPoolExecutor | None = None
        abandon = threading.Event()
        # the batches taken from the input and started, not yet handed to the writer: one
        # between batches, two while the batch before them is waited for
        taken: deque[Started] = deque()
        writing: Future[list[AppendResult]] | None = None

        def helpers(batch: object) -> Pool:
            nonlocal judging
            # lines: the helpers take the door and the checks too; envelopes (a mirror's,
            # already through the door) only need their signatures verified
            judging = isinstance(batch, list) and all(isinstance(x, RAW) for x in batch)
            return (judging_pool(stack, store.path, keyring) if judging
                    else verifying_pool(stack))  # fmt: skip

        try:
            for number, batch in enumerate(batches):
                require_batch(batch)  # before it is measured or handed to the helpers
                if number == 0 and cores > 1 and _at_least(batch, ALONE_POOL_MIN):
                    # a large first batch has nothing to overlap with: its
                    # signatures need the helpers as much
                    executor = helpers(batch)
                if number == 1:
                    large = bool(taken) and _length(taken[0]) >= PIPELINE_MIN
                    if cores > 1 and large and executor is None:
                        executor = helpers(batch)
                    # after the helper pool, so that it is shut down (waited for) first
                    writer = _writer(stack)
                taken.append(store._start_append(batch, keyring, executor, judging))
                if len(taken) > 1:
                    assert writer is not None
                    # ``writing`` is cleared only once its results are in hand, so that an
                    # interrupt while waiting for them still hands them out (below)
                    committed = writing.result() if writing is not None else None
                    writing = writer.submit(store._finish_append, taken.popleft(), keyring,
                                            keep_invalid, abandon, vet)  # fmt: skip
                    if committed is not None:
                        yield committed
                        _resumed(store, here, stack)
            if writing is not None:
                committed = writing.result()
                writing = None
                yield committed
                _resumed(store, here, stack)
            if taken:
                # the last batch is written in the writer's thread too, never this one: an
                # interrupt (SIGINT, raised in this thread) after its commit would otherwise
                # take its results with it, committed but never handed out; while waiting
                # here, the interrupt finds it in `writing` and its results are yielded below
                writer = writer or _writer(stack)
                writing = writer.submit(store._finish_append, taken.popleft(), keyring,
                                        keep_invalid, None, vet)  # fmt: skip
                committed = writing.result()
                writing = None
                yield committed
                _resumed(store, here, stack)
        except GeneratorExit:
            abandon.set()
            if os.getpid() != here:  # dropped in a forked child: see _resumed
                stack.pop_all()
            raise
        except BaseException as error:
            if os.getpid() != here:
                stack.pop_all()
            else:
                # the input failed, a batch could not be started, or an interrupt came: the
                # batch being written and those taken after it are written and handed out,
                # then the error is raised (unless one of them fails: see _written)
                yield from _written(store, here, stack, writer, writing, taken, keyring,
                                    keep_invalid, abandon, vet, error)  # fmt: skip
            raise


def _written(
    store: Store, here: int, stack: contextlib.ExitStack, writer: ThreadPoolExecutor | None,
    writing: Future[list[AppendResult]] | None, taken: deque[Started], keyring: Keyring,
    keep_invalid: KeepInvalid, abandon: threading.Event, vet: Vet | None,
    error: BaseException,
) -> Generator[list[AppendResult], None, None]:  # fmt: skip
    """The end of a pipeline whose input failed (or a batch's start, or an interrupt came):
    the batch ``writing`` finished, then each batch ``taken`` (through the door, its checks
    started: a mirror's, verified against the tiles) written, in order, each one's results
    yielded after its commit; the caller then raises its error. Taken from the input, they
    are the input's as much as the batches committed before them: dropped, a mirror that
    got one batch a run from a slow origin never advanced.

    It stops at the first batch that fails (its transaction or ``vet`` refused it; nothing
    after it is written), raising that batch's error, with the caller's ``error`` as its
    cause: a mirror's ``mirror.copy`` (the origin served a copy its leaf does not commit
    to: evidence) outranks the ``mirror.fetch`` that ended its input, which said only "run
    it again", and left the evidence to the next run. The caller's ``error`` stays the one
    raised when it is that batch's own (the batch failed while the pipeline waited for it)
    and when it is an interrupt (``KeyboardInterrupt``, ``SystemExit``: not made an
    exception a caller may catch and go on from). It stops, and the caller's error is
    raised, when the store is closed or the pipeline resumed in a child made by fork()
    between two batches. An interrupt while it waits (a second Ctrl-C) is raised at once:
    the batch being written is then abandoned (aborted unless its commit had begun), and
    nothing after it is written. So is an exception the consumer throws in, or its close,
    at a yield here; nothing is being written then."""
    while writing is not None or taken:
        if writing is None:
            writer = writer or _writer(stack)
            writing = writer.submit(store._finish_append, taken.popleft(), keyring,
                                    keep_invalid, abandon, vet)  # fmt: skip
        try:
            finished = writing.result()
        except Exception as failed:
            if failed is error or not isinstance(error, Exception):
                return
            raise failed from error
        except BaseException:
            abandon.set()
            raise
        writing = None
        yield finished
        try:
            _resumed(store, here, stack)
        except StoreError:  # store.closed, store.forked
            return


def _resumed(store: Store, here: int, stack: contextlib.ExitStack) -> None:
    """Raise ``store.closed`` or ``store.forked`` when the pipeline is resumed on a
    closed Store or in a child made by fork() (its consumer took it before the fork).

    In the child the writer thread and the helper processes are the parent's (a thread
    does not cross fork()): a batch handed to the writer was never written and its result
    never came, and shutting them down there would wait on them. They are left to the
    parent, as the child's copy of the Store is."""
    if os.getpid() != here:
        stack.pop_all()
    store._env  # noqa: B018 -- raises store.closed or store.forked


def _writer(stack: contextlib.ExitStack) -> ThreadPoolExecutor:
    """The thread that writes and commits the batches, shut down (waited for) on exit."""
    return stack.enter_context(ThreadPoolExecutor(1, thread_name_prefix="pithlog-append"))


def _length(started: Started) -> int:
    if isinstance(started, SentBatch):
        return len(started)
    return len(started.items)


def start_append(
    store: Store,
    batch: Iterable[Item],
    keyring: Keyring,
    executor: Pool | None = None,
    judging: bool = False,
) -> Started:
    """A batch through the door, and checks 1-12 started on its copies that the store
    does not hold yet (a copy already stored is a duplicate, not judged again). With
    ``judging`` (``executor`` is a :func:`~pithlog.store.append_judging.judging_pool`), a
    batch of raw lines is sent to the helpers whole: door and checks included."""
    require_batch(batch)
    if judging and executor is not None:
        batch = batch if isinstance(batch, list) else list(batch)
        lines = [bytes(item) for item in batch if isinstance(item, RAW)]
        if len(lines) == len(batch):
            return send(submitter(executor), executor.processes, lines)
    items: list[Envelope | DoorError] = []
    hashes: list[bytes | None] = []  # each copy hashed once, for the write as well
    seen: set[bytes] = set()
    fresh: list[bytes] = []
    started: list[CheckBatch] = []
    # With helpers, part by part: the first signatures reach them while the rest of
    # the batch is still going through the door (threads take the batch whole).
    size = START_PART if executor is not None else None
    for part in _parts(batch, size):
        envelopes: dict[bytes, Envelope] = {}  # the part's copies new to the batch
        for item in part:
            if isinstance(item, Envelope):
                env = item
            else:
                if not isinstance(item, (dict, *RAW)):
                    raise not_an_item(len(items), item)
                try:
                    # a dict (what sign_event returns) enters through the same door
                    env = admit_value(item) if isinstance(item, dict) else parse_envelope(
                        bytes(item))  # fmt: skip
                except DoorError as exc:
                    items.append(exc.unchained())  # this frame holds items: no cycle
                    hashes.append(None)
                    continue
            h = copy_hash(env.encoded)
            items.append(env)
            hashes.append(h)
            if h not in seen:
                seen.add(h)
                envelopes[h] = env
        if not envelopes:
            continue
        new = store._read(functools.partial(unseen, envelopes))
        fresh += new
        started.append(start_checks([envelopes[h] for h in new], keyring,
                                    executor.verify if executor is not None else in_threads()))
    return StartedBatch(items, hashes, fresh, CheckBatch.joined(started))


def finish_append(
    store: Store,
    started: Started,
    keyring: Keyring,
    keep_invalid: KeepInvalid,
    abandon: threading.Event | None = None,
    vet: Vet | None = None,
) -> list[AppendResult]:
    """The write transaction of a started batch, once its verdicts are in (and ``vet`` has
    seen the batch); with ``abandon`` set before the commit, the transaction is aborted
    (:class:`Abandoned`)."""
    if isinstance(started, SentBatch):
        got = receive(started, store._read, keyring)
        started = StartedBatch(got.items, got.hashes, got.fresh, Decided(got.reasons),
                               got.packed)
    if vet is not None:
        vet(started.items, started.hashes)
    work = append_work(started, keyring, keep_invalid)
    if abandon is None:
        return store._write(work)

    def guarded(txn: Txn, dbs: dict[str, Any]) -> list[AppendResult]:
        results = work(txn, dbs)
        if abandon.is_set():
            raise Abandoned("the consumer stopped before this batch was committed")
        return results

    return store._write(guarded)
