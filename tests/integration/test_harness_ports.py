"""The test harness's own start of `assetcdn up` (tests/integration/harness.py) beside another test run: a port it
was given that another process takes is not taken again on the next attempt."""

from __future__ import annotations

import json
import socket
import urllib.request
from pathlib import Path

from tests.edge.tls.certs import TestCa
from tests.integration.harness import RunningCdn, start_cdn


def _started_public_url(running: RunningCdn) -> str:
    """The public URL `up` was started with (its edges' and control's setting), as the process environment has it."""
    environ = Path(f"/proc/{running.process.pid}/environ").read_bytes().split(b"\0")
    found = [item.split(b"=", 1)[1].decode() for item in environ if item.startswith(b"ASSETCDN_SERVER_PUBLIC_URL=")]
    assert found
    return found[0]


def test_an_https_port_another_process_took_is_moved_to_a_free_one(tmp_path: Path) -> None:
    ca = TestCa()
    chain, key = ca.issue("localhost").write(tmp_path, "localhost")
    with socket.socket() as holder:  # what a suite beside this one does between the choice and the start
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = holder.getsockname()[1]
        running = start_cdn(tmp_path, env_extra={"ASSETCDN_TLS_HTTPS_PORT": str(taken),
                                                 "ASSETCDN_SERVER_PUBLIC_URL": f"https://localhost:{taken}",
                                                 "ASSETCDN_TLS_CERTIFICATES": json.dumps([[str(chain), str(key)]])})
        try:
            assert running.https_port not in (0, taken)
            public = _started_public_url(running)
            assert public == f"https://localhost:{running.https_port}"  # the public URL names the port it moved to
            with urllib.request.urlopen(f"{running.edge_urls[0]}/api/health", timeout=10) as answer:
                assert answer.status == 200
            with socket.create_connection(("127.0.0.1", running.https_port), timeout=10):
                pass  # the edge listens on the https port it was moved to
        finally:
            running.stop()
