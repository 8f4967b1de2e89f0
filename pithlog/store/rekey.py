"""A keyring change that costs what it changes (``docs/store.md``, "A keyring change").

Verdicts are kept per key entry (:mod:`pithlog.store.keyindex`), so a new keyring changes
the verdicts of the copies named by the key_ids whose entry it adds, removes or changes,
and nothing else. The store keeps the entries of its keyring in ``meta[keyring]``; the
difference with the new keyring is a set of key_ids, and ``by_key`` lists the copies each
one signed. The change is applied in pieces, each its own write transaction:

1. **judge**: the copies under the changed key_ids, :data:`PIECE_COPIES` at a time in
   ``by_key`` order: every copy of each of their events is judged under the new keyring
   (a cached verdict of an unchanged entry is reused; the others checked, signatures
   included), the preferred copy re-picked (spec 7 step 0), and the pith of the event
   marked in ``rekey``. A pith whose preferred copy changed is re-reduced in the same
   piece (its index slices the copy in ``events``, which must not change under it).
2. **reduce**: the piths marked in ``rekey``, in pith order, each re-reduced under the new
   keyring, about :data:`PIECE_EVENTS` events a piece, and unmarked in the same piece.

``meta`` records the target keyring (``rekey_target``), the changed key_ids
(``rekey_keys``), the last ``by_key`` key judged (``rekey_cursor``) and the end of step 1
(``rekey_judged``), so a crash loses at most the piece it interrupted: running the change
again resumes from the last commit. ``keyring_digest`` (and ``meta[keyring]``) change in
the last piece only. A change to a third keyring while one is under way judges the union
of both differences from the start (what the first run re-reduced is re-reduced again).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgspec

from pithlog.errors import StoreError
from pithlog.protocol.checks import check_many
from pithlog.protocol.events import Envelope, readmit
from pithlog.protocol.keys import Keyring
from pithlog.protocol.records import is_pith_number
from pithlog.protocol.reduce import Judged, keep_preferred
from pithlog.store import aliases
from pithlog.store.keyindex import (
    Judges,
    cached_verdict,
    entries_agree,
    entries_of,
    key_hash,
    meaning,
)
from pithlog.store.layout import (
    META_KEYRING,
    META_KEYRING_ENTRIES,
    META_REKEY_CURSOR,
    META_REKEY_JUDGED,
    META_REKEY_KEYS,
    META_REKEY_TARGET,
    Txn,
    copy_hash,
    decode_ids,
    event_copy,
    evidence_of,
    prefer,
    stored_copy,
    verdict_bytes,
    verdict_of,
)
from pithlog.store.stateindex import rereduce

if TYPE_CHECKING:
    from pithlog.store.log import Store

INLINE_MAX_COPIES = 10_000
"""An append under a changed keyring applies the change itself when it re-judges at most
this many copies (about 2 s of signatures on one core) and re-reduces at most
:data:`INLINE_MAX_EVENTS` events, else refuses with ``store.keyring_changed``, the size of
the work and ``pithlog rekey``."""

INLINE_MAX_EVENTS = 100_000
"""The events of the piths an append's keyring change may re-reduce (a revoked registry
key is a few copies per pith, but every pith): about 30 s of reduction."""

PIECE_COPIES = 2_000
"""Copies judged per transaction of step 1."""

PIECE_EVENTS = 20_000
"""Events re-reduced per transaction of step 2: piths are taken until the piece has passed
it (so at most that plus one pith)."""

RekeyProgress = Callable[[str, int, int], None]
"""``progress(stage, done, total)`` after each committed piece: stage ``judge`` counts
copies, ``reduce`` piths."""


@dataclass(frozen=True)
class Plan:
    """What a change to a keyring needs: ``copies`` to judge (at most the cap asked for,
    plus one), over ``keys`` changed key_ids; ``resumed`` when a change to this keyring is
    under way; ``events``, when counted, the events of the piths it will re-reduce."""

    copies: int
    keys: int
    resumed: bool
    events: int | None = None


@dataclass(frozen=True)
class Step:
    """One committed piece: copies judged, piths re-reduced, piths still marked, done."""

    judged: int
    reduced: int
    marked: int
    done: bool


# --- the difference ------------------------------------------------------------------------


def _split(raw: bytes | None) -> list[bytes]:
    raw = raw or b""
    return [raw[i : i + 32] for i in range(0, len(raw), 32)]


def _distinct_keys(txn: Txn, dbs: dict[str, Any]) -> set[bytes]:
    """Every key_id hash in ``by_key`` (one seek per key)."""
    out: set[bytes] = set()
    cursor = txn.cursor(db=dbs["by_key"])
    found = cursor.first()
    while found:
        prefix = cursor.key()[:32]
        out.add(prefix)
        found = cursor.set_range(prefix + b"\xff" * 64)
    return out


def changed_keys(txn: Txn, dbs: dict[str, Any], keyring: Keyring) -> set[bytes]:
    """Hashes of the key_ids whose entry differs between the store's keyring and
    ``keyring`` (added, removed or changed in any of the seven members). Without the
    store's entries (a store migrated from format 3), or with entries that do not hash to
    ``keyring_digest`` (damaged: a difference taken from them could miss a changed key),
    every key_id the store holds."""
    raw = txn.get(META_KEYRING_ENTRIES, db=dbs["meta"])
    if raw is None or not entries_agree(raw, txn.get(META_KEYRING, db=dbs["meta"])):
        return _distinct_keys(txn, dbs)
    old = entries_of(raw)
    ids = old.keys() | set(keyring)
    return {key_hash(k) for k in ids
            if old.get(k) != (keyring[k].entry() if k in keyring else None)}  # fmt: skip


def work_keys(txn: Txn, dbs: dict[str, Any], keyring: Keyring) -> tuple[list[bytes], bool] | None:
    """The key_id hashes a change to ``keyring`` must judge, and whether a change to it is
    under way (resumed); ``None`` when the store is under ``keyring`` already (or empty)."""
    meta = dbs["meta"]
    kd = txn.get(META_KEYRING, db=meta)
    target = txn.get(META_REKEY_TARGET, db=meta)
    if target is None:
        if kd is None or kd == bytes.fromhex(keyring.digest):
            return None
        return sorted(changed_keys(txn, dbs, keyring)), False
    if target == meaning(keyring):
        return _split(txn.get(META_REKEY_KEYS, db=meta)), True
    keys = changed_keys(txn, dbs, keyring) | set(_split(txn.get(META_REKEY_KEYS, db=meta)))
    return sorted(keys), False


def _copies_after(
    txn: Txn, dbs: dict[str, Any], keys: list[bytes], cursor: bytes, limit: int | None
) -> list[bytes]:
    """``by_key`` keys under ``keys`` after ``cursor``, in key order, at most ``limit``."""
    out: list[bytes] = []
    walk = txn.cursor(db=dbs["by_key"])
    for kh in keys:
        if cursor and kh < cursor[:32]:
            continue
        start = cursor + b"\x00" if cursor and kh == cursor[:32] else kh
        found = walk.set_range(start)
        while found:
            key = walk.key()
            if not key.startswith(kh):
                break
            out.append(key)
            if limit is not None and len(out) >= limit:
                return out
            found = walk.next()
    return out


def _event_of(txn: Txn, dbs: dict[str, Any], entry: bytes) -> bytes:
    """The raw event_id of the copy a ``by_key`` key names (key_id hash + sequence number):
    from ``seq`` (empty when seq does not hold it: replay reports that)."""
    named = txn.get(entry[32:], db=dbs["seq"])
    return b"" if named is None else named[:32]


def plan(
    txn: Txn, dbs: dict[str, Any], keyring: Keyring, cap: int | None = None,
    count_events: bool = False,
) -> Plan | None:  # fmt: skip
    """The size of the change to ``keyring`` (``None``: none needed); counting stops past
    ``cap`` copies. With ``count_events`` (and no more than ``cap`` copies), also the events
    of the piths it will re-reduce: those of the copies' events and those still marked."""
    found = work_keys(txn, dbs, keyring)
    if found is None:
        return None
    keys, resumed = found
    meta = dbs["meta"]
    entries: list[bytes] = []
    if not (resumed and txn.get(META_REKEY_JUDGED, db=meta) is not None):
        cursor = (txn.get(META_REKEY_CURSOR, db=meta) or b"") if resumed else b""
        limit = None if cap is None else cap + 1
        entries = _copies_after(txn, dbs, keys, cursor, limit)
    events = None
    if count_events and (cap is None or len(entries) <= cap):
        piths: set[str] = set()
        if resumed:
            marked = (k.decode("ascii", "replace")
                      for k in txn.cursor(db=dbs["rekey"]).iternext(values=False))
            piths.update(p for p in marked if is_pith_number(p))  # fmt: skip
        for eid in {_event_of(txn, dbs, key) for key in entries} - {b""}:
            ids = decode_ids(event_copy(txn, dbs, eid) or b"")
            if ids is not None:
                piths.add(ids.pith_number)
        events = sum(_event_count(txn, dbs, pith) for pith in piths)
    return Plan(len(entries), len(keys), resumed, events)


