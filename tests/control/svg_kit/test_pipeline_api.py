"""POST /api/pipeline: one SVG becomes a zone (client) or a stock asset (stock) in ONE commit; every
generated image decodes; invalid input is 400 and commits nothing."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pygit2
import pytest
import pyvips
from aiohttp.test_utils import TestClient

from assetcdn.control.storage.service import EDGE_CONFIG
from assetcdn.shared.pull_origin import parse_origin
from tests.control.expect import commit_count, expect_error, head_commit, parse_time, repo_files
from tests.support.control import ACCESS, ACCOUNT

LOGO_SVG = (b'<svg xmlns="http://www.w3.org/2000/svg" width="200" height="100" viewBox="0 0 200 100">'
            b'<rect width="200" height="100" fill="#336699"/><circle cx="100" cy="50" r="30" fill="#ffcc00"/></svg>')
RESPONSE_FIELDS = {"HttpCode", "Message", "Commit", "Mode", "Name", "Files", "EdgeStatus", "EdgeNote", "DateCreated",
                   "commit", "files", "zone"}
CATEGORIES = ("banners", "github", "icons", "logos", "titles")
RASTER = {"png": "pngload_buffer", "webp": "webpload_buffer", "avif": "heifload_buffer"}


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def blob(data_dir: Path, path: str) -> bytes:
    repo = pygit2.Repository(str(data_dir / "repo.git"))
    tree = repo.revparse_single("refs/heads/main").peel(pygit2.Tree)
    return repo.get(tree[path].id).data


def check_decodes(data_dir: Path, paths: list[str]) -> int:
    """Decode every generated image; returns how many raster images were decoded."""
    decoded = 0
    for path in paths:
        data = blob(data_dir, path)
        ext = path.rsplit(".", 1)[-1]
        if ext == "gitkeep":
            assert data == b""
            continue
        image = pyvips.Image.new_from_buffer(data, "")
        assert image.width > 0 and image.height > 0, path
        image.avg()  # forces a full decode of the pixels
        if ext in RASTER:
            assert image.get("vips-loader") == RASTER[ext], path
            decoded += 1
        else:
            assert ext == "svg" and image.get("vips-loader") == "svgload_buffer", path
        if "/icon-" in path:
            size = int(path.rsplit("-", 1)[1].split("x", 1)[0])
            assert (image.width, image.height) == (size, size), path
    return decoded


async def test_client_mode_creates_the_zone_in_one_commit(control: TestClient, data_dir: Path) -> None:
    before = commit_count(data_dir)
    resp = await control.post("/api/pipeline", json={"mode": "client", "name": "newbrand", "svg": b64(LOGO_SVG)},
                              headers=ACCOUNT)
    assert resp.status == 201, await resp.text()
    body = await resp.json()
    assert set(body) == RESPONSE_FIELDS
    assert (body["HttpCode"], body["Mode"], body["Name"], body["zone"], body["EdgeStatus"]) == \
        (201, "client", "newbrand", "newbrand", "pending")
    assert body["Commit"] == body["commit"] == head_commit(data_dir)
    parse_time(body["DateCreated"])
    assert commit_count(data_dir) == before + 1
    files = repo_files(data_dir, "clients/newbrand/")
    assert sorted(files) == body["Files"] == body["files"]
    prefix = "clients/newbrand/v1/"
    for category in CATEGORIES:  # the zone scaffold, as POST /api/core/zones makes it
        assert f"{prefix}{category}/.gitkeep" in files
    for name in ("logos/newbrand.svg", "logos/newbrand.png", "logos/newbrand.webp", "logos/newbrand.avif",
                 "icons/icon-192x192.png", "icons/icon-512x512.png", "icons/512x512.svg",
                 "banners/newbrand-banner.png", "github/newbrand-social.png"):
        assert prefix + name in files
    assert "clients/newbrand/favicon.svg" in files
    assert check_decodes(data_dir, body["Files"]) >= 17
    banner = pyvips.Image.new_from_buffer(blob(data_dir, prefix + "banners/newbrand-banner.png"), "")
    assert (banner.width, banner.height) == (1500, 500)

    # The zone exists like any other: listed, with the files in its catalog.
    detail = await (await control.get("/api/core/zones/newbrand", headers=ACCOUNT)).json()
    assert detail["FileCount"] > 0 and "logos" in detail["Categories"]
    resp = await control.get("/api/storage/newbrand/v1/logos/newbrand.png", headers=ACCESS)
    assert resp.status == 200 and (await resp.read())[:8] == b"\x89PNG\r\n\x1a\n"


async def test_stock_mode_adds_variants_to_the_pool(control: TestClient, data_dir: Path) -> None:
    before = commit_count(data_dir)
    resp = await control.post("/api/pipeline", json={"mode": "stock", "stockName": "wave", "svg": b64(LOGO_SVG),
                                                      "generateFavicon": False}, headers=ACCOUNT)
    assert resp.status == 201, await resp.text()
    body = await resp.json()
    assert (body["Mode"], body["Name"], body["zone"]) == ("stock", "wave", "stocks")  # the pool it was added to
    assert commit_count(data_dir) == before + 1
    assert sorted(repo_files(data_dir, "stocks/")) == body["Files"]
    assert {"stocks/images/wave.svg", "stocks/images/wave.png", "stocks/images/wave.webp",
            "stocks/images/wave.avif", "stocks/images/icons/wave/icon-192x192.png"} <= set(body["Files"])
    assert "stocks/favicon.svg" not in body["Files"]
    assert check_decodes(data_dir, body["Files"]) == 3 + 12
    resp = await control.post("/api/pipeline", json={"mode": "stock", "stockName": "wave", "svg": b64(LOGO_SVG)},
                              headers=ACCOUNT)
    await expect_error(resp, 409, "StockExists")
    assert commit_count(data_dir) == before + 1


async def test_an_existing_zone_is_409(control: TestClient, zone: str, data_dir: Path) -> None:
    head = head_commit(data_dir)
    resp = await control.post("/api/pipeline", json={"mode": "client", "name": zone, "svg": b64(LOGO_SVG)},
                              headers=ACCOUNT)
    await expect_error(resp, 409, "ZoneExists")
    assert head_commit(data_dir) == head


@pytest.mark.parametrize(("body", "code"), [
    ({"name": "newbrand", "svg": b64(LOGO_SVG)}, "InvalidMode"),
    ({"mode": "tenant", "name": "newbrand", "svg": b64(LOGO_SVG)}, "InvalidMode"),
    ({"mode": "client", "svg": b64(LOGO_SVG)}, "MissingName"),
    ({"mode": "client", "name": "New_Brand", "svg": b64(LOGO_SVG)}, "InvalidName"),
    ({"mode": "client", "name": "stocks", "svg": b64(LOGO_SVG)}, "InvalidName"),
    ({"mode": "client", "name": "v1", "svg": b64(LOGO_SVG)}, "InvalidName"),  # as POST /api/core/zones refuses it
    ({"mode": "stock", "stockName": "../x", "svg": b64(LOGO_SVG)}, "InvalidName"),
    ({"mode": "client", "name": "newbrand"}, "MissingSvg"),
    ({"mode": "client", "name": "newbrand", "svg": "%%% not base64"}, "InvalidBase64"),
    ({"mode": "client", "name": "newbrand", "svg": b64(b"<html>no vector here</html>")}, "InvalidSvg"),
    ({"mode": "client", "name": "newbrand", "svg": b64(b"<svg xmlns='http://www.w3.org/2000/svg' <<")}, "InvalidSvg"),
    ({"mode": "client", "name": "newbrand", "svg": b64(LOGO_SVG), "generateIcons": "yes"}, "InvalidBody"),
    (["client"], "InvalidBody"),
])
async def test_bad_input_is_400_and_commits_nothing(control: TestClient, data_dir: Path, body: Any,
                                                    code: str) -> None:
    head = head_commit(data_dir)
    await expect_error(await control.post("/api/pipeline", json=body, headers=ACCOUNT), 400, code)
    assert head_commit(data_dir) == head
    assert repo_files(data_dir, "clients/newbrand/") == {}


def blurred(filters: int) -> bytes:
    """LOGO_SVG with `filters` Gaussian blurs over its whole canvas."""
    defs = "".join(f'<filter id="b{i}"><feGaussianBlur stdDeviation="20"/></filter>' for i in range(filters))
    uses = "".join(f'<rect width="200" height="100" fill="#336699" filter="url(#b{i})"/>' for i in range(filters))
    return LOGO_SVG.replace(b"</svg>", f"<defs>{defs}</defs>{uses}</svg>".encode())


async def test_filter_work_over_the_transforms_bound_is_400_before_any_rendering(control: TestClient,
                                                                                data_dir: Path) -> None:
    # Every raster of the ingest runs each filter primitive over its pixels: 10 blurs over the ~0.9 MP of a 2:1
    # logo's files are ~8.9 million pixel operations, past the transforms' bound (transform.max_svg_filter_pixels).
    head = head_commit(data_dir)
    resp = await control.post("/api/pipeline", json={"mode": "client", "name": "newbrand", "svg": b64(blurred(10))},
                              headers=ACCOUNT)
    error = await expect_error(resp, 400, "InvalidSvg")
    assert error["error"]["target"] == "svg" and "8,000,000" in error["Message"]
    assert head_commit(data_dir) == head and repo_files(data_dir, "clients/newbrand/") == {}
    # The same drawing with fewer rasters (no icons, banners) or fewer filters is within the bound.
    resp = await control.post("/api/pipeline", json={"mode": "client", "name": "newbrand", "svg": b64(blurred(10)),
                                                      "generateIcons": False, "generateBanners": False},
                              headers=ACCOUNT)
    assert resp.status == 201, await resp.text()
    resp = await control.post("/api/pipeline", json={"mode": "stock", "stockName": "soft", "svg": b64(blurred(2))},
                              headers=ACCOUNT)
    assert resp.status == 201, await resp.text()


async def test_invalid_json_and_oversize_bodies(control: TestClient, data_dir: Path) -> None:
    head = head_commit(data_dir)
    await expect_error(await control.post("/api/pipeline", data=b"{", headers=ACCOUNT), 400, "InvalidJson")
    huge = b'{"mode": "client", "name": "newbrand", "svg": "' + b"A" * (3 * 1024 * 1024) + b'"}'
    await expect_error(await control.post("/api/pipeline", data=huge, headers=ACCOUNT), 413, "PayloadTooLarge")
    assert head_commit(data_dir) == head


async def test_scoped_token_is_accepted_and_access_key_is_not(control: TestClient) -> None:
    body = {"mode": "stock", "stockName": "hill", "svg": b64(LOGO_SVG), "generateIcons": False}
    await expect_error(await control.post("/api/pipeline", json=body, headers=ACCESS), 401, "Unauthorized")
    await expect_error(await control.post("/api/pipeline", json=body), 401, "Unauthorized")
    resp = await control.post("/api/tokens", json={"name": "ci", "scopes": ["pipeline:write"]}, headers=ACCOUNT)
    token = (await resp.json())["token"]
    resp = await control.post("/api/pipeline", json=body, headers={"Authorization": f"Bearer {token}"})
    assert resp.status == 201, await resp.text()
    audit = await (await control.get("/api/core/audit-logs", params={"action": "pipeline.run"},
                                     headers=ACCOUNT)).json()
    (entry,) = audit["Entries"]
    assert entry["meta"]["mode"] == "stock" and entry["meta"]["files"] == len((await resp.json())["Files"])
    assert entry["meta"]["actor"].startswith("token:") and token not in str(entry)


async def test_client_mode_does_not_take_an_origin_a_stopped_deletion_left_behind(control: TestClient) -> None:
    """Control stopped between a pull zone's deletion commit and the removal of its origin: a zone the pipeline
    creates again under that name is a storage zone, as one POST /api/core/zones creates is, not a pull zone of
    the old origin with its secret fields (its new files would never be served)."""
    store = control.app[EDGE_CONFIG]
    await store.set_origin("newbrand", parse_origin({"Url": "https://old-origin.test/assets",
                                                     "RequestHeaders": {"X-Origin-Secret": "the-old-secret"}}))
    resp = await control.post("/api/pipeline", json={"mode": "client", "name": "newbrand", "svg": b64(LOGO_SVG)},
                              headers=ACCOUNT)
    assert resp.status == 201, await resp.text()
    detail = await (await control.get("/api/core/zones/newbrand", headers=ACCOUNT)).json()
    assert (detail["Kind"], detail["Origin"]) == ("storage", None)
    assert await store.origin("newbrand") is None
    assert "newbrand" not in (await store.snapshot()).get("origins", {})
