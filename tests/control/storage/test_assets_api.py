"""The catalog: GET /api/assets (filters, sort, paging, streamed key order) and GET /api/assets/metadata."""

from __future__ import annotations

import asyncio
import base64
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiohttp.test_utils import TestClient
from yarl import URL

from assetcdn.control.routes import assets
from assetcdn.control.routes.assets import with_text
from assetcdn.control.storage import catalog_orders, manifest_store
from assetcdn.control.storage.catalog_orders import grouped
from tests.control.expect import expect_error, parse_time
from tests.control.storage.manifest_passes import refuse_passes
from tests.support.control import ACCESS, ACCOUNT, restarted

# (storage path, size): two zones, several categories and formats, distinct sizes.
FILES = {
    "akande/v1/logos/akande.svg": 300,
    "akande/v1/logos/akande.png": 120,
    "akande/v1/logos/akande.webp": 80,
    "akande/v1/icons/192x192.png": 50,
    "akande/v1/banners/hero.jpg": 900,
    "bantu/v1/logos/bantu.svg": 200,
    "bantu/v1/icons/akande.png": 10,   # same base name as akande's logo, other directory: not a variant
}
ASSET_FIELDS = {"name", "path", "project", "category", "format", "size"}


@pytest.fixture
async def catalog(control: TestClient, zone: str) -> TestClient:
    resp = await control.post("/api/core/zones", json={"Name": "bantu"}, headers=ACCOUNT)
    assert resp.status == 201
    files = [{"path": p, "content": base64.b64encode(b"x" * size).decode()} for p, size in FILES.items()]
    resp = await control.post("/api/storage/batch", json={"files": files}, headers=ACCESS)
    assert resp.status == 201, await resp.text()
    return control


async def listing(client: TestClient, **query: Any) -> dict[str, Any]:
    resp = await client.get("/api/assets", params={k: str(v) for k, v in query.items()}, headers=ACCESS)
    assert resp.status == 200
    assert resp.content_type == "application/json"
    raw = await resp.read()
    body = orjson.loads(raw)
    # Streamed JSON in the API reference's key order.
    assert list(body) == ["Pagination", "Filters", "DateFetched", "Data"]
    assert raw.startswith(b'{"Pagination":')
    return body


def paths(body: dict[str, Any]) -> list[str]:
    return [a["path"] for a in body["Data"]]


async def test_default_listing_is_every_asset_by_name(catalog: TestClient) -> None:
    body = await listing(catalog)
    assert body["Pagination"] == {"Page": 1, "PerPage": 50, "TotalItems": len(FILES), "TotalPages": 1}
    assert body["Filters"] == {"Project": None, "Category": None, "Format": None, "Query": None}
    parse_time(body["DateFetched"])
    names = [a["name"] for a in body["Data"]]
    assert names == sorted(names, key=str.lower)
    assert sorted(paths(body)) == sorted(FILES)  # .gitkeep scaffolding is not an asset
    hero = next(a for a in body["Data"] if a["name"] == "hero.jpg")
    assert set(hero) == ASSET_FIELDS
    assert hero == {"name": "hero.jpg", "path": "akande/v1/banners/hero.jpg", "project": "akande",
                    "category": "banners", "format": "jpg", "size": 900}


async def test_empty_catalog_has_one_page(control: TestClient) -> None:
    body = await listing(control)
    assert body["Data"] == []
    assert body["Pagination"] == {"Page": 1, "PerPage": 50, "TotalItems": 0, "TotalPages": 1}


@pytest.mark.parametrize(("query", "expected"), [
    ({"project": "bantu"}, {"bantu/v1/logos/bantu.svg", "bantu/v1/icons/akande.png"}),
    ({"category": "logos"}, {p for p in FILES if "/logos/" in p}),
    ({"format": "png"}, {p for p in FILES if p.endswith(".png")}),
    ({"format": "PNG"}, {p for p in FILES if p.endswith(".png")}),
    ({"q": "AKANDE"}, {p for p in FILES if "akande" in p}),
    ({"q": "192"}, {"akande/v1/icons/192x192.png"}),
    ({"project": "akande", "category": "logos", "format": "svg"}, {"akande/v1/logos/akande.svg"}),
    ({"project": "nobody"}, set()),
])
async def test_filters(catalog: TestClient, query: dict[str, str], expected: set[str]) -> None:
    body = await listing(catalog, **query)
    assert set(paths(body)) == expected
    assert body["Pagination"]["TotalItems"] == len(expected)
    filters = body["Filters"]
    assert filters["Project"] == query.get("project")
    assert filters["Category"] == query.get("category")
    assert filters["Format"] == (query["format"].lower() if "format" in query else None)
    assert filters["Query"] == query.get("q")


