"""Forward every /api/... path the edge does not serve itself, and /dashboard, to control: method,
headers (repeated ones included), body and status pass through, responses (SSE included) are
streamed, and X-Forwarded-For is added."""

from __future__ import annotations

import aiohttp
from aiohttp import web
from multidict import CIMultiDict
from yarl import URL

from edge.rules import FORWARDED
from edge.state import NODE, PROXY_SESSION
from shared.errors import ApiError
from shared.middleware import REQUEST_ID

HOP_BY_HOP = frozenset(h.lower() for h in (
    "Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "TE", "Trailer",
    "Transfer-Encoding", "Upgrade", "Host"))
# A request's Content-Length goes on to control (it refuses oversize bodies before reading them);
# a response's is set on the StreamResponse from the upstream one.
RESPONSE_SKIPPED = HOP_BY_HOP | {"content-length"}


def _forward_headers(request: web.Request) -> CIMultiDict[str]:
    # A multidict: repeated headers (Cookie, Set-Cookie on the way back) must all pass, not the last one.
    headers = CIMultiDict((k, v) for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP)
    peer = request.remote or ""
    prior = ", ".join(request.headers.getall("X-Forwarded-For", []))
    headers["X-Forwarded-For"] = f"{prior}, {peer}" if prior else peer
    headers["X-Forwarded-Host"] = request.host
    headers["X-Forwarded-Proto"] = request.scheme
    headers["X-Request-ID"] = request[REQUEST_ID]
    return headers


async def forward_to_control(request: web.Request) -> web.StreamResponse:
    request[FORWARDED] = True  # edge rules apply to delivery responses, not to management calls
    node = request.app[NODE]
    session = request.app[PROXY_SESSION]
    # The raw (still encoded) path: decoding here would resolve `%2e%2e` before control can refuse it.
    url = URL(node.control.control_url + request.rel_url.raw_path_qs, encoded=True)
    body = request.content if request.body_exists else None
    try:
        upstream = await session.request(request.method, url, headers=_forward_headers(request), data=body,
                                         allow_redirects=False)
    except (aiohttp.ClientError, TimeoutError, OSError):
        raise ApiError(503, "ControlUnreachable", "The control plane cannot be reached from this edge; "
                       "management endpoints are unavailable. Delivery of cached assets continues.") from None
    async with upstream:
        headers = CIMultiDict((k, v) for k, v in upstream.headers.items() if k.lower() not in RESPONSE_SKIPPED)
        response = web.StreamResponse(status=upstream.status, reason=upstream.reason, headers=headers)
        if upstream.content_length is not None and "chunked" not in upstream.headers.get("Transfer-Encoding", ""):
            response.content_length = upstream.content_length
        streaming = upstream.headers.get("Content-Type", "").startswith("text/event-stream")
        if streaming:
            response.enable_chunked_encoding()
        await response.prepare(request)
        if request.method != "HEAD":
            async for chunk in upstream.content.iter_any():
                await response.write(chunk)
        await response.write_eof()
        return response
