"""Generate the conformance vectors of pith-open-graph-merge-v1.

    .venv/bin/python vectors/generate.py [--out DIR]

Writes ``DIR/cases/<case>/`` (keyring.json, events.jsonl, expected.jsonl, pending.json,
intent.json) and ``DIR/index.json``; DIR defaults to this folder. ``DIR/cases`` is replaced
as a whole. Everything is derived from the fixed public test keys of :mod:`pithlog.testing`
and the seed documents in ``seeds/``: Ed25519 signatures are deterministic, shuffling uses
``random.Random`` with fixed seeds, and nothing reads a clock, so a rerun is byte-identical.

Each event is built with an *intent*: ``applied``, ``equivocation_loser``, ``pending`` (its
pith has no valid record, and the event passed checks 1-12) or the reason code it was built
to fail with. Before writing a case the generator reduces it with :mod:`pithlog` and asserts
that every event came out as intended, so the expected files record what the protocol
requires, not merely what the reducer happens to say.

Digests and event ids of the generated events are computed here with the reference JCS
encoder (``rfc8785``), not with :func:`pithlog.protocol.canonical.jcs`.
"""

from __future__ import annotations

import argparse
import base64
import copy
import hashlib
import json
import random
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import rfc8785
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat

from pithlog.protocol.checks import REASONS
from pithlog.protocol.event_types import EVENT_TYPES, prepare_record_created
from pithlog.protocol.events import parse_envelope
from pithlog.protocol.keys import SigningKey, load_keyring
from pithlog.protocol.reduce import Pending, Reduction, collapse, reduce_events
from pithlog.protocol.state import render, state_document
from pithlog.protocol.state_verify import verify_state_document
from pithlog.testing import test_key, test_keyring_entries

HERE = Path(__file__).resolve().parent
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


# --- canonical form, computed with the reference encoder -----------------------------------


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


# --- Ed25519 with a chosen nonce ------------------------------------------------------------
# A second, different, valid signature of one message (spec 7 step 0: two copies of one event
# that both pass checks 1-12), and the malleated form S + L that RFC 8032 verifiers reject.

