"""The state document (spec section 8).

- :func:`state_document` builds the document of a :class:`~pithlog.protocol.reduce.Reduction`, its
  members in display order, with ``state_sha256``.
- :func:`render` is the display serialization: compact UTF-8, the state's own members in
  display order, every object inside ``signer``, ``payload`` and ``canonical_record`` in JCS
  member order. It is a function of the document's content, not of its dict order, so that
  re-rendering a published document shows whether its bytes are the conforming ones.
- :func:`assemble` gives the same bytes from a state's parts (:class:`StateParts`), slices
  of its envelopes' JCS bytes, without encoding a payload again.

The check of a published document (section 9) is :mod:`pithlog.protocol.state_verify`.
"""

from __future__ import annotations

import hashlib
import heapq
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec

from pithlog.protocol.canonical import digest, jcs
from pithlog.protocol.event_types import EVENT_TYPES, STATE_LISTS
from pithlog.protocol.events import Envelope, projection_spans
from pithlog.protocol.records import base32_of
from pithlog.protocol.reduce import MERGE_VERSION, Equivocation, Reduction, SlotKey
from pithlog.protocol.text_forms import lower_ascii

STATE_TYPE = "pith_open_graph_state"
STATE_VERSION = "1.0"

STATE_MEMBERS = (
    "state_type",
    "state_version",
    "pith_number",
    "merge_version",
    "event_count",
    "valid_event_count",
    "invalid_event_count",
    "equivocation_count",
    "current",
    "equivocations",
    "invalid_events",
    "applied_event_ids",
    "state_sha256",
)
CURRENT_MEMBERS = ("canonical_record", "source_aliases", *STATE_LISTS, "record_created")
PROJECTION_MEMBERS = ("event_id", "target", "created_at", "signer", "payload")
ALIAS_MEMBERS = ("alias_kind", "alias_value", "created_at")
EQUIVOCATION_MEMBERS = ("slot", "event_ids", "applied_event_id")
SLOT_MEMBERS = ("event_type", "target", "key_id", "created_at")
INVALID_MEMBERS = ("event_id", "reason")


# --- building (spec 8) --------------------------------------------------------------------


def projection(envelope: Envelope) -> dict[str, Any]:
    """``{event_id, target, created_at, signer, payload}`` of an applied event."""
    event = envelope.value
    return {
        "event_id": envelope.event_id,
        "target": event["target"],
        "created_at": event["created_at"],
        "signer": event["signer"],
        "payload": event["payload"],
    }


def source_aliases(
    canonical_record: dict[str, Any], canonical_sha256: str, created_at: str
) -> list[dict[str, Any]]:
    """The aliases of a record (spec 8), sorted by ``(alias_kind, alias_value)``."""
    source = canonical_record["source"]
    pairs: list[tuple[str, str]] = []
    if source["kind"] == "arxiv":
        pairs += [
            ("arxiv", source["id"]),
            ("arxiv_version", f"{source['id']}v{source['version']}"),
            ("doi", "10.48550/arxiv." + source["id"]),
        ]
    elif source["kind"] == "doi":
        pairs.append(("doi", lower_ascii(source["id"])))
    short = base32_of(canonical_sha256)
    pairs += [(f"pith_short_{n}", short[:n]) for n in (8, 12, 16)]
    return [
        {"alias_kind": kind, "alias_value": value, "created_at": created_at}
        for kind, value in sorted(pairs)
    ]


def slot_sort_key(slot: dict[str, Any]) -> tuple[tuple[int, str], ...]:
    """``(event_type, target, key_id, created_at)``, null before any string."""
    return tuple((0, "") if slot[m] is None else (1, slot[m]) for m in SLOT_MEMBERS)


def slot_object(slot: SlotKey) -> dict[str, Any]:
    """The ``slot`` member of an equivocation entry (spec 8)."""
    if slot == ("record_created",):
        return {"event_type": "record_created", "target": "record", "key_id": None,
                "created_at": None}  # fmt: skip
    event_type, target, key_id, created_at = slot
    return {"event_type": event_type, "target": target, "key_id": key_id,
            "created_at": created_at}  # fmt: skip


