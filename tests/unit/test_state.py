"""The state document (spec section 8) and the check of a published one (section 9)."""

from __future__ import annotations

import hashlib
import json
import tracemalloc
from typing import Any

import pytest

from pithlog.protocol.canonical import digest, jcs, parse
from pithlog.protocol.event_types import STATE_LISTS
from pithlog.protocol.reduce import Reduction
from pithlog.protocol.state import (
    STATE_MEMBERS,
    Fragment,
    StateParts,
    assemble,
    digest_document,
    render,
    source_aliases,
    state_document,
)
from pithlog.protocol.state_verify import verify_state_document

from .builders import (
    LATER,
    canonical_record,
    event,
    record_event,
    reduce_values,
    state_seed_bytes,
)

SEED = state_seed_bytes()
SEED_SHA = "f469869a6598c183871f09531136cb6499464663758bcc9ae2b32ecac9934607"
SEED_FILE_SHA256 = "34d219ef2ca13085d7e3a8cecec4383d2c3ed531f10a64d842578f1f21ceafb2"
"""SHA-256 of the seed file's bytes as the registry published it (``seeds/`` beside the
spec): its display form, which ``state_sha256`` (a digest over JCS) does not pin."""


# --- the published seed ------------------------------------------------------------------


def test_seed_re_renders_byte_for_byte() -> None:
    doc = parse(SEED)
    assert render(doc) == SEED
    assert doc["state_sha256"] == SEED_SHA
    assert digest_document(doc) == SEED_SHA
    assert list(doc) == list(STATE_MEMBERS)


def test_seed_is_the_published_file() -> None:
    # A copy re-rendered by a wrong renderer would still re-render to itself: the tests
    # here hold the renderers to the published bytes only while these are those bytes.
    assert hashlib.sha256(SEED).hexdigest() == SEED_FILE_SHA256


def _fragment(p: dict[str, Any]) -> Fragment:
    return Fragment(p["event_id"], p["created_at"], json.dumps(p["target"]).encode(),
                    jcs(p["signer"]), jcs(p["payload"]))  # fmt: skip


def test_seed_assembles_byte_for_byte_from_its_projections() -> None:
    # Spec 8: "re-renders it byte for byte from its own projections", with the renderer
    # that pithlog reduce prints and a store keeps (assemble), not only render.
    doc = parse(SEED)
    current = doc["current"]
    record = current["record_created"]
    parts = StateParts(
        pith_number=doc["pith_number"],
        event_count=doc["event_count"],
        valid_event_count=doc["valid_event_count"],
        record=_fragment(record),
        canonical_record=current["canonical_record"],
        canonical_sha256=record["payload"]["canonical_sha256"],
        lists={name: [_fragment(p) for p in current[name]] for name in STATE_LISTS},
        equivocations=doc["equivocations"],
        invalid=[(i["event_id"], i["reason"]) for i in doc["invalid_events"]],
    )
    assert sum(map(len, parts.lists.values())) == 1  # the seed's graph snapshot
    assert assemble(parts) == SEED


