"""Evidence files: portable proofs of misbehaviour that anyone checks offline
(docs/evidence.md).

``pith-equivocation-proof`` v1 shows that a signer said two different things about one slot
(spec 7 step 4: ``(event_type, target, signer.key_id, created_at)``; for ``record_created``
the slot is the pith's one record) *and* that the log published every one of them: the
signed envelopes exactly as logged, the keyring entries of their keys, and for each envelope
an RFC 9162 inclusion proof of its leaf (``event_id || SHA-256(JCS copy)``,
docs/transparency.md) under one signed C2SP checkpoint of the log.

The file is the JCS encoding (RFC 8785) of one object followed by one LF, and nothing else:
written in exactly one way, so that any change to it is either no evidence at all or
evidence that does not hold. Members::

    evidence_type     "pith-equivocation-proof"
    evidence_version  "1"
    pith_number       the pith the envelopes are filed under
    slot              {event_type, target, key_id, created_at}, as in the state document
                      (spec 8: target "record", key_id and created_at null for
                      record_created)
    events            the envelopes, two to 64, in (created_at, event_id) order (the first
                      of a slot filled more often, as many as fit in MAX_EVIDENCE_BYTES)
    keys              the keyring entries (spec 3) of the keys that signed them, by key_id
    checkpoint        the signed checkpoint (C2SP tlog-checkpoint note), as text
    inclusion         one {index, path} per envelope, in the order of ``events``: the leaf
                      index and the inclusion path (base64 hashes) under the checkpoint

Pure: bytes and a keyring in, a verdict out.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pithlog.errors import DoorError, EvidenceError, PithlogError, register, shown
from pithlog.protocol.canonical import MAX_DEPTH, jcs, parse
from pithlog.protocol.checks import check_alone
from pithlog.protocol.events import Envelope, admit
from pithlog.protocol.keys import Keyring
from pithlog.protocol.reduce import slot_of
from pithlog.protocol.state import SLOT_MEMBERS
from pithlog.protocol.text_forms import decode_b64, encode_b64
from pithlog.transparency import merkle
from pithlog.transparency.checkpoint import VerifiedCheckpoint, verify_checkpoint
from pithlog.transparency.proofs import parse_consistency_proof

register({
    "evidence.malformed": "the file is not an evidence file (docs/evidence.md): nothing was "
    "proven either way",
    "evidence.does_not_hold": "the evidence file is well formed but what it claims is not "
    "proven: see the message for the first check that failed",
    "evidence.no_equivocation": "the pith has no equivocated slot (or not the one asked for): "
    "see `pithlog state PITH`, member equivocations",
})  # fmt: skip

EQUIVOCATION_PROOF = "pith-equivocation-proof"
EVIDENCE_VERSION = "1"
MAX_EVIDENCE_BYTES = 64 << 20
"""The largest evidence file read: a slot's envelopes (up to 1 MiB each) and their proofs."""
MAX_EVENTS = 64
"""Envelopes in one equivocation proof, at most (a slot filled 64 times is proof enough)."""
_MEMBERS = (
    "checkpoint", "events", "evidence_type", "evidence_version", "inclusion", "keys",
    "pith_number", "slot",
)  # fmt: skip


def _malformed(message: str) -> EvidenceError:
    return EvidenceError("malformed", message)


def _fails(message: str) -> EvidenceError:
    return EvidenceError("does_not_hold", message)


def slot_document(envelope: Envelope) -> dict[str, Any]:
    """The slot of ``envelope`` as the state document writes it (spec 8)."""
    slot = slot_of(envelope)
    if slot == ("record_created",):
        return {"event_type": "record_created", "target": "record", "key_id": None,
                "created_at": None}  # fmt: skip
    event_type, target, key_id, created_at = slot
    return {"event_type": event_type, "target": target, "key_id": key_id,
            "created_at": created_at}  # fmt: skip


def leaf_data(envelope: Envelope) -> bytes:
    """The log's leaf data of one copy: event_id (32 raw bytes) || SHA-256 of its JCS."""
    return bytes.fromhex(envelope.event_id[7:]) + hashlib.sha256(envelope.encoded).digest()


