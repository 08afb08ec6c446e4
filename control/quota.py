"""Daily quotas kept in SQLite (control is the only writer), e.g. 100 purges per UTC day."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import aiosqlite


def utc_day(now: datetime | None = None) -> str:
    return (now or datetime.now(UTC)).strftime("%Y-%m-%d")


def seconds_until_tomorrow(now: datetime | None = None) -> int:
    now = now or datetime.now(UTC)
    tomorrow = (now + timedelta(days=1)).replace(hour=0, minute=0, second=0, microsecond=0)
    return max(int((tomorrow - now).total_seconds()), 1)


class DailyQuota:
    def __init__(self, db: aiosqlite.Connection, name: str, limit: int) -> None:
        self.db, self.name, self.limit = db, name, limit

    async def used(self, day: str | None = None) -> int:
        async with self.db.execute("SELECT count FROM daily_counters WHERE name = ? AND day = ?",
                                   (self.name, day or utc_day())) as cur:
            row = await cur.fetchone()
        return row[0] if row else 0

    async def take(self, day: str | None = None) -> int | None:
        """Consume one unit; returns what remains today, or None (nothing consumed) when exhausted."""
        day = day or utc_day()
        cur = await self.db.execute(
            "INSERT INTO daily_counters (name, day, count) VALUES (?, ?, 1) "
            "ON CONFLICT (name, day) DO UPDATE SET count = count + 1 WHERE count < ?",
            (self.name, day, self.limit))
        await self.db.commit()
        if cur.rowcount == 0:
            return None
        return self.limit - await self.used(day)

    async def give_back(self, day: str | None = None) -> None:
        await self.db.execute("UPDATE daily_counters SET count = MAX(count - 1, 0) WHERE name = ? AND day = ?",
                              (self.name, day or utc_day()))
        await self.db.commit()
