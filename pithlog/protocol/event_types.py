"""The table of event types (spec section 5).

- :data:`EVENT_TYPES` holds, as data in one place, each type's state list, allowed targets,
  allowed signer types, its event-alone payload rule (check 10) and its rule against the
  chosen record (check 14).
- :func:`prepare_record_created` fills in what a ``record_created`` payload derives from its
  record (spec 5.1), for :func:`pithlog.protocol.events.sign_event` to sign.

The envelope these payloads travel in is :mod:`pithlog.protocol.events`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from pithlog.errors import SigningError
from pithlog.protocol.canonical import digest, jcs
from pithlog.protocol.events import RecordFacts, observation_digest
from pithlog.protocol.keys import SigningKey
from pithlog.protocol.records import pith_number_for
from pithlog.protocol.text_forms import decode_b64, encode_b64, is_hex64
from pithlog.protocol.timestamps import is_ts

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
#
# Each rule is split in two: what it needs of the event (its facts, taken from the payload
# once, where the event is judged) and the comparison of those facts with R. A process that
# reduces an event after another judged it then needs the facts, not the decoded payload
# (an append's writing process: pithlog.store.append_judging). The facts are defined for
# an event that passed check 10, on which these functions never raise.


def _graph_snapshot_facts(p: dict[str, Any], target: str) -> RecordFacts:
    return jcs(p["graph_snapshot"]["source"])


def _graph_snapshot_matches(facts: RecordFacts, record: ChosenRecord) -> bool:
    return facts == jcs(record.source)


def _timestamp_anchor_facts(p: dict[str, Any], target: str) -> RecordFacts:
    # an anchor of a named event says nothing of R (check 10 held it to that event)
    return p["anchored_sha256"] if target == "record" else None


def _timestamp_anchor_matches(facts: RecordFacts, record: ChosenRecord) -> bool:
    return facts is None or facts == record.canonical_sha256


_CITED_SIDES = ("citing_paper", "cited_paper", "cited_work")


def _citation_facts(p: dict[str, Any], target: str) -> RecordFacts:
    """The arXiv ids (strings) that the citation's sides name, in side order."""
    citation = p["observation"]["citation"]
    ids: list[str] = []
    for side in _CITED_SIDES:
        paper = citation.get(side)
        if isinstance(paper, dict):
            arxiv_id = paper.get("arxiv_id")
            if isinstance(arxiv_id, str):
                ids.append(arxiv_id)
    return tuple(ids)


def _citation_matches(facts: RecordFacts, record: ChosenRecord) -> bool:
    # one of the sides names R's paper (``in`` a tuple: equality, as the spec compares)
    return isinstance(facts, tuple) and record.source["id"] in facts


# --- the table ----------------------------------------------------------------------------


class PayloadRule(Protocol):
    """Check 10 of one event type: ``p`` the payload, ``target`` the target, and the
    payload's JCS when the caller has it (rules that digest a part of the payload take
    it from there)."""

    def __call__(self, p: dict[str, Any], target: str, _jcs: bytes | None = None, /) -> bool: ...


FactsRule = Callable[[dict[str, Any], str], RecordFacts]
"""The facts of an event (its payload, its target) that passed check 10."""
MatchRule = Callable[[RecordFacts, ChosenRecord], bool]
"""Check 14 of one event type: do the event's facts agree with the chosen record?"""


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
    record_facts: FactsRule | None
    """Check 14, the part that reads the event: its facts (``None``: no check 14)."""
    record_match: MatchRule | None
    """Check 14, the part that compares those facts with the chosen record."""


def _row(
    name: str,
    state_list: str,
    signers: tuple[str, ...],
    target_ok: Callable[[str], bool],
    payload_ok: PayloadRule,
    record_rule: tuple[FactsRule, MatchRule] | None = None,
) -> EventType:
    facts, match = record_rule if record_rule is not None else (None, None)
    return EventType(name, state_list, frozenset(signers), target_ok, payload_ok, facts, match)


EVENT_TYPES: dict[str, EventType] = {
    row.name: row
    for row in (
        _row("record_created", "record_created", ("pith_registry",),
             _record_only, _record_created_payload),
        _row("graph_snapshot", "graph_snapshots", ("pith_registry",),
             lambda t: t == "graph", _graph_snapshot_payload,
             (_graph_snapshot_facts, _graph_snapshot_matches)),
        _row("author_attestation", "author_attestations", ("author",),
             _claim_or_record, _author_attestation_payload),
        _row("timestamp_anchor", "timestamp_anchors", ("timestamp_authority", "pith_registry"),
             _timestamp_anchor_target, _timestamp_anchor_payload,
             (_timestamp_anchor_facts, _timestamp_anchor_matches)),
        _row("storage_attestation", "storage_attestations", ("mirror", "pith_registry"),
             _record_only, _storage_attestation_payload),
        _row("citation_signature", "citation_signatures", ("citation_indexer", "pith_registry"),
             _citation_target, _citation_signature_payload, (_citation_facts, _citation_matches)),
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


# --- building a record_created payload (spec 5.1) -----------------------------------------


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
