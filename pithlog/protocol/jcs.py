"""The canonical form of v1 JSON values (spec section 1): :func:`jcs`, RFC 8785 canonical
JSON, and :func:`digest`, its lowercase hex SHA-256, from which every ``event_id`` and
``state_sha256`` is made. The door (:mod:`pithlog.protocol.canonical`) admits the values
these encode, and re-exports these names."""

from __future__ import annotations

import hashlib
from typing import Any, TypeAlias

import msgspec
import rfc8785

JSON: TypeAlias = Any
"""A v1 JSON value: dict, list, str, int (|n| <= 2^53 - 1), bool or None. Never a float."""

# Byte searches (memchr), not regular expressions: this runs on every encoding.
_NON_BMP_LEADS = (b"\xf0", b"\xf1", b"\xf2", b"\xf3", b"\xf4")


_SORTED = msgspec.json.Encoder(order="sorted")
_PLAIN = msgspec.json.Encoder()

SORT_SAFE_MEMBERS = 256
"""The most members an object may have for msgspec to sort it. msgspec sorts member names
with a quicksort that recurses on one side of each partition and has quadratic worst cases
on ordinary-looking orders (one large name first, the rest ascending): an object of about
60,000 members overflows the C stack, a segfault, and 4,096 already cost tens of
milliseconds. A value with a wider object is ordered by Python's sort instead."""


def jcs(value: JSON, members: int | None = None) -> bytes:
    """RFC 8785 canonical JSON of a v1 value.

    msgspec with sorted keys writes exactly JCS for v1 values (integers only, the same string
    escapes), except for one rule: it sorts member names by code point, JCS by UTF-16 code
    unit. The two orders differ only between a character above U+FFFF and one in
    U+E000..U+FFFF, so when the output holds both kinds of UTF-8 lead byte and some object
    has such member names, we fall back to the reference encoder. ``tests/properties``
    proves the equality on generated values. Values with an object wider than
    :data:`SORT_SAFE_MEMBERS` are put in JCS order by Python and written as they stand.

    ``members``, when the caller knows one, is an upper bound on the members of all objects
    of ``value`` together; it spares the encoding that otherwise counts them (half the cost
    of a call on a typical event body).
    """
    if members is None:
        members = _PLAIN.encode(value).count(b":")
    return jcs_bounded(value, members)


def jcs_bounded(value: JSON, members: int) -> bytes:
    """:func:`jcs`, given an upper bound on the members of any one object of ``value`` (such
    as the colons of any JSON text of it: each member has one)."""
    if members > SORT_SAFE_MEMBERS and _widest(value) > SORT_SAFE_MEMBERS:
        return _PLAIN.encode(_ordered(value))
    out = _SORTED.encode(value)
    if (
        not out.isascii()
        and (b"\xee" in out or b"\xef" in out)  # lead bytes of U+E000..U+FFFF
        and any(lead in out for lead in _NON_BMP_LEADS)
        and _names_may_disorder(value)
    ):
        return bytes(rfc8785.dumps(value))
    return out


def _widest(value: JSON) -> int:
    """The most members of any one object in ``value``."""
    most = 0
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            most = max(most, len(node))
            stack.extend(c for c in node.values() if isinstance(c, (dict, list)))
        elif isinstance(node, list):
            stack.extend(c for c in node if isinstance(c, (dict, list)))
    return most


def _names_may_disorder(value: JSON) -> bool:
    """Some object has a member name with a character at or above U+E000: only then can
    code point order and UTF-16 order of its names differ."""
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            for name, child in node.items():
                if not name.isascii() and max(name) >= "\ue000":
                    return True
                if isinstance(child, (dict, list)):
                    stack.append(child)
        elif isinstance(node, list):
            stack.extend(child for child in node if isinstance(child, (dict, list)))
    return False


def jcs_reference(value: JSON) -> bytes:
    """The reference encoder (the ``rfc8785`` package), for differential tests."""
    return bytes(rfc8785.dumps(value))


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def digest(value: JSON, members: int | None = None) -> str:
    """``digest(x)`` of the spec: lowercase hex SHA-256 of JCS(x) (``members``: see
    :func:`jcs`)."""
    return hashlib.sha256(jcs(value, members)).hexdigest()


def utf16_key(name: str) -> bytes:
    """Sort key that orders member names as JCS does (by UTF-16 code units)."""
    return name.encode("utf-16-be", "surrogatepass")


def jcs_ordered(obj: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``obj`` whose members (recursively) are in JCS member order."""
    return {k: _ordered(obj[k]) for k in sorted(obj, key=utf16_key)}


def _ordered(value: Any) -> Any:
    if isinstance(value, dict):
        return jcs_ordered(value)
    if isinstance(value, list):
        return [_ordered(v) for v in value]
    return value
