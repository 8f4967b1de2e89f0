"""``POST /submit`` as a bare ASGI app: the route that a registry's submitters call once
per event, served without Starlette's layers (its error middleware, exception handlers and
router, a ``Request`` and a ``Response`` per call). :class:`pithlog.net.app.LogApp` hands a
``POST /submit`` straight to :class:`SubmitRoute`; every other request, ``/submit`` by
another method included, goes through Starlette as before.

Measured with 32 single-event submitters against ``serve --workers 2`` (6 paired runs of
40,000 events, ``docs/submit-speed.md``): 200-215 us of the server's CPU per event
through this route, 221-248 through Starlette's, and 1.01-1.20x the events/s (median
1.14x). Its answers are the same bytes and headers either way, its errors the same JSON
(:mod:`pithlog.net.answers`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from typing import Any

from pithlog.errors import PithlogError, ServeError, register
from pithlog.net.answers import (
    JSON,
    JSON_LINES,
    NO_STORE,
    answer_headers,
    error_body,
    status_of,
)
from pithlog.net.submit import (
    SPLIT_APART_BYTES,
    TAKEN_CODINGS,
    GroupCommit,
    Limits,
    answer,
    check_coding,
    check_declared,
    lines_of,
    read_body,
    split_lines,
)

register({"serve.read_only": "this server does not take submissions (it runs without --submit)"})

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

PATH = "/submit"


class SubmitRoute:
    """The ASGI app of ``POST /submit`` over ``submissions`` (``None``: a read-only server,
    ``403 serve.read_only``): JSON Lines of signed events in, one status line each out,
    after their commit (:class:`~pithlog.net.submit.GroupCommit`); every limit of
    :class:`~pithlog.net.submit.Limits`."""

    def __init__(self, submissions: GroupCommit[Any] | None, limits: Limits) -> None:
        self.submissions = submissions
        self.limits = limits
        self.bodies = limits.held_bytes()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        status, media, extra = 200, JSON_LINES, []
        try:
            body = await self._answer(scope, receive)
        except PithlogError as exc:
            status, media, body = status_of(exc), JSON, error_body(exc.code, exc.message)
            if status == 415:  # RFC 9110 15.5.16: the codings that would have been taken
                extra = [(b"accept-encoding", TAKEN_CODINGS.encode())]
        except Exception:
            # as Starlette's error middleware does: a JSON 500 (no traceback), and the
            # exception raised on for the server to log
            await _send(send, 500, JSON,
                        error_body("serve.internal", "the server failed to answer"))  # fmt: skip
            raise
        await _send(send, status, media, body, extra)

    async def _answer(self, scope: Scope, receive: Receive) -> bytes:
        if self.submissions is None:
            raise ServeError("read_only", "this server takes no submissions")
        # the first Content-Length, as Starlette's headers.get read it
        length = next((value.decode("latin-1") for name, value in scope["headers"]
                       if name == b"content-length"), None)  # fmt: skip
        check_declared(length, self.limits)  # 413 at once, before any byte is held
        check_coding([value.decode("latin-1") for name, value in scope["headers"]
                      if name == b"content-encoding"])  # fmt: skip
        # the body holds the bytes it has sent, and a place only once it is whole: a slow
        # sender holds no place that a whole body waits for (pithlog.net.body_bytes)
        body = await read_body(_chunks(receive), None, self.limits,  # length: checked
                               held=self.bodies)  # fmt: skip
        try:
            slots = await self.submissions.take_slot(self.limits)  # max_pending at work
            try:
                # a single event split here, on the loop; a large body in a worker thread
                lines = (split_lines(body, self.limits) if len(body) < SPLIT_APART_BYTES
                         else await lines_of(body, self.limits))  # fmt: skip
                results = await self.submissions.submit(
                    [raw for _, raw in lines if raw is not None])  # fmt: skip
            finally:
                slots.release()
        finally:
            self.bodies.give(len(body))
        return answer(lines, results)


async def _chunks(receive: Receive) -> AsyncIterator[bytes]:
    """The body's chunks as the server hands them over; a client gone mid-body is
    ``400 serve.bad_request`` (nobody reads that answer: nothing was stored)."""
    while True:
        message = await receive()
        if message["type"] != "http.request":  # http.disconnect
            raise ServeError("bad_request", "the client went away mid-request")
        yield message.get("body", b"")
        if not message.get("more_body", False):
            return


_HEADERS = [(name.lower().encode("latin-1"), value.encode("latin-1"))
            for name, value in answer_headers(NO_STORE).items()]  # fmt: skip
"""Those of every answer (:func:`~pithlog.net.answers.answer_headers`): never cached."""


async def _send(send: Send, status: int, media: str, body: bytes,
                extra: list[tuple[bytes, bytes]] | None = None) -> None:  # fmt: skip
    headers = [(b"content-length", b"%d" % len(body)), (b"content-type", media.encode()),
               *_HEADERS, *(extra or [])]  # fmt: skip
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
