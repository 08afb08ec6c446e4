"""Per-client limits on what makes new work at the edge (new variants, new placeholders)."""

from __future__ import annotations

from aiohttp import web

from assetcdn.edge.app_keys import COUNTERS
from assetcdn.shared.counter_store import Decision, Limit, client_key
from assetcdn.shared.errors import LegacyError


async def take_client_misses(request: web.Request, limits: tuple[Limit, ...], what: str) -> list[Decision]:
    """Count one miss of this client address (IPv6: its /64) under each of `limits`; 429
    ``rate_limit_exceeded`` with that limit's headers when one is spent (nothing stays counted)."""
    counters, client = request.app[COUNTERS], client_key(request.remote or "")
    taken: list[Decision] = []
    for limit in limits:
        decision = await counters.hit(limit, client)
        if not decision.allowed:
            for earlier in taken:
                await counters.refund(earlier)
            window = "a day (UTC)" if limit.period == "day" else f"{limit.window_s:g} s"
            raise LegacyError(429, "rate_limit_exceeded",
                              f"At most {limit.limit:,} new {what} per client in {window}; cached ones are still "
                              f"served. Retry in {decision.retry_after_s()} s.", headers=decision.refusal_headers())
        taken.append(decision)
    return taken
