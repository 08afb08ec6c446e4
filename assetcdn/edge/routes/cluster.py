"""The edge side of control's pushes: /_cluster/push carries manifest changes and purges, /_cluster/tls
the TLS state (certificates and ACME answers).

Signed for this worker's member name, inside the time window, and accepted once (replays are refused). The
signature is checked before any of the body is read, over the body hash control declares
(assetcdn/shared/cluster.py `verify_headers`), and the body is then held to that hash: a request that is not
control's is answered 401 unread, as control answers an edge's (assetcdn/control/routes/cluster.py).
"""

from __future__ import annotations

import hmac

import orjson
from aiohttp import web

from assetcdn.edge.app_keys import NODE, SECRETS
from assetcdn.shared.cluster import (
    CONTENT_HEADER,
    ReplayGuard,
    plausible,
    verify_headers,
    verify_request,
)
from assetcdn.shared.errors import ApiError
from assetcdn.shared.generation_push import GenerationPush, GenerationPushError
from assetcdn.shared.middleware import json_response
from assetcdn.shared.request_body import KB, abandon_body, read_hashed
from assetcdn.shared.tls_state import TlsStateError

# Nonces this worker has accepted (set by `assetcdn.edge.app.create_cluster_app`; one per worker process).
PUSH_REPLAY_GUARD = web.AppKey("cluster_replay_guard", ReplayGuard)


# The most of a body read before its signature is checked, from a sender that declares no body hash (control
# always declares one): before, the whole body (up to the cluster site's 16 MB) was read from anyone first.
UNDECLARED_LIMIT = 16 * KB


def _unauthorized(request: web.Request) -> ApiError:
    abandon_body(request)  # nothing of an unauthenticated body is read, nor drained
    return ApiError(401, "Unauthorized", "Cluster requests must be signed with the cluster secret for this worker, "
                    "once.")


async def _signed_message(request: web.Request) -> dict:
    secret, guard = request.app[SECRETS].cluster_secret, request.app[PUSH_REPLAY_GUARD]
    audience = request.app[NODE].name
    path_qs = request.rel_url.path_qs
    declared = request.headers.get(CONTENT_HEADER)
    if declared is not None:
        if not verify_headers(secret, request.method, path_qs, request.headers, guard=guard, audience=audience):
            raise _unauthorized(request)
        body, received = await read_hashed(request, request.client_max_size)
        if not hmac.compare_digest(received, declared):
            raise _unauthorized(request)
    else:
        if not plausible(request.headers):
            raise _unauthorized(request)
        body, _ = await read_hashed(request, min(request.client_max_size, UNDECLARED_LIMIT))
        if not verify_request(secret, request.method, path_qs, body, request.headers, guard=guard,
                              audience=audience):
            raise _unauthorized(request)
    # A signed message is control answering: after a partition heals the pushes it held back arrive first, and
    # misses should not be refused while this worker's own next probe is still on its way.
    request.app[NODE].control.heard_from()
    try:
        message = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise ApiError(400, "InvalidJson", "Cluster message is not JSON.") from None
    if not isinstance(message, dict):
        raise ApiError(400, "InvalidBody", "Cluster message must be an object.")
    return message


async def push(request: web.Request) -> web.Response:
    """A manifest generation (assetcdn/shared/generation_push.py); a malformed one changes nothing."""
    message = await _signed_message(request)
    try:
        pushed = GenerationPush.from_json(message)
    except GenerationPushError as exc:
        raise ApiError(400, "InvalidPush", str(exc)) from None
    generation, purged = await request.app[NODE].apply_push(pushed)
    return json_response({"generation": generation, "purged": purged})


async def tls(request: web.Request) -> web.Response:
    """A TLS state (assetcdn/shared/tls_state.py) applied whole; one not newer than the held one changes
    nothing. Answers the serial this worker holds now."""
    message = await _signed_message(request)
    state = request.app[NODE].tls
    try:
        applied = await state.apply(message)
    except TlsStateError as exc:
        raise ApiError(400, "InvalidTlsState", str(exc)) from None
    return json_response({"serial": state.serial, "applied": applied})
