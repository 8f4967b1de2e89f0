"""Building events (envelopes sealed with the test keys), the records and
observations they carry, and a case: its events, each with the outcome it was built for.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from casegen.common import OUTCOMES, b64, digest, jcs, pith_of
from pithlog.protocol.event_types import prepare_record_created
from pithlog.protocol.keys import SigningKey
from pithlog.protocol.reduce import Pending, Reduction
from pithlog.testing import test_keyring_entries


def body_of(envelope: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in envelope.items() if k not in ("event_id", "signature_b64")}


def seal(body: dict[str, Any], key: SigningKey) -> dict[str, Any]:
    """An envelope of ``body``: event_id over the body, ``key``'s signature of its digest."""
    body_digest = digest(body)
    envelope = dict(body)
    envelope["event_id"] = "sha256:" + body_digest
    envelope["signature_b64"] = b64(key.sign(bytes.fromhex(body_digest)))
    return envelope


def make(
    key: SigningKey,
    event_type: str,
    pith: str,
    target: str,
    created_at: str,
    payload: Any,
    *,
    signer: Any = None,
    sign_with: SigningKey | None = None,
) -> dict[str, Any]:
    body = {
        "created_at": created_at,
        "event_type": event_type,
        "payload": payload,
        "pith_number": pith,
        "signer": key.signer if signer is None else signer,
        "target": target,
    }
    return seal(body, sign_with or key)


def resign(envelope: dict[str, Any], key: SigningKey) -> dict[str, Any]:
    """Recompute event_id over the (changed) body and sign again."""
    return seal(body_of(envelope), key)


def tamper(envelope: dict[str, Any], change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    """A copy whose body is changed after signing: event_id and signature are the old ones."""
    copied = copy.deepcopy(envelope)
    change(copied)
    return copied


def with_signature(envelope: dict[str, Any], signature_b64: str) -> dict[str, Any]:
    copied = dict(envelope)
    copied["signature_b64"] = signature_b64
    return copied


def record_payload(
    key: SigningKey, record: dict[str, Any], **extra: Any
) -> tuple[str, dict[str, Any]]:
    """A filled record_created payload (spec 5.1), receipt signed by ``key``."""
    pith, payload = prepare_record_created(key, {"canonical_record": record, **extra})
    assert pith == pith_of(record)
    return pith, payload


def record_created(
    key: SigningKey, record: dict[str, Any], created_at: str, **extra: Any
) -> dict[str, Any]:
    pith, payload = record_payload(key, record, **extra)
    return make(key, "record_created", pith, "record", created_at, payload)


def arxiv_record(arxiv_id: str, version: int, submitted_at: str, title: str) -> dict[str, Any]:
    """A synthetic canonical record shaped like the seed's (ids 9912.x cannot be real)."""
    return {
        "metadata": {
            "cross_cats_sorted": [],
            "primary_cat": "cs.DC",
            "submitted_at": submitted_at,
            "title": title,
        },
        "schema_version": "1.0",
        "source": {"id": arxiv_id, "kind": "arxiv", "version": version},
    }


def observation(observation_id: str, citation: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """A citation observation (spec 5.2) with its digest computed."""
    obs = {"citation": citation, "observation_id": observation_id, **extra}
    obs["observation_digest"] = "sha256:" + digest(obs)
    return obs


def redigest(obs: dict[str, Any]) -> dict[str, Any]:
    rest = {k: v for k, v in obs.items() if k != "observation_digest"}
    return {**rest, "observation_digest": "sha256:" + digest(rest)}


def names_paper(obs: dict[str, Any], paper_id: str) -> bool:
    """Spec 5.2, the generator's own reading: a non-null string arxiv_id of one side."""
    citation = obs["citation"]
    for side in ("citing_paper", "cited_paper", "cited_work"):
        paper = citation.get(side)
        if isinstance(paper, dict) and paper.get("arxiv_id") == paper_id:
            return True
    return False


def cite(key: SigningKey, pith: str, created_at: str, obs: dict[str, Any]) -> dict[str, Any]:
    return make(
        key,
        "citation_signature",
        pith,
        "citation:" + obs["observation_id"],
        created_at,
        {"observation": obs},
    )


class Clock:
    """Distinct, increasing ts values (so that events never share a slot by accident)."""

    def __init__(self, start: str) -> None:
        self.day = start[:11]
        self.seconds = int(start[11:13]) * 3600 + int(start[14:16]) * 60 + int(start[17:19])

    def __call__(self) -> str:
        s = self.seconds
        self.seconds += 1
        return f"{self.day}{s // 3600:02d}:{s // 60 % 60:02d}:{s % 60:02d}Z"


@dataclass
class Case:
    name: str
    description: str
    keyring: dict[str, Any]
    envelopes: list[dict[str, Any]] = field(default_factory=list)
    intent: dict[str, str] = field(default_factory=dict)
    home: dict[str, str] = field(default_factory=dict)
    """event_id -> the pith whose state or pending list must hold it (step 0 across piths)."""
    absent_piths: list[str] = field(default_factory=list)
    """Piths named only by copies that lose step 0: no state, not pending."""
    checks: list[Callable[[dict[str, Reduction | Pending]], None]] = field(default_factory=list)

    def add(self, envelope: dict[str, Any], intent: str, home: str | None = None) -> dict[str, Any]:
        assert intent in OUTCOMES, intent
        event_id = envelope["event_id"]
        if event_id in self.intent:
            assert self.intent[event_id] == intent, (event_id, intent)
        self.intent[event_id] = intent
        if home is not None:
            self.home[event_id] = home
        assert all(jcs(e) != jcs(envelope) for e in self.envelopes), "same envelope twice"
        self.envelopes.append(envelope)
        return envelope

    def copy_of(self, envelope: dict[str, Any]) -> None:
        """Another envelope under an event_id already added (spec 7 step 0)."""
        assert envelope["event_id"] in self.intent
        assert all(jcs(e) != jcs(envelope) for e in self.envelopes), "same envelope twice"
        self.envelopes.append(envelope)

    def slot(self, *envelopes: dict[str, Any]) -> None:
        """Valid events meant to share one slot: the smallest (created_at, event_id) wins."""
        winner = min(envelopes, key=lambda e: (e["created_at"], e["event_id"]))
        for envelope in envelopes:
            self.add(envelope, "applied" if envelope is winner else "equivocation_loser")


def keyring_doc(**overrides: dict[str, Any]) -> dict[str, Any]:
    return {"keyring_version": "1", "keys": test_keyring_entries(**overrides)}


def as_reduction(result: Reduction | Pending) -> Reduction:
    """A pith's reduction, for a case's checks of a pith that has a record (not pending)."""
    assert isinstance(result, Reduction), result
    return result
