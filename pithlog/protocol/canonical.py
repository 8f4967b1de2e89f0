"""The door: untrusted bytes in, v1 JSON values out; and their canonical form (spec section 1).

:func:`parse` is the one entry point for untrusted bytes. It refuses, with one
:class:`~pithlog.errors.DoorError` naming what and where:

- a byte-order mark, invalid UTF-8, text that is not JSON (RFC 8259);
- a repeated member name in any object;
- a number that is not an integer ``-?(0|[1-9][0-9]*)``, ``-0``, or beyond 2^53 - 1;
- a string holding a lone surrogate (escaped or not);
- nesting deeper than 64, and (for envelopes) a JCS encoding over 1 MiB.

:func:`jcs` is RFC 8785 canonical JSON, :func:`digest` its lowercase hex SHA-256.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any, NoReturn

import msgspec

from pithlog.errors import DoorError, shown
from pithlog.protocol.jcs import JSON as JSON
from pithlog.protocol.jcs import SORT_SAFE_MEMBERS as SORT_SAFE_MEMBERS
from pithlog.protocol.jcs import digest as digest
from pithlog.protocol.jcs import jcs as jcs
from pithlog.protocol.jcs import jcs_bounded
from pithlog.protocol.jcs import jcs_ordered as jcs_ordered
from pithlog.protocol.jcs import jcs_reference as jcs_reference
from pithlog.protocol.jcs import sha256_hex as sha256_hex
from pithlog.protocol.jcs import utf16_key as utf16_key
from pithlog.protocol.nesting import nesting_depth, widest_at_most

MAX_SAFE_INTEGER = 2**53 - 1
MAX_ENVELOPE_BYTES = 1_048_576
"""Spec 1: the JCS encoding of a whole envelope is at most 1 MiB."""
MAX_DEPTH = 64
"""Spec 1: the envelope object is depth 1; each object or array inside adds one."""
MAX_LINE_BYTES = 8_388_608
"""Spec 1: a raw line longer than this is refused before anything else is looked at."""

_BOM = b"\xef\xbb\xbf"
_INT_FORM = re.compile(r"-?(?:0|[1-9][0-9]*)")


def _refuse(detail: str, message: str, where: str | None = None) -> NoReturn:
    raise DoorError(detail, message, where)


def _on_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # json's default dict construction silently keeps the last of repeated names: the classic
    # way to make a signer and a verifier read different events (spec 1).
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for name, _ in pairs:
            if name in seen:
                _refuse("duplicate_member", f"object repeats the member name {name!r}; keep one")
            seen.add(name)
    return obj


def _on_int(text: str) -> int:
    if not _INT_FORM.fullmatch(text) or text == "-0":
        _refuse("number_form",
                f"number {text!r} is not a v1 integer; write -?(0|[1-9][0-9]*), not -0")
    if len(text) > 17:
        # 2^53 - 1 has 16 digits; checking the length first also keeps int() from raising
        # ValueError on inputs beyond Python's digit limit (4300 digits).
        _refuse("number_range", f"integer of {len(text)} characters is beyond 2^53 - 1; "
                "send it as a string")
    value = int(text)
    if abs(value) > MAX_SAFE_INTEGER:
        _refuse("number_range", f"integer {text} is beyond 2^53 - 1; send it as a string")
    return value


def _on_float(text: str) -> NoReturn:
    _refuse("number_form", f"number {text!r} has a fraction or exponent; write an integer")


def _on_constant(text: str) -> NoReturn:
    _refuse("syntax", f"{text} is not JSON; write null, or a string")


_DECODER = json.JSONDecoder(
    object_pairs_hook=_on_pairs,
    parse_int=_on_int,
    parse_float=_on_float,
    parse_constant=_on_constant,
    strict=True,
)

_SURROGATE = re.compile("[\ud800-\udfff]")
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
"""The escape of a surrogate, lone or in a pair (``\\\\`` before it would make it text,
which is only a search too many)."""
_LONE = "string holds a lone surrogate; send Unicode scalar values only"
_LONE_NAME = "member name holds a lone surrogate; send Unicode scalar values only"


def _too_deep(max_depth: int) -> str:
    return f"nesting deeper than the {max_depth} levels allowed"


def _check_tree(value: Any, max_depth: int) -> None:
    """Depth and lone-surrogate rules, which the JSON scanner does not know (spec 1).

    Depth first, one iterator per open container: memory is bounded by the depth, not by
    the number of nodes (a line of millions of ``[]`` must not cost a tuple and a path
    string per node), and the path is only built for the error.
    """
    if not isinstance(value, (dict, list)):
        if isinstance(value, str) and not value.isascii() and _SURROGATE.search(value):
            _refuse("lone_surrogate", _LONE, "/")
        return
    stack: list[Iterator[tuple[Any, Any]]] = []
    names: list[str | int] = []  # the path to the container whose iterator is on top
    node: Any = value
    while True:
        if node is not None:  # entering a container, at depth len(stack) + 1
            if len(stack) >= max_depth:
                _refuse("too_deep", _too_deep(max_depth), _path(names))
            if isinstance(node, dict):
                for name in node:
                    if not name.isascii() and _SURROGATE.search(name):
                        _refuse("lone_surrogate", _LONE_NAME,
                                _path(names))  # fmt: skip
                stack.append(iter(node.items()))
            else:
                stack.append(enumerate(node))
            node = None
        for key, child in stack[-1]:
            if isinstance(child, str):
                if not child.isascii() and _SURROGATE.search(child):
                    _refuse("lone_surrogate", _LONE,
                            _path([*names, key]))  # fmt: skip
            elif isinstance(child, (dict, list)):
                names.append(key)
                node = child
                break
        else:
            stack.pop()
            if not stack:
                return
            names.pop()


def _path(names: list[str | int]) -> str:
    """RFC 6901 JSON Pointer of a place in the value, for error locations."""
    if not names:
        return "/"
    return "".join(f"/{_pointer(n)}" if isinstance(n, str) else f"/{n}" for n in names)


def _pointer(name: str) -> str:
    """RFC 6901 escaping of one JSON Pointer segment, for error locations.

    A character that is not printable (a control such as LF or ESC, U+2028, ...) is shown
    as ``\\uXXXX``: a member name chosen by whoever sent the input must neither break the
    one-line error into several nor write terminal escapes.
    """
    return shown(name.replace("~", "~0").replace("/", "~1"))


def _no_float(text: str) -> NoReturn:
    raise ValueError("not an integer")


# The fast door, for JSON in any form: compact or spaced, members in any order, escaped or
# not. msgspec's decoder is strict where v1 is (RFC 8259 syntax, UTF-8, no lone surrogates,
# no NaN; floats are refused by the hook) but keeps the last of repeated member names, reads
# -0 as 0 and knows neither the integer range nor the depth limit. Byte scans settle those
# without a walk of the value:
#
# - integers: no run of over 16 digits, nor of 16 above 2^53 - 1, that ends where a
#   number may end (``,``, ``]``, ``}``, whitespace, the end); runs that end otherwise are
#   inside strings (identifiers, DOIs);
# - depth: at most ``max_depth`` brackets in all (brackets in strings only add), or else
#   the depth measured from the bytes outside strings (:func:`nesting_depth`, right for
#   any text msgspec accepts, so for any that reaches a verdict here);
# - repeated names and -0, by length: JCS writes a value at its shortest (each character
#   in its shortest JSON form, each integer in its only form, no whitespace; member order
#   does not change the length), so the value's JCS is never longer than the input, and
#   exactly as long only if the input lost nothing to a repeated name (a dropped member
#   takes at least ``"":0,`` with it) and wrote no -0 (it re-encodes as 0). One comparison
#   settles JCS input and compact JSON in any member order (the seeds' form);
# - repeated names and -0, by counts, for the other forms (spaced, escaped): the colons of
#   the input are its members plus the colons in its strings, those of the value's JCS the
#   value's members plus the colons in the value's strings; a dropped member takes its
#   colon (and any in what it held) with it, so equal counts prove no name repeats. The
#   input's count adds each text \u003a (or \u003A), a colon in JCS; after an escaped
#   backslash (``\\u003a``) that over-counts, which only makes the counts differ. Likewise
#   minus signs (\u002d): a negative integer keeps its sign in JCS, -0 loses it.
#
# What is not proven so (a digit run beyond 2^53 - 1, nesting too deep, anything msgspec
# refuses, a count that differs) goes through the exact, slower door, which gives the
# verdict.
_FAST = msgspec.json.Decoder(float_hook=_no_float)
# Digits to "0", the bytes that may end a number (``,]}`` and whitespace) to "t", all else
# to ".": then a run of digits that ends where a number may end is a substring search, many
# times faster than a regular expression, and hex in strings does not end so.
_NUMBER_MASK = bytes(
    0x30 if 0x30 <= i <= 0x39 else 0x74 if i in b",]} \t\r\n" else 0x2E for i in range(256)
)
_SIXTEEN_DIGITS_END = b"0" * 16 + b"t"
_ABOVE_MAX_SAFE = re.compile(  # above 9007199254740991 at the first digit that differs
    rb"(?:9[1-9]\d{14}|90[1-9]\d{13}|900[89]\d{12}|9007[2-9]\d{11}|9007199[3-9]\d{8}"
    rb"|90071992[6-9]\d{7}|900719925[5-9]\d{6}|9007199254[89]\d{5}|90071992547[5-9]\d{4}"
    rb"|900719925474[1-9]\d{3}|900719925474099[2-9])(?=[,\]} \t\r\n]|\Z)"
)
"""An integer of 16 digits beyond 2^53 - 1 and what follows it: searched for only where
the mask has found a run of 16 digits that ends so (a timestamp in microseconds)."""
_ESCAPED_COLONS = (b"\\u003a", b"\\u003A")
_ESCAPED_MINUSES = (b"\\u002d", b"\\u002D")
"""The escapes of a colon and of a minus sign, which the counts above add to the input's."""
_JSON_SPACE = b" \t\r\n"


