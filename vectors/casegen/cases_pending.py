"""The cases of pending piths, mixed piths, revoked keys and events that
predate their record.
"""

from __future__ import annotations

import copy
from typing import Any

from casegen.building import (
    Case,
    arxiv_record,
    as_reduction,
    cite,
    keyring_doc,
    make,
    names_paper,
    record_created,
    record_payload,
    resign,
)
from casegen.cases_seed import (
    CITATION_RECORD,
    CITATION_RECORD_AT,
    CITATIONS_AT,
    load_seed_observations,
    seed_events,
)
from casegen.common import AUTHOR, INDEXER, MIRROR, REGISTRY, REGISTRY_2, STRANGER, TSA, pith_of
from pithlog.protocol.keys import SigningKey
from pithlog.protocol.reduce import Pending, Reduction
from pithlog.protocol.state import state_document


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
        state = state_document(as_reduction(results[h_rc["pith_number"]]))
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
