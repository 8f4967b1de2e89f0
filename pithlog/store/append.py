"""What the store's write transactions over events do: an append of a batch (its statuses,
:class:`AppendResult`, the work of its transaction) and a rebuild under another keyring.

Each ``*_work`` function returns the work of one write transaction, a function of an open
transaction (:class:`pithlog.store.layout.Txn`) and the store's named databases (``dbs``) that
:mod:`pithlog.store` runs, from the start again when the map has to grow; what it has
judged (verdicts) is kept across those retries.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Container
from dataclasses import dataclass, field
from typing import Any

from pithlog.errors import DoorError, StoreError
from pithlog.protocol.checks import CheckBatch, check_alone
from pithlog.protocol.events import Envelope, readmit
from pithlog.protocol.keys import Keyring
from pithlog.protocol.reduce import Judged, keep_preferred
from pithlog.store import aliases, codec
from pithlog.store.keyindex import Judges, cached_verdict, index_copy, meaning
from pithlog.store.layout import (
    INDEX_DBS,
    META_KEYRING,
    META_KEYRING_ENTRIES,
    META_MERKLE_SIZE,
    META_NEXT_SEQ,
    META_REKEY_TARGET,
    SEQ,
    Txn,
    copy_hash,
    copy_pointer,
    distinct_piths,
    eid_bytes,
    evidence_of,
    prefer,
    put_in_order,
    stored_copy,
    verdict_bytes,
    verdict_of,
    why,
)
from pithlog.store.rekey import forget_rekey
from pithlog.store.replay_report import Progress
from pithlog.store.replay_structure import log_intact
from pithlog.store.stateindex import index_add, rereduce
from pithlog.store.tree import merkle_sync

# Append statuses (one per item of a batch).
STORED = "stored"
"""A new event_id: this copy is stored (with ``reason`` set when kept invalid)."""
DUPLICATE = "duplicate"
"""This exact envelope is already stored (or appeared earlier in the batch)."""
REPLACED = "replaced"
"""A different copy was stored under this event_id; this one is preferred (spec 7 step 0)
and is now the event's copy; the other is kept as evidence."""
EVIDENCE = "evidence"
"""A different copy is stored under this event_id and stays preferred; this one is kept as
evidence."""
REJECTED = "rejected"
"""Fails one of checks 1-12 (``reason``); not stored (see ``keep_invalid``)."""
REFUSED = "refused"
"""Refused at the door (spec 1, 4): not attributable, never stored."""


@dataclass(frozen=True)
class AppendResult:
    """What became of one item of a batch (``index`` counts items from 0)."""

    index: int
    event_id: str | None
    status: str
    reason: str | None = None
    pith_number: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "event_id": self.event_id,
            "status": self.status,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class Decided:
    """Checks 1-12 of a batch already judged elsewhere (by the helpers of
    :mod:`pithlog.store.append_judging`): :meth:`reasons` as :class:`CheckBatch` has it."""

    judged: list[str | None]

    def reasons(self) -> list[str | None]:
        return self.judged


@dataclass
class StartedBatch:
    """A batch through the door with checks 1-12 started
    (:meth:`pithlog.store.Store._start_append`)."""

    items: list[Envelope | DoorError]
    hashes: list[bytes | None]
    """The copy hash of each item (``None`` for a refused one), computed once at the start."""
    fresh: list[bytes]
    """Copy hashes of the copies the store did not hold when the batch was started."""
    checks: CheckBatch | Decided
    packed: dict[bytes, tuple[bytes, bytes]] = field(default_factory=dict)
    """Copy hash -> (packer tag, stored value), packed ahead by the helpers that judged the
    batch (:mod:`pithlog.store.append_judging`): used when the transaction's packer has
    the same tag (the same bytes it would make)."""


# --- an append ----------------------------------------------------------------------------


KeepInvalid = bool | Container[bytes]
"""Which copies failing checks 1-12 an append stores: all (``True``), none (``False``), or
those whose copy hash (SHA-256 of the JCS bytes) is in the container: a sync keeps only the
invalid copies its source proved to be leaves of a trusted checkpoint (docs/transparency.md)."""


def keeps(keep_invalid: KeepInvalid, h: bytes) -> bool:
    """Does ``keep_invalid`` keep the invalid copy of hash ``h``?"""
    if isinstance(keep_invalid, bool):
        return keep_invalid
    return h in keep_invalid


