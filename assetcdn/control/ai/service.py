"""Image analysis on the control app (alt text, colours, moderation, OCR, smart crop) and the context
that opens and closes it."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from aiohttp import web

from assetcdn.control.ai.analysis import AiVisionSettings, ImageAnalysis
from assetcdn.control.app_keys import COUNTERS, SETTINGS
from assetcdn.control.storage.service import DB, GIT, MANIFEST

IMAGE_ANALYSIS = web.AppKey("image_analysis", ImageAnalysis)


@contextlib.asynccontextmanager
async def ai_context(app: web.Application) -> AsyncIterator[None]:
    manifest = app[MANIFEST]
    analysis = ImageAnalysis(app[GIT], lambda: manifest.entries, app[DB],
                             AiVisionSettings.from_section(app[SETTINGS].section("ai_vision")), app[COUNTERS])
    await analysis.open()
    app[IMAGE_ANALYSIS] = analysis
    try:
        yield
    finally:
        await analysis.close()
