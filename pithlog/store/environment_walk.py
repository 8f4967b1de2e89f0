"""The walk of a data file's pages before LMDB reads it (``docs/store.md``, "The disk"), in
parts that other processes can take.

py-lmdb's offline verifier (:func:`lmdb.verify.verify`) reads every page of the file in
Python, never through LMDB's map, and reports each broken invariant. It walks the free
list and the main database, then each named database, one after the other: on a store of
100,000 registry events, about 2 s of one core, during which the other cores wait (0.42 s
with the sweep of plain leaf pages of :class:`_PlainLeaves`, which both walks use). The
named databases are independent B-trees of similar size, so :func:`walk_problems` cuts
the walk there:

1. :func:`plan`: this process reads the meta pages and walks the main database alone
   (one page or two), listing the named databases and their page counts; they are shared
   out among the parts, largest first, to the part with the fewest pages so far.
2. :func:`walk_part`, in each process: the same meta pages and the main database again,
   then only the part's own named databases; the first part also walks the free list
   and the checks of the meta pages' records. A part returns its problems, by where
   they were found, and the pages it reached.
3. :func:`merge`: the problems in the order the whole walk lists them (the first part's
   before the named databases, each named database's in the main database's order, the
   free list's records), a page that two parts reached (reachable twice), and the check
   that the pages reached and the free pages cover the file exactly once.

The parts use the verifier's own walk of each tree (its class, subclassed); the driver of
:func:`walk_part` follows :meth:`lmdb.verify._Verifier.verify`. A verifier without the
parts this relies on, a snapshot that moved between the plan and a part (another meta
page committed), or a part lost: the whole walk runs here instead, as without parts.
``tests/store/test_walk.py`` holds both walks to the same problems on damaged files.
"""

from __future__ import annotations

import os
import struct
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import lmdb.verify

_V: Any = lmdb.verify  # its private parts are untyped

_MODULE_PARTS = ("_Verifier", "_key_cmp", "_data_cmp", "_cmp_int", "_bad_db_flags", "_E",
                 "_cmp_lexical")  # fmt: skip
_VERIFIER_PARTS = ("detect_engine", "load_metas", "_verify_tree", "_decode_idl", "_check_cover",
                   "_walk_leaf", "_pg_lower", "_pg_upper")  # fmt: skip
SPLITTABLE = all(hasattr(_V, name) for name in _MODULE_PARTS) and all(
    hasattr(_V._Verifier, name) for name in _VERIFIER_PARTS
)
"""Whether this py-lmdb's verifier has what :func:`walk_part` drives (and
:class:`_PlainLeaves` relies on)."""

MIN_PARTS_BYTES = 4 << 20
"""A data file smaller than this is walked whole: a part's process is not worth it."""


@dataclass(frozen=True)
class Part:
    """One process's share of the walk (:func:`walk_part`)."""

    path: str
    """The data file."""
    trees: frozenset[str]
    """The named databases this part walks, as the verifier names them (``main/NAME``)."""
    txnid: int
    """The committed transaction the plan read: a part that reads another gives up."""
    first: bool
    """The first part also walks the free list and checks the meta pages' records."""


@dataclass(frozen=True)
class Found:
    """What a part found (:func:`walk_part`)."""

    before: list[str]
    """Problems before the named databases (meta records, free list, main database)."""
    trees: dict[str, list[str]]
    """Problems of each named database the part walked."""
    after: list[str]
    """Problems of the free list's records (the first part)."""
    live: bytes
    """One byte per page: 1 where the part reached it."""
    free: bytes
    """One byte per page: 1 where the free list names it (the first part; else empty)."""


_ORDER = getattr(_V, "_E", "<" if sys.byteorder == "little" else ">")
_U16 = struct.Struct(_ORDER + "H")
_NODE = struct.Struct(_ORDER + "HHHH")
"""A node's header: the value's size (two halves), its flags (``F_BIGDATA``, ``F_SUBDATA``,
``F_DUPDATA``: none for a plain value), the key's size."""


