"""The fourteen checks of spec section 6, one named test per reason code, plus boundaries.

Each ``test_check_NN_<reason>`` builds an event that fails exactly that check: it passes
every earlier check (it is signed, identified and shaped correctly), and a control that
differs only in the one defect is valid. So removing the check would make the test fail.
"""

from __future__ import annotations

import base64
import copy
from typing import Any

import pytest

from pithlog.protocol.canonical import digest, encode_b64
from pithlog.protocol.checks import CHECK_NUMBER, REASONS, check_against_record, check_alone
from pithlog.protocol.event_types import EVENT_TYPES, prepare_record_created
from pithlog.protocol.events import admit, sign_event
from pithlog.protocol.keys import make_keyring
from pithlog.protocol.records import base32_of, pith_number_for
from pithlog.protocol.reduce import chosen_record
from pithlog.testing import test_keyring as fixed_keyring
from pithlog.testing import test_keyring_entries as fixed_entries

from .builders import (
    KEYRING,
    LATER,
    NON_RECORD_TYPES,
    RECORD_AT,
    canonical_record,
    event,
    key,
    observation,
    record_event,
    record_of,
    reduce_values,
    reseal,
    seal,
    seed_observations,
    valid_parts,
    verdict,
    with_digest,
)

R = record_event()
"""The valid record every other event speaks about (created at RECORD_AT)."""


def about_r(ev: dict[str, Any], keyring: Any = KEYRING) -> str:
    return verdict(ev, R, keyring=keyring)


def record_parts(record: dict[str, Any] | None = None, **extra: Any) -> tuple[str, dict[str, Any]]:
    payload = {"canonical_record": record or canonical_record(), **extra}
    return prepare_record_created(key("registry"), payload)


def sign_record(pith: str, payload: dict[str, Any], *, signer: str = "registry",
                target: str = "record", created_at: str = RECORD_AT) -> dict[str, Any]:
    return sign_event(key(signer), "record_created", pith, target, created_at, payload)


def test_reasons_are_the_spec_codes_in_check_order() -> None:
    assert REASONS == (
        "malformed", "unknown_event_type", "event_id_mismatch", "unknown_key",
        "signer_mismatch", "bad_signature", "key_not_valid", "unauthorized_signer",
        "bad_target", "bad_payload", "pith_number_mismatch", "bad_receipt",
        "predates_record", "record_mismatch",
    )
    assert [CHECK_NUMBER[r] for r in REASONS] == list(range(1, 15))


def test_controls_are_valid() -> None:
    assert verdict(R) == "applied"
    for event_type in NON_RECORD_TYPES:
        assert about_r(event(event_type, R)) == "applied", event_type


# --- 1 malformed -------------------------------------------------------------------------


def test_check_01_malformed() -> None:
    good = event("author_attestation", R, "2026-02-28T00:00:00Z")
    bad = event("author_attestation", R, "2026-02-30T00:00:00Z")
    assert about_r(good) == "applied"
    assert about_r(bad) == "malformed"
    assert check_alone(admit(bad), KEYRING) == "malformed"


@pytest.mark.parametrize(
    "created_at",
    ["2026-02-30T00:00:00Z", "2026-03-01T24:00:00Z", "2026-03-01T12:00:00z",
     "2026-03-01t12:00:00Z", "2026-03-01T12:00:60Z", "2026-03-01T12:00:00.000Z",
     "2026-03-01T12:00:00+00:00", "2026-03-01 12:00:00Z", ""],
)
def test_created_at_that_is_not_a_ts_is_malformed(created_at: str) -> None:
    assert about_r(event("mirror_hint", R, created_at)) == "malformed"


def _body(ev: dict[str, Any]) -> dict[str, Any]:
    return {k: copy.deepcopy(v) for k, v in ev.items() if k not in ("event_id", "signature_b64")}


