"""Input dense with containers: the byte measures of depth and width that let both doors
skip a walk of the value (:mod:`pithlog.protocol.nesting`) agree with the value, and no
rule of spec section 1 is lost when they are used.

The text generated here holds what a scan of the bytes outside strings could be fooled by:
brackets, braces, colons and quotes inside strings, escaped quotes and escaped backslashes
(``\\\\"`` ends a string, ``\\"`` does not).
"""

from __future__ import annotations

import random
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from pithlog.errors import DoorError
from pithlog.protocol import canonical
from pithlog.protocol.canonical import MAX_DEPTH, decode, decode_fast, jcs_reference, parse
from pithlog.protocol.nesting import nesting_depth, widest_at_most
from tests.properties.test_door_differential import FORMS, HIDDEN, hide, write

_tricky = st.text(st.sampled_from('[]{}:",\\ aé😀') | st.characters(exclude_categories=["Cs"]),
                  max_size=10)
"""Text with what fools a careless scan (surrogates left out: their rule is not what this
file tests, and they would decide the verdict)."""
_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53) + 1, 2**53 - 1) | _tricky,
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(_tricky, inner, max_size=6),
    max_leaves=40,
)


def depth_of(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max(map(depth_of, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(depth_of, value), default=0)
    return 0


def widest_of(value: Any) -> int:
    if isinstance(value, dict):
        return max([len(value), *map(widest_of, value.values())])
    if isinstance(value, list):
        return max([0, *map(widest_of, value)])
    return 0


def _dense(value: Any, rnd: random.Random) -> Any:
    """``value`` beside more small containers than the depth limit, so that a count of
    brackets cannot settle its depth."""
    pad = [rnd.choice([{}, [], {"k": 0}, [[0]]]) for _ in range(MAX_DEPTH + 10)]
    return {"pad": pad, "v": value}


@settings(max_examples=300, deadline=None)
@given(_values, st.randoms())
def test_depth_and_width_read_from_bytes_are_those_of_the_value(
    value: Any, rnd: random.Random
) -> None:
    for form in FORMS:
        data = write(value, form, rnd).encode("utf-8", "surrogatepass")
        assert nesting_depth(data) == depth_of(value), data
        widest = widest_of(value)
        for members in (0, 1, 2, 3, 5):
            assert widest_at_most(data, members) in (None, widest <= members), data


def _verdict(data: bytes, max_depth: int = MAX_DEPTH) -> tuple[str, Any]:
    try:
        return ("ok", jcs_reference(parse(data, max_depth=max_depth)))
    except DoorError as exc:
        return ("refused", exc.code)


def _exact_verdict(data: bytes, max_depth: int = MAX_DEPTH) -> tuple[str, Any]:
    try:
        value = canonical._parse_exact(data, max_depth)
    except DoorError as exc:
        return ("refused", exc.code)
    # What the exact door accepts, the walk it may skip accepts too.
    canonical._check_tree(value, max_depth)
    return ("ok", jcs_reference(value))


@settings(max_examples=200, deadline=None)
@given(_values, st.sampled_from(FORMS), st.randoms())
def test_dense_input_gets_the_same_verdict_from_both_doors(
    value: Any, form: str, rnd: random.Random
) -> None:
    data = write(_dense(value, rnd), form, rnd).encode("utf-8", "surrogatepass")
    verdict = _verdict(data)
    assert verdict == _exact_verdict(data)
    if verdict[0] == "ok":
        fast = decode_fast(data)
        encoded = decode(data)[1]
        assert encoded == verdict[1]
        assert fast is None or fast[1] == verdict[1]


@settings(max_examples=300, deadline=None)
@given(_values, st.sampled_from(sorted(HIDDEN)), st.sampled_from(FORMS), st.randoms())
def test_defect_hidden_in_dense_input_is_refused_by_both(
    value: Any, defect: str, form: str, rnd: random.Random
) -> None:
    data = hide(_dense(value, rnd), defect, form, rnd)
    verdict = _verdict(data)
    assert verdict == _exact_verdict(data)
    assert verdict[0] == "refused", data


@settings(max_examples=100, deadline=None)
@given(_values, st.sampled_from(FORMS), st.integers(0, 4), st.randoms())
def test_depth_at_the_limit_and_one_past_in_dense_input(
    value: Any, form: str, extra: int, rnd: random.Random
) -> None:
    max_depth = MAX_DEPTH + extra  # state documents and evidence read with wider limits
    chain: Any = [] if rnd.random() < 0.5 else {}
    for _ in range(max_depth - 3):  # {"v": [value, chain]} holds it at depth 3
        chain = [chain] if rnd.random() < 0.5 else {"c": chain}
    doc = {"pad": [{}, []] * 40, "v": [value, chain]}
    data = write(doc, form, rnd).encode("utf-8", "surrogatepass")
    deep = depth_of(doc) > max_depth
    assert _verdict(data, max_depth) == _exact_verdict(data, max_depth)
    assert _verdict(data, max_depth)[0] == ("refused" if deep else "ok")
    data = write({"w": doc}, form, rnd).encode("utf-8", "surrogatepass")
    assert _verdict(data, max_depth) == ("refused", "door.too_deep")
    assert _exact_verdict(data, max_depth) == ("refused", "door.too_deep")

