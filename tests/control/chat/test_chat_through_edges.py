"""Search and chat through real edges (`assetcdn up` with two edges on loopback): the chat's SSE
frames arrive as they are produced (nothing buffers them on the way), and the search limit is one
count for the client whichever edge it comes through."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import aiohttp
import orjson
import pytest
from aiohttp import web

from tests.integration.harness import RunningCdn, start_cdn

pytestmark = pytest.mark.integration


class GatedModel:
    """An OpenAI-compatible stream that sends one token, then holds the rest until `release` is set.
    It runs on its own thread and loop, so it outlives each test's event loop."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.runner: web.AppRunner | None = None
        self.port = 0

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)

        def chunk(text: str) -> bytes:
            return b"data: " + orjson.dumps({"choices": [{"delta": {"content": text}}]}) + b"\n\n"

        await response.write(chunk("first "))
        released = await self.loop.run_in_executor(None, self.release.wait, 60)
        await response.write(chunk("second" if released else "never released"))
        await response.write(b"data: [DONE]\n\n")
        return response

    async def _start(self) -> None:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._handle)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    def start(self) -> str:
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(timeout=30)
        return f"http://127.0.0.1:{self.port}/v1/chat/completions"

    def stop(self) -> None:
        self.release.set()
        if self.runner is not None:
            asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(timeout=30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=30)


@pytest.fixture(scope="module")
def model() -> Iterator[GatedModel]:
    gated = GatedModel()
    yield gated
    gated.stop()


@pytest.fixture(scope="module")
def cdn(tmp_path_factory: pytest.TempPathFactory, model: GatedModel) -> Iterator[RunningCdn]:
    url = model.start()
    # Without the sentence model (fuzzy search, word-overlap retrieval): what is tested here is the
    # path through the edges, and the cluster starts without a model load on a loaded machine.
    running = start_cdn(tmp_path_factory.mktemp("ai"), edges=2,
                        env_extra={"ASSETCDN_AI_CHAT_URL": url, "ASSETCDN_SEARCH_RATE_LIMIT_PER_MINUTE": "4",
                                   "ASSETCDN_SEARCH_SEMANTIC": "false"})
    yield running
    running.stop()


async def test_chat_frames_stream_through_an_edge_as_they_are_made(cdn: RunningCdn, model: GatedModel) -> None:
    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(timeout=timeout) as session, \
            session.post(f"{cdn.edge_urls[0]}/api/chat", json={"message": "What is a zone?"}) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/event-stream")
        assert resp.headers["Cache-Control"] == "no-cache, no-store"
        received = b""
        # The model holds its second token until we have seen the first one through the edge:
        # a buffering hop would deadlock here (and the model gives up after 60 s).
        while b'"text":"first "' not in received:
            line = await resp.content.readline()
            assert line, received
            received += line
        assert b"event: metadata" in received and b'"source":"ai"' in received
        model.release.set()
        rest = await resp.content.read()
    assert b'"text":"second"' in rest and rest.rstrip().split(b"\n\n")[-1].startswith(b"event: done")


async def test_the_search_limit_is_one_count_across_edges(cdn: RunningCdn) -> None:
    async with aiohttp.ClientSession() as session:
        statuses, remaining = [], []
        for i in range(5):
            edge = cdn.edge_urls[i % 2]
            async with session.get(f"{edge}/api/search", params={"q": f"logo {i}"}) as resp:
                statuses.append(resp.status)
                remaining.append(resp.headers.get("X-RateLimit-Remaining"))
                body = await resp.json()
        assert statuses == [200, 200, 200, 200, 429], statuses
        assert remaining == ["3", "2", "1", "0", "0"]
        assert body["error"] == "rate_limit_exceeded" and body["HttpCode"] == 429
