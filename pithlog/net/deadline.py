"""A deadline on a whole answer, its status line and headers included (``docs/network.md``,
"Running a mirror").

httpx times each read of a socket (60 s) and nothing else, and
:func:`pithlog.net.encoding.read_answer` holds the body to :func:`answer_seconds` of its
cap; but the head comes before the body, and h11 waits for up to 100 KiB of it: a server
that sent a header line every 59 s held a mirror for weeks. Here every connect, read and
write of the requests a thread makes under :class:`AnswerDeadline` is given what is left
of the deadline at most, and none is begun once it has passed (``httpx.TimeoutException``,
which the callers report as an answer that took too long).
"""

from __future__ import annotations

import ipaddress
import ssl
import threading
import time
from collections.abc import Iterable
from typing import Any

import httpcore
import httpx

from pithlog.errors import shown
from pithlog.net.encoding import answer_seconds

REDIRECT_SHOWN = 200
"""The most characters of a redirect's ``Location`` an error shows."""


class _Deadline(threading.local):
    """This thread's deadline (``time.monotonic()``), and the seconds it was set for."""

    at: float | None = None
    seconds: float = 0.0


_DEADLINE = _Deadline()


class AnswerDeadline:
    """Inside (``with``), the requests this thread makes are given :func:`answer_seconds`
    of ``limit`` in all, from then on: head, body and any connection they open; ``most``
    seconds when that is less (what is left of a longer task's own time)."""

    def __init__(self, limit: int, most: float | None = None) -> None:
        self.seconds = answer_seconds(limit) if most is None else min(answer_seconds(limit),
                                                                      most)  # fmt: skip
        self.at = 0.0
        self._saved: tuple[float | None, float] = (None, 0.0)

    def __enter__(self) -> AnswerDeadline:
        self._saved = (_DEADLINE.at, _DEADLINE.seconds)
        self.at = time.monotonic() + self.seconds
        _DEADLINE.at, _DEADLINE.seconds = self.at, self.seconds
        return self

    def __exit__(self, *exc: object) -> None:
        _DEADLINE.at, _DEADLINE.seconds = self._saved

    def why(self, exc: httpx.HTTPError) -> str:
        """What ``exc`` means: a time-out at the deadline is the answer's time up."""
        if isinstance(exc, httpx.TimeoutException) and time.monotonic() >= self.at:
            return f"an answer that took over {self.seconds:.0f} s"
        return str(exc)


def _left(timeout: float | None, late: type[httpcore.TimeoutException]) -> float | None:
    """``timeout``, cut to what is left of this thread's deadline; ``late`` once none is."""
    at = _DEADLINE.at
    if at is None:
        return timeout
    left = at - time.monotonic()
    if left <= 0:
        raise late(f"an answer that took over {_DEADLINE.seconds:.0f} s")
    return left if timeout is None else min(timeout, left)


class _Stream(httpcore.NetworkStream):
    def __init__(self, stream: httpcore.NetworkStream) -> None:
        self._stream = stream

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._stream.read(max_bytes, _left(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._stream.write(buffer, _left(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._stream.close()

    def start_tls(self, ssl_context: ssl.SSLContext, server_hostname: str | None = None,
                  timeout: float | None = None) -> httpcore.NetworkStream:  # fmt: skip
        return _Stream(self._stream.start_tls(ssl_context, server_hostname,
                                              _left(timeout, httpcore.ConnectTimeout)))

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class _Backend(httpcore.NetworkBackend):
    def __init__(self) -> None:
        self._backend = httpcore.SyncBackend()

    def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                    local_address: str | None = None,
                    socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
                    ) -> httpcore.NetworkStream:  # fmt: skip
        return _Stream(self._backend.connect_tcp(
            host, port, _left(timeout, httpcore.ConnectTimeout), local_address, socket_options))

    def connect_unix_socket(self, path: str, timeout: float | None = None,
                            socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
                            ) -> httpcore.NetworkStream:  # fmt: skip
        return _Stream(self._backend.connect_unix_socket(
            path, _left(timeout, httpcore.ConnectTimeout), socket_options))

    def sleep(self, seconds: float) -> None:
        self._backend.sleep(seconds)


def redirect_note(response: httpx.Response) -> str:
    """What a redirect (3xx with a ``Location``) said, as ``: a redirect to LOCATION, not
    followed``, the ``Location`` cut and shown escaped (it is the server's words);
    else nothing. pithlog's clients follow no redirect (``follow_redirects=False``): to
    another host or scheme, or to itself, none is taken on a server's word
    (docs/network.md, "Running a mirror"), and the error names where it pointed, the URL
    the operator may give instead."""
    location = response.headers.get("location") if response.is_redirect else None
    if not location:
        return ""
    cut = location[:REDIRECT_SHOWN] + ("..." if len(location) > REDIRECT_SHOWN else "")
    return f": a redirect to {shown(cut)}, not followed"


def loopback(host: str) -> bool:
    """Whether ``host`` (a URL's, IPv6 without its brackets) is this machine's loopback:
    ``localhost``, or an address of 127.0.0.0/8 or ``::1``."""
    if host.lower().rstrip(".") == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class _Client(httpx.Client):
    """An ``httpx.Client`` that asks the loopback straight, whatever proxy the environment
    names (:func:`deadline_client`)."""

    def _transport_for_url(self, url: httpx.URL) -> httpx.BaseTransport:
        if loopback(url.host):
            return self._transport
        return super()._transport_for_url(url)


def deadline_client(**options: Any) -> httpx.Client:
    """``httpx.Client(**options)`` as httpx makes it, the proxies that ``HTTP_PROXY``,
    ``HTTPS_PROXY``, ``ALL_PROXY`` and ``NO_PROXY`` name included, with every connection
    it opens, straight or through a proxy, under :class:`AnswerDeadline`. httpx takes no
    network backend of its own choosing, so each transport's connection pool is given
    one (a pool made again instead would drop the proxies).

    The loopback (:func:`loopback`) is never asked through a proxy, as Go's
    ``httpproxy`` never does: a proxy on another machine reached its own loopback or
    nothing, and with ``HTTP_PROXY`` set a mirror of ``http://127.0.0.1:8080`` (a served
    log on the loopback, as docs/network.md runs one) said the origin answered 502."""
    client = _Client(**options)
    for transport in (client._transport, *client._mounts.values()):
        if isinstance(transport, httpx.HTTPTransport):
            transport._pool._network_backend = _Backend()
    return client