async def test_a_projects_assets_are_found_without_a_pass_over_the_whole_catalog(catalog: TestClient) -> None:
    """The catalog of one project (GET /api/assets?project=) passed over every file of the manifest on control's event
    loop (12-17 ms at 100,000 files); it reads the project's own files."""
    refuse_passes(catalog)
    body = await listing(catalog, project="akande", sort="size")
    assert paths(body) == sorted((p for p in FILES if p.startswith("akande/")), key=FILES.__getitem__)
    assert body["Pagination"]["TotalItems"] == 5
    for project in ("akande/v1", "akande/v1/logos", "nobody", "stocks"):  # a project is a zone, not a directory
        assert paths(await listing(catalog, project=project)) == [], project


async def test_the_whole_catalog_is_ordered_once_and_kept_in_order_through_changes(catalog: TestClient) -> None:
    """Every page of the whole catalog sorted every file of the manifest again on control's event loop (160-360 ms at
    100,000 files, every other request of control waiting meanwhile); each order is made once and kept in step with
    each change, so a page is the files it shows, in the order a sort of the catalog as it is gives."""
    for sort in ("name", "size", "project"):
        await listing(catalog, sort=sort)
    refuse_passes(catalog)

    async def agrees(sizes: dict[str, int]) -> None:
        by_size = sorted(sizes, key=lambda p: (sizes[p], p))
        assert paths(await listing(catalog, sort="size")) == by_size
        assert paths(await listing(catalog, sort="size", order="desc", per_page=3, page=2)) == by_size[::-1][3:6]
        by_name = sorted(sizes, key=lambda p: (p.rsplit("/", 1)[1].lower(), p))
        assert paths(await listing(catalog)) == by_name
        assert paths(await listing(catalog, sort="project", category="logos")) == sorted(
            (p for p in sizes if "/logos/" in p), key=lambda p: (p.split("/", 1)[0], p))
        body = await listing(catalog, q="akande", sort="size", order="desc")
        assert paths(body) == [p for p in by_size[::-1] if "akande" in p]

    await through_changes(catalog, agrees, {"akande/v1/logos/akande.svg": 5,  # moved
                                            "bantu/v1/icons/Zebra.png": 70},  # added
                          "akande/v1/icons/192x192.png")


async def through_changes(client: TestClient, agrees: Callable[[dict[str, int]], Awaitable[None]],
                          uploads: dict[str, int], deleted: str) -> None:
    """`agrees(sizes)` (the catalog's pages checked against its files, path: size) on FILES, then after each change in
    turn: `uploads` (path: size) put, the file `deleted` deleted, the zone bantu deleted."""
    sizes = dict(FILES)
    await agrees(sizes)
    for path, size in uploads.items():
        resp = await client.put(f"/api/storage/{path}", data=b"x" * size, headers=ACCESS)
        assert resp.status == 201, await resp.text()
        sizes[path] = size
    await agrees(sizes)
    assert (await client.delete(f"/api/storage/{deleted}", headers=ACCESS)).status == 200
    del sizes[deleted]
    await agrees(sizes)
    assert (await client.delete("/api/core/zones/bantu", headers=ACCOUNT)).status == 200
    await agrees({p: size for p, size in sizes.items() if not p.startswith("bantu/")})


def expected(sizes: dict[str, int], sort: str, **only: str) -> list[str]:
    """The paths of `sizes` (path: size) a filter keeps (`project`, `category`, `format`), in `sort`'s order."""
    def facets(path: str) -> dict[str, str]:
        parts = path.split("/")
        return {"project": parts[0], "category": parts[2], "format": path.rsplit(".", 1)[1].lower()}
    kept = [p for p in sizes if all(facets(p)[facet] == value for facet, value in only.items())]
    keys = {"size": lambda p: (sizes[p], p), "name": lambda p: (p.rsplit("/", 1)[1].lower(), p),
            "project": lambda p: (p.split("/", 1)[0], p)}
    return sorted(kept, key=keys[sort])


