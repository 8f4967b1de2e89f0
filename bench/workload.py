"""Deterministic, realistic signed events for benchmarks.

Seed-shaped: a record per pith (the seed's canonical_record with its source id varied),
graph snapshots carrying the seed's snapshot payload, citation signatures carrying the 139
real seed observations (their citing/cited arxiv ids rewritten to the pith's paper and the
digest recomputed, so they are valid), and every other event type. Signed with the fixed
public test keys, so every run measures the same bytes.

Two workloads: :func:`mixed`, every line in JCS (what ``pithlog sign`` writes), and
:func:`registry`, what a registry receives: citation-heavy, piths of very different sizes,
and each line in one of the forms producers write (:data:`FORMS`, mostly compact JSON in
the producer's own member order).
"""

from __future__ import annotations

import copy
import json
import random
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pithlog.protocol.canonical import digest, jcs
from pithlog.protocol.event_types import prepare_record_created
from pithlog.protocol.events import sign_event
from pithlog.testing import test_key

ROOT = Path(__file__).resolve().parent.parent
SEEDS = ROOT / "vectors" / "seeds"

_STATE = json.loads((SEEDS / "state-2411.00284.json").read_bytes())
_CITATIONS = json.loads((SEEDS / "citation-record-2304.11277.json").read_bytes())
OBSERVATIONS: list[dict[str, Any]] = _CITATIONS["inbound"] + _CITATIONS["outbound"]
SNAPSHOT: dict[str, Any] = _STATE["current"]["graph_snapshots"][0]["payload"]
RECORD: dict[str, Any] = _STATE["current"]["canonical_record"]

REGISTRY = test_key("registry")
INDEXER = test_key("indexer")
AUTHOR = test_key("author")
TSA = test_key("tsa")
MIRROR = test_key("mirror")
REPLICATOR = test_key("replicator")


def ts(n: int) -> str:
    """A distinct ts for each n (seconds after 2026-01-01T00:00:00Z, within one year)."""
    day, rest = divmod(n, 86400)
    month, day = divmod(day, 28)
    hour, rest = divmod(rest, 3600)
    minute, second = divmod(rest, 60)
    return f"2026-{month % 12 + 1:02d}-{day + 1:02d}T{hour:02d}:{minute:02d}:{second:02d}Z"


def paper_id(p: int) -> str:
    return f"26{p // 100000 % 100:02d}.{p % 100000:05d}"


def record_created(p: int) -> tuple[str, dict[str, Any]]:
    """The pith number and signed record_created of paper ``p``."""
    record = copy.deepcopy(RECORD)
    record["source"]["id"] = paper_id(p)
    pith, payload = prepare_record_created(REGISTRY, {"canonical_record": record})
    return pith, sign_event(REGISTRY, "record_created", pith, "record", ts(0), payload)


def observation(p: int, i: int) -> dict[str, Any]:
    """Seed observation ``i`` (mod 139), made to cite paper ``p``, with a fresh id."""
    obs = copy.deepcopy(OBSERVATIONS[i % len(OBSERVATIONS)])
    obs.pop("observation_digest")
    obs["observation_id"] = f"{p:08d}-{i:010d}"
    citation = obs["citation"]
    named = False
    for side in ("cited_paper", "cited_work"):
        if isinstance(citation.get(side), dict):
            citation[side]["arxiv_id"] = paper_id(p)
            named = True
    if not named:  # an outbound observation whose cited work has no arXiv id
        citation["cited_paper"] = {"arxiv_id": paper_id(p)}
    obs["observation_digest"] = "sha256:" + digest(obs)
    return obs


def citation(pith: str, p: int, i: int) -> dict[str, Any]:
    obs = observation(p, i)
    return sign_event(INDEXER, "citation_signature", pith, "citation:" + obs["observation_id"],
                      ts(i + 1), {"observation": obs})  # fmt: skip


def other_event(pith: str, p: int, i: int) -> dict[str, Any]:
    """One of the seven other types, in turn."""
    kind = i % 7
    at = ts(i + 1)
    if kind == 0:
        snapshot = copy.deepcopy(SNAPSHOT)
        snapshot["graph_snapshot"]["source"]["id"] = paper_id(p)
        return sign_event(REGISTRY, "graph_snapshot", pith, "graph", at, snapshot)
    if kind == 1:
        return sign_event(AUTHOR, "author_attestation", pith, f"claim:{i}", at,
                          {"statement": f"claim {i} holds"})  # fmt: skip
    if kind == 2:
        return sign_event(TSA, "timestamp_anchor", pith, "record", at,
                          {"anchored_sha256": pith_hash(p), "anchor_kind": "rfc3161",
                           "proof_b64": "AAECAw=="})  # fmt: skip
    if kind == 3:
        return sign_event(MIRROR, "storage_attestation", pith, "record", at,
                          {"content_sha256": "ab" * 32, "byte_size": 1000 + i,
                           "locator": f"https://mirror.test.invalid/{i}"})  # fmt: skip
    if kind == 4:
        return sign_event(REPLICATOR, "replication_record", pith, "record", at,
                          {"outcome": "replicated", "report": f"report {i}"})  # fmt: skip
    if kind == 5:
        return sign_event(REGISTRY, "correction", pith, "record", at,
                          {"correction_type": "erratum", "notice": f"notice {i}"})  # fmt: skip
    return sign_event(MIRROR, "mirror_hint", pith, "record", at,
                      {"locator": f"https://mirror.test.invalid/hint/{i}"})  # fmt: skip


