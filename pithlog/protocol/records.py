"""Pith numbers (spec section 2).

For a canonical record ``C``: ``canonical_sha256 = digest(C)`` and
``pith_number = "pith:" + C.metadata.submitted_at[0:4] + ":" + B``, where ``B`` is the
upper-case RFC 4648 base32 of the first 16 bytes of ``canonical_sha256``, unpadded.
"""

from __future__ import annotations

import base64
import re
from typing import Any

from pithlog.protocol.canonical import digest

PITH_NUMBER = re.compile(r"pith:[0-9]{4}:[A-Z2-7]{26}")


def is_pith_number(value: object) -> bool:
    """``^pith:[0-9]{4}:[A-Z2-7]{26}$``."""
    return isinstance(value, str) and PITH_NUMBER.fullmatch(value) is not None


def base32_of(canonical_sha256: str) -> str:
    """``B``: base32 of the first 16 bytes of the hash, padding removed (26 characters)."""
    return base64.b32encode(bytes.fromhex(canonical_sha256)[:16]).decode("ascii").rstrip("=")


def pith_number_for(canonical_sha256: str, submitted_at: str) -> str:
    """The pith number of a record with this hash, submitted at this ts."""
    return f"pith:{submitted_at[0:4]}:{base32_of(canonical_sha256)}"


def pith_number_of(canonical_record: dict[str, Any]) -> str:
    """The pith number of a canonical record (its ``metadata.submitted_at`` must be a ts)."""
    return pith_number_for(digest(canonical_record), canonical_record["metadata"]["submitted_at"])