async def test_filtered_and_descending_pages_are_read_from_kept_orders(catalog: TestClient) -> None:
    """A page filtered by category, format or project passed over every file of the catalog's order on control's event
    loop (25 to 77 ms at 100,000 files, every other request waiting), or sorted the project's files again, and a
    descending page copied the whole order; each filter's files are kept in each order from its first ask, so a page
    reads what it shows, right through uploads and deletes."""
    filters: list[dict[str, str]] = [{"category": "logos"}, {"format": "png"}, {"project": "akande"},
                                     {"project": "akande", "category": "logos"}, {"category": "icons", "format": "png"},
                                     {"project": "bantu", "category": "icons", "format": "png"}, {"category": "none"}]
    for sort in ("name", "size", "project"):
        for only in filters[:3]:
            await listing(catalog, sort=sort, **only)
    refuse_passes(catalog, orders=True)

    async def agrees(sizes: dict[str, int]) -> None:
        for sort in ("name", "size", "project"):
            assert paths(await listing(catalog, sort=sort, order="desc", per_page=2, page=3)) == expected(
                sizes, sort)[::-1][4:6], sort
            for only in filters:
                body = await listing(catalog, sort=sort, **only)
                assert paths(body) == expected(sizes, sort, **only), (sort, only)
                assert body["Pagination"]["TotalItems"] == len(paths(body))
                assert paths(await listing(catalog, sort=sort, order="desc", per_page=1, page=2, **only)) == expected(
                    sizes, sort, **only)[::-1][1:2], (sort, only)

    await through_changes(catalog, agrees, {"akande/v1/logos/akande.svg": 5, "bantu/v1/icons/Zebra.png": 70,
                                            "bantu/v1/logos/new.PNG": 3},  # moved, added, a format of its own spelling
                          "akande/v1/logos/akande.png")


