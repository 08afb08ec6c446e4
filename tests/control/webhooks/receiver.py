"""A webhook receiver for tests: an aiohttp app on 127.0.0.1 that checks every signature, answers
with statuses a test chooses, can hold requests (a slow receiver), and lets a test wait (bounded) for
what it expects; and a resolver the test controls (no real DNS in tests)."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import socket
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web

WAIT_S = 30  # bound on any wait for a delivery on a loaded machine


@dataclass(frozen=True)
class Received:
    name: str
    headers: dict[str, str]
    body: bytes
    status: int        # what the receiver answered
    arrived: float     # time.time() when the request arrived

    @property
    def payload(self) -> dict[str, Any]:
        return orjson.loads(self.body)

    @property
    def event(self) -> str:
        return self.payload["event"]


class Receiver:
    def __init__(self) -> None:
        self.port = 0
        self.secrets: dict[str, str] = {}
        self.statuses: dict[str, list[int]] = defaultdict(list)   # answered in turn, then 200
        self.redirects: dict[str, str] = {}
        self.gates: dict[str, asyncio.Event] = {}                 # hold a hook's requests until set
        self.arrivals: dict[str, int] = defaultdict(int)          # requests that arrived (held or not)
        self.arrival_ids: dict[str, list[str]] = defaultdict(list)  # their X-Webhook-Id, in arrival order
        self.received: dict[str, list[Received]] = defaultdict(list)
        self.bad_signatures: list[str] = []
        self._changed = asyncio.Condition()

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/hook/{name}", self._handle)
        return app

    def url(self, name: str, host: str = "receiver.test") -> str:
        return f"http://{host}:{self.port}/hook/{name}"

    def hold(self, name: str) -> asyncio.Event:
        gate = self.gates[name] = asyncio.Event()
        return gate

    def delivered(self, name: str) -> list[Received]:
        return [r for r in self.received[name] if 200 <= r.status < 300]

    def events(self, name: str) -> list[str]:
        return [r.event for r in self.delivered(name)]

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        arrived = time.time()
        body = await request.read()
        self.arrivals[name] += 1
        self.arrival_ids[name].append(request.headers.get("X-Webhook-Id", ""))
        await self._notify()
        gate = self.gates.get(name)
        if gate is not None:
            await gate.wait()
        expected = "sha256=" + hmac.new(self.secrets.get(name, "").encode(), body, hashlib.sha256).hexdigest()
        if not hmac.compare_digest(expected, request.headers.get("X-Webhook-Signature", "")):
            self.bad_signatures.append(name)
            status = 401
        elif name in self.redirects:
            status = 302
        else:
            status = self.statuses[name].pop(0) if self.statuses[name] else 200
        self.received[name].append(Received(name, dict(request.headers), body, status, arrived))
        await self._notify()
        if status == 302:
            raise web.HTTPFound(self.redirects[name])
        return web.Response(status=status, text="ok" if status < 300 else "no")

    async def wait(self, condition: Callable[[], bool]) -> None:
        async with asyncio.timeout(WAIT_S):
            async with self._changed:
                await self._changed.wait_for(condition)


class FakeResolver:
    """Names a test decides: `names[host]` answers every lookup; `queued[host]` answers the next ones."""

    def __init__(self) -> None:
        self.names: dict[str, list[str]] = {}
        self.queued: dict[str, list[list[str]]] = defaultdict(list)
        self.lookups: list[str] = []

    async def addresses(self, host: str) -> list[str]:
        host = host.rstrip(".").lower()
        self.lookups.append(host)
        if self.queued[host]:
            return self.queued[host].pop(0)
        if host not in self.names:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return list(self.names[host])
