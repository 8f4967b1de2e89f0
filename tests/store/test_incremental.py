"""An append that adds events to a pith's index without re-reducing it (``index_add``)
leaves the index a fresh reduction of the same events gives (``docs/store.md``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import eventgen as g

from pithlog.protocol.events import admit
from pithlog.protocol.reduce import reduce_events
from pithlog.store import Store
from pithlog.store.stateindex import pith_summary


def fresh_summaries(events: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """What ``pithlog reduce`` of ``events`` says of each pith, as a ``piths`` entry."""
    reduced = reduce_events([admit(e) for e in events], g.KEYRING)
    return {pith: pith_summary(result) for pith, result in reduced.items()}


def assert_fresh(store: Store, events: list[dict[str, Any]]) -> None:
    """The store's states, summaries and totals are those of a fresh reduction."""
    summaries = fresh_summaries(events)
    listed = {p.pop("pith_number"): p for p in store.piths()}
    assert listed == summaries
    for pith, state in g.expected_states(events).items():
        assert (store.state(pith) or b"") == state
    totals = store.pith_totals()
    assert totals["equivocations"] == sum(s.get("equivocation_count", 0)
                                          for s in summaries.values())  # fmt: skip
    report = store.replay(g.KEYRING)
    assert report.ok, [d.line() for d in report.discrepancies]


def test_a_slot_filled_again_in_a_later_append_counts_one_equivocation(
    tmp_path: Path,
) -> None:
    rec = g.record("2501.00001", at=10)
    pith = rec["pith_number"]
    conflicting = [g.attestation(pith, 50, f"statement {i}", target="claim:eq")
                   for i in range(4)]  # fmt: skip
    events = [rec]
    with Store.open(tmp_path / "s") as store:
        store.append([g.encoded(rec)], g.KEYRING)
        for event in conflicting:  # each in an append of its own
            store.append([g.encoded(event)], g.KEYRING)
            events.append(event)
            assert_fresh(store, events)
    assert fresh_summaries(events)[pith]["equivocation_count"] == 1


def test_records_arriving_latest_first_leave_the_earliest_chosen(tmp_path: Path) -> None:
    # Each append brings a record earlier than the chosen one: the pith is re-reduced, R
    # changes, and events checked against the old R are checked again (dated before it).
    records = [g.record("2501.00002", at=at) for at in (300, 200, 100)]
    pith = records[0]["pith_number"]
    events: list[dict[str, Any]] = []
    with Store.open(tmp_path / "s") as store:
        for i, rec in enumerate(records):
            batch = [rec, g.attestation(pith, 150 + 100 * i, f"statement {i}"),
                     g.mirror_hint(pith, 120 + 100 * i, f"https://m{i}.test.invalid/")]  # fmt: skip
            store.append([g.encoded(e) for e in batch], g.KEYRING)
            events += batch
            assert_fresh(store, events)
    assert fresh_summaries(events)[pith]["record"] == records[-1]["event_id"]
