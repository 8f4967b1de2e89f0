"""The fourteen checks of spec section 6, checks 11-14 (``pith_number_mismatch`` to
``record_mismatch``): one named test per reason code, plus boundaries, built as those of
checks 1-9 in ``test_checks.py`` are.
"""

from __future__ import annotations

import base64
from typing import Any

import pytest

from pithlog.protocol.canonical import digest
from pithlog.protocol.checks import check_against_record, check_alone
from pithlog.protocol.events import admit
from pithlog.protocol.records import pith_number_for
from pithlog.protocol.reduce import chosen_record
from pithlog.protocol.text_forms import encode_b64
from pithlog.testing import test_keyring as fixed_keyring

from .builders import (
    KEYRING,
    RECORD_AT,
    R,
    about_r,
    canonical_record,
    envelope_body,
    event,
    key,
    observation,
    record_event,
    record_of,
    record_parts,
    reduce_values,
    reseal,
    seal,
    seed_observations,
    sign_record,
    verdict,
    with_digest,
)

# --- 10 bad_payload ----------------------------------------------------------------------


# --- 11 pith_number_mismatch -------------------------------------------------------------


def test_check_11_pith_number_mismatch() -> None:
    pith, payload = record_parts()
    assert verdict(sign_record(pith, payload)) == "applied"
    wrong_year = "pith:2025:" + pith[10:]
    assert verdict(sign_record(wrong_year, payload)) == "pith_number_mismatch"


def test_pith_number_of_another_record() -> None:
    _, payload = record_parts()
    other_pith, _ = record_parts(canonical_record(version=3))
    assert verdict(sign_record(other_pith, payload)) == "pith_number_mismatch"


def test_canonical_sha256_not_the_digest_of_the_record() -> None:
    # Signed consistently over the wrong hash (pith number and receipt follow it):
    # only the digest rule of check 11 catches it.
    k = key("registry")
    record = canonical_record()
    wrong = digest(canonical_record(version=3))
    pith = pith_number_for(wrong, record["metadata"]["submitted_at"])
    _, payload = record_parts(record)
    payload["canonical_sha256"] = wrong
    payload["receipt"] = {**payload["receipt"], "canonical_sha256": wrong,
                          "signature_b64": encode_b64(k.sign(bytes.fromhex(wrong)))}
    assert verdict(sign_record(pith, payload)) == "pith_number_mismatch"


# --- 12 bad_receipt ----------------------------------------------------------------------


def _receipt_cases() -> dict[str, Any]:
    _, payload = record_parts()
    receipt = payload["receipt"]
    sha = payload["canonical_sha256"]
    sig = base64.b64decode(receipt["signature_b64"])
    other = digest(canonical_record(version=3))
    return {
        "signed by another key": {**receipt,
                                  "signature_b64": encode_b64(key("registry-2").sign(
                                      bytes.fromhex(sha)))},
        "signed over the hex text": {**receipt,
                                     "signature_b64": encode_b64(key("registry").sign(
                                         sha.encode()))},
        "signature of another hash": {**receipt, "signature_b64": encode_b64(
            key("registry").sign(bytes.fromhex(other)))},
        "signature 63 bytes": {**receipt, "signature_b64": encode_b64(sig[:63])},
        "signature not base64": {**receipt, "signature_b64": receipt["signature_b64"][:-2]},
        "signature missing": {k: v for k, v in receipt.items() if k != "signature_b64"},
        "signature a number": {**receipt, "signature_b64": 0},
        "algorithm upper case": {**receipt, "algorithm": "Ed25519"},
        "algorithm missing": {k: v for k, v in receipt.items() if k != "algorithm"},
        "signed_message other": {**receipt, "signed_message": "canonical_sha256_hex"},
        "canonical_sha256 other": {**receipt, "canonical_sha256": other},
        "canonical_sha256 missing": {k: v for k, v in receipt.items()
                                     if k != "canonical_sha256"},
        "key_id of another key": {**receipt, "key_id": "test-registry-2"},
        "fingerprint of another key": {**receipt,
                                       "public_key_fingerprint": key("registry-2").fingerprint},
        "not an object": receipt["signature_b64"],
        "null": None,
        "an array": [receipt],
    }


RECEIPTS = _receipt_cases()


@pytest.mark.parametrize("case", sorted(RECEIPTS))
def test_check_12_bad_receipt(case: str) -> None:
    pith, payload = record_parts()
    assert verdict(sign_record(pith, payload)) == "applied"
    assert verdict(sign_record(pith, {**payload, "receipt": RECEIPTS[case]})) == "bad_receipt"


def test_receipt_may_carry_registry_members() -> None:
    pith, payload = record_parts(receipt={"builder_version": "b-1", "kind": "pith_receipt",
                                          "signed_at": "2026-07-05T09:31:31.060848Z"})
    assert payload["receipt"]["builder_version"] == "b-1"
    assert verdict(sign_record(pith, payload)) == "applied"


# --- 13 predates_record ------------------------------------------------------------------


def test_check_13_predates_record() -> None:
    assert about_r(event("mirror_hint", R, RECORD_AT)) == "applied"
    assert about_r(event("mirror_hint", R, "2025-12-31T23:59:59Z")) == "predates_record"