async def test_the_whole_catalog_is_not_sorted_again_after_a_change_of_many_files(catalog: TestClient,
                                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A generation of more than ORDER_UPDATES_KEPT files (a zone or a directory deleted, a large batch) let the kept
    orders go, and the next page sorted every file again on control's event loop (about 215 ms at 100,000 files); the
    orders take such a change by merging it in."""
    monkeypatch.setattr(manifest_store, "ORDER_UPDATES_KEPT", 1)
    assert len(paths(await listing(catalog, sort="size"))) == len(FILES)
    refuse_passes(catalog)
    files = [{"path": f"akande/v1/icons/{n}.png", "content": base64.b64encode(b"x" * n).decode()} for n in (1, 2, 950)]
    files.append({"path": "akande/v1/logos/akande.svg", "content": base64.b64encode(b"x" * 7).decode()})  # moved
    assert (await catalog.post("/api/storage/batch", json={"files": files}, headers=ACCESS)).status == 201
    sizes = {**FILES, "akande/v1/icons/1.png": 1, "akande/v1/icons/2.png": 2, "akande/v1/icons/950.png": 950,
             "akande/v1/logos/akande.svg": 7}
    await catalog_agrees(catalog, sizes)
    assert (await catalog.delete("/api/core/zones/bantu", headers=ACCOUNT)).status == 200
    await catalog_agrees(catalog, {p: s for p, s in sizes.items() if not p.startswith("bantu/")})


async def catalog_agrees(client: TestClient, sizes: dict[str, int]) -> None:
    """Every sort of the whole catalog, both ways, pages as a sort of `sizes` (path: size) gives them."""
    orders = {"size": sorted(sizes, key=lambda p: (sizes[p], p)),
              "name": sorted(sizes, key=lambda p: (p.rsplit("/", 1)[1].lower(), p)),
              "project": sorted(sizes, key=lambda p: (p.split("/", 1)[0], p))}
    for sort, expected in orders.items():
        assert paths(await listing(client, sort=sort, per_page=200)) == expected, sort
        assert paths(await listing(client, sort=sort, order="desc", per_page=3, page=2)) == expected[::-1][3:6], sort


async def test_the_first_page_after_a_start_is_not_a_sort_of_every_file(catalog: TestClient, data_dir: Path) -> None:
    """The first page of the whole catalog in each sort after a start sorted every file on control's event loop (about
    215 ms at 100,000 files, every other request of control waiting meanwhile); the orders are made as the manifest is
    built at start, before control answers anything."""
    await catalog.close()
    client = restarted(data_dir)
    await client.start_server()
    try:
        refuse_passes(client)
        await catalog_agrees(client, FILES)
        resp = await client.put("/api/storage/bantu/v1/icons/zebra.png", data=b"x" * 60, headers=ACCESS)
        assert resp.status == 201, await resp.text()
        await catalog_agrees(client, {**FILES, "bantu/v1/icons/zebra.png": 60})
    finally:
        await client.close()


async def test_a_filters_first_ask_holds_no_other_request(catalog: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first page of a category or a format in a sort groups every file by it (one pass: 20-50 ms at 100,000 files)
    on control's event loop, every other request waiting; it runs on a thread, control answers meanwhile, and a change
    made meanwhile is in the page."""
    entered, release = threading.Event(), threading.Event()

    def held(order: list[Any], of: Any) -> dict[str, list[Any]]:
        entered.set()
        assert release.wait(10), "no other request was answered while the files were grouped"
        return grouped(order, of)

    monkeypatch.setattr(catalog_orders, "grouped", held)
    asking = asyncio.ensure_future(listing(catalog, category="logos", sort="size"))
    assert await asyncio.to_thread(entered.wait, 10)
    resp = await catalog.put("/api/storage/bantu/v1/logos/new.svg", data=b"x" * 5, headers=ACCESS)
    assert resp.status == 201, await resp.text()
    release.set()
    sizes = {**FILES, "bantu/v1/logos/new.svg": 5}
    assert paths(await asking) == expected(sizes, "size", category="logos")
    assert paths(await listing(catalog, category="logos", sort="size")) == expected(sizes, "size", category="logos")


