"""The per-pith reduction index of a store, from which a pith's state document is
assembled on read (``docs/store.md``: "Why an index and not the documents").

Functions over an open transaction (:class:`pithlog.store.layout.Txn`) and the store's named
databases (``dbs``); :mod:`pithlog.store` opens the transactions.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import msgspec

from pithlog.errors import StoreError, shown
from pithlog.protocol.canonical import jcs
from pithlog.protocol.checks import check_against_record, check_alone
from pithlog.protocol.event_types import EVENT_TYPES, STATE_LISTS
from pithlog.protocol.events import Envelope, is_event_id, projection_spans, readmit
from pithlog.protocol.reduce import (
    Judged,
    Pending,
    Reduction,
    SlotKey,
    chosen_record,
    reduce_pith,
    slot_of,
)
from pithlog.protocol.state import (
    Fragment,
    StateParts,
    assemble,
    equivocation_entry,
    fragment,
    slot_sort_key,
)
from pithlog.store.codec import CorruptCopy
from pithlog.store.keyindex import Judges, cached_verdict
from pithlog.store.layout import (
    INDEX_DBS,
    Txn,
    copy_hash,
    eid_bytes,
    eid_str,
    event_copy,
    pith_eids,
    prefixed,
    stored_copy,
    verdict_bytes,
    verdict_of,
)

# --- the reduction index ------------------------------------------------------------------
# A pith's state document is a function of all its events, and for a large pith it is large
# (a citation signature adds ~2 KB), so re-rendering it on every append would make a growing
# pith cost O(N^2). The store keeps instead what the document is made of, in key order:
#   piths        pith -> JCS summary: status, counts, the chosen record's event_id
#   applied      pith + list index (1) + created_at (20) + event_id (32) -> payload and
#                signer spans in the stored envelope (4 x uint32): each applied event but R
#   slots        pith + SHA-256 of the slot's JCS (32) -> its members in (created_at,
#                event_id) order, each created_at (20 ASCII) + event_id (32): the slot
#                itself is slot_of any member (spec 7 step 4)
#   equivocated  pith + slot hash -> empty, for every slot of two or more events
#   invalid      pith + event_id (32) -> reason code
# New events that do not change R are added to it in O(log N) each, and a pith new to the
# store is reduced from its new events alone (index_add); anything else re-reduces the pith
# from all its stored events (rereduce). A state is assembled from the index on read
# (assemble_state), with the same code that renders a reduction.

_SPANS = struct.Struct(">IIII")

Index = dict[str, dict[bytes, bytes]]
"""A pith's index entries, database -> key -> value in key order (:func:`index_stored`)."""

_LIST_INDEX = {name: i for i, name in enumerate(STATE_LISTS)}


def _pith_key(pith: str) -> bytes:
    return pith.encode("ascii")


def pith_summary(result: Reduction | Pending) -> dict[str, Any]:
    if isinstance(result, Pending):
        return {"status": "pending", "event_count": result.event_count,
                "invalid_event_count": len(result.invalid)}  # fmt: skip
    return {
        "status": "state",
        "event_count": result.event_count,
        "valid_event_count": result.valid_event_count,
        "invalid_event_count": len(result.invalid),
        "equivocation_count": len(result.equivocations),
        "record": result.record.event_id,
    }


def _slot_hash(slot: SlotKey) -> bytes:
    return hashlib.sha256(jcs(list(slot))).digest()


MEMBER_BYTES = 52
"""A member of a slot in ``slots``: created_at (20 ASCII bytes: the ts form of spec 1 has
exactly 20) + the raw event_id (32)."""

Member = tuple[bytes, bytes]
"""``(created_at in ASCII, raw event_id)``: byte order is (created_at, event_id) order."""


def slot_value(members: Sequence[Member]) -> bytes:
    """The ``slots`` value of members already in (created_at, event_id) order."""
    return b"".join(created_at + eid for created_at, eid in members)


