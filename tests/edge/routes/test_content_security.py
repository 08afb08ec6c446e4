"""Stored files never run with the service's authority, seen over HTTP: `nosniff` on every response of
both processes (deliveries, errors, forwarded API answers), the sandboxing CSP on active types
whatever route serves them, and `_headers` rules that cannot lift either.

The browser's side of it (scripts in an uploaded SVG or HTML page get no cookie and no API) is
tests/browser/test_stored_files_sandboxed.py.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from aiohttp.test_utils import TestClient

from assetcdn.shared.content_security import SANDBOX_CSP
from assetcdn.shared.signing import signed_url
from tests.support.cdn import ZONE, Cdn, CdnFactory, shared_cdn_apps
from tests.support.control import ACCESS, ACCOUNT, SECRETS
from tests.support.images import LOGO_SVG, solid_png
from tests.support.wait import wait_until

NOSNIFF = ("X-Content-Type-Options", "nosniff")
HTML = b"<!doctype html><title>page</title><script>document.title = 'ran'</script>"
# path -> (body, whether a browser would run script in it)
FILES: dict[str, tuple[bytes, bool]] = {
    f"{ZONE}/v1/logos/logo.svg": (LOGO_SVG, True),
    f"{ZONE}/v1/titles/page.html": (HTML, True),
    f"{ZONE}/v1/titles/page.htm": (HTML + b"<!-- htm -->", True),
    f"{ZONE}/v1/titles/page.xhtml": (b'<html xmlns="http://www.w3.org/1999/xhtml"><script>1</script></html>', True),
    f"{ZONE}/v1/titles/feed.xml": (b'<?xml version="1.0"?><feed/>', True),
    f"{ZONE}/v1/titles/app.js": (b"fetch('/api/core/zones')", True),
    f"{ZONE}/v1/titles/app.mjs": (b"export {}", True),
    "stocks/icons/shared.svg": (LOGO_SVG + b"<!-- stock -->", True),
    f"{ZONE}/v1/banners/photo.png": (solid_png(8, 8, (1, 2, 3)), False),
    f"{ZONE}/v1/titles/notes.txt": (HTML + b"<!-- txt -->", False),  # HTML labelled text: nosniff keeps it text
    f"{ZONE}/v1/titles/site.css": (b"body{color:red}", False),
    f"{ZONE}/v1/titles/data.json": (b'{"a": 1}', False),
    f"{ZONE}/v1/titles/blob.bin": (HTML + b"<!-- bin -->", False),
}
SVG = f"{ZONE}/v1/logos/logo.svg"


def assert_protected(headers: Any, active: bool, what: str) -> None:
    assert headers.get("X-Content-Type-Options") == "nosniff", what
    if active:
        assert headers.getall("Content-Security-Policy") == [SANDBOX_CSP], what
    else:
        assert "Content-Security-Policy" not in headers, what


async def upload_all(cdn: Cdn) -> None:
    for path, (body, _) in FILES.items():
        await cdn.upload(path, body)


async def test_every_delivery_of_a_stored_file_is_protected(make_cdn: CdnFactory) -> None:
    cdn = await make_cdn()
    await upload_all(cdn)
    for path, (body, active) in FILES.items():
        for attempt in ("MISS", "HIT"):
            resp = await cdn.edge.get(f"/{path}")
            assert (resp.status, await resp.read(), resp.headers["X-Cache"]) == (200, body, attempt), path
            assert_protected(resp.headers, active, f"GET {path} ({attempt})")

    edge = cdn.edge
    resp = await edge.head(f"/{SVG}")
    assert resp.status == 200
    assert_protected(resp.headers, True, "HEAD")
    etag = resp.headers["ETag"]
    resp = await edge.get(f"/{SVG}", headers={"If-None-Match": etag})
    assert resp.status == 304
    assert_protected(resp.headers, True, "304")
    resp = await edge.get(f"/{SVG}", headers={"Range": "bytes=0-9"})
    assert resp.status == 206 and await resp.read() == LOGO_SVG[:10]
    assert_protected(resp.headers, True, "206")
    resp = await edge.get(f"/{SVG}", headers={"Range": "bytes=99999-"})
    assert resp.status == 416
    assert_protected(resp.headers, True, "416")

    local = signed_url("", SECRETS.signed_url_secret, f"/{SVG}", 600)
    for method in ("GET", "HEAD"):
        resp = await edge.request(method, local)
        assert (resp.status, resp.headers["X-Signed-URL"]) == (200, "verified")
        assert_protected(resp.headers, True, f"signed {method}")

    # /api/auto answers an SVG-only base with the SVG itself: still sandboxed.
    resp = await edge.get(f"/api/auto/{SVG[:-4]}", headers={"Accept": "image/avif,image/webp"})
    assert (resp.status, resp.headers["Content-Type"]) == (200, "image/svg+xml")
    assert_protected(resp.headers, True, "auto svg")


async def test_transforms_and_conversions_say_nosniff(make_cdn: CdnFactory) -> None:
    cdn = await make_cdn()
    png = f"{ZONE}/v1/banners/photo.png"
    await cdn.upload(png, solid_png(40, 30, (1, 2, 3)))
    resp = await cdn.edge.get("/api/transform", params={"url": f"/{png}", "w": "20", "format": "webp"})
    assert (resp.status, resp.headers["Content-Type"]) == (200, "image/webp"), await resp.text()
    assert_protected(resp.headers, False, "transform")
    resp = await cdn.edge.get(f"/api/auto/{png[:-4]}", headers={"Accept": "image/webp"})
    assert (resp.status, resp.headers["Content-Type"]) == (200, "image/webp"), await resp.text()
    assert_protected(resp.headers, False, "auto conversion")
    # A raster made from an SVG is a passive image: no sandbox (it would stop nothing).
    await cdn.upload(SVG, LOGO_SVG)
    resp = await cdn.edge.get("/api/transform", params={"url": f"/{SVG}", "w": "20", "format": "png"})
    assert (resp.status, resp.headers["Content-Type"]) == (200, "image/png"), await resp.text()
    assert_protected(resp.headers, False, "svg rasterised")


async def _nosniff_everywhere(client: TestClient, requests: list[tuple[str, str, dict[str, str]]],
                              expected: dict[str, int]) -> None:
    for method, url, headers in requests:
        resp = await client.request(method, url, headers=headers, allow_redirects=False)
        assert resp.status == expected[url], (url, resp.status, await resp.text())
        assert resp.headers.get("X-Content-Type-Options") == "nosniff", url


async def test_errors_and_api_answers_of_both_processes_say_nosniff(make_cdn: CdnFactory) -> None:
    cdn = await make_cdn()
    await cdn.upload(SVG, LOGO_SVG)
    resp = await cdn.control.post("/api/core/rules", headers=ACCOUNT, json={
        "File": "_redirects", "Content": f"/old-logo /{SVG} 301\n"})
    assert resp.status in (200, 201), await resp.text()

    async def redirects_arrived() -> bool:
        return cdn.node.config.rules.redirects.match("/old-logo") is not None

    await wait_until(redirects_arrived, "the redirect rules reaching the edge")
    edge_requests = {
        f"/{ZONE}/v1/logos/missing.svg": 404, "/pics/v1/x/.git/y.png": 400, "/api/transform": 400,
        "/api/core/zones": 401, "/api/no-such-endpoint": 404, "/api/health": 200, "/old-logo": 301,
        "/api/signed?path=/x&expires=1&sig=00": 403, f"/api/storage/{SVG}": 200,
    }
    await _nosniff_everywhere(cdn.edge, [("GET", url, {}) for url in edge_requests if "storage" not in url]
                              + [("GET", f"/api/storage/{SVG}", ACCESS)], edge_requests)
    control_requests = {"/api/core/zones": 401, "/api/nothing-here": 404, f"/api/storage/{SVG}": 200,
                        "/api/health": 200}
    await _nosniff_everywhere(cdn.control, [("GET", url, {}) for url in control_requests if "storage" not in url]
                              + [("GET", f"/api/storage/{SVG}", ACCESS)], control_requests)
    resp = await cdn.edge.post("/api/core/zones", data=b"{", headers=ACCOUNT)
    assert resp.status == 400 and resp.headers["X-Content-Type-Options"] == "nosniff"


async def test_storage_downloads_of_active_files_are_sandboxed_too(make_cdn: CdnFactory) -> None:
    cdn = await make_cdn()
    await cdn.upload(SVG, LOGO_SVG)
    for client in (cdn.control, cdn.edge):
        resp = await client.get(f"/api/storage/{SVG}", headers=ACCESS)
        assert (resp.status, await resp.read()) == (200, LOGO_SVG)
        assert_protected(resp.headers, True, "storage download")
        resp = await client.head(f"/api/storage/{SVG}", headers=ACCESS)
        assert_protected(resp.headers, True, "storage HEAD")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def refused_rules_cdn(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Cdn]:
    """One CDN for every refused `_headers` line: a refusal commits nothing, so each case sees the same
    state whatever ran before it (the accepted rules of other tests live on CDNs of their own)."""
    async with shared_cdn_apps(tmp_path_factory.mktemp("refused-rules")) as cdn:
        await cdn.upload(f"{ZONE}/v1/titles/notes.txt", HTML)
        yield cdn


@pytest.mark.parametrize("line", [
    "Content-Type: text/plain, text/html",            # one value a browser reads as text/html
    "Content-Type: text/plain\n  Content-Type: text/html",  # two lines, which the rules would join
    "Content-Security-Policy: default-src *", "! Content-Security-Policy",
    "X-Content-Type-Options: sniff", "Content-Disposition: inline",
])
@pytest.mark.asyncio(loop_scope="module")
async def test_header_rules_cannot_decide_how_a_browser_runs_a_file(refused_rules_cdn: Cdn, line: str) -> None:
    cdn = refused_rules_cdn
    rules = f"/{ZONE}/v1/*\n  X-Frame-Options: DENY\n  {line}\n"
    resp = await cdn.control.post("/api/core/rules", headers=ACCOUNT, json={"File": "_headers", "Content": rules})
    body = await resp.json()
    assert (resp.status, body["error"]["code"]) == (400, "InvalidRules")
    assert body["error"]["details"][0]["line"] == 3 and "may not set or remove" in body["error"]["message"]
    resp = await cdn.control.get("/api/core/rules", headers=ACCOUNT)
    assert (await resp.json())["Headers"] is None  # nothing was committed
    resp = await cdn.edge.get(f"/{ZONE}/v1/titles/notes.txt")
    assert resp.headers["Content-Type"].startswith("text/plain") and "X-Frame-Options" not in resp.headers


async def test_header_rules_apply_beside_the_protection(make_cdn: CdnFactory) -> None:
    cdn = await make_cdn()
    await cdn.upload(SVG, LOGO_SVG)
    rules = f"/{ZONE}/v1/logos/*\n  X-Frame-Options: DENY\n  ! X-Robots-Tag\n"
    resp = await cdn.control.post("/api/core/rules", headers=ACCOUNT, json={"File": "_headers", "Content": rules})
    assert resp.status in (200, 201), await resp.text()

    async def rules_arrived() -> bool:
        return bool(cdn.node.config.rules.headers)

    await wait_until(rules_arrived, "the header rules reaching the edge")
    resp = await cdn.edge.get(f"/{SVG}")
    assert resp.headers["X-Frame-Options"] == "DENY"  # the rules do apply
    assert_protected(resp.headers, True, "a ruled SVG")
