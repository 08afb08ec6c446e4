"""Waiting for a condition in the in-process tests: polled, with a generous bound that is never asserted."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

WAIT_S = 20.0   # upper bound for start-up and propagation waits (never asserted as a duration)


async def wait_until(predicate: Callable[[], Awaitable[bool]], what: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT_S
    while not await predicate():
        if loop.time() > deadline:
            raise AssertionError(f"gave up waiting: {what}")
        await asyncio.sleep(0.05)