def equivocation_entry(slot: SlotKey, event_ids: list[str]) -> dict[str, Any]:
    """An entry of ``equivocations``: ``event_ids`` in ``(created_at, event_id)`` order."""
    return {"slot": slot_object(slot), "event_ids": event_ids, "applied_event_id": event_ids[0]}


def _equivocation_entry(equivocation: Equivocation) -> dict[str, Any]:
    return equivocation_entry(equivocation.slot, [x.event_id for x in equivocation.events])


def state_document(reduction: Reduction) -> dict[str, Any]:
    """The state document of one pith (spec 8), members in display order."""
    record = reduction.record
    payload = record.value["payload"]
    current: dict[str, Any] = {
        "canonical_record": payload["canonical_record"],
        "source_aliases": source_aliases(
            payload["canonical_record"], payload["canonical_sha256"], record.value["created_at"]
        ),
    }
    for name in STATE_LISTS:
        current[name] = []
    # reduction.applied is R, then the rest already in (created_at, event_id) order.
    for envelope in reduction.applied[1:]:
        current[EVENT_TYPES[envelope.value["event_type"]].state_list].append(
            projection(envelope)
        )
    current["record_created"] = projection(record)
    equivocations = sorted(
        (_equivocation_entry(e) for e in reduction.equivocations),
        key=lambda entry: slot_sort_key(entry["slot"]),
    )
    document: dict[str, Any] = {
        "state_type": STATE_TYPE,
        "state_version": STATE_VERSION,
        "pith_number": reduction.pith_number,
        "merge_version": MERGE_VERSION,
        "event_count": reduction.event_count,
        "valid_event_count": reduction.valid_event_count,
        "invalid_event_count": len(reduction.invalid),
        "equivocation_count": len(equivocations),
        "current": current,
        "equivocations": equivocations,
        "invalid_events": [
            {"event_id": event_id, "reason": reduction.invalid[event_id]}
            for event_id in sorted(reduction.invalid)
        ],
        "applied_event_ids": [e.event_id for e in reduction.applied],
    }
    document["state_sha256"] = digest(document)
    return document


# --- the document from its parts: the one renderer of reductions ------------------------


@dataclass(frozen=True, slots=True)
class Fragment:
    """An applied event's projection (spec 8) as the pre-encoded parts both of its
    encodings share: ``target`` is its JSON string, ``signer`` and ``payload`` their JCS."""

    event_id: str
    created_at: str
    target: bytes
    signer: bytes
    payload: bytes

    def head(self, before: bytes = b"") -> bytes:
        """``before``, then its display form up to its payload: event_id, target,
        created_at, signer, and the payload's name."""
        return b"".join((before, b'{"event_id":"', self.event_id.encode("ascii"),
                         b'","target":', self.target, b',"created_at":"',
                         self.created_at.encode("ascii"), b'","signer":', self.signer,
                         b',"payload":'))  # fmt: skip

    def display(self) -> bytes:
        """Display order: event_id, target, created_at, signer, payload."""
        return b"".join((self.head(), self.payload, b"}"))

    def canonical(self, before: bytes = b"") -> bytes:
        """``before``, then its JCS: member order created_at, event_id, payload, signer,
        target."""
        return b"".join((before, b'{"created_at":"', self.created_at.encode("ascii"),
                         b'","event_id":"', self.event_id.encode("ascii"), b'","payload":',
                         self.payload, b',"signer":', self.signer, b',"target":', self.target,
                         b"}"))  # fmt: skip

    @property
    def order(self) -> tuple[str, str]:
        return (self.created_at, self.event_id)


def fragment(envelope: Envelope, spans: tuple[int, int, int, int] | None = None) -> Fragment:
    """The :class:`Fragment` of a valid envelope, sliced from its JCS bytes."""
    payload_start, payload_end, signer_start, signer_end = spans or projection_spans(envelope)
    encoded = envelope.encoded
    return Fragment(
        event_id=envelope.event_id,
        created_at=envelope.value["created_at"],
        target=encoded[signer_end + len(b',"target":') : -1],
        signer=encoded[signer_start:signer_end],
        payload=encoded[payload_start:payload_end],
    )


