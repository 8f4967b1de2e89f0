"""The store's Merkle tree over its append sequence: kept in the append transaction, built
for stores written without it, checked by replay, and proofs that catch a rewritten log."""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path
from typing import Any

import eventgen as g
import lmdb
import oldformat
import pytest
from oldformat import rewrite_as_format_5

from pithlog.errors import StoreError
from pithlog.store import Store, tree
from pithlog.store.layout import FORMAT_VERSION
from pithlog.transparency import merkle


def leaves_of(store: Store) -> list[bytes]:
    """Leaf data in append order, from export: event_id || SHA-256(copy) of every copy."""
    return [bytes.fromhex(json.loads(data)["event_id"][7:]) + hashlib.sha256(data).digest()
            for _, data in store.export()]  # fmt: skip


def leaf(event: dict[str, Any]) -> bytes:
    return bytes.fromhex(event["event_id"][7:]) + hashlib.sha256(g.encoded(event)).digest()


def filled(path: Path, seed: int = 4) -> tuple[Store, list[dict[str, Any]]]:
    rng = random.Random(seed)
    events = g.mixed_events(rng, piths=6, per_pith=6)
    extra = [g.forged(events[1]), g.resigned(events[2], "registry", b"again"),
             g.tampered(events[3])]  # fmt: skip
    store = Store.open(path)
    batch = events + extra
    rng.shuffle(batch)
    for i in range(0, len(batch), 5):
        store.append([g.encoded(e) for e in batch[i : i + 5]], g.KEYRING, keep_invalid=True)
    return store, events


def test_roots_and_proofs_match_the_log(tmp_path: Path) -> None:
    store, events = filled(tmp_path / "s")
    with store:
        data = leaves_of(store)
        n = store.tree_size()
        assert n == len(data) == store.stats()["counts"]["seq"]
        assert store.tree_root(0) == (0, merkle.EMPTY_ROOT)
        roots = [merkle.root_of(data[:size]) for size in range(n + 1)]
        for size in range(n + 1):
            assert store.tree_root(size) == (size, roots[size])
        hashes = [merkle.leaf_hash(d) for d in data]
        for size in (1, 2, 7, 16, 17, n):
            for index in range(size):
                got_size, path = store.inclusion_path(index, size)
                assert got_size == size
                assert merkle.verify_inclusion(hashes[index], index, size, path, roots[size])
        for old in range(n + 1):
            new, path = store.consistency_path(old)
            assert new == n
            assert merkle.verify_consistency(old, n, roots[old], roots[n], path)
        # every copy of an event is a leaf of its event_id
        copies = store.leaves_of(events[1]["event_id"])
        assert len(copies) == 2
        eid = bytes.fromhex(events[1]["event_id"][7:])
        assert all(data[index] == eid + h for index, h in copies)
        # two copies of one event are two different leaves: a root pins which copy
        assert data[copies[0][0]] != data[copies[1][0]]
        assert store.replay(g.KEYRING).ok
        with pytest.raises(StoreError, match="tree_size"):
            store.tree_root(n + 1)
        with pytest.raises(StoreError, match="tree_size"):
            store.inclusion_path(n, n)


def test_copy_keys_and_copies(tmp_path: Path) -> None:
    store, _ = filled(tmp_path / "s")
    with store:
        keys = store.copy_keys()
        assert keys == sorted(keys) and len(keys) == store.tree_size()
        exported = dict((seq, data) for seq, data in store.export())
        got = store.copies(reversed(keys))
        assert [seq for seq, _ in got] == sorted(exported)
        for seq, data in got:
            assert exported[seq] == data
            eid = bytes.fromhex(json.loads(data)["event_id"][7:])
            assert eid + hashlib.sha256(data).digest() in keys
        assert store.copies([b"\x00" * 64]) == []


