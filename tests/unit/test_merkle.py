"""pithlog.transparency.merkle against the RFC 9162 definitions, written out literally as
recursion."""

from __future__ import annotations

import functools
import hashlib
import random

import pytest

from pithlog.transparency import merkle as m

LEAVES = [hashlib.sha256(b"leaf %d" % i).digest() for i in range(301)]
HASHES = [m.leaf_hash(d) for d in LEAVES]


@functools.cache
def mth(a: int, b: int) -> bytes:
    """MTH(D[a:b]), RFC 9162 2.1.1."""
    if b == a:
        return hashlib.sha256(b"").digest()
    if b - a == 1:
        return hashlib.sha256(b"\x00" + LEAVES[a]).digest()
    k = 1
    while k * 2 < b - a:
        k *= 2
    return hashlib.sha256(b"\x01" + mth(a, a + k) + mth(a + k, b)).digest()


def path(i: int, a: int, b: int) -> list[bytes]:
    """PATH(i, D[a:b]), RFC 9162 2.1.3.1."""
    if b - a == 1:
        return []
    k = m.split_point(b - a)
    if i < k:
        return [*path(i, a, a + k), mth(a + k, b)]
    return [*path(i - k, a + k, b), mth(a, a + k)]


def subproof(mm: int, a: int, b: int, whole: bool) -> list[bytes]:
    """SUBPROOF(m, D[a:b], b), RFC 9162 2.1.4.1."""
    n = b - a
    if mm == n:
        return [] if whole else [mth(a, b)]
    k = m.split_point(n)
    if mm <= k:
        return [*subproof(mm, a, a + k, whole), mth(a + k, b)]
    return [*subproof(mm - k, a + k, b, False), mth(a, a + k)]


def stored_tree(n: int) -> m.SubtreeHash:
    """What the store does: perfect subtrees recorded as leaves are appended."""
    nodes: dict[tuple[int, int], bytes] = {}

    def perfect(level: int, index: int) -> bytes:
        return HASHES[index] if level == 0 else nodes[(level, index)]

    for i in range(n):
        for level, index, h in m.completed_subtrees(i, HASHES[i], perfect):
            nodes[(level, index)] = h
    assert len(nodes) == n - bin(n).count("1")
    return m.subtree_from_perfect(perfect)


SUBTREE = stored_tree(300)  # a tree of 300 answers every smaller size too


def test_roots_of_every_size() -> None:
    assert m.root(0, SUBTREE) == m.EMPTY_ROOT == hashlib.sha256(b"").digest()
    for n in range(1, 301):
        assert m.root(n, SUBTREE) == mth(0, n) == m.root_of(LEAVES[:n])
        assert m.root(n, stored_tree(n)) == mth(0, n)