def append_work(
    started: StartedBatch, keyring: Keyring, keep_invalid: KeepInvalid
) -> Callable[[Txn, dict[str, Any]], list[AppendResult]]:
    """The write transaction of a started batch, once its verdicts are in
    (:meth:`pithlog.store.Store._finish_append`)."""
    items = started.items
    kd = bytes.fromhex(keyring.digest)
    # copy hash -> checks 1-12, kept across retries of the transaction
    verdicts: dict[bytes, str | None] = dict(
        zip(started.fresh, started.checks.reasons(), strict=True)
    )

    def judged(env: Envelope, h: bytes) -> Judged:
        if h not in verdicts:
            # the helpers send a copy without its payload only with its verdict, but
            # checks 1-12 need the whole envelope, whatever the batch brought
            whole = env if "payload" in env.value else readmit(env.encoded)
            verdicts[h] = check_alone(whole, keyring)
        return Judged(env, verdicts[h])

    def work(txn: Txn, dbs: dict[str, Any]) -> list[AppendResult]:
        meta = dbs["meta"]
        stored_kd = txn.get(META_KEYRING, db=meta)
        target = txn.get(META_REKEY_TARGET, db=meta)
        if target is not None:
            # another process's change began after this append applied its keyring (or a
            # server's append, which never applies one): the store's digest may be this
            # keyring's, so naming the two digests would say nothing
            raise StoreError(
                "keyring_changed",
                f"a change of the store's keyring to {hashlib.sha256(target).hexdigest()[:16]}"
                f"... is under way (the states are reduced under "
                f"{(stored_kd or b'').hex()[:16]}... until it ends), this keyring is "
                f"{keyring.digest[:16]}...: finish it (`pithlog rekey --keyring KEYRING` "
                "with the keyring it goes to) or redirect it (with this one), then append",
            )
        if stored_kd != kd:
            if stored_kd is not None and txn.stat(dbs["events"])["entries"]:
                # Store.append applies a small change first (pithlog.store.rekey); here
                # another process changed the keyring meanwhile, or the change is large
                raise StoreError(
                    "keyring_changed",
                    f"the store's states were reduced under keyring "
                    f"{(stored_kd or b'').hex()[:16]}..., this keyring is "
                    f"{keyring.digest[:16]}...: run `pithlog rekey --keyring KEYRING` to "
                    "re-judge what the change touches",
                )
            txn.put(META_KEYRING, kd, db=meta)  # an empty store adopts the keyring
            txn.put(META_KEYRING_ENTRIES, meaning(keyring), db=meta)
        elif txn.get(META_KEYRING_ENTRIES, db=meta) is None:
            # a store migrated from format 3 learns its keyring's entries (same digest)
            txn.put(META_KEYRING_ENTRIES, meaning(keyring), db=meta)
        judges = Judges.of_store(txn, dbs, keyring)
        raw_next = txn.get(META_NEXT_SEQ, db=meta)
        if raw_next is None or len(raw_next) != SEQ.size:
            raise StoreError("corrupted", "meta next_seq is missing or damaged; run "
                             "`pithlog replay --verify`")  # fmt: skip
        next_seq = SEQ.unpack(raw_next)[0]
        copies = txn.stat(dbs["seq"])["entries"]

        def samples() -> list[bytes]:
            fresh = [item.encoded for item in items if isinstance(item, Envelope)]
            return codec.first_copies(txn, dbs) + fresh

        # the dictionary, when this batch brings the store to codec.TRAIN_AT copies
        codec.train_if_due(txn, dbs, copies, copies + len(started.fresh), samples)
        pack = codec.packer(txn, dbs)
        results: list[AppendResult] = []
        added: dict[str, list[Judged]] = {}  # pith -> events new to the store
        rebuild: set[str] = set()  # piths whose copies changed: re-reduce them whole
        for index, item in enumerate(items):
            if isinstance(item, DoorError):
                results.append(AppendResult(index, None, REFUSED, item.describe()))
                continue
            env, h, eid = item, started.hashes[index], eid_bytes(item.event_id)
            assert h is not None
            held = txn.get(eid, db=dbs["events"])  # the preferred copy's seq, if any
            if held is not None and copy_pointer(txn, dbs, eid + h) is not None:
                results.append(AppendResult(index, env.event_id, DUPLICATE, None,
                                            env.pith_number))  # fmt: skip
                continue
            new = judged(env, h)
            if new.reason is not None and not keeps(keep_invalid, h):
                results.append(AppendResult(index, env.event_id, REJECTED, new.reason,
                                            env.pith_number))  # fmt: skip
                continue
            pointer = SEQ.pack(next_seq)
            txn.put(judges.key(env, pointer), verdict_bytes(new.reason), db=dbs["verdicts"])
            index_copy(txn, dbs, env, pointer)
            put_in_order(txn, dbs["seq"], pointer, eid + h, "seq")
            ahead = started.packed.get(h)
            stored = ahead[1] if ahead is not None and ahead[0] == pack.tag else pack(env.encoded)
            put_in_order(txn, dbs["copies"], pointer, stored, "copies")
            next_seq += 1
            if held is None:
                txn.put(eid, pointer, db=dbs["events"])
                txn.put(env.pith_number.encode("ascii") + eid, b"", db=dbs["by_pith"])
                added.setdefault(env.pith_number, []).append(new)
                results.append(AppendResult(index, env.event_id, STORED, new.reason,
                                            env.pith_number))  # fmt: skip
                continue
            current = stored_copy(txn, dbs, held)
            if current is None:
                raise StoreError("corrupted", f"events points {env.event_id} at a copy that "
                                 "is not stored; run `pithlog replay --verify`")  # fmt: skip
            old_env = readmit(current)
            old_h = copy_hash(current)
            cached = cached_verdict(txn, dbs, judges, old_env, held)
            if cached is None or old_h in verdicts:
                old = judged(old_env, old_h)
                txn.put(judges.key(old_env, held), verdict_bytes(old.reason),
                        db=dbs["verdicts"])  # fmt: skip
            else:
                old = Judged(old_env, verdict_of(cached))
            if keep_preferred(old, new) is new:
                # spec 7 step 0: the new copy is the event's; the other becomes evidence,
                # both staying where they are stored (two pointers swap)
                txn.put(eid, pointer, db=dbs["events"])
                txn.put(eid + old_h, held, db=dbs["evidence"])
                if old_env.pith_number != env.pith_number:
                    txn.delete(old_env.pith_number.encode("ascii") + eid, db=dbs["by_pith"])
                    txn.put(env.pith_number.encode("ascii") + eid, b"", db=dbs["by_pith"])
                    rebuild.add(old_env.pith_number)
                rebuild.add(env.pith_number)
                results.append(AppendResult(
                    index, env.event_id, REPLACED,
                    f"preferred to the stored copy: {why(new, old)}", env.pith_number,
                ))  # fmt: skip
            else:
                txn.put(eid + h, pointer, db=dbs["evidence"])
                results.append(AppendResult(
                    index, env.event_id, EVIDENCE,
                    f"the stored copy is preferred: {why(old, new)}", env.pith_number,
                ))  # fmt: skip
        for pith in sorted(added.keys() | rebuild):
            before = aliases.chosen(txn, dbs, pith)
            if pith in rebuild or not index_add(txn, dbs, pith, added[pith]):
                rereduce(txn, dbs, pith, judges, verdicts, added.get(pith, ()))
            aliases.follow(txn, dbs, pith, before)  # the alias index follows R
        txn.put(META_NEXT_SEQ, SEQ.pack(next_seq), db=meta)
        merkle_sync(txn, dbs)  # the Merkle tree and by_copy follow seq
        return results

    return work


