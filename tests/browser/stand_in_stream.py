"""A stand-in for the edge's ``/api/stream``, built from the HLS core, for the browser test.

It exists until the browser test points at a real edge (override ``stream_base_url``).
It serves what the spec says a client sees: playlists, segments as byte ranges of the
rendition file, legacy-envelope errors, and CORS for the player page's origin.
"""

from __future__ import annotations

from pathlib import Path

import orjson
from aiohttp import web

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

VIDEOS_KEY = web.AppKey("videos", dict[str, tuple[VideoIndex, Path]])
CORS = {"Access-Control-Allow-Origin": "*", "Access-Control-Allow-Headers": "Range",
        "Access-Control-Expose-Headers": "Content-Range, Content-Length"}


async def stream(request: web.Request) -> web.StreamResponse:
    try:
        wanted = parse_stream_query(request.query)
        if wanted.video not in request.app[VIDEOS_KEY]:
            raise LegacyError(404, VIDEO_NOT_FOUND)
        index, directory = request.app[VIDEOS_KEY][wanted.video]
        if wanted.segment is not None:
            assert wanted.quality is not None
            rendition = index.rendition(wanted.quality)
            segment = rendition.segment(wanted.segment)
            with (directory / rendition.file).open("rb") as f:
                f.seek(segment.offset)
                body = f.read(segment.length)
            return web.Response(body=body, content_type=SEGMENT_CONTENT_TYPE,
                                headers={"Cache-Control": SEGMENT_CACHE_CONTROL, **CORS})
        if wanted.quality is None:
            text = master_playlist(wanted.video, index, base=request.path)
        else:
            text = variant_playlist(wanted.video, wanted.quality, index, base=request.path)
        return web.Response(text=text, content_type=PLAYLIST_CONTENT_TYPE,
                            headers={"Cache-Control": PLAYLIST_CACHE_CONTROL, **CORS})
    except LegacyError as error:
        return web.Response(body=orjson.dumps(error.body("stand-in")), status=error.status,
                            content_type="application/json", headers=CORS)


def stand_in_stream_app(videos: dict[str, tuple[VideoIndex, Path]]) -> web.Application:
    app = web.Application()
    app[VIDEOS_KEY] = videos
    app.router.add_get("/api/stream", stream)
    return app


def player_app(player_page: Path, hls_js: Path) -> web.Application:
    """The page that loads hls.js; separate from the stream so the stream can be any edge."""
    app = web.Application()

    async def page(request: web.Request) -> web.FileResponse:
        return web.FileResponse(player_page)

    async def script(request: web.Request) -> web.FileResponse:
        return web.FileResponse(hls_js)

    app.router.add_get("/player.html", page)
    app.router.add_get("/hls.min.js", script)
    return app
