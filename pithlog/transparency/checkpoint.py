"""Checkpoints: a store's Merkle tree head, signed, as C2SP ``tlog-checkpoint`` in a C2SP
``signed-note`` (``docs/transparency.md``).

A checkpoint is three lines of note text, then a blank line, then signature lines::

    registry.example/pith
    1204
    Kw2lWbc0zC7N1I2M3KvAXxN7z3k8m1qgJ2TpvC6fKx4=

    — registry.example/pith Vq3s...base64(4-byte key ID || 64-byte Ed25519 signature)

- c2sp.org/signed-note: the text ends in a newline; the signatures follow the last blank
  line, each ``U+2014 U+0020 <key name> U+0020 <base64(key ID || signature)>``; no ASCII
  control character but newline; key names non-empty, without Unicode spaces or ``+``;
  the key ID of an Ed25519 key is ``SHA-256(key name || 0x0A || 0x01 || public key)[:4]``,
  and the signature is Ed25519 (RFC 8032) over the note text. Signatures from unknown keys
  are ignored; a signature from a known key that fails rejects the note; a note with no
  verified signature from a known key is rejected.
- c2sp.org/tlog-checkpoint: origin (non-empty), tree size (ASCII decimal, no leading
  zero), root hash (base64 of the RFC 6962/9162 root), then optional non-empty extension
  lines. The log's key name is its origin.

Who may sign (pithlog's rule; the C2SP documents leave trust to the verifier): a keyring
entry is a known key for origin ``O`` when its ``signer_type`` is ``pith_registry`` or
``mirror``, it is not revoked (a checkpoint carries no date, so a revocation reaches back),
and ``O`` is its ``signer_id`` or starts with its ``signer_id`` followed by ``/``. The key
name of its signature line must be ``O``.

Pure: parsing, formatting, signing and verifying over bytes; no clock, no file.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass

from pithlog.errors import CheckpointError, register, shown
from pithlog.protocol.keys import KeyEntry, Keyring, SigningKey, verify_signature
from pithlog.protocol.text_forms import decode_b64, encode_b64
from pithlog.transparency.merkle import EMPTY_ROOT, MAX_TREE_SIZE

register(
    {
        "checkpoint.malformed": "the checkpoint is not a C2SP signed note whose text is "
        "origin, tree size and base64 root hash: check the file",
        "checkpoint.untrusted": "no signature on the checkpoint is from a keyring key allowed "
        "to sign for its origin (a pith_registry or mirror key, not revoked, whose signer_id "
        "is the origin or its prefix before '/'): check --keyring and the origin",
        "checkpoint.bad_signature": "a signature by a trusted key does not verify: the "
        "checkpoint was altered or forged; do not trust it",
        "checkpoint.origin": "the checkpoint is for another origin than the one required",
        "checkpoint.diverged": "the store's tree at the checkpoint's size has another root: "
        "the store does not hold the log the checkpoint signs (a fork); --against names "
        "the first leaf where they part",
        "checkpoint.behind": "the store holds fewer leaves than the checkpoint: sync it from "
        "the log, then check again (exit status 3: not a fork)",
        "checkpoint.key": "this key may not sign checkpoints for this origin: use a "
        "pith_registry or mirror key whose signer_id is the origin, or the origin's prefix "
        "before '/'",
    }
)

ED25519 = 0x01
"""The signed-note signature type of Ed25519."""

EM_DASH = "\u2014"
MAX_NOTE_BYTES = 1 << 20
MAX_SIGNATURES = 100
"""At most this many signature lines (the signed-note spec asks for at least 16)."""

CHECKPOINT_SIGNER_TYPES = frozenset({"pith_registry", "mirror"})
_DECIMAL = re.compile(r"0|[1-9][0-9]{0,18}")


def decimal_of(text: str) -> int | None:
    """The number ``text`` writes as c2sp.org/tlog-checkpoint writes a tree size (ASCII
    decimal, no leading zero), up to :data:`MAX_TREE_SIZE` (``2**63-1``, Go's ``int64``),
    or ``None``. The one reading of a tree size or leaf index from outside: checkpoints,
    proof files (:mod:`pithlog.transparency.proofs`), a witness's ``old N`` and its 409
    size, and ``/proof/consistency/OLD/NEW``."""
    if not _DECIMAL.fullmatch(text):
        return None
    number = int(text)
    return number if number <= MAX_TREE_SIZE else None


def _malformed(message: str) -> CheckpointError:
    return CheckpointError("malformed", message)


# --- signed notes -------------------------------------------------------------------------


@dataclass(frozen=True)
class NoteSignature:
    """One signature line: key name, 4-byte key ID, signature bytes."""

    name: str
    key_id: bytes
    signature: bytes

    def line(self) -> str:
        return f"{EM_DASH} {self.name} {encode_b64(self.key_id + self.signature)}\n"


@dataclass(frozen=True)
class Note:
    """A signed note: its text (ending in a newline) and its signature lines."""

    text: bytes
    signatures: tuple[NoteSignature, ...]

    def encoded(self) -> bytes:
        lines = "".join(s.line() for s in self.signatures)
        return self.text + b"\n" + lines.encode("utf-8")


def is_key_name(name: str) -> bool:
    """signed-note: non-empty, no Unicode space, no ``+``, no control character."""
    return bool(name) and not any(c.isspace() or c == "+" or ord(c) < 0x20 for c in name)


def key_id(name: str, public_key: bytes) -> bytes:
    """The 4-byte key ID of an Ed25519 key: ``SHA-256(name || 0x0A || 0x01 || key)[:4]``."""
    data = name.encode("utf-8") + b"\n" + bytes([ED25519]) + public_key
    return hashlib.sha256(data).digest()[:4]


def sign_note(text: bytes, name: str, key: SigningKey) -> NoteSignature:
    """An Ed25519 signature line over ``text`` under key name ``name``."""
    if not is_key_name(name):
        raise CheckpointError("malformed", f"{name!r} is not a signed-note key name")
    return NoteSignature(name, key_id(name, key.public_key), key.sign(text))


def parse_note(data: bytes) -> Note:
    """Split a signed note into its text and signature lines (syntax only, nothing
    verified), or raise ``checkpoint.malformed``."""
    if len(data) > MAX_NOTE_BYTES:
        raise _malformed(f"a note is limited to {MAX_NOTE_BYTES} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _malformed(f"a note is UTF-8; byte {exc.start} is not") from exc
    if any(ord(c) < 0x20 and c != "\n" for c in text):
        raise _malformed("a note holds no ASCII control character but newline")
    if not text.endswith("\n"):
        raise _malformed("a note ends with a newline")
    split = text.rfind("\n\n")
    if split < 0:
        raise _malformed("no blank line separates the note text from its signatures")
    lines = text[split + 2 :].split("\n")[:-1]
    if not lines:
        raise _malformed("the note has no signature line")
    if len(lines) > MAX_SIGNATURES:
        raise _malformed(f"the note has more than {MAX_SIGNATURES} signature lines")
    signatures = []
    for number, line in enumerate(lines, 1):
        if not line.startswith(EM_DASH + " "):
            raise _malformed(f"signature line {number} does not start with '{EM_DASH} '")
        name, space, encoded = line[2:].partition(" ")
        if not space or not is_key_name(name):
            raise _malformed(f"signature line {number}: {name!r} is not a key name")
        raw = decode_b64(encoded)
        if raw is None or len(raw) < 5:
            raise _malformed(f"signature line {number}: not base64 of a key ID and a signature")
        signatures.append(NoteSignature(name, raw[:4], raw[4:]))
    return Note(text[: split + 1].encode("utf-8"), tuple(signatures))


# --- checkpoints --------------------------------------------------------------------------


@dataclass(frozen=True)
class Checkpoint:
    """The note text of a C2SP tlog-checkpoint."""

    origin: str
    size: int
    root: bytes
    extensions: tuple[str, ...] = ()

    def text(self) -> bytes:
        lines = [self.origin, str(self.size), encode_b64(self.root), *self.extensions]
        return "".join(f"{line}\n" for line in lines).encode("utf-8")


def parse_checkpoint_text(text: bytes, empty_root: bool = True) -> Checkpoint:
    """The checkpoint in a note's text, or ``checkpoint.malformed``; a tree of size 0
    with another root than the empty tree's is malformed too, unless ``empty_root`` is
    false (a witness, which answers it 422 rather than 400: C2SP tlog-witness)."""
    lines = text.decode("utf-8").split("\n")
    if lines[-1] != "" or len(lines) < 4:
        raise _malformed("a checkpoint's text is origin, tree size and root hash lines")
    lines.pop()
    if any(not line for line in lines):
        raise _malformed("a checkpoint's text has no empty line")
    origin, size_line, root = lines[:3]
    size = decimal_of(size_line)
    if size is None:
        raise _malformed(f"tree size {size_line[:40]!r} is not a decimal without leading "
                         "zeros, at most 2**63-1")  # fmt: skip
    raw = decode_b64(root)
    if raw is None or len(raw) != 32:
        raise _malformed("the root hash line is not base64 of 32 bytes")
    if empty_root and size == 0 and raw != EMPTY_ROOT:
        # no proof can hold against such a tree: a mirror that accepted one would call
        # the log's next honest checkpoint a split view
        raise _malformed("a tree of size 0 has the empty tree's root, the SHA-256 of no "
                         "bytes (RFC 9162, 2.1.1)")  # fmt: skip
    return Checkpoint(origin, size, raw, tuple(lines[3:]))


def may_sign(signer_type: str, signer_id: str, origin: str) -> bool:
    """Whether a key of this signer may sign checkpoints of ``origin`` (module doc)."""
    return signer_type in CHECKPOINT_SIGNER_TYPES and (
        origin == signer_id or origin.startswith(signer_id + "/")
    )


def checkpoint_keys(keyring: Keyring, origin: str) -> list[KeyEntry]:
    """The keyring entries that are known keys for checkpoints of ``origin``."""
    return [
        entry
        for entry in keyring.values()
        if entry.revoked_at is None and may_sign(entry.signer_type, entry.signer_id, origin)
    ]


def sign_checkpoint(checkpoint: Checkpoint, key: SigningKey) -> bytes:
    """The signed note of a checkpoint, signed by ``key`` under the key name ``origin``."""
    if not is_key_name(checkpoint.origin):
        raise CheckpointError("malformed", f"origin {checkpoint.origin!r} is not usable as a "
                              "key name: no spaces, no '+', not empty")  # fmt: skip
    if not 0 <= checkpoint.size <= MAX_TREE_SIZE:
        raise CheckpointError("malformed", f"a tree size is 0 to 2**63-1, not "
                              f"{checkpoint.size}")  # fmt: skip
    if not may_sign(key.signer_type, key.signer_id, checkpoint.origin):
        raise CheckpointError(
            "key",
            f"key {shown(key.key_id)} ({key.signer_type}, signer_id "
            f"{shown(key.signer_id)}) may not sign "
            f"checkpoints of origin {checkpoint.origin!r}",
        )
    text = checkpoint.text()
    return Note(text, (sign_note(text, checkpoint.origin, key),)).encoded()


@dataclass(frozen=True)
class VerifiedCheckpoint:
    """A checkpoint whose note verified; ``signers``: key_ids of the keys that signed it;
    ``lines``: the signature lines that verified under them, each once, in the note's order
    (a line by a key the keyring does not allow for the origin is not among them)."""

    checkpoint: Checkpoint
    signers: tuple[str, ...]
    note: bytes
    lines: tuple[NoteSignature, ...] = ()


def verify_checkpoint(
    data: bytes, keyring: Keyring, origin: str | None = None, empty_root: bool = True
) -> VerifiedCheckpoint:
    """Parse and verify a signed checkpoint against ``keyring`` (module doc), or raise a
    :class:`CheckpointError`: ``malformed`` (exit 2), ``origin``, ``bad_signature`` or
    ``untrusted`` (exit 1). ``empty_root``: as :func:`parse_checkpoint_text`'s."""
    note = parse_note(data)
    checkpoint = parse_checkpoint_text(note.text, empty_root)
    if origin is not None and checkpoint.origin != origin:
        raise CheckpointError("origin", f"the checkpoint is for {checkpoint.origin!r}, not "
                              f"{origin!r}")  # fmt: skip
    known = checkpoint_keys(keyring, checkpoint.origin)
    signers, lines = _verified(note, checkpoint.origin, known)
    if not signers:
        raise CheckpointError(
            "untrusted",
            f"no signature from a key the keyring allows for {checkpoint.origin!r} "
            f"({len(note.signatures)} signature line(s), {len(known)} allowed key(s))",
        )
    return VerifiedCheckpoint(checkpoint, tuple(signers), data, tuple(lines))


def _verified(
    note: Note, origin: str, known: Iterable[KeyEntry]
) -> tuple[list[str], list[NoteSignature]]:
    by_id: dict[bytes, list[KeyEntry]] = {}
    for entry in known:
        by_id.setdefault(key_id(origin, entry.public_key), []).append(entry)
    signers: list[str] = []
    lines: list[NoteSignature] = []
    for sig in note.signatures:
        if sig.name != origin:
            continue  # another key name: an unknown key, ignored (witnesses, rotation)
        candidates = by_id.get(sig.key_id, [])
        if not candidates:
            continue
        good = [e for e in candidates
                if len(sig.signature) == 64
                and verify_signature(e.verifier, sig.signature, note.text)]  # fmt: skip
        if not good:
            names = ", ".join(shown(e.key_id) for e in candidates)
            raise CheckpointError("bad_signature", f"the signature by {names} does not verify")
        signers.extend(e.key_id for e in good if e.key_id not in signers)
        if sig not in lines:
            lines.append(sig)
    return signers, lines
