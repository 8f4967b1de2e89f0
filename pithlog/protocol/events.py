"""The event envelope (spec section 4) and the table of event types (section 5).

- :func:`admit` is the door for envelopes: a parsed value is attributed to a record (an
  object with a well-formed ``event_id`` and ``pith_number``, JCS at most 1 MiB) or refused.
- :data:`EVENT_TYPES` holds, as data in one place, each type's state list, allowed targets,
  allowed signer types, its event-alone payload rule (check 10) and its rule against the
  chosen record (check 14).
- :func:`sign_event` and :func:`prepare_record_created` build signed events.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import msgspec

from pithlog.errors import DoorError, SigningError
from pithlog.protocol.canonical import (
    JSON,
    MAX_ENVELOPE_BYTES,
    decode,
    decode_b64,
    digest,
    encode_b64,
    is_hex64,
    jcs,
)
from pithlog.protocol.keys import SigningKey
from pithlog.protocol.records import is_pith_number, pith_number_for
from pithlog.protocol.timestamps import is_ts

ENVELOPE_MEMBERS = frozenset(
    {
        "event_type",
        "pith_number",
        "target",
        "created_at",
        "signer",
        "payload",
        "event_id",
        "signature_b64",
    }
)
"""Spec 4: the envelope is closed; exactly these members."""

SIGNER_MEMBERS = frozenset({"key_id", "public_key_fingerprint", "signer_id", "signer_type"})
"""Spec 3: the signer object is closed; exactly these members."""

_EVENT_ID = re.compile(r"sha256:[0-9a-f]{64}")


def is_event_id(value: object) -> bool:
    """``"sha256:"`` + 64 lowercase hex."""
    return isinstance(value, str) and _EVENT_ID.fullmatch(value) is not None


@dataclass(frozen=True, slots=True)
class Envelope:
    """An envelope that passed the door: attributable to a record, maybe still invalid.

    ``value`` is the parsed JSON object exactly as received; ``encoded`` its JCS bytes (the
    byte string that section 7 step 0 compares, and what a store keeps).
    """

    value: dict[str, Any]
    event_id: str
    pith_number: str
    encoded: bytes
    spans: tuple[int, int, int, int] | None = field(default=None, compare=False, repr=False)
    """:func:`projection_spans` of this envelope once computed (a state and a store's index
    both need them): a cache, set once, not part of the value."""


def admit(value: JSON, encoded: bytes | None = None) -> Envelope:
    """Attribute a parsed value to a record, or raise :class:`DoorError` (spec 4)."""
    if not isinstance(value, dict):
        raise DoorError("not_object", "an event must be a JSON object")
    if not is_event_id(value.get("event_id")):
        raise DoorError(
            "event_id", 'no event_id string of the form "sha256:" + 64 lowercase hex', "/event_id"
        )
    if not is_pith_number(value.get("pith_number")):
        raise DoorError(
            "pith_number",
            "no pith_number string of the form pith:YYYY:<26 base32 characters>",
            "/pith_number",
        )
    if encoded is None:
        encoded = jcs(value)
    if len(encoded) > MAX_ENVELOPE_BYTES:
        raise DoorError(
            "too_large",
            f"JCS encoding of the envelope is {len(encoded)} bytes; at most {MAX_ENVELOPE_BYTES}",
        )
    return Envelope(value, value["event_id"], value["pith_number"], encoded)


def parse_envelope(data: bytes) -> Envelope:
    """The door for one event: untrusted bytes to an :class:`Envelope`, or :class:`DoorError`."""
    value, encoded = decode(data, max_encoded=MAX_ENVELOPE_BYTES)
    return admit(value, encoded)


_ANY = msgspec.json.Decoder()


def readmit(encoded: bytes) -> Envelope:
    """The envelope again from its JCS bytes, which passed the door before: a stored copy
    (``replay`` is what puts every stored byte through the door again), or a copy that a
    reduction kept as bytes between step 0 and its pith's turn. No checks: decoding JCS
    gives back the value it encodes."""
    value = _ANY.decode(encoded)
    return Envelope(value, value["event_id"], value["pith_number"], encoded)


def body_of(envelope: dict[str, Any]) -> dict[str, Any]:
    """``body``: the envelope without ``event_id`` and ``signature_b64`` (spec 4)."""
    return {k: v for k, v in envelope.items() if k != "event_id" and k != "signature_b64"}


# --- where a projection's parts sit in the envelope's JCS ---------------------------------

_json_string = msgspec.json.Encoder().encode


def projection_spans(envelope: Envelope) -> tuple[int, int, int, int]:
    """``(payload_start, payload_end, signer_start, signer_end)`` within ``envelope.encoded``.

    For an envelope that passed check 1 (exactly the eight members), its JCS is
    ``{"created_at":…,"event_id":…,"event_type":…,"payload":P,"pith_number":…,
    "signature_b64":…,"signer":S,"target":T}``, so the JCS of the payload and of the signer
    (and the target's JSON string, after S) are slices of it: a state document can be built
    from stored bytes without decoding or re-encoding any payload.
    """
    if envelope.spans is not None:
        return envelope.spans
    event = envelope.value
    encoded = envelope.encoded
    payload_start = (
        len(b'{"created_at":') + len(_json_string(event["created_at"]))
        + len(b',"event_id":') + len(_json_string(envelope.event_id))
        + len(b',"event_type":') + len(_json_string(event["event_type"]))
        + len(b',"payload":')
    )  # fmt: skip
    signer = jcs(event["signer"], members=4)  # check 1: exactly four string members
    signer_end = len(encoded) - 1 - len(_json_string(event["target"])) - len(b',"target":')
    signer_start = signer_end - len(signer)
    payload_end = (
        signer_start - len(b',"signer":')
        - len(_json_string(event["signature_b64"])) - len(b',"signature_b64":')
        - len(_json_string(envelope.pith_number)) - len(b',"pith_number":')
    )  # fmt: skip
    if encoded[signer_start:signer_end] != signer or encoded[payload_end] != ord(","):
        raise ValueError(f"{envelope.event_id} is not a well-formed envelope in JCS form")
    spans = (payload_start, payload_end, signer_start, signer_end)
    object.__setattr__(envelope, "spans", spans)  # the cache of a frozen value, set once
    return spans


def body_sha256(envelope: Envelope) -> str:
    """``digest(body)`` (spec 4) of an envelope that passed check 1, from its JCS bytes.

    JCS writes an object's members sorted and each member on its own, so the JCS of the
    body is the envelope's JCS without its ``"event_id"`` and ``"signature_b64"`` members:
    three slices of ``envelope.encoded`` (found with :func:`projection_spans`), hashed
    without encoding the body again. This relies on what :class:`Envelope` promises,
    ``encoded`` is the JCS of ``value``; bytes whose member boundaries are not where JCS
    puts them (never the case for what the door returns) are digested the plain way.
    """
    event = envelope.value
    encoded = envelope.encoded
    try:
        _, payload_end, signer_start, _ = projection_spans(envelope)
    except ValueError:
        return digest(body_of(event))
    eid_start = len(b'{"created_at":') + len(_json_string(event["created_at"]))
    eid_member = b',"event_id":' + _json_string(envelope.event_id)
    eid_end = eid_start + len(eid_member)
    sig_member = b',"signature_b64":' + _json_string(event["signature_b64"])
    sig_end = signer_start - len(b',"signer":')
    sig_start = sig_end - len(sig_member)
    if (
        encoded[eid_start:eid_end] != eid_member
        or encoded[sig_start:sig_end] != sig_member
        or sig_start != payload_end + len(b',"pith_number":')
        + len(_json_string(envelope.pith_number))
    ):
        return digest(body_of(event))
    sha = hashlib.sha256(encoded[:eid_start])
    sha.update(encoded[eid_end:sig_start])
    sha.update(encoded[sig_end:])
    return sha.hexdigest()


# --- the chosen record, as the record-comparing rules (check 14) see it --------------------


@dataclass(frozen=True, slots=True)
class ChosenRecord:
    """What checks 13-14 need of the chosen record ``R`` (spec 7, step 2)."""

    event_id: str
    created_at: str
    canonical_record: dict[str, Any]
    canonical_sha256: str

    @property
    def source(self) -> dict[str, Any]:
        source: dict[str, Any] = self.canonical_record["source"]
        return source


# --- small predicates on JSON values (bool is not an integer in JSON) ----------------------


def _nonempty_str(value: object) -> bool:
    return isinstance(value, str) and value != ""


def _is_int(value: object) -> bool:
    return type(value) is int


def _same(a: object, b: object) -> bool:
    """JSON equality of scalars: ``1`` and ``true`` differ, as do ``1`` and ``"1"``."""
    return type(a) is type(b) and a == b


def _claim_or_record(target: str) -> bool:
    return target == "record" or (target.startswith("claim:") and len(target) > len("claim:"))


def _record_only(target: str) -> bool:
    return target == "record"


# --- payload rules, check 10 (the event alone) ---------------------------------------------

RECORD_CREATED_MEMBERS = (
    "canonical_record",
    "canonical_sha256",
    "source_kind",
    "source_id",
    "source_version",
    "attestation_state",
    "receipt",
)


def _record_created_payload(p: dict[str, Any], target: str, _jcs: bytes | None = None) -> bool:
    """Spec 5.1, the ``bad_payload`` rules."""
    if any(m not in p for m in RECORD_CREATED_MEMBERS):
        return False
    record = p["canonical_record"]
    if not isinstance(record, dict):
        return False
    source = record.get("source")
    if not (
        isinstance(source, dict)
        and isinstance(source.get("kind"), str)
        and isinstance(source.get("id"), str)
        and _is_int(source.get("version"))
    ):
        return False
    metadata = record.get("metadata")
    if not (isinstance(metadata, dict) and is_ts(metadata.get("submitted_at"))):
        return False
    if not (isinstance(p["canonical_sha256"], str) and isinstance(p["attestation_state"], str)):
        return False
    return (
        _same(p["source_kind"], source["kind"])
        and _same(p["source_id"], source["id"])
        and _same(p["source_version"], source["version"])
    )


def _graph_snapshot_payload(p: dict[str, Any], target: str, _jcs: bytes | None = None) -> bool:
    snapshot = p.get("graph_snapshot")
    if not (isinstance(snapshot, dict) and isinstance(snapshot.get("source"), dict)):
        return False
    return "verdict_id" in p and (p["verdict_id"] is None or isinstance(p["verdict_id"], str))


def _author_attestation_payload(p: dict[str, Any], target: str, _jcs: bytes | None = None) -> bool:
    return _nonempty_str(p.get("statement"))


_EVENT_TARGET = "event:sha256:"


def _timestamp_anchor_target(target: str) -> bool:
    return target == "record" or (
        target.startswith(_EVENT_TARGET) and is_hex64(target[len(_EVENT_TARGET) :])
    )


def _timestamp_anchor_payload(p: dict[str, Any], target: str, _jcs: bytes | None = None) -> bool:
    anchored = p.get("anchored_sha256")
    if not (
        is_hex64(anchored)
        and _nonempty_str(p.get("anchor_kind"))
        and decode_b64(p.get("proof_b64")) is not None
    ):
        return False
    # An anchor of a named event must anchor that event's hash: decidable from the event alone.
    return not target.startswith(_EVENT_TARGET) or anchored == target[len(_EVENT_TARGET) :]


def _storage_attestation_payload(p: dict[str, Any], target: str, _jcs: bytes | None = None) -> bool:
    size = p.get("byte_size")
    return (
        is_hex64(p.get("content_sha256"))
        and isinstance(size, int)
        and not isinstance(size, bool)
        and size >= 0
        and _nonempty_str(p.get("locator"))
    )


_CITATION_TARGET = "citation:"


def _citation_target(target: str) -> bool:
    return target.startswith(_CITATION_TARGET) and len(target) > len(_CITATION_TARGET)


def _citation_signature_payload(
    p: dict[str, Any], target: str, payload_jcs: bytes | None = None
) -> bool:
    """Spec 5.2: the observation's own digest and its id, not yet the paper.
    ``payload_jcs``: the JCS of ``p`` when the caller has it (a slice of the envelope's,
    :func:`projection_spans`), from which the digest is taken without encoding again."""
    obs = p.get("observation")
    if not (
        isinstance(obs, dict)
        and isinstance(obs.get("observation_digest"), str)
        and isinstance(obs.get("observation_id"), str)
        and isinstance(obs.get("citation"), dict)
    ):
        return False
    if obs["observation_digest"] != "sha256:" + observation_digest(p, payload_jcs):
        return False
    return bool(obs["observation_id"] == target[len(_CITATION_TARGET) :])


_OBSERVATION_OPEN = b'{"observation":'
_DIGEST_MEMBER = "observation_digest"


def observation_digest(p: dict[str, Any], payload_jcs: bytes | None = None) -> str:
    """``digest`` of the payload's observation without its ``observation_digest`` member
    (spec 5.2), ``p["observation"]`` being an object that holds that member as a string.

    JCS writes an object's members sorted, each on its own, so with the payload's JCS at
    hand the JCS of the observation is a slice of it when ``observation`` is the payload's
    only member, and the JCS of the observation without the member is that slice without
    the member's bytes, ``,"observation_digest":"…"`` (never its first member: ``citation``
    sorts before it). Those bytes begin with a comma and a quote that no JSON string holds
    unescaped, so where they occur a member of that name and value begins; occurring once,
    they are the observation's own member (a nested object may hold its twin: then, as for
    anything else unproven, the digest is taken the plain way). As :func:`body_sha256`
    relies on ``Envelope.encoded``, this relies on ``payload_jcs`` being the JCS of ``p``:
    only where the member is cut are the bytes checked."""
    obs = p["observation"]
    if payload_jcs is not None and len(p) == 1 and payload_jcs.startswith(_OBSERVATION_OPEN):
        member = b',"observation_digest":' + _json_string(obs[_DIGEST_MEMBER])
        start = payload_jcs.find(member)  # one scan: to the member, then past it
        if start > 0 and payload_jcs.find(member, start + 1) < 0 and payload_jcs[-2:] == b"}}":
            view = memoryview(payload_jcs)  # the observation's JCS: [len(open):-1]
            sha = hashlib.sha256(view[len(_OBSERVATION_OPEN) : start])
            sha.update(view[start + len(member) : -1])
            return sha.hexdigest()
    return digest({k: v for k, v in obs.items() if k != _DIGEST_MEMBER})


REPLICATION_OUTCOMES = frozenset(
    {"replicated", "partially_replicated", "not_replicated", "inconclusive"}
)
CORRECTION_TYPES = frozenset(
    {"erratum", "retraction", "expression_of_concern", "withdrawal", "reinstatement"}
)


def _replication_record_payload(p: dict[str, Any], target: str, _jcs: bytes | None = None) -> bool:
    outcome = p.get("outcome")
    return (
        isinstance(outcome, str)
        and outcome in REPLICATION_OUTCOMES
        and _nonempty_str(p.get("report"))
    )


def _correction_payload(p: dict[str, Any], target: str, _jcs: bytes | None = None) -> bool:
    kind = p.get("correction_type")
    return isinstance(kind, str) and kind in CORRECTION_TYPES and _nonempty_str(p.get("notice"))


def _mirror_hint_payload(p: dict[str, Any], target: str, _jcs: bytes | None = None) -> bool:
    return _nonempty_str(p.get("locator"))


# --- record rules, check 14 (against the chosen record, spec 5.3) -------------------------


def _graph_snapshot_matches(p: dict[str, Any], target: str, record: ChosenRecord) -> bool:
    return jcs(p["graph_snapshot"]["source"]) == jcs(record.source)


def _timestamp_anchor_matches(p: dict[str, Any], target: str, record: ChosenRecord) -> bool:
    return target != "record" or p["anchored_sha256"] == record.canonical_sha256


def _citation_matches(p: dict[str, Any], target: str, record: ChosenRecord) -> bool:
    citation = p["observation"]["citation"]
    paper_id = record.source["id"]
    for side in ("citing_paper", "cited_paper", "cited_work"):
        paper = citation.get(side)
        if isinstance(paper, dict):
            arxiv_id = paper.get("arxiv_id")
            if isinstance(arxiv_id, str) and arxiv_id == paper_id:
                return True
    return False


# --- the table ----------------------------------------------------------------------------


class PayloadRule(Protocol):
    """Check 10 of one event type: ``p`` the payload, ``target`` the target, and the
    payload's JCS when the caller has it (rules that digest a part of the payload take
    it from there)."""

    def __call__(self, p: dict[str, Any], target: str, _jcs: bytes | None = None, /) -> bool: ...


RecordRule = Callable[[dict[str, Any], str, ChosenRecord], bool]


@dataclass(frozen=True)
class EventType:
    """One row of the table of spec section 5."""

    name: str
    state_list: str
    """Member of ``current`` that lists its applied events."""
    signer_types: frozenset[str]
    target_ok: Callable[[str], bool]
    payload_ok: PayloadRule
    """Check 10: payload rules that need no other event."""
    record_ok: RecordRule | None
    """Check 14: payload rules that compare with the chosen record."""


def _row(
    name: str,
    state_list: str,
    signers: tuple[str, ...],
    target_ok: Callable[[str], bool],
    payload_ok: PayloadRule,
    record_ok: RecordRule | None = None,
) -> EventType:
    return EventType(name, state_list, frozenset(signers), target_ok, payload_ok, record_ok)


EVENT_TYPES: dict[str, EventType] = {
    row.name: row
    for row in (
        _row("record_created", "record_created", ("pith_registry",),
             _record_only, _record_created_payload),
        _row("graph_snapshot", "graph_snapshots", ("pith_registry",),
             lambda t: t == "graph", _graph_snapshot_payload, _graph_snapshot_matches),
        _row("author_attestation", "author_attestations", ("author",),
             _claim_or_record, _author_attestation_payload),
        _row("timestamp_anchor", "timestamp_anchors", ("timestamp_authority", "pith_registry"),
             _timestamp_anchor_target, _timestamp_anchor_payload, _timestamp_anchor_matches),
        _row("storage_attestation", "storage_attestations", ("mirror", "pith_registry"),
             _record_only, _storage_attestation_payload),
        _row("citation_signature", "citation_signatures", ("citation_indexer", "pith_registry"),
             _citation_target, _citation_signature_payload, _citation_matches),
        _row("replication_record", "replication_records", ("replicator", "pith_registry"),
             _claim_or_record, _replication_record_payload),
        _row("correction", "corrections", ("pith_registry",),
             _record_only, _correction_payload),
        _row("mirror_hint", "mirror_hints", ("mirror", "pith_registry"),
             _record_only, _mirror_hint_payload),
    )
}  # fmt: skip

STATE_LISTS: tuple[str, ...] = tuple(
    t.state_list for t in EVENT_TYPES.values() if t.name != "record_created"
)
"""The eight lists of ``current``, in display order (spec 8)."""


# --- building and signing -----------------------------------------------------------------


def sign_event(
    key: SigningKey,
    event_type: str,
    pith_number: str,
    target: str,
    created_at: str,
    payload: dict[str, Any],
) -> dict[str, Any]:
    """A signed envelope (spec 4), members in JCS order.

    Builds what the signer means; it does not judge it (``pithlog reduce`` does), except
    that the result must pass the door.
    """
    body = {
        "created_at": created_at,
        "event_type": event_type,
        "payload": payload,
        "pith_number": pith_number,
        "signer": key.signer,
        "target": target,
    }
    body_digest = digest(body)
    envelope = dict(body)
    envelope["event_id"] = "sha256:" + body_digest
    envelope["signature_b64"] = encode_b64(key.sign(bytes.fromhex(body_digest)))
    envelope = {k: envelope[k] for k in sorted(envelope)}
    admit(envelope)
    return envelope


RECEIPT_FIXED = {"algorithm": "ed25519", "signed_message": "canonical_sha256_bytes"}


def prepare_record_created(key: SigningKey, payload: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """Fill in what a ``record_created`` payload derives from its ``canonical_record``.

    Returns ``(pith_number, payload)``: ``canonical_sha256``, the ``source_*`` members and
    the signed ``receipt`` (spec 5.1) are set; other receipt members already present (such as
    the registry's ``builder_version``) are kept. Raises :class:`SigningError` when the
    record cannot have a pith number.
    """
    record = payload.get("canonical_record")
    if not isinstance(record, dict):
        raise SigningError("payload", "record_created payload needs a canonical_record object")
    source = record.get("source")
    metadata = record.get("metadata")
    if not (isinstance(source, dict) and {"kind", "id", "version"} <= source.keys()):
        raise SigningError("payload", "canonical_record.source needs kind, id and version")
    if not (isinstance(metadata, dict) and is_ts(metadata.get("submitted_at"))):
        raise SigningError("payload", "canonical_record.metadata.submitted_at must be a ts")
    canonical_sha256 = digest(record)
    filled = dict(payload)
    filled["canonical_sha256"] = canonical_sha256
    derived = (("source_kind", "kind"), ("source_id", "id"), ("source_version", "version"))
    for member, part in derived:
        if member in payload and not _same(payload[member], source[part]):
            raise SigningError(
                "payload",
                f"{member} {payload[member]!r} differs from canonical_record.source.{part}",
            )
        filled[member] = source[part]
    filled.setdefault("attestation_state", "computed")
    previous = payload.get("receipt")
    receipt: dict[str, Any] = dict(previous) if isinstance(previous, dict) else {}
    receipt.update(RECEIPT_FIXED)
    receipt["canonical_sha256"] = canonical_sha256
    receipt["key_id"] = key.key_id
    receipt["public_key_fingerprint"] = key.fingerprint
    receipt["signature_b64"] = encode_b64(key.sign(bytes.fromhex(canonical_sha256)))
    filled["receipt"] = receipt
    return pith_number_for(canonical_sha256, metadata["submitted_at"]), filled
