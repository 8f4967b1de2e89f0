"""An independent model of pith-open-graph-merge-v1, written from the spec text alone.

It shares no code with pithlog: only the standard library, ``rfc8785`` (JCS) and
``cryptography`` (Ed25519). It favours being literal over being fast; "§n" cites a section
of the spec. Where the spec leaves a choice open, the choice documented in
docs/protocol.md ("Choices where the spec is silent", item n: "choice n") is followed.

Its values (JSON, time, pith numbers, keys: spec sections 1-3) are in ``model_values.py``.
``reduce(values, keyring)`` takes envelopes that passed the door (parsed JSON values) and
returns, per pith number, the rendered state document (bytes), or for a pith without a
chosen record ``("pending", event_count, sorted [(event_id, reason)])``.
"""

from __future__ import annotations

from typing import Any

from .model_values import (
    HEX64,
    ascii_lower,
    b32_of,
    b64,
    digest,
    is_int,
    is_ts,
    jcs,
    nonempty,
    pith_number_of,
    same,
    scalar_jcs,
    valid_at,
    verifies,
)

# --- §5 event types -----------------------------------------------------------------------

def _claim_or_record(t: str) -> bool:
    return t == "record" or (t.startswith("claim:") and len(t) > len("claim:"))


# event_type: (state list, target rule, allowed signer types)
TYPES: dict[str, tuple[str | None, Any, tuple[str, ...]]] = {
    "record_created": (None, lambda t: t == "record", ("pith_registry",)),
    "graph_snapshot": ("graph_snapshots", lambda t: t == "graph", ("pith_registry",)),
    "author_attestation": ("author_attestations", _claim_or_record, ("author",)),
    "timestamp_anchor": ("timestamp_anchors",
                         lambda t: t == "record" or (t.startswith("event:sha256:")
                                                     and bool(HEX64.fullmatch(t[13:]))),
                         ("timestamp_authority", "pith_registry")),
    "storage_attestation": ("storage_attestations", lambda t: t == "record",
                            ("mirror", "pith_registry")),
    "citation_signature": ("citation_signatures",
                           lambda t: t.startswith("citation:") and len(t) > len("citation:"),
                           ("citation_indexer", "pith_registry")),
    "replication_record": ("replication_records", _claim_or_record,
                           ("replicator", "pith_registry")),
    "correction": ("corrections", lambda t: t == "record", ("pith_registry",)),
    "mirror_hint": ("mirror_hints", lambda t: t == "record", ("mirror", "pith_registry")),
}
STATE_LISTS = [lst for lst, _, _ in TYPES.values() if lst is not None]
OUTCOMES = ("replicated", "partially_replicated", "not_replicated", "inconclusive")
CORRECTIONS = ("erratum", "retraction", "expression_of_concern", "withdrawal", "reinstatement")
RECORD_MEMBERS = ("canonical_record", "canonical_sha256", "source_kind", "source_id",
                  "source_version", "attestation_state", "receipt")


