"""An append whose raw lines are judged whole by helper processes: the door, checks 1-12
and their signatures, all in the helpers (``docs/store.md``, "Appending").

The process that appends holds one lock that its Python threads share (the GIL), and its
write transactions are already most of what one core can do: with the door and the checks
there too, a large append kept one core busy and the other half idle. So a batch of raw
lines goes out in parts of :data:`JUDGE_PART`, each helper puts its lines through the door,
leaves out the copies the store already holds (it reads the store, opened read-only, as
the appending process would), judges the rest and packs them as the store keeps them; the
appending process gets back, line by line, the door's refusal or the copy's JCS bytes,
hash, verdict, packed value and hints, and only decodes the JCS bytes again for its write
transaction: without the payload where the hints allow
(:func:`pithlog.protocol.events.readmit_light`), since its reductions read of a new event
only its top-level members, its spans and its check 14 facts.

Everything a helper computes is a pure function of the line, the keyring and the store's
snapshot: a part whose helper died is judged again here (:class:`pithlog.errors.HelperLost`),
with the same results.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import os
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any, Protocol

from pithlog.errors import DoorError, HelperLost, StoreError, register
from pithlog.parallel import Pool, leave_interrupts_to_parent, verifying_processes, worker_pool
from pithlog.protocol.checks import check_many, reduction_hints
from pithlog.protocol.events import Envelope, Hints, parse_envelopes, readmit, readmit_light
from pithlog.protocol.keys import Keyring, make_keyring
from pithlog.store import codec
from pithlog.store.environment import acquire
from pithlog.store.layout import Txn, copy_hash, copy_pointer, eid_bytes

register({"store.item": "append a list of items (one item too: [item]), each a line as "
          "bytes (a file read in binary mode, 'rb'), an event as a dict (as sign_event "
          "returns it) or an Envelope"})

JUDGE_PART = 128
"""Lines per task sent to a helper: a batch of 1,000 is eight tasks, spread over the
helpers; large enough that sending a task costs little beside judging it."""

HELPER_NICE = 10
"""How much lower than the appending process the helpers run (``os.nice``). The helpers
work ahead of the write transactions, which are the pipeline's critical path: at equal
priority, two busy helpers and the writing thread share two cores three ways, and the
writing thread, given two thirds of a core, keeps everything behind it waiting (measured
on 100,000 events of the registry workload: 20.7 s of write transactions at equal
priority, 13.8 s with the helpers at 10)."""

STORED = "stored"
"""The verdict slot of a copy the store already held when it was judged: a duplicate,
whose checks are not run again (:func:`judge_lines`)."""

Judgement = DoorError | tuple[bytes, bytes, str | None, bytes | None, Hints | None]
"""What a helper says of one line: the door's refusal, or ``(JCS bytes, copy hash,
verdict, stored value, hints)`` where the verdict is the reason of the first failing check
1-12, ``None`` for a valid event, or :data:`STORED`; the stored value is the copy as the
store keeps it (:class:`pithlog.store.codec.Packer`), for a copy the store does not hold;
the hints (:func:`pithlog.protocol.checks.reduction_hints`), for a copy judged here, let
the appending process decode it without its payload
(:func:`pithlog.protocol.events.readmit_light`)."""

JudgedPart = tuple[bytes, list[Judgement]]
"""A part's judgements, with the :attr:`~pithlog.store.codec.Packer.tag` its stored values
were packed with: the write transaction uses them when its own packer has the same tag
(else the store's dictionary changed meanwhile, and it packs the copies itself)."""

Read = Callable[[Callable[[Txn, dict[str, Any]], Any]], Any]
"""A store's read transactions (``read(work)`` runs ``work`` in one)."""

RAW = (bytes, bytearray, memoryview)
"""The types of a raw line."""


def not_an_item(index: int, item: object) -> StoreError:
    """``store.item``: what an append cannot take. A ``str`` is the likely one (a file
    read in text mode): the door takes bytes, and ``bytes(5)`` of an int would be five
    NUL bytes, refused at the door as if the input held them."""
    return StoreError("item", f"item {index} of the batch is of type {type(item).__name__}, not "
                      "a line as bytes, an event dict or an Envelope: read files in binary "
                      "mode ('rb')")  # fmt: skip


def require_batch(batch: object) -> None:
    """``store.item`` for a batch that is one item (``store.append(event, keyring)``):
    walked as a batch, an event dict gave its member names and a line its byte values, and
    the error named one of those instead of the mistake."""
    if isinstance(batch, (dict, str, Envelope, *RAW)):
        raise StoreError("item", f"the batch is one {type(batch).__name__}, not a list of "
                         "items: pass [item] for one line or event")  # fmt: skip
    if not isinstance(batch, Iterable):  # None, a number: a TypeError from the walk
        raise StoreError("item", f"the batch is a {type(batch).__name__}, not a list of "
                         "items (lines as bytes, event dicts or Envelopes)")  # fmt: skip


def judging_pool(stack: contextlib.ExitStack, path: str, keyring: Keyring) -> Pool:
    """The helper processes of an append of raw lines, closed with ``stack``
    (:func:`pithlog.parallel.worker_pool`), each holding the keyring and the store open
    read-only: one per core, since the appending process keeps only the write transactions
    and the decoding of what the helpers send back. They verify lone signatures too
    (:meth:`Pool.verify`), for batches of envelopes that went through the door here."""
    entries = [key.entry() for key in keyring.values()]
    return worker_pool(stack, verifying_processes(every_core=True), helper_start, (path, entries))


class Helpers(Protocol):
    """Judging helpers of some kind (:class:`Judging`, or a server's that its event loop
    feeds: :mod:`pithlog.net.judges`): what :meth:`pithlog.store.Store.append_judged`
    asks of those that judged its lines is the keyring they judged them under."""

    @property
    def keyring(self) -> Keyring: ...


class Judging:
    """Helpers that judge raw lines, kept for the appends of a program that appends many
    batches one after the other (an embedding program's group commits:
    :meth:`pithlog.store.Store.append` with ``judging``): started with the first batch
    that uses them, ended by :meth:`close` (or with the program: a helper ends when its
    parent does). ``pithlog serve`` feeds helpers of its own from its event loop
    (:mod:`pithlog.net.judges`), which a pool's threads would slow down there."""

    def __init__(self, path: str, keyring: Keyring) -> None:
        self.path = path
        self.keyring = keyring
        self._stack = contextlib.ExitStack()
        self._pool: Pool | None = None
        self._starting = threading.Lock()
        self._broken = False

    def pool(self) -> Pool:
        """The helpers: started with the first call, and again after they broke (a helper
        ended abruptly, :meth:`watch`), so that a program that runs for months does not
        judge everything in its own process after one helper was killed."""
        with self._starting:  # callers in two threads start one pool
            if self._pool is None or self._broken:
                # a broken pool's processes are gone; it is shut down with the others
                self._pool = judging_pool(self._stack, self.path, self.keyring)
                self._broken = False
            return self._pool

    @property
    def ready(self) -> bool:
        """Whether :meth:`pool` would return at once (helpers started and not broken)."""
        return self._pool is not None and not self._broken

    def watch(self, sent: SentBatch) -> None:
        """Note when a part of ``sent`` (sent to the current helpers) finds them broken,
        so that the next :meth:`pool` starts new ones; the parts themselves are judged
        where they are received."""
        pool = self._pool
        futures = {id(part.future): part.future for part in sent.parts}
        for future in futures.values():
            if future is None:  # the pool was broken when the part was sent
                self._broken = True
            else:
                future.add_done_callback(functools.partial(self._watched, pool))

    def _watched(self, pool: Pool | None, future: Future[JudgedPart]) -> None:
        # a part of helpers already replaced says nothing of the new ones
        if pool is self._pool and isinstance(future.exception(), BrokenProcessPool):
            self._broken = True

    def send_each(self, batches: list[list[bytes]]) -> list[SentBatch]:
        """Start judging each batch of lines now, all in the parts of one :func:`send`:
        :meth:`pithlog.store.Store.append_judged` writes them once judged. A server sends
        the requests that arrived together as they arrive, so that they are judged while
        the requests before them are written, and in parts large enough that handing a
        part to a helper costs little beside judging it."""
        at = 0
        if not isinstance(batches, list):  # None: a TypeError from the walk
            raise StoreError("item", f"send_each takes a list of batches (lists of lines), "
                             f"not a {type(batches).__name__}")  # fmt: skip
        for batch in batches:
            require_batch(batch)
            for line in batch:
                if not isinstance(line, RAW):
                    raise not_an_item(at, line)
                at += 1
        pool = self.pool()
        sent = send_each(submitter(pool), pool.processes, batches)
        self.watch(SentBatch([part for batch in sent for part in batch.parts]))
        return sent

    def close(self) -> None:
        self._pool = None
        self._stack.close()


@dataclass(frozen=True)
class SentPart:
    """Lines handed to a helper in one task: the judgements ``[at : at + len(lines)]`` of
    ``future`` (``None``: not sent, judged by whoever receives them)."""

    lines: list[bytes]
    future: Future[JudgedPart] | None
    at: int = 0


@dataclass
class SentBatch:
    """A batch of raw lines handed to the helpers (:func:`send`), judged or not yet."""

    parts: list[SentPart]

    def __len__(self) -> int:
        return sum(len(part.lines) for part in self.parts)


Submit = Callable[[list[bytes]], "Future[JudgedPart]"]
"""Hands one part of lines to a helper: the future of its :data:`JudgedPart` (raises
:class:`~concurrent.futures.process.BrokenProcessPool` when the helpers are gone)."""


def submitter(pool: Pool) -> Submit:
    """:data:`Submit` through a :class:`pithlog.parallel.Pool` of :func:`judging_pool`."""

    def submit(lines: list[bytes]) -> Future[JudgedPart]:
        return pool.submit(helper_judge, lines)

    return submit


def send(submit: Submit, helpers: int, lines: list[bytes], shares: int = 2) -> SentBatch:
    """Hand ``lines`` to ``helpers`` helpers now, in parts of :data:`JUDGE_PART` (a small
    batch in smaller parts, ``shares`` per helper, so that every helper takes a share of
    it)."""
    parts: list[SentPart] = []
    size = max(1, min(JUDGE_PART, -(-len(lines) // (shares * helpers))))
    for start in range(0, len(lines), size):
        part = lines[start : start + size]
        try:
            parts.append(SentPart(part, submit(part)))
        except BrokenProcessPool:  # a helper died before: this part is judged here
            parts.append(SentPart(part, None))
    return SentBatch(parts)


def send_each(
    submit: Submit, helpers: int, batches: list[list[bytes]], shares: int = 2
) -> list[SentBatch]:
    """:func:`send` of the batches' lines together, cut back into one
    :class:`SentBatch` per batch, in order: a batch's parts are its slices of the tasks."""
    sent = send(submit, helpers, [line for batch in batches for line in batch], shares).parts
    out: list[SentBatch] = []
    task, at = 0, 0  # the task holding the next line, and that line's place in it
    for batch in batches:
        mine: list[SentPart] = []
        left = len(batch)
        while left:
            part = sent[task]
            take = min(left, len(part.lines) - at)
            mine.append(SentPart(part.lines[at : at + take], part.future, part.at + at))
            left -= take
            at += take
            if at == len(part.lines):
                task, at = task + 1, 0
        out.append(SentBatch(mine))
    return out


@dataclass
class Received:
    """A sent batch once judged, as :class:`pithlog.store.append.StartedBatch` holds it."""

    items: list[Envelope | DoorError]
    hashes: list[bytes | None]
    fresh: list[bytes]
    reasons: list[str | None]
    packed: dict[bytes, tuple[bytes, bytes]]
    """Copy hash -> (packer tag, stored value) of the copies new to the store."""


def receive(sent: SentBatch, read: Read, keyring: Keyring) -> Received:
    """The judgements of ``sent``, in the order of its lines; a part whose helper ended
    abruptly is judged here, through ``read`` and ``keyring``."""
    items: list[Envelope | DoorError] = []
    hashes: list[bytes | None] = []
    fresh: list[bytes] = []
    reasons: list[str | None] = []
    packed: dict[bytes, tuple[bytes, bytes]] = {}
    seen: set[bytes] = set()
    for part in sent.parts:
        judged = None
        if part.future is not None:
            try:
                tag, every = part.future.result()
                judged = tag, every[part.at : part.at + len(part.lines)]
            except BrokenProcessPool:
                HelperLost.warn()
        if judged is None:
            judged = judge_lines(part.lines, keyring, read)
        tag, judgements = judged
        for judgement in judgements:
            if isinstance(judgement, DoorError):
                items.append(judgement)
                hashes.append(None)
                continue
            encoded, h, verdict, stored, hints = judgement
            items.append(readmit(encoded) if hints is None else readmit_light(encoded, hints))
            hashes.append(h)
            if h not in seen:
                seen.add(h)
                if verdict != STORED:
                    fresh.append(h)
                    reasons.append(verdict)
                if stored is not None:
                    packed[h] = (tag, stored)
    return Received(items, hashes, fresh, reasons, packed)


def judge_lines(lines: list[bytes], keyring: Keyring, read: Read) -> JudgedPart:
    """The door for each line, and checks 1-12 (signatures verified here, one after the
    other) of each copy that the store does not hold and that is new to ``lines``; such a
    copy is packed as the store keeps it, too."""
    door = [item if isinstance(item, DoorError) else (item, copy_hash(item.encoded))
            for item in parse_envelopes(lines)]  # fmt: skip
    envelopes: dict[bytes, Envelope] = {}  # copy hash -> the copy, once
    for item in door:
        if not isinstance(item, DoorError):
            envelopes.setdefault(item[1], item[0])
    new, pack = read(lambda txn, dbs: (unseen(envelopes, txn, dbs), codec.packer(txn, dbs)))
    judged = {
        h: (reason, pack(envelopes[h].encoded), reduction_hints(envelopes[h], reason))
        for h, reason in zip(new, check_many([envelopes[h] for h in new], keyring), strict=True)
    }
    out: list[Judgement] = []
    for item in door:
        if isinstance(item, DoorError):
            out.append(item)
            continue
        env, h = item
        out.append((env.encoded, h, *judged.get(h, (STORED, None, None))))
    return pack.tag, out


def unseen(envelopes: dict[bytes, Envelope], txn: Txn, dbs: dict[str, Any]) -> list[bytes]:
    """The copy hashes of ``envelopes`` that the store holds neither as an event's copy nor
    as evidence (a read transaction's work)."""
    out = []
    for h, env in envelopes.items():
        eid = eid_bytes(env.event_id)
        # evidence holds other copies of stored event_ids only; which copy a pointer
        # names is read from seq, so nothing is unpacked here
        if txn.get(eid, db=dbs["events"]) is None or copy_pointer(txn, dbs, eid + h) is None:
            out.append(h)
    return out


_HELPER: dict[str, Any] = {}


def helper_start(path: str, entries: list[dict[str, Any]]) -> None:
    """Set up a judging helper's process: the store at ``path`` read-only, the keyring of
    ``entries``, interrupts left to the parent, a lower priority (:data:`HELPER_NICE`)."""
    leave_interrupts_to_parent()
    if hasattr(os, "nice"):  # not on Windows
        with contextlib.suppress(OSError):
            os.nice(HELPER_NICE)
    gc.disable()  # a helper holds only acyclic decoded JSON: see pithlog.cli
    # the store read-only for the life of the helper: no page walk (the appending process
    # opened it), LMDB's read-only mode, its reader slot registered like any reader's
    _HELPER["read"] = acquire(path, create=False, readonly=True).read
    _HELPER["keyring"] = make_keyring(entries)


def helper_judge(lines: list[bytes]) -> JudgedPart:
    """:func:`judge_lines` in a helper set up by :func:`helper_start`."""
    return judge_lines(lines, _HELPER["keyring"], _HELPER["read"])
