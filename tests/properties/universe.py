"""Generated sets of signed events for the property tests.

An event is described by a small hashable spec and built (and cached: Ed25519 signatures
are deterministic) from it with the fixed public test keys. The specs cover several piths,
valid and invalid events of every type and many reasons, equivocating slots, competing
records, and forged copies that reuse another event's ``event_id``; :func:`crowded_sets`
are mostly valid events, most of their slots equivocated.
"""

from __future__ import annotations

import functools
from typing import Any

from hypothesis import strategies as st

from pithlog.protocol.canonical import digest
from pithlog.protocol.event_types import prepare_record_created
from pithlog.protocol.events import Envelope, admit, sign_event
from pithlog.protocol.reduce import Pending, Reduction, reduce_events
from pithlog.protocol.state import render, state_document
from pithlog.protocol.text_forms import encode_b64
from pithlog.testing import test_key as fixed_key
from pithlog.testing import test_keyring as fixed_keyring

KEYRING = fixed_keyring()

RECORDS = (
    {"metadata": {"submitted_at": "2024-11-01T00:43:54Z"}, "schema_version": "1.0",
     "source": {"id": "2411.00284", "kind": "arxiv", "version": 2}},
    {"metadata": {"submitted_at": "2025-03-03T10:00:00Z"}, "schema_version": "1.0",
     "source": {"id": "10.1000/Pith-\u00c9", "kind": "doi", "version": 1}},
    {"metadata": {"submitted_at": "2023-01-01T00:00:00Z", "title": "\U0001f600\ue000"},
     "schema_version": "1.0", "source": {"id": "2301.00001", "kind": "arxiv", "version": 1}},
)

TIMES = (
    "2025-12-31T23:59:59Z",
    "2026-01-01T00:00:00Z",
    "2026-01-02T00:00:00Z",
    "2026-02-01T00:00:00Z",
    "2026-02-30T00:00:00Z",  # not a ts: malformed
)
RECORD_TIMES = TIMES[1:4]


@functools.cache
def record(pith: int, time: int, variant: int, signer: str) -> dict[str, Any]:
    k = fixed_key(signer)
    payload = {"canonical_record": RECORDS[pith], "attestation_state": f"state-{variant}"}
    pith_number, filled = prepare_record_created(k, payload)
    return sign_event(k, "record_created", pith_number, "record", RECORD_TIMES[time], filled)


@functools.cache
def pith_number(pith: int) -> str:
    return str(record(pith, 0, 0, "registry")["pith_number"])


@functools.cache
def other(
    pith: int, kind: str, time: int, signer: str, target: str, variant: int
) -> dict[str, Any]:
    canonical = RECORDS[pith]
    payload: dict[str, Any]
    if kind == "author_attestation":
        payload = {"statement": f"statement {variant}"}
    elif kind == "mirror_hint":
        payload = {"locator": f"https://mirror.test.invalid/{variant}"}
    elif kind == "graph_snapshot":
        # variant 2: the source of another record, so record_mismatch.
        source = RECORDS[(pith + 1) % 3]["source"] if variant == 2 else canonical["source"]
        payload = {"graph_snapshot": {"source": source, "n": variant}, "verdict_id": None}
    elif kind == "timestamp_anchor" and target.startswith("event:"):
        # an anchor of the pith's first record event; variant 2 names another hash
        anchored = target[len("event:sha256:"):] if variant != 2 else "0" * 64
        payload = {"anchor_kind": "k", "anchored_sha256": anchored, "proof_b64": ""}
    elif kind == "timestamp_anchor":
        anchored = digest(canonical) if variant != 2 else "0" * 64
        payload = {"anchor_kind": "k", "anchored_sha256": anchored, "proof_b64": encode_b64(
            bytes([variant]))}
    elif kind == "storage_attestation":
        payload = {"byte_size": variant - 1, "content_sha256": "ab" * 32, "locator": "x"}
    elif kind == "correction":
        kinds = ("erratum", "retraction", "reinstatement")
        payload = {"correction_type": kinds[variant], "notice": f"notice {variant}"}
    elif kind == "replication_record":
        # variant 2: an outcome outside the four, so bad_payload
        outcome = ("replicated", "inconclusive", "reproduced")[variant]
        payload = {"outcome": outcome, "report": f"report {variant}"}
    elif kind == "citation_signature":
        # variant 2: a citation of another record's paper, so record_mismatch; the paper
        # on another side each variant
        paper = RECORDS[(pith + 1) % 3 if variant == 2 else pith]["source"]["id"]
        side = ("citing_paper", "cited_paper", "cited_work")[variant]
        obs: dict[str, Any] = {"citation": {side: {"arxiv_id": paper, "title": "t"}},
                               "observation_id": target[len("citation:"):]}
        obs["observation_digest"] = "sha256:" + digest(obs)
        payload = {"observation": obs}
    else:  # pragma: no cover
        raise ValueError(kind)
    return sign_event(fixed_key(signer), kind, pith_number(pith), target, TIMES[time], payload)


