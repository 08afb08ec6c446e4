"""A video whose transcode a stop cut off (or left queued) is transcoded at control's next start, once."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from aiohttp.test_utils import TestClient, TestServer

import assetcdn.control.app  # noqa: F401
from assetcdn import control
from assetcdn.control.publishing.service import PUBLISHER
from assetcdn.control.storage.service import MANIFEST
from assetcdn.control.video.demo import write_synthetic_video
from assetcdn.control.video.service import VIDEO_INGEST
from assetcdn.shared.config import load_settings
from assetcdn.shared.hls import VideoIndex
from tests.integration.harness import LAZY_IMAGE_POOL
from tests.support.control import ACCESS, NO_MODEL, SECRETS

INDEX = "stocks/videos/nature/hls/index.json"


def control_client(data_dir: Path) -> TestClient:
    settings = load_settings(environ={**NO_MODEL, **LAZY_IMAGE_POOL})
    return TestClient(TestServer(control.app.create_app(settings, SECRETS, data_dir)))


async def test_a_source_left_untranscoded_by_a_stop_is_transcoded_at_the_next_start(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    source = write_synthetic_video(tmp_path / "nature.mp4", "nature", seconds=2, width=320, height=180, fps=5,
                                   audio=False).read_bytes()
    first = control_client(data_dir)
    await first.start_server()
    try:
        # As a stop before the transcode was committed leaves it: the source stored, no renditions.
        first.app[PUBLISHER].listeners.remove(first.app[VIDEO_INGEST].on_commit)
        resp = await first.put("/api/storage/stocks/videos/nature.mp4", data=source, headers=ACCESS)
        assert resp.status == 201, await resp.text()
    finally:
        await first.close()
    for start in ("the next start", "a start after it"):
        client = control_client(data_dir)
        await client.start_server()
        try:
            head = client.app[MANIFEST].commit_id
            await client.app[VIDEO_INGEST].wait_idle()
            assert INDEX in client.app[MANIFEST].entries, start
            if start == "a start after it":  # made once: nothing transcoded again
                assert client.app[MANIFEST].commit_id == head
            resp = await client.get("/api/storage/stocks/videos/nature/hls/index.json", headers=ACCESS)
            assert resp.status == 200
        finally:
            await client.close()


async def test_an_upload_over_a_demo_video_left_untranscoded_is_transcoded_at_the_next_start(tmp_path: Path) -> None:
    """The demo's index names no source: the upload that was to replace it is transcoded all the same."""
    data_dir = tmp_path / "data"
    demo = write_synthetic_video(tmp_path / "demo.mp4", "black", seconds=2, width=320, height=180, fps=5,
                                 audio=False).read_bytes()
    source = write_synthetic_video(tmp_path / "nature.mp4", "nature", seconds=2, width=320, height=180, fps=5,
                                   audio=False).read_bytes()
    first = control_client(data_dir)
    await first.start_server()
    try:
        await first.put("/api/storage/stocks/videos/nature.mp4", data=demo, headers=ACCESS)
        await first.app[VIDEO_INGEST].wait_idle()
        demo_index = first.app[MANIFEST].entries[INDEX]
        # The index as the demo's reads: no source named. Then an upload whose transcode a stop cuts off.
        resp = await first.get(f"/api/storage/{INDEX}", headers=ACCESS)
        index = VideoIndex.from_json(await resp.read())
        await first.put(f"/api/storage/{INDEX}", data=replace(index, source=None).to_json(), headers=ACCESS)
        first.app[PUBLISHER].listeners.remove(first.app[VIDEO_INGEST].on_commit)
        resp = await first.put("/api/storage/stocks/videos/nature.mp4", data=source, headers=ACCESS)
        assert resp.status == 201, await resp.text()
        source_blob = first.app[MANIFEST].entries["stocks/videos/nature.mp4"].blob_id
    finally:
        await first.close()
    client = control_client(data_dir)
    await client.start_server()
    try:
        await client.app[VIDEO_INGEST].wait_idle()
        entry = client.app[MANIFEST].entries[INDEX]
        assert entry.blob_id != demo_index.blob_id
        resp = await client.get(f"/api/storage/{INDEX}", headers=ACCESS)
        assert VideoIndex.from_json(await resp.read()).source == source_blob
    finally:
        await client.close()
