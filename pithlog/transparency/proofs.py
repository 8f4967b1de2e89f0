"""Proof files: inclusion (C2SP ``tlog-proof@v1``) and consistency (a pithlog format), and
their offline verification against signed checkpoints (``docs/transparency.md``).

Inclusion, c2sp.org/tlog-proof@v1: the line ``c2sp.org/tlog-proof@v1``; an optional line
``extra <base64>`` (pithlog writes the 64-byte leaf data there, the event_id's 32 raw bytes
and the SHA-256 of the copy's JCS bytes: unauthenticated by itself, it is what the leaf
hash is recomputed from); ``index <N>`` (zero-based, decimal);
the inclusion path, one base64 SHA-256 hash per line, from the leaf's sibling up to the
root's child; an empty line; the signed checkpoint, verbatim::

    c2sp.org/tlog-proof@v1
    extra 0l1Cw...=
    index 17
    Xo3...=
    ...

    registry.example/pith
    1204
    Kw2...=

    — registry.example/pith Vq3s...

Consistency, pithlog's format: the line ``pithlog-consistency-proof@v1``, ``old <M>``,
``new <N>``, then ``PROOF(M, D[N])`` of RFC 9162 2.1.4.1, one base64 hash per line, each
line ending in a newline. It is checked against two signed checkpoints of one origin.

Pure: parsing, formatting, and verification over bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pithlog.errors import ProofError, register, shown
from pithlog.protocol.events import is_event_id
from pithlog.protocol.keys import Keyring
from pithlog.protocol.text_forms import decode_b64, encode_b64
from pithlog.transparency import merkle
from pithlog.transparency.checkpoint import VerifiedCheckpoint, decimal_of, verify_checkpoint

register(
    {
        "proof.malformed": "the proof file does not follow its format (docs/transparency.md): "
        "check the file",
        "proof.inclusion": "the inclusion proof does not lead to the checkpoint's root: the "
        "event is not proven to be in that log",
        "proof.consistency": "the consistency proof does not join the two checkpoints' roots: "
        "the newer log does not extend the older one (its history was rewritten) or the proof "
        "is damaged",
        "proof.mismatch": "the proof and the checkpoints or the event id given do not belong "
        "together (sizes, origin or event id differ)",
        "proof.event_id": "EVENT_ID is sha256: followed by 64 lowercase hex digits",
    }
)

TLOG_PROOF = "c2sp.org/tlog-proof@v1"
CONSISTENCY_PROOF = "pithlog-consistency-proof@v1"
MAX_PROOF_BYTES = 1 << 20


def _malformed(message: str) -> ProofError:
    return ProofError("malformed", message)


def _decimal(value: str, what: str) -> int:
    number = decimal_of(value)
    if number is None:
        raise _malformed(f"{what} {value[:40]!r} is not a decimal without leading zeros, "
                         "at most 2**63-1")  # fmt: skip
    return number


def _hashes(lines: Sequence[str], first_line: int) -> list[bytes]:
    out = []
    for number, line in enumerate(lines, first_line):
        raw = decode_b64(line)
        if raw is None or len(raw) != merkle.HASH_SIZE:
            raise _malformed(f"line {number} is not base64 of a 32-byte hash")
        out.append(raw)
    return out


def _text(data: bytes) -> str:
    if len(data) > MAX_PROOF_BYTES:
        raise _malformed(f"a proof is limited to {MAX_PROOF_BYTES} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _malformed(f"a proof is UTF-8; byte {exc.start} is not") from exc


# --- inclusion ----------------------------------------------------------------------------


@dataclass(frozen=True)
class InclusionProof:
    index: int
    path: tuple[bytes, ...]
    checkpoint: bytes
    extra: bytes | None = None

    def encoded(self) -> bytes:
        lines = [TLOG_PROOF]
        if self.extra is not None:
            lines.append(f"extra {encode_b64(self.extra)}")
        lines.append(f"index {self.index}")
        lines.extend(encode_b64(h) for h in self.path)
        return ("\n".join(lines) + "\n\n").encode("utf-8") + self.checkpoint


def parse_inclusion_proof(data: bytes) -> InclusionProof:
    text = _text(data)
    head, blank, checkpoint = text.partition("\n\n")
    if not blank:
        raise _malformed("no empty line before the checkpoint")
    lines = head.split("\n")
    if lines[0] != TLOG_PROOF:
        raise _malformed(f"the first line is not {TLOG_PROOF}")
    at = 1
    extra = None
    if len(lines) > at and lines[at].startswith("extra "):
        extra = decode_b64(lines[at][len("extra ") :])
        if extra is None:
            raise _malformed("the extra line is not base64")
        at += 1
    if len(lines) <= at or not lines[at].startswith("index "):
        raise _malformed(f"line {at + 1} is not 'index N'")
    index = _decimal(lines[at][len("index ") :], "index")
    path = _hashes(lines[at + 1 :], at + 2)
    return InclusionProof(index, tuple(path), checkpoint.encode("utf-8"), extra)


LEAF_DATA_SIZE = 64
"""Leaf data: event_id (32 raw bytes) || SHA-256 of the copy's JCS bytes (32)."""


@dataclass(frozen=True)
class ProvenInclusion:
    """What a verified inclusion proof shows: the copy whose JCS bytes hash to
    ``copy_sha256`` (hex), of ``event_id``, is leaf ``index`` of the log of the checkpoint."""

    event_id: str
    copy_sha256: str
    index: int
    checkpoint: VerifiedCheckpoint


