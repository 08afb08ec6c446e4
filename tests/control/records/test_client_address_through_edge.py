"""The client address control records for a call an edge forwarded: the one the edge saw, which the edge
signs; what the client wrote in its own X-Forwarded-For is not believed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp.test_utils import TestClient

import assetcdn.control.app  # noqa: F401
import assetcdn.edge.app  # noqa: F401
from assetcdn import control, edge
from assetcdn.edge.app import EdgeIdentity
from assetcdn.shared.cluster import FORWARDED_HEADER, sign_forwarded
from assetcdn.shared.config import load_settings
from tests.integration.harness import LAZY_IMAGE_POOL
from tests.support.control import ACCOUNT, SECRETS
from tests.support.sockets import raw_answer
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


async def test_a_forwarded_for_that_is_not_utf8_is_not_a_500(cdn: tuple[TestClient, TestClient]) -> None:
    """A client's X-Forwarded-For in bytes that are not UTF-8: the edge signs the header it forwards (the client's
    value, then the address it saw), and that signature took the value as text, a 500 for every forwarded call. Sent
    to control with a signature of the right shape, the check of it failed the same way. Neither believes the value."""
    control_client, edge_client = cdn
    for name, client in (("edge", edge_client), ("control", control_client)):
        assert client.server.port is not None
        body = orjson.dumps({"Name": f"raw-{name}"})
        signed = sign_forwarded(SECRETS.cluster_secret, "203.0.113.66")  # well formed, for another value
        answer = await raw_answer(client.server.port, (
            f"POST /api/core/zones HTTP/1.1\r\nHost: 127.0.0.1\r\nAccountKey: {SECRETS.account_key}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n{FORWARDED_HEADER}: {signed}\r\n"
            "Connection: close\r\n").encode() + b"X-Forwarded-For: 203.0.113.\xff\r\n\r\n" + body)
        assert answer.startswith(b"HTTP/1.1 201 "), (name, answer[:300])
    entries = (await (await control_client.get("/api/core/audit-logs", headers=ACCOUNT)).json())["Entries"]
    assert [entry["ip"] for entry in entries[:2]] == ["127.0.0.1", "127.0.0.1"]
