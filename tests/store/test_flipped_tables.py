"""`replay --verify` of a store with one byte flipped in a table, each table in turn (a
copy of the store per flip): a report of the damage (status 1, one line or more) or a
refusal with its code (status 2), never success. In a forked child, so that a damaged
file that killed the reader would fail the test, not end pytest."""

from __future__ import annotations

import io
import json
import os
import random
import shutil
import struct
from pathlib import Path

import eventgen as g
import pytest
from damage import valid
from test_disk import keyring_file
from test_walk import _roots

from pithlog.cli import main
from pithlog.errors import StoreError
from pithlog.store import Store

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")

PAGE = 4096
REFUSALS = {"store.corrupted", "store.format", "store.upgrade"}
"""What a damaged file may be refused as before it is read (docs/errors.md): a damaged
page, or a meta entry that names another format (a flipped format or merge_version)."""


def replayed(store: Path, keyring: str) -> tuple[int, str, str]:
    """``pithlog replay --verify`` in a forked child: status (minus the signal that killed
    it), stdout, stderr."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        out, err = io.BytesIO(), io.StringIO()
        status = 70
        try:
            status = main(["--store", str(store), "replay", "--verify", "--keyring", keyring,
                           "--jobs", "1"], stdout=out, stderr=err)  # fmt: skip
        finally:
            os.write(write, json.dumps([status, out.getvalue().decode("utf-8", "replace"),
                                        err.getvalue()]).encode())  # fmt: skip
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        said = pipe.read()
    _, waited = os.waitpid(pid, 0)
    if not said:
        return os.waitstatus_to_exitcode(waited), "", ""
    status, out, err = json.loads(said)
    return status, out, err


def _leaf(raw: bytes, page: int) -> int:
    """The first leaf page under ``page`` (LMDB 0.9, 4 KiB pages: mp_flags at 10, the
    node pointers from 16; a branch node's child page number in its first 6 bytes)."""
    while not struct.unpack_from("<H", raw, page * PAGE + 10)[0] & 0x02:
        node = page * PAGE + struct.unpack_from("<H", raw, page * PAGE + 16)[0]
        low, high, flags = struct.unpack_from("<HHH", raw, node)
        page = low | high << 16 | flags << 32
    return page


def _flips(raw: bytes, page: int) -> list[tuple[str, int]]:
    """Where to flip a byte in a leaf: the middle of the key and of the value of its first,
    middle and last nodes (empty values: the key only)."""
    base = page * PAGE
    count = (struct.unpack_from("<H", raw, base + 12)[0] - 16) // 2
    places = []
    for index in sorted({0, count // 2, count - 1}):
        node = base + struct.unpack_from("<H", raw, base + 16 + 2 * index)[0]
        low, high, flags, key_size = struct.unpack_from("<HHHH", raw, node)
        size = low | high << 16
        places.append(("key", node + 8 + key_size // 2))
        if size and not flags & 1:  # not an overflow page's number
            places.append(("value", node + 8 + key_size + size // 2))
    return places


@pytest.fixture(scope="module")
def sound(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A store with something in every table but ``dicts`` (1,000 copies) and ``rekey``
    (a keyring change under way): evidence, invalid events, equivocations, pending piths."""
    folder = tmp_path_factory.mktemp("flips")
    events = g.mixed_events(random.Random(5), piths=8, per_pith=5)
    lines = [g.encoded(e) for e in events]
    lines.append(g.encoded(g.resigned(valid(events)[0], "registry", b"n")))
    with Store.open(folder / "store") as store:
        store.append(lines, g.KEYRING, keep_invalid=True)
    return folder / "store", keyring_file(folder)


def test_a_flipped_byte_in_any_table_is_never_success(sound: tuple[Path, str],
                                                      tmp_path: Path) -> None:  # fmt: skip
    source, keyring = sound
    assert replayed(source, keyring)[0] == 0
    raw = (source / "data.mdb").read_bytes()
    tables = 0
    for name, (_, root) in sorted(_roots(source / "data.mdb").items()):
        if root >= len(raw) // PAGE:  # an empty table (P_INVALID)
            assert name in ("main/dicts", "main/rekey"), name
            continue
        tables += 1
        for part, at in _flips(raw, _leaf(raw, root)):
            for bit in (0, 7):
                copy = tmp_path / "copy"
                shutil.copytree(source, copy)
                damaged = bytearray(raw)
                damaged[at] ^= 1 << bit
                (copy / "data.mdb").write_bytes(bytes(damaged))
                status, out, err = replayed(copy, keyring)
                where = (name, part, at, bit, err)
                assert status in (1, 2), where  # not 0, not a signal
                if status == 1:
                    assert out and " 0 discrepancies" not in err, where
                    assert err.rstrip().endswith(f": {len(out.splitlines())} discrepancies")
                else:
                    assert not out and err.count("\n") == 1, where
                    code = err.split("[", 1)[1].split("]", 1)[0]
                    assert code in REFUSALS, where
                shutil.rmtree(copy)
    assert tables == 16


def _meta_places(raw: bytes, root: int) -> dict[bytes, tuple[int, int]]:
    """Each entry of ``meta`` (one leaf in a store this small): its key -> the offsets of
    the middle of its key and of its value."""
    base = _leaf(raw, root) * PAGE
    count = (struct.unpack_from("<H", raw, base + 12)[0] - 16) // 2
    places = {}
    for index in range(count):
        node = base + struct.unpack_from("<H", raw, base + 16 + 2 * index)[0]
        low, high, _, key_size = struct.unpack_from("<HHHH", raw, node)
        key = raw[node + 8:node + 8 + key_size]
        places[key] = (node + 8 + key_size // 2, node + 8 + key_size + (low | high << 16) // 2)
    return places


@pytest.mark.parametrize(("entry", "part"), [(b"merkle_size", 0), (b"merge_version", 0),
                                             (b"merge_version", 1)])  # fmt: skip
def test_a_lost_meta_entry_of_format_7_is_a_damaged_store(
    sound: tuple[Path, str], tmp_path: Path, entry: bytes, part: int
) -> None:
    """A byte flipped in the key of ``merkle_size`` or ``merge_version`` (the entry lost;
    ``part`` 0 the key, 1 the value), or in the middle of ``merge_version``'s value (``gr`ph``,
    ``gr\\xe1ph``: no merge version's name). In a store of format 7 that holds events no
    pithlog leaves ``merkle_size`` out (format 2 had no tree; the move from format 5 drops
    it under a cursor of its own; an older pithlog's interrupted creation left an empty
    store), and every format recorded ``merge_version``: so it is ``store.corrupted``,
    read-only and writable, the file left as it was. (``merkle_size`` was
    ``store.upgrade``, whose advice, a writable open, rebuilt the tree over the damage:
    replay --verify then found 0 discrepancies; ``merge_version`` was ``store.format``,
    written by another pithlog. An intact name of another merge version still is:
    tests/store/test_store.py.)"""
    source, keyring = sound
    raw = (source / "data.mdb").read_bytes()
    at = _meta_places(raw, _roots(source / "data.mdb")["main/meta"][1])[entry][part]
    for bit in (0, 7):
        copy = tmp_path / f"copy{bit}"
        shutil.copytree(source, copy)
        damaged = bytearray(raw)
        damaged[at] ^= 1 << bit
        (copy / "data.mdb").write_bytes(bytes(damaged))
        status, out, err = replayed(copy, keyring)
        assert (status, out) == (2, ""), err
        assert err.startswith("pithlog: [store.corrupted] ") and "backup" in err, err
        with pytest.raises(StoreError) as refused:
            Store.open(copy, create=False)
        assert refused.value.code == "store.corrupted"
        assert (copy / "data.mdb").read_bytes() == bytes(damaged)