def test_a_large_state_is_assembled_holding_its_bytes_about_once() -> None:
    # assemble built the JCS form and the display form each as msgspec.Raw lists, joined
    # (a copy) and bracketed (a copy), then encoded (a copy, 1.34 times its size), holding
    # the JCS form while the display form was made: 4.2 times the state on top of its
    # fragments (a 20 MB state took 106 MB from the store). The JCS form now only goes
    # through the hash, and the display form is written once, into its answer.
    doc = parse(SEED)
    current = doc["current"]
    snapshot = current["graph_snapshots"][0]
    edges = [[n, n % 900] for n in range(25_000)]
    fragments = [
        _fragment({**snapshot, "created_at": f"2026-08-01T00:00:0{n}Z",
                   "event_id": "sha256:" + f"{n:x}" * 64,
                   "payload": {**snapshot["payload"], "edges": edges}})
        for n in range(8)
    ]  # fmt: skip
    lists = {name: [] for name in STATE_LISTS}
    lists["graph_snapshots"] = fragments
    parts = StateParts(
        pith_number=doc["pith_number"],
        event_count=9,
        valid_event_count=9,
        record=_fragment(current["record_created"]),
        canonical_record=current["canonical_record"],
        canonical_sha256=current["record_created"]["payload"]["canonical_sha256"],
        lists=lists,
        equivocations=[],
        invalid=[],
    )
    tracemalloc.start()
    try:
        held = tracemalloc.get_traced_memory()[0]
        out = assemble(parts)
        peak = tracemalloc.get_traced_memory()[1] - held
    finally:
        tracemalloc.stop()
    assert len(out) > 1_500_000
    assert peak < 1.5 * len(out)
    # the same bytes as the renderer of a document tree, and its digest
    assembled = parse(out)
    assert render(assembled) == out
    assert assembled["state_sha256"] == digest_document(assembled)
    assert [p["event_id"] for p in assembled["current"]["graph_snapshots"]] == [
        f.event_id for f in fragments
    ]


def test_seed_verifies() -> None:
    assert verify_state_document(SEED) == []
    assert verify_state_document(SEED + b"\n") == []


def test_seed_render_does_not_depend_on_dict_order() -> None:
    doc = parse(SEED)
    shuffled = dict(reversed(list(doc.items())))
    shuffled["current"] = dict(reversed(list(doc["current"].items())))
    rc = shuffled["current"]["record_created"]
    shuffled["current"]["record_created"] = {
        **dict(reversed(list(rc.items()))),
        "payload": dict(reversed(list(rc["payload"].items()))),
    }
    assert render(shuffled) == SEED


def tampered(change: Any, *, rehash: bool = True) -> bytes:
    """The seed changed by ``change(doc)``; with ``rehash`` its state_sha256 is recomputed,
    so that only the rule under test can catch the change."""
    doc = parse(SEED)
    change(doc)
    if rehash:
        doc["state_sha256"] = digest_document(doc)
    return render(doc)


def rules(data: bytes) -> set[str]:
    return {line.split(":", 1)[0] for line in verify_state_document(data)}


def test_changed_count_is_refused() -> None:
    def change(doc: dict[str, Any]) -> None:
        doc["event_count"] = 3

    assert rules(tampered(change)) == {"counts"}
    assert rules(tampered(change, rehash=False)) == {"counts", "state_sha256"}


def test_changed_valid_count_is_refused() -> None:
    def change(doc: dict[str, Any]) -> None:
        doc["valid_event_count"] = 3
        doc["event_count"] = 3

    assert rules(tampered(change)) == {"counts"}


def test_reordered_list_is_refused() -> None:
    def change(doc: dict[str, Any]) -> None:
        doc["current"]["source_aliases"].reverse()

    assert rules(tampered(change)) == {"source_aliases"}


def test_reordered_applied_event_ids_is_refused() -> None:
    def change(doc: dict[str, Any]) -> None:
        doc["applied_event_ids"].reverse()

    assert rules(tampered(change)) == {"applied_event_ids"}


def test_reordered_member_is_refused() -> None:
    # Swapping two members leaves every digest as it was: only re-rendering sees it.
    swapped = SEED.replace(
        b'"state_type":"pith_open_graph_state","state_version":"1.0"',
        b'"state_version":"1.0","state_type":"pith_open_graph_state"',
    )
    assert swapped != SEED
    assert parse(swapped) == parse(SEED)
    assert rules(swapped) == {"rendering"}


def test_reordered_payload_member_is_refused() -> None:
    a = b'"attestation_state":"computed",'
    assert SEED.count(a) == 1
    moved = SEED.replace(a, b"").replace(
        b'"source_version":2}', b'"source_version":2,' + a[:-1] + b"}"
    )
    assert moved != SEED and parse(moved) == parse(SEED)
    assert rules(moved) == {"rendering"}


