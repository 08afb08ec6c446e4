"""Failed sign-ins counted per client IP, behind one small interface (`AttemptLimiter`).

Five failures per IP in a sliding 15-minute window (configurable) and the next attempt is refused
with a Retry-After until the oldest failure leaves the window. The count lives in the control plane's
SQLite, so every edge and worker that forwards to control sees the same count; a Redis backend only
has to satisfy `AttemptLimiter`.

An attempt takes its slot before the credential is checked, in one SQL statement, so concurrent
guesses cannot all pass the check together; a successful attempt gives its slot back.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import aiosqlite


@dataclass(frozen=True)
class Attempt:
    key: str
    id: int


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


class SqliteAttemptLimiter:
    def __init__(self, db: aiosqlite.Connection, limit: int, window_s: int,
                 clock: Callable[[], float] = time.time) -> None:
        self.db, self.limit, self.window_s, self._clock = db, limit, window_s, clock

    async def acquire(self, key: str) -> Attempt | Refused:
        now = self._clock()
        since = now - self.window_s
        await self.db.execute("DELETE FROM login_attempts WHERE at <= ?", (since,))
        cursor = await self.db.execute(
            "INSERT INTO login_attempts (key, at) SELECT ?, ? "
            "WHERE (SELECT COUNT(*) FROM login_attempts WHERE key = ? AND at > ?) < ?",
            (key, now, key, since, self.limit))
        await self.db.commit()
        if cursor.rowcount == 1 and cursor.lastrowid is not None:
            return Attempt(key, cursor.lastrowid)
        async with self.db.execute("SELECT MIN(at) FROM login_attempts WHERE key = ? AND at > ?",
                                   (key, since)) as cur:
            row = await cur.fetchone()
        oldest = row[0] if row and row[0] is not None else now
        return Refused(max(math.ceil(oldest + self.window_s - now), 1))

    async def release(self, attempt: Attempt) -> None:
        await self.db.execute("DELETE FROM login_attempts WHERE id = ? AND key = ?", (attempt.id, attempt.key))
        await self.db.commit()
