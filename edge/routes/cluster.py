"""The edge side of control's pushes: /_cluster/push carries manifest changes and purges. Signed only."""

from __future__ import annotations

import orjson
from aiohttp import web

from edge.state import NODE, SECRETS
from shared.cluster import verify_request
from shared.errors import ApiError
from shared.middleware import json_response


async def _signed_message(request: web.Request) -> dict:
    body = await request.read()
    if not verify_request(request.app[SECRETS].cluster_secret, request.method, request.rel_url.path_qs, body,
                          request.headers):
        raise ApiError(401, "Unauthorized", "Cluster requests must be signed with the cluster secret.")
    message = orjson.loads(body)
    if not isinstance(message, dict):
        raise ApiError(400, "InvalidBody", "Cluster message must be an object.")
    return message


async def push(request: web.Request) -> web.Response:
    message = await _signed_message(request)
    generation, purged = await request.app[NODE].apply_push(message)
    return json_response({"generation": generation, "purged": purged})

