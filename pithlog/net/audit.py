"""``pithlog audit``: what an auditor runs against a registry (docs/evidence.md, "Audit").

Mirror the registry's log (every tile, bundle and copy verified: :mod:`pithlog.net.mirror`),
then compare every state document the registry serves (``/state/<pith>``) with the one the
mirrored log implies, byte for byte, and write an equivocation proof for every equivocated
slot, proven against the checkpoint the mirror accepted. Findings come one at a time, as
they are found: nothing holds every state at once.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pithlog.errors import DoorError, MirrorError, ProofError
from pithlog.net.evidence_files import write_evidence
from pithlog.net.origin import Origin, out_of_time
from pithlog.protocol.canonical import digest, parse, shape
from pithlog.protocol.events import readmit
from pithlog.protocol.keys import Keyring
from pithlog.protocol.state_verify import STATE_MAX_DEPTH
from pithlog.store import Store
from pithlog.transparency.checkpoint import parse_checkpoint_text, parse_note
from pithlog.transparency.evidence import Included, equivocation_proof

ENCODING_ROOM = 1024
"""Bytes a served state may take beyond its length and :data:`ENCODING_SHARE`, raw, for
the encoding it comes in (zstd and gzip frame it in a header and a few bytes a block)."""
ENCODING_SHARE = 64
"""... and one byte in this many of it: what zstd (1 in 256) and gzip (5 in 16,384) add
at most to bytes that do not compress."""


def state_cap(ours: bytes) -> int:
    """The most read of a served state when the log's is ``ours``: its length and the one
    trailing newline (a longer document is certainly another), and room for an encoding
    of it that is longer than it. The log's own length, and no fixed cap: a fixed cap let
    a registry end the audit with an answer just over it."""
    return len(ours) + 1 + len(ours) // ENCODING_SHARE + ENCODING_ROOM


PENDING_CAP = 1 << 20
"""The most read of a state served for a pith the log leaves pending: any answer is one
the log does not imply, and this much shows the hashes of a state invented for it."""


UNANSWERED_IN_A_ROW = 16
"""States left unanswered one after the other after which the audit stops asking (``pithlog
audit --max-unanswered``): a registry that lets every request time out holds the audit a
minute a pith (:func:`pithlog.net.encoding.answer_seconds`), weeks over a large log, and
sixteen in a row is no passing failure of one request."""


MAX_SECONDS = 3600.0
"""Seconds an audit may take in all by default (``pithlog audit --max-time``; 0 there: no
limit), as a sync from a URL (:data:`pithlog.net.sync.MAX_SECONDS`). Each answer has a
deadline of its own (:func:`pithlog.net.encoding.answer_seconds`), but a registry may
answer every one just in time: one that took half a second a state held an audit of
100,000 piths about 14 hours, and one that answered each just before its minute, weeks.
What the mirror committed stays stored and the next audit goes on from it; the states
left are counted as ``state_not_checked`` (no pass)."""


class _TooLong(Exception):
    """A served state longer than :func:`state_cap` (once decoded, or sent as is)."""


class _OutOfTime(Exception):
    """The audit's time (``ends`` of :func:`compare_states`) ran out before a state could
    be told the same or not: the registry is not to blame, the pith is not checked."""


@dataclass(frozen=True)
class Finding:
    """One line of the report."""

    kind: str
    """``state_mismatch``, ``state_unanswered``, ``state_not_checked``, ``equivocation`` or
    ``split_view``."""
    doc: dict[str, Any]


def _claimed(state: bytes | None) -> str | None:
    """The ``state_sha256`` member a document carries (``None``: none, or not JSON)."""
    if state is None:
        return None
    try:
        value = shape(state, Any)
    except DoorError:
        return None
    found = value.get("state_sha256") if isinstance(value, dict) else None
    return found if isinstance(found, str) else None


def _computed(state: bytes | None) -> str | None:
    """``state_sha256`` computed from a document (spec 8: the digest of the document
    without that member), through the door as a state document goes (``verify-state``:
    three levels deeper than an envelope, and no bound on its length but the one it was
    read with, :func:`state_cap`); ``None`` when it does not pass it. Read as an envelope,
    a state over 8 MiB, or holding a payload nested near the envelope's bound, had no
    hash in its finding, as if it were not JSON."""
    if state is None:
        return None
    try:
        value = parse(state, max_depth=STATE_MAX_DEPTH, max_bytes=None)
    except DoorError:
        return None
    if not isinstance(value, dict):
        return None
    return digest({k: v for k, v in value.items() if k != "state_sha256"})


CATCH_UPS = 3
"""Times the audit brings its mirror up to the registry's newer checkpoint for one pith
whose served state differs (``catch_up`` of :func:`compare_states`): a registry that takes
submissions while it is audited serves the states of a log longer than the one mirrored,
and an honest one must not be named for it. A pith whose state still differs after this
many, the log growing each time, is ``state_not_checked``: no pass, and no evidence."""


@dataclass
class Walk:
    """What :func:`compare_states` tells besides its findings, read once it is done."""

    followed: bool = True
    """Every pith a catch-up's leaves touched was compared after them (or is counted in a
    finding): every pith of the last tree mirrored was then compared with the state that
    tree gives it. ``False`` once more than :data:`CAUGHT_UP_PITHS` were touched: only the
    piths of the tree the walk began with are then all compared."""
    stopped: str | None = None
    """Why the walk stopped asking for states before the last pith, if it did:
    ``max_unanswered`` (that many states unanswered in a row) or ``max_time`` (its time
    ran out); the piths left are counted in one ``state_not_checked`` finding."""


CAUGHT_UP_PITHS = 100_000
"""Piths the leaves of the audit's catch-ups may touch (new piths, and piths compared
before a leaf of theirs came) that it compares after its walk: their numbers are held
until then, about 100 bytes each (10 MB at most). A registry that grows by more piths
while it is audited leaves the audit's claim at the size it began with."""

