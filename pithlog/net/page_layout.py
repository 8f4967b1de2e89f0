"""What one page lays out and what making it takes (docs/pages.md "Cost"): the Jinja2
environment of the pages (autoescaping on for every template, its filters and tests), the
bounds on what a page shows (items of a section, events of a slot, JSON values of a
payload and of a page) with the :class:`Layout` that keeps a page's count, and the bytes of
the room for copies a page takes while it is made (:data:`PAGE_MAKING`,
:data:`PITH_PAGE_MAKING`). The routes that answer with pages are :mod:`pithlog.net.pages`.
"""

from __future__ import annotations

import datetime
import re
from importlib import resources
from typing import Any
from urllib.parse import quote

import jinja2
import msgspec
from markupsafe import Markup

from pithlog.net.page_state import (
    MOST_DECODED,
    decoded,
    is_string,
    raw_chars,
    raw_values,
    string_chars,
    string_head,
)
from pithlog.protocol.canonical import MAX_ENVELOPE_BYTES
from pithlog.protocol.timestamps import is_ts

_HEX64 = re.compile(r"(sha256:)?[0-9a-f]{64}")


def _readable_time(ts: str) -> str:
    """``2026-07-05T09:31:31Z`` -> ``5 Jul 2026, 09:31:31 UTC`` (the ISO form stays in the
    ``datetime`` attribute)."""
    try:
        moment = datetime.datetime.fromisoformat(ts.replace("Z", "+00:00"))
    except ValueError:
        return ts
    return f"{moment.day} {moment:%b %Y, %H:%M:%S} UTC"


# The most items a record's page shows in one section (the applied events of a type, the
# equivocations, the invalid events); the rest are in the state's JSON. Each item is a
# card of HTML, and each equivocation a read of its events: a record of 4,000 events took
# 1.8 s of Jinja.
MOST_LISTED = 200

# The most events of one equivocated slot a record's page reads and shows side by side,
# the applied one first (spec 8: a slot's event_ids are sorted by (created_at, event_id),
# the applied one the smallest); the rest are in the state's JSON. One key holder can sign
# any number of events of one slot: a slot of 3,000 was 3,000 reads and a page of 2.3 MB.
MOST_SIDE_BY_SIDE = 6

# The most JSON values of one payload a page lays out; a larger payload is a link to its
# JSON (fits_layout).
MOST_LAID_OUT = 2_000

# The most JSON values a page lays out over all its payloads; the payloads past it are links
# to their JSON (Layout). A record's page holds up to MOST_LISTED payloads of each of eight
# types and those of its equivocations, each within MOST_LAID_OUT: 200 attestations of
# 2,000 values each, all valid, made a page of 5.5 MB and 4.5 s of Jinja on every request
# (0.3 s with this bound).
MOST_LAID_OUT_ON_A_PAGE = 10_000

MOST_SHOWN = 256 << 10
"""The most characters of strings a page shows in full (:meth:`Layout.shown`, and the
strings and member names of the payloads it lays out, counted from their JSON bytes when
not decoded): past them a payload is a link to its JSON, and any other string is cut,
with an ellipsis, to what is left of :data:`MOST_CUT` characters. The values a page lays
out are bounded (:data:`MOST_LAID_OUT_ON_A_PAGE`) but a value may be a string of most of a
1 MiB event, and every character of it escaped (``&`` to five) and copied by each macro
that lays it out, four bytes a character once one is past U+FFFF: the page of a copy of
600 KB holding one string of ``&`` and an emoji took 65 times the copy to make, and a
title of 900,000 ``&`` and an emoji, shown four times, 84 times its state."""

MOST_CUT = 80
"""The characters a string past :data:`MOST_SHOWN` keeps, an ellipsis after them, while
the page has that many left (then fewer, down to none)."""

SHOWN_MAKING = 66
"""Bytes that making a page takes at its peak per character it shows in full (within
:data:`MOST_SHOWN`), the string decoded included: a string of ``&`` with one character
past U+FFFF is four bytes a character, escaped to five characters, and copied by each
macro that lays it out. The page of a copy of 255 KiB holding one such string took 64.9
times the copy to make (tracemalloc), one of a hundred such strings 64.9, a target of
them 45.0; a page that shows :data:`MOST_SHOWN` characters takes at most 17.3 MB."""

