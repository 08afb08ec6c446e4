"""The image pool: work runs off the event loop, at most `concurrency` at once, and a full queue is a 503."""

from __future__ import annotations

import asyncio
import threading

import pytest

from edge.image_pool import QUEUE_FACTOR, ImagePool
from shared.errors import LegacyError


async def test_a_full_queue_is_refused_and_work_runs_in_pool_threads() -> None:
    pool = ImagePool(1, max_pixels=100, time_budget_s=1.0)
    release = threading.Event()
    running: list[str] = []

    def job() -> str:
        running.append(threading.current_thread().name)
        release.wait()
        return "done"

    try:
        jobs = [asyncio.ensure_future(pool.run(job)) for _ in range(QUEUE_FACTOR)]
        await asyncio.sleep(0)
        assert pool.queued == QUEUE_FACTOR
        with pytest.raises(LegacyError) as refused:
            await pool.run(job)
        assert refused.value.status == 503 and refused.value.headers["Retry-After"] == "1"
        release.set()
        assert await asyncio.gather(*jobs) == ["done"] * QUEUE_FACTOR
        assert pool.queued == 0
        assert {name.rsplit("_", 1)[0] for name in running} == {"image"}   # one thread, never the loop's
    finally:
        release.set()
        pool.close()
