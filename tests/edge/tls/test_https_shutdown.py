"""Over the life of an edge's https port: the session ticket key is replaced every
`session_ticket_rotation_s` (an older ticket then makes a full handshake), and an edge that stops
(SIGTERM) says GOAWAY on each open HTTP/2 connection, so clients open new connections elsewhere
instead of seeing them cut, and then closes them. The tests run in this order on one cluster."""

from __future__ import annotations

import json
import signal
import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path

import h2.errors
import pytest

from tests.edge.tls.certs import TestCa
from tests.edge.tls.client import H2Client, client_context
from tests.integration.harness import RunningCdn, free_port_block, start_cdn

pytestmark = pytest.mark.integration


ROTATION_S = 8


@pytest.fixture(scope="module")
def cdn_with_https(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunningCdn, int, Path]]:
    tmp_path = tmp_path_factory.mktemp("https-life")
    ca = TestCa()
    chain, key = ca.issue("localhost").write(tmp_path, "localhost")
    https_port = free_port_block(1)
    running = start_cdn(tmp_path, env_extra={"ASSETCDN_TLS_HTTPS_PORT": str(https_port),
                                             "ASSETCDN_TLS_CERTIFICATES": json.dumps([[str(chain), str(key)]]),
                                             "ASSETCDN_TLS_SESSION_TICKET_ROTATION_S": str(ROTATION_S)})
    try:
        yield running, https_port, ca.write_root(tmp_path)
    finally:
        running.stop()


def _connect(port: int, context: ssl.SSLContext, session: ssl.SSLSession | None) -> tuple[bool, ssl.SSLSession | None]:
    """(resumed?, the session to offer next time) of one request over a new TLS 1.3 connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=20) as raw, \
            context.wrap_socket(raw, server_hostname="localhost", session=session) as tls:
        tls.sendall(b"GET /api/health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        while tls.recv(65536):  # the tickets come after the handshake
            pass
        return bool(tls.session_reused), tls.session


def test_the_session_ticket_key_is_rotated(cdn_with_https: tuple[RunningCdn, int, Path]) -> None:
    _cdn, https_port, ca = cdn_with_https
    context = client_context(ca)  # a session is offered again only through the context that made it
    _resumed, session = _connect(https_port, context, None)
    time.sleep(ROTATION_S + 1)  # the key that sealed `session` is older than the rotation period now
    resumed, fresh = _connect(https_port, context, session)
    assert not resumed
    resumed, _ = _connect(https_port, context, fresh)  # a ticket of the new key resumes
    assert resumed


def test_stopping_edge_sends_goaway_on_open_http2_connections(cdn_with_https: tuple[RunningCdn, int, Path]) -> None:
    cdn, https_port, ca = cdn_with_https
    client = H2Client(https_port, "localhost", ca)
    try:
        assert client.get("/api/health").status == 200
        assert cdn.signal("--name edge-0", signal.SIGTERM)
        goaway = client.until_closed()
        assert goaway is not None and goaway.error_code == h2.errors.ErrorCodes.NO_ERROR
    finally:
        client.close()
