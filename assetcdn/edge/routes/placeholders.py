"""GET /api/lqip and GET /api/blurhash: tiny blurred WebP placeholders of an asset of this CDN.

Only relative asset paths are accepted (no fetches on a caller's behalf). A placeholder that is made
(not one already cached) counts against its client address's `placeholders_per_client` limit (429 with
Retry-After past it). The JSON answer is
kept in the edge cache for 24 h under the source's content id and tags (a purge or an
overwrite of the source drops it), looked up and made by the serve sequence's `obtain`
(assetcdn/edge/states/serve.py); the answer is JSON, not the cached body. Standard error envelope (assetcdn/shared/errors.py).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import orjson
from aiohttp import web

from assetcdn.edge.access import SourceRefused, find_source
from assetcdn.edge.app_keys import IMAGE_POOL, NODE
from assetcdn.edge.cache.entry import CachedObject
from assetcdn.edge.edge_config import request_host
from assetcdn.edge.routes.transform import take_client_misses
from assetcdn.edge.states.fetch import OriginUnavailable
from assetcdn.edge.states.serve import obtain
from assetcdn.edge.states.variant import Made, Variant
from assetcdn.edge.transform.jobs import blurhash_variant, lqip_variant
from assetcdn.edge.transform.placeholders import PlaceholderParams, parse_placeholder_params
from assetcdn.shared.counter_store import Limit
from assetcdn.shared.errors import ApiError, LegacyError
from assetcdn.shared.limits import placeholders_per_client
from assetcdn.shared.manifest import ManifestEntry
from assetcdn.shared.middleware import json_response

MAX_AGE_S = 86400
CACHE_CONTROL = f"public, max-age={MAX_AGE_S}"
Make = Callable[[bytes], Variant]   # a job of assetcdn/edge/transform/jobs.py with all but the source bound
# The image core speaks the legacy envelope; these endpoints answer in the standard one.
_CODES = {403: "Forbidden", 404: "AssetNotFound", 415: "UnsupportedMediaType", 422: "UndecodableImage",
          429: "TooManyRequests", 503: "ServiceUnavailable"}


def _standard(exc: LegacyError) -> ApiError:
    return ApiError(exc.status, _CODES.get(exc.status, "Error"), exc.message or exc.error, target="url",
                    headers=exc.headers)


async def _placeholder(request: web.Request, kind: str, params: PlaceholderParams,
                       job: Callable[..., Variant], *job_args: Any) -> tuple[dict[str, Any], str]:
    node, pool = request.app[NODE], request.app[IMAGE_POOL]
    try:
        entry: ManifestEntry = find_source(node, params.url, node.config.zone_for_host(request_host(request)))
    except SourceRefused as exc:
        raise ApiError(exc.status, exc.code, exc.message, target="url") from None
    spec = f"s{params.size}" + (f"-b{params.blur}" if params.blur is not None else "")
    make: Make = partial(job, entry.format, *job_args, pool.limits.max_pixels)
    limit = placeholders_per_client(node.settings)
    placeholder = Made(pool, f"{kind}1/{entry.blob_id}/{spec}", make, metric_format=kind, max_age_s=MAX_AGE_S,
                       before_make=lambda: _take_placeholder(request, limit))
    try:
        obj, status = await obtain(node, entry, placeholder)
    except OriginUnavailable:
        raise ApiError(502, "OriginUnreachable", f"The source '/{entry.path}' could not be fetched from the "
                       "control plane. Retry shortly.", target="url") from None
    except LegacyError as exc:
        raise _standard(exc) from None
    return orjson.loads(_body(obj)), status


async def _take_placeholder(request: web.Request, limit: Limit) -> None:
    await take_client_misses(request, (limit,), "placeholders")


def _body(obj: CachedObject) -> bytes:
    # A placeholder's JSON is a few KB: always in memory (memory_object_max_kb is far larger).
    return obj.body if obj.body is not None else obj.read_range(0, obj.size)


def _headers(status: str) -> dict[str, str]:
    return {"Cache-Control": CACHE_CONTROL, "X-Cache": status}


async def lqip(request: web.Request) -> web.Response:
    params = parse_placeholder_params(request.query, with_blur=True)
    body, status = await _placeholder(request, "lqip", params, lqip_variant, params.size, params.blur or 0)
    return json_response(body, headers=_headers(status))


async def blurhash(request: web.Request) -> web.Response:
    params = parse_placeholder_params(request.query, with_blur=False)
    body, status = await _placeholder(request, "blurhash", params, blurhash_variant, params.size)
    answer = {"url": "/" + params.url, **body, "source": "fresh" if status == "MISS" else "cached"}
    return json_response(answer, headers=_headers(status))
