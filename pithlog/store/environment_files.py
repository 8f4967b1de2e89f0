"""What opening a store checks and brings up to date in its files, beside the environment
that :mod:`pithlog.store.environment` opens (``docs/store.md``, "Layout", "Map size,
processes, crashes", "Readers", "The disk"):

- A missing lock file is made with its blocks allocated (:func:`_allocate_lock_file`).
- A data file shorter than its newest meta page says is refused before it is mapped
  (:func:`_check_data_file`): reading past its end would kill the process (SIGBUS); on
  request every page is walked first (:func:`_walk`).
- The named databases are opened (:func:`_open_dbs`, :func:`_open_existing` read-only), the
  format and merge version checked (:func:`_check_format`), and a writable open migrates an
  older format (:func:`_migrate`) or catches the Merkle tree up (:func:`_catch_up_merkle`),
  in the same first commit (:func:`_first_commit`: a new store is made whole).
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import struct
from typing import Any, cast

import lmdb
import lmdb.verify

from pithlog.errors import StoreError
from pithlog.protocol.reduce import MERGE_VERSION
from pithlog.store import codec, format6, format7, keyindex, tree
from pithlog.store.environment_errors import _lmdb_errors
from pithlog.store.environment_walk import Walkers, walk_problems
from pithlog.store.layout import (
    DB_NAMES,
    FORMAT_2,
    FORMAT_3,
    FORMAT_4,
    FORMAT_6,
    FORMAT_VERSION,
    META_FORMAT,
    META_MERGE,
    META_MERKLE_SIZE,
    META_NEXT_SEQ,
    MIGRATES_FROM,
    SEQ,
    Txn,
)

LOCK_FILE_BYTES = 16 << 10
"""The size a new ``lock.mdb`` is allocated with: LMDB's table of readers (126 by default
take 8 KiB; a larger file holds more, LMDB sizes its table from it)."""

_OPEN_FOR_WRITING = ("open it once for writing, which completes it (`pithlog --store DIR "
                     "append --keyring KEYRING < /dev/null`), then read it")
"""What a ``store.upgrade`` message says to do: a read-only open never writes the store."""


def _allocate_lock_file(real: str) -> None:
    """Make a missing ``lock.mdb`` with its blocks allocated. LMDB makes it with
    ``ftruncate`` (a sparse file) and writes it through a shared mapping: on a full disk
    that write is a SIGBUS, where allocating first is an error (``store.disk``). Where the
    lock file exists, or cannot be made here (a folder this user cannot write, a read-only
    file system), LMDB does as it would have."""
    path = os.path.join(real, "lock.mdb")
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    except OSError:
        return
    try:
        os.posix_fallocate(fd, 0, LOCK_FILE_BYTES)
    except OSError as exc:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(path)
        if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EIO):
            raise StoreError("disk", f"no room for the lock file of {real}: "
                             f"{exc.strerror}") from exc  # fmt: skip
        return  # a file system without fallocate: LMDB makes the file
    os.close(fd)


# LMDB's meta page (lmdb.h / mdb.c, MDB_meta after the 16-byte page header, on a 64-bit
# build): magic and version (2 x uint32), address, map size, two MDB_db of 48 bytes each
# (the first's md_pad holds the page size), the last page number and the transaction id.
_META = struct.Struct("<II8xQ4x44x48xQQ")
_META_OFFSET = 16
_MDB_MAGIC = 0xBEEFC0DE
_MDB_DATA_VERSION = 1
_PAGE_SIZE_AT = _META_OFFSET + 24  # mm_dbs[0].md_pad


def _check_data_file(real: str, data: str, create: bool = False) -> None:
    """Refuse a data file shorter than its newest meta page says, before LMDB maps it:
    LMDB reads every page below the last through its memory map, and a page past the end
    of the file kills the process with SIGBUS (a truncated copy, a damaged disk). A file
    with no valid meta page is left to LMDB (``store.not_a_store``); one with a single
    valid meta page, or two that disagree on the page size, is damaged
    (``store.corrupted``: LMDB writes both when it makes the file, and would call it no
    LMDB file at all, :func:`_check_meta_pages`); an empty one is a store
    whose creation never reached its first commit (``store.missing``), unless this open
    may create the store: then another process may be making it right now, and LMDB's
    lock file orders the two (the first to hold it writes the meta pages)."""
    try:
        with open(data, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            head = f.read(_PAGE_SIZE_AT + 4)
            if size == 0 or (create and len(head) < _PAGE_SIZE_AT + 4):
                if create:
                    return  # being made, by this open or another process's
                raise StoreError("missing", f"no store at {real} yet: its data file is empty")
            if len(head) < _PAGE_SIZE_AT + 4:
                raise StoreError("corrupted", f"{data} is {size} bytes, shorter than one "
                                 "LMDB meta page")  # fmt: skip
            (page_size,) = struct.unpack_from("<I", head, _PAGE_SIZE_AT)
            metas: list[tuple[int, ...]] = []
            page_sizes: list[int] = []
            for page in (0, 1):
                if page_size < 512 or page_size & (page_size - 1):
                    break
                f.seek(page * page_size + _META_OFFSET)
                raw = f.read(_META.size)
                if len(raw) < _META.size:
                    raise StoreError("corrupted", f"{data} is {size} bytes, shorter than its "
                                     f"two meta pages of {page_size} bytes")  # fmt: skip
                metas.append(_META.unpack(raw))
                page_sizes.append(struct.unpack_from("<I", raw, _PAGE_SIZE_AT - _META_OFFSET)[0])
    except OSError as exc:
        raise StoreError("io", f"cannot read {data}: {exc.strerror or exc}") from exc
    valid = _check_meta_pages(data, struct.unpack_from("<II", head, _META_OFFSET), metas,
                              page_sizes)  # fmt: skip
    if not valid:
        return  # not LMDB's (or another build's): LMDB says so
    last_page = max(valid, key=lambda m: m[4])[3]  # LMDB uses the meta of the newest txn
    needed = (last_page + 1) * page_size
    if size < needed:
        raise StoreError("corrupted", f"{data} is {size} bytes but its meta page names page "
                         f"{last_page} ({needed} bytes): the file is truncated; restore it "
                         "from a backup")  # fmt: skip


def _check_meta_pages(
    data: str, first: tuple[int, ...], metas: list[tuple[int, ...]], page_sizes: list[int]
) -> list[tuple[int, ...]]:
    """The meta pages of ``data`` that are LMDB's (magic and data version), or none when
    the file is not LMDB's; ``first``: the magic and version of meta page 0, ``metas``
    both meta pages read at the page size page 0 names (none when that size is not one).
    LMDB reads both meta pages at open and refuses the file when either is not LMDB's
    (``MDB_INVALID``, "not an LMDB file"), so one sound meta page beside a damaged one is
    a damaged file (``store.corrupted``), not another kind of file (``store.not_a_store``,
    whose advice is to check ``--store``)."""
    def lmdb_meta(meta: tuple[int, ...]) -> bool:
        return meta[0] == _MDB_MAGIC and meta[1] == _MDB_DATA_VERSION

    if not metas:
        if lmdb_meta(first):
            raise StoreError("corrupted", f"{data}: its meta page 0 names no valid page "
                             "size: the file is damaged; restore it from a backup")  # fmt: skip
        return []
    valid = [m for m in metas if lmdb_meta(m)]
    if valid and len(valid) < len(metas):
        damaged = next(i for i, m in enumerate(metas) if not lmdb_meta(m))
        raise StoreError("corrupted", f"{data}: its meta page {damaged} is not LMDB's while "
                         "the other is: the file is damaged; restore it from a backup")  # fmt: skip
    if valid and page_sizes[0] != page_sizes[1]:
        raise StoreError("corrupted", f"{data}: its meta pages name two page sizes "
                         f"({page_sizes[0]}, {page_sizes[1]}): the file is damaged; restore "
                         "it from a backup")  # fmt: skip
    return valid


def _is_lmdb_file(real: str) -> bool:
    """Whether the data file of ``real`` begins with a meta page of LMDB's: LMDB refusing
    such a file as invalid (after :func:`_check_data_file` passed it) found a field of its
    newest meta page damaged, not a file of another kind."""
    try:
        with open(os.path.join(real, "data.mdb"), "rb") as f:
            head = f.read(_META_OFFSET + 8)
    except OSError:
        return False
    return len(head) == _META_OFFSET + 8 and struct.unpack_from("<II", head, _META_OFFSET) \
        == (_MDB_MAGIC, _MDB_DATA_VERSION)  # fmt: skip


def _walk(env: lmdb.Environment, real: str, walkers: Walkers | None = None) -> None:
    """Walk every page of the data file in Python (py-lmdb's offline verifier,
    :func:`lmdb.verify.verify`, which never hands the file to LMDB; in parts, by other
    processes, with ``walkers``: :mod:`pithlog.store.environment_walk`) and refuse it
    (``store.corrupted``) when any invariant LMDB relies on fails: a damaged page read
    through LMDB's memory map can kill the process (SIGBUS, SIGSEGV) where this walk only
    reports it. A read transaction is held meanwhile, so that a writer in another process
    reuses none of the pages the walk reads (LMDB keeps every page of a snapshot that a
    registered reader may see); LMDB reads only the meta pages to start it."""
    with env.begin():
        try:
            problems = walk_problems(os.path.join(real, "data.mdb"), walkers)
        except lmdb.verify.VerifyError as exc:
            raise StoreError("not_a_store", f"{real}: {exc}") from exc
        except OSError as exc:
            raise StoreError("io", f"cannot read {real}: {exc.strerror or exc}") from exc
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise StoreError("corrupted", f"the data file of {real} is damaged: {problems[0]}"
                         f"{more}")  # fmt: skip


def _open_dbs(env: lmdb.Environment, txn: Txn, real: str, create: bool) -> dict[str, Any]:
    """The store's named databases, opened (and for a new store, its meta written) in the
    write transaction ``txn``; a folder that holds no store, or another format, is refused."""
    ltxn = cast("lmdb.Transaction[bytes]", txn)  # what SharedEnvironment.write began
    if not create:
        try:
            env.open_db(b"meta", txn=ltxn, create=False)
        except lmdb.NotFoundError:
            _no_meta(txn, real)
    dbs = {name: env.open_db(name.encode("ascii"), txn=ltxn) for name in DB_NAMES}
    _check_format(txn, dbs, real, False)
    for name in LEGACY_DBS:
        try:
            legacy = env.open_db(name, txn=ltxn, create=False)
        except lmdb.NotFoundError:
            continue
        ltxn.drop(legacy, delete=True)
    return dbs


def _first_commit(env: lmdb.Environment, txn: Txn, real: str, create: bool) -> dict[str, Any]:
    """The first write transaction of a writable open (``environment._open_lmdb``): the
    named databases opened (made), the format recorded for a new store, and the Merkle tree
    caught up (or a migration started), all in one commit. A new store is thus made whole
    or not at all: a process killed while creating it leaves either nothing committed
    (``store.missing``) or an empty store that any open reads. (They were two commits: a
    kill between them left a store with a format and no ``merkle_size``, which a read-only
    open refused with ``store.upgrade``.)"""
    dbs = _open_dbs(env, txn, real, create)
    _catch_up_merkle(txn, dbs)
    return dbs


LEGACY_DBS = (b"copy_seq",)
"""Databases of older formats that format 6 does without, deleted by a writable open:
``copy_seq`` (event_id + copy hash -> seq) is what the pointers of ``events`` and
``evidence`` now hold."""


def _no_meta(txn: Txn, real: str) -> None:
    if not txn.stat()["entries"]:
        # data.mdb exists but nothing was ever committed to it: a first append killed
        # before its commit. No store yet, rather than a foreign one.
        raise StoreError("missing", f"no store at {real} yet: its creation was "
                         "interrupted before the first commit") from None  # fmt: skip
    raise StoreError("not_a_store", f"{real} holds no pithlog store") from None


def _open_existing(env: lmdb.Environment, real: str) -> dict[str, Any]:
    """The named databases of a store opened read-only. Each is opened in a transaction of
    py-lmdb's own (a handle opened in a read transaction of ours would be closed when the
    transaction goes back to py-lmdb's spare list). A store made by a pithlog that lacked
    one of them needs a writable open first, which creates it."""
    dbs = {}
    with _lmdb_errors():
        # ``meta`` first: an environment without it is no store at all (nothing committed
        # yet, or another program's), not a store of an older pithlog to be upgraded
        for name in sorted(DB_NAMES, key=lambda n: n != "meta"):
            try:
                dbs[name] = env.open_db(name.encode("ascii"), create=False)
            except lmdb.NotFoundError:
                if name == "meta":
                    with env.begin() as txn:
                        _no_meta(txn, real)
                raise StoreError("upgrade", f"the store at {real} has no {name!r} database "
                                 "yet; a read-only open does not write it: "
                                 f"{_OPEN_FOR_WRITING}") from None  # fmt: skip
    return dbs


def _check_format(txn: Txn, dbs: dict[str, Any], real: str, readonly: bool) -> None:
    """The store's format and merge version; a new store (a writable open) gets them."""
    meta = dbs["meta"]
    fmt = txn.get(META_FORMAT, db=meta)
    if fmt is None:
        if txn.stat(dbs["events"])["entries"] or txn.stat(dbs["seq"])["entries"]:
            # pithlog's own tables, holding a log: a store whose meta lost its entry (a
            # damaged page), not another program's environment (which has no such tables)
            raise StoreError("corrupted", f"{real} holds events but its meta has no format "
                             "entry: the store is damaged; restore it from a backup or "
                             "re-import an export")  # fmt: skip
        if readonly:
            raise StoreError("upgrade", f"the store at {real} was never initialized; a "
                             f"read-only open does not write it: {_OPEN_FOR_WRITING}")  # fmt: skip
        txn.put(META_FORMAT, FORMAT_VERSION, db=meta)
        txn.put(META_MERGE, MERGE_VERSION.encode("ascii"), db=meta)
        txn.put(META_NEXT_SEQ, SEQ.pack(1), db=meta)
    elif fmt not in (FORMAT_VERSION, *MIGRATES_FROM):  # the older: _migrate
        raise StoreError(
            "format",
            f"store format {fmt.decode('ascii', 'replace')!r}; this pithlog reads "
            f"{FORMAT_VERSION.decode()!r}",
        )
    merge = txn.get(META_MERGE, db=meta)
    if merge != MERGE_VERSION.encode("ascii"):
        if fmt == FORMAT_VERSION and (merge is None or not _MERGE_NAME.fullmatch(merge)):
            # every store of this format records its merge version: lost, or no name at all
            # (a flipped byte), it is a damaged page, not another pithlog's store
            held = "no merge_version entry" if merge is None else f"merge_version {merge!r}"
            raise StoreError("corrupted", f"{real} is of format {FORMAT_VERSION.decode()} but "
                             f"its meta has {held}: the store is damaged; restore it from a "
                             "backup or re-import an export")  # fmt: skip
        raise StoreError(
            "format",
            f"store merge_version {merge!r}; this pithlog implements {MERGE_VERSION}",
        )
    if fmt == FORMAT_VERSION:
        _check_tree_size(txn, dbs, real)
    if readonly and _needs_catch_up(txn, dbs):
        if fmt in MIGRATES_FROM:
            what = f"is of format {fmt.decode()}, to be migrated"
        elif format6.migrating(txn, dbs) or format7.migrating(txn, dbs):
            # a migration a writable open began and did not finish (killed, a full disk):
            # the format recorded is already this one, the layout not yet
            what = f"is being migrated to format {FORMAT_VERSION.decode()}, not yet finished"
        elif txn.get(META_MERKLE_SIZE, db=meta) is None and not txn.stat(dbs["seq"])["entries"]:
            # an empty store of format 7 without merkle_size: a pithlog that made a new
            # store in two commits (format and tables, then the tree's size), killed
            # between them; a writable open now makes it in one (_first_commit)
            what = ("is empty and its creation was interrupted before its Merkle tree was "
                    "recorded (an older pithlog made a new store in two commits)")
        else:
            what = "has a Merkle tree behind its log, to be caught up"
        raise StoreError("upgrade", f"the store at {real} {what}; a read-only open does not "
                         f"write it: {_OPEN_FOR_WRITING}")  # fmt: skip