def test_a_store_without_the_tree_gets_it_on_open(tmp_path: Path) -> None:
    """A store of format 2 written before the tree (``merkle`` and ``merkle_size`` came to
    format 2 without a new number): the open that migrates it builds the tree. (A store of
    format 7 that lost ``merkle_size`` is damaged: tests/store/test_flipped_tables.py.)"""
    store, _ = filled(tmp_path / "s")
    with store:
        expected = store.tree_root()
    oldformat.as_format_2(tmp_path / "s")
    env = lmdb.open(str(tmp_path / "s"), max_dbs=32)
    with env.begin(write=True) as txn:
        txn.drop(env.open_db(b"merkle", txn=txn), delete=True)
        assert txn.delete(b"merkle_size", db=env.open_db(b"meta", txn=txn))
    env.close()
    with Store.open(tmp_path / "s", create=False) as again:
        assert again.tree_root() == expected
        assert again.replay(g.KEYRING).ok


def test_a_tree_built_on_open_that_does_not_fit_grows_the_map(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The tree built on open is written like an append: a map too small for it is doubled
    # and the tree written again from the start (here the first attempt is told the map
    # is full, as LMDB would).
    store, _ = filled(tmp_path / "s")
    with store:
        expected = store.tree_root()
        size = store.stats()["map_size"]

        def forget(txn: Any, dbs: dict[str, Any]) -> None:  # a tree behind all of seq
            txn.drop(dbs["merkle"], delete=False)
            txn.drop(dbs["by_copy"], delete=False)
            txn.put(b"merkle_size", (0).to_bytes(8, "big"), db=dbs["meta"])

        store._write(forget)
    real = tree.merkle_sync
    attempts: list[int] = []

    def full_once(txn: Any, dbs: dict[str, Any]) -> None:
        attempts.append(len(attempts))
        real(txn, dbs)
        if len(attempts) == 1:
            raise lmdb.MapFullError("MDB_MAP_FULL")

    monkeypatch.setattr(tree, "merkle_sync", full_once)
    with Store.open(tmp_path / "s", create=False) as again:
        assert attempts == [0, 1]
        assert again.stats()["map_size"] == 2 * size
        monkeypatch.undo()
        assert again.tree_root() == expected
        assert again.replay(g.KEYRING).ok


def test_a_tree_behind_seq_catches_up(tmp_path: Path) -> None:
    """A pithlog without the tree appended (seq grew, merkle did not): the next open or
    append extends the tree over the new entries."""
    store, _ = filled(tmp_path / "s")
    with store:
        n, root = store.tree_root()
        rec = g.record("2599.00001")
        store.append([g.encoded(rec)], g.KEYRING)

        def rewind(txn: Any, dbs: dict[str, Any]) -> None:
            txn.put(b"merkle_size", n.to_bytes(8, "big"), db=dbs["meta"])
            txn.delete(tree.node_key(1, n // 2), db=dbs["merkle"])

        store._write(rewind)
        lines = [d.line() for d in store.replay(g.KEYRING).discrepancies]
        assert f"merkle: merkle_size: covers {n} leaves but seq holds {n + 1} entries" in lines
        assert store.tree_root(n) == (n, root)
        store.append([g.encoded(g.attestation(rec["pith_number"], 50))], g.KEYRING)
        assert store.tree_size() == n + 2
        assert store.tree_root() == (n + 2, merkle.root_of(leaves_of(store)))
        assert store.replay(g.KEYRING).ok


def test_replay_names_a_damaged_tree(tmp_path: Path) -> None:
    store, _ = filled(tmp_path / "s")
    with store:
        key = tree.node_key(2, 1)
        good = store._read(lambda txn, dbs: txn.get(key, db=dbs["merkle"]))
        assert good is not None
        store._write(lambda txn, dbs: txn.put(key, b"\x00" * 32, db=dbs["merkle"]))
        lines = [d.line() for d in store.replay(g.KEYRING).discrepancies]
        assert lines == ["merkle: node 2/1: differs from the hash recomputed from seq"]
        store._write(lambda txn, dbs: txn.put(key, good, db=dbs["merkle"]))
        first = store.copy_keys()[0]
        store._write(lambda txn, dbs: txn.delete(first[32:], db=dbs["by_copy"]))
        lines = [d.line() for d in store.replay(g.KEYRING).discrepancies]
        assert any("by_copy does not map" in line for line in lines)
        assert any(line.startswith("merkle: by_copy: holds") for line in lines)


def test_a_rewritten_history_fails_consistency(tmp_path: Path) -> None:
    """A log whose history is rewritten (one event removed, the rest appended again into a
    fresh store) cannot prove it extends a checkpoint of the original."""
    rng = random.Random(9)
    events = [e for e in g.mixed_events(rng, piths=4, per_pith=6)
              if e["signer"]["key_id"] != "test-stranger"]  # fmt: skip
    lines = [g.encoded(e) for e in events]
    with Store.open(tmp_path / "a") as original:
        original.append(lines, g.KEYRING)
        old_size, old_root = original.tree_root()
    victim = len(lines) // 2
    with Store.open(tmp_path / "b") as rewritten:
        rewritten.append(lines[:victim] + lines[victim + 1 :], g.KEYRING)
        rewritten.append([g.encoded(g.record("2599.00002"))] * 2, g.KEYRING)
        new_size, new_root = rewritten.tree_root()
        assert new_size == old_size  # same length: one removed, one added
        assert new_root != old_root
        for old in range(victim + 1, old_size + 1):
            _, path = rewritten.consistency_path(old)
            claimed = old_root if old == old_size else merkle.root_of(
                [leaf(e) for e in events[:old]])  # fmt: skip
            assert not merkle.verify_consistency(old, new_size, claimed, new_root, path)
        # before the removed event the two logs agree, and that is provable
        _, path = rewritten.consistency_path(victim)
        prefix = merkle.root_of([leaf(e) for e in events[:victim]])
        assert merkle.verify_consistency(victim, new_size, prefix, new_root, path)


def as_format_2(store: Store) -> tuple[int, bytes]:
    """Rewrite ``store`` as pithlog wrote format 2 (docs/store.md): the same databases, but
    every ``merkle`` node hashed from leaves of the event_id alone, and ``format`` 2.
    Returns that old tree's size and root."""

    def rewrite(txn: Any, dbs: dict[str, Any]) -> tuple[int, bytes]:
        rewrite_as_format_5(txn, dbs)  # format 5's copies and slots, as format 2 held them
        txn.drop(dbs["merkle"], delete=False)
        txn.drop(dbs["by_copy"], delete=False)  # format 2 had none
        nodes: dict[tuple[int, int], bytes] = {}
        old: list[bytes] = []
        for _key, value in txn.cursor(db=dbs["seq"]):
            old.append(merkle.leaf_hash(value[:32]))

            def perfect(level: int, index: int) -> bytes:
                return old[index] if level == 0 else nodes[(level, index)]

            for level, index, node in merkle.completed_subtrees(len(old) - 1, old[-1], perfect):
                nodes[(level, index)] = node
                txn.put(level.to_bytes(1, "big") + index.to_bytes(8, "big"), node,
                        db=dbs["merkle"])  # fmt: skip
        txn.put(b"format", b"2", db=dbs["meta"])
        return len(old), merkle.root(len(old), merkle.subtree_from_leaves(old))

    result: tuple[int, bytes] = store._write(rewrite)
    return result


def test_a_format_2_store_is_migrated_on_open(tmp_path: Path) -> None:
    """Format 2 hashed the event_id alone into a leaf; opening such a store rebuilds the
    tree over the 64-byte leaf data and goes on through formats 3 and 4 to format 5, in
    one transaction, then to format 6 (the copies moved in transactions of their own)."""
    store, _ = filled(tmp_path / "s")
    with store:
        data = leaves_of(store)
        states = {p["pith_number"]: store.state(p["pith_number"]) for p in store.piths()}
        size, old_root = as_format_2(store)
        assert size == len(data)
        assert old_root == merkle.root_of([d[:32] for d in data])
    # the process's environment is shared while a Store is open: closed above, so the
    # next open reads the files afresh and migrates them
    with Store.open(tmp_path / "s", create=False) as again:
        assert again.stats()["format"] == FORMAT_VERSION.decode()
        assert again._read(lambda txn, dbs: txn.get(b"format", db=dbs["meta"])) == FORMAT_VERSION
        assert again.tree_root() == (size, merkle.root_of(data))
        assert again.tree_root()[1] != old_root
        assert {p: again.state(p) for p in states} == states
        for _seq, copy in again.export():  # by_copy, new in format 3, built too
            assert again.copy(hashlib.sha256(copy).digest()) == copy
        report = again.replay(g.KEYRING)
        assert report.ok, [d.line() for d in report.discrepancies]
        # and it stays a working store: an append extends the new tree
        again.append([g.encoded(g.record("2599.00003"))], g.KEYRING)
        assert again.tree_root() == (size + 1, merkle.root_of(leaves_of(again)))


def test_another_format_is_refused(tmp_path: Path) -> None:
    store, _ = filled(tmp_path / "s")
    with store:
        store._write(lambda txn, dbs: txn.put(b"format", b"1", db=dbs["meta"]))
    with pytest.raises(StoreError, match="format"):
        Store.open(tmp_path / "s", create=False)


def test_tiles_bundles_and_copies_by_leaf_range(tmp_path: Path) -> None:
    """The reads the network serves: tiles as tlog-tiles defines them (held to merkle's
    recursion), leaf data and copies in leaf order, a copy by its hash."""
    from pithlog.transparency import tiles

    store, _ = filled(tmp_path / "s")
    with store:
        data = leaves_of(store)
        n = len(data)
        hashes = [merkle.leaf_hash(d) for d in data]
        assert store.tile(0, 0, n) == b"".join(hashes)
        assert store.tile(0, 0, 3) == b"".join(hashes[:3])  # a partial of an earlier size
        assert store.tile(0, 0, n + 1) is None and store.tile(1, 0, 1) is None
        # no such tile, not a struct.error out of the index's packing
        for level, index, width in ((0, -1, 1), (-1, 0, 1), (0, 0, 0), (0, 0, 257)):
            assert store.tile(level, index, width) is None
        assert store.leaf_data(0, n) == data and store.leaf_data(1, n) is None
        exported = [copy for _, copy in store.export()]
        assert store.leaf_copies(2, 5) == exported[2:7]
        assert store.leaf_copies(n, 1) is None
        # a byte budget: the copies up to the one that reaches it, one at least
        assert store.leaf_copies(2, 5, 1) == exported[2:3]
        assert store.leaf_copies(2, 5, len(exported[2]) + 1) == exported[2:4]
        assert store.leaf_copies(2, 5, len(exported[2]) + len(exported[3])) == exported[2:4]
        assert store.leaf_copies(2, 5, 1 << 30) == exported[2:7]
        for copy in exported:
            assert store.copy(hashlib.sha256(copy).digest()) == copy
        assert store.copy(b"\x00" * 32) is None and store.copy(b"short") is None

        # level 1 from a store past 256 leaves: the hash of each full level-0 tile
        rng = random.Random(5)
        more = [g.encoded(e) for e in g.mixed_events(rng, piths=60, per_pith=6)]
        store.append(more, g.KEYRING, keep_invalid=True)
        data = leaves_of(store)
        size = len(data)
        assert size > 256
        subtree = merkle.subtree_from_leaves([merkle.leaf_hash(d) for d in data])
        width = tiles.tile_width(1, 0, size)
        level1 = store.tile(1, 0, width)
        assert level1 == b"".join(subtree(i * 256, (i + 1) * 256) for i in range(width))
        full = store.tile(0, 0, 256)
        assert full is not None and tiles.tile_root(full) == level1[:32]