def slot_members(value: bytes) -> list[Member]:
    """The members a ``slots`` value holds; ``ValueError`` for a damaged one."""
    if not value or len(value) % MEMBER_BYTES:
        raise ValueError(f"a slots value of {len(value)} bytes is not members of "
                         f"{MEMBER_BYTES}")  # fmt: skip
    return [(value[i : i + 20], value[i + 20 : i + MEMBER_BYTES])
            for i in range(0, len(value), MEMBER_BYTES)]  # fmt: skip


def _member(env: Envelope) -> Member:
    return env.value["created_at"].encode("ascii"), eid_bytes(env.event_id)


def _applied_key(pith: str, envelope_type: str, created_at: str, event_id: str) -> bytes:
    return (_pith_key(pith) + bytes([_LIST_INDEX[EVENT_TYPES[envelope_type].state_list]])
            + created_at.encode("ascii") + eid_bytes(event_id))  # fmt: skip


def _applied_entry(pith: str, env: Envelope) -> tuple[bytes, bytes]:
    event = env.value
    key = _applied_key(pith, event["event_type"], event["created_at"], env.event_id)
    return key, _SPANS.pack(*projection_spans(env))


def _put_applied(txn: Txn, dbs: dict[str, Any], pith: str, env: Envelope) -> None:
    key, value = _applied_entry(pith, env)
    txn.put(key, value, db=dbs["applied"])


def index_clear(txn: Txn, dbs: dict[str, Any], pith: str) -> None:
    prefix = _pith_key(pith)
    for name in INDEX_DBS:
        for _entry in prefixed(txn, dbs[name], prefix, delete=True):
            pass
    txn.delete(prefix, db=dbs["piths"])


def index_entries(
    pith: str, result: Reduction | Pending | None
) -> dict[str, dict[bytes, bytes]]:
    """Every index entry of a pith, as a full reduction gives them (database -> key ->
    value). :func:`index_add` keeps exactly these up to date; replay compares them."""
    key = _pith_key(pith)
    entries: dict[str, dict[bytes, bytes]] = {name: {} for name in ("piths", *INDEX_DBS)}
    if result is None:
        return entries
    for event_id, reason in result.invalid.items():
        entries["invalid"][key + eid_bytes(event_id)] = reason.encode("ascii")
    if isinstance(result, Reduction):
        slots: dict[SlotKey, list[Envelope]] = {slot_of(e): [e] for e in result.applied}
        for equivocation in result.equivocations:
            slots[equivocation.slot] = list(equivocation.events)
            entries["equivocated"][key + _slot_hash(equivocation.slot)] = b""
        for slot, members in slots.items():
            entries["slots"][key + _slot_hash(slot)] = slot_value([_member(e) for e in members])
        entries["applied"].update(_applied_entry(pith, env) for env in result.applied[1:])
    entries["piths"][key] = jcs(pith_summary(result))
    return entries


def index_write(
    txn: Txn, dbs: dict[str, Any], pith: str, result: Reduction | Pending | None
) -> None:
    """Write the index of a pith from a full reduction (after :func:`index_clear`)."""
    for name, entries in index_entries(pith, result).items():
        for key, value in entries.items():
            txn.put(key, value, db=dbs[name])


def index_stored(txn: Txn, dbs: dict[str, Any], pith: str) -> Index:
    """The index entries a pith has in the store."""
    prefix = _pith_key(pith)
    stored: Index = {"piths": {}}
    raw = txn.get(prefix, db=dbs["piths"])
    if raw is not None:
        stored["piths"][prefix] = raw
    for name in INDEX_DBS:
        stored[name] = dict(prefixed(txn, dbs[name], prefix))
    return stored


