"""The envelope door (spec section 4) and the signing helpers."""

from __future__ import annotations

import gc
import hashlib
import weakref
from typing import Any

import pytest

from pithlog.errors import DoorError, SigningError
from pithlog.protocol import events
from pithlog.protocol.canonical import MAX_ENVELOPE_BYTES, digest, jcs
from pithlog.protocol.event_types import prepare_record_created
from pithlog.protocol.events import admit, body_of, parse_envelope

from .builders import canonical_record, event, key, record_event

R = record_event()


def door(value: Any) -> str:
    with pytest.raises(DoorError) as info:
        admit(value)
    return info.value.code


@pytest.mark.parametrize("value", [[], "event", 1, None, [R]])
def test_not_an_object(value: Any) -> None:
    assert door(value) == "door.not_object"


@pytest.mark.parametrize(
    "event_id",
    [None, 1, "", "sha256:" + "A" * 64, "sha256:" + "a" * 63, "sha256:" + "a" * 65,
     "SHA256:" + "a" * 64, "a" * 64, "sha256:" + "g" * 64, "sha256: " + "a" * 63],
)
def test_event_id_form(event_id: Any) -> None:
    value = {**R, "event_id": event_id}
    assert door(value) == "door.event_id"
    del value["event_id"]
    assert door(value) == "door.event_id"


@pytest.mark.parametrize(
    "pith_number",
    [None, 2024, "", "pith:2024:" + "A" * 25, "pith:2024:" + "a" * 26, "pith:24:" + "A" * 26],
)
def test_pith_number_form(pith_number: Any) -> None:
    value = {**R, "pith_number": pith_number}
    assert door(value) == "door.pith_number"


def test_attributable_but_otherwise_broken_envelopes_pass_the_door() -> None:
    # Everything else is for the reduction to judge (with exactly one reason).
    envelope = admit({"event_id": R["event_id"], "pith_number": R["pith_number"]})
    assert envelope.event_id == R["event_id"]
    assert envelope.encoded == jcs({"event_id": R["event_id"], "pith_number": R["pith_number"]})


