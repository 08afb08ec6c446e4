"""Per-client request windows (e.g. 100 searches a minute per IP), counted in the control plane.

Control is one process, and edges forward the public AI endpoints to it, so one count here is the
count every edge and worker sees. The counter sits behind `WindowCounter` so a shared store
(Redis) can replace the in-process one without touching the routes.

The window slides: a request is allowed when fewer than `limit` were allowed in the `window_s`
seconds before it. (A fixed window lets a client send 2x the limit across a boundary, and resets
at a moment the client can time.)
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class WindowDecision:
    allowed: bool
    limit: int
    remaining: int
    retry_after_s: int   # when refused: seconds until a request would be allowed again

    def headers(self) -> dict[str, str]:
        headers = {"X-RateLimit-Limit": str(self.limit), "X-RateLimit-Remaining": str(self.remaining)}
        if not self.allowed:
            headers["Retry-After"] = str(self.retry_after_s)
        return headers


class WindowCounter(Protocol):
    async def hit(self, key: str, limit: int, window_s: float) -> WindowDecision:
        """Count one request under `key`; refused requests are not counted."""
        ...


class MemoryWindowCounter:
    """The allowed requests' times per key (at most `limit` each); idle keys are swept once a window."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._times: dict[str, tuple[float, deque[float]]] = {}   # key -> (window_s, allowed times)
        self._next_sweep = 0.0

    async def hit(self, key: str, limit: int, window_s: float) -> WindowDecision:
        now = self._clock()
        if now >= self._next_sweep:
            self._times = {k: v for k, v in self._times.items() if v[1] and v[1][-1] > now - v[0]}
            self._next_sweep = now + window_s
        _, times = self._times.setdefault(key, (window_s, deque()))
        while times and times[0] <= now - window_s:
            times.popleft()
        if len(times) >= limit:
            retry = max(math.ceil(times[0] + window_s - now), 1) if times else 1
            return WindowDecision(False, limit, 0, retry)
        times.append(now)
        return WindowDecision(True, limit, limit - len(times), 0)
