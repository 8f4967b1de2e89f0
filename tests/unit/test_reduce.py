"""The reduction (spec section 7): step 0, the chosen record, pending piths, slots."""

from __future__ import annotations

import itertools
from typing import Any

from pithlog.protocol.canonical import jcs
from pithlog.protocol.events import admit
from pithlog.protocol.reduce import (
    Pending,
    Reduction,
    collapse,
    collapse_streamed,
    judge,
    keep_preferred,
    reduce_events,
    reduce_pith,
)
from pithlog.protocol.state import render, state_document
from pithlog.protocol.text_forms import encode_b64

from .builders import (
    KEYRING,
    LATER,
    RECORD_AT,
    canonical_record,
    event,
    key,
    record_event,
    reduce_values,
    reseal,
    seal,
)

R = record_event()
PITH = R["pith_number"]


def reduction(*values: dict[str, Any]) -> Reduction:
    result = reduce_values(list(values))[PITH]
    assert isinstance(result, Reduction)
    return result


def ids(envelopes: Any) -> list[str]:
    return [e.event_id for e in envelopes]


def time_order(values: list[dict[str, Any]]) -> list[str]:
    return [v["event_id"] for v in sorted(values, key=lambda v: (v["created_at"], v["event_id"]))]


# --- the chosen record -------------------------------------------------------------------


def test_chosen_record_is_the_earliest_valid_one() -> None:
    later = record_event(created_at="2026-01-02T00:00:00Z")
    assert later["pith_number"] == PITH
    for order in itertools.permutations([later, R]):
        result = reduction(*order)
        assert result.record.event_id == R["event_id"]
        assert result.applied[0].event_id == R["event_id"]


def test_chosen_record_ties_on_created_at_go_to_the_smallest_event_id() -> None:
    a = record_event(attestation_state="computed")
    b = record_event(attestation_state="recomputed")
    c = record_event(attestation_state="reviewed")
    assert len({a["event_id"], b["event_id"], c["event_id"]}) == 3
    smallest = min(a["event_id"], b["event_id"], c["event_id"])
    for order in itertools.permutations([a, b, c]):
        assert reduction(*order).record.event_id == smallest


def test_earlier_invalid_record_is_not_chosen() -> None:
    early_bad = record_event(created_at="2025-01-01T00:00:00Z", signer="stranger")
    result = reduction(early_bad, R)
    assert result.record.event_id == R["event_id"]
    assert result.invalid == {early_bad["event_id"]: "unknown_key"}


def test_other_valid_records_fill_the_record_created_slot() -> None:
    later = record_event(created_at="2026-01-02T00:00:00Z")
    latest = record_event(created_at="2026-01-03T00:00:00Z")
    result = reduction(latest, R, later)
    assert len(result.equivocations) == 1
    eq = result.equivocations[0]
    assert eq.slot == ("record_created",)
    assert ids(eq.events) == [R["event_id"], later["event_id"], latest["event_id"]]
    assert eq.applied.event_id == R["event_id"]
    assert ids(result.applied) == [R["event_id"]]
    assert result.valid_event_count == 3 and result.invalid == {}

    doc = state_document(result)
    assert doc["equivocations"] == [
        {
            "slot": {"event_type": "record_created", "target": "record", "key_id": None,
                     "created_at": None},
            "event_ids": [R["event_id"], later["event_id"], latest["event_id"]],
            "applied_event_id": R["event_id"],
        }
    ]
    assert doc["equivocation_count"] == 1


def test_records_by_two_registry_keys_share_the_slot() -> None:
    other = record_event(signer="registry-2", created_at="2026-01-01T00:00:01Z")
    assert other["pith_number"] == PITH
    result = reduction(R, other)
    assert result.record.event_id == R["event_id"]
    assert [e.slot for e in result.equivocations] == [("record_created",)]


# --- pending -----------------------------------------------------------------------------