def index_add(
    txn: Txn, dbs: dict[str, Any], pith: str, new: list[Judged]
) -> bool:
    """Add new events (event_ids new to the store) to a pith's index, as spec 7 would
    place them, when that needs no other event: R stays the chosen record, or the pith is
    new to the store (its events are exactly ``new``: they are reduced alone, with no read
    of what was just written). Returns False, writing nothing, when the pith must be
    re-reduced instead (a pith getting its first valid record, a record earlier than R)."""
    key = _pith_key(pith)
    raw = txn.get(key, db=dbs["piths"])
    if raw is None:
        # Every pith with a stored event has a ``piths`` entry (index_write writes one for
        # any non-empty reduction), so a pith without one holds no event but ``new``. The
        # count of its by_pith keys (no event read) makes sure: a damaged store whose
        # entry went missing is re-reduced whole, as before this shortcut.
        if len(pith_eids(txn, dbs, pith)) != len(new):
            return False
        index_write(txn, dbs, pith, reduce_judged(pith, new))
        return True
    summary = stored_summary(raw, pith)
    records = [
        j.envelope
        for j in new
        if j.reason is None and j.envelope.value["event_type"] == "record_created"
    ]
    if summary["status"] == "pending":
        if records:
            return False
        for j in new:
            if j.reason is not None:
                txn.put(key + eid_bytes(j.envelope.event_id), j.reason.encode("ascii"),
                        db=dbs["invalid"])  # fmt: skip
                summary["invalid_event_count"] += 1
        summary["event_count"] += len(new)
        txn.put(key, jcs(summary), db=dbs["piths"])
        return True
    record_data = event_copy(txn, dbs, eid_bytes(summary["record"]))
    if record_data is None:
        raise StoreError("corrupted", f"the chosen record of {pith} is not in events; run "
                         "`pithlog replay --verify`")  # fmt: skip
    record = readmit(record_data)
    first = (record.value["created_at"], record.event_id)
    if any((r.value["created_at"], r.event_id) < first for r in records):
        return False
    chosen = chosen_record(record)
    for j in new:
        env = j.envelope
        summary["event_count"] += 1
        reason = j.reason if j.reason is not None else check_against_record(env, chosen)
        if reason is not None:
            txn.put(key + eid_bytes(env.event_id), reason.encode("ascii"), db=dbs["invalid"])
            summary["invalid_event_count"] += 1
            continue
        summary["valid_event_count"] += 1
        slot = slot_of(env)
        slot_key = key + _slot_hash(slot)
        member = _member(env)
        stored = txn.get(slot_key, db=dbs["slots"])
        if stored is None:
            members = [member]
            if slot != ("record_created",):
                _put_applied(txn, dbs, pith, env)
        else:
            members = slot_members(stored)
            was = members[0]
            members.append(member)
            members.sort()
            if len(members) == 2:
                summary["equivocation_count"] += 1
                txn.put(slot_key, b"", db=dbs["equivocated"])
            if members[0] is member and slot != ("record_created",):
                txn.delete(_applied_key(pith, env.value["event_type"], was[0].decode("ascii"),
                                        eid_str(was[1])), db=dbs["applied"])  # fmt: skip
                _put_applied(txn, dbs, pith, env)
        txn.put(slot_key, slot_value(members), db=dbs["slots"])
    txn.put(key, jcs(summary), db=dbs["piths"])
    return True


def assemble_state(txn: Txn, dbs: dict[str, Any], pith: str) -> bytes | None:
    """The state document of a pith, assembled from its index (``None``: no state).

    Raises ``KeyError``/``ValueError``/``struct.error``/``msgspec`` errors on a damaged
    index; callers turn those into :class:`StoreError` or a replay discrepancy."""
    parts = state_parts(txn, dbs, pith)
    return None if parts is None else assemble(parts)


