"""Request coalescing: concurrent misses for one key wait on a single fetch."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

T = TypeVar("T")


class SingleFlight(Generic[T]):
    """``await flight.run(key, factory)``: the first caller for ``key`` starts ``factory()`` as a
    task; callers arriving while it runs await the same task.

    - Its result or exception is delivered to every waiter.
    - Each waiter awaits through ``asyncio.shield``: cancelling one waiter (a client that went
      away) cancels only that waiter, never the shared fetch. The fetch runs to completion
      even if every waiter is cancelled, so its result can still fill the cache.
    - The key is released when the task finishes, so the next miss starts a new fetch.

    ``join`` and ``land`` are the same flights led by a caller that does the work itself (a pull zone's miss
    streams the origin's answer to its own client while storing it, assetcdn/edge/states/pull.py): the
    others wait for it to land, then look up again. A key is used either way, not both.

    One instance per event loop (per worker); it is not thread-safe.
    """

    def __init__(self) -> None:
        self._flights: dict[Hashable, asyncio.Future[T]] = {}

    def __len__(self) -> int:
        return len(self._flights)

    def in_flight(self, key: Hashable) -> bool:
        return key in self._flights

    async def run(self, key: Hashable, factory: Callable[[], Awaitable[T]]) -> T:
        task = self._flights.get(key)
        if task is None:
            task = asyncio.ensure_future(factory())
            self._flights[key] = task
            task.add_done_callback(lambda done: self._release(key, done))
        return await asyncio.shield(task)

    def join(self, key: Hashable) -> asyncio.Future[T] | None:
        """The flight under way for ``key`` (await it through ``asyncio.shield``), or None: the caller now
        leads it, and must ``land`` it however its work ends."""
        flight = self._flights.get(key)
        if flight is None:
            self._flights[key] = asyncio.get_running_loop().create_future()
        return flight

    def land(self, key: Hashable, result: T) -> None:
        """The led flight of ``key`` is over: its waiters get ``result``; the next caller leads again."""
        flight = self._flights.pop(key, None)
        if flight is not None and not flight.done():
            flight.set_result(result)

    def _release(self, key: Hashable, task: asyncio.Future[T]) -> None:
        if self._flights.get(key) is task:
            del self._flights[key]
        # Mark the exception retrieved: when every waiter was cancelled nobody else reads it.
        if not task.cancelled():
            task.exception()
