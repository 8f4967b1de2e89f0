"""A store built by appending in any batching holds, pith by pith, exactly the state a full
reduction gives, and its incremental index equals the index a full reduction writes."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from pithlog.protocol.keys import Keyring
from pithlog.protocol.reduce import Reduction, reduce_events
from pithlog.protocol.state import render_reduction
from pithlog.store import Store
from pithlog.store.append_judging import JudgedPart, SentBatch, SentPart, judge_lines

from .universe import KEYRING, envelopes, event_sets

Append = Callable[[Store, list[bytes]], object]
"""One way of appending a batch of lines to a store (with invalid copies kept)."""


def _appended_in_batches_as_reduced(
    specs: list[tuple[Any, ...]], data: st.DataObject, append: Append
) -> None:
    """The events of ``specs`` appended with ``append`` in batches cut where ``data`` says:
    every pith's state, or pending status, is a full reduction's, and replay agrees."""
    items = envelopes(specs)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(items)), max_size=6), label="cuts"))
    batches = [items[a:b] for a, b in zip([0, *cuts], [*cuts, len(items)], strict=True)]
    expected = reduce_events(items, KEYRING)
    with tempfile.TemporaryDirectory() as folder, Store.open(folder) as store:
        for batch in batches:
            append(store, [e.encoded for e in batch])
        for pith, result in expected.items():
            if isinstance(result, Reduction):
                assert store.state(pith) == render_reduction(result)
            else:
                assert store.state(pith) is None
                assert store.status(pith) is not None
        report = store.replay(KEYRING)
        assert report.ok, [d.line() for d in report.discrepancies]


@settings(max_examples=60, deadline=None)
@given(specs=event_sets(), data=st.data())
def test_incremental_index_equals_full_reduction(
    specs: list[tuple[Any, ...]], data: st.DataObject
) -> None:
    _appended_in_batches_as_reduced(
        specs, data, lambda store, lines: store.append(lines, KEYRING, keep_invalid=True))


def test_a_later_batch_can_take_over_a_slot(tmp_path: Any) -> None:
    """Equivocation across batches: the event appended second sorts first in its slot, so
    it becomes the applied one and the first becomes the loser (spec 7 step 4)."""
    from pithlog.protocol.event_types import prepare_record_created
    from pithlog.protocol.events import admit, sign_event
    from pithlog.testing import test_key

    registry, mirror = test_key("registry"), test_key("mirror")
    record = {"metadata": {"submitted_at": "2024-11-01T00:43:54Z"}, "schema_version": "1.0",
              "source": {"id": "2411.00284", "kind": "arxiv", "version": 2}}  # fmt: skip
    pith, payload = prepare_record_created(registry, {"canonical_record": record})
    base = admit(sign_event(registry, "record_created", pith, "record",
                            "2026-01-01T00:00:00Z", payload))  # fmt: skip
    hints = sorted(
        (admit(sign_event(mirror, "mirror_hint", pith, "record", "2026-01-02T00:00:00Z",
                          {"locator": f"https://m.test.invalid/{i}"})) for i in range(3)),
        key=lambda e: e.event_id,
        reverse=True,
    )  # fmt: skip
    with Store.open(tmp_path / "s") as store:
        store.append([base.encoded, hints[0].encoded], KEYRING)
        for hint in hints[1:]:
            store.append([hint.encoded], KEYRING)
        (expected,) = reduce_events([base, *hints], KEYRING).values()
        assert isinstance(expected, Reduction)
        assert expected.applied[1] is hints[-1]
        assert store.state(pith) == render_reduction(expected)
        assert store.replay(KEYRING).ok


@dataclass(frozen=True)
class _Judged:
    """Judging helpers as :meth:`Store.append_judged` sees them: the keyring they hold."""

    keyring: Keyring


def _judged_here(store: Store, lines: list[bytes]) -> SentBatch:
    """``lines`` judged as a helper judges them (:func:`judge_lines`), in this process: the
    batch the appending process receives, copies decoded without their payloads."""
    future: Future[JudgedPart] = Future()
    future.set_result(judge_lines(lines, KEYRING, store._read))
    return SentBatch([SentPart(lines, future)])


@settings(max_examples=40, deadline=None)
@given(specs=event_sets(), data=st.data())
def test_batches_judged_by_helpers_give_the_full_reduction(
    specs: list[tuple[Any, ...]], data: st.DataObject
) -> None:
    # What the helpers send is decoded without the payloads (the hints): the new events'
    # reductions, in the index or whole, must come out as a full reduction gives them.
    def judged_by_helpers(store: Store, lines: list[bytes]) -> object:
        sent = _judged_here(store, lines)
        return store.append_judged([sent], KEYRING, _Judged(KEYRING), keep_invalid=True)

    _appended_in_batches_as_reduced(specs, data, judged_by_helpers)
