"""The state document (spec section 8) and the check of a published one (section 9).

- :func:`state_document` builds the document of a :class:`~pithlog.protocol.reduce.Reduction`, its
  members in display order, with ``state_sha256``.
- :func:`render` is the display serialization: compact UTF-8, the state's own members in
  display order, every object inside ``signer``, ``payload`` and ``canonical_record`` in JCS
  member order. It is a function of the document's content, not of its dict order, so that
  re-rendering a published document shows whether its bytes are the conforming ones.
- :func:`verify_state_document` checks published bytes without their log (section 9).
"""

from __future__ import annotations

import hashlib
import heapq
from dataclasses import dataclass
from typing import Any

import msgspec

from pithlog.errors import DoorError
from pithlog.protocol.canonical import MAX_DEPTH, digest, jcs, lower_ascii, parse
from pithlog.protocol.checks import REASONS
from pithlog.protocol.event_types import EVENT_TYPES, STATE_LISTS
from pithlog.protocol.events import Envelope, is_event_id, projection_spans
from pithlog.protocol.records import base32_of, is_pith_number, pith_number_for
from pithlog.protocol.reduce import MERGE_VERSION, Equivocation, Reduction, SlotKey
from pithlog.protocol.timestamps import is_ts

STATE_MAX_DEPTH = MAX_DEPTH + 3
"""A payload sits at depth 2 of its envelope and at depth 5 of a state document (state,
current, list, projection, payload), so any state built from v1 envelopes nests at most
three levels deeper than they may."""

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

    def display(self) -> bytes:
        """Display order: event_id, target, created_at, signer, payload."""
        return b"".join((b'{"event_id":"', self.event_id.encode("ascii"), b'","target":',
                         self.target, b',"created_at":"', self.created_at.encode("ascii"),
                         b'","signer":', self.signer, b',"payload":', self.payload,
                         b"}"))  # fmt: skip

    def canonical(self) -> bytes:
        """JCS member order: created_at, event_id, payload, signer, target."""
        return b"".join((b'{"created_at":"', self.created_at.encode("ascii"),
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


def _json_list(items: list[bytes]) -> msgspec.Raw:
    return msgspec.Raw(b"[" + b",".join(items) + b"]")


def assemble(parts: StateParts) -> bytes:
    """The display serialization of the state document of ``parts`` (spec 8), with its
    ``state_sha256``: the digest is taken over the JCS form, assembled from the same
    fragments in JCS member order, so no payload is encoded twice."""
    others = heapq.merge(*parts.lists.values(), key=lambda f: f.order)
    applied = [parts.record.event_id, *(f.event_id for f in others)]
    aliases = source_aliases(parts.canonical_record, parts.canonical_sha256,
                             parts.record.created_at)  # fmt: skip
    record_jcs = msgspec.Raw(jcs(parts.canonical_record))
    invalid = [{"event_id": e, "reason": r} for e, r in parts.invalid]
    header: dict[str, Any] = {
        "state_type": STATE_TYPE,
        "state_version": STATE_VERSION,
        "pith_number": parts.pith_number,
        "merge_version": MERGE_VERSION,
        "event_count": parts.event_count,
        "valid_event_count": parts.valid_event_count,
        "invalid_event_count": len(parts.invalid),
        "equivocation_count": len(parts.equivocations),
    }

    def document(shown: bool) -> dict[str, Any]:
        current: dict[str, Any] = {"canonical_record": record_jcs, "source_aliases": aliases}
        for name in STATE_LISTS:
            fragments = parts.lists.get(name, [])
            current[name] = _json_list(
                [f.display() for f in fragments] if shown else [f.canonical() for f in fragments]
            )
        current["record_created"] = msgspec.Raw(
            parts.record.display() if shown else parts.record.canonical()
        )
        return {**header, "current": current, "equivocations": parts.equivocations,
                "invalid_events": invalid, "applied_event_ids": applied}  # fmt: skip

    # Every member name at this level is ASCII, so msgspec's sorted order is JCS order;
    # the fragments inside are JCS already.
    canonical = _SORTED.encode(document(shown=False))
    display = document(shown=True)
    display["state_sha256"] = hashlib.sha256(canonical).hexdigest()
    return _ENCODER.encode(display)


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


# --- checking a published document (spec 9) -----------------------------------------------


class _Shape(Exception):
    """A published document that is not of the state document's shape."""


def _members(value: Any, names: tuple[str, ...], where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _Shape(f"{where} must be an object")
    if set(value) != set(names):
        missing = sorted(set(names) - set(value))
        extra = sorted(set(value) - set(names))
        raise _Shape(
            f"{where} must have exactly {', '.join(names)} (missing {missing}, extra {extra})"
        )
    return value


def _list(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise _Shape(f"{where} must be an array")
    return value


def _check_projection(p: Any, where: str) -> None:
    _members(p, PROJECTION_MEMBERS, where)
    if not is_event_id(p["event_id"]):
        raise _Shape(f"{where}.event_id is not sha256:<64 hex>")
    if not isinstance(p["target"], str) or not is_ts(p["created_at"]):
        raise _Shape(f"{where} needs a string target and a ts created_at")
    signer = p["signer"]
    _members(signer, ("key_id", "public_key_fingerprint", "signer_id", "signer_type"),
             f"{where}.signer")  # fmt: skip
    if not isinstance(p["payload"], dict):
        raise _Shape(f"{where}.payload must be an object")


def _check_shape(doc: Any) -> None:
    _members(doc, STATE_MEMBERS, "the state")
    for name in ("event_count", "valid_event_count", "invalid_event_count", "equivocation_count"):
        if type(doc[name]) is not int or doc[name] < 0:
            raise _Shape(f"{name} must be a non-negative integer")
    if not is_pith_number(doc["pith_number"]):
        raise _Shape("pith_number is not of the form of spec 2")
    current = _members(doc["current"], CURRENT_MEMBERS, "current")
    record = current["canonical_record"]
    if not (
        isinstance(record, dict)
        and isinstance(record.get("source"), dict)
        and isinstance(record["source"].get("kind"), str)
        and isinstance(record["source"].get("id"), str)
        and type(record["source"].get("version")) is int
        and isinstance(record.get("metadata"), dict)
        and is_ts(record["metadata"].get("submitted_at"))
    ):
        raise _Shape("current.canonical_record lacks a source (kind, id, version) or submitted_at")
    for i, alias in enumerate(_list(current["source_aliases"], "current.source_aliases")):
        _members(alias, ALIAS_MEMBERS, f"current.source_aliases[{i}]")
    for name in STATE_LISTS:
        for i, p in enumerate(_list(current[name], f"current.{name}")):
            _check_projection(p, f"current.{name}[{i}]")
    _check_projection(current["record_created"], "current.record_created")
    rc_payload = current["record_created"]["payload"]
    if not isinstance(rc_payload.get("canonical_sha256"), str):
        raise _Shape("current.record_created.payload.canonical_sha256 must be a string")
    for i, e in enumerate(_list(doc["equivocations"], "equivocations")):
        _members(e, EQUIVOCATION_MEMBERS, f"equivocations[{i}]")
        slot = _members(e["slot"], SLOT_MEMBERS, f"equivocations[{i}].slot")
        if not all(slot[m] is None or isinstance(slot[m], str) for m in SLOT_MEMBERS):
            raise _Shape(f"equivocations[{i}].slot members must be strings or null")
        ids = _list(e["event_ids"], f"equivocations[{i}].event_ids")
        if len(ids) < 2 or not all(is_event_id(x) for x in ids):
            raise _Shape(f"equivocations[{i}].event_ids must name two or more events")
        if not is_event_id(e["applied_event_id"]):
            raise _Shape(f"equivocations[{i}].applied_event_id is not an event id")
    for i, inv in enumerate(_list(doc["invalid_events"], "invalid_events")):
        _members(inv, INVALID_MEMBERS, f"invalid_events[{i}]")
        if not is_event_id(inv["event_id"]):
            raise _Shape(f"invalid_events[{i}].event_id is not an event id")
        if inv["reason"] not in REASONS:
            raise _Shape(f"invalid_events[{i}].reason {inv['reason']!r} is not a reason code")
    ids = _list(doc["applied_event_ids"], "applied_event_ids")
    if not all(is_event_id(x) for x in ids):
        raise _Shape("applied_event_ids must hold event ids")
    if not isinstance(doc["state_sha256"], str):
        raise _Shape("state_sha256 must be a string")


def _time_key(p: dict[str, Any]) -> tuple[str, str]:
    return (p["created_at"], p["event_id"])


def _rule_failures(doc: dict[str, Any]) -> list[str]:
    failures: list[str] = []

    def fail(rule: str, message: str) -> None:
        failures.append(f"{rule}: {message}")

    if doc["state_type"] != STATE_TYPE or doc["state_version"] != STATE_VERSION:
        fail("header", f'state_type/state_version must be "{STATE_TYPE}"/"{STATE_VERSION}"')
    if doc["merge_version"] != MERGE_VERSION:
        fail("header", f'merge_version must be "{MERGE_VERSION}"')
    unsigned = {k: v for k, v in doc.items() if k != "state_sha256"}
    if digest(unsigned) != doc["state_sha256"]:
        fail("state_sha256", f"does not recompute (digest of the rest is {digest(unsigned)})")

    current = doc["current"]
    record = current["canonical_record"]
    rc = current["record_created"]
    canonical_sha256 = digest(record)
    if jcs(rc["payload"].get("canonical_record")) != jcs(record):
        fail("canonical_record", "differs from current.record_created.payload.canonical_record")
    if rc["payload"]["canonical_sha256"] != canonical_sha256:
        fail("canonical_sha256", f"record_created says {rc['payload']['canonical_sha256']!r}, "
             f"digest(canonical_record) is {canonical_sha256}")  # fmt: skip
    derived = pith_number_for(canonical_sha256, record["metadata"]["submitted_at"])
    if doc["pith_number"] != derived:
        fail("pith_number", f"is {doc['pith_number']}, canonical_record gives {derived}")
    if rc["target"] != "record":
        fail("record_created", 'current.record_created.target must be "record"')
    expected_aliases = source_aliases(record, canonical_sha256, rc["created_at"])
    if jcs(current["source_aliases"]) != jcs(expected_aliases):
        fail("source_aliases", "are not the ones section 8 derives from the record")

    # Counts agree with the lists.
    equivocations = doc["equivocations"]
    if doc["equivocation_count"] != len(equivocations):
        fail("counts", f"equivocation_count {doc['equivocation_count']} but "
             f"{len(equivocations)} equivocations")  # fmt: skip
    if doc["invalid_event_count"] != len(doc["invalid_events"]):
        fail("counts", f"invalid_event_count {doc['invalid_event_count']} but "
             f"{len(doc['invalid_events'])} invalid_events")  # fmt: skip
    if doc["event_count"] != doc["valid_event_count"] + doc["invalid_event_count"]:
        fail("counts", "event_count is not valid_event_count + invalid_event_count")
    losers = sum(len(e["event_ids"]) - 1 for e in equivocations)
    if doc["valid_event_count"] != len(doc["applied_event_ids"]) + losers:
        fail("counts", "valid_event_count is not applied events + equivocation losers")

    # applied_event_ids names exactly the projections, R first, then by (created_at, event_id).
    others = [p for name in STATE_LISTS for p in current[name]]
    for name in STATE_LISTS:
        items = current[name]
        if [_time_key(p) for p in items] != sorted(_time_key(p) for p in items):
            fail("order", f"current.{name} is not sorted by (created_at, event_id)")
    expected_applied = [rc["event_id"]] + [p["event_id"] for p in sorted(others, key=_time_key)]
    if doc["applied_event_ids"] != expected_applied:
        fail("applied_event_ids", "do not name exactly the projections in current, R first, "
             "then by (created_at, event_id)")  # fmt: skip
    applied = set(doc["applied_event_ids"])
    if len(applied) != len(doc["applied_event_ids"]):
        fail("applied_event_ids", "name an event twice")
    if any(p["created_at"] < rc["created_at"] for p in others):
        fail("predates_record", "an applied event is older than the chosen record")

    # Equivocations and invalid events: sorted, consistent, disjoint.
    keys = [slot_sort_key(e["slot"]) for e in equivocations]
    if keys != sorted(keys) or len(set(keys)) != len(keys):
        fail("order", "equivocations are not sorted by slot, or repeat a slot")
    loser_ids: list[str] = []
    for e in equivocations:
        if e["event_ids"][0] != e["applied_event_id"] or e["applied_event_id"] not in applied:
            fail("equivocations", f"slot {e['slot']} does not list its applied event first")
        loser_ids += e["event_ids"][1:]
    invalid_ids = [i["event_id"] for i in doc["invalid_events"]]
    if invalid_ids != sorted(invalid_ids) or len(set(invalid_ids)) != len(invalid_ids):
        fail("order", "invalid_events are not sorted by event_id, or repeat one")
    everything = doc["applied_event_ids"] + loser_ids + invalid_ids
    if len(set(everything)) != len(everything):
        fail("event_ids", "an event is listed as more than one of applied, loser, invalid")
    return failures


def verify_state_document(data: bytes) -> list[str]:
    """Spec 9: the rules a published state document breaks (empty when it conforms).

    One line per failed rule. ``data`` may end in one LF (as ``pithlog reduce`` prints).
    Signatures and event_ids cannot be checked without the log.
    """
    body = data[:-1] if data.endswith(b"\n") else data
    try:
        doc = parse(body, max_depth=STATE_MAX_DEPTH, max_bytes=None)
    except DoorError as exc:
        return [f"json: not a v1 JSON value: {exc.describe()}"]
    try:
        _check_shape(doc)
    except _Shape as exc:
        return [f"shape: {exc}"]
    failures = _rule_failures(doc)
    if render(doc) != body:
        failures.append("rendering: re-rendering the document does not reproduce its bytes")
    return failures


def digest_document(document: dict[str, Any]) -> str:
    """``state_sha256`` of a document: digest of it without ``state_sha256``."""
    return digest({k: v for k, v in document.items() if k != "state_sha256"})