def state_parts(
    txn: Txn,
    dbs: dict[str, Any],
    pith: str,
    stored: Index | None = None,
    copies: Mapping[bytes, bytes] | None = None,
    envelopes: Mapping[bytes, Envelope | Exception] | None = None,
) -> StateParts | None:
    """What :func:`assemble_state` assembles: the parts of a pith's state document, from
    its index (``None``: no state); the same errors on a damaged index.

    Replay, which has read them already, may pass ``stored``, the pith's index entries
    (:func:`index_stored` in this transaction), ``copies``, JCS bytes of stored copies by
    their sequence number (a copy under a sequence number never changes, so any snapshot's
    read will do), and ``envelopes``, copies already decoded, by their bytes: no entry is
    read, no copy unpacked and no record decoded a second time."""
    key = _pith_key(pith)
    known = copies or {}
    decoded = envelopes or {}

    def preferred(event_id: bytes) -> bytes | None:
        if len(event_id) != 32:
            # a damaged index key; an empty one is a key LMDB refuses (MDB_BAD_VALSIZE)
            raise KeyError(f"an index key names {event_id.hex() or 'nothing'}, not an event id")
        pointer = txn.get(event_id, db=dbs["events"])
        if pointer is None:
            return None
        data = known.get(pointer)
        return data if data is not None else stored_copy(txn, dbs, pointer)

    def envelope(data: bytes) -> Envelope:
        env = decoded.get(data)
        # a copy not stored in its JCS encoding is sliced as stored, as readmit() keeps it
        return env if isinstance(env, Envelope) and env.encoded == data else readmit(data)

    def slot(slot_key: bytes) -> bytes | None:
        if stored is None:
            return txn.get(slot_key, db=dbs["slots"])
        return stored["slots"].get(slot_key)

    if stored is None:
        raw = txn.get(key, db=dbs["piths"])
        applied: Iterable[tuple[bytes, bytes]] = prefixed(txn, dbs["applied"], key)
        equivocated: Iterable[bytes] = (k for k, _ in prefixed(txn, dbs["equivocated"], key))
        invalid_entries: Iterable[tuple[bytes, bytes]] = prefixed(txn, dbs["invalid"], key)
    else:
        raw = stored["piths"].get(key)
        applied, equivocated = stored["applied"].items(), stored["equivocated"].keys()
        invalid_entries = stored["invalid"].items()
    if raw is None:
        return None
    summary = summary_of(raw)
    if summary["status"] != "state":
        return None
    record_data = preferred(eid_bytes(summary["record"]))
    if record_data is None:
        raise KeyError(f"chosen record {summary['record']} is not stored")
    record = envelope(record_data)
    if record.value["event_type"] != "record_created":
        raise ValueError(f"the piths entry's record {summary['record']} is a "
                         f"{record.value['event_type']} event, not a record_created")  # fmt: skip
    lists: dict[str, list[Fragment]] = {name: [] for name in STATE_LISTS}
    for index_key, spans in applied:
        event_id = index_key[len(key) + 21 :]
        data = preferred(event_id)
        if data is None:
            raise KeyError(f"applied event {eid_str(event_id)} is not stored")
        payload_start, payload_end, signer_start, signer_end = _SPANS.unpack(spans)
        lists[STATE_LISTS[index_key[len(key)]]].append(Fragment(
            event_id=eid_str(event_id),
            created_at=index_key[len(key) + 1 : len(key) + 21].decode("ascii"),
            target=data[signer_end + len(b',"target":') : -1],
            signer=data[signer_start:signer_end],
            payload=data[payload_start:payload_end],
        ))  # fmt: skip
    equivocations = []
    for slot_key in equivocated:
        stored_slot = slot(slot_key)
        if stored_slot is None:
            raise KeyError(f"equivocated slot {slot_key.hex()} has no slots entry")
        members = slot_members(stored_slot)
        first = preferred(members[0][1])
        if first is None:
            raise KeyError(f"equivocating event {eid_str(members[0][1])} is not stored")
        # the slot is that of any member: the first one's preferred copy says it
        equivocations.append(equivocation_entry(slot_of(envelope(first)),
                                                [eid_str(eid) for _, eid in members]))  # fmt: skip
    equivocations.sort(key=lambda e: slot_sort_key(e["slot"]))
    invalid = [
        (eid_str(invalid_key[len(key) :]), reason.decode("ascii"))
        for invalid_key, reason in invalid_entries
    ]
    payload = record.value["payload"]
    return StateParts(
        pith_number=pith,
        event_count=summary["event_count"],
        valid_event_count=summary["valid_event_count"],
        record=fragment(record),
        canonical_record=payload["canonical_record"],
        canonical_sha256=payload["canonical_sha256"],
        lists=lists,
        equivocations=equivocations,
        invalid=invalid,
    )


INDEX_DAMAGE = (KeyError, ValueError, TypeError, IndexError, struct.error, msgspec.MsgspecError)

_SUMMARY_MEMBERS = {
    "state": ("record", "event_count", "valid_event_count", "invalid_event_count",
              "equivocation_count"),
    "pending": ("event_count", "invalid_event_count"),
}  # fmt: skip
"""The members of a ``piths`` entry (:func:`pith_summary`), by its status."""


