"""Deliveries count the bytes that were sent, not the bytes that were answered: clients that ask for a
large file and reset the connection at once (or after reading a little) move statistics and the access
log by no more than the kernel could have taken, each such line says `aborted` and keeps the client's
address (the connection had one even if the reset came before the edge accepted it). On the hit path
(sendfile, and memory bodies left in the transport), on requests it hands to the application, and on
the application's own connections."""

from __future__ import annotations

import asyncio
import os
import socket
import struct
from functools import partial
from typing import Any

from tests.support.cdn import ZONE
from tests.support.control import ACCOUNT
from tests.support.hit_cdn import HitCdn, HitCdnFactory, access_lines, request_bytes
from tests.support.sockets import RCVBUF, REALLY_WRITTEN_MAX, raw_answer
from tests.support.wait import wait_until

BIG = os.urandom(REALLY_WRITTEN_MAX + 2 * 1024 * 1024)
SMALL = os.urandom(48 * 1024)   # kept in the memory tier
ENV = {"ASSETCDN_EDGE_MEMORY_OBJECT_MAX_KB": "64", "ASSETCDN_ACCESS_LOG_OUTPUT": "file"}


def reset_after(port: int, request: bytes, *, read: int = 0) -> None:
    """Send `request`, read `read` bytes of the answer, and reset the connection (RST, no FIN)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF)
    sock.connect(("127.0.0.1", port))
    sock.sendall(request)
    received = 0
    while received < read:
        received += len(sock.recv(min(65536, read - received)))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


async def warm(cdn: HitCdn) -> None:
    await cdn.upload(f"{ZONE}/v1/big.bin", BIG)
    await cdn.upload(f"{ZONE}/v1/small.bin", SMALL)
    for path in ("big.bin", "small.bin"):  # the first (a miss) fills the cache; the second is a hit
        for _ in range(2):
            connection = await cdn.connect()
            answer = await connection.request(f"/{ZONE}/v1/{path}")
            assert answer.status == 200 and answer.header("X-Cache") in ("HIT", "MISS")
            connection.close()
    assert answer.header("X-Cache") == "HIT"


async def bandwidth(cdn: HitCdn) -> tuple[int, int]:
    """(requests, bytes) control's statistics count for the zone, once the edge has shipped its counts."""
    await cdn.node.deliveries.ship(cdn.node.control, final=True)
    resp = await cdn.control.get(f"/api/core/statistics?days=1&zone={ZONE}", headers=ACCOUNT)
    summary = (await resp.json())["Summary"]
    return summary["TotalRequests"], summary["TotalBandwidth"]


async def test_resets_move_bandwidth_and_the_log_by_what_was_sent(make_hit_cdn: HitCdnFactory) -> None:
    cdn = await make_hit_cdn(**ENV)
    await warm(cdn)
    before = await access_lines(cdn, 4)
    requests, sent = await bandwidth(cdn)
    assert (requests, sent) == (4, 2 * (len(BIG) + len(SMALL)))
    assert all(line["aborted"] is False and line["client_ip"] == "127.0.0.1" for line in before[:4])

    loop = asyncio.get_running_loop()
    big = request_bytes(f"/{ZONE}/v1/big.bin")
    attacks = [
        # Hits sent with sendfile: reset at once (before the edge even accepted the connection), and
        # after reading a little of the body.
        (cdn.port, big, 0), (cdn.port, big, 0), (cdn.port, big, 200_000),
        # A request the hit path hands to the application (its path is percent-encoded).
        (cdn.port, request_bytes(f"/{ZONE}/v1/%62ig.bin"), 100_000),
        # The application's own connection.
        (cdn.plain_port, big, 100_000),
        # Memory-tier hits, pipelined far past what the socket takes, hardly read.
        (cdn.port, request_bytes(f"/{ZONE}/v1/small.bin") * 200, 100_000),
    ]
    for port, request, read in attacks:
        await loop.run_in_executor(None, partial(reset_after, port, request, read=read))

    hits = cdn.site.hits
    assert hits is not None
    lines: list[dict[str, Any]] = []

    async def recorded() -> bool:  # each attack ended its connection: every delivery on it is recorded
        nonlocal lines
        lines = [] if hits.connections else (await access_lines(cdn, 4))[4:]
        return sum(1 for line in lines if line["path"] == f"/{ZONE}/v1/big.bin") == 5

    await wait_until(recorded, "every attacking connection's deliveries recorded")
    big_lines = [line for line in lines if line["path"] == f"/{ZONE}/v1/big.bin"]
    small_lines = [line for line in lines if line["path"] == f"/{ZONE}/v1/small.bin"]
    assert len(big_lines) + len(small_lines) == len(lines) and small_lines
    for line in big_lines:
        assert line["aborted"] is True and line["client_ip"] == "127.0.0.1", line
        assert line["bytes"] <= REALLY_WRITTEN_MAX, line
    assert all(line["client_ip"] == "127.0.0.1" for line in small_lines)
    assert sum(line["bytes"] for line in small_lines) <= REALLY_WRITTEN_MAX
    assert any(line["aborted"] for line in small_lines)

    # Statistics moved by exactly what the log says was sent, and no more than the kernel could take.
    requests_after, sent_after = await bandwidth(cdn)
    assert requests_after == requests + len(lines)
    assert sent_after - sent == sum(line["bytes"] for line in lines) <= len(attacks) * REALLY_WRITTEN_MAX


async def test_a_host_that_is_not_utf8_stops_neither_the_log_nor_the_counts(make_hit_cdn: HitCdnFactory) -> None:
    """A request whose Host is not UTF-8 (400 InvalidHost; the server reads such bytes with surrogate escapes) is
    logged with them escaped. Its access-log line could not be written as JSON: the worker's shipping task died
    there, and with it every later access-log line and every count control was to get from that worker."""
    cdn = await make_hit_cdn(**ENV)
    await cdn.upload(f"{ZONE}/v1/small.bin", SMALL)

    async def counted(requests: int) -> bool:  # shipped by the worker's own task, as it runs in production
        resp = await cdn.control.get(f"/api/core/statistics?days=1&zone={ZONE}", headers=ACCOUNT)
        return (await resp.json())["Summary"]["TotalRequests"] >= requests

    answer = await raw_answer(cdn.port, f"GET /{ZONE}/v1/small.bin HTTP/1.1\r\n".encode()
                              + b"Host: a\xffb.example\r\nConnection: close\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 400 "), answer[:200]
    await wait_until(partial(counted, 1), "the 400 counted at control")
    connection = await cdn.connect()
    assert (await connection.request(f"/{ZONE}/v1/small.bin")).status == 200
    connection.close()
    await wait_until(partial(counted, 2), "the 200 after it counted at control")
    lines = await access_lines(cdn, 2)
    assert [(line["host"], line["status"]) for line in lines[:1]] == [("a\\xffb.example", 400)]
    assert lines[1]["status"] == 200
