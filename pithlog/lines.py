"""JSON Lines framing (spec section 1): split on LF only, skip blank lines, bound line size.

``str.splitlines()`` would split inside strings on U+2028, U+2029 and U+0085; this splits on
the byte 0x0A alone. A line over 8 MiB is reported (as ``None``) without being held whole:
its bytes are dropped as they are read, so memory stays bounded by the chunk and the limit.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import BinaryIO

from pithlog.errors import DoorError
from pithlog.protocol.canonical import MAX_LINE_BYTES
from pithlog.protocol.events import Envelope, parse_envelope

_BLANK = b" \t\r"
CHUNK = 1 << 20


def iter_lines(
    stream: BinaryIO, limit: int = MAX_LINE_BYTES, chunk: int = CHUNK
) -> Iterator[tuple[int, bytes | None]]:
    """Yield ``(line_number, bytes)`` per non-blank line, ``(line_number, None)`` per line
    longer than ``limit`` bytes (every byte before its LF counts, a CR included).

    Line numbers count every LF-terminated line from 1, blank ones included.
    """
    pending = bytearray()
    overlong = False
    number = 0
    while True:
        data = stream.read(chunk)
        if not data:
            break
        start = 0
        while True:
            end = data.find(b"\n", start)
            if end < 0:
                if not overlong:
                    pending += data[start:]
                    if len(pending) > limit:
                        overlong = True
                        pending.clear()
                break
            number += 1
            if overlong:
                yield number, None
                overlong = False
            else:
                if pending:
                    pending += data[start:end]
                    line = bytes(pending)
                    pending.clear()
                else:
                    line = data[start:end]
                if len(line) > limit:
                    yield number, None
                elif line.strip(_BLANK):
                    yield number, line
            start = end + 1
    if overlong:
        yield number + 1, None
    elif pending.strip(_BLANK):
        yield number + 1, bytes(pending)


def too_long(number: int) -> DoorError:
    """The refusal of line ``number``, longer than :data:`MAX_LINE_BYTES` (:func:`iter_lines`
    gave it as ``None``)."""
    return DoorError(
        "line_too_long", f"line is longer than the {MAX_LINE_BYTES} bytes allowed", f"line {number}"
    )


def iter_envelopes(stream: BinaryIO) -> Iterator[tuple[int, Envelope | DoorError]]:
    """Each non-blank line of a JSON Lines stream through the door: ``(line, envelope)`` or
    ``(line, DoorError)``. A refusal never stops the stream."""
    for number, line in iter_lines(stream):
        if line is None:
            yield number, too_long(number)
            continue
        try:
            yield number, parse_envelope(line)
        except DoorError as exc:
            yield number, exc