def test_pith_without_a_valid_record_is_pending() -> None:
    hint = event("mirror_hint", R)
    bad_record = record_event(signer="stranger")
    result = reduce_values([hint, bad_record])[PITH]
    assert isinstance(result, Pending)
    assert result.pith_number == PITH
    assert result.event_count == 2
    assert result.invalid == {bad_record["event_id"]: "unknown_key"}


def test_pending_events_are_held_until_a_record_arrives() -> None:
    early = event("mirror_hint", R, "2025-06-01T00:00:00Z")
    hint = event("mirror_hint", R)
    pending = reduce_values([early, hint])[PITH]
    # Before a record exists nothing can predate it: both events wait, neither is invalid.
    assert isinstance(pending, Pending) and pending.invalid == {}
    result = reduction(early, hint, R)
    assert result.invalid == {early["event_id"]: "predates_record"}
    assert ids(result.applied) == [R["event_id"], hint["event_id"]]


def test_several_piths_are_reduced_separately_and_in_order() -> None:
    r2 = record_event(canonical_record(source_id="2301.00001", version=1,
                                       submitted_at="2023-01-01T00:00:00Z"))
    r3 = record_event(canonical_record(source_id="10.1000/XYZ", kind="doi", version=1))
    hint2 = event("mirror_hint", r2)
    orphan = event("mirror_hint", record_event(canonical_record(source_id="2302.1", version=1)))
    results = reduce_values([hint2, R, orphan, r3, r2])
    assert list(results) == sorted(results)
    assert len(results) == 4
    assert isinstance(results[orphan["pith_number"]], Pending)
    assert ids(results[r2["pith_number"]].applied) == [r2["event_id"], hint2["event_id"]]
    assert ids(results[PITH].applied) == [R["event_id"]]
    assert ids(results[r3["pith_number"]].applied) == [r3["event_id"]]


# --- slots and equivocation --------------------------------------------------------------


def attestation(statement: str, created_at: str = LATER, target: str = "claim:c1",
                signer: str = "author") -> dict[str, Any]:
    return event("author_attestation", R, created_at, signer=signer, target=target,
                 payload={"statement": statement})


def test_equivocation_in_a_slot() -> None:
    said = [attestation(s) for s in ("yes", "no", "maybe")]
    ordered = time_order(said)  # one created_at: by event_id
    for order in itertools.permutations([R, *said]):
        result = reduction(*order)
        assert len(result.equivocations) == 1
        eq = result.equivocations[0]
        assert eq.slot == ("author_attestation", "claim:c1", "test-author", LATER)
        assert ids(eq.events) == ordered
        assert eq.applied.event_id == ordered[0]
        assert ids(result.applied) == [R["event_id"], ordered[0]]
        assert result.event_count == 4
        assert result.valid_event_count == 4 == len(result.applied) + len(eq.events) - 1
        assert result.invalid == {}


def test_equivocation_counts_in_the_state_document() -> None:
    said = [attestation(s) for s in ("yes", "no")]
    other_slot = [attestation(s, target="record") for s in ("a", "b", "c")]
    bad = event("correction", R, signer="author")
    fine = event("mirror_hint", R)
    doc = state_document(reduction(R, *said, *other_slot, bad, fine))
    assert doc["event_count"] == 8
    assert doc["invalid_event_count"] == 1
    assert doc["valid_event_count"] == 7
    assert doc["equivocation_count"] == 2
    losers = sum(len(e["event_ids"]) - 1 for e in doc["equivocations"])
    assert doc["valid_event_count"] == len(doc["applied_event_ids"]) + losers == 4 + 3
    assert doc["event_count"] == doc["valid_event_count"] + doc["invalid_event_count"]
    # Entries sorted by slot: target "claim:c1" < "record".
    assert [e["slot"]["target"] for e in doc["equivocations"]] == ["claim:c1", "record"]
    for entry in doc["equivocations"]:
        assert entry["event_ids"][0] == entry["applied_event_id"]
        assert entry["applied_event_id"] in doc["applied_event_ids"]


