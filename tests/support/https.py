"""HTTPS tests: a real `assetcdn up` with an https port whose operator certificates come from a test CA
(`start_https_cdn`; the package-scoped `https_cdn` fixture is in tests/edge/tls/conftest.py), and the
client side of handshakes a test examines."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import socket
import ssl
import threading
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest
from cryptography import x509

from assetcdn.edge.tls.certificates import CertificateStore
from tests.edge.tls.certs import Issued, TestCa
from tests.edge.tls.client import client_context
from tests.integration.harness import (
    ACCESS,
    ACCOUNT,
    METRICS,
    RunningCdn,
    free_port_block,
    start_cdn,
)

ZONE = "secure"
HANDSHAKE_TIMEOUT_S = 2
HSTS_MAX_AGE_S = 600
MAX_RESETS = 50


@dataclass
class HttpsCdn:
    cdn: RunningCdn
    https_port: int
    ca: TestCa
    ca_file: Path
    certs_dir: Path
    main: Issued       # ECDSA, cdn.example.test: the first operator certificate, so the default
    wildcard: Issued   # RSA, *.t.example.test

    @property
    def plain_port(self) -> int:
        return int(self.cdn.edge_urls[0].rsplit(":", 1)[1])

    def upload(self, path: str, data: bytes) -> None:
        async def put() -> None:
            async with aiohttp.ClientSession() as session, session.put(
                    f"{self.cdn.control_url}/api/storage/{ZONE}/{path}", data=data,
                    headers={**ACCESS, "Checksum": hashlib.sha256(data).hexdigest()}) as resp:
                assert resp.status == 201, await resp.text()
        asyncio.run(put())

    def edge_member(self) -> tuple[str, str]:
        """(member name, cluster URL) of the edge's worker, as control knows it."""
        async def health() -> tuple[str, str]:
            async with aiohttp.ClientSession() as session, session.get(
                    f"{self.cdn.control_url}/api/health?deep=1", headers=METRICS) as resp:
                edges = (await resp.json())["edges"]
            return edges[0]["name"], edges[0]["url"]
        return asyncio.run(health())


def worker_rss(cdn: HttpsCdn) -> int:
    """Resident bytes of the edge's (only) worker process."""
    (pid,) = cdn.cdn.pids("--name edge-0")
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def start_https_cdn(tmp: Path, env_extra: dict[str, str] | None = None, *, workers: int = 1) -> HttpsCdn:
    """A running `assetcdn up` with an https port, operator certificates of a test CA and the zone ZONE;
    `env_extra` adds to (or overrides) the settings below; `workers` per edge."""
    certs = tmp / "certs"
    certs.mkdir()
    ca = TestCa()
    main, wildcard = ca.issue("cdn.example.test", "localhost"), ca.issue("*.t.example.test", rsa_key=True)
    main_files, wildcard_files = main.write(certs, "main"), wildcard.write(certs, "wildcard")
    https_port = free_port_block(1)
    running = start_cdn(tmp, workers=workers, env_extra={
        "ASSETCDN_TLS_HTTPS_PORT": str(https_port),
        "ASSETCDN_TLS_CERTIFICATES": json.dumps([[str(p) for p in main_files], [str(p) for p in wildcard_files]]),
        "ASSETCDN_TLS_RELOAD_INTERVAL_S": "0.2",
        "ASSETCDN_TLS_HANDSHAKE_TIMEOUT_S": str(HANDSHAKE_TIMEOUT_S),
        "ASSETCDN_TLS_REDIRECT_HTTP": "true",
        "ASSETCDN_TLS_HSTS_MAX_AGE_S": str(HSTS_MAX_AGE_S),
        "ASSETCDN_TLS_H2_MAX_RESETS_PER_10S": str(MAX_RESETS),
        **(env_extra or {}),
    })
    try:
        async def zone() -> None:
            async with aiohttp.ClientSession() as session, session.post(
                    f"{running.control_url}/api/core/zones", json={"Name": ZONE}, headers=ACCOUNT) as resp:
                assert resp.status == 201, await resp.text()
        asyncio.run(zone())
        return HttpsCdn(running, running.https_port, ca, ca.write_root(tmp), certs, main, wildcard)
    except BaseException:
        running.stop()
        raise


# --- the client side of a handshake ------------------------------------------------------------

PLACEHOLDER = b"aaaa.example.test"
NOT_ASCII = "\u00e9\u00e9.example.test".encode()  # as many bytes as PLACEHOLDER: the ClientHello's lengths hold


def client_hello_naming(name: bytes) -> bytes:
    """A real client's first flight with `name` as its server name, bytes as given (a client library
    would encode the name as IDNA first)."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = client_context(None).wrap_bio(incoming, outgoing, server_hostname=PLACEHOLDER.decode())
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    hello = outgoing.read()
    assert hello.count(PLACEHOLDER) == 1 and len(name) == len(PLACEHOLDER)
    return hello.replace(PLACEHOLDER, name)


def peer_certificate(store: CertificateStore, server_name: str, client: ssl.SSLContext) -> x509.Certificate:
    """A handshake of `client` (SNI `server_name`) with a server using the store's front context."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve() -> None:
        connection, _ = listener.accept()
        try:
            with store.front.wrap_socket(connection, server_side=True) as tls:
                tls.recv(1)
        except (ssl.SSLError, OSError):
            pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
                client.wrap_socket(raw, server_hostname=server_name) as tls:
            der = tls.getpeercert(binary_form=True)
            assert der is not None
            return x509.load_der_x509_certificate(der)
    finally:
        thread.join(timeout=10)
        listener.close()


def unverified(*, rsa_only: bool = False) -> ssl.SSLContext:
    context = ssl._create_unverified_context()  # noqa: S323  (the certificate is what is examined)
    if rsa_only:  # TLS 1.2 with an RSA-authenticated suite: only an RSA certificate will do
        context.maximum_version = ssl.TLSVersion.TLSv1_2
        context.set_ciphers("ECDHE-RSA-AES128-GCM-SHA256")
    return context


def serving_pid(cdn: RunningCdn, https_port: int, client_port: int) -> int:
    """The process of `cdn` holding the edge's end of the connection from `client_port` to `https_port` (its
    accepted socket's inode, from /proc/net/tcp, among the open files of the cluster's processes): which worker
    of an edge a connection reached."""
    inode = None
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local_port, remote_port = (int(f.rsplit(":", 1)[1], 16) for f in fields[1:3])
        if local_port == https_port and remote_port == client_port and fields[9] != "0":
            inode = fields[9]
    assert inode is not None, "the edge's end of the connection is not in /proc/net/tcp"
    target = f"socket:[{inode}]"
    for pid in cdn.descendants():
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") == target:
                    return pid
            except OSError:
                continue
    raise AssertionError("no process of the cluster holds the connection")
