"""The bounded pool model work runs in, off the event loop and within a time budget.

A job that overruns its budget is answered 503 at once; its thread cannot be killed, so it keeps
its slot until it ends by itself (each step checks the deadline, and inputs are small), and once
MAX_QUEUED jobs hold slots new ones are refused with 503 rather than left to pile up.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

from assetcdn.shared.errors import ApiError

T = TypeVar("T")
QUEUE_FACTOR = 8


class AnalysisTimedOut(Exception):
    """A job passed its deadline (raised between steps inside the job, or by the waiting side)."""


class AnalysisBusy(Exception):
    """The pool holds MAX_QUEUED jobs already; the job was not started."""


def check_deadline(deadline: float) -> None:
    if time.monotonic() > deadline:
        raise AnalysisTimedOut()


def busy(held: int) -> ApiError:
    return ApiError(503, "AiBusy", f"Image analysis is busy with {held} jobs; retry shortly.",
                    headers={"Retry-After": "2"})


def timed_out(budget_s: float) -> ApiError:
    return ApiError(503, "AnalysisTimedOut", f"The analysis exceeded its time budget of {budget_s:g} s. "
                    "Retry later; large or complex images take longest.", headers={"Retry-After": "5"})


class AnalysisPool:
    def __init__(self, concurrency: int) -> None:
        self.concurrency = max(int(concurrency), 1)
        self.max_queued = self.concurrency * QUEUE_FACTOR
        self._executor = ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix="ai")
        self._held = 0   # jobs queued or running, including abandoned ones; touched on the event loop only

    @property
    def held(self) -> int:
        return self._held

    def _release(self, future: Future[object] | asyncio.Future[object]) -> None:
        self._held -= 1
        if not future.cancelled():
            future.exception()  # retrieved, so an abandoned job's error is not reported as unhandled

    async def run(self, work: Callable[[], T], deadline: float) -> T:
        """`work()` in the pool; AnalysisTimedOut when `deadline` (time.monotonic()) passes first."""
        if self._held >= self.max_queued:
            raise AnalysisBusy()
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise AnalysisTimedOut()
        self._held += 1
        future = asyncio.get_running_loop().run_in_executor(self._executor, work)
        future.add_done_callback(self._release)
        try:
            return await asyncio.wait_for(asyncio.shield(future), remaining)
        except TimeoutError:
            raise AnalysisTimedOut() from None

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
