"""Readers are readers (docs/store.md, "Readers"): a read-only open never waits for a writer
in another process, reads a store its user cannot write, and leaves the store's data as it
found it; a store that needs a writable open first is refused (store.upgrade)."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import random
import select
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import eventgen as g
import oldformat
import pytest

from pithlog.cli import main
from pithlog.errors import StoreError
from pithlog.protocol.checks import check_alone
from pithlog.protocol.events import admit
from pithlog.store import Store
from pithlog.testing import test_keyring_entries

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")

NOBODY = 65534


def run(argv: list[str]) -> tuple[int, bytes, str]:
    out, err = io.BytesIO(), io.StringIO()
    status = main(argv, stdout=out, stderr=err)
    return status, out.getvalue(), err.getvalue()


def make_store(path: Path, seed: int = 3) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    events = [e for e in g.mixed_events(rng, piths=6, per_pith=4)
              if check_alone(admit(e), g.KEYRING) is None]  # fmt: skip
    with Store.open(path) as store:
        store.append([g.encoded(e) for e in events], g.KEYRING)
    return events


def keyring_file(folder: Path) -> str:
    path = folder / "keyring.json"
    path.write_text(json.dumps({"keyring_version": "1", "keys": test_keyring_entries()}))
    return str(path)


def read_everything(path: Path | str) -> dict[str, Any]:
    """What a reader can ask of a store, read-only."""
    with Store.open(path, create=False, readonly=True) as store:
        piths = store.piths()
        return {
            "piths": piths,
            "states": {p["pith_number"]: (store.state(p["pith_number"]) or b"").decode()
                       for p in piths},
            "export": [[seq, data.decode()] for seq, data in store.export()],
            "tree": [store.tree_root()[0], store.tree_root()[1].hex()],
            "events": store.stats()["counts"]["events"],
            "replay_ok": store.replay(g.KEYRING, verify=False).ok,
        }


def in_child(job: Callable[[], Any], uid: int | None = None) -> Any:
    """Run ``job`` in a forked child (as ``uid`` when given) and return what it returned,
    or raise what it raised, as text."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(r)
        try:
            if uid is not None:
                os.setgroups([])
                os.setgid(uid)
                os.setuid(uid)
            try:
                answer = {"ok": job()}
            except StoreError as exc:
                answer = {"error": exc.code, "message": exc.message}
            with os.fdopen(w, "w") as f:
                json.dump(answer, f)
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        text = f.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert text, "the child died before answering"
    return json.loads(text)


# --- a reader beside a writer that holds its transaction ----------------------------------


def test_a_reader_does_not_wait_for_a_writer_in_another_process(tmp_path: Path) -> None:
    """The writer holds its write transaction until the readers have finished (told through
    a pipe); had any reader waited for it, the writer would have let go only after its own
    timeout, and says which happened."""
    path = tmp_path / "s"
    events = make_store(path)
    pith = events[0]["pith_number"]
    expected = read_everything(path)
    holding_r, holding_w = os.pipe()
    release_r, release_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the writer
        code = 1
        try:
            with Store.open(path) as store:

                def hold(txn: Any, dbs: dict[str, Any]) -> None:
                    os.write(holding_w, b"h")
                    told, _, _ = select.select([release_r], [], [], 60)
                    os.write(holding_w, b"s" if told else b"t")

                store._write(hold)
            code = 0
        finally:
            os._exit(code)
    try:
        assert os.read(holding_r, 1) == b"h"  # the write transaction is open
        assert read_everything(path) == expected
        status, out, err = run(["--store", str(path), "state", pith])
        assert status == 0, err
        assert out.rstrip(b"\n").decode() == expected["states"][pith]
        for command in (["stats"], ["pending"], ["export"]):
            status, _, err = run(["--store", str(path), *command])
            assert status == 0, err
        status, _, err = run(["--store", str(path), "replay", "--keyring", keyring_file(tmp_path)])
        assert status == 0, err
    finally:
        os.write(release_w, b"r")
        said = os.read(holding_r, 1)
        _, exit_status = os.waitpid(pid, 0)
    assert said == b"s", "a reader waited for the writer's transaction"
    assert os.waitstatus_to_exitcode(exit_status) == 0


# --- a store this user cannot write ---------------------------------------------------------


@contextlib.contextmanager
def world_readable_folder() -> Iterator[Path]:
    """A folder another user can reach (pytest's tmp_path is private to root)."""
    base = Path(tempfile.mkdtemp(prefix="pithlog-readers-"))
    base.chmod(0o755)
    try:
        yield base
    finally:
        for folder, _, files in os.walk(base):
            os.chmod(folder, 0o755)
            for name in files:
                os.chmod(os.path.join(folder, name), 0o644)
        shutil.rmtree(base)


def freeze(path: Path) -> None:
    for child in path.iterdir():
        child.chmod(0o444)
    path.chmod(0o555)


