"""GET /api/lqip and GET /api/blurhash: tiny blurred WebP placeholders of an asset of this CDN.

Only relative asset paths are accepted (no fetches on a caller's behalf). A placeholder that is made
(not one already cached) counts against its client address's `placeholders_per_client` limit (429 with
Retry-After past it). The JSON answer is
kept in the edge cache for 24 h under the source's content id and tags (a purge or an
overwrite of the source drops it), looked up, made and answered by the serve sequence (assetcdn/edge/states/serve.py)
like every delivery route (503 when control is needed and unreachable, the retry, the bytes-served count); the
answer is JSON built from the cached body. Any origin may read it, errors too (assetcdn/shared/cors.py). A url naming a pull zone's image takes the pull zone's variant
sequence (assetcdn/edge/states/pull_variant.py): kept while its source is, answered with at most the source's
remaining freshness (and at most 24 h). Standard error envelope (assetcdn/shared/errors.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import Any

import orjson
from aiohttp import web

from assetcdn.edge.app_keys import IMAGE_POOL, NODE
from assetcdn.edge.cache.entry import CachedObject
from assetcdn.edge.client_limits import refund_client_misses, take_client_misses
from assetcdn.edge.site_config import request_host, tenant_path
from assetcdn.edge.states.keys import placeholder_key
from assetcdn.edge.states.pull_source import pull_source_path, variant_cache_control
from assetcdn.edge.states.pull_variant import serve_pull_variant
from assetcdn.edge.states.serve import Refusals, ServePolicy, serve, source_for
from assetcdn.edge.states.variant import Made
from assetcdn.edge.transform.jobs import Variant, blurhash_variant, lqip_variant
from assetcdn.edge.transform.options import AssetUrlError, check_stored_source
from assetcdn.edge.transform.placeholder_params import PlaceholderParams, parse_placeholder_params
from assetcdn.shared.cors import RATE_LIMITED_READ, cross_origin
from assetcdn.shared.counter_store import Limit
from assetcdn.shared.errors import ApiError, LegacyError
from assetcdn.shared.limits import placeholders_per_client
from assetcdn.shared.manifest import ManifestEntry
from assetcdn.shared.middleware import json_response

MAX_AGE_S = 86400
CACHE_CONTROL = f"public, max-age={MAX_AGE_S}"
Make = Callable[[bytes], Variant]   # a job of assetcdn/edge/transform/jobs.py with all but the source bound
Answer = Callable[[dict[str, Any], str], dict[str, Any]]   # the JSON answered from the cached JSON and X-Cache
# The image core speaks the legacy envelope; these endpoints answer in the standard one.
_CODES = {403: "Forbidden", 404: "AssetNotFound", 415: "UnsupportedMediaType", 422: "UndecodableImage",
          429: "TooManyRequests", 503: "ServiceUnavailable"}


def _standard(exc: LegacyError) -> ApiError:
    return ApiError(exc.status, _CODES.get(exc.status, "Error"), exc.message or exc.error, target="url",
                    headers=exc.headers)


def _unreachable(entry: ManifestEntry) -> ApiError:
    return ApiError(503, "OriginUnreachable", f"The source '/{entry.path}' is not cached on this edge and the "
                    "control plane cannot be reached. Retry shortly.", target="url")


REFUSALS = Refusals(
    source=lambda exc: ApiError(exc.status, exc.code, exc.message, target="url", headers=exc.headers),
    unreachable=_unreachable,
    purged=lambda: ApiError(503, "PurgedDuringDelivery", "The placeholder was purged while it was being "
                            "delivered. Retry.", target="url"),
)


def _policy(answer: Answer) -> ServePolicy:
    def respond(obj: CachedObject, status: str) -> web.Response:
        return json_response(answer(orjson.loads(_body(obj)), status))

    return ServePolicy(CACHE_CONTROL, REFUSALS, answer=respond, headers=RATE_LIMITED_READ)


async def _placeholder(request: web.Request, kind: str, params: PlaceholderParams, answer: Answer,
                       job: Callable[..., Variant], *job_args: Any) -> web.StreamResponse:
    node, pool = request.app[NODE], request.app[IMAGE_POOL]
    host_zone = node.config.zone_for_host(request_host(request))
    limit = placeholders_per_client(node.settings)

    def placeholder(source_format: str, source_id: str) -> Made:
        make: Make = partial(job, source_format, *job_args, pool.limits.max_pixels,
                             max_svg_filter_pixels=pool.limits.max_svg_filter_pixels)
        return Made(pool, placeholder_key(kind, source_id, params.size, params.blur), make, metric_format=kind,
                    max_age_s=MAX_AGE_S, before_make=lambda: _take_placeholder(request, limit),
                    refund=lambda refused: _refund_placeholder(request, refused))

    try:
        pulled = pull_source_path(node.config, host_zone, params.url)
        if pulled is not None:
            return await serve_pull_variant(request, pulled, REFUSALS, lambda source: (
                placeholder(source.format, source.source_id),
                replace(_policy(answer), cache_control=variant_cache_control(source, MAX_AGE_S))))
        url = tenant_path(host_zone, "/" + params.url)[1:]  # `/v1/...` on a zone's own host: its file, as delivered
        try:
            check_stored_source(url)
        except AssetUrlError as exc:
            raise ApiError(400, "InvalidUrl", exc.message, target="url") from exc
        entry = source_for(node, url, host_zone, REFUSALS)
        return await serve(request, entry, placeholder(entry.format, entry.blob_id), _policy(answer))
    except LegacyError as exc:
        raise _standard(exc) from None


async def _take_placeholder(request: web.Request, limit: Limit) -> None:
    await take_client_misses(request, (limit,), "placeholders")


async def _refund_placeholder(request: web.Request, refused: bool) -> None:
    # A placeholder that failed keeps its slot (the pool worked); one the pool refused before running it does not.
    if refused:
        await refund_client_misses(request)


def _body(obj: CachedObject) -> bytes:
    # A placeholder's JSON is a few KB: always in memory (memory_object_max_kb is far larger).
    return obj.body if obj.body is not None else obj.read_range(0, obj.size)


async def _lqip(request: web.Request) -> web.StreamResponse:
    params = parse_placeholder_params(request.query, with_blur=True)
    return await _placeholder(request, "lqip", params, lambda body, _status: body,
                              lqip_variant, params.size, params.blur or 0)


async def _blurhash(request: web.Request) -> web.StreamResponse:
    params = parse_placeholder_params(request.query, with_blur=False)

    def answer(body: dict[str, Any], status: str) -> dict[str, Any]:
        return {"url": "/" + params.url, **body, "source": "fresh" if status == "MISS" else "cached"}

    return await _placeholder(request, "blurhash", params, answer, blurhash_variant, params.size)


# Made for pages, which fetch() them from another origin: readable there, errors too (assetcdn/shared/cors.py).
# A 429's Retry-After too (assetcdn/shared/limits.py placeholders_per_client).
lqip, blurhash = cross_origin(_lqip, RATE_LIMITED_READ), cross_origin(_blurhash, RATE_LIMITED_READ)
