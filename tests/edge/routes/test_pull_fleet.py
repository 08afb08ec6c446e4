"""Shielding across a fleet of edges (assetcdn/edge/shield.py): a real control app and two real edge apps in one
event loop, each with its own cache and cluster site, both in front of one scripted origin. Each path's shield is
the edge rendezvous hashing picks; the tests pick paths that edge A asks edge B, its shield, for, and look at what
a client of either edge gets (status, body, X-Cache, Age) and what the origin was asked."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from assetcdn import control
from assetcdn.control.publishing.service import REGISTRY
from assetcdn.edge.app_keys import NODE
from assetcdn.edge.cache.tags import pull_path_tag
from assetcdn.edge.node import EdgeNode
from assetcdn.edge.shield import Peer
from assetcdn.edge.states.keys import pull_key
from assetcdn.edge.states.pull import FLIGHTS, flight_key
from tests.edge.hit_server import HitTestServer
from tests.integration.harness import free_port_block
from tests.support.cdn import PURGE, edge_worker_app
from tests.support.cdn import test_settings as settings_of
from tests.support.control import ACCOUNT, METRICS, SECRETS
from tests.support.metrics_text import metric
from tests.support.origins import PREFIX, ScriptedOrigin, relay, serve_origin, stored_url
from tests.support.wait import WAIT_S, wait_until

ZONE = "fleet"
Serve = Callable[[Any], Awaitable[TestClient]]


@dataclass
class Fleet:
    control: TestClient
    a: TestClient      # the edge whose clients the tests are; it asks B for the paths B shields
    b: TestClient      # the shield of those paths
    origin: ScriptedOrigin

    @staticmethod
    def node(edge: TestClient) -> EdgeNode:
        return edge.app[NODE]

    def shielded_by_b(self, stem: str) -> str:
        """A path of ZONE whose shield, for edge A, is edge B."""
        shields = self.node(self.a).shields
        names = (f"/{stem}-{i}.txt" for i in itertools.count())
        return next(name for name in names if shields.shield_for(pull_path_tag(ZONE, name)) is not None)

    async def get(self, edge: TestClient, name: str, **headers: str) -> tuple[int, str, bytes, aiohttp.ClientResponse]:
        resp = await edge.get(f"/{ZONE}{name}", headers=headers)
        return resp.status, resp.headers.get("X-Cache", ""), await resp.read(), resp

    async def holds(self, edge: TestClient, name: str, etag: str) -> None:
        """Returns once `edge` holds `name`'s response of `etag`."""
        async def stored() -> bool:
            found = stored_url(self.node(edge), ZONE, name)
            return found is not None and found.obj.etag == etag

        await wait_until(stored, f"{name} of {etag} stored")

    async def asked(self, name: str, times: int) -> None:
        """Returns once the origin was asked for `name` `times` times."""
        async def counted() -> bool:
            return self.origin.count(name) >= times

        await wait_until(counted, f"the origin asked for {name} {times} times")

    async def settled(self, edge: TestClient) -> None:
        """Returns once `edge` has no revalidation or fill left running in the background."""
        async def idle() -> bool:
            return not self.node(edge).background

        await wait_until(idle, "the edge's background revalidations over")

    async def purge(self, body: dict[str, Any]) -> dict[str, Any]:
        resp = await self.control.post("/api/purge", json=body, headers=PURGE)
        assert resp.status == 200, await resp.text()
        answer: dict[str, Any] = await resp.json()
        assert sorted(answer["edges"]["acknowledged"]) == ["edge-a", "edge-b"], answer
        return answer