@pytest.mark.skipif(os.geteuid() != 0, reason="reading as another user needs root to setuid")
def test_a_store_this_user_cannot_write_is_read_read_only() -> None:
    with world_readable_folder() as base:
        path = base / "s"
        make_store(path)
        expected = read_everything(path)
        freeze(path)
        before = {p.name: p.read_bytes() for p in path.iterdir()}
        assert in_child(lambda: read_everything(path), uid=NOBODY) == {"ok": expected}
        # The CLI's readers, as that user, and a writer refused.
        status = in_child(lambda: run(["--store", str(path), "stats"])[0], uid=NOBODY)
        assert status == {"ok": 0}
        refused = in_child(lambda: Store.open(path).close(), uid=NOBODY)
        assert refused["error"] == "store.readonly"
        assert {p.name: p.read_bytes() for p in path.iterdir()} == before


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a file system needs root")
def test_a_store_on_a_read_only_mount_is_read(tmp_path: Path) -> None:
    mount = tmp_path / "mnt"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)],
                          capture_output=True, text=True)  # fmt: skip
    if made.returncode != 0:
        pytest.skip(f"this machine cannot mount a tmpfs: {made.stderr.strip()}")
    try:
        make_store(mount / "s")
        expected = in_child(lambda: read_everything(mount / "s"))
        subprocess.run(["mount", "-o", "remount,ro", str(mount)], check=True)
        # In a child: this process keeps no environment open on the mount.
        assert in_child(lambda: read_everything(mount / "s")) == expected
    finally:
        subprocess.run(["umount", str(mount)], check=True)


# --- the source of a read is left as it was ---------------------------------------------


def data_files(path: Path) -> dict[str, tuple[str, int]]:
    """SHA-256 and mtime of every file of a store but LMDB's lock file (its table of
    readers, which a reader writes by design: docs/store.md, "Readers")."""
    return {p.name: (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
            for p in sorted(path.iterdir()) if p.name != "lock.mdb"}  # fmt: skip


def test_reads_and_sync_from_leave_the_source_unchanged(tmp_path: Path) -> None:
    source = tmp_path / "source"
    make_store(source)
    keyring = keyring_file(tmp_path)
    before = data_files(source)
    read_everything(source)
    for command in (["stats"], ["pending"], ["export"], ["replay", "--keyring", keyring]):
        status, _, err = run(["--store", str(source), *command])
        assert status == 0, err
    status, _, err = run(["--store", str(tmp_path / "mirror"), "sync", "--keyring", keyring,
                          "--from", str(source)])  # fmt: skip
    assert status == 0, err
    assert data_files(source) == before
    assert read_everything(tmp_path / "mirror")["export"] == read_everything(source)["export"]


def test_a_store_that_needs_catching_up_is_refused_read_only_not_written(
    tmp_path: Path,
) -> None:
    source = tmp_path / "source"
    make_store(source)
    oldformat.as_format_6(source)  # a format to be migrated
    before = data_files(source)
    with pytest.raises(StoreError) as refused:
        Store.open(source, create=False, readonly=True)
    assert refused.value.code == "store.upgrade"
    status, _, err = run(["--store", str(tmp_path / "mirror"), "sync", "--keyring",
                          keyring_file(tmp_path), "--from", str(source)])  # fmt: skip
    assert status != 0 and "[store.upgrade]" in err
    assert data_files(source) == before
    # A writable open catches it up; then it reads.
    Store.open(source, create=False).close()
    assert data_files(source) != before
    assert read_everything(source)["replay_ok"]


def test_a_writable_open_beside_a_read_only_one_in_the_same_process(tmp_path: Path) -> None:
    path = tmp_path / "s"
    events = make_store(path)
    reader = Store.open(path, create=False, readonly=True)
    state = reader.state(events[0]["pith_number"])
    with Store.open(path) as writer:  # reopens the shared environment for writing
        writer.append([g.encoded(g.record("2501.09999"))], g.KEYRING)
        assert reader.state(events[0]["pith_number"]) == state
        assert reader.status(g.record("2501.09999")["pith_number"]) is not None
        with pytest.raises(StoreError) as refused:
            reader.append([g.encoded(g.record("2501.09998"))], g.KEYRING)
        assert refused.value.code == "store.readonly"
    reader.close()


HOLD_A_READ = """
import sys, lmdb
env = lmdb.open(sys.argv[1], readonly=True, max_dbs=32)
txn = env.begin()
print("reading", flush=True)
sys.stdin.read()
"""


def test_reader_slots_of_killed_readers_are_cleared_by_a_process_that_keeps_the_store_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process that keeps a store open (``pithlog serve``) is the only one left to clear
    the reader slots of readers killed meanwhile: a read that finds every slot taken
    clears them (LMDB's reader_check) and begins again, rather than failing with
    store.readers_full until another process opens the store for writing."""
    import lmdb

    from pithlog.store import environment

    lmdb_open = lmdb.open
    # a table of 4 readers, not 254: LMDB sizes it from a new lock file left to it
    monkeypatch.setattr(lmdb, "open", lambda *a, **kw: lmdb_open(*a, max_readers=4, **kw))
    monkeypatch.setattr(environment, "_allocate_lock_file", lambda real: None)
    path = tmp_path / "store"
    make_store(path)
    with Store.open(path, create=False, readonly=True) as store:
        readers = []
        try:
            for _ in range(8):  # until the table is full
                child = subprocess.Popen([sys.executable, "-c", HOLD_A_READ, str(path)],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE)  # fmt: skip
                assert child.stdout is not None
                if child.stdout.readline() != b"reading\n":
                    child.communicate()
                    break
                readers.append(child)
            else:
                pytest.fail("the reader table never filled")
        finally:
            for child in readers:
                child.kill()
                child.communicate()
        assert readers
        # two reads at once: the second needs a slot of its own
        nested = store._read(lambda txn, dbs: store._read(lambda txn, dbs: store.piths()))
        assert nested == store.piths()
