"""The ``reasons`` case's events failing checks 10-14.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from casegen.building import arxiv_record, cite, make, names_paper, observation, record_payload
from casegen.cases_seed import load_seed_observations
from casegen.common import (
    AUTHOR,
    INDEXER,
    MIRROR,
    REGISTRY,
    REGISTRY_2,
    REPLICATOR,
    TSA,
    b64,
    digest,
)

if TYPE_CHECKING:
    from casegen.cases_reasons import Reasons


def payload_checks(r: Reasons) -> None:
    """Events of the ``reasons`` case failing checks 10-14 (spec 6)."""
    case, tick, record, rc, pith, sha, source, attest = (
        r.case, r.tick, r.record, r.rc, r.pith, r.sha, r.source, r.attest
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
