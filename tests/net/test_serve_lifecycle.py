"""``pithlog serve --workers N`` as a service manager runs it: a worker killed, the files it
was started on changed meanwhile, and the signals that stop it (docs/network.md, "The
command")."""

from __future__ import annotations

import os
import signal
import socket
import time
from pathlib import Path

import pytest
from served import STOP_SECONDS, Files, Server, g, make_files, serving, spawned_children

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


HUP_LINE = ("WARNING:  SIGHUP ignored: serve does not reload (it reads the key, the keyring "
            "and the store when it starts); restart it to read them again")


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_sighup_is_ignored_with_one_line_the_requests_in_flight_answered(
    files: Files, workers: str
) -> None:
    """``systemctl reload`` sends SIGHUP. With one worker it killed the server at once (no
    line, status -1, the submission in flight cut); with two, uvicorn's supervisor
    replaced each worker, silently (its lines are below ``warning``), a replacement that
    could not start dropped where a worker that died stops the server. Now it is ignored
    with one line, by the command and by its workers (a terminal's hang-up reaches them
    all): the same workers serve on, the submission in flight is answered, and SIGTERM
    still ends the server with its line and 143."""
    record = g.encoded(g.record("2599.03000")) + b"\n"
    head = (b"POST /submit HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
            b"Content-Length: %d\r\n\r\n" % len(record))  # fmt: skip
    with serving(files, "--workers", workers, submit=True) as server, \
            socket.create_connection(server.address, timeout=WAIT_SECONDS) as sock:  # fmt: skip
        before = sorted(spawned_children(server.process.pid))
        sock.sendall(head + record[:10])  # in flight: its body half sent
        for pid in [server.process.pid, *before]:
            os.kill(pid, signal.SIGHUP)
        _said(server, HUP_LINE)
        sock.sendall(record[10:])
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
        assert answer.startswith(b"HTTP/1.1 200 "), (answer, server.stderr.decode())
        assert b'"status":"stored"' in answer
        assert server.process.poll() is None
        assert sorted(spawned_children(server.process.pid)) == before
        server.process.send_signal(signal.SIGTERM)
        status = server.process.wait(WAIT_SECONDS)
    lines = _said(server, "pithlog: terminated")
    assert status == 143, "\n".join(lines)
    assert lines.count(HUP_LINE) == 1, "\n".join(lines)
    assert lines[-1] == "pithlog: terminated"


@pytest.mark.parametrize(("sig", "how"), [
    (signal.SIGKILL, "killed by signal SIGKILL"),
    (signal.SIGSTOP, "killed by the supervisor: it answered no health check within 5 s"),
])  # fmt: skip
def test_a_worker_that_dies_is_said_with_how_it_ended_and_its_replacement(
    files: Files, sig: int, how: str
) -> None:
    """A worker killed (``kill -9``, the kernel out of memory), or hung (stopped: uvicorn's
    supervisor kills it when it answers no health check), is replaced by the supervisor,
    which said so at ``info``, below the ``warning`` serve logs at: nothing was said. Now
    one warning line names the worker, how it ended and the new one."""
    with serving(files, "--workers", "2") as server:
        workers = spawned_children(server.process.pid)
        os.kill(workers[0], sig)
        deadline = time.monotonic() + WAIT_SECONDS
        while workers[0] in (now := spawned_children(server.process.pid)) or len(now) < 2:
            assert time.monotonic() < deadline, server.stderr.decode()
            time.sleep(0.05)
        (new,) = set(now) - set(workers)
        line = (f"WARNING:  a worker (pid {workers[0]}) ended, {how}; "
                f"a new one (pid {new}) was started in its place")  # fmt: skip
        lines = _said(server, line)
        assert line in lines, "\n".join(lines)
        assert server.process.poll() is None
