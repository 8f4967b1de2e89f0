"""A state document built from envelopes at the door's limits still verifies (spec 1, 9)."""

from __future__ import annotations

from typing import Any

from pithlog.protocol.canonical import MAX_DEPTH, MAX_LINE_BYTES, jcs
from pithlog.protocol.event_types import prepare_record_created
from pithlog.protocol.events import parse_envelope, sign_event
from pithlog.protocol.reduce import Reduction, reduce_events
from pithlog.protocol.state import render, state_document
from pithlog.protocol.state_verify import verify_state_document
from pithlog.testing import test_key, test_keyring

RECORD = {
    "metadata": {"submitted_at": "2024-11-01T00:43:54Z"},
    "schema_version": "1.0",
    "source": {"id": "2411.00284", "kind": "arxiv", "version": 2},
}


def _state(payloads: list[dict[str, Any]]) -> bytes:
    registry, mirror = test_key("registry"), test_key("mirror")
    pith, record = prepare_record_created(registry, {"canonical_record": RECORD})
    events = [sign_event(registry, "record_created", pith, "record", "2026-01-01T00:00:00Z",
                         record)]  # fmt: skip
    for i, payload in enumerate(payloads):
        events.append(sign_event(mirror, "mirror_hint", pith, "record",
                                 f"2026-01-01T00:00:{i:02d}Z", payload))  # fmt: skip
    envelopes = [parse_envelope(jcs(e)) for e in events]  # each passes the door
    (result,) = reduce_events(envelopes, test_keyring()).values()
    assert isinstance(result, Reduction)
    assert len(result.applied) == len(events)
    return render(state_document(result))


def test_state_of_an_envelope_at_the_depth_limit_verifies() -> None:
    deep: Any = "bottom"
    for _ in range(MAX_DEPTH - 2):  # envelope (1) > payload (2) > 62 arrays = depth 64
        deep = [deep]
    state = _state([{"locator": "x", "deep": deep}])
    assert verify_state_document(state) == []


def test_state_larger_than_a_line_limit_verifies() -> None:
    blob = "a" * (1_000_000)
    state = _state([{"locator": f"x{i}", "blob": blob} for i in range(9)])
    assert len(state) > MAX_LINE_BYTES
    assert verify_state_document(state) == []
