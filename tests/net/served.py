"""A real ``pithlog serve`` for the network tests: a subprocess on 127.0.0.1 and a port the
kernel picks, its URL read from the line it prints, bounded in time and always stopped.
Also the events and keys of the tests (the store tests' generator, loaded by path)."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import os
import random
import selectors
import signal
import socket
import socketserver
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from pithlog.protocol.event_types import prepare_record_created
from pithlog.protocol.events import sign_event
from pithlog.store import Store
from pithlog.testing import test_key, test_keyring_entries, write_key_file

ORIGIN = "registry.test.invalid/pith"
START_SECONDS = 30.0
STOP_SECONDS = 10.0
RUN_PITHLOG = "import runpy; runpy.run_module('pithlog', run_name='__main__', alter_sys=True)"


def _load() -> ModuleType:
    name = "store_eventgen"
    if name in sys.modules:
        return sys.modules[name]
    path = Path(__file__).resolve().parents[1] / "store" / "eventgen.py"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


g = _load()


@dataclass
class Files:
    """A store with a log, and the key, keyring and events around it."""

    root: Path
    store: Path
    key: Path
    keyring: Path
    events: list[dict[str, Any]]
    """Stored, in append order."""


def make_files(root: Path, piths: int = 40, per_pith: int = 8, seed: int = 8) -> Files:
    """A store of ``piths * per_pith`` mixed events (invalid ones kept: evidence, pending
    piths, equivocations), more than 256 leaves so that level 1 exists."""
    events = g.mixed_events(random.Random(seed), piths=piths, per_pith=per_pith)
    keyring = root / "keyring.json"
    keyring.write_text(json.dumps({"keyring_version": "1", "keys": test_keyring_entries()}))
    key = root / "registry.key"
    write_key_file(key, test_key("registry"))
    store = root / "store"
    with Store.open(store) as s:
        s.append([g.encoded(e) for e in events], g.KEYRING, keep_invalid=True)
    return Files(root, store, key, keyring, events)


@dataclass
class Server:
    url: str
    process: subprocess.Popen[bytes]
    stderr: bytearray
    """What the server printed on stderr so far (drained by a thread: a full pipe would
    stop the server)."""

    @property
    def address(self) -> tuple[str, int]:
        host, port = self.url.removeprefix("http://").rsplit(":", 1)
        return host, int(port)

    def kill(self) -> None:
        """SIGKILL: the server dies at once, mid-answer if it is answering."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(STOP_SECONDS)


@contextlib.contextmanager
def serve_process(store: Path, *args: str, before: str = "") -> Iterator[Server]:
    """``pithlog --store STORE serve --listen 127.0.0.1:0 ARGS...`` (a log, or a witness);
    stopped (SIGTERM, then SIGKILL) on leaving, whatever happened. ``before``: Python run
    in the server's process before ``python -m pithlog`` (a module constant shortened)."""
    python = ["-c", f"{before}\n{RUN_PITHLOG}"] if before else ["-m", "pithlog"]
    argv = [sys.executable, *python, "--store", str(store), "serve",
            "--listen", "127.0.0.1:0", *args]  # fmt: skip
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               env=env)  # fmt: skip
    drained = bytearray()
    try:
        url, seen = _listening(process)
        drained += seen
        assert process.stderr is not None
        stream = process.stderr
        threading.Thread(target=lambda: _drain(stream, drained), daemon=True).start()
        yield Server(url, process, drained)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(STOP_SECONDS)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(STOP_SECONDS)


@contextlib.contextmanager
def serving(files: Files, *extra: str, submit: bool = False, before: str = "") -> Iterator[Server]:
    """``pithlog serve`` of ``files``' store, signed with its key for :data:`ORIGIN`
    (``before``: as :func:`serve_process`'s)."""
    args = ["--key", str(files.key), "--origin", ORIGIN, *extra]
    if submit:
        args += ["--submit", "--keyring", str(files.keyring)]
    with serve_process(files.store, *args, before=before) as server:
        yield server


def _drain(stream: Any, into: bytearray) -> None:
    with contextlib.suppress(OSError, ValueError):
        while chunk := os.read(stream.fileno(), 65536):
            into += chunk


def _listening(process: subprocess.Popen[bytes]) -> tuple[str, bytes]:
    """The URL of the ``serve: listening on http://HOST:PORT`` line, within
    :data:`START_SECONDS`."""
    assert process.stderr is not None
    selector = selectors.DefaultSelector()
    selector.register(process.stderr, selectors.EVENT_READ)
    deadline = time.monotonic() + START_SECONDS
    seen = b""
    while time.monotonic() < deadline:
        if not selector.select(timeout=max(0.0, deadline - time.monotonic())):
            break
        chunk = os.read(process.stderr.fileno(), 4096)
        if not chunk:
            break
        seen += chunk
        for line in seen.split(b"\n")[:-1]:
            if line.startswith(b"serve: listening on "):
                return line.split(b" on ", 1)[1].decode(), seen
    raise AssertionError(f"pithlog serve did not start: {seen.decode(errors='replace')}")


