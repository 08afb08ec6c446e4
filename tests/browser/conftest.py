"""Browser-test fixtures: the prerequisites (skip with the reason when absent), a real control
plane and edge serving the stream, and the player page."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from assetcdn.control.video.demo import write_synthetic_video
from assetcdn.control.video.service import VIDEO_INGEST
from tests.browser.headless_chromium import find_chromium
from tests.browser.player_page import player_app
from tests.support.cdn import CdnFactory, cdn_factory
from tests.support.wait import wait_until

HERE = Path(__file__).parent
HLS_JS = HERE / ".npm" / "node_modules" / "hls.js" / "dist" / "hls.min.js"
SETUP = "tests/browser/setup.sh"

ServerFactory = Callable[[web.Application], Awaitable[TestServer]]


@pytest.fixture
def make_cdn(aiohttp_client, tmp_path: Path) -> CdnFactory:  # type: ignore[no-untyped-def]
    """A real control and edge in one event loop, of its own for each test (tests/support/cdn.py)."""
    return cdn_factory(tmp_path, aiohttp_client)


@pytest.fixture(scope="session")
def chromium() -> str:
    """The Chromium binary; skips without one, except under CI=true, where a missing browser fails."""
    binary = find_chromium()
    if binary is None:
        reason = f"chromium is not installed (run {SETUP} as root, or apt-get install chromium)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true and {reason}: the browser tests must run in CI")
        pytest.skip(reason)
    return binary


@pytest.fixture(scope="session")
def hls_js() -> Path:
    """hls.js from npm; skips without it, except under CI=true, where a missing player fails as a missing browser
    does (`make setup` installs it: a player test skipped in CI would be a test that never runs)."""
    if not HLS_JS.is_file():
        reason = f"hls.js is not installed from npm (run {SETUP}; it needs node and npm)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true and {reason}: the browser tests must run in CI")
        pytest.skip(reason)
    return HLS_JS


@pytest.fixture(scope="session")
def nature_source(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """A 14-second nature clip: enough to cross 12 s and the segment edge at 10 s (5 frames a second:
    x264 and the player pay per frame, and playing past 12 s is what is tested)."""
    source = write_synthetic_video(tmp_path_factory.mktemp("browser-hls") / "nature.mp4", "nature",
                                   seconds=14, width=1280, height=720, fps=5, audio=True)
    return source.read_bytes()


@pytest.fixture
async def stream_base_url(make_cdn: CdnFactory, nature_source: bytes) -> str:
    """The real thing: the clip is uploaded to the stock pool, control transcodes it, and the edge
    serves /api/stream from the committed renditions."""
    cdn = await make_cdn()
    await cdn.upload("stocks/videos/nature.mp4", nature_source)
    await cdn.control.app[VIDEO_INGEST].wait_idle()

    async def index_arrived() -> bool:
        return cdn.node.replica.get("stocks/videos/nature/hls/index.json") is not None

    await wait_until(index_arrived, "the HLS index reaching the edge")
    return str(cdn.edge.make_url("/api/stream"))


@pytest.fixture
async def player_url(aiohttp_server: ServerFactory, hls_js: Path) -> AsyncIterator[str]:
    server = await aiohttp_server(player_app(HERE / "player.html", hls_js))
    yield str(server.make_url("/player.html"))
