"""The fourteen checks of spec section 6, one named test per reason code, plus boundaries:
checks 1-9 here, check 10 in ``test_checks_payload.py`` and checks 11-14 in
``test_checks_record.py``.

Each ``test_check_NN_<reason>`` builds an event that fails exactly that check: it passes
every earlier check (it is signed, identified and shaped correctly), and a control that
differs only in the one defect is valid. So removing the check would make the test fail.
"""

from __future__ import annotations

import base64
import copy
from typing import Any

import pytest

from pithlog.protocol.canonical import digest
from pithlog.protocol.checks import CHECK_NUMBER, REASONS, check_alone
from pithlog.protocol.event_types import EVENT_TYPES
from pithlog.protocol.events import admit
from pithlog.protocol.keys import make_keyring
from pithlog.protocol.text_forms import encode_b64
from pithlog.testing import test_keyring as fixed_keyring
from pithlog.testing import test_keyring_entries as fixed_entries

from .builders import (
    KEYRING,
    LATER,
    NON_RECORD_TYPES,
    R,
    about_r,
    envelope_body,
    event,
    key,
    record_event,
    record_parts,
    reseal,
    seal,
    sign_record,
    verdict,
)


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


def _envelope_shapes() -> dict[str, dict[str, Any]]:
    good = event("mirror_hint", R)
    body = envelope_body(good)
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
    body = envelope_body(good)
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
    assert good["event_id"] == "sha256:" + digest(envelope_body(good))


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
    body = envelope_body(good)
    body["signer"][member] = value
    bad = seal(body, "mirror")
    assert about_r(good) == "applied"
    assert about_r(bad) == "signer_mismatch"


# --- 6 bad_signature ---------------------------------------------------------------------


def _signature_variants() -> dict[str, str]:
    good = event("mirror_hint", R)
    body_digest = digest(envelope_body(good))
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


def _failing_later(case: str) -> tuple[dict[str, Any], Any]:
    """An event that fails ``case`` (a check after 6, or check 13) with a good signature,
    and the keyring to judge it under."""
    if case == "key_not_valid":
        return event("mirror_hint", R), fixed_keyring(mirror={"not_after": LATER})
    if case == "unauthorized_signer":
        return event("correction", R, signer="author"), KEYRING
    if case == "bad_target":
        return event("mirror_hint", R, target="graph"), KEYRING
    if case == "bad_payload":
        return reseal(event("mirror_hint", R), "mirror", payload={}), KEYRING
    if case == "bad_receipt":
        payload = copy.deepcopy(R["payload"])
        payload["receipt"]["signature_b64"] = encode_b64(bytes(64))
        return reseal(R, "registry", payload=payload, created_at=LATER), KEYRING
    assert case == "predates_record"
    return event("mirror_hint", R, "2025-12-31T23:59:59Z"), KEYRING


@pytest.mark.parametrize("case", ["key_not_valid", "unauthorized_signer", "bad_target",
                                  "bad_payload", "bad_receipt", "predates_record"])
def test_a_bad_signature_is_the_reason_whatever_later_check_also_fails(case: str) -> None:
    """Spec 6: the reason is the first failing check, and check 6 comes before 7-14 (a
    verdict of a later check would also rank the forged copy above others in step 0)."""
    signed, keyring = _failing_later(case)
    assert about_r(signed, keyring) == case
    forged = {**signed, "signature_b64": encode_b64(bytes(64))}
    assert about_r(forged, keyring) == "bad_signature"
    assert check_alone(admit(forged), keyring) == "bad_signature"


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


def test_every_reason_has_a_named_test() -> None:
    from . import test_checks_payload, test_checks_record

    names = {name for module in (globals(), vars(test_checks_payload), vars(test_checks_record))
             for name in module if name.startswith("test_check_")}  # fmt: skip
    for number, reason in enumerate(REASONS, start=1):
        assert f"test_check_{number:02d}_{reason}" in names