@dataclass(frozen=True)
class Included:
    """One envelope's place in the log: its leaf index and inclusion path."""

    index: int
    path: tuple[bytes, ...]


def equivocation_proof(
    pith_number: str,
    envelopes: Sequence[Envelope],
    keys: Sequence[dict[str, Any]],
    checkpoint: bytes,
    inclusion: Sequence[Included],
) -> tuple[bytes, int]:
    """The evidence file (module doc) for ``envelopes`` of one slot, each included under
    ``checkpoint`` as ``inclusion`` says (in the same order), and how many of them it
    carries: the first in ``(created_at, event_id)`` order, :data:`MAX_EVENTS` at most and
    no more than keep the file within :data:`MAX_EVIDENCE_BYTES` (two always fit: an
    envelope is 1 MiB at most), so that :func:`verify_equivocation_proof` reads what is
    written. ``keys`` are those of every envelope; the file carries those of the envelopes
    it holds. Nothing is verified here: the caller reads all of it from one store;
    :func:`verify_equivocation_proof` is the check."""
    def by_time(i: int) -> tuple[str, str]:
        return envelopes[i].value["created_at"], envelopes[i].event_id

    order = sorted(range(len(envelopes)), key=by_time)
    places = [{"index": inclusion[i].index, "path": [encode_b64(h) for h in inclusion[i].path]}
              for i in order]  # fmt: skip
    doc: dict[str, Any] = {
        "evidence_type": EQUIVOCATION_PROOF,
        "evidence_version": EVIDENCE_VERSION,
        "pith_number": pith_number,
        "slot": slot_document(envelopes[order[0]]),
        "events": [],
        "inclusion": [],
        "keys": sorted(keys, key=lambda entry: str(entry["key_id"])),
        "checkpoint": checkpoint.decode("utf-8"),
    }
    # the file without envelopes, with every key: what each envelope adds is its JCS, its
    # place's and two commas, so the sum bounds the file from above
    size = len(jcs(doc)) + 1
    kept = 0
    for i, place in zip(order[:MAX_EVENTS], places, strict=False):
        size += len(envelopes[i].encoded) + len(jcs(place)) + 2
        if kept >= 2 and size > MAX_EVIDENCE_BYTES:
            break
        kept += 1
    order = order[:kept]
    signers = {envelopes[i].value["signer"]["key_id"] for i in order}
    doc["events"] = [envelopes[i].value for i in order]
    doc["inclusion"] = places[:kept]
    doc["keys"] = [entry for entry in doc["keys"] if entry["key_id"] in signers]
    return jcs(doc) + b"\n", kept


@dataclass(frozen=True)
class ProvenEquivocation:
    """What a verified equivocation proof shows."""

    pith_number: str
    slot: dict[str, Any]
    event_ids: tuple[str, ...]
    signers: tuple[str, ...]
    checkpoint: VerifiedCheckpoint

    def describe(self) -> str:
        slot = self.slot
        what = (f"{len(self.event_ids)} valid record_created events for pith "
                f"{self.pith_number}" if slot["event_type"] == "record_created" else
                f"key {shown(slot['key_id'])} signed {len(self.event_ids)} different "
                f"{slot['event_type']} events for target {shown(slot['target'])} at "
                f"{slot['created_at']} (pith {self.pith_number})")  # fmt: skip
        cp = self.checkpoint.checkpoint
        return (f"equivocation proven: {what}; all logged by {shown(cp.origin)} at tree size "
                f"{cp.size}")  # fmt: skip


def evidence_type(data: bytes) -> str | None:
    """The ``evidence_type`` of a JSON evidence file, or ``None`` when ``data`` is not a
    JSON object (then it may be a text proof: :func:`pithlog.transparency.proofs.proof_kind`)."""
    if not data.startswith(b"{"):
        return None
    doc = _document(data)
    kind = doc.get("evidence_type")
    if not isinstance(kind, str):
        raise _malformed("member evidence_type is missing or not a string")
    return kind


