"""The fourteen validity checks of spec section 6, in the spec's order.

Checks 1-12 look at an event alone (and the keyring): :func:`check_alone`. Checks 13-14
need the chosen record (section 7, step 2): :func:`check_against_record`. Each returns the
reason code of the first failing check, or ``None`` when the event passes. The reason codes
are exactly the spec's; :data:`REASONS` lists them in check order.
"""

from __future__ import annotations

from typing import Any

from pithlog.canonical import decode_b64, digest
from pithlog.events import (
    ENVELOPE_MEMBERS,
    EVENT_TYPES,
    SIGNER_MEMBERS,
    ChosenRecord,
    Envelope,
    body_of,
)
from pithlog.keys import Keyring, verify_signature
from pithlog.records import pith_number_for
from pithlog.timestamps import is_ts

REASONS: tuple[str, ...] = (
    "malformed",  # 1
    "unknown_event_type",  # 2
    "event_id_mismatch",  # 3
    "unknown_key",  # 4
    "signer_mismatch",  # 5
    "bad_signature",  # 6
    "key_not_valid",  # 7
    "unauthorized_signer",  # 8
    "bad_target",  # 9
    "bad_payload",  # 10
    "pith_number_mismatch",  # 11
    "bad_receipt",  # 12
    "predates_record",  # 13
    "record_mismatch",  # 14
)
CHECK_NUMBER: dict[str, int] = {reason: i + 1 for i, reason in enumerate(REASONS)}
"""Reason code -> its check's number (1-14): section 7 step 0 prefers the latest."""

_STRING_MEMBERS = ("event_type", "target", "created_at", "signature_b64")
_OBJECT_MEMBERS = ("signer", "payload")


def _well_formed(event: dict[str, Any]) -> bool:
    """Check 1: members, their JSON types, the ts, and the signer's shape (spec 3, 6)."""
    if event.keys() != ENVELOPE_MEMBERS:
        return False
    if not all(isinstance(event[m], str) for m in _STRING_MEMBERS):
        return False
    if not all(isinstance(event[m], dict) for m in _OBJECT_MEMBERS):
        return False
    if not is_ts(event["created_at"]):
        return False
    signer = event["signer"]
    return signer.keys() == SIGNER_MEMBERS and all(
        isinstance(v, str) and v != "" for v in signer.values()
    )


def check_alone(envelope: Envelope, keyring: Keyring) -> str | None:
    """Checks 1-12 (spec 6): the reason of the first that fails, or ``None``."""
    event = envelope.value
    if not _well_formed(event):
        return "malformed"
    event_type = EVENT_TYPES.get(event["event_type"])
    if event_type is None:
        return "unknown_event_type"
    body_digest = digest(body_of(event))
    if envelope.event_id != "sha256:" + body_digest:
        return "event_id_mismatch"
    signer = event["signer"]
    key = keyring.get(signer["key_id"])
    if key is None:
        return "unknown_key"
    if (
        signer["public_key_fingerprint"] != key.fingerprint
        or signer["signer_id"] != key.signer_id
        or signer["signer_type"] != key.signer_type
    ):
        return "signer_mismatch"
    signature = decode_b64(event["signature_b64"])
    if (
        signature is None
        or len(signature) != 64
        or not verify_signature(key.verifier, signature, bytes.fromhex(body_digest))
    ):
        return "bad_signature"
    if not key.valid_at(event["created_at"]):
        return "key_not_valid"
    if signer["signer_type"] not in event_type.signer_types:
        return "unauthorized_signer"
    target = event["target"]
    if not event_type.target_ok(target):
        return "bad_target"
    payload = event["payload"]
    if not event_type.payload_ok(payload, target):
        return "bad_payload"
    if event_type.name == "record_created":
        return _check_record_created(event, payload, keyring)
    return None


def _check_record_created(
    event: dict[str, Any], payload: dict[str, Any], keyring: Keyring
) -> str | None:
    """Checks 11 and 12 (spec 5.1); the payload already passed check 10."""
    canonical_sha256 = payload["canonical_sha256"]
    record = payload["canonical_record"]
    if canonical_sha256 != digest(record) or event["pith_number"] != pith_number_for(
        canonical_sha256, record["metadata"]["submitted_at"]
    ):
        return "pith_number_mismatch"
    receipt = payload["receipt"]
    signer = event["signer"]
    if not (
        isinstance(receipt, dict)
        and receipt.get("algorithm") == "ed25519"
        and receipt.get("signed_message") == "canonical_sha256_bytes"
        and receipt.get("canonical_sha256") == canonical_sha256
        and receipt.get("key_id") == signer["key_id"]
        and receipt.get("public_key_fingerprint") == signer["public_key_fingerprint"]
    ):
        return "bad_receipt"
    signature = decode_b64(receipt.get("signature_b64"))
    key = keyring[signer["key_id"]]
    if (
        signature is None
        or len(signature) != 64
        or not verify_signature(key.verifier, signature, bytes.fromhex(canonical_sha256))
    ):
        return "bad_receipt"
    return None


def check_against_record(envelope: Envelope, record: ChosenRecord) -> str | None:
    """Checks 13-14 (spec 6) for an event other than ``R`` that passed checks 1-12."""
    event = envelope.value
    event_type = EVENT_TYPES[event["event_type"]]
    if event_type.name == "record_created":
        return None
    if event["created_at"] < record.created_at:
        return "predates_record"
    if event_type.record_ok is not None and not event_type.record_ok(
        event["payload"], event["target"], record
    ):
        return "record_mismatch"
    return None
