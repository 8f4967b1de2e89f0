"""One write per answer: the head and the body of an HTTP answer joined into one ``send``.

uvicorn writes an answer's head to the connection when the app starts the answer, and its
body when the app sends it, so every answer costs two ``send`` calls and, with
``TCP_NODELAY`` (which ``pithlog serve`` sets, ``pithlog.net.server``), two segments that
the client reads one after the other. Starlette sends both in one turn of the event loop.
:class:`JoinedWrites` stands between uvicorn's request cycle and the connection: it holds a
write until the next one, which goes out with it, or until the event loop's next turn,
which sends it alone (so a streamed answer's head waits one turn at most, never for its
body). Measured on 2 cores with 32 single-event submitters against ``serve --workers 2``,
eight pairs of runs of 40,000 events (with and without it, the order alternating): the
clients spent 23-24 us of CPU per event against 25-27, the server's processes 228-248
against 232-246, and the rate moved 0.95-1.09x (median 1.02x) (``docs/submit-speed.md``).
"""

from __future__ import annotations

import asyncio
from typing import Any


class JoinedWrites:
    """A transport's writes, each held until the next write (sent with it) or the event
    loop's next turn; everything else is the transport's own. Data goes out in the order
    it was written: a held write goes before whatever follows it, and :meth:`close` sends
    it first."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._held = b""

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._held:
            joined, self._held = self._held + data, b""
            self._transport.write(joined)
        elif data:
            self._held = bytes(data)
            self._loop.call_soon(self.flush)

    def flush(self) -> None:
        """Send the held write, if any (dropped once the connection is closing, as uvicorn
        drops writes to a connection the client closed)."""
        held, self._held = self._held, b""
        if held and not self._transport.is_closing():
            self._transport.write(held)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)