@asynccontextmanager
async def fleet(root: Path, serve: Serve, each: Mapping[str, Mapping[str, str]] | None = None,
                **env: str) -> AsyncIterator[Fleet]:
    """Control, edges A and B (each with the hit path in front of its application, as the edge process serves it)
    and a pull zone of the scripted origin, once both edges know the zone and each other. `each`: settings of one
    edge (`edge-a`, `edge-b`) beside `env`, every one's."""
    origin = ScriptedOrigin()
    server = await serve_origin(origin)
    try:
        common = {"ASSETCDN_ORIGIN_ALLOW_LOOPBACK": "true", "ASSETCDN_ORIGIN_FIRST_BYTE_TIMEOUT_S": "5", **env}
        settings = settings_of(common)
        control_client = await serve(control.app.create_app(settings, SECRETS, root / "data"))
        a, b = [await serve(HitTestServer(edge_worker_app(
                    settings_of({**common, **(each or {}).get(name, {})}), control_client, root / name, name)))
                for name in ("edge-a", "edge-b")]
        resp = await control_client.post("/api/core/zones", headers=ACCOUNT, json={
            "Name": ZONE, "Origin": {"Url": f"http://127.0.0.1:{server.port}{PREFIX}"}})
        assert resp.status == 201, await resp.text()
        nodes = [Fleet.node(a), Fleet.node(b)]

        async def ready() -> bool:
            return all(ZONE in node.config.pull_zones and len(node.shields.peers()) == 2 for node in nodes) and \
                nodes[0].applied_generation == nodes[1].applied_generation

        await wait_until(ready, "both edges knowing the pull zone and each other")
        yield Fleet(control_client, a, b, origin)
    finally:
        await server.close()


async def test_a_soft_purged_copy_a_shield_answers_from_is_not_kept_fresh_by_the_asking_edge(
        aiohttp_client: Serve, tmp_path: Path) -> None:
    """A soft purge marks both edges' copies stale. Edge A's next request (its copy within stale-while-revalidate)
    is revalidated through B, whose own copy is as stale: B answers it from that copy (304) while it revalidates
    in the background. A 304 from a stale copy confirms nothing: A's copy stays stale, so once the origin's new
    version is at B, A's next request fetches it; kept fresh, A served the purged copy as a HIT for ten minutes."""
    async with fleet(tmp_path, aiohttp_client) as run:
        name = run.shielded_by_b("soft")
        cached = {"Cache-Control": "max-age=600, stale-while-revalidate=600"}
        run.origin.answer(name, b"version one", headers={**cached, "ETag": '"1"'})
        assert (await run.get(run.a, name))[:3] == (200, "MISS", b"version one")
        run.origin.answer(name, b"version two", headers={**cached, "ETag": '"2"'})
        await run.purge({"urls": [f"/{ZONE}{name}"], "soft": True})
        assert (await run.get(run.a, name))[:3] == (200, "STALE", b"version one")
        await run.holds(run.b, name, '"2"')   # B's own revalidation, after it answered A's
        await run.settled(run.a)              # A's revalidation through B
        assert (await run.get(run.a, name))[:3] == (200, "STALE", b"version one")   # revalidated again, through B
        await run.holds(run.a, name, '"2"')
        assert (await run.get(run.a, name))[:3] == (200, "HIT", b"version two")
        assert run.origin.count(name) == 2    # the first fill, and B's revalidation


async def test_a_shields_soft_purged_copy_is_not_kept_fresh_by_an_edge_that_had_none(
        aiohttp_client: Serve, tmp_path: Path) -> None:
    """B holds a copy A does not; a soft purge marks it stale. A's first request is answered from B's stale copy
    (within its stale-while-revalidate) while B revalidates it: A keeps that answer stale, and asks again."""
    async with fleet(tmp_path, aiohttp_client) as run:
        name = run.shielded_by_b("unseen")
        cached = {"Cache-Control": "max-age=600, stale-while-revalidate=600"}
        run.origin.answer(name, b"version one", headers={**cached, "ETag": '"1"'})
        assert (await run.get(run.b, name))[:3] == (200, "MISS", b"version one")
        run.origin.answer(name, b"version two", headers={**cached, "ETag": '"2"'})
        await run.purge({"urls": [f"/{ZONE}{name}"], "soft": True})
        status, x_cache, body, resp = await run.get(run.a, name)
        assert (status, x_cache, body) == (200, "MISS", b"version one")
        assert resp.headers.getall("Cache-Status")[0] == "assetcdn-shield; hit; fwd=stale"
        await run.holds(run.b, name, '"2"')
        await run.settled(run.a)
        assert (await run.get(run.a, name))[:3] == (200, "STALE", b"version one")
        await run.holds(run.a, name, '"2"')
        assert (await run.get(run.a, name))[:3] == (200, "HIT", b"version two")
        assert run.origin.count(name) == 2