def _envelope_shapes() -> dict[str, dict[str, Any]]:
    good = event("mirror_hint", R)
    body = _body(good)
    cases: dict[str, dict[str, Any]] = {}
    cases["extra member"] = seal({**body, "note": "x"}, "mirror")
    for member in ("event_type", "target", "created_at", "signer", "payload"):
        cases[f"missing {member}"] = seal({k: v for k, v in body.items() if k != member}, "mirror")
    cases["missing signature_b64"] = {k: v for k, v in good.items() if k != "signature_b64"}
    cases["signature_b64 not a string"] = {**good, "signature_b64": None}
    cases["signature_b64 an array"] = {**good, "signature_b64": [good["signature_b64"]]}
    for member, value in (("event_type", ["mirror_hint"]), ("target", 5), ("created_at", 0),
                          ("signer", ["test-mirror"]), ("payload", "locator"),
                          ("payload", None), ("target", None)):
        cases[f"{member} is {type(value).__name__}"] = seal({**body, member: value}, "mirror")
    signer = body["signer"]
    cases["signer extra member"] = seal({**body, "signer": {**signer, "role": "x"}}, "mirror")
    cases["signer missing signer_id"] = seal(
        {**body, "signer": {k: v for k, v in signer.items() if k != "signer_id"}}, "mirror"
    )
    cases["signer empty signer_id"] = seal({**body, "signer": {**signer, "signer_id": ""}},
                                           "mirror")
    cases["signer key_id not a string"] = seal({**body, "signer": {**signer, "key_id": 7}},
                                               "mirror")
    cases["signer value null"] = seal(
        {**body, "signer": {**signer, "public_key_fingerprint": None}}, "mirror"
    )
    return cases


ENVELOPE_SHAPES = _envelope_shapes()


@pytest.mark.parametrize("case", sorted(ENVELOPE_SHAPES))
def test_envelope_and_signer_shape_is_malformed(case: str) -> None:
    assert about_r(ENVELOPE_SHAPES[case]) == "malformed"


def test_signer_with_an_extra_member_is_malformed_even_though_signed() -> None:
    good = event("mirror_hint", R)
    body = _body(good)
    body["signer"]["comment"] = "also me"
    bad = seal(body, "mirror")
    # Everything else about it is right: its id, its key, its signature.
    assert bad["event_id"] == "sha256:" + digest(body)
    assert verdict(bad, R) == "malformed"


# --- 2 unknown_event_type ----------------------------------------------------------------


@pytest.mark.parametrize("event_type", ["record_deleted", "Mirror_Hint", "mirror_hint ", "", "key"])
def test_check_02_unknown_event_type(event_type: str) -> None:
    good = event("mirror_hint", R)
    bad = reseal(good, "mirror", event_type=event_type)
    assert about_r(good) == "applied"
    assert about_r(bad) == "unknown_event_type"


# --- 3 event_id_mismatch -----------------------------------------------------------------


def test_check_03_event_id_mismatch() -> None:
    good = event("mirror_hint", R)
    bad = {**good, "event_id": "sha256:" + "0" * 64}
    # The signature is still a valid one over the body's real digest: only the id is wrong.
    assert about_r(good) == "applied"
    assert about_r(bad) == "event_id_mismatch"


def test_event_id_and_signature_copied_onto_another_body() -> None:
    original = event("mirror_hint", R)
    other = event("mirror_hint", R, payload={"locator": "https://evil.test.invalid/"})
    forged = {**other, "event_id": original["event_id"],
              "signature_b64": original["signature_b64"]}
    assert about_r(forged) == "event_id_mismatch"


def test_event_id_is_over_the_body_not_the_whole_envelope() -> None:
    good = event("correction", R)
    whole = {k: v for k, v in good.items() if k != "event_id"}
    assert good["event_id"] != "sha256:" + digest(whole)
    assert good["event_id"] == "sha256:" + digest(_body(good))


# --- 4 unknown_key -----------------------------------------------------------------------


def test_check_04_unknown_key() -> None:
    assert about_r(event("correction", R, signer="registry")) == "applied"
    assert about_r(event("correction", R, signer="stranger")) == "unknown_key"


def test_unknown_key_depends_on_the_keyring() -> None:
    hint = event("mirror_hint", R)
    assert about_r(hint, fixed_keyring()) == "applied"
    without_mirror = make_keyring(fixed_entries(("registry", "author", "tsa", "indexer")))
    assert verdict(hint, R, keyring=without_mirror) == "unknown_key"


