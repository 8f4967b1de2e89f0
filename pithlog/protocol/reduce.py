"""The reducer ``pith-open-graph-merge-v1`` (spec section 7), a pure function.

Read top to bottom beside the spec:

- step 0, :func:`collapse`: one envelope per ``event_id`` across the whole input;
- steps 1-4, :func:`reduce_pith`: checks 1-12, the chosen record ``R``, checks 13-14, slots
  and equivocations; a pith with no valid record is :class:`Pending`;
- step 5 (the document) is :mod:`pithlog.protocol.state`.

:func:`reduce_events` runs all steps for every pith of an input; :func:`collapse_streamed`
and :func:`reduce_kept` do the same, pith by pith, for an input too large to hold decoded;
:func:`judge_lines` and :class:`StepZero` split step 0 so that raw lines can be judged
elsewhere (helper processes) and folded here.
The result depends only on the set of envelopes and the keyring: not on order, duplicates
or any clock.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol, TypeVar

from pithlog.errors import DoorError
from pithlog.protocol.checks import (
    CHECK_NUMBER,
    CheckBatch,
    Verifier,
    check_against_record,
    check_alone,
    check_many,
    start_checks,
)
from pithlog.protocol.event_types import ChosenRecord
from pithlog.protocol.events import Envelope, parse_envelopes, readmit
from pithlog.protocol.keys import Keyring

MERGE_VERSION = "pith-open-graph-merge-v1"


@dataclass(frozen=True, slots=True)
class Judged:
    """An envelope with the verdict of checks 1-12 on it (``None``: it passed)."""

    envelope: Envelope
    reason: str | None

    @property
    def rank(self) -> tuple[int, int, bytes]:
        return rank(self.reason, self.envelope.encoded)


def rank(reason: str | None, encoded: bytes) -> tuple[int, int, bytes]:
    """Section 7 step 0 preference of a copy, smallest first: passed 1-12, else failed at
    the latest check; then the smallest JCS encoding (unsigned bytes; a prefix is smaller)."""
    if reason is None:
        return (0, 0, encoded)
    return (1, -CHECK_NUMBER[reason], encoded)


def judge(envelope: Envelope, keyring: Keyring) -> Judged:
    """Run checks 1-12 on one envelope."""
    return Judged(envelope, check_alone(envelope, keyring))


class Ranked(Protocol):
    """A copy as step 0 compares it: by its :func:`rank`."""

    @property
    def rank(self) -> tuple[int, int, bytes]: ...


R = TypeVar("R", bound=Ranked)


def keep_preferred(kept: R | None, candidate: R) -> R:
    """Section 7 step 0, one copy at a time: the copy of one ``event_id`` kept once
    ``candidate`` arrives where ``kept`` was kept (``None``: none yet).

    :func:`rank` is a total order, so folding the copies in any order keeps the same one.
    This is the one place the preference is applied: :func:`collapse`,
    :func:`collapse_streamed`, a store's append and rebuild, and replay all fold through it.
    On equal ranks (the same bytes: the same copy) ``kept`` stays.
    """
    return candidate if kept is None or candidate.rank < kept.rank else kept


def prefer(a: Judged, b: Judged) -> Judged:
    """The copy of one ``event_id`` that section 7 step 0 keeps of the two
    (:func:`keep_preferred` of ``b`` where ``a`` is kept)."""
    return keep_preferred(a, b)


def collapse(
    envelopes: Iterable[Envelope], keyring: Keyring, verifier: Verifier | None = None
) -> dict[str, Judged]:
    """Step 0: ``event_id`` -> the one preferred copy, with its checks 1-12 verdict.

    Checks 1-12 start on each batch of :data:`STREAM_BATCH` distinct copies as it arrives,
    their signatures verified by ``verifier`` (:data:`pithlog.protocol.checks.Verifier`;
    default: here), so that a verifier working elsewhere verifies while the rest of the
    input is still read and parsed. :func:`prefer` is a total order: the verdicts' order
    does not matter.
    """
    # The JCS bytes of each distinct copy, in a set: they name their event_id, so one set
    # serves them all, and a new copy is told from the seen ones by hashing it once, not by
    # comparing it with every other copy of its event_id (anyone may attach a new signature
    # to a published body, as many times as they like).
    seen: set[bytes] = set()
    distinct: list[Envelope] = []
    batches: list[CheckBatch] = []
    for envelope in envelopes:
        if envelope.encoded not in seen:  # the same envelope again has nothing to choose
            seen.add(envelope.encoded)
            distinct.append(envelope)
            if len(distinct) % STREAM_BATCH == 0:
                batches.append(start_checks(distinct[-STREAM_BATCH:], keyring, verifier))
    rest = distinct[len(distinct) - len(distinct) % STREAM_BATCH :]
    batches.append(start_checks(rest, keyring, verifier))
    reasons = [reason for batch in batches for reason in batch.reasons()]
    kept: dict[str, Judged] = {}
    for envelope, reason in zip(distinct, reasons, strict=True):
        eid = envelope.event_id
        kept[eid] = keep_preferred(kept.get(eid), Judged(envelope, reason))
    return kept


STREAM_BATCH = 1024
"""Distinct copies per batch of checks started while the input is still being read."""


def _time_order(envelope: Envelope) -> tuple[str, str]:
    """``(created_at, event_id)``: the order of spec 7 steps 2 and 4, and of section 8."""
    return (envelope.value["created_at"], envelope.event_id)


SlotKey = tuple[str, ...]
"""``("record_created",)``, or ``(event_type, target, key_id, created_at)`` (spec 7 step 4)."""


def slot_of(envelope: Envelope) -> SlotKey:
    event = envelope.value
    if event["event_type"] == "record_created":
        return ("record_created",)
    return (event["event_type"], event["target"], event["signer"]["key_id"], event["created_at"])


@dataclass(frozen=True)
class Equivocation:
    """A slot filled by two or more valid events; ``events`` in ``(created_at, event_id)``
    order, so the first is the applied one."""

    slot: SlotKey
    events: tuple[Envelope, ...]

    @property
    def applied(self) -> Envelope:
        return self.events[0]


@dataclass(frozen=True)
class Reduction:
    """Steps 0-4 for one pith with a chosen record: what section 8 renders."""

    pith_number: str
    record: Envelope
    """``R``, the chosen record."""
    event_count: int
    invalid: dict[str, str]
    """``event_id`` -> reason, for every invalid event."""
    applied: tuple[Envelope, ...]
    """``R`` first, then the other applied events by ``(created_at, event_id)``."""
    equivocations: tuple[Equivocation, ...]

    @property
    def valid_event_count(self) -> int:
        return self.event_count - len(self.invalid)


@dataclass(frozen=True)
class Pending:
    """A pith whose events hold no valid record_created: no state yet (spec 7 step 2)."""

    pith_number: str
    event_count: int
    invalid: dict[str, str]


def chosen_record(record: Envelope) -> ChosenRecord:
    payload: dict[str, Any] = record.value["payload"]
    return ChosenRecord(
        event_id=record.event_id,
        created_at=record.value["created_at"],
        canonical_record=payload["canonical_record"],
        canonical_sha256=payload["canonical_sha256"],
    )


def reduce_pith(pith_number: str, events: Iterable[Judged]) -> Reduction | Pending:
    """Steps 1-4 for the (collapsed) events of one pith; step 1's verdicts are in ``events``."""
    judged = sorted(events, key=lambda j: j.envelope.event_id)
    # Step 2: the chosen record R.
    records = [
        j.envelope
        for j in judged
        if j.reason is None and j.envelope.value["event_type"] == "record_created"
    ]
    if not records:
        held = {j.envelope.event_id: j.reason for j in judged if j.reason is not None}
        return Pending(pith_number, len(judged), held)
    record = min(records, key=_time_order)
    chosen = chosen_record(record)
    # Step 3: checks 13-14 on every other event that passed 1-12.
    invalid: dict[str, str] = {}
    valid: list[Envelope] = []
    for j in judged:
        reason = j.reason
        if reason is None and j.envelope is not record:
            reason = check_against_record(j.envelope, chosen)
        if reason is None:
            valid.append(j.envelope)
        else:
            invalid[j.envelope.event_id] = reason
    # Step 4: slots; the smallest by (created_at, event_id) of each slot is applied.
    slots: dict[SlotKey, list[Envelope]] = {}
    for envelope in valid:
        slots.setdefault(slot_of(envelope), []).append(envelope)
    applied: list[Envelope] = []
    equivocations: list[Equivocation] = []
    for key, members in slots.items():
        members.sort(key=_time_order)
        applied.append(members[0])
        if len(members) > 1:
            equivocations.append(Equivocation(key, tuple(members)))
    others = sorted((e for e in applied if e is not record), key=_time_order)
    return Reduction(
        pith_number=pith_number,
        record=record,
        event_count=len(judged),
        invalid=invalid,
        applied=(record, *others),
        equivocations=tuple(equivocations),
    )


