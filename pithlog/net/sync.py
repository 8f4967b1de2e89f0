"""Sync: bring into a store the copies another store (or an export file) holds and it lacks,
finding them by range-based set reconciliation (after negentropy) instead of listing
everything (``docs/transparency.md``).

**Items.** Every distinct stored copy, preferred or evidence, is one item of 64 bytes: its
event_id (32 raw bytes) followed by the SHA-256 of its JCS bytes. Both sides sort their
items bytewise (a store lists them from the pointers of ``events`` and ``evidence``).

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

**Messages** are in :mod:`pithlog.net.syncmsg`.

**The other side is hostile** (``docs/transparency.md``, "Sync's limits"). Every message
either way is at most :data:`MAX_MESSAGE` bytes; the pulling side stops after
:data:`MAX_ROUNDS` rounds or :data:`MAX_RECONCILE_BYTES` bytes of reconciliation, refuses
a reply with more ranges than :data:`BRANCHES` per range asked, and a listing of more than
``max_needed`` missing copies; every fetched copy must go through the door and hash to the
short id asked for; copies failing checks 1-12 are kept only when the source proves them
leaves of a checkpoint the keyring trusts (``P``/``Q``), never on its word.

The remote side is a :class:`Responder` over a sorted item list (:mod:`pithlog.net.sources`:
a store opened read-only, or the copies of a JSON Lines export file put through the door).
A :class:`Channel` passes its messages in memory; :mod:`pithlog.net.sync_http` carries the
same messages over HTTP.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from pithlog.errors import DoorError, SyncError, register
from pithlog.net.syncmsg import (
    BRANCHES,
    EXPAND,
    FINGERPRINT_MODE,
    INFINITY,
    ITEM,
    ITEMS,
    LIST_ALL,
    LIST_LIMIT,
    SKIP,
    Bound,
    Entry,
    Reader,
    between,
    decode_prove,
    decode_reconcile,
    decode_shorts,
    encode_reconcile,
    encode_shorts,
    fingerprint,
    item_of,
    merged,
    position,
    short_id,
    varint,
)
from pithlog.protocol.events import Envelope, parse_envelope
from pithlog.protocol.keys import Keyring
from pithlog.store import AppendResult, Store
from pithlog.store.append import KeepInvalid
from pithlog.transparency import merkle
from pithlog.transparency.checkpoint import Checkpoint

register(
    {
        "sync.source": "the sync source is neither a pithlog store folder nor a readable JSON "
        "Lines export file: check --from",
        "sync.protocol": "the other side sent a message that breaks the sync protocol",
        "sync.limit": "the other side went past a limit of sync (rounds, bytes, message size "
        "or copies listed): a hostile or broken source; see docs/transparency.md",
        "sync.mismatch": "the source sent a copy that is not the one asked for (its hash is "
        "not the short id, or it fails the door): the source is hostile or broken",
    }
)

FETCH_BATCH = 1000
"""Copies per fetch message, and per append transaction."""

# --- limits: what a hostile other side can make this side do (docs/transparency.md) ------

MAX_MESSAGE = 32 << 20
"""Bytes of one message, either way (a reply listing 2 million short ids; a data message
of 32 copies of the largest size the door admits). A responder answers a fetch with a
prefix of the copies asked when all of them would not fit."""
MAX_ROUNDS = 32
"""Reconcile rounds of one sync. An honest source needs about ``log16(n / 16) + 2``: 5 for
100,000 copies, 9 for 10^9."""
MAX_RECONCILE_BYTES = 256 << 20
"""Bytes of reconciliation (both ways, all rounds) of one sync."""
MAX_NEEDED = 1_000_000
"""Missing copies one sync may list (16 bytes each in memory, and every one fetched). A
store further behind than that catches up by several syncs, or from an export by
``import``, or from a served log by ``mirror``."""
MAX_LISTED = 1 << 20
"""A responder lists a range whole (on ``list all``) only up to this many items; a larger
range is answered with its parts' fingerprints, as for ``expand``."""
PROVE_BATCH = 1000
"""Copies per ``P`` (prove) message."""
MAX_PROOFS = 4096
"""Copies one ``P`` message may ask proofs of (a responder reads an inclusion path, a few
stored hashes, for each)."""


