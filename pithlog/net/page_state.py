"""The part of a state document (spec 8) that a record's page shows, and of an event's copy
that its page shows (docs/pages.md "Cost").

A state holds every applied event of its pith, payloads whole, and grows with its events; a
page shows the first :data:`~pithlog.net.page_layout.MOST_LISTED` items of each list. Decoding the
whole document into Python objects on every request cost what the state weighs, not what the
page shows: a record of 20 graph snapshots of 75,000 edges each and 3,000 attestations (a
state of 20 MB) took 0.55 s and 226 MB to decode and render per request (0.08 s and 0.7 MB
now), holding the interpreter lock that every other request of the worker waits for.

Here msgspec reads the document's lists as :class:`msgspec.Raw` slices of its bytes (walked
in C, no object made for what they hold); only the items shown are decoded, and of those
the payloads only when a page lays them out (:func:`raw_values` counts their values without
decoding them).

An event's page reads its copy the same way (:func:`copy_members`): the members it shows,
not decoded past a few KiB, and its payload raw. Decoded whole, a copy of 1 MiB of empty
objects took 28 times its copy, one of nested empty arrays 38.8, though the page shows
none of it.
"""

from __future__ import annotations

import codecs
import re
from typing import Any

import msgspec

from pithlog.protocol.event_types import STATE_LISTS

_NULL = msgspec.Raw(b"null")
_ABSENT = msgspec.Raw(b"")
"""A member a copy does not have (a kept invalid copy may lack any but its event_id and
pith_number, spec 4)."""

MOST_DECODED = 4 << 10
"""The most bytes of JSON of a member of an event's copy other than its payload (its target,
time, signer's fields) that its page decodes before it is shown (:func:`copy_members`): a
longer string is decoded only as far as the page shows it (:func:`string_chars`,
:func:`string_head`), and a longer object or array, which only a kept invalid copy has
where a string belongs, is not decoded at all."""


class _Projection(msgspec.Struct):
    """An applied event as the state lists it (spec 8), its payload not decoded."""

    event_id: Any
    target: Any
    created_at: Any
    signer: Any
    payload: msgspec.Raw


class _Current(msgspec.Struct):
    """``current`` (spec 8): its lists (:data:`~pithlog.protocol.event_types.STATE_LISTS`)
    read as raw items, typed here so that the document is walked once."""

    canonical_record: Any
    source_aliases: Any
    record_created: _Projection
    graph_snapshots: list[msgspec.Raw]
    author_attestations: list[msgspec.Raw]
    timestamp_anchors: list[msgspec.Raw]
    storage_attestations: list[msgspec.Raw]
    citation_signatures: list[msgspec.Raw]
    replication_records: list[msgspec.Raw]
    corrections: list[msgspec.Raw]
    mirror_hints: list[msgspec.Raw]


class _State(msgspec.Struct):
    """The members of a state document (spec 8) a page reads; the others (the applied
    event ids, the state's hash) are skipped over."""

    event_count: Any
    valid_event_count: Any
    invalid_event_count: Any
    equivocation_count: Any
    current: _Current
    equivocations: list[msgspec.Raw]
    invalid_events: list[msgspec.Raw]


class _Equivocation(msgspec.Struct):
    """An entry of ``equivocations`` (spec 8): a slot may hold any number of event ids, of
    which a page reads the first few."""

    slot: Any
    event_ids: list[msgspec.Raw]
    applied_event_id: Any


class _Graph(msgspec.Struct):
    paper: msgspec.Raw = _NULL


class _SnapshotPayload(msgspec.Struct):
    graph_snapshot: _Graph = msgspec.field(default_factory=_Graph)


class _Snapshot(msgspec.Struct):
    """What the title is read from: ``payload.graph_snapshot.paper.title``, the rest of a
    snapshot (its graph) skipped over."""

    payload: _SnapshotPayload


class _Paper(msgspec.Struct):
    title: msgspec.Raw = _NULL


class _Envelope(msgspec.Struct):
    payload: msgspec.Raw = _NULL