_MERGE_NAME = re.compile(rb"[a-z0-9]+(?:[.-][a-z0-9]+)*")
"""What a merge version's name is made of (``pith-open-graph-merge-v1``, the spec's title):
a value of ``meta[merge_version]`` of another shape is no other pithlog's merge version but
a damaged one. (A byte flipped into another letter still makes a name: that one is
``store.format``, as another pithlog's would be.)"""


def _check_tree_size(txn: Txn, dbs: dict[str, Any], real: str) -> None:
    """A store of format 7 that holds events has ``merkle_size``: no pithlog left one
    without it (format 2 had no tree, and a format-7 store never was format 2 unmigrated;
    the move from format 5 drops the tree and its size under a cursor of its own,
    :func:`pithlog.store.format6.step`; an older pithlog's creation killed before its
    second commit left an empty store, see :func:`_first_commit`). Lost, it is a damaged
    page, refused: a writable open would rebuild the tree from ``seq`` over the damage
    (replay --verify then finds nothing), where a backup or an export is the repair."""
    if txn.get(META_MERKLE_SIZE, db=dbs["meta"]) is not None or format6.migrating(txn, dbs) \
            or not txn.stat(dbs["seq"])["entries"]:  # fmt: skip
        return
    raise StoreError("corrupted", f"{real} holds events but its meta has no merkle_size "
                     f"entry, which a store of format {FORMAT_VERSION.decode()} always "
                     "keeps: the store is damaged; restore it from a backup or re-import "
                     "an export")  # fmt: skip


