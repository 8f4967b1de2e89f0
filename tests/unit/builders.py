"""Signed events for tests, built with the fixed public test keys of :mod:`pithlog.testing`.

Every builder returns a plain envelope dict (what a signer would publish); :func:`verdict`
reduces envelopes the way ``pithlog reduce`` does and says what became of one of them.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from pithlog.protocol.canonical import digest, parse
from pithlog.protocol.checks import reduction_hints
from pithlog.protocol.event_types import prepare_record_created
from pithlog.protocol.events import admit, body_of, readmit_light, sign_event
from pithlog.protocol.keys import Keyring, SigningKey
from pithlog.protocol.reduce import (
    Judged,
    Pending,
    Reduction,
    collapse,
    reduce_events,
    reduce_pith,
)
from pithlog.protocol.state import render_reduction
from pithlog.protocol.text_forms import encode_b64
from pithlog.testing import test_key, test_keyring

REPO = Path(__file__).resolve().parents[2]
SEEDS = REPO / "vectors" / "seeds"
STATE_SEED = SEEDS / "state-2411.00284.json"
CITATION_SEED = SEEDS / "citation-record-2304.11277.json"

KEYRING = test_keyring()
RECORD_AT = "2026-01-01T00:00:00Z"
LATER = "2026-03-01T12:00:00Z"


def key(name: str) -> SigningKey:
    return test_key(name)


def canonical_record(
    source_id: str = "2411.00284",
    kind: str = "arxiv",
    version: Any = 2,
    submitted_at: str = "2024-11-01T00:43:54Z",
) -> dict[str, Any]:
    return {
        "metadata": {"submitted_at": submitted_at, "title_canon_sha256": "ab" * 32},
        "schema_version": "1.0",
        "source": {"id": source_id, "kind": kind, "version": version},
    }


def record_event(
    record: dict[str, Any] | None = None,
    created_at: str = RECORD_AT,
    signer: str = "registry",
    **payload_extra: Any,
) -> dict[str, Any]:
    """A valid ``record_created`` (when ``signer`` is a registry key in the keyring)."""
    k = key(signer)
    payload = {"canonical_record": record or canonical_record(), **payload_extra}
    pith_number, filled = prepare_record_created(k, payload)
    return sign_event(k, "record_created", pith_number, "record", created_at, filled)


def record_of(record_env: dict[str, Any]) -> dict[str, Any]:
    record: dict[str, Any] = record_env["payload"]["canonical_record"]
    return record


def observation(
    cited: str | None, citing: str = "2501.00001", observation_id: str = "obs-1"
) -> dict[str, Any]:
    """A citation observation (spec 5.2) with a correct ``observation_digest``."""
    obs: dict[str, Any] = {
        "citation": {
            "cited_paper": None if cited is None else {"arxiv_id": cited, "title": "Cited"},
            "citing_paper": {"arxiv_id": citing, "title": "Citing"},
            "reference_index": 3,
        },
        "observation_id": observation_id,
    }
    return with_digest(obs)


def with_digest(obs: dict[str, Any]) -> dict[str, Any]:
    rest = {k: v for k, v in obs.items() if k != "observation_digest"}
    return {**rest, "observation_digest": "sha256:" + digest(rest)}


def valid_parts(event_type: str, record_env: dict[str, Any]) -> tuple[str, str, dict[str, Any]]:
    """``(signer name, target, payload)`` of a valid event of ``event_type`` on the record."""
    record = record_of(record_env)
    payload: dict[str, Any]
    if event_type == "graph_snapshot":
        snapshot = {"claims": {"count": 0, "items": []}, "source": dict(record["source"])}
        return "registry", "graph", {"graph_snapshot": snapshot, "verdict_id": None}
    if event_type == "author_attestation":
        return "author", "claim:c1", {"statement": "I wrote this paper."}
    if event_type == "timestamp_anchor":
        payload = {"anchor_kind": "rfc3161", "anchored_sha256": digest(record),
                   "proof_b64": encode_b64(b"proof")}
        return "tsa", "record", payload
    if event_type == "storage_attestation":
        payload = {"byte_size": 1234, "content_sha256": "cd" * 32,
                   "locator": "https://mirror.test.invalid/a.pdf"}
        return "mirror", "record", payload
    if event_type == "citation_signature":
        obs = observation(record["source"]["id"])
        return "indexer", "citation:" + obs["observation_id"], {"observation": obs}
    if event_type == "replication_record":
        return "replicator", "record", {"outcome": "replicated", "report": "It replicates."}
    if event_type == "correction":
        return "registry", "record", {"correction_type": "erratum", "notice": "Fixed a typo."}
    if event_type == "mirror_hint":
        return "mirror", "record", {"locator": "https://mirror.test.invalid/b.pdf"}
    raise ValueError(event_type)


NON_RECORD_TYPES = (
    "graph_snapshot",
    "author_attestation",
    "timestamp_anchor",
    "storage_attestation",
    "citation_signature",
    "replication_record",
    "correction",
    "mirror_hint",
)


def event(
    event_type: str,
    record_env: dict[str, Any],
    created_at: str = LATER,
    *,
    signer: str | None = None,
    target: str | None = None,
    payload: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A signed event about ``record_env``'s pith; valid unless an argument makes it not."""
    default_signer, default_target, default_payload = valid_parts(event_type, record_env)
    return sign_event(
        key(signer or default_signer),
        event_type,
        record_env["pith_number"],
        default_target if target is None else target,
        created_at,
        default_payload if payload is None else payload,
    )


