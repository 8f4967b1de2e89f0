"""The HTTP/1.1 protocol that ``pithlog serve`` runs under uvicorn (``docs/network.md``,
limits): httptools' parser, with the bound on a request's head that uvicorn sets for its
other parser only, and each answer written at once (:mod:`pithlog.net.joined_writes`).

uvicorn parses HTTP with httptools (llhttp) when it is installed, else with h11, and its
bound on a request's head (``h11_max_incomplete_event_size``) is h11's alone: under
httptools, which holds an unfinished head in memory until it ends, a client may send a
head of any size (measured: 200 MB of header lines accepted into a server that grew to
258 MB). httptools is the faster of the two (one pair of runs of 32 submitters: 1,451
against 1,203 events/s), so :func:`protocol` chooses it when it can be imported, bounded
here, and h11 with uvicorn's own bound when it cannot.

A head is refused when, complete, it is over :data:`MAX_HEAD_BYTES` (its request line and
fields, as parsed), and before it is complete when the reads that left it unfinished are
over as many bytes: from the read after the one that began it (which also carries whatever
came before it on the connection, so it is not counted), so the parser never holds more
than the bound and one read. Either way the connection gets ``431`` with the JSON error
``serve.head_too_large`` and is closed.
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

import msgspec

from pithlog.errors import register
from pithlog.net.joined_writes import JoinedWrites

MAX_HEAD_BYTES = 16 * 1024
"""The largest request head (request line and headers) a connection may send."""

register(
    {
        "serve.head_too_large": "the request's head (its request line and headers) is "
        f"over {MAX_HEAD_BYTES:,} bytes (docs/network.md, limits)",
    }
)


def _refusal(too_large: bool = True) -> bytes:
    """The answer to a head refused before any app saw it, then the connection closed: a
    JSON error as every other (``docs/errors.md``), not uvicorn's plain text."""
    if too_large:
        status = b"431 Request Header Fields Too Large"
        error = {"error": "serve.head_too_large",
                 "message": f"the request's head is over {MAX_HEAD_BYTES} bytes"}  # fmt: skip
    else:  # what the HTTP parser refuses: a bad Content-Length, two of them, a bad line
        status = b"400 Bad Request"
        error = {"error": "serve.bad_request", "message": "the request is not HTTP/1.1 as "
                 "RFC 9112 writes it (its request line, a header, Content-Length or the "
                 "chunked framing)"}  # fmt: skip
    body = msgspec.json.encode(error) + b"\n"
    # the headers every answer carries (pithlog.net.answers.answer_headers), as an error's
    head = (b"HTTP/1.1 %s\r\ncontent-type: application/json"
            b"\r\ncache-control: no-store\r\nx-content-type-options: nosniff"
            b"\r\ncontent-length: %d\r\nconnection: close\r\n\r\n")  # fmt: skip
    return head % (status, len(body)) + body


try:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    HAVE_HTTPTOOLS = True
except ImportError:  # httptools is not installed: h11, bounded by uvicorn
    HAVE_HTTPTOOLS = False


def protocol() -> type[asyncio.Protocol] | str:
    """uvicorn's ``http`` setting: :class:`BoundedHttpToolsProtocol`, or ``"h11"`` (whose
    bound is uvicorn's ``h11_max_incomplete_event_size``) without httptools."""
    return BoundedHttpToolsProtocol if HAVE_HTTPTOOLS else "h11"


if HAVE_HTTPTOOLS:

    class BoundedHttpToolsProtocol(HttpToolsProtocol):
        """uvicorn's httptools protocol, whose request heads may be at most
        :data:`MAX_HEAD_BYTES` (the module's docstring says how they are counted), and
        whose answers go out in one write each (:mod:`pithlog.net.joined_writes`). At the
        module's top level, so that ``serve --workers N`` can send it to its workers."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._in_head = True  # a connection begins with a head
            self._began = False
            self._head_bytes = 0
            self._too_large = False

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._in_head, self._began, self._head_bytes = True, True, 0

        def on_headers_complete(self) -> None:
            self._in_head = False
            # the head as sent, give or take its spaces: method, target, version, fields
            size = len(self.url) + 16 + sum(len(n) + len(v) + 4 for n, v in self.headers)
            if size > MAX_HEAD_BYTES:
                self._too_large = True
                # the parser stops and uvicorn answers the error (send_400_response)
                raise ValueError("request head too large")
            before = self.cycle
            super().on_headers_complete()
            if self.cycle is not before:  # a new request: one write per answer
                self.cycle.transport = cast(asyncio.Transport,
                                            JoinedWrites(self.transport, self.loop))  # fmt: skip

        def data_received(self, data: bytes) -> None:
            self._began = False
            super().data_received(data)
            if not self._in_head or self._began or self.transport.is_closing():
                return
            self._head_bytes += len(data)
            if self._head_bytes > MAX_HEAD_BYTES:
                self._too_large = True
                self.send_400_response("request head too large")

        def send_400_response(self, msg: str) -> None:
            self.transport.write(_refusal(self._too_large))
            self.transport.close()
