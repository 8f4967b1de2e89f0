"""Replay of the piths: each pith's stored copies read back through the pure path (door,
checks, reduce, render) and compared with what the store holds (``docs/store.md``,
"Replay").

The replay of one pith and of a chunk of piths, as functions over an open transaction
(:class:`pithlog.store.layout.Txn`), each disagreement a
:class:`pithlog.store.replay_report.Discrepancy`; the piths come from
:func:`pithlog.store.replay_structure.replay_start`, whose module also holds the structure
pass (no signatures). :meth:`pithlog.store.Store.replay` opens the transactions, runs the
chunks here or in worker processes, and adds up the outcomes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from pithlog.errors import DoorError, StoreError, register
from pithlog.parallel import in_threads
from pithlog.protocol.canonical import jcs
from pithlog.protocol.checks import REASONS, CheckBatch, Verifier, check_alone, start_checks
from pithlog.protocol.events import Envelope, parse_envelope
from pithlog.protocol.keys import Keyring
from pithlog.protocol.reduce import Judged, Pending, Reduction, keep_preferred
from pithlog.protocol.state import assemble, parts_of
from pithlog.store.codec import CorruptCopy, readable, unpack
from pithlog.store.keyindex import Judges, cached_verdict, key_hash, signer_key_id
from pithlog.store.layout import (
    META_KEYRING,
    SEQ,
    VALID,
    Txn,
    copy_hash,
    decode_ids,
    eid_str,
    event_copy,
    evidence_of,
    pith_eids,
    verdict_bytes,
    verdict_of,
    why,
)
from pithlog.store.replay_report import Discrepancy
from pithlog.store.stateindex import (
    INDEX_DAMAGE,
    damage_said,
    index_entries,
    index_stored,
    pith_summary,
    reduce_judged,
    state_parts,
)

register({
    "store.rebuilt": "the store was rebuilt under another keyring while replay ran: run "
    "replay again",
})  # fmt: skip


# --- replay: the chunks -------------------------------------------------------------------

_CHUNK = 32
"""Piths per unit of replay work (and per read transaction), at most."""


def make_chunks(
    piths: list[str], foreign: dict[str, list[bytes]], jobs: int
) -> list[list[tuple[str, list[bytes]]]]:
    """The replay work, ``(pith, event_ids of evidence claiming it)``, in chunks of piths:
    at most :data:`_CHUNK`, and about four chunks per process."""
    work = [(pith, foreign.get(pith, [])) for pith in piths]
    size = max(1, min(_CHUNK, -(-len(work) // (max(jobs, 1) * 4))))
    return [work[i : i + size] for i in range(0, len(work), size)]


# --- replay: one pith ---------------------------------------------------------------------


@dataclass(frozen=True)
class ReplayContext:
    keyring: Keyring
    same_keyring: bool
    verify: bool
    stored_kd: str | None
    threads: int | None = None
    """Verification threads per process (:func:`pithlog.parallel.in_threads`; ``None``: its
    default), unless ``verifier`` says otherwise."""
    verifier: Verifier | None = None
    """The verifying processes of a one-process replay, if any
    (:meth:`pithlog.parallel.Pool.verify`)."""
    high_water: int | None = None
    """:attr:`pithlog.store.replay_structure.Start.high_water`: copies above it are left out
    of the counts."""

    @property
    def kd(self) -> bytes:
        return bytes.fromhex(self.keyring.digest)


PithOutcome = tuple[str, list[Discrepancy], int, int]
"""``(pith, discrepancies, events, copies)``."""


@dataclass
class _PithCopies:
    """One pith's stored copies as replay reads them, each through the door."""

    pith: str
    indexed: set[bytes]
    by_event: dict[bytes, list[tuple[bytes | None, bytes]]]
    """event_id -> its copies: ``(None, preferred)`` first, then ``(copy hash, evidence)``."""
    passed: dict[bytes, Envelope | DoorError]
    foreign: Sequence[bytes] = ()
    unpacked: dict[bytes, bytes] = field(default_factory=dict)
    """Sequence number -> the JCS bytes of the preferred copy stored under it, for each
    preferred copy that unpacked: the state is assembled from them again
    (:func:`pithlog.store.stateindex.state_parts`)."""


