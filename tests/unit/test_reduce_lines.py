"""``reduce`` of raw lines whose door and checks run in helper processes
(:func:`pithlog.parallel.reduce_lines`): the same states and the same refusals, in the same
order, as the door here and :func:`pithlog.parallel.reduce_rendered`."""

from __future__ import annotations

import json
import os
import random
import tracemalloc
from collections.abc import Iterator
from typing import Any

import pytest

import pithlog.parallel
from pithlog.errors import DoorError, HelperLost
from pithlog.lines import too_long
from pithlog.parallel import reduce_lines, reduce_rendered
from pithlog.protocol.canonical import jcs
from pithlog.protocol.checks import check_alone
from pithlog.protocol.events import parse_envelope
from pithlog.protocol.reduce import StepZero, judge_lines
from pithlog.protocol.text_forms import encode_b64

from .builders import KEYRING, event
from .test_parallel import A, B, C, crossing

Tagged = tuple[int, bytes | DoorError]


def producer_form(value: dict[str, Any]) -> bytes:
    """The value as a producer writes it: members in reverse order, spaced."""
    return json.dumps(dict(reversed(list(value.items()))), indent=None).encode()


def mixed_lines() -> list[bytes]:
    """Valid, invalid and cross-pith events in JCS and in producer's form, lines the door
    refuses, and repeats of both kinds."""
    values = crossing() + [event("mirror_hint", B, created_at=f"2026-06-01T00:00:{s:02d}Z")
                           for s in range(12)]  # fmt: skip
    values[-1] = {**values[-1], "signature_b64": encode_b64(bytes(64))}  # bad_signature
    lines = [jcs(v) if i % 2 else producer_form(v) for i, v in enumerate(values)]
    refused = [b"not json", b'{"event_id": 1}', b'{"a": 1.5}', b"[]"]
    lines += refused + lines[:5] + refused[:2] + [producer_form(values[3])]
    random.Random(7).shuffle(lines)
    return lines


def here(tagged: list[Tagged]) -> tuple[list[Any], list[tuple[int, str]]]:
    """The door here and reduce_rendered: the reference."""
    refusals: list[tuple[int, str]] = []
    admitted = []
    for tag, line in tagged:
        try:
            if isinstance(line, DoorError):
                raise line
            admitted.append(parse_envelope(line))
        except DoorError as exc:
            refusals.append((tag, exc.code))
    return list(reduce_rendered(admitted, KEYRING, jobs=1)), refusals


def in_helpers(tagged: list[Tagged]) -> tuple[list[Any], list[tuple[int, str]]]:
    refusals: list[tuple[int, str]] = []
    results = list(reduce_lines(tagged, KEYRING, lambda tag, exc: refusals.append((tag, exc.code))))
    return results, refusals


