"""GET /_cluster/shield/<generation>/<zone><path>: another edge asks this worker, the URL's shield, for a pull
zone's path (assetcdn/edge/shield.py), on this worker's cluster site. POST /_cluster/shield-invalidate: another
edge invalidated pull zone paths after an unsafe request; this worker drops its copies of them too.

Signed with the cluster secret for the ``shield`` audience and accepted once. The path is served by the pull
serve sequence as a client's request would be, with this edge's own config of the zone (the asking edge names
the zone, never the origin), except that the fill goes to the origin: a shield never asks another shield.
The client's address and scheme are the ones the asking edge forwarded. A shield behind the asking edge's
generation answers 409: it may not have applied a purge the asking edge has, and must not hand back what it
removed; so does one whose own fill of the path is asking a shield (ShieldLoop: its answer may wait for this one).
"""

from __future__ import annotations

import asyncio

import orjson
from aiohttp import web
from multidict import CIMultiDict

from assetcdn.edge.app_keys import NODE, SECRETS
from assetcdn.edge.cache.tags import path_tag, pull_path_tag
from assetcdn.edge.cdn_loop import NAME
from assetcdn.edge.routes.cluster import PUSH_REPLAY_GUARD
from assetcdn.edge.shield import (
    FROM_EDGE,
    MAX_INVALIDATED,
    SHIELD_AUDIENCE,
    SHIELD_CACHE,
    SHIELD_PATH,
)
from assetcdn.edge.site_config import PullZone
from assetcdn.edge.states.freshness import split_list
from assetcdn.edge.states.pull import serve_pull
from assetcdn.shared.cluster import (
    CONTENT_HEADER,
    NONCE_HEADER,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    verify_request,
)
from assetcdn.shared.errors import ApiError
from assetcdn.shared.middleware import json_response

MAX_INVALIDATION_BYTES = 64 * 1024
PATH_TAG_PREFIX = path_tag("")
ROUTE = SHIELD_PATH + "/{generation:[0-9]{1,12}}/{zone:[^/]+}/{path:.*}"
# The signature's fields are for this hop only: never passed on to the origin.
CLUSTER_FIELDS = frozenset(name.lower() for name in (TIMESTAMP_HEADER, NONCE_HEADER, SIGNATURE_HEADER, CONTENT_HEADER))


async def shield(request: web.Request) -> web.StreamResponse:
    node = request.app[NODE]
    if not verify_request(request.app[SECRETS].cluster_secret, "GET", request.raw_path, b"", request.headers,
                          guard=request.app[PUSH_REPLAY_GUARD], audience=SHIELD_AUDIENCE):
        raise ApiError(401, "Unauthorized", "Shield requests must be signed with the cluster secret, once.")
    if node.shields.asked_by_itself(request.headers[NONCE_HEADER]):  # this worker's own fill, by another address
        raise loop_refusal()
    generation, name = int(request.match_info["generation"]), request.match_info["zone"]
    if node.applied_generation < generation:
        raise ApiError(409, "ShieldBehind", f"This edge has applied generation {node.applied_generation}, not "
                       f"{generation} yet.")
    zone = node.config.pull_zones.get(name)
    if zone is None:
        raise ApiError(404, "NotPullZone", f"'{name}' is not a pull zone on this edge.")
    path = request.rel_url.raw_path[len(f"{SHIELD_PATH}/{generation}/{name}"):]
    if node.shields.asking(pull_path_tag(name, path)):  # its fill here waits for a shield: maybe for this request
        raise loop_refusal()
    headers = CIMultiDict((key, value) for key, value in without_asking_edges_mark(list(request.headers.items()), zone)
                          if key.lower() not in CLUSTER_FIELDS)
    scheme = headers.get("X-Forwarded-Proto", "")
    forwarded = request.clone(headers=headers, remote=headers.get("X-Forwarded-For") or request.remote or "",
                              scheme=scheme if scheme in ("http", "https") else request.scheme)
    # Both: an answer made whole in the handler is prepared with the request aiohttp has, not the clone.
    request[FROM_EDGE] = forwarded[FROM_EDGE] = True
    return await serve_pull(forwarded, zone, path, "")


