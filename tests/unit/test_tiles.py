"""C2SP tlog-tiles arithmetic (pithlog.transparency.tiles), held to the RFC 9162 tree of
pithlog.transparency.merkle: paths, widths, tile contents, bundles, and the verifier."""

from __future__ import annotations

import hashlib

import pytest

from pithlog.errors import TileError
from pithlog.transparency import merkle
from pithlog.transparency import tiles as t
from pithlog.transparency.tiles import Tile


def leaves(n: int) -> list[bytes]:
    return [hashlib.sha256(b"leaf %d" % i).digest() * 2 for i in range(n)]


class Tree:
    """A tree in memory, its perfect subtrees computed by merkle's recursion."""

    def __init__(self, n: int) -> None:
        self.data = leaves(n)
        self.hashes = [merkle.leaf_hash(d) for d in self.data]
        self.subtree = merkle.subtree_from_leaves(self.hashes)
        self.cache: dict[tuple[int, int], bytes] = {}

    def perfect(self, level: int, index: int) -> bytes:
        key = (level, index)
        if key not in self.cache:
            self.cache[key] = self.subtree(index << level, (index + 1) << level)
        return self.cache[key]

    def root(self, size: int) -> bytes:
        return merkle.root(size, self.subtree)

    def read(self, size: int, reads: list[Tile] | None = None) -> t.TileReader:
        def read(tile: Tile) -> bytes:
            assert tile == t.tile_at(tile.level, tile.index, size)  # only tiles that exist
            if reads is not None:
                reads.append(tile)
            return t.tile_data(tile, self.perfect)

        return read


@pytest.mark.parametrize(
    ("index", "path"),
    [(0, "000"), (5, "005"), (999, "999"), (1000, "x001/000"), (1234067, "x001/x234/067"),
     (2**63 - 1, "x009/x223/x372/x036/x854/x775/807")],
)  # fmt: skip
def test_index_paths(index: int, path: str) -> None:
    assert t.encode_index(index) == path
    assert t.parse_index(path.split("/")) == index


def test_a_tile_index_is_at_most_2_63_minus_1() -> None:
    """As a tree size is (Go's tlog.Tile.N is an int64): N of 2**63 was read, and
    reached the store as a tile of leaves past 2**71."""
    for path in ("x009/x223/x372/x036/x854/x775/808", "x018/x446/x744/x073/x709/x551/615",
                 "x999/x999/x999/x999/x999/x999/999"):  # fmt: skip
        with pytest.raises(TileError, match=r"tile\.path"):
            t.parse_index(path.split("/"))
        with pytest.raises(TileError, match=r"tile\.path"):
            t.parse_tile_path("entries/" + path)


def test_tile_paths() -> None:
    assert Tile(0, 1234067).path() == "tile/0/x001/x234/067"
    assert Tile(2, 5, 17).path() == "tile/2/005.p/17"
    assert Tile(0, 5, 17).entries_path() == "tile/entries/005.p/17"
    assert t.parse_tile_path("0/x001/x234/067") == Tile(0, 1234067)
    assert t.parse_tile_path("63/005.p/255") == Tile(63, 5, 255)
    assert t.parse_tile_path("entries/x001/000.p/1") == Tile(t.ENTRIES, 1000, 1)
    assert Tile(t.ENTRIES, 1000, 1).path() == "tile/entries/x001/000.p/1"


@pytest.mark.parametrize(
    "path",
    ["", "0", "0/", "64/000", "01/000", "-1/000", "a/000", "0/5", "0/0005", "0/x000/005",
     "0/001/002", "0/x01/002", "0/x001/02", "0/000.p/0", "0/000.p/256", "0/000.p/07",
     "0/000.p/", "0/000.p", "0/00a", "0/x001", "entries/", "entries/000.p/1/2",
     "0/x001/x002/x003/x004/x005/x006/x007/008", "0/\u0661\u0662\u0663", "0/000/.p/3",
     "0/y001/234", "0/0012p/5"],
)  # fmt: skip
def test_malformed_tile_paths(path: str) -> None:
    with pytest.raises(TileError, match=r"tile\.path"):
        t.parse_tile_path(path)