async def test_a_shields_stale_copy_a_clients_max_stale_takes_is_not_kept_fresh(
        aiohttp_client: Serve, tmp_path: Path) -> None:
    """A client's `max-stale` lets B answer A's request from its soft-purged copy as a hit (no revalidation, RFC 9111
    4.2.4): that client's choice. A keeps the answer stale, so the next client without it gets the origin's new
    version; kept fresh, every client of A got the purged copy as a HIT for ten minutes."""
    async with fleet(tmp_path, aiohttp_client) as run:
        name = run.shielded_by_b("max-stale")
        run.origin.answer(name, b"version one", headers={"Cache-Control": "max-age=600", "ETag": '"1"'})
        assert (await run.get(run.b, name))[:3] == (200, "MISS", b"version one")
        run.origin.answer(name, b"version two", headers={"Cache-Control": "max-age=600", "ETag": '"2"'})
        await run.purge({"urls": [f"/{ZONE}{name}"], "soft": True})
        status, x_cache, body, resp = await run.get(run.a, name, **{"Cache-Control": "max-stale"})
        assert (status, x_cache, body) == (200, "MISS", b"version one")
        assert resp.headers.getall("Cache-Status")[0].startswith("assetcdn-shield; hit; ttl=")
        assert (await run.get(run.a, name))[:3] == (200, "MISS", b"version two")
        assert (await run.get(run.a, name))[:3] == (200, "HIT", b"version two")
        assert run.origin.count(name) == 2


async def test_an_edge_waiting_at_its_shield_for_a_long_fill_is_not_timed_out_and_leaves_the_shield_up(
        aiohttp_client: Serve, tmp_path: Path) -> None:
    """B is filling a URL whose body the origin sends slowly; A's request for it reaches B and waits there for that
    body. B gives up waiting in time for A (within the share of the first-byte time a shield gives its origin for
    another edge) with a refusal of that one request: A asks the origin itself, and B stays A's shield for the other
    paths. Waiting on, B made A's request run out its first-byte time, and A passed B over for every path."""
    async with fleet(tmp_path, aiohttp_client, ASSETCDN_ORIGIN_FIRST_BYTE_TIMEOUT_S="6") as run:
        name = run.shielded_by_b("long")
        body = b"x" * 200_000
        release = run.origin.hold(name, body, {"Cache-Control": "max-age=600", "Content-Type": "text/plain"})
        try:
            at_b = asyncio.ensure_future(run.b.get(f"/{ZONE}{name}"))   # B's own client: B's fill
            await run.asked(name, 1)
            at_a = asyncio.ensure_future(run.a.get(f"/{ZONE}{name}"))
            await run.asked(name, 2)   # by A itself, once B declined
        finally:
            release.set()
        for answer in (at_b, at_a):
            resp = await asyncio.wait_for(answer, WAIT_S)
            assert (resp.status, await resp.read()) == (200, body)
        assert Fleet.node(run.a).shields.status()["down"] == 0
        other = run.shielded_by_b("next")
        run.origin.answer(other, b"through the shield", headers={"Cache-Control": "max-age=600"})
        status, x_cache, got, resp = await run.get(run.a, other)
        assert (status, x_cache, got) == (200, "MISS", b"through the shield")
        assert resp.headers.getall("Cache-Status")[0] == "assetcdn-shield; fwd=uri-miss; stored"