# --- 5 signer_mismatch -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("member", "value"),
    [
        ("signer_id", "someone-else.test.invalid"),
        ("public_key_fingerprint", key("registry").fingerprint),
        ("public_key_fingerprint", key("mirror").fingerprint.upper()),
        ("signer_type", "pith_registry"),  # mirror_hint allows pith_registry: only 5 fails
        ("signer_type", "emperor"),  # outside the six: cannot equal the keyring's
    ],
)
def test_check_05_signer_mismatch(member: str, value: str) -> None:
    good = event("mirror_hint", R)
    body = _body(good)
    body["signer"][member] = value
    bad = seal(body, "mirror")
    assert about_r(good) == "applied"
    assert about_r(bad) == "signer_mismatch"


# --- 6 bad_signature ---------------------------------------------------------------------


def _signature_variants() -> dict[str, str]:
    good = event("mirror_hint", R)
    body_digest = digest(_body(good))
    sig = base64.b64decode(good["signature_b64"])
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    text = good["signature_b64"]
    sloppy = text[:-3] + alphabet[alphabet.index(text[-3]) | 1] + "=="
    assert sloppy != text and base64.b64decode(sloppy) == sig
    return {
        "another key": encode_b64(key("registry").sign(bytes.fromhex(body_digest))),
        "over the hex text": encode_b64(key("mirror").sign(body_digest.encode())),
        "over the prefixed id": encode_b64(key("mirror").sign(good["event_id"].encode())),
        "one bit flipped": encode_b64(bytes([sig[0] ^ 1]) + sig[1:]),
        "63 bytes": encode_b64(sig[:63]),
        "65 bytes": encode_b64(sig + b"\x00"),
        "zeros": encode_b64(bytes(64)),
        "non-canonical base64": sloppy,
        "no padding": text.rstrip("="),
        "url-safe": text.replace("+", "-").replace("/", "_") if ("+" in text or "/" in text)
        else text[:-3] + "-==",
        "whitespace": text[:40] + "\n" + text[40:],
        "empty": "",
    }


SIGNATURES = _signature_variants()


@pytest.mark.parametrize("case", sorted(SIGNATURES))
def test_check_06_bad_signature(case: str) -> None:
    good = event("mirror_hint", R)
    bad = {**good, "signature_b64": SIGNATURES[case]}
    assert about_r(good) == "applied"
    assert about_r(bad) == "bad_signature"


# --- 7 key_not_valid ---------------------------------------------------------------------

ONE_SECOND_BEFORE = "2026-03-01T11:59:59Z"
ONE_SECOND_AFTER = "2026-03-01T12:00:01Z"
assert LATER == "2026-03-01T12:00:00Z"


@pytest.mark.parametrize(
    ("window", "valid_window"),
    [
        ({"not_after": LATER}, {"not_after": ONE_SECOND_AFTER}),
        ({"not_before": ONE_SECOND_AFTER}, {"not_before": LATER}),
        ({"revoked_at": LATER}, {"revoked_at": ONE_SECOND_AFTER}),
        ({"revoked_at": ONE_SECOND_BEFORE}, {"revoked_at": ONE_SECOND_AFTER}),
        ({"not_before": "2025-01-01T00:00:00Z", "not_after": ONE_SECOND_BEFORE},
         {"not_before": "2025-01-01T00:00:00Z", "not_after": ONE_SECOND_AFTER}),
    ],
)
def test_check_07_key_not_valid(window: dict[str, str], valid_window: dict[str, str]) -> None:
    hint = event("mirror_hint", R)  # created at LATER
    assert about_r(hint, fixed_keyring(mirror=valid_window)) == "applied"
    assert about_r(hint, fixed_keyring(mirror=window)) == "key_not_valid"


def test_revocation_does_not_reach_back_to_earlier_events() -> None:
    ring = fixed_keyring(mirror={"revoked_at": LATER})
    before = event("mirror_hint", R, ONE_SECOND_BEFORE)
    after = event("mirror_hint", R, ONE_SECOND_AFTER)
    assert about_r(before, ring) == "applied"
    assert about_r(after, ring) == "key_not_valid"


def test_key_validity_is_judged_at_created_at_of_the_record_too() -> None:
    ring = fixed_keyring(registry={"not_before": "2026-01-01T00:00:01Z"})
    assert verdict(R, keyring=ring) == "key_not_valid"


