"""The edge side of control's pushes: /_cluster/push carries manifest changes and purges, /_cluster/tls
the TLS state (certificates and ACME answers).

Signed for this worker's member name, inside the time window, and accepted once (replays are refused).
"""

from __future__ import annotations

import orjson
from aiohttp import web

from assetcdn.edge.app_keys import NODE, SECRETS
from assetcdn.shared.cluster import ReplayGuard, verify_request
from assetcdn.shared.errors import ApiError
from assetcdn.shared.generation_push import GenerationPush, GenerationPushError
from assetcdn.shared.middleware import json_response
from assetcdn.shared.tls_state import TlsStateError

# Nonces this worker has accepted (set by `assetcdn.edge.app.create_cluster_app`; one per worker process).
PUSH_REPLAY_GUARD = web.AppKey("cluster_replay_guard", ReplayGuard)


async def _signed_message(request: web.Request) -> dict:
    body = await request.read()
    if not verify_request(request.app[SECRETS].cluster_secret, request.method, request.rel_url.path_qs, body,
                          request.headers, guard=request.app[PUSH_REPLAY_GUARD], audience=request.app[NODE].name):
        raise ApiError(401, "Unauthorized",
                       "Cluster requests must be signed with the cluster secret for this worker, once.")
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
