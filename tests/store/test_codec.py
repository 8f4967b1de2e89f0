"""Copies stored packed (pithlog.store.codec, since format 4; in ``copies`` since format 6), a
dictionary trained in the store, format-3 stores migrated on a writable open and refused on
a read-only one, damaged values reported by replay (docs/store.md, "The value codec")."""

from __future__ import annotations

import hashlib
import random
import struct
from pathlib import Path
from typing import Any

import eventgen as g
import lmdb
import pytest
import zstandard
from oldformat import as_format_5, kill_migration_at

from pithlog.errors import StoreError
from pithlog.store import Store, codec, format6
from pithlog.store.layout import FORMAT_3, FORMAT_VERSION


@pytest.fixture
def small_dictionary(monkeypatch: pytest.MonkeyPatch) -> None:
    """A dictionary trained at 40 copies (the store's default waits for 1,000)."""
    monkeypatch.setattr(codec, "TRAIN_AT", 40)
    monkeypatch.setattr(codec, "DICT_SIZE", 4096)


def _events() -> list[bytes]:
    events = g.mixed_events(random.Random(17), piths=12, per_pith=6)
    out = [g.encoded(e) for e in events]
    # a second valid copy of a few events: evidence
    out += [g.encoded(g.resigned(e, e["signer"]["key_id"], bytes([i + 1]) * 32))
            for i, e in enumerate(events[:40:8])]  # fmt: skip
    return out


def _filled(path: Path) -> set[bytes]:
    """The store at ``path`` holding :func:`_events`, appended in batches; the copies it
    keeps."""
    lines = _events()
    kept: set[bytes] = set()
    with Store.open(path) as store:
        for i in range(0, len(lines), 25):
            results = store.append(lines[i : i + 25], g.KEYRING, keep_invalid=True)
            kept |= {lines[i + r.index] for r in results
                     if r.status in ("stored", "replaced", "evidence")}  # fmt: skip
    return kept


def _snapshot(path: Path) -> dict[str, Any]:
    with Store.open(path, create=False) as store:
        piths = [p["pith_number"] for p in store.piths()]
        return {
            "states": {p: store.state(p) for p in piths if store.status(p)["status"] == "state"},
            "export": list(store.export()),
            "root": store.tree_root(),
        }


def _raw_values(path: Path) -> dict[tuple[bytes, bytes], bytes]:
    env = lmdb.open(str(path), max_dbs=32, subdir=True, readonly=True, lock=False)
    try:
        with env.begin() as txn:
            return {
                (name, k): v
                for name in (b"copies", b"events", b"evidence", b"slots")
                for k, v in txn.cursor(db=env.open_db(name, txn=txn, create=False))
            }
    finally:
        env.close()


def _copies(values: dict[tuple[bytes, bytes], bytes]) -> dict[bytes, bytes]:
    return {k[1]: v for k, v in values.items() if k[0] == b"copies"}


def _is_binary_slot(value: bytes) -> bool:
    return len(value) % 52 == 0 and value[:1].isdigit()


def _as_format_3(path: Path) -> None:
    """Rewrite a store as pithlog wrote format 3: every copy in events or evidence and every
    slot as its JCS bytes, no dictionary."""
    as_format_5(path)
    env = lmdb.open(str(path), max_dbs=32, subdir=True)
    dbs: dict[str, Any] = {}
    try:
        with env.begin(write=True) as txn:
            dbs.update({n: env.open_db(n.encode(), txn=txn) for n in ("dicts", "meta")})
            for name in ("events", "evidence", "slots"):
                db = env.open_db(name.encode(), txn=txn)
                for key, stored in list(txn.cursor(db=db)):
                    txn.put(key, codec.unpack(txn, dbs, stored), db=db)
            for key in [k for k, _ in txn.cursor(db=dbs["dicts"])]:
                txn.delete(key, db=dbs["dicts"])
            txn.delete(codec.META_DICT, db=dbs["meta"])
            txn.put(b"format", FORMAT_3, db=dbs["meta"])
    finally:
        codec.forget(dbs)
        env.close()


