"""Per-client rate limits behind one small interface (the published service's ``rl:<name>:<ip>``
keys: a fixed window per client address).

``InProcessRateLimiter`` counts in this process's memory. The control plane is one process, so for
the endpoints it serves this is the whole count; a restart forgets the open windows. A shared store
(Redis, one INCR with an expiry per take) is the planned second backend for endpoints the edges
answer; it only has to satisfy ``RateLimiter``.
"""

from __future__ import annotations

import ipaddress
import math
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

MAX_TRACKED_CLIENTS = 100_000  # open windows kept; past this the oldest window is forgotten early
IPV6_CLIENT_PREFIX = 64        # one IPv6 client usually holds a whole /64


@dataclass(frozen=True, slots=True)
class RateDecision:
    allowed: bool
    limit: int          # 0 when the limit is switched off
    remaining: int
    retry_after_s: int  # whole seconds until the client's window ends (at least 1)


class RateLimiter(Protocol):
    async def take(self, key: str) -> RateDecision:
        """Count one request under ``key`` if the window has room; a refused request is not counted."""
        ...


class InProcessRateLimiter:
    """Fixed windows of ``window_s`` per key, at most ``limit`` requests each; ``limit <= 0`` allows all."""

    def __init__(self, limit: int, window_s: float, *, max_keys: int = MAX_TRACKED_CLIENTS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.limit = max(int(limit), 0)
        self.window_s = max(float(window_s), 0.001)
        self._max_keys = max_keys
        self._clock = clock
        self._windows: OrderedDict[str, list[float]] = OrderedDict()  # key -> [window start, count], oldest first

    async def take(self, key: str) -> RateDecision:
        if self.limit == 0:
            return RateDecision(True, 0, 0, 1)
        now = self._clock()
        window = self._windows.get(key)
        if window is None or now >= window[0] + self.window_s:
            window = [now, 0]
            self._windows[key] = window
            self._windows.move_to_end(key)
            self._forget_old(now)
        retry_after = max(1, math.ceil(window[0] + self.window_s - now))
        if window[1] >= self.limit:
            return RateDecision(False, self.limit, 0, retry_after)
        window[1] += 1
        return RateDecision(True, self.limit, self.limit - int(window[1]), retry_after)

    def _forget_old(self, now: float) -> None:
        """Windows are kept in the order they opened: drop ended ones, and the oldest past the cap."""
        while self._windows:
            start = next(iter(self._windows.values()))[0]
            if now < start + self.window_s and len(self._windows) <= self._max_keys:
                return
            self._windows.popitem(last=False)


def client_key(address: str) -> str:
    """The rate-limit key of a client address: the address itself, or its /64 for IPv6."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.ip_network(f"{ip}/{IPV6_CLIENT_PREFIX}", strict=False))
    return str(ip)


def rate_limiter_from_settings(section: Mapping[str, Any], prefix: str) -> RateLimiter:
    """``<prefix>_rate_limit`` requests per ``<prefix>_rate_window_s`` seconds (in process: the only
    backend so far)."""
    return InProcessRateLimiter(int(section[f"{prefix}_rate_limit"]), float(section[f"{prefix}_rate_window_s"]))