def seal(body: dict[str, Any], signer: str) -> dict[str, Any]:
    """An envelope of ``body`` exactly as given (any shape), with its own event_id and a
    signature by ``signer``'s key over the digest: checks 3 and 6 pass for it."""
    body_digest = digest(body)
    envelope = copy.deepcopy(body)
    envelope["event_id"] = "sha256:" + body_digest
    envelope["signature_b64"] = encode_b64(key(signer).sign(bytes.fromhex(body_digest)))
    return envelope


def reseal(envelope: dict[str, Any], signer: str, **changes: Any) -> dict[str, Any]:
    """``envelope`` with body members changed, re-identified and re-signed by ``signer``."""
    body = copy.deepcopy(body_of(envelope))
    body.update(changes)
    return seal(body, signer)


def reduce_values(values: list[dict[str, Any]], keyring: Keyring = KEYRING) -> dict[str, Any]:
    return reduce_events([admit(v) for v in values], keyring)


def verdict(target: dict[str, Any], *others: dict[str, Any], keyring: Keyring = KEYRING) -> str:
    """What reducing ``others`` and ``target`` makes of ``target``: its reason code, or
    ``"applied"`` or ``"loser"`` (valid, an equivocation loser).

    The pith is also reduced as an append's writing process reduces what its helpers
    judged: each copy decoded without its payload where the checks left hints
    (:func:`light`). Its state must be the same bytes."""
    values = [*others, target]
    results = reduce_values(values, keyring)
    pith = target["pith_number"]
    result = results[pith]
    kept = [light(j) for j in collapse([admit(v) for v in values], keyring).values()]
    again = reduce_pith(pith, [j for j in kept if j.envelope.pith_number == pith])
    if isinstance(result, Reduction):
        assert isinstance(again, Reduction)
        assert render_reduction(again) == render_reduction(result)
    else:
        assert again == result
    event_id = target["event_id"]
    if event_id in result.invalid:
        reason: str = result.invalid[event_id]
        return reason
    if isinstance(result, Pending):
        raise AssertionError("a valid event in a pending pith (it has no chosen record)")
    assert isinstance(result, Reduction)
    if any(e.event_id == event_id for e in result.applied):
        return "applied"
    assert any(event_id in (x.event_id for x in e.events) for e in result.equivocations)
    return "loser"


def light(judged: Judged) -> Judged:
    """A judged copy as an append's helpers hand it over (``append_judging.receive``):
    decoded without its payload, with its spans and check 14 facts, where the checks found
    them (:func:`reduction_hints`); else whole."""
    hints = reduction_hints(judged.envelope, judged.reason)
    if hints is None:
        return judged
    return Judged(readmit_light(judged.envelope.encoded, hints), judged.reason)


def state_seed_bytes() -> bytes:
    return STATE_SEED.read_bytes()


def seed_observations() -> list[dict[str, Any]]:
    doc = parse(CITATION_SEED.read_bytes())
    observations: list[dict[str, Any]] = doc["inbound"] + doc["outbound"]
    return observations


# --- the record the checks' tests speak about (tests/unit/test_checks*.py) ---------------

R = record_event()
"""The valid record every other event speaks about (created at RECORD_AT)."""


def about_r(ev: dict[str, Any], keyring: Any = KEYRING) -> str:
    return verdict(ev, R, keyring=keyring)


def record_parts(record: dict[str, Any] | None = None, **extra: Any) -> tuple[str, dict[str, Any]]:
    payload = {"canonical_record": record or canonical_record(), **extra}
    return prepare_record_created(key("registry"), payload)


def sign_record(pith: str, payload: dict[str, Any], *, signer: str = "registry",
                target: str = "record", created_at: str = RECORD_AT) -> dict[str, Any]:
    return sign_event(key(signer), "record_created", pith, target, created_at, payload)


def envelope_body(ev: dict[str, Any]) -> dict[str, Any]:
    """A deep copy of an envelope's members other than ``event_id`` and ``signature_b64``."""
    return {k: copy.deepcopy(v) for k, v in ev.items() if k not in ("event_id", "signature_b64")}