def test_predates_is_against_the_chosen_record_only() -> None:
    later_record = record_event(created_at="2026-02-01T00:00:00Z")
    between = event("author_attestation", R, "2026-01-15T00:00:00Z")
    assert verdict(between, later_record) == "predates_record"
    assert verdict(between, later_record, R) == "applied"


def test_record_created_is_never_predating() -> None:
    rec = chosen_record(admit(R))
    other_record = admit(record_event(created_at="2026-06-01T00:00:00Z"))
    assert check_against_record(other_record, rec) is None


# --- 14 record_mismatch ------------------------------------------------------------------


def test_check_14_record_mismatch() -> None:
    source = dict(record_of(R)["source"])
    good = {"graph_snapshot": {"source": source}, "verdict_id": None}
    bad = {"graph_snapshot": {"source": {**source, "version": 1}}, "verdict_id": None}
    assert about_r(event("graph_snapshot", R, payload=good)) == "applied"
    assert about_r(event("graph_snapshot", R, payload=bad)) == "record_mismatch"


@pytest.mark.parametrize(
    "source",
    [{"id": "2411.00284", "kind": "arxiv", "version": 1},
     {"id": "2411.00284", "kind": "arxiv"},
     {"id": "2411.00284", "kind": "arxiv", "version": 2, "extra": None},
     {"id": "2411.00284", "kind": "arxiv", "version": True},
     {}],
)
def test_graph_snapshot_of_another_source_is_record_mismatch(source: dict[str, Any]) -> None:
    payload = {"graph_snapshot": {"source": source}, "verdict_id": None}
    assert about_r(event("graph_snapshot", R, payload=payload)) == "record_mismatch"


def test_graph_snapshot_source_equality_is_json_equality_not_python_equality() -> None:
    # docs/protocol.md, choice 4: JSON equality, so true is not 1. With R's
    # version 1, Python's == would take {"version": true} for the same source.
    r1 = record_event(canonical_record(version=1))
    source = dict(record_of(r1)["source"])
    for version, expected in ((1, "applied"), (True, "record_mismatch")):
        payload = {"graph_snapshot": {"source": {**source, "version": version}},
                   "verdict_id": None}
        assert verdict(event("graph_snapshot", r1, payload=payload), r1) == expected


def test_graph_snapshot_source_equality_ignores_member_order() -> None:
    source = {"version": 2, "kind": "arxiv", "id": "2411.00284"}
    payload = {"graph_snapshot": {"source": source}, "verdict_id": None}
    assert about_r(event("graph_snapshot", R, payload=payload)) == "applied"


def test_record_targeted_anchor_with_a_wrong_hash_is_record_mismatch() -> None:
    payload = {"anchor_kind": "rfc3161", "anchored_sha256": "ab" * 32, "proof_b64": "cA=="}
    assert about_r(event("timestamp_anchor", R, payload=payload)) == "record_mismatch"
    payload["anchored_sha256"] = R["payload"]["canonical_sha256"]
    assert about_r(event("timestamp_anchor", R, payload=payload)) == "applied"


def test_event_targeted_anchor_with_a_differing_hash_is_bad_payload() -> None:
    named = event("mirror_hint", R)
    h = named["event_id"][len("sha256:"):]
    target = "event:sha256:" + h
    payload = {"anchor_kind": "rfc3161", "anchored_sha256": h, "proof_b64": "cA=="}
    assert about_r(event("timestamp_anchor", R, target=target, payload=payload)) == "applied"
    payload["anchored_sha256"] = R["payload"]["canonical_sha256"]  # the record's, not h
    assert about_r(event("timestamp_anchor", R, target=target, payload=payload)) == "bad_payload"


def test_event_targeted_anchor_does_not_look_up_the_named_event() -> None:
    # docs/protocol.md, choice 19: the named event's presence, validity or pith does not
    # change the anchor's verdict (no check looks at another event of the set).
    named = event("mirror_hint", R)
    invalid = {**named, "signature_b64": encode_b64(bytes(64))}  # bad_signature
    other_pith = event("mirror_hint", record_event(canonical_record(source_id="2301.00001")))
    for shown in (named, other_pith):
        h = shown["event_id"][len("sha256:"):]
        payload = {"anchor_kind": "rfc3161", "anchored_sha256": h, "proof_b64": "cA=="}
        anchor = event("timestamp_anchor", R, target="event:sha256:" + h, payload=payload)
        assert verdict(anchor, R) == "applied"
        assert verdict(anchor, R, shown) == "applied"
        if shown is named:
            assert verdict(anchor, R, invalid) == "applied"
            assert verdict(invalid, R, anchor) == "bad_signature"


def test_citation_of_another_paper_is_record_mismatch() -> None:
    obs = observation("2304.11277")
    payload = {"observation": obs}
    target = "citation:" + obs["observation_id"]
    assert about_r(event("citation_signature", R, target=target, payload=payload)) == (
        "record_mismatch")


