"""Fixtures of the HTTPS tests: an in-process control and edge (`make_cdn`), and a real `assetcdn up` with an
https port whose operator certificates come from a test CA made here (`https_cdn`)."""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest

from tests.edge.tls.certs import Issued, TestCa
from tests.integration.harness import (
    ACCESS,
    ACCOUNT,
    METRICS,
    RunningCdn,
    free_port_block,
    start_cdn,
)
from tests.support.cdn import CdnFactory, cdn_factory

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
        return HttpsCdn(running, https_port, ca, ca.write_root(tmp), certs, main, wildcard)
    except BaseException:
        running.stop()
        raise


@pytest.fixture
def make_cdn(aiohttp_client, tmp_path: Path) -> CdnFactory:  # type: ignore[no-untyped-def]
    """A real control and edge in one event loop, of its own for each test (tests/support/cdn.py)."""
    return cdn_factory(tmp_path, aiohttp_client)


@pytest.fixture(scope="package")
def https_cdn(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpsCdn]:
    cdn = start_https_cdn(tmp_path_factory.mktemp("https"))
    try:
        yield cdn
    finally:
        cdn.cdn.stop()
