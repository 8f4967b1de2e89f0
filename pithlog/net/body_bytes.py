"""The bytes of request bodies a worker holds at once (``docs/network.md``, limits).

A route that bounded its bodies by places taken before reading them (``POST /submit``
its ``--max-pending``, ``POST /sync`` its ``MAX_SYNCS``) let a few slow senders, each
sending a head and then a byte now and then, hold every place until its body time-out:
two of them on ``--max-pending 2 --body-timeout 5`` kept an honest submission of one
event waiting 5.3 s, its body sent at once. Here a body takes the bytes
it holds as they arrive, out of a sum shared by the route's requests (nginx bounds the
bodies it reads by their buffers, not by connections): a slow sender holds what it has
sent, and to keep others out it must send as many bytes as the route holds in all. The
places are then taken only once a body is whole, for the work done with it.

Bodies that take their bytes bit by bit can all end up waiting for room that only the
others hold: two bodies of 60,000 bytes on ``--max-pending 1 --max-body 100000``, one
holding 40,000 and the other 50,000, each waited for the other until its body time-out,
and one got ``503``. When every byte held is held by a body waiting for more, none will
be given back: a waiting body that fits goes ahead of its turn, and when none fits, the
one that asked last is refused (:class:`NoRoom`) and gives back what it holds.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator

from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from pithlog.errors import ServeError, register

register(
    {
        # here, below every route that holds bytes or places: submissions, syncs, state
        # documents, and the connections and requests of http_head
        "serve.busy": "the server holds as many requests of that kind as it takes at once "
        "(submissions, syncs, state documents, the bytes of their bodies or answers, or "
        "connections and requests in all: docs/network.md, limits): retry later",
    }
)


class NoRoom(Exception):
    """A body refused its bytes: every byte held is held by bodies waiting for more, and
    none of them fits (:meth:`BodyBytes.take`)."""


class BodyBytes:
    """At most ``most`` bytes of bodies held at once: :meth:`take` them as they arrive
    (waiting, first come first served, while the others hold too many), :meth:`give` them
    back once the body is answered or refused. Plain counts and one future per wait, so
    that it works on whichever event loop runs it."""

    def __init__(self, most: int) -> None:
        self.most = most
        self.held = 0
        self._waiting: deque[tuple[int, int, asyncio.Future[None]]] = deque()

    async def take(self, n: int, holds: int = 0) -> None:
        """Hold ``n`` more bytes (at most :attr:`most`), once the others leave room, for a
        body that holds ``holds`` bytes already; :class:`NoRoom` when those it waits for
        all wait too (it is then for the caller to give back its ``holds``)."""
        if not self._waiting and self.held + n <= self.most:
            self.held += n
            return
        future = asyncio.get_running_loop().create_future()
        self._waiting.append((n, holds, future))
        self._wake()  # it may be the one that leaves every holder waiting
        try:
            await future
        except BaseException:
            if future.done() and not future.cancelled() and future.exception() is None:
                self.give(n)  # given just as the wait was cancelled (a time-out)
            else:
                future.cancel()
                self._wake()  # those behind it may fit now
            raise

    def take_now(self, n: int) -> bool:
        """Hold ``n`` more bytes if they are free now and none waits before them."""
        if self._waiting or self.held + n > self.most:
            return False
        self.held += n
        return True

    def give(self, n: int) -> None:
        """Give back ``n`` bytes taken."""
        self.held -= n
        self._wake()

    def _wake(self) -> None:
        while self._waiting:
            n, _, future = self._waiting[0]
            if future.done():  # its wait ended (cancelled)
                self._waiting.popleft()
                continue
            if self.held + n > self.most:
                self._unstick()
                return
            self._waiting.popleft()
            self.held += n
            future.set_result(None)

    def _unstick(self) -> None:
        """When every byte held is held by a waiting body, no byte will be given back but
        by a body time-out: one that fits is let through, or else the last to ask (that
        holds bytes) is refused."""
        waiting = [entry for entry in self._waiting if not entry[2].done()]
        if sum(holds for _, holds, _ in waiting) < self.held:
            return  # a body not waiting (being answered, or sending) will give its bytes back
        for entry in waiting:
            n, _, future = entry
            if self.held + n <= self.most:
                self._waiting.remove(entry)
                self.held += n
                future.set_result(None)
                return
        for _, holds, future in reversed(waiting):
            if holds:
                future.set_exception(NoRoom())
                return


ANSWER_PIECE = 256 << 10
"""Bytes of an answer handed to the connection at a time: the server writes the next piece
only once the connection has taken the last (uvicorn's flow control), so an answer
whose client does not read it stays out of the connection's buffer, and counted."""


class HeldAnswer(Response):
    """An answer of which ``held`` bytes were taken out of ``room``, given back once it is
    sent, or its client gone; sent :data:`ANSWER_PIECE` bytes at a time, so that what is
    not sent yet stays in its one body (handed whole to uvicorn, an answer was copied into
    the connection's buffer and held there, uncounted, until its client read it)."""

    def __init__(self, body: bytes, media_type: str, headers: dict[str, str],
                 room: BodyBytes, held: int) -> None:  # fmt: skip
        super().__init__(body, media_type=media_type, headers=headers)
        self._room = room
        self._held = held

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await send({"type": "http.response.start", "status": self.status_code,
                        "headers": self.raw_headers})  # fmt: skip
            body = memoryview(self.body)
            at = 0
            while True:
                piece = bytes(body[at : at + ANSWER_PIECE])
                at += len(piece)
                more = at < len(body)
                await send({"type": "http.response.body", "body": piece, "more_body": more})
                if not more:
                    return
        finally:
            self._room.give(self._held)



class HeldStream(StreamingResponse):
    """A streamed answer (``/copies/``) for which ``held`` bytes were taken out of ``room``,
    the most that one of its chunks may be, given back once it is sent, or its client
    gone. Each chunk is sent :data:`ANSWER_PIECE` bytes at a time, so that the next one is
    made only once the connection has taken all but the last piece of this one: handed
    whole to the connection, a chunk was held there until its client read it, and the next
    one made meanwhile."""

    def __init__(self, chunks: AsyncIterator[bytes], media_type: str,
                 headers: dict[str, str], room: BodyBytes, held: int) -> None:  # fmt: skip
        super().__init__(chunks, media_type=media_type, headers=headers)
        self._room = room
        self._held = held

    async def stream_response(self, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status_code,
                    "headers": self.raw_headers})  # fmt: skip
        async for chunk in self.body_iterator:
            assert isinstance(chunk, bytes)
            body = memoryview(chunk)
            for at in range(0, len(body), ANSWER_PIECE):
                await send({"type": "http.response.body",
                            "body": bytes(body[at : at + ANSWER_PIECE]), "more_body": True})
            del chunk, body  # the next chunk is made with this one's bytes given up
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._room.give(self._held)

