"""The app in-process (Starlette's test client) for what a real server cannot be made to
do on demand: a failing store read answers JSON 500 without a traceback; and the serve
command's refusals before it listens."""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import random
import signal
import tempfile
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from served import ORIGIN, Files, g, loop_watched, make_files, serving, spawned_children

with warnings.catch_warnings():  # Starlette would have httpx2; httpx is what pithlog uses
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient
from starlette.routing import Mount

from pithlog.cli import main
from pithlog.errors import StoreError, WitnessError
from pithlog.net import served_log
from pithlog.net.app import LogApp, ServeApp, create_app
from pithlog.net.served_log import Log, ServeConfig
from pithlog.net.server import REUSE_PORT, _ready_folder, _say_when_ready
from pithlog.protocol.keys import load_key_file, load_keyring
from pithlog.store import Store
from pithlog.testing import test_key, write_key_file
from pithlog.transparency import tiles


@pytest.fixture
def files(tmp_path: Path) -> Files:
    return make_files(tmp_path, piths=3, per_pith=3)


def test_an_unexpected_failure_is_json_without_a_traceback(
    files: Files, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Store.open(files.store, readonly=True) as store:
        app = create_app(ServeConfig(store, load_key_file(files.key.read_bytes()), ORIGIN))

        def broken(*args: Any) -> None:
            raise RuntimeError("secret detail /etc/shadow")

        monkeypatch.setattr(store, "stats", broken)
        with TestClient(app, raise_server_exceptions=False) as client:
            got = client.get("/stats")
            assert got.status_code == 500
            assert got.json() == {"error": "serve.internal",
                                  "message": "the server failed to answer"}  # fmt: skip
            assert b"secret" not in got.content and b"Traceback" not in got.content
            assert client.get("/healthz").status_code == 200  # and it goes on serving


def test_an_unexpected_failure_of_a_submission_is_json_without_a_traceback(
    files: Files, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``POST /submit`` goes around Starlette's error middleware (``LogApp``): its own
    answer to a failure is the same JSON 500, and the exception still reaches the server
    (here the test client) to be logged."""
    keyring = load_keyring(files.keyring.read_bytes())
    with Store.open(files.store) as store:
        config = ServeConfig(store, load_key_file(files.key.read_bytes()), ORIGIN, keyring)
        app = create_app(config)
        assert isinstance(app, LogApp) and app.submit.submissions is not None

        async def broken(*args: Any) -> None:
            raise RuntimeError("secret detail /etc/shadow")

        monkeypatch.setattr(app.submit.submissions, "submit", broken)
        size = store.tree_size()
        with TestClient(app, raise_server_exceptions=False) as client:
            got = client.post("/submit", content=b"{}\n")
            assert got.status_code == 500
            assert got.json() == {"error": "serve.internal",
                                  "message": "the server failed to answer"}  # fmt: skip
            assert b"secret" not in got.content and b"Traceback" not in got.content
            assert client.get("/healthz").json()["tree_size"] == size
        with TestClient(app, raise_server_exceptions=True) as client,\
                pytest.raises(RuntimeError, match="secret detail"):  # fmt: skip
            client.post("/submit", content=b"{}\n")


@pytest.mark.parametrize("length", [b"x", b"-1", b"+1", b"1 ", "\u00b2".encode("latin-1")])
def test_a_content_length_that_is_not_a_decimal_is_a_json_400(files: Files,
                                                               length: bytes) -> None:
    """A server embedding the app may hand it a Content-Length its own parser let through
    (uvicorn's refuses these first): ``int()`` of it would raise, or read ``-1``, ``+1``
    and ``1 `` as numbers, or ``\u00b2`` (a digit to ``str.isdigit``) as an error."""
    keyring = load_keyring(files.keyring.read_bytes())
    with Store.open(files.store) as store:
        app = create_app(ServeConfig(store, load_key_file(files.key.read_bytes()), ORIGIN,
                                     keyring))  # fmt: skip
        size = store.tree_size()
        with TestClient(app, raise_server_exceptions=False) as client:
            got = client.post("/submit", content=b"", headers={"content-length": length})
            assert got.status_code == 400, got.content
            assert got.json()["error"] == "serve.bad_request"
            assert client.get("/healthz").json()["tree_size"] == size


@pytest.mark.parametrize("budget", [1, 5000])
def test_copies_are_read_in_parts_of_a_byte_budget(
    files: Files, monkeypatch: pytest.MonkeyPatch, budget: int
) -> None:
    """``/copies/`` reads a bundle's copies about ``COPIES_READ_BYTES`` at a time (here one
    copy a read, then a few): the bundle is every copy once, in leaf order."""
    import pithlog.net.app as served_app

    monkeypatch.setattr(served_app, "COPIES_READ_BYTES", budget)
    with Store.open(files.store, readonly=True) as store:
        exported = [copy for _, copy in store.export()]
        reads: list[int] = []
        leaf_copies = store.leaf_copies

        def counted(*args: Any) -> Any:
            got = leaf_copies(*args)
            reads.append(len(got or []))
            return got

        monkeypatch.setattr(store, "leaf_copies", counted)
        app = create_app(ServeConfig(store, load_key_file(files.key.read_bytes()), ORIGIN))
        with TestClient(app) as client:
            got = client.get(f"/copies/000.p/{len(exported)}")
        assert got.status_code == 200
        assert got.content == b"".join(copy + b"\n" for copy in exported)
        assert sum(reads) == len(exported)
        if budget == 1:
            assert reads == [1] * len(exported)
        else:
            assert 1 < len(reads) < len(exported) and max(reads) > 1


def test_a_streamed_bundle_of_copies_is_compressed_apart_from_the_event_loop(
    files: Files, monkeypatch: pytest.MonkeyPatch
) -> None:
    """starlette-compress compressed each chunk of ``/copies/`` (about 1 MiB of copies) on
    the event loop: a bundle of 9.4 MB of copies held every other request of the worker
    up to 531 ms in gzip, 296 ms in brotli. A bundle of several chunks, or of one of
    APART_BYTES or more, is compressed chunk by chunk in a worker thread, one stream the
    middleware passes through; a small one is left to the middleware."""
    import pithlog.net.app as served_app
    from pithlog.net import encoding

    on_loop: list[bool] = []
    packer = encoding._stream_packer

    def watched(coding: str) -> Any:
        feed, end = packer(coding)
        return loop_watched(on_loop, feed), loop_watched(on_loop, end)

    monkeypatch.setattr(encoding, "_stream_packer", watched)
    with Store.open(files.store, readonly=True) as store:
        exported = b"".join(copy + b"\n" for _, copy in store.export())
        path = f"/copies/000.p/{store.tree_size()}"
        app = create_app(ServeConfig(store, load_key_file(files.key.read_bytes()), ORIGIN))
        with TestClient(app) as client:
            small = client.get(path, headers={"accept-encoding": "gzip"})  # one chunk
            assert small.headers["content-encoding"] == "gzip" and on_loop == []
            assert small.content == exported
            monkeypatch.setattr(served_app, "COPIES_READ_BYTES", 5000)  # several chunks
            for accept, coding in (("zstd, br, gzip", "zstd"), ("br", "br"), ("gzip", "gzip")):
                got = client.get(path, headers={"accept-encoding": accept})
                assert got.headers["content-encoding"] == coding
                assert got.headers["vary"] == "Accept-Encoding"
                assert got.content == exported  # httpx decodes each
            plain = client.get(path, headers={"accept-encoding": "identity"})
            assert "content-encoding" not in plain.headers and plain.content == exported
    assert len(on_loop) > 6 and not any(on_loop)


def run(argv: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    status = main(argv, stdout=io.BytesIO(), stderr=err)
    return status, err.getvalue()


def test_serve_refuses_before_listening(files: Files, tmp_path: Path) -> None:
    base = ["--store", str(files.store), "serve", "--listen", "127.0.0.1:0", "--key",
            str(files.key)]  # fmt: skip
    status, err = run([*base, "--origin", ORIGIN, "--submit"])
    assert status == 2 and "[usage.arguments]" in err and "--keyring" in err
    author = tmp_path / "author.key"
    write_key_file(author, test_key("author"))
    status, err = run([*base[:-1], str(author), "--origin", ORIGIN])
    assert status == 2 and "[checkpoint.key]" in err
    status, err = run(["--store", str(tmp_path / "none"), *base[2:], "--origin", ORIGIN])
    assert status == 2 and "[store.missing]" in err
    status, err = run([*base[:4], "nowhere", *base[5:], "--origin", ORIGIN])
    assert status == 2 and "[usage.arguments]" in err


def test_workers_serve_one_address(files: Files) -> None:
    import httpx

    with serving(files, "--workers", "2") as server:
        with httpx.Client(base_url=server.url, timeout=30) as client:
            sizes = {client.get("/healthz").json()["tree_size"] for _ in range(8)}
            with Store.open(files.store, readonly=True) as store:
                assert sizes == {store.tree_size()}
            assert client.get("/checkpoint").status_code == 200
        assert b"Traceback" not in server.stderr


def _tcp_sockets(pid: int, port: int) -> dict[str, int]:
    """What the process ``pid`` holds of TCP sockets on the local ``port``, listening or
    connected: the count per state (``/proc/net/tcp``: ``0A`` listening, ``01``
    established; a socket bound only is not listed)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(target[len("socket:["):-1])
    states: dict[str, int] = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for row in Path(table).read_text().splitlines()[1:]:
            fields = row.split()
            if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[9] in inodes:
                states[fields[3]] = states.get(fields[3], 0) + 1
    return states


@pytest.mark.skipif(not REUSE_PORT or not Path("/proc/net/tcp").exists(),
                    reason="needs SO_REUSEPORT and /proc")  # fmt: skip
def test_each_worker_listens_on_a_socket_of_its_own(files: Files) -> None:
    """With --workers 2 each worker accepts on its own socket of the port, and the
    supervisor only holds the port, listening on nothing (docs/network.md, --workers):
    the kernel spreads connections over the workers. On one shared socket the worker
    that woke first took every waiting connection: all 32 of a burst, in one of four
    runs of the bench's submitters."""
    import httpx

    with serving(files, "--workers", "2") as server:
        port = int(server.url.rsplit(":", 1)[1])
        workers = spawned_children(server.process.pid)
        assert _tcp_sockets(server.process.pid, port) == {}
        assert [_tcp_sockets(worker, port) for worker in workers] == [{"0A": 1}] * 2
        clients = [httpx.Client(base_url=server.url, timeout=30) for _ in range(32)]
        try:
            for client in clients:
                assert client.get("/healthz").status_code == 200
            held = [_tcp_sockets(worker, port).get("01", 0) for worker in workers]
        finally:
            for client in clients:
                client.close()
    # each connection goes to either worker by its address: all 32 to one, 1 in 2**31
    assert sum(held) == 32 and min(held) > 0, held


@pytest.mark.skipif(not REUSE_PORT, reason="needs SO_REUSEPORT")
def test_workers_do_not_join_a_port_another_server_listens_on(files: Files,
                                                              tmp_path: Path) -> None:  # fmt: skip
    """SO_REUSEPORT joins any listener of this user that set it too: a second `serve
    --workers 2` on the port of a running one shared its connections, one URL serving two
    logs. It is refused as a port in use, as one worker's server is."""
    import subprocess
    import sys

    (tmp_path / "other").mkdir()
    other = make_files(tmp_path / "other", piths=5)  # another log, of another size
    with serving(files, "--workers", "2") as server:
        listen = server.url.removeprefix("http://")
        for workers in ("2", "1"):
            argv = [sys.executable, "-m", "pithlog", "--store", str(other.store), "serve",
                    "--listen", listen, "--key", str(other.key), "--origin", ORIGIN,
                    "--workers", workers]  # fmt: skip
            second = subprocess.run(argv, capture_output=True, text=True, timeout=60)
            assert second.returncode == 2, second.stderr
            assert second.stderr.strip().startswith(f"pithlog: [usage.arguments] cannot listen "
                                                    f"on {listen}: ")  # fmt: skip
        import httpx

        with httpx.Client(base_url=server.url, timeout=30) as client:
            sizes = {client.get("/healthz").json()["tree_size"] for _ in range(12)}
        assert len(sizes) == 1  # one log behind the URL


@pytest.mark.skipif(not REUSE_PORT or not Path("/proc/net/tcp").exists(),
                    reason="needs SO_REUSEPORT and /proc")  # fmt: skip
def test_a_worker_that_dies_is_replaced_with_a_socket_of_its_own(files: Files) -> None:
    """uvicorn's supervisor replaces a worker that died; the new one listens on a socket
    of its own too (the held port is handed over again), and the server answers."""
    import httpx

    with serving(files, "--workers", "2") as server:
        port = int(server.url.rsplit(":", 1)[1])
        first = spawned_children(server.process.pid)
        os.kill(first[0], signal.SIGKILL)
        deadline = time.monotonic() + 30
        while True:
            now = spawned_children(server.process.pid)
            listening = [_tcp_sockets(worker, port) for worker in now]
            if len(now) == 2 and first[0] not in now and listening == [{"0A": 1}] * 2:
                break  # each on a socket of its own: the supervisor listens on none
            assert time.monotonic() < deadline, (first, now, listening)
            time.sleep(0.1)
        assert _tcp_sockets(server.process.pid, port) == {}
        with httpx.Client(base_url=server.url, timeout=30) as client:
            assert all(client.get("/healthz").status_code == 200 for _ in range(8))


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="needs /proc")
def test_with_workers_the_ready_line_waits_for_every_worker(files: Files) -> None:
    """With --workers 2 the server says it listens only once both workers have built their
    app, the store open (docs/network.md): a worker takes every connection waiting when it
    next accepts, so clients that connected while the other was starting would all be the
    first one's for as long as they stay connected."""
    data = str(files.store.resolve() / "data.mdb")
    with serving(files, "--workers", "2") as server:
        workers = spawned_children(server.process.pid)
        opened = [data in Path(f"/proc/{worker}/maps").read_text() for worker in workers]
    assert len(workers) == 2 and all(opened), opened


def test_the_ready_line_waits_for_as_many_workers_as_were_started(tmp_path: Path) -> None:
    """The supervisor says the server listens once every worker left its file, and not at
    all when the server stops first."""
    said: list[str] = []
    (tmp_path / "101").touch()
    args = (str(tmp_path), 2, threading.Event(), said.append, "u")
    waiting = threading.Thread(target=_say_when_ready, args=args)
    waiting.start()
    waiting.join(0.2)
    assert waiting.is_alive() and said == []  # one worker of two is up
    (tmp_path / "102").touch()
    waiting.join(10)
    assert said == ["u"]
    stopped = threading.Event()
    stopped.set()
    _say_when_ready(str(tmp_path), 3, stopped, said.append, "v")
    assert said == ["u"]


def test_without_a_temporary_folder_the_server_is_said_ready_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def unwritable(*args: Any, **kwargs: Any) -> Any:
        raise PermissionError("no temporary folder")

    monkeypatch.setattr(tempfile, "TemporaryDirectory", unwritable)
    with contextlib.ExitStack() as stack:
        assert _ready_folder(stack) is None


def test_full_tiles_are_kept_partial_ones_read_each_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full tile never changes: a worker reads it from the store once and keeps it; a
    partial tile grows with the tree and is read every time. Kept or read, the bytes are
    the store's."""
    files = make_files(tmp_path)
    with Store.open(files.store, readonly=True) as store:
        size = store.tree_size()
        assert 256 < size < 512
        app = create_app(ServeConfig(store, load_key_file(files.key.read_bytes()), ORIGIN))
        reads: list[tuple[int, int, int]] = []
        real = store.tile

        def counted(level: int, index: int, width: int) -> bytes | None:
            reads.append((level, index, width))
            return real(level, index, width)

        monkeypatch.setattr(store, "tile", counted)
        full, partial = (0, 0, 256), (0, 1, size - 256)
        paths = {full: "/tile/0/000", partial: f"/tile/0/001.p/{size - 256}"}
        with TestClient(app) as client:
            for tile in (full, full, partial, partial, full):
                got = client.get(paths[tile])
                assert got.status_code == 200
                assert got.content == real(*tile)
        assert reads == [full, partial, partial]


def test_serve_leaves_the_environment_as_it_found_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the workers read from the environment is there while the server runs only: a
    program that calls pithlog.cli.main keeps its own variables, set or unset."""
    from pithlog.net.server import environment

    monkeypatch.setenv("PITHLOG_CORES", "8")
    monkeypatch.delenv("PITHLOG_SERVE_TEST_UNSET", raising=False)
    with environment({"PITHLOG_CORES": "4", "PITHLOG_SERVE_TEST_UNSET": "x"}):
        assert os.environ["PITHLOG_CORES"] == "4"
        assert os.environ["PITHLOG_SERVE_TEST_UNSET"] == "x"
    assert os.environ["PITHLOG_CORES"] == "8"
    assert "PITHLOG_SERVE_TEST_UNSET" not in os.environ
    with pytest.raises(KeyboardInterrupt), environment({"PITHLOG_CORES": "2"}):
        raise KeyboardInterrupt  # how a served process stops
    assert os.environ["PITHLOG_CORES"] == "8"


def test_pages_are_rendered_off_the_event_loop(
    files: Files, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A record of thousands of events is a page of megabytes (1.8 s of Jinja for 4,000
    events): rendered on the event loop it held every other request of the worker (a
    /healthz probe waited 1,745 ms). Each template renders where no event loop runs."""

    import jinja2

    from pithlog.net.pages import page_routes

    on_loop: list[bool] = []
    monkeypatch.setattr(jinja2.Template, "generate",
                        loop_watched(on_loop, jinja2.Template.generate))  # fmt: skip
    with Store.open(files.store, readonly=True) as store:
        pith = next(p["pith_number"] for p in store.piths() if p["status"] == "state")
        app = create_app(ServeConfig(store, load_key_file(files.key.read_bytes()), ORIGIN,
                                     extra_routes=page_routes()))  # fmt: skip
        with TestClient(app) as client:
            html = {"accept": "text/html"}
            for path in ("/", f"/pith/{pith}", "/pith/nonsense", "/search?q=2411.00284"):
                got = client.get(path, headers=html)
                assert got.headers["content-type"].startswith("text/html"), path
    assert on_loop == [False] * 4


def test_large_answers_are_compressed_apart_from_the_event_loop(
    files: Files, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A state document of megabytes took gzip 111-131 ms on the event loop, every other
    request of the worker waiting: an answer of APART_BYTES or more is compressed by its
    route in a worker thread (zstd first, else brotli, else gzip, as the middleware
    chooses), the same bytes once decoded, and starlette-compress passes it through.
    Brotli, asked alone or on a second Accept-Encoding line, was left to the middleware,
    on the event loop: 389 ms for a state of 5.9 MB. (APART_BYTES is 1 here, so every
    one is.)"""

    from pithlog.net import encoding

    on_loop: list[bool] = []
    monkeypatch.setattr(encoding, "pack", loop_watched(on_loop, encoding.pack))
    monkeypatch.setattr(encoding, "APART_BYTES", 1)
    with Store.open(files.store, readonly=True) as store:
        pith = next(p["pith_number"] for p in store.piths() if p["status"] == "state")
        state = store.state(pith)
        app = create_app(ServeConfig(store, load_key_file(files.key.read_bytes()), ORIGIN))
        with TestClient(app) as client:
            for accept, coding in (("zstd, gzip", "zstd"), ("gzip;q=0.5, br;q=0", "gzip"),
                                   ("br", "br"), ("br, gzip", "br"),
                                   (["identity", "gzip"], "gzip")):
                asked = [("accept-encoding", a) for a in
                         ([accept] if isinstance(accept, str) else accept)]  # fmt: skip
                got = client.get(f"/state/{pith}", headers=asked)
                assert got.headers["content-encoding"] == coding
                assert got.headers["vary"] == "Accept-Encoding"
                assert got.content == state + b"\n"  # httpx decodes both
            plain = client.get(f"/state/{pith}", headers={"accept-encoding": "identity"})
            assert "content-encoding" not in plain.headers and plain.content == state + b"\n"
    assert on_loop == [False] * 5


@pytest.mark.skipif(not Path("/proc").exists(), reason="needs /proc")
def test_workers_end_with_their_supervisor_killed(files: Files) -> None:
    """``kill -9`` of ``serve --workers 2``: its workers end too (SIGTERM, the requests in
    flight answered), where they went on serving and committing on a port no command held,
    and a restarted serve could not listen there."""
    import subprocess
    import sys

    import httpx

    with serving(files, "--workers", "2") as server:
        workers = spawned_children(server.process.pid)
        assert len(workers) == 2
        server.kill()
        def alive(pid: int) -> bool:
            try:
                return "zombie" not in Path(f"/proc/{pid}/status").read_text().lower()
            except OSError:  # gone
                return False

        deadline = time.monotonic() + 30
        while any(alive(pid) for pid in workers):
            assert time.monotonic() < deadline, "the workers outlived their supervisor"
            time.sleep(0.1)
        with pytest.raises(httpx.TransportError):  # nobody serves the URL any more
            httpx.get(server.url + "/healthz", timeout=5)
        again = subprocess.Popen(
            [sys.executable, "-m", "pithlog", "--store", str(files.store), "serve", "--listen",
             server.url.removeprefix("http://"), "--key", str(files.key), "--origin", ORIGIN],
            stderr=subprocess.PIPE)  # fmt: skip
        try:
            assert again.stderr is not None
            assert again.stderr.readline().startswith(b"serve: listening on ")  # the port is free
        finally:
            again.terminate()
            again.wait(30)


def test_no_checkpoint_cosigned_yet_is_503_not_a_server_failure(files: Files) -> None:
    """Until the witnesses cosign a first checkpoint nothing is published: the answer is
    503 witness.quorum (try again), not a 500 that says the server failed."""
    def too_few(note: bytes, size: int) -> bytes:
        raise WitnessError("quorum", "0 of the 1 witness key(s) cosigned; 1 required")

    with Store.open(files.store, readonly=True) as store:
        key = load_key_file(files.key.read_bytes())
        app = create_app(ServeConfig(store, key, ORIGIN, cosign=too_few))
        with TestClient(app, raise_server_exceptions=False) as client:
            got = client.get("/checkpoint")
            assert got.status_code == 503 and got.json()["error"] == "witness.quorum"
            assert got.headers["cache-control"] == "no-store"


def cosigner(failing: list[bool], asked: list[int]) -> Callable[[bytes, int], bytes]:
    """A stand-in for the witnesses: each size asked is noted in ``asked``; while
    ``failing[0]``, too few cosign, else one witness does."""

    def cosign(note: bytes, size: int) -> bytes:
        asked.append(size)
        if failing[0]:
            raise WitnessError("quorum", "0 witness(es) cosigned, 1 required")
        return note + "\u2014 witness.invalid AAAAAAAA\n".encode()

    return cosign


def test_the_witnesses_are_asked_once_at_a_time_not_on_every_request(
    files: Files, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Asked on every request, a witness that does not answer held each /checkpoint for
    its time-out, and enough of them every worker thread (tiles waited too). After a
    failure the witnesses are asked again only after COSIGN_RETRY_SECONDS; meanwhile the
    last cosigned checkpoint stays published, or the answer is 503."""
    asked: list[int] = []
    failing = [True]
    with Store.open(files.store) as store:
        key = load_key_file(files.key.read_bytes())
        app = create_app(ServeConfig(store, key, ORIGIN, cosign=cosigner(failing, asked)))
        with TestClient(app, raise_server_exceptions=False) as client:
            for _ in range(3):
                assert client.get("/checkpoint").status_code == 503
            assert len(asked) == 1
            monkeypatch.setattr(served_log, "COSIGN_RETRY_SECONDS", 0.0, raising=False)
            failing[0] = False
            first = client.get("/checkpoint")
            assert first.status_code == 200 and b"witness.invalid" in first.content
            assert len(asked) == 2
            size = asked[-1]
            more = g.mixed_events(random.Random(99), piths=1, per_pith=2)
            store.append([g.encoded(e) for e in more], g.KEYRING, keep_invalid=True)
            monkeypatch.setattr(served_log, "COSIGN_RETRY_SECONDS", 60.0, raising=False)
            failing[0] = True
            for _ in range(3):  # the tree grew, the witnesses fail: the last one stays
                assert client.get("/checkpoint").content == first.content
            assert len(asked) == 3 and asked[-1] > size


def test_the_cosigning_lock_serves_an_app_run_again_on_another_loop(
    files: Files, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Requests that wait for the witnesses wait on a lock, which binds to the event loop
    it first waits on: the same app served again on another loop (a program embedding it,
    a test) takes a lock of that loop instead of raising on every wait."""
    def slow(note: bytes, size: int) -> bytes:
        time.sleep(0.05)  # in a worker thread: the other requests wait on the lock
        raise WitnessError("quorum", "0 witness(es) cosigned, 1 required")

    with Store.open(files.store, readonly=True) as store:
        key = load_key_file(files.key.read_bytes())
        log = Log(ServeConfig(store, key, ORIGIN, cosign=slow))
        # asked again at once after a failure: each loop's first request holds the lock
        monkeypatch.setattr(served_log, "COSIGN_RETRY_SECONDS", 0.0)

        async def together() -> list[BaseException | Any]:
            return await asyncio.gather(*(log.checkpoint() for _ in range(3)),
                                        return_exceptions=True)  # fmt: skip

        for _ in range(2):  # two event loops, one after the other
            got = asyncio.run(together())
            assert [getattr(e, "code", e) for e in got] == ["witness.quorum"] * 3


def test_a_request_cancelled_at_shutdown_is_answered_503_unless_its_answer_began() -> None:
    """uvicorn's graceful shutdown cancels the requests still open after its 5 s: one whose
    answer has not begun is answered 503 serve.stopping; one whose answer began (a streamed
    answer its client stopped reading) cannot be answered again, and the server's refusal
    of a second head (a RuntimeError from uvicorn) ends it quietly, not as a traceback."""
    async def begun(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await asyncio.Event().wait()  # the client reads no more

    async def waiting(scope: Any, receive: Any, send: Any) -> None:
        await asyncio.Event().wait()  # the body is slow to come

    app = ServeApp(routes=[Mount("/begun", app=begun), Mount("/waiting", app=waiting)])

    async def cancelled(path: str) -> list[dict[str, Any]]:
        sent: list[dict[str, Any]] = []

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start" and sent:
                raise RuntimeError("Expected ASGI message 'http.response.body', but got "
                                   "'http.response.start'.")  # fmt: skip
            sent.append(message)

        async def receive() -> dict[str, Any]:
            await asyncio.Event().wait()
            raise AssertionError

        scope = {"type": "http", "method": "GET", "path": path, "raw_path": path.encode(),
                 "root_path": "", "query_string": b"", "headers": [], "scheme": "http",
                 "server": ("127.0.0.1", 80), "client": ("127.0.0.1", 1),
                 "http_version": "1.1"}  # fmt: skip
        request = asyncio.create_task(app(scope, receive, send))
        await asyncio.sleep(0.05)
        request.cancel()
        await asyncio.wait_for(request, 1)  # ended, raising nothing
        return sent

    begun_sent = asyncio.run(cancelled("/begun/x"))
    assert [m.get("status") for m in begun_sent] == [200]
    waiting_sent = asyncio.run(cancelled("/waiting/x"))
    assert waiting_sent[0]["status"] == 503
    assert b'"serve.stopping"' in waiting_sent[1]["body"]
    # the server is going away and the body was not read: the connection is not kept
    assert (b"connection", b"close") in waiting_sent[0]["headers"]
    assert (b"cache-control", b"no-store") in waiting_sent[0]["headers"]


def test_a_partial_tile_is_never_served_for_the_full_one(tmp_path: Path) -> None:
    """A full tile is kept by its level and index: a partial one of the same tile (an
    earlier size's, /tile/0/000.p/5) kept there would be served for the full tile, 5
    hashes marked immutable where 256 are."""
    files = make_files(tmp_path)
    with Store.open(files.store, readonly=True) as store:
        app = create_app(ServeConfig(store, load_key_file(files.key.read_bytes()), ORIGIN))
        with TestClient(app) as client:
            assert client.get("/tile/0/000.p/5").content == store.tile(0, 0, 5)
            assert client.get("/tile/0/000").content == store.tile(0, 0, 256)


def test_the_full_tiles_kept_are_bounded_the_least_recently_served_dropped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """At most FULL_TILES_KEPT full tiles are kept (memory); the one served longest ago is
    dropped first, and read from the store again when asked for."""
    monkeypatch.setattr(served_log, "FULL_TILES_KEPT", 2)
    reads: list[int] = []

    class Tiles:
        def tile(self, level: int, index: int, width: int) -> bytes:
            reads.append(index)
            return bytes([index]) * 32 * width

    log = Log(ServeConfig(Tiles(), test_key("author"), ORIGIN))  # type: ignore[arg-type]

    async def serve(indexes: list[int]) -> None:
        for index in indexes:
            assert await log.tile(tiles.Tile(0, index, tiles.WIDTH)) == bytes([index]) * 8192

    asyncio.run(serve([0, 1, 0, 2, 0, 1, 2]))
    # 0 and 1 kept; 0 served again; 2 drops 1; 0 is kept; 1 read again, dropping 2
    assert reads == [0, 1, 2, 1, 2]


def test_a_store_with_too_many_readers_is_503_retry_not_a_server_failure(
    files: Files, monkeypatch: pytest.MonkeyPatch
) -> None:
    """store.readers_full (every LMDB reader slot taken) passes once readers leave: 503,
    as docs/errors.md says, not 500."""
    with Store.open(files.store, readonly=True) as store:
        app = create_app(ServeConfig(store, load_key_file(files.key.read_bytes()), ORIGIN))

        def full(*args: Any) -> None:
            raise StoreError("readers_full", "too many readers")

        monkeypatch.setattr(store, "tree_size", full)
        with TestClient(app, raise_server_exceptions=False) as client:
            got = client.get("/healthz")
            assert got.status_code == 503 and got.json()["error"] == "store.readers_full"


def test_an_event_past_the_published_checkpoint_has_no_inclusion_proof_yet(
    files: Files, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With witnesses that have not cosigned the grown tree, the published checkpoint
    stays behind the store: an event appended since is not in it, and its proof is a 404
    (asked again later), not a proof against a tree nobody published."""
    failing = [False]
    with Store.open(files.store) as store:
        key = load_key_file(files.key.read_bytes())
        app = create_app(ServeConfig(store, key, ORIGIN, cosign=cosigner(failing, [])))
        with TestClient(app, raise_server_exceptions=False) as client:
            published = client.get("/checkpoint").content
            failing[0] = True
            more = g.mixed_events(random.Random(98), piths=1, per_pith=2)
            store.append([g.encoded(e) for e in more], g.KEYRING, keep_invalid=True)
            assert client.get("/checkpoint").content == published
            old = client.get(f"/proof/inclusion/{files.events[0]['event_id']}")
            assert old.status_code == 200 and old.content.endswith(published)
            got = client.get(f"/proof/inclusion/{more[0]['event_id']}")
            assert (got.status_code, got.json()["error"]) == (404, "serve.not_found")


def test_healthz_answers_the_body_network_md_shows(files: Files) -> None:
    """network.md showed ``{"ok": true, "tree_size": N}``, spaced; the answer is compact,
    with a newline: the row is now the bytes a client gets, N the store's tree size."""
    row = next(line for line in (Path(__file__).parents[2] / "docs" / "network.md")
               .read_text("utf-8").splitlines() if line.startswith("| `/healthz` |"))  # fmt: skip
    shown = row.split(" | ")[1].split("`")[1]
    with Store.open(files.store, readonly=True) as store:
        app = create_app(ServeConfig(store, load_key_file(files.key.read_bytes()), ORIGIN))
        with TestClient(app) as client:
            body = client.get("/healthz").content
        assert body == shown.replace("N", str(store.tree_size())).encode() + b"\n"
