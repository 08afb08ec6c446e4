"""The client address control records for a call an edge forwarded: the one the edge saw, which the edge
signs; what the client wrote in its own X-Forwarded-For is not believed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestClient

import assetcdn.control.app  # noqa: F401
import assetcdn.edge.app  # noqa: F401
from assetcdn import control, edge
from assetcdn.edge.app import EdgeIdentity
from assetcdn.shared.config import load_settings
from tests.integration.harness import LAZY_IMAGE_POOL
from tests.support.control import ACCOUNT, SECRETS
from tests.support.wait import wait_until

CLIENT_ADDRESS = "127.0.0.2"  # a loopback address of its own, so the client is not taken for the edge


@pytest.fixture
async def cdn(aiohttp_server: Any, aiohttp_client: Any, tmp_path: Path) -> tuple[TestClient, TestClient]:
    """(control, edge): real apps on loopback, the edge forwarding to control."""
    settings = load_settings(environ={"ASSETCDN_EDGE_HEARTBEAT_INTERVAL_S": "0.5", **LAZY_IMAGE_POOL})
    control_server = await aiohttp_server(control.app.create_app(settings, SECRETS, tmp_path / "data"))
    identity = EdgeIdentity(name="edge-f", worker=0, control_url=str(control_server.make_url("")).rstrip("/"),
                            cache_dir=tmp_path / "edge", advertise_host="127.0.0.1")
    edge_client = await aiohttp_client(edge.app.create_app(settings, SECRETS, identity))

    async def edge_healthy() -> bool:
        return (await edge_client.get("/api/health")).status == 200

    await wait_until(edge_healthy, "edge health 200")
    return await aiohttp_client(control_server), edge_client


@pytest.mark.parametrize("client_headers", [{}, {"X-Forwarded-For": "203.0.113.66"}])
async def test_control_records_the_address_the_edge_saw(cdn: tuple[TestClient, TestClient],
                                                        client_headers: dict[str, str]) -> None:
    control_client, edge_client = cdn
    connector = aiohttp.TCPConnector(local_addr=(CLIENT_ADDRESS, 0))
    async with aiohttp.ClientSession(connector=connector) as http:
        async with http.post(edge_client.make_url("/api/core/zones"), json={"Name": "akande"},
                             headers={**ACCOUNT, **client_headers}) as resp:
            assert resp.status == 201, await resp.text()
    resp = await control_client.get("/api/core/audit-logs", headers=ACCOUNT)
    assert (await resp.json())["Entries"][0]["ip"] == CLIENT_ADDRESS
