"""A pull zone's connections to its origin (`[origin] pool_per_origin`, assetcdn/edge/origin_http.py `Pool`): every way
an origin request can end while it holds or waits for one of the pool's slots gives that slot back, so that
`pool_per_origin` requests can still reach the origin at once afterwards, on the hit path's fills and on the
application's alike."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest
from aiohttp import ClientPayloadError, ClientSession, ClientTimeout, web

from tests.support.cdn import Cdn, CdnFactory
from tests.support.origins import PREFIX, ScriptedOrigin, add_pull_zone, serve_origin
from tests.support.wait import wait_until

POOL = 2
APPLICATION = {"Range": "bytes=0-"}  # a request the hit path leaves to the application's serve sequence


class Stalling:
    """An origin whose paths stall until `go` is set: `/head-N` before its head, `/body-N` after the head and the
    first bytes of a body that may be kept, `/unkept-N` the same with a body that may not; `/held` answers once
    `held_go` is set, counting the requests it holds at once, and sets it itself once it holds `POOL` (at once, not
    when the test next looks: the edge gives each the 1 s first-byte time the stalled heads need)."""

    def __init__(self, origin: ScriptedOrigin) -> None:
        self.go = asyncio.Event()
        self.held_go = asyncio.Event()
        self.holding = 0
        self.most_held = 0
        for n in range(8):
            origin.route(f"/head-{n}", self.stall_head)
            origin.route(f"/body-{n}", self.stall_body("max-age=600"))
            origin.route(f"/unkept-{n}", self.stall_body("no-store"))
        origin.route("/held", self.held)

    async def stall_head(self, request: web.Request) -> web.StreamResponse:
        await self.go.wait()
        return web.Response(body=b"late", headers={"Cache-Control": "no-store"})

    def stall_body(self, cache_control: str) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        async def answer(request: web.Request) -> web.StreamResponse:
            response = web.StreamResponse(headers={"Cache-Control": cache_control, "Content-Type": "text/plain"})
            response.content_length = 200_000
            await response.prepare(request)
            await response.write(b"x" * 100_000)
            await self.go.wait()
            await response.write(b"x" * 100_000)
            return response

        return answer

    async def held(self, request: web.Request) -> web.StreamResponse:
        self.holding += 1
        self.most_held = max(self.most_held, self.holding)
        if self.holding == POOL:
            self.held_go.set()
        try:
            await self.held_go.wait()
        finally:
            self.holding -= 1
        return web.Response(body=b"held", headers={"Cache-Control": "no-store"})


async def gone_after(session: ClientSession, url: str, seconds: float, *, read: int = 0,
                     headers: dict[str, str] | None = None) -> None:
    """A client that goes away (closes its connection) after `seconds`, having read `read` bytes of the body."""
    try:
        async with session.get(url, headers=headers, timeout=ClientTimeout(total=seconds)) as resp:
            if read:
                await resp.content.readexactly(read)
            await asyncio.sleep(seconds * 2)
    except (TimeoutError, ClientPayloadError):  # gone, or cut off first
        pass


async def pool_runs_in_full(cdn: Cdn, stalling: Stalling, headers: dict[str, str]) -> None:
    """`POOL` requests for /held reach the origin at once (which answers them then), and are answered 200; one that
    finds no free connection waits, and the origin holds the other past the first-byte time (504)."""
    stalling.held_go.clear()
    stalling.most_held = 0
    # URLs of their own (a query string each): requests for one URL would wait for one origin request.
    requests = [asyncio.create_task(cdn.edge.get(f"/pool/held?{n}", headers=headers)) for n in range(POOL)]
    for task in requests:
        resp = await task
        assert (resp.status, await resp.read()) == (200, b"held")
    assert stalling.most_held == POOL


async def test_every_way_an_origin_request_ends_gives_its_connection_back(make_cdn: CdnFactory) -> None:
    origin = ScriptedOrigin()
    stalling = Stalling(origin)
    server = await serve_origin(origin)
    try:
        cdn = await make_cdn(ASSETCDN_ORIGIN_ALLOW_LOOPBACK="true", ASSETCDN_ORIGIN_POOL_PER_ORIGIN=str(POOL),
                             ASSETCDN_ORIGIN_FIRST_BYTE_TIMEOUT_S="1", ASSETCDN_ORIGIN_IDLE_TIMEOUT_S="1",
                             ASSETCDN_TLS_SEND_TIMEOUT_S="1")
        await add_pull_zone(cdn, "pool", {"Url": f"http://127.0.0.1:{server.port}{PREFIX}"})
        base = str(cdn.edge.make_url("/pool/"))
        for headers in ({}, APPLICATION):  # the hit path's fills, then the application's
            await pool_runs_in_full(cdn, stalling, headers)
            async with ClientSession() as session:
                # Heads that do not come: their clients go while they wait for them, and while others wait for a
                # free connection behind them; the first-byte time ends both.
                await asyncio.gather(*(gone_after(session, f"{base}head-{n}", 0.3, headers=headers)
                                       for n in range(POOL + 2)))
                # ... and the same with their clients still there: 504.
                answers = await asyncio.gather(*(cdn.edge.get(f"/pool/head-{n}", headers=headers)
                                                 for n in range(POOL + 2, POOL * 2 + 3)))
                assert [resp.status for resp in answers] == [504] * (POOL + 1)
                # Bodies that stall after their head (cut off by the idle timeout), kept or not, with their clients
                # gone after the first bytes or still reading.
                await asyncio.gather(*(gone_after(session, f"{base}{kind}-{n}", 0.3, read=1000, headers=headers)
                                       for kind in ("body", "unkept") for n in range(POOL)))
                # Every one of them gives its connection back (a kept body's once the idle timeout cuts it off)
                # before a client still reading asks: asked sooner, its wait for a connection and the stalled
                # bodies' idle timeout raced for the same second, and on a loaded machine its first byte lost.
                async def given_back() -> bool:
                    return all(slots.free == POOL for slots in cdn.node.origins.pool()._slots.values())

                await wait_until(given_back, "every stalled body's connection given back")
                for kind in ("body", "unkept"):
                    resp = await cdn.edge.get(f"/pool/{kind}-{POOL}", headers=headers)
                    assert resp.status == 200
                    with pytest.raises(ClientPayloadError):  # cut short, never taken for whole
                        await resp.read()
            await pool_runs_in_full(cdn, stalling, headers)
    finally:
        stalling.go.set()
        stalling.held_go.set()
        await server.close()