class AnswerRoom(BodyBytes):
    """The bytes of a route's answers being sent (:class:`HeldAnswer`), at most ``most``:
    an answer of one piece (:data:`ANSWER_PIECE`) or less takes none, a larger one its
    size (at most all of them). An answer made waits for its bytes only while fewer than
    ``waiters`` others wait, each holding its made answer, and for ``wait`` seconds at
    most; otherwise ``503 serve.busy`` (``busy``, its message). An answer that waits
    holds no other place of its route: while clients that do not read held all the bytes,
    the state documents waiting for them held both places to build one, and a state of
    3 KB waited 27.7 s behind twelve unread states of 6.3 MB."""

    def __init__(self, most: int, waiters: int, wait: float, busy: str) -> None:
        super().__init__(most)
        self.waiters = waiters
        self.wait = wait
        self.busy = busy
        self.waiting = 0
        """Answers made, waiting for their bytes now."""

    async def hold(self, size: int) -> int:
        """Take the bytes of an answer of ``size`` bytes: what was taken, to give back once
        it is sent (:class:`HeldAnswer`)."""
        if size <= ANSWER_PIECE:  # sent whole at once, as every other small answer
            return 0
        n = min(size, self.most)
        if self.take_now(n):
            return n
        if self.waiting >= self.waiters:
            raise ServeError("busy", self.busy)
        self.waiting += 1
        try:
            async with asyncio.timeout(self.wait):
                await self.take(n)
        except TimeoutError:
            raise ServeError("busy", self.busy) from None
        finally:
            self.waiting -= 1
        return n

    def keep(self, held: int, size: int) -> int:
        """Of ``held`` bytes taken for an answer, keep those that its final ``size`` bytes
        take (:meth:`hold`), giving back the rest, or taking the more it needs (past
        :data:`ANSWER_PIECE` more) if they are free now; else ``serve.busy``, ``held``
        given back. An answer takes its bytes
        before it is made (compressed, or a page rendered), and its final bytes are what
        is held while it is sent: the page of a kept invalid event whose strings are all
        ``<`` is five times its copy, once escaped."""
        needs = 0 if size <= ANSWER_PIECE else min(size, self.most)
        if needs > held + ANSWER_PIECE:  # up to a piece more, as an answer of a piece:
            # not counted (a compressed copy a few bytes larger than it is)
            if not self.take_now(needs - held):
                self.give(held)
                raise ServeError("busy", self.busy)
            return needs
        if needs >= held:
            return held
        self.give(held - needs)
        return needs
