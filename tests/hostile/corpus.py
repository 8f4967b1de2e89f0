"""Valid signed events, and the hostile bytes the tests make of them.

:data:`VALID` holds one valid event of every type about one record, signed with the fixed
public test keys; :data:`ORIGINALS` their JCS bytes. The strategies produce:

- :func:`mutations`: an original changed at the byte level (bit flips, truncation, bytes
  inserted, deleted or replaced, a BOM, invalid UTF-8), at the text level (members
  reordered, ``\\u`` escapes, whitespace, integers written ``1.0`` or ``1e0``, a repeated
  member, lone surrogates, escaped or raw) or at the value level (members removed, added or
  replaced by any JSON, deep nesting), written out by :func:`emit`;
- :func:`equivalents`: an original written another way that means the same value;
- :func:`junk`: malformed JSON and valid JSON of the wrong shape.

Every fuzz test takes its budget from :func:`budget`.
"""

from __future__ import annotations

import copy
import json
import os
import random
from typing import Any

from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from pithlog.protocol.canonical import MAX_SAFE_INTEGER, digest, jcs
from pithlog.protocol.event_types import prepare_record_created
from pithlog.protocol.events import sign_event
from pithlog.protocol.text_forms import encode_b64
from pithlog.testing import test_key, test_keyring

FUZZ = os.environ.get("HYPOTHESIS_PROFILE") == "fuzz"
FUZZ_FACTOR = 50


def budget(examples: int) -> settings:
    """A fixed budget: ``examples`` (times :data:`FUZZ_FACTOR` under ``make fuzz``)."""
    return settings(
        max_examples=examples * (FUZZ_FACTOR if FUZZ else 1),
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


KEYRING = test_keyring()
RECORD_AT = "2026-01-01T00:00:00Z"
LATER = "2026-03-01T12:00:00Z"

CANONICAL_RECORD: dict[str, Any] = {
    "metadata": {"submitted_at": "2024-11-01T00:43:54Z", "title": "Caf\u00e9 \U0001f600 \ue000"},
    "schema_version": "1.0",
    "source": {"id": "2411.00284", "kind": "arxiv", "version": 2},
}


def _record_event() -> dict[str, Any]:
    key = test_key("registry")
    pith, payload = prepare_record_created(key, {"canonical_record": CANONICAL_RECORD})
    return sign_event(key, "record_created", pith, "record", RECORD_AT, payload)


RECORD = _record_event()
PITH = str(RECORD["pith_number"])


def _observation() -> dict[str, Any]:
    obs: dict[str, Any] = {
        "citation": {
            "cited_paper": {"arxiv_id": "2411.00284", "title": "Cited"},
            "citing_paper": {"arxiv_id": "2501.00001", "title": "Citing \u2028 line"},
            "reference_index": 3,
        },
        "observation_id": "obs-1",
    }
    obs["observation_digest"] = "sha256:" + digest(obs)
    return obs


def _others() -> list[dict[str, Any]]:
    source = dict(CANONICAL_RECORD["source"])
    rows: list[tuple[str, str, str, dict[str, Any]]] = [
        ("graph_snapshot", "registry", "graph",
         {"graph_snapshot": {"claims": {"count": 0, "items": []}, "source": source},
          "verdict_id": None}),
        ("author_attestation", "author", "claim:c1",
         {"statement": "I wrote this. \u00e9\U0001f600"}),
        ("timestamp_anchor", "tsa", "record",
         {"anchor_kind": "rfc3161", "anchored_sha256": digest(CANONICAL_RECORD),
          "proof_b64": encode_b64(b"proof")}),
        ("storage_attestation", "mirror", "record",
         {"byte_size": 1234, "content_sha256": "cd" * 32, "locator": "https://m.test.invalid/a"}),
        ("citation_signature", "indexer", "citation:obs-1", {"observation": _observation()}),
        ("replication_record", "replicator", "record",
         {"outcome": "replicated", "report": "It replicates."}),
        ("correction", "registry", "record",
         {"correction_type": "erratum", "notice": "Fixed a typo."}),
        ("mirror_hint", "mirror", "record", {"locator": "https://m.test.invalid/b"}),
    ]  # fmt: skip
    return [
        sign_event(test_key(signer), event_type, PITH, target, LATER, payload)
        for event_type, signer, target, payload in rows
    ]


VALID: list[dict[str, Any]] = [RECORD, *_others()]
"""One valid event of each of the nine types, about one record."""
ORIGINALS: list[bytes] = [jcs(v) for v in VALID]
MIRROR_HINT = next(v for v in VALID if v["event_type"] == "mirror_hint")


def seed_of(name: str) -> bytes:
    """The raw 32-byte seed of the test key ``name`` (for signing by hand, ``edwards.sign``)."""
    return test_key(name).private_key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())