def _fast(raw: bytes, max_depth: int = MAX_DEPTH) -> tuple[JSON, bytes] | None:
    """The value and its JCS when ``raw`` is provably v1 JSON; ``None`` when unsure."""
    if not _integers_in_range(raw):
        return None
    if raw.count(b"[") + raw.count(b"{") > max_depth and nesting_depth(raw) > max_depth:
        return None
    try:
        value = _FAST.decode(raw)
    except (msgspec.MsgspecError, RecursionError, ValueError):
        return None
    colons = raw.count(b":")
    encoded = jcs_bounded(value, _widest_bound(raw, colons))
    if len(encoded) == len(raw) or (
        (raw[:1] in _JSON_SPACE or raw[-1:] in _JSON_SPACE)
        and len(encoded) == len(raw.strip(_JSON_SPACE))
    ):
        return value, encoded  # as short as its JCS: nothing dropped, no -0 (see above)
    minuses = raw.count(b"-")
    if b"\\u00" in raw:
        colons += sum(map(raw.count, _ESCAPED_COLONS))
        minuses += sum(map(raw.count, _ESCAPED_MINUSES))
    if encoded.count(b":") != colons or encoded.count(b"-") != minuses:
        return None
    return value, encoded


def _integers_in_range(raw: bytes) -> bool:
    """No run of digits in ``raw`` that ends where a number may end is beyond 2^53 - 1
    (one in a string neither: ``False`` leaves the input to the exact door)."""
    masked = raw.translate(_NUMBER_MASK) + b"t"  # the end of the text ends a number too
    if _SIXTEEN_DIGITS_END not in masked:
        return True
    if b"0" + _SIXTEEN_DIGITS_END in masked:  # 17 digits or more
        return False
    return _ABOVE_MAX_SAFE.search(raw) is None


