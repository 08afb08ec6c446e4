"""/api/signed and the private category: refused on every public route, delivered with a valid signature."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

from assetcdn.shared.signing import signed_url, url_signature
from tests.support.cdn import ZONE, CdnFactory
from tests.support.control import ACCOUNT, SECRETS
from tests.support.images import solid_png
from tests.support.origins import PREFIX, ScriptedOrigin, serve_origin
from tests.support.wait import wait_until

PRIVATE = f"/{ZONE}/v1/private/contract.png"
PUBLIC = f"/{ZONE}/v1/banners/open.png"
SECRET = SECRETS.signed_url_secret


def _local(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.path}?{parts.query}"


def _query(path: str, expires: str, sig: str) -> str:
    return "/api/signed?" + urlencode({"path": path, "expires": expires, "sig": sig})


async def test_private_assets_only_through_a_valid_signed_url(make_cdn: CdnFactory) -> None:
    cdn = await make_cdn()
    private_png, public_png = solid_png(30, 20, (5, 5, 5)), solid_png(30, 20, (250, 250, 250))
    await cdn.upload(PRIVATE[1:], private_png)
    await cdn.upload(PUBLIC[1:], public_png)

    for method in ("GET", "HEAD"):
        resp = await cdn.edge.request(method, PRIVATE)
        assert resp.status == 403
    assert (await (await cdn.edge.get(PRIVATE)).json())["error"]["code"] == "Forbidden"
    for url in (f"/api/transform?url={PRIVATE}&w=10", f"/api/auto?path={PRIVATE[:-4]}",
                f"/api/auto{PRIVATE[:-4]}", f"/api/lqip?url={PRIVATE}", f"/api/blurhash?url={PRIVATE}"):
        assert (await cdn.edge.get(url)).status == 403, url

    resp = await cdn.edge.get(_local(signed_url("http://edge", SECRET, PRIVATE, 3600)))
    assert resp.status == 200, await resp.text()
    assert await resp.read() == private_png
    assert resp.headers["Content-Type"] == "image/png"
    assert resp.headers["Cache-Control"] == "private, max-age=3600"
    assert resp.headers["X-Signed-URL"] == "verified"
    head = await cdn.edge.head(_local(signed_url("http://edge", SECRET, PRIVATE, 3600)))
    assert head.status == 200 and int(head.headers["Content-Length"]) == len(private_png)

    resp = await cdn.edge.get(_local(signed_url("http://edge", SECRET, PUBLIC, 60)))  # public assets too
    assert resp.status == 200 and await resp.read() == public_png
    assert resp.headers["Cache-Control"] == "private, max-age=3600"

    missing = f"/{ZONE}/v1/private/none.png"
    resp = await cdn.edge.get(_local(signed_url("http://edge", SECRET, missing, 60)))
    assert resp.status == 404 and isinstance((await resp.json())["error"], str)


async def test_refusals_in_the_published_order(make_cdn: CdnFactory) -> None:
    cdn = await make_cdn()
    await cdn.upload(PRIVATE[1:], solid_png(30, 20, (5, 5, 5)))
    now = int(time.time())
    future, past = str(now + 600), str(now - 10)
    good = url_signature(SECRET, PRIVATE, future)
    tampered_sig = ("0" if good[0] != "0" else "1") + good[1:]
    cases = [
        ("/api/signed", "Missing required parameters: path, expires, sig"),
        (_query(PRIVATE, future, "")[: -len("&sig=")], "Missing required parameter: sig"),
        (_query(PRIVATE[1:], future, good), "Invalid path format"),
        (_query(f"/{ZONE}/v1/../v1/private/contract.png", future, good), "Invalid path format"),
        (_query(f"/{ZONE}//v1/private/contract.png", future, good), "Invalid path format"),
        (_query(PRIVATE, "soon", good), "Invalid expires parameter"),
        (_query(PRIVATE, "12.5", good), "Invalid expires parameter"),
        (_query(PRIVATE, past, url_signature(SECRET, PRIVATE, past)), "URL expired"),    # expired, signed right
        (_query(PRIVATE, future, tampered_sig), "Invalid signature"),                    # tampered signature
        (_query(PUBLIC, future, good), "Invalid signature"),                             # signature of another path
        (_query(PRIVATE, str(now + 7200), good), "Invalid signature"),                   # extended expiry
        (_query(PRIVATE, future, url_signature("another-secret", PRIVATE, future)), "Invalid signature"),
        (_query(PRIVATE, future, "not-hex-é"), "Invalid signature"),
    ]
    for url, message in cases:
        resp = await cdn.edge.get(url)
        assert resp.status == 403, (url, await resp.text())
        body = await resp.json()
        assert body["error"] == message, (url, body)
        assert body["HttpCode"] == 403 and resp.headers["X-Request-ID"] == body["requestId"]
    assert (await cdn.edge.get(_query(PRIVATE, future, good.upper()))).status == 200   # hex case does not matter


async def test_a_signed_urls_deliveries_are_counted_as_the_zones_deliveries_of_its_asset(make_cdn: CdnFactory) -> None:
    """A signed URL delivers its asset as it is (a private one only so): statistics count it in the asset's zone and
    top assets under its path, as its public path's deliveries are. They were counted as `/api/signed` under the
    `api` zone, so a zone's private files were in no top assets list and not in its requests or bandwidth. A URL
    refused before its signature is checked names no asset: it stays an API answer."""
    cdn = await make_cdn()
    private_png, public_png = solid_png(30, 20, (5, 5, 5)), solid_png(30, 20, (250, 250, 250))
    await cdn.upload(PRIVATE[1:], private_png)
    await cdn.upload(PUBLIC[1:], public_png)
    private_url = _local(signed_url("http://edge", SECRET, PRIVATE, 3600))
    for method in ("GET", "GET", "GET", "HEAD"):
        assert (await cdn.edge.request(method, private_url)).status == 200
    resp = await cdn.edge.get(_local(signed_url("http://edge", SECRET, PUBLIC, 3600)))
    assert resp.status == 200 and await resp.read() == public_png
    assert (await cdn.edge.get(_query(PRIVATE, str(int(time.time()) + 60), "0" * 64))).status == 403
    statistics: dict[str, Any] = {}

    async def counted() -> bool:
        await cdn.node.deliveries.ship(cdn.node.control, final=True)
        for zone in (ZONE, "api"):
            resp = await cdn.control.get(f"/api/core/statistics?days=1&zone={zone}", headers=ACCOUNT)
            statistics[zone] = await resp.json()
        return bool(statistics[ZONE]["Summary"]["TotalRequests"] + statistics["api"]["Summary"]["TotalRequests"] >= 6)

    await wait_until(counted, "six deliveries counted")
    summary = statistics[ZONE]["Summary"]
    assert (summary["TotalRequests"], summary["TotalBandwidth"]) == (5, 3 * len(private_png) + len(public_png))
    assert statistics[ZONE]["TopAssets"] == [{"Path": PRIVATE, "Requests": 4}, {"Path": PUBLIC, "Requests": 1}]
    assert statistics["api"]["Summary"]["TotalRequests"] == 1  # the forged signature's 403
    top = await (await cdn.control.get("/api/insights/top-assets?days=1", headers=ACCOUNT)).json()
    assert top["Assets"] == statistics[ZONE]["TopAssets"]


def test_assetcdn_sign_prints_a_url_the_edge_accepts(tmp_path: Path) -> None:
    # `sign` loads the edge's secrets, which today also insist on the cluster secret (reported).
    env = {**os.environ, "ASSETCDN_SIGNED_URL_SECRET": SECRET, "ASSETCDN_CLUSTER_SECRET": "unused"}
    before = int(time.time())
    done = subprocess.run([sys.executable, "-m", "assetcdn.cli", "sign", PRIVATE, "--ttl", "3600", "--base-url",
                           "https://cdn.example", "--data-dir", str(tmp_path)],
                          env=env, capture_output=True, text=True, check=True)
    url = done.stdout.strip()
    parts = urlsplit(url)
    assert (parts.scheme, parts.netloc, parts.path) == ("https", "cdn.example", "/api/signed")
    query = dict(p.split("=", 1) for p in parts.query.split("&"))
    assert before + 3600 <= int(query["expires"]) <= math.ceil(time.time()) + 3600
    assert query["sig"] == url_signature(SECRET, PRIVATE, query["expires"])


async def test_each_client_has_a_limited_number_of_signed_requests_per_window(make_cdn: CdnFactory) -> None:
    cdn = await make_cdn(ASSETCDN_COUNTERS_SIGNED_RATE_LIMIT="3", ASSETCDN_COUNTERS_SIGNED_RATE_WINDOW_S="60")
    await cdn.upload(PRIVATE[1:], solid_png(30, 20, (5, 5, 5)))
    good = _local(signed_url("http://edge", SECRET, PRIVATE, 600))
    answers = [await cdn.edge.get(url) for url in ("/api/signed", good, _query(PRIVATE, "soon", "00"))]
    # Checked first, as published: refusals count too, and every answer carries the count.
    assert [r.status for r in answers] == [403, 200, 403]
    assert [r.headers["X-RateLimit-Remaining"] for r in answers] == ["2", "1", "0"]
    assert all(r.headers["X-RateLimit-Limit"] == "3" for r in answers)
    assert 0 < int(answers[0].headers["X-RateLimit-Reset"]) - time.time() <= 61

    refused = await cdn.edge.get(good)
    body = await refused.json()
    assert refused.status == 429 and body["error"] == "Rate limit exceeded" and body["HttpCode"] == 429
    assert 1 <= int(refused.headers["Retry-After"]) <= 60 and refused.headers["X-RateLimit-Remaining"] == "0"
    assert (await cdn.edge.head(good)).status == 429


async def test_a_zone_that_pulls_serves_no_stored_file_through_a_signed_url(make_cdn: CdnFactory) -> None:
    """Files stored in a zone that gets an origin are kept but not served while it pulls (docs/api-guide.md, "Pull
    zones"): a signed URL made for one (a private file's, or a public one's) is 404 from then on, as its public
    path is the origin's; once the origin is removed the same signed URL serves the stored file again."""
    cdn = await make_cdn(ASSETCDN_ORIGIN_ALLOW_LOOPBACK="true")
    private_png, public_png = solid_png(30, 20, (5, 5, 5)), solid_png(30, 20, (250, 250, 250))
    await cdn.upload(PRIVATE[1:], private_png)
    await cdn.upload(PUBLIC[1:], public_png)
    urls = {path: _local(signed_url("http://edge", SECRET, path, 3600)) for path in (PRIVATE, PUBLIC)}
    for path, body in ((PRIVATE, private_png), (PUBLIC, public_png)):
        resp = await cdn.edge.get(urls[path])
        assert (resp.status, await resp.read()) == (200, body)
    origin = ScriptedOrigin()
    origin.answer("/v1/banners/open.png", b"the origin's", headers={"Content-Type": "text/plain"})
    server = await serve_origin(origin)
    try:
        resp = await cdn.control.put(f"/api/core/zones/{ZONE}/origin", headers=ACCOUNT,
                                     json={"Url": f"http://127.0.0.1:{server.port}{PREFIX}"})
        assert resp.status == 200, await resp.text()

        async def pulling() -> bool:
            return ZONE in cdn.node.config.pull_zones

        await wait_until(pulling, "the zone's origin reaching the edge")
        assert await (await cdn.edge.get(PUBLIC)).read() == b"the origin's"
        for path in (PRIVATE, PUBLIC):
            resp = await cdn.edge.get(urls[path])
            assert resp.status == 404, (path, resp.status)
            assert (await resp.json())["error"] == "Asset not found (404)"  # as for a file there is none of
            assert resp.headers.get("X-Signed-URL") is None
        resp = await cdn.control.delete(f"/api/core/zones/{ZONE}/origin", headers=ACCOUNT)
        assert resp.status == 200, await resp.text()

        async def storing() -> bool:
            return ZONE not in cdn.node.config.pull_zones

        await wait_until(storing, "the zone's origin leaving the edge")
        for path, body in ((PRIVATE, private_png), (PUBLIC, public_png)):
            resp = await cdn.edge.get(urls[path])
            assert (resp.status, await resp.read()) == (200, body)
    finally:
        await server.close()