def _document(data: bytes) -> dict[str, Any]:
    if len(data) > MAX_EVIDENCE_BYTES:
        raise _malformed(f"an evidence file is limited to {MAX_EVIDENCE_BYTES} bytes")
    if not data.endswith(b"\n"):
        raise _malformed("an evidence file is JCS JSON followed by one LF")
    try:
        # the envelopes sit two levels down (doc, events): the door's depth is theirs
        doc = parse(data[:-1], max_depth=MAX_DEPTH + 2, max_bytes=MAX_EVIDENCE_BYTES)
    except DoorError as exc:
        raise _malformed(f"not JSON as the door takes it: {exc.message}") from exc
    if not isinstance(doc, dict):
        raise _malformed("an evidence file is one JSON object")
    if jcs(doc) + b"\n" != data:
        raise _malformed("the file is not in JCS form (RFC 8785), so it is not as written")
    return doc


def verify_equivocation_proof(
    data: bytes, keyring: Keyring, origin: str | None = None
) -> ProvenEquivocation:
    """Check an equivocation proof offline against ``keyring`` (docs/evidence.md):

    1. the file is one, in JCS form, with exactly the members of the format, each of its
       form (``slot`` too: :func:`_slot_shape`);
    2. the checkpoint is signed by a key ``keyring`` allows for its origin (``origin``,
       when given, must be it);
    3. every envelope passes the door and checks 1-12 (spec 6) under ``keyring``, the
       event_ids differ, all are filed under ``pith_number`` and fill ``slot`` (spec 7
       step 4);
    4. ``keys`` are exactly ``keyring``'s entries of the keys that signed them;
    5. every envelope's leaf is included under the checkpoint's root at its index.

    Raises :class:`EvidenceError` (``malformed``: exit 2; ``does_not_hold``: exit 1) or
    the checkpoint's own error."""
    doc = _document(data)
    if doc.get("evidence_type") != EQUIVOCATION_PROOF:
        raise _malformed(f"evidence_type is not {EQUIVOCATION_PROOF!r}")
    if doc.get("evidence_version") != EVIDENCE_VERSION:
        raise _malformed(f"evidence_version is not {EVIDENCE_VERSION!r}")
    if sorted(doc) != sorted(_MEMBERS):
        raise _malformed(f"the members are {', '.join(_MEMBERS)}, each once")
    events, inclusion, keys = doc["events"], doc["inclusion"], doc["keys"]
    if not (isinstance(events, list) and isinstance(inclusion, list) and isinstance(keys, list)):
        raise _malformed("events, inclusion and keys are lists")
    if not 2 <= len(events) <= MAX_EVENTS or len(inclusion) != len(events):
        raise _malformed(f"an equivocation has 2 to {MAX_EVENTS} events, each with one "
                         "inclusion proof")  # fmt: skip
    if not isinstance(doc["checkpoint"], str) or not isinstance(doc["pith_number"], str):
        raise _malformed("checkpoint and pith_number are strings")
    _slot_shape(doc["slot"])
    places = [_included(item, number) for number, item in enumerate(inclusion, 1)]

    verified = verify_checkpoint(doc["checkpoint"].encode("utf-8"), keyring, origin)
    envelopes = []
    for number, event in enumerate(events, 1):
        try:
            envelope = admit(event)
        except PithlogError as exc:
            raise _fails(f"event {number} does not pass the door: {exc.message}") from exc
        reason = check_alone(envelope, keyring)
        if reason is not None:
            raise _fails(f"event {number} ({envelope.event_id}) is not valid under the "
                         f"keyring: {reason}")  # fmt: skip
        if envelope.pith_number != doc["pith_number"]:
            raise _fails(f"event {number} is filed under pith {envelope.pith_number}, not "
                         f"{doc['pith_number']!r}")  # fmt: skip
        if slot_document(envelope) != doc["slot"]:
            raise _fails(f"event {number} ({envelope.event_id}) does not fill the slot named")
        envelopes.append(envelope)
    ids = [e.event_id for e in envelopes]
    if len(set(ids)) != len(ids):
        raise _fails("two of the events are one event (one event_id): no equivocation")
    if [(e.value["created_at"], e.event_id) for e in envelopes] != sorted(
        (e.value["created_at"], e.event_id) for e in envelopes
    ):
        raise _malformed("events are in (created_at, event_id) order")
    signers = sorted({e.value["signer"]["key_id"] for e in envelopes})
    if keys != [keyring[k].entry() for k in signers]:
        raise _fails("keys are not the keyring's entries of the keys that signed the events")
    cp = verified.checkpoint
    for number, (envelope, place) in enumerate(zip(envelopes, places, strict=True), 1):
        leaf = merkle.leaf_hash(leaf_data(envelope))
        if not merkle.verify_inclusion(leaf, place.index, cp.size, place.path, cp.root):
            raise _fails(f"event {number} ({envelope.event_id}) is not proven to be leaf "
                         f"{place.index} of {shown(cp.origin)} at tree size {cp.size}")  # fmt: skip
    return ProvenEquivocation(doc["pith_number"], doc["slot"], tuple(ids), tuple(signers),
                              verified)  # fmt: skip


