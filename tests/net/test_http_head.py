"""The bound on a request's head (pithlog.net.http_head), against a real ``pithlog serve``:
under httptools (the parser ``serve`` runs when it is installed, which uvicorn leaves
unbounded) a head over 16 KiB, sent whole or a piece at a time, gets ``431`` with the JSON
error ``serve.head_too_large`` and the connection closed, the server's memory unchanged by
a flood; heads under the bound pass, one after the other on a kept-alive connection. Without
httptools, ``serve`` refuses to start (under h11 none of these bounds hold). The same protocol
writes each answer at once: it reaches the client as one TCP segment (the kernel's count
of data segments received, ``tcpi_data_segs_in``), where uvicorn alone sends its head and
its body as two."""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from served import ORIGIN, Files, Server, make_files, serving

from pithlog.net import http_head

LIMIT = http_head.MAX_HEAD_BYTES


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Files:
    return make_files(tmp_path_factory.mktemp("head"), piths=2, per_pith=3)


@pytest.fixture(scope="module")
def server(files: Files) -> Iterator[Server]:
    with serving(files) as running:
        yield running
        assert b"Traceback" not in running.stderr, running.stderr.decode(errors="replace")


def _rss_kib(server: Server) -> int:
    status = Path(f"/proc/{server.process.pid}/status").read_text()
    return int(status.split("VmRSS:")[1].split()[0])


