"""GET/HEAD /api/stream: HLS for the stock videos. Playlists are built from the video's index (a manifest
entry); a segment is its byte range of the rendition, served by the serve sequence
(assetcdn/edge/states/serve.py): the rendition is fetched from control once and cached, and each served
segment is cached on its own as well."""

from __future__ import annotations

from aiohttp import web

from assetcdn.edge.app_keys import NODE
from assetcdn.edge.cache.entry import strong_etag
from assetcdn.edge.node import EdgeNode
from assetcdn.edge.states.fetch import OriginUnavailable, source_bytes
from assetcdn.edge.states.keys import segment_key
from assetcdn.edge.states.serve import Refusals, ServePolicy, serve, source_for
from assetcdn.edge.states.variant import ByteRange
from assetcdn.shared.errors import LegacyError
from assetcdn.shared.hls import (
    PLAYLIST_CACHE_CONTROL,
    PLAYLIST_CONTENT_TYPE,
    SEGMENT_CACHE_CONTROL,
    SEGMENT_CONTENT_TYPE,
    VIDEO_NOT_FOUND,
    VideoIndex,
    master_playlist,
    parse_stream_query,
    variant_playlist,
)

CORS = {"Access-Control-Allow-Origin": "*", "Access-Control-Expose-Headers": "Content-Range, Content-Length"}
REFUSALS = Refusals(
    source=lambda exc: LegacyError(exc.status, VIDEO_NOT_FOUND if exc.status == 404 else exc.message),
    unreachable=lambda entry: LegacyError(502, "Failed to fetch segment"),
    purged=lambda: LegacyError(503, "The segment was purged while it was being delivered. Retry."),
)
SEGMENT_POLICY = ServePolicy(SEGMENT_CACHE_CONTROL, REFUSALS, headers=CORS)


async def _index(node: EdgeNode, video: str) -> VideoIndex:
    entry = source_for(node, f"stocks/videos/{video}/hls/index.json", None, REFUSALS)
    try:
        return VideoIndex.from_json(await source_bytes(node, entry))
    except OriginUnavailable:
        raise LegacyError(502, "Failed to fetch the video index") from None


async def stream(request: web.Request) -> web.StreamResponse:
    node = request.app[NODE]
    wanted = parse_stream_query(request.query)
    index = await _index(node, wanted.video)
    if wanted.wants_master:
        return web.Response(text=master_playlist(wanted.video, index), content_type=PLAYLIST_CONTENT_TYPE,
                            headers={"Cache-Control": PLAYLIST_CACHE_CONTROL, **CORS})
    assert wanted.quality is not None
    if not wanted.wants_segment:
        return web.Response(text=variant_playlist(wanted.video, wanted.quality, index),
                            content_type=PLAYLIST_CONTENT_TYPE,
                            headers={"Cache-Control": PLAYLIST_CACHE_CONTROL, **CORS})
    assert wanted.segment is not None
    rendition = index.rendition(wanted.quality)
    segment = rendition.segment(wanted.segment)
    entry = source_for(node, f"stocks/videos/{wanted.video}/hls/{rendition.file}", None, REFUSALS)
    part = ByteRange(segment_key(entry.blob_id, segment.index), segment.offset, segment.length,
                     SEGMENT_CONTENT_TYPE, strong_etag(f"{entry.sha256[:40]}-{segment.index}"))
    return await serve(request, entry, part, SEGMENT_POLICY)


async def preflight(request: web.Request) -> web.Response:
    return web.Response(status=204, headers={**CORS, "Access-Control-Allow-Methods": "GET, HEAD, OPTIONS",
                                             "Access-Control-Allow-Headers": "Range",
                                             "Access-Control-Max-Age": "86400"})