def _slot_shape(slot: object) -> None:
    """Step 1 for ``slot``: the state document's form (spec 8), an object of exactly
    event_type and target (strings), key_id and created_at (strings, or null for
    record_created). Whether the events fill it is step 3's question: a slot of another
    shape is no evidence (exit 2), not evidence that does not hold (exit 1)."""
    if not isinstance(slot, dict) or sorted(slot) != sorted(SLOT_MEMBERS):
        raise _malformed(f"slot is an object of {', '.join(SLOT_MEMBERS)}, each once")
    if not (isinstance(slot["event_type"], str) and isinstance(slot["target"], str)):
        raise _malformed("slot: event_type and target are strings")
    if not all(slot[m] is None or isinstance(slot[m], str) for m in ("key_id", "created_at")):
        raise _malformed("slot: key_id and created_at are strings or null")


def _included(item: object, number: int) -> Included:
    if not isinstance(item, dict) or sorted(item) != ["index", "path"]:
        raise _malformed(f"inclusion {number} is an object of index and path")
    index, path = item["index"], item["path"]
    if not isinstance(index, int) or isinstance(index, bool) or index < 0:
        raise _malformed(f"inclusion {number}: index is a whole number")
    if not isinstance(path, list) or len(path) > 64:
        raise _malformed(f"inclusion {number}: path is a list of at most 64 hashes")
    hashes = []
    for h in path:
        raw = decode_b64(h)
        if raw is None or len(raw) != merkle.HASH_SIZE:
            raise _malformed(f"inclusion {number}: a path entry is not base64 of 32 bytes")
        hashes.append(raw)
    return Included(index, tuple(hashes))


# --- split views ---------------------------------------------------------------------------

SPLIT_VIEW_PROOF = "pith-split-view-proof"
_SPLIT_MEMBERS = (
    "accepted_checkpoint", "consistency_proof", "evidence_type", "evidence_version",
    "served_checkpoint",
)  # fmt: skip
"""No free text: every byte of the file is checked (what a mirror saw is derived from it)."""


def split_view_proof(accepted: bytes, served: bytes, proof: bytes | None) -> bytes:
    """The evidence a mirror writes when a log's checkpoint is not consistent with the one
    it accepted before (docs/evidence.md): both signed checkpoints, verbatim, and the
    consistency proof the log served (``None`` when it served none)."""
    doc = {
        "evidence_type": SPLIT_VIEW_PROOF,
        "evidence_version": EVIDENCE_VERSION,
        "accepted_checkpoint": accepted.decode("utf-8"),
        "served_checkpoint": served.decode("utf-8"),
        "consistency_proof": None if proof is None else proof.decode("utf-8"),
    }
    return jcs(doc) + b"\n"


@dataclass(frozen=True)
class ProvenSplitView:
    """Two checkpoints of one log, both signed by a key the keyring allows, that cannot be
    of one append-only history. ``signers``: the key_ids that signed each checkpoint (two
    keys may be allowed for one origin), in the order of ``sizes``."""

    origin: str
    sizes: tuple[int, int]
    how: str
    signers: tuple[tuple[str, ...], tuple[str, ...]]

    def describe(self) -> str:
        first, second = (", ".join(shown(s) for s in keys) for keys in self.signers)
        return (f"split view proven: {shown(self.origin)} signed two histories (tree size "
                f"{self.sizes[0]} signed by {first}, tree size {self.sizes[1]} by "
                f"{second}): {self.how}")  # fmt: skip


