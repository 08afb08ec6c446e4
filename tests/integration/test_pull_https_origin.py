"""A pull zone whose origin is https, through a real `assetcdn up` (its edge on uvloop, whose TLS transport is the
one under test): the origin's certificate comes from a test CA the edge is told to trust (``SSL_CERT_FILE``, which
OpenSSL reads as the system's trust store), the origin a TLS server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import orjson
import pytest

from tests.edge.tls.certs import TestCa
from tests.integration.harness import ACCOUNT, RunningCdn, start_cdn

pytestmark = pytest.mark.integration

CA = TestCa()
WAIT_S = 30.0  # upper bound of waits (never asserted as a duration)


@pytest.fixture(scope="module")
def cdn(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningCdn]:
    root = tmp_path_factory.mktemp("pull-https-origin")
    running = start_cdn(root, env_extra={"ASSETCDN_ORIGIN_ALLOW_LOOPBACK": "true",
                                         "SSL_CERT_FILE": str(CA.write_root(root))})
    yield running
    running.stop()


def pull_zone(cdn: RunningCdn, name: str, url: str) -> None:
    """A pull zone, returned once the edge has the config that names it."""
    async def create() -> None:
        async with aiohttp.ClientSession() as session, session.post(
                f"{cdn.control_url}/api/core/zones", json={"Name": name, "Origin": {"Url": url}},
                headers=ACCOUNT) as resp:
            assert resp.status == 201, await resp.text()
    asyncio.run(create())

    def arrived() -> bool:
        for config in cdn.data_dir.rglob("edge-config-*.json"):
            try:
                if name in (orjson.loads(config.read_bytes()).get("origins") or {}):
                    return True
            except (OSError, ValueError):
                continue   # being replaced
        return False

    deadline = time.monotonic() + WAIT_S
    while not arrived():
        assert time.monotonic() < deadline, "the pull zone never reached the edge"
        time.sleep(0.1)


def test_a_whole_body_the_origin_closes_after_reaches_a_client_that_reads_it_late(cdn: RunningCdn,
                                                                                   tmp_path: Path) -> None:
    """An https origin that sends a body it does not let be stored, then its close_notify, and closes the connection
    at once (`Connection: close`), to a client that takes the answer only once the origin is done: the edge relays
    the body at the client's pace, so it had paused reading the origin with the end of the body still encrypted in
    uvloop's TLS transport as the TCP close came. uvloop dropped it: the client got the answer cut short (its
    connection closed before the declared length), every time."""
    size = 4 * 1024 * 1024
    chain, key = CA.issue("localhost").write(tmp_path, "origin")
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_context.load_cert_chain(chain, key)
    listener = socket.create_server(("127.0.0.1", 0))
    closed = threading.Event()

    def serve() -> None:
        accepted, _ = listener.accept()
        tls = server_context.wrap_socket(accepted, server_side=True)
        try:
            while b"\r\n\r\n" not in tls.recv(65536):
                pass
            tls.sendall(b"HTTP/1.1 200 OK\r\nConnection: close\r\nCache-Control: no-store\r\n"
                        b"Content-Length: %d\r\n\r\n" % size + b"x" * size)
            tls.setblocking(False)
            try:
                tls.unwrap()  # close_notify sent, the edge's own not waited for: the TCP close follows at once
            except ssl.SSLWantReadError:
                pass
        finally:
            tls.close()
            closed.set()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        pull_zone(cdn, "tlsclose", f"https://localhost:{listener.getsockname()[1]}")
        host, port = cdn.edge_urls[0].removeprefix("http://").rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=WAIT_S) as client:
            client.sendall(b"GET /tlsclose/big.bin HTTP/1.1\r\nHost: edge.test\r\nConnection: close\r\n\r\n")
            closed.wait(WAIT_S)  # the answer read only once the origin sent all of it and closed
            received = b""
            while chunk := client.recv(1 << 20):
                received += chunk
    finally:
        thread.join(5)
        listener.close()
    head, _, body = received.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 "), head
    assert f"content-length: {size}".encode() in head.lower()
    assert len(body) == size
