"""Format 7 (docs/store.md): ``verdicts`` keyed by the judge and the copy's sequence number.
A format-6 store (keyed by judge and copy hash) migrates to it in bounded, resumable
transactions, every verdict kept under its copy's new key, every state unchanged."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import eventgen as g
import lmdb
import pytest
from oldformat import as_format_6, kill_migration_at
from test_format6 import _filled, _snapshot

from pithlog.errors import StoreError
from pithlog.store import Store, format7
from pithlog.store.layout import FORMAT_6, FORMAT_VERSION

STRAY = b"\x07" * 64
"""A format-6 verdict of a copy the store does not hold: dropped by the migration."""


def _raw(path: Path, work: Any) -> Any:
    """``work(txn, verdicts, meta)`` in a write transaction of plain LMDB."""
    env = lmdb.open(str(path), max_dbs=32, subdir=True)
    try:
        with env.begin(write=True) as txn:
            return work(txn, env.open_db(b"verdicts", txn=txn), env.open_db(b"meta", txn=txn))
    finally:
        env.close()


def _verdicts(path: Path) -> dict[bytes, bytes]:
    return _raw(path, lambda txn, verdicts, _: dict(txn.cursor(db=verdicts)))


def test_a_format_6_store_migrates_to_7_in_steps_with_every_verdict_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "s"
    _filled(path)
    original, verdicts = _snapshot(path), _verdicts(path)
    assert len(verdicts) > 40 and {len(key) for key in verdicts} == {40}
    as_format_6(path)
    _raw(path, lambda txn, v, _: txn.put(STRAY, b"valid", db=v))
    old = _verdicts(path)
    assert {len(key) for key in old} == {64} and len(old) == len(verdicts) + 1
    assert _raw(path, lambda txn, _, meta: txn.get(b"format", db=meta)) == FORMAT_6
    with pytest.raises(StoreError) as caught:  # a reader never migrates
        Store.open(path, create=False, readonly=True)
    assert caught.value.code == "store.upgrade"

    monkeypatch.setattr(format7, "MIGRATE_CHUNK", 7)  # several transactions
    real_step = format7.step
    steps = kill_migration_at(monkeypatch, 4, format7)
    with pytest.raises(KeyboardInterrupt):
        Store.open(path, create=False)
    half = _verdicts(path)
    assert {len(key) for key in half} == {40, 64}  # some keyed anew, some not yet
    with pytest.raises(StoreError) as caught:  # half-way: still not for readers
        Store.open(path, create=False, readonly=True)
    assert caught.value.code == "store.upgrade"
    # the format recorded is already 7: said as a migration under way, not a tree behind
    assert "is being migrated to format 7, not yet finished" in str(caught.value)
    monkeypatch.setattr(format7, "step", real_step)

    assert _snapshot(path) == original  # resumed and finished
    assert len(steps) == 4
    assert _verdicts(path) == verdicts  # each under its copy's sequence number; STRAY gone
    with Store.open(path, create=False) as store:
        assert store.stats()["format"] == FORMAT_VERSION.decode()
        assert store._read(lambda txn, dbs: format7.migrating(txn, dbs)) is False
        report = store.replay(g.KEYRING, verify=True)  # every cached verdict compared
        assert report.ok, [d.line() for d in report.discrepancies]
        # and it goes on as a format-7 store
        store.append([g.encoded(g.record("2599.00001"))], g.KEYRING)
        assert store.replay(g.KEYRING).ok


def test_a_step_goes_past_entries_already_keyed_anew(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The step's cursor, one entry a transaction: every entry of the table is gone
    through once (those already of format 7 are left as they are), and the step ends."""
    path = tmp_path / "s"
    _filled(path)
    verdicts = _verdicts(path)
    as_format_6(path)
    # half of them also under their format-7 keys, as an earlier step would have left them
    for i, (key, value) in enumerate(sorted(verdicts.items())):
        if i % 2 == 0:
            _raw(path, lambda txn, v, _, key=key, value=value: txn.put(key, value, db=v))
    entries = len(_verdicts(path))
    monkeypatch.setattr(format7, "MIGRATE_CHUNK", 1)
    steps = kill_migration_at(monkeypatch, 0, format7)  # never killed: counted
    with Store.open(path, create=False) as store:
        assert store._read(lambda txn, dbs: format7.migrating(txn, dbs)) is False
    assert len(steps) == entries
    assert _verdicts(path) == verdicts


def test_a_step_keeps_the_verdicts_already_keyed_anew(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Verdicts an earlier step keyed anew (their format-6 entries gone) and gone through
    again are kept as they are, not dropped."""
    path = tmp_path / "s"
    _filled(path)
    verdicts = _verdicts(path)
    as_format_6(path)
    env = lmdb.open(str(path), max_dbs=32, subdir=True)
    try:
        with env.begin(write=True) as txn:
            v, by_copy = env.open_db(b"verdicts", txn=txn), env.open_db(b"by_copy", txn=txn)
            for i, (key, value) in enumerate(sorted(txn.cursor(db=v))):
                if i % 2 == 0:  # keyed anew as a step does: the format-6 entry goes
                    txn.put(key[:32] + txn.get(key[32:], db=by_copy), value, db=v)
                    txn.delete(key, db=v)
    finally:
        env.close()
    monkeypatch.setattr(format7, "MIGRATE_CHUNK", 3)
    with Store.open(path, create=False) as store:
        assert store._read(lambda txn, dbs: format7.migrating(txn, dbs)) is False
    assert _verdicts(path) == verdicts
