"""A store under a changing keyring (section 7 step 0, docs/store.md): events appended
with duplicates, in any order and any batching, under one generated keyring (validity
windows at the events' instants, keys left out or changed), then brought under another,
hold exactly what a one-shot reduction under the second gives: every pith's state or
pending status, the preferred copy of every event_id, and a replay that agrees."""

from __future__ import annotations

import hashlib
import tempfile
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from pithlog.protocol.checks import check_alone
from pithlog.protocol.events import Envelope
from pithlog.protocol.keys import Keyring
from pithlog.protocol.reduce import Reduction, collapse, reduce_events
from pithlog.protocol.state import render_reduction
from pithlog.protocol.state_verify import verify_state_document
from pithlog.store import Store

from .keyrings import both, keyring_entries
from .universe import any_sets, envelopes

Specs = list[tuple[Any, ...]]


def _batches(items: list[Envelope], data: st.DataObject) -> list[list[Envelope]]:
    """``items`` with duplicates, shuffled and cut into batches where ``data`` says."""
    extra = data.draw(st.lists(st.sampled_from(items), max_size=6), label="duplicates")
    shuffled = data.draw(st.permutations(items + extra), label="order")
    cuts = sorted(data.draw(st.lists(st.integers(0, len(shuffled)), max_size=5), label="cuts"))
    return [shuffled[a:b] for a, b in zip([0, *cuts], [*cuts, len(shuffled)], strict=True)]


def _holds_the_reduction(store: Store, items: list[Envelope], keyring: Keyring) -> None:
    """``store`` holds, pith by pith and copy by copy, what reducing ``items`` gives."""
    expected = reduce_events(items, keyring)
    assert [p["pith_number"] for p in store.piths()] == list(expected)
    for pith, result in expected.items():
        if isinstance(result, Reduction):
            rendered = render_reduction(result)
            assert store.state(pith) == rendered
            assert verify_state_document(rendered) == []
        else:
            assert store.state(pith) is None
            status = store.status(pith)
            assert status is not None and status["status"] == "pending"
            assert status.get("event_count") == result.event_count, status
            assert status.get("invalid_event_count") == len(result.invalid), status
    # step 0: the copy each event_id holds does not depend on arrival order or batching
    for event_id, judged in collapse(items, keyring).items():
        assert store.event(event_id) == judged.envelope.encoded, event_id
    report = store.replay(keyring, verify=True, jobs=1)
    assert report.ok, [d.line() for d in report.discrepancies]


@settings(max_examples=40, deadline=None)
@given(specs=any_sets(), entries=keyring_entries(), data=st.data())
def test_appends_under_a_windowed_keyring_equal_the_one_shot_reduction(
    specs: Specs, entries: list[dict[str, Any]], data: st.DataObject
) -> None:
    keyring, _ = both(entries)
    items = envelopes(specs)
    with tempfile.TemporaryDirectory() as folder, Store.open(folder) as store:
        for batch in _batches(items, data):
            store.append([e.encoded for e in batch], keyring, keep_invalid=True)
        _holds_the_reduction(store, items, keyring)


@settings(max_examples=40, deadline=None)
@given(specs=any_sets(), first=keyring_entries(), second=keyring_entries(),
       data=st.data())  # fmt: skip
def test_a_keyring_change_gives_the_one_shot_reduction_under_the_new_keyring(
    specs: Specs, first: list[dict[str, Any]], second: list[dict[str, Any]],
    data: st.DataObject,
) -> None:  # fmt: skip
    before, _ = both(first)
    after, _ = both(second)
    items = envelopes(specs)
    batches = _batches(items, data)
    # the change made by rekey, by rebuild, or by an append under the new keyring with
    # the batches that remain
    how = data.draw(st.sampled_from(["rekey", "rebuild", "append"]), label="how")
    switch = data.draw(st.integers(0, len(batches)), label="switch")
    with tempfile.TemporaryDirectory() as folder, Store.open(folder) as store:
        for batch in batches[:switch]:
            store.append([e.encoded for e in batch], before, keep_invalid=True)
        if how == "rekey":
            store.rekey(after, piece_copies=data.draw(st.integers(1, 8), label="piece"))
        elif how == "rebuild":
            store.rebuild(after)
        for batch in batches[switch:]:
            store.append([e.encoded for e in batch], after, keep_invalid=True)
        store.append([], after)  # under the new keyring, even with no batch after the switch
        _holds_the_reduction(store, items, after)


@settings(max_examples=40, deadline=None)
@given(specs=any_sets(), entries=keyring_entries(), data=st.data())
def test_a_store_that_keeps_some_invalid_copies_holds_their_reduction(
    specs: Specs, entries: list[dict[str, Any]], data: st.DataObject
) -> None:
    # An append stores every copy that passes checks 1-12 and the invalid copies that
    # keep_invalid names (all, none, or by copy hash): the store then holds what reducing
    # exactly those copies gives, whatever the order and batching.
    keyring, _ = both(entries)
    items = envelopes(specs)
    hashes = sorted({hashlib.sha256(e.encoded).digest() for e in items})
    keep = data.draw(st.one_of(st.booleans(), st.frozensets(st.sampled_from(hashes))),
                     label="keep_invalid")  # fmt: skip

    def kept(e: Envelope) -> bool:
        if check_alone(e, keyring) is None:
            return True
        return keep if isinstance(keep, bool) else hashlib.sha256(e.encoded).digest() in keep

    with tempfile.TemporaryDirectory() as folder, Store.open(folder) as store:
        for batch in _batches(items, data):
            store.append([e.encoded for e in batch], keyring, keep_invalid=keep)
        _holds_the_reduction(store, [e for e in items if kept(e)], keyring)
