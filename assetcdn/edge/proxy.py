"""Forward every /api/... path the edge does not serve itself, and /dashboard, to control: method,
headers (repeated ones too: Cookie in, Set-Cookie out) and status pass through, responses (SSE
included) are streamed, and X-Forwarded-For is added, signed with the cluster secret so control believes it
(``X-Cluster-Forwarded``, assetcdn/shared/cluster.py).

A request body is received whole (decoded, bounded in size by its route's own limit, and in time)
before control is asked (assetcdn/edge/proxied_body.py), so the pool of connections to control (``proxy_pool_size``) only ever holds
calls that are ready; each call must be answered and relayed within ``proxy_timeout_s``, except an
SSE stream once it has begun.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

import aiohttp
from aiohttp import web
from multidict import CIMultiDict
from yarl import URL

from assetcdn.edge.app_keys import FORWARD_SPOOL, NODE, PROXY_SESSION, SECRETS, SETTINGS
from assetcdn.edge.control_client import GATEWAY_FAILURES, ControlUnavailable, unanswered
from assetcdn.edge.proxied_body import ProxiedBody, receive_body
from assetcdn.edge.site_config import FORWARDED
from assetcdn.shared.cluster import FORWARDED_HEADER, sign_forwarded
from assetcdn.shared.config import Settings
from assetcdn.shared.errors import ApiError
from assetcdn.shared.http_server import client_keepalive_s, cut_short
from assetcdn.shared.middleware import REQUEST_ID
from assetcdn.shared.request_body import RouteBody, body_deadline, in_route_envelope, route_body

log = logging.getLogger(__name__)

HOP_BY_HOP = frozenset(h.lower() for h in (
    "Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "TE", "Trailer",
    "Transfer-Encoding", "Upgrade", "Host"))
# The body goes on decoded and whole, with its own length; the edge already answered any Expect.
REQUEST_SKIPPED = HOP_BY_HOP | {"content-length", "content-encoding", "expect"}
# A response's length is set on the StreamResponse from the upstream one; the edge names itself.
RESPONSE_SKIPPED = HOP_BY_HOP | {"content-length", "server"}
# Set on a forwarded request once control's answer is being relayed: a breaker opening then no longer cuts it off.
RELAYING = web.RequestKey("relaying", bool)
# How soon a stream notices its client has gone while control has nothing to send.
STREAM_CLIENT_CHECK_S = 1.0
PROXY_CONNECT_S = 5.0  # a connection to control not made within this is given up


def open_proxy_session(settings: Settings) -> aiohttp.ClientSession:
    connector = aiohttp.TCPConnector(limit=int(settings.get("edge", "proxy_pool_size")),
                                     keepalive_timeout=client_keepalive_s(settings))
    return aiohttp.ClientSession(connector=connector, auto_decompress=False,
                                 timeout=aiohttp.ClientTimeout(total=None, sock_connect=PROXY_CONNECT_S))


def _route_body(request: web.Request) -> RouteBody:
    # The route's own limit, as control will read it: nothing past it is decoded or kept here.
    return route_body(request.method, request.path, int(request.app[SETTINGS].get("control", "max_upload_bytes")))


def _forward_headers(request: web.Request, body: ProxiedBody | None) -> CIMultiDict[str]:
    headers = CIMultiDict((k, v) for k, v in request.headers.items() if k.lower() not in REQUEST_SKIPPED)
    peer = request.remote or ""
    prior = ", ".join(request.headers.getall("X-Forwarded-For", []))
    forwarded_for = f"{prior}, {peer}" if prior else peer
    headers["X-Forwarded-For"] = forwarded_for
    headers[FORWARDED_HEADER] = sign_forwarded(request.app[SECRETS].cluster_secret, forwarded_for)
    headers["X-Forwarded-Host"] = request.host
    headers["X-Forwarded-Proto"] = request.scheme
    headers["X-Request-ID"] = request[REQUEST_ID]
    if body is not None:
        headers["Content-Length"] = str(body.size)
    return headers


def _client_gone(request: web.Request) -> bool:
    transport = request.transport
    return transport is None or transport.is_closing()


async def forward_to_control(request: web.Request) -> web.StreamResponse:
    request[FORWARDED] = True  # edge rules apply to delivery responses, not to management calls
    edge = request.app[SETTINGS].section("edge")
    control = request.app[NODE].control
    # Known down (assetcdn/edge/circuit_breaker.py), or being probed by the edge's background calls: say so now, not
    # after a timeout. A call let through while the breaker is open is its half-open probe, claimed once the call
    # is sure to ask control: a body refused here would hold the probe without reporting.
    if control.refuses_client_call(claim=not request.body_exists):
        raise _control_unreachable(control.breaker.open_s)
    body = None
    if request.body_exists:
        route = _route_body(request)
        with body_deadline(request, request.app[SETTINGS]), in_route_envelope(route):
            body = await receive_body(request, route.limit, int(edge["proxy_body_memory_kb"]) * 1024,
                                      request.app[FORWARD_SPOOL])
        if control.refuses_client_call():
            body.close()
            raise _control_unreachable(control.breaker.open_s)
    exchange = asyncio.ensure_future(_exchange(request, body, float(edge["proxy_timeout_s"])))
    try:
        # A call waiting for control's answer gives up when the breaker opens (the edge's background calls found
        # control hung) rather than wait out proxy_timeout_s; one whose answer has begun is relayed to its end.
        return await control.until_tripped(exchange, begun=lambda: bool(request.get(RELAYING)))
    except ControlUnavailable:
        # Asked, and not answered: a 504 as for proxy_timeout_s, since control may yet apply what it was sent.
        raise ApiError(504, "ControlTimeout", "The control plane stopped answering this edge while the call "
                       "waited for it; it may still apply the call. Retry later.",
                       headers={"Retry-After": str(max(1, round(control.breaker.open_s)))}) from None
    finally:
        exchange.cancel()  # the client went (this handler cancelled): so does its call to control
        if body is not None:
            body.close()


def _control_unreachable(open_s: float) -> ApiError:
    return ApiError(503, "ControlUnreachable", "The control plane cannot be reached from this edge; "
                    "management endpoints are unavailable. Delivery of cached assets continues.",
                    headers={"Retry-After": str(max(1, round(open_s)))})


async def _exchange(request: web.Request, body: ProxiedBody | None, timeout_s: float) -> web.StreamResponse:
    control = request.app[NODE].control
    # The raw (still encoded) path: decoding here would resolve `%2e%2e` before control can refuse it.
    url = URL(control.control_url + request.rel_url.raw_path_qs, encoded=True)
    session = request.app[PROXY_SESSION]
    response: web.StreamResponse | None = None
    deadline = asyncio.timeout(timeout_s)
    asked_at = time.monotonic()
    try:
        async with deadline:
            async with session.request(request.method, url, headers=_forward_headers(request, body),
                                       data=body.payload() if body is not None else None,
                                       allow_redirects=False) as upstream:
                # Control answered: the breaker hears it as from the edge's own calls (this call may be its half-open
                # probe, which no other call reports). A 502-504 is control's own (DatabaseBusy, AiBusy) when it
                # carries this call's id, which control echoes and a proxy in front of it does not.
                if upstream.status not in GATEWAY_FAILURES or upstream.headers.get("X-Request-ID") == request[REQUEST_ID]:
                    control.heard_from()
                headers = CIMultiDict((k, v) for k, v in upstream.headers.items()
                                      if k.lower() not in RESPONSE_SKIPPED)
                response = web.StreamResponse(status=upstream.status, reason=upstream.reason, headers=headers)
                streaming = upstream.headers.get("Content-Type", "").startswith("text/event-stream")
                if streaming:
                    deadline.reschedule(None)  # a stream lasts as long as its client wants it
                    response.enable_chunked_encoding()
                elif upstream.content_length is not None and "chunked" not in upstream.headers.get(
                        "Transfer-Encoding", ""):
                    response.content_length = upstream.content_length
                request[RELAYING] = True
                await response.prepare(request)
                if request.method != "HEAD":
                    await _relay(request, upstream, response, streaming)
                else:
                    await response.write_eof()
                return response
    except (aiohttp.ClientError, OSError, TimeoutError) as exc:
        if response is None or not response.prepared:
            if response is None:
                # Control did not answer: counted as the edge's own calls are (this call may be the breaker's
                # half-open probe, which no other call reports).
                limits = aiohttp.ClientTimeout(total=timeout_s, connect=PROXY_CONNECT_S)
                control.failed_call(unanswered(exc, limits, asked_at), asked_at)
            if deadline.expired():  # not aiohttp's own connect timeout: that one means unreachable
                raise ApiError(504, "ControlTimeout", f"The control plane did not answer within {timeout_s:g} s; "
                               "retry later.") from None
            raise ApiError(503, "ControlUnreachable", "The control plane cannot be reached from this edge; "
                           "management endpoints are unavailable. Delivery of cached assets continues.") from None
        if not _client_gone(request):
            # The answer has begun: cut it short so the client sees a broken response, not a wrong end.
            log.warning("forwarded %s %s broke off mid-response (request %s): %s", request.method,
                        request.rel_url.raw_path,  # as sent: decoded, a %0a in it would start a line of its own
                        request[REQUEST_ID], type(exc).__name__)
            cut_short(request)
        return response


async def _relay(request: web.Request, upstream: aiohttp.ClientResponse, response: web.StreamResponse,
                 streaming: bool) -> None:
    """Copy control's body to the client; a client that goes away (how SSE clients stop) ends it quietly."""
    reader = upstream.content
    while True:
        if streaming:
            try:
                chunk = await asyncio.wait_for(reader.readany(), STREAM_CLIENT_CHECK_S)
            except TimeoutError:
                if _client_gone(request):
                    return
                continue
        else:
            chunk = await reader.readany()
        if not chunk:
            break
        try:
            await response.write(chunk)
        except ConnectionResetError:
            return
    with contextlib.suppress(ConnectionResetError):
        await response.write_eof()