def shown_state(
    state_bytes: bytes, most: int
) -> tuple[dict[str, Any], dict[str, int], str | None]:
    """The state of ``state_bytes`` as a record's page reads it, the length of each of its
    lists (``equivocations``, ``invalid_events`` and those of ``current``), and the title
    (:func:`title_of`).

    Each list is cut at its first ``most`` items; an applied event's payload stays a
    :class:`msgspec.Raw` (:func:`decoded` when laid out); an equivocation's ``event_ids``
    stay raw, but for their count."""
    state = msgspec.json.decode(state_bytes, type=_State)
    record_created = state.current.record_created
    current: dict[str, Any] = {
        "canonical_record": state.current.canonical_record,
        "source_aliases": state.current.source_aliases,
        "record_created": _fields(record_created),
    }
    totals: dict[str, int] = {}
    for name in STATE_LISTS:
        items: list[msgspec.Raw] = getattr(state.current, name)
        totals[name] = len(items)
        current[name] = [_fields(msgspec.json.decode(item, type=_Projection))
                         for item in items[:most]]  # fmt: skip
    totals["equivocations"] = len(state.equivocations)
    totals["invalid_events"] = len(state.invalid_events)
    shown = {
        "event_count": state.event_count,
        "valid_event_count": state.valid_event_count,
        "invalid_event_count": state.invalid_event_count,
        "equivocation_count": state.equivocation_count,
        "current": current,
        "equivocations": [_equivocation(raw) for raw in state.equivocations[:most]],
        "invalid_events": [msgspec.json.decode(raw) for raw in state.invalid_events[:most]],
    }
    return shown, totals, title_of(state.current.graph_snapshots)


def _fields(p: _Projection) -> dict[str, Any]:
    return {"event_id": p.event_id, "target": p.target, "created_at": p.created_at,
            "signer": p.signer, "payload": p.payload}  # fmt: skip


def _equivocation(raw: msgspec.Raw) -> dict[str, Any]:
    q = msgspec.json.decode(raw, type=_Equivocation)
    return {"slot": q.slot, "event_ids": q.event_ids, "applied_event_id": q.applied_event_id}


def title_of(snapshots: list[msgspec.Raw]) -> str | None:
    """The title of the latest of ``snapshots`` (applied graph snapshots, in state order)
    that has one (``paper.title``, a non-empty string), read from the last back: each
    snapshot read is walked over in C and only its title decoded."""
    for raw in reversed(snapshots):
        try:
            paper = msgspec.json.decode(raw, type=_Snapshot).payload.graph_snapshot.paper
            if _first(paper) != b"{":  # paper may be any JSON value
                continue
            title = msgspec.json.decode(paper, type=_Paper).title
        except msgspec.ValidationError:  # a graph_snapshot that is not an object
            continue
        if _first(title) == b'"' and (text := msgspec.json.decode(title, type=str)):
            return text
    return None


class _Signer(msgspec.Struct):
    signer_id: msgspec.Raw = _ABSENT
    signer_type: msgspec.Raw = _ABSENT
    key_id: msgspec.Raw = _ABSENT


class _Copy(msgspec.Struct):
    """The members of an event's copy its page reads (spec 4), none decoded; the others
    (its signature) skipped over."""

    event_id: msgspec.Raw = _ABSENT
    event_type: msgspec.Raw = _ABSENT
    pith_number: msgspec.Raw = _ABSENT
    target: msgspec.Raw = _ABSENT
    created_at: msgspec.Raw = _ABSENT
    signer: msgspec.Raw = _ABSENT
    payload: msgspec.Raw = _ABSENT


def copy_members(copy: bytes) -> dict[str, Any]:
    """The members of a stored event's copy (a JSON object, spec 4) that its page shows, as
    it reads them: those the copy has, each decoded if it is at most :data:`MOST_DECODED`
    bytes of JSON, else left a :class:`msgspec.Raw` (a string, shown as far as the page has
    characters left; an object or an array, not shown); the payload left raw (laid out
    only once it fits the page, decoded then); the signer, when an object, its three
    members likewise, and ``None`` otherwise (the page reads no other kind of signer)."""
    read = msgspec.json.decode(copy, type=_Copy)
    members: dict[str, Any] = {}
    for name in _Copy.__struct_fields__:
        raw: msgspec.Raw = getattr(read, name)
        if not len(raw):
            continue
        if name == "payload":
            members[name] = raw
        elif name == "signer":
            members[name] = _signer(raw) if _first(raw) == b"{" else None
        else:
            members[name] = _member(raw)
    return members