def verify_split_view_proof(
    data: bytes, keyring: Keyring, origin: str | None = None
) -> ProvenSplitView:
    """Check a split-view file offline: both checkpoints verify under ``keyring`` for one
    origin, and either they are of one size with two roots, or the consistency proof the
    log itself served leads to the larger checkpoint's root while committing to another
    root of the smaller tree than its checkpoint (RFC 9162 2.1.4.2; for a power-of-two
    smaller size, whose served proof leaves that root out, the proof with that root put
    first, as step 2 does). Anything else is not proven."""
    doc = _document(data)
    if doc.get("evidence_type") != SPLIT_VIEW_PROOF:
        raise _malformed(f"evidence_type is not {SPLIT_VIEW_PROOF!r}")
    if doc.get("evidence_version") != EVIDENCE_VERSION or sorted(doc) != sorted(_SPLIT_MEMBERS):
        raise _malformed(f"the members are {', '.join(_SPLIT_MEMBERS)}, each once")
    if not all(isinstance(doc[k], str) for k in ("accepted_checkpoint", "served_checkpoint")):
        raise _malformed("the checkpoints are strings")
    if doc["consistency_proof"] is not None and not isinstance(doc["consistency_proof"], str):
        raise _malformed("consistency_proof is a string or null")
    va = verify_checkpoint(doc["accepted_checkpoint"].encode("utf-8"), keyring, origin)
    vb = verify_checkpoint(doc["served_checkpoint"].encode("utf-8"), keyring, origin)
    a, b = va.checkpoint, vb.checkpoint
    if a.origin != b.origin:
        raise _fails(f"the checkpoints are of two logs ({a.origin!r}, {b.origin!r})")
    if a.size == b.size:
        if doc["consistency_proof"] is not None:
            # nothing reads a proof between one size and itself: left in, it would be text
            # of the writer's choosing in a file that verifies
            raise _malformed("the checkpoints are of one size: consistency_proof is null")
        if a.root == b.root:
            raise _fails("the two checkpoints are of one tree")
        return ProvenSplitView(a.origin, (a.size, b.size), "two roots for one size",
                               (va.signers, vb.signers))  # fmt: skip
    small, large = (a, b) if a.size < b.size else (b, a)
    signers = (va.signers, vb.signers) if a.size < b.size else (vb.signers, va.signers)
    text = doc["consistency_proof"]
    if not isinstance(text, str):
        raise _fails("sizes differ and the log served no consistency proof: nothing shows "
                     "the two trees cannot be one history")  # fmt: skip
    try:
        proof = parse_consistency_proof(text.encode("utf-8"))
    except PithlogError as exc:
        raise _malformed(f"the consistency proof: {exc.message}") from exc
    if (proof.old, proof.new) != (small.size, large.size):
        raise _fails("the consistency proof is not between the checkpoints' sizes")
    if small.size & (small.size - 1) == 0:
        # RFC 9162 2.1.4.2 step 2 puts the smaller tree's root first; a served path leaves
        # it out, so the evidence carries it there itself (the root the larger tree commits
        # to: the path must then lead from it to the larger root)
        roots = merkle.consistency_roots(small.size, large.size, proof.path[0],
                                         proof.path[1:]) if proof.path else None  # fmt: skip
        if roots is None and merkle.consistency_roots(
            small.size, large.size, small.root, proof.path
        ) is not None:
            raise _fails(f"size {small.size} is a power of two and the proof leaves the "
                         "smaller tree's root out, so it cannot show another one")  # fmt: skip
    else:
        roots = merkle.consistency_roots(small.size, large.size, small.root, proof.path)
    if roots is None or roots[1] != large.root:
        raise _fails("the served consistency proof does not lead to the larger checkpoint's "
                     "root: it proves nothing either way")  # fmt: skip
    if roots[0] == small.root:
        raise _fails("the served consistency proof holds: the two trees are one history")
    return ProvenSplitView(small.origin, (small.size, large.size),
                           f"its signed tree of {large.size} leaves commits to another tree "
                           f"of {small.size} than the one it signed", signers)  # fmt: skip
