"""Origins the tests script on 127.0.0.1 (`ScriptedOrigin`: answers per path, every request recorded), and a
pull zone of a real control and edge app that pulls from one (`shared_pull_zone`; the module-scoped `pull`
fixture is in tests/edge/routes/conftest.py), or of a hit-path edge (`pull_zone_on_hit_cdn`)."""

from __future__ import annotations

import asyncio
import time
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import ClientResponse, ClientSession, web
from aiohttp.test_utils import TestServer
from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

from assetcdn.edge.app_keys import NODE
from assetcdn.edge.node import EdgeNode
from assetcdn.edge.states.keys import pull_key
from assetcdn.edge.states.pull import StoredResponse, Varied, lookup
from tests.integration.harness import free_port_block
from tests.support.cdn import Cdn, shared_cdn_apps
from tests.support.control import ACCOUNT
from tests.support.hit_cdn import HitCdn, shared_hit_cdn
from tests.support.wait import wait_until

ZONE = "pulled"
PREFIX = "/up"                                   # the origin URL's path prefix
HOST_HEADER = "assets.origin.example"            # the zone's HostHeader
SECRET = ("X-Origin-Secret", "s3cret-value")     # the zone's RequestHeaders
TENANT_HOST = f"{ZONE}.cdn.localhost"            # the default base domain is cdn.localhost
FIRST_BYTE_TIMEOUT_S = "1"
MAX_OBJECT_MB = 6                                # above the large body's 5 MB
BODY_TIMEOUT_S = "1"
ORIGIN_BODY_TIMEOUT_S = 3                        # all the waiting for one origin body
LONG = {"Cache-Control": "max-age=600"}

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def chunked_answer(body: bytes, headers: Mapping[str, str], piece: int = 64 * 1024) -> Handler:
    """An origin route: `body` with `headers`, chunked (no declared length), written `piece` bytes at a time."""
    async def answer(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers=headers)
        response.enable_chunked_encoding()
        await response.prepare(request)
        for start in range(0, len(body), piece):
            await response.write(body[start:start + piece])
        await response.write_eof()
        return response

    return answer


def stored_url(node: EdgeNode, zone: str, name: str, query: str = "", scheme: str = "http") -> StoredResponse | None:
    """What the edge holds for a pull zone's URL of no Vary, as a request without fields over `scheme` selects it."""
    pulled = node.config.pull_zones[zone]
    return lookup(node, pull_key(zone, name, query, scheme), Varied((), pulled, None, scheme))


async def wait_stale(node: EdgeNode, zone: str, name: str, what: str = "the stored copy stale") -> None:
    """Wait until the copy of a pull zone's URL (`stored_url`) is stored and stale."""
    async def stale() -> bool:
        found = stored_url(node, zone, name)
        return found is not None and found.freshness.staleness(time.time()) > 0

    await wait_until(stale, what)


@dataclass(frozen=True)
class Seen:
    method: str
    headers: CIMultiDictProxy[str]
    body: bytes


@dataclass
class ScriptedOrigin:
    """An origin whose answers each test scripts per path, recording every request it is sent."""

    handlers: dict[str, Handler] = field(default_factory=dict)
    seen: dict[str, list[Seen]] = field(default_factory=lambda: defaultdict(list))

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        return app

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        path = request.rel_url.raw_path
        self.seen[path].append(Seen(request.method, request.headers, await request.read()))
        handler = self.handlers.get(path)
        if handler is None:
            return web.Response(status=404, text="not scripted")
        return await handler(request)

    def route(self, name: str, handler: Handler) -> None:
        self.handlers[PREFIX + name] = handler

    def answer(self, name: str, body: bytes = b"", *, status: int = 200,
               headers: Mapping[str, str] | None = None) -> None:
        async def fixed(_request: web.Request) -> web.StreamResponse:
            return web.Response(status=status, body=body, headers=dict(headers or {}))

        self.route(name, fixed)

    def hold(self, name: str, body: bytes, headers: Mapping[str, str], *, first: int = 100,
             cut: bool = False) -> asyncio.Event:
        """Answer `name` with its head and the first `first` bytes of `body`, then the rest once the returned
        event is set (`held_answer`): a fill the test catches while it reads the origin's body."""
        release = asyncio.Event()
        self.route(name, held_answer(body, headers, first, release, cut=cut))
        return release

    def requests(self, name: str) -> list[Seen]:
        return self.seen[PREFIX + name]

    def count(self, name: str, method: str = "GET") -> int:
        return sum(1 for seen in self.requests(name) if seen.method == method)