# --- writing JSON, hostile or not ----------------------------------------------------------

_SPACE = (" ", "\t", "\r", "\n")


def emit(
    value: Any,
    rnd: random.Random,
    *,
    shuffle: float = 0.0,
    escape: float = 0.0,
    space: float = 0.0,
    numform: float = 0.0,
    surrogate: float = 0.0,
    duplicate: float = 0.0,
    slash: float = 0.0,
) -> bytes:
    """JSON text of ``value``, each rule broken or bent with the given probability.

    ``shuffle``: members in random order; ``escape``: a character written as ``\\uXXXX``;
    ``space``: whitespace between tokens; ``numform``: an integer written with a fraction,
    an exponent, a sign or a leading zero; ``surrogate``: a lone surrogate put in a string
    (escaped, or raw and so not UTF-8); ``duplicate``: an object repeats a member;
    ``slash``: a ``/`` written ``\\/`` (as PHP's json_encode writes every one). With all
    zero the text is JSON of the same value (not necessarily JCS).
    """

    repeats = [1, 2, 3]

    def ws() -> str:
        if space and rnd.random() < space:
            return "".join(rnd.choice(_SPACE) for _ in range(rnd.randint(1, 3)))
        return ""

    def string(text: str) -> str:
        out = ['"']
        for ch in text:
            if surrogate and rnd.random() < surrogate:
                out.append(rnd.choice(["\\ud800", "\\udfff", "\ud83d", "\\ude00\\ud83d"]))
            code = ord(ch)
            if escape and rnd.random() < escape:
                if code > 0xFFFF:
                    code -= 0x10000
                    out.append(f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04X}")
                else:
                    out.append(f"\\u{code:04x}" if rnd.random() < 0.5 else f"\\u{code:04X}")
            elif ch == '"' or ch == "\\" or (ch == "/" and slash and rnd.random() < slash):
                out.append("\\" + ch)
            elif code < 0x20:
                out.append(f"\\u{code:04x}")
            else:
                out.append(ch)
        out.append('"')
        return "".join(out)

    def number(n: int) -> str:
        if numform and rnd.random() < numform:
            return rnd.choice([f"{n}.0", f"{n}e0", f"{n}E+0", f"{n}.00", f"0{abs(n)}",
                               f"+{abs(n)}", "-0", f"{n}e-0", f"{n}.", f"{n:_}"])  # fmt: skip
        return str(n)

    def write(v: Any) -> str:
        if v is None:
            return "null"
        if v is True:
            return "true"
        if v is False:
            return "false"
        if isinstance(v, int):
            return number(v)
        if isinstance(v, float):
            return repr(v)
        if isinstance(v, str):
            return string(v)
        if isinstance(v, list):
            return "[" + ws() + ("," + ws()).join(write(x) + ws() for x in v) + "]"
        items = list(v.items())
        if shuffle and rnd.random() < shuffle:
            rnd.shuffle(items)
        members = [ws() + string(k) + ws() + ":" + ws() + write(x) + ws() for k, x in items]
        if members and repeats and rnd.random() < duplicate:
            # a member's text again, in at most three objects: repeats nested in repeats
            # would double the text at every level
            repeats.pop()
            members.insert(rnd.randrange(len(members) + 1), rnd.choice(members))
        return "{" + ",".join(members) + "}"

    return (ws() + write(value) + ws()).encode("utf-8", "surrogatepass")


