"""The sliding per-client window behind the search limit (pure: a clock we move)."""

from __future__ import annotations

from control.rate_limit import MemoryWindowCounter


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_a_client_gets_limit_requests_per_window_and_others_are_counted_apart() -> None:
    clock = Clock()
    counter = MemoryWindowCounter(clock)
    decisions = [await counter.hit("search:a", 3, 60) for _ in range(4)]
    assert [d.allowed for d in decisions] == [True, True, True, False]
    assert [d.remaining for d in decisions] == [2, 1, 0, 0]
    assert decisions[-1].retry_after_s == 60 and decisions[-1].headers()["Retry-After"] == "60"
    assert (await counter.hit("search:b", 3, 60)).allowed


async def test_the_window_slides_rather_than_resetting() -> None:
    clock = Clock()
    counter = MemoryWindowCounter(clock)
    await counter.hit("k", 2, 60)
    clock.now += 30
    await counter.hit("k", 2, 60)
    clock.now += 29
    refused = await counter.hit("k", 2, 60)
    assert not refused.allowed and refused.retry_after_s == 1   # the first request leaves in 1 s
    clock.now += 1
    assert (await counter.hit("k", 2, 60)).allowed
    assert not (await counter.hit("k", 2, 60)).allowed           # the one from t+30 is still inside


async def test_idle_clients_are_forgotten() -> None:
    clock = Clock()
    counter = MemoryWindowCounter(clock)
    for i in range(100):
        await counter.hit(f"ip{i}", 5, 60)
    clock.now += 61
    await counter.hit("new", 5, 60)
    assert set(counter._times) == {"new"}