def _needs_catch_up(txn: Txn, dbs: dict[str, Any]) -> bool:
    """What a writable open would write: a store of an older format, or one whose move to
    format 6 or 7 is under way (:mod:`pithlog.store.format6`, :mod:`pithlog.store.format7`),
    or a tree behind seq."""
    if txn.get(META_FORMAT, db=dbs["meta"]) in MIGRATES_FROM or format6.migrating(txn, dbs) \
            or format7.migrating(txn, dbs):  # fmt: skip
        return True
    size = tree.merkle_size(txn, dbs)
    return (txn.get(META_MERKLE_SIZE, db=dbs["meta"]) is None
            or txn.get(SEQ.pack(size + 1), db=dbs["seq"]) is not None)  # fmt: skip


def _catch_up_merkle(txn: Txn, dbs: dict[str, Any]) -> None:
    """On open: build the tree of a store that lacks it (or was appended to by a pithlog
    without it), or migrate a store of the format before (:func:`_migrate`). Nothing to do
    for a current one."""
    if _migrate(txn, dbs) or format6.migrating(txn, dbs) or not _needs_catch_up(txn, dbs):
        return  # a move to format 6 under way rebuilds the tree in steps of its own
    tree.merkle_sync(txn, dbs)  # nothing to add when only the verdicts are to be keyed anew