def test_changed_state_sha256_is_refused() -> None:
    changed = SEED.replace(SEED_SHA.encode(), b"0" + SEED_SHA[1:].encode())
    assert rules(changed) == {"state_sha256"}


@pytest.mark.parametrize("suffix", [b" ", b"  ", b"\n\n", b" \n", b"\r\n", b"\t"])
def test_trailing_whitespace_is_refused(suffix: bytes) -> None:
    assert rules(SEED + suffix) == {"rendering"}


def test_pretty_printed_seed_is_refused() -> None:
    pretty = json.dumps(json.loads(SEED), indent=2, ensure_ascii=False).encode()
    assert rules(pretty) == {"rendering"}
    escaped = json.dumps(json.loads(SEED), separators=(",", ":")).encode()
    assert escaped == SEED  # the seed is pure ASCII, so escaping changes nothing here


def test_changed_record_is_refused() -> None:
    def change(doc: dict[str, Any]) -> None:
        doc["current"]["canonical_record"]["source"]["version"] = 3

    found = rules(tampered(change))
    assert {"canonical_record", "canonical_sha256", "pith_number"} <= found


def test_changed_pith_number_is_refused() -> None:
    def change(doc: dict[str, Any]) -> None:
        doc["pith_number"] = "pith:2025:" + doc["pith_number"][10:]

    assert rules(tampered(change)) == {"pith_number"}


def test_changed_alias_is_refused() -> None:
    def change(doc: dict[str, Any]) -> None:
        doc["current"]["source_aliases"][0]["created_at"] = LATER

    assert rules(tampered(change)) == {"source_aliases"}


def test_invalid_event_without_its_count_is_refused() -> None:
    def change(doc: dict[str, Any]) -> None:
        doc["invalid_events"].append({"event_id": "sha256:" + "0" * 64, "reason": "malformed"})

    assert rules(tampered(change)) == {"counts"}


def test_unknown_reason_is_refused() -> None:
    def change(doc: dict[str, Any]) -> None:
        doc["invalid_events"].append({"event_id": "sha256:" + "0" * 64, "reason": "forged"})
        doc["invalid_event_count"] = 1
        doc["event_count"] = 3

    assert rules(tampered(change)) == {"shape"}


@pytest.mark.parametrize(("member", "value"), [
    ("public_key_fingerprint", 5), ("public_key_fingerprint", ""), ("key_id", None),
    ("signer_type", "notary"),
])  # fmt: skip
def test_a_signer_of_other_than_non_empty_strings_is_refused(member: str, value: Any) -> None:
    """Spec 3: a signer object is exactly its four members, all non-empty strings (its
    type one of the six): no reduction writes another, so verify-state refuses one."""

    def change(doc: dict[str, Any]) -> None:
        doc["current"]["graph_snapshots"][0]["signer"][member] = value

    assert rules(tampered(change)) == {"shape"}


def test_missing_member_is_refused() -> None:
    doc = parse(SEED)
    del doc["equivocations"]
    assert rules(json.dumps(doc, separators=(",", ":")).encode()) == {"shape"}


def test_not_json_is_refused() -> None:
    assert rules(b"\xef\xbb\xbf" + SEED) == {"json"}
    assert rules(SEED[:-1]) == {"json"}


# --- documents built from events ---------------------------------------------------------

R = record_event()
PITH = R["pith_number"]


def document(*values: dict[str, Any]) -> dict[str, Any]:
    result = reduce_values(list(values))[PITH]
    assert isinstance(result, Reduction)
    return state_document(result)


