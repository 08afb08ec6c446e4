"""The sign-in failure counter (`CounterAttemptLimiter` over the shared counter store) on a real
counter file, with a clock the test moves: the fixed window, Retry-After, and concurrent attempts."""

from __future__ import annotations

import asyncio
from pathlib import Path

from assetcdn.control.identity.login_attempts import Attempt, CounterAttemptLimiter, Refused
from assetcdn.shared.counter_backends.sqlite import SqliteCounterStore
from assetcdn.shared.counter_store import Counters, Limit


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def limiter(path: Path, limit: int, window_s: int, clock: Clock | None = None) -> CounterAttemptLimiter:
    store = SqliteCounterStore(path, clock=clock) if clock else SqliteCounterStore(path)
    return CounterAttemptLimiter(Counters(store), Limit("login", limit, window_s))


async def test_the_window_ends_and_retry_after_says_when(tmp_path: Path) -> None:
    clock = Clock()
    attempts = limiter(tmp_path / "counters.sqlite3", 3, 900, clock)
    try:
        for _ in range(3):
            assert isinstance(await attempts.acquire("203.0.113.7"), Attempt)
            clock.now += 100
        assert await attempts.acquire("203.0.113.7") == Refused(retry_after=600)  # the window opened 300 s ago
        assert isinstance(await attempts.acquire("203.0.113.8"), Attempt)  # addresses are separate
        clock.now += 600
        assert isinstance(await attempts.acquire("203.0.113.7"), Attempt)
    finally:
        await attempts.counters.close()


async def test_a_released_attempt_does_not_count(tmp_path: Path) -> None:
    attempts = limiter(tmp_path / "counters.sqlite3", 2, 60)
    try:
        first = await attempts.acquire("k")
        assert isinstance(first, Attempt)
        await attempts.release(first)
        assert isinstance(await attempts.acquire("k"), Attempt)
        assert isinstance(await attempts.acquire("k"), Attempt)
        assert isinstance(await attempts.acquire("k"), Refused)
    finally:
        await attempts.counters.close()


async def test_concurrent_attempts_cannot_pass_the_limit_together(tmp_path: Path) -> None:
    attempts = limiter(tmp_path / "counters.sqlite3", 5, 900)
    try:
        outcomes = await asyncio.gather(*(attempts.acquire("x") for _ in range(40)))
        assert sum(isinstance(o, Attempt) for o in outcomes) == 5
    finally:
        await attempts.counters.close()


async def test_two_limiters_on_one_counter_file_share_the_count(tmp_path: Path) -> None:
    a, b = limiter(tmp_path / "counters.sqlite3", 4, 900), limiter(tmp_path / "counters.sqlite3", 4, 900)
    try:
        for attempts in (a, b, a, b):
            assert isinstance(await attempts.acquire("shared"), Attempt)
        assert isinstance(await a.acquire("shared"), Refused)
        assert isinstance(await b.acquire("shared"), Refused)
    finally:
        await a.counters.close()
        await b.counters.close()