def test_widths_of_the_spec_example() -> None:
    # tlog-tiles: "a tree of size 70,000 will be represented by 273 full level 0 tiles, one
    # partial level 0 tile of width 112, one full level 1 tile, one partial level 1 tile of
    # width 17, and one partial level 2 tile of width 1"; size 256: a full level 0 tile and
    # a partial level 1 tile of width 1.
    all_tiles = list(t.tiles_of(70_000))
    assert sum(1 for x in all_tiles if x.level == 0 and x.full) == 273
    assert [x for x in all_tiles if not x.full] == t.right_edge(70_000) == [
        Tile(0, 273, 112), Tile(1, 1, 17), Tile(2, 0, 1)]  # fmt: skip
    assert [x for x in all_tiles if x.level == 1] == [Tile(1, 0), Tile(1, 1, 17)]
    assert list(t.tiles_of(256)) == [Tile(0, 0), Tile(1, 0, 1)]
    assert list(t.tiles_of(0)) == [] and t.right_edge(0) == []
    assert t.tile_width(0, 273, 70_000) == 112 and t.tile_width(0, 274, 70_000) == 0
    assert t.tile_width(0, 272, 70_000) == 256


def test_tile_contents_are_the_trees_hashes() -> None:
    tree = Tree(70_000 // 64)  # 1,093 leaves: four full level-0 tiles, one partial
    size = len(tree.data)
    for tile in t.tiles_of(size):
        hashes = t.split_hashes(t.tile_data(tile, tree.perfect), tile)
        span = 1 << (8 * tile.level)
        for i, h in enumerate(hashes):
            first = (tile.index * 256 + i) * span
            assert h == tree.subtree(first, first + span)  # MTH(D[(n*256+i)*256**l : ...])
        if tile.full and tile.level == 0:
            a = tile.index * 256
            assert t.tile_root(t.tile_data(tile, tree.perfect)) == tree.subtree(a, a + 256)


def test_root_from_the_right_edge_for_every_size() -> None:
    tree = Tree(600)
    sizes = [*range(0, 300), 511, 512, 513, 599, 600]
    for size in sizes:
        edge = {tile: t.tile_data(tile, tree.perfect) for tile in t.right_edge(size)}
        assert t.root_from_edge(size, edge) == tree.root(size), size


def test_root_from_the_right_edge_of_a_large_tree() -> None:
    """Sizes past 256**2, where level 2 exists, without 65,536 leaves in memory: the
    perfect hashes of a tree of identical leaves depend on the level only."""
    leaf = merkle.leaf_hash(b"x" * 64)
    by_level = [leaf]
    for _ in range(40):
        by_level.append(merkle.node_hash(by_level[-1], by_level[-1]))

    def perfect(level: int, index: int) -> bytes:
        return by_level[level]

    subtree = merkle.subtree_from_perfect(perfect)
    for size in (65_535, 65_536, 65_537, 70_000, 16_777_216 + 257, 2**33 + 5):
        edge = {tile: t.tile_data(tile, perfect) for tile in t.right_edge(size)}
        assert t.root_from_edge(size, edge) == merkle.root(size, subtree), size


def test_verified_tiles_read_each_tile_once_and_accept_the_honest_tree() -> None:
    tree = Tree(1100)
    for size in (1, 255, 256, 257, 1024, 1100):
        reads: list[Tile] = []
        verified = t.VerifiedTiles(size, tree.root(size), tree.read(size, reads))
        for index in range((size + 255) // 256):
            held = tree.hashes[:size]
            assert verified.leaf_hashes(index) == held[index * 256 : (index + 1) * 256]
            tile = t.tile_at(0, index, size)
            assert tile is not None
            bundle = t.encode_bundle(tree.data[index * 256 : index * 256 + tile.width])
            assert verified.entries(index, bundle) == tree.data[index * 256 :][: tile.width]
        assert len(reads) == len(set(reads)) == len(list(t.tiles_of(size)))


def test_verified_tiles_refuse_a_wrong_root_or_tile() -> None:
    tree = Tree(1100)
    size = 1100
    with pytest.raises(TileError, match="mismatch"):
        t.VerifiedTiles(size, tree.root(size - 1), tree.read(size)).tile(0, 0)

    def liar(victim: Tile, flip: int = 0) -> t.TileReader:
        honest = tree.read(size)

        def read(tile: Tile) -> bytes:
            data = bytearray(honest(tile))
            if tile == victim:
                data[flip] ^= 1
            return bytes(data)

        return read

    # a full level-0 tile altered: its parent (the level-1 partial tile) refuses it
    verified = t.VerifiedTiles(size, tree.root(size), liar(Tile(0, 2), 100))
    verified.tile(0, 1)
    with pytest.raises(TileError, match="mismatch"):
        verified.tile(0, 2)
    # a right-edge tile altered: the root refuses it
    for victim in t.right_edge(size):
        with pytest.raises(TileError, match="mismatch"):
            t.VerifiedTiles(size, tree.root(size), liar(victim)).tile(0, 0)
    # a truncated tile
    honest = tree.read(size)
    verified = t.VerifiedTiles(size, tree.root(size), lambda x: honest(x)[:-1])
    with pytest.raises(TileError, match=r"tile\.size"):
        verified.tile(0, 0)


def test_bundles() -> None:
    tree = Tree(300)
    tile = Tile(0, 1, 44)
    data = tree.data[256:300]
    bundle = t.encode_bundle(data)
    assert bundle[:2] == b"\x00\x40" and len(bundle) == 44 * 66
    level0 = t.tile_data(Tile(0, 1, 44), tree.perfect)
    assert t.verify_bundle(bundle, tile, level0) == data
    for bad in (bundle[:-1], bundle + b"\x00", bundle + b"\x00\x00",
                t.encode_bundle(data[:-1]), t.encode_bundle([*data[:-1], b"x" * 64])):
        with pytest.raises(TileError, match=r"tile\.bundle"):
            t.verify_bundle(bad, tile, level0)
    with pytest.raises(ValueError):
        t.encode_bundle([b"x" * 65_536])
    assert t.decode_bundle(t.encode_bundle([b"", b"a" * 65_535]), Tile(0, 0, 2)) == [
        b"", b"a" * 65_535]  # fmt: skip
    # entries of other lengths whose total is that of equal ones (3 x (2 + 2) bytes): read
    # one by one, not sliced as if all were as long as the first
    mixed = [b"\x00\x02", b"", b"\x00\x02\x00\x02"]
    assert len(t.encode_bundle(mixed)) == 3 * 4
    assert t.decode_bundle(t.encode_bundle(mixed), Tile(0, 0, 3)) == mixed
    # a length prefix that differs from the first in its high byte only (64 -> 320): the
    # bundle is read entry by entry and refused, not sliced as 66-byte entries because
    # its low bytes agree and its length is that of equal ones
    high = bytearray(bundle)
    high[66] = 0x01
    assert len(high) == 44 * 66 and high[67] == bundle[1]
    with pytest.raises(TileError, match=r"tile\.bundle"):
        t.verify_bundle(bytes(high), tile, level0)


def test_parent() -> None:
    assert t.parent(Tile(0, 260), 70_000) == (Tile(1, 1, 17), 4)
    assert t.parent(Tile(0, 3), 70_000) == (Tile(1, 0), 3)
    with pytest.raises(ValueError):
        t.parent(Tile(0, 273, 112), 70_000)
    # a full tile the tree does not hold yet: its hash would be the one past the end of
    # the partial tile above (5 hashes, positions 0-4), which has no position 5
    with pytest.raises(ValueError):
        t.parent(Tile(0, 5), 5 * 256)
    assert t.parent(Tile(0, 4), 5 * 256) == (Tile(1, 0, 5), 4)


def test_paths_of_tiles_that_cannot_be() -> None:
    # a negative index has no path (its groups would never end); widths are 1 to 256
    with pytest.raises(ValueError):
        t.encode_index(-1)
    for width in (0, t.WIDTH + 1):
        with pytest.raises(ValueError):
            t.tile_path_suffix(5, width)
    with pytest.raises(ValueError):  # entry bundles hold leaves: level 0 only
        Tile(1, 0).entries_path()
    with pytest.raises(ValueError):
        t.perfect_root([bytes(32)] * 6)


def test_a_partial_tile_has_no_parent_even_where_the_level_above_is_full() -> None:
    # Tile(0, 0, 5) is the partial tile of a tree of 5 leaves: in a tree of 70,000 the
    # tile above is full, and a partial tile is still never hashed into it (tlog-tiles)
    with pytest.raises(ValueError):
        t.parent(Tile(0, 0, 5), 70_000)


def test_a_bundle_entry_running_past_the_end_is_refused() -> None:
    bundle = t.encode_bundle([b"a" * 64])[:40]
    with pytest.raises(TileError, match="runs past the end"):
        t.decode_bundle(bundle, Tile(0, 0, 1))


def test_verified_tiles_refuse_a_tile_the_tree_does_not_have() -> None:
    tree = Tree(300)
    verified = t.VerifiedTiles(300, tree.root(300), tree.read(300))
    with pytest.raises(ValueError, match="empty at size 300"):
        verified.tile(0, 2)