LEAVES_READ = 1000
"""Leaves a catch-up brought read at a time for the piths they touch ..."""
LEAVES_BYTES = 8 << 20
"""... and no more of their copies than this (one at least): a copy may be 1 MiB (spec 1),
and a thousand of them a gigabyte."""


def compare_states(
    store: Store,
    origin: Origin,
    progress: Callable[[int, int], None] | None = None,
    max_unanswered: int = UNANSWERED_IN_A_ROW,
    catch_up: Callable[[], bool] | None = None,
    walk: Walk | None = None,
    ends: float | None = None,
) -> Iterator[Finding]:
    """``state_mismatch`` for every pith with a state in ``store`` whose served document is
    not the same bytes (one trailing newline aside), is longer than :func:`state_cap`, or
    is not served at all (404), and for every pith the log leaves pending (spec 7 step 2:
    no state) whose state is served all the same; ``state_unanswered`` for every pith whose
    state could not be read (an error status, a time-out, a body that does not decode).
    Either way the next pith is compared: a registry that fails one answer is not spared
    the others. After ``max_unanswered`` states unanswered in a row (0: never) the rest are
    not asked for: one ``state_not_checked`` finding counts them. So are they once the
    clock (:func:`time.monotonic`) reaches ``ends`` (``audit --max-time``), the pith whose
    answer it cut short or whose catch-up it came before or cut short (a fetch of the
    catch-up's failed at or after ``ends``: :func:`~pithlog.net.origin.out_of_time`)
    included: ``max_unanswered``
    counts states unanswered in a row only, and a registry that let every other request
    time out (a minute) held the audit half a minute a pith whatever it was.

    ``catch_up()`` brings ``store`` up to the registry's checkpoint of now and says whether
    its tree grew. A state that differs is a ``state_mismatch`` only once ``catch_up`` finds
    the tree as it was before that state was asked for: the state was then served at the
    size compared (a log only grows). When the tree grew, the pith is compared again with
    the longer log, :data:`CATCH_UPS` times at most. A catch-up that cannot fetch the
    checkpoint (``mirror.fetch``) leaves the pith ``state_not_checked``, counted as a state
    unanswered, and the next pith is compared; any other error of it (a split view, a
    checkpoint that does not verify) ends the walk. Without ``catch_up`` a state that
    differs is a mismatch at once (a registry known to be still).

    The piths the leaves a catch-up brought touch, and that the walk does not compare
    after them (new piths sorted before its place, piths it had compared already), are
    compared once the walk is done, with the same catch-ups, until none is left, up to
    :data:`CAUGHT_UP_PITHS` (``walk.followed`` says whether they all were)."""
    # the piths are walked a chunk at a time, never listed: the audit holds one state and
    # one chunk of summaries, however many piths the log has (the store is the auditor's
    # own mirror, which only this audit writes while it runs), and the numbers of the piths
    # a catch-up touched (an ordered set: a dict), up to CAUGHT_UP_PITHS
    totals = store.pith_totals()
    total = totals["piths"] + totals["pending"]
    walk = Walk() if walk is None else walk
    owed: dict[str, None] = {}
    touched = 0

    def touch(before: int, after: int) -> None:
        nonlocal touched
        first = before
        while first < after:
            copies = store.leaf_copies(first, min(LEAVES_READ, after - first), LEAVES_BYTES)
            if not copies:
                return  # beyond the tree: what a catch-up stored is all below it
            first += len(copies)
            for copy in copies:
                pith = readmit(copy).pith_number
                if not walk.followed or pith in owed:
                    continue
                if touched >= CAUGHT_UP_PITHS:
                    walk.followed = False  # the claim stays at the walk's first size
                    owed.clear()
                    return
                owed[pith] = None
                touched += 1

    def piths() -> Iterator[str]:
        for entry in store.each_pith():
            owed.pop(entry["pith_number"], None)  # compared now, after every leaf so far
            yield entry["pith_number"]
        while owed:  # what the catch-ups touched that the walk had passed
            pith = next(iter(owed))
            del owed[pith]
            yield pith

    def settle(pith: str) -> tuple[Finding | None, bool]:
        """The finding of ``pith`` after the catch-ups its state calls for, and whether
        it counts as a state unanswered."""
        for caught_up in range(CATCH_UPS + 1):
            finding = _compare(store, origin, pith, ends)
            unanswered = finding is not None and finding.kind == "state_unanswered"
            if finding is None or finding.kind != "state_mismatch" or catch_up is None:
                break
            if ends is not None and time.monotonic() >= ends:
                raise _OutOfTime  # not a mismatch until the catch-up says the tree is still
            before = store.tree_size()
            try:
                grew = catch_up()
            except MirrorError as exc:
                if out_of_time(exc, ends):
                    # the catch-up cut short by the audit's time: what it committed stays
                    # (each batch is a transaction), its piths counted among those left
                    touch(before, store.tree_size())
                    raise _OutOfTime from exc
                if exc.code != "mirror.fetch":
                    raise  # a checkpoint that does not verify ends the audit, as the first
                # a pass that failed may have stored leaves all the same: theirs are owed
                touch(before, store.tree_size())
                # the size the state was served at is not known: no evidence, and no
                # pass; and as for a state unanswered, the other piths are compared
                return Finding("state_not_checked", {
                    "count": 1, "first_pith_number": pith,
                    "problem": "its served state differed, and the registry's checkpoint "
                               f"of now could not be fetched to tell whether its log had "
                               f"grown: {exc.message}"}), True  # fmt: skip
            touch(before, store.tree_size())
            if not grew:
                break  # served at the size compared: the mismatch stands
            if caught_up == CATCH_UPS:
                finding = Finding("state_not_checked", {
                    "count": 1, "first_pith_number": pith,
                    "problem": f"its served state differed {CATCH_UPS + 1} times, the "
                               "registry's log growing after each: not compared at one "
                               "size"})  # fmt: skip
        return finding, unanswered

    def not_checked(pith: str, stopped: str, problem: str) -> Finding:
        walk.stopped = stopped
        # a catch-up of its own (one the time cut short) owes it again: counted here once
        owed.pop(pith, None)
        # counted by walking the rest, not from ``total``: a catch-up may have grown the
        # log since, and the piths it brought are walked too (``total - done + 1`` then
        # came out short, zero or below zero)
        return Finding("state_not_checked", {"count": 1 + sum(1 for _ in each),
                                             "first_pith_number": pith,
                                             "problem": problem})  # fmt: skip

    ran_out = "the audit's time ran out (--max-time): the rest were not asked for"
    in_a_row = 0
    each = piths()
    for done, pith in enumerate(each, 1):
        if max_unanswered and in_a_row >= max_unanswered:
            yield not_checked(pith, "max_unanswered", f"{in_a_row} states in a row went "
                              "unanswered: the rest were not asked for")  # fmt: skip
            return
        if ends is not None and time.monotonic() >= ends:
            yield not_checked(pith, "max_time", ran_out)
            return
        try:
            finding, unanswered = settle(pith)
        except _OutOfTime:
            yield not_checked(pith, "max_time", ran_out)
            return
        owed.pop(pith, None)  # a catch-up of its own touched it: compared after that
        in_a_row = in_a_row + 1 if unanswered else 0
        if finding is not None:
            yield finding
        if progress is not None:
            progress(done, max(total, done))