def test_different_slots_are_not_equivocations() -> None:
    base = attestation("yes")
    other_time = attestation("no", created_at="2026-03-01T12:00:01Z")
    other_target = attestation("no", target="claim:c2")
    other_key = event("author_attestation", R, signer="registry", target="claim:c1",
                      payload={"statement": "no"})  # registry may not attest: invalid
    result = reduction(R, base, other_time, other_target, other_key)
    assert result.equivocations == ()
    assert set(ids(result.applied)) == {R["event_id"], base["event_id"],
                                        other_time["event_id"], other_target["event_id"]}
    assert result.invalid == {other_key["event_id"]: "unauthorized_signer"}


def test_targets_that_differ_only_in_unicode_normalization_are_different_slots() -> None:
    # No Unicode normalization anywhere (docs/protocol.md): a precomposed and a decomposed
    # "é" are different targets, so two different statements about them do not equivocate.
    nfc = attestation("yes", target="claim:caf\u00e9")
    nfd = attestation("no", target="claim:cafe\u0301")
    result = reduction(R, nfc, nfd)
    assert result.equivocations == ()
    assert set(ids(result.applied)) == {R["event_id"], nfc["event_id"], nfd["event_id"]}


def test_slot_key_includes_the_signing_key() -> None:
    a = event("mirror_hint", R, signer="mirror")
    b = event("mirror_hint", R, signer="registry")
    c = event("mirror_hint", R, signer="registry-2")
    result = reduction(R, a, b, c)
    assert result.equivocations == ()
    assert len(result.applied) == 4


def test_invalid_events_do_not_equivocate() -> None:
    good = attestation("yes")
    forged = {**attestation("no"), "signature_b64": encode_b64(bytes(64))}
    result = reduction(R, good, forged)
    assert result.equivocations == ()
    assert result.invalid == {forged["event_id"]: "bad_signature"}


def test_applied_order_is_record_first_then_time() -> None:
    a = event("mirror_hint", R, "2026-05-01T00:00:00Z")
    b = event("correction", R, "2026-02-01T00:00:00Z")
    c = event("graph_snapshot", R, RECORD_AT)
    result = reduction(a, b, c, R)
    assert ids(result.applied) == [R["event_id"], c["event_id"], b["event_id"], a["event_id"]]


def test_reduce_pith_is_order_independent() -> None:
    values = [R, attestation("yes"), attestation("no"), event("mirror_hint", R)]
    renders = set()
    for order in itertools.permutations(values):
        kept = collapse([admit(v) for v in order], KEYRING)
        result = reduce_pith(PITH, list(kept.values()))
        assert isinstance(result, Reduction)
        renders.add(render(state_document(result)))
    assert len(renders) == 1


# --- step 0: one envelope per event_id ---------------------------------------------------


def signature_of_zeros(ev: dict[str, Any]) -> dict[str, Any]:
    return {**ev, "signature_b64": encode_b64(bytes(64))}


def test_forged_copy_never_displaces_the_valid_one() -> None:
    good = event("mirror_hint", R)
    forged = signature_of_zeros(good)
    # The forgery is the smaller byte string, so only the validity preference keeps it out.
    assert jcs(forged) < jcs(good)
    for order in ([good, forged], [forged, good], [forged, good, forged]):
        kept = collapse([admit(v) for v in order], KEYRING)
        assert kept[good["event_id"]].envelope.value == good
        assert kept[good["event_id"]].reason is None
        result = reduction(R, *order)
        assert result.invalid == {}
        assert good["event_id"] in ids(result.applied)
        assert result.event_count == 2


def test_forged_record_copy_never_displaces_the_valid_record() -> None:
    forged = signature_of_zeros(R)
    assert jcs(forged) < jcs(R)
    for order in ([R, forged], [forged, R]):
        result = reduction(*order)
        assert result.record.value == R
        assert result.event_count == 1


