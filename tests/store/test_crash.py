"""Crashes (docs/store.md, "Map size, processes, crashes"): `pithlog append`, `pithlog
import` and the migration of a store of every older format, each killed (SIGKILL) at random
moments in a process of its own; the creation of a store, killed in and after its first
commit. After each kill the store opens (or is no store yet), a
replay with signatures is clean, it holds whole batches only (or an older format not yet
migrated, which a reader refuses), and finishing the work gives the store that a run
without a kill gives. A few kills each in the normal suite; `make test-large` (`-m large`)
kills many more times, in stores of a few thousand events."""

from __future__ import annotations

import json
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import eventgen as g
import oldformat
import pytest
from test_format6 import _snapshot

from pithlog.errors import StoreError
from pithlog.store import Store, format6, format7
from pithlog.store.layout import META_MERKLE_SIZE
from pithlog.testing import test_keyring_entries

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")

KEPT = ("stored", "replaced", "evidence")


def _events(path: Path, piths: int, seed: int) -> Path:
    """Events of ``piths`` papers, a few with a forged signature, as JSON Lines."""
    rng = random.Random(seed)
    events = g.mixed_events(rng, piths=piths, per_pith=20)
    events += [g.forged(e) for e in rng.sample(events, len(events) // 60)]
    rng.shuffle(events)
    path.write_bytes(b"".join(g.encoded(e) + b"\n" for e in events))
    return path


def _keyring(folder: Path) -> str:
    path = folder / "keyring.json"
    path.write_text(json.dumps({"keyring_version": "1", "keys": test_keyring_entries()}))
    return str(path)


def _pithlog(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pithlog", *argv], capture_output=True,
                          text=True, timeout=600)  # fmt: skip


def _killed(argv: list[str], after: float) -> None:
    """Run ``argv``, SIGKILL it ``after`` seconds from its start (unless it ended)."""
    child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        child.wait(after)
    except subprocess.TimeoutExpired:
        child.send_signal(signal.SIGKILL)
        child.wait()


def _exported(store: Path) -> list[tuple[int, bytes]]:
    with Store.open(store, create=False, readonly=True) as opened:
        return list(opened.export())


def _replays_clean(store: Path) -> None:
    with Store.open(store, create=False) as opened:
        report = opened.replay(g.KEYRING, verify=True, jobs=1)
        assert report.ok, [d.line() for d in report.discrepancies][:5]


# --- append and import ----------------------------------------------------------------------


def _kill_appends(tmp_path: Path, command: str, piths: int, kills: int, seed: int) -> None:
    keyring = _keyring(tmp_path)
    source = _events(tmp_path / "events.jsonl", piths, seed)
    batch = "50"
    if command == "import":  # an export of the same events, as a follower imports it
        made = tmp_path / "made"
        _pithlog("--store", str(made), "append", "--keyring", keyring, str(source))
        source = tmp_path / "export.jsonl"
        source.write_bytes(b"".join(data + b"\n" for _, data in _exported(made)))
    argv = [sys.executable, "-m", "pithlog", command, "--keyring", keyring, "--batch-size",
            batch, str(source)]  # fmt: skip

    # the reference: one run, never killed; which events each batch keeps
    began = time.monotonic()
    done = _pithlog("--store", str(tmp_path / "ref"), *argv[3:])
    took = time.monotonic() - began
    assert done.returncode in (0, 2), done.stderr
    results = [json.loads(line) for line in done.stdout.splitlines()]
    size = int(batch)
    batches = [{r["event_id"] for r in results[i : i + size] if r["status"] in KEPT}
               for i in range(0, len(results), size)]  # fmt: skip
    reference = _exported(tmp_path / "ref")
    assert len(batches) >= 5 and len(reference) > 4 * size

    rng = random.Random(seed)
    landed = set()
    for kill in range(kills):
        store = tmp_path / f"killed{kill}"
        _killed([*argv[:3], "--store", str(store), *argv[3:]], rng.uniform(0.0, took))
        try:
            held = {json.loads(data)["event_id"] for _, data in _exported(store)}
        except StoreError as exc:  # killed before the store's first commit
            assert exc.code == "store.missing", exc
            held = set()
        else:
            _replays_clean(store)
        whole = set()
        for count in range(len(batches) + 1):
            if whole == held:
                landed.add(count)
                break
            assert count < len(batches), f"kill {kill}: not whole batches ({len(held)} events)"
            whole |= batches[count]
        # the same command again finishes the work: the store of the run never killed
        again = _pithlog("--store", str(store), *argv[3:])
        assert again.returncode in (0, 2), again.stderr
        assert _exported(store) == reference
        _replays_clean(store)
    if kills >= 8:
        assert len(landed) >= 3, landed  # the kills came at different moments


@pytest.mark.parametrize("command", ["append", "import"])
def test_append_and_import_killed_at_random_moments(tmp_path: Path, command: str) -> None:
    _kill_appends(tmp_path, command, piths=20, kills=3, seed=7)


@pytest.mark.large
@pytest.mark.parametrize("command", ["append", "import"])
def test_append_and_import_killed_at_many_moments(tmp_path: Path, command: str) -> None:
    _kill_appends(tmp_path, command, piths=150, kills=30, seed=8)


# --- the creation of a store ---------------------------------------------------------------


CREATE = """
import os, signal, sys
from pithlog.store import Store, environment

write = environment.SharedEnvironment.write

def kill(*_):
    os.kill(os.getpid(), signal.SIGKILL)

def killed(self, work):
    if sys.argv[2] == "inside":  # once its work is done, before its commit
        write(self, lambda txn, dbs: (work(txn, dbs), kill()))
    write(self, work)
    kill()  # just after its commit

environment.SharedEnvironment.write = killed
Store.open(sys.argv[1], create=True)
"""
"""Create a store in a process that SIGKILLs itself in (``argv[2]`` "inside") or just after
("after") the first write transaction of the open that creates it."""


@pytest.mark.parametrize("when", ["inside", "after"])
def test_a_store_killed_while_it_is_created_is_no_store_or_a_whole_empty_one(
    tmp_path: Path, when: str
) -> None:
    store = tmp_path / "store"
    child = subprocess.run([sys.executable, "-c", CREATE, str(store), when], timeout=120)
    assert child.returncode == -signal.SIGKILL
    assert (store / "data.mdb").exists()
    if when == "inside":  # nothing committed: no store yet, for a reader and a writer
        for readonly in (True, False):
            with pytest.raises(StoreError) as raised:
                Store.open(store, create=False, readonly=readonly)
            assert raised.value.code == "store.missing", raised.value
    else:  # the first commit made the whole store: a reader takes it as it is
        with Store.open(store, create=False, readonly=True) as opened:
            assert opened.tree_size() == 0
            assert list(opened.export()) == []
            assert opened.stats()["format"] == "7"
    with Store.open(store) as opened:  # an append creates it, or appends to it
        opened.append([g.encoded(e) for e in g.mixed_events(random.Random(3), piths=2,
                                                            per_pith=3)], g.KEYRING)  # fmt: skip
    _replays_clean(store)
    assert len(_exported(store)) > 0


def test_a_store_left_half_created_by_an_older_pithlog_is_completed_by_a_writable_open(
    tmp_path: Path,
) -> None:
    # an older pithlog recorded the format and the tables in one commit and the Merkle
    # tree's size in a second: killed between them, it left a store without merkle_size
    store = tmp_path / "store"
    Store.open(store).close()
    with Store.open(store) as opened:
        opened._write(lambda txn, dbs: txn.delete(META_MERKLE_SIZE, db=dbs["meta"]))
    with pytest.raises(StoreError) as raised:
        Store.open(store, create=False, readonly=True)
    assert raised.value.code == "store.upgrade"
    assert "creation was interrupted" in raised.value.message
    assert "open it once for writing" in raised.value.message
    Store.open(store, create=False).close()  # completes it
    with Store.open(store, create=False, readonly=True) as opened:
        assert opened.tree_size() == 0


# --- the migration of every older format ----------------------------------------------------


OLD_FORMATS = {
    "6": oldformat.as_format_6,
    "5": oldformat.as_format_5,
    "4": oldformat.as_format_4,
    "3": oldformat.as_format_3,
    "2": oldformat.as_format_2,
}

MIGRATE = """
import os, sys, time
from pithlog.store import Store, format6, format7
format6.MIGRATE_CHUNK = format7.MIGRATE_CHUNK = int(sys.argv[2])
os.write(1, b"opening\\n")
began = time.monotonic()
Store.open(sys.argv[1], create=False).close()
os.write(1, b"%f\\n" % (time.monotonic() - began))
"""
"""A writable open of the store (the migration, in steps of ``argv[2]`` entries); it says
when it begins, and how long the open took."""


def _migrate(store: Path, chunk: int, kill_after: float | None) -> float:
    """Open ``store`` in a process of its own; SIGKILL it ``kill_after`` seconds after it
    begins the open, or let it finish and return how long the open took."""
    child = subprocess.Popen([sys.executable, "-c", MIGRATE, str(store), str(chunk)],
                             stdout=subprocess.PIPE)  # fmt: skip
    assert child.stdout is not None
    try:
        assert child.stdout.readline() == b"opening\n"
        if kill_after is None:
            took = float(child.stdout.readline())
            assert child.wait() == 0
            return took
        try:
            child.wait(kill_after)
        except subprocess.TimeoutExpired:
            child.send_signal(signal.SIGKILL)
        child.wait()
        return 0.0
    finally:
        child.stdout.close()
        if child.poll() is None:
            child.kill()
            child.wait()


def _migration_under(store: Path) -> Any:
    """What a reader makes of ``store``: ``None`` when it opens it, else the error code."""
    try:
        with Store.open(store, create=False, readonly=True):
            return None
    except StoreError as exc:
        return exc.code


def _kill_migrations(tmp_path: Path, fmt: str, piths: int, chunk: int, kills: int) -> None:
    events = _events(tmp_path / "events.jsonl", piths, seed=int(fmt)).read_bytes().splitlines()
    fresh = tmp_path / "fresh"
    with Store.open(fresh) as store:  # batches, so that some copies are evidence
        for i in range(0, len(events), 100):
            store.append(events[i : i + 100], g.KEYRING, keep_invalid=True)
    reference = _snapshot(fresh)
    old = tmp_path / "old"
    shutil.copytree(fresh, old)
    OLD_FORMATS[fmt](old)
    assert _migration_under(old) == "store.upgrade"

    timed = tmp_path / "timed"
    shutil.copytree(old, timed)
    took = _migrate(timed, chunk, None)
    assert _snapshot(timed) == reference

    rng = random.Random(int(fmt))
    seen = []
    for kill in range(kills):
        store = tmp_path / f"killed{kill}"
        shutil.copytree(old, store)
        for _ in range(rng.randint(1, 3)):  # killed again while it resumes
            _migrate(store, chunk, rng.uniform(0.0, took))
        # never a half-migrated store a reader takes for a migrated one
        seen.append(_migration_under(store))
        if seen[-1] is None:
            assert _snapshot(store) == reference
        else:
            assert seen[-1] == "store.upgrade", seen
        assert _snapshot(store) == reference  # a writable open finishes it
        with Store.open(store, create=False) as opened:
            assert opened.stats()["format"] == "7"
            assert not opened._read(lambda txn, dbs: format6.migrating(txn, dbs)
                                    or format7.migrating(txn, dbs))  # fmt: skip
        _replays_clean(store)
        shutil.rmtree(store)
    if kills >= 8:
        assert "store.upgrade" in seen  # some kills came during the migration


@pytest.mark.parametrize("fmt", sorted(OLD_FORMATS))
def test_a_migration_killed_at_random_moments_ends_as_a_fresh_store(
    tmp_path: Path, fmt: str
) -> None:
    _kill_migrations(tmp_path, fmt, piths=15, chunk=20, kills=2)


@pytest.mark.large
@pytest.mark.parametrize("fmt", sorted(OLD_FORMATS))
def test_a_migration_killed_at_many_moments_ends_as_a_fresh_store(
    tmp_path: Path, fmt: str
) -> None:
    _kill_migrations(tmp_path, fmt, piths=150, chunk=100, kills=20)
