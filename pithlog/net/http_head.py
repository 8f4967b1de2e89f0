"""The HTTP/1.1 protocol that ``pithlog serve`` runs under uvicorn (``docs/network.md``,
limits): httptools' parser, with the bound on a request's head that uvicorn sets for its
other parser only, and each answer written at once (:mod:`pithlog.net.joined_writes`).

uvicorn parses HTTP with httptools (llhttp) when it is installed, else with h11, and its
bound on a request's head (``h11_max_incomplete_event_size``) is h11's alone: under
httptools, which holds an unfinished head in memory until it ends, a client may send a
head of any size (measured: 200 MB of header lines accepted into a server that grew to
258 MB). httptools is the faster of the two (one pair of runs of 32 submitters: 1,451
against 1,203 events/s), and :func:`protocol` runs it, bounded here. Without it there is
no ``serve``: importing this module fails, and the command says which package is missing
(``usage.net_extra``; httptools comes with ``pithlog[net]``). Under h11 uvicorn would
time out neither a head nor an unread answer, so a connection that sent nothing, or half
a head, stayed open for ever (measured: still open 13 s after its head's 10 s), and its
errors would not be JSON: none of the bounds below would hold.

A head is refused when, complete, it is over :data:`MAX_HEAD_BYTES` (its request line and
fields, as parsed), and before it is complete when the reads that left it unfinished are
over as many bytes: from the read after the one that began it (which also carries whatever
came before it on the connection, so it is not counted), so the parser never holds more
than the bound and one read. Either way the connection gets ``431`` with the JSON error
``serve.head_too_large`` and is closed. A request line whose method llhttp does not know
(it knows a fixed list, and refuses any other as it refuses bytes that are not HTTP) gets
``501 serve.not_implemented`` (RFC 9110 15.6.2), as the apps answer a method they know
but no path takes; what else the parser refuses gets ``400 serve.bad_request``.

uvicorn bounds neither how long a connection may take to send a head nor how long an answer
may wait for its client to read it: a connection that sends nothing, or a few bytes of a
head, or never reads its answer, stayed open for ever, and each counts towards uvicorn's
concurrency limit (``LIMIT_CONCURRENCY``, :mod:`pithlog.net.server`), past which every
other client gets ``503``: 1,000 idle sockets from one client shut a worker for as long as
they stayed. So a head must be whole within :data:`HEAD_SECONDS` of the connection's start
or of its first byte (``408 serve.timeout`` when some of it came, else the connection is
closed without a word, as after an idle keep-alive), the rest of a body that an answer went
out before (a ``408``, a ``413``) has as long, and an answer whose client has taken none of
its bytes for :data:`SEND_STALL_SECONDS` is cut off: the connection is closed.
"""

from __future__ import annotations

import asyncio
import re
import sys
from collections import deque
from typing import Any, cast

import httptools
import msgspec
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from pithlog.errors import register
from pithlog.net.answers import not_implemented_message, send_error
from pithlog.net.joined_writes import JoinedWrites

MAX_HEAD_BYTES = 16 * 1024
"""The largest request head (request line and headers) a connection may send."""

HEAD_SECONDS = 10.0
"""Seconds a request head may take, from the connection's start (its first request) or from
its first byte (the next ones; between two requests uvicorn's keep-alive time-out runs)."""
SEND_STALL_SECONDS = 60.0
"""Seconds an answer may wait, its connection's buffer full, without the client taking any
of it (nginx's ``send_timeout`` is as long)."""

register(
    {
        "serve.head_too_large": "the request's head (its request line and headers) is "
        f"over {MAX_HEAD_BYTES:,} bytes (docs/network.md, limits)",
        "serve.unsupported_transfer_coding": "the request's Transfer-Encoding names a "
        "coding other than chunked (gzip, deflate, ...), which the server does not decode "
        "(RFC 9112 6.1): send the body chunked or with a Content-Length, as it is",
    }
)


_REQUEST_LINE = re.compile(rb"(?:\r?\n)*[-!#$%&'*+.^_`|~0-9A-Za-z]+ [^\s]+ HTTP/[0-9]\.[0-9]\r?\n")
"""A request line (RFC 9112 3), its method a token (RFC 9110 5.6.2): what llhttp refuses
for its method alone when it begins a read."""


