"""Sync: bring into a store the copies another store (or an export file) holds and it lacks,
finding them by range-based set reconciliation (after negentropy) instead of listing
everything (``docs/transparency.md``).

**Items.** Every distinct stored copy, preferred or evidence, is one item of 64 bytes: its
event_id (32 raw bytes) followed by the SHA-256 of its JCS bytes. Both sides sort their
items bytewise (a store keeps them sorted in ``copy_seq``).

**Ranges and fingerprints.** A range is every item ``x`` with ``lower <= x < upper``; the
bounds are byte strings, compared bytewise, and a bound may be a short prefix (the shortest
one that falls between two neighbouring items). The fingerprint of a range is the first 16
bytes of ``SHA-256(count as 8 bytes big-endian || the items in order)``: equal item sets
give equal fingerprints, and a difference shows with overwhelming probability.

**Rounds.** The local side (the one that pulls) starts with the fingerprint of everything.
The remote side answers each range it is asked about: nothing (``skip``) when the
fingerprints agree; else the list of its items in the range when there are at most
:data:`LIST_LIMIT` of them; else the range cut into :data:`BRANCHES` parts of about equal
counts, each with its fingerprint. The local side compares each part with its own items:
equal parts are done; others it asks about again (``expand``; ``list all`` when it holds
nothing there). A listed range tells the local side exactly which items it lacks. It then
asks for their order (``F``): the remote sorts them by its append order. Then it fetches
them (``G``) in batches in that order and appends each batch to its store, so a store whose
log is a prefix of the remote's ends with the same log, hence the same Merkle tree.

**Messages.** Binary, and every byte of every message is counted by the :class:`Channel`.
A message is a kind byte and a body:

- ``R`` (reconcile, both directions): entries that cover the item space in order, each
  ``bound mode payload``; ``bound`` is a length byte (0-64, or 255 for "no upper bound")
  and that many bytes; ``mode`` is 0 skip, 1 fingerprint (16 bytes), 2 item list (count as
  a LEB128 varint, then the items' 16-byte short ids), 3 expand, 4 list all.
- ``F`` (order, local to remote): a varint count and the 16-byte short ids wanted (a
  short id is the first 16 bytes of the SHA-256 of the 64-byte item).
- ``O`` (order, remote to local): the same short ids, in the remote's append order.
- ``G`` (fetch, local to remote): a varint count and short ids, a batch of the ordered list.
- ``D`` (data, remote to local): a varint count, then per copy a varint length and its JCS
  bytes, in the order asked.

The remote side is a :class:`Responder` over a sorted item list: a store opened read-only
in the same process, or the copies of a JSON Lines export file put through the door. A
real deployment would carry the same messages over a network; here a :class:`Channel`
passes them in memory.
"""

from __future__ import annotations

import bisect
import hashlib
import struct
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from pithlog.errors import DoorError, SyncError, register
from pithlog.protocol.events import parse_envelope
from pithlog.protocol.keys import Keyring
from pithlog.store import AppendResult, Store

register(
    {
        "sync.source": "the sync source is neither a pithlog store folder nor a readable JSON "
        "Lines export file: check --from",
        "sync.protocol": "the other side sent a message that breaks the sync protocol",
    }
)

ITEM = 64
"""event_id (32) + copy hash (32)."""
SHORT = 16
"""A short id: the first 16 bytes of the SHA-256 of the 64-byte item."""
FINGERPRINT = 16
BRANCHES = 16
"""Parts a range is cut into when its fingerprints differ."""
LIST_LIMIT = 16
"""A differing range of at most this many items (on the remote side) is listed whole."""
FETCH_BATCH = 1000
"""Copies per fetch message, and per append transaction."""

SKIP, FINGERPRINT_MODE, ITEMS, EXPAND, LIST_ALL = range(5)
INFINITY = None
_INF_BYTE = 255
_FP_LENGTH = struct.Struct(">Q")

Bound = bytes | None
"""An exclusive upper bound: a byte string, or ``None`` for "no upper bound"."""


def short_id(item: bytes) -> bytes:
    """What item lists and fetches carry: ``SHA-256(item)[:16]``. Hashing the whole item
    (not a prefix of it) keeps two copies of one event_id apart and leaves no cheaper way
    to make an item collide with another than a 128-bit second preimage."""
    return hashlib.sha256(item).digest()[:SHORT]


def fingerprint(items: Sequence[bytes], lo: int, hi: int) -> bytes:
    """The fingerprint of ``items[lo:hi]`` (sorted 64-byte items)."""
    h = hashlib.sha256(_FP_LENGTH.pack(hi - lo))
    h.update(b"".join(items[lo:hi]))
    return h.digest()[:FINGERPRINT]


