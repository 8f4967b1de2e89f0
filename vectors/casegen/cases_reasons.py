"""The ``reasons`` case: one pith with events failing each of the fourteen
checks; checks 10-14 are in :mod:`.cases_reasons_payload`.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from casegen.building import (
    Case,
    Clock,
    arxiv_record,
    body_of,
    keyring_doc,
    make,
    record_created,
    record_payload,
    resign,
    tamper,
    with_signature,
)
from casegen.cases_reasons_payload import payload_checks
from casegen.common import (
    AUTHOR,
    INDEXER,
    MIRROR,
    REGISTRY,
    REPLICATOR,
    STRANGER,
    TSA,
    b64,
    digest,
    jcs,
)
from casegen.nonce import malleate
from pithlog.protocol.keys import SigningKey


@dataclass
class Reasons:
    """What the parts of the ``reasons`` case share: its case, clock, one record and pith."""

    case: Case
    tick: Clock
    record: dict[str, Any]
    rc: dict[str, Any]
    """The record_created event of ``record``."""
    pith: str
    sha: str
    source: dict[str, Any]

    def attest(
        self, statement: str, at: str | None = None, key: SigningKey = AUTHOR, **kw: Any
    ) -> dict[str, Any]:
        return make(
            key,
            "author_attestation",
            self.pith,
            "record",
            at or self.tick(),
            {"statement": statement},
            **kw,
        )


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

    r = Reasons(case, tick, record, rc, pith, sha, source)
    attest = r.attest

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
    envelope_checks(r)
    payload_checks(r)
    return case


def envelope_checks(r: Reasons) -> None:
    """Events of the ``reasons`` case failing checks 1-9 (spec 6)."""
    case, tick, record, pith, sha, source, attest = (
        r.case, r.tick, r.record, r.pith, r.sha, r.source, r.attest
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
