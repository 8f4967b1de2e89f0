"""The door (spec section 1) and the canonical form: parse, jcs, digest, decode_b64."""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

import pytest
import rfc8785

from pithlog.errors import DoorError
from pithlog.protocol.canonical import (
    MAX_DEPTH,
    MAX_LINE_BYTES,
    SORT_SAFE_MEMBERS,
    _parse_exact,
    decode,
    decode_fast,
    digest,
    jcs,
    jcs_ordered,
    jcs_reference,
    parse,
    parse_exact,
    shape,
)
from pithlog.protocol.text_forms import decode_b64, is_hex64, lower_ascii


def refused(data: bytes) -> str:
    with pytest.raises(DoorError) as info:
        parse(data)
    return info.value.code


# --- repeated member names -------------------------------------------------------------


@pytest.mark.parametrize(
    "data",
    [
        b'{"a":1,"a":1}',
        b'{"a":1,"b":2,"a":3}',
        b'{"x":{"a":1,"a":2}}',
        b'[{"ok":1},{"k":[{"a":0,"a":0}]}]',
        rb'{"a":1,"\u0061":2}',
        rb'{"\u00e9":1,"' + "é".encode() + b'":2}',
        rb'{"\ud83d\ude00":1,"' + "\U0001f600".encode() + b'":2}',
    ],
    ids=["top", "apart", "nested", "deep-in-array", "escaped-a", "escaped-e-acute", "escaped-pair"],
)
def test_duplicate_member_names_are_refused(data: bytes) -> None:
    assert refused(data) == "door.duplicate_member"


def test_same_name_in_sibling_objects_is_fine() -> None:
    assert parse(b'[{"a":1},{"a":2}]') == [{"a": 1}, {"a": 2}]


# --- numbers ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    ["1.0", "1e0", "1E0", "0.5", "-1.5", "1e+2", "-0", "-0.0", "0e0", "[1,2.0]", '{"n":-0}'],
)
def test_numbers_that_are_not_v1_integers(text: str) -> None:
    assert refused(text.encode()) == "door.number_form"


@pytest.mark.parametrize(
    "text",
    [
        str(2**53),
        str(-(2**53)),
        str(2**63),
        "12345678901234567",  # 17 digits
        "1" * 5000,  # beyond Python's int() digit limit: still a DoorError, not ValueError
        "-" + "9" * 5000,
        '{"n":' + "7" * 4400 + "}",
    ],
    ids=["2^53", "-2^53", "2^63", "17-digits", "5000-digits", "neg-5000-digits", "nested-long"],
)
def test_integers_beyond_2_53_minus_1(text: str) -> None:
    assert refused(text.encode()) == "door.number_range"


@pytest.mark.parametrize("value", [2**53 - 1, -(2**53 - 1), 0, 1, -1, 10**15])
def test_integers_within_range_are_accepted(value: int) -> None:
    # both doors: the fast one settles 2^53 - 1 from its bytes, the exact one by value
    for parser in (parse, parse_exact):
        parsed = parser(str(value).encode())
        assert parsed == value and type(parsed) is int


@pytest.mark.parametrize("text", ["NaN", "Infinity", "-Infinity", "[NaN]", '{"x":Infinity}'])
def test_nan_and_infinity_are_not_json(text: str) -> None:
    assert refused(text.encode()) == "door.syntax"


@pytest.mark.parametrize("text", ["01", "+1", "-", ".5", "1.", "0x10", "--1"])
def test_malformed_number_syntax(text: str) -> None:
    assert refused(text.encode()) in ("door.syntax", "door.number_form")


# --- strings -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "data",
    [
        rb'"\ud800"',
        rb'"\udfff"',
        rb'"a\ud83d"',
        rb'"\ude00\ud83d"',  # reversed pair: two lone surrogates
        rb'"\ud83d\u0041"',
        rb'["ok","\udc00"]',
        rb'{"k":"\ud800x"}',
        rb'{"\ud800":1}',
        rb'{"a":{"b\udbff":true}}',
    ],
    ids=["high", "low", "trailing-high", "reversed", "high-then-bmp", "in-array", "in-value",
         "key", "nested-key"],
)
def test_escaped_lone_surrogates_are_refused(data: bytes) -> None:
    assert refused(data) == "door.lone_surrogate"


