"""Origin shielding through a real `assetcdn up` with three edges in front of one counting origin: the fleet
fetches each new object from the origin once, a shield's answer says so in Cache-Status, a request to a
shield without the cluster secret's signature is refused, and a dead shield costs the others nothing but the
origin requests it would have saved (assetcdn/edge/shield.py)."""

from __future__ import annotations

import asyncio
import signal
from collections import Counter
from collections.abc import Iterator

import aiohttp
import pytest
from aiohttp import web

from assetcdn.edge.cache.tags import path_tag
from assetcdn.edge.shield import SHIELD_AUDIENCE, SHIELD_PATH, Peer, rendezvous
from assetcdn.shared.cluster import sign_request
from tests.integration.harness import ACCOUNT, KEYS, RunningCdn, start_cdn, wait_gone
from tests.support.origins import CountingOrigin, origin_app

pytestmark = pytest.mark.integration

EDGES = 3
OBJECTS = 1000       # each asked of all three edges at once
AT_ONCE = 16         # objects in flight together
WAIT_S = 60.0        # upper bound of waits for the fleet and the config to arrive (never asserted as a duration)
METRICS = {"Authorization": f"Bearer {KEYS['ASSETCDN_METRICS_KEY']}"}


@pytest.fixture(scope="module")
def cdn(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningCdn]:
    # Heartbeats every half second: the edges learn of each other soon after they start.
    running = start_cdn(tmp_path_factory.mktemp("pull-shield"), edges=EDGES,
                        env_extra={"ASSETCDN_ORIGIN_ALLOW_LOOPBACK": "true",
                                   "ASSETCDN_EDGE_HEARTBEAT_INTERVAL_S": "0.5"})
    yield running
    running.stop()


async def until(condition: object, what: str) -> None:
    deadline = asyncio.get_running_loop().time() + WAIT_S
    while not await condition():  # type: ignore[operator]
        assert asyncio.get_running_loop().time() < deadline, what
        await asyncio.sleep(0.1)


async def pull_zone_everywhere(session: aiohttp.ClientSession, cdn: RunningCdn, name: str, url: str) -> None:
    """A pull zone, returned once every edge knows it and every edge knows all three edges."""
    async with session.post(f"{cdn.control_url}/api/core/zones", json={"Name": name, "Origin": {"Url": url}},
                            headers=ACCOUNT) as resp:
        assert resp.status == 201, await resp.text()

    async def ready() -> bool:
        for edge in cdn.edge_urls:
            async with session.get(f"{edge}/api/health") as resp:
                if (await resp.json()).get("shield", {}).get("edges") != EDGES:
                    return False
        configs = [config.read_bytes() for config in cdn.data_dir.rglob("edge-config-*.json")]
        return sum(f'"{name}"'.encode() in config for config in configs) == EDGES

    await until(ready, "the edges never all knew the pull zone and each other")


async def fetch(session: aiohttp.ClientSession, url: str) -> tuple[int, str, bytes]:
    async with session.get(url) as resp:
        return resp.status, ",".join(resp.headers.getall("Cache-Status", [])), await resp.read()


async def every_edge(session: aiohttp.ClientSession, edges: list[str], zone: str,
                     paths: list[str]) -> list[tuple[int, str, bytes]]:
    """Each path asked of every edge at once, AT_ONCE paths at a time."""
    gate = asyncio.Semaphore(AT_ONCE)

    async def one(path: str) -> list[tuple[int, str, bytes]]:
        async with gate:
            return list(await asyncio.gather(*(fetch(session, f"{edge}/{zone}{path}") for edge in edges)))

    answers = await asyncio.gather(*(one(path) for path in paths))
    return [answer for per_path in answers for answer in per_path]


async def cluster_urls(session: aiohttp.ClientSession, cdn: RunningCdn) -> dict[str, str]:
    """Each edge worker's cluster address, as control lists them."""
    async with session.get(f"{cdn.control_url}/api/health?deep=1", headers=METRICS) as resp:
        return {edge["name"]: edge["url"] for edge in (await resp.json())["edges"]}


async def test_three_edges_fetch_each_new_object_from_the_origin_once(cdn: RunningCdn) -> None:
    origin = CountingOrigin()
    paths = [f"/objects/{i}.txt" for i in range(OBJECTS)]
    async with origin_app(origin.app) as url, aiohttp.ClientSession() as session:
        await pull_zone_everywhere(session, cdn, "shielded", url)
        answers = await every_edge(session, cdn.edge_urls, "shielded", paths)
    assert [(status, body) for status, _, body in answers] == [
        (200, f"body of {path}".encode()) for path in paths for _ in cdn.edge_urls]
    assert origin.asked == Counter(paths)  # once each, for the three edges
    # Two edges of three got each object from its shield, and say so.
    from_shield = sum("assetcdn-shield;" in cache_status for _, cache_status, _ in answers)
    assert from_shield == (EDGES - 1) * OBJECTS


