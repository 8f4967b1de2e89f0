"""What a sync pulls from: a store (opened read-only) or a JSON Lines export file, each as a
:class:`pithlog.net.sync.Responder` (``docs/transparency.md``, "Sync").

An export file is read line by line, through the door, and only each distinct copy's item
and the place of its line are kept in memory (about 200 bytes a copy, whatever the size of
the copies); a copy asked for is read again from the file and put through the door again.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterator
from typing import BinaryIO

from pithlog.errors import DoorError, SyncError
from pithlog.net.sync import Limits, Responder
from pithlog.net.syncmsg import item_of
from pithlog.protocol.canonical import MAX_LINE_BYTES
from pithlog.protocol.events import parse_envelope
from pithlog.store import Store

_BLANK = b" \t\r"
_SKIP_CHUNK = 1 << 20


def store_responder(store: Store, limits: Limits | None = None) -> Responder:
    """The remote side over a store (open it read-only): its copies, their append order,
    and inclusion proofs from its Merkle tree."""

    def order(keys: list[bytes]) -> list[bytes]:
        seqs = store.copy_seqs(keys)
        return [key for seq, key in sorted(zip(seqs, keys, strict=True)) if seq is not None]

    def copies(keys: list[bytes]) -> list[bytes]:
        found = dict(store.copies(keys))
        seqs = store.copy_seqs(keys)
        return [found[seq] for seq in seqs if seq is not None and seq in found]

    def prove(size: int, keys: list[bytes]) -> list[tuple[int, list[bytes]] | None]:
        if not 0 < size <= store.tree_size():
            return [None] * len(keys)
        out: list[tuple[int, list[bytes]] | None] = []
        for seq in store.copy_seqs(keys):
            if seq is None or seq > size:
                out.append(None)
            else:
                out.append((seq - 1, store.inclusion_path(seq - 1, size)[1]))
        return out

    return Responder(store.copy_keys(), order, copies, prove, limits)


def spans(
    stream: BinaryIO, limit: int = MAX_LINE_BYTES
) -> Iterator[tuple[int, int, bytes | None]]:
    """``(byte offset, line number, line)`` per non-blank line of a JSON Lines stream
    (split on LF only, numbered from 1 counting blank lines too, as
    :func:`pithlog.lines.iter_lines`), ``(offset, number, None)`` per line longer than
    ``limit``, whose bytes are skipped without being held: memory stays bounded by the
    limit whatever the file holds."""
    offset = 0
    number = 0
    while True:
        raw = stream.readline(limit + 1)
        if not raw:
            return
        number += 1
        start = offset
        offset += len(raw)
        if not raw.endswith(b"\n") and len(raw) > limit:
            while raw and not raw.endswith(b"\n"):
                raw = stream.readline(_SKIP_CHUNK)
                offset += len(raw)
            yield start, number, None
            continue
        line = raw[:-1] if raw.endswith(b"\n") else raw
        if line.strip(_BLANK):
            yield start, number, line


class ExportSource:
    """The copies of a JSON Lines export file (a seekable binary stream), through the door.

    :meth:`read` goes through the file once; the stream must stay open while the source
    is used. ``refused`` counts lines the door refused (or too long); each is handed to
    ``on_refused`` as it is read, never held: a file of junk lines is as long as it likes
    (three million lines of ``x`` held 9 GB of refusals, each with its traceback)."""

    def __init__(self, stream: BinaryIO) -> None:
        self._stream = stream
        self._where: dict[bytes, int] = {}  # item -> its number among the distinct copies
        self._offsets = array("q")
        self._lengths = array("q")
        self.refused = 0

    @classmethod
    def read(
        cls, stream: BinaryIO, limit: int = MAX_LINE_BYTES,
        on_refused: Callable[[int, DoorError], None] | None = None,
        most: int | None = None,
    ) -> ExportSource:  # fmt: skip
        """The source over ``stream``; ``on_refused(line number from 1, why)`` is called
        for every line the door refuses. ``sync.limit`` as soon as the file holds more than
        ``most`` distinct copies, the file read no further: a sync passes the copies its
        store holds plus ``--max-copies``, as a file holding more lists more missing copies
        than that (docs/transparency.md, "Sync's limits"). Without it, a file of millions
        of copies was indexed whole (about 200 bytes a copy, then as much again to answer
        for it) before the listing was refused."""
        source = cls(stream)
        for offset, number, line in spans(stream, limit):
            if line is None:
                source.refused += 1
                if on_refused is not None:
                    on_refused(number, DoorError("line_too_long", f"line is longer than the "
                                                 f"{limit} bytes allowed"))  # fmt: skip
                continue
            try:
                env = parse_envelope(line)
            except DoorError as exc:
                source.refused += 1
                if on_refused is not None:
                    on_refused(number, exc)
                continue
            item = item_of(env.event_id, env.encoded)
            if item not in source._where:
                if most is not None and len(source._offsets) >= most:
                    raise SyncError("limit", f"line {number}: the export holds more than "
                                    f"{most} distinct copies, more than the store holds and "
                                    "--max-copies allows together; none was fetched: raise "
                                    "--max-copies, or import the export")  # fmt: skip
                source._where[item] = len(source._offsets)
                source._offsets.append(offset)
                source._lengths.append(len(line))
        return source

    def __len__(self) -> int:
        return len(self._where)

    def _copy(self, number: int) -> bytes:
        self._stream.seek(self._offsets[number])
        line = self._stream.read(self._lengths[number])
        try:
            return parse_envelope(line).encoded
        except DoorError as exc:
            raise SyncError("source", "the export file changed while it was synced from") from exc

    def responder(self, limits: Limits | None = None) -> Responder:
        """The remote side over the export's copies, in the file's order. An export proves
        nothing (it has no signed tree), so its invalid copies are never kept."""
        where = self._where

        def order(keys: list[bytes]) -> list[bytes]:
            return sorted((k for k in keys if k in where), key=where.__getitem__)

        def copies(keys: list[bytes]) -> list[bytes]:
            return [self._copy(where[k]) for k in keys if k in where]

        return Responder(sorted(where), order, copies, None, limits)