# --- hostile values ------------------------------------------------------------------------

NASTY_STRINGS = (
    "", " ", "x", "\u00e9", "e\u0301", "\U0001f600", "\ue000", "\uffff", "\u2028", "\u0085",
    "\x00", "\n", "\x1b[31m", "\\", '"', "null", "sha256:" + "0" * 64, "sha256:" + "A" * 64,
    PITH, PITH.lower(), RECORD_AT, "2026-02-30T00:00:00Z", "record", "graph", "claim:",
    "citation:obs-1", "event:sha256:" + "a" * 64, "pith_registry", "test-registry",
    encode_b64(bytes(64)), "=" * 4, "A" * 300,
)
NASTY_INTS = (0, 1, -1, 2, 255, MAX_SAFE_INTEGER, -MAX_SAFE_INTEGER, MAX_SAFE_INTEGER + 1,
              -(MAX_SAFE_INTEGER + 1), 2**64, 10**30)  # fmt: skip


def random_json(rnd: random.Random, depth: int = 0) -> Any:
    """Some JSON value, often an awkward one; integers may lie beyond 2^53 - 1 and floats
    appear (the writer writes them as JSON numbers the door must refuse)."""
    kind = rnd.randrange(10 if depth < 3 else 7)
    if kind == 0:
        return None
    if kind == 1:
        return rnd.random() < 0.5
    if kind == 2:
        return rnd.choice(NASTY_INTS) if rnd.random() < 0.5 else rnd.randint(-1000, 1000)
    if kind == 3:
        return rnd.choice((0.5, -1.5, 1e300, 1.0))
    if kind in (4, 5, 6):
        return rnd.choice(NASTY_STRINGS)
    if kind == 7:
        return [random_json(rnd, depth + 1) for _ in range(rnd.randint(0, 3))]
    size = rnd.randint(0, 3)
    return {rnd.choice(NASTY_STRINGS): random_json(rnd, depth + 1) for _ in range(size)}