def position(items: Sequence[bytes], bound: Bound) -> int:
    """The number of items below ``bound``."""
    return len(items) if bound is None else bisect.bisect_left(items, bound)


def between(below: bytes, above: bytes) -> bytes:
    """The shortest prefix ``p`` of ``above`` with ``below < p <= above``."""
    for length in range(1, len(above) + 1):
        if above[:length] > below[:length]:
            return above[:length]
    raise ValueError("items must be distinct and sorted")


# --- encoding -----------------------------------------------------------------------------


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.at = 0

    def done(self) -> bool:
        return self.at >= len(self.data)

    def take(self, n: int) -> bytes:
        if n < 0 or self.at + n > len(self.data):
            raise SyncError("protocol", "a message ends in the middle of a value")
        chunk = self.data[self.at : self.at + n]
        self.at += n
        return chunk

    def byte(self) -> int:
        return self.take(1)[0]

    def varint(self) -> int:
        n = shift = 0
        while True:
            byte = self.byte()
            n |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return n
            shift += 7
            if shift > 63:
                raise SyncError("protocol", "a varint is longer than 64 bits")

    def bound(self) -> Bound:
        length = self.byte()
        if length == _INF_BYTE:
            return None
        if length > ITEM:
            raise SyncError("protocol", f"a bound of {length} bytes")
        return self.take(length)


@dataclass(frozen=True)
class Entry:
    """One range of a reconcile message: its upper bound, mode and payload."""

    bound: Bound
    mode: int
    fingerprint: bytes = b""
    items: tuple[bytes, ...] = ()


def encode_reconcile(entries: Iterable[Entry]) -> bytes:
    out = bytearray(b"R")
    for e in entries:
        if e.bound is None:
            out.append(_INF_BYTE)
        else:
            out.append(len(e.bound))
            out += e.bound
        out.append(e.mode)
        if e.mode == FINGERPRINT_MODE:
            out += e.fingerprint
        elif e.mode == ITEMS:
            out += _varint(len(e.items))
            out += b"".join(e.items)  # short ids
    return bytes(out)


def decode_reconcile(data: bytes) -> list[Entry]:
    reader = _Reader(data)
    if reader.take(1) != b"R":
        raise SyncError("protocol", "expected a reconcile message")
    entries: list[Entry] = []
    previous: Bound = b""
    while not reader.done():
        bound = reader.bound()
        if previous is None or (bound is not None and bound <= previous):
            raise SyncError("protocol", "range bounds do not increase")
        mode = reader.byte()
        if mode == FINGERPRINT_MODE:
            entries.append(Entry(bound, mode, reader.take(FINGERPRINT)))
        elif mode == ITEMS:
            count = reader.varint()
            raw = reader.take(count * SHORT)
            items = tuple(raw[i : i + SHORT] for i in range(0, len(raw), SHORT))
            entries.append(Entry(bound, mode, items=items))
        elif mode in (SKIP, EXPAND, LIST_ALL):
            entries.append(Entry(bound, mode))
        else:
            raise SyncError("protocol", f"unknown range mode {mode}")
        previous = bound
    if entries and entries[-1].bound is not None:
        raise SyncError("protocol", "the last range of a message must have no upper bound")
    return entries


def _encode_shorts(kind: bytes, shorts: Sequence[bytes]) -> bytes:
    return kind + _varint(len(shorts)) + b"".join(shorts)


def _decode_shorts(message: bytes) -> list[bytes]:
    reader = _Reader(message)
    reader.take(1)
    raw = reader.take(reader.varint() * SHORT)
    if not reader.done():
        raise SyncError("protocol", "trailing bytes after a list of short ids")
    return [raw[i : i + SHORT] for i in range(0, len(raw), SHORT)]


def _merged(entries: Iterable[Entry]) -> list[Entry]:
    """Adjacent skips merged into one."""
    out: list[Entry] = []
    for e in entries:
        if e.mode == SKIP and out and out[-1].mode == SKIP:
            out[-1] = e
        else:
            out.append(e)
    return out


# --- the two sides ------------------------------------------------------------------------


