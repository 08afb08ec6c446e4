"""A real control app and a real edge app in one event loop, talking HTTP.

`start_cdn_apps` starts both with settings from `load_settings(environ=...)`, waits until the edge is healthy
and registered with control, and returns a `Cdn` with upload helpers. Tests talk to the edge over HTTP like a
browser and to control's storage and purge APIs like an operator. The per-test `make_cdn` fixture
(`cdn_factory`) is in the conftest.py of each folder that uses it; `shared_cdn_apps` is for module-scoped ones.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

import assetcdn.control.app  # noqa: F401
import assetcdn.edge.app  # noqa: F401
from assetcdn import control, edge
from assetcdn.edge.app import EdgeIdentity
from assetcdn.edge.app_keys import NODE
from assetcdn.edge.node import EdgeNode
from assetcdn.shared.config import Settings, load_settings
from tests.edge.hit_server import HitTestServer
from tests.integration.harness import LAZY_IMAGE_POOL
from tests.support.control import ACCESS, ACCOUNT, METRICS, NO_MODEL, SECRETS
from tests.support.sockets import raw_answer
from tests.support.wait import WAIT_S, wait_until

PURGE = {"x-api-key": SECRETS.purge_key}
ZONE = "pics"


@dataclass
class Cdn:
    control: TestClient
    edge: TestClient

    @property
    def node(self) -> EdgeNode:
        return self.edge.app[NODE]

    async def upload(self, cdn_path: str, data: bytes) -> dict[str, Any]:
        """PUT through control's storage API; returns once this edge holds the new version."""
        resp = await self.control.put(f"/api/storage/{cdn_path}", data=data, headers=ACCESS)
        assert resp.status == 201, await resp.text()
        body: dict[str, Any] = await resp.json()
        digest = hashlib.sha256(data).hexdigest()

        async def arrived() -> bool:
            entry = self.node.replica.get(cdn_path)
            return entry is not None and entry.sha256 == digest

        await wait_until(arrived, f"{cdn_path} reaching the edge")
        return body

    async def purge_urls(self, *urls: str) -> dict[str, Any]:
        resp = await self.control.post("/api/purge", json={"urls": list(urls)}, headers=PURGE)
        assert resp.status == 200, await resp.text()
        return await resp.json()


CdnFactory = Callable[..., Awaitable[Cdn]]


async def raw_status(cdn: Cdn, target: str, host: str) -> int:
    """The status of `GET <target>` sent as is (an absolute-form target is not what clients send)."""
    assert cdn.edge.server.port is not None
    answer = await raw_answer(cdn.edge.server.port,
                              f"GET {target} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
    return int(answer.split(b" ", 2)[1])


def test_settings(env: dict[str, str]) -> Settings:
    """The settings `env` gives, with the tests' quick catch-up and heartbeat, the image pool started on
    first use with one worker, control's search without the sentence model, and control's wait for the edges'
    acknowledgements as long as the tests' other waits (WAIT_S). Tests read an answer's `edges` (acknowledged,
    latencies, entries removed): control answers as soon as every edge acknowledged, so the wait costs nothing
    where the edge answers, but the default second is not always enough for an edge on a loaded machine, and an
    edge still applying a push at the answer is listed as pending."""
    return load_settings(environ={"ASSETCDN_EDGE_CATCHUP_INTERVAL_S": "0.2",
                                  "ASSETCDN_EDGE_HEARTBEAT_INTERVAL_S": "0.5",
                                  "ASSETCDN_CONTROL_PUSH_WAIT_MS": str(int(WAIT_S * 1000)), **LAZY_IMAGE_POOL,
                                  **NO_MODEL, **env})


def edge_worker_app(settings: Settings, control_client: TestClient, root: Path, edge_name: str, *,
                    worker: int = 0, workers: int = 0) -> web.Application:
    """Worker `worker` of edge `edge_name` (of `workers`; 0: not known), not yet served: its cache under `root`,
    shared by the edge's workers as the edge process shares it."""
    identity = EdgeIdentity(name=edge_name, worker=worker, control_url=str(control_client.make_url("")).rstrip("/"),
                            cache_dir=root / "edge", advertise_host="127.0.0.1", workers=workers)
    return edge.app.create_app(settings, SECRETS, identity)


async def control_and_edge_app(root: Path, serve: Callable[[Any], Awaitable[TestClient]], env: dict[str, str],
                               edge_name: str, *, workers: int = 0) -> tuple[TestClient, web.Application]:
    """Control served by `serve` under `root`, and an edge app (worker 0 of `workers`, not yet served) that
    names it, with `test_settings(env)`."""
    settings = test_settings(env)
    control_client = await serve(control.app.create_app(settings, SECRETS, root / "data"))
    return control_client, edge_worker_app(settings, control_client, root, edge_name, workers=workers)


async def register_and_make_zone(control_client: TestClient, edge_name: str) -> None:
    """Returns once control lists the edge and the tests' zone exists."""
    async def registered() -> bool:
        resp = await control_client.get("/api/health?deep=1", headers=METRICS)
        return any(e.get("name", "").startswith(edge_name) for e in (await resp.json()).get("edges", []))

    await wait_until(registered, "edge registered with control")
    resp = await control_client.post("/api/core/zones", json={"Name": ZONE}, headers=ACCOUNT)
    assert resp.status == 201, await resp.text()


async def start_cdn_apps(root: Path, serve: Callable[[Any], Awaitable[TestClient]], env: dict[str, str], *,
                         hit_path: bool = True) -> Cdn:
    """Control and edge apps under `root`, each served by `serve` (an aiohttp test server and client); returns
    once the edge is healthy and registered and the zone exists."""
    control_client, app = await control_and_edge_app(root, serve, env, "edge-t")
    # Served as the edge process serves it: hits answered by assetcdn/edge/fastpath/, the rest handed to the app;
    # without the hit path (`hit_path=False`) the application's serve sequence answers every request.
    edge_client = await serve(HitTestServer(app) if hit_path else app)

    async def edge_healthy() -> bool:
        return (await edge_client.get("/api/health")).status == 200

    await wait_until(edge_healthy, "edge health 200")
    await register_and_make_zone(control_client, "edge-t")
    return Cdn(control_client, edge_client)


def cdn_factory(root: Path, serve: Callable[[Any], Awaitable[TestClient]]) -> CdnFactory:
    """What the `make_cdn` fixtures return: `await make_cdn(hit_path=..., **env)` starts a CDN under `root`
    served by `serve` (pytest-aiohttp's `aiohttp_client`, which stops it after the test)."""
    async def start(*, hit_path: bool = True, **env: str) -> Cdn:
        return await start_cdn_apps(root, serve, env, hit_path=hit_path)

    return start


@asynccontextmanager
async def shared_cdn_apps(root: Path, **env: str) -> AsyncIterator[Cdn]:
    """One CDN for the tests of a module that only add and read their own assets (module-scoped fixtures
    cannot use pytest-aiohttp's per-test servers); stopped when the module's tests are done."""
    clients: list[TestClient] = []

    async def serve(app: Any) -> TestClient:
        client = TestClient(app if isinstance(app, TestServer) else TestServer(app))
        await client.start_server()
        clients.append(client)
        return client

    try:
        yield await start_cdn_apps(root, serve, env)
    finally:
        for client in reversed(clients):   # the edge first, so it stops before its control plane
            await client.close()
