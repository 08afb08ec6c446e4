"""Failed sign-ins counted per client IP, behind one small interface (`AttemptLimiter`).

Five failures per IP in a 15-minute window (configurable, `[dashboard] login_*`) and the next
attempt is refused with a Retry-After until the window ends. The window is a fixed one, opened by
the IP's first counted attempt, as the original service's `login:<ip>` key with a 900 s expiry.
The count lives in the shared counter store (assetcdn/shared/counter_store.py), so every edge and worker
that forwards to control, and every control process, sees the same count.

An attempt takes its slot before the credential is checked, atomically in the store, so concurrent
guesses cannot all pass the check together; a successful attempt gives its slot back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from assetcdn.shared.counter_store import Counters, Decision, Limit


@dataclass(frozen=True)
class Attempt:
    key: str
    taken: Decision | None = None  # the count it took, given back by release


@dataclass(frozen=True)
class Refused:
    retry_after: int  # seconds until one more attempt is allowed


class AttemptLimiter(Protocol):
    limit: int
    window_s: int

    async def acquire(self, key: str) -> Attempt | Refused:
        """Count an attempt under `key` unless `limit` are already counted within the window."""
        ...

    async def release(self, attempt: Attempt) -> None:
        """Forget an attempt that succeeded: only failures count."""
        ...


class CounterAttemptLimiter:
    def __init__(self, counters: Counters, limit: Limit) -> None:
        self.counters, self._limit = counters, limit
        self.limit, self.window_s = limit.limit, int(limit.window_s)

    async def acquire(self, key: str) -> Attempt | Refused:
        decision = await self.counters.hit(self._limit, key)
        return Attempt(key, decision) if decision.allowed else Refused(decision.retry_after_s())

    async def release(self, attempt: Attempt) -> None:
        await self.counters.refund(attempt.taken)