def summary_of(raw: bytes) -> dict[str, Any]:
    """A ``piths`` entry, decoded, with the members :func:`pith_summary` writes, or
    ``ValueError`` saying what it lacks: indexing it as it is raised
    ``KeyError('event_count')``, which a replay finding and ``store.corrupted`` printed as
    ``'event_count'``, and ``stats`` as a traceback. The counts' types are not checked: a
    count of another type (true, 1.0) is a state difference, which replay says as such."""
    summary = msgspec.json.decode(raw)
    if not isinstance(summary, dict):
        raise ValueError("the piths entry is not a JSON object")
    status = summary.get("status")
    if status not in _SUMMARY_MEMBERS:
        raise ValueError("the piths entry has no status 'state' or 'pending'")
    lacking = [m for m in _SUMMARY_MEMBERS[status] if m not in summary]
    if lacking:
        raise ValueError(f"the piths entry of a {status} pith has no {', '.join(lacking)}")
    if status == "state" and not is_event_id(summary["record"]):
        raise ValueError("the piths entry's record is not an event_id")
    return summary


def stored_summary(raw: bytes, pith: str) -> dict[str, Any]:
    """:func:`summary_of` the ``piths`` entry of ``pith``, a damaged one ``store.corrupted``
    naming the pith and what the entry lacks, for the reads and the appends alike."""
    try:
        return summary_of(raw)
    except (ValueError, msgspec.MsgspecError) as exc:
        said = damage_said(exc)
        raise StoreError("corrupted", f"the index of {shown(pith)} is damaged ({said}); "
                         "run `pithlog replay --verify`") from exc  # fmt: skip


def damage_said(exc: Exception) -> str:
    """One of :data:`INDEX_DAMAGE` (or :class:`CorruptCopy`), raised on a damaged index, in
    words, for a replay finding or a ``store.corrupted`` message: the sentence of a
    ``KeyError`` raised here, not its repr; a bare one names what was missing."""
    if isinstance(exc, CorruptCopy):
        return f"a stored copy does not decompress ({exc.why})"
    if isinstance(exc, KeyError):
        said = exc.args[0] if exc.args else None
        if isinstance(said, str) and " " in said:
            return said
        return f"an index entry lacks {said!r}"
    return str(exc) or type(exc).__name__


# --- re-reducing a pith -------------------------------------------------------------------


def reduce_judged(pith: str, judged: list[Judged]) -> Reduction | Pending | None:
    return reduce_pith(pith, judged) if judged else None


def rereduce(
    txn: Txn,
    dbs: dict[str, Any],
    pith: str,
    judges: Judges,
    verdicts: dict[bytes, str | None],
    known: Sequence[Judged] = (),
) -> None:
    """Re-reduce one pith from all its stored events (cached verdicts, per key entry:
    :mod:`pithlog.store.keyindex`; no signature is checked again unless a verdict is
    missing) and rewrite its reduction index.

    ``known``: envelopes of the pith already decoded (an append's new events); a stored
    copy with the same bytes is taken from them instead of being decoded again."""
    decoded = {j.envelope.encoded: j.envelope for j in known}
    judged: list[Judged] = []
    for eid in pith_eids(txn, dbs, pith):
        pointer = txn.get(eid, db=dbs["events"])
        data = None if pointer is None else stored_copy(txn, dbs, pointer)
        if pointer is None or data is None:
            raise StoreError(
                "corrupted",
                f"by_pith names {eid_str(eid)} under {pith} but events does not hold it; "
                "run `pithlog replay --verify`",
            )
        env = decoded.get(data) or readmit(data)
        h = copy_hash(data)
        if h in verdicts:
            reason = verdicts[h]
        else:
            cached = cached_verdict(txn, dbs, judges, env, pointer)
            if cached is None:
                reason = check_alone(env, judges.keyring)
                txn.put(judges.key(env, pointer), verdict_bytes(reason), db=dbs["verdicts"])
            else:
                reason = verdict_of(cached)
        judged.append(Judged(env, reason))
    index_clear(txn, dbs, pith)
    index_write(txn, dbs, pith, reduce_judged(pith, judged))
