"""RFC 9162 section 2.1 Merkle trees: hashes, inclusion paths, consistency proofs.

Pure arithmetic over hashes. Nothing here knows where the leaves are kept: the proof
builders take a function ``subtree(a, b)`` giving ``MTH(D[a:b])``, the hash of the leaves
``a`` (included) to ``b`` (excluded). Every range the RFC recursion asks for is either a
*perfect* subtree (a power-of-two number of leaves starting at a multiple of that number)
or splits into O(log n) perfect ones (:func:`subtree_from_perfect`), so a store that keeps
the hash of every complete perfect subtree answers any root or proof for any tree size with
O(log n) reads, without rehashing its log.

- :func:`leaf_hash`, :func:`node_hash`: ``SHA-256(0x00 || leaf)``, ``SHA-256(0x01 || l || r)``.
- :func:`inclusion_path`: ``PATH(m, D[n])`` (RFC 9162 2.1.3.1), leaf sibling first.
- :func:`consistency_path`: ``PROOF(m, D[n])`` (RFC 9162 2.1.4.1).
- :func:`verify_inclusion`, :func:`verify_consistency`: the verification algorithms of RFC
  9162 2.1.3.2 and 2.1.4.2, step by step.
- :func:`completed_subtrees`: the perfect subtrees a new leaf completes (for appending).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Sequence

HASH_SIZE = 32
EMPTY_ROOT = hashlib.sha256(b"").digest()
"""``MTH({})``: the root of the empty tree."""
MAX_TREE_SIZE = (1 << 63) - 1
"""The largest tree size, leaf index or tile index pithlog reads or writes: Go's
``golang.org/x/mod/sumdb/tlog`` holds them in an ``int64`` (``Tree.N``, ``Tile.N``), so a
checkpoint of more leaves is one a Go client refuses (docs/transparency.md)."""

SubtreeHash = Callable[[int, int], bytes]
"""``subtree(a, b)`` = ``MTH(D[a:b])`` for ``0 <= a < b``."""

PerfectHash = Callable[[int, int], bytes]
"""``perfect(level, index)`` = ``MTH(D[index * 2**level : (index + 1) * 2**level])``."""


def leaf_hash(data: bytes) -> bytes:
    """``MTH({d}) = SHA-256(0x00 || d)``."""
    return hashlib.sha256(b"\x00" + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """``SHA-256(0x01 || left || right)``."""
    return hashlib.sha256(b"\x01" + left + right).digest()


def split_point(n: int) -> int:
    """``k``: the largest power of two smaller than ``n`` (``n > 1``)."""
    if n < 2:
        raise ValueError(f"no split point for {n} leaves")
    return 1 << ((n - 1).bit_length() - 1)


def root_of(leaves: Sequence[bytes]) -> bytes:
    """``MTH(D[n])`` of leaf data, by the RFC's recursion (for tests and small trees)."""
    if not leaves:
        return EMPTY_ROOT
    return _mth([leaf_hash(d) for d in leaves], 0, len(leaves))


def _mth(hashes: Sequence[bytes], a: int, b: int) -> bytes:
    if b - a == 1:
        return hashes[a]
    k = split_point(b - a)
    return node_hash(_mth(hashes, a, a + k), _mth(hashes, a + k, b))


def subtree_from_leaves(hashes: Sequence[bytes]) -> SubtreeHash:
    """``subtree(a, b)`` over leaf hashes held in memory (recomputed on every call)."""
    return lambda a, b: _mth(hashes, a, b)


