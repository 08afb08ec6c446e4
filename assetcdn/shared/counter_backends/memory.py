"""Counter windows in this process's memory."""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable

from assetcdn.shared.counter_backends.base import SAME_WINDOW_S, Decision, decision

MAX_LOCAL_KEYS = 100_000  # windows the in-process store keeps; past this the oldest is forgotten early


class MemoryCounterStore:
    """Windows in this process's memory, oldest first; ended windows and those past `max_keys` are dropped."""

    backend = "memory"

    def __init__(self, *, max_keys: int = MAX_LOCAL_KEYS, clock: Callable[[], float] = time.time) -> None:
        self._windows: OrderedDict[str, list[float]] = OrderedDict()  # key -> [count, reset_at]
        self._max_keys = max_keys
        self._clock = clock

    def _window(self, key: str, window_s: float, now: float) -> list[float]:
        window = self._windows.get(key)
        if window is None or window[1] <= now:
            window = [0, now + window_s]
            self._windows[key] = window
            self._windows.move_to_end(key)
            self._forget_old(now)
        return window

    def _forget_old(self, now: float) -> None:
        while self._windows:
            first = next(iter(self._windows.values()))
            if first[1] > now and len(self._windows) <= self._max_keys:
                return
            self._windows.popitem(last=False)

    async def hit(self, key: str, limit: int, window_s: float) -> Decision:
        return self.hit_now(key, limit, window_s)

    def hit_now(self, key: str, limit: int, window_s: float) -> Decision:
        now = self._clock()
        window = self._window(key, window_s, now)
        if window[0] >= limit:
            return decision(False, limit, int(window[0]), window[1], now)
        window[0] += 1
        return decision(True, limit, int(window[0]), window[1], now)

    async def peek(self, key: str, limit: int, window_s: float) -> Decision:
        now = self._clock()
        window = self._windows.get(key)
        used, reset_at = (0, now + window_s) if window is None or window[1] <= now else (int(window[0]), window[1])
        return decision(used < limit, limit, used, reset_at, now)

    async def refund(self, key: str, window_end: float) -> None:
        window = self._windows.get(key)
        if window is not None and self._clock() < window[1] <= window_end + SAME_WINDOW_S and window[0] > 0:
            window[0] -= 1

    def seed(self, key: str, used: int, reset_at: float) -> None:
        """Remember what the shared store counted, so a fallback continues from there."""
        if key in self._windows:
            self._windows[key][:] = [used, reset_at]
            return
        self._windows[key] = [used, reset_at]
        self._forget_old(self._clock())

    async def ping(self) -> None:
        return None

    async def close(self) -> None:
        self._windows.clear()

