"""The fourteen validity checks of spec section 6, in the spec's order.

Checks 1-12 look at an event alone (and the keyring): :func:`check_alone`. Checks 13-14
need the chosen record (section 7, step 2): :func:`check_against_record`. Each returns the
reason code of the first failing check, or ``None`` when the event passes. The reason codes
are exactly the spec's; :data:`REASONS` lists them in check order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from pithlog.protocol.canonical import digest
from pithlog.protocol.event_types import EVENT_TYPES, ChosenRecord
from pithlog.protocol.events import (
    ENVELOPE_MEMBERS,
    SIGNER_MEMBERS,
    Envelope,
    Hints,
    RecordFacts,
    body_sha256,
    projection_spans,
)
from pithlog.protocol.keys import Keyring, verify_signature
from pithlog.protocol.records import pith_number_for
from pithlog.protocol.text_forms import decode_b64
from pithlog.protocol.timestamps import is_ts

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
    # Plain loops and exact type tests: this runs on every event, and parsed JSON holds
    # exact str and dict (no subclasses).
    if event.keys() != ENVELOPE_MEMBERS:
        return False
    for member in _STRING_MEMBERS:
        if type(event[member]) is not str:
            return False
    for member in _OBJECT_MEMBERS:
        if type(event[member]) is not dict:
            return False
    if not is_ts(event["created_at"]):
        return False
    signer = event["signer"]
    if signer.keys() != SIGNER_MEMBERS:
        return False
    for value in signer.values():  # noqa: SIM110 - a loop, not all(): no generator per event
        if type(value) is not str or value == "":
            return False
    return True


class SignatureCheck:
    """One Ed25519 verification that checks 6 or 12 depend on, to run now or in a batch."""

    __slots__ = ("message", "ok", "public_key", "signature", "verifier")

    def __init__(
        self, verifier: Ed25519PublicKey, public_key: bytes, signature: bytes, message: bytes
    ) -> None:
        self.verifier = verifier
        self.public_key = public_key
        self.signature = signature
        self.message = message
        self.ok: bool | None = None

    def run(self) -> bool:
        if self.ok is None:
            self.ok = verify_signature(
                self.verifier, self.signature, self.message, self.public_key
            )
        return self.ok


@dataclass(frozen=True, slots=True)
class Prepared:
    """Checks 1-12 of one event with their two signature verifications left open.

    ``before``: the reason of a failing check among 1-5 (or a signature that is not base64
    of 64 bytes, check 6). Else check 6 is ``signature``; ``after`` the first failing check
    among 7-12 when the signatures hold, and ``receipt`` the verification check 12 still
    needs. :meth:`reason` gives the spec's first failing check once they have run.
    """

    before: str | None
    signature: SignatureCheck | None = None
    after: str | None = None
    receipt: SignatureCheck | None = None

    def reason(self) -> str | None:
        if self.before is not None:
            return self.before
        assert self.signature is not None
        if not self.signature.run():
            return "bad_signature"
        if self.after is not None:
            return self.after
        if self.receipt is not None and not self.receipt.run():
            return "bad_receipt"
        return None

    def checks(self) -> list[SignatureCheck]:
        """The verifications :meth:`reason` may need (none when ``before`` decides)."""
        if self.before is not None:
            return []
        return [c for c in (self.signature, self.receipt) if c is not None]


def _payload_jcs(envelope: Envelope) -> bytes | None:
    """The payload's JCS: a slice of the envelope's (:func:`projection_spans`, which
    :func:`body_sha256` has already run), or ``None`` where the slice is not provable."""
    try:
        start, end, _, _ = projection_spans(envelope)
    except ValueError:
        return None
    return envelope.encoded[start:end]


def prepare(envelope: Envelope, keyring: Keyring) -> Prepared:
    """Checks 1-12 (spec 6) in order, every signature verification deferred."""
    event = envelope.value
    if not _well_formed(event):
        return Prepared("malformed")
    event_type = EVENT_TYPES.get(event["event_type"])
    if event_type is None:
        return Prepared("unknown_event_type")
    body_digest = body_sha256(envelope)
    if envelope.event_id != "sha256:" + body_digest:
        return Prepared("event_id_mismatch")
    signer = event["signer"]
    key = keyring.get(signer["key_id"])
    if key is None:
        return Prepared("unknown_key")
    if (
        signer["public_key_fingerprint"] != key.fingerprint
        or signer["signer_id"] != key.signer_id
        or signer["signer_type"] != key.signer_type
    ):
        return Prepared("signer_mismatch")
    signature = decode_b64(event["signature_b64"])
    if signature is None or len(signature) != 64:
        return Prepared("bad_signature")
    check_6 = SignatureCheck(key.verifier, key.public_key, signature, bytes.fromhex(body_digest))
    if not key.valid_at(event["created_at"]):
        return Prepared(None, check_6, "key_not_valid")
    if signer["signer_type"] not in event_type.signer_types:
        return Prepared(None, check_6, "unauthorized_signer")
    target = event["target"]
    if not event_type.target_ok(target):
        return Prepared(None, check_6, "bad_target")
    payload = event["payload"]
    if not event_type.payload_ok(payload, target, _payload_jcs(envelope)):
        return Prepared(None, check_6, "bad_payload")
    if event_type.name == "record_created":
        after, check_12 = _check_record_created(event, payload, keyring)
        return Prepared(None, check_6, after, check_12)
    return Prepared(None, check_6)


def check_alone(envelope: Envelope, keyring: Keyring) -> str | None:
    """Checks 1-12 (spec 6): the reason of the first that fails, or ``None``."""
    return prepare(envelope, keyring).reason()


Verifier = Callable[[Iterator[list[SignatureCheck]]], Callable[[], None]]
"""Where the Ed25519 verifications of a batch run. :func:`start_checks` calls it with the
batch's verifications in parts, each part yielded as soon as checks 1-12 have prepared it
(so that the first can be verified while the rest are prepared); it starts them wherever
it chooses and returns a function that waits until those it started have run. A
verification it leaves alone is run where its event's reason is asked for
(:meth:`Prepared.reason`). The core runs nothing anywhere: :mod:`pithlog.parallel` makes
the verifiers that use threads or processes."""


def check_many(
    envelopes: Sequence[Envelope], keyring: Keyring, verifier: Verifier | None = None
) -> list[str | None]:
    """:func:`check_alone` of each envelope, the signature verifications run by ``verifier``
    (default: here, one after the other)."""
    return start_checks(envelopes, keyring, verifier).reasons()


class CheckBatch:
    """Checks 1-12 of a batch of envelopes whose signature verifications may still be
    running elsewhere (:func:`start_checks`); :meth:`reasons` waits for them."""

    def __init__(self, prepared: list[Prepared], waits: list[Callable[[], None]]) -> None:
        self._prepared = prepared
        self._waits = waits

    @classmethod
    def joined(cls, batches: Sequence[CheckBatch]) -> CheckBatch:
        """One batch of several, in order: its :meth:`reasons` are theirs, one after the
        other (the parts of a large batch, started as they were read)."""
        prepared = [p for b in batches for p in b._prepared]
        return cls(prepared, [w for b in batches for w in b._waits])

    def reasons(self) -> list[str | None]:
        """The reason of the first failing check of each envelope, in order, or ``None``:
        once the verifier's work is in, every verification it left is run here."""
        for wait in self._waits:
            wait()
        self._waits = []
        return [item.reason() for item in self._prepared]


