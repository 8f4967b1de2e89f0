"""The fourteen checks of spec section 6, check 10 (``bad_payload``): the payload rules of
spec 5 for every event type, one named test for the reason code, plus boundaries, built as
those of checks 1-9 in ``test_checks.py`` are.
"""

from __future__ import annotations

from typing import Any

import pytest

from pithlog.protocol.canonical import digest
from pithlog.protocol.event_types import prepare_record_created
from pithlog.protocol.records import base32_of
from pithlog.protocol.text_forms import encode_b64

from .builders import (
    NON_RECORD_TYPES,
    R,
    about_r,
    canonical_record,
    event,
    key,
    observation,
    record_of,
    record_parts,
    sign_record,
    valid_parts,
    verdict,
    with_digest,
)

# --- 10 bad_payload ----------------------------------------------------------------------


def test_check_10_bad_payload() -> None:
    payload = {"byte_size": 0, "content_sha256": "cd" * 32, "locator": "l"}
    assert about_r(event("storage_attestation", R, payload=payload)) == "applied"
    bad = {**payload, "byte_size": -1}
    assert about_r(event("storage_attestation", R, payload=bad)) == "bad_payload"


def _bad_payloads() -> list[tuple[str, str, str | None, dict[str, Any]]]:
    """(case, event_type, target or None, payload)."""
    cases: list[tuple[str, str, str | None, dict[str, Any]]] = []
    record = record_of(R)

    def add(name: str, event_type: str, payload: dict[str, Any], target: str | None = None) -> None:
        cases.append((name, event_type, target, payload))

    snap = {"graph_snapshot": {"source": dict(record["source"])}, "verdict_id": None}
    add("graph_snapshot missing", "graph_snapshot", {"verdict_id": None})
    add("graph_snapshot a string", "graph_snapshot", {**snap, "graph_snapshot": "g"})
    add("graph source missing", "graph_snapshot", {**snap, "graph_snapshot": {"claims": {}}})
    add("graph source a string", "graph_snapshot",
        {**snap, "graph_snapshot": {"source": "arxiv:2411.00284v2"}})
    add("verdict_id missing", "graph_snapshot", {"graph_snapshot": snap["graph_snapshot"]})
    add("verdict_id a number", "graph_snapshot", {**snap, "verdict_id": 5})

    add("statement empty", "author_attestation", {"statement": ""})
    add("statement missing", "author_attestation", {})
    add("statement a number", "author_attestation", {"statement": 5})

    anchor = {"anchor_kind": "rfc3161", "anchored_sha256": digest(record), "proof_b64": "cA=="}
    add("anchored upper case", "timestamp_anchor",
        {**anchor, "anchored_sha256": digest(record).upper()})
    add("anchored short", "timestamp_anchor", {**anchor, "anchored_sha256": "ab" * 31})
    add("anchored with prefix", "timestamp_anchor",
        {**anchor, "anchored_sha256": "sha256:" + digest(record)})
    add("anchor_kind empty", "timestamp_anchor", {**anchor, "anchor_kind": ""})
    add("proof not base64", "timestamp_anchor", {**anchor, "proof_b64": "not base64!"})
    add("proof non-canonical", "timestamp_anchor", {**anchor, "proof_b64": "cB=="})
    add("proof missing", "timestamp_anchor",
        {k: v for k, v in anchor.items() if k != "proof_b64"})
    other = "e" * 64
    add("event anchor of another hash", "timestamp_anchor",
        {**anchor, "anchored_sha256": digest(record)}, "event:sha256:" + other)

    store = {"byte_size": 10, "content_sha256": "cd" * 32, "locator": "https://m/x"}
    add("byte_size negative", "storage_attestation", {**store, "byte_size": -1})
    add("byte_size true", "storage_attestation", {**store, "byte_size": True})
    add("byte_size a string", "storage_attestation", {**store, "byte_size": "10"})
    add("content_sha256 upper", "storage_attestation", {**store, "content_sha256": "CD" * 32})
    add("locator empty", "storage_attestation", {**store, "locator": ""})

    obs = observation(record["source"]["id"])
    target = "citation:" + obs["observation_id"]
    add("observation missing", "citation_signature", {}, target)
    add("observation a list", "citation_signature", {"observation": [obs]}, target)
    add("digest wrong", "citation_signature",
        {"observation": {**obs, "observation_digest": "sha256:" + "0" * 64}}, target)
    add("digest without prefix", "citation_signature",
        {"observation": {**obs, "observation_digest": obs["observation_digest"][7:]}}, target)
    add("digest missing", "citation_signature",
        {"observation": {k: v for k, v in obs.items() if k != "observation_digest"}}, target)
    add("observation_id differs from target", "citation_signature", {"observation": obs},
        "citation:obs-2")
    add("citation not an object", "citation_signature",
        {"observation": with_digest({**obs, "citation": "x"})}, target)
    add("observation_id a number", "citation_signature",
        {"observation": with_digest({**obs, "observation_id": 1})}, "citation:1")
    add("edited after digest", "citation_signature",
        {"observation": {**obs, "observation_id": "obs-1", "extra": True}}, target)

    add("outcome not in the list", "replication_record", {"outcome": "Replicated", "report": "r"})
    add("outcome missing", "replication_record", {"report": "r"})
    add("report empty", "replication_record", {"outcome": "inconclusive", "report": ""})

    add("correction_type not in the list", "correction",
        {"correction_type": "typo", "notice": "n"})
    add("notice empty", "correction", {"correction_type": "retraction", "notice": ""})
    add("notice missing", "correction", {"correction_type": "withdrawal"})

    add("locator empty", "mirror_hint", {"locator": ""})
    add("locator missing", "mirror_hint", {"url": "https://m/x"})
    add("locator a list", "mirror_hint", {"locator": ["https://m/x"]})
    return cases


