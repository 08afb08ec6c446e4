"""The origin client's name cache (assetcdn/shared/address_guard.py, ``CachingResolver``): one lookup per name
however many connections wait for it, an answer kept for a short fixed time, failures never kept, a bounded
number of names. Only loopback addresses appear: the answers are never connected to here."""

from __future__ import annotations

import asyncio

import pytest

from assetcdn.shared.address_guard import CachingResolver

NAME = "origin.example.test"


class Names:
    """A resolver the test controls, counting its lookups; `gate` holds each lookup until it is set."""

    def __init__(self, table: dict[str, list[str] | OSError]) -> None:
        self.table = table
        self.lookups: list[str] = []
        self.gate: asyncio.Event | None = None

    async def addresses(self, host: str) -> list[str]:
        self.lookups.append(host)
        if self.gate is not None:
            await self.gate.wait()
        answer = self.table[host]
        if isinstance(answer, OSError):
            raise answer
        return list(answer)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_connections_waiting_for_one_name_share_one_lookup() -> None:
    names = Names({NAME: ["127.0.0.2"]})
    names.gate = asyncio.Event()
    resolver = CachingResolver(names, ttl_s=10.0)
    waiting = [asyncio.create_task(resolver.addresses(NAME)) for _ in range(20)]
    await asyncio.sleep(0)
    names.gate.set()
    assert [await task for task in waiting] == [["127.0.0.2"]] * 20
    assert names.lookups == [NAME]


async def test_an_answer_is_kept_for_its_time_then_looked_up_again() -> None:
    names, clock = Names({NAME: ["127.0.0.2"]}), Clock()
    resolver = CachingResolver(names, ttl_s=10.0, clock=clock)
    assert await resolver.addresses(NAME) == ["127.0.0.2"]
    names.table[NAME] = ["127.0.0.3"]  # the name moved
    clock.now += 9.9
    assert await resolver.addresses(NAME) == ["127.0.0.2"] and len(names.lookups) == 1
    clock.now += 0.2
    assert await resolver.addresses(NAME) == ["127.0.0.3"] and len(names.lookups) == 2


async def test_a_time_of_zero_looks_up_every_time() -> None:
    names = Names({NAME: ["127.0.0.2"]})
    resolver = CachingResolver(names, ttl_s=0.0)
    for _ in range(3):
        assert await resolver.addresses(NAME) == ["127.0.0.2"]
    assert len(names.lookups) == 3


async def test_a_failed_lookup_is_not_kept() -> None:
    names = Names({NAME: OSError("temporary failure in name resolution")})
    resolver = CachingResolver(names, ttl_s=10.0)
    for _ in range(2):
        with pytest.raises(OSError):
            await resolver.addresses(NAME)
    names.table[NAME] = ["127.0.0.2"]
    assert await resolver.addresses(NAME) == ["127.0.0.2"] and len(names.lookups) == 3


async def test_a_waiter_that_gives_up_leaves_the_lookup_to_the_others() -> None:
    """A connection whose own lookup bound ran out (or whose request went) stops waiting; the lookup goes on for
    the connections still waiting, and its answer is kept."""
    names = Names({NAME: ["127.0.0.2"]})
    names.gate = asyncio.Event()
    resolver = CachingResolver(names, ttl_s=10.0)
    first = asyncio.create_task(resolver.addresses(NAME))
    second = asyncio.create_task(resolver.addresses(NAME))
    await asyncio.sleep(0)
    first.cancel()
    names.gate.set()
    assert await second == ["127.0.0.2"]
    assert await resolver.addresses(NAME) == ["127.0.0.2"] and names.lookups == [NAME]


async def test_at_most_the_bound_of_names_is_kept() -> None:
    names = Names({f"o{i}.example.test": [f"127.0.0.{i + 2}"] for i in range(3)})
    resolver = CachingResolver(names, ttl_s=10.0, names=2)
    for i in (0, 1, 2, 2, 1):
        await resolver.addresses(f"o{i}.example.test")
    assert len(names.lookups) == 3  # 0, 1 and 2 once each: 2 and 1 were kept
    await resolver.addresses("o0.example.test")  # the least recently asked, let go for 2
    assert len(names.lookups) == 4


async def test_a_lookup_that_outlives_the_wait_bound_refuses_new_connections_at_once_until_it_ends() -> None:
    """A name whose lookup hangs: the connections waiting for it each give up at their bound
    (LOOKUP_TIMEOUT_S, `give_up_s`); a connection that comes once the lookup is that old is refused at once, not
    made to wait its own bound for the same lookup. The lookup's answer, when it comes, is kept and served."""
    names, clock = Names({NAME: ["127.0.0.2"]}), Clock()
    names.gate = asyncio.Event()
    resolver = CachingResolver(names, ttl_s=10.0, clock=clock, give_up_s=5.0)
    first = asyncio.create_task(resolver.addresses(NAME))
    await asyncio.sleep(0)
    clock.now += 4.9
    joined = asyncio.create_task(resolver.addresses(NAME))  # within the bound: it waits for the lookup
    await asyncio.sleep(0)
    assert not joined.done()
    clock.now += 0.1
    refused = asyncio.create_task(resolver.addresses(NAME))
    await asyncio.sleep(0)
    assert refused.done() and isinstance(refused.exception(), TimeoutError)
    assert names.lookups == [NAME]
    names.gate.set()
    assert await first == await joined == ["127.0.0.2"]
    assert await resolver.addresses(NAME) == ["127.0.0.2"] and names.lookups == [NAME]
