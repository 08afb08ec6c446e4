"""The page that loads hls.js, served from its own origin so the edge's CORS headers are exercised."""

from __future__ import annotations

from pathlib import Path

from aiohttp import web


def player_app(player_page: Path, hls_js: Path) -> web.Application:
    app = web.Application()

    async def page(request: web.Request) -> web.FileResponse:
        return web.FileResponse(player_page)

    async def script(request: web.Request) -> web.FileResponse:
        return web.FileResponse(hls_js)

    app.router.add_get("/player.html", page)
    app.router.add_get("/hls.min.js", script)
    return app
