"""`assetcdn up` as an operator runs it: control and one edge as real processes on loopback, driven only
over HTTP through the edge port, then stopped with SIGTERM."""

from __future__ import annotations

import base64
import json
import urllib.request
from collections.abc import Iterator

import aiohttp
import pytest
from yarl import URL

from tests.control.expect import expect_error
from tests.integration.harness import ACCESS, ACCOUNT, RunningCdn, start_cdn

pytestmark = pytest.mark.integration

ZONE = "upzone"
LOGO = b'<svg xmlns="http://www.w3.org/2000/svg" width="4" height="4"><rect width="4" height="4"/></svg>'


def _call(method: str, url: str, data: bytes, headers: dict[str, str]) -> dict:
    request = urllib.request.Request(url, data=data, headers=headers, method=method)
    with urllib.request.urlopen(request, timeout=10) as resp:  # noqa: S310 (loopback)
        assert resp.status == 201
        return json.loads(resp.read())


@pytest.fixture(scope="module")
def cdn(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningCdn]:
    """One `assetcdn up --no-demo`, with the zone and its logo every test here relies on."""
    running = start_cdn(tmp_path_factory.mktemp("up"), edges=1)
    try:
        zone = _call("POST", f"{running.edge_urls[0]}/api/core/zones", json.dumps({"Name": ZONE}).encode(),
                     {**ACCOUNT, "Content-Type": "application/json"})
        assert zone["Directories"] == ["banners", "github", "icons", "logos", "titles"]
        upload = _call("PUT", f"{running.edge_urls[0]}/api/storage/{ZONE}/v1/logos/logo.svg", LOGO,
                       {**ACCESS, "Content-Type": "image/svg+xml"})
        assert upload["EdgeStatus"] == "pending"
        yield running
    finally:
        assert running.stop() == 0


def api(cdn: RunningCdn, path: str) -> str:
    return cdn.edge_urls[0] + path


async def test_read_back_through_the_edge(cdn: RunningCdn) -> None:
    async with aiohttp.ClientSession() as http:
        # The public CDN path carries no `clients/` prefix.
        resp = await http.get(api(cdn, f"/{ZONE}/v1/logos/logo.svg"))
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("image/svg+xml")
        assert await resp.read() == LOGO

        resp = await http.get(api(cdn, f"/api/storage/{ZONE}/v1/logos/logo.svg"), headers=ACCESS)
        assert resp.status == 200
        assert await resp.read() == LOGO

        resp = await http.head(api(cdn, f"/api/storage/{ZONE}/v1/logos/logo.svg"), headers=ACCESS)
        assert resp.status == 200
        assert resp.headers["Content-Length"] == str(len(LOGO))

        resp = await http.get(api(cdn, f"/api/storage/{ZONE}/v1/logos/"), headers=ACCESS)
        assert [e["ObjectName"] for e in await resp.json()] == ["logo.svg"]


async def test_batch_and_assets_listing(cdn: RunningCdn) -> None:
    files = [{"path": f"{ZONE}/v1/banners/hero-{i}.png", "content": base64.b64encode(b"png" * (i + 1)).decode()}
             for i in range(3)]
    async with aiohttp.ClientSession() as http:
        resp = await http.post(api(cdn, "/api/storage/batch"), json={"files": files}, headers=ACCESS)
        assert resp.status == 201, await resp.text()
        resp = await http.get(api(cdn, "/api/assets"), params={"project": ZONE, "category": "banners",
                                                                "sort": "size", "order": "desc"}, headers=ACCESS)
        assert resp.status == 200
        raw = await resp.read()
        assert raw.startswith(b'{"Pagination":')
        body = await resp.json()
        assert list(body) == ["Pagination", "Filters", "DateFetched", "Data"]
        assert [a["name"] for a in body["Data"]] == ["hero-2.png", "hero-1.png", "hero-0.png"]
        assert body["Pagination"]["TotalItems"] == 3
        resp = await http.get(api(cdn, "/api/assets/metadata"), params={"path": f"{ZONE}/v1/logos/logo.svg"},
                              headers=ACCESS)
        assert (await resp.json())["AvailableFormats"] == ["svg"]


async def test_token_create_use_revoke(cdn: RunningCdn) -> None:
    async with aiohttp.ClientSession() as http:
        resp = await http.post(api(cdn, "/api/tokens"), json={"name": "it", "scopes": ["assets:read"]},
                               headers=ACCOUNT)
        assert resp.status == 201
        created = await resp.json()
        bearer = {"Authorization": f"Bearer {created['token']}"}
        assert (await http.get(api(cdn, "/api/assets"), headers=bearer)).status == 200
        listed = await (await http.get(api(cdn, "/api/tokens"), headers=ACCOUNT)).text()
        assert created["token"] not in listed and created["token"][:8] in listed
        resp = await http.delete(api(cdn, "/api/tokens"), params={"id": created["id"]}, headers=ACCOUNT)
        assert resp.status == 204
        await expect_error(await http.get(api(cdn, "/api/assets"), headers=bearer), 401, "Unauthorized")


async def test_error_envelopes_pass_through_the_edge(cdn: RunningCdn) -> None:
    async with aiohttp.ClientSession() as http:
        await expect_error(await http.get(api(cdn, "/api/core/zones"), headers=ACCESS), 401, "Unauthorized")
        body = await expect_error(await http.get(api(cdn, "/api/no-such-endpoint"), headers=ACCOUNT),
                                     404, "NotFound")
        assert "/api/no-such-endpoint" in body["Message"]
        await expect_error(await http.get(api(cdn, "/api/core/zones/nobody"), headers=ACCOUNT),
                              404, "ZoneNotFound")


async def test_encoded_traversal_through_the_edge_is_400(cdn: RunningCdn) -> None:
    async with aiohttp.ClientSession() as http:
        url = URL(api(cdn, f"/api/storage/{ZONE}/v1/%2e%2e/v1/logos/logo.svg"), encoded=True)
        await expect_error(await http.get(url, headers=ACCESS), 400, "InvalidPath")