def test_built_document_verifies() -> None:
    said = [event("author_attestation", R, payload={"statement": s}) for s in ("a", "b")]
    bad = event("correction", R, signer="mirror")
    others = [event(t, R) for t in ("graph_snapshot", "timestamp_anchor", "storage_attestation",
                                    "citation_signature", "replication_record", "correction",
                                    "mirror_hint")]
    doc = document(R, *said, bad, *others)
    data = render(doc)
    assert verify_state_document(data) == []
    assert verify_state_document(data + b"\n") == []
    assert doc["state_sha256"] == digest({k: v for k, v in doc.items() if k != "state_sha256"})
    assert list(doc) == list(STATE_MEMBERS)
    assert parse(data) == doc
    assert doc["invalid_events"] == [{"event_id": bad["event_id"], "reason": "unauthorized_signer"}]
    for name in ("graph_snapshots", "timestamp_anchors", "storage_attestations",
                 "citation_signatures", "replication_records", "corrections", "mirror_hints"):
        assert len(doc["current"][name]) == 1, name
    assert len(doc["current"]["author_attestations"]) == 1
    assert doc["equivocation_count"] == 1


def test_projection_shows_five_members() -> None:
    hint = event("mirror_hint", R)
    doc = document(R, hint)
    assert doc["current"]["mirror_hints"] == [
        {"event_id": hint["event_id"], "target": "record", "created_at": LATER,
         "signer": hint["signer"], "payload": hint["payload"]}
    ]
    assert list(doc["current"]["record_created"]) == ["event_id", "target", "created_at",
                                                      "signer", "payload"]
    assert doc["current"]["canonical_record"] == R["payload"]["canonical_record"]
    assert doc["applied_event_ids"] == [R["event_id"], hint["event_id"]]


def test_lists_are_sorted_by_time_then_event_id() -> None:
    # Two at one instant by two keys (one key would make them equivocate).
    hints = [event("mirror_hint", R, t, signer=k, payload={"locator": f"https://m/{k}"})
             for k, t in [("mirror", "2026-05-01T00:00:00Z"), ("mirror", "2026-02-01T00:00:00Z"),
                          ("registry", "2026-02-01T00:00:00Z"),
                          ("registry-2", "2026-01-01T00:00:00Z")]]
    doc = document(*hints, R)
    listed = [(p["created_at"], p["event_id"]) for p in doc["current"]["mirror_hints"]]
    assert len(listed) == 4
    assert listed == sorted((h["created_at"], h["event_id"]) for h in hints)
    assert doc["applied_event_ids"] == [R["event_id"]] + [e for _, e in listed]


def test_invalid_events_sorted_by_event_id() -> None:
    bad = [event("correction", R, t, signer="author") for t in
           ("2026-02-01T00:00:00Z", "2026-03-01T00:00:00Z", "2026-04-01T00:00:00Z")]
    doc = document(R, *bad)
    listed = [i["event_id"] for i in doc["invalid_events"]]
    assert listed == sorted(b["event_id"] for b in bad)


def test_render_is_compact_utf8_with_jcs_member_order_inside_payloads() -> None:
    payload = {"statement": "caf\u00e9 \U0001f600 \u2028", "z": 1, "a": {"\ue000": 0,
                                                                            "\U0001f600": 1}}
    said = event("author_attestation", R, payload=payload)
    data = render(document(R, said))
    assert b": " not in data and b", " not in data
    assert "caf\u00e9 \U0001f600 \u2028".encode() in data
    assert b"\\u" not in data
    assert jcs(said["payload"]) in data
    assert verify_state_document(data) == []


def test_source_aliases_of_an_arxiv_record() -> None:
    record = canonical_record(source_id="2411.00284", version=2)
    sha = digest(record)
    aliases = source_aliases(record, sha, "2026-01-01T00:00:00Z")
    from pithlog.protocol.records import base32_of

    b = base32_of(sha)
    assert [(a["alias_kind"], a["alias_value"]) for a in aliases] == [
        ("arxiv", "2411.00284"),
        ("arxiv_version", "2411.00284v2"),
        ("doi", "10.48550/arxiv.2411.00284"),
        ("pith_short_12", b[:12]),
        ("pith_short_16", b[:16]),
        ("pith_short_8", b[:8]),
    ]
    assert all(a["created_at"] == "2026-01-01T00:00:00Z" for a in aliases)


