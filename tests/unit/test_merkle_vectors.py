"""pithlog.transparency.merkle against the known-answer vectors of transparency-dev/merkle.

The vectors and the probes derived from them are those of that repository's proof
generator, ``cmd/proofgen/main.go`` (commit 417fb0c314750d94e53942e9f92e79b6d35915db), which
writes its ``testdata/inclusion`` and ``testdata/consistency`` files; the tree is the RFC 6962
test tree of ``testonly/constants.go`` (``LeafInputs``). The hashes below are copied from
those files; the probes are rebuilt here the way the generator builds them (Go's ``uint64``
arithmetic included: ``0 - 1`` is ``2**64 - 1``).
"""

from __future__ import annotations

import pytest

from pithlog.transparency import merkle as m

U64 = 1 << 64
SOME_HASH = bytes.fromhex("abacaba000000000000000000000000000000000000000000060061e00123456")
EMPTY = bytes.fromhex("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")

LEAF_INPUTS = [bytes.fromhex(h) for h in (
    "", "00", "10", "2021", "3031", "40414243", "5051525354555657",
    "606162636465666768696a6b6c6d6e6f",
)]  # fmt: skip
"""testonly.LeafInputs()."""

ROOTS = [bytes.fromhex(h) for h in (
    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
)]  # fmt: skip
"""``roots``: the root of the tree of ``i + 1`` leaves."""


def _hashes(*hexes: str) -> list[bytes]:
    return [bytes.fromhex(h) for h in hexes]


INCLUSION = [  # (leafIdx, one-based as in proofgen; size; proof)
    (1, 1, []),
    (1, 8, _hashes("96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
                   "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
                   "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4")),
    (6, 8, _hashes("bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
                   "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
                   "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7")),
    (3, 3, _hashes("fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125")),
    (2, 5, _hashes("6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
                   "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
                   "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b")),
]  # fmt: skip

CONSISTENCY = [  # (size1, size2, proof)
    (1, 1, []),
    (1, 8, _hashes("96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
                   "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
                   "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4")),
    (6, 8, _hashes("0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
                   "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
                   "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7")),
    (2, 5, _hashes("5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
                   "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b")),
    (6, 7, _hashes("0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
                   "b08693ec2e721597130641e8211e7eedccb4c26413963eee6c1e2ed16ffb1a5f",
                   "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7")),
]  # fmt: skip

Probe = tuple[int, int, bytes, bytes, list[bytes], str, bool]