def payload_ok(event_type: str, target: str, p: dict[str, Any]) -> bool:
    """Check 10 (§5, §5.3): the payload rules that look at the event alone."""
    if event_type == "record_created":  # §5.1
        if any(m not in p for m in RECORD_MEMBERS):
            return False
        c = p["canonical_record"]
        if not isinstance(c, dict):
            return False
        s, meta = c.get("source"), c.get("metadata")
        return (isinstance(s, dict) and isinstance(s.get("kind"), str)
                and isinstance(s.get("id"), str) and is_int(s.get("version"))
                and isinstance(meta, dict) and is_ts(meta.get("submitted_at"))
                and isinstance(p["canonical_sha256"], str)  # choice 2: only "a string"
                and isinstance(p["attestation_state"], str)
                and same(p["source_kind"], s["kind"]) and same(p["source_id"], s["id"])
                and same(p["source_version"], s["version"]))
    if event_type == "graph_snapshot":
        g = p.get("graph_snapshot")
        return (isinstance(g, dict) and isinstance(g.get("source"), dict)
                and "verdict_id" in p and (p["verdict_id"] is None
                                           or isinstance(p["verdict_id"], str)))
    if event_type == "author_attestation":
        return nonempty(p.get("statement"))
    if event_type == "timestamp_anchor":
        h = p.get("anchored_sha256")
        return (isinstance(h, str) and bool(HEX64.fullmatch(h))
                and nonempty(p.get("anchor_kind")) and b64(p.get("proof_b64")) is not None
                and (not target.startswith("event:sha256:") or h == target[13:]))
    if event_type == "storage_attestation":
        c = p.get("content_sha256")
        return (isinstance(c, str) and bool(HEX64.fullmatch(c))
                and is_int(p.get("byte_size")) and p["byte_size"] >= 0
                and nonempty(p.get("locator")))
    if event_type == "citation_signature":  # §5.2
        o = p.get("observation")
        if not (isinstance(o, dict) and isinstance(o.get("observation_digest"), str)
                and isinstance(o.get("observation_id"), str)
                and isinstance(o.get("citation"), dict)):
            return False
        rest = {k: v for k, v in o.items() if k != "observation_digest"}
        return (o["observation_digest"] == "sha256:" + digest(rest)
                and o["observation_id"] == target[len("citation:"):])
    if event_type == "replication_record":
        return p.get("outcome") in OUTCOMES and nonempty(p.get("report"))
    if event_type == "correction":
        return p.get("correction_type") in CORRECTIONS and nonempty(p.get("notice"))
    if event_type == "mirror_hint":
        return nonempty(p.get("locator"))
    raise AssertionError(event_type)


def record_matches(e: dict[str, Any], r: dict[str, Any]) -> bool:
    """Check 14 (§5.3): the comparisons with the chosen record R."""
    p, record = e["payload"], r["payload"]["canonical_record"]
    if e["event_type"] == "graph_snapshot":
        return same(p["graph_snapshot"]["source"], record["source"])
    if e["event_type"] == "timestamp_anchor" and e["target"] == "record":
        return bool(p["anchored_sha256"] == r["payload"]["canonical_sha256"])
    if e["event_type"] == "citation_signature":  # §5.2
        citation = p["observation"]["citation"]
        ids = [side.get("arxiv_id") for side in (citation.get("citing_paper"),
               citation.get("cited_paper"), citation.get("cited_work"))
               if isinstance(side, dict)]
        return any(isinstance(i, str) and i == record["source"]["id"] for i in ids)
    return True


# --- §6 validity --------------------------------------------------------------------------

ENVELOPE = ("event_type", "pith_number", "target", "created_at", "signer", "payload",
            "event_id", "signature_b64")
SIGNER = ("key_id", "public_key_fingerprint", "signer_id", "signer_type")
REASONS = ("malformed", "unknown_event_type", "event_id_mismatch", "unknown_key",
           "signer_mismatch", "bad_signature", "key_not_valid", "unauthorized_signer",
           "bad_target", "bad_payload", "pith_number_mismatch", "bad_receipt",
           "predates_record", "record_mismatch")


def body(e: dict[str, Any]) -> dict[str, Any]:
    """§4: the envelope without event_id and signature_b64."""
    return {k: v for k, v in e.items() if k not in ("event_id", "signature_b64")}


