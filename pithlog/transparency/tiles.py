"""C2SP ``tlog-tiles``: the Merkle tree served as tiles, and its verification
(``docs/network.md``). The arithmetic is :mod:`pithlog.transparency.merkle`'s.

c2sp.org/tlog-tiles (the editor's copy in the C2SP repository, ``tlog-tiles.md``):

- A tile of level ``L`` (0-63) and index ``N`` is the sequence of up to 256 hashes
  ``MTH(D[(N * 256 + i) * 256**L : (N * 256 + i + 1) * 256**L])``, ``i`` from 0: level 0
  holds leaf hashes, a hash of level ``L >= 1`` is the root of one *full* tile of level
  ``L - 1`` (a perfect subtree of ``256**L`` leaves, Merkle level ``8 * L``).
- A full tile holds 256 hashes (8,192 bytes); the last tile of a level may be *partial*,
  ``W = floor(s / 256**L) mod 256`` hashes (1-255) for a tree of size ``s``, and is never
  hashed into the level above. An empty tile is never served.
- Paths: ``tile/<L>/<N>[.p/<W>]`` and ``tile/entries/<N>[.p/<W>]``; ``N`` is written in
  zero-padded groups of three digits, every group but the last prefixed with ``x``
  (1234067 -> ``x001/x234/067``).
- Entry bundles: each entry a big-endian uint16 length and its bytes; entry ``i`` of
  bundle ``N`` is leaf ``N * 256 + i``, and its RFC 9162 leaf hash is the level-0 tile's
  hash ``i``. pithlog's entries are the 64-byte leaf data (event_id || copy hash).

Verification follows Go's ``sumdb/tlog`` tile reader and Tessera's ``fsck``: the root of a
tree size is re-derived from its right edge (the partial tiles of that size, which hold
the complete subtrees the tree splits into), and every full tile is checked against its
parent, the tile of the level above whose hash it must produce, up to the right edge.

Pure: values in, values out; the server and the mirror bring the bytes.
"""

from __future__ import annotations

import hashlib
import re
import struct
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from pithlog.errors import TileError, register
from pithlog.transparency import merkle

register(
    {
        "tile.path": "not a tlog-tiles path: tile/<L>/<N>[.p/<W>] or tile/entries/<N>[.p/<W>], "
        "N in x-prefixed three-digit groups (c2sp.org/tlog-tiles)",
        "tile.size": "a tile or bundle has another length than its width says: the server "
        "sent a damaged or truncated tile",
        "tile.mismatch": "a tile does not hash to its parent's hash, or the tiles do not lead "
        "to the checkpoint's root: the served tree is not the signed one",
        "tile.bundle": "an entry bundle is malformed or its entries do not hash to the level-0 "
        "tile: the served entries are not the signed ones",
    }
)

HEIGHT = 8
"""Tile height: each tile spans 8 levels of the Merkle tree."""

WIDTH = 1 << HEIGHT
"""Hashes in a full tile (256)."""

MAX_LEVEL = 63
MAX_ENTRY = 0xFFFF
"""An entry of a bundle is at most 65,535 bytes (its uint16 length prefix)."""

_GROUPS = 7
"""Groups of three digits in ``N``: enough for every index up to ``2**63-1``, the most
(:data:`~pithlog.transparency.merkle.MAX_TREE_SIZE`, Go's ``int64`` ``Tile.N``)."""

_DECIMAL = re.compile(r"0|[1-9][0-9]{0,2}")
_LENGTH = struct.Struct(">H")


ENTRIES = -1
"""The level :func:`parse_tile_path` gives an entry bundle (``tile/entries/...``)."""


@dataclass(frozen=True, order=True)
class Tile:
    """Tile ``index`` of ``level`` holding ``width`` hashes (1-256; 256: full). Level
    :data:`ENTRIES` is the entry bundle of the same leaves as level-0 tile ``index``."""

    level: int
    index: int
    width: int = WIDTH

    @property
    def full(self) -> bool:
        return self.width == WIDTH

    def path(self) -> str:
        """The tile's path under the log's prefix: ``tile/<L>/<N>[.p/<W>]`` (a bundle's:
        ``tile/entries/<N>[.p/<W>]``)."""
        if self.level == ENTRIES:
            return self.entries_path()
        return f"tile/{self.level}/{tile_path_suffix(self.index, self.width)}"

    def entries_path(self) -> str:
        """The path of the entry bundle of the same leaves (level 0 or a bundle only)."""
        if self.level not in (0, ENTRIES):
            raise ValueError("entry bundles hold leaves: level 0 only")
        return f"tile/entries/{tile_path_suffix(self.index, self.width)}"