# --- the pieces ----------------------------------------------------------------------------


def forget_rekey(txn: Txn, dbs: dict[str, Any]) -> None:
    """Drop a change under way (its end, or a rebuild that supersedes it)."""
    for name in (META_REKEY_TARGET, META_REKEY_KEYS, META_REKEY_CURSOR, META_REKEY_JUDGED):
        txn.delete(name, db=dbs["meta"])
    cursor = txn.cursor(db=dbs["rekey"])
    while cursor.first():
        cursor.delete()


def piece_work(
    keyring: Keyring,
    piece_copies: int = PIECE_COPIES,
    piece_events: int = PIECE_EVENTS,
    take_over: bool = True,
) -> Callable[[Txn, dict[str, Any]], Step]:
    """The write transaction of the next piece of the change to ``keyring``. A change to
    another keyring under way is taken over (redirected) when ``take_over``; otherwise (a
    piece after the first of one :func:`rekey`) it is ``store.keyring_changed``: two
    changes to two keyrings that each took the other's over would restart their judging
    by turns and never end."""
    target = meaning(keyring)
    verdicts: dict[bytes, str | None] = {}  # copy hash -> verdict, kept across retries

    def work(txn: Txn, dbs: dict[str, Any]) -> Step:
        meta = dbs["meta"]
        under_way = txn.get(META_REKEY_TARGET, db=meta)
        if under_way is not None and under_way != target and not take_over:
            raise StoreError(
                "keyring_changed",
                f"another change took this one over, to the keyring "
                f"{hashlib.sha256(under_way).hexdigest()[:16]}... (another `pithlog rekey`): "
                f"this change to {keyring.digest[:16]}... stops; let that one finish, or "
                "run this one again to take the change back",
            )
        if under_way != target:
            found = work_keys(txn, dbs, keyring)
            if found is None:
                return Step(0, 0, 0, True)
            txn.put(META_REKEY_TARGET, target, db=meta)
            txn.put(META_REKEY_KEYS, b"".join(found[0]), db=meta)
            txn.delete(META_REKEY_CURSOR, db=meta)
            txn.delete(META_REKEY_JUDGED, db=meta)
        judges = Judges.of_store(txn, dbs, keyring)
        judged = 0
        if txn.get(META_REKEY_JUDGED, db=meta) is None:
            keys = _split(txn.get(META_REKEY_KEYS, db=meta))
            cursor = txn.get(META_REKEY_CURSOR, db=meta) or b""
            entries = _copies_after(txn, dbs, keys, cursor, piece_copies)
            eids = [e for e in dict.fromkeys(_event_of(txn, dbs, key) for key in entries) if e]
            _judge_events(txn, dbs, judges, eids, verdicts)
            judged = len(entries)
            if len(entries) >= piece_copies:
                txn.put(META_REKEY_CURSOR, entries[-1], db=meta)
                return Step(judged, 0, txn.stat(dbs["rekey"])["entries"], False)
            txn.put(META_REKEY_JUDGED, b"1", db=meta)
            txn.delete(META_REKEY_CURSOR, db=meta)
        reduced = events = 0
        walk = txn.cursor(db=dbs["rekey"])
        while events < piece_events and walk.first():
            pith = walk.key().decode("ascii", "replace")
            walk.delete()
            if not is_pith_number(pith):
                continue  # a damaged mark names no pith (replay names it)
            before = aliases.chosen(txn, dbs, pith)
            rereduce(txn, dbs, pith, judges, verdicts)
            aliases.follow(txn, dbs, pith, before)
            reduced += 1
            events += _event_count(txn, dbs, pith)
        marked = txn.stat(dbs["rekey"])["entries"]
        if marked:
            return Step(judged, reduced, marked, False)
        txn.put(META_KEYRING, bytes.fromhex(keyring.digest), db=meta)
        txn.put(META_KEYRING_ENTRIES, target, db=meta)
        forget_rekey(txn, dbs)
        return Step(judged, reduced, 0, True)

    return work