def test_copy_under_another_pith_does_not_split_the_event() -> None:
    # The same event_id on a body that names another pith: it fails check 3, and the
    # valid copy wins across the whole input, before grouping by pith.
    good = event("mirror_hint", R)
    r2 = record_event(canonical_record(source_id="2301.00001", version=1))
    moved = {**good, "pith_number": r2["pith_number"]}
    for order in ([good, moved, r2, R], [r2, moved, R, good]):
        results = reduce_values(order)
        assert results[PITH].event_count == 2
        assert results[r2["pith_number"]].event_count == 1
        assert results[r2["pith_number"]].invalid == {}


def test_among_failing_copies_the_latest_failing_check_wins() -> None:
    good = event("mirror_hint", R)
    eid = good["event_id"]
    # Fails at check 6 (bad_signature): right body, wrong signature.
    at_6 = {**good, "signature_b64": encode_b64(key("mirror").sign(b"something else"))}
    # Fails at check 3 (event_id_mismatch): another body under this event_id.
    at_3 = {**reseal(good, "mirror", payload={"locator": "a"}), "event_id": eid}
    # Fails at check 1 (malformed): an extra member.
    at_1 = {**good, "zz": 1}
    # Fails at check 5 (signer_mismatch): another signer_id under this event_id.
    body = {k: v for k, v in good.items() if k not in ("event_id", "signature_b64")}
    at_5 = {**seal({**body, "signer": {**good["signer"], "signer_id": "a"}}, "mirror"),
            "event_id": eid}
    copies = [at_1, at_3, at_5, at_6]
    assert all(c["event_id"] == eid for c in copies)
    for order in itertools.permutations(copies):
        kept = collapse([admit(v) for v in order], KEYRING)
        assert kept[eid].reason == "bad_signature"
        assert kept[eid].envelope.value == at_6
        result = reduce_values([R, *order])[PITH]
        assert result.invalid == {eid: "bad_signature"}
        assert result.event_count == 2


def test_every_step_0_folds_through_keep_preferred() -> None:
    # One rule, one home: folding copies one at a time through keep_preferred keeps, in
    # every order, the copy collapse and collapse_streamed keep (the store folds the same).
    good = event("mirror_hint", R)
    eid = good["event_id"]
    copies = [
        good,
        signature_of_zeros(good),  # check 6, and the smaller bytes
        {**good, "zz": 1},  # check 1
    ]
    for order in itertools.permutations(copies):
        judged = [judge(admit(v), KEYRING) for v in order]
        kept = None
        for candidate in judged:
            kept = keep_preferred(kept, candidate)
            assert keep_preferred(kept, candidate) is kept  # the same copy again: no change
        assert kept is not None and kept.envelope.value == good and kept.reason is None
        assert collapse([admit(v) for v in order], KEYRING)[eid].envelope.value == good
        streamed = collapse_streamed([admit(v) for v in order], KEYRING, batch=1, lag=0)
        assert streamed[PITH] == [(None, jcs(good))]


def test_failing_copies_tie_by_smallest_jcs_bytes() -> None:
    good = event("mirror_hint", R)
    eid = good["event_id"]
    copies = [{**good, "signature_b64": encode_b64(bytes([n]) * 64)} for n in (0x90, 0x10, 0xF0)]
    copies.append({**good, "signature_b64": "AA=="})
    smallest = min(copies, key=jcs)
    # "8PDw..." (0xF0 bytes): the digit 8 sorts below every letter.
    assert smallest["signature_b64"].startswith("8PDw")
    for order in itertools.permutations(copies):
        kept = collapse([admit(v) for v in order], KEYRING)
        assert kept[eid].envelope.value == smallest
        assert kept[eid].reason == "bad_signature"