def _compare(store: Store, origin: Origin, pith: str, ends: float | None = None) -> Finding | None:
    """The finding of one served state against the store's (``None``: the same), asked
    for until ``ends`` at most (:func:`time.monotonic`; an answer cut there is
    :class:`_OutOfTime`)."""
    # a pending pith has no state: the log implies a 404, and a document served for it
    # is one the log does not imply, however long (read only to a cap); read again on
    # each call, as a catch-up may have given the pith its state
    ours = store.state(pith)
    cap = PENDING_CAP if ours is None else state_cap(ours)
    left = None if ends is None else ends - time.monotonic()
    if left is not None and left <= 0:
        raise _OutOfTime
    try:
        served = origin.get(f"state/{pith}", cap, _TooLong, left)
    except _TooLong:
        return _mismatch(pith, ours, None, True, {"served_problem": f"an answer of over "
                         f"{cap} bytes; " + (f"the log's state is {len(ours)}" if ours
                         else "the log implies no state (the pith is pending)")})  # fmt: skip
    except MirrorError as exc:  # no answer to compare: not evidence, but not a pass
        if ends is not None and time.monotonic() >= ends:
            raise _OutOfTime from exc  # cut short by the audit's own time, maybe
        return Finding("state_unanswered", {"pith_number": pith,
                                            "log_state_sha256": _claimed(ours),
                                            "problem": exc.message})  # fmt: skip
    theirs = served.removesuffix(b"\n") if served is not None else None
    return None if theirs == ours else _mismatch(pith, ours, theirs, theirs is not None)


