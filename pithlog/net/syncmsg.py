"""The messages of sync (:mod:`pithlog.net.sync`): items, ranges, fingerprints, and their
binary encoding. Pure: bytes in, values out; a message that breaks the layout raises
``sync.protocol``.

**Messages.** Binary, and every byte of every message is counted by the transport
(:class:`pithlog.net.sync_pull.Channel`). A message is a kind byte and a body:

- ``R`` (reconcile, both directions): entries that cover the item space in order, each
  ``bound mode payload``; ``bound`` is a length byte (0-64, or 255 for "no upper bound")
  and that many bytes; ``mode`` is 0 skip, 1 fingerprint (16 bytes), 2 item list (count as
  a LEB128 varint, then the items' 16-byte short ids), 3 expand, 4 list all.
- ``F`` (order, local to remote): a varint count and the 16-byte short ids wanted (a
  short id is the first 16 bytes of the SHA-256 of the 64-byte item).
- ``O`` (order, remote to local): the same short ids, in the remote's append order.
- ``G`` (fetch, local to remote): a varint count and short ids, a batch of the ordered list.
- ``D`` (data, remote to local): a varint count, then per copy a varint length and its JCS
  bytes, in the order asked: all of them, or (to stay under the message limit) a non-empty
  prefix, the rest to be asked again.
- ``P`` (prove, local to remote): a varint tree size, a varint count and short ids: prove
  these copies leaves of the tree of that size. ``Q`` (proofs, remote to local): per short
  id asked, a varint ``index + 1`` (0: not a leaf below that size) and, when not 0, a varint
  count and the RFC 9162 inclusion path's 32-byte hashes.
"""

from __future__ import annotations

import bisect
import hashlib
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from pithlog.errors import SyncError, register

# registered here, not in pithlog.net.sync, which imports this module: the messages' own
# checks raise them
register(
    {
        "sync.protocol": "the other side sent a message that breaks the sync protocol",
        "sync.limit": "the other side went past a limit of sync (rounds, bytes, message size "
        "or copies listed): a hostile or broken source; see docs/transparency.md",
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

SKIP, FINGERPRINT_MODE, ITEMS, EXPAND, LIST_ALL = range(5)
INFINITY = None
_INF_BYTE = 255
_FP_LENGTH = struct.Struct(">Q")
_FP_CHUNK = 4096
"""Items hashed per update of a fingerprint: 256 KiB joined, whatever the range's size."""

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
    # in chunks: the top-level range of a store of millions of copies, joined at once,
    # would hold 72 bytes per copy (slice + joined bytes) for no other purpose
    for at in range(lo, hi, _FP_CHUNK):
        h.update(b"".join(items[at : min(at + _FP_CHUNK, hi)]))
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


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


class Reader:
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
            out += varint(len(e.items))
            out += b"".join(e.items)  # short ids
    return bytes(out)


def decode_reconcile(
    data: bytes, most: int | None = None, most_items: int | None = None
) -> list[Entry]:
    """The entries of a reconcile message; ``sync.limit`` as soon as there are more than
    ``most``: a message of 32 MiB holds some 6 million ranges of a few bytes, which took
    22 s and 1.3 GB to decode whole before any count was checked. Likewise as soon as its
    item lists declare more than ``most_items`` short ids in all, before they are read: 2
    million of them in one list took 0.4-1 s and 150 MB to split."""
    reader = Reader(data)
    if reader.take(1) != b"R":
        raise SyncError("protocol", "expected a reconcile message")
    entries: list[Entry] = []
    previous: Bound = b""
    listed = 0
    while not reader.done():
        if most is not None and len(entries) >= most:
            raise SyncError("limit", f"a reconcile message of more than {most} ranges")
        bound = reader.bound()
        if previous is None or (bound is not None and bound <= previous):
            raise SyncError("protocol", "range bounds do not increase")
        mode = reader.byte()
        if mode == FINGERPRINT_MODE:
            entries.append(Entry(bound, mode, reader.take(FINGERPRINT)))
        elif mode == ITEMS:
            count = reader.varint()
            listed += count
            if most_items is not None and listed > most_items:
                raise SyncError("limit", f"item lists of {listed} short ids or more in a "
                                f"reconcile message; at most {most_items}")  # fmt: skip
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


def encode_shorts(kind: bytes, shorts: Sequence[bytes]) -> bytes:
    return kind + varint(len(shorts)) + b"".join(shorts)


def decode_shorts(message: bytes) -> list[bytes]:
    reader = Reader(message)
    reader.take(1)
    raw = reader.take(reader.varint() * SHORT)
    if not reader.done():
        raise SyncError("protocol", "trailing bytes after a list of short ids")
    return [raw[i : i + SHORT] for i in range(0, len(raw), SHORT)]


def merged(entries: Iterable[Entry]) -> list[Entry]:
    """Adjacent skips merged into one."""
    out: list[Entry] = []
    for e in entries:
        if e.mode == SKIP and out and out[-1].mode == SKIP:
            out[-1] = e
        else:
            out.append(e)
    return out


def decode_prove(message: bytes, most: int | None = None) -> tuple[int, list[bytes]]:
    """The tree size and short ids of a ``P`` message; ``sync.limit`` when it declares more
    than ``most`` short ids, before any is read: a message of 32 MiB declaring 2 million
    took 1 s and 150 MB to split whole before its count was checked."""
    reader = Reader(message)
    reader.take(1)
    size = reader.varint()
    count = reader.varint()
    if most is not None and count > most:
        raise SyncError("limit", f"proofs of {count} copies asked in one message; at most "
                        f"{most}")  # fmt: skip
    raw = reader.take(count * SHORT)
    if not reader.done():
        raise SyncError("protocol", "trailing bytes after a list of short ids")
    return size, [raw[i : i + SHORT] for i in range(0, len(raw), SHORT)]


def item_of(event_id: str, encoded: bytes) -> bytes:
    """The 64-byte item (and leaf data) of a copy: event_id's 32 raw bytes || SHA-256 of
    its JCS bytes."""
    return bytes.fromhex(event_id[len("sha256:") :]) + hashlib.sha256(encoded).digest()