def reduce_events(
    envelopes: Iterable[Envelope],
    keyring: Keyring,
    only: Collection[str] | None = None,
    verifier: Verifier | None = None,
) -> dict[str, Reduction | Pending]:
    """Steps 0-4 for every pith of the input, keyed and ordered by pith_number.

    ``only``: reduce just these piths. Step 0 still runs over every envelope given, so a
    caller that splits an input by pith passes each part every copy of the event_ids it
    holds (:mod:`pithlog.parallel`) and gets the same reductions as from the whole input.
    ``verifier``: where signatures are verified (:func:`collapse`).
    """
    by_pith: dict[str, list[Judged]] = {}
    for judged in collapse(envelopes, keyring, verifier).values():
        by_pith.setdefault(judged.envelope.pith_number, []).append(judged)
    piths = sorted(by_pith if only is None else by_pith.keys() & set(only))
    return {pith: reduce_pith(pith, by_pith[pith]) for pith in piths}


class _KeptCopy(NamedTuple):
    """A copy :class:`StepZero` keeps: its rank (which ends in its JCS bytes), its verdict
    and its pith, without the decoded envelope."""

    rank: tuple[int, int, bytes]
    reason: str | None
    pith: str


Kept = list[tuple[str | None, bytes]]
"""One pith's events after step 0, each as ``(reason of checks 1-12 or None, JCS bytes)``."""


