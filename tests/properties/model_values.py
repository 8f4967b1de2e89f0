"""The values of an independent model of pith-open-graph-merge-v1 (``model.py``): JSON,
text and time (spec section 1), pith numbers (2), keys and the keyring (3), written from
the spec text alone, with only the standard library, ``rfc8785`` and ``cryptography``."""

from __future__ import annotations

import base64
import binascii
import calendar
import contextlib
import functools
import hashlib
import json
import re
from typing import Any

import rfc8785
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

# --- §1 JSON, text and time ---------------------------------------------------------------

MAX_INT = 2**53 - 1
MAX_ENVELOPE = 1_048_576
MAX_LINE = 8_388_608
MAX_DEPTH = 64


class Refused(Exception):
    """Refused at the door (§1, §4), or a keyring refused as a whole (§3)."""


def jcs(value: Any) -> bytes:
    return rfc8785.dumps(value)


scalar_jcs = functools.lru_cache(maxsize=4096, typed=True)(jcs)  # typed: 1 and true differ


def digest(value: Any) -> str:
    """§0 words: lowercase hex SHA-256 of JCS(x)."""
    return hashlib.sha256(jcs(value)).hexdigest()


def _int(text: str) -> int:
    # §1: -?(0|[1-9][0-9]*), not -0, |n| <= 2^53 - 1 (json already refuses leading zeros).
    if text == "-0":
        raise Refused("-0")
    n = int(text)
    if abs(n) > MAX_INT:
        raise Refused("integer out of range")
    return n


def _no_float(text: str) -> Any:
    raise Refused("fraction or exponent: " + text)


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in pairs:
        if name in out:
            raise Refused("repeated member name " + repr(name))
        out[name] = value
    return out


def _scan(value: Any, depth: int) -> None:
    """§1: scalar values only in strings; nesting at most 64 (the outermost counts 1)."""
    if isinstance(value, str):
        if any(0xD800 <= ord(c) <= 0xDFFF for c in value):
            raise Refused("lone surrogate")
    elif isinstance(value, (dict, list)):
        if depth + 1 > MAX_DEPTH:
            raise Refused("too deep")
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for name, item in items:
            _scan(name, depth + 1)  # a list index is an int: ignored by _scan
            _scan(item, depth + 1)


def parse(data: bytes) -> Any:
    """§1: UTF-8 JSON without a BOM, no repeated names, integers only, scalar values."""
    if data.startswith(b"\xef\xbb\xbf"):
        raise Refused("byte-order mark")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Refused("not UTF-8") from exc
    try:
        value = json.loads(text, object_pairs_hook=_pairs, parse_int=_int,
                           parse_float=_no_float, parse_constant=_no_float)
    except (ValueError, RecursionError) as exc:
        if isinstance(exc, Refused):
            raise
        raise Refused(f"not JSON: {exc}") from exc
    _scan(value, 0)
    return value


HEX64 = re.compile(r"[0-9a-f]{64}")
EVENT_ID = re.compile(r"sha256:[0-9a-f]{64}")
PITH_NUMBER = re.compile(r"pith:[0-9]{4}:[A-Z2-7]{26}")  # §2
TS = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})Z")


def admit(value: Any) -> Any:
    """§4 the door: an object with a well-formed event_id and pith_number, JCS <= 1 MiB."""
    if not isinstance(value, dict):
        raise Refused("not an object")
    if not (isinstance(value.get("event_id"), str) and EVENT_ID.fullmatch(value["event_id"])):
        raise Refused("event_id")
    if not (isinstance(value.get("pith_number"), str)
            and PITH_NUMBER.fullmatch(value["pith_number"])):
        raise Refused("pith_number")
    if len(jcs(value)) > MAX_ENVELOPE:
        raise Refused("too large")
    return value


def read_lines(data: bytes) -> list[Any]:
    """§1 JSON Lines: split on LF only; skip lines of JSON whitespace; refuse long lines.
    Refused lines are dropped (none of the conformance vectors holds one)."""
    out = []
    for line in data.split(b"\n"):
        if len(line) > MAX_LINE or not line.strip(b" \t\r"):
            continue
        with contextlib.suppress(Refused):
            out.append(admit(parse(line)))
    return out


def is_ts(value: Any) -> bool:
    """§1: YYYY-MM-DDTHH:MM:SSZ, literally, a real calendar instant."""
    if not isinstance(value, str):
        return False
    m = TS.fullmatch(value)
    if not m:
        return False
    year, month, day, hour, minute, second = (int(g) for g in m.groups())
    return (1 <= year <= 9999 and 1 <= month <= 12
            and 1 <= day <= calendar.monthrange(year, month)[1]
            and hour <= 23 and minute <= 59 and second <= 59)


def b64(value: Any) -> bytes | None:
    """§1 base64: standard alphabet, padded, canonical (decode then encode gives it back)."""
    if not isinstance(value, str) or not re.fullmatch(r"[A-Za-z0-9+/=]*", value):
        return None
    try:
        raw = base64.b64decode(value, validate=True)
    except (ValueError, binascii.Error):
        return None
    return raw if base64.b64encode(raw).decode("ascii") == value else None