class _PlainLeaves(_V._Verifier if SPLITTABLE else object):  # type: ignore[misc]
    """The verifier, with each leaf page of plain values in order proven in one sweep.

    The verifier's walk of a leaf page (``_walk_leaf``, then ``_leaf_value`` per node) costs
    about 1.4 microseconds per node in Python, most of it calls and copies: on 100,000
    registry events, 1.5 s of CPU for a million nodes, a tenth of ``replay --verify``. Almost
    every leaf page is the same simple case: nodes within the page, keys in order, each a
    plain value (no node flag) within the page. :meth:`_plain_leaf` checks exactly what the
    verifier's walk checks of such a page, with one unpack per node and no copy of a
    value, and does to the walk's state what the verifier's walk would (the last key, the
    entries counted). Any other page (a free list's, a node with a flag, anything out of
    bounds or out of order) is walked by the verifier's own code, which says what is wrong
    in its words: the problems found are the same either way (``tests/store/test_walk.py``
    damages files at random and compares this walk with the verifier's).
    """

    def _walk_leaf(self, ctx: dict[str, Any], pgno: int, buf: bytes) -> None:
        if not self._plain_leaf(ctx, buf):
            super()._walk_leaf(ctx, pgno, buf)

    def _plain_leaf(self, ctx: dict[str, Any], buf: bytes) -> bool:
        """Whether ``buf`` is a leaf page the verifier's walk would find nothing wrong with,
        all its nodes plain values; if so, the walk's state is brought past it."""
        if ctx["is_free"]:
            return False
        psize, pagebase, hdrsz = self.psize, self.pagebase, self.hdrsz
        lower, upper = self._pg_lower(buf, 0), self._pg_upper(buf, 0)
        floor = hdrsz - pagebase
        if lower < floor or upper > psize - pagebase or lower > upper:
            return False  # _check_btree_bounds would say so
        numkeys = (lower - floor) >> 1
        lowest = upper + pagebase
        last = ctx["last_key"]
        key_cmp = ctx["key_cmp"]
        lexical = key_cmp is _V._cmp_lexical
        pad = 1 if self.eng["has_txnid"] else 0  # LMDB 1.0 puts a value at an even offset
        node = _NODE.unpack_from
        for i in range(numkeys):
            o = _U16.unpack_from(buf, hdrsz + 2 * i)[0] + pagebase
            if o + 8 > psize or o < lowest:
                return False
            lo, hi, flags, ksize = node(buf, o)
            end = o + 8 + ksize
            if flags or end > psize:
                return False
            key = buf[o + 8 : end]
            if last is not None and (key <= last if lexical else key_cmp(key, last) <= 0):
                return False
            last = key
            if end + (ksize & pad) + (lo | hi << 16) > psize:
                return False
        if numkeys:
            ctx["last_key"] = bytes(last)
            ctx["entries"] += numkeys
        return True


class _Walker(_PlainLeaves):
    """The verifier, walking only the named databases in ``trees`` and listing all."""

    def __init__(self, f: Any, size: int, trees: frozenset[str]) -> None:
        super().__init__(f, size)
        self.trees = trees
        self.listed: list[tuple[str, int]] = []
        """Each named database met in the main database: its name and pages."""
        self.spans: dict[str, tuple[int, int]] = {}
        """Where each walked named database's problems lie in ``errors``."""
        self.own: bytes | None = None
        """``live`` when the first named database was met: the pages of the meta records,
        the free list and the main database itself."""
        self._inside = False

    def _verify_tree(self, name: str, db: Any, key_cmp: Any, dup_cmp: Any, is_free: bool) -> Any:
        if self._inside or is_free or not name.startswith("main/"):
            return super()._verify_tree(name, db, key_cmp, dup_cmp, is_free)
        # a named database, met by the main database's walk
        if self.own is None:
            self.own = bytes(self.live)
        self.listed.append((name, db.branch_pages + db.leaf_pages + db.overflow_pages))
        if name not in self.trees:
            return 0, 0
        start = len(self.errors)
        self._inside = True
        try:
            return super()._verify_tree(name, db, key_cmp, dup_cmp, is_free)
        finally:
            self._inside = False
            self.spans[name] = (start, len(self.errors))


def _start(f: Any, size: int, trees: frozenset[str]) -> _Walker:
    walker = _Walker(f, size, trees)
    walker.detect_engine()
    walker.load_metas()
    walker.live = bytearray(walker.next_pgno)
    walker.free = bytearray(walker.next_pgno)
    return walker


def _walk_main(walker: _Walker) -> None:
    flags = walker.meta.main.flags
    walker._verify_tree("main", walker.meta.main, _V._key_cmp(flags), _V._data_cmp(flags),
                        is_free=False)  # fmt: skip


def plan(path: str, parts: int) -> tuple[list[str], list[Part]] | None:
    """The parts of the walk of the data file at ``path``: its named databases shared out
    among at most ``parts`` parts, after the names of all in the order the main database
    lists them; ``None`` when it is not worth cutting (one part, a
    small file, fewer than two named databases) or cannot be (:data:`SPLITTABLE`).
    Raises :class:`lmdb.verify.VerifyError` and :class:`OSError` as the whole walk does."""
    if parts < 2 or not SPLITTABLE or os.path.getsize(path) < MIN_PARTS_BYTES:
        return None
    with open(path, "rb") as f:
        walker = _start(f, os.fstat(f.fileno()).st_size, frozenset())
        _walk_main(walker)
    if len(walker.listed) < 2:
        return None
    shares: list[list[str]] = [[] for _ in range(min(parts, len(walker.listed)))]
    loads = [0] * len(shares)
    for name, pages in sorted(walker.listed, key=lambda item: -item[1]):
        least = loads.index(min(loads))
        shares[least].append(name)
        loads[least] += pages
    order = [name for name, _ in walker.listed]
    return order, [Part(path, frozenset(share), walker.meta.txnid, i == 0)
                   for i, share in enumerate(shares)]  # fmt: skip