def check_alone(e: dict[str, Any], ring: dict[str, dict[str, Any]]) -> str | None:
    """Checks 1-12 (§6), in order: the first failing one's reason, or None."""
    signer = e.get("signer")
    if (set(e) != set(ENVELOPE)
            or not all(isinstance(e[m], str) for m in
                       ("event_type", "target", "created_at", "signature_b64"))
            or not isinstance(e["payload"], dict) or not is_ts(e["created_at"])
            or not isinstance(signer, dict) or set(signer) != set(SIGNER)
            or not all(nonempty(signer[m]) for m in SIGNER)):
        return "malformed"  # 1
    if e["event_type"] not in TYPES:
        return "unknown_event_type"  # 2
    body_digest = digest(body(e))
    if e["event_id"] != "sha256:" + body_digest:
        return "event_id_mismatch"  # 3
    entry = ring.get(signer["key_id"])
    if entry is None:
        return "unknown_key"  # 4
    if (signer["public_key_fingerprint"] != entry["fingerprint"]
            or signer["signer_id"] != entry["signer_id"]
            or signer["signer_type"] != entry["signer_type"]):
        return "signer_mismatch"  # 5
    if not verifies(entry["raw"], e["signature_b64"], bytes.fromhex(body_digest)):
        return "bad_signature"  # 6
    if not valid_at(entry, e["created_at"]):
        return "key_not_valid"  # 7
    _, target_ok, signer_types = TYPES[e["event_type"]]
    if signer["signer_type"] not in signer_types:
        return "unauthorized_signer"  # 8
    if not target_ok(e["target"]):
        return "bad_target"  # 9
    p = e["payload"]
    if not payload_ok(e["event_type"], e["target"], p):
        return "bad_payload"  # 10
    if e["event_type"] == "record_created":  # §5.1
        if (p["canonical_sha256"] != digest(p["canonical_record"])
                or e["pith_number"] != pith_number_of(p["canonical_record"],
                                                      p["canonical_sha256"])):
            return "pith_number_mismatch"  # 11
        receipt = p["receipt"]
        if not (isinstance(receipt, dict) and receipt.get("algorithm") == "ed25519"
                and receipt.get("signed_message") == "canonical_sha256_bytes"
                and receipt.get("canonical_sha256") == p["canonical_sha256"]
                and receipt.get("key_id") == signer["key_id"]
                and receipt.get("public_key_fingerprint") == signer["public_key_fingerprint"]
                and verifies(entry["raw"], receipt.get("signature_b64"),
                             bytes.fromhex(p["canonical_sha256"]))):
            return "bad_receipt"  # 12
    return None


def check_against(e: dict[str, Any], r: dict[str, Any]) -> str | None:
    """Checks 13-14 (§6) for an event other than R that passed 1-12."""
    if e["event_type"] == "record_created":
        return None
    if e["created_at"] < r["created_at"]:
        return "predates_record"  # 13
    if not record_matches(e, r):
        return "record_mismatch"  # 14
    return None


# --- §7 reduction -------------------------------------------------------------------------

def _order(e: dict[str, Any]) -> tuple[str, str]:
    return (e["created_at"], e["event_id"])


def step0(values: list[Any], ring: dict[str, dict[str, Any]]
          ) -> dict[str, tuple[dict[str, Any], str | None]]:
    """§7 step 0: event_id -> (the copy that counts, its verdict of checks 1-12)."""
    copies: dict[str, dict[bytes, Any]] = {}
    for v in values:
        copies.setdefault(v["event_id"], {})[jcs(v)] = v  # one copy per JCS encoding
    kept = {}
    for event_id, by_bytes in copies.items():
        judged = [(enc, v, check_alone(v, ring)) for enc, v in by_bytes.items()]
        passing = [j for j in judged if j[2] is None]
        if passing:
            candidates = passing
        else:
            latest = max(REASONS.index(str(j[2])) for j in judged)
            candidates = [j for j in judged if REASONS.index(str(j[2])) == latest]
        _, v, reason = min(candidates, key=lambda j: j[0])  # bytes compare unsigned
        kept[event_id] = (v, reason)
    return kept


