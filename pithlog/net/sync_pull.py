"""Sync's pulling side: the rounds of reconciliation, then the copies fetched, proven and
appended (``docs/transparency.md``, "Sync").

The protocol, its limits and the remote side (:class:`~pithlog.net.sync.Responder`) are
in :mod:`pithlog.net.sync`; the messages in :mod:`pithlog.net.syncmsg`. A :class:`Channel`
passes the messages to a responder in memory; :mod:`pithlog.net.sync_http` carries them
over HTTP. :func:`pull` holds to the limits against a hostile source: at most
``max_rounds`` rounds and ``max_reconcile_bytes`` bytes of reconciliation, at most
:data:`~pithlog.net.syncmsg.BRANCHES` ranges per range asked, at most as many differing
ranges left to ask about in a round as the store's copies and ``max_needed``, at most ``max_needed``
missing copies listed; every fetched copy through the door and checked against the short
id asked for; copies failing checks 1-12 kept only when proven leaves of a trusted
checkpoint.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from pithlog.errors import DoorError, SyncError
from pithlog.net.sync import Limits, Responder
from pithlog.net.syncmsg import (
    BRANCHES,
    EXPAND,
    FINGERPRINT_MODE,
    INFINITY,
    ITEM,
    ITEMS,
    LIST_ALL,
    SKIP,
    Bound,
    Entry,
    Reader,
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

FETCH_BATCH = 1000
"""Copies per fetch message, and per append transaction."""

PROVE_BATCH = 1000
"""Copies per ``P`` (prove) message."""
_MAX_PATH = 64
"""Hashes in an inclusion path: a tree of fewer than 2**64 leaves needs at most 64."""


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
    # the ranges a round may leave to ask about: each differs, so holds an item of one side
    # only, the pulling side's (at most len(local)) or one it lacks (at most max_needed)
    most_ranges = len(local) + limits.max_needed
    while any(e.mode != SKIP for e in request):
        rounds += 1
        if rounds > limits.max_rounds:
            raise SyncError("limit", f"reconciliation did not end in {limits.max_rounds} "
                            "rounds: the source keeps answering with new ranges")  # fmt: skip
        following: list[Entry] = []
        asking = 0
        lower = 0
        for asked, after, upto in _messages(request, limits.max_ranges):
            message = encode_reconcile(asked)
            answer = _ask(channel, message, limits)
            spent += len(message) + len(answer)
            if spent > limits.max_reconcile_bytes:
                raise SyncError("limit", f"reconciliation took over "
                                f"{limits.max_reconcile_bytes} bytes")  # fmt: skip
            # each range asked about is answered whole, or cut in at most BRANCHES parts:
            # decoding stops past that, not after the whole answer is held as entries
            most = BRANCHES * len(asked)
            try:
                answered = decode_reconcile(answer, most)
            except SyncError as exc:
                if exc.code != "sync.limit":
                    raise
                raise SyncError("limit", f"an answer of more than {most} ranges to "
                                f"{len(asked)} asked (at most {BRANCHES} each)") from None
            # each answer is taken in as it comes, not held with the round's others: a
            # source cutting every range in 16 held 11 million ranges of a round at once
            # within the bytes of reconciliation (2.4 GB)
            for e in _within(answered, after, upto):
                upper = max(lower, position(local, e.bound))
                lo, hi = lower, upper
                lower = hi
                if e.mode == ITEMS:
                    mine = {short_id(item) for item in local[lo:hi]}
                    need.update(item for item in e.items if item not in mine)
                    if len(need) > limits.max_needed:
                        raise SyncError("limit", f"the source lists more than "
                                        f"{limits.max_needed} copies this store lacks, and "
                                        "none was fetched: raise --max-copies, or import "
                                        "an export / mirror the log")  # fmt: skip
                    following.append(Entry(e.bound, SKIP))
                elif e.mode == FINGERPRINT_MODE:
                    if e.fingerprint == fingerprint(local, lo, hi):
                        following.append(Entry(e.bound, SKIP))
                    else:
                        following.append(Entry(e.bound, LIST_ALL if lo == hi else EXPAND))
                        asking += 1
                        if asking > most_ranges:
                            raise SyncError("limit", f"the source leaves more than "
                                            f"{most_ranges} differing ranges to ask about in "
                                            "one round, more than the copies of this store "
                                            "and those it may lack (--max-copies) "
                                            "differ in")  # fmt: skip
                elif e.mode == SKIP:
                    following.append(Entry(e.bound, SKIP))
                else:
                    raise SyncError("protocol", f"a reply may not use range mode {e.mode}")
                if following[-1].mode == SKIP and len(following) > 1 \
                        and following[-2].mode == SKIP:  # fmt: skip
                    following[-2:] = following[-1:]  # merged as it comes (skips between)
        request = merged(following)
    return sorted(need), rounds


def _messages(
    request: list[Entry], most: int
) -> Iterator[tuple[list[Entry], bytes, Bound]]:
    """A round's request as reconcile messages of at most ``most`` ranges (``most`` >= 3),
    each with ``(after, upto)``: the ranges it asks about are those between these bounds,
    and the item space before and after them is skipped."""
    if len(request) <= most:
        yield request, b"", INFINITY
        return
    step = max(1, most - 2)
    for at in range(0, len(request), step):
        own = request[at : at + step]
        after = request[at - 1].bound if at else b""
        assert after is not None  # only the last range of a request has no upper bound
        upto = own[-1].bound
        head = [Entry(after, SKIP)] if at else []
        tail = [Entry(INFINITY, SKIP)] if upto is not INFINITY else []
        yield head + own + tail, after, upto


def _within(reply: list[Entry], after: bytes, upto: Bound) -> list[Entry]:
    """The part of a reply about the ranges between ``after`` and ``upto`` that its
    message asked about: the skips before and after them dropped or cut at those bounds.
    Only a skip may reach past them (the ranges there were skipped, and an answer cuts a
    range asked about, never joins it to another but by skips)."""
    if not after and upto is INFINITY:
        return reply
    out: list[Entry] = []
    lower = b""
    for e in reply:
        below, lower = lower, e.bound if e.bound is not None else lower
        past = upto is not None and (e.bound is None or e.bound > upto)
        if (e.bound is not None and e.bound <= after) or (upto is not None and below >= upto):
            if e.mode != SKIP:
                raise SyncError("protocol", "a reply answers ranges that were not asked about")
            continue
        if (below < after or past) and e.mode != SKIP:
            raise SyncError("protocol", "a reply joins ranges asked about to others")
        out.append(Entry(upto, SKIP) if past else e)
    return out


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
