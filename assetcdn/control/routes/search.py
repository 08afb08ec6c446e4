"""GET /api/search?q=&limit=: semantic search over the catalog with a fuzzy fallback (public).

Errors use the legacy envelope (``{"error": "<text>", ...}``), as the API reference's search does;
100 valid requests a minute per client IP by default (``[search] rate_limit_per_minute``). A query is
at most 200 characters and 24 words (400 past them); when the search threads are busy and a few
queries already wait, 503 with Retry-After at once (assetcdn/control/search/engine.py). Neither a 400
nor a query left unanswered (503, 500) takes a slot of the client's minute. Any origin may read the answer and
its errors, its quota and a Retry-After among them (assetcdn/shared/cors.py), and OPTIONS is its CORS preflight (204).
"""

from __future__ import annotations

import logging

from aiohttp import web

from assetcdn.control.app_keys import SETTINGS
from assetcdn.control.identity.rate_limit import client_key, rate_headers
from assetcdn.control.records.client_ip import request_ip
from assetcdn.control.search.engine import SearchBusy, query_problem
from assetcdn.control.search.service import SEARCH, SEARCH_LIMITER
from assetcdn.shared.cors import RATE_LIMITED_READ, cross_origin, preflight
from assetcdn.shared.errors import LegacyError
from assetcdn.shared.middleware import json_response

log = logging.getLogger(__name__)

DEFAULT_LIMIT, MAX_LIMIT = 20, 50
BUSY_RETRY_S = 1


def parse_limit(raw: str | None) -> int:
    # Clamped, as the API reference clamps paging values, rather than refused.
    try:
        return min(max(int(raw), 1), MAX_LIMIT) if raw not in (None, "") else DEFAULT_LIMIT
    except ValueError:
        return DEFAULT_LIMIT


async def _search(request: web.Request) -> web.StreamResponse:
    query = request.query.get("q", "")
    problem = query_problem(query)
    if problem is not None:  # refused before it is counted: a 400 takes no slot of the client's minute
        raise LegacyError(400, problem)
    decision = await request.app[SEARCH_LIMITER].take(f"search:{client_key(request_ip(request))}")
    if not decision.allowed:
        raise LegacyError(429, "rate_limit_exceeded",
                          f"Rate limit exceeded: at most {decision.limit} searches a minute per client. "
                          f"Retry in {decision.retry_after_s()} s.", headers=rate_headers(decision))
    try:
        answer = await request.app[SEARCH].search(query, parse_limit(request.query.get("limit")))
    except SearchBusy:
        # Refused for the service's own load: no slot of the client's minute, which retrying as told would spend.
        decision = await request.app[SEARCH_LIMITER].give_back(decision)
        raise LegacyError(503, "Search is busy; retry in a second.",
                          headers={"Retry-After": str(BUSY_RETRY_S), **rate_headers(decision)}) from None
    except Exception:
        log.exception("search failed")
        await request.app[SEARCH_LIMITER].give_back(decision)
        raise LegacyError(500, "Search failed. Please try again.") from None
    results = [hit.to_json() for hit in answer.hits]
    max_age = int(request.app[SETTINGS].get("search", "cache_ttl_s"))
    return json_response({"results": results, "query": query, "count": len(results), "mode": answer.mode},
                         headers={"Cache-Control": f"public, max-age={max_age}", **rate_headers(decision),
                                  **RATE_LIMITED_READ})


# Public: a page on another origin reads the results and the errors, and its quota and when to retry (a 429's or a
# 503's Retry-After).
search = cross_origin(_search, RATE_LIMITED_READ)
# A page's preflight (OPTIONS, sent when it adds a header of its own: If-None-Match), as the edge's public reads'.
search_preflight = preflight()