@dataclass(frozen=True)
class Limits:
    """The limits of one sync, the pulling side's and the responding side's."""

    max_message: int = MAX_MESSAGE
    max_rounds: int = MAX_ROUNDS
    max_reconcile_bytes: int = MAX_RECONCILE_BYTES
    max_needed: int = MAX_NEEDED
    max_listed: int = MAX_LISTED
    max_proofs: int = MAX_PROOFS


# --- the two sides ------------------------------------------------------------------------

Order = Callable[[list[bytes]], list[bytes]]
"""Items -> those held, in the holder's append order."""
Copies = Callable[[list[bytes]], list[bytes]]
"""Items (all held) -> their JCS bytes, in the order asked."""
Prove = Callable[[int, list[bytes]], list[tuple[int, list[bytes]] | None]]
"""(tree size, items) -> per item, its leaf index and RFC 9162 inclusion path in the tree of
that size, or ``None`` when it is not a leaf below that size."""

_COPIES_PART = 256
"""Copies read from the holder at a time while a data message is filled."""
_MAX_PATH = 64
"""Hashes in an inclusion path: a tree of fewer than 2**64 leaves needs at most 64."""


class Responder:
    """The remote side: answers ``R``, ``F``, ``G`` and ``P`` messages over its sorted items.

    ``order``, ``copies`` and ``prove`` (:data:`Order`, :data:`Copies`, :data:`Prove`) reach
    the holder; ``prove`` is ``None`` for a holder without a Merkle tree (an export file),
    whose copies are then proven nowhere. Every message is answered from the items alone
    (nothing is kept between messages), within ``limits``: a request over
    ``max_message`` bytes is refused, a data answer is cut to fit, and a ``list all`` of
    more than ``max_listed`` items is answered with fingerprints of its parts."""

    def __init__(
        self,
        items: Sequence[bytes],
        order: Order,
        copies: Copies,
        prove: Prove | None = None,
        limits: Limits | None = None,
    ) -> None:
        self.items = items
        self._order = order
        self._copies = copies
        self._prove = prove
        self.limits = limits or Limits()
        self._by_short: dict[bytes, bytes] | None = None

    def handle(self, message: bytes) -> bytes:
        if len(message) > self.limits.max_message:
            raise SyncError("limit", f"a message of {len(message)} bytes; the most taken is "
                            f"{self.limits.max_message}")  # fmt: skip
        kind = message[:1]
        if kind == b"R":
            reply = encode_reconcile(self._reconcile(decode_reconcile(message)))
            if len(reply) > self.limits.max_message:
                raise SyncError("limit", f"the answer would take {len(reply)} bytes, over "
                                f"the {self.limits.max_message} allowed: ask about fewer "
                                "ranges at a time")  # fmt: skip
            return reply
        if kind == b"F":
            wanted = self._held(decode_shorts(message))
            return encode_shorts(b"O", [short_id(i) for i in self._order(wanted)])
        if kind == b"G":
            return self._data(self._held(decode_shorts(message)))
        if kind == b"P":
            size, shorts = decode_prove(message)
            if len(shorts) > self.limits.max_proofs:
                raise SyncError("limit", f"proofs of {len(shorts)} copies asked in one "
                                f"message; at most {self.limits.max_proofs}")  # fmt: skip
            return self._proofs(size, shorts)
        raise SyncError("protocol", f"unknown message kind {kind!r}")

    def _held(self, shorts: list[bytes]) -> list[bytes]:
        if self._by_short is None:
            self._by_short = {short_id(item): item for item in self.items}
        by_short = self._by_short
        return [by_short[w] for w in shorts if w in by_short]

    def _data(self, wanted: list[bytes]) -> bytes:
        """A ``D`` message: the copies of ``wanted`` in that order, or as many of the first
        as fit in a message (at least one: a copy is at most 1 MiB, by the door)."""
        room = self.limits.max_message - 1 - 10
        parts: list[bytes] = []
        full = False
        for start in range(0, len(wanted), _COPIES_PART):
            for data in self._copies(wanted[start : start + _COPIES_PART]):
                piece = varint(len(data)) + data
                if parts and len(piece) > room:
                    full = True
                    break
                room -= len(piece)
                parts.append(piece)
            if full:
                break
        return b"D" + varint(len(parts)) + b"".join(parts)

    def _proofs(self, size: int, shorts: list[bytes]) -> bytes:
        out = bytearray(b"Q")
        if self._by_short is None:
            self._by_short = {short_id(item): item for item in self.items}
        items = [self._by_short.get(s) for s in shorts]
        held = [i for i in items if i is not None]
        proofs = iter(self._prove(size, held) if self._prove is not None and held else [])
        for item in items:
            proof = next(proofs, None) if item is not None else None
            if proof is None:
                out += varint(0)
                continue
            index, path = proof
            out += varint(index + 1) + varint(len(path)) + b"".join(path)
        return bytes(out)

    def _reconcile(self, entries: list[Entry]) -> list[Entry]:
        out: list[Entry] = []
        lower = 0
        listed = 0
        for e in entries:
            upper = position(self.items, e.bound)
            lo, hi = lower, max(lower, upper)
            lower = hi
            if e.mode == SKIP or e.mode == ITEMS:
                out.append(Entry(e.bound, SKIP))
            elif e.mode == LIST_ALL and (hi - lo <= LIST_LIMIT
                                         or listed + hi - lo <= self.limits.max_listed):
                listed += hi - lo
                out.append(Entry(e.bound, ITEMS, items=self._shorts(lo, hi)))
            elif e.mode == FINGERPRINT_MODE and e.fingerprint == fingerprint(self.items, lo, hi):
                out.append(Entry(e.bound, SKIP))
            else:
                out.extend(self._split(lo, hi, e.bound))
        return merged(out)

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