_P = 2**255 - 19
_L = 2**252 + 27742317777372353535851937790883648493
_D = -121665 * pow(121666, _P - 2, _P) % _P
_SQRT_M1 = pow(2, (_P - 1) // 4, _P)


def _x_of(y: int, sign: int) -> int:
    xx = (y * y - 1) * pow(_D * y * y + 1, _P - 2, _P) % _P
    x = pow(xx, (_P + 3) // 8, _P)
    if (x * x - xx) % _P:
        x = x * _SQRT_M1 % _P
    return _P - x if x & 1 != sign else x


_BY = 4 * pow(5, _P - 2, _P) % _P
_BASE = (_x_of(_BY, 0), _BY)


def _add(p: tuple[int, int], q: tuple[int, int]) -> tuple[int, int]:
    (x1, y1), (x2, y2) = p, q
    t = _D * x1 * x2 * y1 * y2 % _P
    return (
        (x1 * y2 + x2 * y1) * pow(1 + t, _P - 2, _P) % _P,
        (y1 * y2 + x1 * x2) * pow(1 - t, _P - 2, _P) % _P,
    )


def _mul(scalar: int, point: tuple[int, int]) -> tuple[int, int]:
    result = (0, 1)
    while scalar:
        if scalar & 1:
            result = _add(result, point)
        point = _add(point, point)
        scalar >>= 1
    return result


def _encode_point(point: tuple[int, int]) -> bytes:
    x, y = point
    return (y | (x & 1) << 255).to_bytes(32, "little")


def sign_with_nonce(key: SigningKey, message: bytes, salt: bytes) -> bytes:
    """RFC 8032 signing, except that the nonce hash is prefixed with ``salt``.

    With an empty salt this is the standard deterministic signature; any other salt gives
    another signature that verifies just as well.
    """
    seed = key.private_key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
    h = hashlib.sha512(seed).digest()
    a = int.from_bytes(h[:32], "little") & ((1 << 254) - 8) | (1 << 254)
    public = _encode_point(_mul(a, _BASE))
    assert public == key.public_key
    r = int.from_bytes(hashlib.sha512(salt + h[32:] + message).digest(), "little") % _L
    big_r = _encode_point(_mul(r, _BASE))
    k = int.from_bytes(hashlib.sha512(big_r + public + message).digest(), "little") % _L
    return big_r + ((r + k * a) % _L).to_bytes(32, "little")


def malleate(signature: bytes) -> bytes:
    """The same signature with S replaced by S + L (not canonical; RFC 8032 rejects it)."""
    s = int.from_bytes(signature[32:], "little")
    return signature[:32] + (s + _L).to_bytes(32, "little")


# --- building events ------------------------------------------------------------------------


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


# --- a case ---------------------------------------------------------------------------------


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


# --- the cases ------------------------------------------------------------------------------


def load_seed_state() -> dict[str, Any]:
    return json.loads(SEED_STATE.read_bytes())


def load_seed_observations() -> list[dict[str, Any]]:
    doc = json.loads(SEED_CITATIONS.read_bytes())
    return [*doc["inbound"], *doc["outbound"]]


CITED_ID = "2304.11277"
CITATION_RECORD = {
    # Built from the citation record's `paper` member; not a registry-published record.
    "metadata": {
        "cross_cats_sorted": [],
        "primary_cat": "cs.DC",
        "submitted_at": "2023-04-21T23:52:27Z",
        "title": "PyTorch FSDP: Experiences on Scaling Fully Sharded Data Parallel",
    },
    "schema_version": "1.0",
    "source": {"id": CITED_ID, "kind": "arxiv", "version": 2},
}
CITATION_RECORD_AT = "2026-08-01T19:01:47Z"
CITATIONS_AT = "2026-08-11T11:39:00Z"


def seed_events() -> tuple[str, dict[str, Any], dict[str, Any]]:
    """The seed's record_created and graph_snapshot payloads, re-signed by the test registry."""
    seed = load_seed_state()
    rc = seed["current"]["record_created"]
    graph = seed["current"]["graph_snapshots"][0]
    pith, payload = prepare_record_created(REGISTRY, copy.deepcopy(rc["payload"]))
    assert pith == seed["pith_number"]
    for member in (
        "builder_version",
        "first_computed_at",
        "kind",
        "receipt_version",
        "signature_status",
        "signed_at",
        "last_reissued_at",
    ):
        assert payload["receipt"][member] == rc["payload"]["receipt"][member]
    record = make(REGISTRY, "record_created", pith, "record", rc["created_at"], payload)
    snapshot = make(
        REGISTRY,
        "graph_snapshot",
        pith,
        "graph",
        graph["created_at"],
        copy.deepcopy(graph["payload"]),
    )
    return pith, record, snapshot


def case_seed() -> Case:
    case = Case(
        "seed-2411.00284",
        "The published seed state's record_created and graph_snapshot payloads (created_at "
        "kept), re-signed by the test registry key.",
        keyring_doc(),
    )
    pith, record, snapshot = seed_events()
    case.add(record, "applied")
    case.add(snapshot, "applied")
    seed = load_seed_state()

    def same_as_seed(results: dict[str, Reduction | Pending]) -> None:
        state = state_document(_reduction(results[pith]))
        for name in ("canonical_record", "source_aliases"):
            assert state["current"][name] == seed["current"][name], name
        assert (
            state["current"]["graph_snapshots"][0]["payload"]
            == (seed["current"]["graph_snapshots"][0]["payload"])
        )
        for name in ("event_count", "valid_event_count", "invalid_event_count"):
            assert state[name] == seed[name], name

    case.checks.append(same_as_seed)
    return case


def case_citations() -> Case:
    case = Case(
        "citations-2304.11277",
        "All 139 observations of the seed citation record as citation_signature events by the "
        "test indexer on a record for arXiv 2304.11277, plus three derived observations.",
        keyring_doc(),
    )
    record = case.add(record_created(REGISTRY, CITATION_RECORD, CITATION_RECORD_AT), "applied")
    pith = record["pith_number"]
    observations = load_seed_observations()
    assert len(observations) == 139
    for obs in observations:
        intent = "applied" if names_paper(obs, CITED_ID) else "record_mismatch"
        case.add(cite(INDEXER, pith, CITATIONS_AT, obs), intent)

    # Derived observations (new ids, digests recomputed) for the corners the data lacks.
    both = next(
        o
        for o in observations
        if isinstance(o["citation"].get("cited_paper"), dict)
        and isinstance(o["citation"].get("cited_work"), dict)
    )
    only_pith_arxiv_id = copy.deepcopy(both)
    only_pith_arxiv_id["observation_id"] = "derived-pith-arxiv-id-only-" + both["observation_id"]
    only_pith_arxiv_id["citation"]["cited_paper"] = None
    only_pith_arxiv_id["citation"]["cited_work"]["arxiv_id"] = None
    assert only_pith_arxiv_id["citation"]["cited_work"]["pith_arxiv_id"] == CITED_ID
    only_cited_work = copy.deepcopy(both)
    only_cited_work["observation_id"] = "derived-cited-work-only-" + both["observation_id"]
    del only_cited_work["citation"]["cited_paper"]
    not_objects = copy.deepcopy(both)
    not_objects["observation_id"] = "derived-not-objects-" + both["observation_id"]
    not_objects["citation"]["cited_paper"] = CITED_ID
    not_objects["citation"]["cited_work"] = [CITED_ID]
    for obs, intent in (
        (only_pith_arxiv_id, "record_mismatch"),
        (only_cited_work, "applied"),
        (not_objects, "record_mismatch"),
    ):
        obs = redigest(obs)
        assert names_paper(obs, CITED_ID) == (intent == "applied")
        case.add(cite(INDEXER, pith, CITATIONS_AT, obs), intent)
    return case


UNICODE_NAMES = {"\ufb01": "U+FB01", "\U0001d11e": "U+1D11E", "a": 1, "B": -(2**53 - 1)}
"""Member names whose JCS order (UTF-16 code units) differs from code point order."""


def case_all_types() -> Case:
    case = Case(
        "all-event-types",
        "Every one of the nine event types applied validly: extra payload members, claim: and "
        "event: targets, non-ASCII text, and a doi-kind record whose doi alias is lower-cased.",
        keyring_doc(),
    )
    tick = Clock("2026-01-10T08:00:00Z")
    record = arxiv_record(
        "9912.00001",
        3,
        "2025-12-24T10:00:00Z",
        "All nine types: \u00fcnic\u00f6de, \U0001d11e, \u2028 inside",
    )
    rc = case.add(
        record_created(
            REGISTRY,
            record,
            tick(),
            note="extra payload member",
            receipt={"builder_version": "vectors"},
        ),
        "applied",
    )
    pith = rc["pith_number"]
    sha = rc["payload"]["canonical_sha256"]
    source = record["source"]
    at_record = rc["created_at"]  # same instant as R: not earlier, so valid
    case.add(
        make(
            REGISTRY,
            "graph_snapshot",
            pith,
            "graph",
            at_record,
            {"graph_snapshot": {"nodes": [3, 1, 2], "source": dict(source)}, "verdict_id": None},
        ),
        "applied",
    )
    case.add(
        make(
            REGISTRY,
            "graph_snapshot",
            pith,
            "graph",
            tick(),
            {
                "graph_snapshot": {"source": dict(source)},
                "verdict_id": "verdict-7",
                "extra": UNICODE_NAMES,
            },
        ),
        "applied",
    )
    case.add(
        make(
            AUTHOR,
            "author_attestation",
            pith,
            "record",
            tick(),
            {"statement": "I wrote this paper."},
        ),
        "applied",
    )
    case.add(
        make(
            AUTHOR,
            "author_attestation",
            pith,
            "claim:c1",
            tick(),
            {"statement": "Claim c1 holds.", "names": UNICODE_NAMES},
        ),
        "applied",
    )
    case.add(
        make(
            AUTHOR,
            "author_attestation",
            pith,
            'claim:\t\u2028 spaced \U0001d11e"/\\',
            tick(),
            {"statement": "line\u2028separator\u2029paragraph\u0085next\nLF"},
        ),
        "applied",
    )
    case.add(
        make(
            TSA,
            "timestamp_anchor",
            pith,
            "record",
            tick(),
            {"anchor_kind": "rfc3161", "anchored_sha256": sha, "proof_b64": b64(b"proof bytes")},
        ),
        "applied",
    )
    rc_hex = rc["event_id"][len("sha256:") :]
    case.add(
        make(
            REGISTRY,
            "timestamp_anchor",
            pith,
            "event:" + rc["event_id"],
            tick(),
            {"anchor_kind": "registry-log", "anchored_sha256": rc_hex, "proof_b64": ""},
        ),
        "applied",
    )
    case.add(
        make(
            MIRROR,
            "storage_attestation",
            pith,
            "record",
            tick(),
            {"byte_size": 0, "content_sha256": "0" * 64, "locator": "s3://mirror/empty"},
        ),
        "applied",
    )
    case.add(
        make(
            REGISTRY,
            "storage_attestation",
            pith,
            "record",
            tick(),
            {
                "byte_size": 2**53 - 1,
                "content_sha256": "f" * 64,
                "locator": "https://registry.test.invalid/pdf",
            },
        ),
        "applied",
    )
    obs = observation(
        "obs-9912.00001-a",
        {
            "cited_paper": {"arxiv_id": "9912.00001"},
            "cited_work": None,
            "citing_paper": {"arxiv_id": "9912.00002", "pith_arxiv_id": "9912.00002"},
        },
    )
    case.add(cite(INDEXER, pith, tick(), obs), "applied")
    obs_2 = observation(
        "obs-9912.00001-b",
        {"citing_paper": {"arxiv_id": "9912.00001"}},
        note=["kept", "as", "signed"],
    )
    case.add(cite(REGISTRY, pith, tick(), obs_2), "applied")
    case.add(
        make(
            REPLICATOR,
            "replication_record",
            pith,
            "record",
            tick(),
            {"outcome": "replicated", "report": "https://replicator.test.invalid/r/1"},
        ),
        "applied",
    )
    case.add(
        make(
            REGISTRY,
            "replication_record",
            pith,
            "claim:c1",
            tick(),
            {"outcome": "partially_replicated", "report": "r2", "runs": 3},
        ),
        "applied",
    )
    case.add(
        make(
            REPLICATOR,
            "replication_record",
            pith,
            "claim:c2",
            tick(),
            {"outcome": "not_replicated", "report": "r3"},
        ),
        "applied",
    )
    case.add(
        make(
            REPLICATOR,
            "replication_record",
            pith,
            "claim:c3",
            tick(),
            {"outcome": "inconclusive", "report": "r4"},
        ),
        "applied",
    )
    for correction_type in (
        "erratum",
        "retraction",
        "expression_of_concern",
        "withdrawal",
        "reinstatement",
    ):
        case.add(
            make(
                REGISTRY,
                "correction",
                pith,
                "record",
                tick(),
                {"correction_type": correction_type, "notice": f"{correction_type} notice"},
            ),
            "applied",
        )
    case.add(
        make(
            MIRROR,
            "mirror_hint",
            pith,
            "record",
            tick(),
            {"locator": "https://mirror.test.invalid/9912.00001"},
        ),
        "applied",
    )
    case.add(
        make(
            REGISTRY,
            "mirror_hint",
            pith,
            "record",
            tick(),
            {"locator": "ipfs://example", "priority": 0},
        ),
        "applied",
    )

    # A doi-kind record: its doi alias is the id in ASCII lower case (the \u00c4 stays).
    doi_record = {
        "metadata": {"submitted_at": "2019-02-28T23:59:59Z", "title": "A DOI record"},
        "schema_version": "1.0",
        "source": {"id": "10.5555/PithLog.TEST.\u00c4-Mixed", "kind": "doi", "version": 1},
    }
    doi_rc = case.add(record_created(REGISTRY, doi_record, "2026-01-11T00:00:00Z"), "applied")
    doi_pith = doi_rc["pith_number"]
    case.add(
        make(
            MIRROR,
            "mirror_hint",
            doi_pith,
            "record",
            "2026-01-11T00:00:01Z",
            {"locator": "https://doi.org/10.5555/PithLog.TEST.%C3%84-Mixed"},
        ),
        "applied",
    )
    case.add(
        make(
            REGISTRY,
            "graph_snapshot",
            doi_pith,
            "graph",
            "2026-01-11T00:00:02Z",
            {"graph_snapshot": {"source": dict(doi_record["source"])}, "verdict_id": None},
        ),
        "applied",
    )

    def doi_alias(results: dict[str, Reduction | Pending]) -> None:
        state = state_document(_reduction(results[doi_pith]))
        aliases = {a["alias_kind"]: a["alias_value"] for a in state["current"]["source_aliases"]}
        assert aliases["doi"] == "10.5555/pithlog.test.\u00c4-mixed", aliases
        assert "arxiv" not in aliases

    case.checks.append(doi_alias)
    return case


def case_reasons() -> Case:
    case = Case(
        "reasons",
        "One pith with events failing each of the fourteen checks, most in several ways, and "
        "some events failing two checks (the first one is the reason).",
        keyring_doc(
            replicator={"not_before": "2026-01-01T00:00:00Z", "not_after": "2026-12-01T00:00:00Z"}
        ),
    )
    case.keyring["comment"] = "top-level members other than keyring_version and keys are ignored"
    case.keyring["keys"][0]["comment"] = "so are other members of a key"
    tick = Clock("2026-02-01T00:00:00Z")
    record = arxiv_record("9912.00003", 1, "2025-11-30T12:00:00Z", "Reasons")
    rc = case.add(record_created(REGISTRY, record, "2026-01-15T12:00:00Z"), "applied")
    pith = rc["pith_number"]
    sha = rc["payload"]["canonical_sha256"]
    source = record["source"]

    def attest(
        statement: str, at: str | None = None, key: SigningKey = AUTHOR, **kw: Any
    ) -> dict[str, Any]:
        return make(
            key, "author_attestation", pith, "record", at or tick(), {"statement": statement}, **kw
        )

    case.add(attest("valid"), "applied")
    case.add(
        make(
            REGISTRY,
            "graph_snapshot",
            pith,
            "graph",
            tick(),
            {"graph_snapshot": {"source": dict(source)}, "verdict_id": None},
        ),
        "applied",
    )

    # 1 malformed
    e = attest("no signature_b64")
    del e["signature_b64"]
    case.add(e, "malformed")
    e = attest("extra envelope member")
    e["comment"] = "the envelope is closed"
    case.add(resign(e, AUTHOR), "malformed")
    for bad_ts in (
        "2026-02-30T00:00:00Z",
        "2026-02-01T00:00:00+00:00",
        "2026-02-01t00:00:00z",
        "2026-06-30T23:59:60Z",
        "2026-02-01T00:00:00.5Z",
        "2026-02-01T24:00:00Z",
        "0000-01-01T00:00:00Z",
    ):
        case.add(attest("bad created_at", at=bad_ts), "malformed")
    case.add(attest("extra signer member", signer={**AUTHOR.signer, "note": "x"}), "malformed")
    case.add(attest("empty signer_id", signer={**AUTHOR.signer, "signer_id": ""}), "malformed")
    missing = {k: v for k, v in AUTHOR.signer.items() if k != "public_key_fingerprint"}
    case.add(attest("signer without fingerprint", signer=missing), "malformed")
    case.add(attest("signer as string", signer="test-author"), "malformed")
    case.add(make(AUTHOR, "author_attestation", pith, "record", tick(), ["statement"]), "malformed")
    case.add(
        make(AUTHOR, "author_attestation", pith, 7, tick(), {"statement": "int target"}),
        "malformed",
    )
    case.add(make(AUTHOR, None, pith, "record", tick(), {"statement": "null type"}), "malformed")
    e = attest("signature_b64 as a number")
    e["signature_b64"] = 1
    case.add(e, "malformed")
    # 2 unknown_event_type
    for event_type in ("retraction", "Record_Created", "author_attestation ", ""):
        case.add(
            make(AUTHOR, event_type, pith, "record", tick(), {"statement": "?"}),
            "unknown_event_type",
        )
    e = make(AUTHOR, "retraction", pith, "record", tick(), {"statement": "and a bad id"})
    case.add(tamper(e, lambda x: x["payload"].update(statement="changed")), "unknown_event_type")
    # 3 event_id_mismatch
    case.add(
        tamper(
            attest("original statement"),
            lambda x: x["payload"].update(statement="altered statement"),
        ),
        "event_id_mismatch",
    )
    case.add(
        tamper(attest("member added after signing"), lambda x: x["payload"].update(added=True)),
        "event_id_mismatch",
    )
    e = attest("id over a non-canonical encoding")
    text = json.dumps(body_of(e), sort_keys=True).encode()
    e["event_id"] = "sha256:" + hashlib.sha256(text).hexdigest()
    e["signature_b64"] = b64(AUTHOR.sign(hashlib.sha256(text).digest()))
    case.add(e, "event_id_mismatch")
    e = attest("id over the envelope with its signature")
    e["event_id"] = "sha256:" + digest({k: v for k, v in e.items() if k != "event_id"})
    case.add(e, "event_id_mismatch")
    e = attest("id in upper case hex would not pass the door; this one is off by one digit")
    e["event_id"] = e["event_id"][:-1] + ("0" if e["event_id"][-1] != "0" else "1")
    case.add(e, "event_id_mismatch")
    # 4 unknown_key
    case.add(attest("a stranger", key=STRANGER), "unknown_key")
    case.add(
        attest(
            "an unknown key_id",
            signer={**REGISTRY.signer, "key_id": "test-registry-3"},
            key=REGISTRY,
        ),
        "unknown_key",
    )
    # 5 signer_mismatch
    case.add(
        attest("other signer_id", signer={**AUTHOR.signer, "signer_id": "someone.else"}),
        "signer_mismatch",
    )
    case.add(
        attest(
            "other fingerprint",
            signer={**AUTHOR.signer, "public_key_fingerprint": MIRROR.fingerprint},
        ),
        "signer_mismatch",
    )
    case.add(
        attest(
            "fingerprint in upper case",
            signer={**AUTHOR.signer, "public_key_fingerprint": AUTHOR.fingerprint.upper()},
        ),
        "signer_mismatch",
    )
    case.add(
        attest(
            "claims to be the registry", signer={**AUTHOR.signer, "signer_type": "pith_registry"}
        ),
        "signer_mismatch",
    )
    case.add(
        attest("unknown signer type", signer={**AUTHOR.signer, "signer_type": "robot"}),
        "signer_mismatch",
    )
    case.add(
        attest(
            "mismatch and a bad signature too",
            signer={**AUTHOR.signer, "signer_id": "x"},
            sign_with=MIRROR,
        ),
        "signer_mismatch",
    )
    # 6 bad_signature
    case.add(attest("signed by another key", sign_with=REGISTRY), "bad_signature")
    e = attest("63 bytes")
    case.add(
        with_signature(e, b64(AUTHOR.sign(bytes.fromhex(e["event_id"][7:]))[:63])), "bad_signature"
    )
    e = attest("stray bits in the last base64 character")
    sig = e["signature_b64"]
    assert sig.endswith("==")
    stray = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    last = stray.index(sig[-3])
    case.add(with_signature(e, sig[:-3] + stray[last ^ 1] + "=="), "bad_signature")
    e = attest("base64 without padding")
    case.add(with_signature(e, e["signature_b64"].rstrip("=")), "bad_signature")
    at = tick()
    e = next(
        e
        for n in range(64)
        if set("+/") & set((e := attest(f"base64url alphabet {n}", at))["signature_b64"])
    )
    case.add(
        with_signature(e, e["signature_b64"].translate(str.maketrans("+/", "-_"))), "bad_signature"
    )
    e = attest("signature over the hex text of the digest")
    case.add(with_signature(e, b64(AUTHOR.sign(e["event_id"][7:].encode()))), "bad_signature")
    e = attest("signature over the JCS of the body")
    case.add(with_signature(e, b64(AUTHOR.sign(jcs(body_of(e))))), "bad_signature")
    e = attest("malleated S + L")
    raw = AUTHOR.sign(bytes.fromhex(e["event_id"][7:]))
    case.add(with_signature(e, b64(malleate(raw))), "bad_signature")
    case.add(with_signature(attest("empty signature"), ""), "bad_signature")
    e = attest("line break inside the base64")
    case.add(
        with_signature(e, e["signature_b64"][:40] + "\n" + e["signature_b64"][40:]), "bad_signature"
    )

    # 7 key_not_valid (replicator: not_before 2026-01-01, not_after 2026-12-01)
    def replication(at: str, report: str) -> dict[str, Any]:
        return make(
            REPLICATOR,
            "replication_record",
            pith,
            "record",
            at,
            {"outcome": "replicated", "report": report},
        )

    case.add(
        replication("2025-12-31T23:59:59Z", "before not_before (and before R)"), "key_not_valid"
    )
    case.add(replication("2026-12-01T00:00:00Z", "at not_after"), "key_not_valid")
    case.add(replication("2026-01-01T00:00:00Z", "at not_before, but before R"), "predates_record")
    case.add(replication("2026-11-30T23:59:59Z", "last valid second"), "applied")
    # 8 unauthorized_signer
    case.add(
        make(
            AUTHOR,
            "correction",
            pith,
            "record",
            tick(),
            {"correction_type": "retraction", "notice": "n"},
        ),
        "unauthorized_signer",
    )
    case.add(
        make(
            MIRROR,
            "graph_snapshot",
            pith,
            "graph",
            tick(),
            {"graph_snapshot": {"source": dict(source)}, "verdict_id": None},
        ),
        "unauthorized_signer",
    )
    case.add(
        make(
            INDEXER,
            "timestamp_anchor",
            pith,
            "record",
            tick(),
            {"anchor_kind": "k", "anchored_sha256": sha, "proof_b64": "AA=="},
        ),
        "unauthorized_signer",
    )
    case.add(
        attest("the registry may not attest for an author", key=REGISTRY), "unauthorized_signer"
    )
    case.add(
        make(TSA, "record_created", pith, "record", tick(), record_payload(TSA, record)[1]),
        "unauthorized_signer",
    )
    case.add(
        make(AUTHOR, "mirror_hint", pith, "claim:x", tick(), {"locator": ""}), "unauthorized_signer"
    )
    # 9 bad_target
    for event_type, key, target, payload in (
        ("mirror_hint", MIRROR, "claim:x", {"locator": "l"}),
        ("author_attestation", AUTHOR, "claim:", {"statement": "s"}),
        ("author_attestation", AUTHOR, "Record", {"statement": "s"}),
        (
            "timestamp_anchor",
            TSA,
            "event:sha256:" + "A" * 64,
            {"anchor_kind": "k", "anchored_sha256": "a" * 64, "proof_b64": ""},
        ),
        (
            "timestamp_anchor",
            TSA,
            "event:" + "a" * 64,
            {"anchor_kind": "k", "anchored_sha256": "a" * 64, "proof_b64": ""},
        ),
        (
            "timestamp_anchor",
            TSA,
            "event:sha256:" + "a" * 63,
            {"anchor_kind": "k", "anchored_sha256": "a" * 64, "proof_b64": ""},
        ),
        ("citation_signature", INDEXER, "citation:", {"observation": {}}),
        ("graph_snapshot", REGISTRY, "record", {"graph_snapshot": {}, "verdict_id": None}),
        (
            "storage_attestation",
            MIRROR,
            "claim:a",
            {"byte_size": 1, "content_sha256": "a" * 64, "locator": "l"},
        ),
        ("correction", REGISTRY, "claim:c1", {"correction_type": "erratum", "notice": "n"}),
        (
            "replication_record",
            REPLICATOR,
            "event:sha256:" + "a" * 64,
            {"outcome": "replicated", "report": "r"},
        ),
    ):
        case.add(make(key, event_type, pith, target, tick(), payload), "bad_target")
    case.add(
        make(
            REGISTRY, "record_created", pith, "graph", tick(), record_payload(REGISTRY, record)[1]
        ),
        "bad_target",
    )
    # 10 bad_payload
    for event_type, key, target, payload in (
        ("author_attestation", AUTHOR, "record", {"statement": ""}),
        ("author_attestation", AUTHOR, "record", {"statement": ["s"]}),
        ("graph_snapshot", REGISTRY, "graph", {"graph_snapshot": {"source": dict(source)}}),
        (
            "graph_snapshot",
            REGISTRY,
            "graph",
            {"graph_snapshot": {"source": "9912.00003"}, "verdict_id": None},
        ),
        (
            "graph_snapshot",
            REGISTRY,
            "graph",
            {"graph_snapshot": {"source": dict(source)}, "verdict_id": 7},
        ),
        ("graph_snapshot", REGISTRY, "graph", {"graph_snapshot": [], "verdict_id": None}),
        (
            "timestamp_anchor",
            TSA,
            "record",
            {"anchor_kind": "k", "anchored_sha256": sha.upper(), "proof_b64": ""},
        ),
        (
            "timestamp_anchor",
            TSA,
            "record",
            {"anchor_kind": "", "anchored_sha256": sha, "proof_b64": ""},
        ),
        (
            "timestamp_anchor",
            TSA,
            "record",
            {"anchor_kind": "k", "anchored_sha256": sha, "proof_b64": "YR=="},
        ),
        (
            "timestamp_anchor",
            TSA,
            "record",
            {"anchor_kind": "k", "anchored_sha256": sha, "proof_b64": "YQ"},
        ),
        ("timestamp_anchor", TSA, "record", {"anchor_kind": "k", "anchored_sha256": sha}),
        (
            "timestamp_anchor",
            TSA,
            "event:" + rc["event_id"],
            {"anchor_kind": "k", "anchored_sha256": sha, "proof_b64": ""},
        ),
        (
            "storage_attestation",
            MIRROR,
            "record",
            {"byte_size": -1, "content_sha256": "a" * 64, "locator": "l"},
        ),
        (
            "storage_attestation",
            MIRROR,
            "record",
            {"byte_size": True, "content_sha256": "a" * 64, "locator": "l"},
        ),
        (
            "storage_attestation",
            MIRROR,
            "record",
            {"byte_size": "1", "content_sha256": "a" * 64, "locator": "l"},
        ),
        (
            "storage_attestation",
            MIRROR,
            "record",
            {"byte_size": 1, "content_sha256": "A" * 64, "locator": "l"},
        ),
        (
            "storage_attestation",
            MIRROR,
            "record",
            {"byte_size": 1, "content_sha256": "a" * 64, "locator": ""},
        ),
        ("replication_record", REPLICATOR, "record", {"outcome": "succeeded", "report": "r"}),
        ("replication_record", REPLICATOR, "record", {"outcome": "replicated", "report": ""}),
        ("correction", REGISTRY, "record", {"correction_type": "Retraction", "notice": "n"}),
        ("correction", REGISTRY, "record", {"correction_type": "erratum"}),
        ("mirror_hint", MIRROR, "record", {"locator": ""}),
        ("mirror_hint", MIRROR, "record", {"locator": None}),
    ):
        case.add(make(key, event_type, pith, target, tick(), payload), "bad_payload")
    good_obs = observation("obs-r-1", {"cited_paper": {"arxiv_id": "9912.00003"}})
    wrong_digest = {**good_obs, "observation_digest": "sha256:" + "0" * 64}
    case.add(cite(INDEXER, pith, tick(), wrong_digest), "bad_payload")
    case.add(
        make(
            INDEXER,
            "citation_signature",
            pith,
            "citation:obs-r-2",
            tick(),
            {"observation": good_obs},
        ),
        "bad_payload",
    )
    no_citation = observation("obs-r-3", None)
    case.add(cite(INDEXER, pith, tick(), no_citation), "bad_payload")
    case.add(
        make(INDEXER, "citation_signature", pith, "citation:obs-r-4", tick(), {}), "bad_payload"
    )
    _, good = record_payload(REGISTRY, record)
    for change in (
        lambda p: p.pop("attestation_state"),
        lambda p: p.pop("receipt"),
        lambda p: p.update(source_version="1"),
        lambda p: p.update(source_id="9912.00004"),
        lambda p: p.update(attestation_state=None),
        lambda p: p.update(canonical_sha256=None),
        lambda p: p["canonical_record"]["source"].update(version="1"),
        lambda p: p["canonical_record"]["metadata"].update(submitted_at="2025-11-30"),
        lambda p: p["canonical_record"].pop("metadata"),
    ):
        payload = copy.deepcopy(good)
        change(payload)
        case.add(make(REGISTRY, "record_created", pith, "record", tick(), payload), "bad_payload")
    case.add(
        make(AUTHOR, "author_attestation", pith, "claim:", tick(), {"statement": ""}), "bad_target"
    )  # check 9 before check 10
    # 11 pith_number_mismatch
    payload = copy.deepcopy(good)
    payload["canonical_record"]["metadata"]["title"] = "Reasons, edited"
    case.add(
        make(REGISTRY, "record_created", pith, "record", "2026-01-01T00:00:00Z", payload),
        "pith_number_mismatch",
    )
    other_sha = digest(arxiv_record("9912.00003", 2, "2025-11-30T12:00:00Z", "Reasons"))
    payload = copy.deepcopy(good)
    payload["canonical_sha256"] = other_sha
    payload["receipt"]["canonical_sha256"] = other_sha
    payload["receipt"]["signature_b64"] = b64(REGISTRY.sign(bytes.fromhex(other_sha)))
    case.add(
        make(REGISTRY, "record_created", pith, "record", "2026-01-01T00:00:01Z", payload),
        "pith_number_mismatch",
    )
    # 12 bad_receipt (all dated before R: chosen by mistake, they would change everything)
    receipts: list[Callable[[dict[str, Any]], None]] = [
        lambda r: r.update(signature_b64=b64(REGISTRY_2.sign(bytes.fromhex(sha)))),
        lambda r: r.update(key_id=REGISTRY_2.key_id),
        lambda r: r.update(public_key_fingerprint=REGISTRY_2.fingerprint),
        lambda r: r.update(algorithm="Ed25519"),
        lambda r: r.update(signed_message="canonical_sha256_hex"),
        lambda r: r.update(canonical_sha256=sha.upper()),
        lambda r: r.update(signature_b64=b64(REGISTRY.sign(sha.encode()))),
        lambda r: r.pop("signature_b64"),
        lambda r: r.pop("algorithm"),
    ]
    for i, change in enumerate(receipts):
        payload = copy.deepcopy(good)
        change(payload["receipt"])
        case.add(
            make(REGISTRY, "record_created", pith, "record", f"2026-01-02T00:00:{i:02d}Z", payload),
            "bad_receipt",
        )
    payload = copy.deepcopy(good)
    payload["receipt"] = b64(REGISTRY.sign(bytes.fromhex(sha)))
    case.add(
        make(REGISTRY, "record_created", pith, "record", "2026-01-02T00:01:00Z", payload),
        "bad_receipt",
    )
    # 13 predates_record
    case.add(attest("one second before R", at="2026-01-15T11:59:59Z"), "predates_record")
    case.add(
        make(
            REGISTRY,
            "graph_snapshot",
            pith,
            "graph",
            "2026-01-14T00:00:00Z",
            {
                "graph_snapshot": {"source": {"id": "x", "kind": "arxiv", "version": 1}},
                "verdict_id": None,
            },
        ),
        "predates_record",
    )  # check 13 before 14
    case.add(attest("", at="2026-01-14T00:00:00Z"), "bad_payload")  # check 10 before 13
    # 14 record_mismatch
    case.add(
        make(
            REGISTRY,
            "graph_snapshot",
            pith,
            "graph",
            tick(),
            {"graph_snapshot": {"source": {**source, "version": 2}}, "verdict_id": None},
        ),
        "record_mismatch",
    )
    case.add(
        make(
            REGISTRY,
            "graph_snapshot",
            pith,
            "graph",
            tick(),
            {"graph_snapshot": {"source": {**source, "extra": None}}, "verdict_id": None},
        ),
        "record_mismatch",
    )
    case.add(
        make(
            REGISTRY,
            "graph_snapshot",
            pith,
            "graph",
            tick(),
            {"graph_snapshot": {"source": {**source, "version": "1"}}, "verdict_id": None},
        ),
        "record_mismatch",
    )
    case.add(
        make(
            TSA,
            "timestamp_anchor",
            pith,
            "record",
            tick(),
            {"anchor_kind": "k", "anchored_sha256": other_sha, "proof_b64": ""},
        ),
        "record_mismatch",
    )
    seed_obs = load_seed_observations()[0]
    assert not names_paper(seed_obs, "9912.00003")
    case.add(cite(INDEXER, pith, tick(), seed_obs), "record_mismatch")
    pith_only = observation(
        "obs-r-5", {"cited_paper": {"arxiv_id": None, "pith_arxiv_id": "9912.00003"}}
    )
    case.add(cite(INDEXER, pith, tick(), pith_only), "record_mismatch")
    versioned = observation("obs-r-6", {"cited_paper": {"arxiv_id": "9912.00003v1"}})
    case.add(cite(INDEXER, pith, tick(), versioned), "record_mismatch")
    case.add(cite(INDEXER, pith, tick(), good_obs), "applied")
    return case


def case_equivocations() -> Case:
    case = Case(
        "equivocations",
        "Three valid record_created events for one pith (two at one instant), and event slots "
        "holding two and three valid events; near misses that are not equivocations.",
        keyring_doc(),
    )
    record = arxiv_record("9912.00004", 1, "2025-10-01T00:00:00Z", "Equivocations")
    first = record_created(REGISTRY, record, "2026-02-01T00:00:00Z")
    pith = first["pith_number"]
    case.slot(
        first,
        record_created(REGISTRY_2, record, "2026-02-01T00:00:00Z"),
        record_created(REGISTRY, record, "2026-02-02T00:00:00Z", attestation_state="recomputed"),
    )
    bad = record_created(REGISTRY, record, "2026-01-01T00:00:00Z")
    bad["payload"]["receipt"]["signature_b64"] = b64(REGISTRY_2.sign(b"\0" * 32))
    case.add(resign(bad, REGISTRY), "bad_receipt")  # older, invalid: never the chosen record

    at = "2026-03-01T00:00:00Z"
    case.slot(
        *(
            make(AUTHOR, "author_attestation", pith, "record", at, {"statement": s})
            for s in ("It is true.", "It is false.")
        )
    )
    case.slot(
        *(
            make(MIRROR, "mirror_hint", pith, "record", at, {"locator": f"https://m{i}"})
            for i in (1, 2, 3)
        )
    )
    case.slot(
        *(
            make(
                REPLICATOR,
                "replication_record",
                pith,
                "claim:c1",
                at,
                {"outcome": o, "report": "r"},
            )
            for o in ("replicated", "not_replicated")
        )
    )
    # Near misses: another key, another target, another instant, or an invalid rival.
    case.add(
        make(REGISTRY, "mirror_hint", pith, "record", at, {"locator": "https://m1"}), "applied"
    )
    case.add(
        make(
            REPLICATOR,
            "replication_record",
            pith,
            "claim:c2",
            at,
            {"outcome": "replicated", "report": "r"},
        ),
        "applied",
    )
    case.add(
        make(
            AUTHOR,
            "author_attestation",
            pith,
            "record",
            "2026-03-01T00:00:01Z",
            {"statement": "It is true."},
        ),
        "applied",
    )
    case.add(
        make(
            TSA,
            "timestamp_anchor",
            pith,
            "record",
            at,
            {
                "anchor_kind": "k",
                "anchored_sha256": first["payload"]["canonical_sha256"],
                "proof_b64": "AA==",
            },
        ),
        "applied",
    )
    case.add(
        make(
            TSA,
            "timestamp_anchor",
            pith,
            "record",
            at,
            {
                "anchor_kind": "",
                "anchored_sha256": first["payload"]["canonical_sha256"],
                "proof_b64": "AA==",
            },
        ),
        "bad_payload",
    )
    # Between the first and the last record_created: valid, since R is the earliest.
    case.add(
        make(
            AUTHOR,
            "author_attestation",
            pith,
            "claim:early",
            "2026-02-01T12:00:00Z",
            {"statement": "Dated between two record_created events."},
        ),
        "applied",
    )
    # A second pith whose only equivocation is in a claim slot, the slot sorting after it.
    other = arxiv_record("9912.00010", 1, "2025-10-02T00:00:00Z", "Equivocations II")
    rc = case.add(record_created(REGISTRY, other, "2026-02-01T00:00:00Z"), "applied")
    case.slot(
        *(
            make(AUTHOR, "author_attestation", rc["pith_number"], "claim:z", at, {"statement": s})
            for s in ("a", "b", "c")
        )
    )
    case.slot(
        *(
            make(AUTHOR, "author_attestation", rc["pith_number"], "claim:a", at, {"statement": s})
            for s in ("a", "b")
        )
    )
    return case


def case_step0() -> Case:
    case = Case(
        "step0-copies",
        "Section 7 step 0: several envelopes under one event_id (forged, re-signed, malleated, "
        "altered, in other piths); the preferred copy decides validity, reason and pith.",
        keyring_doc(replicator={"not_after": "2026-01-01T00:00:00Z"}),
    )
    p_record = arxiv_record("9912.00005", 1, "2025-09-01T00:00:00Z", "Step zero P")
    q_record = arxiv_record("9912.00006", 1, "2025-09-02T00:00:00Z", "Step zero Q")
    z_record = arxiv_record("9912.00011", 1, "2025-09-03T00:00:00Z", "Step zero Z")
    w_record = arxiv_record("9912.00015", 1, "2025-09-04T00:00:00Z", "Step zero W")
    p_rc = record_created(REGISTRY, p_record, "2026-02-01T00:00:00Z")
    q_rc = record_created(REGISTRY, q_record, "2026-02-01T00:00:00Z")
    p, q, z, w = p_rc["pith_number"], q_rc["pith_number"], pith_of(z_record), pith_of(w_record)
    case.absent_piths.append(w)
    tick = Clock("2026-03-01T00:00:00Z")

    def forged(e: dict[str, Any], key: SigningKey = REGISTRY_2) -> dict[str, Any]:
        return with_signature(e, b64(key.sign(bytes.fromhex(e["event_id"][7:]))))

    def move(e: dict[str, Any], pith: str) -> dict[str, Any]:
        return tamper(e, lambda x: x.update(pith_number=pith))

    # The records, each with a forged copy.
    case.add(p_rc, "applied", p)
    case.copy_of(forged(p_rc))
    case.add(q_rc, "applied", q)
    case.copy_of(forged(q_rc, STRANGER))

    # a: valid original; copies signed by another key, and with an extra envelope member.
    e = case.add(
        make(AUTHOR, "author_attestation", p, "record", tick(), {"statement": "a"}), "applied", p
    )
    case.copy_of(forged(e))
    case.copy_of({**e, "comment": "extra member"})
    # b: two different valid signatures of one body: both pass, the smaller JCS is kept.
    e = make(AUTHOR, "author_attestation", p, "record", tick(), {"statement": "b"})
    message = bytes.fromhex(e["event_id"][7:])
    assert sign_with_nonce(AUTHOR, message, b"") == AUTHOR.sign(message)
    other = with_signature(e, b64(sign_with_nonce(AUTHOR, message, b"another nonce")))
    assert other["signature_b64"] != e["signature_b64"]
    AUTHOR.private_key.public_key().verify(
        sign_with_nonce(AUTHOR, message, b"another nonce"), message
    )
    case.add(e, "applied", p)
    case.copy_of(other)
    # c: bad_signature copies of every kind beside the valid original.
    e = case.add(make(MIRROR, "mirror_hint", p, "record", tick(), {"locator": "c"}), "applied", p)
    raw = MIRROR.sign(bytes.fromhex(e["event_id"][7:]))
    case.copy_of(with_signature(e, b64(malleate(raw))))
    case.copy_of(with_signature(e, b64(raw[:63])))
    case.copy_of(with_signature(e, b64(raw) + "AA=="))
    case.copy_of(with_signature(e, ""))
    # d: every copy fails; the original fails latest (check 7, key_not_valid).
    e = make(
        REPLICATOR,
        "replication_record",
        p,
        "record",
        tick(),
        {"outcome": "replicated", "report": "d"},
    )
    case.add(e, "key_not_valid", p)
    case.copy_of(forged(e))  # 6
    case.copy_of(tamper(e, lambda x: x["payload"].update(report="d2")))  # 3
    case.copy_of({k: v for k, v in e.items() if k != "signature_b64"})  # 1
    # e: a record_created that fails check 12, dated before P's record; copies fail earlier.
    bad_rc = record_created(REGISTRY, p_record, "2026-01-01T00:00:00Z")
    bad_rc["payload"]["receipt"]["signature_b64"] = b64(REGISTRY.sign(b"\1" * 32))
    bad_rc = resign(bad_rc, REGISTRY)
    case.add(bad_rc, "bad_receipt", p)
    case.copy_of(forged(bad_rc))  # 6
    case.copy_of(tamper(bad_rc, lambda x: x["payload"].update(attestation_state="x")))  # 3
    case.copy_of(move(bad_rc, q))  # 3, in Q
    # f: two copies failing at one check (3) in P and in Q: the smaller JCS decides the pith.
    e = make(AUTHOR, "author_attestation", p, "record", tick(), {"statement": "f"})
    altered = tamper(e, lambda x: x["payload"].update(statement="f, altered"))
    copies = [altered, move(altered, q)]
    smallest = min(copies, key=jcs)
    case.add(copies[0], "event_id_mismatch", smallest["pith_number"])
    case.copy_of(copies[1])
    # g: a valid original in P; copies moved to Q and to W fail check 3 and vanish: W, named
    # by no other event, has neither a state nor a pending entry.
    e = case.add(make(MIRROR, "mirror_hint", p, "record", tick(), {"locator": "g"}), "applied", p)
    case.copy_of(move(e, q))
    case.copy_of(move(e, w))
    # h: the original in P fails check 2; a copy in Q with a known type fails later (check
    # 3), so the event is Q's, with reason event_id_mismatch.
    e = make(AUTHOR, "author_attestation_v2", p, "record", tick(), {"statement": "h"})
    case.add(
        tamper(e, lambda x: x.update(pith_number=q, event_type="author_attestation")),
        "event_id_mismatch",
        q,
    )
    case.copy_of(e)
    # i: copies in Z only, all failing: Z is pending with this one event.
    e = make(AUTHOR, "author_attestation", z, "record", tick(), {"statement": "i"})
    case.add(forged(e), "bad_signature", z)
    case.copy_of(tamper(forged(e), lambda x: x.pop("target")))
    return case


def case_pending() -> Case:
    case = Case(
        "pending",
        "Piths with events but no valid record_created: no state document, only a pending "
        "entry (expected.jsonl is empty).",
        keyring_doc(),
    )
    record = arxiv_record("9912.00007", 1, "2025-08-01T00:00:00Z", "Pending")
    pith, good = record_payload(REGISTRY, record)
    bad_receipt = copy.deepcopy(good)
    bad_receipt["receipt"]["key_id"] = REGISTRY_2.key_id
    case.add(
        make(REGISTRY, "record_created", pith, "record", "2026-01-01T00:00:00Z", bad_receipt),
        "bad_receipt",
    )
    wrong_sha = copy.deepcopy(good)
    wrong_sha["canonical_sha256"] = "0" * 64
    case.add(
        make(REGISTRY, "record_created", pith, "record", "2026-01-01T00:00:01Z", wrong_sha),
        "pith_number_mismatch",
    )
    case.add(
        make(
            AUTHOR,
            "record_created",
            pith,
            "record",
            "2026-01-01T00:00:02Z",
            record_payload(AUTHOR, record)[1],
        ),
        "unauthorized_signer",
    )
    case.add(
        make(
            REGISTRY,
            "record_created",
            pith,
            "record",
            "2026-01-01T00:00:03Z",
            good,
            sign_with=REGISTRY_2,
        ),
        "bad_signature",
    )
    case.add(
        make(
            STRANGER,
            "record_created",
            pith,
            "record",
            "2026-01-01T00:00:04Z",
            record_payload(STRANGER, record)[1],
        ),
        "unknown_key",
    )
    # Events that pass checks 1-12 are held: checks 13-14 need a record.
    case.add(
        make(
            AUTHOR,
            "author_attestation",
            pith,
            "record",
            "2026-01-02T00:00:00Z",
            {"statement": "held"},
        ),
        "pending",
    )
    case.add(
        make(
            REGISTRY,
            "graph_snapshot",
            pith,
            "graph",
            "2025-01-01T00:00:00Z",
            {"graph_snapshot": {"source": {"id": "other"}}, "verdict_id": None},
        ),
        "pending",
    )
    case.add(
        make(MIRROR, "mirror_hint", pith, "record", "2026-01-02T00:00:00Z", {"locator": ""}),
        "bad_payload",
    )
    # A record_created whose pith_number has the wrong year: alone in its own pith.
    year_record = arxiv_record("9912.00012", 1, "2024-06-01T00:00:00Z", "Wrong year")
    year_pith = "pith:2025:" + pith_of(year_record)[10:]
    _, payload = record_payload(REGISTRY, year_record)
    case.add(
        make(REGISTRY, "record_created", year_pith, "record", "2026-01-01T00:00:00Z", payload),
        "pith_number_mismatch",
    )
    # A pith with no record_created at all.
    lone = pith_of(arxiv_record("9912.00013", 1, "2024-06-02T00:00:00Z", "No record"))
    case.add(
        make(
            MIRROR,
            "mirror_hint",
            lone,
            "record",
            "2026-01-03T00:00:00Z",
            {"locator": "https://mirror.test.invalid/lone"},
        ),
        "pending",
    )
    case.add(
        make(
            MIRROR,
            "mirror_hint",
            lone,
            "record",
            "2026-01-03T00:00:00Z",
            {"locator": "https://mirror.test.invalid/lone-2"},
        ),
        "pending",
    )
    return case


def case_mixed() -> Case:
    case = Case(
        "mixed-piths",
        "Four piths in one file: the seed record, arXiv 2304.11277 with some real citations, "
        "real citations wrongly aimed at the seed record, a handle-kind record, a pending pith.",
        keyring_doc(),
    )
    seed_pith, seed_rc, seed_graph = seed_events()
    case.add(seed_rc, "applied")
    case.add(seed_graph, "applied")
    cit = case.add(record_created(REGISTRY, CITATION_RECORD, CITATION_RECORD_AT), "applied")
    observations = load_seed_observations()
    for obs in observations[:3] + observations[100:103]:
        case.add(cite(INDEXER, cit["pith_number"], CITATIONS_AT, obs), "applied")
    for obs in observations[3:5] + observations[103:105]:
        assert not names_paper(obs, "2411.00284")
        case.add(cite(INDEXER, seed_pith, CITATIONS_AT, obs), "record_mismatch")
    handle = {
        "metadata": {"submitted_at": "2021-05-05T05:05:05Z"},
        "schema_version": "1.0",
        "source": {"id": "20.500.12345/ABC", "kind": "handle", "version": 0},
    }
    h_rc = case.add(record_created(REGISTRY, handle, "2026-01-05T00:00:00Z"), "applied")
    case.add(
        make(
            MIRROR,
            "mirror_hint",
            h_rc["pith_number"],
            "record",
            "2026-01-05T00:00:00Z",
            {"locator": "https://hdl.handle.net/20.500.12345/ABC"},
        ),
        "applied",
    )
    case.add(
        make(
            REGISTRY,
            "correction",
            h_rc["pith_number"],
            "record",
            "2026-01-06T00:00:00Z",
            {"correction_type": "withdrawal", "notice": "withdrawn"},
        ),
        "applied",
    )
    lone = pith_of(arxiv_record("9912.00014", 1, "2020-01-01T00:00:00Z", "Mixed pending"))
    case.add(
        make(
            AUTHOR,
            "author_attestation",
            lone,
            "record",
            "2026-01-01T00:00:00Z",
            {"statement": "waiting for a record"},
        ),
        "pending",
    )
    case.add(
        make(
            AUTHOR, "author_attestation", lone, "record", "2026-01-01T00:00:01Z", {"statement": ""}
        ),
        "bad_payload",
    )

    def handle_aliases(results: dict[str, Reduction | Pending]) -> None:
        state = state_document(_reduction(results[h_rc["pith_number"]]))
        kinds = [a["alias_kind"] for a in state["current"]["source_aliases"]]
        assert kinds == ["pith_short_12", "pith_short_16", "pith_short_8"], kinds

    case.checks.append(handle_aliases)
    return case


def case_revoked() -> Case:
    case = Case(
        "revoked-key",
        "Keys with revoked_at, not_before and not_after: events before a revocation stay valid "
        "(the record itself among them), events at or after it fail key_not_valid.",
        keyring_doc(
            registry_2={"revoked_at": "2026-02-01T00:00:00Z"},
            tsa={"revoked_at": "2026-03-01T00:00:00Z"},
            mirror={"not_before": "2026-02-01T00:00:00Z"},
            author={
                "not_before": "2025-01-01T00:00:00Z",
                "not_after": "2026-06-01T00:00:00Z",
                "revoked_at": "2026-05-01T00:00:00Z",
            },
        ),
    )
    record = arxiv_record("9912.00008", 1, "2025-07-01T00:00:00Z", "Revoked")
    rc = case.add(record_created(REGISTRY_2, record, "2026-01-20T00:00:00Z"), "applied")
    pith, sha = rc["pith_number"], rc["payload"]["canonical_sha256"]
    late_rc = record_created(REGISTRY_2, record, "2026-02-01T00:00:00Z")
    case.add(late_rc, "key_not_valid")

    def graph(key: SigningKey, at: str) -> dict[str, Any]:
        return make(
            key,
            "graph_snapshot",
            pith,
            "graph",
            at,
            {"graph_snapshot": {"source": dict(record["source"])}, "verdict_id": None},
        )

    case.add(graph(REGISTRY_2, "2026-01-31T23:59:59Z"), "applied")
    case.add(graph(REGISTRY_2, "2026-02-01T00:00:00Z"), "key_not_valid")
    case.add(graph(REGISTRY, "2026-02-01T00:00:00Z"), "applied")

    def anchor(at: str) -> dict[str, Any]:
        return make(
            TSA,
            "timestamp_anchor",
            pith,
            "record",
            at,
            {"anchor_kind": "rfc3161", "anchored_sha256": sha, "proof_b64": "AA=="},
        )

    case.add(anchor("2026-02-28T23:59:59Z"), "applied")
    case.add(anchor("2026-03-01T00:00:00Z"), "key_not_valid")
    case.add(anchor("2026-04-01T00:00:00Z"), "key_not_valid")
    case.add(anchor("2026-01-01T00:00:00Z"), "predates_record")  # key valid, event too early

    def hint(at: str) -> dict[str, Any]:
        return make(MIRROR, "mirror_hint", pith, "record", at, {"locator": at})

    case.add(hint("2026-01-31T23:59:59Z"), "key_not_valid")
    case.add(hint("2026-02-01T00:00:00Z"), "applied")

    def attest(at: str) -> dict[str, Any]:
        return make(AUTHOR, "author_attestation", pith, "record", at, {"statement": at})

    case.add(attest("2026-04-30T23:59:59Z"), "applied")
    case.add(attest("2026-05-01T00:00:00Z"), "key_not_valid")
    case.add(attest("2026-06-01T00:00:00Z"), "key_not_valid")
    case.add(attest("2024-12-31T23:59:59Z"), "key_not_valid")  # check 7 before check 13
    return case


def case_predates() -> Case:
    case = Case(
        "predates-record",
        "Check 13 against the chosen record: the earliest valid record_created, not an older "
        "invalid one nor a later valid one; check order around it.",
        keyring_doc(),
    )
    record = arxiv_record("9912.00009", 1, "2025-06-01T00:00:00Z", "Predates")
    r_at = "2026-03-01T12:00:00Z"
    first = record_created(REGISTRY, record, r_at)
    pith, sha = first["pith_number"], first["payload"]["canonical_sha256"]
    case.slot(first, record_created(REGISTRY, record, "2026-03-05T00:00:00Z", note="later"))
    older = record_created(REGISTRY, record, "2026-02-01T00:00:00Z")
    older["payload"]["receipt"]["algorithm"] = "ed448"
    case.add(resign(older, REGISTRY), "bad_receipt")

    def attest(at: str, statement: str = "s") -> dict[str, Any]:
        return make(AUTHOR, "author_attestation", pith, "record", at, {"statement": statement})

    case.add(attest("2026-03-01T11:59:59Z"), "predates_record")
    case.add(attest("2026-02-15T00:00:00Z"), "predates_record")  # after the invalid record
    case.add(attest("2001-01-01T00:00:00Z"), "predates_record")
    case.add(attest(r_at), "applied")
    case.add(attest("2026-03-03T00:00:00Z"), "applied")  # between the two valid records
    case.add(attest("2026-03-01T11:00:00Z", ""), "bad_payload")  # check 10 before 13
    case.add(
        make(
            REGISTRY,
            "graph_snapshot",
            pith,
            "graph",
            "2026-03-01T00:00:00Z",
            {
                "graph_snapshot": {"source": {"id": "other", "kind": "arxiv", "version": 1}},
                "verdict_id": None,
            },
        ),
        "predates_record",
    )  # check 13 before 14
    case.add(
        make(
            TSA,
            "timestamp_anchor",
            pith,
            "record",
            "2026-03-01T00:00:00Z",
            {"anchor_kind": "k", "anchored_sha256": sha, "proof_b64": ""},
        ),
        "predates_record",
    )
    case.add(
        make(
            TSA,
            "timestamp_anchor",
            pith,
            "record",
            "2026-03-02T00:00:00Z",
            {"anchor_kind": "k", "anchored_sha256": sha, "proof_b64": ""},
        ),
        "applied",
    )
    case.add(
        make(
            TSA,
            "timestamp_anchor",
            pith,
            "record",
            "2026-03-02T00:00:01Z",
            {"anchor_kind": "k", "anchored_sha256": "e" * 64, "proof_b64": ""},
        ),
        "record_mismatch",
    )
    return case


CASES: tuple[Callable[[], Case], ...] = (
    case_seed,
    case_citations,
    case_all_types,
    case_reasons,
    case_equivocations,
    case_step0,
    case_pending,
    case_mixed,
    case_revoked,
    case_predates,
)


# --- reducing, checking intent, writing -----------------------------------------------------


def _reduction(result: Reduction | Pending) -> Reduction:
    assert isinstance(result, Reduction), result
    return result


def outcomes(
    results: dict[str, Reduction | Pending], pith_of_event: dict[str, str]
) -> dict[str, str]:
    """event_id -> what became of it, read off the reducer's result."""
    found: dict[str, str] = {}
    for pith, result in results.items():
        if isinstance(result, Pending):
            members = [e for e, p in pith_of_event.items() if p == pith]
            assert len(members) == result.event_count
            for event_id in members:
                found[event_id] = result.invalid.get(event_id, "pending")
            continue
        for envelope in result.applied:
            found[envelope.event_id] = "applied"
        for equivocation in result.equivocations:
            for envelope in equivocation.events[1:]:
                found[envelope.event_id] = "equivocation_loser"
        found.update(result.invalid)
    return found


def _styles(value: Any, style: int, rng: random.Random) -> bytes:
    """Another encoding of the same JSON value (a repeated line need not repeat its bytes)."""
    if style == 0:
        return jcs(value)
    if style == 1:  # members in another order, spaces after separators, raw UTF-8
        return json.dumps(
            _shuffled(value, rng), ensure_ascii=False, separators=(", ", ": ")
        ).encode()
    if style == 2:  # ASCII only: \u escapes (surrogate pairs above U+FFFF), and \/
        return json.dumps(value, ensure_ascii=True).replace("/", "\\/").encode()
    # leading and trailing JSON whitespace, CR included
    return b" \t" + json.dumps(_shuffled(value, rng), ensure_ascii=False).encode() + b" \r"


def _shuffled(value: Any, rng: random.Random) -> Any:
    if isinstance(value, dict):
        names = list(value)
        rng.shuffle(names)
        return {n: _shuffled(value[n], rng) for n in names}
    if isinstance(value, list):
        return [_shuffled(v, rng) for v in value]
    return value


def event_lines(case: Case) -> list[bytes]:
    """The case's envelopes, one per line, with repeats (some re-encoded), shuffled."""
    rng = random.Random(int.from_bytes(hashlib.sha256(case.name.encode()).digest()[:8], "big"))
    lines = [jcs(e) for e in case.envelopes]
    for envelope in case.envelopes:
        if rng.random() < 0.3:
            line = _styles(envelope, rng.randrange(4), rng)
            assert jcs(json.loads(line)) == jcs(envelope)
            lines.append(line)
    rng.shuffle(lines)
    for line in lines:
        assert b"\n" not in line
    return lines


def dump_json(value: Any) -> bytes:
    return (json.dumps(value, indent=2, ensure_ascii=False) + "\n").encode()


@dataclass
class Built:
    files: dict[str, bytes]
    reasons: set[str]
    description: str
    summary: dict[str, Any]


def build(case: Case) -> Built:
    """Reduce the case, assert the result is what its events were built for, render it."""
    keyring_bytes = dump_json(case.keyring)
    lines = event_lines(case)
    keyring = load_keyring(keyring_bytes)
    envelopes = [parse_envelope(line) for line in lines]
    results = reduce_events(envelopes, keyring)
    kept = collapse(envelopes, keyring)
    pith_of_event = {event_id: judged.envelope.pith_number for event_id, judged in kept.items()}

    found = outcomes(results, pith_of_event)
    if found != case.intent:
        wrong = {
            e: (case.intent.get(e), found.get(e))
            for e in sorted(set(found) | set(case.intent))
            if found.get(e) != case.intent.get(e)
        }
        raise AssertionError(f"case {case.name}: intent (left) vs reduction (right): {wrong}")
    for event_id, pith in case.home.items():
        assert pith_of_event[event_id] == pith, (case.name, event_id, pith)
    for pith in case.absent_piths:
        assert pith not in results, (case.name, pith)
    for check in case.checks:
        check(results)

    expected = b""
    pending: list[str] = []
    for pith, result in results.items():  # sorted by pith_number
        if isinstance(result, Pending):
            pending.append(pith)
            continue
        line = render(state_document(result))
        assert verify_state_document(line) == [], (case.name, pith)
        expected += line + b"\n"
    files = {
        "keyring.json": keyring_bytes,
        "events.jsonl": b"".join(line + b"\n" for line in lines),
        "expected.jsonl": expected,
        "pending.json": dump_json(pending),
        "intent.json": dump_json(dict(sorted(case.intent.items()))),
    }
    summary = {
        "name": case.name,
        "description": case.description,
        "events": len(case.intent),
        "envelopes": len(case.envelopes),
        "lines": len(lines),
        "states": len(results) - len(pending),
        "pending": len(pending),
    }
    return Built(files, set(case.intent.values()), case.description, summary)


def generate(out_dir: Path) -> None:
    """Write ``out_dir/cases/*`` (replacing that folder) and ``out_dir/index.json``."""
    out_dir = Path(out_dir)
    built = [build(make_case()) for make_case in CASES]
    names = [b.summary["name"] for b in built]
    assert len(set(names)) == len(names)
    covered = set().union(*(b.reasons for b in built))
    missing = [r for r in REASONS if r not in covered]
    assert not missing, f"no case fails with {missing}"
    applied_types: set[str] = set()
    for b in built:
        for line in b.files["expected.jsonl"].split(b"\n")[:-1]:
            current = json.loads(line)["current"]
            applied_types.update(t.name for t in EVENT_TYPES.values() if current[t.state_list])
    assert applied_types == set(EVENT_TYPES), sorted(set(EVENT_TYPES) - applied_types)

    cases_dir = out_dir / "cases"
    if cases_dir.exists():
        shutil.rmtree(cases_dir)
    for b in built:
        folder = cases_dir / b.summary["name"]
        folder.mkdir(parents=True)
        for filename, data in b.files.items():
            (folder / filename).write_bytes(data)
    index = {
        "merge_version": "pith-open-graph-merge-v1",
        "generator": "vectors/generate.py",
        "cases": [b.summary for b in built],
    }
    (out_dir / "index.json").write_bytes(dump_json(index))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--out",
        type=Path,
        default=HERE,
        help="output folder (default: the vectors folder); its cases/ is replaced",
    )
    args = parser.parse_args(argv)
    generate(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
