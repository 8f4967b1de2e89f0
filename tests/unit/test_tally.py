"""The summary line's count of invalid events by reason (``pithlog.cli.tally``)."""

from __future__ import annotations

from pithlog.cli.tally import InvalidTally
from pithlog.protocol.reduce import Reduction
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