def test_arxiv_doi_alias_keeps_the_id_as_written() -> None:
    # docs/protocol.md, choice 17: only a source of kind doi is lowercased.
    record = canonical_record(source_id="Math.AG/0101001", version=3)
    aliases = {a["alias_kind"]: a["alias_value"]
               for a in source_aliases(record, digest(record), "2026-01-01T00:00:00Z")}
    assert aliases["doi"] == "10.48550/arxiv.Math.AG/0101001"
    assert aliases["arxiv"] == "Math.AG/0101001"
    assert aliases["arxiv_version"] == "Math.AG/0101001v3"


def test_source_aliases_of_a_doi_record_lower_case_ascii_only() -> None:
    record = canonical_record(source_id="10.1000/ABC-\u00c9\u0130", kind="doi", version=1)
    aliases = source_aliases(record, digest(record), "2026-01-01T00:00:00Z")
    assert [a["alias_kind"] for a in aliases] == ["doi", "pith_short_12", "pith_short_16",
                                                  "pith_short_8"]
    assert aliases[0]["alias_value"] == "10.1000/abc-\u00c9\u0130"


def test_source_aliases_of_another_kind() -> None:
    record = canonical_record(source_id="X-1", kind="hal", version=1)
    aliases = source_aliases(record, digest(record), "2026-01-01T00:00:00Z")
    assert [a["alias_kind"] for a in aliases] == ["pith_short_12", "pith_short_16",
                                                  "pith_short_8"]


def test_tampered_built_document_is_refused() -> None:
    hint = event("mirror_hint", R)
    doc = document(R, hint)
    doc["current"]["mirror_hints"] = []
    doc["state_sha256"] = digest_document(doc)
    # applied_event_ids still names the hint, which current no longer shows.
    assert rules(render(doc)) == {"applied_event_ids"}


# --- each rule of section 9, one at a time, on a document with every part filled -------------


def _full() -> dict[str, Any]:
    """A reduced document holding an equivocation, an invalid event, and a list of two."""
    said = [event("author_attestation", R, payload={"statement": s}) for s in ("a", "b")]
    hints = [event("mirror_hint", R, t, payload={"locator": f"https://m/{t}"})
             for t in ("2026-02-01T00:00:00Z", "2026-03-01T00:00:00Z")]  # fmt: skip
    doc = document(R, *said, *hints, event("correction", R, signer="mirror"))
    assert doc["equivocation_count"] == 1 and doc["invalid_event_count"] == 1
    assert len(doc["current"]["mirror_hints"]) == 2
    return doc


FULL = render(_full())
OTHER_ID = "sha256:" + "0" * 64


def _applied_again(doc: dict[str, Any]) -> None:
    """applied_event_ids as section 8 derives them from ``current``, so that a change to
    the projections is caught by its own rule and not by this one."""
    current = doc["current"]
    others = sorted((p for v in current.values() if isinstance(v, list) for p in v
                     if "signer" in p), key=lambda p: (p["created_at"], p["event_id"]))  # fmt: skip
    doc["applied_event_ids"] = [current["record_created"]["event_id"],
                                *(p["event_id"] for p in others)]  # fmt: skip


def _predating(doc: dict[str, Any]) -> None:
    doc["current"]["mirror_hints"][0]["created_at"] = "2025-01-01T00:00:00Z"
    _applied_again(doc)


def _equivocation_twice(doc: dict[str, Any]) -> None:
    losers = len(doc["equivocations"][0]["event_ids"]) - 1
    doc["equivocations"] *= 2
    doc["equivocation_count"] = 2
    doc["valid_event_count"] += losers
    doc["event_count"] += losers


def _invalid_twice(doc: dict[str, Any]) -> None:
    doc["invalid_events"] *= 2
    doc["invalid_event_count"] = 2
    doc["event_count"] += 1


def _hint_twice(doc: dict[str, Any]) -> None:
    hints = doc["current"]["mirror_hints"]
    hints.insert(0, hints[0])
    _applied_again(doc)
    doc["valid_event_count"] += 1
    doc["event_count"] += 1


