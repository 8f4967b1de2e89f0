"""The case of all nine event types, applied validly.
"""

from __future__ import annotations

from casegen.building import (
    Case,
    Clock,
    arxiv_record,
    as_reduction,
    cite,
    keyring_doc,
    make,
    observation,
    record_created,
)
from casegen.common import AUTHOR, INDEXER, MIRROR, REGISTRY, REPLICATOR, TSA, b64
from pithlog.protocol.reduce import Pending, Reduction
from pithlog.protocol.state import state_document

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
        state = state_document(as_reduction(results[doi_pith]))
        aliases = {a["alias_kind"]: a["alias_value"] for a in state["current"]["source_aliases"]}
        assert aliases["doi"] == "10.5555/pithlog.test.\u00c4-mixed", aliases
        assert "arxiv" not in aliases

    case.checks.append(doi_alias)
    return case