@functools.cache
def forged(base: tuple[Any, ...], how: str) -> dict[str, Any]:
    """A copy of the event of spec ``base`` under its ``event_id``, that fails a check."""
    original = build(base)
    if how == "zero_signature":
        return {**original, "signature_b64": encode_b64(bytes(64))}
    if how == "other_key_signature":
        body_digest = original["event_id"][len("sha256:"):]
        return {**original, "signature_b64": encode_b64(
            fixed_key("registry-2").sign(bytes.fromhex(body_digest)))}
    if how == "other_body":
        return {**original, "target": "claim:forged"}
    if how == "other_pith":
        moved = pith_number((RECORDS.index(_record_of_spec(base)) + 1) % 3)
        return {**original, "pith_number": moved}
    if how == "extra_member":
        return {**original, "x": 1}
    raise ValueError(how)  # pragma: no cover


def _record_of_spec(spec: tuple[Any, ...]) -> dict[str, Any]:
    return RECORDS[spec[1]]


def build(spec: tuple[Any, ...]) -> dict[str, Any]:
    if spec[0] == "record":
        return record(*spec[1:])
    if spec[0] == "other":
        return other(*spec[1:])
    return forged(spec[1], spec[2])


def _record_specs(piths: st.SearchStrategy[int]) -> st.SearchStrategy[tuple[Any, ...]]:
    return st.tuples(
        st.just("record"), piths, st.integers(0, 2), st.integers(0, 2),
        st.sampled_from(["registry", "registry", "registry", "registry-2", "stranger", "mirror"]),
    )


def _other_specs(piths: st.SearchStrategy[int]) -> st.SearchStrategy[tuple[Any, ...]]:
    return st.one_of(
        st.tuples(st.just("other"), piths, st.just("author_attestation"), st.integers(0, 4),
                  st.sampled_from(["author", "author", "registry"]),
                  st.sampled_from(["record", "claim:a", "claim:"]), st.integers(0, 2)),
        st.tuples(st.just("other"), piths, st.just("mirror_hint"), st.integers(0, 4),
                  st.sampled_from(["mirror", "registry", "stranger", "tsa"]),
                  st.just("record"), st.integers(0, 2)),
        st.tuples(st.just("other"), piths, st.just("graph_snapshot"), st.integers(0, 3),
                  st.just("registry"), st.just("graph"), st.integers(0, 2)),
        st.tuples(st.just("other"), piths, st.just("timestamp_anchor"), st.integers(0, 3),
                  st.sampled_from(["tsa", "registry"]), st.just("record"), st.integers(0, 2)),
        st.tuples(st.just("other"), piths, st.just("timestamp_anchor"), st.integers(0, 3),
                  st.sampled_from(["tsa", "registry"]),
                  piths.map(lambda p: "event:" + str(record(p, 0, 0, "registry")["event_id"])),
                  st.integers(0, 2)),
        st.tuples(st.just("other"), piths, st.just("correction"), st.integers(0, 4),
                  st.sampled_from(["registry", "registry", "registry-2", "stranger", "mirror"]),
                  st.sampled_from(["record", "record", "claim:a"]), st.integers(0, 2)),
        st.tuples(st.just("other"), piths, st.just("replication_record"), st.integers(0, 4),
                  st.sampled_from(["replicator", "registry", "author"]),
                  st.sampled_from(["record", "claim:a", "claim:b"]), st.integers(0, 2)),
        st.tuples(st.just("other"), piths, st.just("storage_attestation"), st.integers(1, 3),
                  st.just("mirror"), st.just("record"), st.integers(0, 2)),
        st.tuples(st.just("other"), piths, st.just("citation_signature"), st.integers(0, 4),
                  st.sampled_from(["indexer", "registry"]),
                  st.sampled_from(["citation:o-1", "citation:o-2"]), st.integers(0, 2)),
    )


FORGERIES = ("zero_signature", "other_key_signature", "other_body", "other_pith", "extra_member")