def _applied_not_first(doc: dict[str, Any]) -> None:
    doc["equivocations"][0]["event_ids"].reverse()


def _applied_not_applied(doc: dict[str, Any]) -> None:
    e = doc["equivocations"][0]
    e["applied_event_id"] = e["event_ids"][0] = OTHER_ID


def _loser_applied(doc: dict[str, Any]) -> None:
    """A losing event shown in the place of the one its slot applies, listed first."""
    e = doc["equivocations"][0]
    applied, loser = e["event_ids"]
    for p in doc["current"]["author_attestations"]:
        if p["event_id"] == applied:
            p["event_id"] = loser
    e["event_ids"], e["applied_event_id"] = [loser, applied], loser
    _applied_again(doc)


def _one_slot_twice(doc: dict[str, Any]) -> None:
    """Two hints by one key at one instant both applied: they equivocate, one is applied."""
    hints = doc["current"]["mirror_hints"]
    hints[1]["created_at"] = hints[0]["created_at"]
    hints.sort(key=lambda p: (p["created_at"], p["event_id"]))
    _applied_again(doc)


def _hint_as_correction(doc: dict[str, Any]) -> None:
    """A mirror's hint shown among the corrections, which only a registry may sign."""
    doc["current"]["corrections"].append(doc["current"]["mirror_hints"].pop())


def _invalid_out_of_order(doc: dict[str, Any]) -> None:
    """A second invalid event, listed after the first though its event_id is smaller."""
    doc["invalid_events"].append({"event_id": OTHER_ID, "reason": "bad_signature"})
    doc["invalid_event_count"] += 1
    doc["event_count"] += 1


def _invalid_and_applied(doc: dict[str, Any]) -> None:
    doc["invalid_events"][0]["event_id"] = doc["applied_event_ids"][1]


