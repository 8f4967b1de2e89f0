"""The page walk in parts (pithlog.store.environment_walk) finds what py-lmdb's verifier
finds walking the whole file, on sound and damaged files, and `replay --verify` hands its
parts to the workers it started early."""

from __future__ import annotations

import io
import json
import os
import random
import struct
from pathlib import Path
from typing import Any

import eventgen as g
import lmdb.verify
import pytest

from pithlog.cli import main
from pithlog.protocol.checks import check_alone
from pithlog.protocol.events import admit
from pithlog.store import Store
from pithlog.store import environment_walk as walk
from pithlog.store.replay_processes import EarlyWorkers
from pithlog.testing import test_keyring_entries

splittable = pytest.mark.skipif(not walk.SPLITTABLE, reason="py-lmdb's verifier changed")


def test_this_py_lmdb_s_verifier_can_be_walked_in_parts() -> None:
    """Not skipped: pyproject asks for lmdb>=3.0, and a release whose private verifier
    lacks what the split walk drives would make every open with a check walk the data file
    whole, in one process, and skip the tests below. Fail here instead, so that the change
    is seen (and the walk brought to the new verifier, or the requirement bounded)."""
    assert walk.SPLITTABLE, "py-lmdb's verifier no longer has what environment_walk drives"


@pytest.fixture(scope="module")
def sound(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store of 60 piths (a data file of several named databases)."""
    folder = tmp_path_factory.mktemp("walk") / "store"
    rng = random.Random(5)
    lines = [g.encoded(e) for e in g.mixed_events(rng, piths=60, per_pith=4)
             if check_alone(admit(e), g.KEYRING) is None]  # fmt: skip
    with Store.open(folder) as store:
        store.append(lines, g.KEYRING)
    return folder


@pytest.fixture(autouse=True)
def any_size(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(walk, "MIN_PARTS_BYTES", 0)  # the test stores are small


def here(parts: list[walk.Part]) -> list[walk.Found | None]:
    """Run the parts in this process, one after the other."""
    return [walk.walk_part(part) for part in parts]


def whole(path: Path) -> list[str] | str:
    try:
        problems: list[str] = lmdb.verify.verify(str(path), subdir=False)  # type: ignore[no-untyped-call]
    except lmdb.verify.VerifyError as exc:
        return f"VerifyError: {exc}"
    return problems


def in_parts(path: Path, parts: int) -> list[str] | str:
    try:
        return walk.walk_problems(str(path), walk.Walkers(parts, here))
    except lmdb.verify.VerifyError as exc:
        return f"VerifyError: {exc}"


@splittable
def test_the_parts_share_out_every_named_database_once(sound: Path) -> None:
    planned = walk.plan(str(sound / "data.mdb"), 3)
    assert planned is not None
    order, parts = planned
    assert len(parts) == 3 and parts[0].first and not any(p.first for p in parts[1:])
    names = [name for part in parts for name in part.trees]
    assert sorted(names) == sorted(order) and len(set(names)) == len(names)
    assert {"main/copies", "main/seq", "main/events", "main/by_pith"} <= set(order)
    assert in_parts(sound / "data.mdb", 3) == [] == whole(sound / "data.mdb")


@splittable
def test_a_file_not_worth_cutting_is_walked_whole(
    sound: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(walk, "MIN_PARTS_BYTES", 1 << 40)
    assert walk.plan(str(sound / "data.mdb"), 2) is None
    assert walk.plan(str(sound / "data.mdb"), 1) is None


def _damage(source: bytes, rng: random.Random) -> bytes:
    raw = bytearray(source)
    how = rng.randrange(3)
    if how == 0:  # truncated
        return bytes(raw[: rng.randrange(2 * 4096, len(raw))])
    for _ in range(rng.randrange(1, 64)):  # bytes overwritten past the meta pages
        at = rng.randrange(2 * 4096, len(raw))
        raw[at] = rng.randrange(256) if how == 1 else 0xFF
    return bytes(raw)


@splittable
@pytest.mark.parametrize("parts", [2, 3, 5])
def test_damaged_files_give_the_problems_of_the_whole_walk(sound: Path, tmp_path: Path,
                                                           parts: int) -> None:  # fmt: skip
    source = (sound / "data.mdb").read_bytes()
    rng = random.Random(parts)
    damaged = 0
    for _ in range(25):
        path = tmp_path / "data.mdb"
        path.write_bytes(_damage(source, rng))
        expected = whole(path)
        assert in_parts(path, parts) == expected
        damaged += bool(expected)
    assert damaged >= 15  # the damage was seen, not only walked past



def _leaf_pages(data: bytes) -> list[int]:
    """The numbers of the B-tree leaf pages of an LMDB 0.9 data file of 4 KiB pages (page
    header: mp_pgno 8 bytes, mp_pad 2, mp_flags 2, mp_lower 2, mp_upper 2)."""
    return [n for n in range(2, len(data) // 4096)
            if struct.unpack_from("<H", data, n * 4096 + 10)[0] == 0x02]  # fmt: skip


def _damage_leaf(data: bytes, rng: random.Random) -> bytes:
    """One damage to a leaf page's nodes, of the kinds the plain-leaf sweep itself checks
    (it hands such a page to the verifier's walk): keys out of order, a node pointer out of
    bounds, a node flag, a key or value longer than the page, the bounds of the page."""
    raw = bytearray(data)
    page = rng.choice(_leaf_pages(data)) * 4096
    lower, upper = struct.unpack_from("<HH", raw, page + 12)
    numkeys = (lower - 16) >> 1
    i = rng.randrange(max(numkeys, 1))
    node = page + struct.unpack_from("<H", raw, page + 16 + 2 * i)[0]
    how = rng.randrange(7)
    if how == 0 and numkeys > 1:  # two node pointers swapped: keys out of order
        j = (i + 1) % numkeys
        a, b = page + 16 + 2 * i, page + 16 + 2 * j
        raw[a : a + 2], raw[b : b + 2] = raw[b : b + 2], raw[a : a + 2]
    elif how == 1:  # a node pointer below mp_upper, or past the page
        struct.pack_into("<H", raw, page + 16 + 2 * i, rng.choice([upper - 2, 4095, 0]))
    elif how == 2:  # a node flag
        struct.pack_into("<H", raw, node + 4, rng.choice([1, 2, 4, 0x8000]))
    elif how == 3:  # the key's size past the page
        struct.pack_into("<H", raw, node + 6, rng.choice([4096, 5000, 65535]))
    elif how == 4:  # the value's size past the page
        struct.pack_into("<H", raw, node, 65535)
    elif how == 5:  # mp_lower / mp_upper out of order
        struct.pack_into("<HH", raw, page + 12, upper + 2, upper)
    else:  # a byte of a key changed (order, or nothing the walk can see)
        ksize = struct.unpack_from("<H", raw, node + 6)[0]
        if ksize:
            raw[node + 8 + rng.randrange(ksize)] ^= 1 << rng.randrange(8)
    return bytes(raw)


@splittable
def test_the_plain_leaf_sweep_finds_what_the_verifier_finds(
    sound: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Leaf pages damaged where the sweep of ``_PlainLeaves`` looks: the whole walk and the
    walk in parts (both with the sweep) find exactly what py-lmdb's verifier finds; and on
    a sound file the verifier's own leaf walk is left only the free list's pages."""
    source = (sound / "data.mdb").read_bytes()
    calls = []
    own: Any = lmdb.verify._Verifier._walk_leaf

    def counted(self: Any, ctx: dict[str, Any], *args: Any) -> Any:
        calls.append(ctx["name"])
        return own(self, ctx, *args)

    monkeypatch.setattr(lmdb.verify._Verifier, "_walk_leaf", counted)
    assert walk.walk_problems(str(sound / "data.mdb")) == []
    assert set(calls) <= {"freeDB", "main"}
    rng = random.Random(11)
    damaged = 0
    for _ in range(60):
        path = tmp_path / "data.mdb"
        path.write_bytes(_damage_leaf(source, rng))
        calls.clear()
        expected = whole(path)
        assert walk.walk_problems(str(path)) == expected
        assert in_parts(path, 3) == expected
        damaged += bool(expected)
    assert damaged >= 40

@splittable
def test_a_page_reached_from_two_parts_is_reported(sound: Path, tmp_path: Path) -> None:
    """Two named databases made to share a root page: each part reaches it once, and only
    the merge can see it twice."""
    data = bytearray((sound / "data.mdb").read_bytes())
    planned = walk.plan(str(sound / "data.mdb"), 2)
    assert planned is not None
    _, parts = planned
    a = sorted(parts[0].trees)[0]
    b = sorted(parts[1].trees)[0]
    roots = _roots(sound / "data.mdb")
    data[roots[b][0] : roots[b][0] + 8] = roots[a][1].to_bytes(8, "little")
    path = tmp_path / "data.mdb"
    path.write_bytes(bytes(data))
    got = in_parts(path, 2)
    assert isinstance(got, list) and any("from two named databases" in p for p in got)
    assert isinstance(whole(path), list) and whole(path)


def _roots(path: Path) -> dict[str, tuple[int, int]]:
    """Each named database: (offset in the file of its record's root page number, root)."""
    records: dict[str, bytes] = {}

    class Lister(walk._Walker):
        def _verify_tree(self, name: str, db: Any, *rest: Any, **kw: Any) -> Any:
            if name.startswith("main/") and not self._inside:
                # struct MDB_db: md_pad, md_flags, md_depth, four counts, md_root
                records[name] = struct.pack("<IHHQQQQQ", db.pad, db.flags, db.depth,
                                            db.branch_pages, db.leaf_pages,
                                            db.overflow_pages, db.entries, db.root)  # fmt: skip
            return super()._verify_tree(name, db, *rest, **kw)

    with open(path, "rb") as f:
        lister = Lister(f, os.fstat(f.fileno()).st_size, frozenset())
        lister.detect_engine()
        lister.load_metas()
        lister.live = bytearray(lister.next_pgno)
        lister.free = bytearray(lister.next_pgno)
        walk._walk_main(lister)
    raw = path.read_bytes()
    page = lister.meta.main.root * lister.psize  # the main database: one leaf page here
    found = {}
    for name, record in records.items():
        at = raw.index(record, page, page + lister.psize)
        found[name] = (at + 40, int.from_bytes(record[40:], "little"))
    return found


@splittable
def test_a_moved_snapshot_or_a_lost_part_means_the_whole_walk(sound: Path,
                                                              tmp_path: Path) -> None:  # fmt: skip
    planned = walk.plan(str(sound / "data.mdb"), 2)
    assert planned is not None
    _, parts = planned
    moved = walk.Part(parts[1].path, parts[1].trees, parts[1].txnid + 2, False)
    assert walk.walk_part(moved) is None
    path = tmp_path / "data.mdb"
    path.write_bytes(_damage((sound / "data.mdb").read_bytes(), random.Random(3)))
    calls: list[int] = []

    def lost(parts: list[walk.Part]) -> None:
        calls.append(len(parts))
        return None

    assert walk.walk_problems(str(path), walk.Walkers(2, lost)) == whole(path)
    assert calls == [2]


def _keyring(folder: Path) -> str:
    path = folder / "keyring.json"
    path.write_text(json.dumps({"keyring_version": "1", "keys": test_keyring_entries()}))
    return str(path)


@splittable
def test_replay_verify_walks_in_the_early_workers(
    sound: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    walked: list[list[walk.Found | None] | None] = []
    original = EarlyWorkers.walk

    def spy(self: EarlyWorkers, parts: list[walk.Part]) -> list[walk.Found | None] | None:
        got = original(self, parts)
        walked.append(got)
        return got

    monkeypatch.setattr(EarlyWorkers, "walk", spy)
    out = io.BytesIO()
    err = io.StringIO()
    status = main(["--store", str(sound), "replay", "--verify", "--keyring",
                   _keyring(tmp_path), "--jobs", "2"], stdout=out, stderr=err)  # fmt: skip
    assert status == 0, err.getvalue()
    assert ": 0 discrepancies" in err.getvalue()
    assert len(walked) == 1 and walked[0] is not None and len(walked[0]) == 2
    assert all(found is not None and found.live for found in walked[0])


@splittable
def test_replay_verify_refuses_a_damaged_file_from_the_parts(sound: Path, tmp_path: Path) -> None:
    """The first problem of the whole walk is the one `replay --verify` names, with its
    workers walking: in a child process, so that a walk that missed it fails the test
    rather than killing pytest."""
    rng = random.Random(11)
    source = (sound / "data.mdb").read_bytes()
    copy = tmp_path / "damaged"
    copy.mkdir()
    while True:
        (copy / "data.mdb").write_bytes(_damage(source, rng))
        expected = whole(copy / "data.mdb")
        if isinstance(expected, list) and expected:
            break
    keyring = _keyring(tmp_path)
    said = tmp_path / "stderr"
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        status = 70
        try:
            with open(said, "w") as stderr:
                argv = ["--store", str(copy), "replay", "--verify", "--keyring", keyring,
                        "--jobs", "2"]  # fmt: skip
                status = main(argv, stdout=io.BytesIO(), stderr=stderr)
        finally:
            os._exit(status)
    _, waited = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(waited) == 2
    text = said.read_text()
    assert "[store.corrupted]" in text and expected[0] in text, text