@st.composite
def event_sets(draw: st.DrawFn) -> list[tuple[Any, ...]]:
    """A list of specs over one to three piths: records (valid ones competing, invalid
    ones), other events, equivocations (a drawn event again with other content in its
    slot), and forged copies of drawn events under their event_ids."""
    used = draw(st.lists(st.integers(0, 2), min_size=1, max_size=3, unique=True))
    piths = st.sampled_from(used)
    specs: list[tuple[Any, ...]] = list(draw(st.lists(_record_specs(piths), max_size=3)))
    others = draw(st.lists(_other_specs(piths), max_size=9))
    specs += others
    if others:
        again = draw(st.lists(st.sampled_from(others), max_size=3))
        for spec in again:  # same slot (pith, type, time, signer, target), other content
            specs.append((*spec[:-1], (spec[-1] + 1 + draw(st.integers(0, 1))) % 3))
    if specs:
        bases = draw(st.lists(st.sampled_from(specs), max_size=3))
        for base in bases:
            specs.append(("forged", base, draw(st.sampled_from(FORGERIES))))
    if not specs:
        specs.append(draw(_record_specs(piths)))
    order = draw(st.permutations(specs))
    return list(order)


VALID_SLOTS = (
    # (kind, signer, target) that pass every check with variants 0 and 1
    ("author_attestation", "author", "record"),
    ("author_attestation", "author", "claim:a"),
    ("mirror_hint", "mirror", "record"),
    ("mirror_hint", "registry", "record"),
    ("graph_snapshot", "registry", "graph"),
    ("timestamp_anchor", "tsa", "record"),
    ("storage_attestation", "mirror", "record"),
    ("citation_signature", "indexer", "citation:o-1"),
    ("correction", "registry", "record"),
    ("correction", "registry-2", "record"),
    ("replication_record", "replicator", "claim:a"),
)


@st.composite
def crowded_sets(draw: st.DrawFn) -> list[tuple[Any, ...]]:
    """Specs of one pith where most events are valid and most slots are equivocated:
    competing records (one instant, several contents), then events of every type dated
    at or after the records, each slot filled by one to three contents, with forged
    copies of some of them. Corrections among them."""
    pith = draw(st.integers(0, 2))
    specs: list[tuple[Any, ...]] = [
        ("record", pith, 0, variant, signer)
        for variant in draw(st.lists(st.integers(0, 2), min_size=1, max_size=3, unique=True))
        for signer in draw(st.lists(st.sampled_from(["registry", "registry-2"]),
                                    min_size=1, max_size=2, unique=True))
    ]
    for kind, signer, target in draw(st.lists(st.sampled_from(VALID_SLOTS), max_size=6)):
        time = draw(st.integers(1, 3))
        for variant in draw(st.lists(st.integers(0, 1), min_size=1, max_size=2, unique=True)):
            specs.append(("other", pith, kind, time, signer, target, variant))
    for base in draw(st.lists(st.sampled_from(specs), max_size=2)):
        specs.append(("forged", base, draw(st.sampled_from(FORGERIES))))
    return list(draw(st.permutations(specs)))


def envelopes(specs: list[tuple[Any, ...]]) -> list[Envelope]:
    return [admit(build(s)) for s in specs]


def states(items: list[Envelope]) -> dict[str, Any]:
    """Every pith's rendered state, or for a pending pith what it holds."""
    out: dict[str, Any] = {}
    for pith, result in reduce_events(items, KEYRING).items():
        if isinstance(result, Pending):
            out[pith] = ("pending", result.event_count, sorted(result.invalid.items()))
        else:
            out[pith] = render(state_document(result))
    return out


def any_sets() -> st.SearchStrategy[list[tuple[Any, ...]]]:
    """:func:`event_sets` or :func:`crowded_sets`."""
    return st.one_of(event_sets(), crowded_sets())


def partitioned(results: dict[str, Reduction | Pending], items: list[Envelope]) -> None:
    """The reduction's counts partition the distinct events of ``items``: each counted once,
    in one pith, as applied, an equivocation's loser or invalid (spec 8)."""
    assert sum(r.event_count for r in results.values()) == len({e.event_id for e in items})
    for result in results.values():
        if isinstance(result, Reduction):
            applied = [e.event_id for e in result.applied]
            losers = [e.event_id for q in result.equivocations for e in q.events[1:]]
            everything = applied + losers + list(result.invalid)
            assert len(everything) == len(set(everything)) == result.event_count
            assert result.valid_event_count == len(applied) + len(losers)