@pytest.fixture
def small_parts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Helpers for a few lines, in parts of three, two parts per helper ahead."""
    monkeypatch.setattr(pithlog.parallel, "STREAM_MIN", 5)
    monkeypatch.setattr(pithlog.parallel, "JUDGE_PART", 3)
    monkeypatch.setattr(pithlog.parallel, "AHEAD", 1)
    monkeypatch.setattr(pithlog.parallel, "TAIL_EVENTS", 2)
    monkeypatch.setenv("PITHLOG_CORES", "2")


def test_the_same_states_and_refusals_as_the_door_here(small_parts: None) -> None:
    tagged: list[Tagged] = list(enumerate(mixed_lines(), start=1))
    tagged.insert(9, (0, too_long(0)))  # a line the caller refused keeps its place
    expected = here(tagged)
    assert len(expected[1]) == 1 + 4 + 2 and (0, "door.line_too_long") in expected[1]
    got = in_helpers(tagged)
    assert got == expected
    states = dict(got[0])
    assert {A["pith_number"], B["pith_number"], C["pith_number"]} <= states.keys()
    assert b'"bad_signature"' in states[B["pith_number"]]


def test_a_small_input_goes_through_the_door_here(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_pool(*_: object) -> None:
        raise AssertionError("no helpers for a small input")

    monkeypatch.setattr(pithlog.parallel, "worker_pool", no_pool)
    tagged: list[Tagged] = list(enumerate(mixed_lines()[:10]))
    assert in_helpers(tagged) == here(tagged)


def _die(*_: object) -> None:
    os._exit(1)


def test_parts_whose_helper_died_are_judged_here(
    small_parts: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    tagged: list[Tagged] = list(enumerate(mixed_lines()))
    expected = here(tagged)
    monkeypatch.setattr(pithlog.parallel, "_judge_run", _die)
    with pytest.warns(HelperLost):
        assert in_helpers(tagged) == expected


def test_judge_lines_says_what_the_door_and_checks_say() -> None:
    lines = mixed_lines()
    judged = judge_lines(lines, KEYRING)
    assert len(judged) == len(lines)
    for line, judgement in zip(lines, judged, strict=True):
        try:
            envelope = parse_envelope(line)
        except DoorError as exc:
            assert isinstance(judgement, DoorError) and judgement.code == exc.code
            continue
        assert not isinstance(judgement, DoorError)
        event_id, pith, encoded, reason = judgement
        assert (event_id, pith) == (envelope.event_id, envelope.pith_number)
        # the JCS bytes travel back only where the line is not already them
        assert encoded == (None if line == envelope.encoded else envelope.encoded)
        assert reason == check_alone(envelope, KEYRING)


def test_step_zero_keeps_the_same_copies_in_any_order() -> None:
    copies = []
    for judgement, line in zip(judge_lines(mixed_lines(), KEYRING), mixed_lines(), strict=True):
        if not isinstance(judgement, DoorError):
            event_id, pith, encoded, reason = judgement
            copies.append((event_id, pith, line if encoded is None else encoded, reason))
    kept = []
    for seed in range(4):
        random.Random(seed).shuffle(copies)
        zero = StepZero()
        for copy in copies + copies[:3]:  # a copy added again changes nothing
            zero.add(*copy)
        kept.append(zero.by_pith())
    def as_sets(by_pith: dict[str, Any]) -> dict[str, set[tuple[str | None, bytes]]]:
        return {pith: set(events) for pith, events in by_pith.items()}

    assert all(as_sets(k) == as_sets(kept[0]) for k in kept)
    # the event whose copies claim A and B counts for B (the copy failing the later check)
    crossed = crossing()[3]["event_id"]

    def reasons_of(pith: str) -> list[str | None]:
        return [r for r, data in kept[0][pith] if json.loads(data)["event_id"] == crossed]

    assert reasons_of(B["pith_number"]) == ["event_id_mismatch"]
    assert reasons_of(A["pith_number"]) == []


def test_refused_lines_are_not_held_to_the_end(monkeypatch: pytest.MonkeyPatch) -> None:
    """Step 0 keeps nothing of a refused line, so neither does the reading: memory stays
    that of the parts in flight however many distinct lines the door refuses (a refusal
    and a hash for each were held to the end, some 600 bytes a line)."""
    monkeypatch.setenv("PITHLOG_CORES", "2")
    count = 40_000
    refused = [0]

    def lines() -> Iterator[Tagged]:
        for n in range(count):
            yield n, b'{"n":%d}' % n

    def say(tag: int, exc: DoorError) -> None:
        refused[0] += 1

    tracemalloc.start()
    try:
        assert list(reduce_lines(lines(), KEYRING, say)) == []
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert refused[0] == count
    # the parts in flight (about a thousand lines) come to some 2 MiB; with a refusal and
    # a hash held for each line, 40,000 lines took 24 MiB (160,000: 96 MiB)
    assert peak < 8 << 20


def test_a_refused_line_repeated_after_its_refusal_is_refused_again(
    small_parts: None,
) -> None:
    junk = [b"not json", b'{"a": 1}']
    valid = mixed_lines()[:6]
    lines = junk + valid * 3 + junk + valid + junk * 2
    tagged: list[Tagged] = list(enumerate(lines, start=1))
    assert in_helpers(tagged) == here(tagged)
