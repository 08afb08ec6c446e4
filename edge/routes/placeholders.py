"""GET /api/lqip and GET /api/blurhash: tiny blurred WebP placeholders of an asset of this CDN.

Only relative asset paths are accepted (no fetches on a caller's behalf). The JSON answer is
kept in the edge cache for 24 h under the source's content id and tags (a purge or an
overwrite of the source drops it). Standard error envelope (contract-notes §4).
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Callable
from typing import Any

import orjson
from aiohttp import web

from edge.access import SourceRefused, public_source
from edge.cache.entry import CachedObject
from edge.state import IMAGE_POOL, NODE
from edge.states.fetch import OriginUnavailable
from edge.states.variant import Variant, cached_variant
from edge.transform.placeholders import (
    PlaceholderParams,
    make_blurhash_placeholder,
    make_lqip,
    parse_placeholder_params,
)
from shared.errors import ApiError, LegacyError, utc_now_iso
from shared.manifest import ManifestEntry
from shared.middleware import json_response

MAX_AGE_S = 86400
CACHE_CONTROL = f"public, max-age={MAX_AGE_S}"
JSON = "application/json"
Build = Callable[[bytes, str, int], dict[str, Any]]   # (source, source format, max pixels) -> fields
# The image core speaks the legacy envelope; these endpoints answer in the standard one.
_CODES = {403: "Forbidden", 404: "AssetNotFound", 415: "UnsupportedMediaType", 422: "UndecodableImage",
          503: "ServiceUnavailable"}


def _standard(exc: LegacyError) -> ApiError:
    return ApiError(exc.status, _CODES.get(exc.status, "Error"), exc.message or exc.error, target="url",
                    headers=exc.headers)


def _data_uri(webp: bytes) -> str:
    return "data:image/webp;base64," + base64.b64encode(webp).decode("ascii")


async def _placeholder(request: web.Request, kind: str, params: PlaceholderParams,
                       build: Build) -> tuple[dict[str, Any], str]:
    node, pool = request.app[NODE], request.app[IMAGE_POOL]
    try:
        entry: ManifestEntry = public_source(node, params.url, node.config.zone_for_host(request.host))
    except SourceRefused as exc:
        raise ApiError(exc.status, exc.code, exc.message, target="url") from None
    spec = f"s{params.size}" + (f"-b{params.blur}" if params.blur is not None else "")
    key = f"{kind}1/{entry.blob_id}/{spec}"

    def make(source: bytes) -> Variant:
        return Variant(orjson.dumps(build(source, entry.format, pool.max_pixels)), JSON)

    try:
        obj, status = await cached_variant(node, pool, entry, key, make, metric_format=kind, max_age_s=MAX_AGE_S)
    except OriginUnavailable:
        raise ApiError(502, "OriginUnreachable", f"The source '/{entry.path}' could not be fetched from the "
                       "control plane. Retry shortly.", target="url") from None
    except LegacyError as exc:
        raise _standard(exc) from None
    return orjson.loads(_body(obj)), status


def _body(obj: CachedObject) -> bytes:
    # A placeholder's JSON is a few KB: always in memory (memory_object_max_kb is far larger).
    return obj.body if obj.body is not None else obj.read_range(0, obj.size)


def _headers(status: str) -> dict[str, str]:
    return {"Cache-Control": CACHE_CONTROL, "X-Cache": status}


async def lqip(request: web.Request) -> web.Response:
    params = parse_placeholder_params(request.query, with_blur=True)

    def build(source: bytes, source_format: str, max_pixels: int) -> dict[str, Any]:
        webp, width = make_lqip(source, source_format, params.size, params.blur or 0, max_pixels=max_pixels)
        return {"lqip": _data_uri(webp), "bytes": len(webp), "width": width, "dateGenerated": utc_now_iso()}

    body, status = await _placeholder(request, "lqip", params, build)
    return json_response(body, headers=_headers(status))


async def blurhash(request: web.Request) -> web.Response:
    params = parse_placeholder_params(request.query, with_blur=False)

    def build(source: bytes, source_format: str, max_pixels: int) -> dict[str, Any]:
        webp, width, real_blurhash = make_blurhash_placeholder(source, source_format, params.size,
                                                               max_pixels=max_pixels)
        # `hash` is what the published service calls its blurhash: the SHA-256 prefix of the WebP.
        return {"hash": hashlib.sha256(webp).hexdigest()[:40], "dataUri": _data_uri(webp), "width": width,
                "bytes": len(webp), "dateGenerated": utc_now_iso(), "blurhash": real_blurhash}

    body, status = await _placeholder(request, "blurhash", params, build)
    answer = {"url": "/" + params.url, **body, "source": "cached" if status == "HIT" else "fresh"}
    return json_response(answer, headers=_headers(status))