def test_copies_are_packed_and_read_back_exactly(tmp_path: Path, small_dictionary: None) -> None:
    kept = _filled(tmp_path / "s")
    values = _raw_values(tmp_path / "s")
    assert any(k[0] == b"evidence" for k in values)
    copies = _copies(values)
    tags = {v[:1] for v in copies.values()}
    assert codec.DICT in tags and codec.PLAIN in tags  # before and after the dictionary
    with Store.open(tmp_path / "s", create=False) as store:
        exported = [data for _, data in store.export()]
        assert sorted(exported) == sorted(kept)
        for data in exported:
            assert store.copy(hashlib.sha256(data).digest()) == data
        assert sum(map(len, copies.values())) < sum(map(len, exported)) / 2
        # the slots are binary members (format 6), neither JSON nor packed
        assert all(_is_binary_slot(v) for k, v in values.items() if k[0] == b"slots")
        report = store.replay(g.KEYRING, verify=True)
        assert report.ok, [d.line() for d in report.discrepancies]
        stats = store.stats()
        assert stats["format"] == FORMAT_VERSION.decode()
        assert stats["pages"]["copies"]["leaf"] >= 1
        assert stats["pages"]["dicts"]["overflow"] >= 1  # the dictionary


def test_a_format_3_store_migrates_byte_identical(
    tmp_path: Path, small_dictionary: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "s"
    _filled(path)
    original = _snapshot(path)
    _as_format_3(path)
    before = _raw_values(path)
    assert not _copies(before) and all(v[:1] == b"{" for v in before.values())
    monkeypatch.setattr(format6, "MIGRATE_CHUNK", 7)  # several transactions
    real_step = format6.step
    kill_migration_at(monkeypatch, 3)
    with pytest.raises(KeyboardInterrupt):
        Store.open(path, create=False)
    half = _raw_values(path)
    assert {v[:1] for v in half.values()} >= {b"{", codec.DICT}  # part of it packed
    assert 0 < len(_copies(half)) < len(_copies(before)) + sum(
        1 for k in before if k[0] in (b"events", b"evidence"))  # part of it moved
    with pytest.raises(StoreError) as caught:  # half-way: no reader reads it
        Store.open(path, create=False, readonly=True)
    assert caught.value.code == "store.upgrade"
    monkeypatch.setattr(format6, "step", real_step)
    after = _snapshot(path)  # resumes and finishes
    values = _raw_values(path)
    copies = _copies(values)
    assert len(copies) == sum(1 for k in before if k[0] in (b"events", b"evidence"))
    assert all(v[:1] == codec.DICT for v in copies.values())  # packed on the way
    assert all(_is_binary_slot(v) for k, v in values.items() if k[0] == b"slots")
    with Store.open(path, create=False) as store:
        assert store.stats()["format"] == FORMAT_VERSION.decode()
        assert store._read(lambda txn, dbs: format6.migrating(txn, dbs)) is False
        for (name, key), raw in before.items():
            if name == b"events":
                assert store.event("sha256:" + key.hex()) == raw
            elif name == b"evidence":
                assert raw in store.evidence("sha256:" + key[:32].hex())
        report = store.replay(g.KEYRING, verify=True)
        assert report.ok, [d.line() for d in report.discrepancies]
    # every state, export line and root is the one the store gave before, and the one a
    # store written in format 6 from the start gives
    assert after == original
    reference = tmp_path / "r"
    _filled(reference)
    assert _snapshot(reference) == after


def test_a_format_3_store_opened_read_only_is_refused_and_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "s"
    _filled(path)
    _as_format_3(path)
    data = (path / "data.mdb").read_bytes()
    with pytest.raises(StoreError) as caught:
        Store.open(path, create=False, readonly=True)
    assert caught.value.code == "store.upgrade"
    assert (path / "data.mdb").read_bytes() == data


def _damage(path: Path, how: str) -> bytes:
    """Damage one packed copy that ``events`` points at; its event_id."""
    env = lmdb.open(str(path), max_dbs=32, subdir=True)
    try:
        with env.begin(write=True) as txn:
            copies = env.open_db(b"copies", txn=txn, create=False)
            events = env.open_db(b"events", txn=txn, create=False)
            key, pointer = next((k, p) for k, p in txn.cursor(db=events)
                                if txn.get(p, db=copies)[:1] == codec.DICT)  # fmt: skip
            value = txn.get(pointer, db=copies)
            if how == "flip":
                damaged = value[:-6] + bytes(b ^ 0x55 for b in value[-6:])
            elif how == "truncate":
                damaged = value[: len(value) // 2]
            elif how == "tag":
                damaged = b"\x07" + value[1:]
            elif how == "dictionary":
                damaged = value[:1] + b"\xde\xad\xbe\xef" + value[5:]
            else:  # a frame announcing 2 GiB
                frame = zstandard.ZstdCompressor(write_content_size=False).compress(b"{}")
                header = b"\x28\xb5\x2f\xfd" + bytes([0xA0]) + struct.pack("<I", 2**31)
                damaged = codec.PLAIN + header + frame[5:]
            txn.put(pointer, damaged, db=copies)
            return bytes(key)
    finally:
        env.close()


@pytest.mark.parametrize("how", ["flip", "truncate", "tag", "dictionary", "huge"])
def test_a_damaged_value_is_reported_never_a_crash(
    tmp_path: Path, small_dictionary: None, how: str
) -> None:
    path = tmp_path / "s"
    _filled(path)
    key = _damage(path, how)
    subject = "sha256:" + key.hex()
    with Store.open(path, create=False) as store:
        report = store.replay(g.KEYRING, verify=True)
        assert not report.ok
        lines = [d.line() for d in report.discrepancies]
        assert any(line.startswith(f"events: {subject}: the stored copy does not decompress")
                   for line in lines), lines  # fmt: skip
        with pytest.raises(StoreError) as caught:
            list(store.export())
        assert caught.value.code == "store.corrupted"


def test_unpack_is_bounded() -> None:
    """A frame without its content size, or one over the door's 1 MiB, is refused before
    anything is allocated for it."""
    dbs: dict[str, Any] = {"dicts": object()}
    no_size = zstandard.ZstdCompressor(write_content_size=False).compress(b"{" + b" " * 100)
    with pytest.raises(codec.CorruptCopy, match="content size"):
        codec.unpack(None, dbs, codec.PLAIN + no_size)
    big = zstandard.ZstdCompressor().compress(b"{" + b"0" * (2 << 20))
    with pytest.raises(codec.CorruptCopy, match="content size"):
        codec.unpack(None, dbs, codec.PLAIN + big)
    small = b'{"a":' + b"1" * 300 + b"}"
    packed = codec.PLAIN + zstandard.ZstdCompressor(write_checksum=True).compress(small)
    assert codec.unpack(None, dbs, packed) == small


def test_a_failed_training_is_tried_again_when_the_store_has_doubled(
    tmp_path: Path, small_dictionary: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []
    real = zstandard.train_dictionary

    def train(*args: Any, **kwargs: Any) -> zstandard.ZstdCompressionDict:
        calls.append(len(args[1]))
        if len(calls) == 1:
            raise zstandard.ZstdError("samples too alike")
        return real(*args, **kwargs)

    monkeypatch.setattr(zstandard, "train_dictionary", train)
    lines = _events()
    with Store.open(tmp_path / "s") as store:
        for i in range(0, 120, 10):  # 40 copies reached, then 80: tried twice, not 12 times
            store.append(lines[i : i + 10], g.KEYRING, keep_invalid=True)
        newest = store._read(lambda txn, dbs: codec.newest_dictionary(txn, dbs))
    assert len(calls) == 2
    assert newest is not None
    tags = {v[:1] for v in _copies(_raw_values(tmp_path / "s")).values()}
    assert tags == {codec.PLAIN, codec.DICT}


def test_replay_verify_on_the_command_line_names_the_damaged_copy(
    tmp_path: Path, small_dictionary: None
) -> None:
    import io
    import json

    from pithlog.cli import main
    from pithlog.testing import test_keyring_entries

    path = tmp_path / "s"
    _filled(path)
    key = _damage(path, "flip")
    keyring = tmp_path / "keyring.json"
    keyring.write_text(json.dumps({"keyring_version": "1", "keys": test_keyring_entries()}))
    out, err = io.BytesIO(), io.StringIO()
    status = main(["replay", "--store", str(path), "--verify", "--keyring", str(keyring)],
                  stdout=out, stderr=err)  # fmt: skip
    assert status == 1, err.getvalue()
    printed = out.getvalue().decode() + err.getvalue()
    assert f"events: sha256:{key.hex()}: the stored copy does not decompress" in printed


@pytest.mark.parametrize("name", [b"\xde\xad\xbe\xef", b"\x01\x02"])
def test_replay_names_a_damaged_dictionary_name(
    tmp_path: Path, small_dictionary: None, name: bytes
) -> None:
    """``meta`` ``dict`` naming no stored dictionary stops every append with
    store.corrupted, which sends the user to replay: replay must say it."""
    path = tmp_path / "s"
    _filled(path)
    env = lmdb.open(str(path), max_dbs=32, subdir=True)
    with env.begin(write=True) as txn:
        txn.put(codec.META_DICT, name, db=env.open_db(b"meta", txn=txn, create=False))
    env.close()
    with Store.open(path, create=False) as store:
        for verify in (False, True):
            lines = [d.line() for d in store.replay(g.KEYRING, verify=verify).discrepancies]
            assert len(lines) == 1 and lines[0].startswith("meta: dict: "), lines
