"""GET/HEAD /api/stream: HLS for the stock videos, served by the serve sequence (assetcdn/edge/states/serve.py).
A playlist is built from the video's index (a manifest entry) and cached on its own under the index's content
id; a segment is its byte range of the rendition: the rendition is fetched from control once and cached, and
each served segment is cached on its own as well."""

from __future__ import annotations

from functools import partial

from aiohttp import web

from assetcdn.edge.app_keys import NODE
from assetcdn.edge.cache.entry import strong_etag
from assetcdn.edge.node import EdgeNode
from assetcdn.edge.states.fetch import OriginUnavailable, source_bytes
from assetcdn.edge.states.keys import playlist_key, segment_key
from assetcdn.edge.states.serve import Refusals, ServePolicy, serve, source_for
from assetcdn.edge.states.variant import Built, ByteRange
from assetcdn.shared.cors import PUBLIC_READ, cross_origin, preflight
from assetcdn.shared.errors import LegacyError
from assetcdn.shared.hls import (
    PLAYLIST_CACHE_CONTROL,
    PLAYLIST_CONTENT_TYPE,
    SEGMENT_CACHE_CONTROL,
    SEGMENT_CONTENT_TYPE,
    VERSION_CHARS,
    VIDEO_NOT_FOUND,
    VideoIndex,
    master_playlist,
    parse_stream_query,
    variant_playlist,
)
from assetcdn.shared.manifest import ManifestEntry

CORS = {**PUBLIC_READ, "Access-Control-Expose-Headers": "Content-Range, Content-Length"}
REFUSALS = Refusals(
    source=lambda exc: LegacyError(exc.status, VIDEO_NOT_FOUND if exc.status == 404 else exc.message,
                                   headers=exc.headers),
    unreachable=lambda entry: LegacyError(502, "Failed to fetch segment"),
    purged=lambda: LegacyError(503, "The segment was purged while it was being delivered. Retry."),
)
SEGMENT_POLICY = ServePolicy(SEGMENT_CACHE_CONTROL, REFUSALS, headers=CORS)
PLAYLIST_POLICY = ServePolicy(PLAYLIST_CACHE_CONTROL, Refusals(
    source=REFUSALS.source,
    unreachable=lambda entry: LegacyError(502, "Failed to fetch the video index"),
    purged=lambda: LegacyError(503, "The playlist was purged while it was being delivered. Retry."),
), headers=CORS)
PLAYLIST_TYPE = f"{PLAYLIST_CONTENT_TYPE}; charset=utf-8"   # as the playlists were answered before they were cached


def _index_entry(node: EdgeNode, video: str) -> ManifestEntry:
    return source_for(node, f"stocks/videos/{video}/hls/index.json", None, REFUSALS)


async def _index(node: EdgeNode, entry: ManifestEntry) -> VideoIndex:
    try:
        return VideoIndex.from_json(await source_bytes(node, entry))
    except OriginUnavailable:
        raise LegacyError(502, "Failed to fetch the video index") from None


def _playlist(video: str, quality: int | None, version: str, index_json: bytes) -> bytes:
    index = VideoIndex.from_json(index_json)
    text = (master_playlist(video, index, version=version) if quality is None
            else variant_playlist(video, quality, index, version=version))
    return text.encode()


async def _stream(request: web.Request) -> web.StreamResponse:
    node = request.app[NODE]
    wanted = parse_stream_query(request.query)
    index_entry = _index_entry(node, wanted.video)
    version = index_entry.blob_id[:VERSION_CHARS]
    if wanted.version is not None and wanted.version != version:
        # A URI of a playlist of an upload since overwritten: its bytes are gone (and cached immutable elsewhere).
        raise LegacyError(404, VIDEO_NOT_FOUND)
    if not wanted.wants_segment:
        quality = None if wanted.wants_master else wanted.quality
        playlist = Built(playlist_key(index_entry.blob_id, quality),
                         partial(_playlist, wanted.video, quality, version), PLAYLIST_TYPE)
        return await serve(request, index_entry, playlist, PLAYLIST_POLICY)
    assert wanted.quality is not None and wanted.segment is not None
    rendition = (await _index(node, index_entry)).rendition(wanted.quality)
    segment = rendition.segment(wanted.segment)
    entry = source_for(node, f"stocks/videos/{wanted.video}/hls/{rendition.file}", None, REFUSALS)
    part = ByteRange(segment_key(entry.blob_id, segment.index), segment.offset, segment.length,
                     SEGMENT_CONTENT_TYPE, strong_etag(f"{entry.sha256[:40]}-{segment.index}"))
    return await serve(request, entry, part, SEGMENT_POLICY)


# CORS on the errors too: a player on another origin reads the 404, not a blocked response.
stream = cross_origin(_stream, CORS)
stream_preflight = preflight(CORS, "Range")