def test_shorter_string_wins_when_it_is_a_prefix() -> None:
    # "AAAA" against "AAAAAAAA": the closing quote (0x22) sorts below any base64 character.
    good = event("mirror_hint", R)
    eid = good["event_id"]
    short = {**good, "signature_b64": "AAAA"}
    long = {**good, "signature_b64": "AAAAAAAA"}
    for order in ([short, long], [long, short]):
        assert collapse([admit(v) for v in order], KEYRING)[eid].envelope.value == short


def test_tie_break_compares_utf8_bytes_unsigned() -> None:
    good = event("mirror_hint", R)
    eid = good["event_id"]

    def copy_with(locator: str) -> dict[str, Any]:
        # Another body under this event_id: each copy fails at check 3.
        return {**good, "payload": {"locator": locator}}

    # Unsigned bytes: "z" (0x7a) < "\u00e9" (0xc3 0xa9); a signed comparison would differ.
    z, e_acute = copy_with("z"), copy_with("\u00e9")
    for order in ([z, e_acute], [e_acute, z]):
        kept = collapse([admit(v) for v in order], KEYRING)[eid]
        assert kept.reason == "event_id_mismatch"
        assert kept.envelope.value == z
    # UTF-8 bytes, not UTF-16 units: U+FF61 (ef bd a1) < U+1F600 (f0 9f 98 80), though in
    # UTF-16 the surrogate d83d would sort first.
    halfwidth, emoji = copy_with("\uff61"), copy_with("\U0001f600")
    for order in ([halfwidth, emoji], [emoji, halfwidth]):
        assert collapse([admit(v) for v in order], KEYRING)[eid].envelope.value == halfwidth


def test_the_same_envelope_in_another_member_order_is_one_copy() -> None:
    good = event("mirror_hint", R)
    eid = good["event_id"]
    reordered = dict(reversed(list(good.items())))
    kept = collapse([admit(reordered), admit(good)], KEYRING)
    assert kept[eid].reason is None and kept[eid].envelope.encoded == jcs(good)


def test_duplicates_count_once() -> None:
    hint = event("mirror_hint", R)
    result = reduction(R, hint, hint, R, hint)
    assert result.event_count == 2
    assert ids(result.applied) == [R["event_id"], hint["event_id"]]


class _CountedBytes(bytes):
    """JCS bytes that count how often they are compared for equality."""

    compared = 0
    __hash__ = bytes.__hash__

    def __eq__(self, other: object) -> bool:
        _CountedBytes.compared += 1
        return bytes.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        _CountedBytes.compared += 1
        return bytes.__ne__(self, other)


def test_many_copies_of_one_event_id_cost_linear_comparisons() -> None:
    # Anyone can attach another signature to a published body: n distinct copies of one
    # event_id. Telling a new copy from the ones seen must not compare it with each of
    # them (n^2 / 2 comparisons of ~1 KiB: 20,000 copies took half a minute).
    good = event("mirror_hint", R)
    copies = [admit(good)] + [
        admit({**good, "signature_b64": encode_b64(n.to_bytes(2, "big") * 32)})
        for n in range(300)
    ]
    counted = [
        admit(c.value, _CountedBytes(c.encoded)) for c in copies for _ in range(2)
    ]  # each copy twice: a repeat is still recognized
    for run in (
        lambda: collapse(counted, KEYRING)[good["event_id"]],
        lambda: collapse_streamed(counted, KEYRING, batch=64)[PITH],
    ):
        _CountedBytes.compared = 0
        kept = run()
        assert _CountedBytes.compared <= 4 * len(counted)
        if isinstance(kept, list):
            assert kept == [(None, jcs(good))]
        else:
            assert kept.reason is None and kept.envelope.encoded == jcs(good)


def test_reduce_events_accepts_any_iterable() -> None:
    envelopes = (admit(v) for v in [R, event("mirror_hint", R)])
    result = reduce_events(envelopes, KEYRING)[PITH]
    assert isinstance(result, Reduction) and len(result.applied) == 2
