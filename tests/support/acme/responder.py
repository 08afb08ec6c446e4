"""A stand-in edge worker for control-side ACME tests: it registers with control over the signed cluster
protocol, holds the TLS state control pushes to it (``POST /_cluster/tls``, signed for its member name), and
answers ``/.well-known/acme-challenge/<token>`` from that state on the port Pebble validates, counting hits."""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter

import orjson
from aiohttp import web
from aiohttp.test_utils import TestClient

from assetcdn.shared.cluster import PREFIX, ReplayGuard, sign_request, verify_request
from assetcdn.shared.tls_state import TLS_STATE_PATH, TlsState

CHALLENGE_PREFIX = "/.well-known/acme-challenge/"


class ChallengeResponder:
    def __init__(self, name: str, cluster_secret: str, port: int) -> None:
        self.name = name
        self.port = port
        self._secret = cluster_secret
        self._guard = ReplayGuard()
        self.state = TlsState()
        self.states: list[TlsState] = []  # every state accepted, in order
        self.hits: Counter[str] = Counter()  # challenge requests per token
        self._runner: web.AppRunner | None = None
        self._heartbeat: asyncio.Task[None] | None = None
        self.apply_delay_s = 0.0  # how long a pushed state takes to be applied and acknowledged (a busy edge)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post(PREFIX + TLS_STATE_PATH, self._receive)
        app.router.add_get(CHALLENGE_PREFIX + "{token}", self._challenge)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()
        # Port 0: the one the system gave, bound before anything is told of it (no other process can take it
        # between a free port being picked and bound).
        self.port = self._runner.addresses[0][1]

    async def join(self, control: TestClient) -> None:
        """Register with control and keep heartbeating, as an edge worker does."""
        await self._signed(control, "/register", {"name": self.name, "url": self.url, "generation": 0})
        self._heartbeat = asyncio.create_task(self._beat(control))

    async def _beat(self, control: TestClient) -> None:
        while True:
            await asyncio.sleep(2)
            with contextlib.suppress(Exception):
                await self._signed(control, "/heartbeat", {"name": self.name, "generation": 0})

    async def _signed(self, control: TestClient, path: str, message: dict[str, object]) -> None:
        body = orjson.dumps({"v": 1, **message})
        resp = await control.post(PREFIX + path, data=body, headers={
            "Content-Type": "application/json", **sign_request(self._secret, "POST", PREFIX + path, body)})
        assert resp.status == 200, await resp.text()

    async def stop(self) -> None:
        if self._heartbeat is not None:
            self._heartbeat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._heartbeat
        if self._runner is not None:
            await self._runner.cleanup()

    async def _receive(self, request: web.Request) -> web.Response:
        body = await request.read()
        if not verify_request(self._secret, "POST", request.rel_url.path_qs, body, request.headers,
                              guard=self._guard, audience=self.name):
            return web.json_response({"error": "unsigned"}, status=401)
        state = TlsState.from_message(orjson.loads(body))
        await asyncio.sleep(self.apply_delay_s)
        if state.serial > self.state.serial:  # a later message replaces an earlier one
            self.state = state
            self.states.append(state)
        return web.json_response({"serial": self.state.serial})

    async def _challenge(self, request: web.Request) -> web.Response:
        token = request.match_info["token"]
        self.hits[token] += 1
        answer = self.state.challenges.get(token)
        if answer is None:
            return web.Response(status=404, text="no such challenge")
        return web.Response(text=answer, content_type="text/plain")