def test_raw_surrogate_bytes_are_invalid_utf8() -> None:
    # CESU-style encoding of U+D800: not UTF-8 at all.
    assert refused(b'"\xed\xa0\x80"') == "door.utf8"


def test_surrogate_pairs_are_accepted() -> None:
    assert parse(rb'"\ud83d\ude00"') == "\U0001f600"
    assert parse('"\U0001f600"'.encode()) == "\U0001f600"
    assert parse(rb'{"\ud800\udc00":"\udbff\udfff"}') == {"\U00010000": "\U0010ffff"}


def test_line_separators_are_ordinary_characters() -> None:
    text = '{"s":"a\u2028b\u2029c\u0085d"}'
    assert parse(text.encode()) == {"s": "a\u2028b\u2029c\u0085d"}
    assert parse(rb'"\u2028"') == "\u2028"


def test_raw_control_characters_in_strings_are_refused() -> None:
    assert refused(b'"a\nb"') == "door.syntax"
    assert refused(b'"a\x00b"') == "door.syntax"
    assert parse(rb'"a\nb\u0000"') == "a\nb\x00"


# --- encoding, syntax, size --------------------------------------------------------------


def test_byte_order_mark_is_refused() -> None:
    assert refused(b'\xef\xbb\xbf{"a":1}') == "door.bom"
    assert refused(b"\xef\xbb\xbf") == "door.bom"


def test_u_feff_past_the_first_byte_is_not_a_byte_order_mark() -> None:
    # docs/protocol.md, choice 21: only the input's first three bytes can be a BOM; U+FEFF
    # in a string (raw or escaped) or a name is content, and before the first value it is
    # not JSON whitespace, so not a BOM either but a syntax error
    assert parse(b'{"a":"\xef\xbb\xbf"}') == {"a": "\ufeff"}
    assert parse(rb'{"a":"\ufeff"}') == {"a": "\ufeff"}
    assert parse(b'{"\xef\xbb\xbf":1}') == {"\ufeff": 1}
    assert refused(b' \xef\xbb\xbf{"a":1}') == "door.syntax"
    assert refused(b'{"a":1}\xef\xbb\xbf') == "door.syntax"


@pytest.mark.parametrize(
    "data",
    [b'"\xff"', b'"\xc3"', b'"\xc0\xaf"', b'"\xf4\x90\x80\x80"', b'{"a":"\x80"}'],
    ids=["ff", "truncated", "overlong", "above-10ffff", "stray-continuation"],
)
def test_invalid_utf8_is_refused(data: bytes) -> None:
    assert refused(data) == "door.utf8"


@pytest.mark.parametrize(
    "data",
    [b"", b"   ", b"{", b'{"a":1', b'{"a":1}x', b"{'a':1}", b'{"a":1,}', b"[1,]", b"\x0c1",
     b'{"a" 1}', b"true false", b"undefined", b"\xc2\xa01"],
)
def test_text_that_is_not_json(data: bytes) -> None:
    assert refused(data) == "door.syntax"


def test_json_whitespace_around_a_value_is_fine() -> None:
    assert parse(b' \t\r\n{"a" : [ 1 , 2 ] }\r\n ') == {"a": [1, 2]}


