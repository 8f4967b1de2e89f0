"""Canonical JSON on generated v1 values: the fast encoder equals RFC 8785, and the door
reads back exactly what was written."""

from __future__ import annotations

import json
import random
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from pithlog.errors import DoorError
from pithlog.protocol.canonical import MAX_SAFE_INTEGER, digest, jcs, jcs_reference, parse
from pithlog.protocol.events import Envelope, admit, body_of, body_sha256, observation_digest

# Characters where encoders tend to disagree: controls, DEL, line separators, the BOM,
# quotes and backslash, the U+E000..U+FFFF block and characters beyond the BMP (whose
# UTF-16 order differs from code point order), and the ends of the ranges.
SPECIAL = (
    "\x00", "\x01", "\x08", "\x09", "\x0a", "\x0c", "\x0d", "\x1f", "\x7f", "\x80", "\u0085",
    '"', "\\", "/", "\u00e9", "\u2028", "\u2029", "\ud7ff", "\ue000", "\uefff", "\uf000",
    "\ufeff", "\uff61", "\ufffd", "\uffff", "\U00010000", "\U0001f600", "\U0010ffff",
)
chars = st.one_of(st.characters(codec="utf-8"), st.sampled_from(SPECIAL))
texts = st.text(chars, max_size=12)
# Member names drawn mostly from a small alphabet mixing non-BMP characters with
# U+E000..U+FFFF ones, so objects often hold names whose two orders differ.
NAME_CHARS = ("a", "z", "\u00e9", "\ud7ff", "\ue000", "\uf8ff", "\uffff", "\U00010000",
              "\U0001f600", "\U0010ffff")
names = st.text(st.one_of(st.sampled_from(NAME_CHARS), st.characters(codec="utf-8")), max_size=4)
integers = st.integers(-MAX_SAFE_INTEGER, MAX_SAFE_INTEGER)
scalars = st.none() | st.booleans() | integers | texts
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(names, inner, max_size=6),
    max_leaves=30,
)


@settings(max_examples=400, deadline=None)
@given(values)
def test_jcs_equals_the_reference_and_round_trips(value: object) -> None:
    encoded = jcs(value)
    assert encoded == jcs_reference(value)
    parsed = parse(encoded)
    assert parsed == value
    assert jcs(parsed) == encoded


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(names, integers, min_size=2, max_size=8))
def test_member_names_sort_by_utf16_code_units(obj: dict[str, int]) -> None:
    encoded = jcs(obj)
    assert encoded == jcs_reference(obj)
    order = list(json.loads(encoded))
    assert order == sorted(obj, key=lambda n: n.encode("utf-16-be"))


@settings(max_examples=150, deadline=None)
@given(values, st.randoms(use_true_random=False))
def test_any_spelling_of_a_value_reads_back_to_the_same_canonical_form(
    value: object, rnd: random.Random
) -> None:
    # ASCII-escaped (surrogate pairs as \\ud83d\\ude00), raw UTF-8, indented, shuffled members.
    def shuffled(v: object) -> object:
        if isinstance(v, dict):
            items = list(v.items())
            rnd.shuffle(items)
            return {k: shuffled(x) for k, x in items}
        if isinstance(v, list):
            return [shuffled(x) for x in v]
        return v

    spellings = [
        json.dumps(value).encode("ascii"),
        json.dumps(shuffled(value), ensure_ascii=False).encode("utf-8"),
        json.dumps(shuffled(value), indent=2, ensure_ascii=False).encode("utf-8"),
    ]
    for data in spellings:
        assert jcs(parse(data)) == jcs(value)


