"""Split-view files (docs/evidence.md) checked offline: two signed checkpoints of one origin
that cannot be one history are proven, and every file that shows no such thing (one tree,
an honest growth, two logs, no proof, a proof of other sizes or of another tree) is refused
with ``evidence.does_not_hold``."""

from __future__ import annotations

import hashlib

import pytest

from pithlog.errors import EvidenceError
from pithlog.testing import test_key, test_keyring
from pithlog.transparency import merkle
from pithlog.transparency.checkpoint import Checkpoint, sign_checkpoint
from pithlog.transparency.evidence import (
    ProvenSplitView,
    split_view_proof,
    verify_split_view_proof,
)
from pithlog.transparency.proofs import ConsistencyProof

ORIGIN = "registry.test.invalid"
KEYRING = test_keyring()
LOG = [hashlib.sha256(b"leaf %d" % i).digest() for i in range(20)]
REWRITTEN = [hashlib.sha256(b"other %d" % i).digest() for i in range(20)]
"""Another history of the same log: every leaf differs, so every prefix's root does."""


def _tree(leaves: list[bytes]) -> merkle.SubtreeHash:
    return merkle.subtree_from_leaves([merkle.leaf_hash(d) for d in leaves])


def signed(size: int, leaves: list[bytes] = LOG, origin: str = ORIGIN) -> bytes:
    root = merkle.root(size, _tree(leaves))
    return sign_checkpoint(Checkpoint(origin, size, root), test_key("registry"))


def proof(old: int, new: int, leaves: list[bytes] = LOG, first_root: bool = False) -> bytes:
    """The consistency proof of the tree of ``leaves``, as a log serves it, or (with
    ``first_root``) with the root of its first ``old`` leaves put first, as a mirror puts
    it for a power-of-two size (RFC 9162 2.1.4.2 step 2)."""
    path = merkle.consistency_path(old, new, _tree(leaves))
    if first_root:
        path.insert(0, merkle.root(old, _tree(leaves)))
    return ConsistencyProof(old, new, tuple(path)).encoded()


def verify(accepted: bytes, served: bytes, consistency: bytes | None) -> ProvenSplitView:
    return verify_split_view_proof(split_view_proof(accepted, served, consistency), KEYRING)


@pytest.mark.parametrize(("accepted", "served", "consistency", "sizes"), [
    (signed(7), signed(7, REWRITTEN), None, (7, 7)),
    # the log's own proof leads to its served root from another first tree than it signed
    (signed(5), signed(9, REWRITTEN), proof(5, 9, REWRITTEN), (5, 9)),
    (signed(4), signed(9, REWRITTEN), proof(4, 9, REWRITTEN, first_root=True), (4, 9)),
    # an older tree served: the mirror's proof is from the accepted (larger) tree
    (signed(9), signed(5, REWRITTEN), proof(5, 9), (5, 9)),
], ids=["one size two roots", "rewritten", "rewritten power of two",
        "older tree served"])  # fmt: skip
def test_two_histories_are_proven(accepted: bytes, served: bytes, consistency: bytes | None,
                                  sizes: tuple[int, int]) -> None:  # fmt: skip
    proven = verify(accepted, served, consistency)
    assert proven.origin == ORIGIN and proven.sizes == sizes


@pytest.mark.parametrize(("accepted", "served", "consistency"), [
    (signed(7), signed(7), None),
    (signed(5), signed(9), proof(5, 9)),
    (signed(9), signed(5), proof(5, 9)),
    (signed(4), signed(9), proof(4, 9, first_root=True)),
    (signed(7), signed(7, REWRITTEN, ORIGIN + "/b"), None),
    (signed(5), signed(9, REWRITTEN, ORIGIN + "/b"), proof(5, 9, REWRITTEN)),
    (signed(5), signed(9, REWRITTEN), None),
    # a path that would show the split, under other sizes than the checkpoints'
    (signed(5), signed(9, REWRITTEN), ConsistencyProof(5, 10, tuple(merkle.consistency_path(
        5, 9, _tree(REWRITTEN)))).encoded()),
    (signed(5), signed(9, REWRITTEN), proof(5, 9, LOG[:3] + REWRITTEN[3:])),
    (signed(4), signed(9, REWRITTEN), proof(4, 9, REWRITTEN)),
], ids=[
    "one tree", "honest growth", "older honest tree", "honest growth power of two",
    "two logs one size", "two logs", "no proof", "proof of other sizes",
    "proof of a third tree", "power of two without its root",
])  # fmt: skip
def test_what_shows_no_split_view_does_not_hold(accepted: bytes, served: bytes,
                                                consistency: bytes | None) -> None:  # fmt: skip
    with pytest.raises(EvidenceError) as refused:
        verify(accepted, served, consistency)
    assert refused.value.code == "evidence.does_not_hold", refused.value.message
