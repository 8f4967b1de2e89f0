"""pithlog.protocol.explain: check 10 in words agrees with check 10 itself, and names the
member at fault."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest

from pithlog.protocol.event_types import EVENT_TYPES
from pithlog.protocol.explain import TARGET_FORMS, payload_problem, targets_of

from .builders import NON_RECORD_TYPES, record_event, valid_parts

VALUES: list[Any] = [None, "", "x", 0, -1, 7, True, [], {}, "v1", "ab" * 32]


def valid(event_type: str) -> tuple[str, dict[str, Any]]:
    record = record_event()
    if event_type == "record_created":
        return "record", copy.deepcopy(record["payload"])
    _, target, payload = valid_parts(event_type, record)
    return target, payload


def mutations(value: Any, depth: int = 0) -> Iterator[Any]:
    """``value`` with one member (at any depth up to 3) deleted or replaced."""
    if not isinstance(value, dict) or depth > 3:
        return
    for name in list(value):
        less = copy.deepcopy(value)
        del less[name]
        yield less
        for other in VALUES:
            changed = copy.deepcopy(value)
            changed[name] = other
            yield changed
        for inner in mutations(value[name], depth + 1):
            changed = copy.deepcopy(value)
            changed[name] = inner
            yield changed


@pytest.mark.parametrize("event_type", ["record_created", *NON_RECORD_TYPES])
def test_a_problem_is_found_exactly_when_check_10_fails(event_type: str) -> None:
    target, payload = valid(event_type)
    rule = EVENT_TYPES[event_type].payload_ok
    assert rule(payload, target) and payload_problem(event_type, payload, target) is None
    failing = 0
    for changed in mutations(payload):
        problem = payload_problem(event_type, changed, target)
        assert (problem is None) == rule(changed, target), (changed, problem)
        failing += problem is not None
    assert failing > 0


def test_the_problem_names_the_member_and_the_rule() -> None:
    _, payload = valid("record_created")
    payload["canonical_record"]["source"]["version"] = "v1"
    problem = payload_problem("record_created", payload, "record")
    assert problem == "canonical_record.source.version must be an integer (got 'v1')"
    target, payload = valid("correction")
    payload["correction_type"] = "typo"
    problem = payload_problem("correction", payload, target)
    assert problem is not None and problem.startswith("correction_type must be one of erratum")


def test_every_type_says_its_targets() -> None:
    assert TARGET_FORMS.keys() == EVENT_TYPES.keys()
    assert targets_of("author_attestation") == "record or claim:<claim id>"
    for event_type, forms in TARGET_FORMS.items():
        plain = [f for f in forms if "<" not in f]
        assert all(EVENT_TYPES[event_type].target_ok(f) for f in plain)