def held_answer(body: bytes, headers: Mapping[str, str], first: int, release: asyncio.Event, *,
                cut: bool = False) -> Handler:
    """An origin's answer of `body`'s declared length with `headers`: its first `first` bytes, then the rest once
    `release` is set, or (`cut`) the connection closed then instead, short of the declared length."""
    async def held(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers=dict(headers))
        response.content_length = len(body)
        await response.prepare(request)
        await response.write(body[:first])
        await release.wait()
        if cut:
            assert request.transport is not None
            request.transport.close()
        else:
            await response.write(body[first:])
        return response

    return held


@dataclass
class Pull:
    cdn: Cdn
    origin: ScriptedOrigin

    async def get(self, name: str, **kwargs: Any) -> ClientResponse:
        resp = await self.cdn.edge.get(f"/{ZONE}{name}", **kwargs)
        await resp.read()
        return resp

    async def redirects(self, content: str) -> None:
        """`_redirects` set to `content`, returned once the edge has it."""
        resp = await self.cdn.control.post("/api/core/rules", json={"File": "_redirects", "Content": content},
                                           headers=ACCOUNT)
        assert resp.status == 200, await resp.text()

        async def arrived() -> bool:
            return bool(self.cdn.node.config.rules.redirects.rules) == bool(content)

        await wait_until(arrived, "the redirects reaching the edge")


async def relay(url: str, request: web.Request) -> web.StreamResponse:
    """`request` sent on to `url` (an edge's cluster site) as it came, its signature too, and the answer back: another
    address that leads to that site (a DNS name, a NAT address)."""
    body = await request.read()
    async with ClientSession(auto_decompress=False) as http, \
            http.request(request.method, URL(url + request.raw_path, encoded=True), headers=request.headers,
                         data=body or None) as resp:
        body = await resp.read()
        headers = CIMultiDict((name, value) for name, value in resp.headers.items()
                              if name.lower() not in ("content-length", "transfer-encoding", "date", "server"))
        return web.Response(status=resp.status, body=body, headers=headers)


async def serve_origin(origin: ScriptedOrigin) -> TestServer:
    server = TestServer(origin.app(), host="127.0.0.1")
    await server.start_server()
    return server


async def add_pull_zone(cdn: Cdn, name: str, origin: Mapping[str, Any]) -> None:
    """A pull zone created through control's API, returned once the edge serves it."""
    resp = await cdn.control.post("/api/core/zones", json={"Name": name, "Origin": dict(origin)}, headers=ACCOUNT)
    assert resp.status == 201, await resp.text()

    async def arrived() -> bool:
        return name in cdn.node.config.pull_zones

    await wait_until(arrived, f"pull zone {name} reaching the edge")


@asynccontextmanager
async def shared_pull_zone(root: Path, first_byte_timeout_s: str = FIRST_BYTE_TIMEOUT_S,
                           **env: str) -> AsyncIterator[Pull]:
    """One CDN (tests/support/cdn.py) with the pull zone ZONE, and the scripted origin it pulls from, for the
    tests of a module (each with paths of its own); stopped when the module's tests are done. `first_byte_timeout_s`:
    the origin's, longer for tests whose origin holds its answer until their requests have gathered; `env`: other
    settings (a test's own CDN; ASSETCDN_ORIGIN_BODY_TIMEOUT_S among them replaces ORIGIN_BODY_TIMEOUT_S)."""
    origin = ScriptedOrigin()
    server = await serve_origin(origin)
    try:
        # The idle timeout is far above the tests' waits: only the first-byte and body timeouts end a silent origin.
        settings = {"ASSETCDN_ORIGIN_BODY_TIMEOUT_S": str(ORIGIN_BODY_TIMEOUT_S), **env}
        async with shared_cdn_apps(root, ASSETCDN_ORIGIN_ALLOW_LOOPBACK="true",
                                   ASSETCDN_ORIGIN_FIRST_BYTE_TIMEOUT_S=first_byte_timeout_s,
                                   ASSETCDN_ORIGIN_IDLE_TIMEOUT_S="300",
                                   ASSETCDN_ORIGIN_MAX_OBJECT_MB=str(MAX_OBJECT_MB),
                                   ASSETCDN_SERVER_BODY_TIMEOUT_S=BODY_TIMEOUT_S, **settings) as cdn:
            await add_pull_zone(cdn, ZONE, {"Url": f"http://127.0.0.1:{server.port}{PREFIX}",
                                            "HostHeader": HOST_HEADER, "RequestHeaders": dict([SECRET])})
            yield Pull(cdn, origin)
    finally:
        await server.close()