class Transport(Protocol):
    """What carries the pulling side's messages to a responder and counts them: the
    in-memory :class:`Channel`, or HTTP (:mod:`pithlog.net.sync_http`)."""

    sent: int
    received: int
    messages: int
    remote_items: int | None
    """The responder's item count, when it says it (for the report only: never trusted)."""

    def request(self, message: bytes) -> bytes: ...


class Channel:
    """Carries messages to a :class:`Responder` in memory, counting every byte."""

    def __init__(self, responder: Responder) -> None:
        self.responder = responder
        self.sent = 0
        self.received = 0
        self.messages = 0
        self.remote_items: int | None = len(responder.items)

    def request(self, message: bytes) -> bytes:
        self.sent += len(message)
        reply = self.responder.handle(message)
        self.received += len(reply)
        self.messages += 2
        return reply


def _ask(channel: Transport, message: bytes, limits: Limits) -> bytes:
    reply = channel.request(message)
    if len(reply) > limits.max_message:
        raise SyncError("limit", f"an answer of {len(reply)} bytes; the most taken is "
                        f"{limits.max_message}")  # fmt: skip
    return reply


def reconcile(
    local: Sequence[bytes], channel: Transport, limits: Limits | None = None
) -> tuple[list[bytes], int]:
    """The short ids of the items the remote side holds and ``local`` (sorted) lacks,
    sorted; and the number of round trips it took. Raises ``sync.limit`` when the remote
    side drives it past ``limits`` (rounds, bytes, ranges per answer, copies listed)."""
    limits = limits or Limits()
    if local:
        request = [Entry(INFINITY, FINGERPRINT_MODE, fingerprint(local, 0, len(local)))]
    else:
        request = [Entry(INFINITY, LIST_ALL)]
    need: set[bytes] = set()
    rounds = spent = 0
    while any(e.mode != SKIP for e in request):
        rounds += 1
        if rounds > limits.max_rounds:
            raise SyncError("limit", f"reconciliation did not end in {limits.max_rounds} "
                            "rounds: the source keeps answering with new ranges")  # fmt: skip
        message = encode_reconcile(request)
        answer = _ask(channel, message, limits)
        spent += len(message) + len(answer)
        if spent > limits.max_reconcile_bytes:
            raise SyncError("limit", f"reconciliation took over {limits.max_reconcile_bytes} "
                            "bytes")  # fmt: skip
        reply = decode_reconcile(answer)
        # each range asked about is answered whole, or cut in at most BRANCHES parts
        if len(reply) > BRANCHES * len(request):
            raise SyncError("limit", f"an answer of {len(reply)} ranges to {len(request)} "
                            f"asked (at most {BRANCHES} each)")  # fmt: skip
        request = []
        lower = 0
        for e in reply:
            upper = max(lower, position(local, e.bound))
            lo, hi = lower, upper
            lower = hi
            if e.mode == ITEMS:
                mine = {short_id(item) for item in local[lo:hi]}
                need.update(item for item in e.items if item not in mine)
                if len(need) > limits.max_needed:
                    raise SyncError("limit", f"the source lists more than {limits.max_needed} "
                                    "copies this store lacks; sync again after this one, or "
                                    "import an export / mirror the log")  # fmt: skip
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
        request = merged(request)
    return sorted(need), rounds


