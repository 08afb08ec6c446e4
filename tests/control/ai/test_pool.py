"""The analysis pool: a full queue is refused, an overrunning job answers at its deadline and keeps its
slot until it really ends (jobs block on events, so nothing here depends on the machine's speed)."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from assetcdn.control.ai.pool import QUEUE_FACTOR, AnalysisBusy, AnalysisPool, AnalysisTimedOut


async def test_a_full_pool_refuses_new_jobs_and_takes_them_again_once_drained() -> None:
    pool = AnalysisPool(1)
    release = threading.Event()
    far = time.monotonic() + 60
    try:
        jobs = [asyncio.ensure_future(pool.run(release.wait, far)) for _ in range(QUEUE_FACTOR)]
        await asyncio.sleep(0)
        assert pool.held == QUEUE_FACTOR
        with pytest.raises(AnalysisBusy):
            await pool.run(lambda: 1, far)
        release.set()
        assert await asyncio.gather(*jobs) == [True] * QUEUE_FACTOR
        assert pool.held == 0 and await pool.run(lambda: 2, far) == 2
    finally:
        release.set()
        pool.close()


async def test_an_overrunning_job_times_out_but_holds_its_slot_until_it_ends() -> None:
    pool = AnalysisPool(1)
    release = threading.Event()
    try:
        with pytest.raises(AnalysisTimedOut):
            await pool.run(release.wait, time.monotonic() + 0.05)
        assert pool.held == 1
        release.set()
        # One thread: the next job starts only once the abandoned one has ended.
        assert await pool.run(lambda: "next", time.monotonic() + 60) == "next"
        assert pool.held == 0
    finally:
        release.set()
        pool.close()


async def test_a_passed_deadline_starts_nothing() -> None:
    pool = AnalysisPool(1)
    try:
        with pytest.raises(AnalysisTimedOut):
            await pool.run(lambda: 1, time.monotonic() - 1)
        assert pool.held == 0
    finally:
        pool.close()
