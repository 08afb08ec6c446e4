"""Per-client request windows (e.g. 100 searches a minute per IP), counted in the control plane.

Control is one process, and edges forward the public AI endpoints to it, so one count here is the
count every edge and worker sees. The counter sits behind `WindowCounter` so a shared store
(Redis) can replace the in-process one without touching the routes.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class WindowDecision:
    allowed: bool
    limit: int
    remaining: int
    retry_after_s: int   # seconds until the current window ends

    def headers(self) -> dict[str, str]:
        headers = {"X-RateLimit-Limit": str(self.limit), "X-RateLimit-Remaining": str(self.remaining)}
        if not self.allowed:
            headers["Retry-After"] = str(self.retry_after_s)
        return headers


class WindowCounter(Protocol):
    async def hit(self, key: str, limit: int, window_s: int) -> WindowDecision:
        """Count one request under `key` in the current fixed window; refused requests are not counted."""
        ...


class MemoryWindowCounter:
    """Fixed windows in a dict; expired windows are dropped as new ones open (bounded by live clients)."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._windows: dict[str, tuple[float, float, int]] = {}   # key -> (window start, end, count)
        self._next_sweep = 0.0

    async def hit(self, key: str, limit: int, window_s: int) -> WindowDecision:
        now = self._clock()
        start = math.floor(now / window_s) * window_s
        if now >= self._next_sweep:
            self._windows = {k: v for k, v in self._windows.items() if v[1] > now}
            self._next_sweep = now + window_s
        window_start, _, count = self._windows.get(key, (start, 0.0, 0))
        if window_start != start:
            count = 0
        retry = max(int(math.ceil(start + window_s - now)), 1)
        if count >= limit:
            return WindowDecision(False, limit, 0, retry)
        self._windows[key] = (start, start + window_s, count + 1)
        return WindowDecision(True, limit, limit - count - 1, retry)
