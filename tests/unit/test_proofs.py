"""Proof files: tlog-proof@v1 and pithlog's consistency format, verified offline."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

import pytest

from pithlog.errors import CheckpointError, ProofError
from pithlog.testing import test_key, test_keyring
from pithlog.transparency import merkle
from pithlog.transparency.checkpoint import Checkpoint, sign_checkpoint
from pithlog.transparency.proofs import (
    MAX_PROOF_BYTES,
    ConsistencyProof,
    InclusionProof,
    parse_consistency_proof,
    parse_inclusion_proof,
    proof_kind,
    verify_consistency_proof,
    verify_inclusion_proof,
)

ORIGIN = "registry.test.invalid"
EIDS = [hashlib.sha256(b"event %d" % i).digest() for i in range(40)]
COPIES = [hashlib.sha256(b"copy %d" % i).digest() for i in range(40)]
LEAVES = [e + c for e, c in zip(EIDS, COPIES, strict=True)]
"""Leaf data: event_id || SHA-256 of the copy (docs/transparency.md)."""
SUBTREE = merkle.subtree_from_leaves([merkle.leaf_hash(d) for d in LEAVES])


def checkpoint(size: int, origin: str = ORIGIN) -> bytes:
    root = merkle.root(size, SUBTREE)
    return sign_checkpoint(Checkpoint(origin, size, root), test_key("registry"))


def inclusion(index: int, size: int, extra: bool = True) -> bytes:
    path = tuple(merkle.inclusion_path(index, size, SUBTREE))
    return InclusionProof(index, path, checkpoint(size), LEAVES[index] if extra else None).encoded()


def test_inclusion_proof_format() -> None:
    data = inclusion(5, 13)
    lines = data.decode().split("\n")
    assert lines[0] == "c2sp.org/tlog-proof@v1"
    assert lines[1] == "extra " + base64.b64encode(LEAVES[5]).decode()
    assert lines[2] == "index 5"
    path = merkle.inclusion_path(5, 13, SUBTREE)
    assert lines[3 : 3 + len(path)] == [base64.b64encode(h).decode() for h in path]
    assert lines[3 + len(path)] == ""
    assert data.endswith(checkpoint(13))
    parsed = parse_inclusion_proof(data)
    assert parsed == InclusionProof(5, tuple(path), checkpoint(13), LEAVES[5])
    assert proof_kind(data) == "inclusion"
    # a one-leaf tree has an empty path
    single = inclusion(0, 1)
    assert parse_inclusion_proof(single).path == ()


def test_verify_inclusion_proofs() -> None:
    for size in (1, 2, 3, 13, 40):
        for index in range(size):
            proven = verify_inclusion_proof(inclusion(index, size), test_keyring())
            assert proven.index == index and proven.event_id == "sha256:" + EIDS[index].hex()
            assert proven.copy_sha256 == COPIES[index].hex()
    eid = "sha256:" + EIDS[7].hex()
    assert verify_inclusion_proof(inclusion(7, 9), test_keyring(), eid, copy_sha256=COPIES[7])
    with pytest.raises(ProofError, match="mismatch"):
        verify_inclusion_proof(inclusion(7, 9), test_keyring(), "sha256:" + EIDS[8].hex())
    with pytest.raises(ProofError, match="mismatch"):  # the event, but another copy of it
        verify_inclusion_proof(inclusion(7, 9), test_keyring(), eid, copy_sha256=COPIES[8])
    # the leaf data is what is proven: without it (or with the event_id alone) no proof
    with pytest.raises(ProofError, match="malformed"):
        verify_inclusion_proof(inclusion(7, 9, extra=False), test_keyring(), eid)
    path = tuple(merkle.inclusion_path(7, 9, SUBTREE))
    eid_only = InclusionProof(7, path, checkpoint(9), EIDS[7]).encoded()
    with pytest.raises(ProofError, match="malformed"):
        verify_inclusion_proof(eid_only, test_keyring())
    with pytest.raises(CheckpointError, match="origin"):
        verify_inclusion_proof(inclusion(7, 9), test_keyring(), origin="elsewhere")
    # the event_id asked about is one (lower-case hex): the proven one in capitals is not
    for asked in (eid.upper(), "sha256:" + EIDS[7].hex().upper(), "sha256:" + "zz" * 32):
        with pytest.raises(ProofError) as refused:
            verify_inclusion_proof(inclusion(7, 9), test_keyring(), asked)
        assert refused.value.code == "proof.event_id" and "not an event_id" in str(refused.value)


def _mutations(data: bytes) -> list[bytes]:
    head, _, cp = data.partition(b"\n\n")
    lines = head.split(b"\n")
    out = []
    index = int(lines[2].split(b" ")[1])
    lines2 = list(lines)
    lines2[2] = b"index %d" % (index + 1)
    out.append(b"\n".join(lines2) + b"\n\n" + cp)  # wrong index
    for at in range(3, len(lines)):
        raw = bytearray(base64.b64decode(lines[at]))
        raw[at % 32] ^= 0x10
        flipped = list(lines)
        flipped[at] = base64.b64encode(raw)
        out.append(b"\n".join(flipped) + b"\n\n" + cp)  # a flipped bit in a hash
    out.append(b"\n".join(lines[:-1]) + b"\n\n" + cp)  # a hash dropped
    other = bytearray(LEAVES[index])
    other[0] ^= 1
    lines3 = list(lines)
    lines3[1] = b"extra " + base64.b64encode(bytes(other))
    out.append(b"\n".join(lines3) + b"\n\n" + cp)  # another event_id
    other = bytearray(LEAVES[index])
    other[40] ^= 1  # the same event_id, another copy
    lines3 = list(lines)
    lines3[1] = b"extra " + base64.b64encode(bytes(other))
    out.append(b"\n".join(lines3) + b"\n\n" + cp)  # another leaf
    return out


def test_mutated_inclusion_proofs_fail() -> None:
    for index, size in ((0, 2), (3, 7), (12, 13), (21, 40), (39, 40)):
        for bad in _mutations(inclusion(index, size)):
            with pytest.raises(ProofError, match="inclusion"):
                verify_inclusion_proof(bad, test_keyring())
    # the checkpoint's size changed: its signature fails
    data = inclusion(3, 7)
    with pytest.raises(CheckpointError, match="bad_signature"):
        verify_inclusion_proof(data.replace(b"\n7\n", b"\n8\n"), test_keyring())


def test_consistency_proofs() -> None:
    for old, new in ((1, 2), (3, 7), (8, 40), (13, 40), (40, 40), (0, 5)):
        proof = ConsistencyProof(old, new, tuple(merkle.consistency_path(old, new, SUBTREE)))
        data = proof.encoded()
        assert data.decode().split("\n")[:3] == [
            "pithlog-consistency-proof@v1", f"old {old}", f"new {new}"]  # fmt: skip
        assert parse_consistency_proof(data) == proof and proof_kind(data) == "consistency"
        a, b = verify_consistency_proof(data, checkpoint(old), checkpoint(new), test_keyring())
        assert (a.checkpoint.size, b.checkpoint.size) == (old, new)
        if proof.path:
            raw = bytearray(proof.path[0])
            raw[3] ^= 1
            bad = ConsistencyProof(old, new, (bytes(raw), *proof.path[1:])).encoded()
            with pytest.raises(ProofError, match="consistency"):
                verify_consistency_proof(bad, checkpoint(old), checkpoint(new), test_keyring())
    data = ConsistencyProof(3, 7, tuple(merkle.consistency_path(3, 7, SUBTREE))).encoded()
    with pytest.raises(ProofError, match="mismatch"):
        verify_consistency_proof(data, checkpoint(4), checkpoint(7), test_keyring())
    with pytest.raises(ProofError, match="mismatch"):
        other = checkpoint(7, "registry.test.invalid/b")
        verify_consistency_proof(data, checkpoint(3), other, test_keyring())


@pytest.mark.parametrize("data", [
    b"c2sp.org/tlog-proof@v1\nindex 1\n",  # no empty line
    b"c2sp.org/tlog-proof@v2\nindex 1\n\n",
    b"c2sp.org/tlog-proof@v1\nindex 01\n\n",
    b"c2sp.org/tlog-proof@v1\nextra !!\nindex 1\n\n",
    b"c2sp.org/tlog-proof@v1\nindex 1\nAAAA\n\n",
    b"c2sp.org/tlog-proof@v1\n\n",
    b"c2sp.org/tlog-proof@v1\nindex 1",  # no empty line, and so no checkpoint
])  # fmt: skip
def test_malformed_inclusion_proofs(data: bytes) -> None:
    with pytest.raises(ProofError, match="malformed"):
        parse_inclusion_proof(data)


def test_a_proof_file_is_limited_to_1_mib() -> None:
    consistency = ConsistencyProof(0, 5, ()).encoded()
    for parse, data in ((parse_inclusion_proof, inclusion(3, 7)),
                        (parse_consistency_proof, consistency)):  # fmt: skip
        large = data + b"x" * (MAX_PROOF_BYTES - len(data) + 1)
        with pytest.raises(ProofError) as refused:
            parse(large)
        assert refused.value.code == "proof.malformed"
        assert f"limited to {MAX_PROOF_BYTES} bytes" in refused.value.message


@pytest.mark.parametrize("data", [
    b"pithlog-consistency-proof@v1\nold 1\nnew 2",
    b"pithlog-consistency-proof@v1\nnew 2\nold 1\n",
    b"pithlog-consistency-proof@v1\nold 1\nnew 2\nAA==\n",
    b"something else\n",
    b"pithlog-consistency-proof@v1\nold 1\nnew 12",  # no final newline: not "new 1"
    b"pithlog-consistency-proof@v2\nold 1\nnew 2\n",
    b"pithlog-consistency-proof@v1\nold 2\nnew 1\n",  # old past new
    b"pithlog-consistency-proof@v1\nold 1\nnew 9223372036854775808\n",  # over 2**63-1
])  # fmt: skip
def test_malformed_consistency_proofs(data: bytes) -> None:
    with pytest.raises(ProofError, match="malformed"):
        parse_consistency_proof(data)
    if not data.startswith(b"pithlog"):
        with pytest.raises(ProofError, match="malformed"):
            proof_kind(data)


def test_a_proof_file_is_refused_by_its_own_code_and_line_number() -> None:
    # no empty line: the proof file is malformed, not its (absent) checkpoint
    with pytest.raises(ProofError, match="malformed"):
        verify_inclusion_proof(b"c2sp.org/tlog-proof@v1\nindex 1", test_keyring())
    good = base64.b64encode(LEAVES[0][:32]).decode()
    data = f"c2sp.org/tlog-proof@v1\nextra AA==\nindex 1\n{good}\nAAAA\n\n".encode()
    with pytest.raises(ProofError, match="line 5 is not base64"):
        parse_inclusion_proof(data)
    data = f"pithlog-consistency-proof@v1\nold 1\nnew 2\n{good}\nAAAA\n".encode()
    with pytest.raises(ProofError, match="line 5 is not base64"):
        parse_consistency_proof(data)
    with pytest.raises(ProofError, match="malformed"):
        proof_kind(b"c2sp.org/tlog-proof@v1x\nindex 1\n\n")


def test_a_consistency_proof_of_other_sizes_is_a_mismatch_not_a_rewritten_history() -> None:
    data = ConsistencyProof(3, 7, tuple(merkle.consistency_path(3, 7, SUBTREE))).encoded()
    with pytest.raises(ProofError) as refused:  # the newer size differs
        verify_consistency_proof(data, checkpoint(3), checkpoint(8), test_keyring())
    assert refused.value.code == "proof.mismatch"
    # the required origin holds for both checkpoints, the newer one too
    with pytest.raises(CheckpointError) as wrong:
        verify_consistency_proof(data, checkpoint(3), checkpoint(7, ORIGIN + "/b"),
                                 test_keyring(), ORIGIN)  # fmt: skip
    assert wrong.value.code == "checkpoint.origin"


def test_a_consistency_proof_from_a_larger_size_is_malformed_not_a_rewritten_history() -> None:
    """A proof whose old size exceeds its new size is no proof of anything (RFC 9162
    2.1.4.1: PROOF(m, D[n]) for m <= n): passed with checkpoints of those sizes in that
    order it is proof.malformed (exit 2), not evidence of a rewritten log."""
    path = tuple(merkle.consistency_path(3, 7, SUBTREE))
    data = ConsistencyProof(7, 3, path).encoded()
    with pytest.raises(ProofError) as refused:
        verify_consistency_proof(data, checkpoint(7), checkpoint(3), test_keyring())
    assert (refused.value.code, refused.value.exit_status) == ("proof.malformed", 2)
    assert "the old size 7 is past the new size 3" in refused.value.message


def test_documented_proof_carries_leaf_data() -> None:
    """docs/transparency.md shows a proof pithlog writes: its extra line is the 64-byte leaf
    data, since a 32-byte extra (store format 2) is refused as malformed."""
    doc = (Path(__file__).parents[2] / "docs" / "transparency.md").read_text("utf-8")
    extras = [line for line in doc.split("\n") if line.startswith("extra ")]
    assert extras
    for line in extras:
        raw = base64.b64decode(line[len("extra ") :], validate=True)
        assert len(raw) == 64, line