PAGE_MAKING = 2
"""Bytes that making an event's page takes at its peak per byte of its copy, the copy
included, besides what it shows (:func:`making`): only the members it shows are read
(:func:`~pithlog.net.page_state.copy_members`), a long string counted from its bytes and
decoded as far as shown, the payload counted from its bytes and decoded only once laid
out, so that a copy of 1 MiB of empty objects, nested empty arrays or small strings took
1.03 times its copy, of one string of ``&`` and an emoji not shown 1.38. Decoded whole,
such copies took 28 times it (empty objects) and 38.8 (nested empty arrays), when an
event's page took 28 times its copy and 40 more for what it shows."""

PAGE_SHOWN = SHOWN_MAKING
"""Bytes per byte of an event's copy that what its page shows takes to make, beyond
:data:`PAGE_MAKING` (:func:`making`): a character shown is at least a byte of the copy,
and takes at most :data:`SHOWN_MAKING`; the page of a copy of one string of ``&`` and an
emoji, shown in full, took 64.9 times its copy."""

PITH_PAGE_MAKING = 2
"""Bytes that making a record's page takes at its peak per byte of its state, the state
included, besides what it shows (:func:`making`): only the items shown are decoded (its
lists stay slices of its bytes, :mod:`~pithlog.net.page_state`), so that a state of 12.7
MB of graph snapshots took 1.07 times its state, one of 20 MB of 200 attestations of
100,000 ``&`` and an emoji 1.36."""

PITH_PAGE_SHOWN = 84
"""Bytes per byte of a record's state that what its page shows takes to make, beyond
:data:`PITH_PAGE_MAKING` (:func:`making`): a title is shown four times (the tab, the
heading, the record, its snapshot), and a title of 64,512 ``&`` and an emoji took 78.6
times its state of 70 KB. Before :data:`MOST_SHOWN`, a title of 900,000 took 83.9 times
its state of 0.9 MB, and 84 times its state, at most the whole room for copies, was what
every record's page took: any state over 0.8 MB took the whole room, and such pages were
made one at a time."""


EQUIVOCATED_COPIES = 2 * MAX_ENVELOPE_BYTES
"""Bytes that the copies of equivocated slots take while a record's page is made (they are
not in its state): each is read as the page lays it out and let go after (pith.html,
:func:`~pithlog.net.page_state.stored_payload`), two at most at once (the one read, and
the one before, named until it is). Read before the page was made, every copy shown was
held together: a record of 40 slots of five copies of 1 MB took 201.3 MB to make (1.7 MB
now), where the page held 4 MB of the room."""

_EQUIVOCATION_COUNT = re.compile(rb'"equivocation_count":([0-9]+),')
_HEAD = 512
"""The bytes of a state that hold its ``equivocation_count``: its eighth member (spec 8,
display order), after the state's type and version, its pith number, the merge version and
three other counts."""


def pith_making(state: bytes) -> int:
    """The bytes of the room for copies a record's page of ``state`` takes while it is made
    (:func:`making`), before the state is decoded. A record with equivocations reads copies
    besides its state, and shows their payloads, which are not in it: it takes
    :data:`EQUIVOCATED_COPIES` more, and what showing :data:`MOST_SHOWN` characters takes,
    whatever the state's size: a state of 5 KB of 8 equivocated slots of five copies of
    200,000 ``&`` and an emoji, one laid out in full, took 13.1 MB to make (20.9 MB when the
    copies were all held), where it held 1 MB of the room; it holds 19.4 MB now."""
    count = _EQUIVOCATION_COUNT.search(state, 0, _HEAD)
    if count is not None and count.group(1) == b"0":
        return making(len(state), PITH_PAGE_MAKING, PITH_PAGE_SHOWN)
    return len(state) * PITH_PAGE_MAKING + MOST_SHOWN * SHOWN_MAKING + EQUIVOCATED_COPIES


