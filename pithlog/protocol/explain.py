"""Checks 9 and 10 (spec 5, 6) in words: which target forms a type allows, and which member
of a payload breaks which rule. For people (``pithlog sign``); the verdicts themselves stay
with :mod:`pithlog.protocol.checks`, and :func:`payload_problem` finds a problem exactly
when the type's ``payload_ok`` rule fails (``tests/unit/test_explain.py``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pithlog.protocol.canonical import digest
from pithlog.protocol.event_types import (
    CORRECTION_TYPES,
    EVENT_TYPES,
    RECORD_CREATED_MEMBERS,
    REPLICATION_OUTCOMES,
)
from pithlog.protocol.text_forms import decode_b64, is_hex64
from pithlog.protocol.timestamps import is_ts

TARGET_FORMS: dict[str, tuple[str, ...]] = {
    "record_created": ("record",),
    "graph_snapshot": ("graph",),
    "author_attestation": ("record", "claim:<claim id>"),
    "timestamp_anchor": ("record", "event:sha256:<64 hex of the anchored event>"),
    "storage_attestation": ("record",),
    "citation_signature": ("citation:<observation_id>",),
    "replication_record": ("record", "claim:<claim id>"),
    "correction": ("record",),
    "mirror_hint": ("record",),
}
"""Spec 5: the targets each event type allows, as a person writes them."""


def targets_of(event_type: str) -> str:
    """The allowed targets of ``event_type``, in words: ``record or claim:<claim id>``."""
    return " or ".join(TARGET_FORMS[event_type])


Problem = str | None


def _is_int(value: object) -> bool:
    return type(value) is int


def _text(value: object) -> bool:
    return isinstance(value, str) and value != ""


def _record_created(p: dict[str, Any], target: str) -> Problem:
    missing = [m for m in RECORD_CREATED_MEMBERS if m not in p]
    if missing:
        return f"payload lacks {', '.join(missing)} (pithlog sign fills all but canonical_record)"
    record = p["canonical_record"]
    if not isinstance(record, dict):
        return "canonical_record must be an object"
    source = record.get("source")
    if not isinstance(source, dict):
        return "canonical_record.source must be an object"
    if not isinstance(source.get("kind"), str):
        return "canonical_record.source.kind must be a string"
    if not isinstance(source.get("id"), str):
        return "canonical_record.source.id must be a string"
    if not _is_int(source.get("version")):
        return (f"canonical_record.source.version must be an integer (got "
                f"{source.get('version')!r})")  # fmt: skip
    metadata = record.get("metadata")
    if not (isinstance(metadata, dict) and is_ts(metadata.get("submitted_at"))):
        return "canonical_record.metadata.submitted_at must be a ts (YYYY-MM-DDTHH:MM:SSZ)"
    if not isinstance(p["canonical_sha256"], str):
        return "canonical_sha256 must be a string"
    if not isinstance(p["attestation_state"], str):
        return "attestation_state must be a string"
    for member, part in (("source_kind", "kind"), ("source_id", "id"),
                         ("source_version", "version")):  # fmt: skip
        a, b = p[member], source[part]
        if not (type(a) is type(b) and a == b):
            return f"{member} must equal canonical_record.source.{part}"
    return None


def _graph_snapshot(p: dict[str, Any], target: str) -> Problem:
    snapshot = p.get("graph_snapshot")
    if not isinstance(snapshot, dict):
        return "graph_snapshot must be an object"
    if not isinstance(snapshot.get("source"), dict):
        return "graph_snapshot.source must be an object (the record's source)"
    if "verdict_id" not in p:
        return "verdict_id is required (a string, or null)"
    if not (p["verdict_id"] is None or isinstance(p["verdict_id"], str)):
        return "verdict_id must be a string or null"
    return None


def _author_attestation(p: dict[str, Any], target: str) -> Problem:
    return None if _text(p.get("statement")) else "statement must be a non-empty string"


def _timestamp_anchor(p: dict[str, Any], target: str) -> Problem:
    anchored = p.get("anchored_sha256")
    if not is_hex64(anchored):
        return "anchored_sha256 must be 64 lowercase hex characters"
    if not _text(p.get("anchor_kind")):
        return "anchor_kind must be a non-empty string"
    if decode_b64(p.get("proof_b64")) is None:
        return "proof_b64 must be canonical standard base64"
    prefix = "event:sha256:"
    if target.startswith(prefix) and anchored != target[len(prefix) :]:
        return "anchored_sha256 must be the hash the target event:sha256:<hex> names"
    return None


def _storage_attestation(p: dict[str, Any], target: str) -> Problem:
    if not is_hex64(p.get("content_sha256")):
        return "content_sha256 must be 64 lowercase hex characters"
    size = p.get("byte_size")
    if not (isinstance(size, int) and _is_int(size) and size >= 0):
        return "byte_size must be an integer, 0 or more"
    return None if _text(p.get("locator")) else "locator must be a non-empty string"


def _citation_signature(p: dict[str, Any], target: str) -> Problem:
    obs = p.get("observation")
    if not isinstance(obs, dict):
        return "observation must be an object"
    for name, kind, what in (("observation_digest", str, "a string"),
                             ("observation_id", str, "a string"),
                             ("citation", dict, "an object")):  # fmt: skip
        if not isinstance(obs.get(name), kind):
            return f"observation.{name} must be {what}"
    rest = {k: v for k, v in obs.items() if k != "observation_digest"}
    if obs["observation_digest"] != "sha256:" + digest(rest):
        return ('observation.observation_digest must be "sha256:" + digest of the '
                "observation without it")  # fmt: skip
    if obs["observation_id"] != target[len("citation:") :]:
        return "observation.observation_id must be the id in the target citation:<id>"
    return None


def _replication_record(p: dict[str, Any], target: str) -> Problem:
    outcome = p.get("outcome")
    if not (isinstance(outcome, str) and outcome in REPLICATION_OUTCOMES):
        return f"outcome must be one of {', '.join(sorted(REPLICATION_OUTCOMES))}"
    return None if _text(p.get("report")) else "report must be a non-empty string"


def _correction(p: dict[str, Any], target: str) -> Problem:
    kind = p.get("correction_type")
    if not (isinstance(kind, str) and kind in CORRECTION_TYPES):
        return f"correction_type must be one of {', '.join(sorted(CORRECTION_TYPES))}"
    return None if _text(p.get("notice")) else "notice must be a non-empty string"


def _mirror_hint(p: dict[str, Any], target: str) -> Problem:
    return None if _text(p.get("locator")) else "locator must be a non-empty string"


_RULES: dict[str, Callable[[dict[str, Any], str], Problem]] = {
    "record_created": _record_created,
    "graph_snapshot": _graph_snapshot,
    "author_attestation": _author_attestation,
    "timestamp_anchor": _timestamp_anchor,
    "storage_attestation": _storage_attestation,
    "citation_signature": _citation_signature,
    "replication_record": _replication_record,
    "correction": _correction,
    "mirror_hint": _mirror_hint,
}
assert _RULES.keys() == EVENT_TYPES.keys() == TARGET_FORMS.keys()


def payload_problem(event_type: str, payload: dict[str, Any], target: str) -> Problem:
    """The first rule of check 10 (spec 5) that ``payload`` breaks, naming the member, or
    ``None`` when it passes. ``target`` must already pass check 9."""
    return _RULES[event_type](payload, target)
