"""Deliveries over TLS cut short (a real `assetcdn up` with an https port): HTTP/2 streams reset as soon as
they are asked count the DATA bytes each stream sent, and HTTP/1.1 connections reset after reading a
little count no more than the kernel could take, not the size of the file asked for, whether the hit path
wrote it a piece at a time or the application in one piece (which TLS passes whole to the socket's
transport). Memory-tier hits handed to TLS a piece at a time are counted once each, whole, when read whole."""

from __future__ import annotations

import asyncio
import hashlib
import os
import socket
import struct
import time
from typing import Any

import aiohttp
import h2.errors
import pytest

from tests.edge.tls.client import H2Client, client_context
from tests.integration.harness import ACCESS, ACCOUNT
from tests.support.https import HttpsCdn
from tests.support.sockets import RCVBUF, REALLY_WRITTEN_MAX

pytestmark = pytest.mark.integration

ZONE = "h2counted"
FILE = f"{ZONE}/v1/big.bin"
BODY = os.urandom(REALLY_WRITTEN_MAX + 2 * 1024 * 1024)  # past the memory tier and what a socket holds
RESETS = 10
WINDOW = 65535  # HTTP/2's initial connection window: all a client that never gives it back can be sent
WAIT_S = 30.0   # bounds a wait for the edge's next analytics flush (every second) on a loaded machine


async def control(https_cdn: HttpsCdn, method: str, path: str, **options: Any) -> Any:
    async with aiohttp.ClientSession() as session, session.request(
            method, f"{https_cdn.cdn.control_url}{path}", **options) as resp:
        assert resp.status < 300, await resp.text()
        return await resp.json()


def statistics(https_cdn: HttpsCdn, requests: int, zone: str = ZONE) -> int:
    """The zone's bandwidth in control's statistics, once they count `requests` requests."""
    deadline = time.monotonic() + WAIT_S
    while True:
        summary = asyncio.run(control(https_cdn, "GET", f"/api/core/statistics?days=1&zone={zone}",
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

    # HTTP/1.1 over TLS: the file is written through the TLS transport, then the client resets.
    before = statistics(https_cdn, 2 + RESETS)
    for _ in range(3):
        tls_read_then_reset(https_cdn, FILE)
    assert statistics(https_cdn, 2 + RESETS + 3) - before <= 3 * REALLY_WRITTEN_MAX


def tls_read_then_reset(https_cdn: HttpsCdn, path: str) -> bytes:
    """An HTTP/1.1-over-TLS client with a small receive buffer that asks for `path`, reads some 100 KB of the
    answer and resets the connection (SO_LINGER 0): what it read."""
    raw = socket.create_connection(("127.0.0.1", https_cdn.https_port), timeout=WAIT_S)
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF)
    tls = client_context(https_cdn.ca_file).wrap_socket(raw, server_hostname="localhost")
    try:
        tls.sendall(f"GET /{path} HTTP/1.1\r\nHost: localhost\r\n\r\n".encode())
        received = b""
        while len(received) < 100_000:
            data = tls.recv(65536)
            assert data, "the connection ended"
            received += data
        tls.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    finally:
        tls.close()
    return received


APPLICATION_ZONE = "tlsanswered"
APPLICATION_FILE = f"{APPLICATION_ZONE}/v1/big.bin"


def test_application_answers_reset_over_tls_count_what_left(https_cdn: HttpsCdn) -> None:
    """The first request after the upload is the application's (a miss), whose body it hands to TLS in one
    write: TLS encrypts it and passes it all to the socket's transport, which holds what the kernel did not
    take. A client that reads a little and resets is counted no more than the kernel could take."""
    asyncio.run(control(https_cdn, "POST", "/api/core/zones", json={"Name": APPLICATION_ZONE}, headers=ACCOUNT))
    asyncio.run(control(https_cdn, "PUT", f"/api/storage/{APPLICATION_FILE}", data=BODY,
                        headers={**ACCESS, "Checksum": hashlib.sha256(BODY).hexdigest()}))
    received = tls_read_then_reset(https_cdn, APPLICATION_FILE)
    assert b"\r\nx-cache: miss\r\n" in received.partition(b"\r\n\r\n")[0].lower()
    assert statistics(https_cdn, 1, APPLICATION_ZONE) <= REALLY_WRITTEN_MAX


PIECES_ZONE = "tlspieces"
MEMORY_FILE = f"{PIECES_ZONE}/v1/memory.bin"
MEMORY_BODY = os.urandom(512 * 1024)  # kept in the memory tier, and more than TLS is handed at once
PIPELINED = 3


def read_answers(tls: socket.socket, count: int) -> list[tuple[bytes, bytes]]:
    """`count` HTTP/1.1 answers with a Content-Length read off `tls`: (head, body) each."""
    buffer = b""
    answers: list[tuple[bytes, bytes]] = []
    while len(answers) < count:
        end = buffer.find(b"\r\n\r\n")
        if end >= 0:
            head = buffer[:end]
            length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length:"))
            if len(buffer) >= end + 4 + length:
                answers.append((head, buffer[end + 4:end + 4 + length]))
                buffer = buffer[end + 4 + length:]
                continue
        data = tls.recv(1 << 20)
        assert data, f"the connection ended after {len(answers)} answers"
        buffer += data
    return answers


def test_tls_memory_hits_written_in_pieces_count_once_and_whole(https_cdn: HttpsCdn) -> None:
    asyncio.run(control(https_cdn, "POST", "/api/core/zones", json={"Name": PIECES_ZONE}, headers=ACCOUNT))
    asyncio.run(control(https_cdn, "PUT", f"/api/storage/{MEMORY_FILE}", data=MEMORY_BODY,
                        headers={**ACCESS, "Checksum": hashlib.sha256(MEMORY_BODY).hexdigest()}))
    request = f"GET /{MEMORY_FILE} HTTP/1.1\r\nHost: localhost\r\n\r\n".encode()
    raw = socket.create_connection(("127.0.0.1", https_cdn.https_port), timeout=WAIT_S)
    with client_context(https_cdn.ca_file).wrap_socket(raw, server_hostname="localhost") as tls:
        tls.sendall(request)  # a miss: the application answers, and the hit path has the body in memory
        (head, body), = read_answers(tls, 1)
        assert b" 200 " in head.split(b"\r\n")[0] and body == MEMORY_BODY
        tls.sendall(request * PIPELINED)  # pipelined hits, each handed to TLS a piece at a time
        answers = read_answers(tls, PIPELINED)
    assert all(b"x-cache: hit" in head.lower() and body == MEMORY_BODY for head, body in answers)
    assert statistics(https_cdn, 1 + PIPELINED, PIECES_ZONE) == (1 + PIPELINED) * len(MEMORY_BODY)
