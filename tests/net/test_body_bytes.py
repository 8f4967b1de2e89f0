"""The bytes of bodies a worker holds (pithlog.net.body_bytes): never more than the bound,
waits served in order, and a wait cut off (a time-out) holding nothing and holding up no
one behind it."""

from __future__ import annotations

import asyncio

import pytest

from pithlog.net.body_bytes import BodyBytes


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