# --- paths --------------------------------------------------------------------------------


def encode_index(index: int) -> str:
    """``N`` as tlog-tiles writes it: 5 -> ``005``, 1234067 -> ``x001/x234/067``."""
    if index < 0:
        raise ValueError("a tile index is 0 or more")
    groups: list[str] = []
    while True:
        groups.append(f"{index % 1000:03d}")
        index //= 1000
        if not index:
            break
    groups.reverse()
    return "/".join([*("x" + g for g in groups[:-1]), groups[-1]])


def tile_path_suffix(index: int, width: int = WIDTH) -> str:
    """``<N>`` or ``<N>.p/<W>``."""
    if not 1 <= width <= WIDTH:
        raise ValueError(f"a tile's width is 1 to {WIDTH}")
    return encode_index(index) + ("" if width == WIDTH else f".p/{width}")


def _path_error(path: str, why: str) -> TileError:
    return TileError("path", f"{path[:200]!r}: {why}")


def parse_index(elements: Sequence[str], path: str = "") -> int:
    """``N`` from its path elements, in the one form :func:`encode_index` writes (so that
    each tile has one URL, and a cache one copy): ``x000`` never leads."""
    if not 1 <= len(elements) <= _GROUPS:
        raise _path_error(path, f"N is 1 to {_GROUPS} path elements")
    value = 0
    for at, element in enumerate(elements):
        last = at == len(elements) - 1
        digits = element if last else element[1:]
        if (not last and not element.startswith("x")) or len(digits) != 3 \
                or not digits.isascii() or not digits.isdigit():  # fmt: skip
            raise _path_error(path, "N is zero-padded three-digit elements, all but the last "
                              "prefixed with 'x'")  # fmt: skip
        if at == 0 and not last and digits == "000":
            raise _path_error(path, "N has no leading x000 element")
        value = value * 1000 + int(digits)
    if value > merkle.MAX_TREE_SIZE:
        raise _path_error(path, "N is at most 2**63-1")
    return value


def parse_tile_path(path: str) -> Tile:
    """The tile a path under ``tile/`` names: ``<L>/<N>[.p/<W>]``, or ``entries/<N>[.p/<W>]``
    for an entry bundle (level :data:`ENTRIES`). Raises ``tile.path``."""
    elements = path.split("/")
    head, rest = elements[0], elements[1:]
    if head == "entries":
        level = ENTRIES
    elif _DECIMAL.fullmatch(head) and int(head) <= MAX_LEVEL:
        level = int(head)
    else:
        raise _path_error(path, f"the level is a decimal 0 to {MAX_LEVEL} (or 'entries')")
    width = WIDTH
    if len(rest) >= 2 and rest[-2].endswith(".p"):
        w = rest[-1]
        if not _DECIMAL.fullmatch(w) or not 1 <= int(w) < WIDTH:
            raise _path_error(path, f"a partial width is a decimal 1 to {WIDTH - 1}")
        width = int(w)
        rest = [*rest[:-2], rest[-2][:-2]]
    return Tile(level, parse_index(rest, path), width)


# --- which tiles a tree size has ----------------------------------------------------------


def hashes_at(level: int, size: int) -> int:
    """How many complete hashes tile level ``level`` has for a tree of ``size`` leaves:
    ``floor(size / 256**level)``."""
    return size >> (HEIGHT * level)


def tile_width(level: int, index: int, size: int) -> int:
    """The width of tile ``index`` of ``level`` in the tree of ``size`` leaves: 256 when it
    is full, 1-255 when it is the level's partial tile, 0 when it does not exist."""
    return max(0, min(WIDTH, hashes_at(level, size) - index * WIDTH))


def tile_at(level: int, index: int, size: int) -> Tile | None:
    """The tile as it is for ``size`` (``None``: empty, not served)."""
    width = tile_width(level, index, size)
    return Tile(level, index, width) if width else None


def levels(size: int) -> int:
    """How many tile levels hold at least one hash for ``size``."""
    count = 0
    while hashes_at(count, size):
        count += 1
    return count