@contextlib.contextmanager
def in_thread(app: Any) -> Iterator[str]:
    """An ASGI app of a test's own (a hostile server, a proxy) served by uvicorn in a
    thread on 127.0.0.1 and a port the kernel picks: its URL; stopped on exit."""
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="error", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + START_SECONDS
    while not server.started:
        assert time.monotonic() < deadline, "the server did not start"
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(STOP_SECONDS)
        sock.close()


@contextlib.contextmanager
def prefix_proxy(upstream: str, prefix: str = "/pith") -> Iterator[str]:
    """A reverse proxy on 127.0.0.1 that serves ``upstream`` under ``prefix``, as the nginx
    example of docs/network.md ("Running a registry") does: ``PREFIX/X`` passed on as
    ``/X`` (the path as the client wrote it, its ``Accept`` and ``Accept-Encoding``),
    anything else ``404``; the answer passed back as it came (its bytes as sent, its
    headers, ``Location`` included), once read whole. Its
    URL, the prefix included; stopped on exit."""
    import httpx
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    async def forward(request: Request) -> Response:
        raw = request.scope["raw_path"].decode("latin-1")
        if not raw.startswith(prefix + "/"):
            return Response(b"not under the prefix", 404)
        query = request.scope["query_string"].decode("latin-1")
        url = upstream + raw.removeprefix(prefix) + ("?" + query if query else "")
        headers = {k: v for k, v in request.headers.items()
                   if k in ("accept", "accept-encoding")}  # fmt: skip
        # (no certificates loaded for each request: the upstream is plain HTTP)
        async with httpx.AsyncClient(timeout=START_SECONDS, verify=False) as client:
            answer = await client.send(client.build_request(request.method, url,
                                                            headers=headers), stream=True)
            body = b"".join([chunk async for chunk in answer.aiter_raw()])  # as it came
        kept = {k: v for k, v in answer.headers.items()
                if k not in ("content-length", "transfer-encoding", "connection")}  # fmt: skip
        return Response(body, answer.status_code, headers=kept)

    app = Starlette(routes=[Route("/{rest:path}", forward, methods=["GET", "HEAD"])])
    with in_thread(app) as url:
        yield url + prefix


class _SlowHead(socketserver.StreamRequestHandler):
    """Answers with a header line every 0.1 s, for 30 s (it stops by itself)."""

    def handle(self) -> None:
        with contextlib.suppress(OSError):
            while self.rfile.readline() not in (b"\r\n", b""):
                pass
            self.wfile.write(b"HTTP/1.1 200 OK\r\n")
            for _ in range(300):
                self.wfile.write(b"X-Slow: y\r\n")
                time.sleep(0.1)
            self.wfile.write(b"Content-Length: 0\r\n\r\n")


@contextlib.contextmanager
def slow_head() -> Iterator[str]:
    """A server on 127.0.0.1 whose answers' heads come a line at a time (h11 waits for
    100 KiB of head, httpx for 60 s between two reads): its URL."""
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _SlowHead)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def spawned_children(pid: int, marker: bytes = b"spawn_main") -> list[int]:
    """The processes that ``pid`` started whose command line holds ``marker`` (by default
    those of multiprocessing's spawn: uvicorn's workers, not a resource tracker), read
    from /proc."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:  # ended meanwhile
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid and marker in cmdline:
            found.append(int(entry.name))
    return found


def loop_watched(calls: list[bool], function: Callable[..., Any]) -> Callable[..., Any]:
    """``function``, noting in ``calls`` for each call whether it ran on an event loop
    (``True``) or where none runs (``False``: a worker thread): how the tests show that a
    long piece of work stays off the loop that serves every other request."""

    def watched(*args: Any, **kwargs: Any) -> Any:
        try:
            asyncio.get_running_loop()
            calls.append(True)
        except RuntimeError:
            calls.append(False)
        return function(*args, **kwargs)

    return watched


def two_versions(arxiv_id: str) -> list[dict[str, Any]]:
    """The record_created events (the registry's) of versions 1 and 2 of one arXiv paper:
    two records, which a search of its id lists both."""
    events = []
    for version in (1, 2):
        record = {"metadata": {"submitted_at": "2026-07-01T00:00:00Z", "title": "Versions"},
                  "schema_version": "1.0",
                  "source": {"id": arxiv_id, "kind": "arxiv", "version": version}}  # fmt: skip
        number, payload = prepare_record_created(test_key("registry"),
                                                 {"canonical_record": record})  # fmt: skip
        events.append(sign_event(test_key("registry"), "record_created", number, "record",
                                 f"2026-08-01T00:00:1{version}Z", payload))  # fmt: skip
    return events