async def test_a_request_to_a_shield_needs_the_cluster_secret(cdn: RunningCdn) -> None:
    origin = CountingOrigin()
    async with origin_app(origin.app) as url, aiohttp.ClientSession() as session:
        await pull_zone_everywhere(session, cdn, "guarded", url)
        shield_url = (await cluster_urls(session, cdn))["edge-1/0"]
        path_qs = f"{SHIELD_PATH}/0/guarded/secret.txt"
        forged = sign_request("not-the-cluster-secret", "GET", path_qs, audience=SHIELD_AUDIENCE)
        async with session.get(shield_url + path_qs, headers=forged) as resp:
            assert resp.status == 401
        assert origin.asked == Counter()
        signed = sign_request(KEYS["ASSETCDN_CLUSTER_SECRET"], "GET", path_qs, audience=SHIELD_AUDIENCE)
        async with session.get(shield_url + path_qs, headers=signed) as resp:
            assert (resp.status, await resp.read()) == (200, b"body of /secret.txt")
            assert resp.headers["Cache-Status"].startswith("assetcdn-shield; fwd=uri-miss")
        async with session.get(shield_url + path_qs, headers=signed) as resp:  # the same signature again
            assert resp.status == 401
        # Signed for one path, it does not open another.
        signed = sign_request(KEYS["ASSETCDN_CLUSTER_SECRET"], "GET", path_qs, audience=SHIELD_AUDIENCE)
        async with session.get(f"{shield_url}{SHIELD_PATH}/0/guarded/other.txt", headers=signed) as resp:
            assert resp.status == 401
        # On an edge's public port the signature's fields mean nothing: edge-0 still asks the path's shield.
        members = tuple(Peer(f"edge-{i}/0", "") for i in range(EDGES))
        path = next(f"/public/{i}.txt" for i in range(100)
                    if rendezvous(path_tag(f"guarded/public/{i}.txt"), members) == members[1])
        marker = sign_request(KEYS["ASSETCDN_CLUSTER_SECRET"], "GET", f"{SHIELD_PATH}/0/guarded{path}",
                              audience=SHIELD_AUDIENCE)
        async with session.get(f"{cdn.edge_urls[0]}/guarded{path}", headers=marker) as resp:
            assert resp.status == 200
            assert resp.headers.getall("Cache-Status")[0].startswith("assetcdn-shield;")
    assert origin.asked == Counter({"/secret.txt": 1, path: 1})


async def test_an_unsafe_request_through_one_edge_reaches_the_paths_shield(cdn: RunningCdn) -> None:
    """A POST through edge-0 to a path edge-1 shields: edge-1 drops its copy as edge-0 does, so edge-0's next
    fill (through edge-1) is the new version, and edge-1's own clients get it too."""
    version = 1

    async def resource(request: web.Request) -> web.StreamResponse:
        nonlocal version
        if request.method == "POST":
            version += 1
            return web.Response(status=204)
        return web.Response(body=f"v{version}".encode(), headers={"Cache-Control": "max-age=600"})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", resource)
    members = tuple(Peer(f"edge-{i}/0", "") for i in range(EDGES))
    path = next(f"/items/{i}" for i in range(100) if rendezvous(path_tag(f"changing/items/{i}"), members) == members[1])
    edge0, edge1 = cdn.edge_urls[0], cdn.edge_urls[1]
    async with origin_app(app) as url, aiohttp.ClientSession() as session:
        await pull_zone_everywhere(session, cdn, "changing", url)
        assert (await fetch(session, f"{edge0}/changing{path}"))[0::2] == (200, b"v1")
        assert (await fetch(session, f"{edge1}/changing{path}"))[0::2] == (200, b"v1")   # the shield holds it
        async with session.post(f"{edge0}/changing{path}", data=b"new") as resp:
            assert resp.status == 204
        assert (await fetch(session, f"{edge0}/changing{path}"))[0::2] == (200, b"v2")
        assert (await fetch(session, f"{edge1}/changing{path}"))[0::2] == (200, b"v2")


async def test_with_a_shield_dead_the_other_edges_ask_the_origin(cdn: RunningCdn) -> None:
    """Last in the module: edge-2 stays dead until the cluster stops."""
    origin = CountingOrigin()
    paths = [f"/after/{i}.txt" for i in range(60)]
    async with origin_app(origin.app) as url, aiohttp.ClientSession() as session:
        await pull_zone_everywhere(session, cdn, "orphaned", url)
        cdn.stopped_pids.append(cdn.process.pid)
        cdn.process.send_signal(signal.SIGSTOP)  # `assetcdn up` would restart the edge at once
        killed = cdn.signal("--name edge-2", signal.SIGKILL)
        assert killed and not wait_gone(set(killed))
        answers = await every_edge(session, cdn.edge_urls[:2], "orphaned", paths)
    assert [(status, body) for status, _, body in answers] == [
        (200, f"body of {path}".encode()) for path in paths for _ in range(2)]
    # The paths edge-2 was the shield of were fetched by each of the other two, the rest once.
    members = tuple(Peer(f"edge-{i}/0", "") for i in range(EDGES))
    orphans = {path for path in paths if rendezvous(path_tag(f"orphaned{path}"), members) == members[2]}
    assert orphans
    assert origin.asked == Counter({path: 2 if path in orphans else 1 for path in paths})