@dataclass(frozen=True)
class StateParts:
    """Everything a state document is made of (spec 8), each list already in its order:
    what :func:`assemble` turns into bytes. A reduction gives it (:func:`parts_of`); so does
    a store, from its index, without re-reducing a pith."""

    pith_number: str
    event_count: int
    valid_event_count: int
    record: Fragment
    """The projection of ``R``."""
    canonical_record: dict[str, Any]
    canonical_sha256: str
    lists: dict[str, list[Fragment]]
    """The eight lists of ``current`` (every name of ``STATE_LISTS``), each sorted by
    ``(created_at, event_id)``."""
    equivocations: list[dict[str, Any]]
    """Entries as in the document (slot, event_ids, applied_event_id), sorted by slot."""
    invalid: list[tuple[str, str]]
    """``(event_id, reason)`` sorted by event_id."""


class _Listed(tuple[Fragment, ...]):
    """A list of ``current`` (:meth:`_Out.value`), written fragment by fragment."""


class _Out:
    """Where :func:`assemble` writes a document: its display form as pieces, joined once
    into the answer, or its JCS form only into a hash.

    A display fragment is two pieces, its :meth:`Fragment.head` (which closes the one
    before) and its payload, the payload never copied before the join: the join holds a
    ``Py_buffer`` of 80 bytes a piece, so a piece per member held about 1 KB an event
    (as much as a small event)."""

    def __init__(self, shown: bool) -> None:
        self.shown = shown
        self.hash = hashlib.sha256()
        self.pieces: list[bytes] = []
        self.one: Callable[[bytes], object] = self.pieces.append if shown else self.hash.update

    def value(self, value: Any) -> None:
        """``value`` as msgspec writes it, members in their dict order when shown, else
        sorted: every member name written here is ASCII, so that is JCS order. The two
        objects of the state's own (``dict``), its lists of fragments (:class:`_Listed`), a
        :class:`Fragment` and pre-encoded JSON (``bytes``) are written in place."""
        if isinstance(value, dict):
            for i, name in enumerate(value if self.shown else sorted(value)):
                self.one(b"{" if i == 0 else b",")
                self.one(_ENCODER.encode(name) + b":")
                self.value(value[name])
            self.one(b"}" if value else b"{}")
        elif isinstance(value, _Listed):
            self.one(b"[")
            self.fragments(value)
            self.one(b"]")
        elif isinstance(value, Fragment):
            self.fragments((value,))
        elif isinstance(value, bytes):
            self.one(value)
        else:
            self.one((_ENCODER if self.shown else _SORTED).encode(value))

    def fragments(self, fragments: tuple[Fragment, ...]) -> None:
        """Fragments, comma-separated."""
        if not self.shown:  # into the hash: one fragment's JCS at a time
            for i, f in enumerate(fragments):
                self.one(f.canonical(b"," if i else b""))
            return
        for i, f in enumerate(fragments):
            self.one(f.head(b"}," if i else b""))
            self.one(f.payload)
        if fragments:
            self.one(b"}")


def assemble(parts: StateParts) -> bytes:
    """The display serialization of the state document of ``parts`` (spec 8), with its
    ``state_sha256``: the digest is taken over the JCS form, written from the same
    fragments in JCS member order straight into the hash, so no payload is encoded twice
    and the JCS form is never held; the display form's pieces are joined once.
    At its peak a build holds the fragments and the answer, about twice the state: built
    as two msgspec documents of joined fragment lists, it held five times the state (the
    fragments, the JCS form's lists and bytes, then the display form's lists, their join
    and their encoding)."""
    others = heapq.merge(*parts.lists.values(), key=lambda f: f.order)
    applied = [parts.record.event_id, *(f.event_id for f in others)]
    aliases = source_aliases(parts.canonical_record, parts.canonical_sha256,
                             parts.record.created_at)  # fmt: skip
    record_jcs = jcs(parts.canonical_record)
    invalid = [{"event_id": e, "reason": r} for e, r in parts.invalid]
    current: dict[str, Any] = {"canonical_record": record_jcs, "source_aliases": aliases}
    for name in STATE_LISTS:
        current[name] = _Listed(parts.lists.get(name, ()))
    current["record_created"] = parts.record
    document: dict[str, Any] = {
        "state_type": STATE_TYPE,
        "state_version": STATE_VERSION,
        "pith_number": parts.pith_number,
        "merge_version": MERGE_VERSION,
        "event_count": parts.event_count,
        "valid_event_count": parts.valid_event_count,
        "invalid_event_count": len(parts.invalid),
        "equivocation_count": len(parts.equivocations),
        "current": current,
        "equivocations": parts.equivocations,
        "invalid_events": invalid,
        "applied_event_ids": applied,
    }
    canonical = _Out(shown=False)
    canonical.value(document)
    document["state_sha256"] = canonical.hash.hexdigest()
    display = _Out(shown=True)
    display.value(document)
    return b"".join(display.pieces)