class StepZero:
    """Step 0 as :func:`collapse`, one judged copy at a time (:meth:`add`), holding each kept
    copy as JCS bytes only. :func:`keep_preferred`'s order is total, so the copies added may
    come in any order, and a copy added twice changes nothing."""

    def __init__(self) -> None:
        self._kept: dict[str, _KeptCopy] = {}

    def add(self, event_id: str, pith: str, encoded: bytes, reason: str | None) -> None:
        """One copy of ``event_id`` (claiming ``pith``, JCS ``encoded``) and its verdict."""
        candidate = _KeptCopy(rank(reason, encoded), reason, pith)
        self._kept[event_id] = keep_preferred(self._kept.get(event_id), candidate)

    def by_pith(self) -> dict[str, Kept]:
        """pith_number -> its events (:data:`Kept`); the copies are let go here."""
        by_pith: dict[str, Kept] = {}
        for preference, reason, pith in self._kept.values():
            by_pith.setdefault(pith, []).append((reason, preference[2]))  # its JCS bytes
        self._kept = {}
        return by_pith


def collapse_streamed(
    envelopes: Iterable[Envelope],
    keyring: Keyring,
    verifier: Verifier | None = None,
    batch: int | None = None,
    lag: int = 2,
) -> dict[str, Kept]:
    """Step 0 as :func:`collapse`, holding each kept copy as JCS bytes only: pith_number ->
    its events (:data:`Kept`).

    Step 0 needs every copy of the input before any pith can be reduced, and a decoded
    envelope costs about five times its JCS bytes in memory. So the distinct copies are
    checked in batches of ``batch`` (default :data:`STREAM_BATCH`) as they arrive
    (signatures by ``verifier``, :func:`collapse`); once a batch's verdicts are in, which
    is at the latest ``lag`` batches later, only the preferred copy of each ``event_id`` is
    kept, with its verdict (:class:`StepZero`), and the decoded envelopes are dropped.
    """
    batch = STREAM_BATCH if batch is None else batch
    seen: set[bytes] = set()  # the JCS bytes of the distinct copies so far (see collapse)
    zero = StepZero()
    started: deque[tuple[list[Envelope], CheckBatch]] = deque()

    def settle() -> None:
        copies, checks = started.popleft()
        for envelope, reason in zip(copies, checks.reasons(), strict=True):
            zero.add(envelope.event_id, envelope.pith_number, envelope.encoded, reason)

    def start(copies: list[Envelope]) -> None:
        started.append((copies, start_checks(copies, keyring, verifier)))
        while len(started) > lag:
            settle()

    distinct: list[Envelope] = []
    for envelope in envelopes:
        if envelope.encoded not in seen:  # the same copy again has nothing to choose
            seen.add(envelope.encoded)
            distinct.append(envelope)
            if len(distinct) == batch:
                start(distinct)
                distinct = []
    if distinct:
        start(distinct)
    seen.clear()
    while started:
        settle()
    return zero.by_pith()


LineJudgement = DoorError | tuple[str, str, bytes | None, str | None]
"""What :func:`judge_lines` says of one line: the door's refusal, or ``(event_id,
pith_number, JCS bytes, verdict)``, the JCS bytes ``None`` where they are the line itself
(the common case of a line written in JCS, which then need not travel back), the verdict
the reason of the first failing check 1-12 or ``None``."""


def judge_lines(lines: Sequence[bytes], keyring: Keyring) -> list[LineJudgement]:
    """Each line through the door, and checks 1-12 (signatures verified here, one after
    the other) of each distinct copy among them: what step 0 needs to know of each line,
    for :meth:`StepZero.add`. A pure function of the lines and the keyring, so that
    helper processes can judge the parts of an input while it is being read."""
    door = parse_envelopes(lines)
    # the same JCS bytes are the same value, with the same verdict
    distinct = {item.encoded: item for item in door if isinstance(item, Envelope)}
    verdicts = dict(zip(distinct, check_many(list(distinct.values()), keyring), strict=True))
    out: list[LineJudgement] = []
    for line, item in zip(lines, door, strict=True):
        if isinstance(item, DoorError):
            out.append(item)
        else:
            encoded = None if item.encoded == line else item.encoded
            out.append((item.event_id, item.pith_number, encoded, verdicts[item.encoded]))
    return out


def reduce_kept(pith_number: str, events: Kept) -> Reduction | Pending:
    """Steps 1-4 for one pith's events as :func:`collapse_streamed` keeps them: each is
    decoded again (:func:`pithlog.protocol.events.readmit`; it passed the door before)."""
    return reduce_pith(pith_number, [Judged(readmit(data), reason) for reason, data in events])

