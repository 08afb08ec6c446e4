"""The control side of the cluster protocol (signed with the cluster secret for control; never public).

Every request is accepted once: its nonce is remembered for the time window and a replay gets 401. The
signature is checked before any of the body is read (over the body hash the sender declares), and each
route reads at most its own body limit (``CLUSTER_BODIES``), so an unsigned or oversized request costs
control no memory.
"""

from __future__ import annotations

import hmac
from typing import Any

import orjson
from aiohttp import web
from aiohttp.typedefs import Handler

from assetcdn.control.acme.service import CERTIFICATES
from assetcdn.control.app_keys import SECRETS, SETTINGS
from assetcdn.control.publishing.service import REGISTRY
from assetcdn.control.storage.service import EDGE_CONFIG, GIT, MANIFEST
from assetcdn.shared.cluster import (
    CONTENT_HEADER,
    PREFIX,
    ReplayGuard,
    plausible,
    verify_headers,
    verify_request,
)
from assetcdn.shared.errors import ApiError, bad_request
from assetcdn.shared.generation_push import GenerationPush
from assetcdn.shared.middleware import json_response
from assetcdn.shared.request_body import KB, abandon_body, read_hashed
from assetcdn.shared.secrets import secret_fingerprint

CLUSTER_BODY = web.RequestKey("cluster_body", bytes)
# Nonces control has accepted (set by `assetcdn.control.app.create_app`; control is one process).
EDGE_REPLAY_GUARD = web.AppKey("edge_replay_guard", ReplayGuard)

# The largest body of each edge->control message; a route not named takes none (the GETs).
SMALL_MESSAGE = 16 * KB  # register, heartbeat: a name, a URL, a generation
CLUSTER_BODIES = {("POST", PREFIX + "/register"): SMALL_MESSAGE, ("POST", PREFIX + "/heartbeat"): SMALL_MESSAGE,
                  ("POST", PREFIX + "/leave"): SMALL_MESSAGE}
# An analytics batch (up to 10,000 rows in each of four lists) may be as large as an upload.
ANALYTICS_PATH = PREFIX + "/analytics"


def cluster_body_limit(method: str, path: str, max_upload_bytes: int) -> int:
    if method == "POST" and path == ANALYTICS_PATH:
        return max_upload_bytes + 1024 * KB
    return CLUSTER_BODIES.get((method, path), 0)


def _unauthorized(request: web.Request) -> ApiError:
    abandon_body(request)  # nothing of an unauthenticated body is read, nor drained
    return ApiError(401, "Unauthorized", "Cluster requests must be signed with the cluster secret, once.")


@web.middleware
async def cluster_auth_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    if not request.path.startswith(PREFIX + "/"):
        return await handler(request)
    secret, guard = request.app[SECRETS].cluster_secret, request.app[EDGE_REPLAY_GUARD]
    path_qs = request.rel_url.path_qs
    limit = cluster_body_limit(request.method, request.path, int(request.app[SETTINGS].get("control",
                                                                                           "max_upload_bytes")))
    declared = request.headers.get(CONTENT_HEADER)
    if declared is not None:
        if not verify_headers(secret, request.method, path_qs, request.headers, guard=guard):
            raise _unauthorized(request)
        body, received = await read_hashed(request, limit)
        if not hmac.compare_digest(received, declared):
            raise _unauthorized(request)
    else:
        # A sender that does not declare its body's hash: only a small body is read before the signature is known.
        if not plausible(request.headers):
            raise _unauthorized(request)
        body, _ = await read_hashed(request, min(limit, SMALL_MESSAGE))
        if not verify_request(secret, request.method, path_qs, body, request.headers, guard=guard):
            raise _unauthorized(request)
    request[CLUSTER_BODY] = body
    return await handler(request)


def _message(request: web.Request) -> dict[str, Any]:
    try:
        message = orjson.loads(request[CLUSTER_BODY] or b"{}")
    except orjson.JSONDecodeError:
        raise bad_request("Cluster message is not JSON.", code="InvalidJson") from None
    if not isinstance(message, dict):
        raise bad_request("Cluster message must be an object.", code="InvalidBody")
    return message