def append_order(
    channel: Transport, wanted: Sequence[bytes], limits: Limits | None = None
) -> list[bytes]:
    """The ``wanted`` short ids in the remote's append order."""
    reply = _ask(channel, encode_shorts(b"F", wanted), limits or Limits())
    if reply[:1] != b"O":
        raise SyncError("protocol", "expected an order message")
    ordered = decode_shorts(reply)
    if sorted(ordered) != sorted(wanted):
        raise SyncError("protocol", "the order message does not hold the copies asked for")
    return ordered


def admit_copy(data: bytes, asked: bytes) -> Envelope:
    """A fetched copy through the door, which must be the copy of short id ``asked``."""
    try:
        env = parse_envelope(data)
    except DoorError as exc:
        raise SyncError("mismatch", f"a copy sent for short id {asked.hex()} fails the door: "
                        f"{exc.describe()}") from exc  # fmt: skip
    if short_id(item_of(env.event_id, env.encoded)) != asked:
        raise SyncError("mismatch", f"the copy sent for short id {asked.hex()} is another "
                        f"({env.event_id})")  # fmt: skip
    return env


def fetch(
    channel: Transport, wanted: Sequence[bytes], limits: Limits | None = None
) -> list[Envelope]:
    """The copies of the ``wanted`` short ids, in that order, each through the door and
    checked against its short id (``sync.mismatch`` otherwise). A responder may answer
    with the first of them only (message size): the rest is asked again."""
    limits = limits or Limits()
    out: list[Envelope] = []
    rest = list(wanted)
    while rest:
        reader = Reader(_ask(channel, encode_shorts(b"G", rest), limits))
        if reader.take(1) != b"D":
            raise SyncError("protocol", "expected a data message")
        count = reader.varint()
        if not 0 < count <= len(rest):
            raise SyncError("protocol", f"a data message of {count} copies for {len(rest)} "
                            "asked")  # fmt: skip
        out += [admit_copy(reader.take(reader.varint()), asked) for asked in rest[:count]]
        if not reader.done():
            raise SyncError("protocol", "trailing bytes after the copies of a data message")
        rest = rest[count:]
    return out


