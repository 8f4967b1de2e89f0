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
either way is at most :data:`MAX_MESSAGE` bytes, and a reconcile message asks about at
most :data:`MAX_RANGES` ranges (the pulling side asks in several messages when a round
has more); the pulling side stops after
:data:`MAX_ROUNDS` rounds or :data:`MAX_RECONCILE_BYTES` bytes of reconciliation, refuses
a reply with more ranges than :data:`BRANCHES` per range asked, and a listing of more than
``max_needed`` missing copies; every fetched copy must go through the door and hash to the
short id asked for; copies failing checks 1-12 are kept only when the source proves them
leaves of a checkpoint the keyring trusts (``P``/``Q``), never on its word.

The remote side is a :class:`Responder` over a sorted item list (:mod:`pithlog.net.sources`:
a store opened read-only, or the copies of a JSON Lines export file put through the door).
The pulling side is :mod:`pithlog.net.sync_pull`: a :class:`~pithlog.net.sync_pull.Channel`
passes its messages in memory; :mod:`pithlog.net.sync_http` carries the same messages over
HTTP.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pithlog.errors import SyncError, register
from pithlog.net.syncmsg import (
    BRANCHES,
    FINGERPRINT_MODE,
    ITEMS,
    LIST_ALL,
    LIST_LIMIT,
    SHORT,
    SKIP,
    Bound,
    Entry,
    between,
    decode_prove,
    decode_reconcile,
    decode_shorts,
    encode_reconcile,
    encode_shorts,
    fingerprint,
    merged,
    position,
    short_id,
    varint,
)

register(
    {
        "sync.source": "the export file given to --from changed while it was synced from "
        "(a line read again no longer passes the door): run the sync again once nothing "
        "writes the file",
        "sync.mismatch": "the source sent a copy that is not the one asked for (its hash is "
        "not the short id, or it fails the door): the source is hostile or broken",
    }
)

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
"""Missing copies one sync may list (every one fetched; the pulling side holds each as a
16-byte short id object, about 60 bytes of memory once listed and 120 once ordered). A
sync whose source lists more fetches nothing: a store further behind than that raises the
limit (up to :data:`MAX_ORDERED`), or catches up from an export by ``import``, or from a
served log by ``mirror``."""
MAX_ORDERED = (MAX_MESSAGE - 1 - 10) // SHORT
"""The most ``max_needed`` can be (2,097,151): the copies a sync fetches are put in the
source's order by one ``F`` message, a kind byte, a varint count and their short ids, which
must fit in :data:`MAX_MESSAGE`."""
MAX_LISTED = 1 << 20
"""A responder lists a range whole (on ``list all``) only up to this many items; a larger
range is answered with its parts' fingerprints, as for ``expand``."""
MAX_PROOFS = 4096
"""Copies one ``P`` message may ask proofs of (a responder reads an inclusion path, a few
stored hashes, for each)."""
MAX_RANGES = 4096
"""Ranges one reconcile message may ask about (its answer holds at most :data:`BRANCHES`
per range asked). Each range costs a Python object or more on both sides: a request of 6
million ranges of a few bytes each fits in :data:`MAX_MESSAGE` and held a responder for 52
s and 2 GB. The pulling side asks about more ranges than this in several messages."""
MAX_ASKED_ITEMS = 4096
"""Short ids the item lists of one reconcile message to a responder may hold in all. A
responder answers a range given as an item list as skipped (the pulling side never sends
one: it asks about ranges, it does not list what it holds), so those ids are only bytes to
split: 2 million of them fit in :data:`MAX_MESSAGE` and took 0.4-1 s and 150 MB to split
before any was looked at. Checked from the counts the message declares, before the ids
are read."""
MAX_SECONDS = 3600.0
"""Seconds one sync from a URL may take in all by default (``sync --max-time``). Each
answer has a deadline of its own (about 2 minutes for a message of :data:`MAX_MESSAGE`),
but a source may answer each fetch with one copy, just in time: a million copies asked,
each message under its deadline, held a sync for years. What a sync committed before it
was cut off stays stored, and the same sync run again fetches the rest."""


@dataclass(frozen=True)
class Limits:
    """The limits of one sync, the pulling side's and the responding side's."""

    max_message: int = MAX_MESSAGE
    max_rounds: int = MAX_ROUNDS
    max_reconcile_bytes: int = MAX_RECONCILE_BYTES
    max_needed: int = MAX_NEEDED
    max_listed: int = MAX_LISTED
    max_proofs: int = MAX_PROOFS
    max_ranges: int = MAX_RANGES
    max_asked_items: int = MAX_ASKED_ITEMS


# --- the remote side ----------------------------------------------------------------------

Order = Callable[[list[bytes]], list[bytes]]
"""Items -> those held, in the holder's append order."""
Copies = Callable[[list[bytes]], list[bytes]]
"""Items (all held) -> their JCS bytes, in the order asked."""
Prove = Callable[[int, list[bytes]], list[tuple[int, list[bytes]] | None]]
"""(tree size, items) -> per item, its leaf index and RFC 9162 inclusion path in the tree of
that size, or ``None`` when it is not a leaf below that size."""

_COPIES_PART = 256
"""Copies read from the holder at a time while a data message is filled."""


class Responder:
    """The remote side: answers ``R``, ``F``, ``G`` and ``P`` messages over its sorted items.

    ``order``, ``copies`` and ``prove`` (:data:`Order`, :data:`Copies`, :data:`Prove`) reach
    the holder; ``prove`` is ``None`` for a holder without a Merkle tree (an export file),
    whose copies are then proven nowhere. Every message is answered from the items alone
    (nothing is kept between messages), within ``limits``: a request over
    ``max_message`` bytes, asking about more than ``max_ranges`` ranges or listing more
    than ``max_asked_items`` items is refused, a
    data answer is cut to fit, and a ``list all`` of
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
            asked = decode_reconcile(message, self.limits.max_ranges,
                                     self.limits.max_asked_items)  # fmt: skip
            reply = encode_reconcile(self._reconcile(asked))
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
            size, shorts = decode_prove(message, self.limits.max_proofs)
            return self._proofs(size, shorts)
        raise SyncError("protocol", f"unknown message kind {kind!r}")

    def _held(self, shorts: list[bytes]) -> list[bytes]:
        """The items of ``shorts`` held here, each once, in the order first asked: an
        order or fetch message repeating one short id two million times made the holder
        look it up two million times (19 s per message over a store of 40 copies)."""
        if self._by_short is None:
            self._by_short = {short_id(item): item for item in self.items}
        by_short = self._by_short
        return [by_short[w] for w in dict.fromkeys(shorts) if w in by_short]

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
