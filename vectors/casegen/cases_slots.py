"""The cases of equivocation and of spec 7 step 0 (copies of one event).
"""

from __future__ import annotations

from typing import Any

from casegen.building import (
    Case,
    Clock,
    arxiv_record,
    keyring_doc,
    make,
    record_created,
    resign,
    tamper,
    with_signature,
)
from casegen.common import (
    AUTHOR,
    MIRROR,
    REGISTRY,
    REGISTRY_2,
    REPLICATOR,
    STRANGER,
    TSA,
    b64,
    jcs,
    pith_of,
)
from casegen.nonce import malleate, sign_with_nonce
from pithlog.protocol.keys import SigningKey


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