def start_checks(
    envelopes: Sequence[Envelope], keyring: Keyring, verifier: Verifier | None = None
) -> CheckBatch:
    """Run the Python part of checks 1-12 on ``envelopes`` now, and hand their signature
    verifications to ``verifier`` (:data:`Verifier`) part by part as they are prepared;
    without one they wait for :meth:`CheckBatch.reasons`, which runs them here."""
    prepared: list[Prepared] = []

    def parts() -> Iterator[list[SignatureCheck]]:
        pending: list[SignatureCheck] = []
        for envelope in envelopes:
            item = prepare(envelope, keyring)
            prepared.append(item)
            pending += item.checks()
            if len(pending) >= PART:
                yield pending
                pending = []
        if pending:
            yield pending

    remaining = parts()
    waits = [] if verifier is None else [verifier(remaining)]
    for _ in remaining:  # prepared all the same: what no verifier took is run by reasons()
        pass
    return CheckBatch(prepared, waits)


def verify_batch(items: list[tuple[bytes, bytes, bytes]]) -> list[bool]:
    """Verify ``(public key, signature, message)`` triples (raw bytes): what a verifying
    process runs. The keys are keyring keys, already checked by :mod:`pithlog.protocol.keys`."""
    out = []
    for public_key, signature, message in items:
        verifier = _VERIFIERS.get(public_key)
        if verifier is None:
            verifier = _VERIFIERS[public_key] = Ed25519PublicKey.from_public_bytes(public_key)
        out.append(verify_signature(verifier, signature, message, public_key))
    return out


