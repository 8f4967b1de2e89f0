"""The fast door against the plain one, on hostile input.

The fast path (:func:`parse`, :func:`decode`, :func:`parse_envelope`: msgspec, the JCS
shortcut, the early size refusal) and the plain path (:func:`parse_exact`, ``json`` with
the door's hooks, and :func:`jcs_reference`, the ``rfc8785`` package) must give the same
verdict and the same bytes on every generated value, every mutated event and every piece
of junk. Complements ``tests/properties/test_door_differential.py``, which compares them on
generated values written by ``json.dumps``.
"""

from __future__ import annotations

import random
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from pithlog.errors import DoorError
from pithlog.protocol.canonical import (
    MAX_SAFE_INTEGER,
    decode,
    decode_fast,
    jcs_reference,
    parse,
    parse_exact,
)
from pithlog.protocol.events import admit, parse_envelope

from .corpus import ORIGINALS, SEEDS, VALID, budget, emit, equivalents, junk, mutations, resealed

Verdict = tuple[str, Any]


def fast_value(data: bytes) -> Verdict:
    try:
        return ("ok", jcs_reference(parse(data)))
    except DoorError as exc:
        return ("refused", exc.code)


def fast_decode(data: bytes) -> Verdict:
    try:
        value, encoded = decode(data)
    except DoorError as exc:
        return ("refused", exc.code)
    assert encoded == jcs_reference(value)
    return ("ok", encoded)


def plain_value(data: bytes) -> Verdict:
    try:
        return ("ok", jcs_reference(parse_exact(data)))
    except DoorError as exc:
        return ("refused", exc.code)


def fast_envelope(data: bytes) -> Verdict:
    try:
        return ("ok", parse_envelope(data).encoded)
    except DoorError as exc:
        return ("refused", exc.code)


def plain_envelope(data: bytes) -> Verdict:
    try:
        value = parse_exact(data)
        return ("ok", admit(value, jcs_reference(value)).encoded)
    except DoorError as exc:
        return ("refused", exc.code)


def assert_same(data: bytes) -> None:
    plain = plain_value(data)
    assert fast_value(data) == plain
    assert fast_decode(data) == plain
    fast, slow = fast_envelope(data), plain_envelope(data)
    if fast == ("refused", "door.too_large") and slow[0] == "refused":
        return  # refused early for its size; the plain path refuses it for something else
    assert fast == slow


_special = st.sampled_from(
    ["\x00", "\x1f", "\x7f", "\u0085", '"', "\\", "/", "\u2028", "\ud7ff", "\ue000", "\uffff",
     "\ufeff", "\U00010000", "\U0001f600", "\U0010ffff", "\u00e9", "\u0301"]
)  # fmt: skip
_text = st.text(st.one_of(st.characters(codec="utf-8"), _special), max_size=8)
_ints = st.one_of(
    st.integers(-MAX_SAFE_INTEGER, MAX_SAFE_INTEGER),
    st.sampled_from([MAX_SAFE_INTEGER + 1, -(MAX_SAFE_INTEGER + 1), 10**16, 2**64, 0]),
)
_values = st.recursive(
    st.none() | st.booleans() | _ints | _text | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_text, inner, max_size=5),
    max_leaves=25,
)
_bends = st.fixed_dictionaries(
    {},
    optional={name: st.sampled_from([0.1, 0.5, 1.0])
              for name in ("shuffle", "escape", "space", "numform", "surrogate", "duplicate",
                           "slash")},
)  # fmt: skip


@budget(500)
@given(_values, _bends, SEEDS)
def test_generated_values_written_any_way(value: Any, bends: dict[str, float], seed: int) -> None:
    assert_same(emit(value, random.Random(seed), **bends))


@budget(1000)
@given(mutations())
def test_mutated_events(case: tuple[int, bytes]) -> None:
    assert_same(case[1])


@budget(150)
@given(equivalents())
def test_equivalent_events(case: tuple[int, bytes]) -> None:
    assert_same(case[1])
    assert fast_envelope(case[1])[0] == "ok"


@budget(150)
@given(st.integers(0, len(VALID) - 1), SEEDS, _bends)
def test_events_in_producers_forms_take_the_fast_door(
    index: int, seed: int, bends: dict[str, float]
) -> None:
    """A valid event in any member order, spaced, with ``\\/`` or with non-ASCII characters
    escaped is proven by the fast door alone, to its original JCS."""
    allowed = {k: v for k, v in bends.items() if k in ("shuffle", "space", "slash", "escape")}
    data = emit(VALID[index], random.Random(seed), **allowed)
    if "escape" in allowed and any(e in data.lower() for e in (b"\\u003a", b"\\u002d")):
        return  # an escaped colon or minus sign: the fast door hands it over, by design
    fast = decode_fast(data)
    assert fast is not None, data
    assert fast[1] == ORIGINALS[index]


@budget(300)
@given(st.one_of(junk(), resealed()))
def test_junk_and_resigned_events(data: bytes) -> None:
    assert_same(data)


_NAME_CHARS = "az\u00e9\ue000\uffff\U00010000\U0001f600\U0010ffff"


@budget(40)
@given(SEEDS, st.integers(257, 3000))
def test_wide_objects_in_any_order(seed: int, width: int) -> None:
    """Objects wider than msgspec may sort take the Python path in jcs: same bytes."""
    rnd = random.Random(seed)
    value: dict[str, Any] = {}
    while len(value) < width:
        name = "".join(rnd.choice(_NAME_CHARS) for _ in range(rnd.randint(0, 6)))
        value[name] = rnd.choice([0, -1, MAX_SAFE_INTEGER, "x", None, [], {"a": 1}])
    value["nested"] = {str(i): i for i in range(width)}
    assert_same(emit(value, rnd, shuffle=1.0))