# Input near the door's edges: fragments of JSON, numbers of every form and length, escapes.
fragments = st.sampled_from(
    [b"{", b"}", b"[", b"]", b",", b":", b'"', b"\\", b'"a"', b'"a":', b"1", b"-", b"0",
     b"-0", b"1.5", b"1e3", b"9007199254740991", b"9007199254740992", b"00", b"true",
     b"null", b"NaN", b" ", b"\n", b"\\u", b"\\ud800", b"\\udc00", b"\\ud83d\\ude00",
     b"\xef\xbb\xbf", b"\xed\xa0\x80", b"\xc3", b"\xe2\x80\xa8", b"\xf0\x9f\x98\x80"]
)
long_numbers = st.builds(
    lambda sign, n, digit: sign + digit * n, st.sampled_from([b"", b"-"]),
    st.integers(1, 6000), st.sampled_from([b"1", b"9"]),
)
door_inputs = st.one_of(
    st.binary(max_size=64),
    st.lists(fragments, max_size=24).map(b"".join),
    long_numbers,
    st.builds(lambda n: b"[" + n + b"]", long_numbers),
    values.map(lambda v: json.dumps(v).encode()),
)


@settings(max_examples=500, deadline=None)
@given(door_inputs)
def test_the_door_answers_every_input_with_a_value_or_a_door_error(data: bytes) -> None:
    try:
        value = parse(data)
    except DoorError as exc:
        assert exc.code.startswith("door.")
        return
    # Whatever passes is a v1 value: it has a canonical form that reads back to itself.
    encoded = jcs(value)
    assert encoded == jcs_reference(value)
    assert parse(encoded) == value


# --- the body's digest, sliced from the envelope's JCS (events.body_sha256) ----------------

EVENT_ID = "sha256:" + "ab" * 32
PITH = "pith:2024:4F47WZKMWXPUQ7DX6KAARP5YKA"
envelope_values = st.fixed_dictionaries({
    "created_at": texts, "event_type": texts, "target": texts, "signature_b64": texts,
    "payload": st.dictionaries(names, values, max_size=6),
    "signer": st.fixed_dictionaries({k: texts for k in (
        "key_id", "public_key_fingerprint", "signer_id", "signer_type")}),
})  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(envelope_values)
def test_body_digest_sliced_from_the_envelope_equals_digest_of_the_body(
    members: dict[str, Any],
) -> None:
    value = {**members, "event_id": EVENT_ID, "pith_number": PITH}
    envelope = admit(value)
    assert body_sha256(envelope) == digest(body_of(value))
    # Bytes not laid out as JCS (a store's damaged copy) take the plain way, same answer.
    spaced = Envelope(value, EVENT_ID, PITH, envelope.encoded.replace(b",", b", ", 1))
    assert body_sha256(spaced) == digest(body_of(value))
    tail = Envelope(value, EVENT_ID, PITH, envelope.encoded[:-1] + b" }")
    assert body_sha256(tail) == digest(body_of(value))


# --- the observation's digest, sliced from the payload's JCS (events.observation_digest) ---

OBSERVATION_DIGEST = st.sampled_from(["sha256:" + "cd" * 32, "", 'x"y', "\U0001f600"])
observations = st.builds(
    lambda extra, twin, value, where: {
        **extra,
        "citation": ({"observation_digest": value} if twin and where == "citation" else {}),
        "observation_digest": value,
        **({"zz": {"observation_digest": value}} if twin and where == "after" else {}),
    },
    st.dictionaries(names, values, max_size=4),
    st.booleans(),
    OBSERVATION_DIGEST,
    st.sampled_from(["citation", "after"]),
)


@settings(max_examples=400, deadline=None)
@given(observations, st.dictionaries(names, values, max_size=2))
def test_observation_digest_sliced_from_the_payload_equals_the_plain_digest(
    observation: dict[str, Any], more: dict[str, Any]
) -> None:
    # The payload alone, or beside other members; the observation's own digest member
    # with a twin nested before or after it, or not: every way gives the plain digest.
    for payload in ({"observation": observation}, {**more, "observation": observation}):
        plain = digest({k: v for k, v in observation.items() if k != "observation_digest"})
        assert observation_digest(payload, jcs(payload)) == plain
        assert observation_digest(payload) == plain
        # bytes not laid out as JCS where the member is cut take the plain way, same answer
        spaced = jcs(payload).replace(b',"observation_digest"', b', "observation_digest"')
        assert observation_digest(payload, spaced) == plain