def _generation(message: dict[str, Any]) -> int:
    """The edge's generation (0 when it sends none): a whole number that a generation can be, which control keeps
    and writes (the registry's list of edges, /api/health) as JSON of at most 64 bits."""
    generation = message.get("generation", 0)
    if type(generation) is not int or not 0 <= generation < 2**63:
        raise bad_request("'generation' must be a whole number from 0 to 2**63 - 1.", code="InvalidBody",
                          target="generation")
    return generation


async def register(request: web.Request) -> web.Response:
    message = _message(request)
    name, url = message.get("name"), message.get("url")
    if not isinstance(name, str) or not isinstance(url, str):
        raise bad_request("register needs 'name' and 'url'.", code="InvalidBody")
    request.app[REGISTRY].register(name, url, _generation(message))
    settings, secrets = request.app[SETTINGS], request.app[SECRETS]
    # The edge compares it with its own signed-URL secret's (assetcdn/edge/control_client.py `SIGNED_URL_DIFFERS`).
    signed = secret_fingerprint(secrets.cluster_secret, "signed_url_secret", secrets.signed_url_secret)
    return json_response({"generation": request.app[MANIFEST].generation,
                          "heartbeat_s": settings.get("edge", "heartbeat_interval_s"),
                          "edges": fleet(request), "secrets": {"signed_url_secret": signed}})


async def heartbeat(request: web.Request) -> web.Response:
    message = _message(request)
    url = message.get("url")
    known = request.app[REGISTRY].heartbeat(str(message.get("name")), _generation(message),
                                            url if isinstance(url, str) else "")
    return json_response({"known": known, "generation": request.app[MANIFEST].generation, "edges": fleet(request)})


async def leave(request: web.Request) -> web.Response:
    """An edge worker stopping: `{"left": true}` once control has forgotten it (false: not registered at that
    address, e.g. after control restarted, or another worker took its name since)."""
    message = _message(request)
    name, url = message.get("name"), message.get("url")
    if not isinstance(name, str) or not isinstance(url, str):
        raise bad_request("leave needs 'name' and 'url'.", code="InvalidBody")
    return json_response({"left": request.app[REGISTRY].leave(name, url)})


def fleet(request: web.Request) -> list[dict[str, str]]:
    """The live edge workers and their cluster addresses: each edge picks a pull zone URL's shield among them
    (assetcdn/edge/shield.py), so every edge that knows the same list picks the same one."""
    return [{"name": edge.name, "url": edge.url} for edge in request.app[REGISTRY].live_edges()]


async def changes(request: web.Request) -> web.Response:
    manifest = request.app[MANIFEST]
    try:
        since = int(request.query.get("since", "0"))
    except ValueError:
        raise bad_request("'since' must be an integer generation.", target="since") from None
    # The answer describes exactly `generation`: a generation recorded while it is made is left to the next
    # push or catch-up, so the edge never holds a purge twice or a generation number behind what it applied.
    generation, commit, entries = manifest.generation, manifest.commit_id, manifest.snapshot()
    config_version = await request.app[EDGE_CONFIG].version()
    tls_serial = request.app[CERTIFICATES].state().serial  # an edge behind it pulls GET /_cluster/tls
    delta = await manifest.changes_since(since, until=generation)
    if delta is None:  # the history the edge needs is gone: a full snapshot
        answer = GenerationPush(generation, commit, config_version, entries=tuple(entries), tls_serial=tls_serial)
    else:
        answer = GenerationPush(generation, commit, config_version, delta.pushed_changes(), delta.pushed_purges(),
                                tls_serial=tls_serial)
    return json_response(answer.to_json())


async def config(request: web.Request) -> web.Response:
    return json_response(await request.app[EDGE_CONFIG].snapshot())


async def tls_state(request: web.Request) -> web.Response:
    """The TLS state (ACME answers, certificates with sealed keys) for an edge that starts or catches up."""
    return json_response(request.app[CERTIFICATES].state().to_message())


async def blob(request: web.Request) -> web.Response:
    blob_id = request.match_info["blob_id"]
    if len(blob_id) != 40 or any(c not in "0123456789abcdef" for c in blob_id):
        raise bad_request("Blob ids are 40 lower-case hex characters.", target="blob_id")
    git = request.app[GIT]
    data = await git.run(git.read_blob, blob_id)
    if data is None:
        raise ApiError(404, "BlobNotFound", f"No blob {blob_id}.")
    return web.Response(body=data, content_type="application/octet-stream")
