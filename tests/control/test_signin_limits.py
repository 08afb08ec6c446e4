"""The sign-in failure counter (SQLite backend of `AttemptLimiter`) on a real database file, with a
clock the test moves: the sliding window, Retry-After, and concurrent attempts."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from control.database import open_database
from control.login_attempts import Attempt, Refused, SqliteAttemptLimiter


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def db(tmp_path: Path):  # type: ignore[no-untyped-def]
    connection = await open_database(tmp_path / "control.sqlite3")
    yield connection
    await connection.close()


async def test_the_window_slides_and_retry_after_says_when(db) -> None:  # type: ignore[no-untyped-def]
    clock = Clock()
    limiter = SqliteAttemptLimiter(db, limit=3, window_s=900, clock=clock)
    for step in range(3):
        assert isinstance(await limiter.acquire("login:a"), Attempt)
        clock.now += 100 if step < 2 else 0
    refused = await limiter.acquire("login:a")
    assert refused == Refused(retry_after=700)  # the first failure leaves the window 700 s from now
    assert isinstance(await limiter.acquire("login:b"), Attempt)  # keys are separate
    clock.now += 700
    assert isinstance(await limiter.acquire("login:a"), Attempt)
    assert isinstance(await limiter.acquire("login:a"), Refused)


async def test_a_released_attempt_does_not_count(db) -> None:  # type: ignore[no-untyped-def]
    limiter = SqliteAttemptLimiter(db, limit=2, window_s=60, clock=Clock())
    first = await limiter.acquire("k")
    assert isinstance(first, Attempt)
    await limiter.release(first)
    assert isinstance(await limiter.acquire("k"), Attempt)
    assert isinstance(await limiter.acquire("k"), Attempt)
    assert isinstance(await limiter.acquire("k"), Refused)


async def test_concurrent_attempts_cannot_pass_the_limit_together(db) -> None:  # type: ignore[no-untyped-def]
    limiter = SqliteAttemptLimiter(db, limit=5, window_s=900)
    outcomes = await asyncio.gather(*(limiter.acquire("login:x") for _ in range(40)))
    assert sum(isinstance(o, Attempt) for o in outcomes) == 5


async def test_two_limiters_on_one_database_share_the_count(db, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    other = await open_database(tmp_path / "control.sqlite3")
    try:
        a, b = SqliteAttemptLimiter(db, 4, 900), SqliteAttemptLimiter(other, 4, 900)
        for limiter in (a, b, a, b):
            assert isinstance(await limiter.acquire("login:shared"), Attempt)
        assert isinstance(await a.acquire("login:shared"), Refused)
        assert isinstance(await b.acquire("login:shared"), Refused)
    finally:
        await other.close()
