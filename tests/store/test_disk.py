"""A full disk is an error, never a crash (docs/store.md, "The disk"): the main store and
replay's scratch index on small tmpfs mounts, scratch files gone on every exit, damaged
store files refused or read by a process that survives them. Every command that could die
of a signal runs in a child process, so that a crash fails the test instead of pytest."""

from __future__ import annotations

import contextlib
import io
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import eventgen as g
import pytest

from pithlog.cli import main
from pithlog.errors import StoreError
from pithlog.protocol.checks import check_alone
from pithlog.protocol.events import admit
from pithlog.store import Store
from pithlog.store.environment_scratch import scratch_index
from pithlog.testing import test_keyring_entries

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")


def events(seed: int, piths: int = 6) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [e for e in g.mixed_events(rng, piths=piths, per_pith=4)
            if check_alone(admit(e), g.KEYRING) is None]  # fmt: skip


def keyring_file(folder: Path) -> str:
    path = folder / "keyring.json"
    path.write_text(json.dumps({"keyring_version": "1", "keys": test_keyring_entries()}))
    return str(path)


def pithlog(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The CLI in a process of its own: a signal kills it, not the test."""
    return subprocess.run([sys.executable, "-m", "pithlog", *argv], capture_output=True,
                          text=True, env={**os.environ, **(env or {})}, timeout=300)  # fmt: skip


def assert_error(done: subprocess.CompletedProcess[str], code: str) -> None:
    assert done.returncode >= 0, f"killed by signal {-done.returncode}: {done.stderr}"
    assert done.returncode == 2, done.stderr
    assert f"[{code}]" in done.stderr, done.stderr


@contextlib.contextmanager
def tmpfs(where: Path, size: str) -> Iterator[Path]:
    where.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                          capture_output=True, text=True)  # fmt: skip
    if made.returncode != 0:
        pytest.skip(f"this machine cannot mount a tmpfs (as root): {made.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", str(where)], check=True)


# --- replay's scratch index -----------------------------------------------------------------


def test_replay_with_a_full_tmpdir_is_store_disk_and_leaves_nothing(tmp_path: Path) -> None:
    """Enough copies that the scratch index outgrows 64 KiB: a write into the mapping of
    its sparse file used to kill replay with SIGBUS, leaving its files behind. A healthy
    store needs no scratch index (the structure pass proves it in one pass); a damaged one
    is checked table by table, with the index."""
    store = tmp_path / "s"
    with Store.open(store) as s:
        s.append([g.encoded(e) for e in events(1, piths=250)], g.KEYRING)
        assert s.stats()["counts"]["seq"] > 1000
    keyring = keyring_file(tmp_path)
    with tmpfs(tmp_path / "tmp", "64k") as tmp:
        done = pithlog("--store", str(store), "replay", "--keyring", keyring,
                       env={"TMPDIR": str(tmp)})  # fmt: skip
        assert done.returncode == 0, done.stderr
        with Store.open(store) as s:  # damage: an event no longer in by_pith
            s._write(lambda txn, dbs: txn.delete(next(txn.cursor(db=dbs["by_pith"]).iternext(
                values=False)), db=dbs["by_pith"]))  # fmt: skip
        done = pithlog("--store", str(store), "replay", "--keyring", keyring,
                       env={"TMPDIR": str(tmp)})  # fmt: skip
        assert_error(done, "store.disk")
        assert "TMPDIR" in done.stderr
        assert os.listdir(tmp) == []
    done = pithlog("--store", str(store), "replay", "--keyring", keyring)
    assert done.returncode == 1, done.stderr
    assert "not indexed under its pith" in done.stdout


def _scratch_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    return scratch


def test_scratch_files_are_gone_after_an_error_or_an_interrupt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    scratch = _scratch_dir(monkeypatch, tmp_path)
    raised: BaseException
    for raised in (KeyboardInterrupt(), StoreError("corrupted", "damage found")):
        with pytest.raises(type(raised)), scratch_index(100) as itx:
            itx.put(b"k" * 64, b"v" * 8)
            raise raised
        assert os.listdir(scratch) == []


def test_scratch_files_are_gone_after_a_kill(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    scratch = _scratch_dir(monkeypatch, tmp_path)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - killed while it holds the index
        try:
            with scratch_index(1000) as itx:
                itx.put(b"k" * 64, b"v" * 8)
                os.write(w, b"in")
                signal.pause()
        finally:
            os._exit(1)
    os.close(w)
    assert os.read(r, 2) == b"in"
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    assert os.listdir(scratch) == []


# --- the main store -------------------------------------------------------------------------


def test_a_full_disk_under_the_store_is_store_disk_and_loses_nothing(tmp_path: Path) -> None:
    keyring = keyring_file(tmp_path)
    with tmpfs(tmp_path / "disk", "256k") as disk:
        store = disk / "s"
        committed = 0
        for batch in range(1, 200):
            log = tmp_path / f"batch{batch}.jsonl"
            log.write_bytes(b"".join(g.encoded(e) + b"\n" for e in events(batch)))
            done = pithlog("--store", str(store), "append", "--keyring", keyring, str(log))
            if done.returncode != 0:
                break
            committed = batch
        else:
            pytest.fail("256 KiB never filled up")
        assert_error(done, "store.disk")
        assert committed > 0, done.stderr
        # What was committed before is all there and sound.
        with Store.open(store, create=False, readonly=True) as s:
            assert s.replay(g.KEYRING).ok
            held = {e for e in (json.loads(d)["event_id"] for _, d in s.export())}
        assert held == {e["event_id"] for b in range(1, committed + 1) for e in events(b)}


def test_a_store_created_on_a_full_disk_is_store_disk(tmp_path: Path) -> None:
    """LMDB makes its lock file sparse and writes it through a mapping: on a full disk that
    was a SIGBUS (status 135) before the store's first byte."""
    log = tmp_path / "events.jsonl"
    log.write_bytes(b"".join(g.encoded(e) + b"\n" for e in events(4)))
    keyring = keyring_file(tmp_path)
    with tmpfs(tmp_path / "disk", "64k") as disk:
        with contextlib.suppress(OSError), open(disk / "filler", "wb") as filler:
            filler.write(b"\0" * (64 << 10))  # as much as fits: ENOSPC
        assert shutil.disk_usage(disk).free < 4096
        done = pithlog("--store", str(disk / "s"), "append", "--keyring", keyring, str(log))
        assert_error(done, "store.disk")


def test_lmdb_disk_errors_are_store_disk() -> None:
    """LMDB reports a short write (a full file system) as EIO, which py-lmdb has no class
    for: it is store.disk, like ENOSPC."""
    import lmdb

    from pithlog.store.environment_errors import _store_error

    for text in ("mdb_txn_commit: Input/output error", "mdb_txn_commit: No space left on device"):
        assert _store_error(lmdb.Error(text)).code == "store.disk"
    assert _store_error(lmdb.Error("mdb_put: Invalid argument")).code == "store.lmdb"


def test_readers_full_says_what_a_user_can_do() -> None:
    """store.readers_full tells the user to have fewer processes read at once, not to pass
    py-lmdb a larger max_readers, which no pithlog command takes."""
    import lmdb

    from pithlog.store.environment_errors import _store_error

    error = _store_error(lmdb.ReadersFullError(
        "mdb_txn_begin: MDB_READERS_FULL: Environment maxreaders limit reached "
        "(Please use a larger Environment(max_readers=) parameter)"))  # fmt: skip
    assert error.code == "store.readers_full"
    assert "max_readers" not in error.message and "Please use" not in error.message
    assert "MDB_READERS_FULL" in error.message and "close some of them" in error.message


@pytest.mark.parametrize(("name", "code"), [
    ("CorruptedError", "store.corrupted"),
    ("PanicError", "store.corrupted"),
    ("PageNotFoundError", "store.corrupted"),
    ("InvalidError", "store.not_a_store"),
    ("VersionMismatchError", "store.not_a_store"),
    ("IncompatibleError", "store.not_a_store"),
    ("ReadersFullError", "store.readers_full"),
    ("TxnFullError", "store.txn_full"),
    ("ReadonlyError", "store.readonly"),
    ("DiskError", "store.disk"),
    ("LockError", "store.lock"),
])  # fmt: skip
def test_each_lmdb_error_class_has_its_store_code(name: str, code: str) -> None:
    """What cannot be provoked on demand (a transaction of too many dirty pages, a lock
    held against this process, damage) is mapped by LMDB's error class: each keeps the
    code docs/errors.md gives it, with LMDB's text as the message."""
    import lmdb

    from pithlog.store.environment_errors import _store_error

    error = _store_error(getattr(lmdb, name)("mdb_env_open: some cause"))
    assert (error.code, error.exit_status) == (code, 2)
    assert "some cause" in error.message


# --- damaged store files --------------------------------------------------------------------


def _damaged_copy(source: Path, target: Path, rng: random.Random) -> None:
    shutil.copytree(source, target)
    data = target / "data.mdb"
    raw = bytearray(data.read_bytes())
    how = rng.randrange(3)
    if how == 0:  # truncated
        raw = raw[: rng.randrange(2 * 4096, len(raw))]
    else:  # bytes overwritten past the meta pages
        for _ in range(rng.randrange(1, 64)):
            at = rng.randrange(2 * 4096, len(raw))
            raw[at] = rng.randrange(256) if how == 1 else 0xFF
    data.write_bytes(bytes(raw))


def test_a_truncated_store_file_is_refused_before_it_is_mapped(tmp_path: Path) -> None:
    source = tmp_path / "source"
    with Store.open(source) as s:
        s.append([g.encoded(e) for e in events(2, piths=30)], g.KEYRING)
    data = source / "data.mdb"
    size = data.stat().st_size
    with open(data, "r+b") as f:
        f.truncate(size // 2)
    keyring = keyring_file(tmp_path)
    assert_error(pithlog("--store", str(source), "stats"), "store.corrupted")
    assert_error(pithlog("--store", str(tmp_path / "mirror"), "sync", "--keyring", keyring,
                         "--from", str(source)), "store.corrupted")  # fmt: skip


def in_child(argv: list[str]) -> int:
    """``pithlog ARGV`` in a forked child: its exit status, or minus the signal that killed
    it."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        status = 70
        try:
            status = main(argv, stdout=io.BytesIO(), stderr=io.StringIO())
        finally:
            os._exit(status)
    _, waited = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(waited)


def test_damaged_store_files_never_kill_the_reader(tmp_path: Path) -> None:
    """40 damaged copies (truncated, or bytes overwritten), each read by `sync --from` and
    `replay --verify` in a process of its own: an error or a report, never a signal."""
    source = tmp_path / "source"
    with Store.open(source) as s:
        s.append([g.encoded(e) for e in events(3, piths=30)], g.KEYRING)
    keyring = keyring_file(tmp_path)
    rng = random.Random(17)
    refused = 0
    for attempt in range(40):
        copy = tmp_path / f"damaged{attempt}"
        _damaged_copy(source, copy, rng)
        mirror = str(tmp_path / f"mirror{attempt}")
        for argv in (["--store", mirror, "sync", "--keyring", keyring, "--from", str(copy)],
                     ["--store", str(copy), "replay", "--verify", "--keyring", keyring]):
            status = in_child(argv)
            assert status >= 0, (attempt, argv[2], f"killed by signal {-status}")
            refused += status == 2
    assert refused > 0  # the damage was seen



@pytest.mark.parametrize(("meta", "offset", "bit"), [
    ("newest", 16, 0), ("older", 16, 0),  # magic
    ("newest", 21, 5), ("older", 21, 5),  # version
    ("newest", 40, 5), ("older", 41, 0),  # page size
    ("newest", 44, 5),  # the free database's flags
    ("newest", 90, 0),  # the main database's
])  # fmt: skip
def test_a_damaged_meta_page_is_store_corrupted(
    tmp_path: Path, meta: str, offset: int, bit: int
) -> None:
    """A bit flipped in one of the two meta pages: LMDB refuses the file as "not an LMDB
    file" (or py-lmdb as a data format it does not know), which was `store.not_a_store`
    (check --store) or `store.lmdb`, while the other meta page is sound: the file is
    damaged. (LMDB reads the databases' fields of the newest meta page only.)"""
    source = tmp_path / "source"
    with Store.open(source) as s:
        s.append([g.encoded(e) for e in events(5)], g.KEYRING)
    data = source / "data.mdb"
    raw = bytearray(data.read_bytes())
    txnids = [int.from_bytes(raw[page * 4096 + 128 : page * 4096 + 136], "little")
              for page in (0, 1)]  # fmt: skip
    newest = txnids.index(max(txnids))
    page = newest if meta == "newest" else 1 - newest
    raw[page * 4096 + offset] ^= 1 << bit
    data.write_bytes(bytes(raw))
    keyring = keyring_file(tmp_path)
    for argv in (["replay", "--verify", "--keyring", keyring], ["stats"],
                 ["append", "--keyring", keyring, os.devnull]):  # fmt: skip
        assert_error(pithlog("--store", str(source), *argv), "store.corrupted")


def test_after_a_full_disk_the_store_goes_on_once_space_is_freed(tmp_path: Path) -> None:
    """One `pithlog append` of many batches on a disk that fills up part way: the batch
    that did not fit leaves nothing (the store holds exactly the batches reported), and
    once space is freed the same append, run again, finishes the log as a run on an
    ample disk writes it, and replay with signatures is clean."""
    keyring = keyring_file(tmp_path)
    log = tmp_path / "events.jsonl"
    log.write_bytes(b"".join(g.encoded(e) + b"\n" for e in events(9, piths=120)))
    argv = ["append", "--keyring", keyring, "--batch-size", "40", str(log)]
    reference = tmp_path / "reference"
    assert pithlog("--store", str(reference), *argv).returncode == 0
    with Store.open(reference, create=False, readonly=True) as s:
        expected = list(s.export())
    with tmpfs(tmp_path / "disk", "4m") as disk:
        store = disk / "s"
        with contextlib.suppress(OSError), open(disk / "filler", "wb") as filler:
            # room for a few batches only
            filler.write(b"\0" * (shutil.disk_usage(disk).free - (512 << 10)))
        done = pithlog("--store", str(store), *argv)
        assert_error(done, "store.disk")
        reported = [json.loads(line)["event_id"] for line in done.stdout.splitlines()]
        assert 0 < len(reported) < len(expected), done.stderr
        with Store.open(store, create=False, readonly=True) as s:
            held = [json.loads(data)["event_id"] for _, data in s.export()]
        assert held == reported  # every batch reported, and nothing of the one that failed
        os.unlink(disk / "filler")
        assert pithlog("--store", str(store), *argv).returncode == 0
        with Store.open(store, create=False) as s:
            assert list(s.export()) == expected
            report = s.replay(g.KEYRING, verify=True, jobs=1)
            assert report.ok, [d.line() for d in report.discrepancies]