RULE_BREAKS: dict[str, tuple[Any, set[str]]] = {
    "state_version": (lambda d: d.update(state_version="1.1"), {"header"}),
    "merge_version": (lambda d: d.update(merge_version="pith-open-graph-merge-v2"), {"header"}),
    "record_created target": (
        lambda d: d["current"]["record_created"].update(target="claim:x"), {"record_created"}),
    "equivocation_count": (lambda d: d.update(equivocation_count=2), {"counts"}),
    "a list out of time order": (lambda d: d["current"]["mirror_hints"].reverse(), {"order"}),
    "an applied event named twice": (_hint_twice, {"applied_event_ids", "event_ids"}),
    "an event older than the record": (_predating, {"predates_record"}),
    "a slot twice": (_equivocation_twice, {"order", "event_ids"}),
    "an invalid event twice": (_invalid_twice, {"order", "event_ids"}),
    "invalid events out of event_id order": (_invalid_out_of_order, {"order"}),
    # its applied event then sits among the losers too
    "the applied event not first": (_applied_not_first, {"equivocations", "event_ids"}),
    "an applied event that is not applied": (_applied_not_applied, {"equivocations"}),
    "an event both applied and invalid": (_invalid_and_applied, {"event_ids"}),
    "a losing event applied": (_loser_applied, {"equivocations"}),
    "a slot that is not its applied event's": (
        lambda d: d["equivocations"][0]["slot"].update(target="claim:x"), {"equivocations"}),
    "the record's slot for another event": (
        lambda d: d["equivocations"][0]["slot"].update(
            event_type="record_created", key_id=None, created_at=None), {"equivocations"}),
    "two applied events in one slot": (_one_slot_twice, {"slots"}),
    # checks 8, 9, 10 and 14, which a projection shows enough of, fail on no applied event
    "an event in another type's list": (_hint_as_correction, {"projections"}),
    "an applied event of a signer type its type refuses": (
        lambda d: d["current"]["author_attestations"][0]["signer"].update(signer_type="mirror"),
        {"projections"}),
    "an applied event of a target its type refuses": (
        lambda d: d["current"]["mirror_hints"][0].update(target="graph"), {"projections"}),
    "an applied event of a payload its type refuses": (
        lambda d: d["current"]["mirror_hints"][0]["payload"].update(locator=""), {"projections"}),
    "a record whose payload its type refuses": (
        lambda d: d["current"]["record_created"]["payload"].pop("attestation_state"),
        {"projections"}),
    # the shape: each of these is refused before any rule is read
    "a list that is an object": (lambda d: d.update(equivocations={}), {"shape"}),
    "an object that is null": (lambda d: d.update(current=None), {"shape"}),
    "a count that is a boolean": (lambda d: d.update(equivocation_count=True), {"shape"}),
    "a negative count": (lambda d: d.update(invalid_event_count=-1), {"shape"}),
    "a pith_number of another form": (lambda d: d.update(pith_number="pith:x"), {"shape"}),
    "a projection's event_id": (
        lambda d: d["current"]["mirror_hints"][0].update(event_id="sha256:x"), {"shape"}),
    "a projection's target": (
        lambda d: d["current"]["mirror_hints"][0].update(target=5), {"shape"}),
    "a projection's created_at": (
        lambda d: d["current"]["mirror_hints"][0].update(created_at="2026-02-30T00:00:00Z"),
        {"shape"}),
    "a projection's payload": (
        lambda d: d["current"]["mirror_hints"][0].update(payload=[]), {"shape"}),
    "a record without submitted_at": (
        lambda d: d["current"]["canonical_record"]["metadata"].pop("submitted_at"), {"shape"}),
    "canonical_sha256 not a string": (
        lambda d: d["current"]["record_created"]["payload"].update(canonical_sha256=5),
        {"shape"}),
    "a slot member": (lambda d: d["equivocations"][0]["slot"].update(target=5), {"shape"}),
    "an equivocation of one event": (
        lambda d: d["equivocations"][0].update(event_ids=d["equivocations"][0]["event_ids"][:1]),
        {"shape"}),
    "an applied_event_id": (
        lambda d: d["equivocations"][0].update(applied_event_id="x"), {"shape"}),
    "an invalid event's event_id": (
        lambda d: d["invalid_events"][0].update(event_id="x"), {"shape"}),
    "applied_event_ids holding another value": (
        lambda d: d["applied_event_ids"].append("x"), {"shape"}),
}


def test_the_full_document_verifies() -> None:
    assert verify_state_document(FULL) == []


@pytest.mark.parametrize("broken", sorted(RULE_BREAKS))
def test_each_rule_of_section_9_is_checked(broken: str) -> None:
    """Each change breaks one rule (its state_sha256 recomputed), and only that rule is
    reported, so that a check left out is noticed."""
    change, expected = RULE_BREAKS[broken]
    doc = parse(FULL)
    change(doc)
    doc["state_sha256"] = digest_document(doc)
    if "shape" not in expected:
        assert _written(doc) == render(doc)
    assert rules(_written(doc)) == expected


def test_a_state_sha256_that_is_not_a_string_is_refused() -> None:
    doc = parse(FULL)
    doc["state_sha256"] = 5
    assert rules(_written(doc)) == {"shape"}


def _written(doc: dict[str, Any]) -> bytes:
    """``doc`` as compact JSON in its own member order (what render writes for a document
    of the right shape; render itself would rewrite one of the wrong shape)."""
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode()


def test_an_applied_event_that_disagrees_with_the_record_is_refused() -> None:
    """Check 14: an anchor of the record that anchors another hash is never applied."""
    doc = document(R, event("timestamp_anchor", R))
    doc["current"]["timestamp_anchors"][0]["payload"]["anchored_sha256"] = "0" * 64
    doc["state_sha256"] = digest_document(doc)
    failures = verify_state_document(render(doc))
    assert len(failures) == 1 and failures[0].startswith("projections: ")
    assert "record_mismatch" in failures[0]
