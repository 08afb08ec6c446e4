"""Control with a pull zone from a scripted origin, and a way to start an edge worker (again) on one cache
directory: what the restart and disk-fault tests of pull zones share."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from aiohttp.test_utils import TestClient, TestServer

import assetcdn.control.app  # noqa: F401
import assetcdn.edge.app  # noqa: F401
from assetcdn import control, edge
from assetcdn.edge.app import EdgeIdentity
from assetcdn.shared.config import Settings, load_settings
from tests.support.control import ACCOUNT, SECRETS
from tests.support.origins import PREFIX, ScriptedOrigin, serve_origin
from tests.support.wait import wait_until

ZONE = "pulled"
Worker = Callable[[], Awaitable[TestClient]]


@asynccontextmanager
async def restartable_pull(aiohttp_server: Any, aiohttp_client: Any,
                           directory: Path) -> AsyncIterator[tuple[TestClient, ScriptedOrigin, Worker]]:
    """Control (its data under `directory`) with the pull zone ZONE from a scripted origin, the origin, and a way to
    start the edge's worker, its cache under `directory / "edge"`, again and again."""
    settings: Settings = load_settings(environ={"ASSETCDN_EDGE_CATCHUP_INTERVAL_S": "0.2",
                                                "ASSETCDN_EDGE_HEARTBEAT_INTERVAL_S": "0.5",
                                                "ASSETCDN_ORIGIN_ALLOW_LOOPBACK": "true",
                                                "ASSETCDN_TRANSFORM_CONCURRENCY": "1"})
    origin = ScriptedOrigin()
    server: TestServer = await serve_origin(origin)
    try:
        control_client = await aiohttp_client(await aiohttp_server(
            control.app.create_app(settings, SECRETS, directory / "data")))
        resp = await control_client.post("/api/core/zones", headers=ACCOUNT, json={
            "Name": ZONE, "Origin": {"Url": str(server.make_url(PREFIX))}})
        assert resp.status == 201, await resp.text()

        async def worker() -> TestClient:
            identity = EdgeIdentity(name="edge-r", worker=0, control_url=str(control_client.make_url("")).rstrip("/"),
                                    cache_dir=directory / "edge", advertise_host="127.0.0.1")
            return await aiohttp_client(edge.app.create_app(settings, SECRETS, identity))

        yield control_client, origin, worker
    finally:
        await server.close()


async def healthy(client: TestClient) -> None:
    """Once the worker answers its health check 200 (caught up with control)."""
    async def ready() -> bool:
        return (await client.get("/api/health")).status == 200

    await wait_until(ready, "the worker caught up")
