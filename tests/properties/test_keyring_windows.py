"""Spec sections 3, 6 and 7 under generated keyrings: keys left out, keys whose signer
differs, and validity windows whose edges are the instants the events are dated at.

The generated universes (``universe.py``), with duplicates and in any order, reduce under
such a keyring to what the independent model (``model.py``) gives, whatever the order;
every state they give conforms (section 9); and the count of every reason is what the
windows say at their edges.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from pithlog.parallel import _reduce_part, rendered, split_by_pith
from pithlog.protocol.events import Envelope
from pithlog.protocol.keys import Keyring
from pithlog.protocol.reduce import Pending, collapse, reduce_events
from pithlog.protocol.state import render, state_document
from pithlog.protocol.state_verify import verify_state_document

from . import model
from .keyrings import both, keyring_entries
from .universe import any_sets, build, envelopes, partitioned

Specs = list[tuple[Any, ...]]
PAST_CHECK_6 = (None, "key_not_valid", "unauthorized_signer", "bad_target", "bad_payload",
                "pith_number_mismatch", "bad_receipt")
"""Verdicts of checks 1-12 that a copy gets only once checks 1-6 passed."""


def outcomes(items: list[Envelope], keyring: Keyring) -> dict[str, Any]:
    """Every pith's rendered state, or for a pending pith what it holds (as the model)."""
    out: dict[str, Any] = {}
    for pith, result in reduce_events(items, keyring).items():
        if isinstance(result, Pending):
            out[pith] = ("pending", result.event_count, sorted(result.invalid.items()))
        else:
            out[pith] = render(state_document(result))
    return out


@settings(max_examples=80, deadline=None)
@given(specs=any_sets(), entries=keyring_entries(), data=st.data())
def test_windowed_keyrings_reduce_as_the_model_in_any_order(
    specs: Specs, entries: list[dict[str, Any]], data: st.DataObject
) -> None:
    keyring, model_ring = both(entries)
    values = [build(s) for s in specs]
    expected = model.reduce(values, model_ring)
    items = envelopes(specs)
    assert outcomes(items, keyring) == expected
    extra = data.draw(st.lists(st.sampled_from(items), max_size=6), label="duplicates")
    shuffled = data.draw(st.permutations(items + extra), label="order")
    assert outcomes(shuffled, keyring) == expected
    for document in expected.values():
        if isinstance(document, bytes):
            assert verify_state_document(document) == []


@settings(max_examples=60, deadline=None)
@given(specs=any_sets(), entries=keyring_entries(windowed=True))
def test_key_not_valid_is_exactly_the_window_at_its_edges(
    specs: Specs, entries: list[dict[str, Any]]
) -> None:
    # Step 0 under a windowed keyring: a kept copy whose key is known, whose signer agrees
    # and whose signature verifies is key_not_valid exactly when created_at falls outside
    # [not_before, not_after) or at or after revoked_at (string comparison, section 1).
    keyring, _ = both(entries)
    for event_id, judged in collapse(envelopes(specs), keyring).items():
        value = judged.envelope.value
        if judged.reason in PAST_CHECK_6:
            entry = keyring[value["signer"]["key_id"]]
            t = value["created_at"]
            inside = (
                (entry.not_before is None or entry.not_before <= t)
                and (entry.not_after is None or t < entry.not_after)
                and (entry.revoked_at is None or t < entry.revoked_at)
            )
            assert inside == (judged.reason != "key_not_valid"), (event_id, t, entry)


@settings(max_examples=60, deadline=None)
@given(specs=any_sets(), entries=keyring_entries(), data=st.data())
def test_counts_partition_the_events_under_any_keyring(
    specs: Specs, entries: list[dict[str, Any]], data: st.DataObject
) -> None:
    keyring, _ = both(entries)
    items = envelopes(specs)
    items += data.draw(st.lists(st.sampled_from(items), max_size=4), label="duplicates")
    partitioned(reduce_events(items, keyring), items)


@settings(max_examples=60, deadline=None)
@given(specs=any_sets(), entries=keyring_entries(), data=st.data())
def test_parts_split_by_pith_reduce_as_the_whole_input(
    specs: Specs, entries: list[dict[str, Any]], data: st.DataObject
) -> None:
    # What `reduce --jobs N` computes, each part reduced here: forged copies that claim
    # another pith under an event_id are in every part that needs them for step 0.
    keyring, _ = both(entries)
    items = envelopes(specs)
    items = data.draw(st.permutations(items), label="order")
    whole = [(pith, rendered(result)) for pith, result in reduce_events(items, keyring).items()]
    parts = []
    for piths, blobs in split_by_pith(items, data.draw(st.integers(1, 4), label="parts")):
        parts += _reduce_part(piths, blobs, keyring, 1)
    assert parts == whole
