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
"""

from __future__ import annotations

import asyncio
from collections import deque


class BodyBytes:
    """At most ``most`` bytes of bodies held at once: :meth:`take` them as they arrive
    (waiting, first come first served, while the others hold too many), :meth:`give` them
    back once the body is answered or refused. Plain counts and one future per wait, so
    that it works on whichever event loop runs it."""

    def __init__(self, most: int) -> None:
        self.most = most
        self.held = 0
        self._waiting: deque[tuple[int, asyncio.Future[None]]] = deque()

    async def take(self, n: int) -> None:
        """Hold ``n`` more bytes (at most :attr:`most`), once the others leave room."""
        if not self._waiting and self.held + n <= self.most:
            self.held += n
            return
        future = asyncio.get_running_loop().create_future()
        self._waiting.append((n, future))
        try:
            await future
        except BaseException:
            if future.done() and not future.cancelled():
                self.give(n)  # given just as the wait was cancelled (a time-out)
            else:
                future.cancel()
                self._wake()  # those behind it may fit now
            raise

    def give(self, n: int) -> None:
        """Give back ``n`` bytes taken."""
        self.held -= n
        self._wake()

    def _wake(self) -> None:
        while self._waiting:
            n, future = self._waiting[0]
            if future.done():  # its wait ended (cancelled)
                self._waiting.popleft()
                continue
            if self.held + n > self.most:
                return
            self._waiting.popleft()
            self.held += n
            future.set_result(None)