class Responder:
    """The remote side: answers reconcile, order and fetch messages over its sorted items.

    ``order(items)`` sorts items by the remote's append order (leaving out those it does
    not hold); ``copies(items)`` gives their JCS bytes, in the order asked."""

    def __init__(
        self,
        items: Sequence[bytes],
        order: Callable[[list[bytes]], list[bytes]],
        copies: Callable[[list[bytes]], list[bytes]],
    ) -> None:
        self.items = items
        self._order = order
        self._copies = copies
        self._by_short: dict[bytes, bytes] | None = None

    def handle(self, message: bytes) -> bytes:
        kind = message[:1]
        if kind == b"R":
            return encode_reconcile(self._reconcile(decode_reconcile(message)))
        if kind in (b"F", b"G"):
            if self._by_short is None:
                self._by_short = {short_id(item): item for item in self.items}
            by_short = self._by_short
            wanted = [by_short[w] for w in _decode_shorts(message) if w in by_short]
            if kind == b"F":
                return _encode_shorts(b"O", [short_id(i) for i in self._order(wanted)])
            data = self._copies(wanted)
            return b"D" + _varint(len(data)) + b"".join(_varint(len(d)) + d for d in data)
        raise SyncError("protocol", f"unknown message kind {kind!r}")

    def _reconcile(self, entries: list[Entry]) -> list[Entry]:
        out: list[Entry] = []
        lower = 0
        for e in entries:
            upper = position(self.items, e.bound)
            lo, hi = lower, max(lower, upper)
            lower = hi
            if e.mode == SKIP or e.mode == ITEMS:
                out.append(Entry(e.bound, SKIP))
            elif e.mode == LIST_ALL:
                out.append(Entry(e.bound, ITEMS, items=self._shorts(lo, hi)))
            elif e.mode == FINGERPRINT_MODE and e.fingerprint == fingerprint(self.items, lo, hi):
                out.append(Entry(e.bound, SKIP))
            else:
                out.extend(self._split(lo, hi, e.bound))
        return _merged(out)

    def _shorts(self, lo: int, hi: int) -> tuple[bytes, ...]:
        return tuple(short_id(item) for item in self.items[lo:hi])

    def _split(self, lo: int, hi: int, bound: Bound) -> list[Entry]:
        n = hi - lo
        if n <= LIST_LIMIT:
            return [Entry(bound, ITEMS, items=self._shorts(lo, hi))]
        out = []
        start = lo
        for part in range(1, BRANCHES + 1):
            end = hi if part == BRANCHES else lo + n * part // BRANCHES
            upper = bound if end == hi else between(self.items[end - 1], self.items[end])
            out.append(Entry(upper, FINGERPRINT_MODE, fingerprint(self.items, start, end)))
            start = end
        return out


class Channel:
    """Carries messages to a :class:`Responder` in memory, counting every byte."""

    def __init__(self, responder: Responder) -> None:
        self.responder = responder
        self.sent = 0
        self.received = 0
        self.messages = 0

    def request(self, message: bytes) -> bytes:
        self.sent += len(message)
        reply = self.responder.handle(message)
        self.received += len(reply)
        self.messages += 2
        return reply


def reconcile(local: Sequence[bytes], channel: Channel) -> tuple[list[bytes], int]:
    """The short ids of the items the remote side holds and ``local`` (sorted) lacks,
    sorted; and the number of round trips it took."""
    if local:
        request = [Entry(INFINITY, FINGERPRINT_MODE, fingerprint(local, 0, len(local)))]
    else:
        request = [Entry(INFINITY, LIST_ALL)]
    need: list[bytes] = []
    rounds = 0
    while any(e.mode != SKIP for e in request):
        rounds += 1
        reply = decode_reconcile(channel.request(encode_reconcile(request)))
        request = []
        lower = 0
        for e in reply:
            upper = max(lower, position(local, e.bound))
            lo, hi = lower, upper
            lower = hi
            if e.mode == ITEMS:
                mine = {short_id(item) for item in local[lo:hi]}
                need.extend(item for item in e.items if item not in mine)
                request.append(Entry(e.bound, SKIP))
            elif e.mode == FINGERPRINT_MODE:
                if e.fingerprint == fingerprint(local, lo, hi):
                    request.append(Entry(e.bound, SKIP))
                else:
                    request.append(Entry(e.bound, LIST_ALL if lo == hi else EXPAND))
            elif e.mode == SKIP:
                request.append(Entry(e.bound, SKIP))
            else:
                raise SyncError("protocol", f"a reply may not use range mode {e.mode}")
        request = _merged(request)
    need.sort()
    return need, rounds


def append_order(channel: Channel, wanted: Sequence[bytes]) -> list[bytes]:
    """The ``wanted`` short ids in the remote's append order."""
    reply = channel.request(_encode_shorts(b"F", wanted))
    if reply[:1] != b"O":
        raise SyncError("protocol", "expected an order message")
    ordered = _decode_shorts(reply)
    if sorted(ordered) != sorted(wanted):
        raise SyncError("protocol", "the order message does not hold the copies asked for")
    return ordered


