"""The end of an edge's https port: an edge that stops (SIGTERM) says GOAWAY on each open HTTP/2
connection, so clients open new connections elsewhere instead of seeing them cut, and then closes them.
(Session ticket rotation is in test_session_resumption.py.)"""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from pathlib import Path

import h2.errors
import pytest

from tests.edge.tls.certs import TestCa
from tests.edge.tls.client import H2Client
from tests.integration.harness import RunningCdn, free_port_block, start_cdn

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cdn_with_https(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunningCdn, int, Path]]:
    tmp_path = tmp_path_factory.mktemp("https-life")
    ca = TestCa()
    chain, key = ca.issue("localhost").write(tmp_path, "localhost")
    https_port = free_port_block(1)
    running = start_cdn(tmp_path, env_extra={"ASSETCDN_TLS_HTTPS_PORT": str(https_port),
                                             "ASSETCDN_TLS_CERTIFICATES": json.dumps([[str(chain), str(key)]])})
    try:
        yield running, running.https_port, ca.write_root(tmp_path)
    finally:
        running.stop()


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
