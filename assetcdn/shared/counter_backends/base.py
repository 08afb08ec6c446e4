"""What every counter store implements, and the decision it returns."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

# A refund goes to the window that ends at the taken decision's reset_at, give or take this: a store's
# own end differs from the one reported (a period's is set to midnight exactly) by milliseconds.
SAME_WINDOW_S = 1.0


class CounterStoreUnavailable(Exception):
    """The store could not be reached or did not answer in time; the message names the cause."""


@dataclass(frozen=True, slots=True)
class Decision:
    allowed: bool
    limit: int         # 0 when the limit is switched off
    remaining: int     # hits left in this window after this one
    reset_at: float    # Unix time the window ends
    decided_at: float  # Unix time of the decision (the store's clock)
    key: str = ""      # the window's key in the store (set by Counters): where a refund goes

    def retry_after_s(self) -> int:
        """Whole seconds from the decision until the window ends (at least 1): a Retry-After value."""
        return max(1, math.ceil(self.reset_at - self.decided_at))

    def headers(self) -> dict[str, str]:
        """X-RateLimit-Limit, -Remaining and -Reset (Unix seconds); none for a limit switched off."""
        if not self.limit:
            return {}
        return {"X-RateLimit-Limit": str(self.limit), "X-RateLimit-Remaining": str(self.remaining),
                "X-RateLimit-Reset": str(math.ceil(self.reset_at))}

    def refusal_headers(self) -> dict[str, str]:
        """The headers of a 429: the limit's, and Retry-After."""
        return {**self.headers(), "Retry-After": str(self.retry_after_s())}


class CounterStore(Protocol):
    backend: str

    async def hit(self, key: str, limit: int, window_s: float) -> Decision:
        """Count one hit under `key` if fewer than `limit` are counted in its window (which starts,
        `window_s` long, at the first hit); a refused hit is not counted."""
        ...

    async def peek(self, key: str, limit: int, window_s: float) -> Decision:
        """The window of `key` as it stands, counting nothing (`allowed`: would one more pass)."""
        ...

    async def refund(self, key: str, window_end: float) -> None:
        """Give back one hit counted under `key` in its current window (never below 0), if that window
        is the one that ended at `window_end` (Unix time; later windows end later)."""
        ...

    async def ping(self) -> None:
        """Raise CounterStoreUnavailable unless the store answers."""
        ...

    async def close(self) -> None:
        ...


def decision(allowed: bool, limit: int, used: int, reset_at: float, now: float) -> Decision:
    return Decision(allowed, limit, max(limit - used, 0), reset_at, now)
