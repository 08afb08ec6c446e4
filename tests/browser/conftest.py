"""Browser-test fixtures: the prerequisites (skip with the reason when absent), a stream to
play, and the player page. To test a real edge, override ``stream_base_url``."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from control.video.demo import write_synthetic_video
from control.video.transcode import transcode_hls
from shared.hls import VideoIndex
from tests.browser.headless_chromium import find_chromium
from tests.browser.stand_in_stream import player_app, stand_in_stream_app

HERE = Path(__file__).parent
HLS_JS = HERE / ".npm" / "node_modules" / "hls.js" / "dist" / "hls.min.js"
SETUP = "tests/browser/setup.sh"

ServerFactory = Callable[[web.Application], Awaitable[TestServer]]


@pytest.fixture(scope="session")
def chromium() -> str:
    binary = find_chromium()
    if binary is None:
        pytest.skip(f"chromium is not installed (run {SETUP} as root, or apt-get install chromium)")
    return binary


@pytest.fixture(scope="session")
def hls_js() -> Path:
    if not HLS_JS.is_file():
        pytest.skip(f"hls.js is not installed from npm (run {SETUP}; it needs node and npm)")
    return HLS_JS


@pytest.fixture(scope="session")
def stream_videos(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[VideoIndex, Path]]:
    """A 22-second nature clip in three renditions: enough to cross 12 s and a segment edge."""
    work = tmp_path_factory.mktemp("browser-hls")
    source = write_synthetic_video(work / "nature.mp4", "nature", seconds=22, width=1280,
                                   height=720, fps=10, audio=True)
    index = transcode_hls(source, work / "nature", preset="ultrafast")
    return {"nature": (index, work / "nature")}


@pytest.fixture
async def stream_base_url(aiohttp_server: ServerFactory,
                          stream_videos: dict[str, tuple[VideoIndex, Path]]) -> str:
    """Where ``/api/stream`` is served. Today a stand-in built from the HLS core."""
    server = await aiohttp_server(stand_in_stream_app(stream_videos))
    return str(server.make_url("/api/stream"))


@pytest.fixture
async def player_url(aiohttp_server: ServerFactory, hls_js: Path) -> AsyncIterator[str]:
    server = await aiohttp_server(player_app(HERE / "player.html", hls_js))
    yield str(server.make_url("/player.html"))