def proven_copies(
    channel: Transport, checkpoint: Checkpoint, items: Sequence[bytes],
    limits: Limits | None = None,
) -> set[bytes]:  # fmt: skip
    """The copy hashes of those ``items`` that the remote proves to be leaves of the tree
    ``checkpoint`` signs (an RFC 9162 inclusion path to its root, checked here)."""
    limits = limits or Limits()
    proven: set[bytes] = set()
    for start in range(0, len(items), PROVE_BATCH):
        part = items[start : start + PROVE_BATCH]
        message = b"P" + varint(checkpoint.size) + encode_shorts(b"", [short_id(i) for i in part])
        reader = Reader(_ask(channel, message, limits))
        if reader.take(1) != b"Q":
            raise SyncError("protocol", "expected a proofs message")
        for item in part:
            index = reader.varint()
            if not index:
                continue
            count = reader.varint()
            if count > _MAX_PATH:
                raise SyncError("protocol", f"an inclusion path of {count} hashes")
            raw = reader.take(count * merkle.HASH_SIZE)
            path = [raw[i : i + merkle.HASH_SIZE] for i in range(0, len(raw), merkle.HASH_SIZE)]
            if merkle.verify_inclusion(merkle.leaf_hash(item), index - 1, checkpoint.size, path,
                                       checkpoint.root):  # fmt: skip
                proven.add(item[ITEM // 2 :])
        if not reader.done():
            raise SyncError("protocol", "trailing bytes after the proofs")
    return proven


# --- the whole pull -----------------------------------------------------------------------


@dataclass
class SyncReport:
    local_items: int
    remote_items: int | None
    needed: int
    rounds: int
    reconcile_sent: int
    reconcile_received: int
    fetch_sent: int = 0
    fetch_received: int = 0
    messages: int = 0
    proven: int = 0
    """Copies the source proved leaves of the trusted checkpoint (``trusted`` only)."""
    statuses: Counter[str] = field(default_factory=Counter)

    @property
    def bytes_exchanged(self) -> int:
        return (self.reconcile_sent + self.reconcile_received + self.fetch_sent
                + self.fetch_received)  # fmt: skip


def pull(
    store: Store,
    remote: Responder | Transport,
    keyring: Keyring,
    trusted: Checkpoint | None = None,
    batch: int = FETCH_BATCH,
    on_batch: Callable[[list[bytes]], None] | None = None,
    limits: Limits | None = None,
    on_results: Callable[[list[AppendResult]], None] | None = None,
) -> SyncReport:
    """Reconcile ``store`` with ``remote``, fetch what it lacks and append it (one
    transaction per batch), in the remote's append order.

    Copies failing checks 1-12 are rejected (and asked for again by the next sync), except
    with ``trusted``, a checkpoint the caller verified against the keyring: then those the
    remote proves to be leaves of that checkpoint's tree are kept, as its log holds them
    (``keep_invalid`` of append for exactly those copies). A source's word is never
    enough to keep an invalid copy."""
    limits = limits or Limits()
    channel = Channel(remote) if isinstance(remote, Responder) else remote
    local = store.copy_keys()
    need, rounds = reconcile(local, channel, limits)
    report = SyncReport(len(local), channel.remote_items, len(need), rounds, channel.sent,
                        channel.received)  # fmt: skip
    ordered = append_order(channel, need, limits) if need else []
    for chunk in _chunks(ordered, max(1, batch)):
        envelopes = fetch(channel, chunk, limits)
        keep: KeepInvalid = False
        if trusted is not None:
            keep = proven_copies(channel, trusted,
                                 [item_of(e.event_id, e.encoded) for e in envelopes], limits)
            report.proven += len(keep)
        results = store.append(envelopes, keyring, keep_invalid=keep)
        for result in results:
            report.statuses[result.status] += 1
        if on_results is not None:  # committed: an interrupt after this keeps them
            on_results(results)
        if on_batch is not None:
            on_batch([e.encoded for e in envelopes])
    report.fetch_sent = channel.sent - report.reconcile_sent
    report.fetch_received = channel.received - report.reconcile_received
    report.messages = channel.messages
    return report


def _chunks(items: Sequence[bytes], size: int) -> Iterator[list[bytes]]:
    for i in range(0, len(items), size):
        yield list(items[i : i + size])