def _answer(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (or 10 s pass)."""
    sock.settimeout(10)
    got = b""
    try:
        while chunk := sock.recv(65536):
            got += chunk
    except (ConnectionResetError, TimeoutError):
        pass
    return got


def _refused(answer: bytes) -> None:
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 431 "), answer[:200]
    assert json.loads(body)["error"] == "serve.head_too_large"
    # the headers every answer carries, as every error's (docs/network.md)
    assert b"\r\ncache-control: no-store\r\n" in head + b"\r\n"
    assert b"\r\nx-content-type-options: nosniff\r\n" in head + b"\r\n"


def test_serve_runs_the_bounded_httptools_protocol() -> None:
    pytest.importorskip("httptools")  # installed with pithlog[net]
    assert http_head.protocol() is http_head.BoundedHttpToolsProtocol


@pytest.mark.parametrize("size", [LIMIT - 1024, LIMIT + 1024, 4 * LIMIT])
def test_a_head_sent_whole(server: Server, size: int) -> None:
    got = httpx.get(server.url + "/healthz", headers={"x-filler": "a" * (size - 100)},
                    timeout=20)  # fmt: skip
    if size < LIMIT:
        assert got.status_code == 200
    else:
        assert got.status_code == 431
        assert got.json()["error"] == "serve.head_too_large"


def test_a_head_sent_a_piece_at_a_time(server: Server) -> None:
    with socket.create_connection(server.address) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        sent = 0
        with pytest.raises(OSError):  # the server closes the connection: a write fails
            while sent < 4 * LIMIT:
                sock.sendall(b"x-piece: " + b"p" * 1000 + b"\r\n")
                sent += 1011
                time.sleep(0.002)  # each piece a read of its own
        _refused(_answer(sock))
    assert sent < 2 * LIMIT


def test_a_flood_of_header_lines_leaves_the_servers_memory_as_it_was(server: Server) -> None:
    before = _rss_kib(server)
    line = b"x-flood: " + b"f" * 65000 + b"\r\n"
    with socket.create_connection(server.address) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        sent = 0
        with pytest.raises(OSError):
            while sent < 256 << 20:  # 256 MiB, were the server to take it all
                sock.sendall(line)
                sent += len(line)
        answer = _answer(sock)
    assert answer == b"" or answer.startswith(b"HTTP/1.1 431 ")  # reset before it is read
    assert sent < 16 << 20
    assert _rss_kib(server) - before < 16 * 1024
    assert httpx.get(server.url + "/healthz", timeout=20).status_code == 200


def test_heads_under_the_bound_one_after_the_other_on_one_connection(server: Server) -> None:
    # the count starts again with each request: three heads of half the bound pass
    with httpx.Client(timeout=20) as client:
        for _ in range(3):
            got = client.get(server.url + "/healthz", headers={"x-filler": "h" * (LIMIT // 2)})
            assert got.status_code == 200


def test_a_request_that_is_not_http_is_a_json_400(server: Server) -> None:
    # only a head over the bound is 431: a request that is not HTTP is 400
    # serve.bad_request, in JSON as every error (uvicorn's own answer was plain text)
    with socket.create_connection(server.address) as sock:
        sock.sendall(b"NOT HTTP AT ALL\r\n\r\n")
        answer = _answer(sock)
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 ") and b"application/json" in head, answer[:200]
    assert json.loads(body)["error"] == "serve.bad_request"


def test_bytes_past_a_body_are_a_json_400_not_a_method_501(server: Server) -> None:
    # a body longer than its Content-Length: what follows it, in the same read, is not a
    # request line; it was answered 501 "not a method this server implements", the
    # request line at the read's start (the first request's) taken for it
    for extra in (b"{}\n{}\n", b"x"):
        with socket.create_connection(server.address) as sock:
            sock.sendall(b"POST /submit HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"
                         + extra)  # fmt: skip
            answer = _answer(sock)
        assert b"HTTP/1.1 400 " in answer and b"HTTP/1.1 501 " not in answer, answer[:300]
        assert b'"serve.bad_request"' in answer
    # an unknown method at a read's start stays 501
    with socket.create_connection(server.address) as sock:
        sock.sendall(b"BREW /checkpoint HTTP/1.1\r\nHost: x\r\n\r\n")
        assert _answer(sock).startswith(b"HTTP/1.1 501 ")


def test_without_httptools_serve_refuses_to_start(files: Files, tmp_path: Path) -> None:
    # under h11 uvicorn times out neither a head nor an unread answer (a connection that
    # sent nothing, or half a head, stayed open past HEAD_SECONDS for ever), so serve does
    # not run without httptools: one line naming the package and the extra
    hidden = tmp_path / "hidden"
    (hidden / "httptools").mkdir(parents=True)
    (hidden / "httptools" / "__init__.py").write_text(
        "raise ImportError('No module named httptools')\n")  # fmt: skip
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(hidden), *sys.path])}
    done = subprocess.run([sys.executable, "-m", "pithlog", "--store", str(files.store),
                           "serve", "--listen", "127.0.0.1:0", "--key", str(files.key),
                           "--origin", ORIGIN], capture_output=True, timeout=60, env=env,
                          check=False)  # fmt: skip
    err = done.stderr.decode()
    assert (done.returncode, done.stdout) == (2, b""), err
    assert err.startswith("pithlog: [usage.net_extra] ") and err.count("\n") == 1, err
    assert "httptools" in err and "pithlog[net]" in err, err


# --- one write per answer (pithlog.net.joined_writes) -----------------------------------

TCP_INFO_BYTES = 160
DATA_SEGS_IN = struct.Struct("=I")
"""``tcpi_data_segs_in`` of ``struct tcp_info`` (Linux 4.6 and later), at byte 152."""


def _data_segments_in(sock: socket.socket) -> int:
    info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, TCP_INFO_BYTES)
    if len(info) < TCP_INFO_BYTES:
        pytest.skip("this kernel's tcp_info has no tcpi_data_segs_in")
    return int(DATA_SEGS_IN.unpack_from(info, 152)[0])


def _one_answer(sock: socket.socket) -> bytes:
    """One whole answer with a Content-Length, read from ``sock``."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length:"))  # fmt: skip
    while len(body) < length:
        body += sock.recv(65536)
    return head + b"\r\n\r\n" + body


@pytest.mark.skipif(not hasattr(socket, "TCP_INFO"), reason="needs TCP_INFO (Linux)")
def test_each_answer_reaches_the_client_as_one_segment(server: Server) -> None:
    with socket.create_connection(server.address, timeout=10) as sock:
        for path in (b"/healthz", b"/checkpoint", b"/stats", b"/no-such-page") * 3:
            before = _data_segments_in(sock)
            sock.sendall(b"GET " + path + b" HTTP/1.1\r\nHost: x\r\n\r\n")
            answer = _one_answer(sock)
            assert answer.startswith(b"HTTP/1.1 ") and _data_segments_in(sock) - before == 1, (
                path, answer[:80])


# --- connections that hold a place: heads that never end, answers never read -------------


