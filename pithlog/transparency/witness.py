"""Witnesses: C2SP ``tlog-cosignature`` (v1, Ed25519) and the ``add-checkpoint`` call of
C2SP ``tlog-witness`` (docs/witness.md).

A cosignature is a signed-note signature line on a checkpoint::

    — <witness name> base64(key ID (4) || timestamp (8, big-endian) || Ed25519 signature (64))

with key ID ``SHA-256(name || 0x0A || 0x04 || public key)[:4]``, over the message
``cosignature/v1\\n``, ``time <timestamp>\\n``, then the checkpoint's note text. It states
that, at that time, this was the largest consistent tree the witness had seen for the
checkpoint's origin.

``add-checkpoint`` (request body: ``old <size>\\n``, up to 63 base64 consistency-proof lines,
an empty line, then the signed checkpoint) is judged by :func:`judge_add_checkpoint`, a pure
function of the body, the keyring and what the witness last cosigned for the origin; the
store keeps that state and applies the verdict in one write transaction, so the check and
the update are atomic (tlog-witness: a rolled-back size is the race it warns of).

pithlog's names: a witness key is a keyring entry (spec 3) of signer_type ``mirror`` or
``pith_registry``, not revoked; its cosignatures carry its ``signer_id`` as the key name.

Pure: no clock (the caller passes the timestamp), no file, no network.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pithlog.errors import CheckpointError, WitnessError, register, shown
from pithlog.protocol.keys import KeyEntry, Keyring, SigningKey, verify_signature
from pithlog.protocol.text_forms import decode_b64, encode_b64
from pithlog.transparency import merkle
from pithlog.transparency.checkpoint import (
    EM_DASH,
    MAX_SIGNATURES,
    Note,
    NoteSignature,
    VerifiedCheckpoint,
    checkpoint_keys,
    decimal_of,
    is_key_name,
    may_sign,
    parse_checkpoint_text,
    parse_note,
    verify_checkpoint,
)

register({
    "witness.malformed": "the add-checkpoint body is not 'old N', proof lines, an empty line "
    "and a signed checkpoint (C2SP tlog-witness)",
    "witness.cosignature": "a cosignature line does not verify under the witness key named",
    "witness.quorum": "fewer witnesses cosigned the checkpoint than the quorum asked for",
    "witness.answer": "a witness's answer is larger than a client takes, or its encoding "
    "does not decode",
    "witness.key": "the key may not cosign as a witness: use a mirror or pith_registry key, "
    "not revoked",
})  # fmt: skip

COSIGNATURE_V1 = 0x04
"""The signed-note signature type of an Ed25519 cosignature (tlog-cosignature)."""
MAX_PROOF_LINES = 63
MAX_BODY_BYTES = 128 << 10
"""The largest add-checkpoint body a witness reads: 63 proof lines and a checkpoint. C2SP
signed-note: verifiers MUST accept notes of at least 16 signatures, which may be nearly 5 kB
each (ML-DSA-87: 16 such lines are about 99 KB); 64 KiB refused such a checkpoint."""
WITNESS_SIGNER_TYPES = frozenset({"mirror", "pith_registry"})
_STAMP = struct.Struct(">Q")


def cosignature_key_id(name: str, public_key: bytes) -> bytes:
    """``SHA-256(name || 0x0A || 0x04 || public key)[:4]``."""
    return hashlib.sha256(name.encode("utf-8") + b"\n" + bytes([COSIGNATURE_V1]) +
                          public_key).digest()[:4]  # fmt: skip


def cosigned_message(note_text: bytes, timestamp: int) -> bytes:
    """What a v1 cosignature signs: the header line, the time line, the note text."""
    return b"cosignature/v1\ntime " + str(timestamp).encode("ascii") + b"\n" + note_text


def may_witness(entry: KeyEntry) -> bool:
    return entry.signer_type in WITNESS_SIGNER_TYPES and entry.revoked_at is None


def cosign(note_text: bytes, key: SigningKey, timestamp: int) -> NoteSignature:
    """The cosignature line of ``key`` (key name: its signer_id) on a checkpoint's text."""
    if key.signer_type not in WITNESS_SIGNER_TYPES or not is_key_name(key.signer_id):
        raise WitnessError("key", f"key {shown(key.key_id)} ({key.signer_type}, "
                           f"{key.signer_id!r}) "
                           "may not cosign as a witness")  # fmt: skip
    # tlog-cosignature: at most 2^63 - 1; tlog-witness: a witness's "timestamp MUST NOT be
    # zero" (a clock before 1970-01-01T00:00:01 cosigns nothing)
    if not 0 < timestamp < 1 << 63:
        raise WitnessError("malformed", f"timestamp {timestamp} is out of range: 1 to 2^63 - 1")
    signature = key.sign(cosigned_message(note_text, timestamp))
    return NoteSignature(key.signer_id, cosignature_key_id(key.signer_id, key.public_key),
                         _STAMP.pack(timestamp) + signature)  # fmt: skip


@dataclass(frozen=True)
class Cosigned:
    """A verified cosignature: by ``key_id`` (keyring), at ``timestamp``."""

    key_id: str
    name: str
    timestamp: int


