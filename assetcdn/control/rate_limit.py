"""Per-client rate limits of control's routes (the original service's ``rl:<name>:<ip>`` keys: a fixed
window per client address), counted in the shared counter store (assetcdn/shared/counter_store.py), so every
control and edge process on the machine (embedded store) or in the install (Redis) sees one count.

``RateLimiter.take(key)`` is what a route calls; ``SharedRateLimiter`` answers it from a `Limit`
(its value and window) with the key ``rl:<key>``, e.g. ``rl:analytics:203.0.113.7``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

from assetcdn.shared.counter_store import Counters, Limit, client_key

__all__ = ["RateDecision", "RateLimiter", "SharedRateLimiter", "client_key"]


@dataclass(frozen=True, slots=True)
class RateDecision:
    allowed: bool
    limit: int          # 0 when the limit is switched off
    remaining: int
    retry_after_s: int  # whole seconds until the client's window ends (at least 1)
    reset_at: float = 0.0  # Unix time the window ends (0: unknown)

    def headers(self) -> dict[str, str]:
        """X-RateLimit-Limit/-Remaining/-Reset (none for a limit switched off); Retry-After when refused."""
        if not self.limit:
            return {}
        headers = {"X-RateLimit-Limit": str(self.limit), "X-RateLimit-Remaining": str(self.remaining)}
        if self.reset_at:
            headers["X-RateLimit-Reset"] = str(math.ceil(self.reset_at))
        if not self.allowed:
            headers["Retry-After"] = str(self.retry_after_s)
        return headers


class RateLimiter(Protocol):
    async def take(self, key: str) -> RateDecision:
        """Count one request under ``key`` if the window has room; a refused request is not counted."""
        ...


class SharedRateLimiter:
    """``limit.limit`` requests per ``limit.window_s`` under each key, in the shared counter store."""

    def __init__(self, counters: Counters, limit: Limit) -> None:
        self.counters = counters
        self.limit = Limit("rl", limit.limit, limit.window_s, limit.period)

    async def take(self, key: str) -> RateDecision:
        decision = await self.counters.hit(self.limit, key)
        return RateDecision(decision.allowed, decision.limit, decision.remaining, decision.retry_after_s(),
                            decision.reset_at)