def _widest_bound(raw: bytes, colons: int) -> int:
    """A bound on the members of any one object of the JSON text ``raw``, for
    :func:`~pithlog.protocol.jcs.jcs_bounded`:
    its colons, unless there are many (a payload of many small objects), when the bytes may
    prove that no object is too wide to sort, where a walk of the value would cost a Python
    step per container."""
    if colons > SORT_SAFE_MEMBERS and widest_at_most(raw, SORT_SAFE_MEMBERS):
        return SORT_SAFE_MEMBERS
    return colons


def _prepare(data: bytes, max_bytes: int | None = MAX_LINE_BYTES) -> bytes:
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError("the door takes bytes")
    raw = bytes(data)
    if max_bytes is not None and len(raw) > max_bytes:
        _refuse("too_large", f"input of {len(raw)} bytes is longer than the {max_bytes} allowed")
    if raw.startswith(_BOM):
        _refuse("bom", "input starts with a byte-order mark; remove it", "byte 0")
    return raw


def parse(
    data: bytes, *, max_depth: int = MAX_DEPTH, max_bytes: int | None = MAX_LINE_BYTES
) -> JSON:
    """Parse untrusted bytes into a v1 JSON value, or raise :class:`DoorError`.

    The size rule on the JCS encoding is the caller's (:func:`pithlog.protocol.events.admit`), since
    it applies to envelopes; everything else of spec section 1 is checked here. The limits
    are the envelope's by default; a state document, which nests payloads three levels
    deeper and may hold any number of them, is read with wider ones.
    """
    raw = _prepare(data, max_bytes)
    fast = _fast(raw, max_depth)
    if fast is not None:
        return fast[0]
    return _parse_exact(raw, max_depth)


