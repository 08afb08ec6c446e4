"""What the control plane records about each request: the request log entry and the audit entry.

Request log: every request except the signed ``/_cluster`` traffic, with its final status.
Audit: after a 2xx answer to a route that declares an audit action (``control.app``), one entry.

``meta`` is built from a whitelist (the route's path parameters, the caller's identity, a few query
parameters, and named fields of the JSON answer such as Commit or a token's id), so key and token
values and request bodies never reach it. A handler may add more through ``request[AUDIT_META]``.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import orjson
from aiohttp import web
from aiohttp.typedefs import Handler

from assetcdn.control.identity.auth import PRINCIPAL
from assetcdn.control.records.client_ip import request_ip
from assetcdn.control.records.request_log import control_entry
from assetcdn.control.records.service import AUDIT, REQUEST_LOG
from assetcdn.shared.cluster import PREFIX
from assetcdn.shared.middleware import REQUEST_ID

log = logging.getLogger(__name__)

# Fields of a JSON answer that may be copied into meta: identifiers and counts, never secrets.
ANSWER_FIELDS = {"Commit": "commit", "Path": "path", "File": "file", "Zone": "zone", "Hostname": "hostname",
                 "Mode": "mode", "Name": "name", "FilesRemoved": "filesRemoved", "Length": "bytes",
                 "EdgeStatus": "edgeStatus", "id": "id", "name": "name", "scopes": "scopes",
                 "purged": "purged", "generation": "generation"}
LIST_VALUED = {"scopes", "purged"}  # lists copied as they are (scopes, purged URLs or tags)
LIST_FIELDS = {"Files": "files"}  # copied as a count

ROUTE_AUDIT: web.AppKey[dict[web.AbstractRoute, str]] = web.AppKey("route_audit")
AUDIT_META = web.RequestKey("audit_meta", dict)


def _meta(request: web.Request, response: web.StreamResponse) -> dict[str, Any]:
    meta: dict[str, Any] = {"method": request.method, "route": request.match_info.route.resource.canonical
                            if request.match_info.route.resource else request.path}
    for name, value in request.match_info.items():
        meta["zone" if name == "id" else name] = value
    if "id" in request.query:
        meta["id"] = request.query["id"][:128]
    if "hostname" in request.query:
        meta["hostname"] = request.query["hostname"][:253]
    principal = request.get(PRINCIPAL)
    if principal is not None:
        meta["actor"] = f"{principal.kind}:{principal.name}"
    if isinstance(response, web.Response) and response.content_type == "application/json" and response.body:
        try:
            answer = orjson.loads(response.body)  # type: ignore[arg-type]
        except orjson.JSONDecodeError:
            answer = None
        if isinstance(answer, dict):
            for field, key in ANSWER_FIELDS.items():
                value = answer.get(field)
                if isinstance(value, str | int | float | bool) or (isinstance(value, list) and field in LIST_VALUED):
                    meta.setdefault(key, value)
            for field, key in LIST_FIELDS.items():
                if isinstance(answer.get(field), list):
                    meta[key] = len(answer[field])
            origin = answer.get("Origin")  # a pull zone's: where it pulls from (header values are never in it)
            if isinstance(origin, dict):
                for field, key in (("Url", "originUrl"), ("HostHeader", "originHost")):
                    if isinstance(origin.get(field), str):
                        meta[key] = origin[field]
    meta.update(request.get(AUDIT_META, {}))
    return meta


@web.middleware
async def audit_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    response = await handler(request)
    action = request.app[ROUTE_AUDIT].get(request.match_info.route)
    if action is None or not 200 <= response.status < 300:
        return response
    try:
        await request.app[AUDIT].append(
            action, ip=request_ip(request), user_agent=request.headers.get("User-Agent", ""),
            request_id=request.get(REQUEST_ID), meta=_meta(request, response))
    except Exception:  # the mutation is done; a failed audit write must not turn it into an error
        log.exception("audit entry for %s (request %s) could not be written", action, request.get(REQUEST_ID))
    return response


def _log_request(request: web.Request, status: int, started: float) -> None:
    request.app[REQUEST_LOG].append(control_entry(
        method=request.method, path=request.path, status=status,
        duration_ms=round((time.perf_counter() - started) * 1000, 1), request_id=request.get(REQUEST_ID),
        ip=request_ip(request)))


@web.middleware
async def request_log_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Outermost middleware, so it sees the final status (error envelopes included)."""
    if request.path.startswith(PREFIX + "/"):
        return await handler(request)
    started = time.perf_counter()
    try:
        response = await handler(request)
    except web.HTTPException as exc:  # redirects pass the envelope middleware as exceptions
        _log_request(request, exc.status, started)
        raise
    except BaseException:
        _log_request(request, 499, started)  # the client went away (cancelled) before an answer
        raise
    _log_request(request, response.status, started)
    return response
