"""Control's /_cluster routes check the signature before they read a body, and read at most their own
route's limit: an unsigned or forged request is answered while its body is still on the way."""

from __future__ import annotations

import asyncio
import hashlib
import time

import orjson
import pytest
from aiohttp.test_utils import TestClient

from assetcdn.shared.cluster import CONTENT_HEADER, PREFIX, sign_request
from tests.control.expect import expect_error
from tests.support.control import METRICS, SECRETS

DECLARED_SIZE = 20 * 1024 * 1024
ANSWER_WAIT_S = 30.0  # an answer that needs the rest of the body never comes: the body is never sent


async def status_with_body_withheld(control: TestClient, headers: dict[str, str]) -> int:
    """The status control answers a POST /_cluster/analytics that announces 20 MB and sends only 1 KB of it."""
    assert control.server.host is not None and control.server.port is not None
    reader, writer = await asyncio.open_connection(control.server.host, control.server.port)
    try:
        head = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
        writer.write(f"POST {PREFIX}/analytics HTTP/1.1\r\nHost: control\r\nContent-Type: application/json\r\n"
                     f"Content-Length: {DECLARED_SIZE}\r\n{head}\r\n".encode() + b"{" + b" " * 1023)
        await writer.drain()
        status_line = await asyncio.wait_for(reader.readline(), ANSWER_WAIT_S)
        return int(status_line.split()[1])
    finally:
        writer.close()


async def test_an_unsigned_body_is_refused_before_it_is_read(control: TestClient) -> None:
    assert await status_with_body_withheld(control, {}) == 401


async def test_a_forged_signature_is_refused_before_the_body_is_read(control: TestClient) -> None:
    forged = sign_request("not-the-cluster-secret", "POST", PREFIX + "/analytics", b"{}")
    assert await status_with_body_withheld(control, forged) == 401
    # Without a declared hash only 16 KB would be read before the signature is checked: 20 MB is refused unread.
    without_hash = {k: v for k, v in forged.items() if k != CONTENT_HEADER}
    assert await status_with_body_withheld(control, without_hash) == 413
    stale = sign_request(SECRETS.cluster_secret, "POST", PREFIX + "/analytics", b"{}", now=time.time() - 3600)
    assert await status_with_body_withheld(control, {k: v for k, v in stale.items() if k != CONTENT_HEADER}) == 401


def signed(path: str, body: bytes, method: str = "POST") -> dict[str, str]:
    return {**sign_request(SECRETS.cluster_secret, method, path, body), "Content-Type": "application/json"}


async def test_a_signed_body_over_its_routes_limit_is_413(control: TestClient) -> None:
    path = PREFIX + "/heartbeat"
    body = orjson.dumps({"name": "edge-b/0", "generation": 0, "padding": "x" * 100_000})
    await expect_error(await control.post(path, data=body, headers=signed(path, body)), 413, "PayloadTooLarge")
    config = PREFIX + "/config"
    await expect_error(await control.get(config, data=b"{}", headers=signed(config, b"{}", "GET")),
                       413, "PayloadTooLarge")


async def test_a_body_that_is_not_the_one_signed_is_refused(control: TestClient) -> None:
    path = PREFIX + "/heartbeat"
    signed_body = orjson.dumps({"name": "edge-b/0", "generation": 0})
    sent = orjson.dumps({"name": "edge-b/0", "generation": 9})
    await expect_error(await control.post(path, data=sent, headers=signed(path, signed_body)), 401, "Unauthorized")


async def test_a_sender_that_declares_no_body_hash_is_heard_within_the_small_limit(control: TestClient) -> None:
    path = PREFIX + "/register"
    body = orjson.dumps({"name": "edge-o/0", "url": "http://127.0.0.1:49997", "generation": 0})
    headers = {k: v for k, v in signed(path, body).items() if k != CONTENT_HEADER}
    assert (await control.post(path, data=body, headers=headers)).status == 200
    analytics = PREFIX + "/analytics"
    batch = orjson.dumps({"v": 2, "batch": "b1", "node": "edge-o/0", "zones": [], "paths": [], "countries": [],
                          "log": [], "padding": "x" * 20_000})
    headers = {k: v for k, v in signed(analytics, batch).items() if k != CONTENT_HEADER}
    await expect_error(await control.post(analytics, data=batch, headers=headers), 413, "PayloadTooLarge")
    resp = await control.post(analytics, data=batch, headers=signed(analytics, batch))  # declared: its own limit
    assert resp.status == 200, await resp.text()


@pytest.mark.parametrize("content", ["", "x" * 64, hashlib.sha256(b"{}").hexdigest().upper()])
async def test_a_malformed_body_hash_is_refused(control: TestClient, content: str) -> None:
    path = PREFIX + "/heartbeat"
    body = b"{}"
    await expect_error(await control.post(path, data=body, headers={**signed(path, body), CONTENT_HEADER: content}),
                       401, "Unauthorized")


# As JSON text: orjson writes no integer beyond 64 bits, and an edge of another build might.
@pytest.mark.parametrize("generation", ['"7"', "1.5", "1e3", "99999999999999999999999", str(2**63), "true", "-1",
                                        "null"])
@pytest.mark.parametrize("route", ["/register", "/heartbeat"])
async def test_a_signed_message_whose_generation_is_no_whole_number_is_400(
        control: TestClient, route: str, generation: str) -> None:
    path = PREFIX + route
    register = orjson.dumps({"name": "edge-g/0", "url": "http://127.0.0.1:49996", "generation": 3})
    assert (await control.post(PREFIX + "/register", data=register,
                               headers=signed(PREFIX + "/register", register))).status == 200
    body = b'{"name":"edge-g/0","url":"http://127.0.0.1:49996","generation":%s}' % generation.encode()
    answer = await expect_error(await control.post(path, data=body, headers=signed(path, body)), 400, "InvalidBody")
    assert "generation" in answer["error"]["message"]
    # Nothing of the refused message was kept: the edge is known with the generation it registered.
    status = await control.get("/api/health?deep=1", headers=METRICS)
    assert status.status == 200, await status.text()
    assert [e["generation"] for e in (await status.json())["edges"] if e["name"] == "edge-g/0"] == [3]