def decode(data: bytes, *, max_encoded: int | None = None) -> tuple[JSON, bytes]:
    """:func:`parse`, and the JCS encoding of the value (computed once, whichever door).

    With ``max_encoded``, input whose JCS encoding would certainly be longer is refused
    (``too_large``) before it is parsed, so that a line of a few MiB of ``[],[],...`` does
    not cost millions of objects only to be refused for its size afterwards.
    """
    raw = _prepare(data)
    # The floor never exceeds the input's length, so short input needs no count.
    if max_encoded is not None and len(raw) > max_encoded:
        floor = jcs_size_floor(raw)
        if floor > max_encoded:
            _refuse("too_large", f"the JCS encoding would be at least {floor} bytes; "
                    f"at most {max_encoded} are allowed, so send a smaller value")  # fmt: skip
    fast = _fast(raw)
    if fast is not None:
        return fast
    value = _parse_exact(raw, MAX_DEPTH)
    return value, jcs_bounded(value, _widest_bound(raw, raw.count(b":")))


_STRUCTURAL = tuple(bytes([b]) for b in b'[]{},:"')


def jcs_size_floor(raw: bytes) -> int:
    """A lower bound on ``len(jcs(v))`` for any value ``v`` that ``raw`` parses to.

    Each of the bytes ``[ ] { } , : "`` in a JSON text is either structure, which JCS
    writes once for each (the door refuses repeated member names, so no member is lost), or
    a character inside a string, which JCS writes literally (``"`` as ``\\"``). None of them
    is part of an escape sequence or of a multi-byte UTF-8 character; whitespace, escapes
    and everything else can only shrink. So JCS holds at least as many of them.
    """
    return sum(raw.count(b) for b in _STRUCTURAL)


def value_text(value: object) -> bytes:
    """A Python value written as the JSON text the door then reads (:func:`parse`), for a
    value that did not come as bytes (a caller's dict): in ASCII, so that a lone surrogate
    is written as its escape, which the door names; NaN, an infinity, nesting deeper than
    Python writes, or what JSON cannot write at all are refused here."""
    try:
        text = json.dumps(value, ensure_ascii=True, allow_nan=False, separators=(",", ":"))
    except RecursionError:
        _refuse("too_deep", f"nesting deeper than the {MAX_DEPTH} levels allowed")
    except ValueError as exc:  # NaN or an infinity, or a value that holds itself
        if "ircular" in str(exc):
            _refuse("syntax", f"a value JSON cannot write: {exc}")
        _refuse("number_form", f"not a v1 JSON number: {exc}")
    except TypeError as exc:  # bytes, a set, an object: no JSON value at all
        _refuse("syntax", f"a value JSON cannot write: {exc}")
    return text.encode("ascii")


def shape(data: bytes, type: Any = msgspec.Raw) -> Any:
    """``data`` read by JSON syntax alone, as ``type`` (by default one raw value), to tell
    an input's shape (one document, an array of them, JSON Lines) before each of its values
    goes through :func:`parse`: no rule of spec section 1 is checked here. Refused with
    ``too_deep`` when it nests deeper than a recursive reader follows (a few thousand
    brackets, where msgspec raises ``RecursionError``: an untrusted input must not end a
    command with a traceback), and ``syntax`` when it is not such JSON."""
    try:
        return msgspec.json.decode(data, type=type)
    except RecursionError:
        _refuse("too_deep", "the input nests deeper than can be read; v1 JSON nests at "
                f"most {MAX_DEPTH} levels")  # fmt: skip
    except (msgspec.MsgspecError, ValueError) as exc:
        _refuse("syntax", f"not JSON: {exc}")


def decode_fast(data: bytes) -> tuple[JSON, bytes] | None:
    """The fast door alone: the value and its JCS when it proves ``data`` v1 JSON, ``None``
    when it would hand ``data`` to the exact door. For tests and the bench."""
    return _fast(_prepare(data))


def parse_exact(data: bytes) -> JSON:
    """The exact door alone (no fast path): for differential tests against :func:`parse`."""
    return _parse_exact(_prepare(data), MAX_DEPTH)


def _parse_exact(raw: bytes, max_depth: int) -> JSON:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        _refuse("utf8", f"invalid UTF-8 ({exc.reason}); send UTF-8", f"byte {exc.start}")
    try:
        value = _DECODER.decode(text)
    except json.JSONDecodeError as exc:
        _refuse("syntax", f"not JSON: {exc.msg}", f"line {exc.lineno} column {exc.colno}")
    except RecursionError:
        _refuse("too_deep", _too_deep(max_depth))
    # The walk costs a Python step per container; it is needed only when the bytes leave
    # room for what it looks for. The text is JSON now, so its depth is read from its bytes;
    # and UTF-8 that decoded holds no surrogate, so a lone one can only come from an escape.
    if (
        raw.count(b"[") + raw.count(b"{") > max_depth and nesting_depth(raw) > max_depth
    ) or (b"\\u" in raw and _SURROGATE_ESCAPE.search(raw) is not None):
        _check_tree(value, max_depth)
    return value