@contextlib.contextmanager
def _bounded_uvicorn(app: Any, concurrency: int) -> Iterator[tuple[Any, tuple[str, int]]]:
    """``app`` served in a thread by uvicorn with :class:`BoundedHttpToolsProtocol`, as
    ``serve`` runs it, at most ``concurrency`` connections at once: the server and its
    address."""
    import uvicorn

    pytest.importorskip("httptools")
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(app, log_level="error", lifespan="off",
                            http=http_head.BoundedHttpToolsProtocol,
                            limit_concurrency=concurrency)  # fmt: skip
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline, "the server did not start"
        time.sleep(0.01)
    try:
        yield server, sock.getsockname()
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


def _until_closed(sock: socket.socket) -> bytes:
    """What the server sends before it closes the connection; an error if it has not
    within 5 s."""
    sock.settimeout(5)
    got = b""
    with contextlib.suppress(ConnectionResetError):
        while chunk := sock.recv(65536):
            got += chunk
    return got


async def _small(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-length", b"3")]})  # fmt: skip
    await send({"type": "http.response.body", "body": b"ok\n"})


def test_connections_that_never_finish_a_head_are_closed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # uvicorn closed neither: eight of them held all eight places, and every other client
    # got 503 for as long as they stayed
    monkeypatch.setattr(http_head, "HEAD_SECONDS", 0.5)
    with _bounded_uvicorn(_small, concurrency=8) as (_, address):
        idle = [socket.create_connection(address) for _ in range(6)]
        partial = [socket.create_connection(address) for _ in range(2)]
        for sock in partial:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        time.sleep(0.2)
        url = f"http://{address[0]}:{address[1]}/"
        assert httpx.get(url, timeout=5).status_code == 503
        for sock in idle:
            assert _until_closed(sock) == b""  # closed without a word
        for sock in partial:
            head, _, body = _until_closed(sock).partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 408 "), head
            assert json.loads(body)["error"] == "serve.timeout"
        for sock in idle + partial:
            sock.close()
        assert httpx.get(url, timeout=5).status_code == 200
        # a kept-alive connection's next request has its own time, from its first byte
        with socket.create_connection(address) as sock:
            for i in range(3):
                time.sleep(0.3 if i else 0)  # idle between requests: the keep-alive's time
                sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")
                time.sleep(0.3)
                sock.sendall(b"\r\n")
                assert _one_answer(sock).startswith(b"HTTP/1.1 200 ")


def test_past_the_concurrency_limit_the_answer_is_a_json_503() -> None:
    # uvicorn's own answer was the plain text "Service Unavailable"
    with _bounded_uvicorn(_small, concurrency=3) as (_, address):
        held = [socket.create_connection(address) for _ in range(3)]
        time.sleep(0.2)
        with socket.create_connection(address) as sock:
            sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            head, _, body = _until_closed(sock).partition(b"\r\n\r\n")  # closed after it
        assert head.startswith(b"HTTP/1.1 503 "), head
        assert b"\r\ncontent-type: application/json" in head
        assert b"\r\ncache-control: no-store" in head and b"\r\nconnection: close" in head
        assert json.loads(body)["error"] == "serve.busy"
        for sock in held:
            sock.close()
        time.sleep(0.2)
        assert httpx.get(f"http://{address[0]}:{address[1]}/", timeout=5).status_code == 200


BIG = 64 << 20


async def _big(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-length", str(BIG).encode())]})  # fmt: skip
    chunk = b"b" * (1 << 20)
    for i in range(BIG // len(chunk)):
        await send({"type": "http.response.body", "body": chunk,
                    "more_body": i < BIG // len(chunk) - 1})  # fmt: skip


def test_an_answer_its_client_never_reads_is_cut_off(monkeypatch: pytest.MonkeyPatch) -> None:
    # uvicorn waited for the client for ever, the connection holding its place
    monkeypatch.setattr(http_head, "SEND_STALL_SECONDS", 0.5)
    with _bounded_uvicorn(_big, concurrency=4) as (server, address):
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(address)
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        time.sleep(0.2)
        assert len(server.server_state.connections) == 1
        time.sleep(2)  # the buffers full within the first moments, then 0.5 s of nothing
        assert not server.server_state.connections
        got = len(_until_closed(sock))
        sock.close()
        assert got < BIG
        # a client that reads, however slowly, is not cut off
        with socket.create_connection(address) as reader:
            reader.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            total = 0
            while chunk := reader.recv(1 << 20):
                total += len(chunk)
                if total < 4 << 20:
                    time.sleep(0.01)
        assert total > BIG


@pytest.mark.parametrize("head", [
    b"GET /healthz HTTP/1.1\r\n",  # RFC 9112 3.2: an HTTP/1.1 request needs its Host
    b"GET /healthz HTTP/1.1\r\nHost: a\r\nHost: b\r\n",  # and any request at most one
    b"GET /healthz HTTP/1.0\r\nHost: a\r\nHost: b\r\n",
])  # fmt: skip
def test_a_request_without_host_or_with_two_is_a_json_400(server: Server, head: bytes) -> None:
    with socket.create_connection(server.address) as sock:
        sock.sendall(head + b"\r\n")
        answer = _answer(sock)
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 "), answer[:200]
    assert json.loads(body)["error"] == "serve.bad_request"


def test_a_request_with_one_host_or_an_http_1_0_one_without_is_answered(server: Server) -> None:
    for head in (b"GET /healthz HTTP/1.1\r\nHost: x\r\n", b"GET /healthz HTTP/1.0\r\n"):
        with socket.create_connection(server.address) as sock:
            sock.sendall(head + b"Connection: close\r\n\r\n")
            assert _answer(sock).startswith(b"HTTP/1.1 200 ")


async def _unread(scope: Any, receive: Any, send: Any) -> None:
    # answers without reading the body, as a 408 or a 413 does
    await send({"type": "http.response.start", "status": 413,
                "headers": [(b"content-length", b"3")]})  # fmt: skip
    await send({"type": "http.response.body", "body": b"no\n"})


def test_a_body_that_goes_on_arriving_after_its_answer_is_closed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # each byte of it put off uvicorn's keep-alive time-out, and nothing else closed it
    monkeypatch.setattr(http_head, "HEAD_SECONDS", 0.5)
    with _bounded_uvicorn(_unread, concurrency=4) as (server, address):
        with socket.create_connection(address) as sock:
            sock.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\nab")
            assert _one_answer(sock).startswith(b"HTTP/1.1 413 ")
            with pytest.raises(OSError):
                for _ in range(40):  # 4 s of a byte each 0.1 s
                    sock.sendall(b"x")
                    time.sleep(0.1)
        assert not server.server_state.connections
        # a body that comes whole in time leaves the connection for the next request
        with socket.create_connection(address) as sock:
            sock.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nab")
            assert _one_answer(sock).startswith(b"HTTP/1.1 413 ")
            time.sleep(0.3)
            sock.sendall(b"cde")
            time.sleep(0.4)  # past the body's time: the next head's own starts later
            sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            assert _one_answer(sock).startswith(b"HTTP/1.1 413 ")


# --- pipelined requests: answered in order, up to the one refused ------------------------


def _answers(data: bytes) -> list[tuple[int, bytes]]:
    """The status and body of each answer (each with a Content-Length) in ``data``, in
    the order they came."""
    found = []
    while data:
        head, _, rest = data.partition(b"\r\n\r\n")
        length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                       if line.lower().startswith(b"content-length:")), 0)  # fmt: skip
        found.append((int(head.split(b" ")[1]), rest[:length]))
        data = rest[length:]
    return found


GOOD = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"


@pytest.mark.parametrize("bad", [
    b"GET /x HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n",  # a head the parser refuses
    b"NOT HTTP\r\n\r\n",
    b"GET /x HTTP/1.1\r\n\r\n",  # no Host
    b"POST /healthz HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",  # its body
])  # fmt: skip
def test_pipelined_requests_before_a_refused_one_are_answered_first(
    server: Server, bad: bytes
) -> None:
    # RFC 9112 9.3.2: answers go in the order of their requests. The refusal went out at
    # once, ahead of the answers of the requests before it in the same read, and the
    # connection closed under them: the client took the 400 for its first request's
    # answer, and never had the others
    with socket.create_connection(server.address) as sock:
        sock.sendall(GOOD + b"GET /checkpoint HTTP/1.1\r\nHost: x\r\n\r\n" + bad + GOOD)
        answers = _answers(_answer(sock))
    assert [status for status, _ in answers] == [200, 200, 400], answers
    assert json.loads(answers[0][1])["ok"] is True
    assert answers[1][1].startswith(ORIGIN.encode() + b"\n")
    assert json.loads(answers[2][1])["error"] == "serve.bad_request"


# --- Upgrade and CONNECT: never made, so the request is framed as any other --------------

UPGRADE = (b"Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n"
           b"HTTP2-Settings: AAMAAABkAAQAAP__\r\n")


def test_a_request_after_an_upgrade_asked_for_is_answered(server: Server) -> None:
    # the server upgrades to nothing (curl asks for h2c over http://): the bytes after
    # such a request, in the same read, were dropped, the next request never answered
    with socket.create_connection(server.address) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + UPGRADE + b"\r\n"
                     b"GET /checkpoint HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        answers = _answers(_answer(sock))
    assert [status for status, _ in answers] == [200, 200], answers
    assert answers[1][1].startswith(ORIGIN.encode() + b"\n")


@pytest.mark.parametrize("framing", [b"Content-Length: 39\r\n",
                                     b"Transfer-Encoding: chunked\r\n"])  # fmt: skip
def test_a_body_beside_an_upgrade_is_never_read_as_a_request(
    server: Server, framing: bytes
) -> None:
    # the parser skips the body of a request that asks for an upgrade, so its bytes
    # were read as the next request on the connection (a request smuggled past a proxy
    # that frames it by its Content-Length): it is refused, the connection closed
    smuggled = b"GET /checkpoint HTTP/1.1\r\nHost: x\r\n\r\n"
    body = smuggled if b"Length" in framing else b"%x\r\n%s\r\n0\r\n\r\n" % (len(smuggled),
                                                                            smuggled)  # fmt: skip
    with socket.create_connection(server.address) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + UPGRADE + framing + b"\r\n")
        first = _one_answer(sock)
        with contextlib.suppress(OSError):
            sock.sendall(body)
        rest = _answer(sock)
    assert first.startswith(b"HTTP/1.1 400 "), first[:200]
    assert json.loads(first.partition(b"\r\n\r\n")[2])["error"] == "serve.bad_request"
    assert rest == b"" and ORIGIN.encode() not in first


def test_connect_is_answered_and_the_connection_closed(server: Server) -> None:
    # what follows a CONNECT is a tunnel's bytes, never a request
    with socket.create_connection(server.address) as sock:
        sock.sendall(b"CONNECT /healthz HTTP/1.1\r\nHost: x\r\n\r\n" + GOOD)
        answers = _answers(_answer(sock))
    assert [status for status, _ in answers] == [501], answers


@pytest.mark.parametrize("coding", [b"gzip, chunked", b"deflate,chunked", b"x-custom, chunked"])
def test_a_transfer_coding_other_than_chunked_is_a_json_501(server: Server, coding: bytes) -> None:
    # RFC 9112 6.1: a transfer coding the server does not understand is 501; gzip was
    # ignored, the compressed bytes read as the body's lines (each refused as not UTF-8)
    body = gzip.compress(b"{}\n")
    with socket.create_connection(server.address) as sock:
        sock.sendall(b"POST /submit HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: " + coding
                     + b"\r\n\r\n%x\r\n%s\r\n0\r\n\r\n" % (len(body), body) + GOOD)  # fmt: skip
        answers = _answers(_answer(sock))
    assert [status for status, _ in answers] == [501], answers
    assert json.loads(answers[0][1])["error"] == "serve.unsupported_transfer_coding"


def test_an_upgrade_the_parser_does_not_move_past_reads_no_more(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the bytes after an upgrade asked for are parsed from the offset the parser gives;
    # one that did not move on (0) would feed the same bytes again for ever, the event
    # loop spinning: the request is answered and nothing after it read, as after CONNECT
    import httptools
    import uvicorn.protocols.http.httptools_impl as impl

    class Stuck(httptools.HttpRequestParser):  # type: ignore[misc]
        def feed_data(self, data: bytes) -> None:
            try:
                super().feed_data(data)
            except httptools.HttpParserUpgrade:
                raise httptools.HttpParserUpgrade(0) from None

    monkeypatch.setattr(impl.httptools, "HttpRequestParser", Stuck)
    with _bounded_uvicorn(_small, 10) as (_, address), \
            socket.create_connection(address) as sock:  # fmt: skip
        sock.sendall(b"GET /a HTTP/1.1\r\nHost: x\r\n" + UPGRADE + b"\r\n"
                     b"GET /b HTTP/1.1\r\nHost: x\r\n\r\n")  # fmt: skip
        got = _until_closed(sock)
    assert [status for status, _ in _answers(got)] == [200], got
