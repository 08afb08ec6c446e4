"""HTTP/2 streams reset as soon as they are asked (a real `assetcdn up` with an https port): statistics count
the DATA bytes each stream sent, not the size of the file it asked for."""

from __future__ import annotations

import asyncio
import hashlib
import os
import time
from typing import Any

import aiohttp
import h2.errors
import pytest

from tests.edge.tls.client import H2Client
from tests.edge.tls.conftest import HttpsCdn
from tests.integration.harness import ACCESS, ACCOUNT

pytestmark = pytest.mark.integration

ZONE = "h2counted"
FILE = f"{ZONE}/v1/big.bin"
BODY = os.urandom(2 * 1024 * 1024)  # past the memory tier's objects: sent from its cache file
RESETS = 10
WINDOW = 65535  # HTTP/2's initial connection window: all a client that never gives it back can be sent
WAIT_S = 30.0   # bounds a wait for the edge's next analytics flush (every second) on a loaded machine


async def control(https_cdn: HttpsCdn, method: str, path: str, **options: Any) -> Any:
    async with aiohttp.ClientSession() as session, session.request(
            method, f"{https_cdn.cdn.control_url}{path}", **options) as resp:
        assert resp.status < 300, await resp.text()
        return await resp.json()


def statistics(https_cdn: HttpsCdn, requests: int) -> int:
    """The zone's bandwidth in control's statistics, once they count `requests` requests."""
    deadline = time.monotonic() + WAIT_S
    while True:
        summary = asyncio.run(control(https_cdn, "GET", f"/api/core/statistics?days=1&zone={ZONE}",
                                      headers=ACCOUNT))["Summary"]
        if summary["TotalRequests"] >= requests:
            assert summary["TotalRequests"] == requests, summary
            return int(summary["TotalBandwidth"])
        assert time.monotonic() < deadline, f"statistics still count {summary['TotalRequests']} of {requests}"
        time.sleep(0.2)


def test_streams_reset_at_once_add_what_they_sent(https_cdn: HttpsCdn) -> None:
    asyncio.run(control(https_cdn, "POST", "/api/core/zones", json={"Name": ZONE}, headers=ACCOUNT))
    asyncio.run(control(https_cdn, "PUT", f"/api/storage/{FILE}", data=BODY,
                        headers={**ACCESS, "Checksum": hashlib.sha256(BODY).hexdigest()}))
    client = H2Client(https_cdn.https_port, "localhost", https_cdn.ca_file)
    try:
        for cache in ("MISS", "HIT"):
            answer = client.get(f"/{FILE}")
            assert answer.status == 200 and answer.body == BODY and answer.headers["x-cache"] == cache
    finally:
        client.close()
    assert statistics(https_cdn, 2) == 2 * len(BODY)

    attacker = H2Client(https_cdn.https_port, "localhost", https_cdn.ca_file)
    try:
        for _ in range(RESETS):  # each request and its reset in one write, as the finding's attacker did
            stream_id = attacker.conn.get_next_available_stream_id()
            attacker.conn.send_headers(stream_id, attacker.request_headers(f"/{FILE}"), end_stream=True)
            attacker.conn.reset_stream(stream_id, h2.errors.ErrorCodes.CANCEL)
        attacker.send()
        assert statistics(https_cdn, 2 + RESETS) - 2 * len(BODY) <= WINDOW
    finally:
        attacker.close()
