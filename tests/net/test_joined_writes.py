"""One write per answer (pithlog.net.joined_writes): the writes of uvicorn's request cycle
joined, unit by unit against a transport that records them, and against a real ``pithlog
serve``: each answer reaches the client as one TCP segment (the kernel's count of data
segments received, ``tcpi_data_segs_in``), where uvicorn alone sends its head and its
body as two."""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import Callable, Iterator
from typing import Any, cast

import pytest
from served import Files, Server, make_files, serving

from pithlog.net.joined_writes import JoinedWrites


class Recorded:
    """A transport that records what is written to it."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        assert not self.closed, "written after close"
        self.writes.append(bytes(data))

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def get_extra_info(self, name: str) -> Any:
        return f"info {name}"


class Joined(JoinedWrites):
    transport: Recorded


def _joined(run: Callable[[Joined], None]) -> Recorded:
    """``run(joined)`` in a turn of a new event loop, then the loop's next turns; what the
    transport got."""
    recorded = Recorded()

    async def main() -> None:
        joined = Joined(cast(asyncio.Transport, recorded), asyncio.get_running_loop())
        joined.transport = recorded
        run(joined)
        for _ in range(3):
            await asyncio.sleep(0)

    asyncio.run(main())
    return recorded


def test_a_head_and_body_written_in_one_turn_go_out_as_one_write() -> None:
    def run(joined: Joined) -> None:
        joined.write(b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\n")
        joined.write(b"ok\n")

    assert _joined(run).writes == [b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\nok\n"]


def test_a_lone_write_goes_out_on_the_next_turn_and_order_is_kept() -> None:
    def run(joined: Joined) -> None:
        joined.write(bytearray(b"head"))
        joined.write(b"")  # an empty body: sends what is held
        joined.write(memoryview(b"chunk 1"))
        joined.write(b"chunk 2")
        joined.write(b"end")

    assert _joined(run).writes == [b"head", b"chunk 1chunk 2", b"end"]


def test_close_sends_what_is_held_first() -> None:
    def run(joined: Joined) -> None:
        joined.write(b"answer")
        joined.close()

    recorded = _joined(run)
    assert recorded.writes == [b"answer"] and recorded.closed


def test_a_held_write_is_dropped_once_the_connection_is_closing() -> None:
    def run(joined: Joined) -> None:
        joined.write(b"head")
        joined.transport.closed = True  # the client went away before the next turn

    assert _joined(run).writes == []


def test_other_attributes_are_the_transports() -> None:
    def run(joined: Joined) -> None:
        assert joined.get_extra_info("socket") == "info socket" and not joined.is_closing()
        joined.write(b"held")
        assert not joined.is_closing()

    assert _joined(run).writes == [b"held"]


# --- against a real server ----------------------------------------------------------------

TCP_INFO_BYTES = 160
DATA_SEGS_IN = struct.Struct("=I")
"""``tcpi_data_segs_in`` of ``struct tcp_info`` (Linux 4.6 and later), at byte 152."""


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Files:
    return make_files(tmp_path_factory.mktemp("joined"), piths=2, per_pith=3)


@pytest.fixture(scope="module")
def server(files: Files) -> Iterator[Server]:
    with serving(files) as running:
        yield running


def _data_segments_in(sock: socket.socket) -> int:
    info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, TCP_INFO_BYTES)
    if len(info) < TCP_INFO_BYTES:
        pytest.skip("this kernel's tcp_info has no tcpi_data_segs_in")
    return int(DATA_SEGS_IN.unpack_from(info, 152)[0])


def _answer(sock: socket.socket) -> bytes:
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
            answer = _answer(sock)
            assert answer.startswith(b"HTTP/1.1 ") and _data_segments_in(sock) - before == 1, (
                path, answer[:80])