async def test_a_text_filter_holds_no_other_request(catalog: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """The `q` filter passes over every file (text has no index): it ran on control's event loop, every other request of
    control waiting meanwhile (about 60 ms at 100,000 files); it runs on a thread, and control answers meanwhile."""
    entered, release = threading.Event(), threading.Event()

    def held(entries: list[Any], needle: str) -> list[Any]:
        entered.set()
        assert release.wait(10), "no other request was answered while the text filter ran"
        return with_text(entries, needle)

    monkeypatch.setattr(assets, "with_text", held)
    searching = asyncio.ensure_future(listing(catalog, q="AKANDE", sort="size", order="desc"))
    assert await asyncio.to_thread(entered.wait, 10)
    assert paths(await listing(catalog, sort="size", per_page=1)) == [min(FILES, key=FILES.__getitem__)]
    release.set()
    assert paths(await searching) == sorted((p for p in FILES if "akande" in p), key=lambda p: (FILES[p], p))[::-1]


async def test_text_searches_at_once_hold_two_copies_at_most(catalog: TestClient,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Each text search on a thread reads a copy of the order (0.8 MB at 100,000 files): any number at once held a copy
    each, so a client with many searches at once made control hold as many; two run at once, the others wait."""
    lock, release, two = threading.Lock(), threading.Event(), threading.Event()
    running = most = 0

    def held(entries: list[Any], needle: str) -> list[Any]:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
            if running == 2:
                two.set()
        assert release.wait(10), "the searches were never let go"
        with lock:
            running -= 1
        return with_text(entries, needle)

    monkeypatch.setattr(assets, "with_text", held)
    searches = [asyncio.ensure_future(listing(catalog, q="bantu")) for _ in range(5)]
    assert await asyncio.to_thread(two.wait, 10)
    for _ in range(3):  # the other searches' requests read and handled meanwhile
        assert len(paths(await listing(catalog, per_page=1))) == 1
    assert most == 2
    release.set()
    for body in await asyncio.gather(*searches):
        assert set(paths(body)) == {p for p in FILES if "bantu" in p}
    assert most == 2


async def test_sort_by_size_both_orders(catalog: TestClient) -> None:
    ascending = await listing(catalog, sort="size")
    sizes = [a["size"] for a in ascending["Data"]]
    assert sizes == sorted(FILES.values())
    descending = await listing(catalog, sort="size", order="desc")
    assert [a["size"] for a in descending["Data"]] == sorted(FILES.values(), reverse=True)


async def test_sort_by_project(catalog: TestClient) -> None:
    body = await listing(catalog, sort="project", order="DESC")
    projects = [a["project"] for a in body["Data"]]
    assert projects == ["bantu"] * 2 + ["akande"] * 5


async def test_unknown_sort_and_order_fall_back_to_name_ascending(catalog: TestClient) -> None:
    assert paths(await listing(catalog, sort="colour", order="sideways")) == paths(await listing(catalog))


async def test_pages_partition_the_listing(catalog: TestClient) -> None:
    everything = paths(await listing(catalog, sort="size"))
    seen: list[str] = []
    for page in (1, 2, 3):
        body = await listing(catalog, sort="size", page=page, per_page=3)
        assert body["Pagination"] == {"Page": page, "PerPage": 3, "TotalItems": 7, "TotalPages": 3}
        seen += paths(body)
    assert seen == everything
    beyond = await listing(catalog, page=9, per_page=3)
    assert beyond["Data"] == [] and beyond["Pagination"]["Page"] == 9


@pytest.mark.parametrize(("per_page", "page", "expected"), [
    ("500", "1", (1, 200)), ("200", "1", (1, 200)), ("0", "0", (1, 1)), ("-4", "-2", (1, 1)),
    ("many", "first", (1, 50)), ("", "", (1, 50)),
    # Read as the statistics' and insights' days and limit are (and as the API reference's parseInt): the leading
    # whole number counts, so a serializer's "3.0" or "3.5" asks for 3 and not for the default.
    ("3.0", "2.0", (2, 3)), ("3.5", "2.9", (2, 3)), ("3 ", " 2", (2, 3)), ("3items", "2nd", (2, 3)),
])
async def test_paging_values_are_clamped_not_refused(catalog: TestClient, per_page: str, page: str,
                                                     expected: tuple[int, int]) -> None:
    body = await listing(catalog, per_page=per_page, page=page)
    assert (body["Pagination"]["Page"], body["Pagination"]["PerPage"]) == expected


async def test_more_than_one_stream_chunk_is_valid_json(control: TestClient, zone: str) -> None:
    files = [{"path": f"akande/v1/icons/i{i:03}.png", "content": "eA=="} for i in range(50)]
    for start in (0, 50):
        batch = [{**f, "path": f["path"].replace("/i", f"/b{start}-")} for f in files]
        assert (await control.post("/api/storage/batch", json={"files": batch}, headers=ACCESS)).status == 201
    body = await listing(control, per_page=200)
    assert len(body["Data"]) == 100
    assert len(set(paths(body))) == 100


class TestMetadata:
    async def test_metadata_of_an_asset(self, catalog: TestClient) -> None:
        resp = await catalog.get("/api/assets/metadata", params={"path": "akande/v1/logos/akande.svg"},
                                 headers=ACCESS)
        assert resp.status == 200
        body = await resp.json()
        assert set(body) == {"Path", "Name", "Project", "Category", "Format", "Size", "SizeHuman", "ContentType",
                             "CdnUrl", "TransformUrl", "AvailableFormats", "DateFetched"}
        assert (body["Path"], body["Name"], body["Project"], body["Category"], body["Format"]) == (
            "akande/v1/logos/akande.svg", "akande.svg", "akande", "logos", "svg")
        assert (body["Size"], body["SizeHuman"], body["ContentType"]) == (300, "300 B", "image/svg+xml")
        assert body["CdnUrl"].endswith("/akande/v1/logos/akande.svg")
        assert body["CdnUrl"].startswith("http")
        assert "/api/transform?url=" in body["TransformUrl"]
        assert body["TransformUrl"].endswith("akande/v1/logos/akande.svg")
        # Sibling variants with the same base name; bantu/v1/icons/akande.png is not one.
        assert body["AvailableFormats"] == ["png", "svg", "webp"]
        parse_time(body["DateFetched"])

    async def test_an_assets_formats_are_found_among_its_directorys_files(self, catalog: TestClient) -> None:
        """An asset's AvailableFormats were found by a pass over every file of the manifest on control's event loop
        (82 ms at 100,000 files, every other request of control waiting meanwhile); they are read from its
        directory's files, kept in step with each change."""
        refuse_passes(catalog)

        async def formats(path: str) -> list[str]:
            resp = await catalog.get("/api/assets/metadata", params={"path": path}, headers=ACCESS)
            assert resp.status == 200, await resp.text()
            return list((await resp.json())["AvailableFormats"])

        assert await formats("akande/v1/logos/akande.svg") == ["png", "svg", "webp"]
        assert (await catalog.delete("/api/storage/akande/v1/logos/akande.webp", headers=ACCESS)).status == 200
        resp = await catalog.put("/api/storage/akande/v1/logos/akande.avif", data=b"avif", headers=ACCESS)
        assert resp.status == 201
        assert await formats("akande/v1/logos/akande.png") == ["avif", "png", "svg"]
        assert await formats("bantu/v1/icons/akande.png") == ["png"]

    async def test_urls_of_a_name_with_a_space_or_plus_name_that_asset(self, catalog: TestClient) -> None:
        """A name may hold a space, `+`, `=`... (assetcdn/shared/paths.py): the URLs were the path as it is, so a
        space made no valid URL and the transform URL of `a+b.png` asked for `a b.png` (the query's `+` is a space),
        404."""
        name = "my logo+1=(2).svg"
        files = [{"path": f"bantu/v1/logos/{name}", "content": base64.b64encode(b"<svg/>").decode()}]
        assert (await catalog.post("/api/storage/batch", json={"files": files}, headers=ACCESS)).status == 201
        resp = await catalog.get("/api/assets/metadata", params={"path": f"bantu/v1/logos/{name}"}, headers=ACCESS)
        body = await resp.json()
        for url in (body["CdnUrl"], body["TransformUrl"]):
            assert " " not in url and url.isascii(), url
        assert URL(body["CdnUrl"], encoded=True).path == f"/bantu/v1/logos/{name}"
        transform = URL(body["TransformUrl"], encoded=True)
        assert (transform.path, transform.query["url"]) == ("/api/transform", f"/bantu/v1/logos/{name}")

    async def test_leading_slash_is_tolerated(self, catalog: TestClient) -> None:
        resp = await catalog.get("/api/assets/metadata", params={"path": "/bantu/v1/logos/bantu.svg"},
                                 headers=ACCESS)
        body = await resp.json()
        assert (body["Path"], body["AvailableFormats"]) == ("bantu/v1/logos/bantu.svg", ["svg"])

    async def test_missing_path_is_400(self, catalog: TestClient) -> None:
        body = await expect_error(await catalog.get("/api/assets/metadata", headers=ACCESS), 400, "MissingPath")
        assert body["error"]["target"] == "path"

    @pytest.mark.parametrize("path", ["akande/../bantu/v1/logos/bantu.svg", "akande//v1/x.svg",
                                      "akande/v1/%2e%2e/x.svg", "akande/v1/logos/a\\b.svg"])
    async def test_bad_path_is_400(self, catalog: TestClient, path: str) -> None:
        resp = await catalog.get("/api/assets/metadata", params={"path": path}, headers=ACCESS)
        await expect_error(resp, 400, "InvalidPath")

    async def test_unknown_asset_is_404(self, catalog: TestClient) -> None:
        resp = await catalog.get("/api/assets/metadata", params={"path": "akande/v1/logos/none.svg"}, headers=ACCESS)
        await expect_error(resp, 404, "AssetNotFound")


async def test_assets_need_the_access_key(catalog: TestClient) -> None:
    for path in ("/api/assets", "/api/assets/metadata?path=akande/v1/logos/akande.svg"):
        await expect_error(await catalog.get(path), 401, "Unauthorized")
        await expect_error(await catalog.get(path, headers=ACCOUNT), 401, "Unauthorized")