_VERIFIERS: dict[bytes, Ed25519PublicKey] = {}
"""Decoded public keys of :func:`verify_batch`, by raw bytes (a keyring's worth)."""

PART = 64
"""Verifications per part handed to a :data:`Verifier` while a batch is prepared."""


def _check_record_created(
    event: dict[str, Any], payload: dict[str, Any], keyring: Keyring
) -> tuple[str | None, SignatureCheck | None]:
    """Checks 11 and 12 (spec 5.1); the payload already passed check 10. Returns the
    reason of the first that fails without verifying, else the verification check 12
    still needs."""
    canonical_sha256 = payload["canonical_sha256"]
    record = payload["canonical_record"]
    if canonical_sha256 != digest(record) or event["pith_number"] != pith_number_for(
        canonical_sha256, record["metadata"]["submitted_at"]
    ):
        return "pith_number_mismatch", None
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
        return "bad_receipt", None
    signature = decode_b64(receipt.get("signature_b64"))
    if signature is None or len(signature) != 64:
        return "bad_receipt", None
    key = keyring[signer["key_id"]]
    return None, SignatureCheck(
        key.verifier, key.public_key, signature, bytes.fromhex(canonical_sha256)
    )


def check_against_record(envelope: Envelope, record: ChosenRecord) -> str | None:
    """Checks 13-14 (spec 6) for an event other than ``R`` that passed checks 1-12."""
    event = envelope.value
    event_type = EVENT_TYPES[event["event_type"]]
    if event_type.name == "record_created":
        return None
    if event["created_at"] < record.created_at:
        return "predates_record"
    if event_type.record_match is not None and not event_type.record_match(
        record_facts(envelope), record
    ):
        return "record_mismatch"
    return None


def record_facts(envelope: Envelope) -> RecordFacts:
    """Check 14's facts of an envelope that passed checks 1-12
    (:data:`pithlog.protocol.event_types.FactsRule`): those it carries (an envelope decoded
    without its payload, :func:`pithlog.protocol.events.readmit_light`), else read from its
    payload (each envelope is compared with R once, so they are not kept)."""
    if envelope.facts is not None:
        return envelope.facts[0]
    event = envelope.value
    rule = EVENT_TYPES[event["event_type"]].record_facts
    return None if rule is None else rule(event["payload"], event["target"])


def reduction_hints(envelope: Envelope, reason: str | None) -> Hints | None:
    """What a process that reduces a copy judged here (verdict ``reason``) needs of it
    besides its JCS bytes, to decode it without its payload
    (:func:`pithlog.protocol.events.readmit_light`): its spans and check 14 facts. ``None``
    where the whole envelope is needed: a ``record_created``, whose payload R is made of,
    or a copy whose spans the checks did not find (one that failed check 1 or 2)."""
    if envelope.spans is None or envelope.value["event_type"] == "record_created":
        return None
    return envelope.spans, (record_facts(envelope) if reason is None else None)
