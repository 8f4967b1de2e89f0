"""The cases built on the seeds: the published state's events, and the
citation record's 139 observations.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from casegen.building import (
    Case,
    as_reduction,
    cite,
    keyring_doc,
    make,
    names_paper,
    record_created,
    redigest,
)
from casegen.common import INDEXER, REGISTRY, SEED_CITATIONS, SEED_STATE
from pithlog.protocol.event_types import prepare_record_created
from pithlog.protocol.reduce import Pending, Reduction
from pithlog.protocol.state import state_document


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
        state = state_document(as_reduction(results[pith]))
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