def _refusal(too_large: bool = True, late: bool = False, method: bool = False,
             coding: bool = False) -> bytes:  # fmt: skip
    """The answer to a head refused before any app saw it, then the connection closed: a
    JSON error as every other (``docs/errors.md``), not uvicorn's plain text."""
    if method:  # RFC 9110 15.6.2: a method the server does not recognize
        status = b"501 Not Implemented"
        error = {"error": "serve.not_implemented", "message": not_implemented_message()}
    elif coding:  # RFC 9112 6.1: a transfer coding the server does not understand
        status = b"501 Not Implemented"
        error = {"error": "serve.unsupported_transfer_coding", "message": "the body's "
                 "Transfer-Encoding names a coding other than chunked: send it chunked "
                 "or with a Content-Length, as it is"}  # fmt: skip
    elif late:
        status = b"408 Request Timeout"
        error = {"error": "serve.timeout", "message": "the request's head did not arrive "
                 f"within {HEAD_SECONDS:g} s"}  # fmt: skip
    elif too_large:
        status = b"431 Request Header Fields Too Large"
        error = {"error": "serve.head_too_large",
                 "message": f"the request's head is over {MAX_HEAD_BYTES} bytes"}  # fmt: skip
    else:  # what the HTTP parser refuses: a bad Content-Length, two of them, a bad line;
        # a request without Host or with two
        status = b"400 Bad Request"
        error = {"error": "serve.bad_request", "message": "the request is not HTTP/1.1 as "
                 "RFC 9112 writes it (its request line, a header, Host, Content-Length or the "
                 "chunked framing)"}  # fmt: skip
    body = msgspec.json.encode(error) + b"\n"
    # the headers every answer carries (pithlog.net.answers.answer_headers), as an error's
    head = (b"HTTP/1.1 %s\r\ncontent-type: application/json"
            b"\r\ncache-control: no-store\r\nx-content-type-options: nosniff"
            b"\r\ncontent-length: %d\r\nconnection: close\r\n\r\n")  # fmt: skip
    return head % (status, len(body)) + body


async def _busy(scope: Any, receive: Any, send: Any) -> None:
    """The answer past uvicorn's concurrency limit (``LIMIT_CONCURRENCY``): a JSON error as
    every other, where uvicorn's own is the plain text ``Service Unavailable``; the
    connection is closed after it (a place freed), as uvicorn closes it."""
    await send_error(send, 503, "serve.busy", "the server is serving as many connections "
                     "and requests as it takes at once: retry later", close=True)  # fmt: skip


