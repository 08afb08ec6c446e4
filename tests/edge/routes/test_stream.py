"""/api/stream through a real edge: a video uploaded to the stock pool is transcoded by control, and the
edge serves real HLS built from its index: every segment decodes on its own with PyAV.

Transcoding is the slow part, so control (with the video transcoded) is shared by the module, in the
module's event loop; each test gets its own edge, with an empty cache, in front of it.
"""

from __future__ import annotations

import io
from collections.abc import AsyncIterator
from pathlib import Path

import av
import pytest
import pytest_asyncio
from aiohttp.test_utils import TestClient, TestServer

import assetcdn.control.app  # noqa: F401
import assetcdn.edge.app  # noqa: F401
from assetcdn import control, edge
from assetcdn.control.storage.service import MANIFEST
from assetcdn.control.video.demo import write_synthetic_video
from assetcdn.control.video.service import VIDEO_INGEST
from assetcdn.edge.app import EdgeIdentity
from assetcdn.shared.config import Settings, load_settings
from assetcdn.shared.hls import VideoIndex
from tests.edge.hit_server import HitTestServer
from tests.integration.harness import LAZY_IMAGE_POOL
from tests.support.cdn import Cdn
from tests.support.control import ACCESS, METRICS, SECRETS
from tests.support.wait import wait_until

# The tests run in the module's event loop, where the shared control plane lives.
IN_MODULE_LOOP = pytest.mark.asyncio(loop_scope="module")
VIDEO = "nature"
SECONDS = 12  # a full 10 s segment and a short last one


def stream_settings() -> Settings:
    return load_settings(environ={"ASSETCDN_EDGE_CATCHUP_INTERVAL_S": "0.2", "ASSETCDN_EDGE_HEARTBEAT_INTERVAL_S": "0.5",
                                  **LAZY_IMAGE_POOL})


