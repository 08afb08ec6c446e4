"""Two paths with the same bytes (one git blob) keep their own headers, tags and purges.

Through a real control plane and edge: the bytes are uploaded as an HTML page and as a PNG in
another category, and each path answers with its own Content-Type, Cache-Tag and security
headers, whichever was cached first; a purge of one path's URL or of a tag only it carries
empties that path alone, for the file and for its transforms.
"""

from __future__ import annotations

from typing import Any

from assetcdn.shared.content_security import SANDBOX_CSP
from tests.support.cdn import PURGE, ZONE, Cdn, CdnFactory
from tests.support.control import ACCOUNT
from tests.support.images import solid_png
from tests.support.wait import wait_until

SAME = b"<html><body><p>one blob, two paths</p></body></html>"
PAGE = f"{ZONE}/v1/logos/a.html"
PICTURE = f"{ZONE}/v1/banners/b.png"
EXPECTED = {
    PAGE: ("text/html; charset=utf-8", f"project-{ZONE},type-logos,format-html,all-assets"),
    PICTURE: ("image/png", f"project-{ZONE},type-banners,format-png,all-assets"),
}


async def get(cdn: Cdn, path: str, method: str = "GET", **headers: str) -> tuple[int, Any, bytes]:
    resp = await cdn.edge.request(method, f"/{path}", headers=headers)
    return resp.status, resp.headers, await resp.read()


async def states(cdn: Cdn) -> dict[str, str]:
    return {path: (await get(cdn, path))[1]["X-Cache"] for path in (PAGE, PICTURE)}


async def two_paths(make_cdn: CdnFactory) -> Cdn:
    cdn = await make_cdn()
    await cdn.upload(PAGE, SAME)
    await cdn.upload(PICTURE, SAME)
    page, picture = cdn.node.replica.get(PAGE), cdn.node.replica.get(PICTURE)
    assert page is not None and picture is not None and page.blob_id == picture.blob_id  # really one blob
    return cdn


async def purge(cdn: Cdn, body: dict[str, Any]) -> None:
    """Purge through control; returns once this edge has applied it (the answer normally says so;
    on a loaded machine the push may outlast control's wait, then the edge's catch-up applies it)."""
    resp = await cdn.control.post("/api/purge", json=body, headers=PURGE)
    assert resp.status == 200, await resp.text()
    generation = (await resp.json())["generation"]

    async def applied() -> bool:  # the generation and its purges are applied under the sync lock
        return cdn.node.replica.generation >= generation and not cdn.node._sync_lock.locked()

    await wait_until(applied, "the purge reaching the edge")


def assert_own_headers(path: str, status: int, headers: Any) -> None:
    content_type, tags = EXPECTED[path]
    assert status == 200
    assert headers["Content-Type"] == content_type, path
    assert headers["Cache-Tag"] == tags, path
    assert headers["X-Content-Type-Options"] == "nosniff"
    if path == PAGE:
        assert headers["Content-Security-Policy"] == SANDBOX_CSP
    else:
        assert "Content-Security-Policy" not in headers


async def test_each_path_is_served_with_its_own_headers_whichever_was_cached_first(make_cdn: CdnFactory) -> None:
    cdn = await two_paths(make_cdn)
    for first, second in ((PAGE, PICTURE), (PICTURE, PAGE)):
        await purge(cdn, {"purge_everything": True})
        for path, cache in ((first, "MISS"), (second, "MISS"), (first, "HIT"), (second, "HIT")):
            status, headers, body = await get(cdn, path)
            assert (body, headers["X-Cache"]) == (SAME, cache), (path, cache)
            assert_own_headers(path, status, headers)
            status, headers, body = await get(cdn, path, "HEAD")
            assert body == b""
            assert_own_headers(path, status, headers)
            status, headers, _ = await get(cdn, path, **{"If-None-Match": headers["ETag"]})
            assert status == 304 and headers["Cache-Tag"] == EXPECTED[path][1]