def fetch(channel: Channel, wanted: Sequence[bytes]) -> list[bytes]:
    """The JCS bytes of the copies of the ``wanted`` short ids, in that order."""
    reply = channel.request(_encode_shorts(b"G", wanted))
    reader = _Reader(reply)
    if reader.take(1) != b"D":
        raise SyncError("protocol", "expected a data message")
    out = [reader.take(reader.varint()) for _ in range(reader.varint())]
    if not reader.done() or len(out) != len(wanted):
        raise SyncError("protocol", "the data message does not hold the copies asked for")
    return out


# --- sources ------------------------------------------------------------------------------


def item_of(event_id: str, encoded: bytes) -> bytes:
    return bytes.fromhex(event_id[len("sha256:") :]) + hashlib.sha256(encoded).digest()


def store_responder(store: Store) -> Responder:
    """The remote side over a store (open it read-only)."""

    def order(keys: list[bytes]) -> list[bytes]:
        seqs = store.copy_seqs(keys)
        return [key for seq, key in sorted(zip(seqs, keys, strict=True)) if seq is not None]

    def copies(keys: list[bytes]) -> list[bytes]:
        found = dict(store.copies(keys))
        seqs = store.copy_seqs(keys)
        return [found[seq] for seq in seqs if seq is not None and seq in found]

    return Responder(store.copy_keys(), order, copies)


@dataclass
class ExportSource:
    """The copies of a JSON Lines export, through the door: items, bytes, order."""

    copies: dict[bytes, tuple[int, bytes]] = field(default_factory=dict)
    refused: int = 0
    problems: list[tuple[int, DoorError]] = field(default_factory=list)
    """``(line number from 1, why)`` of every line refused at the door."""

    @classmethod
    def read(cls, lines: Iterable[bytes | None]) -> ExportSource:
        source = cls()
        for number, line in enumerate(lines):
            if line is None:
                source.refused += 1
                source.problems.append((number + 1, DoorError(
                    "line_too_long", "line is longer than 8 MiB")))  # fmt: skip
                continue
            try:
                env = parse_envelope(line)
            except DoorError as exc:
                source.refused += 1
                source.problems.append((number + 1, exc))
                continue
            source.copies.setdefault(item_of(env.event_id, env.encoded), (number, env.encoded))
        return source

    def responder(self) -> Responder:
        def order(keys: list[bytes]) -> list[bytes]:
            return sorted((k for k in keys if k in self.copies), key=lambda k: self.copies[k])

        def copies(keys: list[bytes]) -> list[bytes]:
            return [self.copies[k][1] for k in keys if k in self.copies]

        return Responder(sorted(self.copies), order, copies)


# --- the whole pull -----------------------------------------------------------------------


@dataclass
class SyncReport:
    local_items: int
    remote_items: int
    needed: int
    rounds: int
    reconcile_sent: int
    reconcile_received: int
    fetch_sent: int = 0
    fetch_received: int = 0
    messages: int = 0
    statuses: Counter[str] = field(default_factory=Counter)

    @property
    def bytes_exchanged(self) -> int:
        return (self.reconcile_sent + self.reconcile_received + self.fetch_sent
                + self.fetch_received)  # fmt: skip


def pull(
    store: Store,
    remote: Responder,
    keyring: Keyring,
    keep_invalid: bool = False,
    batch: int = FETCH_BATCH,
    on_batch: Callable[[list[bytes]], None] | None = None,
    on_results: Callable[[list[AppendResult]], None] | None = None,
) -> SyncReport:
    """Reconcile ``store`` with ``remote``, fetch what it lacks and append it (one
    transaction per batch). ``keep_invalid`` as for append: without it, copies failing
    checks 1-12 are rejected (and asked for again by the next sync). ``on_results`` gets
    the results of each committed transaction as it commits."""
    local = store.copy_keys()
    channel = Channel(remote)
    need, rounds = reconcile(local, channel)
    report = SyncReport(len(local), len(remote.items), len(need), rounds, channel.sent,
                        channel.received)  # fmt: skip
    ordered = append_order(channel, need) if need else []
    for chunk in _chunks(ordered, max(1, batch)):
        data = fetch(channel, chunk)
        results = store.append(data, keyring, keep_invalid=keep_invalid)
        for result in results:
            report.statuses[result.status] += 1
        if on_results is not None:  # each committed batch, as it commits (an interrupt
            on_results(results)  # may come before the report is returned)
        if on_batch is not None:
            on_batch(data)
    report.fetch_sent = channel.sent - report.reconcile_sent
    report.fetch_received = channel.received - report.reconcile_received
    report.messages = channel.messages
    return report


def _chunks(items: Sequence[bytes], size: int) -> Iterator[list[bytes]]:
    for i in range(0, len(items), size):
        yield list(items[i : i + size])
