"""The bytes of bodies a worker holds (pithlog.net.body_bytes): never more than the bound,
waits served in order, and a wait cut off (a time-out) holding nothing and holding up no
one behind it."""

from __future__ import annotations

import asyncio

import pytest

from pithlog.net.body_bytes import BodyBytes, NoRoom


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
