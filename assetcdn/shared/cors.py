"""Cross-origin reads of the public GET endpoints a web page fetches: `Access-Control-Allow-Origin: *`.

Given to `/api/stream` (a player on another origin), `/api/transform` and `/api/auto` (images a page draws into a
canvas or fetch()es), `/api/lqip` and `/api/blurhash` (placeholders made for pages) and `/api/search` (public), on
their errors too, so a page reads the 4xx instead of a blocked response; `preflight` answers their OPTIONS.
Never to a route behind a key, a token or a session: `*` lets any page read the answer, and a browser sends no
cookies with it (docs/security.md, Cross-origin reads).
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Mapping

from aiohttp import web

from assetcdn.shared.errors import ApiError, LegacyError

PUBLIC_READ: Mapping[str, str] = {"Access-Control-Allow-Origin": "*"}
# A route whose answers count against a limit: its quota (X-RateLimit-*) and a 429's Retry-After, which a page reads
# only when they are exposed (none is a CORS-safelisted response field).
RATE_LIMITED_READ: Mapping[str, str] = {
    **PUBLIC_READ,
    "Access-Control-Expose-Headers": "Retry-After, X-RateLimit-Limit, X-RateLimit-Remaining, X-RateLimit-Reset"}
# A file a page may read in ranges (a PDF viewer, a video demuxer): whether it may ask for them, the size a range
# answer names and the version it revalidates, none of them CORS-safelisted response fields.
FILE_READ: Mapping[str, str] = {
    **PUBLIC_READ, "Access-Control-Expose-Headers": "Accept-Ranges, Content-Range, ETag, X-Cache"}
# The request headers a page may send to a delivery (a range, a revalidation), which make its browser ask first.
READ_REQUEST_HEADERS = "Range, If-Match, If-None-Match, If-Range"
PREFLIGHT_MAX_AGE_S = 86400

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def cross_origin(handler: Handler, headers: Mapping[str, str] = PUBLIC_READ) -> Handler:
    """`handler` with `headers` on the errors it raises (aiohttp's own too: `no_such_method`'s 405, whose envelope
    keeps them); its answers carry them on their own (a delivery's ServePolicy headers), as an answer may have been
    sent before the handler returns."""

    @functools.wraps(handler)
    async def answer(request: web.Request) -> web.StreamResponse:
        try:
            return await handler(request)
        except (LegacyError, ApiError) as exc:
            exc.headers = {**exc.headers, **headers}
            raise
        except web.HTTPException as exc:
            exc.headers.update(headers)
            raise

    return answer


def preflight(headers: Mapping[str, str] = PUBLIC_READ, request_headers: str = READ_REQUEST_HEADERS) -> Handler:
    """The answer to a CORS preflight (OPTIONS) of a route `cross_origin` opens with `headers`: 204, GET and HEAD
    with `request_headers`, which a browser may remember for a day."""
    answer_headers = {**headers, "Access-Control-Allow-Methods": "GET, HEAD, OPTIONS",
                      "Access-Control-Allow-Headers": request_headers,
                      "Access-Control-Max-Age": str(PREFLIGHT_MAX_AGE_S)}

    async def answer(request: web.Request) -> web.Response:
        return web.Response(status=204, headers=answer_headers)

    return answer