BAD_PAYLOADS = _bad_payloads()


@pytest.mark.parametrize(("case", "event_type", "target", "payload"), BAD_PAYLOADS,
                         ids=[c[0] for c in BAD_PAYLOADS])
def test_payload_rules(case: str, event_type: str, target: str | None,
                       payload: dict[str, Any]) -> None:
    assert about_r(event(event_type, R, target=target, payload=payload)) == "bad_payload"


@pytest.mark.parametrize(
    ("event_type", "payload"),
    [
        ("replication_record", {"outcome": o, "report": "r"})
        for o in ("replicated", "partially_replicated", "not_replicated", "inconclusive")
    ]
    + [
        ("correction", {"correction_type": c, "notice": "n"})
        for c in ("erratum", "retraction", "expression_of_concern", "withdrawal",
                  "reinstatement")
    ]
    + [("graph_snapshot", {"graph_snapshot": {"source": record_of(R)["source"]},
                           "verdict_id": "v-1"}),
       ("storage_attestation", {"byte_size": 0, "content_sha256": "0" * 64, "locator": "x"}),
       ("timestamp_anchor", {"anchor_kind": "k", "anchored_sha256": digest(record_of(R)),
                             "proof_b64": ""})],
)
def test_payload_values_allowed(event_type: str, payload: dict[str, Any]) -> None:
    assert about_r(event(event_type, R, payload=payload)) == "applied"


@pytest.mark.parametrize("event_type", NON_RECORD_TYPES)
def test_payloads_may_carry_extra_members(event_type: str) -> None:
    _, _, payload = valid_parts(event_type, R)
    payload = {**payload, "x-extra": {"kept": [1, 2]}, "zzz": None}
    ev = event(event_type, R, payload=payload)
    assert about_r(ev) == "applied"


# record_created payload rules (spec 5.1, check 10)