def loop_refusal() -> ApiError:
    """The refusal of a shield request this worker's own fill of the path is waiting for, or may be (ShieldLoop)."""
    return ApiError(409, "ShieldLoop", "This edge is asking a shield for the path itself (another edge, as it sees "
                    "it, or this one by another address); ask the origin for this request.")


def without_asking_edges_mark(fields: list[tuple[str, str]], zone: PullZone) -> list[tuple[str, str]]:
    """`fields` less the CDN-Loop mark the asking edge appended for the zone's origin, its last CDN-Loop line
    (assetcdn/edge/cdn_loop.py): the shield, an edge of the same fleet, appends that mark itself, so the origin
    gets it once per pass through the fleet, after the client's own values, and a Vary'd answer is keyed on what a
    client's own request to the shield would send."""
    token = zone.origin.loop_token
    last = next((at for at in range(len(fields) - 1, -1, -1) if fields[at][0].lower() == NAME), None)
    if not token or last is None or fields[last][1] != token:
        return fields
    return fields[:last] + fields[last + 1:]


async def name_shield(request: web.BaseRequest, response: web.StreamResponse) -> None:
    """A shield's answer names the shield in its own Cache-Status member and carries no X-Cache, which the
    asking edge sets for its client; an error of its own has neither. A shield never asks another shield, so a
    shield's member it finds in the head it answers with is no hop of this answer: it is one an asking worker of
    this edge stored with its copy in the disk tier the workers share (the shield's member of an earlier fill or
    revalidation). It is left out: a copy revalidated through the shield again and again would otherwise come back
    with one member more each time (the 304's Cache-Status replaces the stored one) and its head grow without
    bound."""
    if not request.get(FROM_EDGE):
        return
    response.headers.popall("X-Cache", None)
    values = response.headers.getall("Cache-Status", [])
    if values:  # the pull sequence adds its member as a line of its own, after any the origin sent
        _, separator, parameters = values[-1].partition(";")
        response.headers.popall("Cache-Status")
        before = [member for member in split_list(values[:-1])
                  if member.split(";", 1)[0].strip() != SHIELD_CACHE]
        for value in (*before, f"{SHIELD_CACHE}{separator}{parameters}"):
            response.headers.add("Cache-Status", value)


async def invalidate(request: web.Request) -> web.Response:
    """Drop the copies of the path tags another edge names (``{"tags": ["path:<zone>/<path>", ...]}``)."""
    if request.content_length is None or request.content_length > MAX_INVALIDATION_BYTES:
        raise ApiError(413, "PayloadTooLarge", f"An invalidation is at most {MAX_INVALIDATION_BYTES} bytes, "
                       "with its Content-Length.")
    body = await request.read()
    if not verify_request(
            request.app[SECRETS].cluster_secret, "POST", request.raw_path, body, request.headers,
            guard=request.app[PUSH_REPLAY_GUARD], audience=SHIELD_AUDIENCE):
        raise ApiError(401, "Unauthorized", "Shield requests must be signed with the cluster secret, once.")
    try:
        tags = orjson.loads(body).get("tags")
    except (orjson.JSONDecodeError, AttributeError):
        tags = None
    if not isinstance(tags, list) or len(tags) > MAX_INVALIDATED or not all(
            isinstance(tag, str) and tag.startswith(PATH_TAG_PREFIX) for tag in tags):
        raise ApiError(400, "InvalidBody", f"'tags' must be a list of at most {MAX_INVALIDATED} path tags.")
    node = request.app[NODE]
    purged = await asyncio.get_running_loop().run_in_executor(None, node.cache.purge_tags, tags)
    return json_response({"purged": purged})