async def test_a_copy_a_shield_holds_on_disk_only_is_answered_to_the_asking_edge(
        aiohttp_client: Serve, tmp_path: Path) -> None:
    """B holds a body over 1 MB (kept on disk only, sent from its file): A's request for it is answered from that copy
    through B's cluster site. Reading the send timeout for that file's body failed there (the cluster site's
    application has no settings of its own), so B answered 500: A passed B over for every path for shield_retry_s,
    and asked the origin again for a copy its shield held."""
    async with fleet(tmp_path, aiohttp_client) as run:
        name = run.shielded_by_b("large")
        body = bytes(range(256)) * 8192  # 2 MB
        run.origin.answer(name, body, headers={"Cache-Control": "max-age=600",
                                               "Content-Type": "application/octet-stream"})
        assert (await run.get(run.b, name))[:3] == (200, "MISS", body)   # B's own client: B's copy

        async def on_disk_only() -> bool:
            found = stored_url(Fleet.node(run.b), ZONE, name)
            return found is not None and found.obj.body is None

        await wait_until(on_disk_only, f"{name} kept on B's disk only")
        status, x_cache, got, resp = await run.get(run.a, name)
        assert (status, x_cache, got) == (200, "MISS", body)
        assert resp.headers.getall("Cache-Status")[0].startswith("assetcdn-shield; hit")
        assert run.origin.count(name) == 1
        assert Fleet.node(run.a).shields.status()["down"] == 0


async def test_an_edge_asking_its_shield_for_another_variant_than_the_fill_under_way_there_is_answered_through_it(
        aiohttp_client: Serve, tmp_path: Path) -> None:
    """B is filling one Vary variant of a URL (its own client's, `Accept-Encoding: gzip`) whose body the origin sends
    slowly; A asks B for another (`br`). That fill's answer is no answer to A's request, so B asks the origin for
    A's variant at once, as for a client of its own. B declined it instead (409 ShieldFilling, "waited for as long as
    the asking edge has", though it had not waited at all): A asked the origin itself, and no edge kept that
    variant at the shield."""
    async with fleet(tmp_path, aiohttp_client) as run:
        name = run.shielded_by_b("varied")
        release = asyncio.Event()

        async def varied(request: web.Request) -> web.StreamResponse:
            coding = request.headers.get("Accept-Encoding", "")
            body = f"for {coding} ".encode() * 1000
            response = web.StreamResponse(headers={"Cache-Control": "max-age=600", "Vary": "Accept-Encoding",
                                                   "Content-Type": "text/plain"})
            response.content_length = len(body)
            await response.prepare(request)
            await response.write(body[:100])
            if coding == "gzip":
                await release.wait()
            await response.write(body[100:])
            return response

        run.origin.route(name, varied)
        try:
            at_b = asyncio.ensure_future(run.b.get(f"/{ZONE}{name}", headers={"Accept-Encoding": "gzip"}))
            await run.asked(name, 1)
            status, x_cache, got, resp = await run.get(run.a, name, **{"Accept-Encoding": "br"})
        finally:
            release.set()
        assert (status, x_cache, got) == (200, "MISS", b"for br " * 1000)
        assert resp.headers.getall("Cache-Status")[0] == "assetcdn-shield; fwd=uri-miss; stored"
        resp_b = await asyncio.wait_for(at_b, WAIT_S)
        assert (resp_b.status, await resp_b.read()) == (200, b"for gzip " * 1000)
        assert run.origin.count(name) == 2