def _mismatch(pith: str, ours: bytes | None, theirs: bytes | None, served: bool,
              extra: dict[str, Any] | None = None) -> Finding:  # fmt: skip
    return Finding("state_mismatch", {
        "pith_number": pith,
        "log_state_sha256": _claimed(ours),
        "served_state_sha256": _computed(theirs),
        "served_claims_state_sha256": _claimed(theirs),
        "served": served,
        **(extra or {}),
    })  # fmt: skip


def prove_equivocations(
    store: Store, keyring: Keyring, note: bytes, evidence_dir: Path
) -> Iterator[Finding]:
    """An equivocation proof file for every equivocated slot of every pith, against the
    checkpoint ``note`` whose tree the store holds whole (a mirror of it). A slot whose
    copies are not all leaves of that tree (committed by a catch-up of
    :func:`compare_states` that stopped midway) is found all the same, with no proof and a
    ``proof_problem``."""
    cp = parse_checkpoint_text(parse_note(note).text)
    for entry in store.each_pith():
        if entry["status"] != "state" or not entry.get("equivocation_count"):
            continue
        pith = entry["pith_number"]
        state = store.state(pith)
        assert state is not None
        for number, slot in enumerate(json.loads(state)["equivocations"], 1):
            doc = {"pith_number": pith, "slot": slot["slot"], "event_ids": slot["event_ids"],
                   "proof": None}  # fmt: skip
            try:
                found = store.applied_copies_in_tree(slot["event_ids"], cp.size)
            except ProofError as exc:
                if exc.code != "proof.not_found":
                    raise
                doc["proof_problem"] = (f"{exc.message}, the checkpoint the mirror holds "
                                        "whole: the registry's newer one was not all "
                                        "fetched")  # fmt: skip
                yield Finding("equivocation", doc)
                continue
            envelopes = [envelope for envelope, _, _ in found]
            places = [Included(index, tuple(path)) for _, index, path in found]
            signers = sorted({e.value["signer"]["key_id"] for e in envelopes})
            proof, _ = equivocation_proof(pith, envelopes, [keyring[k].entry() for k in signers],
                                          note, places)  # fmt: skip
            name = re.sub(r"[^A-Za-z0-9]+", "-", pith).strip("-")
            path, problem = write_evidence(evidence_dir,
                                           f"equivocation-{name}-{number}.json", proof)
            doc["proof"] = None if path is None else str(path)
            if problem is not None:  # the proof elsewhere, or nowhere: the finding stands
                doc["proof_problem"] = problem
            yield Finding("equivocation", doc)


def split_view(exc: MirrorError) -> Finding:
    """The finding of a mirror that refused a split view, with its evidence file."""
    evidence = None if exc.evidence is None else str(exc.evidence)
    return Finding("split_view", {"message": exc.message, "evidence": evidence})