async def test_a_url_purge_empties_that_path_only(make_cdn: CdnFactory) -> None:
    cdn = await two_paths(make_cdn)
    await states(cdn)
    assert await states(cdn) == {PAGE: "HIT", PICTURE: "HIT"}
    await purge(cdn, {"urls": [f"https://cdn.example.com/{PICTURE}"]})
    assert await states(cdn) == {PAGE: "HIT", PICTURE: "MISS"}
    await purge(cdn, {"urls": [f"/{PAGE}"]})
    assert await states(cdn) == {PAGE: "MISS", PICTURE: "HIT"}


async def test_a_tag_purge_empties_the_paths_carrying_it_only(make_cdn: CdnFactory) -> None:
    cdn = await two_paths(make_cdn)
    await states(cdn)
    await purge(cdn, {"tags": ["format-png"]})
    assert await states(cdn) == {PAGE: "HIT", PICTURE: "MISS"}
    await purge(cdn, {"tags": ["type-logos"]})
    assert await states(cdn) == {PAGE: "MISS", PICTURE: "HIT"}
    await purge(cdn, {"tags": ["all-assets"]})  # a tag both carry empties both
    assert await states(cdn) == {PAGE: "MISS", PICTURE: "MISS"}


async def test_transforms_of_shared_bytes_are_purged_per_source_path(make_cdn: CdnFactory) -> None:
    cdn = await make_cdn()
    png = solid_png(40, 30, (200, 30, 30))
    left, right = f"{ZONE}/v1/banners/left.png", f"{ZONE}/v1/titles/right.png"
    await cdn.upload(left, png)
    await cdn.upload(right, png)

    async def transformed() -> dict[str, tuple[str, str]]:
        found = {}
        for path in (left, right):
            resp = await cdn.edge.get("/api/transform", params={"url": f"/{path}", "w": "20", "format": "png"})
            assert resp.status == 200, await resp.text()
            found[path] = (resp.headers["X-Cache"], resp.headers["Cache-Tag"])
        return found

    first = await transformed()
    assert first[left] == ("MISS", f"project-{ZONE},type-banners,format-png,all-assets")
    assert first[right] == ("MISS", f"project-{ZONE},type-titles,format-png,all-assets")
    assert {cache for cache, _ in (await transformed()).values()} == {"HIT"}
    await purge(cdn, {"urls": [f"/{right}"]})
    assert {path: cache for path, (cache, _) in (await transformed()).items()} == {left: "HIT", right: "MISS"}
    await purge(cdn, {"tags": ["type-banners"]})
    assert {path: cache for path, (cache, _) in (await transformed()).items()} == {left: "MISS", right: "HIT"}


async def test_a_tag_purge_within_a_zone_empties_that_zones_files_and_transforms_only(make_cdn: CdnFactory) -> None:
    """The same bytes stored in two zones carry the same tags but their zone's (`all-assets`, `type-banners`, ...): a
    purge of such a tag within one zone empties that zone's file and its transforms, the other's stay HITs."""
    cdn = await make_cdn()
    other = "otherzone"
    resp = await cdn.control.post("/api/core/zones", json={"Name": other}, headers=ACCOUNT)
    assert resp.status == 201, await resp.text()
    png = solid_png(40, 30, (30, 200, 30))
    mine, theirs = f"{ZONE}/v1/banners/same.png", f"{other}/v1/banners/same.png"
    for path in (mine, theirs):
        await cdn.upload(path, png)

    async def seen() -> dict[str, tuple[str, str]]:
        found = {}
        for path in (mine, theirs):
            delivered = (await get(cdn, path))[1]["X-Cache"]  # first: a transform's miss fills its source
            resp = await cdn.edge.get("/api/transform", params={"url": f"/{path}", "w": "20", "format": "png"})
            assert resp.status == 200, await resp.text()
            found[path] = (delivered, resp.headers["X-Cache"])
        return found

    await seen()
    assert await seen() == {mine: ("HIT", "HIT"), theirs: ("HIT", "HIT")}
    await purge(cdn, {"tags": ["all-assets"], "zone": other})
    assert await seen() == {mine: ("HIT", "HIT"), theirs: ("MISS", "MISS")}