_SORTED = msgspec.json.Encoder(order="sorted")


def parts_of(reduction: Reduction) -> StateParts:
    """The :class:`StateParts` of a reduction."""
    record = reduction.record
    payload = record.value["payload"]
    lists: dict[str, list[Fragment]] = {name: [] for name in STATE_LISTS}
    for envelope in reduction.applied[1:]:  # already in (created_at, event_id) order
        lists[EVENT_TYPES[envelope.value["event_type"]].state_list].append(fragment(envelope))
    return StateParts(
        pith_number=reduction.pith_number,
        event_count=reduction.event_count,
        valid_event_count=reduction.valid_event_count,
        record=fragment(record),
        canonical_record=payload["canonical_record"],
        canonical_sha256=payload["canonical_sha256"],
        lists=lists,
        equivocations=sorted(
            (_equivocation_entry(e) for e in reduction.equivocations),
            key=lambda entry: slot_sort_key(entry["slot"]),
        ),
        invalid=sorted(reduction.invalid.items()),
    )


def render_reduction(reduction: Reduction) -> bytes:
    """The state document of a reduction, display-serialized: ``assemble(parts_of(r))``,
    byte-identical to ``render(state_document(r))`` and faster."""
    return assemble(parts_of(reduction))


# --- display serialization ----------------------------------------------------------------

_ENCODER = msgspec.json.Encoder()


def _raw_jcs(value: Any) -> msgspec.Raw:
    return msgspec.Raw(jcs(value))


def _display_projection(p: dict[str, Any]) -> dict[str, Any]:
    return {
        "event_id": p["event_id"],
        "target": p["target"],
        "created_at": p["created_at"],
        "signer": _raw_jcs(p["signer"]),
        "payload": _raw_jcs(p["payload"]),
    }


def _display(document: dict[str, Any]) -> dict[str, Any]:
    current = document["current"]
    shown_current: dict[str, Any] = {
        "canonical_record": _raw_jcs(current["canonical_record"]),
        "source_aliases": [{m: a[m] for m in ALIAS_MEMBERS} for a in current["source_aliases"]],
    }
    for name in STATE_LISTS:
        shown_current[name] = [_display_projection(p) for p in current[name]]
    shown_current["record_created"] = _display_projection(current["record_created"])
    shown: dict[str, Any] = {m: document[m] for m in STATE_MEMBERS}
    shown["current"] = shown_current
    shown["equivocations"] = [
        {
            "slot": {m: e["slot"][m] for m in SLOT_MEMBERS},
            "event_ids": e["event_ids"],
            "applied_event_id": e["applied_event_id"],
        }
        for e in document["equivocations"]
    ]
    shown["invalid_events"] = [
        {m: i[m] for m in INVALID_MEMBERS} for i in document["invalid_events"]
    ]
    return shown


def render(document: dict[str, Any]) -> bytes:
    """The display serialization of a state document (spec 8), without a trailing newline."""
    return _ENCODER.encode(_display(document))


def digest_document(document: dict[str, Any]) -> str:
    """``state_sha256`` of a document: digest of it without ``state_sha256``."""
    return digest({k: v for k, v in document.items() if k != "state_sha256"})
