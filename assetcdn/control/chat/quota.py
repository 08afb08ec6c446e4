"""The chat's query limits, counted in the shared counter store (assetcdn/shared/counter_store.py), so every
control and edge process sees one count.

A month (UTC) allows `monthly_limit` questions (1,000 by default): past it the chat answers 429
``limit_reached``. A day allows `daily_soft_limit` (100): past it questions are still answered,
but from the documentation and catalog alone, without calling the configured model (``degraded``).
A limit of 0 is off, as for every other limit.
"""

from __future__ import annotations

from dataclasses import dataclass

from assetcdn.shared.counter_store import Counters, Limit


@dataclass(frozen=True)
class ChatAllowance:
    remaining: int          # questions left this month after this one
    over_daily_soft: bool   # today's soft limit is spent: answer without the model


class ChatQuota:
    def __init__(self, counters: Counters, monthly_limit: int, daily_soft_limit: int) -> None:
        self.counters = counters
        self.month = Limit("chat:month", monthly_limit, period="month")
        self.day = Limit("chat:day", daily_soft_limit, period="day")

    async def take(self) -> ChatAllowance | None:
        """Count one question; None (nothing counted) when the month's limit is reached."""
        month = await self.counters.hit(self.month)
        if not month.allowed:
            return None
        day = await self.counters.hit(self.day)  # refused once the soft limit is spent (not counted further)
        return ChatAllowance(month.remaining, not day.allowed)

    async def refund(self, allowance: ChatAllowance) -> None:
        """Give back a question that got no answer (failed, or the client left before the end)."""
        await self.counters.refund(self.month)
        if not allowance.over_daily_soft:  # counted against the day too (a refused day hit is not counted)
            await self.counters.refund(self.day)