def ascii_lower(text: str) -> str:
    """§1: A-Z to a-z, nothing else."""
    return text.translate({c: c + 32 for c in range(ord("A"), ord("Z") + 1)})


def same(a: Any, b: Any) -> bool:
    """JSON equality, so ``1`` and ``true`` differ (docs/protocol.md choice 4)."""
    return jcs(a) == jcs(b)


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def nonempty(value: Any) -> bool:
    return isinstance(value, str) and value != ""


# --- §2 pith numbers ----------------------------------------------------------------------

def b32_of(canonical_sha256: str) -> str:
    """§2 B: base32 of the first 16 bytes of canonical_sha256, padding removed."""
    return base64.b32encode(bytes.fromhex(canonical_sha256)[:16]).decode("ascii").rstrip("=")


def pith_number_of(record: dict[str, Any], canonical_sha256: str) -> str:
    return f"pith:{record['metadata']['submitted_at'][0:4]}:{b32_of(canonical_sha256)}"


# --- §3 keys and the keyring --------------------------------------------------------------

SIGNER_TYPES = ("pith_registry", "author", "timestamp_authority", "mirror",
                "citation_indexer", "replicator")
P = 2**255 - 19
D = -121665 * pow(121666, P - 2, P) % P


def _decode_point(raw: bytes) -> tuple[int, int] | None:
    """RFC 8032 section 5.1.3; None when the encoding is not canonical or not on the curve."""
    y = int.from_bytes(raw, "little") & ((1 << 255) - 1)
    x0 = raw[31] >> 7
    if y >= P:
        return None
    u, v = (y * y - 1) % P, (D * y * y + 1) % P
    x = u * pow(v, 3, P) * pow(u * pow(v, 7, P), (P - 5) // 8, P) % P
    if v * x * x % P == u:
        pass
    elif v * x * x % P == -u % P:
        x = x * pow(2, (P - 1) // 4, P) % P
    else:
        return None
    if x == 0 and x0 == 1:
        return None
    if x % 2 != x0:
        x = P - x
    return x, y


def _add(p1: tuple[int, int], p2: tuple[int, int]) -> tuple[int, int]:
    (x1, y1), (x2, y2) = p1, p2  # twisted Edwards, a = -1 (complete addition law)
    t = D * x1 * x2 * y1 * y2 % P
    return ((x1 * y2 + x2 * y1) * pow(1 + t, P - 2, P) % P,
            (y1 * y2 + x1 * x2) * pow(1 - t, P - 2, P) % P)


def key_ok(raw: bytes | None) -> bool:
    """§3: 32 bytes, canonical encoding of a curve point, not one of the 8 small-order points."""
    if raw is None or len(raw) != 32:
        return False
    point = _decode_point(raw)
    if point is None:
        return False
    for _ in range(3):  # [8]P is the identity exactly for the small-order points
        point = _add(point, point)
    return point != (0, 1)


def fingerprint(raw: bytes) -> str:
    """§3: first 16 bytes of SHA-256 of the raw public key, lowercase hex."""
    return hashlib.sha256(raw).digest()[:16].hex()


def load_keyring(data: bytes) -> dict[str, dict[str, Any]]:
    """§3: key_id -> entry (with ``raw`` and ``fingerprint`` added); Refused if any rule fails."""
    value = parse(data)
    if not isinstance(value, dict) or value.get("keyring_version") != "1" \
            or not isinstance(value.get("keys"), list):
        raise Refused("keyring shape")
    return make_keyring(value["keys"])


def make_keyring(keys: list[Any]) -> dict[str, dict[str, Any]]:
    members = ("key_id", "public_key_b64", "signer_id", "signer_type",
               "not_before", "not_after", "revoked_at")
    ring: dict[str, dict[str, Any]] = {}
    for key in keys:
        if not isinstance(key, dict) or any(m not in key for m in members):
            raise Refused("key members")
        raw = b64(key["public_key_b64"])
        bounds = [key["not_before"], key["not_after"], key["revoked_at"]]
        if (not nonempty(key["key_id"]) or key["key_id"] in ring
                or not nonempty(key["signer_id"]) or key["signer_type"] not in SIGNER_TYPES
                or not key_ok(raw) or any(b is not None and not is_ts(b) for b in bounds)
                or (bounds[0] is not None and bounds[1] is not None
                    and not bounds[0] < bounds[1])):
            raise Refused("key " + repr(key.get("key_id")))
        assert raw is not None
        ring[key["key_id"]] = {**key, "raw": raw, "fingerprint": fingerprint(raw)}
    return ring


def valid_at(entry: dict[str, Any], t: str) -> bool:
    """§3: valid at t; ts compare as strings."""
    return ((entry["not_before"] is None or entry["not_before"] <= t)
            and (entry["not_after"] is None or t < entry["not_after"])
            and (entry["revoked_at"] is None or t < entry["revoked_at"]))


def verifies(raw_key: bytes, signature_b64: Any, message: bytes) -> bool:
    signature = b64(signature_b64)
    if signature is None or len(signature) != 64:
        return False
    try:
        Ed25519PublicKey.from_public_bytes(raw_key).verify(signature, message)
    except InvalidSignature:
        return False
    return True
