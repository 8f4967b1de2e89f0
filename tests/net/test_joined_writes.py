"""One write per answer (pithlog.net.joined_writes): the writes of uvicorn's request cycle
joined, against a transport that records them (against a real ``pithlog serve``:
``test_http_head.py``, whose protocol puts them in place)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, cast

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


def _joined(run: Callable[[JoinedWrites, Recorded], None]) -> Recorded:
    """``run(joined, transport)`` in a turn of a new event loop, then the loop's next
    turns; what the transport got."""
    recorded = Recorded()

    async def main() -> None:
        run(JoinedWrites(cast(asyncio.Transport, recorded), asyncio.get_running_loop()),
            recorded)  # fmt: skip
        for _ in range(3):
            await asyncio.sleep(0)

    asyncio.run(main())
    return recorded


def test_a_head_and_body_written_in_one_turn_go_out_as_one_write() -> None:
    def run(joined: JoinedWrites, transport: Recorded) -> None:
        joined.write(b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\n")
        joined.write(b"ok\n")

    assert _joined(run).writes == [b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\nok\n"]


def test_a_lone_write_goes_out_on_the_next_turn_and_order_is_kept() -> None:
    def run(joined: JoinedWrites, transport: Recorded) -> None:
        joined.write(bytearray(b"head"))
        joined.write(b"")  # an empty body: sends what is held
        joined.write(memoryview(b"chunk 1"))
        joined.write(b"chunk 2")
        joined.write(b"end")

    assert _joined(run).writes == [b"head", b"chunk 1chunk 2", b"end"]


def test_close_sends_what_is_held_first() -> None:
    def run(joined: JoinedWrites, transport: Recorded) -> None:
        joined.write(b"answer")
        joined.close()

    recorded = _joined(run)
    assert recorded.writes == [b"answer"] and recorded.closed


def test_a_held_write_is_dropped_once_the_connection_is_closing() -> None:
    def run(joined: JoinedWrites, transport: Recorded) -> None:
        joined.write(b"head")
        transport.closed = True  # the client went away before the next turn

    assert _joined(run).writes == []


def test_other_attributes_are_the_transports() -> None:
    def run(joined: JoinedWrites, transport: Recorded) -> None:
        assert joined.get_extra_info("socket") == "info socket" and not joined.is_closing()
        joined.write(b"held")
        assert not joined.is_closing()

    assert _joined(run).writes == [b"held"]
