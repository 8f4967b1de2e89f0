"""How ``append`` and ``import`` cut their input into events
(:func:`pithlog.cli.append_commands._iter_events`), against a model written here from the
rules: blank lines, then JSON Lines (position: the line number, spec section 1), a JSON
array (position: the element number) or one object, pretty-printed or not (position 1).

The input comes in reads of a few bytes each, as a pipe may hand it over, and the line
limit is made small, so that every place a read can end, and every line near the limit,
is reached by small inputs: the reads are kept shorter than the limit, as the real 64 KiB
reads are shorter than the real 8 MiB.
"""

from __future__ import annotations

import functools
import json
from typing import Any
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pithlog.cli import append_commands
from pithlog.errors import DoorError
from pithlog.lines import iter_lines

LIMIT = 40
"""The line limit in place of the door's 8 MiB."""

_SPACE = b" \t\r\n"
TOO_LONG = "door.line_too_long"


class Trickle:
    """A stream that hands over at most the next of ``sizes`` bytes at each read."""

    def __init__(self, data: bytes, sizes: list[int]) -> None:
        self._data = data
        self._at = 0
        self._sizes = sizes
        self._turn = 0

    def read(self, size: int = -1) -> bytes:
        step = self._sizes[self._turn % len(self._sizes)]
        self._turn += 1
        if size >= 0:
            step = min(step, size)
        out = self._data[self._at : self._at + step]
        self._at += len(out)
        return out


def _complete(data: bytes) -> bool:
    try:
        json.loads(data)
    except ValueError:
        return False
    return True


def model(data: bytes, limit: int) -> list[tuple[int, Any]] | None:
    """What the input is, from the rules: ``(position, bytes)`` per event and
    ``(position, TOO_LONG)`` per line refused as too long; ``None`` for an input that
    starts with '[' and is not a JSON array."""
    lines = data.split(b"\n")
    first = next((k for k, line in enumerate(lines) if line.strip(b" \t\r")), None)
    if first is not None:
        body = b"\n".join(lines[first:])
        start = body.lstrip(_SPACE)[:1]
        if start == b"[":
            try:
                elements = json.loads(body)
            except ValueError:
                return None
            return [(n, element) for n, element in enumerate(elements, 1)]
        blanks_fit = all(len(line) <= limit for line in lines[:first])
        if start == b"{" and not _complete(lines[0]) and blanks_fit and len(body) <= limit \
                and _complete(body):  # fmt: skip
            return [(1, body.strip(_SPACE))]
    # JSON Lines: every line numbered from 1, blank ones skipped, long ones refused
    out: list[tuple[int, Any]] = []
    for number, line in enumerate(lines, 1):
        if len(line) > limit:
            out.append((number, TOO_LONG))
        elif line.strip(b" \t\r"):
            out.append((number, line))
    return out


def framed(data: bytes, sizes: list[int], limit: int) -> list[tuple[int, Any]] | None:
    """What ``_iter_events`` makes of ``data`` read in ``sizes``, in the model's terms (an
    array's elements decoded, so that their values are compared)."""
    with mock.patch.object(append_commands, "MAX_LINE_BYTES", limit), \
            mock.patch.object(append_commands, "iter_lines",
                              functools.partial(iter_lines, limit=limit)):  # fmt: skip
        array = data.lstrip(_SPACE)[:1] == b"["
        try:
            stream: Any = Trickle(data, sizes)
            items = list(append_commands._iter_events(stream))
        except DoorError as exc:
            assert array and exc.detail in ("syntax", "too_deep"), exc
            return None
    out: list[tuple[int, Any]] = []
    for number, item in items:
        if isinstance(item, DoorError):
            assert item.code == TOO_LONG and item.where == f"line {number}", item
            out.append((number, TOO_LONG))
        elif array:
            assert item == item.strip(_SPACE) and item in data
            out.append((number, json.loads(item)))
        else:
            out.append((number, item))
    return out


_ends = st.sampled_from(["\n", "\r\n"])
_blank = st.builds(lambda s, end: s + end, st.text(" \t\r", max_size=6), _ends)
_long_blank = st.builds(lambda n, end: " " * n + end,
                        st.integers(LIMIT - 2, LIMIT + 2), _ends)  # fmt: skip
_blank_start = st.lists(_blank | _long_blank, max_size=8).map("".join)
_scalars = st.none() | st.booleans() | st.integers(-99, 99) | st.text('ab"\\ ', max_size=4)
_values = st.recursive(_scalars,
                       lambda inner: st.lists(inner, max_size=3)
                       | st.dictionaries(st.text("ab", max_size=2), inner, max_size=3),
                       max_leaves=6)  # fmt: skip
_objects = st.dictionaries(st.text("ab", max_size=2), _values, max_size=3)
_json_line = st.builds(lambda before, obj, after: before + json.dumps(obj) + after,
                       st.sampled_from(["", " ", "\t"]), _objects,
                       st.sampled_from(["", " ", "\r"]))  # fmt: skip
_long_line = st.builds(lambda n: '{"a":"' + "x" * n + '"}', st.integers(LIMIT - 10, LIMIT + 5))
_junk = st.text('{}[]":,x1 \t\r\n', max_size=12)
_json_lines = st.builds(lambda lines, end: "\n".join(lines) + end,
                        st.lists(_json_line | _long_line | _blank.map(str.rstrip) | _junk,
                                 min_size=1, max_size=6),
                        st.sampled_from(["", "\n", "\r\n"]))  # fmt: skip
_array = st.builds(lambda values, sep, end:
                   "[" + sep + ("," + sep).join(map(json.dumps, values)) + sep + "]" + end,
                   st.lists(_values, max_size=5), st.sampled_from(["", " ", "\n", "\r\n  "]),
                   st.sampled_from(["", "\n", " \r\n"]))  # fmt: skip
_pretty = st.builds(lambda obj, indent, crlf, end: (json.dumps(obj, indent=indent) + end)
                    .replace("\n", "\r\n" if crlf else "\n"),
                    _objects, st.sampled_from([None, 0, 1, 2]), st.booleans(),
                    st.sampled_from(["", "\n", "\n\n "]))  # fmt: skip
_inputs = st.builds(lambda start, lead, body: (start + lead + body).encode(),
                    _blank_start, st.sampled_from(["", " ", "\t "]),
                    _json_lines | _array | _pretty | _junk)  # fmt: skip
_sizes = st.lists(st.integers(1, LIMIT - 1), min_size=1, max_size=5)


@settings(max_examples=400, deadline=None)
@given(_inputs, _sizes)
def test_events_and_their_positions_are_the_models_wherever_reads_end(
    data: bytes, sizes: list[int]
) -> None:
    assert framed(data, sizes, LIMIT) == model(data, LIMIT)


@pytest.mark.parametrize("blank_bytes", [(1 << 16) - 1, 1 << 16, (1 << 16) + 1, 3 << 16])
def test_the_real_reads_and_limit_agree_with_the_model(blank_bytes: int) -> None:
    """The real 64 KiB reads and 8 MiB limit, blank starts around a read, each input kind
    after them (the model is the same)."""
    from pithlog.protocol.canonical import MAX_LINE_BYTES

    event = b'{"a": [1, 2],\n "b": "c"}'
    for start in (b"\n" * blank_bytes, b" \t\r\n" * (blank_bytes // 4) + b"  "):
        for body in (event + b"\n", event.replace(b"\n", b"") + b"\n{}\n", b"[1,\n {}]",
                     b"x\n{}"):  # fmt: skip
            data = start + body
            assert framed(data, [1 << 16], MAX_LINE_BYTES) == model(data, MAX_LINE_BYTES)