def _read_pith(txn: Txn, dbs: dict[str, Any], pith: str, foreign: Sequence[bytes]) -> _PithCopies:
    """Every stored copy that claims ``pith`` (or is evidence of an event it indexes),
    through the door."""
    indexed = set(pith_eids(txn, dbs, pith))
    by_event: dict[bytes, list[tuple[bytes | None, bytes]]] = {}
    passed: dict[bytes, Envelope | DoorError] = {}
    unpacked: dict[bytes, bytes] = {}
    for eid in sorted(indexed | set(foreign)):
        pointer = txn.get(eid, db=dbs["events"])
        if pointer is None or len(pointer) != SEQ.size:
            continue  # reported by the structure pass
        stored = txn.get(pointer, db=dbs["copies"])
        if stored is None:
            continue
        try:
            preferred = unpack(txn, dbs, stored)
            unpacked[pointer] = preferred
        except CorruptCopy:
            preferred = stored  # readable(): the checks it fails report it
        evidence = evidence_of(txn, dbs, eid, readable)
        by_event[eid] = [(None, preferred), *((k[32:], v) for k, _, v in evidence)]
        for _, data in by_event[eid]:
            try:
                passed[data] = parse_envelope(data)
            except DoorError as exc:
                passed[data] = exc.unchained()  # this frame holds passed: no cycle
    return _PithCopies(pith, indexed, by_event, passed, foreign, unpacked)


@dataclass
class Started:
    """A chunk read and through the door, its checks 1-12 started (:func:`start_chunk`)."""

    read: list[_PithCopies]
    fresh: list[bytes]
    batch: CheckBatch | None


def start_chunk(
    txn: Txn,
    dbs: dict[str, Any],
    chunk: Sequence[tuple[str, Sequence[bytes]]],
    ctx: ReplayContext,
) -> Started:
    """Every copy of the chunk's piths through the door, then checks 1-12 started on all of
    them at once (``verify``, or another keyring): one batch of signatures for threads or
    a verifying process (:func:`start_checks`)."""
    read = [_read_pith(txn, dbs, pith, foreign) for pith, foreign in chunk]
    if not (ctx.verify or not ctx.same_keyring):
        return Started(read, [], None)
    fresh = {data: e for r in read for data, e in r.passed.items() if isinstance(e, Envelope)}
    verifier = ctx.verifier if ctx.verifier is not None else in_threads(ctx.threads)
    batch = start_checks(list(fresh.values()), ctx.keyring, verifier)
    return Started(read, list(fresh), batch)


def finish_chunk(
    txn: Txn, dbs: dict[str, Any], started: Started, ctx: ReplayContext
) -> list[PithOutcome]:
    """The started chunk, pith by pith, once its signatures are verified. ``txn`` may be a
    later snapshot than the one :func:`start_chunk` read the copies in: a pith that appends
    reached after replay's start is read again here (:func:`_replay_pith_at_start`)."""
    checked: dict[bytes, str | None] = {}
    if started.batch is not None:
        checked = dict(zip(started.fresh, started.batch.reasons(), strict=True))
    kd = txn.get(META_KEYRING, db=dbs["meta"])
    if ctx.high_water is not None and (None if kd is None else kd.hex()) != ctx.stored_kd:
        # The cached verdicts and states now belong to another keyring than the start's.
        raise StoreError("rebuilt", "the store was rebuilt under keyring "
                         f"{'' if kd is None else kd.hex()[:16]} while replay ran")  # fmt: skip
    late_keys: set[bytes] = set()
    late_piths: set[str] = set()
    if ctx.high_water is not None:
        late_keys, late_piths = _late(txn, dbs, ctx.high_water)
    late_eids = {key[:32] for key in late_keys}
    memo = _Memo.of(txn, dbs, ctx)
    return [
        _replay_pith_at_start(txn, dbs, r, checked, ctx, late_keys, memo)
        if r.pith in late_piths or not r.indexed.isdisjoint(late_eids)
        else _replay_pith(txn, dbs, r, checked, ctx, memo)
        for r in started.read
    ]


@dataclass
class _Memo:
    """What the piths of one chunk share, in one transaction: the verdict prefix of each
    key entry (:class:`Judges`, under the store's keyring), computed once per chunk rather
    than once per pith or copy (``by_key`` prefixes are kept by :func:`key_hash` itself)."""

    judges: Judges | None

    @classmethod
    def of(cls, txn: Txn, dbs: dict[str, Any], ctx: ReplayContext) -> _Memo:
        # under the store's keyring, its verdicts are those of ctx.keyring's entries
        return cls(Judges.of_store(txn, dbs, ctx.keyring) if ctx.same_keyring else None)


def _late(txn: Txn, dbs: dict[str, Any], high: int) -> tuple[set[bytes], set[str]]:
    """The copies appended after sequence number ``high`` (event_id + copy hash, from
    ``seq``), and every pith a copy of their events claims: the piths those appends may
    have changed."""
    keys: set[bytes] = set()
    cursor = txn.cursor(db=dbs["seq"])
    if cursor.set_range(SEQ.pack(high + 1)):
        keys.update(value for _, value in cursor)
    piths: set[str] = set()
    for eid in {key[:32] for key in keys}:
        preferred = event_copy(txn, dbs, eid, readable)
        copies = [v for _, _, v in evidence_of(txn, dbs, eid, readable)]
        for data in copies if preferred is None else [preferred, *copies]:
            ids = decode_ids(data)
            if ids is not None:
                piths.add(ids.pith_number)
    return keys, piths


