"""The state documents a worker builds and sends at once (``docs/network.md``, limits).

A state holds every applied event of its pith, payloads whole: building one of 20 MB (a
record of 20 graph snapshots of 75,000 edges and 3,000 attestations) took ``Store.lookup``
about 0.1 s and 106 MB at its peak, for ``GET /state/`` and the record's page alike (now
about 0.04 s and 43 MB, its fragments and its bytes: :func:`pithlog.protocol.state.assemble`),
and the answer of ``/state/`` was then held, copied into the connection's buffer, until its
client read it. Nothing bounded how many: 16 clients asking for that state at once and
reading nothing grew the worker to 1.56 GB, 32 to 2.0 GB, and 16 asking for its page to
1.7 GB (the builds run in the 40 threads of the worker's pool).

Here a build takes one of :data:`STATE_BUILDS` places (they share the interpreter lock,
so more at once built no faster), and an answer of ``/state/`` past one piece
(:data:`~pithlog.net.body_bytes.ANSWER_PIECE`) takes its bytes out of
:data:`STATE_BYTES` (a larger one takes them all), given back once it is sent
(:class:`~pithlog.net.body_bytes.HeldAnswer`). An answer waits for its bytes once it has
left its place (:class:`~pithlog.net.body_bytes.AnswerRoom`), and only while fewer than
:data:`STATE_BUILDS` others wait: waiting in its place, two states that clients read
slowly or not at all held both places, and a small state, which takes no bytes, waited
behind them until their time was up. A request that waits :data:`WAIT_SECONDS` for a
place or for its bytes, or finds :data:`STATE_BUILDS` answers waiting already, is
``503 serve.busy``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from pithlog.errors import ServeError
from pithlog.net.body_bytes import AnswerRoom

STATE_BUILDS = 2
"""State documents built at once per worker (``/state/`` and the record's page)."""
STATE_BYTES = 64 << 20
"""Bytes of ``/state/`` answers a worker holds until their clients read them."""
WAIT_SECONDS = 30.0
"""Seconds a request waits for a place, then for its answer's bytes: then ``503``."""


class StateBuilds:
    """A worker's places to build state documents (:meth:`place`) and the bytes of the
    answers being sent (:attr:`answers`, taken by :meth:`hold`)."""

    def __init__(self, builds: int = STATE_BUILDS, most: int = STATE_BYTES,
                 wait: float = WAIT_SECONDS) -> None:  # fmt: skip
        self.builds = builds
        self.wait = wait
        self.answers = AnswerRoom(most, builds, wait, "the state documents being sent hold "
                                  "all the memory the server gives them; retry later")
        self.building = 0
        """Builds holding a place now (what the tests watch)."""
        self._slots: tuple[asyncio.AbstractEventLoop, asyncio.Semaphore] | None = None
        """The places and the event loop they belong to: an asyncio semaphore binds to the
        loop it first waits on, and an app served again on another loop needs its own."""

    @contextlib.asynccontextmanager
    async def place(self) -> AsyncIterator[None]:
        """Hold a place while a state is built and its answer made; ``serve.busy`` after
        :attr:`wait` seconds without one."""
        loop = asyncio.get_running_loop()
        if self._slots is None or self._slots[0] is not loop:
            self._slots = (loop, asyncio.Semaphore(self.builds))
        slots = self._slots[1]
        try:
            async with asyncio.timeout(self.wait):
                await slots.acquire()
        except TimeoutError:
            raise ServeError("busy", f"{self.builds} state documents are being built; "
                             "retry later") from None  # fmt: skip
        self.building += 1
        try:
            yield
        finally:
            self.building -= 1
            slots.release()

    async def hold(self, size: int) -> int:
        """Take the bytes of an answer of ``size`` bytes, out of its place
        (:meth:`AnswerRoom.hold <pithlog.net.body_bytes.AnswerRoom.hold>`): what was taken,
        to give back once it is sent."""
        return await self.answers.hold(size)
