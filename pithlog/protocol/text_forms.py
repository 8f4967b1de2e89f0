"""The text forms of spec section 1 that values take inside JSON: SHA-256s as 64 lowercase
hex digits, bytes as canonical RFC 4648 base64, and "lower case" as ASCII lower case."""

from __future__ import annotations

import base64
import binascii
import re

HEX64 = re.compile(r"[0-9a-f]{64}")


def is_hex64(value: object) -> bool:
    """64 lowercase hex digits (a SHA-256 in the form the spec writes it)."""
    return isinstance(value, str) and HEX64.fullmatch(value) is not None


def decode_b64(value: object) -> bytes | None:
    """Decode canonical RFC 4648 section 4 base64, or return ``None``.

    Canonical: standard alphabet, ``=`` padding, no whitespace, and re-encoding the bytes
    gives back the same string (so no stray bits in the last character).
    """
    if not isinstance(value, str) or not value.isascii():
        return None
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return None
    if base64.b64encode(raw).decode("ascii") != value:
        return None
    return raw


def encode_b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


def lower_ascii(text: str) -> str:
    """Spec 1: "lower case" is ASCII lower case (A-Z to a-z, nothing else)."""
    return text.translate(_ASCII_LOWER)


_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
