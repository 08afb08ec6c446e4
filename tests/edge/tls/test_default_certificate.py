"""The self-signed default certificate of an https edge with no certificate of its own, on a real `assetcdn up` with
two workers sharing the https port: every connection gets the same certificate whichever worker it reaches, so a
client that trusts it (docs/https.md, the try on one machine) is served by each worker. Each worker made its own
before: half the connections failed the client's check, and a browser's exception for one held for half of them."""

from __future__ import annotations

import socket
import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.edge.tls.client import client_context
from tests.integration.harness import RunningCdn, free_port_block, start_cdn
from tests.support.https import serving_pid

pytestmark = pytest.mark.integration

WORKERS = 2
MAX_CONNECTIONS = 200  # SO_REUSEPORT spreads connections by address: both workers are reached long before this


@pytest.fixture(scope="module")
def cdn(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningCdn]:
    running = start_cdn(tmp_path_factory.mktemp("default-certificate"), workers=WORKERS,
                        env_extra={"ASSETCDN_TLS_HTTPS_PORT": str(free_port_block(1))})
    try:
        yield running
    finally:
        running.stop()


def certificate_and_worker(cdn: RunningCdn, context: ssl.SSLContext) -> tuple[bytes, int]:
    """The certificate a request on a new connection to 127.0.0.1 was served with, and the worker that served it."""
    with socket.create_connection(("127.0.0.1", cdn.https_port), timeout=20) as raw, \
            context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
        tls.sendall(b"GET /api/health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert tls.recv(65536).startswith(b"HTTP/1.1 200"), "no answer"
        der = tls.getpeercert(binary_form=True)
        assert der is not None
        return der, serving_pid(cdn, cdn.https_port, tls.getsockname()[1])


def test_every_worker_serves_the_same_default_certificate(cdn: RunningCdn, tmp_path: Path) -> None:
    first, _ = certificate_and_worker(cdn, client_context(None))
    trusted = tmp_path / "default.pem"
    trusted.write_text(ssl.DER_cert_to_PEM_cert(first))
    trusting = client_context(trusted)  # checks the certificate and its name, as `curl --cacert` does
    by_worker: dict[int, set[bytes]] = {}
    for _ in range(MAX_CONNECTIONS):
        try:
            der, pid = certificate_and_worker(cdn, trusting)
        except ssl.SSLCertVerificationError as exc:
            raise AssertionError(f"a worker served another certificate: {exc}") from None
        by_worker.setdefault(pid, set()).add(der)
        if len(by_worker) == WORKERS:
            break
    assert len(by_worker) == WORKERS, f"connections reached only {list(by_worker)}"
    assert all(certificates == {first} for certificates in by_worker.values())