# --- 8 unauthorized_signer ---------------------------------------------------------------

SPEC_SIGNERS = {
    "record_created": {"pith_registry"},
    "graph_snapshot": {"pith_registry"},
    "author_attestation": {"author"},
    "timestamp_anchor": {"timestamp_authority", "pith_registry"},
    "storage_attestation": {"mirror", "pith_registry"},
    "citation_signature": {"citation_indexer", "pith_registry"},
    "replication_record": {"replicator", "pith_registry"},
    "correction": {"pith_registry"},
    "mirror_hint": {"mirror", "pith_registry"},
}
KEY_OF_TYPE = {"pith_registry": "registry", "author": "author", "timestamp_authority": "tsa",
               "mirror": "mirror", "citation_indexer": "indexer", "replicator": "replicator"}


def test_check_08_unauthorized_signer() -> None:
    assert about_r(event("correction", R, signer="registry")) == "applied"
    assert about_r(event("correction", R, signer="author")) == "unauthorized_signer"


def test_the_spec_table_of_signer_types() -> None:
    assert set(EVENT_TYPES) == set(SPEC_SIGNERS)
    for event_type, allowed in SPEC_SIGNERS.items():
        for signer_type, name in KEY_OF_TYPE.items():
            if event_type == "record_created":
                outcome = verdict(record_event(signer=name))
            else:
                outcome = about_r(event(event_type, R, signer=name))
            expected = "applied" if signer_type in allowed else "unauthorized_signer"
            assert outcome == expected, (event_type, signer_type)


# --- 9 bad_target ------------------------------------------------------------------------

BAD_TARGETS = [
    ("graph_snapshot", "record"),
    ("author_attestation", "claim:"),
    ("author_attestation", "claim"),
    ("author_attestation", "Record"),
    ("author_attestation", "graph"),
    ("timestamp_anchor", "event:sha256:" + "A" * 64),
    ("timestamp_anchor", "event:sha256:" + "a" * 63),
    ("timestamp_anchor", "event:" + "a" * 64),
    ("timestamp_anchor", "claim:x"),
    ("storage_attestation", "claim:x"),
    ("citation_signature", "citation:"),
    ("citation_signature", "record"),
    ("replication_record", "graph"),
    ("replication_record", "claim:"),
    ("correction", "claim:x"),
    ("mirror_hint", "graph"),
    ("mirror_hint", "record "),
]


def test_check_09_bad_target() -> None:
    assert about_r(event("mirror_hint", R, target="record")) == "applied"
    assert about_r(event("mirror_hint", R, target="graph")) == "bad_target"


@pytest.mark.parametrize(("event_type", "target"), BAD_TARGETS)
def test_targets_not_allowed(event_type: str, target: str) -> None:
    assert about_r(event(event_type, R, target=target)) == "bad_target"


@pytest.mark.parametrize("target", ["graph", "claim:x", "citation:obs-1"])
def test_record_created_target_must_be_record(target: str) -> None:
    pith, payload = record_parts()
    assert verdict(sign_record(pith, payload, target=target)) == "bad_target"


@pytest.mark.parametrize(
    ("event_type", "target"),
    [("author_attestation", "record"), ("author_attestation", "claim:c-7"),
     ("author_attestation", "claim:\u00e9 \U0001f600"), ("replication_record", "claim:c1"),
     ("replication_record", "record")],
)
def test_targets_allowed(event_type: str, target: str) -> None:
    assert about_r(event(event_type, R, target=target)) == "applied"


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
        ({"other_paper": {"arxiv_id": "2411.00284"}}, "record_mismatch"),
        ({}, "record_mismatch"),
    ],
)
def test_citation_paper_rule(citation: dict[str, Any], expected: str) -> None:
    obs = with_digest({"citation": citation, "observation_id": "o-9"})
    ev = event("citation_signature", R, target="citation:o-9", payload={"observation": obs})
    assert about_r(ev) == expected


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
    body = _body(event("correction", R))
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


def test_every_reason_has_a_named_test() -> None:
    names = {name for name in globals() if name.startswith("test_check_")}
    for number, reason in enumerate(REASONS, start=1):
        assert f"test_check_{number:02d}_{reason}" in names