def verify_inclusion_proof(
    data: bytes,
    keyring: Keyring,
    event_id: str | None = None,
    origin: str | None = None,
    copy_sha256: bytes | None = None,
) -> ProvenInclusion:
    """Verify a tlog-proof: its checkpoint against ``keyring``, then the inclusion of the
    leaf (the proof's 64-byte extra data: event_id || SHA-256 of the copy) at its index
    under the checkpoint's root. ``event_id`` and ``copy_sha256``, when given, must be the
    ones the extra data names. Raises ``ProofError``/``CheckpointError``."""
    proof = parse_inclusion_proof(data)
    verified = verify_checkpoint(proof.checkpoint, keyring, origin)
    if proof.extra is None or len(proof.extra) != LEAF_DATA_SIZE:
        raise _malformed("the proof carries no 64-byte leaf data (extra line: event_id and "
                         "the copy's SHA-256); a proof of 32 bytes is of an older format")
    leaf = proof.extra
    if event_id is not None and leaf[:32] != _event_id_bytes(event_id):
        raise ProofError("mismatch", f"the proof is about sha256:{leaf[:32].hex()}, "
                         f"not {event_id}")  # fmt: skip
    if copy_sha256 is not None and leaf[32:] != copy_sha256:
        raise ProofError("mismatch", f"the proof is about the copy {leaf[32:].hex()}, not "
                         f"{copy_sha256.hex()}")  # fmt: skip
    cp = verified.checkpoint
    if not merkle.verify_inclusion(merkle.leaf_hash(leaf), proof.index, cp.size,
                                   proof.path, cp.root):  # fmt: skip
        raise ProofError("inclusion", f"sha256:{leaf[:32].hex()} (copy {leaf[32:].hex()[:16]}) "
                         f"at index {proof.index} does not lead to the root of "
                         f"{shown(cp.origin)} at size {cp.size}")  # fmt: skip
    return ProvenInclusion("sha256:" + leaf[:32].hex(), leaf[32:].hex(), proof.index, verified)


def _event_id_bytes(event_id: str) -> bytes:
    if not is_event_id(event_id):
        # the event_id asked about is wrong, not the proof file: proof.malformed would send
        # the user to check a file that is fine
        raise ProofError("event_id", f"{event_id!r} is not an event_id (sha256: + 64 "
                         "lowercase hex)")  # fmt: skip
    return bytes.fromhex(event_id[7:])


# --- consistency --------------------------------------------------------------------------


@dataclass(frozen=True)
class ConsistencyProof:
    old: int
    new: int
    path: tuple[bytes, ...]

    def encoded(self) -> bytes:
        lines = [CONSISTENCY_PROOF, f"old {self.old}", f"new {self.new}"]
        lines.extend(encode_b64(h) for h in self.path)
        return "".join(f"{line}\n" for line in lines).encode("utf-8")


def parse_consistency_proof(data: bytes) -> ConsistencyProof:
    text = _text(data)
    if not text.endswith("\n"):
        raise _malformed("a consistency proof ends with a newline")
    lines = text[:-1].split("\n")
    if lines[0] != CONSISTENCY_PROOF:
        raise _malformed(f"the first line is not {CONSISTENCY_PROOF}")
    if len(lines) < 3 or not lines[1].startswith("old ") or not lines[2].startswith("new "):
        raise _malformed("lines 2 and 3 are 'old M' and 'new N'")
    old = _decimal(lines[1][4:], "old size")
    new = _decimal(lines[2][4:], "new size")
    if old > new:
        # RFC 9162 2.1.4.1 defines PROOF(m, D[n]) for m <= n only: such a file proves
        # nothing, and failing it as proof.consistency would report a rewritten log
        raise _malformed(f"the old size {old} is past the new size {new}: a consistency "
                         "proof is from a tree to one at least as large")  # fmt: skip
    return ConsistencyProof(old, new, tuple(_hashes(lines[3:], 4)))


def proof_kind(data: bytes) -> str:
    """``inclusion`` or ``consistency``, from the first line."""
    first = data.split(b"\n", 1)[0]
    if first == TLOG_PROOF.encode():
        return "inclusion"
    if first == CONSISTENCY_PROOF.encode():
        return "consistency"
    raise _malformed(f"the first line is neither {TLOG_PROOF} nor {CONSISTENCY_PROOF}")


def verify_consistency_proof(
    data: bytes,
    old_checkpoint: bytes,
    new_checkpoint: bytes,
    keyring: Keyring,
    origin: str | None = None,
) -> tuple[VerifiedCheckpoint, VerifiedCheckpoint]:
    """Verify both checkpoints against ``keyring`` (one origin), that the proof's sizes are
    theirs, and the RFC 9162 consistency of their roots."""
    proof = parse_consistency_proof(data)
    old = verify_checkpoint(old_checkpoint, keyring, origin)
    new = verify_checkpoint(new_checkpoint, keyring, origin)
    a, b = old.checkpoint, new.checkpoint
    if a.origin != b.origin:
        raise ProofError("mismatch", f"the checkpoints are of two logs: {a.origin!r} and "
                         f"{b.origin!r}")  # fmt: skip
    if (proof.old, proof.new) != (a.size, b.size):
        raise ProofError("mismatch", f"the proof is from size {proof.old} to {proof.new}; the "
                         f"checkpoints are of sizes {a.size} and {b.size}")  # fmt: skip
    if not merkle.verify_consistency(a.size, b.size, a.root, b.root, proof.path):
        raise ProofError("consistency", f"{shown(a.origin)} at size {b.size} is not proven to "
                         f"extend itself at size {a.size}")  # fmt: skip
    return old, new
