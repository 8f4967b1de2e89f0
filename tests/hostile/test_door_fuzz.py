"""The door and checks 1-12 under hostile bytes.

For every input: :func:`parse_envelope` either accepts a value that re-canonicalizes (its
JCS is the reference encoder's, and parsing that JCS gives the value back) or raises
:class:`DoorError`, never another exception; an accepted event passes checks 1-12 only
when its bytes canonicalize to an original valid event (a tampered event is never valid);
and reducing any mix of them never raises and renders states that verify.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from pithlog.errors import CODES, DoorError
from pithlog.protocol.canonical import jcs, jcs_reference, parse
from pithlog.protocol.checks import REASONS, check_alone
from pithlog.protocol.events import Envelope, parse_envelope
from pithlog.protocol.reduce import Pending, Reduction, reduce_events
from pithlog.protocol.state import render, render_reduction, state_document
from pithlog.protocol.state_verify import verify_state_document

from .corpus import KEYRING, ORIGINALS, RECORD, budget, equivalents, junk, mutations, resealed


def through_door(data: bytes) -> Envelope | DoorError:
    """The door's verdict; any exception but DoorError propagates and fails the test."""
    try:
        envelope = parse_envelope(data)
    except DoorError as exc:
        assert exc.code in CODES, exc.code
        line = exc.describe()
        assert line.isprintable(), f"not one printable line: {line!r}"
        return exc
    assert_recanonicalizes(envelope)
    return envelope


def assert_recanonicalizes(envelope: Envelope) -> None:
    value = envelope.value
    assert isinstance(value, dict)
    assert envelope.encoded == jcs(value) == jcs_reference(value)
    again = parse(envelope.encoded)
    assert again == value and jcs(again) == envelope.encoded
    assert parse_envelope(envelope.encoded).encoded == envelope.encoded


def judged(envelope: Envelope) -> str | None:
    reason = check_alone(envelope, KEYRING)
    assert reason is None or reason in REASONS
    return reason


@budget(1500)
@given(mutations())
def test_a_mutated_event_is_refused_or_never_valid_unless_unchanged(
    case: tuple[int, bytes],
) -> None:
    index, data = case
    verdict = through_door(data)
    if isinstance(verdict, Envelope) and judged(verdict) is None:
        assert verdict.encoded == ORIGINALS[index], "a changed event passed checks 1-12"


@budget(200)
@given(equivalents())
def test_an_event_written_another_way_is_the_same_valid_event(case: tuple[int, bytes]) -> None:
    index, data = case
    verdict = through_door(data)
    assert isinstance(verdict, Envelope), verdict
    assert verdict.encoded == ORIGINALS[index]
    assert judged(verdict) is None


@budget(800)
@given(junk())
def test_junk_is_refused_or_admitted_as_invalid(data: bytes) -> None:
    verdict = through_door(data)
    if isinstance(verdict, Envelope):
        assert judged(verdict) is not None


@budget(400)
@given(resealed())
def test_hostile_content_under_a_good_signature_is_judged_without_raising(data: bytes) -> None:
    """Checks 7-14 and the state see payloads, targets and signers of any shape: each
    event gets a verdict, and a state that applies it still verifies."""
    verdict = through_door(data)
    if not isinstance(verdict, Envelope):
        return
    judged(verdict)
    record = parse_envelope(ORIGINALS[0])
    for result in reduce_events([record, verdict], KEYRING).values():
        if isinstance(result, Reduction):
            assert verify_state_document(render_reduction(result)) == []
    assert RECORD["event_id"] == record.event_id


def _admitted(items: list[bytes]) -> list[Envelope]:
    return [v for v in map(through_door, items) if isinstance(v, Envelope)]


@budget(80)
@given(
    st.lists(st.one_of(mutations().map(lambda c: c[1]), junk()), max_size=10),
    st.lists(resealed(), max_size=4),
    st.lists(st.sampled_from(ORIGINALS), max_size=9),
    st.randoms(use_true_random=False),
)
def test_reducing_hostile_events_never_raises_and_every_state_verifies(
    tampered: list[bytes], signed: list[bytes], originals: list[bytes], rnd: Any
) -> None:
    good = _admitted(signed + originals)
    envelopes = _admitted(tampered) + good
    results = reduce_events(envelopes, KEYRING)
    shuffled = list(envelopes)
    rnd.shuffle(shuffled)
    again = reduce_events(shuffled, KEYRING)
    assert list(results) == list(again)
    legitimate = {e.encoded for e in good} | set(ORIGINALS)
    for pith, result in results.items():
        other = again[pith]
        if isinstance(result, Pending):
            assert isinstance(other, Pending)
            assert (result.event_count, result.invalid) == (other.event_count, other.invalid)
            continue
        assert isinstance(result, Reduction) and isinstance(other, Reduction)
        rendered = render_reduction(result)
        assert rendered == render_reduction(other) == render(state_document(result))
        assert verify_state_document(rendered) == []
        # Only signed events are applied: nothing tampered became valid on the way.
        for applied in result.applied:
            assert applied.encoded in legitimate
