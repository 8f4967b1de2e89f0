"""The fast door and the exact door give the same verdict and the same value on any input.

Each generated value is written in every form producers write (JCS; compact in another
member order; ``\\uXXXX``-escaped; spaced; ``\\/``-escaped; indented), and then again with
one defect hidden in it at a random place: a repeated member name, ``-0``, an integer
beyond 2^53 - 1, a float, a lone surrogate. A few harmless look-alikes are hidden too (a
long run of digits in a string, a colon or minus sign written as an escape), since they
are what the fast door's byte counts must not be fooled by, nor refuse.
"""

from __future__ import annotations

import json
import random
import re
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from pithlog.errors import DoorError
from pithlog.protocol.canonical import decode, decode_fast, jcs, jcs_reference, parse, parse_exact

_ints = st.integers(min_value=-(2**53) - 2, max_value=2**53 + 2)
_text = st.text(
    st.characters(codec="utf-8", exclude_categories=())
    | st.sampled_from("\ue000\uffff😀\u2028\x00\"\\/:-"),
    max_size=12,
)
_values = st.recursive(
    st.none() | st.booleans() | _ints | _text | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_text, inner, max_size=4),
    max_leaves=20,
)
_plain_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53) + 1, 2**53 - 1) | _text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_text, inner, max_size=4),
    max_leaves=20,
)
"""Values the door accepts (no floats, no integer out of range), so that what is hidden in
them decides the verdict."""

FORMS = ("jcs", "sorted", "producer", "ascii", "spaced", "slash", "indented")


def _verdict(parser, data: bytes):  # type: ignore[no-untyped-def]
    try:
        return ("ok", jcs_reference(parser(data)))
    except DoorError as exc:
        return ("refused", exc.code)


def _shuffled(value: Any, rnd: random.Random) -> Any:
    """``value`` with the members of every object in another order (a producer's)."""
    if isinstance(value, dict):
        items = list(value.items())
        rnd.shuffle(items)
        return {k: _shuffled(v, rnd) for k, v in items}
    if isinstance(value, list):
        return [_shuffled(v, rnd) for v in value]
    return value


def write(value: Any, form: str, rnd: random.Random) -> str:
    """``value`` in ``form`` (one of :data:`FORMS`), as text (which may hold surrogates)."""
    if form == "jcs":
        try:
            return jcs_reference(value).decode("utf-8", "surrogatepass")
        except (TypeError, ValueError, OverflowError):  # a float or a huge integer
            form = "sorted"
    if form == "sorted":
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    value = _shuffled(value, rnd)
    if form == "ascii":
        return json.dumps(value, separators=(",", ":"))
    if form == "spaced":
        return json.dumps(value, ensure_ascii=False)
    if form == "indented":
        return json.dumps(value, indent=1)
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return text.replace("/", "\\/") if form == "slash" else text


def _encode(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


def _texts(value: object) -> list[bytes]:
    """Encodings of one value in every form a sender might use."""
    rnd = random.Random(0)
    return [_encode(write(value, form, rnd)) for form in FORMS]


# --- hiding a defect ----------------------------------------------------------------------

_MARK = "pithlog-hidden-8f3a"
"""A member name and a string value that generated text does not hold: the place where a
defect is put, by replacing the mark's JSON text in the written form."""

HIDDEN = {
    "duplicate": None,  # the mark's name becomes the name of a sibling member
    "minus_zero": "-0",
    "big_integer": "9007199254740992",
    "big_negative": "-12345678901234567890",
    "fraction": "1.5",
    "exponent": "1e2",
    "zero_fraction": "0.0",
    "escaped_lone_surrogate": '"a\\ud800"',
    "raw_lone_surrogate": '"\udfff"',
    "reversed_pair": '"\\udc00\\ud800"',
    # the fast door counts colons and minus signs: an escaped one beside the defect must
    # not make the counts come out even
    "duplicate+escaped_colon": None,
    "minus_zero+escaped_minus": "-0",
}
_COMPENSATE = {"escaped_colon": ("\\u003a", "\\u003A"), "escaped_minus": ("\\u002d", "\\u002D")}
HARMLESS = {
    "digits_in_string": '"12345678901234567890"',
    "digits_then_comma_in_string": '"12345678901234567,"',
    "escaped_colon": '"a\\u003Ab"',
    "escaped_minus": '"\\u002d1"',
    "max_integer": "-9007199254740991",
    "zero": "0",
}


def _with_mark(value: Any, rnd: random.Random) -> tuple[Any, str]:
    """``value`` (any JSON) with the mark as a member of a random object, or of an object
    put in a random array, or wrapping it; and the name of a sibling member of the mark."""
    places: list[Any] = []
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, (dict, list)):
            places.append(node)
            stack.extend(node.values() if isinstance(node, dict) else node)
    if not places:
        return {"v": value, _MARK: _MARK}, "v"
    place = rnd.choice(places)
    if isinstance(place, list):
        place.insert(rnd.randrange(len(place) + 1), {"s": 0, _MARK: _MARK})
        return value, "s"
    if not place:
        place["s"] = 0
    sibling = rnd.choice(list(place))
    place[_MARK] = _MARK
    return value, sibling