def protocol() -> type[asyncio.Protocol]:
    """uvicorn's ``http`` setting: :class:`BoundedHttpToolsProtocol`."""
    return BoundedHttpToolsProtocol


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, whose request heads may be at most
    :data:`MAX_HEAD_BYTES` (the module's docstring says how they are counted) and take
    at most :data:`HEAD_SECONDS`, whose answers are cut off when their client reads
    none of them for :data:`SEND_STALL_SECONDS`, and whose answers go out in one write
    each (:mod:`pithlog.net.joined_writes`), and whose answer past the concurrency
    limit is the JSON ``503 serve.busy`` (uvicorn's is plain text). At the
    module's top level, so that ``serve --workers N`` can send it to its workers."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._in_head = True  # a connection begins with a head
        self._began = False
        self._head_bytes = 0
        self._too_large = False
        self._head_started = False  # a byte of the head has come
        self._head_timer: asyncio.TimerHandle | None = None
        self._stall_timer: asyncio.TimerHandle | None = None
        self._stall_buffered = 0
        self._received = b""
        self._begun_in_read = 0  # requests begun in the read being parsed
        self._in_body: Any = None  # the cycle whose body is being parsed
        self._refusal: bytes | None = None  # an answer waiting for the answers before it
        self._tunnel = False  # a CONNECT came
        self._coding = False  # a request's Transfer-Encoding is not chunked alone
        # uvicorn answers past its concurrency limit in plain text: the limit is counted
        # here instead, as uvicorn counts it, and answered by _busy
        self._limit, self.limit_concurrency = self.limit_concurrency, None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._head_timer = self.loop.call_later(HEAD_SECONDS, self._head_late)

    def connection_lost(self, exc: Exception | None) -> None:
        for timer in (self._head_timer, self._stall_timer):
            if timer is not None:
                timer.cancel()
        self._head_timer = self._stall_timer = None
        super().connection_lost(exc)

    def _head_late(self) -> None:
        """:data:`HEAD_SECONDS` passed and the head is not whole: ``408`` when some of
        it came, else the connection closed. While an answer of the connection is under
        way (pipelined requests), reading waits for it: the head's time starts again."""
        self._head_timer = None
        if self.transport.is_closing():
            return
        if self.pipeline or (self.cycle is not None and not self.cycle.response_complete):
            self._head_timer = self.loop.call_later(HEAD_SECONDS, self._head_late)
            return
        if self._head_started:
            self.transport.write(_refusal(late=True))
        self.transport.close()

    def pause_writing(self) -> None:
        super().pause_writing()
        if self._stall_timer is None:
            self._stall_buffered = self.transport.get_write_buffer_size()
            self._stall_timer = self.loop.call_later(SEND_STALL_SECONDS, self._stalled)

    def resume_writing(self) -> None:
        super().resume_writing()
        if self._stall_timer is not None:
            self._stall_timer.cancel()
            self._stall_timer = None

    def _stalled(self) -> None:
        """The connection's buffer has been full for :data:`SEND_STALL_SECONDS`: cut
        the answer off if the client took none of it meanwhile."""
        self._stall_timer = None
        if self.transport.is_closing():
            return
        buffered = self.transport.get_write_buffer_size()
        if buffered < self._stall_buffered:  # read, slowly: it has as long again
            self._stall_buffered = buffered
            self._stall_timer = self.loop.call_later(SEND_STALL_SECONDS, self._stalled)
            return
        # close() would wait for the buffer to drain, which is what does not happen
        self.transport.abort()

    def on_response_complete(self) -> None:
        last = not self.pipeline  # else the next one starts (uvicorn's)
        super().on_response_complete()
        if self._refusal is not None and last and not self.transport.is_closing():
            # the last answer before the refused request has gone: the refusal now, after
            # the bytes of that answer still held (JoinedWrites sends them on this turn)
            self.loop.call_soon(self._refuse)
            return
        if (self.cycle is not None and self.cycle.more_body and self._head_timer is None
                and not self.transport.is_closing()):  # fmt: skip
            # answered before its body came whole (a 408, a 413): each byte of the rest
            # put off uvicorn's keep-alive time-out, and nothing else ran, so the rest
            # has as long as a head would
            self._head_timer = self.loop.call_later(HEAD_SECONDS, self._head_late)

    def on_message_complete(self) -> None:
        self._in_body = None
        super().on_message_complete()
        if self.cycle is not None and self.cycle.response_complete and \
                self._head_timer is not None:  # fmt: skip
            # the rest of an answered request's body came: the next head's time starts
            # with its first byte
            self._head_timer.cancel()
            self._head_timer = None

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_head, self._began, self._head_bytes = True, True, 0
        self._begun_in_read += 1
        self._head_started = True
        if self._head_timer is None:
            self._head_timer = self.loop.call_later(HEAD_SECONDS, self._head_late)

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._head_started = False
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        # the head as sent, give or take its spaces: method, target, version, fields
        size = len(self.url) + 16 + sum(len(n) + len(v) + 4 for n, v in self.headers)
        if size > MAX_HEAD_BYTES:
            self._too_large = True
            # the parser stops and uvicorn answers the error (send_400_response)
            raise ValueError("request head too large")
        # RFC 9112 3.2: a server MUST answer 400 to an HTTP/1.1 request without Host,
        # and to any request with more than one (llhttp passes both)
        hosts = sum(1 for name, _ in self.headers if name == b"host")
        if hosts > 1 or (hosts == 0 and self.parser.get_http_version() == "1.1"):
            raise ValueError("no Host, or more than one")
        # No connection is ever upgraded (no WebSocket, no h2c: the server's ws="none"),
        # but llhttp, told of an upgrade (Connection: upgrade and Upgrade, or CONNECT),
        # skips the request's body: its bytes were read as the next request on the
        # connection, a request smuggled past a proxy that framed it by its
        # Content-Length. A body beside an upgrade asked for is refused; CONNECT, whose
        # bytes after the head are a tunnel's, is answered and the connection closed
        # RFC 9112 6.1: a transfer coding the server does not understand is 501. llhttp
        # takes any coding before a final chunked (and refuses the rest) and passes the
        # body on as it came: a gzip, chunked body was read as lines, each refused
        if any(name == b"transfer-encoding" and any(
                part.split(b";")[0].strip().lower() != b"chunked"
                for part in value.split(b",")) for name, value in self.headers):  # fmt: skip
            self._coding = True
            raise ValueError("a transfer coding other than chunked")
        connect = self.parser.get_method() == b"CONNECT"
        if self.parser.should_upgrade() and not connect and any(
                name in (b"content-length", b"transfer-encoding") and value != b"0"
                for name, value in self.headers):  # fmt: skip
            raise ValueError("a body beside an upgrade")
        before, app = self.cycle, self.app
        if self._limit is not None and (len(self.connections) >= self._limit
                                        or len(self.tasks) >= self._limit):  # fmt: skip
            self.app = _busy  # the app this request's cycle runs
            self.logger.warning("Exceeded concurrency limit.")  # as uvicorn logs it
        try:
            super().on_headers_complete()
        finally:
            self.app = app
        if self.cycle is not before:  # a new request: one write per answer
            self.cycle.transport = cast(asyncio.Transport,
                                        JoinedWrites(self.transport, self.loop))  # fmt: skip
            self._in_body = self.cycle
            if connect:
                self.cycle.keep_alive = False

    def data_received(self, data: bytes) -> None:
        if self._refusal is not None or self._tunnel:
            return  # a request was refused, or was a CONNECT: nothing after it is read
        self._began = False
        self._begun_in_read = 0
        self._received = data  # what send_400_response may look at
        self._parse(data)
        self._received = b""
        if not self._in_head or self._began or self.transport.is_closing():
            return
        self._head_bytes += len(data)
        if self._head_bytes > MAX_HEAD_BYTES:
            self._too_large = True
            self.send_400_response("request head too large")

    def _parse(self, data: bytes) -> None:
        """uvicorn's ``data_received``, save after a request that asks for an upgrade,
        which is never made: the rest of the read was dropped, so a request pipelined
        after it was never answered; it is parsed as the next request (RFC 9110 7.8: the
        server ignores the Upgrade). After CONNECT nothing more is read: the connection
        closes once it is answered."""
        self._unset_keepalive_if_required()
        while data:
            try:
                self.parser.feed_data(data)
            except httptools.HttpParserError:
                self.logger.warning("Invalid HTTP request received.")
                self.send_400_response("Invalid HTTP request received.")
            except httptools.HttpParserUpgrade as exc:
                at = exc.args[0] if exc.args and isinstance(exc.args[0], int) else 0
                # the rest parsed only when the parser moved on: an offset that did not
                # would feed the same bytes again for ever (read no more, as after CONNECT)
                if self.parser.get_method() != b"CONNECT" and 0 < at <= len(data):
                    data = data[at:]
                    continue
                self.flow.pause_reading()
                self._tunnel = True  # nothing more read: see data_received
                if self.cycle is not None:  # and the connection closed once answered
                    self.cycle.keep_alive = False
            return

    def send_400_response(self, msg: str) -> None:
        # uvicorn calls this as it handles the parser's error: llhttp knows a fixed
        # list of methods, and refuses any other as it refuses bytes that are not HTTP;
        # a request line with such a method (at the read's start) is 501, not 400. Only
        # the read's first request starts there: when another one ended in the same read
        # (a body longer than its Content-Length, a pipelined request), the refused bytes
        # start at an offset the parser does not tell, and those bytes ('{}' after a
        # body's last counted byte) need not be a request line at all: 400
        unknown = isinstance(sys.exc_info()[1], httptools.HttpParserInvalidMethodError)
        method = (unknown and self._begun_in_read <= 1
                  and _REQUEST_LINE.match(self._received) is not None)  # fmt: skip
        self._refusal = _refusal(self._too_large, method=method, coding=self._coding)
        # RFC 9112 9.3.2: answers go in the order of their requests. Those pipelined
        # before the refused one (in the same read) are answered first: the refusal went
        # out at once, ahead of them, and the client took it for its first request's
        # answer, the others never sent. A request refused in its body has its cycle
        # already, waiting in the pipeline behind the others: the refusal is its answer
        refused = self._in_body
        if refused is not None:
            self.pipeline = deque(item for item in self.pipeline if item[0] is not refused)
        if self.pipeline or (self.cycle is not None and self.cycle is not refused
                             and not self.cycle.response_complete):  # fmt: skip
            self.flow.pause_reading()  # on_response_complete sends it after the last
            return
        self._refuse()

    def _refuse(self) -> None:
        """Send the refusal of a request (:meth:`send_400_response`) and close."""
        if self._refusal is not None and not self.transport.is_closing():
            self.transport.write(self._refusal)
            self.transport.close()