@pytest.fixture(scope="module")
def source_video(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    path = write_synthetic_video(tmp_path_factory.mktemp("video") / "nature.mp4", "nature", seconds=SECONDS,
                                 width=852, height=480, fps=10, audio=True)
    return path.read_bytes()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def control_client(tmp_path_factory: pytest.TempPathFactory, source_video: bytes) -> AsyncIterator[TestClient]:
    """Control with the video uploaded and transcoded, once for the module."""
    data_dir = tmp_path_factory.mktemp("stream-control") / "data"
    client = TestClient(TestServer(control.app.create_app(stream_settings(), SECRETS, data_dir)))
    await client.start_server()
    try:
        resp = await client.put(f"/api/storage/stocks/videos/{VIDEO}.mp4", data=source_video, headers=ACCESS)
        assert resp.status == 201, await resp.text()
        await client.app[VIDEO_INGEST].wait_idle()
        yield client
    finally:
        await client.close()


@pytest_asyncio.fixture(loop_scope="module")
async def cdn(control_client: TestClient, tmp_path: Path) -> AsyncIterator[Cdn]:
    """A fresh edge (empty cache) in front of the module's control, once it holds the HLS index."""
    identity = EdgeIdentity(name="edge-t", worker=0, control_url=str(control_client.make_url("")).rstrip("/"),
                            cache_dir=tmp_path / "edge", advertise_host="127.0.0.1")
    edge_client = TestClient(HitTestServer(edge.app.create_app(stream_settings(), SECRETS, identity)))
    await edge_client.start_server()
    cdn = Cdn(control_client, edge_client)
    try:
        async def ready() -> bool:
            if (await edge_client.get("/api/health")).status != 200:
                return False
            resp = await control_client.get("/api/health?deep=1", headers=METRICS)
            registered = any(e.get("name", "").startswith("edge-t") for e in (await resp.json()).get("edges", []))
            return registered and cdn.node.replica.get(f"stocks/videos/{VIDEO}/hls/index.json") is not None

        await wait_until(ready, "the edge registered and holding the HLS index")
        yield cdn
    finally:
        await edge_client.close()


async def text(cdn: Cdn, query: str) -> tuple[int, str, dict[str, str]]:
    resp = await cdn.edge.get(f"/api/stream?{query}")
    return resp.status, await resp.text(), dict(resp.headers)


def decode(segment: bytes) -> tuple[int, float, bool]:
    """(video frames, seconds covered, first frame is a keyframe) of one segment decoded on its own."""
    with av.open(io.BytesIO(segment), format="mpegts") as container:
        assert isinstance(container, av.container.InputContainer)
        stream = container.streams.video[0]
        frames = list(container.decode(stream))
    rate = stream.average_rate or stream.guessed_rate
    assert rate is not None
    return len(frames), len(frames) / float(rate), frames[0].key_frame


@IN_MODULE_LOOP
async def test_playlists_and_every_segment_of_every_rendition_decode(cdn: Cdn) -> None:
    status, master, headers = await text(cdn, f"video={VIDEO}")
    assert status == 200
    assert headers["Content-Type"].startswith("application/vnd.apple.mpegurl")
    lines = master.splitlines()
    assert lines[0] == "#EXTM3U"
    stream_infs = [line for line in lines if line.startswith("#EXT-X-STREAM-INF:")]
    uris = [lines[i + 1] for i, line in enumerate(lines) if line.startswith("#EXT-X-STREAM-INF:")]
    assert len(stream_infs) == 3
    for info in stream_infs:
        assert "BANDWIDTH=" in info and "RESOLUTION=" in info and 'CODECS="avc1.' in info and "mp4a.40.2" in info
    index_entry = cdn.node.replica.get(f"stocks/videos/{VIDEO}/hls/index.json")
    assert index_entry is not None
    version = index_entry.blob_id[:12]
    assert sorted(uris) == sorted(f"/api/stream?video={VIDEO}&quality={q}&v={version}" for q in (1080, 720, 480))

    index = VideoIndex.from_json(await (await cdn.edge.get(
        f"/stocks/videos/{VIDEO}/hls/index.json")).read())
    for quality in (1080, 720, 480):
        status, playlist, _ = await text(cdn, f"video={VIDEO}&quality={quality}")
        assert status == 200
        lines = playlist.splitlines()
        assert lines[:2] == ["#EXTM3U", "#EXT-X-VERSION:3"]
        assert "#EXT-X-PLAYLIST-TYPE:VOD" in lines and lines[-1] == "#EXT-X-ENDLIST"
        target = int(next(line for line in lines if line.startswith("#EXT-X-TARGETDURATION:")).split(":")[1])
        extinfs = [float(line[len("#EXTINF:"):-1]) for line in lines if line.startswith("#EXTINF:")]
        segment_uris = [lines[i + 1] for i, line in enumerate(lines) if line.startswith("#EXTINF:")]
        assert extinfs == [round(s.duration, 3) for s in index.rendition(quality).segments]
        assert all(d <= target for d in extinfs) and target == 10
        assert sum(extinfs) == pytest.approx(SECONDS, abs=0.2) and len(extinfs) == 2
        decoded_seconds = 0.0
        for uri in segment_uris:
            resp = await cdn.edge.get(uri)
            assert resp.status == 200
            assert resp.headers["Content-Type"] == "video/mp2t"
            frames, seconds, keyframe = decode(await resp.read())
            assert frames > 0 and keyframe
            decoded_seconds += seconds
        assert decoded_seconds == pytest.approx(sum(extinfs), abs=0.25)


@IN_MODULE_LOOP
async def test_segments_are_cached_for_a_year_and_support_ranges(cdn: Cdn) -> None:
    first = await cdn.edge.get(f"/api/stream?video={VIDEO}&quality=720&segment=1")
    body = await first.read()
    assert first.status == 200
    assert first.headers["Cache-Control"] == "public, max-age=31536000, immutable"
    assert first.headers["X-Cache"] == "MISS"
    again = await cdn.edge.get(f"/api/stream?video={VIDEO}&quality=720&segment=1")
    assert again.headers["X-Cache"] == "HIT" and await again.read() == body
    ranged = await cdn.edge.get(f"/api/stream?video={VIDEO}&quality=720&segment=1",
                                headers={"Range": "bytes=188-375"})
    assert ranged.status == 206 and await ranged.read() == body[188:376]
    playlist = await cdn.edge.get(f"/api/stream?video={VIDEO}&quality=720")
    assert playlist.headers["Cache-Control"] == "public, max-age=300"
    assert playlist.headers["Access-Control-Allow-Origin"] == "*"
    preflight = await cdn.edge.options("/api/stream")
    assert preflight.status == 204 and "Range" in preflight.headers["Access-Control-Allow-Headers"]


BAD_REQUESTS = [
    ("", 400, "Invalid video. Available: black, mount_fuji, nature"),
    ("video=unknown", 400, "Invalid video. Available: black, mount_fuji, nature"),
    (f"video={VIDEO}&quality=999", 400, "Invalid quality. Available: 1080, 720, 480"),
    (f"video={VIDEO}&quality=720&segment=-1", 400, "Invalid segment index"),
    (f"video={VIDEO}&quality=720&segment=abc", 400, "Invalid segment index"),
    (f"video={VIDEO}&quality=720&segment=3", 404, "Segment index out of range"),
    ("video=black", 404, "Video not found"),
]


@IN_MODULE_LOOP
async def test_bad_stream_requests_get_the_legacy_envelope(cdn: Cdn) -> None:
    for query, status, message in BAD_REQUESTS:
        resp = await cdn.edge.get(f"/api/stream?{query}")
        body = await resp.json()
        assert resp.status == status, query
        assert body["error"] == message and body["Message"] == message and body["HttpCode"] == status
        assert body["requestId"] and resp.headers["X-API-Version"] == "2026-04-01"
        # A player on another origin reads the error, not a CORS failure (hls.js would see status 0).
        assert resp.headers.get("Access-Control-Allow-Origin") == "*", query
    refused = await cdn.edge.get(f"/api/stream?video={VIDEO}&quality=720&segment=0", headers={"If-Match": '"other"'})
    assert refused.status == 412 and refused.headers.get("Access-Control-Allow-Origin") == "*"


def test_source_fixture_is_real_video(source_video: bytes, tmp_path: Path) -> None:
    with av.open(io.BytesIO(source_video)) as container:
        assert container.streams.video[0].codec_context.name == "h264"


async def first_segment(cdn: Cdn, video: str) -> tuple[str, bytes, str]:
    """(URL, bytes, Cache-Control) of the first 720p segment the variant playlist names."""
    status, playlist, _ = await text(cdn, f"video={video}&quality=720")
    assert status == 200, playlist
    lines = playlist.splitlines()
    uri = next(lines[i + 1] for i, line in enumerate(lines) if line.startswith("#EXTINF:"))
    resp = await cdn.edge.get(uri)
    assert resp.status == 200
    return uri, await resp.read(), resp.headers["Cache-Control"]


@IN_MODULE_LOOP
async def test_an_overwritten_video_is_played_from_urls_no_browser_holds_for_the_old_one(
        cdn: Cdn, tmp_path: Path) -> None:
    """Segments are immutable for a year, so a URL must never answer other bytes: a browser that played the
    video before it was overwritten would otherwise play its old first segment among the new ones."""
    ingester = cdn.control.app[VIDEO_INGEST]
    versions = []
    for scene in ("mount_fuji", "nature"):
        source = write_synthetic_video(tmp_path / f"{scene}.mp4", scene, seconds=3, width=320, height=180,
                                       fps=5, audio=False).read_bytes()
        await cdn.upload("stocks/videos/mount_fuji.mp4", source)
        await ingester.wait_idle()
        index_id = cdn.control.app[MANIFEST].entries["stocks/videos/mount_fuji/hls/index.json"].blob_id

        async def arrived(index_id: str = index_id) -> bool:
            entry = cdn.node.replica.get("stocks/videos/mount_fuji/hls/index.json")
            return entry is not None and entry.blob_id == index_id

        await wait_until(arrived, "the new HLS index reaching the edge")
        versions.append(await first_segment(cdn, "mount_fuji"))
    (old_uri, old_bytes, cache_control), (new_uri, new_bytes, _) = versions
    assert "immutable" in cache_control and old_bytes != new_bytes
    assert new_uri != old_uri
    stale = await cdn.edge.get(old_uri)  # an old playlist's URL never answers the new video's bytes
    assert stale.status == 404 and (await stale.json())["Message"] == "Video not found"


@IN_MODULE_LOOP
async def test_a_video_stream_cannot_name_is_not_transcoded(cdn: Cdn, tmp_path: Path) -> None:
    """/api/stream serves black, mount_fuji and nature only: another name's renditions would take the one
    transcoder and every edge's disk for nothing."""
    source = write_synthetic_video(tmp_path / "myclip.mp4", "black", seconds=2, width=320, height=180, fps=5,
                                   audio=False).read_bytes()
    await cdn.upload("stocks/videos/myclip.mp4", source)
    await cdn.control.app[VIDEO_INGEST].wait_idle()
    assert not [path for path in cdn.control.app[MANIFEST].entries if path.startswith("stocks/videos/myclip/")]
    resp = await cdn.edge.get("/api/stream?video=myclip")
    assert resp.status == 400 and (await resp.json())["Message"] == "Invalid video. Available: black, mount_fuji, nature"


@IN_MODULE_LOOP
async def test_a_camera_file_name_in_capitals_is_transcoded(cdn: Cdn, tmp_path: Path) -> None:
    """Cameras and phones name their files `.MP4` or `.MOV`: the extension is read in any case, as the dashboard
    reads it (assetcdn/control/dashboard/static/views/files.js) when it offers the video's HLS stream."""
    index_path = "stocks/videos/mount_fuji/hls/index.json"
    before = cdn.control.app[MANIFEST].entries.get(index_path)
    source = write_synthetic_video(tmp_path / "clip.mp4", "black", seconds=2, width=320, height=180, fps=5,
                                   audio=False).read_bytes()
    await cdn.upload("stocks/videos/mount_fuji.MOV", source)
    await cdn.control.app[VIDEO_INGEST].wait_idle()
    after = cdn.control.app[MANIFEST].entries.get(index_path)
    assert after is not None and after != before