def _migrate(txn: Txn, dbs: dict[str, Any]) -> bool:
    """Bring a store of a format in :data:`MIGRATES_FROM` to :data:`FORMAT_VERSION`, one step
    after the other, in ``txn`` (the caller's write transaction, retried whole on a full map):
    2 -> 3 (leaves of 64 bytes and ``by_copy``); 3 -> 4 (the dictionary); 4 -> 5 (``by_key``,
    verdicts per key entry); then 5 -> 6 is started (:func:`pithlog.store.format6.start`:
    a cursor from which :func:`pithlog.store.format6.step` moves the copies to ``copies``
    and rewrites ``slots`` in transactions of their own, packing copies still stored raw,
    and finally builds the alias index), and 6 -> 7 (:func:`pithlog.store.format7.start`:
    format 7 recorded with a cursor from which :func:`pithlog.store.format7.step` keys the
    verdicts anew, after the 5 -> 6 steps). ``True`` when it started 5 -> 6, whose steps
    rebuild the Merkle tree (a format-6 store's tree is caught up as a current one's)."""
    fmt = txn.get(META_FORMAT, db=dbs["meta"])
    if fmt not in MIGRATES_FROM:
        return False
    if fmt == FORMAT_6:
        format7.start(txn, dbs)  # records FORMAT_VERSION
        return False
    if fmt == FORMAT_2:
        fmt = tree.migrate_leaf_data(txn, dbs)  # records FORMAT_3
    if fmt == FORMAT_3:
        codec.start_migration(txn, dbs)
        fmt = FORMAT_4
    if fmt == FORMAT_4:
        keyindex.migrate_3_to_5(txn, dbs)  # records FORMAT_5
    format6.start(txn, dbs)
    format7.start(txn, dbs)  # records FORMAT_VERSION
    return True
