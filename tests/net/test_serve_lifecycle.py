"""``pithlog serve --workers N`` as a service manager runs it: a worker killed, the files it
was started on changed meanwhile, and the signals that stop it (docs/network.md, "The
command")."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from served import STOP_SECONDS, Files, Server, make_files, serving, spawned_children

WAIT_SECONDS = 60.0


@pytest.fixture
def files(tmp_path: Path) -> Files:
    return make_files(tmp_path, piths=5)


def _said(server: Server, line: str) -> list[str]:
    """The lines the server said on stderr, once its pipe has given ``line`` (its drain may
    lag the process's end), at most :data:`STOP_SECONDS` later."""
    deadline = time.monotonic() + STOP_SECONDS
    while line.encode() not in server.stderr and time.monotonic() < deadline:
        time.sleep(0.05)
    return server.stderr.decode().splitlines()


def _kill_a_worker(server: Server) -> None:
    workers = spawned_children(server.process.pid)
    assert len(workers) == 2
    os.kill(workers[0], signal.SIGKILL)


def test_a_worker_that_cannot_start_again_stops_the_server_with_its_line(files: Files) -> None:
    """A worker killed is replaced by one that reads the key file again: with the file
    removed meanwhile, each replacement failed with a traceback and was replaced again (25
    processes and 46 tracebacks in 15 s), the server serving on at half its workers for
    ever. Now the server stops, the worker's one line and the server's said, status 2."""
    with serving(files, "--workers", "2", submit=True) as server:
        files.key.unlink()
        _kill_a_worker(server)
        status = server.process.wait(WAIT_SECONDS)
        server.process.wait(STOP_SECONDS)
    lines = _said(server, "[serve.worker_failed]")
    err = "\n".join(lines)
    assert status == 2, err
    assert "Traceback" not in err, err
    assert any(line.startswith("ERROR:    a worker could not start: [usage.unreadable] cannot "
                               f"read {files.key}") for line in lines), err  # fmt: skip
    assert lines[-1].startswith("pithlog: [serve.worker_failed] "), err


def test_a_worker_never_serves_another_store_than_the_servers(files: Files) -> None:
    """The store renamed while serving, then a worker killed: its replacement (which opens
    the store again, creating it with --submit) made a new empty store at the path and
    served it beside the other worker, /checkpoint signing a tree of 0 after 55, two logs
    behind one URL. Now it refuses (``store.missing``: it never creates the store) and the
    server stops; a store replaced at the path is refused as ``store.moved``."""
    with serving(files, "--workers", "2", submit=True) as server:
        files.store.rename(files.root / "elsewhere")
        _kill_a_worker(server)
        status = server.process.wait(WAIT_SECONDS)
    assert status == 2, server.stderr.decode()
    assert not files.store.exists()
    assert any("could not start: [store.missing]" in x for x in _said(server, "worker_failed"))


def test_a_worker_refuses_a_store_replaced_at_its_path(files: Files) -> None:
    import shutil

    with serving(files, "--workers", "2", submit=True) as server:
        shutil.copytree(files.store, files.root / "copy")
        files.store.rename(files.root / "elsewhere")
        (files.root / "copy").rename(files.store)  # a backup restored over it
        _kill_a_worker(server)
        status = server.process.wait(WAIT_SECONDS)
    assert status == 2, server.stderr.decode()
    assert any("could not start: [store.moved]" in x for x in _said(server, "worker_failed"))


@pytest.mark.parametrize(("sig", "status", "line"), [(signal.SIGTERM, 143, "pithlog: terminated"),
                                                     (signal.SIGINT, 130, "pithlog: interrupted")])
def test_with_workers_a_stop_ends_as_with_one_worker(files: Files, sig: int, status: int,
                                                     line: str) -> None:  # fmt: skip
    """SIGTERM and SIGINT stopped ``serve --workers 2`` with status 0 and no line, where
    one worker's ends 143 or 130 with its line, as every command does."""
    with serving(files, "--workers", "2", submit=True) as server:
        server.process.send_signal(sig)
        got = server.process.wait(WAIT_SECONDS)
    assert got == status, server.stderr.decode()
    assert _said(server, line)[-1] == line