def making(size: int, per_byte: int, shown_per_byte: int) -> int:
    """The bytes of the room for copies a page of an event's copy or of a record's state
    of ``size`` bytes takes while it is made (docs/network.md, limits), before the copy or
    state is decoded: ``per_byte`` a byte, and what it shows, ``shown_per_byte`` a byte
    but at most what showing :data:`MOST_SHOWN` characters takes (:data:`SHOWN_MAKING`
    each). A record's page of a state of 1 MB takes 19.3 MB, of 20 MB 57.3 MB, where both
    took the whole room (64 MiB)."""
    return size * per_byte + min(size * shown_per_byte, MOST_SHOWN * SHOWN_MAKING)


def environment() -> jinja2.Environment:
    """The environment of the pages' templates: autoescaping on for every template, and a
    strict undefined (docs/pages.md, "Templates"): a name a template reads that its context
    lacks fails the page (``500``, the HTML page of ``serve.internal`` for a browser), where
    it was rendered as nothing, so that a typo or a member a record need not have (spec 5.1
    requires nothing of the metadata but ``submitted_at``) was an empty field, silently.
    The templates read each member a copy or a record may lack only where it is defined."""
    templates = resources.files("pithlog.net") / "templates"
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates)),
        autoescape=True,  # every template, whatever its name
        undefined=jinja2.StrictUndefined,  # a name read that is not there fails the page
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["readable_time"] = _readable_time
    env.filters["shown"] = _shown  # a string from an event, within MOST_SHOWN (Layout)
    env.filters["decoded"] = decoded  # a payload the page lays out (page_state)
    env.filters["segment"] = segment  # a value from an event, in a link
    env.tests["hashlike"] = lambda v: isinstance(v, str) and bool(_HEX64.fullmatch(v))
    env.tests["timestamp"] = lambda v: isinstance(v, str) and is_ts(v)
    env.tests["laid_out"] = fits_layout  # a record's cross_cats_sorted (pith.html)
    env.globals["most_laid_out"] = MOST_LAID_OUT
    env.globals["most_laid_out_on_a_page"] = MOST_LAID_OUT_ON_A_PAGE
    env.globals["most_shown"] = MOST_SHOWN
    env.globals["most_listed"] = MOST_LISTED
    env.globals["most_side_by_side"] = MOST_SIDE_BY_SIDE
    return env


def segment(value: Any) -> str:
    """``value`` (an event id or a pith number from a copy or a state) as one path segment
    of a link (RFC 3986 section 3.3): every character percent-encoded but the unreserved and
    ``:`` (``pith:2024:...``, ``sha256:...``: a link of a value of its form is as it was).
    The door stores no copy whose event_id or pith_number is not of its form, but a page
    does not count on it: ``../../x``, ``?q=`` or ``#`` put into a link as it was led out of
    its route. A value of one or two dots, which a link resolves as a step (RFC 3986 section
    5.2.4; the WHATWG URL standard reads ``%2E`` as a dot too), ends with ``%20``: one
    segment, of a value no route takes. A value that is not a string is its JSON."""
    if isinstance(value, jinja2.Undefined):
        value = ""
    text = value if isinstance(value, str) else msgspec.json.encode(value).decode()
    return quote(text, safe=":") + ("%20" if text in (".", "..") else "")


def fits_layout(value: Any) -> bool:
    """At most :data:`MOST_LAID_OUT` JSON values in ``value``, itself included.

    A payload is laid out as nested lists, a few hundred bytes of HTML per value: a 1 MiB
    copy of 150,000 empty lists made a page of 8.6 MB and 1.3-4 s of Jinja on every
    request, holding the interpreter lock that the event loop needs. The count stops at the
    bound, so asking costs at most that many steps."""
    return _values(value, MOST_LAID_OUT) is not None


def _values(value: Any, most: int) -> int | None:
    """The number of JSON values in ``value``, itself included, or ``None`` past ``most``
    (counted no further)."""
    count, pending = 0, [value]
    while pending:
        item = pending.pop()
        count += 1
        if count > most:
            return None
        if isinstance(item, dict):
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
    return count


