"""The bytes of bodies a worker holds (pithlog.net.body_bytes): never more than the bound,
waits served in order, and a wait cut off (a time-out) holding nothing and holding up no
one behind it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from pithlog.errors import ServeError
from pithlog.net import body_bytes
from pithlog.net.body_bytes import AnswerRoom, BodyBytes, NoRoom
from pithlog.net.submit import Limits, read_body


def test_bytes_held_stay_under_the_bound_and_waits_come_in_order() -> None:
    async def run() -> list[str]:
        held = BodyBytes(100)
        await held.take(60)
        order: list[str] = []

        async def one(name: str, n: int) -> None:
            await held.take(n)
            order.append(name)

        first = asyncio.create_task(one("first", 50))
        await asyncio.sleep(0)
        second = asyncio.create_task(one("second", 10))  # fits, but waits its turn
        await asyncio.sleep(0.01)
        assert order == [] and held.held == 60
        held.give(60)
        await asyncio.gather(first, second)
        assert held.held == 60
        return order

    assert asyncio.run(run()) == ["first", "second"]


def test_a_wait_cut_off_holds_nothing_and_lets_the_next_through() -> None:
    async def run() -> int:
        held = BodyBytes(100)
        await held.take(90)
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.01):
                await held.take(50)  # never fits while the 90 are held
        small = asyncio.create_task(held.take(10))
        await asyncio.wait_for(small, 1)  # not behind the wait that was cut off
        held.give(100)
        return held.held

    assert asyncio.run(run()) == 0


def test_bodies_that_all_wait_for_room_do_not_wait_for_their_time_out() -> None:
    """Two bodies of 60 on a bound of 100, their bytes arriving in turn: one holds 40 and
    asks for 20, the other holds 50 and asks for 10. Nobody else holds a byte, so nobody
    gives one back: the second, which fits, goes ahead of its turn (its body is then
    whole, answered, and its 60 given back for the first)."""

    async def run() -> list[str]:
        held = BodyBytes(100)
        await held.take(40)
        await held.take(50, 40)
        order: list[str] = []

        async def body(name: str, n: int, holds: int) -> None:
            await held.take(n, holds)
            order.append(name)
            held.give(holds + n)

        first = asyncio.create_task(body("first", 20, 40))
        await asyncio.sleep(0)
        second = asyncio.create_task(body("second", 10, 50))
        await asyncio.wait_for(asyncio.gather(first, second), 1)
        assert held.held == 0
        return order

    assert asyncio.run(run()) == ["second", "first"]


def test_a_body_is_refused_at_once_when_no_waiting_body_fits() -> None:
    """Holding 40 and 50 of 100, asking for 30 and 20: neither fits and neither will give
    back what it holds, so the one that asked last is refused at once (503 serve.busy
    from its read, its 50 given back), and the first then gets its 30."""

    async def run() -> int:
        held = BodyBytes(100)
        await held.take(40)
        await held.take(50, 40)
        first = asyncio.create_task(held.take(30, 40))
        await asyncio.sleep(0)
        second = asyncio.create_task(held.take(20, 50))
        with pytest.raises(NoRoom):
            await asyncio.wait_for(second, 1)
        assert not first.done()  # the 50 are the refused body's to give back
        held.give(50)
        await asyncio.wait_for(first, 1)
        return held.held

    assert asyncio.run(run()) == 70


def test_a_body_that_fits_exactly_is_let_through() -> None:
    """Room for exactly the bytes asked is room: a wait for 50 with 50 of 100 held ends."""

    async def run() -> int:
        held = BodyBytes(100)
        await held.take(60)
        waiter = asyncio.create_task(held.take(50))
        await asyncio.sleep(0)
        held.give(10)
        await asyncio.wait_for(waiter, 1)
        return held.held

    assert asyncio.run(run()) == 100


def test_a_wait_cut_off_at_the_head_lets_those_already_behind_it_through() -> None:
    """A wait for 50 with 90 of 100 held, a wait for 10 behind it: once the first is cut
    off (its time-out), the second fits and goes at once, not at the next give."""

    async def run() -> int:
        held = BodyBytes(100)
        await held.take(90)
        first = asyncio.create_task(held.take(50))
        await asyncio.sleep(0)
        second = asyncio.create_task(held.take(10))
        await asyncio.sleep(0)
        assert not second.done()
        first.cancel()
        await asyncio.wait_for(second, 1)
        return held.held

    assert asyncio.run(run()) == 100


def test_bytes_given_to_a_wait_just_as_it_is_cut_off_are_given_back() -> None:
    """The room is given (the bytes counted as held) and the wait cancelled before it
    resumes: the waiter gives them back, or they would be held for good."""

    async def run() -> int:
        held = BodyBytes(100)
        await held.take(90)
        waiter = asyncio.create_task(held.take(50))
        await asyncio.sleep(0)
        held.give(90)  # the 50 go to the waiter...
        assert held.held == 50
        waiter.cancel()  # ...cancelled before it runs again
        with pytest.raises(asyncio.CancelledError):
            await waiter
        return held.held

    assert asyncio.run(run()) == 0


def test_a_body_holding_nothing_is_not_the_one_refused() -> None:
    """Holding 40 and 50 of 100, each asking for 20, a third body asking for its first 20
    last, and a body being answered holding 5: once that one gives its 5 back, no waiting
    body fits and none will be given more. Refusing the third would give back nothing: the
    last to ask that holds bytes (the 50) is refused, and the third waits on."""

    async def run() -> None:
        held = BodyBytes(100)
        await held.take(40)
        await held.take(50, 40)
        await held.take(5)  # a body being answered
        first = asyncio.create_task(held.take(20, 40))
        await asyncio.sleep(0)
        second = asyncio.create_task(held.take(20, 50))
        await asyncio.sleep(0)
        third = asyncio.create_task(held.take(20, 0))
        await asyncio.sleep(0)
        assert not (first.done() or second.done() or third.done())
        held.give(5)
        with pytest.raises(NoRoom):
            await asyncio.wait_for(second, 1)
        await asyncio.sleep(0.01)
        assert not third.done() and not first.done()
        held.give(50)  # the refused body's bytes
        await asyncio.wait_for(first, 1)
        await asyncio.wait_for(third, 1)
        assert held.held == 80

    asyncio.run(run())


def test_a_body_refused_or_cut_off_by_its_client_gives_its_bytes_back() -> None:
    """read_body gives back what a body held when it ends in an error: a body over
    max_body (413), a client gone mid-body. Kept, they would shrink the room of every
    later body for good."""
    async def chunks(gone: bool) -> AsyncIterator[bytes]:
        yield b"x" * 60
        if gone:
            raise ConnectionResetError("the client left")
        yield b"x" * 60

    async def run() -> tuple[str, int, int]:
        limits = Limits(max_body=100, max_pending=2)
        held = limits.held_bytes()
        with pytest.raises(ServeError) as too_large:
            await read_body(chunks(gone=False), None, limits, held=held)
        after_413 = held.held
        with pytest.raises(ConnectionResetError):
            await read_body(chunks(gone=True), None, limits, held=held)
        return too_large.value.code, after_413, held.held

    assert asyncio.run(run()) == ("serve.too_large", 0, 0)


def test_an_answer_larger_once_made_holds_its_final_bytes_or_is_busy() -> None:
    """An answer takes its room before it is made (a copy before it is compressed, an
    event's page before it is rendered), and keeps what its final bytes take. The page of
    a kept invalid event whose strings are all ``<`` is about five times its copy once
    escaped, and held only its copy's bytes: it now takes the more it needs, or is
    ``serve.busy`` with what it held given back. Up to a piece more (a copy that
    compresses a few bytes larger) is held as taken."""
    piece = body_bytes.ANSWER_PIECE
    room = AnswerRoom(10 * piece, 2, 1.0, "room full")
    held = asyncio.run(room.hold(2 * piece))
    assert (held, room.held) == (2 * piece, 2 * piece)
    assert room.keep(held, 2 * piece + 10) == 2 * piece  # a few bytes more: as taken
    assert room.keep(held, 8 * piece) == 8 * piece and room.held == 8 * piece  # more taken
    room.give(8 * piece)
    assert room.keep(asyncio.run(room.hold(2 * piece)), piece + 1) == piece + 1
    assert room.held == piece + 1  # smaller: the rest given back
    room.give(piece + 1)
    other = asyncio.run(room.hold(7 * piece))
    held = asyncio.run(room.hold(2 * piece))
    with pytest.raises(ServeError) as refused:  # 10 pieces more are not free: busy
        room.keep(held, 10 * piece)
    assert refused.value.code == "serve.busy" and room.held == other
