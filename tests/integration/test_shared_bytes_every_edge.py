"""`assetcdn up` with two edges of two workers each: two paths holding the same bytes keep their own
headers on every edge, and a URL or tag purge of one empties that path, and only that path, on every
edge (its disk tier and its workers' memory tiers)."""

from __future__ import annotations

from collections.abc import Iterator

import aiohttp
import pytest

from tests.integration.harness import ACCESS, ACCOUNT, PURGE, RunningCdn, start_cdn

pytestmark = pytest.mark.integration

ZONE = "twins"
SAME = b"<svg xmlns='http://www.w3.org/2000/svg'><script>document.title='x'</script></svg>"
VECTOR = f"{ZONE}/v1/logos/mark.svg"
TEXT = f"{ZONE}/v1/titles/mark.txt"
HEADERS = {
    VECTOR: ("image/svg+xml", f"project-{ZONE},type-logos,format-svg,all-assets", True),
    TEXT: ("text/plain; charset=utf-8", f"project-{ZONE},type-titles,format-txt,all-assets", False),
}
REQUESTS_PER_EDGE = 4  # with two workers per edge, several requests reach both of them


@pytest.fixture(scope="module")
def cdn(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningCdn]:
    # The purge answer waits (bounded) for every edge's acknowledgement; give a loaded machine room.
    running = start_cdn(tmp_path_factory.mktemp("twins"), edges=2, workers=2,
                        env_extra={"ASSETCDN_CONTROL_PUSH_WAIT_MS": "10000"})
    yield running
    assert running.stop() == 0


async def states(session: aiohttp.ClientSession, cdn: RunningCdn, path: str) -> set[str]:
    found = set()
    for edge in cdn.edge_urls:
        for _ in range(REQUESTS_PER_EDGE):
            async with session.get(f"{edge}/{path}") as resp:
                assert resp.status == 200 and await resp.read() == SAME
                content_type, tags, active = HEADERS[path]
                assert (resp.headers["Content-Type"], resp.headers["Cache-Tag"]) == (content_type, tags)
                assert resp.headers["X-Content-Type-Options"] == "nosniff"
                assert ("Content-Security-Policy" in resp.headers) == active
                found.add(resp.headers["X-Cache"])
    return found


async def warm(session: aiohttp.ClientSession, cdn: RunningCdn) -> None:
    for path in HEADERS:
        await states(session, cdn, path)
        assert await states(session, cdn, path) == {"HIT"}


async def purge(session: aiohttp.ClientSession, cdn: RunningCdn, body: dict[str, object]) -> None:
    async with session.post(f"{cdn.control_url}/api/purge", json=body, headers=PURGE) as resp:
        answer = await resp.json()
        assert resp.status == 200, answer
        assert answer["edges"]["pending"] == [], answer


async def first_state(session: aiohttp.ClientSession, cdn: RunningCdn, path: str) -> list[str]:
    """X-Cache of the first request per edge after a purge (later ones refill the cache)."""
    found = []
    for edge in cdn.edge_urls:
        async with session.get(f"{edge}/{path}") as resp:
            found.append(resp.headers["X-Cache"])
    return found


async def test_shared_bytes_stay_per_path_on_every_edge(cdn: RunningCdn) -> None:
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{cdn.control_url}/api/core/zones", json={"Name": ZONE}, headers=ACCOUNT) as resp:
            assert resp.status == 201, await resp.text()
        for path in HEADERS:
            async with session.put(f"{cdn.control_url}/api/storage/{path}", data=SAME, headers=ACCESS) as resp:
                assert resp.status == 201, await resp.text()
        await warm(session, cdn)

        await purge(session, cdn, {"urls": [f"https://cdn.example.com/{TEXT}"]})
        assert await first_state(session, cdn, VECTOR) == ["HIT", "HIT"]
        assert await first_state(session, cdn, TEXT) == ["MISS", "MISS"]
        await warm(session, cdn)

        await purge(session, cdn, {"tags": ["format-svg"]})
        assert await first_state(session, cdn, TEXT) == ["HIT", "HIT"]
        assert await first_state(session, cdn, VECTOR) == ["MISS", "MISS"]