def _chars(value: Any) -> int:
    """The characters of the strings and member names in ``value`` (a decoded payload
    within :data:`MOST_LAID_OUT` values)."""
    chars, pending = 0, [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            chars += len(item)
        elif isinstance(item, dict):
            chars += sum(len(key) for key in item)
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
    return chars


@jinja2.pass_context
def _shown(context: jinja2.runtime.Context, value: Any, times: int = 1) -> Any:
    """The filter ``shown``: ``value`` through the page's :meth:`Layout.shown`."""
    layout: Layout = context["layout"]
    return layout.shown(value, times)


class Layout:
    """What is left of one page's :data:`MOST_LAID_OUT_ON_A_PAGE` and :data:`MOST_SHOWN`:
    each payload laid out on it takes its count of values and the characters of its
    strings, each other string shown in full its characters. ``exact``: the characters of
    a payload not decoded are counted exactly from its bytes (an event's page, which counted
    them decoded), not as its bytes (a record's page)."""

    def __init__(self, exact: bool = False) -> None:
        self.left = MOST_LAID_OUT_ON_A_PAGE
        self.chars = MOST_SHOWN
        """What is left of the page's :data:`MOST_SHOWN` characters."""
        self.exact = exact

    def fit(self, value: Any) -> str:
        """``"laid_out"`` (and its values and characters counted), ``"too_large"`` (more
        than :data:`MOST_LAID_OUT` values), ``"page_full"`` (more than the page has left)
        or ``"too_long"`` (more characters than the page has left to show in full).
        The count stops at the lesser bound: a full page costs each later payload a step.
        A payload not decoded (:class:`msgspec.Raw`, a record's page) is counted from its
        bytes (its characters as its JSON's bytes, at least as many), and decoded only
        when laid out."""
        most = min(MOST_LAID_OUT, self.left)
        raw = isinstance(value, msgspec.Raw)
        count = (raw_values if raw else _values)(value, most)
        if count is None:
            return "too_large" if self.left >= MOST_LAID_OUT else "page_full"
        chars = (raw_chars(value) if self.exact else len(value)) if raw else _chars(value)
        if chars > self.chars:
            return "too_long"
        self.left -= count
        self.chars -= chars
        return "laid_out"

    def takes(self, value: Any) -> bool:
        """Whether the page has the characters of ``value`` (decoded, within
        :data:`MOST_LAID_OUT` values: a record's ``cross_cats_sorted``) left to show, and
        if so counts them."""
        chars = _chars(value)
        if chars > self.chars:
            return False
        self.chars -= chars
        return True

    def shown(self, value: Any, times: int = 1) -> Any:
        """``value`` as the page shows it ``times`` times: a string (or a list or an object,
        which the page shows as Python writes it) whole while the page has its characters
        left, else cut to what is left of :data:`MOST_CUT`, with an ellipsis. A member of
        an event's copy longer than :data:`~pithlog.net.page_state.MOST_DECODED` is not
        decoded (a :class:`msgspec.Raw`): a string is counted from its bytes and decoded as
        far as shown, an object or an array not shown."""
        if isinstance(value, msgspec.Raw):
            return self._shown_raw(value, times)
        if isinstance(value, Markup) or not isinstance(value, str | dict | list):
            return value  # a number, a boolean, null: a few characters
        text = value if isinstance(value, str) else str(value)
        if len(text) * times <= self.chars:
            self.chars -= len(text) * times
            return value
        kept = min(MOST_CUT, self.chars // times)
        self.chars -= kept * times
        return text[:kept] + "…"

    def _shown_raw(self, raw: msgspec.Raw, times: int) -> Any:
        if not is_string(raw):
            kind = {b"{": "an object", b"[": "an array"}.get(memoryview(raw)[:1].tobytes(),
                                                               "a value")  # fmt: skip
            return Markup('<span class="muted">({} of more than {:,} bytes, not shown here: '
                          "read the event's JSON)</span>").format(kind, MOST_DECODED)
        chars = string_chars(raw)
        if chars * times <= self.chars:
            self.chars -= chars * times
            return decoded(raw)
        kept = min(MOST_CUT, self.chars // times)
        self.chars -= kept * times
        return string_head(raw, kept) + "…"
