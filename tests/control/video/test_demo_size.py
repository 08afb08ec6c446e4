"""The size of the demo videos is `[demo] video_height` (16:9): control makes them at that size, and refuses
to start with a height the videos cannot be made at."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient

from assetcdn.control.app import create_app
from assetcdn.control.video.ingest import DEMO_VIDEO_CACHE
from assetcdn.shared.config import load_settings
from tests.support.control import ACCESS, NO_MODEL, SECRETS
from tests.support.wait import wait_until


async def test_the_demo_videos_are_made_at_the_configured_height(aiohttp_client, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    data_dir = tmp_path / "data"
    (data_dir / DEMO_VIDEO_CACHE).mkdir(parents=True)  # a first start stopped before its videos were committed
    settings = load_settings(environ={"ASSETCDN_DEMO_VIDEO_HEIGHT": "180", **NO_MODEL})
    control: TestClient = await aiohttp_client(create_app(settings, SECRETS, data_dir))

    async def made() -> bool:
        health = await (await control.get("/api/health")).json()
        assert health["demoVideos"] in ("making", "ready"), health
        return bool(health["demoVideos"] == "ready")

    await wait_until(made, "the demo videos made")
    resp = await control.get("/api/storage/stocks/videos/nature/hls/index.json", headers=ACCESS)
    assert resp.status == 200, await resp.text()
    renditions = json.loads(await resp.read())["renditions"]
    assert {(r["width"], r["height"]) for r in renditions} == {(320, 180)}


@pytest.mark.parametrize("height", ["200", "0", "2160"])
async def test_a_height_the_videos_cannot_be_made_at_stops_the_start(  # type: ignore[no-untyped-def]
        aiohttp_client, tmp_path: Path, height: str) -> None:
    settings = load_settings(environ={"ASSETCDN_DEMO_VIDEO_HEIGHT": height, **NO_MODEL})
    with pytest.raises(ValueError, match=f"demo.video_height must be a multiple of 36 from 180 to 1080, not {height}"):
        await aiohttp_client(create_app(settings, SECRETS, tmp_path / "data"))
