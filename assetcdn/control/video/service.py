"""Video on the control app: the ingester that makes HLS renditions of committed videos, and the demo
content a first start installs; the context that starts and stops it."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from aiohttp import web

from assetcdn.control.app_keys import DATA_DIR, DEMO, SETTINGS
from assetcdn.control.publishing.service import PUBLISHER
from assetcdn.control.storage.service import GIT, MANIFEST, ZONES
from assetcdn.control.video.ingest import DEMO_VIDEO_CACHE, VideoIngester, demo_video_size
from assetcdn.shared.hls import VIDEOS

VIDEO_INGEST = web.AppKey("video_ingest", VideoIngester)


@contextlib.asynccontextmanager
async def video_context(app: web.Application) -> AsyncIterator[None]:
    data_dir, manifest, publisher = app[DATA_DIR], app[MANIFEST], app[PUBLISHER]
    ingester = VideoIngester(app[GIT], publisher, data_dir / "video-work")
    try:
        publisher.listeners.append(ingester.on_commit)
        app[VIDEO_INGEST] = ingester
        demo_videos = data_dir / DEMO_VIDEO_CACHE
        demo_size = demo_video_size(int(app[SETTINGS].get("demo", "video_height")))
        if app[DEMO] and manifest.commit_id is None:
            # Only a first demo start draws the demo images: every other start goes without libvips.
            from assetcdn.control.publishing.demo import install_demo  # noqa: PLC0415

            await install_demo(publisher, app[ZONES])
            ingester.install_demo(demo_videos, demo_size)
        elif demo_videos.is_dir() and not all(f"stocks/videos/{v}/hls/index.json" in manifest.entries for v in VIDEOS):
            # A first start stopped before its demo videos were committed.
            ingester.install_demo(demo_videos, demo_size)
        ingester.resume(manifest.entries)
        yield
    finally:
        await ingester.close()
