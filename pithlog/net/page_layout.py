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

import jinja2
import msgspec

from pithlog.net.page_state import decoded, raw_values
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

PAGE_MAKING = 28
"""Bytes that making an event's page takes at its peak, per byte of its copy, the copy
included: the room for copies it takes before its copy is decoded (docs/network.md,
limits). Its strings are escaped (``&`` and ``'`` to five characters) and each is copied
again by every macro that lays it out: the page of a copy of 1 MiB of ``&`` strings is
5 MB, and took 27.1 times its copy while decoded and rendered (tracemalloc; ``<``
strings 22.2, plain ones 7); 17.3 since a page's pieces are encoded as they are made.
Taking only the copy's bytes before, 400 requests at once for the pages of copies of 1 MiB
of ``<`` that their clients did not read grew a worker to 277 MB, with a room for copies
of 64 MiB."""

PITH_PAGE_MAKING = 84
"""Bytes that making a record's page takes at its peak, per byte of its state, the state
included: what it takes of the room for copies (``COPY_BYTES``), as an event's page, before
the state is decoded (docs/network.md, limits). A page lays out at most
:data:`MOST_LAID_OUT_ON_A_PAGE` values, but a value may be a string of most of a 1 MiB
event, escaped (``&`` to five characters): 200 valid attestations of 50,000 ``&`` (a state
of 10 MB) made a page of 50 MB, 11 times the state while decoded and rendered (16 times,
40.8 with an emoji, before a page's pieces were encoded as made); a title of 900,000 ``&``
and an emoji, shown four times (the tab, the heading, the record, its snapshot), 83.9
times its state of 0.9 MB (a page of 18 MB). Sent as any other page, outside every room,
200 requests at once for the page of a state of 1 MB (200 attestations of 5,000 ``&``, a
page of 5 MB), unread by their clients, grew a worker to 1.1 GB (VmHWM; 400 requests
2.1 GB); now 129 MB (132 MB)."""


def environment() -> jinja2.Environment:
    templates = resources.files("pithlog.net") / "templates"
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates)),
        autoescape=True,  # every template, whatever its name
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["readable_time"] = _readable_time
    env.filters["decoded"] = decoded  # a payload the page lays out (page_state)
    env.tests["hashlike"] = lambda v: isinstance(v, str) and bool(_HEX64.fullmatch(v))
    env.tests["timestamp"] = lambda v: isinstance(v, str) and is_ts(v)
    env.tests["laid_out"] = fits_layout  # a record's cross_cats_sorted (pith.html)
    env.globals["most_laid_out"] = MOST_LAID_OUT
    env.globals["most_laid_out_on_a_page"] = MOST_LAID_OUT_ON_A_PAGE
    env.globals["most_listed"] = MOST_LISTED
    env.globals["most_side_by_side"] = MOST_SIDE_BY_SIDE
    return env


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


class Layout:
    """What is left of one page's :data:`MOST_LAID_OUT_ON_A_PAGE`: each payload laid out on
    it takes its count of values."""

    def __init__(self) -> None:
        self.left = MOST_LAID_OUT_ON_A_PAGE

    def fit(self, value: Any) -> str:
        """``"laid_out"`` (and its values counted), ``"too_large"`` (more than
        :data:`MOST_LAID_OUT` values) or ``"page_full"`` (more than the page has left).
        The count stops at the lesser bound: a full page costs each later payload a step.
        A payload not decoded (:class:`msgspec.Raw`, a record's page) is counted from its
        bytes, and decoded only when laid out."""
        most = min(MOST_LAID_OUT, self.left)
        count = (raw_values if isinstance(value, msgspec.Raw) else _values)(value, most)
        if count is not None:
            self.left -= count
            return "laid_out"
        return "too_large" if self.left >= MOST_LAID_OUT else "page_full"