def _places(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Paths of every member and element in ``value``."""
    out: list[tuple[Any, ...]] = []
    if isinstance(value, dict):
        for k, v in value.items():
            out.append((*path, k))
            out.extend(_places(v, (*path, k)))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out.append((*path, i))
            out.extend(_places(v, (*path, i)))
    return out


def _parent(value: Any, path: tuple[Any, ...]) -> Any:
    for step in path[:-1]:
        value = value[step]
    return value


def mutate_value(value: Any, rnd: random.Random) -> Any:
    """A copy of ``value`` with one member or element removed, added, replaced, or wrapped
    in deep nesting (``value`` itself is left alone)."""
    value = copy.deepcopy(value)
    places = _places(value)
    op = rnd.choice(["remove", "add", "replace", "replace", "nest", "swap", "top"])
    if op == "top" or not places:
        return random_json(rnd)
    path = rnd.choice(places)
    parent = _parent(value, path)
    key = path[-1]
    if op == "remove":
        del parent[key]
    elif op == "add":
        if isinstance(parent, dict):
            parent[rnd.choice((*NASTY_STRINGS, "x-extra"))] = random_json(rnd)
        else:
            parent.insert(key, random_json(rnd))
    elif op == "replace":
        parent[key] = random_json(rnd)
    elif op == "nest":
        inner = parent[key]
        for _ in range(rnd.choice([1, 2, 30, 60, 61, 62, 63, 64, 100, 300])):
            inner = [inner] if rnd.random() < 0.7 else {"n": inner}
        parent[key] = inner
    else:  # swap two values, keeping every type in place or not
        other = rnd.choice(places)
        other_parent = _parent(value, other)
        if other[: len(path)] != path and path[: len(other)] != other:
            parent[key], other_parent[other[-1]] = other_parent[other[-1]], parent[key]
    return value


_BAD_UTF8 = (b"\xff", b"\xfe", b"\x80", b"\xc0\xaf", b"\xe0\x80\xaf", b"\xed\xa0\x80",
             b"\xed\xbf\xbf", b"\xf4\x90\x80\x80", b"\xf8\x88\x80\x80\x80", b"\xe2\x82",
             b"\xc3")  # fmt: skip


def mutate_bytes(data: bytes, rnd: random.Random) -> bytes:
    """``data`` changed at the byte level."""
    n = len(data)
    op = rnd.choice(["flip", "flip", "truncate", "insert", "delete", "replace", "bom",
                     "utf8", "space", "nul", "tail"])  # fmt: skip
    i = rnd.randrange(n) if n else 0
    if op == "flip" and n:
        return data[:i] + bytes([data[i] ^ (1 << rnd.randrange(8))]) + data[i + 1 :]
    if op == "truncate":
        return data[:i]
    if op == "insert":
        return data[:i] + rnd.randbytes(rnd.randint(1, 4)) + data[i:]
    if op == "delete":
        return data[:i] + data[i + rnd.randint(1, 8) :]
    if op == "replace" and n:
        return data[:i] + bytes([rnd.choice(b'{}[]:,"\\0123456789-+.eE \ttfnu')]) + data[i + 1 :]
    if op == "bom":
        return b"\xef\xbb\xbf" + data
    if op == "utf8":
        return data[:i] + rnd.choice(_BAD_UTF8) + data[i:]
    if op == "space":
        return data[:i] + rnd.choice([b" ", b"\t", b"\r", b"\x0b", b"\x0c", b"\xc2\xa0"]) + data[i:]
    if op == "nul":
        return data[:i] + b"\x00" + data[i:]
    return data + rnd.choice([b"x", b"}", b",", b" {}", b"\x00", b"\r"])


SEEDS = st.integers(0, 2**64 - 1)
"""Choices inside one example come from a Random seeded by Hypothesis: it is much faster
than drawing every coin flip from Hypothesis, and a failure still replays from its seed."""


@st.composite
def mutations(draw: st.DrawFn) -> tuple[int, bytes]:
    """``(index into ORIGINALS, hostile bytes made from it)``."""
    index = draw(st.integers(0, len(VALID) - 1))
    rnd = random.Random(draw(SEEDS))
    level = draw(st.sampled_from(["bytes", "text", "value", "value+text", "twice"]))
    value = VALID[index]
    if level == "bytes":
        return index, mutate_bytes(ORIGINALS[index], rnd)
    if level == "twice":
        return index, mutate_bytes(mutate_bytes(ORIGINALS[index], rnd), rnd)
    if level in ("value", "value+text"):
        value = mutate_value(value, rnd)
    if level == "value":
        return index, emit(value, rnd)
    bend = draw(st.sampled_from(["shuffle", "escape", "space", "numform", "surrogate",
                                 "duplicate", "slash", "all"]))  # fmt: skip
    p = draw(st.sampled_from([0.05, 0.3, 1.0]))
    options = {name: p for name in ("shuffle", "escape", "space", "numform", "surrogate",
                                    "duplicate", "slash") if bend in (name, "all")}  # fmt: skip
    return index, emit(value, rnd, **options)


@st.composite
def equivalents(draw: st.DrawFn) -> tuple[int, bytes]:
    """``(index, bytes)``: an original written another way with the same meaning."""
    index = draw(st.integers(0, len(VALID) - 1))
    rnd = random.Random(draw(SEEDS))
    options = {
        name: draw(st.sampled_from([0.0, 0.2, 1.0]))
        for name in ("shuffle", "escape", "space", "slash")
    }
    return index, emit(VALID[index], rnd, **options)


def reseal(value: Any, signer: str) -> dict[str, Any]:
    """``value`` (an envelope, any shape) with its event_id recomputed and signed again by
    the key of ``signer``: hostile content that passes checks 3 and 6."""
    body = {k: v for k, v in value.items() if k not in ("event_id", "signature_b64")}
    try:
        body_digest = digest(body)
    except (TypeError, ValueError, OverflowError):  # not a v1 value (a float, a huge int)
        return value
    return {
        **body,
        "event_id": "sha256:" + body_digest,
        "signature_b64": encode_b64(test_key(signer).sign(bytes.fromhex(body_digest))),
    }


SIGNER_OF = {v["event_id"]: v["signer"]["key_id"].removeprefix("test-") for v in VALID}


@st.composite
def resealed(draw: st.DrawFn) -> bytes:
    """An original with hostile changes inside its body (payload, target, signer, times),
    identified and signed again by its own signer: checks 7-14 see hostile content."""
    index = draw(st.integers(0, len(VALID) - 1))
    rnd = random.Random(draw(SEEDS))
    original = VALID[index]
    body = {k: v for k, v in original.items() if k not in ("event_id", "signature_b64")}
    for _ in range(draw(st.integers(1, 3))):
        changed = mutate_value(body, rnd)
        if isinstance(changed, dict):
            body = changed
    return emit(reseal(body, SIGNER_OF[original["event_id"]]), rnd)


_TOKENS = ("{", "}", "[", "]", ",", ":", '"a"', '"', "1", "-", "0", "1.0", "1e5", "true",
           "nul", "\\", '"\\u', '"\\ud800"', " ", "\n", "\t", "\x00", '"event_id"',
           '"sha256:' + "0" * 64 + '"', '"pith_number"', '"' + PITH + '"', "//", "NaN")  # fmt: skip


@st.composite
def junk(draw: st.DrawFn) -> bytes:
    """Malformed JSON, or valid JSON of the wrong shape."""
    kind = draw(st.sampled_from(["binary", "text", "tokens", "json", "object", "nearly"]))
    if kind == "binary":
        return draw(st.binary(max_size=300))
    if kind == "text":
        return draw(st.text(max_size=100)).encode("utf-8", "surrogatepass")
    if kind == "tokens":
        return "".join(draw(st.lists(st.sampled_from(_TOKENS), max_size=40))).encode(
            "utf-8", "surrogatepass"
        )
    rnd = random.Random(draw(SEEDS))
    if kind == "json":
        return emit(random_json(rnd), rnd)
    if kind == "object":  # has event_id and pith_number, the rest anything
        value = {rnd.choice(NASTY_STRINGS): random_json(rnd) for _ in range(rnd.randint(0, 8))}
        value["event_id"] = "sha256:" + rnd.randbytes(32).hex()
        value["pith_number"] = PITH
        return emit(value, rnd, shuffle=1.0)
    # An envelope of the right member names whose values are all wrong.
    value = {name: random_json(rnd) for name in VALID[0]}
    value["event_id"] = "sha256:" + rnd.randbytes(32).hex()
    value["pith_number"] = PITH
    return emit(value, rnd)


def reference_lines(data: bytes, limit: int) -> list[tuple[int, bytes | None]]:
    """JSON Lines framing of spec section 1, the plain way: split on LF, number every line
    from 1, skip lines of only space, tab and CR, ``None`` for a line over ``limit``."""
    out: list[tuple[int, bytes | None]] = []
    pieces = data.split(b"\n")
    if pieces and pieces[-1] == b"":
        pieces.pop()
    for number, line in enumerate(pieces, 1):
        if len(line) > limit:
            out.append((number, None))
        elif line.strip(b" \t\r"):
            out.append((number, line))
    return out


def dumps(value: Any) -> str:
    """json.dumps for messages."""
    return json.dumps(value, ensure_ascii=True)[:200]
