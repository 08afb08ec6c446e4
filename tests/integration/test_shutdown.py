"""Stopping `assetcdn up` leaves nothing behind: not with clients connected (a live log stream, uploads
half sent, an edge that does not answer), not when the stop signal comes twice, not when `up` itself is
killed while it stops. And what the edges served before the stop is still counted afterwards."""

from __future__ import annotations

import contextlib
import json
import signal
import socket
import time
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

import aiohttp
import pytest

from tests.integration.harness import (
    ACCESS,
    ACCOUNT,
    KEYS,
    RunningCdn,
    running,
    start_cdn,
    wait_gone,
)

pytestmark = pytest.mark.integration

ZONE = "busy"
# The uploads left in flight hold each process for the whole of its grace ([server] shutdown_grace_s, 3 s by
# default; edges, then control): a shorter one, still longer than the waits between the signals below.
SHORT_GRACE = {"ASSETCDN_SERVER_SHUTDOWN_GRACE_S": "1.0"}
ASSET = f"{ZONE}/v1/logos/a.txt"


def upload_in_flight(base_url: str) -> socket.socket:
    """A PUT whose headers and first bytes are sent and whose body never completes."""
    url = urlsplit(base_url)
    sock = socket.create_connection((url.hostname, url.port), timeout=10)
    sock.sendall(f"PUT /api/storage/{ZONE}/v1/banners/big.bin HTTP/1.1\r\nHost: {url.netloc}\r\n"
                 f"AccessKey: {KEYS['ASSETCDN_ACCESS_KEY']}\r\nContent-Length: 1000000\r\n\r\n".encode()
                 + b"x" * 4096)
    return sock


async def open_log_stream(session: aiohttp.ClientSession, base_url: str) -> aiohttp.ClientResponse:
    """GET /api/logs?stream=1, read up to its first event: the stream is live on the server."""
    resp = await session.get(f"{base_url}/api/logs?stream=1", headers=ACCOUNT,
                             timeout=aiohttp.ClientTimeout(total=None, sock_read=60))
    assert resp.status == 200
    assert (await resp.content.readline()).startswith(b"event: connected")
    return resp


async def make_zone(session: aiohttp.ClientSession, base_url: str) -> None:
    async with session.post(f"{base_url}/api/core/zones", json={"Name": ZONE}, headers=ACCOUNT) as resp:
        assert resp.status == 201, await resp.text()
    async with session.put(f"{base_url}/api/storage/{ASSET}", data=b"a" * 100, headers=ACCESS) as resp:
        assert resp.status == 201, await resp.text()


def make_zone_now(base_url: str) -> None:
    for method, path, data, headers in (
            ("POST", "/api/core/zones", json.dumps({"Name": ZONE}).encode(),
             {**ACCOUNT, "Content-Type": "application/json"}),
            ("PUT", f"/api/storage/{ASSET}", b"a" * 100, ACCESS)):
        request = urllib.request.Request(base_url + path, data=data, headers=headers, method=method)
        with urllib.request.urlopen(request, timeout=30) as resp:  # noqa: S310 (loopback)
            assert resp.status == 201


def resume_and_stop(cdn: RunningCdn, suspended: list[int]) -> None:
    """Clean-up for a test that failed half way: nothing stays suspended or running."""
    if cdn.process.poll() is None:
        cdn.stopped_pids.extend(suspended)
        cdn.stop()


async def test_a_busy_system_stops_completely_and_keeps_what_it_served(tmp_path: Path) -> None:
    # Edges ship what they served only when they stop: the last shipment is the one under test.
    cdn = start_cdn(tmp_path, edges=2, env_extra={"ASSETCDN_ANALYTICS_FLUSH_INTERVAL_S": "3600", **SHORT_GRACE},
                    image_workers_at_start=True, semantic_search=True)
    suspended: list[int] = []
    sockets: list[socket.socket] = []
    try:
        edge, control = cdn.edge_urls[0], cdn.control_url
        async with aiohttp.ClientSession() as session:
            await make_zone(session, control)
            for _ in range(5):
                async with session.get(f"{edge}/{ASSET}") as resp:
                    assert resp.status == 200
            sockets += [upload_in_flight(control), upload_in_flight(edge)]
            streams = [await open_log_stream(session, control), await open_log_stream(session, edge)]
            suspended = cdn.signal("--name edge-1", signal.SIGSTOP)  # an edge that answers nothing
            assert suspended
            # A change control pushes to every edge: the suspended one keeps it waiting.
            async with session.put(f"{control}/api/storage/{ZONE}/v1/logos/b.txt", data=b"b",
                                   headers=ACCESS) as resp:
                assert resp.status == 201
            before = cdn.descendants()
            assert cdn.stop() == 0
            assert running(before) == set()  # `up` returns only once every process it started is gone
            # Each live stream was ended, not left hanging: control ends its own cleanly; the edge,
            # which stops first, cuts the stream it was relaying (the client sees it cut short).
            await streams[0].content.read()
            with contextlib.suppress(aiohttp.ClientPayloadError):
                await streams[1].content.read()
            for stream in streams:
                stream.close()
        log = cdn.log_path.read_text()
        assert "killing it" not in log and "still there" not in log, log
    finally:
        for sock in sockets:
            sock.close()
        resume_and_stop(cdn, suspended)

    again = start_cdn(tmp_path, edges=1)
    try:
        async with aiohttp.ClientSession() as session:
            url = f"{again.edge_urls[0]}/api/core/statistics?zone={ZONE}&days=7"
            async with session.get(url, headers=ACCOUNT) as resp:
                assert resp.status == 200
                assert (await resp.json())["Summary"]["TotalRequests"] == 5
    finally:
        assert again.stop() == 0


def test_two_quick_stop_signals_to_up_still_leave_no_process(tmp_path: Path) -> None:
    cdn = start_cdn(tmp_path, edges=1, image_workers_at_start=True, semantic_search=True, env_extra=SHORT_GRACE)
    sockets: list[socket.socket] = []
    try:
        make_zone_now(cdn.control_url)
        # Requests in flight keep the children busy stopping while the second signal arrives.
        sockets += [upload_in_flight(cdn.control_url), upload_in_flight(cdn.edge_urls[0])]
        before = cdn.descendants()
        assert before
        cdn.process.send_signal(signal.SIGTERM)
        time.sleep(0.2)
        cdn.process.send_signal(signal.SIGTERM)
        assert cdn.process.wait(timeout=60) == 0
        assert wait_gone(before) == set()
    finally:
        for sock in sockets:
            sock.close()
        resume_and_stop(cdn, [])


def test_children_stop_by_themselves_when_up_is_killed_while_stopping(tmp_path: Path) -> None:
    # An impatient service manager: SIGTERM, then SIGKILL. Every child then gets its stop signal twice
    # (from `up`, then from the kernel as its parent dies) and must still finish stopping and exit.
    cdn = start_cdn(tmp_path, edges=1, workers=2, image_workers_at_start=True, semantic_search=True,
                    env_extra=SHORT_GRACE)
    sockets: list[socket.socket] = []
    try:
        make_zone_now(cdn.control_url)
        sockets += [upload_in_flight(cdn.control_url), upload_in_flight(cdn.edge_urls[0])]
        before = cdn.descendants()
        assert len(before) >= 4  # control, the edge node and its two workers
        cdn.process.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        cdn.process.kill()
        cdn.process.wait(timeout=60)
        assert wait_gone(before) == set()
    finally:
        for sock in sockets:
            sock.close()
        resume_and_stop(cdn, [])