def _signer(raw: msgspec.Raw) -> dict[str, Any]:
    signer = msgspec.json.decode(raw, type=_Signer)
    return {name: _member(getattr(signer, name)) for name in _Signer.__struct_fields__
            if len(getattr(signer, name))}  # fmt: skip


def _member(raw: msgspec.Raw) -> Any:
    return msgspec.json.decode(raw) if len(raw) <= MOST_DECODED else raw


def is_string(raw: msgspec.Raw) -> bool:
    return _first(raw) == b'"'


# An escape in a JSON string, which stands for one character: a pair of escaped UTF-16
# surrogates, a \u escape, or a backslash and one character.
_ESCAPE = re.compile(
    rb"\\(?:u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|.)", re.DOTALL
)
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_CHUNK = 64 << 10


def string_chars(token: Any) -> int:
    """The characters of the JSON string ``token`` (its bytes, quotes included) once
    decoded, counted from its bytes a chunk at a time: a string of 1 MiB of ``&`` and an
    emoji is 4 MiB decoded."""
    view = memoryview(token)[1:-1]
    decoder = codecs.getincrementaldecoder("utf-8")()
    points = sum(len(decoder.decode(view[i : i + _CHUNK])) for i in range(0, len(view), _CHUNK))
    return points - sum(m.end() - m.start() - 1 for m in _ESCAPE.finditer(view))


def string_head(token: Any, n: int) -> str:
    """The first ``n`` characters of the JSON string ``token``, of its first bytes decoded:
    a character is at most 12 bytes of JSON (a pair of escaped surrogates), and a cut in one
    backs off to the character before it."""
    cut = memoryview(token)[1:-1][: 12 * (n + 1)]
    for end in range(len(cut), max(len(cut) - 12, 0) - 1, -1):
        try:
            text: str = msgspec.json.decode(b'"' + bytes(cut[:end]) + b'"', type=str)
        except msgspec.DecodeError:  # a character or an escape cut in two
            continue
        return text[:n]
    raise ValueError("not a JSON string")  # pragma: no cover - msgspec read it whole


def raw_chars(raw: msgspec.Raw) -> int:
    """The characters of the strings and member names of ``raw`` once decoded (what
    ``_chars`` in page_layout.py counts of its decoded value), counted from its bytes."""
    view = memoryview(raw)
    return sum(string_chars(view[m.start() : m.end()]) for m in _STRING.finditer(view))


def event_payload(copy: bytes) -> msgspec.Raw | None:
    """The payload of a stored event's copy, not decoded (``None`` if it has none)."""
    payload = msgspec.json.decode(copy, type=_Envelope).payload
    return None if _first(payload) == b"n" else payload  # null


def stored_payload(store: Any, event_id: str) -> msgspec.Raw | None:
    """The payload of the copy ``store`` holds of ``event_id``, read now, not decoded
    (``None``: no copy, or none of a payload): a record's page reads each copy of an
    equivocated slot as it lays it out (pith.html), one at a time."""
    copy = store.event(event_id)
    return None if copy is None else event_payload(copy)


def _first(raw: msgspec.Raw) -> bytes:
    """The first byte of a raw JSON value, which says its kind."""
    return memoryview(raw)[:1].tobytes()


def decoded(value: Any) -> Any:
    """``value``, decoded if it is a :class:`msgspec.Raw` (a payload laid out on a page)."""
    return msgspec.json.decode(value) if isinstance(value, msgspec.Raw) else value


# One JSON token of a value a page would count (_values in page_layout.py): an object's member
# name (a string before a colon) is not a value; a string is read whole, escapes included,
# so nothing inside it is taken for a token.
_TOKEN = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"(\s*:)?|[\[{]|[-0-9][-+.0-9eE]*|true|false|null')


def raw_values(raw: msgspec.Raw, most: int) -> int | None:
    """The number of JSON values in ``raw`` (valid JSON, as msgspec read it), itself
    included, or ``None`` past ``most``: what ``_values`` in page_layout.py counts of its decoded
    value, read from the bytes and stopped at the bound."""
    count = 0
    for token in _TOKEN.finditer(memoryview(raw)):
        if token.group(1) is None:
            count += 1
            if count > most:
                return None
    return count