def verify_cosignatures(note: bytes, witnesses: Sequence[KeyEntry]) -> list[Cosigned]:
    """The cosignatures on a signed checkpoint ``note`` by ``witnesses`` (lines by other keys
    are ignored, as signed notes ignore unknown keys); one that names a witness's key but
    does not verify raises ``witness.cosignature``. A key that may sign the checkpoint's
    origin itself is no witness of it, whatever the list says: a log that cosigned its own
    checkpoint would meet its own quorum. A public key listed more than once is one
    witness."""
    parsed = parse_note(note)
    origin = parse_checkpoint_text(parsed.text).origin
    found: list[Cosigned] = []
    seen: set[bytes] = set()
    for entry in witnesses:
        if may_sign(entry.signer_type, entry.signer_id, origin):
            continue
        # one key is one witness: a key listed twice (or under two key_ids) would otherwise
        # count its one cosignature twice toward a quorum
        if entry.public_key in seen:
            continue
        seen.add(entry.public_key)
        wanted = cosignature_key_id(entry.signer_id, entry.public_key)
        for sig in parsed.signatures:
            if sig.name != entry.signer_id or sig.key_id != wanted:
                continue
            if len(sig.signature) != 8 + 64:
                raise WitnessError("cosignature", f"the cosignature by {shown(entry.key_id)} "
                                   "is not a timestamp and a 64-byte signature")  # fmt: skip
            (stamp,) = _STAMP.unpack(sig.signature[:8])
            if stamp >= 1 << 63 or not verify_signature(
                entry.verifier, sig.signature[8:], cosigned_message(parsed.text, stamp)
            ):
                raise WitnessError("cosignature", f"the cosignature by {shown(entry.key_id)} "
                                   "does not verify")  # fmt: skip
            found.append(Cosigned(entry.key_id, entry.signer_id, stamp))
            break
    return found


def require_quorum(note: bytes, witnesses: Sequence[KeyEntry], quorum: int) -> list[Cosigned]:
    """:func:`verify_cosignatures`, and at least ``quorum`` distinct witnesses among them."""
    found = verify_cosignatures(note, witnesses)
    if len(found) < quorum:
        raise WitnessError("quorum", f"{len(found)} of the {len(witnesses)} witness key(s) "
                           f"cosigned; {quorum} required")  # fmt: skip
    return found


# --- add-checkpoint -------------------------------------------------------------------------


@dataclass(frozen=True)
class AddCheckpoint:
    """A parsed add-checkpoint request body."""

    old: int
    proof: tuple[bytes, ...]
    checkpoint: bytes

    def encoded(self) -> bytes:
        lines = [f"old {self.old}", *(encode_b64(h) for h in self.proof)]
        return "".join(f"{line}\n" for line in lines).encode("ascii") + b"\n" + self.checkpoint


def parse_add_checkpoint(body: bytes) -> AddCheckpoint:
    if len(body) > MAX_BODY_BYTES:
        raise WitnessError("malformed", f"the body is over {MAX_BODY_BYTES} bytes")
    head, blank, checkpoint = body.partition(b"\n\n")
    if not blank:
        raise WitnessError("malformed", "no empty line before the checkpoint")
    try:
        lines = head.decode("ascii").split("\n")
    except UnicodeDecodeError as exc:
        raise WitnessError("malformed", "the old-size and proof lines are ASCII") from exc
    old = decimal_of(lines[0][4:]) if lines[0].startswith("old ") else None
    if old is None:
        raise WitnessError("malformed", "the first line is 'old N' (decimal, no leading zero, "
                           "at most 2**63-1)")  # fmt: skip
    if len(lines) - 1 > MAX_PROOF_LINES:
        raise WitnessError("malformed", f"more than {MAX_PROOF_LINES} proof lines")
    proof = []
    for line in lines[1:]:
        raw = decode_b64(line)
        if raw is None or len(raw) != merkle.HASH_SIZE:
            raise WitnessError("malformed", "a proof line is not base64 of a 32-byte hash")
        proof.append(raw)
    return AddCheckpoint(old, tuple(proof), checkpoint)


@dataclass(frozen=True)
class Verdict:
    """What a witness answers: an HTTP status, a body and its content type, and, on 200,
    the ``(size, root)`` to store for ``origin`` before answering, with ``served``, the
    checkpoint its monitoring route then serves (:func:`served_checkpoint`)."""

    status: int
    body: bytes
    content_type: str = "text/plain; charset=utf-8"
    origin: str | None = None
    record: tuple[int, bytes] | None = None
    served: bytes | None = None


def served_checkpoint(
    text: bytes, verified: VerifiedCheckpoint, cosignature: NoteSignature
) -> bytes:
    """The checkpoint a witness serves to monitors once it cosigned the note ``text``
    (tlog-witness, "Monitor Retrieval Mechanism"): the text, the log's signature lines the
    witness verified (``verified.lines``: only those of keys the keyring allows for the
    origin; a line by an unknown key, another witness's cosignature among them, is left
    out) and the witness's ``cosignature``, as add-checkpoint returned it. At most
    ``MAX_SIGNATURES`` lines, so that a signed-note parser takes it."""
    lines = verified.lines[: MAX_SIGNATURES - 1]
    return Note(text, (*lines, cosignature)).encoded()


