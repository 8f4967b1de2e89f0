"""The fixed test keys, the seeds' paths and the canonical form, computed with the
reference encoder (``rfc8785``), not with :func:`pithlog.protocol.canonical.jcs`.
"""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path
from typing import Any

import rfc8785

from pithlog.protocol.checks import REASONS
from pithlog.testing import test_key

HERE = Path(__file__).resolve().parent.parent
SEEDS = HERE / "seeds"
SEED_STATE = SEEDS / "state-2411.00284.json"
SEED_CITATIONS = SEEDS / "citation-record-2304.11277.json"

REGISTRY = test_key("registry")
REGISTRY_2 = test_key("registry-2")
AUTHOR = test_key("author")
TSA = test_key("tsa")
MIRROR = test_key("mirror")
INDEXER = test_key("indexer")
REPLICATOR = test_key("replicator")
STRANGER = test_key("stranger")

OUTCOMES = ("applied", "equivocation_loser", "pending", *REASONS)


def jcs(value: Any) -> bytes:
    return bytes(rfc8785.dumps(value))


def digest(value: Any) -> str:
    return hashlib.sha256(jcs(value)).hexdigest()


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


def pith_of(record: dict[str, Any]) -> str:
    """Spec 2, computed here independently of pithlog.protocol.records."""
    short = base64.b32encode(bytes.fromhex(digest(record))[:16]).decode("ascii").rstrip("=")
    return f"pith:{record['metadata']['submitted_at'][:4]}:{short}"
