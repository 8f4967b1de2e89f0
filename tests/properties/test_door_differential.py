"""The fast door and the exact door give the same verdict and the same value on any input."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from pithlog.errors import DoorError
from pithlog.protocol.canonical import decode, jcs, jcs_reference, parse, parse_exact

_ints = st.integers(min_value=-(2**53) - 2, max_value=2**53 + 2)
_text = st.text(
    st.characters(codec="utf-8", exclude_categories=())
    | st.sampled_from("\ue000\uffff😀\u2028\x00\"\\"),
    max_size=12,
)
_values = st.recursive(
    st.none() | st.booleans() | _ints | _text | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_text, inner, max_size=4),
    max_leaves=20,
)


def _verdict(parser, data: bytes):  # type: ignore[no-untyped-def]
    try:
        return ("ok", jcs_reference(parser(data)))
    except DoorError as exc:
        return ("refused", exc.code)


def _texts(value: object) -> list[bytes]:
    """Encodings of one value that a sender might send: JCS-like, and json's forms."""
    compact = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return [
        compact.encode("utf-8", "surrogatepass"),
        json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode(
            "utf-8", "surrogatepass"
        ),
        json.dumps(value, indent=1).encode(),
    ]


@settings(max_examples=400, deadline=None)
@given(_values)
def test_fast_and_exact_door_agree(value: object) -> None:
    for data in _texts(value):
        assert _verdict(parse, data) == _verdict(parse_exact, data)


@settings(max_examples=200, deadline=None)
@given(_values, st.data())
def test_duplicated_member_is_refused_by_both(value: object, data: st.DataObject) -> None:
    name = data.draw(_text)
    encoded = json.dumps(name, ensure_ascii=False)
    doc = f'{{{encoded}:1,{encoded}:{json.dumps(value, ensure_ascii=False)}}}'.encode(
        "utf-8", "surrogatepass"
    )
    for parser in (parse, parse_exact):
        try:
            parser(doc)
        except DoorError as exc:
            assert exc.code in {"door.duplicate_member", "door.lone_surrogate", "door.utf8",
                                "door.number_form", "door.number_range", "door.too_deep"}
        else:
            raise AssertionError("a repeated member name was accepted")


@settings(max_examples=300, deadline=None)
@given(_values)
def test_decode_returns_the_reference_jcs(value: object) -> None:
    for data in _texts(value):
        try:
            parsed, encoded = decode(data)
        except DoorError:
            continue
        assert encoded == jcs_reference(parsed) == jcs(parsed)