def nested_arrays(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


def nested_objects(depth: int) -> bytes:
    return b'{"a":' * (depth - 1) + b"{}" + b"}" * (depth - 1)


def test_nesting_64_is_accepted_and_65_refused() -> None:
    assert MAX_DEPTH == 64
    parse(nested_arrays(64))
    parse(nested_objects(64))
    parse(b'{"a":' * 63 + b'["deepest scalar"]' + b"}" * 63)  # the array is depth 64
    assert refused(nested_arrays(65)) == "door.too_deep"
    assert refused(nested_objects(65)) == "door.too_deep"
    assert refused(b'{"a":' * 64 + b"[]" + b"}" * 64) == "door.too_deep"


def test_very_deep_nesting_is_refused_not_crashed() -> None:
    assert refused(nested_arrays(200_000)) == "door.too_deep"


def test_shape_reads_syntax_alone_and_refuses_what_no_reader_follows() -> None:
    """:func:`shape` tells an input's shape before the door judges each value: it keeps
    what the door would refuse (repeated names, floats), but an input nested past msgspec's
    recursion is a typed ``too_deep``, and text that is not JSON a typed ``syntax``."""
    import msgspec

    assert shape(b'[{"a":1,"a":2}, 1.5]', list[msgspec.Raw]) == [
        msgspec.Raw(b'{"a":1,"a":2}'), msgspec.Raw(b"1.5")]  # fmt: skip
    assert bytes(shape(nested_arrays(200))) == nested_arrays(200)  # past the door's 64: fine
    for data, code in ((nested_arrays(5000), "door.too_deep"), (b"[1,", "door.syntax"),
                       (b'{"a":1}', "door.syntax")):  # fmt: skip
        with pytest.raises(DoorError) as caught:
            shape(data, list[msgspec.Raw])
        assert caught.value.code == code


def test_input_over_8_mib_is_refused_first() -> None:
    assert MAX_LINE_BYTES == 8 * 1024 * 1024
    big = b'"' + b"a" * (MAX_LINE_BYTES - 2) + b'"'
    assert len(big) == MAX_LINE_BYTES
    assert parse(big) == "a" * (MAX_LINE_BYTES - 2)
    # One byte more is refused, even when the extra byte would be harmless whitespace,
    # and before anything else (a BOM, invalid UTF-8) is looked at.
    assert refused(big + b" ") == "door.too_large"
    assert refused(b"\xef\xbb\xbf" + b"\xff" * MAX_LINE_BYTES) == "door.too_large"


def test_parse_takes_bytes_only() -> None:
    with pytest.raises(TypeError):
        parse('{"a":1}')  # type: ignore[arg-type]


def test_door_error_describes_code_and_location() -> None:
    with pytest.raises(DoorError) as info:
        parse(b'{"x":{"y":"\\ud800"}}')
    assert info.value.code == "door.lone_surrogate"
    assert info.value.where == "/x/y"
    assert "door.lone_surrogate" in str(info.value)


# --- JCS ---------------------------------------------------------------------------------

JCS_EXAMPLES = [
    {"b": 1, "a": [True, False, None], "c": {"z": "", "y": -5}},
    {"\U0001f600": 1, "\ue000": 2},
    {"\uffff": 1, "\U00010000": 2, "\ue000": 3, "z": 4, "\u00e9": 5},
    {"\U0001f600": {"\uff21": ["\U0010ffff", "\ue001"]}, "\ufb01": 0},
    {"s": "\x00\x01\x1f\x7f\"\\/\b\f\n\r\t\u2028\u2029\u0085\ufeff\U0001f600"},
    {"n": [0, -1, 2**53 - 1, -(2**53 - 1)]},
    ["\U0001f600", "\ue000", {"\ue000": "\U0001f600"}],
    "\ue000\U0001f600",
    {},
    [],
]


@pytest.mark.parametrize("value", JCS_EXAMPLES)
def test_jcs_equals_rfc8785(value: Any) -> None:
    assert jcs(value) == jcs_reference(value) == rfc8785.dumps(value)


def test_jcs_sorts_member_names_by_utf16_code_units() -> None:
    # Code point order would put U+E000 first; UTF-16 (D83D DE00 < E000) puts U+1F600 first.
    assert jcs({"\ue000": 1, "\U0001f600": 2}) == '{"\U0001f600":2,"\ue000":1}'.encode()
    assert jcs({"\uffff": 1, "\U00010000": 2}) == '{"\U00010000":2,"\uffff":1}'.encode()
    # Below U+E000, code point order and UTF-16 order agree.
    assert jcs({"\ud7ff": 1, "\U0001f600": 2}) == '{"\ud7ff":1,"\U0001f600":2}'.encode()


def test_jcs_is_compact_utf8_with_minimal_escapes() -> None:
    assert jcs({"b": [1, "x"], "a": None}) == b'{"a":null,"b":[1,"x"]}'
    assert jcs("\u00e9\u2028") == '"\u00e9\u2028"'.encode()
    assert jcs("\x1f\x7f") == b'"\\u001f\x7f"'
    assert jcs("/") == b'"/"'


def test_digest_is_sha256_hex_of_jcs() -> None:
    value = {"b": 2, "a": 1}
    assert digest(value) == hashlib.sha256(b'{"a":1,"b":2}').hexdigest()
    assert is_hex64(digest(value))


def test_jcs_ordered_orders_members_recursively() -> None:
    value = {"z": {"\ue000": 1, "\U0001f600": [{"b": 1, "a": 2}]}, "a": 0}
    ordered = jcs_ordered(value)
    assert list(ordered) == ["a", "z"]
    assert list(ordered["z"]) == ["\U0001f600", "\ue000"]
    assert list(ordered["z"]["\U0001f600"][0]) == ["a", "b"]
    assert ordered == value


def test_lower_ascii_touches_only_a_to_z() -> None:
    assert lower_ascii("10.1000/ABC-\u00c9\u0130Z") == "10.1000/abc-\u00c9\u0130z"


# --- base64 ------------------------------------------------------------------------------


@pytest.mark.parametrize("raw", [b"", b"f", b"fo", b"foo", b"\xfb\xff\xfe", bytes(range(256))])
def test_decode_b64_round_trip(raw: bytes) -> None:
    assert decode_b64(base64.b64encode(raw).decode()) == raw


@pytest.mark.parametrize(
    "text",
    [
        "Zm9v ",
        " Zm9v",
        "Zm\n9v",
        "Zm9v\n",
        "Zg",  # missing padding
        "Zg=",
        "Zm8",
        "Zg===",
        "-_-_",  # URL-safe alphabet
        "+_8=",
        "Zh==",  # non-canonical trailing bits (canonical: Zg==)
        "Zm9=",  # canonical: Zm8=
        "=Zg=",
        "Zg==Zg==",
        "Zm9v\u00e9",
    ],
)
def test_decode_b64_refuses_non_canonical_forms(text: str) -> None:
    assert decode_b64(text) is None


def test_decode_b64_refuses_non_strings() -> None:
    assert decode_b64(None) is None
    assert decode_b64(b"Zm9v") is None
    assert decode_b64(12) is None


def test_decode_b64_accepts_the_standard_alphabet() -> None:
    assert decode_b64("+/8=") == b"\xfb\xff"


def test_value_text_writes_what_the_door_then_judges() -> None:
    """A Python value (a caller's dict) is written as ASCII JSON for the door to read: what
    JSON cannot write is refused here, each with the door's code."""
    from pithlog.protocol.canonical import value_text

    assert parse(value_text({"a": ["\u00e9", 1, None]})) == {"a": ["\u00e9", 1, None]}
    held: list[object] = []
    held.append(held)
    deep: object = []
    for _ in range(100_000):
        deep = [deep]
    for value, code in ((float("nan"), "door.number_form"), (held, "door.syntax"),
                        ({b"k": 1}, "door.syntax"), (deep, "door.too_deep")):  # fmt: skip
        with pytest.raises(DoorError) as caught:
            value_text(value)
        assert caught.value.code == code
    assert refused(value_text("\ud800")) == "door.lone_surrogate"  # written, then refused


# --- input dense with containers (more brackets than the depth limit) ---------------------

DENSE = b'"pad":[' + b",".join([b"{}", b"[]", b'{"k":[0]}'] * 40) + b"]"


def test_dense_but_shallow_input_is_settled_by_the_fast_door() -> None:
    data = b"{" + DENSE + b"}"
    assert data.count(b"[") + data.count(b"{") > MAX_DEPTH
    fast = decode_fast(data)
    assert fast is not None
    assert fast[1] == data


@pytest.mark.parametrize("max_depth", [MAX_DEPTH, MAX_DEPTH + 3])
def test_dense_input_nested_to_the_limit_and_one_past(max_depth: int) -> None:
    at_limit = b"{" + DENSE + b',"deep":' + nested_arrays(max_depth - 1) + b"}"
    assert parse(at_limit, max_depth=max_depth)["deep"]
    past = b"{" + DENSE + b',"deep":' + nested_arrays(max_depth) + b"}"
    with pytest.raises(DoorError) as info:
        parse(past, max_depth=max_depth)
    assert info.value.code == "door.too_deep"
    with pytest.raises(DoorError) as info:
        _parse_exact(past, max_depth)  # the exact door, on its own
    assert info.value.code == "door.too_deep"


@pytest.mark.parametrize(
    "string",
    [
        b'"\\\\"',  # an escaped backslash, then the closing quote
        b'"\\\\\\\\"',
        b'"\\"[[[[\\\\"',  # an escaped quote, brackets, an escaped backslash
        b'"\\\\\\"]]]]"',  # an escaped backslash, then an escaped quote
        b'"\\"\\"\\""',
        b'"\\u005c"',  # a backslash written as \u005c
    ],
)
def test_strings_that_end_where_a_careless_scan_would_not(string: bytes) -> None:
    """Brackets after these strings are structure; a scan that thought the string went on
    would miss them and find the text shallower than it is."""
    deep = b"[" + DENSE[6:] + b"," + string + b"," + nested_arrays(MAX_DEPTH - 1) + b"]"
    assert len(json.loads(deep)) == 3
    parse(deep)
    too_deep = b"[" + DENSE[6:] + b"," + string + b"," + nested_arrays(MAX_DEPTH) + b"]"
    assert refused(too_deep) == "door.too_deep"


def test_brackets_in_strings_do_not_count_as_nesting() -> None:
    strings = b",".join([b'"[[[[{{{{"', b'"\\"[{\\"[{"', b'"]]]]}}}}"', b'"\\\\[[\\\\"'] * 30)
    data = b'{"a":[' + strings + b'],"b":' + nested_objects(MAX_DEPTH - 1) + b"}"
    fast = decode_fast(data)
    assert fast is not None
    assert fast[1] == jcs_reference(json.loads(data))
    assert refused(data.replace(b'"b":', b'"b":[', 1)[:-1] + b"]}") == "door.too_deep"


@pytest.mark.parametrize(
    ("hidden", "code"),
    [
        (b'{"a":1,"a":2}', "door.duplicate_member"),
        (b'"\\ud800"', "door.lone_surrogate"),
        (b'{"\\udfff":0}', "door.lone_surrogate"),
        (b'"\\ud83d\\\\ude00"', "door.lone_surrogate"),  # the low half is text, not an escape
        (b'"\\ud83d\\ude00"', None),
        (b'"\\\\ud800"', None),  # a backslash, then text
        (b"-0", "door.number_form"),
        (b"9007199254740992", "door.number_range"),
        (b"1.5", "door.number_form"),
        (b'"a\\u003ab"', None),  # an escaped colon: the exact door decides
    ],
)
def test_dense_input_keeps_every_refusal(hidden: bytes, code: str | None) -> None:
    data = b"{" + DENSE + b',"z":[' + hidden + b"]}"
    for parser in (parse, parse_exact):
        if code is None:
            parser(data)
            continue
        with pytest.raises(DoorError) as info:
            parser(data)
        assert info.value.code == code


@pytest.mark.parametrize("members", [SORT_SAFE_MEMBERS, SORT_SAFE_MEMBERS + 1])
def test_dense_input_with_a_wide_object_is_written_in_jcs_order(members: int) -> None:
    # Descending, and two names whose UTF-16 order (spec 1, RFC 8785 3.2.3) is not their
    # code point order: U+1F600 (D83D DE00) before U+FFFF.
    wide = {f"m{i:04d}": i for i in range(members - 2, 0, -1)}
    wide.update({"\uffff": 0, "\U0001f600": -1})
    assert len(wide) == members
    data = json.dumps({"pad": [{"k": 0}] * 300, "w": wide}).encode()
    assert decode(data)[1] == jcs_reference(json.loads(data))
