"""The chat's query limits, counted in the shared counter store (assetcdn/shared/counter_store.py), so every
control and edge process sees one count.

The limits guard what costs: the configured model. A month (UTC) allows `monthly_limit` questions
answered by it (1,000 by default): past it the chat answers 429 ``limit_reached``. A day allows
`daily_soft_limit` (100): past it questions are still answered, but from the documentation and
catalog alone, without calling the model (``degraded``). An answer made without the model (no model
configured, the soft limit spent, or the model unreachable) costs nothing and counts against neither.
A limit of 0 is off, as for every other limit.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from assetcdn.shared.counter_store import Counters, Decision, Limit


@dataclass
class ChatAllowance:
    remaining: int | None   # model-answered questions left this month (after this one, when it uses the model);
                            # None with the month's limit switched off (0), which leaves no count
    use_model: bool         # the model answers this question (counted against the month and the day);
                            # cleared when the model cannot start an answer
    taken: list[Decision] = field(default_factory=list)  # the counts to give back if the model does not answer


class ChatQuota:
    def __init__(self, counters: Counters, monthly_limit: int, daily_soft_limit: int) -> None:
        self.counters = counters
        self.month = Limit("chat:month", monthly_limit, period="month")
        self.day = Limit("chat:day", daily_soft_limit, period="day")

    async def take(self, *, with_model: bool) -> ChatAllowance | Decision:
        """What this question may use: the month's refusing Decision (nothing counted; its headers say when
        the month ends) when a model is configured and the month's limit is reached; without a model,
        nothing is counted."""
        off = self.month.limit <= 0
        if not with_model:
            month = await self.counters.peek(self.month)
            return ChatAllowance(None if off else month.remaining, use_model=False)
        month = await self.counters.hit(self.month)
        if not month.allowed:
            return month
        day = await self.counters.hit(self.day)
        if not day.allowed:  # today's soft limit is spent: answered without the model, at no cost
            await self.counters.refund(month)
            return ChatAllowance(None if off else min(month.remaining + 1, month.limit), use_model=False)
        return ChatAllowance(None if off else month.remaining, use_model=True, taken=[month, day])

    async def refund(self, allowance: ChatAllowance) -> None:
        """Give back a question the model did not answer (it could not start, failed, or the client left)."""
        for taken in allowance.taken:
            await self.counters.refund(taken)
        allowance.taken = []