def _replay_pith_at_start(
    txn: Txn,
    dbs: dict[str, Any],
    read: _PithCopies,
    checked: dict[bytes, str | None],
    ctx: ReplayContext,
    late_keys: set[bytes],
    memo: _Memo,
) -> PithOutcome:
    """A pith that appends reached after replay's start: its cached state is no longer the
    one of the start, so it is read again and checked in ``txn`` alone (the state the store
    now holds for it must still be its re-reduction), and its events and copies are counted
    without the copies appended after the start."""
    now = _read_pith(txn, dbs, read.pith, read.foreign)
    pith, found, _, _ = _replay_pith(txn, dbs, now, checked, ctx, memo)
    early = {eid: kept for eid, stored in now.by_event.items()
             if (kept := [c for c in stored
                          if eid + (c[0] or copy_hash(c[1])) not in late_keys])}  # fmt: skip
    then = _PithCopies(pith, now.indexed & early.keys(), early, now.passed,
                       unpacked=now.unpacked)  # fmt: skip
    _, _, events, copies = _replay_pith(txn, dbs, then, checked, ctx, memo)
    return pith, found, events, copies


def replay_chunk(
    txn: Txn,
    dbs: dict[str, Any],
    chunk: Sequence[tuple[str, Sequence[bytes]]],
    ctx: ReplayContext,
) -> list[PithOutcome]:
    """Replay the piths of ``chunk`` (what a worker process does with one)."""
    return finish_chunk(txn, dbs, start_chunk(txn, dbs, chunk, ctx), ctx)