class CountingOrigin:
    """An origin whose every path answers its own body (`body of <path>`), cacheable for ten minutes, `delay_s` after it
    is asked (so that the requests for one path overlap); `asked` counts the requests per path."""

    def __init__(self, delay_s: float = 0.0) -> None:
        self.asked = Counter[str]()
        self.delay_s = delay_s
        self.app = web.Application()
        self.app.router.add_get("/{tail:.*}", self.handler)

    async def handler(self, request: web.Request) -> web.StreamResponse:
        self.asked[request.path] += 1
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        return web.Response(body=f"body of {request.path}".encode(), headers={"Cache-Control": "max-age=600"})


@asynccontextmanager
async def origin_app(app: web.Application) -> AsyncIterator[str]:
    """`app` served on a free loopback port, as an origin; its base URL."""
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        yield f"http://127.0.0.1:{server.port}"
    finally:
        await server.close()


def sibling_as_shield() -> dict[str, str]:
    """Settings for a two-worker edge whose second worker is the configured shield of every path (`[origin] shield`
    at its cluster address): the first worker asks it over the cluster protocol, as an edge asks another edge's
    shield, which the fleet's choice never has a worker of the same edge do."""
    base = free_port_block(2)
    return {"ASSETCDN_EDGE_CLUSTER_PORT": str(base), "ASSETCDN_ORIGIN_SHIELD": f"http://127.0.0.1:{base + 1}"}


@asynccontextmanager
async def pull_zone_on_hit_cdn(directory: Path, zone: str, *, workers: int = 0, store_set_cookie: bool = False,
                               sibling_shield: bool = False, **env: str) -> AsyncIterator[tuple[HitCdn, ScriptedOrigin]]:
    """A hit-path edge (tests/support/hit_cdn.py, `workers` as `start_hit_cdn` takes it) with pull zone `zone`
    in front of a scripted origin (`StoreSetCookie` as `store_set_cookie`), once every worker has the zone; `env`:
    settings beside loopback origins being allowed. `sibling_shield`: the second worker the configured shield
    (`sibling_as_shield`)."""
    if sibling_shield:  # its second worker the shield of every path
        env = {**env, **sibling_as_shield()}
    origin = ScriptedOrigin()
    server = await serve_origin(origin)
    try:
        async with shared_hit_cdn(directory, workers=workers, ASSETCDN_ORIGIN_ALLOW_LOOPBACK="true", **env) as cdn:
            resp = await cdn.control.post("/api/core/zones", headers=ACCOUNT, json={
                "Name": zone, "Origin": {"Url": f"http://127.0.0.1:{server.port}{PREFIX}",
                                         "StoreSetCookie": store_set_cookie}})
            assert resp.status == 201, await resp.text()

            async def arrived() -> bool:
                # Each worker at the hit site's generation too: a shield behind the asking worker declines.
                nodes = [app[NODE] for app in (cdn.app, *cdn.siblings)]
                return all(zone in node.config.pull_zones and node.applied_generation >= cdn.node.applied_generation
                           for node in nodes)

            await wait_until(arrived, "the pull zone reaching the edge")
            yield cdn, origin
    finally:
        await server.close()