def reduce(values: list[Any], ring: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """§7: per pith number, the rendered state (bytes) or ("pending", count, invalid)."""
    by_pith: dict[str, list[tuple[dict[str, Any], str | None]]] = {}
    for v, reason in step0(values, ring).values():
        by_pith.setdefault(v["pith_number"], []).append((v, reason))
    out: dict[str, Any] = {}
    for pith in sorted(by_pith):
        events = by_pith[pith]
        invalid = {e["event_id"]: reason for e, reason in events if reason is not None}
        passed = [e for e, reason in events if reason is None]
        records = [e for e in passed if e["event_type"] == "record_created"]
        if not records:  # step 2: pending
            out[pith] = ("pending", len(events), sorted(invalid.items()))
            continue
        r = min(records, key=_order)
        valid = [r]
        for e in passed:  # step 3
            if e is r:
                continue
            reason = check_against(e, r)
            if reason is None:
                valid.append(e)
            else:
                invalid[e["event_id"]] = reason
        slots: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
        for e in valid:  # step 4
            slot = (("record_created", "record", None, None) if e["event_type"] == "record_created"
                    else (e["event_type"], e["target"], e["signer"]["key_id"], e["created_at"]))
            slots.setdefault(slot, []).append(e)
        applied = [min(s, key=_order) for s in slots.values()]
        equivocations = [(slot, sorted(s, key=_order)) for slot, s in slots.items() if len(s) > 1]
        out[pith] = render(state(pith, len(events), r, applied, equivocations, invalid))
    return out


# --- §8 the state document ----------------------------------------------------------------

def projection(e: dict[str, Any]) -> dict[str, Any]:
    return {"event_id": e["event_id"], "target": e["target"], "created_at": e["created_at"],
            "signer": e["signer"], "payload": e["payload"]}


def aliases(r: dict[str, Any]) -> list[dict[str, Any]]:
    source = r["payload"]["canonical_record"]["source"]
    kind, ident = source["kind"], source["id"]
    pairs = []
    if kind == "arxiv":
        pairs += [("arxiv", ident), ("arxiv_version", f"{ident}v{source['version']}"),
                  ("doi", "10.48550/arxiv." + ident)]
    elif kind == "doi":
        pairs.append(("doi", ascii_lower(ident)))
    b = b32_of(r["payload"]["canonical_sha256"])
    pairs += [(f"pith_short_{n}", b[:n]) for n in (8, 12, 16)]
    return [{"alias_kind": k, "alias_value": v, "created_at": r["created_at"]}
            for k, v in sorted(pairs)]


def _slot_key(slot: tuple[Any, ...]) -> tuple[tuple[int, str], ...]:
    return tuple((0, "") if x is None else (1, x) for x in slot)  # null before any string


def state(pith: str, event_count: int, r: dict[str, Any], applied: list[dict[str, Any]],
          equivocations: list[tuple[tuple[Any, ...], list[dict[str, Any]]]],
          invalid: dict[str, str]) -> dict[str, Any]:
    """§8: the state document, members in display order, state_sha256 last."""
    others = sorted((e for e in applied if e is not r), key=_order)
    current: dict[str, Any] = {"canonical_record": r["payload"]["canonical_record"],
                               "source_aliases": aliases(r)}
    for event_type, (lst, _, _) in TYPES.items():
        if lst is not None:
            current[lst] = [projection(e) for e in others if e["event_type"] == event_type]
    current["record_created"] = projection(r)
    losers = sum(len(events) - 1 for _, events in equivocations)
    doc: dict[str, Any] = {
        "state_type": "pith_open_graph_state", "state_version": "1.0", "pith_number": pith,
        "merge_version": "pith-open-graph-merge-v1", "event_count": event_count,
        "valid_event_count": len(applied) + losers, "invalid_event_count": len(invalid),
        "equivocation_count": len(equivocations), "current": current,
        "equivocations": [
            {"slot": dict(zip(("event_type", "target", "key_id", "created_at"), slot, strict=True)),
             "event_ids": [e["event_id"] for e in events],
             "applied_event_id": events[0]["event_id"]}
            for slot, events in sorted(equivocations, key=lambda q: _slot_key(q[0]))],
        "invalid_events": [{"event_id": i, "reason": invalid[i]} for i in sorted(invalid)],
        "applied_event_ids": [r["event_id"]] + [e["event_id"] for e in others],
    }
    doc["state_sha256"] = digest(doc)
    return doc


def render(value: Any, name: str | None = None) -> bytes:
    """§8 display serialization: compact, UTF-8, the state's own members in the order they
    were built, and signer, payload and canonical_record in JCS order."""
    if name in ("signer", "payload", "canonical_record"):
        return jcs(value)
    if not isinstance(value, (dict, list)):
        return scalar_jcs(value)
    if isinstance(value, list):
        return b"[" + b",".join(render(v) for v in value) + b"]"
    return b"{" + b",".join(jcs(k) + b":" + render(v, k) for k, v in value.items()) + b"}"