def _event_count(txn: Txn, dbs: dict[str, Any], pith: str) -> int:
    """The events of ``pith`` as its cached summary counts them: the size of its piece of
    work, at least 1 (a damaged summary counts 1; the re-reduction rewrites it)."""
    raw = txn.get(pith.encode("ascii"), db=dbs["piths"])
    try:
        count = msgspec.json.decode(raw).get("event_count", 1) if raw else 1
    except (msgspec.MsgspecError, AttributeError):
        count = 1
    return max(count, 1) if type(count) is int else 1


def _judge_events(
    txn: Txn,
    dbs: dict[str, Any],
    judges: Judges,
    eids: list[bytes],
    verdicts: dict[bytes, str | None],
) -> None:
    """Step 1 for the events ``eids``: every copy judged under ``judges``' keyring, the
    preferred copy re-picked, the pith marked; piths whose preferred copy changed are
    re-reduced now."""
    copies: dict[bytes, list[tuple[bytes, Envelope]]] = {}  # eid -> [(h, env)], held first
    unjudged: dict[bytes, tuple[Envelope, bytes]] = {}  # h -> (env, pointer)
    for eid in eids:
        pointer = txn.get(eid, db=dbs["events"])
        data = None if pointer is None else stored_copy(txn, dbs, pointer)
        if pointer is None or data is None:
            continue
        stored = [(copy_hash(data), pointer, readmit(data))]
        stored += [(key[32:], at, readmit(other))
                   for key, at, other in evidence_of(txn, dbs, eid)]  # fmt: skip
        copies[eid] = [(h, env) for h, _, env in stored]
        for h, at, env in stored:
            if h in unjudged:
                continue
            cached = cached_verdict(txn, dbs, judges, env, at)
            if cached is not None:
                verdicts[h] = verdict_of(cached)
            elif h in verdicts:  # checked by an earlier try of this piece (the map grew)
                txn.put(judges.key(env, at), verdict_bytes(verdicts[h]), db=dbs["verdicts"])
            else:
                unjudged[h] = (env, at)
    if unjudged:  # the signatures of the piece at once, over threads
        envelopes = [env for env, _ in unjudged.values()]
        for (h, (env, at)), reason in zip(
            unjudged.items(), check_many(envelopes, judges.keyring), strict=True
        ):
            verdicts[h] = reason
            txn.put(judges.key(env, at), verdict_bytes(reason), db=dbs["verdicts"])
    moved: set[str] = set()
    for eid, found in copies.items():
        (held_h, held_env), best_h = found[0], found[0][0]
        held = best = Judged(held_env, verdicts[held_h])
        for h, env in found[1:]:
            candidate = Judged(env, verdicts[h])
            if keep_preferred(best, candidate) is candidate:
                best, best_h = candidate, h
        txn.put(held_env.pith_number.encode("ascii"), b"", db=dbs["rekey"])
        if best is held:
            continue
        new_env = best.envelope
        prefer(txn, dbs, eid, held_h, best_h)
        if held_env.pith_number != new_env.pith_number:
            txn.delete(held_env.pith_number.encode("ascii") + eid, db=dbs["by_pith"])
            txn.put(new_env.pith_number.encode("ascii") + eid, b"", db=dbs["by_pith"])
            txn.put(new_env.pith_number.encode("ascii"), b"", db=dbs["rekey"])
        moved.update((held_env.pith_number, new_env.pith_number))
    for pith in sorted(moved):
        before = aliases.chosen(txn, dbs, pith)
        rereduce(txn, dbs, pith, judges, verdicts)
        aliases.follow(txn, dbs, pith, before)