# --- a rebuild under another keyring ------------------------------------------------------


DERIVED_DBS = ("by_pith", "by_key", "piths", *INDEX_DBS, "aliases", "merkle", "by_copy")
"""The tables a rebuild writes anew from the log (with ``meta`` ``merkle_size``; the
``verdicts`` are a cache it fills, and writes anew too when it verifies)."""


def rebuild_work(
    keyring: Keyring, progress: Progress | None = None, verify: bool = False
) -> Callable[[Txn, dict[str, Any]], dict[str, int]]:
    """The write transaction of :meth:`pithlog.store.Store.rebuild`: every stored copy
    re-judged under ``keyring``, the preferred copy of every event_id re-picked, every table
    derived from the log (:data:`DERIVED_DBS`, the Merkle tree included) written anew, the
    keyring recorded; refused
    (``store.corrupted``) when the log itself is damaged. A copy's verdict cached under its
    judge is taken as it is, unless ``verify``: then every copy is checked again (checks
    1-12, signatures included) and ``verdicts`` is emptied and written anew, so a wrong or
    junk entry cannot survive into the states. Its result: copies judged, preferred copies
    changed, piths reduced."""
    kd = bytes.fromhex(keyring.digest)
    verdicts: dict[bytes, str | None] = {}  # copy hash -> verdict, kept across retries

    def work(txn: Txn, dbs: dict[str, Any]) -> dict[str, int]:
        if not log_intact(txn, dbs):
            # every other table is derived from these: rebuilt from a damaged one, it would
            # say what another log says (a repointed pointer: states of the wrong copies)
            raise StoreError("corrupted", "the log itself (meta next_seq, seq, copies, or the "
                             "pointers of events and evidence) is damaged, and a rebuild "
                             "derives every other table from it: nothing was written; "
                             "`pithlog replay --verify` names the damage; restore a backup "
                             "or re-import an export")  # fmt: skip
        judges = Judges.of_store(txn, dbs, keyring)
        # every table derived from the log is written anew, whatever it held (replay's
        # findings in it included): what a fresh append of the export writes
        # with verify, the cache too: entries of other judges cannot be checked without
        # their keyring (a change back to one judges its copies again)
        for name in (*DERIVED_DBS, "verdicts") if verify else DERIVED_DBS:
            txn.drop(dbs[name], delete=False)

        def verdict(env: Envelope, h: bytes, pointer: bytes) -> Judged:
            if h not in verdicts:
                cached = None if verify else cached_verdict(txn, dbs, judges, env, pointer)
                verdicts[h] = (
                    check_alone(env, keyring) if cached is None else verdict_of(cached)
                )
            return Judged(env, verdicts[h])

        def judged(env: Envelope, h: bytes, pointer: bytes) -> Judged:
            found = verdict(env, h, pointer)
            txn.put(judges.key(env, pointer), verdict_bytes(found.reason), db=dbs["verdicts"])
            index_copy(txn, dbs, env, pointer)
            return found

        swaps: list[tuple[bytes, bytes, bytes]] = []
        by_pith: list[bytes] = []
        copies = 0
        for eid, pointer in txn.cursor(db=dbs["events"]):
            data = stored_copy(txn, dbs, pointer)
            if data is None:
                raise StoreError("corrupted", f"events points {eid.hex()} at a copy that is "
                                 "not stored; run `pithlog replay --verify`")  # fmt: skip
            h = copy_hash(data)
            best = held = judged(readmit(data), h, pointer)
            copies += 1
            best_h = h
            for key, other_pointer, other in evidence_of(txn, dbs, eid):
                candidate = judged(readmit(other), key[32:], other_pointer)
                copies += 1
                if keep_preferred(best, candidate) is candidate:
                    best, best_h = candidate, key[32:]
            if best is not held:
                swaps.append((eid, h, best_h))
            by_pith.append(best.envelope.pith_number.encode("ascii") + eid)
        for eid, old_h, new_h in swaps:
            prefer(txn, dbs, eid, old_h, new_h)
        for key in sorted(by_pith):
            txn.put(key, b"", db=dbs["by_pith"], append=True)
        piths = distinct_piths(txn, dbs)
        if progress is not None:
            progress(0, len(piths))
        for i, pith in enumerate(piths):
            rereduce(txn, dbs, pith, judges, verdicts)
            if progress is not None:
                progress(i + 1, len(piths))
        aliases.rebuild_aliases(txn, dbs)
        # the Merkle tree and by_copy from seq, proven whole above: the tree every
        # checkpoint was signed over (a function of seq alone), whatever merkle held
        txn.delete(META_MERKLE_SIZE, db=dbs["meta"])
        merkle_sync(txn, dbs)
        txn.put(META_KEYRING, kd, db=dbs["meta"])
        txn.put(META_KEYRING_ENTRIES, meaning(keyring), db=dbs["meta"])
        forget_rekey(txn, dbs)  # a rekey under way is superseded by the whole rebuild
        return {"copies": copies, "preferred_changed": len(swaps), "piths": len(piths)}

    return work
