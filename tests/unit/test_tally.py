"""The summary line's count of invalid events by reason (``pithlog.cli.tally``)."""

from __future__ import annotations

from pithlog.cli.tally import InvalidTally
from pithlog.protocol.reduce import Pending, Reduction
from pithlog.protocol.state import render_reduction
from tests.unit.builders import RECORD_AT, event, record_event, reduce_values


def test_a_payload_holding_an_empty_invalid_events_hides_no_invalid_event() -> None:
    record = record_event()
    payload = {"invalid_events": [], "locator": "https://mirror.test.invalid/b.pdf"}
    shown = event("mirror_hint", record, payload=payload)
    early = event("mirror_hint", record, "2020-01-01T00:00:00Z", payload=payload)
    assert early["created_at"] < RECORD_AT  # predates_record
    result = reduce_values([record, shown, early])[record["pith_number"]]
    assert isinstance(result, Reduction)
    tally = InvalidTally()
    tally.add(render_reduction(result))
    assert tally.summary() == "1 invalid events (predates_record 1)"


def test_reasons_are_shown_most_frequent_first_then_by_name() -> None:
    # one order whatever order the results arrive in: a reduction on one machine and on a
    # Dask cluster print the same summary line
    results = [Pending("p1", 3, {"a": "unknown_key", "b": "bad_signature", "c": "unknown_key"}),
               Pending("p2", 2, {"d": "predates_record", "e": "bad_signature"}),
               Pending("p3", 1, {"f": "unknown_key"})]  # fmt: skip
    for ordering in (results, results[::-1]):
        tally = InvalidTally()
        for result in ordering:
            tally.add(result)
        assert tally.summary() == ("6 invalid events (unknown_key 3, bad_signature 2, "
                                   "predates_record 1)")  # fmt: skip
    tally = InvalidTally()
    tally.add(Pending("p", 2, {"a": "zeta", "b": "alpha"}))
    assert tally.summary() == "2 invalid events (alpha 1, zeta 1)"
