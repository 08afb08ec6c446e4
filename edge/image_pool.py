"""The bounded pool image work runs in (transforms, format conversions, placeholders), off the event loop.

libvips releases the GIL, so `concurrency` threads give real parallelism; a queue longer than
`QUEUE_FACTOR` jobs per thread is refused with 503 rather than left to grow (every queued
request holds its source bytes). The [transform] guards travel with the pool so every caller
applies the same pixel and time budgets.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import pyvips

from shared.config import Settings
from shared.errors import LegacyError

T = TypeVar("T")
QUEUE_FACTOR = 32
# libvips' operation cache keeps recent operations and their pixels for reuse. Every edge request
# loads a new buffer, so it would rarely hit and only hold memory; the edge cache keeps results.
LIBVIPS_CACHE_MAX_OPERATIONS = 16
LIBVIPS_CACHE_MAX_MEMORY = 32 * 1024 * 1024


def configure_libvips() -> None:
    """Shrink libvips' process-wide operation cache (called once at app start)."""
    pyvips.cache_set_max(LIBVIPS_CACHE_MAX_OPERATIONS)
    pyvips.cache_set_max_mem(LIBVIPS_CACHE_MAX_MEMORY)


class ImagePool:
    def __init__(self, concurrency: int, *, max_pixels: int, time_budget_s: float) -> None:
        self.concurrency = max(int(concurrency), 1)
        self.max_pixels = int(max_pixels)
        self.time_budget_s = float(time_budget_s)
        self.max_queued = self.concurrency * QUEUE_FACTOR
        self._executor = ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix="image")
        self._queued = 0   # touched on the event loop only

    @classmethod
    def from_settings(cls, settings: Settings) -> ImagePool:
        return cls(settings.get("transform", "concurrency"),
                   max_pixels=settings.get("transform", "max_source_pixels"),
                   time_budget_s=settings.get("transform", "time_budget_s"))

    @property
    def queued(self) -> int:
        return self._queued

    async def run(self, work: Callable[[], T]) -> T:
        """Run blocking image work in the pool; LegacyError(503) when the queue is full."""
        if self._queued >= self.max_queued:
            raise LegacyError(503, f"This edge is busy with {self._queued} image jobs; retry shortly.",
                              headers={"Retry-After": "1"})
        self._queued += 1
        try:
            return await asyncio.get_running_loop().run_in_executor(self._executor, work)
        finally:
            self._queued -= 1

    def close(self) -> None:
        # Do not wait: a running job ends by itself within the time budget.
        self._executor.shutdown(wait=False, cancel_futures=True)
