"""A real control app and a real edge app, the edge listening through its hit site (assetcdn/edge/fastpath/) on
one port and through aiohttp's own site on another, so a test can talk raw HTTP/1.1 to the hit path
and compare it with what the application answers by itself. The per-test `make_hit_cdn` fixture is in
tests/edge/fastpath/conftest.py.

`RawConnection` is a bare socket client: it writes exactly the bytes a test gives it (pipelined,
split, malformed) and reads responses off the wire by their framing.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from multidict import CIMultiDict

import assetcdn.control.app  # noqa: F401
import assetcdn.edge.app  # noqa: F401
from assetcdn.edge.app_keys import NODE, SETTINGS
from assetcdn.edge.fastpath.hit_server import HitSite
from assetcdn.edge.node import EdgeNode
from assetcdn.shared.http_server import as_served
from tests.support.cdn import PURGE, control_and_edge_app, edge_worker_app, register_and_make_zone
from tests.support.control import ACCESS
from tests.support.wait import wait_until

READ_S = 10.0   # upper bound for one response to arrive (never asserted as a duration)


@dataclass
class Response:
    status: int
    reason: str
    headers: CIMultiDict[str]
    body: bytes
    raw_head: bytes = b""

    def header(self, name: str) -> str | None:
        return self.headers.get(name)


@dataclass
class RawConnection:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    methods: list[str] = field(default_factory=list)  # of the requests sent, to frame HEAD answers

    @classmethod
    async def open(cls, port: int) -> RawConnection:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        return cls(reader, writer)

    async def send(self, data: bytes) -> None:
        for line in data.split(b"\r\n\r\n"):
            first = line.split(b" ", 1)[0].strip()
            if first in (b"GET", b"HEAD", b"POST", b"PUT", b"DELETE", b"OPTIONS"):
                self.methods.append(first.decode())
        self.writer.write(data)
        await self.writer.drain()

    async def request(self, path: str, method: str = "GET", host: str = "edge.test", **headers: str) -> Response:
        await self.send(request_bytes(path, method, host, **headers))
        return await self.response()

    async def response(self) -> Response:
        head = await asyncio.wait_for(self.reader.readuntil(b"\r\n\r\n"), READ_S)
        status, reason, headers = parse_head(head)
        method = self.methods.pop(0) if self.methods else "GET"
        length = int(headers.get("Content-Length", "0"))
        body = b""
        if method != "HEAD" and status not in (204, 304) and length:
            body = await asyncio.wait_for(self.reader.readexactly(length), READ_S)
        return Response(status, reason, headers, body, head)

    async def closed_by_server(self) -> bool:
        """True once the server closed the connection (reads to EOF, bounded)."""
        try:
            rest = await asyncio.wait_for(self.reader.read(), READ_S)
        except (ConnectionError, TimeoutError):
            return False
        return rest == b""

    def close(self) -> None:
        self.writer.close()


def parse_head(head: bytes) -> tuple[int, str, CIMultiDict[str]]:
    """The status, reason and header fields of an HTTP/1.1 response head (its blank line included)."""
    lines = head.decode("latin-1").split("\r\n")
    _, status, reason = lines[0].split(" ", 2)
    headers: CIMultiDict[str] = CIMultiDict()
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            headers.add(name.strip(), value.strip())
    return int(status), reason, headers


def request_bytes(path: str, method: str = "GET", host: str = "edge.test", **headers: str) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}"]
    lines += [f"{name.replace('_', '-')}: {value}" for name, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


@dataclass
class HitCdn:
    control: TestClient
    app: web.Application
    site: HitSite
    port: int          # the hit site
    plain_port: int    # the same application behind aiohttp's own TCPSite
    siblings: tuple[web.Application, ...] = ()  # the edge's other workers (their cluster sites, and a plain site)
    sibling_ports: tuple[int, ...] = ()          # each sibling's plain site (aiohttp's own TCPSite)

    @property
    def node(self) -> EdgeNode:
        return self.app[NODE]

    async def upload(self, cdn_path: str, data: bytes) -> None:
        """PUT through control's storage API; returns once this edge holds the new version."""
        resp = await self.control.put(f"/api/storage/{cdn_path}", data=data, headers=ACCESS)
        assert resp.status == 201, await resp.text()
        digest = hashlib.sha256(data).hexdigest()

        async def arrived() -> bool:
            entry = self.node.replica.get(cdn_path)
            return entry is not None and entry.sha256 == digest

        await wait_until(arrived, f"{cdn_path} reaching the edge")

    async def delete(self, cdn_path: str) -> None:
        resp = await self.control.delete(f"/api/storage/{cdn_path}", headers=ACCESS)
        assert resp.status == 200, await resp.text()

        async def gone() -> bool:
            return self.node.replica.get(cdn_path) is None

        await wait_until(gone, f"{cdn_path} leaving the edge")

    async def purge(self, body: dict[str, Any]) -> None:
        resp = await self.control.post("/api/purge", json=body, headers=PURGE)
        assert resp.status == 200, await resp.text()

    async def connect(self) -> RawConnection:
        return await RawConnection.open(self.port)

    async def plain(self) -> RawConnection:
        return await RawConnection.open(self.plain_port)

    async def sibling(self, index: int = 0) -> RawConnection:
        """A connection to the plain site of the edge's other worker `index` (one client of the node's workers)."""
        return await RawConnection.open(self.sibling_ports[index])


