"""How an edge answered a delivery, as `X-Cache` says it, the edge's delivery log counts it and control's
analytics stores it: one list for both sides.

Analytics keeps four counters per zone and day (HIT, MISS, STALE, BYPASS); `COUNTED_AS` says which one each
result adds to: a copy the origin confirmed (REVALIDATED) was served from the cache, an answer that may not
be stored (PASS) never could be.
"""

from __future__ import annotations

from enum import StrEnum


class CacheResult(StrEnum):
    HIT = "HIT"                    # served from the cache, fresh
    MISS = "MISS"                  # fetched (or made) now, and stored
    STALE = "STALE"                # served from the cache past its freshness (control or the origin unreachable,
    #                                stale-while-revalidate, stale-if-error)
    REVALIDATED = "REVALIDATED"    # a pull zone's stored copy, confirmed by its origin (304)
    PASS = "PASS"                  # a pull zone's answer that may not be stored, or another method
    BYPASS = "BYPASS"              # not a cached delivery at all (API calls, errors before the cache)


COUNTED = (CacheResult.HIT, CacheResult.MISS, CacheResult.STALE, CacheResult.BYPASS)
COUNTED_AS: dict[str, CacheResult] = {
    **{result.value: result for result in COUNTED},
    CacheResult.REVALIDATED.value: CacheResult.HIT,
    CacheResult.PASS.value: CacheResult.BYPASS,
}


def counted_as(x_cache: str | None) -> CacheResult:
    """The analytics counter an `X-Cache` value adds to (BYPASS for none, or one this service never sends)."""
    return COUNTED_AS.get(x_cache or "", CacheResult.BYPASS)
