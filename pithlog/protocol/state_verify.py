"""The check of a published state document without its log (spec section 9).

:func:`verify_state_document` runs the other way from :mod:`pithlog.protocol.state`:
published bytes through the door, their shape, the rules of sections 8 and 9, and
re-rendering, which must give back the same bytes.
"""

from __future__ import annotations

from typing import Any

from pithlog.errors import DoorError
from pithlog.protocol.canonical import MAX_DEPTH, digest, jcs, parse
from pithlog.protocol.checks import REASONS
from pithlog.protocol.event_types import EVENT_TYPES, STATE_LISTS, ChosenRecord
from pithlog.protocol.events import is_event_id
from pithlog.protocol.keys import SIGNER_TYPES
from pithlog.protocol.records import is_pith_number, pith_number_for
from pithlog.protocol.reduce import MERGE_VERSION
from pithlog.protocol.state import (
    ALIAS_MEMBERS,
    CURRENT_MEMBERS,
    EQUIVOCATION_MEMBERS,
    INVALID_MEMBERS,
    PROJECTION_MEMBERS,
    SLOT_MEMBERS,
    STATE_MEMBERS,
    STATE_TYPE,
    STATE_VERSION,
    render,
    slot_sort_key,
    source_aliases,
)
from pithlog.protocol.timestamps import is_ts

STATE_MAX_DEPTH = MAX_DEPTH + 3
"""A payload sits at depth 2 of its envelope and at depth 5 of a state document (state,
current, list, projection, payload), so any state built from v1 envelopes nests at most
three levels deeper than they may."""


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
    # spec 3: a signer object's members are all non-empty strings, its type one of six
    if not all(isinstance(v, str) and v for v in signer.values()):
        raise _Shape(f"{where}.signer's members must be non-empty strings (spec 3)")
    if signer["signer_type"] not in SIGNER_TYPES:
        raise _Shape(f"{where}.signer.signer_type is not one of the six of spec 3")
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


def _slot_of(event_type: str, p: dict[str, Any]) -> dict[str, Any]:
    """The slot a projection of ``event_type`` fills, as an equivocation entry shows it
    (spec 7, step 4; spec 8)."""
    if event_type == "record_created":
        return {"event_type": event_type, "target": "record", "key_id": None, "created_at": None}
    return {"event_type": event_type, "target": p["target"], "key_id": p["signer"]["key_id"],
            "created_at": p["created_at"]}  # fmt: skip


def _applied_slots(current: dict[str, Any]) -> dict[tuple[tuple[int, str], ...], set[str]]:
    """The slot key of every applied projection in ``current``, to the event_ids filling it."""
    slots: dict[tuple[tuple[int, str], ...], set[str]] = {}
    for event_type in EVENT_TYPES.values():
        if event_type.name == "record_created":
            projections = [current["record_created"]]
        else:
            projections = current[event_type.state_list]
        for p in projections:
            slots.setdefault(slot_sort_key(_slot_of(event_type.name, p)), set()).add(p["event_id"])
    return slots


def _projection_reason(event_type: str, p: dict[str, Any], record: ChosenRecord) -> str | None:
    """The reason of the first of checks 8, 9, 10 and 14 (spec 6) that the event shown by
    projection ``p`` fails: those a projection shows enough of to run. A reduction applies
    no event that fails one, so a state that shows one was not produced by a reduction."""
    row = EVENT_TYPES[event_type]
    if p["signer"]["signer_type"] not in row.signer_types:
        return "unauthorized_signer"
    # R's target is the rule record_created's
    if event_type != "record_created" and not row.target_ok(p["target"]):
        return "bad_target"
    if not row.payload_ok(p["payload"], p["target"]):
        return "bad_payload"
    if row.record_facts is not None and row.record_match is not None and not row.record_match(
        row.record_facts(p["payload"], p["target"]), record
    ):
        return "record_mismatch"
    return None


def _projection_failures(current: dict[str, Any], record: ChosenRecord) -> list[str]:
    """Where applied projections fail checks 8-10 or 14, the first of them named."""
    failed: list[str] = []
    for event_type in EVENT_TYPES.values():
        if event_type.name == "record_created":
            where, projections = "current.record_created", [current["record_created"]]
        else:
            where, projections = f"current.{event_type.state_list}", current[event_type.state_list]
        for i, p in enumerate(projections):
            reason = _projection_reason(event_type.name, p, record)
            if reason is not None:
                failed.append(f"{where}[{i}] ({p['event_id']}) is {reason} as a {event_type.name}")
    return failed


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
    chosen = ChosenRecord(rc["event_id"], rc["created_at"], record, canonical_sha256)
    if failed := _projection_failures(current, chosen):
        more = f" (and {len(failed) - 1} more)" if len(failed) > 1 else ""
        fail("projections", f"{failed[0]}{more}: a reduction applies no such event")

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
    slots = _applied_slots(current)
    if any(len(ids) > 1 for ids in slots.values()):
        fail("slots", "two applied events fill one slot (spec 7, step 4, applies one)")
    keys = [slot_sort_key(e["slot"]) for e in equivocations]
    if keys != sorted(keys) or len(set(keys)) != len(keys):
        fail("order", "equivocations are not sorted by slot, or repeat a slot")
    loser_ids: list[str] = []
    for e in equivocations:
        if e["event_ids"][0] != e["applied_event_id"] or e["applied_event_id"] not in applied:
            fail("equivocations", f"slot {e['slot']} does not list its applied event first")
        elif e["applied_event_id"] not in slots.get(slot_sort_key(e["slot"]), ()):
            fail("equivocations", f"slot {e['slot']} is not the slot its applied event fills")
        elif e["slot"]["created_at"] is not None and e["event_ids"] != sorted(set(e["event_ids"])):
            # The slot's events share its created_at, so (created_at, event_id) order is
            # event_id order, and the applied event, the smallest, comes first (spec 7, 8).
            fail("equivocations", f"slot {e['slot']} does not list its events by event_id")
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
