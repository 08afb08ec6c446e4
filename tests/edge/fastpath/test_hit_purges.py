"""Purges of a stored zone by prefix, soft, and by URL on a tenant host or percent-encoded, over raw sockets
against a real edge whose hits the hit path answers (assetcdn/edge/fastpath/): the next request after the purge
is a miss for what it names, every cache tier lost it, and what it does not name is still a hit there."""

from __future__ import annotations

from typing import Any

from tests.support.cdn import PURGE, ZONE
from tests.support.hit_cdn import HitCdn, HitCdnFactory, RawConnection

TENANT_HOST = f"{ZONE}.cdn.localhost"   # the default base domain is cdn.localhost


async def purge(cdn: HitCdn, body: dict[str, Any]) -> dict[str, Any]:
    resp = await cdn.control.post("/api/purge", json=body, headers=PURGE)
    answer: dict[str, Any] = await resp.json()
    assert resp.status == 200, answer
    assert answer["edges"]["acknowledged"] == ["edge-f"], answer  # answered once the edge applied it
    return answer


def tiers(cdn: HitCdn, path: str) -> tuple[bool, bool]:
    """Whether the memory tier and the disk tier hold the bytes of the stored file `path`."""
    entry = cdn.node.replica.get(path)
    assert entry is not None
    key = cdn.node.replica.head(entry).key
    return key in cdn.node.cache.memory, cdn.node.cache.disk.get(key, load_limit=0) is not None


async def hits_on_the_hit_path(cdn: HitCdn, conn: RawConnection, requests: list[tuple[str, str]]) -> None:
    """Each (host, request path) is cached, then answered as a hit: by the hit path itself, unless the path is
    percent-encoded (the hit path hands those to the application)."""
    hits = cdn.site.hits
    assert hits is not None
    for host, path in requests:
        assert (await conn.request(path, host=host)).header("X-Cache") in ("MISS", "HIT")
        served = hits.served
        assert (await conn.request(path, host=host)).header("X-Cache") == "HIT"
        assert hits.served == served + ("%" not in path), path


async def x_cache(conn: RawConnection, requests: list[tuple[str, str]]) -> list[str | None]:
    return [(await conn.request(path, host=host)).header("X-Cache") for host, path in requests]


async def test_a_prefix_purge_drops_the_paths_under_it_on_every_tier_and_the_hit_path(
        make_hit_cdn: HitCdnFactory) -> None:
    cdn = await make_hit_cdn()
    under = [f"{ZONE}/v1/logos/a.txt", f"{ZONE}/v1/logos/b.txt"]
    beside = [f"{ZONE}/v1/icons/c.txt", f"{ZONE}/v1/logos-old/d.txt"]
    for path in (*under, *beside):
        await cdn.upload(path, path.encode())
    conn = await cdn.connect()
    requests = [("edge.test", f"/{path}") for path in (*under, *beside)]
    await hits_on_the_hit_path(cdn, conn, requests)
    answer = await purge(cdn, {"prefixes": [f"/{ZONE}/v1/logos/"]})
    assert (answer["mode"], answer["edges"]["entriesRemoved"]) == ("prefixes", {"edge-f/0": 2})
    assert [tiers(cdn, path) for path in (*under, *beside)] == [(False, False)] * 2 + [(True, True)] * 2
    assert await x_cache(conn, requests) == ["MISS", "MISS", "HIT", "HIT"]


async def test_a_soft_purge_of_a_stored_zone_drops_what_it_names(make_hit_cdn: HitCdnFactory) -> None:
    """A stored file is this CDN's own: there is no origin to revalidate with, so soft is hard."""
    cdn = await make_hit_cdn()
    paths = [f"{ZONE}/v1/banners/soft.txt", f"{ZONE}/v1/icons/kept.txt"]
    for path in paths:
        await cdn.upload(path, b"stored")
    conn = await cdn.connect()
    requests = [("edge.test", f"/{path}") for path in paths]
    await hits_on_the_hit_path(cdn, conn, requests)
    answer = await purge(cdn, {"prefixes": [f"https://{TENANT_HOST}/v1/banners/"], "soft": True})
    assert (answer["soft"], answer["edges"]["entriesRemoved"]) == (True, {"edge-f/0": 1})
    assert [tiers(cdn, path) for path in paths] == [(False, False), (True, True)]
    assert await x_cache(conn, requests) == ["MISS", "HIT"]


async def test_a_url_purge_names_a_percent_encoded_path_or_one_on_the_tenant_host(make_hit_cdn: HitCdnFactory) -> None:
    cdn = await make_hit_cdn()
    spaced, hosted, kept = f"{ZONE}/v1/logos/a b.txt", f"{ZONE}/v1/logos/hosted.txt", f"{ZONE}/v1/logos/kept.txt"
    for path in (spaced, hosted, kept):
        await cdn.upload(path, b"named")
    conn = await cdn.connect()
    requests = [("edge.test", f"/{ZONE}/v1/logos/a%20b.txt"), (TENANT_HOST, "/v1/logos/hosted.txt"),
                ("edge.test", f"/{kept}")]
    await hits_on_the_hit_path(cdn, conn, requests)
    answer = await purge(cdn, {"urls": [f"https://cdn.example.com/{ZONE}/v1/logos/a%20b.txt",
                                        f"https://{TENANT_HOST}/v1/logos/hosted.txt"]})
    assert answer["edges"]["entriesRemoved"] == {"edge-f/0": 2}
    assert await x_cache(conn, requests) == ["MISS", "MISS", "HIT"]