def test_known_values() -> None:
    # RFC 6962/9162 hashing: the empty tree, one leaf, two leaves.
    assert m.EMPTY_ROOT.hex() == (
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
    assert m.root_of([b""]) == hashlib.sha256(b"\x00").digest()
    two = m.root_of([b"a", b"b"])
    assert two == hashlib.sha256(b"\x01" + m.leaf_hash(b"a") + m.leaf_hash(b"b")).digest()


def _inclusion_cases() -> list[tuple[int, int]]:
    rng = random.Random(7)
    cases = [(i, n) for n in range(1, 65) for i in range(n)]
    for n in range(65, 301):
        cases += [(0, n), (n - 1, n)] + [(rng.randrange(n), n) for _ in range(6)]
    return cases


def test_inclusion_paths_and_verification() -> None:
    for i, n in _inclusion_cases():
        proof = m.inclusion_path(i, n, SUBTREE)
        assert proof == path(i, 0, n), (i, n)
        root = mth(0, n)
        assert m.verify_inclusion(HASHES[i], i, n, proof, root)
        # Wrong index, wrong leaf, wrong root; a wrong size comes with its own root (a
        # checkpoint signs both; the same path can fit two sizes whose trees share it).
        assert not m.verify_inclusion(HASHES[i], (i + 1) % n, n, proof, root) or n == 1
        # An index one past the last leaf (RFC 9162 2.1.3.2 step 1): in a tree of one
        # leaf, the empty path would otherwise prove that leaf at index 1 as well.
        assert not m.verify_inclusion(HASHES[i], n, n, proof, root)
        assert not m.verify_inclusion(HASHES[i], i, n + 1, proof, mth(0, n + 1))
        if i < n - 1:
            assert not m.verify_inclusion(HASHES[i], i, n - 1, proof, mth(0, n - 1))
        assert not m.verify_inclusion(HASHES[(i + 1) % 301], i, n, proof, root)
        assert not m.verify_inclusion(HASHES[i], i, n, proof, mth(0, n + 1))
        # This tree's root under twice the size: when n is a power of two this tree is the
        # left child of that one, so the path leads to the root given but is too short
        # for the size (RFC 9162 2.1.3.2 step 5: ``sn`` is not 0 when the path runs out).
        assert not m.verify_inclusion(HASHES[i], i, 2 * n, proof, root)


def _consistency_cases() -> list[tuple[int, int]]:
    rng = random.Random(11)
    cases = [(a, b) for b in range(1, 65) for a in range(1, b)]
    for _ in range(1500):
        b = rng.randrange(65, 301)
        cases.append((rng.randrange(1, b), b))
    cases += [(64, 300), (128, 300), (256, 300), (255, 256), (1, 300), (299, 300)]
    return cases


def test_consistency_proofs_and_verification() -> None:
    for a, b in _consistency_cases():
        proof = m.consistency_path(a, b, SUBTREE)
        assert proof == subproof(a, 0, b, True), (a, b)
        old, new = mth(0, a), mth(0, b)
        assert m.verify_consistency(a, b, old, new, proof), (a, b)
        assert not m.verify_consistency(a, b, new, old, proof) or old == new
        assert not m.verify_consistency(a, b, old, mth(0, b - 1), proof)
        # The right new root with another old one: the path must commit to the old root
        # too (step 7 compares both), or a log could prove any signed old tree its prefix.
        assert not m.verify_consistency(a, b, mth(0, a - 1) if a > 1 else mth(1, 2), new,
                                        proof)  # fmt: skip
        assert not m.verify_consistency(a + 1, b, old, new, proof) or a + 1 == b
        assert not m.verify_consistency(a, b + 1, old, mth(0, b + 1), proof)
        assert not m.verify_consistency(a - 1, b, mth(0, a - 1), new, proof) or a == 1
        assert not m.verify_consistency(b, a, new, old, proof)


def test_trivial_consistency() -> None:
    root = mth(0, 10)
    assert m.consistency_path(10, 10, SUBTREE) == [] == m.consistency_path(0, 10, SUBTREE)
    assert m.verify_consistency(10, 10, root, root, [])
    assert not m.verify_consistency(10, 10, root, mth(0, 9), [])
    assert m.verify_consistency(0, 10, m.EMPTY_ROOT, root, [])
    assert not m.verify_consistency(0, 10, root, root, [])
    assert not m.verify_consistency(3, 10, mth(0, 3), root, [])
    assert not m.verify_consistency(10, 10, root, root, [root])


def _flip(hashes: list[bytes], rng: random.Random) -> list[bytes]:
    out = list(hashes)
    at = rng.randrange(len(out))
    raw = bytearray(out[at])
    raw[rng.randrange(32)] ^= 1 << rng.randrange(8)
    out[at] = bytes(raw)
    return out


def test_mutated_proofs_fail() -> None:
    rng = random.Random(3)
    for i, n in _inclusion_cases()[::7]:
        proof = m.inclusion_path(i, n, SUBTREE)
        root = mth(0, n)
        if proof:
            assert not m.verify_inclusion(HASHES[i], i, n, _flip(proof, rng), root)
            assert not m.verify_inclusion(HASHES[i], i, n, proof[:-1], root)
            assert not m.verify_inclusion(HASHES[i], i, n, proof[1:], root)
            assert not m.verify_inclusion(HASHES[i], i, n, proof[::-1], root) or len(
                set(proof)) == 1  # fmt: skip
        assert not m.verify_inclusion(HASHES[i], i, n, [*proof, root], root)
        # One hash past the root, with the root it leads to: only the size can refuse it
        # (RFC 9162 2.1.3.2 step 6: ``sn`` is 0 with path left), since the hashes agree.
        extended = m.node_hash(HASHES[0], root)
        assert not m.verify_inclusion(HASHES[i], i, n, [*proof, HASHES[0]], extended)
        assert not m.verify_inclusion(HASHES[i], i, n, [*proof, b"\x00" * 31], root)
    for a, b in _consistency_cases()[::9]:
        proof = m.consistency_path(a, b, SUBTREE)
        old, new = mth(0, a), mth(0, b)
        assert not m.verify_consistency(a, b, old, new, _flip(proof, rng))
        assert not m.verify_consistency(a, b, old, new, proof[:-1])
        assert not m.verify_consistency(a, b, old, new, [*proof, new])


def test_arguments_out_of_range() -> None:
    with pytest.raises(ValueError):
        m.inclusion_path(5, 5, SUBTREE)
    with pytest.raises(ValueError):
        m.consistency_path(6, 5, SUBTREE)
    with pytest.raises(ValueError):
        m.split_point(1)
    with pytest.raises(ValueError):
        SUBTREE(3, 5)  # not a range of the RFC recursion: [3, 5) straddles a boundary
    assert not m.verify_inclusion(HASHES[0], 0, 0, [], m.EMPTY_ROOT)
    assert not m.verify_inclusion(HASHES[0], -1, 4, [], m.EMPTY_ROOT)


def test_subtree_from_perfect_refuses_ranges_outside_the_recursion() -> None:
    # [1, 4) is 3 leaves whose left part [1, 3) is no perfect subtree: answering it from
    # perfect(1, 0) would give MTH(D[0:2]) silently
    for a, b in ((1, 4), (3, 6), (5, 12), (3, 3), (5, 4)):
        with pytest.raises(ValueError):
            SUBTREE(a, b)


def test_consistency_roots_only_between_two_nonempty_sizes() -> None:
    # RFC 9162 2.1.4.2 is for 0 < m < n: at 0 the step-3 arithmetic never ends (fn = -1)
    h = HASHES[0]
    for old, new in ((0, 5), (0, 4), (3, 3), (4, 4), (5, 3)):
        assert m.consistency_roots(old, new, mth(0, min(old, new)), [h, h]) is None
