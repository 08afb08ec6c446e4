"""Per-client limits on what makes new work at the edge (new variants, new placeholders)."""

from __future__ import annotations

from aiohttp import web

from assetcdn.edge.app_keys import COUNTERS
from assetcdn.shared.counter_store import Decision, Limit, client_key
from assetcdn.shared.errors import LegacyError

CLIENT_MISSES = web.RequestKey("client_misses", list[Decision])  # what take_client_misses counted for the request


async def take_client_misses(request: web.Request, limits: tuple[Limit, ...], what: str) -> list[Decision]:
    """Count one miss of this client address (IPv6: its /64) under each of `limits`; 429
    ``rate_limit_exceeded`` with that limit's headers when one is spent (nothing stays counted).
    `refund_client_misses` gives them back."""
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
    request[CLIENT_MISSES] = taken
    return taken


async def refund_client_misses(request: web.Request) -> None:
    """Give back what `take_client_misses` counted for `request`: the pool refused its job before running it
    (PoolBusy, whose 503 tells the client to retry shortly), so the client made no new work."""
    for taken in request.pop(CLIENT_MISSES, ()):
        await request.app[COUNTERS].refund(taken)
