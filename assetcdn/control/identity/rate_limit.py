"""Per-client rate limits of control's routes (the original service's ``rl:<name>:<ip>`` keys: a fixed
window per client address), counted in the shared counter store (assetcdn/shared/counter_store.py), so every
control and edge process on the machine (embedded store) or in the install (Redis) sees one count.

``RateLimiter.take(key)`` is what a route calls; ``SharedRateLimiter`` answers it from a `Limit`
(its value and window) with the key ``rl:<key>``, e.g. ``rl:analytics:203.0.113.7``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Protocol

from assetcdn.shared.counter_store import Counters, Decision, Limit, client_key

__all__ = ["Decision", "RateLimiter", "SharedRateLimiter", "client_key", "rate_headers"]


def rate_headers(decision: Decision) -> dict[str, str]:
    """X-RateLimit-Limit/-Remaining/-Reset (none for a limit switched off); Retry-After when refused."""
    return decision.headers() if decision.allowed else decision.refusal_headers()


class RateLimiter(Protocol):
    async def take(self, key: str) -> Decision:
        """Count one request under ``key`` if the window has room; a refused request is not counted."""
        ...

    async def give_back(self, taken: Decision) -> Decision:
        """Uncount the request ``taken`` counted (the service did not answer it); the decision as it now stands."""
        ...


class SharedRateLimiter:
    """``limit.limit`` requests per ``limit.window_s`` under each key, in the shared counter store."""

    def __init__(self, counters: Counters, limit: Limit) -> None:
        self.counters = counters
        self.limit = Limit("rl", limit.limit, limit.window_s, limit.period)

    async def take(self, key: str) -> Decision:
        return await self.counters.hit(self.limit, key)

    async def give_back(self, taken: Decision) -> Decision:
        if not taken.allowed or not taken.limit:
            return taken
        await self.counters.refund(taken)
        return replace(taken, remaining=min(taken.remaining + 1, taken.limit))
