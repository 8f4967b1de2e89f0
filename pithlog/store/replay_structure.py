"""Replay's passes over the whole log that need no signature (``docs/store.md``, "Replay",
"Replay beside appends"): what replay reads first, in one snapshot (the piths to replay and
the last sequence number, :func:`replay_start`), and the structure pass (meta, ``seq``
against the copies, the indexes against each other, :func:`check_structure`), with the
temporary on-disk index that its table-by-table checks fill (:class:`ScratchIndex`, made
by :func:`pithlog.store.environment_scratch.scratch_index`) when the one pass over the
copies cannot prove the store healthy.

:mod:`pithlog.store.replay` replays the piths that :func:`replay_start` lists;
:mod:`pithlog.store.replay_processes` decides which process runs each pass.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Collection
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol, overload

from pithlog.protocol.checks import REASONS
from pithlog.protocol.records import is_pith_number
from pithlog.protocol.reduce import MERGE_VERSION
from pithlog.store.codec import CorruptCopy, dictionary_problem, readable, unpack
from pithlog.store.keyindex import entries_agree
from pithlog.store.layout import (
    FORMAT_VERSION,
    INDEX_DBS,
    META_FORMAT,
    META_KEYRING,
    META_KEYRING_ENTRIES,
    META_MERGE,
    META_NEXT_SEQ,
    META_REKEY_TARGET,
    PITH_BYTES,
    SEQ,
    VALID,
    Txn,
    copy_hash,
    copy_pointer,
    decode_ids,
    distinct_piths,
    eid_str,
    event_copy,
    pith_eids,
    stored_copy,
)
from pithlog.store.replay_report import Discrepancy


def replay_work(txn: Txn, dbs: dict[str, Any]) -> tuple[list[str], dict[str, list[bytes]]]:
    """The piths to replay (every pith number in ``by_pith``, and every pith that an
    evidence copy claims) and, per pith, the event_ids that have an evidence copy claiming
    that pith while their preferred copy claims another."""
    foreign: dict[str, set[bytes]] = {}
    for key, pointer in txn.cursor(db=dbs["evidence"]):
        data = stored_copy(txn, dbs, pointer, readable)
        preferred = event_copy(txn, dbs, key[:32], readable) if len(key) == 64 else None
        ids = None if data is None else decode_ids(data)
        pref_ids = None if preferred is None else decode_ids(preferred)
        if (
            ids is not None
            and pref_ids is not None
            and is_pith_number(ids.pith_number)
            and pref_ids.pith_number != ids.pith_number
        ):
            foreign.setdefault(ids.pith_number, set()).add(key[:32])
    # a by_pith key whose pith is not a pith number (not even ASCII, when damaged) is said
    # by the structure pass; it is no pith to replay
    known = {pith for pith in distinct_piths(txn, dbs) if is_pith_number(pith)}
    return sorted(known | set(foreign)), {p: sorted(eids) for p, eids in foreign.items()}


@dataclass(frozen=True)
class Start:
    """What replay reads first, in one read transaction: the log as of the start. Every
    later pass reads in a transaction of its own (or another process's), so appends may
    land between them; ``high_water`` bounds what the report speaks of (``docs/store.md``,
    "Replay beside appends")."""

    piths: list[str]
    foreign: dict[str, list[bytes]]
    keyring_digest: str | None
    high_water: int
    """The last sequence number at the start: a copy whose ``seq`` is above it was appended
    while replay ran."""
    copies: int = 0
    """The stored copies at the start (``seq``'s entries): the size of the work."""
    rekey_target: str | None = None
    """The digest of the keyring a change under way goes to (``pithlog stats``' own)."""


def replay_start(txn: Txn, dbs: dict[str, Any]) -> Start:
    """:func:`replay_work`, the store's keyring digest and the last ``seq``, from one
    snapshot."""
    piths, foreign = replay_work(txn, dbs)
    kd = txn.get(META_KEYRING, db=dbs["meta"])
    cursor = txn.cursor(db=dbs["seq"])
    last = cursor.key() if cursor.last() else b""
    high = SEQ.unpack(last)[0] if len(last) == SEQ.size else 0
    copies = txn.stat(dbs["seq"])["entries"]
    target = txn.get(META_REKEY_TARGET, db=dbs["meta"])
    return Start(piths, foreign, None if kd is None else kd.hex(), high, copies,
                 None if target is None else hashlib.sha256(target).hexdigest())


class ScratchIndex(Protocol):
    """A temporary key-value index on disk (copy -> seq), empty when made: the part of an
    LMDB write transaction that the structure pass uses."""

    @overload
    def get(self, key: bytes) -> bytes | None: ...
    @overload
    def get(self, key: bytes, default: bytes) -> bytes: ...
    def put(self, key: bytes, value: bytes, *, overwrite: bool = True) -> bool: ...


ScratchFactory = Callable[[int], AbstractContextManager[ScratchIndex]]
"""``scratch(entries)``: a context manager giving a new :class:`ScratchIndex` sized for about
``entries`` keys, removed on exit. The store makes it (this module does not import
:mod:`lmdb`)."""


def check_structure(
    txn: Txn,
    dbs: dict[str, Any],
    found: list[Discrepancy],
    replayed: Collection[str],
    scratch: ScratchFactory,
    at_once: bool = True,
) -> None:
    """The checks that need no signature: meta, seq against the copies, the indexes against
    each other, each disagreement appended to ``found``. ``replayed``: the piths replay
    goes through (:func:`replay_work`); an index entry of any other pith is reported.
    ``scratch`` makes the temporary index of copy -> seq that the table-by-table checks
    fill (:data:`ScratchFactory`). First the copies are checked in one pass that proves a
    healthy store's tables agree (:func:`_copies_at_once`); only when it cannot (``at_once``
    false: never) are they checked table by table, which says each disagreement."""

    def say(kind: str, subject: str, detail: str) -> None:
        found.append(Discrepancy(kind, subject, detail))

    meta = dbs["meta"]
    if txn.get(META_FORMAT, db=meta) != FORMAT_VERSION:
        say("meta", "format", f"is {txn.get(META_FORMAT, db=meta)!r}, expected {FORMAT_VERSION!r}")
    if txn.get(META_MERGE, db=meta) != MERGE_VERSION.encode("ascii"):
        say("meta", "merge_version", f"is {txn.get(META_MERGE, db=meta)!r}")
    raw_next = txn.get(META_NEXT_SEQ, db=meta)
    next_seq = SEQ.unpack(raw_next)[0] if raw_next is not None and len(raw_next) == 8 else None
    if next_seq is None:
        say("meta", "next_seq", f"is {raw_next!r}, not an 8-byte counter")
    kd = txn.get(META_KEYRING, db=meta)
    if kd is None and txn.stat(dbs["events"])["entries"]:
        say("meta", "keyring_digest", "missing although the store holds events")
    elif kd is not None and len(kd) != 32:
        say("meta", "keyring_digest", f"is {len(kd)} bytes, not a 32-byte digest")
    entries = txn.get(META_KEYRING_ENTRIES, db=meta)
    if kd is not None and entries is not None and not entries_agree(entries, kd):
        # a keyring change diffs against these entries (docs/store.md, "A keyring change")
        say("meta", "keyring", "the stored keyring entries do not hash to keyring_digest "
            "(one of the two is damaged)")
    problem = dictionary_problem(txn, dbs)
    if problem is not None:
        say("meta", "dict", problem)

    if not (at_once and _copies_at_once(txn, dbs, next_seq)):
        _copies_one_by_one(txn, dbs, say, next_seq, scratch)
    _later_and_keys(txn, dbs, say, replayed)


def log_intact(txn: Txn, dbs: dict[str, Any]) -> bool:
    """Whether the log itself (``meta`` ``next_seq``, ``seq``, ``copies`` and the pointers
    of ``events`` and ``evidence``) is whole: what a rebuild derives every other table from
    (:func:`pithlog.store.append.rebuild_work`), proven as :func:`_copies_at_once` proves it,
    ``by_pith`` left out (a rebuild writes it anew)."""
    raw_next = txn.get(META_NEXT_SEQ, db=dbs["meta"])
    if raw_next is None or len(raw_next) != SEQ.size:
        return False
    return _copies_at_once(txn, dbs, SEQ.unpack(raw_next)[0], by_pith=False)


def _copies_at_once(
    txn: Txn, dbs: dict[str, Any], next_seq: int | None, by_pith: bool = True
) -> bool:
    """Whether :func:`_copies_one_by_one` would find nothing to say, proven in one pass over
    ``seq`` and ``copies`` side by side (both keyed by sequence number), with no scratch
    index; ``False`` as soon as anything might be said (the caller then runs it, for its
    words). On a healthy store this reads each copy once, with one ``events`` and one
    ``by_pith`` lookup for a preferred copy (three lookups for an evidence copy), where
    the table-by-table checks look each copy up six times and fill the scratch index.

    Why it proves what the table-by-table checks check, on any store:

    - ``seq`` and ``copies`` hold the same keys, all 8 bytes: they are walked in step.
    - Each ``seq`` entry ``n`` naming ``(eid, h)`` is the preferred copy (``events[eid]``
      is ``n``) or evidence (``evidence[eid + h]`` is ``n``, ``events[eid]`` names another
      ``seq`` entry, which does not name ``(eid, h)``): what :func:`copy_pointer` resolves
      to ``n``. A second entry naming the same ``(eid, h)`` fails this: ``events[eid]`` and
      ``evidence[eid + h]`` each hold one sequence number, and the other entry's is the
      preferred one naming ``(eid, h)`` or the evidence pointer's. So no duplicate, and no
      scratch index to find one.
    - The copy under ``n`` unpacks, hashes to ``h``, and says event_id ``eid`` and a pith
      number; a preferred copy is in ``by_pith`` under that pith.
    - The entries proven so have distinct keys in ``events`` (one per preferred copy), in
      ``evidence`` (one per evidence copy) and in ``by_pith``; counted, they are all the
      keys of those tables. So every ``events`` and ``evidence`` pointer is one of them,
      proven above, and every ``by_pith`` key is a well-formed pith number and a stored
      event_id.

    Without ``by_pith`` (:func:`log_intact`), that table is neither looked up nor counted.
    """
    get = txn.get
    seq_db, events_db, evidence_db, by_pith_db = (
        dbs["seq"], dbs["events"], dbs["evidence"], dbs["by_pith"])  # fmt: skip
    copies = txn.cursor(db=dbs["copies"])
    more = copies.first()
    preferred = others = 0
    last = 0
    for key, value in txn.cursor(db=seq_db):
        if len(key) != SEQ.size or len(value) != 64 or not more or copies.key() != key:
            return False
        stored = copies.value()
        more = copies.next()
        eid = value[:32]
        held = get(eid, db=events_db)
        is_preferred = held == key
        # a pointer of another length than a sequence number's cannot be looked up (LMDB
        # refuses an empty key): the table-by-table checks say what it is
        if not is_preferred and (held is None or len(held) != SEQ.size
                                 or get(held, db=seq_db) == value
                                 or get(value, db=evidence_db) != key):  # fmt: skip
            return False
        try:
            data = unpack(txn, dbs, stored)
        except CorruptCopy:
            return False
        if copy_hash(data) != value[32:]:
            return False
        ids = decode_ids(data)
        if ids is None or not is_pith_number(ids.pith_number) or ids.event_id != eid_str(eid):
            return False
        if is_preferred:
            if by_pith and get(ids.pith_number.encode("ascii") + eid, db=by_pith_db) is None:
                return False
            preferred += 1
        else:
            others += 1
        last = SEQ.unpack(key)[0]
    if more or (next_seq is not None and last + 1 != next_seq):
        return False
    return (
        _count(txn, events_db) == preferred
        and _count(txn, evidence_db) == others
        and (not by_pith or _count(txn, by_pith_db) == preferred)
    )


def _count(txn: Txn, db: Any) -> int:
    """The keys of ``db``, counted by walking them (not its header's count, which a damaged
    file may get wrong and the page walk checks only on ``--verify``)."""
    return sum(1 for _ in txn.cursor(db=db).iternext(values=False))


def _copies_one_by_one(
    txn: Txn,
    dbs: dict[str, Any],
    say: Callable[[str, str, str], None],
    next_seq: int | None,
    scratch: ScratchFactory,
) -> None:
    """``seq`` against ``copies``, ``events`` and ``evidence`` against both, ``by_pith``
    against ``events``: each table on its own, every disagreement said."""
    # seq -> copies, with a temporary on-disk index copy -> seq (memory stays bounded).
    with scratch(txn.stat(dbs["seq"])["entries"]) as itx:
        last = 0
        for key, value in txn.cursor(db=dbs["seq"]):
            if len(key) != 8:
                say("seq", f"key {key.hex()}", "is not an 8-byte sequence number")
                continue
            n = SEQ.unpack(key)[0]
            last = n
            if len(value) != 64:
                say("seq", f"seq {n}", f"value of {len(value)} bytes, not 64")
                continue
            if txn.get(key, db=dbs["copies"]) is None:
                say("seq", f"seq {n}", f"names copy {value[32:].hex()[:16]} of "
                    f"{eid_str(value[:32])}, which is not stored")  # fmt: skip
            elif copy_pointer(txn, dbs, value) != key:
                say("seq", f"seq {n}", f"names copy {value[32:].hex()[:16]} of "
                    f"{eid_str(value[:32])}, which no events or evidence pointer "
                    "names")  # fmt: skip
            if not itx.put(value, key, overwrite=False):
                other = SEQ.unpack(itx.get(value, b"\0" * 8))[0]
                say("seq", f"seq {n}", f"names the same copy of {eid_str(value[:32])} "
                    f"as seq {other}")  # fmt: skip
        if next_seq is not None and last >= next_seq:
            say("meta", "next_seq", f"is {next_seq} but seq already holds {last}")
        elif next_seq is not None and last + 1 != next_seq:
            # sequence numbers run 1..n with no gap: the Merkle tree's leaves are seq's
            say("meta", "next_seq", f"is {next_seq} but seq ends at {last}: the next append "
                "would leave a gap in the log")  # fmt: skip

        # copies: each under a sequence number that seq holds (named by exactly one
        # pointer: checked above from seq, and below from the pointers)
        for key in txn.cursor(db=dbs["copies"]).iternext(values=False):
            if len(key) != 8 or txn.get(key, db=dbs["seq"]) is None:
                say("copies", f"key {key.hex()}", "is not the sequence number of a seq entry")

        def pointed(where: str, subject: str, label: str, seq_label: str, key: bytes,
                    pointer: bytes) -> bytes | None:  # fmt: skip
            """The copy ``pointer`` names for ``key`` (event_id, or event_id + copy hash),
            when it is the copy seq says is there and hashes to it; else says why not."""
            if len(pointer) != 8:
                say(where, subject, f"{label}: the pointer {pointer.hex()[:32]} is not an "
                    "8-byte sequence number")  # fmt: skip
                return None
            named = txn.get(pointer, db=dbs["seq"])
            if named is None:
                say("seq", subject, f"{seq_label} has no seq entry (the pointer names seq "
                    f"{SEQ.unpack(pointer)[0]}, which seq does not hold)")  # fmt: skip
                return None
            if named[: len(key)] != key:
                say(where, subject, f"{label}: the pointer names seq {SEQ.unpack(pointer)[0]}, "
                    f"which logs copy {named[32:].hex()[:16]} of "
                    f"{eid_str(named[:32])}")  # fmt: skip
                return None
            stored = txn.get(pointer, db=dbs["copies"])
            if stored is None:
                say(where, subject, f"{label} at seq {SEQ.unpack(pointer)[0]} is not in copies")
                return None
            try:
                data = unpack(txn, dbs, stored)
            except CorruptCopy as exc:
                say(where, subject, f"{label} does not decompress: {exc.why}")
                return None
            if copy_hash(data) != named[32:]:
                say(where, subject, f"{label} at seq {SEQ.unpack(pointer)[0]} does not hash "
                    f"to the copy seq names ({named[32:].hex()[:16]}; its bytes hash to "
                    f"{copy_hash(data).hex()[:16]})")  # fmt: skip
            return data

        # events: each preferred copy is its own event, has a seq entry, is indexed.
        for eid, pointer in txn.cursor(db=dbs["events"]):
            subject = eid_str(eid) if len(eid) == 32 else f"key {eid.hex()}"
            if len(eid) != 32:
                say("events", subject, "key is not a 32-byte event id")
                continue
            data = pointed("events", subject, "the stored copy", "the preferred copy", eid,
                           pointer)  # fmt: skip
            if data is None:
                continue
            ids = decode_ids(data)
            if ids is None or not is_pith_number(ids.pith_number):
                say("events", subject, "the stored copy does not decode as an envelope")
                continue
            if ids.event_id != subject:
                say("events", subject, f"the stored copy says event_id {ids.event_id}")
            pith_key = ids.pith_number.encode("ascii") + eid
            if txn.get(pith_key, db=dbs["by_pith"]) is None:
                say("by_pith", subject, f"not indexed under its pith {ids.pith_number}")

        # evidence: hash, owner, not the preferred copy itself, a seq entry.
        for key, pointer in txn.cursor(db=dbs["evidence"]):
            if len(key) != 64:
                say("evidence", f"key {key.hex()}", "is not event id + copy hash")
                continue
            eid, h = key[:32], key[32:]
            subject = eid_str(eid)
            data = pointed("evidence", subject, f"copy {h.hex()[:16]}",
                           f"evidence copy {h.hex()[:16]}", key, pointer)  # fmt: skip
            if data is None:
                continue
            held = txn.get(eid, db=dbs["events"])
            if held is None:
                say("evidence", subject, f"copy {h.hex()[:16]} is evidence of an event "
                    "with no preferred copy in events")  # fmt: skip
                continue
            if held == pointer or (len(held) == SEQ.size
                                   and txn.get(held, db=dbs["seq"]) == key):  # fmt: skip
                say("evidence", subject, "an evidence copy equals the preferred copy")
            ids = decode_ids(data)
            if ids is None or not is_pith_number(ids.pith_number):
                say("evidence", subject, f"copy {h.hex()[:16]} does not decode as an "
                    "envelope")  # fmt: skip
                continue
            if ids.event_id != subject:
                say("evidence", subject, f"copy {h.hex()[:16]} says event_id "
                    f"{ids.event_id}")  # fmt: skip

    # by_pith: well-formed keys naming stored events (their pith is checked per pith).
    for key in txn.cursor(db=dbs["by_pith"]).iternext(values=False):
        pith = key[:PITH_BYTES].decode("ascii", "replace")
        if len(key) != PITH_BYTES + 32 or not is_pith_number(pith):
            say("by_pith", f"key {key.hex()}", "is not pith_number + event id")
            continue
        if txn.get(key[PITH_BYTES:], db=dbs["events"]) is None:
            say("by_pith", eid_str(key[PITH_BYTES:]), f"indexed under {pith} but not in events")


def _later_and_keys(
    txn: Txn, dbs: dict[str, Any], say: Callable[[str, str, str], None], replayed: Collection[str]
) -> None:
    """The index entries of piths replay does not go through, ``verdicts`` and ``by_key``."""
    # A pith that replay does not go through but that has events in by_pith in this
    # snapshot came with an append after replay's start: not damage, and not in the report.
    later: dict[str, bool] = {}
    for name in ("piths", *INDEX_DBS):
        for key in txn.cursor(db=dbs[name]).iternext(values=False):
            pith = key[:PITH_BYTES].decode("ascii", "replace")
            if pith in replayed:
                continue
            if pith not in later:
                later[pith] = is_pith_number(pith) and any(True for _ in pith_eids(txn, dbs, pith))
            if not later[pith]:
                say(name, pith, "cached for a pith that has no events in by_pith")
    for key, value in txn.cursor(db=dbs["verdicts"]):
        if len(key) != 40:
            say("verdicts", f"key {key.hex()}", "is not key entry digest + sequence number")
        elif txn.get(key[32:], db=dbs["copies"]) is None:
            say("verdicts", f"key {key.hex()[:24]}", "names no stored copy")
        elif value != VALID and value.decode("ascii", "replace") not in REASONS[:12]:
            say("verdicts", f"copy {SEQ.unpack(key[32:])[0]}", f"verdict {value!r} is not "
                "one of checks 1-12")  # fmt: skip
    for key in txn.cursor(db=dbs["by_key"]).iternext(values=False):
        if len(key) != 40 or txn.get(key[32:], db=dbs["copies"]) is None:
            say("by_key", f"key {key.hex()[:24]}", "names no stored copy")
    # rekey: the piths a keyring change under way still has to re-reduce, none without one
    under_way = txn.get(META_REKEY_TARGET, db=dbs["meta"]) is not None
    for key in txn.cursor(db=dbs["rekey"]).iternext(values=False):
        if not is_pith_number(key.decode("ascii", "replace")):
            say("rekey", f"key {key.hex()[:24]}", "is not a pith number")
        elif not under_way:
            say("rekey", key.decode("ascii"), "marked for a keyring change, but none is "
                "under way")  # fmt: skip
