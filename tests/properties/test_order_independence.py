"""Spec section 7: the result depends only on the set of events and the keyring."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from pithlog.protocol.reduce import (
    collapse,
    collapse_streamed,
    reduce_events,
    reduce_kept,
)
from pithlog.protocol.state_verify import verify_state_document

from .universe import KEYRING, crowded_sets, envelopes, event_sets, partitioned, states

Specs = list[tuple[Any, ...]]


@settings(max_examples=120, deadline=None)
@given(specs=event_sets(), data=st.data())
def test_any_order_and_duplication_give_identical_states(
    specs: Specs, data: st.DataObject
) -> None:
    items = envelopes(specs)
    expected = states(items)
    extra = data.draw(st.lists(st.sampled_from(items), max_size=8), label="duplicates")
    shuffled = data.draw(st.permutations(items + extra), label="order")
    assert states(shuffled) == expected


@settings(max_examples=60, deadline=None)
@given(specs=event_sets())
def test_arrival_order_of_copies_sharing_an_event_id_does_not_matter(specs: Specs) -> None:
    items = envelopes(specs)
    # Sorting by JCS bytes and by reversed JCS bytes are two adversarial arrival orders.
    by_bytes = sorted(items, key=lambda e: e.encoded)
    assert states(by_bytes) == states(by_bytes[::-1]) == states(items)
    kept_forward = collapse(by_bytes, KEYRING)
    kept_backward = collapse(by_bytes[::-1], KEYRING)
    assert {k: (j.envelope.encoded, j.reason) for k, j in kept_forward.items()} == {
        k: (j.envelope.encoded, j.reason) for k, j in kept_backward.items()
    }


@settings(max_examples=80, deadline=None)
@given(specs=event_sets(), data=st.data())
def test_streamed_reduction_equals_the_whole_one(specs: Specs, data: st.DataObject) -> None:
    # Small batches and lags, so that copies of one event_id fall into different batches,
    # some judged before the next copy arrives and some after.
    items = envelopes(specs)
    extra = data.draw(st.lists(st.sampled_from(items), max_size=6), label="duplicates")
    shuffled = data.draw(st.permutations(items + extra), label="order")
    batch = data.draw(st.integers(1, 5), label="batch")
    lag = data.draw(st.integers(0, 3), label="lag")
    kept = collapse_streamed(shuffled, KEYRING, batch=batch, lag=lag)
    streamed = [(pith, reduce_kept(pith, kept[pith])) for pith in sorted(kept)]
    whole = reduce_events(items, KEYRING)
    assert [pith for pith, _ in streamed] == list(whole)
    assert dict(streamed) == whole


@settings(max_examples=40, deadline=None)
@given(specs=event_sets())
def test_counts_partition_the_events(specs: Specs) -> None:
    items = envelopes(specs)
    partitioned(reduce_events(items, KEYRING), items)


@settings(max_examples=60, deadline=None)
@given(specs=event_sets(), more=event_sets())
def test_reduction_is_idempotent(specs: Specs, more: Specs) -> None:
    items = envelopes(specs)
    values_before = [copy.deepcopy(e.value) for e in items]
    first = states(items)
    # Reducing twice: same result, and the input is left as it was.
    assert states(items) == first
    assert [e.value for e in items] == values_before
    # The union of a set with itself is the set.
    assert states(items + items) == first
    # What step 0 keeps reduces to the same states: a store that holds only the preferred
    # copy of each event_id shows what the full input shows.
    kept = [j.envelope for j in collapse(items, KEYRING).values()]
    assert states(kept) == first
    assert {k: j.envelope.encoded for k, j in collapse(kept, KEYRING).items()} == {
        e.event_id: e.encoded for e in kept
    }
    # Union is commutative and absorbs repeats.
    others = envelopes(more)
    union = states(items + others)
    assert states(others + items) == union
    assert states(others + items + others + items) == union


@settings(max_examples=30, deadline=None)
@given(specs=event_sets())
def test_rendered_states_verify(specs: Specs) -> None:
    for rendered in states(envelopes(specs)).values():
        if isinstance(rendered, bytes):
            assert verify_state_document(rendered) == []


@settings(max_examples=60, deadline=None)
@given(specs=crowded_sets(), data=st.data())
def test_crowded_slots_give_one_state_in_any_order_and_batching(
    specs: Specs, data: st.DataObject
) -> None:
    # Most events valid, most slots (corrections among them) equivocated: every order,
    # duplication and streamed batching applies the same event of each slot.
    items = envelopes(specs)
    expected = states(items)
    extra = data.draw(st.lists(st.sampled_from(items), max_size=6), label="duplicates")
    shuffled = data.draw(st.permutations(items + extra), label="order")
    assert states(shuffled) == expected
    kept = collapse_streamed(shuffled, KEYRING, batch=data.draw(st.integers(1, 4)),
                             lag=data.draw(st.integers(0, 2)))  # fmt: skip
    assert {p: reduce_kept(p, kept[p]) for p in kept} == reduce_events(items, KEYRING)
    for rendered in expected.values():
        assert isinstance(rendered, bytes) and verify_state_document(rendered) == []