HitCdnFactory = Callable[..., Awaitable[HitCdn]]


async def access_lines(cdn: HitCdn, count: int) -> list[dict[str, Any]]:
    """The edge's access log, once it has at least `count` lines."""
    access = cdn.node.deliveries.access
    assert access is not None and access.path is not None
    path = access.path
    lines: list[dict[str, Any]] = []

    async def written() -> bool:
        nonlocal lines
        await access.flush()
        lines = [orjson.loads(line) for line in path.read_bytes().splitlines()] if path.exists() else []
        return len(lines) >= count

    await wait_until(written, f"{count} access-log lines")
    return lines


async def start_hit_cdn(root: Path, serve: Callable[[web.Application], Awaitable[TestClient]],
                        runners: list[web.AppRunner], env: dict[str, str], *, workers: int = 0) -> HitCdn:
    """Control served by `serve` and the edge on its hit site and plain site under `root` (its runner added to
    `runners` for the caller to clean up); returns once the edge is synced and registered and the zone exists.
    `workers` above 1: the edge's other workers run too (cluster sites only, the cache shared), and it returns
    once each worker lists them all as shields."""
    as_served()  # as the edge process runs aiohttp (tests/conftest.py has every test process do so already)
    control_client, app = await control_and_edge_app(root, serve, env, "edge-f", workers=workers)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0,
                           keepalive_timeout=float(app[SETTINGS].get("server", "header_timeout_s")))
    await runner.setup()
    runners.append(runner)
    site = HitSite(runner, "127.0.0.1", 0)
    await site.start()
    plain = web.TCPSite(runner, "127.0.0.1", 0)
    await plain.start()
    siblings, sibling_ports = [], []
    for worker in range(1, workers):
        sibling = edge_worker_app(app[SETTINGS], control_client, root, "edge-f", worker=worker, workers=workers)
        sibling_runner = web.AppRunner(sibling, access_log=None, shutdown_timeout=1.0)
        await sibling_runner.setup()
        runners.append(sibling_runner)
        siblings.append(sibling)
        sibling_site = web.TCPSite(sibling_runner, "127.0.0.1", 0)
        await sibling_site.start()
        sibling_ports.append(sibling_site.port)
    cdn = HitCdn(control_client, app, site, site.port, plain.port, tuple(siblings), tuple(sibling_ports))
    nodes = [cdn.node, *(sibling[NODE] for sibling in siblings)]

    async def synced() -> bool:
        return all(node.synced for node in nodes) and (workers < 2 or all(
            len(node.shields.peers()) == workers for node in nodes))

    await wait_until(synced, "edge caught up with control")
    await register_and_make_zone(control_client, "edge-f")
    return cdn


@asynccontextmanager
async def shared_hit_cdn(root: Path, *, workers: int = 0, **env: str) -> AsyncIterator[HitCdn]:
    """One CDN for the tests of a module that only read what the module's fixture stored (module-scoped
    fixtures cannot use pytest-aiohttp's per-test servers), with the settings `env` (`workers`: as for
    `start_hit_cdn`); stopped when the module's tests are done."""
    runners: list[web.AppRunner] = []
    clients: list[TestClient] = []

    async def serve(app: web.Application) -> TestClient:
        client = TestClient(TestServer(app))
        await client.start_server()
        clients.append(client)
        return client

    try:
        yield await start_hit_cdn(root, serve, runners, env, workers=workers)
    finally:
        for runner in runners:   # the edge first, so it stops before its control plane
            await runner.cleanup()
        for client in clients:
            await client.close()