def judge_add_checkpoint(
    body: bytes,
    keyring: Keyring,
    known: Callable[[str], tuple[int, bytes] | None],
    key: SigningKey,
    timestamp: int,
) -> Verdict:
    """tlog-witness ``add-checkpoint``: ``known(origin)`` is the ``(size, root)`` the witness
    last cosigned for ``origin``, or ``None``. Statuses: 400 (malformed, or old > new); 404
    (no keyring key may sign for the origin); 403 (no trusted signature); 409 (old is not
    the known size: answered as ``text/x.tlog.size``); 422 (a tree of size 0 without the
    empty tree's root, the known size with another root, or the consistency proof fails);
    200 (the cosignature line; ``served``, the checkpoint for monitors)."""
    try:
        request = parse_add_checkpoint(body)
        note = parse_note(request.checkpoint)
        # a tree of size 0 with another root is judged below, 422 (tlog-witness), once
        # its origin and signature are known, not refused here as a malformed body
        checkpoint = parse_checkpoint_text(note.text, empty_root=False)
    except (WitnessError, CheckpointError, UnicodeDecodeError) as exc:
        return Verdict(400, f"{exc}\n".encode())
    origin = checkpoint.origin
    if not checkpoint_keys(keyring, origin):
        return Verdict(404, f"unknown origin {shown(origin)}\n".encode())
    try:
        verified: VerifiedCheckpoint = verify_checkpoint(request.checkpoint, keyring, origin,
                                                         empty_root=False)  # fmt: skip
    except CheckpointError as exc:
        return Verdict(403, f"{exc}\n".encode())
    cp = verified.checkpoint
    if request.old > cp.size:
        return Verdict(400, b"old size is larger than the checkpoint's\n")
    size, root = known(origin) or (0, b"")
    if request.old != size:
        return Verdict(409, f"{size}\n".encode("ascii"), "text/x.tlog.size")
    if cp.size == 0 and cp.root != merkle.EMPTY_ROOT:
        # tlog-witness: 422; cosigned, it would be recorded, and no proof holds from it
        return Verdict(422, b"a checkpoint of size 0 has the empty tree's root, the SHA-256 "
                       b"of no bytes (RFC 6962, 2.1)\n")  # fmt: skip
    if request.old == cp.size and size and root != cp.root:
        # tlog-witness: "If they don't match, the witness MUST respond with a 422
        # Unprocessable Entity" (C2SP #280; it was 409, whose body named the very size the
        # client had sent: every 409 now names a size to prove from)
        return Verdict(422, f"the tree of size {size} cosigned here has another root\n"
                       .encode("ascii"))  # fmt: skip
    if request.old == 0:
        if request.proof:
            return Verdict(422, b"the proof must be empty from size 0\n")
    elif not merkle.verify_consistency(request.old, cp.size, root, cp.root, request.proof):
        return Verdict(422, f"not consistent with size {size}\n".encode("ascii"))
    cosignature = cosign(note.text, key, timestamp)
    return Verdict(200, cosignature.line().encode("utf-8"), origin=origin,
                   record=(cp.size, cp.root),
                   served=served_checkpoint(note.text, verified, cosignature))  # fmt: skip


def with_cosignatures(note: bytes, lines: bytes) -> bytes:
    """The signed checkpoint with cosignature lines appended (each ends in a newline)."""
    try:
        text = lines.decode("utf-8")
    except UnicodeDecodeError:
        raise WitnessError("malformed", "a witness answered bytes that are not UTF-8") from None
    for line in text.splitlines(keepends=True):
        if not line.startswith(EM_DASH + " ") or not line.endswith("\n"):
            raise WitnessError("malformed", "a witness answered something other than "
                               "signature lines")  # fmt: skip
    return note + lines


def witness_lines(note: bytes, answer: bytes,
                  witnesses: Sequence[KeyEntry]) -> tuple[bytes, list[Cosigned]]:  # fmt: skip
    """Of a witness's ``answer`` to ``note``, the lines that are verified cosignatures by
    ``witnesses``, and those cosignatures: every other line is dropped, so that nothing a
    witness sends but its own verified cosignature reaches the published checkpoint (a
    line in the log's name, or a hundred by unknown keys, would break it for every
    verifier). An answer that is not signature lines is ``witness.malformed``."""
    kept: list[bytes] = []
    found: list[Cosigned] = []
    for line in with_cosignatures(b"", answer).splitlines(keepends=True):
        try:
            cosigned = verify_cosignatures(note + line, witnesses)
        except CheckpointError as exc:  # a line the signed-note grammar refuses
            raise WitnessError("malformed", f"a witness answered a line that is not a "
                               f"signature: {exc.message}") from exc  # fmt: skip
        if cosigned and cosigned[0] not in found:
            kept.append(line)
            found.extend(cosigned)
    return b"".join(kept), found