def tiles_of(size: int) -> Iterator[Tile]:
    """Every tile (full and partial) of the tree of ``size`` leaves, level by level."""
    for level in range(levels(size)):
        n = hashes_at(level, size)
        for index in range((n + WIDTH - 1) // WIDTH):
            yield Tile(level, index, min(WIDTH, n - index * WIDTH))


def right_edge(size: int) -> list[Tile]:
    """The partial tiles of ``size``, lowest level first: what its root is derived from.
    Every hash they hold is one of the complete subtrees the tree splits into."""
    out = []
    for level in range(levels(size)):
        width = hashes_at(level, size) % WIDTH
        if width:
            out.append(Tile(level, hashes_at(level, size) // WIDTH, width))
    return out


def parent(tile: Tile, size: int) -> tuple[Tile, int]:
    """The tile one level up that holds a full tile's hash in the tree of ``size``, and the
    position of that hash in it. A partial tile has no parent (it is never hashed up)."""
    if not tile.full:
        raise ValueError("a partial tile is never hashed into the level above")
    up = tile_at(tile.level + 1, tile.index // WIDTH, size)
    if up is None or up.width <= tile.index % WIDTH:
        raise ValueError(f"{tile.path()} is not a full tile of the tree of {size} leaves")
    return up, tile.index % WIDTH


# --- contents -----------------------------------------------------------------------------


def tile_data(tile: Tile, perfect: merkle.PerfectHash) -> bytes:
    """A tile's bytes: its ``width`` hashes, each ``perfect(8 * level, N * 256 + i)`` (the
    store's subtree hashes)."""
    first = tile.index * WIDTH
    return b"".join(perfect(HEIGHT * tile.level, first + i) for i in range(tile.width))


def split_hashes(data: bytes, tile: Tile) -> list[bytes]:
    """The hashes of a tile's bytes, which must be exactly ``width * 32`` (``tile.size``)."""
    if len(data) != tile.width * merkle.HASH_SIZE:
        raise TileError("size", f"{tile.path()} is {len(data)} bytes, not "
                        f"{tile.width * merkle.HASH_SIZE}")  # fmt: skip
    h = merkle.HASH_SIZE
    return [data[i : i + h] for i in range(0, len(data), h)]


def perfect_root(hashes: Sequence[bytes]) -> bytes:
    """The Merkle root of a power-of-two run of hashes (a perfect subtree)."""
    layer = list(hashes)
    if not layer or len(layer) & (len(layer) - 1):
        raise ValueError("a perfect subtree has a power-of-two number of hashes")
    while len(layer) > 1:
        layer = [merkle.node_hash(layer[i], layer[i + 1]) for i in range(0, len(layer), 2)]
    return layer[0]


def tile_root(data: bytes) -> bytes:
    """The hash a full tile contributes to the level above: the root of its 256 hashes."""
    return perfect_root(split_hashes(data, Tile(0, 0)))


def encode_bundle(entries: Sequence[bytes]) -> bytes:
    """An entry bundle: each entry as a big-endian uint16 length and its bytes."""
    out = bytearray()
    for entry in entries:
        if len(entry) > MAX_ENTRY:
            raise ValueError(f"an entry is at most {MAX_ENTRY} bytes")
        out += _LENGTH.pack(len(entry)) + entry
    return bytes(out)


def decode_bundle(data: bytes, tile: Tile) -> list[bytes]:
    """The ``width`` entries of a bundle; a short entry or leftover bytes are ``tile.bundle``."""
    if len(data) >= 2:
        # the common case, every entry of one length (pithlog's are all 64 bytes): sliced
        # at once, after checking that every length prefix is the first one
        step = 2 + _LENGTH.unpack_from(data, 0)[0]
        if (len(data) == tile.width * step and data[0::step] == data[0:1] * tile.width
                and data[1::step] == data[1:2] * tile.width):  # fmt: skip
            return [data[at + 2 : at + step] for at in range(0, len(data), step)]
    entries: list[bytes] = []
    at = 0
    while at < len(data):
        if at + 2 > len(data):
            raise TileError("bundle", f"{tile.entries_path()}: a length prefix is cut at byte "
                            f"{at}")  # fmt: skip
        (n,) = _LENGTH.unpack_from(data, at)
        if at + 2 + n > len(data):
            raise TileError("bundle", f"{tile.entries_path()}: entry {len(entries)} runs past "
                            "the end")  # fmt: skip
        entries.append(data[at + 2 : at + 2 + n])
        at += 2 + n
        if len(entries) > tile.width:
            raise TileError("bundle", f"{tile.entries_path()} holds more than {tile.width} "
                            "entries")  # fmt: skip
    if len(entries) != tile.width:
        raise TileError("bundle", f"{tile.entries_path()} holds {len(entries)} entries, not "
                        f"{tile.width}")  # fmt: skip
    return entries


def verify_bundle(data: bytes, tile: Tile, level0: bytes) -> list[bytes]:
    """The entries of a bundle whose leaf hashes are the (verified) level-0 tile ``level0``
    of the same index and width; otherwise ``tile.bundle``."""
    entries = decode_bundle(data, tile)
    hashes = split_hashes(level0, tile)
    sha256 = hashlib.sha256  # merkle.leaf_hash, inlined: this runs for every leaf mirrored
    leaves = [sha256(b"\x00" + entry).digest() for entry in entries]
    if b"".join(leaves) != level0:
        i = next(i for i, (a, b) in enumerate(zip(leaves, hashes, strict=True)) if a != b)
        raise TileError("bundle", f"entry {i} of {tile.entries_path()} (leaf "
                        f"{tile.index * WIDTH + i}) does not hash to its level-0 tile")
    return entries


# --- verification -------------------------------------------------------------------------

TileReader = Callable[[Tile], bytes]
"""``read(tile)``: the bytes served for a tile (unverified)."""


def subtree_hashes(size: int) -> list[tuple[int, int]]:
    """The complete perfect subtrees the tree of ``size`` leaves splits into, left to right,
    as ``(Merkle level, index)``: one per bit of ``size`` (RFC 9162: ``MTH`` splits at the
    largest power of two, so its root folds these right to left)."""
    out = []
    start = 0
    for level in range(size.bit_length() - 1, -1, -1):
        if size >> level & 1:
            out.append((level, start >> level))
            start += 1 << level
    return out


def root_from_edge(size: int, edge: Mapping[Tile, bytes]) -> bytes:
    """``MTH(D[size])`` from the right-edge tiles of ``size`` (:func:`right_edge`, keyed by
    tile, bytes checked for length): each complete subtree of Merkle level ``8 L + r`` is
    the root of ``2**r`` hashes of the level-``L`` partial tile."""
    if size == 0:
        return merkle.EMPTY_ROOT
    hashes = {t: split_hashes(edge[t], t) for t in right_edge(size)}
    parts: list[bytes] = []
    for level, index in subtree_hashes(size):
        tile_level, r = divmod(level, HEIGHT)
        first = index << r
        tile = Tile(tile_level, first // WIDTH, hashes_at(tile_level, size) % WIDTH)
        offset = first % WIDTH
        parts.append(perfect_root(hashes[tile][offset : offset + (1 << r)]))
    out = parts.pop()
    while parts:
        out = merkle.node_hash(parts.pop(), out)
    return out


@dataclass
class VerifiedTiles:
    """Tiles of one tree (size and root, from a verified checkpoint), each fetched once and
    kept only once verified: the right edge against the root, every full tile against its
    parent, recursively up to the right edge. ``read`` fetches a tile's bytes."""

    size: int
    root: bytes
    read: TileReader
    _known: dict[Tile, bytes] | None = None

    def _edge(self) -> dict[Tile, bytes]:
        if self._known is None:
            edge = {t: self.read(t) for t in right_edge(self.size)}
            if root_from_edge(self.size, edge) != self.root:
                raise TileError("mismatch", f"the right-edge tiles of size {self.size} do not "
                                "lead to the checkpoint's root")  # fmt: skip
            self._known = edge
        return self._known

    def tile(self, level: int, index: int) -> bytes:
        """The verified bytes of tile ``index`` of ``level`` as it is at ``size``."""
        known = self._edge()
        tile = tile_at(level, index, self.size)
        if tile is None:
            raise ValueError(f"tile {level}/{index} is empty at size {self.size}")
        if tile in known:
            return known[tile]
        data = self.read(tile)
        split_hashes(data, tile)
        up, at = parent(tile, self.size)
        expected = split_hashes(self.tile(up.level, up.index), up)[at]
        if tile_root(data) != expected:
            raise TileError("mismatch", f"{tile.path()} does not hash to hash {at} of its "
                            f"parent {up.path()}")  # fmt: skip
        known[tile] = data
        return data

    def leaf_hashes(self, index: int) -> list[bytes]:
        """The verified leaf hashes of level-0 tile ``index``."""
        tile = tile_at(0, index, self.size)
        if tile is None:
            raise ValueError(f"no leaves in tile {index} at size {self.size}")
        return split_hashes(self.tile(0, index), tile)

    def entries(self, index: int, bundle: bytes) -> list[bytes]:
        """The entries of bundle ``index`` (its bytes as served), verified against the
        level-0 tile (``tile.bundle``)."""
        tile = tile_at(0, index, self.size)
        if tile is None:
            raise ValueError(f"no leaves in bundle {index} at size {self.size}")
        return verify_bundle(bundle, tile, self.tile(0, index))

    def forget(self) -> None:
        """Drop the verified tiles (all but nothing: the right edge is read again)."""
        self._known = None