def _inclusion_probes() -> list[Probe]:
    """(index, size, root, leaf hash, proof, desc, wantErr), as proofgen writes them."""
    probes: list[Probe] = []
    for leaf_idx, size, proof in INCLUSION:
        i, root, leaf = leaf_idx - 1, ROOTS[size - 1], m.leaf_hash(LEAF_INPUTS[leaf_idx - 1])
        probes.append((i, size, root, leaf, proof, "happy path", False))
        probes += [
            ((i - 1) % U64, size, root, leaf, proof, "leafIdx sub @1", True),
            (i + 1, size, root, leaf, proof, "leafIdx plus @1", True),
            (i ^ 2, size, root, leaf, proof, "leafIdx XOR @2", True),
            (i, size * 2, root, leaf, proof, "treeSize mul @2", True),
            (i, size // 2, root, leaf, proof, "treeSize div @2", True),
            (i, size, root, b"WrongLeaf", proof, "wrong leaf", True),
            (i, size, EMPTY, leaf, proof, "empty root", True),
            (i, size, SOME_HASH, leaf, proof, "random root", True),
            (i, size, root, leaf, [*proof, b""], "trailing garbage", True),
            (i, size, root, leaf, [*proof, root], "trailing root", True),
            (i, size, root, leaf, [b"", *proof], "preceding garbage", True),
            (i, size, root, leaf, [root, *proof], "preceding root", True),
        ]
        for at in range(len(proof)):
            wrong = list(proof)
            wrong[at] = bytes([wrong[at][0] ^ 8]) + wrong[at][1:]
            probes.append((i, size, root, leaf, wrong, f"modified proof[{at}] bit @3", True))
        if proof:
            probes.append((i, size, root, leaf, proof[:-1], "removed component", True))
        if len(proof) > 1:
            wrong = [proof[0], SOME_HASH, *proof[1:]]
            probes.append((i, size, root, leaf, wrong, "inserted component", True))
    for index, size in ((0, 0), (0, 1), (1, 0), (2, 1)):  # testdata/inclusion/additional
        probes += [
            (index, size, b"", SOME_HASH, [], "random leaf", True),
            (index, size, EMPTY, b"", [], "empty root", True),
            (index, size, EMPTY, SOME_HASH, [], "empty root and random leaf", True),
        ]
    one = m.leaf_hash(b"data")  # testdata/inclusion/single-entry
    probes += [
        (0, 1, one, one, [], "matching root and leaf", False),
        (0, 1, one, b"", [], "empty leaf", True),
        (0, 1, b"", one, [], "empty root", True),
        (0, 1, b"", b"", [], "empty root and leaf", True),
    ]
    return probes


def test_the_tree_and_the_proofs_pithlog_builds_are_the_vectors() -> None:
    subtree = m.subtree_from_leaves([m.leaf_hash(d) for d in LEAF_INPUTS])
    assert [m.root(n, subtree) for n in range(1, 9)] == ROOTS
    assert m.root(0, subtree) == EMPTY
    for leaf_idx, size, proof in INCLUSION:
        assert m.inclusion_path(leaf_idx - 1, size, subtree) == proof
    for size1, size2, proof in CONSISTENCY:
        assert m.consistency_path(size1, size2, subtree) == proof


@pytest.mark.parametrize("probe", _inclusion_probes(), ids=lambda p: f"{p[0]}-{p[1]}-{p[5]}")
def test_inclusion_probes(probe: Probe) -> None:
    index, size, root, leaf, proof, _, want_error = probe
    assert m.verify_inclusion(leaf, index, size, proof, root) is not want_error


def _consistency_probes() -> list[Probe]:
    """(size1, size2, root1, root2, proof, desc, wantErr), as proofgen writes them."""
    probes: list[Probe] = []
    for size1, size2, proof in CONSISTENCY:
        root1, root2 = ROOTS[size1 - 1], ROOTS[size2 - 1]
        probes.append((size1, size2, root1, root2, proof, "happy path", False))
        if not proof:
            continue  # proofgen corrupts only the proofs that are not empty
        probes += [
            (size1 - 1, size2, root1, root2, proof, "size1 sub @1", True),
            (size1 + 1, size2, root1, root2, proof, "size1 plus @1", True),
            (size1 ^ 2, size2, root1, root2, proof, "size1 XOR @2", True),
            (size1, size2 * 2, root1, root2, proof, "size2 mul @2", True),
            (size1, size2 // 2, root1, root2, proof, "size2 div @2", True),
            (size1, size2, b"WrongRoot", root2, proof, "wrong root1", True),
            (size1, size2, root1, b"WrongRoot", proof, "wrong root2", True),
            (size1, size2, root2, root1, proof, "swapped roots", True),
            (size1, size2, root1, root2, [], "empty proof", True),
            (size1, size2, root1, root2, [*proof, b""], "trailing garbage", True),
            (size1, size2, root1, root2, [*proof, root1], "trailing root1", True),
            (size1, size2, root1, root2, [*proof, root2], "trailing root2", True),
            (size1, size2, root1, root2, [b"", *proof], "preceding garbage", True),
            (size1, size2, root1, root2, [root1, *proof], "preceding root1", True),
            (size1, size2, root1, root2, [root2, *proof], "preceding root2", True),
            (size1, size2, root1, root2, [proof[0], *proof], "preceding proof @0", True),
            (size1, size2, root1, root2, proof[:-1], "truncated proof", True),
        ]
        for at in range(len(proof)):
            wrong = list(proof)
            wrong[at] = bytes([wrong[at][0] ^ 16]) + wrong[at][1:]
            probes.append((size1, size2, root1, root2, wrong, f"modified proof@{at} bit @4", True))
    one, two = b"don't care 1", b"don't care 2"  # testdata/consistency/additional
    probes += [
        (0, 0, one, two, [], "sizes are equal (zero) but roots are not", True),
        (1, 1, one, two, [], "sizes are equal (one) but roots are not", True),
        (0, 0, one, one, [], "sizes are equal (zero) and proof is empty", True),
        (0, 1, one, two, [], "size1 is zero and does not equal size2", True),
        (1, 1, two, two, [], "sizes are equal (one) and proof is empty", False),
        (1, 0, one, two, [], "size1 is greater than size2", True),
        (2, 1, one, two, [], "size1 is greater than size2 again", True),
        (1, 2, one, two, [], "sizes do not watch and proof is empty", True),
        (0, 0, EMPTY, two, [], "roots do not match and sizes are zero", True),
        (1, 1, EMPTY, two, [], "roots do not not match and sizes are one", True),
        (0, 0, EMPTY, EMPTY, [EMPTY], "sizes match but proof is not empty and sizes are zero",
         True),
        (1, 1, EMPTY, EMPTY, [EMPTY], "sizes match but proof is not empty and sizes are one",
         True),
        # pithlog parts from the generator here, on purpose: the empty tree (its root the
        # SHA-256 of no bytes) is a prefix of every tree, with an empty proof (the case RFC
        # 9162 2.1.4.2 leaves out, and tlog-witness's add-checkpoint from "old 0"); the
        # generator calls every proof from size 0 useless and wants it refused
        (0, 1, EMPTY, two, [], "size1 is zero and size2 is not zero", False),
        (0, 1, EMPTY, EMPTY, [EMPTY], "consistency check on empty tree (size1 is zero) is "
         "useless", True),
    ]  # fmt: skip
    return probes


@pytest.mark.parametrize("probe", _consistency_probes(), ids=lambda p: f"{p[0]}-{p[1]}-{p[5]}")
def test_consistency_probes(probe: Probe) -> None:
    size1, size2, root1, root2, proof, _, want_error = probe
    assert m.verify_consistency(size1, size2, root1, root2, proof) is not want_error