@pytest.mark.parametrize("withheld", ['no-cache="Cache-Tag"', 'private="Surrogate-Key"'])
async def test_an_edge_keeps_the_tags_a_shields_stored_copy_withholds_from_clients(
        aiohttp_client: Serve, tmp_path: Path, withheld: str) -> None:
    """The origin keeps its tag field from clients (`no-cache="Cache-Tag"`): B's stored copy has no such field, yet
    is tagged. A's copy, answered from B's, is tagged too (B names the tags to the edges that ask it, in the field
    withheld), so a purge of the tag reaches A as well; without them A went on answering the purged copy as a HIT.
    A's clients never see the tags either."""
    field = withheld.split('"')[1]
    async with fleet(tmp_path, aiohttp_client) as run:
        name = run.shielded_by_b("withheld")
        head = {"Cache-Control": f"max-age=600, {withheld}", "ETag": '"1"'}
        run.origin.answer(name, b"version one", headers={**head, field: "fleet-withheld"})
        assert (await run.get(run.b, name))[:3] == (200, "MISS", b"version one")
        status, x_cache, body, resp = await run.get(run.a, name)
        assert (status, x_cache, body) == (200, "MISS", b"version one")
        assert resp.headers.getall("Cache-Status")[0].startswith("assetcdn-shield; hit")
        await run.holds(run.a, name, '"1"')
        status, x_cache, body, resp = await run.get(run.a, name)
        assert (status, x_cache, body) == (200, "HIT", b"version one")
        assert (resp.headers.get("Cache-Tag"), resp.headers.get("Surrogate-Key")) == (None, None)
        run.origin.answer(name, b"version two", headers={**head, "ETag": '"2"', field: "fleet-withheld"})
        await run.purge({"tags": ["fleet-withheld"]})
        assert (await run.get(run.a, name))[:3] == (200, "MISS", b"version two")
        assert run.origin.count(name) == 2


async def test_a_shield_names_the_fields_meant_for_the_cdn_to_the_edge_that_asks_it_never_to_clients(
        aiohttp_client: Serve, tmp_path: Path) -> None:
    """Surrogate-Control, Cache-Tag and Surrogate-Key are left out of what clients get, not of what a shield answers
    another edge: A keeps B's answer as B kept the origin's, for Surrogate-Control's max-age (Cache-Control says
    `no-store`) and with both fields' tags, which a purge then reaches at A too. No client of either edge sees them
    (they went out to every client before)."""
    fields = ("Surrogate-Control", "Cache-Tag", "Surrogate-Key")
    async with fleet(tmp_path, aiohttp_client) as run:
        name = run.shielded_by_b("surrogate")
        head = {"Cache-Control": "no-store", "Surrogate-Control": "max-age=600", "Cache-Tag": "fleet-customer",
                "Surrogate-Key": "fleet-build"}
        run.origin.answer(name, b"version one", headers={**head, "ETag": '"1"'})
        answers = [await run.get(run.b, name)]   # B's own fill
        await run.holds(run.b, name, '"1"')
        answers.append(await run.get(run.a, name))   # A's, answered from B's copy
        await run.holds(run.a, name, '"1"')
        answers.append(await run.get(run.a, name))
        assert [answer[:3] for answer in answers] == [(200, "MISS", b"version one"), (200, "MISS", b"version one"),
                                                      (200, "HIT", b"version one")]
        assert answers[1][3].headers.getall("Cache-Status")[0].startswith("assetcdn-shield; hit")
        assert [[field for field in fields if field in resp.headers] for *_, resp in answers] == [[], [], []]
        assert run.origin.count(name) == 1
        for version, tag in ((2, "fleet-build"), (3, "fleet-customer")):   # each field's tag reaches A's copy
            run.origin.answer(name, f"version {version}".encode(), headers={**head, "ETag": f'"{version}"'})
            await run.purge({"tags": [tag]})
            status, x_cache, body, resp = await run.get(run.a, name)
            assert (status, x_cache, body) == (200, "MISS", f"version {version}".encode()), tag
            assert [field for field in fields if field in resp.headers] == []
            await run.holds(run.a, name, f'"{version}"')
        assert run.origin.count(name) == 3