def _json_name(name: str, form: str) -> str:
    text = json.dumps(name, ensure_ascii=form in ("ascii", "indented"))
    return text.replace("/", "\\/") if form == "slash" else text


def hide(value: Any, defect: str, form: str, rnd: random.Random) -> bytes:
    """``value`` written in ``form`` with ``defect`` (a key of HIDDEN or HARMLESS) in it."""
    defect, _, extra = defect.partition("+")
    marked, sibling = _with_mark(value, rnd)
    text = write(marked, form, rnd)
    mark = json.dumps(_MARK)
    assert text.count(mark) == 2, "the mark was not written as it stands"
    name_at = text.index(mark)  # the member name comes first in every form
    value_at = text.index(mark, name_at + 1)
    replacement = {**HIDDEN, **HARMLESS}[defect if not extra else f"{defect}+{extra}"]
    if defect == "duplicate":
        text = text[:name_at] + _json_name(sibling, form) + text[name_at + len(mark) :]
    else:
        assert replacement is not None
        text = text[:value_at] + replacement + text[value_at + len(mark) :]
    if extra:
        text = f'[{text},"{rnd.choice(_COMPENSATE[extra])}"]'
    return _encode(text)


# --- the properties -----------------------------------------------------------------------


@settings(max_examples=400, deadline=None)
@given(_values)
def test_fast_and_exact_door_agree(value: object) -> None:
    for data in _texts(value):
        assert _verdict(parse, data) == _verdict(parse_exact, data)


@settings(max_examples=300, deadline=None)
@given(_plain_values, st.sampled_from(sorted(HIDDEN)), st.sampled_from(FORMS), st.randoms())
def test_defect_hidden_in_any_form_is_refused_by_both(
    value: object, defect: str, form: str, rnd: random.Random
) -> None:
    data = hide(value, defect, form, rnd)
    fast, exact = _verdict(parse, data), _verdict(parse_exact, data)
    assert fast == exact
    assert exact[0] == "refused", data


@settings(max_examples=200, deadline=None)
@given(_plain_values, st.sampled_from(sorted(HARMLESS)), st.sampled_from(FORMS), st.randoms())
def test_harmless_look_alikes_are_accepted_by_both(
    value: object, defect: str, form: str, rnd: random.Random
) -> None:
    data = hide(value, defect, form, rnd)
    fast = _verdict(parse, data)
    assert fast == _verdict(parse_exact, data)
    assert fast[0] == "ok", fast


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


@settings(max_examples=200, deadline=None)
@given(_plain_values, st.sampled_from(FORMS), st.randoms())
def test_the_fast_door_proves_every_common_form(
    value: object, form: str, rnd: random.Random
) -> None:
    """Valid v1 JSON in any of the forms producers write is settled without the exact door,
    unless it holds what the fast door does not look into: text that looks like an escaped
    colon or minus sign, a string with a run of 16 digits. (Generated values nest far less
    than 64 deep, however many brackets they hold.)"""
    text = write(value, form, rnd)
    if re.search(r"\\u00(3a|2d)", text, re.IGNORECASE) or _digits_in_text(value):
        return
    fast = decode_fast(_encode(text))
    assert fast is not None, text
    assert fast[1] == jcs_reference(value)


# --- colons and minus signs written as escapes --------------------------------------------

_escapable = st.text(st.sampled_from(':-\\u003aAdD2"') | st.characters(codec="utf-8"),
                     max_size=10)
