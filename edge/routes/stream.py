"""GET/HEAD /api/stream: HLS for the stock videos. Playlists are built from the video's index (a manifest
entry); a segment is its byte range of the rendition, which is fetched from control once and cached,
and each served segment is cached on its own as well."""

from __future__ import annotations

import asyncio

from aiohttp import web

from edge.cache.entry import CachedObject, strong_etag
from edge.node import EdgeNode, source_tags
from edge.state import NODE
from edge.states.deliver import deliver
from edge.states.fetch import OriginUnavailable, fetch_asset, source_bytes
from edge.states.lookup import lookup
from shared.errors import LegacyError
from shared.hls import (
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
from shared.manifest import ManifestEntry

CORS = {"Access-Control-Allow-Origin": "*", "Access-Control-Expose-Headers": "Content-Range, Content-Length"}


def _entry(node: EdgeNode, path: str) -> ManifestEntry:
    entry = node.replica.get(path)
    if entry is None:
        raise LegacyError(404, VIDEO_NOT_FOUND)
    return entry


async def _index(node: EdgeNode, video: str) -> VideoIndex:
    entry = _entry(node, f"stocks/videos/{video}/hls/index.json")
    try:
        return VideoIndex.from_json(await source_bytes(node, entry))
    except OriginUnavailable:
        raise LegacyError(502, "Failed to fetch the video index") from None


async def _segment(node: EdgeNode, entry: ManifestEntry, number: int, offset: int, length: int) -> CachedObject:
    key = f"segment:{entry.blob_id}:{number}"

    async def fill() -> CachedObject:
        cached = lookup(node, key)
        if cached is not None:
            return cached
        rendition = await fetch_asset(node, entry)
        data = await asyncio.get_running_loop().run_in_executor(
            None, rendition.read_range, offset, offset + length)
        if len(data) != length:
            raise LegacyError(502, "Failed to fetch segment")
        return await asyncio.get_running_loop().run_in_executor(
            None, lambda: node.cache.put(key, data, SEGMENT_CONTENT_TYPE,
                                         strong_etag(f"{entry.sha256[:40]}-{number}"),
                                         source_tags(entry)))

    return await node.flight.run(key, fill)


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
    entry = _entry(node, f"stocks/videos/{wanted.video}/hls/{rendition.file}")
    cached = lookup(node, f"segment:{entry.blob_id}:{segment.index}")
    status = "HIT" if cached is not None else "MISS"
    try:
        obj = cached or await _segment(node, entry, segment.index, segment.offset, segment.length)
    except OriginUnavailable:
        raise LegacyError(502, "Failed to fetch segment") from None
    node.metrics.cache_result(status).inc()
    return await deliver(request, obj, cache_status=status, cache_control=SEGMENT_CACHE_CONTROL,
                         extra_headers=CORS, tags=entry.tags)


async def preflight(request: web.Request) -> web.Response:
    return web.Response(status=204, headers={**CORS, "Access-Control-Allow-Methods": "GET, HEAD, OPTIONS",
                                             "Access-Control-Allow-Headers": "Range",
                                             "Access-Control-Max-Age": "86400"})
