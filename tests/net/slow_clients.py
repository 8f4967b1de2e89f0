"""Raw HTTP/1.1 clients for the tests of what a server holds for answers not yet read:
a client that reads nothing of its answer, a client that reads it whole, and a wait for
the server's counters.

On 127.0.0.1 the kernel takes in about a megabyte of an answer per connection, which
hides what a server holds for a client that does not read; a connection with the
Internet's segment size (``TCP_MAXSEG`` 1400) and a small receive buffer shows it."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable


def get_request(path: str, *headers: str) -> bytes:
    """``GET path``, its answer not compressed, the connection closed after it."""
    extra = "".join(f"{header}\r\n" for header in headers)
    return (f"GET {path} HTTP/1.1\r\nHost: x\r\n{extra}Accept-Encoding: identity\r\n"
            "Connection: close\r\n\r\n").encode()  # fmt: skip


def asked(address: tuple[str, int], request: bytes, unread: bool = False,
         timeout: float = 30) -> socket.socket:  # fmt: skip
    """A connection that sent ``request``; ``unread``: one whose client reads nothing of
    its answer, over the Internet's segment size and a 4 KB receive buffer."""
    sock = socket.socket()
    if unread:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, 1400)
    sock.settimeout(timeout)
    sock.connect(address)
    sock.sendall(request)
    return sock


def answer(sock: socket.socket) -> tuple[int, bytes]:
    """The status and the body (de-chunked) of the answer on ``sock``, read to its end;
    the connection closed."""
    data = b""
    while chunk := sock.recv(1 << 20):
        data += chunk
    sock.close()
    head, _, body = data.partition(b"\r\n\r\n")
    if b"transfer-encoding: chunked" in head.lower():
        whole = b""
        while True:
            size, _, body = body.partition(b"\r\n")
            if not int(size, 16):
                break
            whole += body[: int(size, 16)]
            body = body[int(size, 16) + 2 :]
        body = whole
    return int(head.split(b" ")[1]), body


def until(check: Callable[[], bool], seconds: float = 30) -> None:
    """Wait until ``check()`` holds; fail after ``seconds``."""
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "the server never came to the state awaited"
        time.sleep(0.02)