def test_envelope_of_at_most_1_mib() -> None:
    assert MAX_ENVELOPE_BYTES == 1_048_576  # spec 1, written out: the bound is the spec's
    base = {"event_id": R["event_id"], "pith_number": R["pith_number"], "payload": {"x": ""}}
    room = MAX_ENVELOPE_BYTES - len(jcs(base))
    exact = {**base, "payload": {"x": "a" * room}}
    assert len(jcs(exact)) == MAX_ENVELOPE_BYTES
    admit(exact)
    over = {**base, "payload": {"x": "a" * (room + 1)}}
    assert door(over) == "door.too_large"
    # The rule is on the JCS bytes: escapes count as written by JCS.
    escaped = {**base, "payload": {"x": "\x01" * (room // 6 + 1)}}
    assert len(jcs(escaped)) > MAX_ENVELOPE_BYTES
    assert door(escaped) == "door.too_large"


def test_parse_envelope_from_bytes() -> None:
    envelope = parse_envelope(jcs(R))
    assert envelope.value == R
    assert envelope.encoded == jcs(R)
    with pytest.raises(DoorError) as info:
        parse_envelope(jcs(R)[:-1] + b',"event_id":"x"}')
    assert info.value.code == "door.duplicate_member"


def test_sign_event_identifies_the_body() -> None:
    ev = event("mirror_hint", R)
    assert list(ev) == sorted(ev)
    assert ev["event_id"] == "sha256:" + digest(body_of(ev))
    assert set(body_of(ev)) == {"created_at", "event_type", "payload", "pith_number", "signer",
                                "target"}


def test_prepare_record_created_fills_derived_members() -> None:
    record = canonical_record()
    pith, payload = prepare_record_created(key("registry"), {"canonical_record": record})
    assert payload["canonical_sha256"] == digest(record)
    assert (payload["source_kind"], payload["source_id"], payload["source_version"]) == (
        "arxiv", "2411.00284", 2)
    assert payload["attestation_state"] == "computed"
    assert payload["receipt"]["algorithm"] == "ed25519"
    assert pith == R["pith_number"]


@pytest.mark.parametrize(
    "payload",
    [{}, {"canonical_record": []}, {"canonical_record": {"metadata": {}}},
     {"canonical_record": {**canonical_record(), "metadata": {"submitted_at": "2024"}}},
     {"canonical_record": canonical_record(), "source_id": "other"}],
)
def test_prepare_record_created_refuses_what_cannot_have_a_pith_number(payload: Any) -> None:
    with pytest.raises(SigningError):
        prepare_record_created(key("registry"), payload)


def nested_arrays(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth - 1):
        value = [value]
    return value


def test_envelope_nesting_counts_the_envelope_as_depth_1() -> None:
    base = {"event_id": R["event_id"], "pith_number": R["pith_number"]}
    # envelope 1, payload 2, then arrays at depths 3..64
    deepest = {**base, "payload": {"x": nested_arrays(62)}}
    assert parse_envelope(jcs(deepest)).value == deepest
    too_deep = {**base, "payload": {"x": nested_arrays(63)}}
    with pytest.raises(DoorError) as info:
        parse_envelope(jcs(too_deep))
    assert info.value.code == "door.too_deep"
    # The same, not in canonical form (the exact door rather than the fast one).
    spaced = jcs(too_deep).replace(b"[", b"[ ")
    with pytest.raises(DoorError) as info:
        parse_envelope(spaced)
    assert info.value.code == "door.too_deep"
    assert parse_envelope(jcs(deepest).replace(b"[", b"[ ")).value == deepest


def test_the_observation_digest_is_cut_from_the_payload_jcs_without_encoding_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    observation = {"citation": {"cited_paper": {"arxiv_id": "2401.00001"}},
                   "observation_digest": "sha256:" + "00" * 32, "observation_id": "obs-1",
                   "standing_notice": {"state": "measured"}}  # fmt: skip
    payload = {"observation": observation}
    rest = {k: v for k, v in observation.items() if k != "observation_digest"}
    expected = hashlib.sha256(jcs(rest)).hexdigest()
    payload_jcs = jcs(payload)

    def no_encoding(*_: object, **__: object) -> str:
        raise AssertionError("the digest was encoded again")

    monkeypatch.setattr(events, "digest", no_encoding)
    assert events.observation_digest(payload, payload_jcs) == expected
    # a twin of the member nested in the citation: not provably the observation's own
    observation["citation"]["observation_digest"] = observation["observation_digest"]
    with pytest.raises(AssertionError, match="encoded again"):
        events.observation_digest(payload, jcs(payload))


# --- an envelope decoded without its payload ----------------------------------------------


@pytest.mark.parametrize("event_type", ["citation_signature", "graph_snapshot", "mirror_hint",
                                        "timestamp_anchor"])
def test_readmit_light_is_the_envelope_without_its_payload(event_type: str) -> None:
    whole = parse_envelope(jcs(event(event_type, record_event())))
    spans = events.projection_spans(whole)
    light = events.readmit_light(whole.encoded, (spans, ("2411.00284",)))
    assert light.value == {k: v for k, v in whole.value.items() if k != "payload"}
    assert (light.event_id, light.pith_number, light.encoded) == (
        whole.event_id, whole.pith_number, whole.encoded)
    assert light.spans == spans and light.facts == (("2411.00284",),)
    with pytest.raises(KeyError):  # a use of the payload fails, never reads something else
        light.value["payload"]


def test_readmit_light_keeps_a_payload_that_holds_the_envelope_s_member_names() -> None:
    # the payload's bytes are cut by their spans, not found by searching for names
    payload = {"locator": '","signer":{"key_id":"x"},"payload":{}', "signer": {"a": 1}}
    whole = parse_envelope(jcs(event("mirror_hint", record_event(), payload=payload)))
    light = events.readmit_light(whole.encoded, (events.projection_spans(whole), None))
    assert light.value == {k: v for k, v in whole.value.items() if k != "payload"}


def test_a_refusal_among_envelopes_is_freed_without_the_cyclic_collector() -> None:
    """Helpers run with the collector paused: a refusal in a reference cycle (its
    traceback holding the frame that holds the list) was never freed there."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        out = events.parse_envelopes([b"not json", b'{"n":1}', jcs(R)])
        assert [type(item) for item in out[:2]] == [DoorError, DoorError]
        refusals = [weakref.ref(item) for item in out[:2]]
        del out
        assert [ref() for ref in refusals] == [None, None]
    finally:
        if was_enabled:
            gc.enable()
