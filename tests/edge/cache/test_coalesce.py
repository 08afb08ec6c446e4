"""SingleFlight: one shared fetch per key, errors to every waiter, cancellation isolated."""

from __future__ import annotations

import asyncio

import pytest

from assetcdn.edge.cache.coalesce import SingleFlight


class Fetch:
    """A factory that blocks until released and counts its calls."""

    def __init__(self, result: bytes = b"body", error: Exception | None = None) -> None:
        self.calls = 0
        self.release = asyncio.Event()
        self.finished = False
        self.result = result
        self.error = error

    async def __call__(self) -> bytes:
        self.calls += 1
        await self.release.wait()
        self.finished = True
        if self.error is not None:
            raise self.error
        return self.result


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_concurrent_callers_share_one_fetch() -> None:
    flight: SingleFlight[bytes] = SingleFlight()
    fetch = Fetch()
    waiters = [asyncio.create_task(flight.run("asset:1", fetch)) for _ in range(100)]
    await settle()
    assert flight.in_flight("asset:1")
    fetch.release.set()
    results = await asyncio.gather(*waiters)
    assert fetch.calls == 1
    assert results == [b"body"] * 100
    assert not flight.in_flight("asset:1") and len(flight) == 0


async def test_key_is_released_after_completion() -> None:
    flight: SingleFlight[bytes] = SingleFlight()
    fetch = Fetch()
    fetch.release.set()
    assert await flight.run("k", fetch) == b"body"
    assert await flight.run("k", fetch) == b"body"
    assert fetch.calls == 2


async def test_different_keys_do_not_share() -> None:
    flight: SingleFlight[bytes] = SingleFlight()
    first, second = Fetch(b"1"), Fetch(b"2")
    tasks = [
        asyncio.create_task(flight.run("a", first)),
        asyncio.create_task(flight.run("b", second)),
    ]
    await settle()
    first.release.set()
    second.release.set()
    assert await asyncio.gather(*tasks) == [b"1", b"2"]


async def test_exception_reaches_every_waiter() -> None:
    flight: SingleFlight[bytes] = SingleFlight()
    fetch = Fetch(error=ConnectionError("origin down"))
    waiters = [asyncio.create_task(flight.run("k", fetch)) for _ in range(10)]
    await settle()
    fetch.release.set()
    results = await asyncio.gather(*waiters, return_exceptions=True)
    assert fetch.calls == 1
    assert all(isinstance(r, ConnectionError) for r in results)
    assert not flight.in_flight("k")


async def test_cancelled_waiter_does_not_cancel_the_others() -> None:
    flight: SingleFlight[bytes] = SingleFlight()
    fetch = Fetch()
    waiters = [asyncio.create_task(flight.run("k", fetch)) for _ in range(3)]
    await settle()
    waiters[0].cancel()
    await settle()
    assert waiters[0].cancelled()
    fetch.release.set()
    assert await asyncio.gather(*waiters[1:]) == [b"body", b"body"]
    assert fetch.calls == 1 and fetch.finished


async def test_fetch_completes_when_every_waiter_is_cancelled() -> None:
    flight: SingleFlight[bytes] = SingleFlight()
    fetch = Fetch()
    waiter = asyncio.create_task(flight.run("k", fetch))
    await settle()
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert flight.in_flight("k")
    fetch.release.set()
    await settle()
    assert fetch.finished and not flight.in_flight("k")


async def test_a_led_flight_is_awaited_until_its_leader_lands_it() -> None:
    flight: SingleFlight[str] = SingleFlight()
    assert flight.join("pull:1") is None  # the first caller leads
    waiting = flight.join("pull:1")
    assert waiting is not None and flight.join("pull:1") is waiting
    async def follow() -> str:
        return await asyncio.shield(waiting)

    follower = asyncio.create_task(follow())
    await settle()
    assert not follower.done()
    flight.land("pull:1", "stored")
    assert await follower == "stored"
    assert not flight.in_flight("pull:1") and flight.join("pull:1") is None  # the next caller leads again
