"""How deep a JSON text nests and how wide its objects are, read from its bytes (spec
section 1: nesting is at most 64 deep, the outermost object or array being depth 1).

The door (:mod:`pithlog.protocol.canonical`) cannot bound depth by counting brackets once
a line holds more of them than the limit, which every payload of many small objects or
arrays does, and walking the decoded value costs a Python step per container (a 1 MiB line
holds 350,000 of them): these functions measure such a text in a few passes of byte
operations that run in C.

Each result holds only for a text that is valid JSON (RFC 8259); the caller decodes the
text too, and trusts the result only when the decoder accepts the text.
"""

from __future__ import annotations

import itertools
import operator
import re

# Braces read as brackets (neither depth nor width tells them apart), and every byte but a
# bracket, a quote or (for the width) a colon dropped.
_AS_BRACKETS = bytes.maketrans(b"{}", b"[]")
_NOT_BRACKET = bytes(i for i in range(256) if i not in b'"[]{}')
_NOT_BRACKET_OR_COLON = bytes(i for i in range(256) if i not in b'"[]{}:')
_RUN = re.compile(rb"\[+|\]+")


def _outside_strings(raw: bytes, dropped: bytes) -> bytes:
    """The bytes of the JSON text ``raw`` outside its strings, braces as brackets, without
    the bytes in ``dropped``.

    In valid JSON a backslash only occurs inside a string, where it starts an escape, and
    the only escape whose second byte is a backslash is ``\\\\``: so removing ``\\\\`` pairs
    from left to right removes exactly those escapes (a run of backslashes pairs up from its
    start), after which every ``\\"`` is an escaped quote. The quotes left delimit strings,
    opening and closing in turn, so every other piece between them is outside.
    """
    if b"\\" in raw:
        raw = raw.replace(b"\\\\", b"").replace(b'\\"', b"")
    kept = raw.translate(_AS_BRACKETS, dropped)
    return b"".join(kept.split(b'"')[::2]) if b'"' in kept else kept


def nesting_depth(raw: bytes) -> int:
    """The deepest nesting of containers in the JSON text ``raw`` (0 for a scalar)."""
    brackets = _outside_strings(raw, _NOT_BRACKET)
    # Peel: removing every empty container (a leaf: "[]") lowers the depth by exactly one,
    # since each deepest container is a leaf and its parent is not. A payload of many
    # small values collapses in a few passes; a pass is made only while it removes at
    # least a quarter of what is left, so all of them together cost at most four times
    # the length.
    peeled = 0
    while brackets:
        if 8 * brackets.count(b"[]") < len(brackets):
            break
        brackets = brackets.replace(b"[]", b"")
        peeled += 1
    if not brackets:
        return peeled
    # What is left has few leaves, so few runs of "[" and of "]" (a quarter of its length
    # at most), in turn from a run of "[": the depth after each run of "[" is the sum of
    # the runs up to it, those of "]" counted negative.
    runs = [len(run) for run in _RUN.findall(brackets)]
    deepest: int = max(itertools.accumulate(map(operator.sub, runs[0::2], [0, *runs[1::2]])))
    return peeled + deepest


def widest_at_most(raw: bytes, members: int) -> bool | None:
    """Whether no object of the JSON text ``raw`` has more than ``members`` members;
    ``None`` when that is not settled in a few passes.

    Outside strings, each colon separates a member's name from its value, so the members
    of an object are the colons directly inside it. A container is removed only once it
    is a leaf (all it held is gone, its colons stand alone between its brackets) holding at
    most ``members`` colons: when all are gone, none was wider; a wider one stays, and its
    colons are a run longer than ``members``.
    """
    text = _outside_strings(raw, _NOT_BRACKET_OR_COLON)
    too_wide = b":" * (members + 1)
    leaf = re.compile(rb"\[:{0,%d}\]" % members)
    while text:
        if too_wide in text:
            return False
        before = len(text)
        # Empty containers first with a byte search, which is many times faster than the
        # expression on a payload of many of them.
        text = leaf.sub(b"", text.replace(b"[]", b""))
        if 4 * len(text) > 3 * before:
            return None  # a deep text: left to a walk of the value
    return True