async def test_two_edges_each_taking_the_other_for_a_paths_shield_answer_their_misses_from_the_origin(
        aiohttp_client: Serve, tmp_path: Path) -> None:
    """A's `[origin] shield` is B and B's is A (a rollout of the setting half done; in the fleet's own choice, lists
    of edges that differ for a moment), and a client of each asks for the same new path: each edge's fill asks the
    other, whose cluster site finds its own fill of the path under way, asking a shield. Each declines at once and
    each fill goes to the origin; waiting, each cluster site waited for its own fill, which waited for the other's,
    for nine tenths of `first_byte_timeout_s` (an hour here, 13.5 s at the default) on every such miss."""
    gathered, arrived, targets = asyncio.Event(), [], dict[str, str]()

    def between(to: str) -> web.Application:  # the address an edge knows the other by; each fill held there until
        async def on(request: web.Request) -> web.StreamResponse:  # both edges' fills are asking
            arrived.append(to)
            if len(arrived) == 2:
                gathered.set()
            await gathered.wait()
            return await relay(targets[to], request)

        app = web.Application()
        app.router.add_get("/{tail:.*}", on)
        return app

    to_b, to_a = TestServer(between("edge-b"), host="127.0.0.1"), TestServer(between("edge-a"), host="127.0.0.1")
    for server in (to_b, to_a):
        await server.start_server()
    try:
        each = {"edge-a": {"ASSETCDN_ORIGIN_SHIELD": f"http://127.0.0.1:{to_b.port}"},
                "edge-b": {"ASSETCDN_ORIGIN_SHIELD": f"http://127.0.0.1:{to_a.port}"}}
        async with fleet(tmp_path, aiohttp_client, each, ASSETCDN_ORIGIN_FIRST_BYTE_TIMEOUT_S="3600") as run:
            targets.update({"edge-a": Fleet.node(run.a).shields.own_url, "edge-b": Fleet.node(run.b).shields.own_url})
            run.origin.answer("/both.txt", b"from the origin", headers={"Cache-Control": "max-age=600"})
            answers = await asyncio.wait_for(asyncio.gather(run.get(run.a, "/both.txt"), run.get(run.b, "/both.txt")),
                                             WAIT_S)
            assert [answer[:3] for answer in answers] == [(200, "MISS", b"from the origin")] * 2
            assert sorted(arrived) == ["edge-a", "edge-b"]
            assert run.origin.count("/both.txt") == 2
            assert [Fleet.node(edge).shields.status()["down"] for edge in (run.a, run.b)] == [0, 0]
    finally:
        for server in (to_b, to_a):
            await server.close()


async def test_a_clients_only_if_cached_never_reaches_the_shield_with_a_background_revalidation(
        aiohttp_client: Serve, tmp_path: Path) -> None:
    """A's copy is stale within its stale-while-revalidate, and B no longer holds one (evicted). A client's
    `only-if-cached` is answered from A's copy (STALE) while A revalidates it in the background: that revalidation is
    this edge's own request, not the client's. Sent on with it, B answered 504 NotCached, an error of its own, and A
    passed B over for every path for shield_retry_s: any client could turn shielding off, again and again."""
    async with fleet(tmp_path, aiohttp_client) as run:
        name = run.shielded_by_b("only-if-cached")
        run.origin.answer(name, b"version one", headers={"Cache-Control": "max-age=0, stale-while-revalidate=600",
                                                         "ETag": '"1"'})
        assert (await run.get(run.a, name))[:3] == (200, "MISS", b"version one")
        await run.holds(run.a, name, '"1"')
        Fleet.node(run.b).cache.purge_tags([pull_path_tag(ZONE, name)])   # gone from B (evicted)
        run.origin.answer(name, b"version two", headers={"Cache-Control": "max-age=600", "ETag": '"2"'})
        status, x_cache, body, _ = await run.get(run.a, name, **{"Cache-Control": "only-if-cached"})
        assert (status, x_cache, body) == (200, "STALE", b"version one")
        await run.holds(run.a, name, '"2"')
        assert Fleet.node(run.a).shields.status()["down"] == 0
        assert all("only-if-cached" not in seen.headers.get("Cache-Control", "") for seen in run.origin.requests(name))
        assert run.origin.count(name) == 2   # the first fill; B's, for A's revalidation


