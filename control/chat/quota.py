"""The chat's query limits, counted in control's SQLite (the same for every edge and worker).

A month (UTC) allows `monthly_limit` questions (1,000 by default): past it the chat answers 429
``limit_reached``. A day allows `daily_soft_limit` (100): past it questions are still answered,
but from the documentation and catalog alone, without calling the configured model (``degraded``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

import aiosqlite


@dataclass(frozen=True)
class ChatAllowance:
    remaining: int          # questions left this month after this one
    over_daily_soft: bool   # today's soft limit is spent: answer without the model


class ChatQuota:
    MONTH, DAY = "chat:month", "chat:day"

    def __init__(self, db: aiosqlite.Connection, monthly_limit: int, daily_soft_limit: int) -> None:
        self.db, self.monthly_limit, self.daily_soft_limit = db, monthly_limit, daily_soft_limit

    async def take(self, now: datetime | None = None) -> ChatAllowance | None:
        """Count one question; None (nothing counted) when the month's limit is reached."""
        if self.monthly_limit <= 0:
            return None
        now = now or datetime.now(UTC)
        month, day = now.strftime("%Y-%m"), now.strftime("%Y-%m-%d")
        cur = await self.db.execute(
            "INSERT INTO daily_counters (name, day, count) VALUES (?, ?, 1) "
            "ON CONFLICT (name, day) DO UPDATE SET count = count + 1 WHERE count < ? RETURNING count",
            (self.MONTH, month, self.monthly_limit))
        row = await cur.fetchone()
        await cur.close()
        if row is None:
            await self.db.commit()
            return None
        cur = await self.db.execute(
            "INSERT INTO daily_counters (name, day, count) VALUES (?, ?, 1) "
            "ON CONFLICT (name, day) DO UPDATE SET count = count + 1 RETURNING count", (self.DAY, day))
        day_row = await cur.fetchone()
        await cur.close()
        await self.db.commit()
        return ChatAllowance(max(self.monthly_limit - row[0], 0), day_row is not None and day_row[0] > self.daily_soft_limit)