def _replay_pith(
    txn: Txn,
    dbs: dict[str, Any],
    copies_of: _PithCopies,
    checked: dict[bytes, str | None],
    ctx: ReplayContext,
    memo: _Memo,
) -> PithOutcome:
    found: list[Discrepancy] = []

    def say(kind: str, subject: str, detail: str) -> None:
        found.append(Discrepancy(kind, subject, detail))

    pith, indexed_set = copies_of.pith, copies_of.indexed
    by_event, passed = copies_of.by_event, copies_of.passed
    stored_kd = bytes.fromhex(ctx.stored_kd) if ctx.stored_kd else None
    judges = memo.judges
    judged: list[Judged] = []
    copies = 0
    for eid, stored_copies in by_event.items():
        subject = eid_str(eid)
        candidates: list[tuple[Judged, bytes | None]] = []
        for h_key, data in stored_copies:
            copies += 1
            label = "the preferred copy" if h_key is None else f"evidence copy {h_key.hex()[:16]}"
            env = passed[data]
            if isinstance(env, DoorError):
                say("door", subject, f"{label} no longer passes the door: {env.describe()}")
                continue
            if env.encoded != data:
                say("events" if h_key is None else "evidence", subject,
                    f"{label} is not stored in its JCS encoding")  # fmt: skip
            if env.event_id != subject:
                say("events" if h_key is None else "evidence", subject,
                    f"{label} says event_id {env.event_id}")  # fmt: skip
                continue
            key_id = signer_key_id(env)
            pointer = (txn.get(eid, db=dbs["events"]) if h_key is None
                       else txn.get(eid + h_key, db=dbs["evidence"]))  # fmt: skip
            if key_id is not None and (pointer is None or txn.get(
                    key_hash(key_id) + pointer, db=dbs["by_key"]) is None):  # fmt: skip
                say("by_key", subject, f"{label} is not listed under its key_id {key_id!r}")
            cached_raw = (None if stored_kd is None or judges is None or pointer is None
                          else cached_verdict(txn, dbs, judges, env, pointer,
                                              raw=True))  # fmt: skip
            if data in checked:
                reason = checked[data]
            elif ctx.verify or not ctx.same_keyring or cached_raw not in _VERDICT_VALUES:
                reason = check_alone(env, ctx.keyring)
            else:
                reason = verdict_of(cached_raw)
            if ctx.same_keyring and stored_kd is not None:
                if cached_raw is None:
                    say("verdicts", subject, f"{label} has no cached verdict")
                elif cached_raw != verdict_bytes(reason):
                    say("verdicts", subject, f"{label}: cached verdict {_show(cached_raw)!r}, "
                        f"checks 1-12 give {verdict_bytes(reason).decode()!r}")  # fmt: skip
            candidates.append((Judged(env, reason), h_key))
        if not candidates:
            continue
        held = candidates[0][0] if candidates[0][1] is None else None
        if eid in indexed_set and held is not None and held.envelope.pith_number != pith:
            say("by_pith", subject, f"indexed under {pith} but its envelope says "
                f"{held.envelope.pith_number}")  # fmt: skip
        winner, winner_h = candidates[0]
        for candidate, h_key in candidates[1:]:
            if keep_preferred(winner, candidate) is candidate:
                winner, winner_h = candidate, h_key
        if ctx.same_keyring and held is not None and winner_h is not None and eid in indexed_set:
            say("preference", subject, f"events holds a copy that section 7 step 0 does not "
                f"prefer; evidence copy {winner_h.hex()[:16]} wins: "
                f"{why(winner, candidates[0][0])}")  # fmt: skip
        if winner.envelope.pith_number == pith:
            judged.append(winner)
    result = reduce_judged(pith, judged)
    replayed = parts_of(result) if isinstance(result, Reduction) else None
    key = pith.encode("ascii")
    stored = index_stored(txn, dbs, pith)
    try:
        cached = state_parts(txn, dbs, pith, stored, copies_of.unpacked, passed)
        # The state assembled from the index is compared byte for byte with the replayed
        # one through their parts: assemble() is a function of its parts, and equal parts
        # (bytes and strings, and the two counts of the summary when they are ints, not
        # true or 1.0) give equal bytes. Only parts that differ are assembled, to compare
        # and describe.
        same = cached == replayed and (
            cached is None
            or (type(cached.event_count) is int and type(cached.valid_event_count) is int)
        )
        cached_state = None if same or cached is None else assemble(cached)
    except (*INDEX_DAMAGE, CorruptCopy) as exc:
        say("index", pith, f"the state cannot be assembled from the index: "
            f"{damage_said(exc)}")  # fmt: skip
        return pith, found, len(judged), copies
    state = None if same or replayed is None else assemble(replayed)
    cached_status = stored["piths"].get(key)
    expected_status = None if result is None else jcs(pith_summary(result))
    if ctx.same_keyring:
        expected_index = index_entries(pith, result)
        for name, entries in stored.items():
            want = expected_index[name]
            if want == entries:
                continue
            missing = len(want.keys() - entries.keys())
            extra = len(entries.keys() - want.keys())
            differ = sum(1 for k in want.keys() & entries.keys() if want[k] != entries[k])
            if name != "piths" and (missing or extra or differ):
                say("index", pith, f"{name}: {missing} entries missing, {extra} extra, "
                    f"{differ} differing from a full reduction")  # fmt: skip
    if cached_state != state:
        say("state", pith, _state_difference(cached_state, state, result))
    elif cached_status != expected_status:
        shown = f"piths says {_show(cached_status)}, replay gives {_show(expected_status)}"
        # Under another keyring, a pending pith whose counts change has no state that
        # changes: a note, not a discrepancy. Under the store's keyring it is damage.
        say("pith" if ctx.same_keyring or state is not None else "note", pith, shown)
    return pith, found, len(judged), copies


_VERDICT_VALUES = frozenset([VALID, *(r.encode("ascii") for r in REASONS[:12])])


def _show(raw: bytes | None) -> str:
    return "nothing" if raw is None else raw.decode("utf-8", "replace")


def _state_difference(
    cached: bytes | None, replayed: bytes | None, result: Reduction | Pending | None
) -> str:
    """Say precisely how a cached state differs from the replayed one."""
    if replayed is None:
        now = "no events" if result is None else f"pending ({result.event_count} events)"
        if cached is None:
            return f"no cached state, and replay gives none ({now})"
        return f"a state is cached but replay gives {now}"
    if cached is None:
        return f"no state is cached but replay gives one ({len(replayed)} bytes)"
    try:
        old = msgspec.json.decode(cached)
    except (msgspec.MsgspecError, ValueError):
        return "the cached state is not JSON (damaged bytes)"
    new = msgspec.json.decode(replayed)
    if not isinstance(old, dict) or old.keys() != new.keys():
        return "the cached state does not have the state document's members"
    differing = [m for m in new if jcs(old[m]) != jcs(new[m])]
    if not differing:
        return "the cached bytes differ from the rendering of the same document"
    counts = [
        f"{m} cached {old[m]}, replayed {new[m]}"
        for m in ("event_count", "valid_event_count", "invalid_event_count", "equivocation_count")
        if old[m] != new[m]
    ]
    detail = f"differs in {', '.join(differing)}"
    return f"{detail} ({'; '.join(counts)})" if counts else detail