async def test_an_invalidation_a_shield_missed_reaches_it_when_it_comes_back_at_another_address(
        aiohttp_client: Serve, tmp_path: Path) -> None:
    """B cannot be reached when a POST through A changes a path B shields, so A cannot tell it. B comes back at
    another cluster address (a worker started again with `edge.cluster_port = 0`, the default, binds another port)
    with its copy from before the POST still on disk: A asks the origin for that path, not B, and tells B. The paths
    A owed B were kept under B's former address: A asked B at its new one, and served the POST's client the copy
    from before it for that copy's whole lifetime."""
    async with fleet(tmp_path, aiohttp_client) as run:
        app = web.Application()

        async def to_b(request: web.Request) -> web.StreamResponse:
            return await relay(Fleet.node(run.b).shields.own_url, request)

        app.router.add_route("*", "/{tail:.*}", to_b)
        back = TestServer(app, host="127.0.0.1")
        await back.start_server()
        try:
            name = run.shielded_by_b("restarted")
            run.origin.answer(name, b"before the POST", headers={"Cache-Control": "max-age=600"})
            assert (await run.get(run.a, name))[:3] == (200, "MISS", b"before the POST")   # B holds it too
            registry, shields = run.control.app[REGISTRY], Fleet.node(run.a).shields

            async def listed_at(url: str) -> None:
                registry.register("edge-b/0", url, registry.edges["edge-b/0"].generation)

                async def known() -> bool:
                    return Peer("edge-b/0", url) in shields.peers()

                await wait_until(known, f"A knowing edge-b/0 at {url}")

            await listed_at(f"http://127.0.0.1:{free_port_block(1)}")   # B gone: nothing answers there
            run.origin.answer(name, status=204)
            assert (await run.a.post(f"/{ZONE}{name}", data=b"new")).status == 204
            assert shields.status()["down"] == 1   # not told
            await listed_at(f"http://127.0.0.1:{back.port}")   # B back, at another address
            run.origin.answer(name, b"after the POST", headers={"Cache-Control": "max-age=600"})
            assert (await run.get(run.a, name))[:3] == (200, "MISS", b"after the POST")

            async def told() -> bool:
                return stored_url(Fleet.node(run.b), ZONE, name) is None

            await wait_until(told, "B told to drop its copy")
        finally:
            await back.close()


async def test_an_edge_whose_shields_fill_kept_nothing_for_it_asks_the_origin_itself_at_once(
        aiohttp_client: Serve, tmp_path: Path) -> None:
    """B is filling a path for its own client when A asks B for it, and the origin answers that fill with a response
    not shared (`private`): B declines A's request at once (409 ShieldFilling) and A asks the origin itself, with its
    whole first-byte time. B asked the origin for A itself, beginning when its wait ended: an origin slower than what
    was left of A's first-byte time had A pass B over for every path for shield_retry_s (the origin answers A's
    request here only once A's request to B has ended: B asking it for A, they waited for each other)."""
    async with fleet(tmp_path, aiohttp_client, ASSETCDN_ORIGIN_FIRST_BYTE_TIMEOUT_S="3600") as run:
        name = run.shielded_by_b("private")
        joined = asyncio.Event()

        async def declined() -> bool:
            text = await (await run.a.get("/metrics", headers=METRICS)).text()
            return metric(text, "assetcdn_edge_origin_requests_total", target="shield", outcome="4xx") >= 1

        async def private(_request: web.Request) -> web.StreamResponse:
            if run.origin.count(name) == 1:   # B's fill for its own client: answered once A's request waits for it
                await joined.wait()
            else:                             # A's request's
                await wait_until(declined, "B answering A's request")
            return web.Response(body=b"yours", headers={"Cache-Control": "private"})

        run.origin.route(name, private)
        at_b = asyncio.ensure_future(run.b.get(f"/{ZONE}{name}"))
        await run.asked(name, 1)
        at_a = asyncio.ensure_future(run.a.get(f"/{ZONE}{name}"))
        flights = run.b.app[FLIGHTS]
        key = flight_key(pull_key(ZONE, name, ""), Fleet.node(run.b).config.pull_zones[ZONE])

        async def waiting_at_b() -> bool:
            return flights.joined(key) == 1

        try:
            await wait_until(waiting_at_b, "A's request waiting for B's fill")
        finally:
            joined.set()
        for answer in (at_b, at_a):
            resp = await asyncio.wait_for(answer, WAIT_S)
            assert (resp.status, await resp.read()) == (200, b"yours")
        assert run.origin.count(name) == 2
        assert Fleet.node(run.a).shields.status()["down"] == 0