@pytest.mark.parametrize(
    ("citation", "expected"),
    [
        ({"citing_paper": {"arxiv_id": "2411.00284"}}, "applied"),
        ({"cited_paper": {"arxiv_id": "2411.00284"}}, "applied"),
        ({"cited_work": {"arxiv_id": "2411.00284"}, "cited_paper": None}, "applied"),
        ({"cited_work": {"pith_arxiv_id": "2411.00284"}}, "record_mismatch"),
        ({"cited_paper": "2411.00284"}, "record_mismatch"),
        ({"cited_paper": {"arxiv_id": None}, "citing_paper": None}, "record_mismatch"),
        ({"cited_paper": {"arxiv_id": "2411.00284v2"}}, "record_mismatch"),
        # choice 5: compared exactly, no trimming of spaces or invisible characters
        ({"cited_paper": {"arxiv_id": " 2411.00284"}}, "record_mismatch"),
        ({"cited_paper": {"arxiv_id": "2411.00284\u200b"}}, "record_mismatch"),
        ({"other_paper": {"arxiv_id": "2411.00284"}}, "record_mismatch"),
        ({}, "record_mismatch"),
    ],
)
def test_citation_paper_rule(citation: dict[str, Any], expected: str) -> None:
    obs = with_digest({"citation": citation, "observation_id": "o-9"})
    ev = event("citation_signature", R, target="citation:o-9", payload={"observation": obs})
    assert about_r(ev) == expected


@pytest.mark.parametrize(
    ("source_id", "arxiv_id", "expected"),
    [
        ("hep-th/9901001", "hep-th/9901001", "applied"),
        ("hep-th/9901001", "HEP-TH/9901001", "record_mismatch"),  # no case folding
        ("caf\u00e9/1", "cafe\u0301/1", "record_mismatch"),  # no Unicode normalization
        ("cafe\u0301/1", "caf\u00e9/1", "record_mismatch"),
    ],
)
def test_citation_arxiv_id_is_compared_exactly(
    source_id: str, arxiv_id: str, expected: str
) -> None:
    record = record_event(canonical_record(source_id=source_id))
    obs = with_digest({"citation": {"cited_paper": {"arxiv_id": arxiv_id}},
                       "observation_id": "o-1"})
    ev = event("citation_signature", record, target="citation:o-1", payload={"observation": obs})
    assert verdict(ev, record) == expected


SEED_RECORD = record_event(canonical_record(source_id="2304.11277", version=2,
                                            submitted_at="2023-04-21T23:52:27Z"))


def test_seed_observations_are_valid_citations_of_their_paper() -> None:
    observations = seed_observations()
    assert len(observations) == 139
    events = [
        event("citation_signature", SEED_RECORD, target="citation:" + o["observation_id"],
              payload={"observation": o})
        for o in observations
    ]
    result = reduce_values([SEED_RECORD, *events])[SEED_RECORD["pith_number"]]
    assert result.invalid == {}
    assert result.event_count == 140
    # Against another record every one of them is about some other paper.
    other = reduce_values([R, *[reseal(e, "indexer", pith_number=R["pith_number"])
                                for e in events]])[R["pith_number"]]
    assert set(other.invalid.values()) == {"record_mismatch"}
    assert len(other.invalid) == 139


# --- order of the checks -----------------------------------------------------------------


def test_first_failing_check_gives_the_reason() -> None:
    # Unauthorized signer, bad target and bad payload at once: check 8 speaks.
    ev = event("correction", R, signer="author", target="graph", payload={})
    assert about_r(ev) == "unauthorized_signer"
    # Bad target and bad payload: check 9.
    assert about_r(event("mirror_hint", R, target="graph", payload={})) == "bad_target"
    # Key not valid and unauthorized: check 7.
    ring = fixed_keyring(author={"not_after": RECORD_AT})
    assert about_r(event("correction", R, signer="author"), ring) == "key_not_valid"
    # A wrong event_id on an event signed by an unknown key: check 3.
    stranger = event("correction", R, signer="stranger")
    assert about_r({**stranger, "event_id": "sha256:" + "1" * 64}) == "event_id_mismatch"
    # Malformed and of an unknown type: check 1.
    body = envelope_body(event("correction", R))
    assert about_r(seal({**body, "event_type": "nope", "extra": 1}, "registry")) == "malformed"
    # Predating and mismatching the record: check 13.
    payload = {"anchor_kind": "k", "anchored_sha256": "ab" * 32, "proof_b64": ""}
    early = event("timestamp_anchor", R, "2025-01-01T00:00:00Z", payload=payload)
    assert about_r(early) == "predates_record"


def test_check_alone_and_against_record_directly() -> None:
    hint = admit(event("mirror_hint", R))
    assert check_alone(hint, KEYRING) is None
    assert check_against_record(hint, chosen_record(admit(R))) is None
    assert check_alone(admit(R), KEYRING) is None
    assert check_alone(admit({**event("mirror_hint", R), "signature_b64": ""}),
                       KEYRING) == "bad_signature"
    early = admit(event("mirror_hint", R, "2020-01-01T00:00:00Z"))
    assert check_alone(early, KEYRING) is None
    assert check_against_record(early, chosen_record(admit(R))) == "predates_record"