def subtree_from_perfect(perfect: PerfectHash) -> SubtreeHash:
    """``subtree(a, b)`` from perfect-subtree hashes, for the ranges the RFC recursion asks
    for: ``a`` a multiple of the smallest power of two >= ``b - a``. Such a range is a
    perfect subtree, or its left part (``k`` leaves) is one and its right part is again such
    a range, so it costs at most ``log2(b - a) + 1`` calls of ``perfect``."""

    def subtree(a: int, b: int) -> bytes:
        if not 0 <= a < b:
            raise ValueError(f"empty or negative range [{a}, {b})")
        parts: list[bytes] = []
        while True:
            size = b - a
            if size & (size - 1) == 0:
                level = size.bit_length() - 1
                if a % size:
                    raise ValueError(f"[{a}, {b}) is not aligned to its size")
                parts.append(perfect(level, a >> level))
                break
            k = split_point(size)
            if a % k:
                raise ValueError(f"[{a}, {b}) is not a range of the RFC recursion")
            parts.append(perfect(k.bit_length() - 1, a // k))
            a += k
        out = parts.pop()
        while parts:
            out = node_hash(parts.pop(), out)
        return out

    return subtree


def completed_subtrees(
    index: int, leaf: bytes, perfect: PerfectHash
) -> Iterator[tuple[int, int, bytes]]:
    """Appending leaf ``index`` (hash ``leaf``) completes the perfect subtrees whose last
    leaf it is: ``(level, index, hash)`` for levels 1, 2, ..., while the subtree below is a
    right child. ``perfect`` gives the left siblings, which are already complete."""
    level, position, current = 0, index, leaf
    while position & 1:
        current = node_hash(perfect(level, position - 1), current)
        level += 1
        position >>= 1
        yield level, position, current


def root(size: int, subtree: SubtreeHash) -> bytes:
    """``MTH(D[size])``."""
    if size < 0:
        raise ValueError("a tree size is 0 or more")
    return EMPTY_ROOT if size == 0 else subtree(0, size)


def inclusion_path(index: int, size: int, subtree: SubtreeHash) -> list[bytes]:
    """``PATH(index, D[size])`` (RFC 9162 2.1.3.1): the leaf's sibling first, the root's
    child last."""
    if not 0 <= index < size:
        raise ValueError(f"leaf {index} is not in a tree of {size} leaves")
    top_down: list[bytes] = []
    a, b = 0, size
    while b - a > 1:
        k = split_point(b - a)
        if index < a + k:
            top_down.append(subtree(a + k, b))
            b = a + k
        else:
            top_down.append(subtree(a, a + k))
            a += k
    top_down.reverse()
    return top_down


def consistency_path(old: int, new: int, subtree: SubtreeHash) -> list[bytes]:
    """``PROOF(old, D[new])`` (RFC 9162 2.1.4.1); empty when ``old`` is 0 or ``new``."""
    if not 0 <= old <= new:
        raise ValueError(f"no consistency proof from {old} to {new} leaves")
    if old in (0, new):
        return []
    top_down: list[bytes] = []
    a, b, m, whole = 0, new, old, True  # SUBPROOF(m, D[a:b], whole)
    while True:
        n = b - a
        if m == n:
            if not whole:
                top_down.append(subtree(a, b))
            break
        k = split_point(n)
        if m <= k:
            top_down.append(subtree(a + k, b))
            b = a + k
        else:
            top_down.append(subtree(a, a + k))
            a, m, whole = a + k, m - k, False
    top_down.reverse()
    return top_down


def verify_inclusion(
    leaf: bytes, index: int, size: int, path: Sequence[bytes], root_hash: bytes
) -> bool:
    """RFC 9162 2.1.3.2: does ``path`` prove leaf hash ``leaf`` at ``index`` in the tree of
    ``size`` leaves with root ``root_hash``?"""
    if not 0 <= index < size:  # step 1
        return False
    # a leaf hash of another length is no leaf hash: with an empty path (a tree of one
    # leaf) it would be "proven" by being equal to a root of that same length
    if len(leaf) != HASH_SIZE or any(len(p) != HASH_SIZE for p in path):
        return False
    fn, sn = index, size - 1  # step 2
    r = leaf  # step 3
    for p in path:  # step 4
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    return sn == 0 and r == root_hash  # step 5


def verify_consistency(
    old: int, new: int, old_root: bytes, new_root: bytes, path: Sequence[bytes]
) -> bool:
    """RFC 9162 2.1.4.2: does ``path`` prove the tree of ``old`` leaves with root
    ``old_root`` a prefix of the tree of ``new`` leaves with root ``new_root``?

    The two cases the RFC leaves out, with an empty path: a tree is consistent with
    itself (``old == new``, equal roots) and the empty tree (``old == 0``, root
    ``SHA-256()``) with every tree."""
    if not 0 <= old <= new or any(len(c) != HASH_SIZE for c in path):
        return False
    if old == 0:
        # and at 0 leaves the new tree is the empty tree too: its root is checked as well
        return not path and old_root == EMPTY_ROOT and (new > 0 or new_root == EMPTY_ROOT)
    if old == new:
        return not path and old_root == new_root
    if not path:  # step 1
        return False
    roots = consistency_roots(old, new, old_root, path)
    return roots is not None and roots == (old_root, new_root)  # step 7


def consistency_roots(
    old: int, new: int, old_root: bytes, path: Sequence[bytes]
) -> tuple[bytes, bytes] | None:
    """RFC 9162 2.1.4.2 steps 2-6 for ``0 < old < new``: the roots ``(fr, sr)`` that
    ``path`` commits the trees of ``old`` and ``new`` leaves to, or ``None`` when its
    length does not fit the sizes. ``old_root`` is used only when ``old`` is a power of two
    (the path then leaves the old tree's root out, step 2), so ``fr`` is derived from the
    path alone otherwise: a path that leads to a checkpoint's ``new`` root while giving
    another ``fr`` than a checkpoint of ``old`` is a log showing two histories."""
    if not 0 < old < new or not path or any(len(c) != HASH_SIZE for c in path):
        return None
    hashes = list(path)
    if old & (old - 1) == 0:  # step 2
        hashes.insert(0, old_root)
    fn, sn = old - 1, new - 1  # step 3
    while fn & 1:  # step 4
        fn >>= 1
        sn >>= 1
    fr = sr = hashes[0]  # step 5
    for c in hashes[1:]:  # step 6
        if sn == 0:
            return None
        if fn & 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    return (fr, sr) if sn == 0 else None
