"""A pull zone on an edge with one worker (assetcdn/edge/cache/write_behind.py): a fill stays in the memory tier
until it evicts it for room, then the fill is served from the disk tier as it was stored, without asking the
origin again; the edge's health counts what is held in memory only."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator

import orjson
import pytest
import pytest_asyncio

from assetcdn.edge.states.keys import pull_key
from tests.support.hit_cdn import HitCdn
from tests.support.origins import LONG, ScriptedOrigin, pull_zone_on_hit_cdn
from tests.support.wait import wait_until

pytestmark = pytest.mark.asyncio(loop_scope="module")

ZONE = "alone"
SIZE = 200 * 1024  # the 1 MB memory tier holds four of them
HEADERS = {"Content-Type": "application/octet-stream", "ETag": '"v1"', **LONG}


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def alone(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[tuple[HitCdn, ScriptedOrigin]]:
    async with pull_zone_on_hit_cdn(tmp_path_factory.mktemp("pull-one-worker"), ZONE, workers=1,
                                    ASSETCDN_EDGE_MEMORY_CACHE_MB="1",
                                    ASSETCDN_EDGE_MEMORY_OBJECT_MAX_KB="256") as found:
        yield found


async def test_an_evicted_fill_asked_for_again_is_a_hit_from_the_disk_tier(alone: tuple[HitCdn, ScriptedOrigin]) -> None:
    cdn, origin = alone
    bodies = {f"/evicted/{n}.bin": os.urandom(SIZE) for n in range(6)}
    for name, body in bodies.items():
        origin.answer(name, body, headers=HEADERS)
    conn, plain = await cdn.connect(), await cdn.plain()
    first = await conn.request(f"/{ZONE}/evicted/0.bin")
    assert (first.status, first.header("X-Cache"), first.body) == (200, "MISS", bodies["/evicted/0.bin"])
    key = pull_key(ZONE, "/evicted/0.bin", "")
    cache = cdn.node.cache
    assert cache.disk.get(key, load_limit=0) is None  # in memory only
    health = orjson.loads((await plain.request("/api/health")).body)
    assert health["cache"]["unwritten_entries"] == 1 and health["cache"]["disk_entries"] == 0
    assert (await conn.request(f"/{ZONE}/evicted/0.bin")).header("X-Cache") == "HIT"  # asked for again

    for name in list(bodies)[1:]:  # the memory tier evicts the first fill for room
        assert (await conn.request(f"/{ZONE}{name}")).header("X-Cache") == "MISS"

    async def written() -> bool:
        return cache.disk.get(key, load_limit=0) is not None

    await wait_until(written, "the evicted fill written to the disk tier")
    assert key not in cache.memory
    again = await conn.request(f"/{ZONE}/evicted/0.bin")
    assert (again.status, again.header("X-Cache"), again.body) == (200, "HIT", bodies["/evicted/0.bin"])
    assert (again.header("ETag"), again.header("Content-Type")) == (HEADERS["ETag"], HEADERS["Content-Type"])
    assert again.header("Cache-Control") == first.header("Cache-Control")
    assert origin.count("/evicted/0.bin") == 1


async def test_a_fill_nobody_asked_for_again_is_written_when_evicted_while_the_disk_tier_has_room(
        alone: tuple[HitCdn, ScriptedOrigin]) -> None:
    """Until the disk tier is full, every fill the memory tier evicts is kept on disk, asked for again or not, while the
    disk writer keeps up (one that is behind lets go the fills nobody asked for again: tests/edge/cache/)."""
    cdn, origin = alone
    bodies = {f"/once/{n}.bin": os.urandom(SIZE) for n in range(6)}
    for name, body in bodies.items():
        origin.answer(name, body, headers=HEADERS)
    conn = await cdn.connect()
    cache = cdn.node.cache
    key = pull_key(ZONE, "/once/0.bin", "")
    cache.purge_all()  # none of the test before's fills left to evict (its last ones may be let go unread)
    dropped = cache.memory.unread_dropped

    async def caught_up() -> bool:
        return cache.memory.victim_count == 0

    for name in bodies:  # each fill evicts the oldest; the next comes once the writer wrote it
        assert (await conn.request(f"/{ZONE}{name}")).header("X-Cache") == "MISS"
        await wait_until(caught_up, "the disk writer done with the fills evicted so far")

    async def written() -> bool:
        return key not in cache.memory and cache.disk.get(key, load_limit=0) is not None

    await wait_until(written, "the first fill, never asked for again, evicted and written to the disk tier")
    again = await conn.request(f"/{ZONE}/once/0.bin")
    assert (again.header("X-Cache"), again.body) == ("HIT", bodies["/once/0.bin"])
    assert origin.count("/once/0.bin") == 1 and cache.memory.unread_dropped == dropped