_PITH_HASH: dict[int, str] = {}


def pith_hash(p: int) -> str:
    if p not in _PITH_HASH:
        record = copy.deepcopy(RECORD)
        record["source"]["id"] = paper_id(p)
        _PITH_HASH[p] = digest(record)
    return _PITH_HASH[p]


def mixed(count: int, per_pith: int = 50) -> Iterator[bytes]:
    """``count`` JSON lines over ``count // per_pith`` piths: a record each, then two
    citations for every other event."""
    p = 0
    made = 0
    while made < count:
        pith, record = record_created(p)
        yield jcs(record) + b"\n"
        made += 1
        for i in range(min(per_pith - 1, count - made)):
            event = citation(pith, p, i) if i % 3 else other_event(pith, p, i)
            yield jcs(event) + b"\n"
            made += 1
        p += 1


def one_pith(count: int, p: int = 0) -> Iterator[bytes]:
    """A record and ``count - 1`` citation signatures, all about one pith."""
    pith, record = record_created(p)
    yield jcs(record) + b"\n"
    for i in range(count - 1):
        yield jcs(citation(pith, p, i)) + b"\n"


def write(path: Path, lines: Iterator[bytes]) -> Path:
    """Write once; reuse when it exists (the workload is deterministic)."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        with tmp.open("wb") as handle:
            for line in lines:
                handle.write(line)
        tmp.replace(path)
    return path


# --- the forms producers write --------------------------------------------------------------

FORMS = ("producer", "jcs", "ascii", "spaced", "slash")
"""How a line may be written. ``producer``: compact JSON (no whitespace), members in the
producer's own order, UTF-8 as it is (the seeds' form, json.dumps with compact separators
and ensure_ascii=False); ``jcs``: RFC 8785; ``ascii``: compact, every non-ASCII character
as ``\\uXXXX`` (json.dumps' default); ``spaced``: ``", "`` and ``": "`` between tokens
(json.dumps' default); ``slash``: compact with every ``/`` written ``\\/`` (PHP's
json_encode). All but ``jcs`` keep the producer's member order."""

REGISTRY_FORMS = (("producer", 0.70), ("jcs", 0.15), ("ascii", 0.06), ("spaced", 0.06),
                  ("slash", 0.03))  # fmt: skip
"""The share of each form in :func:`registry`: most producers write compact JSON in their
own order; ``pithlog sign`` writes JCS; the rest are other libraries' defaults."""

ENVELOPE_ORDER = ("event_type", "pith_number", "target", "created_at", "signer", "payload",
                  "event_id", "signature_b64")  # fmt: skip
"""A producer's order of the envelope: what the event is about first, its proof last."""


def _producer_rank(name: str) -> tuple[int, int]:
    # A fixed order that is not code point order: what a producer's own data structures
    # give (the order its fields were declared in), made deterministic here.
    if name in ENVELOPE_ORDER:
        return (0, ENVELOPE_ORDER.index(name))
    return (1, zlib.crc32(name.encode("utf-8")))


def producer_order(value: Any) -> Any:
    """``value`` with the members of every object in the producer's order."""
    if isinstance(value, dict):
        return {k: producer_order(value[k]) for k in sorted(value, key=_producer_rank)}
    if isinstance(value, list):
        return [producer_order(v) for v in value]
    return value


def written(event: dict[str, Any], form: str) -> bytes:
    """One JSON line of ``event`` in ``form`` (one of :data:`FORMS`)."""
    if form == "jcs":
        return jcs(event) + b"\n"
    value = producer_order(event)
    if form == "spaced":
        text = json.dumps(value, ensure_ascii=False)
    else:
        text = json.dumps(value, ensure_ascii=form == "ascii", separators=(",", ":"))
        if form == "slash":
            # "/" is never structure in JSON, so every one is inside a string
            text = text.replace("/", "\\/")
    return text.encode("utf-8") + b"\n"


CITATIONS_PER_PITH = 139
"""The most citation signatures a pith gets: the seed's citation record holds 139."""


def registry(count: int, seed: int = 2304) -> Iterator[bytes]:
    """``count`` JSON lines as a registry receives them: per pith a record and a graph
    snapshot; citation signatures from none to :data:`CITATIONS_PER_PITH` per pith, few for
    most papers and many for some (a Pareto draw, as citations are); one of the other six
    types now and then. About 70 % of the events are citation signatures. Each line is in
    a form drawn from :data:`REGISTRY_FORMS`."""
    rnd = random.Random(seed)
    names, weights = zip(*REGISTRY_FORMS, strict=True)
    made = 0
    p = 1_000_000  # papers distinct from those of mixed()
    while made < count:
        pith, record = record_created(p)
        events = [record]
        cites = min(CITATIONS_PER_PITH, int(rnd.paretovariate(1.1) * 4) - 2)
        kinds = ["citation"] * max(0, cites) + ["other"] * rnd.randint(0, 4)
        rnd.shuffle(kinds)
        events.append(other_event(pith, p, 0))  # the graph snapshot
        for i, kind in enumerate(kinds, 1):
            if kind == "citation":
                events.append(citation(pith, p, i))
            else:
                events.append(other_event(pith, p, 7 * i + rnd.randrange(1, 7)))
        for event in events[: count - made]:
            yield written(event, rnd.choices(names, weights)[0])
        made += len(events[: count - made])
        p += 1