def _record_payload_cases() -> list[tuple[str, str, dict[str, Any]]]:
    """(case, pith_number, payload): each otherwise signed and receipted correctly."""
    cases: list[tuple[str, str, dict[str, Any]]] = []
    pith, payload = record_parts()
    for member in ("canonical_record", "canonical_sha256", "source_kind", "source_id",
                   "source_version", "attestation_state", "receipt"):
        cases.append((f"{member} missing", pith, {k: v for k, v in payload.items() if k != member}))
    cases.append(("canonical_record a list", pith, {**payload, "canonical_record": []}))
    cases.append(("canonical_sha256 a number", pith, {**payload, "canonical_sha256": 1}))
    cases.append(("attestation_state null", pith, {**payload, "attestation_state": None}))
    cases.append(("source_kind differs", pith, {**payload, "source_kind": "doi"}))
    cases.append(("source_id differs", pith, {**payload, "source_id": "2411.00285"}))
    cases.append(("source_version a string", pith, {**payload, "source_version": "2"}))
    # Defects inside canonical_record: the pith number and receipt follow the record, so
    # only check 10 stands between these and validity.
    for name, record in (
        ("source.version true", canonical_record(version=True)),
        ("source.version a string", canonical_record(version="2")),
        ("source.kind a number", canonical_record(kind=1)),  # type: ignore[arg-type]
        ("source.id null", canonical_record(source_id=None)),  # type: ignore[arg-type]
        ("source missing", {k: v for k, v in canonical_record().items() if k != "source"}),
        ("source a string", {**canonical_record(), "source": "arxiv:2411.00284"}),
        ("metadata a string", {**canonical_record(), "metadata": "2024-11-01T00:43:54Z"}),
        ("submitted_at not a ts", canonical_record(submitted_at="2024-11-01T00:43:54")),
        ("submitted_at missing", {**canonical_record(), "metadata": {}}),
    ):
        rc = prepare_parts_lenient(record)
        cases.append((name, rc[0], rc[1]))
    # JSON equality: 1 and true differ.
    rc = prepare_parts_lenient(canonical_record(version=1))
    cases.append(("source_version true for version 1", rc[0], {**rc[1], "source_version": True}))
    return cases


def prepare_parts_lenient(record: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """What a careless signer would produce for ``record``: hashes and receipt right, the
    ``source_*`` members copied when there is a source; a pith number as best it can."""
    k = key("registry")
    sha = digest(record)
    source: dict[str, Any] = record["source"] if isinstance(record.get("source"), dict) else {}
    metadata = record.get("metadata")
    submitted = metadata.get("submitted_at") if isinstance(metadata, dict) else None
    year = submitted[:4] if isinstance(submitted, str) else "2024"
    payload = {
        "attestation_state": "computed",
        "canonical_record": record,
        "canonical_sha256": sha,
        "receipt": {"algorithm": "ed25519", "canonical_sha256": sha, "key_id": k.key_id,
                    "public_key_fingerprint": k.fingerprint,
                    "signature_b64": encode_b64(k.sign(bytes.fromhex(sha))),
                    "signed_message": "canonical_sha256_bytes"},
        "source_id": source.get("id", "2411.00284"),
        "source_kind": source.get("kind", "arxiv"),
        "source_version": source.get("version", 2),
    }
    return f"pith:{year}:{base32_of(sha)}", payload


RECORD_PAYLOADS = _record_payload_cases()


@pytest.mark.parametrize(("case", "pith", "payload"), RECORD_PAYLOADS,
                         ids=[c[0] for c in RECORD_PAYLOADS])
def test_record_created_payload_rules(case: str, pith: str, payload: dict[str, Any]) -> None:
    assert verdict(sign_record(pith, payload)) == "bad_payload"


def test_lenient_record_builder_makes_valid_records() -> None:
    # The control for the cases above: with a good record the same builder is valid.
    pith, payload = prepare_parts_lenient(canonical_record())
    assert verdict(sign_record(pith, payload)) == "applied"


def test_bool_is_not_an_integer() -> None:
    pith, payload = prepare_record_created(key("registry"),
                                           {"canonical_record": canonical_record(version=True)})
    assert verdict(sign_record(pith, payload)) == "bad_payload"
    pith, payload = prepare_record_created(key("registry"),
                                           {"canonical_record": canonical_record(version=1)})
    assert verdict(sign_record(pith, payload)) == "applied"

    store = {"byte_size": True, "content_sha256": "cd" * 32, "locator": "x"}
    assert about_r(event("storage_attestation", R, payload=store)) == "bad_payload"
    assert about_r(event("storage_attestation", R, payload={**store, "byte_size": 1})) == "applied"