def walk_part(part: Part) -> Found | None:
    """Walk one part (in a process of its own); ``None`` when the file's committed
    transaction is no longer the plan's."""
    with open(part.path, "rb") as f:
        walker = _start(f, os.fstat(f.fileno()).st_size, part.trees)
        if walker.meta.txnid != part.txnid:
            return None
        if part.first:  # as lmdb.verify._Verifier.verify begins
            meta = walker.meta
            if _V._bad_db_flags(meta.free.flags):
                walker.err(f"freeDB has invalid flag combination 0x{meta.free.flags:x}")
            if _V._bad_db_flags(meta.main.flags):
                walker.err(f"main DB has invalid flag combination 0x{meta.main.flags:x}")
            if meta.main.pad > walker.psize - walker.hdrsz:
                walker.err(f"main DB md_pad {meta.main.pad} exceeds usable page space")
            walker._verify_tree("freeDB", meta.free, _V._cmp_int, None, is_free=True)
        _walk_main(walker)
        walked = len(walker.errors)
        if part.first:
            for txnid, data in walker.free_records:
                walker._decode_idl(txnid, data)
    errors: list[str] = walker.errors
    first = min((start for start, _ in walker.spans.values()), default=walked)
    live = bytes(walker.live)
    if not part.first and walker.own is not None:  # the first part reports those pages
        own = int.from_bytes(walker.own, "little")
        live = (int.from_bytes(live, "little") & ~own).to_bytes(len(live), "little")
    return Found(
        before=errors[:first] if part.first else [],
        trees={name: errors[a:b] for name, (a, b) in walker.spans.items()},
        after=errors[walked:],
        live=live,
        free=bytes(walker.free) if part.first else b"",
    )


def merge(order: Sequence[str], found: Sequence[Found]) -> list[str]:
    """The problems of the whole walk from its parts' (``order``: the named databases in
    the order the main database lists them)."""
    errors = list(found[0].before)
    by_tree = {name: problems for f in found for name, problems in f.trees.items()}
    for name in order:
        errors += by_tree.get(name, [])
    errors += found[0].after
    reached = 0
    twice = 0
    for f in found:
        live = int.from_bytes(f.live, "little")
        twice |= reached & live
        reached |= live
    if twice:  # each byte is 0 or 1: a set bit is the lowest of its page's byte
        page = ((twice & -twice).bit_length() - 1) // 8
        errors.append(f"page {page} is reachable more than once (from two named databases; "
                      f"{twice.bit_count()} page(s) in all)")  # fmt: skip
    pages = len(found[0].live)
    cover = _V._Verifier(None, 0)
    cover.next_pgno = pages
    cover.live = bytearray(reached.to_bytes(pages, "little"))
    cover.free = bytearray(found[0].free)
    cover._check_cover()
    errors += cover.errors
    limit = int(_V._Verifier.MAX_ERRORS)  # where the whole walk stops listing
    if len(errors) > limit:
        errors = [*errors[:limit], "... (further errors suppressed)"]
    return errors


Runner = Callable[[list[Part]], list[Found | None] | None]
"""Runs :func:`walk_part` on each part, elsewhere, and returns what each found in order
(``None`` for a part that gave up); ``None`` when the parts could not be run."""


@dataclass(frozen=True)
class Walkers:
    """Processes that can take parts of a walk: ``parts`` of them, run by ``run``."""

    parts: int
    run: Runner


def walk_problems(path: str, walkers: Walkers | None = None) -> list[str]:
    """The problems py-lmdb's verifier finds in the data file at ``path`` (an empty list:
    none), walked in parts by ``walkers`` when given and the file is worth cutting
    (:func:`plan`), else here, whole. Raises :class:`lmdb.verify.VerifyError` (the file
    is not an LMDB data file) and :class:`OSError`."""
    planned = plan(path, walkers.parts) if walkers is not None else None
    if planned is not None and walkers is not None:
        order, cut = planned
        found = walkers.run(cut)
        if found is not None and all(f is not None for f in found):
            return merge(order, [f for f in found if f is not None])
    if not SPLITTABLE:
        problems: list[str] = _V.verify(path, subdir=False)
        return problems
    with open(path, "rb") as f:  # as lmdb.verify.verify does, with the plain leaves' sweep
        whole: list[str] = _PlainLeaves(f, os.fstat(f.fileno()).st_size).verify()
        return whole