# --- the change on a store: inline before an append, or piece by piece ----------------------


def apply_keyring(
    store: Store,
    keyring: Keyring,
    limit: int = INLINE_MAX_COPIES,
    progress: RekeyProgress | None = None,
    event_limit: int = INLINE_MAX_EVENTS,
) -> Plan | None:
    """:meth:`Store.apply_keyring`: the change made when it is small enough, else refused
    with its size and the command that makes it."""
    planned = store.rekey_plan(keyring, cap=limit, count_events=True)
    if planned is None:
        return None
    if planned.copies > limit or (planned.events or 0) > event_limit:
        size = (f"more than {limit:,} copies to judge" if planned.copies > limit else
                f"{planned.copies:,} copies to judge, piths of {planned.events:,} events "
                f"to re-reduce (more than {event_limit:,})")  # fmt: skip
        raise StoreError(
            "keyring_changed",
            f"the keyring changed {planned.keys} key(s): {size} before appending: run "
            f"`pithlog --store {store.path} rekey --keyring KEYRING` (in pieces that "
            "resume after a crash)",
        )
    store.rekey(keyring, progress=progress)
    return planned


def rekey(
    store: Store,
    keyring: Keyring,
    progress: RekeyProgress | None = None,
    piece_copies: int = PIECE_COPIES,
    piece_events: int = PIECE_EVENTS,
) -> dict[str, int]:
    """:meth:`Store.rekey`: the pieces of :func:`piece_work`, each committed in turn, until
    the last; ``progress`` after each."""
    planned = store.rekey_plan(keyring)
    totals = {"copies": 0, "piths": 0, "pieces": 0}
    if planned is None:
        return totals
    work = piece_work(keyring, piece_copies, piece_events)  # may redirect a change
    while True:
        step = store._write(work)
        totals["pieces"] += 1
        totals["copies"] += step.judged
        totals["piths"] += step.reduced
        if progress is not None:
            if step.judged or not totals["piths"]:
                progress("judge", totals["copies"], max(planned.copies, totals["copies"]))
            if step.reduced or step.done:
                progress("reduce", totals["piths"], totals["piths"] + step.marked)
        if step.done:
            return totals
        work = piece_work(keyring, piece_copies, piece_events, take_over=False)