"""Text with what fools a count of escaped colons and minus signs: the characters, and the
text ``\\u003a`` itself (written ``\\\\u003a``, an escaped backslash before it)."""
_MINUS_ZERO = object()
_escapable_docs = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53) + 1, 2**53 - 1) | _escapable
    | st.just(_MINUS_ZERO),
    lambda inner: st.lists(inner, max_size=4)
    | st.lists(st.tuples(_escapable | st.sampled_from(["a", "a"]), inner), max_size=4).map(tuple),
    max_leaves=20,
)
"""JSON documents as trees where an object is a tuple of members, so that a name may
repeat; ``_MINUS_ZERO`` is written ``-0``."""


def _escaping(doc: Any, rnd: random.Random, spaced: bool) -> str:
    """``doc`` as compact or spaced JSON with each colon and minus sign in its strings
    written as an escape, in either case."""
    if doc is _MINUS_ZERO:
        return "-0"
    if isinstance(doc, str):
        text = json.dumps(doc, ensure_ascii=rnd.random() < 0.5)
        return "".join(rnd.choice({":": ("\\u003a", "\\u003A", ":"),
                                   "-": ("\\u002d", "\\u002D", "-")}.get(c, (c,)))
                       for c in text)  # fmt: skip
    sep = ", " if spaced else ","
    if isinstance(doc, list):
        return "[" + sep.join(_escaping(v, rnd, spaced) for v in doc) + "]"
    if isinstance(doc, tuple):
        colon = ": " if spaced else ":"
        return "{" + sep.join(_escaping(k, rnd, spaced) + colon + _escaping(v, rnd, spaced)
                              for k, v in doc) + "}"  # fmt: skip
    return json.dumps(doc)


@settings(max_examples=400, deadline=None)
@given(_escapable_docs, st.booleans(), st.randoms())
def test_escaped_colons_and_minus_signs_are_counted_not_fooled(
    doc: Any, spaced: bool, rnd: random.Random
) -> None:
    """Repeated names and -0 beside colons and minus signs written as escapes get the exact
    door's verdict from the fast door; without them, the fast door proves the input itself
    (unless the text ``\\u003a`` or ``\\u002d`` follows an escaped backslash, which it
    counts as an escape and leaves to the exact door)."""
    data = _escaping(doc, rnd, spaced).encode("utf-8")
    verdict = _verdict(parse, data)
    assert verdict == _verdict(parse_exact, data), data
    fast = decode_fast(data)
    if verdict[0] == "refused":
        assert fast is None, data
    elif not re.search(rb"\\\\u00(3a|2d)", data, re.IGNORECASE):
        assert fast is not None, data
        assert fast[1] == verdict[1]


# --- integers of 16 digits and more -------------------------------------------------------

_around_the_bound = (
    st.integers(-(2**53) - 1000, -(2**53) + 1000)
    | st.integers(2**53 - 1000, 2**53 + 1000)
    | st.integers(10**15, 10**17).map(lambda n: n * (-1) ** n)
    | st.sampled_from([9 * 10**15, 9007199254740991, 9007199254740992, 9999999999999999])
)
_digit_text = st.text(st.sampled_from('0123456789 ,]}-.:"\\x'), max_size=24)
"""Text with runs of digits ending where a number may end, and escaped quotes beside them:
what a scan of the bytes for long integers could take for one, or miss one beside."""
_long_integer_values = st.recursive(
    _around_the_bound | st.integers(-99, 99) | _digit_text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_digit_text, inner, max_size=4),
    max_leaves=12,
)


def _digits_in_text(value: object) -> bool:
    """Some string of ``value`` (a member name too) holds a run of 16 digits."""
    if isinstance(value, dict):
        return any(map(_digits_in_text, [*value, *value.values()]))
    if isinstance(value, list):
        return any(map(_digits_in_text, value))
    return isinstance(value, str) and re.search("[0-9]{16}", value) is not None


@settings(max_examples=400, deadline=None)
@given(_long_integer_values, st.sampled_from(FORMS), st.randoms())
def test_integers_of_16_digits_and_more_get_the_exact_verdict(
    value: object, form: str, rnd: random.Random
) -> None:
    """Integers near 2^53 - 1 and past it, beside strings of digits: both doors give the
    same verdict, and the fast door proves valid input itself, integers of 16 digits
    within the bound included, unless a string holds a run of 16 digits (which it may take
    for an integer, and leave to the exact door)."""
    data = _encode(write(value, form, rnd))
    verdict = _verdict(parse, data)
    assert verdict == _verdict(parse_exact, data), data
    fast = decode_fast(data)
    if verdict[0] == "refused":
        assert fast is None, data
    elif not _digits_in_text(value):
        assert fast is not None, data
        assert fast[1] == verdict[1]