async def test_an_edge_waiting_at_its_shield_for_a_fill_whose_body_the_origin_cuts_asks_the_origin_itself_at_once(
        aiohttp_client: Serve, tmp_path: Path) -> None:
    """B is filling a path for its own client when A's request for it reaches B and waits there, and the origin cuts
    that fill's body: B declines A's request at once (409 ShieldFilling) and A asks the origin itself, with its
    whole first-byte time, and B stays A's shield. B leading one more fill for A would read its body whole before
    answering A (so that the origin failing it again is no cut answer), longer than what is left of A's first-byte
    time for a slow body, and A would pass B over for every path (the origin answers A's request here only once
    A's request to B has ended)."""
    async with fleet(tmp_path, aiohttp_client, ASSETCDN_ORIGIN_FIRST_BYTE_TIMEOUT_S="3600") as run:
        name = run.shielded_by_b("cut")
        body = b"x" * 1000
        joined = asyncio.Event()

        async def declined() -> bool:
            text = await (await run.a.get("/metrics", headers=METRICS)).text()
            return metric(text, "assetcdn_edge_origin_requests_total", target="shield", outcome="4xx") >= 1

        async def cut_once(request: web.Request) -> web.StreamResponse:
            if run.origin.count(name) > 1:   # A's request's
                await wait_until(declined, "B answering A's request")
                return web.Response(body=body, headers={"Cache-Control": "max-age=600"})
            await joined.wait()              # B's fill for its own client: cut once A's request waits for it
            response = web.StreamResponse(headers={"Cache-Control": "max-age=600", "Content-Type": "text/plain"})
            response.content_length = len(body)
            await response.prepare(request)
            await response.write(body[:100])
            assert request.transport is not None
            request.transport.close()
            return response

        run.origin.route(name, cut_once)
        at_b = asyncio.ensure_future(run.b.get(f"/{ZONE}{name}"))
        await run.asked(name, 1)
        at_a = asyncio.ensure_future(run.a.get(f"/{ZONE}{name}"))
        flights = run.b.app[FLIGHTS]
        key = flight_key(pull_key(ZONE, name, ""), Fleet.node(run.b).config.pull_zones[ZONE])

        async def waiting_at_b() -> bool:
            return flights.joined(key) == 1

        try:
            await wait_until(waiting_at_b, "A's request waiting for B's fill")
        finally:
            joined.set()
        first = await asyncio.wait_for(at_b, WAIT_S)
        with pytest.raises(aiohttp.ClientPayloadError):  # its answer had begun: cut short, as the origin's was
            await first.read()
        resp = await asyncio.wait_for(at_a, WAIT_S)
        assert (resp.status, await resp.read()) == (200, body)
        assert run.origin.count(name) == 2
        assert Fleet.node(run.a).shields.status()["down"] == 0
