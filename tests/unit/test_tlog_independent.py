"""pithlog's checkpoints and proofs checked by verifiers written apart from it: the signed
note with ``cryptography``'s Ed25519 alone (c2sp.org/signed-note), the proofs with the
inner/border decomposition of transparency-dev/merkle rather than RFC 9162's step-by-step
algorithm that :mod:`pithlog.transparency.merkle` follows. Also the sizes near 2**63 and
2**64, on a tree whose leaves are all equal (its perfect subtrees then have one hash per
level, so a tree of any size is at hand)."""

from __future__ import annotations

import base64
import hashlib
import random

import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from pithlog.errors import ProofError
from pithlog.testing import test_key
from pithlog.transparency import merkle, tiles
from pithlog.transparency.checkpoint import Checkpoint, sign_checkpoint
from pithlog.transparency.proofs import InclusionProof, parse_inclusion_proof

ORIGIN = "registry.test.invalid/pith"


def _sha(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def _node(left: bytes, right: bytes) -> bytes:
    return _sha(b"\x01" + left + right)


def open_note(note: bytes, name: str, public_key: bytes) -> bytes:
    """The text of a signed note verified under the Ed25519 key ``name``/``public_key``
    (signed-note: text up to the last blank line; key ID SHA-256(name, 0x0A, 0x01, key)[:4];
    lines by other keys ignored), or an ``AssertionError``/``InvalidSignature``."""
    text, blank, lines = note.rpartition(b"\n\n")
    assert blank and lines.endswith(b"\n")
    text += b"\n"
    key_id = _sha(name.encode() + b"\n\x01" + public_key)[:4]
    verified = False
    for line in lines.decode("utf-8").split("\n")[:-1]:
        assert line.startswith("\u2014 ")
        who, encoded = line[2:].split(" ")
        raw = base64.b64decode(encoded, validate=True)
        if who == name and raw[:4] == key_id:
            Ed25519PublicKey.from_public_bytes(public_key).verify(raw[4:], text)
            verified = True
    assert verified
    return text


def _inner(index: int, size: int) -> int:
    return (index ^ (size - 1)).bit_length()


def root_from_inclusion(index: int, size: int, leaf: bytes, path: list[bytes]) -> bytes:
    """transparency-dev/merkle ``RootFromInclusionProof``."""
    assert 0 <= index < size
    inner = _inner(index, size)
    assert len(path) == inner + bin(index >> inner).count("1")
    out = leaf
    for i, h in enumerate(path[:inner]):
        out = _node(h, out) if index >> i & 1 else _node(out, h)
    for h in path[inner:]:
        out = _node(h, out)
    return out


def consistent(old: int, new: int, path: list[bytes], old_root: bytes, new_root: bytes) -> bool:
    """transparency-dev/merkle ``VerifyConsistency``."""
    if not 0 <= old <= new:
        return False
    if old == new:
        return not path and old_root == new_root
    if old == 0:
        return not path
    if not path:
        return False
    shift = (old & -old).bit_length() - 1
    inner = _inner(old - 1, new) - shift
    seed, rest = (old_root, path) if old == 1 << shift else (path[0], path[1:])
    mask = (old - 1) >> shift
    if len(rest) != inner + bin(mask >> inner).count("1"):
        return False
    first = second = seed
    for i, h in enumerate(rest[:inner]):
        if mask >> i & 1:
            first, second = _node(h, first), _node(h, second)
        else:
            second = _node(second, h)
    for h in rest[inner:]:
        first, second = _node(h, first), _node(h, second)
    return first == old_root and second == new_root


def test_a_checkpoint_verifies_under_ed25519_alone() -> None:
    key = test_key("registry")
    root = _sha(b"root")
    for size in (0, 1, 1204, 2**62, 2**63 - 1):  # Go's int64 is the most
        cp_root = merkle.EMPTY_ROOT if size == 0 else root
        note = sign_checkpoint(Checkpoint(ORIGIN, size, cp_root), key)
        text = open_note(note, ORIGIN, key.public_key)
        assert text == f"{ORIGIN}\n{size}\n{base64.b64encode(cp_root).decode()}\n".encode()
        forged = note.replace(str(size).encode(), str(size + 1).encode(), 1)
        with pytest.raises(InvalidSignature):
            open_note(forged, ORIGIN, key.public_key)


LEAVES = [_sha(b"%d" % i) for i in range(300)]
HASHES = [merkle.leaf_hash(d) for d in LEAVES]
SUBTREE = merkle.subtree_from_leaves(HASHES)


def test_every_small_proof_verifies_independently() -> None:
    roots = [merkle.root(n, SUBTREE) for n in range(301)]
    for n in [*range(1, 70), 127, 128, 129, 255, 256, 257, 300]:
        for i in {0, n // 2, n - 1, *random.Random(n).sample(range(n), min(n, 8))}:
            path = merkle.inclusion_path(i, n, SUBTREE)
            assert root_from_inclusion(i, n, HASHES[i], path) == roots[n], (i, n)
        for m in range(n + 1):
            path = merkle.consistency_path(m, n, SUBTREE)
            assert consistent(m, n, path, roots[m], roots[n]), (m, n)
            if path:
                assert not consistent(m, n, path[:-1], roots[m], roots[n])


# A tree whose leaves are all one hash: the perfect subtree of level l is UNIFORM[l].
UNIFORM = [merkle.leaf_hash(b"same")]
for _ in range(70):
    UNIFORM.append(_node(UNIFORM[-1], UNIFORM[-1]))


def _uniform(level: int, index: int) -> bytes:
    return UNIFORM[level]


HUGE = [2**63 - 1, 2**63, 2**63 + 1, 2**62, 2**64 - 1, 10**19 - 1, 256**7, 256**7 + 255]


@pytest.mark.parametrize("size", HUGE)
def test_proofs_of_trees_near_two_to_the_63(size: int) -> None:
    subtree = merkle.subtree_from_perfect(_uniform)
    root = merkle.root(size, subtree)
    edge = {tile: tiles.tile_data(tile, _uniform) for tile in tiles.right_edge(size)}
    assert tiles.root_from_edge(size, edge) == root
    rng = random.Random(size)
    for index in (0, size - 1, size // 2, rng.randrange(size)):
        path = merkle.inclusion_path(index, size, subtree)
        assert root_from_inclusion(index, size, UNIFORM[0], path) == root
        assert merkle.verify_inclusion(UNIFORM[0], index, size, path, root)
        proof = InclusionProof(index, tuple(path), b"cp\n").encoded()
        if index <= merkle.MAX_TREE_SIZE:  # pithlog reads indexes and sizes up to 2**63-1
            assert parse_inclusion_proof(proof).index == index
        else:
            with pytest.raises(ProofError, match="malformed"):
                parse_inclusion_proof(proof)
    for old in (1, 2, size - 1, size // 2, rng.randrange(1, size), 2**40 + 1):
        path = merkle.consistency_path(old, size, subtree)
        old_root = merkle.root(old, subtree)
        assert consistent(old, size, path, old_root, root)
        assert merkle.verify_consistency(old, size, old_root, root, path)
        assert not merkle.verify_consistency(old, size, old_root, root, path[1:])
