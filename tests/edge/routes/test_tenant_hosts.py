"""A zone's tenant host (`<zone>.<base domain>`) and custom domain serve that zone's files and the
shared stock pool, nothing of another zone, on every delivery route; the default host serves all."""

from __future__ import annotations

import time
from urllib.parse import urlencode, urlsplit

import pytest

from assetcdn.shared.signing import signed_url, url_signature
from tests.control.expect import expect_error
from tests.support.cdn import PURGE, ZONE, Cdn, CdnFactory, raw_status
from tests.support.control import ACCOUNT, SECRETS
from tests.support.images import solid_png
from tests.support.wait import wait_until

OTHER = "rival"
OWN_FILE = f"{ZONE}/v1/logos/own.png"
OTHER_FILE = f"{OTHER}/v1/logos/theirs.png"
STOCK_FILE = "stocks/icons/shared.png"
TENANT_HOST = f"{ZONE}.cdn.localhost"      # the default base domain is cdn.localhost
CUSTOM_DOMAIN = "img.pics-brand.example"


async def two_zones(make_cdn: CdnFactory, *, hit_path: bool = True) -> Cdn:
    cdn = await make_cdn(hit_path=hit_path)
    resp = await cdn.control.post("/api/core/zones", json={"Name": OTHER}, headers=ACCOUNT)
    assert resp.status == 201, await resp.text()
    for path, colour in ((OWN_FILE, (10, 200, 10)), (OTHER_FILE, (200, 10, 10)), (STOCK_FILE, (10, 10, 200))):
        await cdn.upload(path, solid_png(16, 12, colour))
    resp = await cdn.control.post(f"/api/core/zones/{ZONE}/domains", json={"Hostname": CUSTOM_DOMAIN},
                                  headers=ACCOUNT)
    assert resp.status == 201, await resp.text()

    async def domain_arrived() -> bool:
        return cdn.node.config.zone_for_host(CUSTOM_DOMAIN) == ZONE

    await wait_until(domain_arrived, "the custom domain reaching the edge")
    return cdn


def _signed(path: str) -> str:
    parts = urlsplit(signed_url("http://x", SECRETS.signed_url_secret, f"/{path}", 600))
    return f"{parts.path}?{parts.query}"


def urls_for(path: str) -> list[str]:
    """Every public delivery route that reads the file at `path`."""
    stem = path.rsplit(".", 1)[0]
    return [f"/{path}", f"/api/transform?url=/{path}&w=8", f"/api/auto/{stem}", f"/api/auto?path=/{stem}",
            _signed(path), f"/api/lqip?url=/{path}", f"/api/blurhash?url=/{path}"]


async def statuses(cdn: Cdn, host: str, path: str) -> dict[str, int]:
    found = {}
    for url in urls_for(path):
        for method in ("GET", "HEAD") if not url.startswith(("/api/lqip", "/api/blurhash")) else ("GET",):
            resp = await cdn.edge.request(method, url, headers={"Host": host})
            found[f"{method} {url}"] = resp.status
    return found


def all_are(found: dict[str, int], status: int) -> bool:
    return set(found.values()) == {status}


async def test_tenant_hosts_serve_their_zone_and_the_stock_pool_only(make_cdn: CdnFactory) -> None:
    cdn = await two_zones(make_cdn)
    for host in (TENANT_HOST, CUSTOM_DOMAIN, f"{CUSTOM_DOMAIN.upper()}:8788"):
        own = await statuses(cdn, host, OWN_FILE)
        assert all_are(own, 200), (host, own)
        stock = await statuses(cdn, host, STOCK_FILE)
        assert all_are(stock, 200), (host, stock)
        other = await statuses(cdn, host, OTHER_FILE)
        assert all_are(other, 404), (host, other)
        # `/v1/...` on a tenant host is the host's zone.
        resp = await cdn.edge.get("/v1/logos/own.png", headers={"Host": host})
        assert resp.status == 200
        resp = await cdn.edge.get("/v1/logos/theirs.png", headers={"Host": host})
        assert resp.status == 404
    # Another zone's path answers exactly like a path that does not exist: nothing leaks.
    missing = await cdn.edge.get(f"/{OTHER}/v1/logos/nothing.png", headers={"Host": TENANT_HOST})
    hidden = await cdn.edge.get(f"/{OTHER_FILE}", headers={"Host": TENANT_HOST})
    assert (missing.status, hidden.status) == (404, 404)
    assert (await missing.json())["error"]["code"] == (await hidden.json())["error"]["code"] == "AssetNotFound"
    # The rival zone's own tenant host serves the rival's file and not ours.
    assert all_are(await statuses(cdn, f"{OTHER}.cdn.localhost", OTHER_FILE), 200)
    assert all_are(await statuses(cdn, f"{OTHER}.cdn.localhost", OWN_FILE), 404)


async def test_an_image_routes_source_on_a_tenant_host_is_named_as_its_delivery_is(make_cdn: CdnFactory) -> None:
    """`/v1/...` on a zone's own host is its file for the image routes' `url` and `path` as for its delivery: a page
    on the custom domain writes `/api/transform?url=/v1/logos/own.png` beside `<img src="/v1/logos/own.png">`, as a
    pull zone's page writes `url=/photo.jpg`. Another zone's file stays out of reach, and a variant is the one the
    full path names (one cache entry)."""
    cdn = await two_zones(make_cdn)
    for host in (TENANT_HOST, CUSTOM_DOMAIN):
        own = {url: status for url, status in (await statuses(cdn, host, "v1/logos/own.png")).items()
               if "/api/signed" not in url}
        assert all_are(own, 200), (host, own)
        other = {url: status for url, status in (await statuses(cdn, host, "v1/logos/theirs.png")).items()
                 if "/api/signed" not in url}
        assert all_are(other, 404), (host, other)
    short = await cdn.edge.get("/api/transform?url=/v1/logos/own.png&w=5", headers={"Host": TENANT_HOST})
    full = await cdn.edge.get(f"/api/transform?url=/{OWN_FILE}&w=5", headers={"Host": CUSTOM_DOMAIN})
    assert (short.headers["X-Cache"], full.headers["X-Cache"]) == ("MISS", "HIT")
    assert await short.read() == await full.read()


async def test_a_signed_url_on_a_tenant_host_names_its_file_as_its_delivery_does(make_cdn: CdnFactory) -> None:
    """`path=/v1/...` on a zone's own host is its file for /api/signed as for its delivery, and what is signed is the
    full path it names (`/<zone>/v1/...`, what `assetcdn sign` prints): a URL signed for one zone's file, written
    short, never reaches another zone's file of that name on the other's host, and a signature over the short
    spelling alone, which names no zone, grants nothing."""
    cdn = await two_zones(make_cdn)
    expires = int(time.time()) + 600

    def signed(path: str, signed_path: str) -> str:
        sig = url_signature(SECRETS.signed_url_secret, signed_path, expires)
        return f"/api/signed?{urlencode({'path': path, 'expires': expires, 'sig': sig})}"

    for host in (TENANT_HOST, CUSTOM_DOMAIN):
        for method in ("GET", "HEAD"):
            short = await cdn.edge.request(method, signed("/v1/logos/own.png", f"/{OWN_FILE}"), headers={"Host": host})
            full = await cdn.edge.request(method, signed(f"/{OWN_FILE}", f"/{OWN_FILE}"), headers={"Host": host})
            assert (short.status, full.status) == (200, 200), (host, method)
            assert short.headers["X-Signed-URL"] == "verified"
            assert await short.read() == await full.read()
        # The rival's file, signed for the rival and written short, on our host: the signature is not ours.
        theirs = await cdn.edge.get(signed("/v1/logos/theirs.png", f"/{OTHER_FILE}"), headers={"Host": host})
        assert theirs.status == 403 and "Invalid signature" in await theirs.text()
        zoneless = await cdn.edge.get(signed("/v1/logos/own.png", "/v1/logos/own.png"), headers={"Host": host})
        assert zoneless.status == 403 and "Invalid signature" in await zoneless.text()
    # Our file's signature written short on the rival's host names the rival's file: refused.
    ours = await cdn.edge.get(signed("/v1/logos/own.png", f"/{OWN_FILE}"), headers={"Host": f"{OTHER}.cdn.localhost"})
    assert ours.status == 403
    # On the default host /v1/... names no zone: not found, as its delivery.
    bare = await cdn.edge.get(signed("/v1/logos/own.png", "/v1/logos/own.png"))
    assert bare.status == 404


@pytest.mark.parametrize("hit_path", [True, False], ids=["hit-path", "application-only"])
async def test_every_spelling_of_a_tenant_host_is_that_tenant(make_cdn: CdnFactory, hit_path: bool) -> None:
    """A trailing dot, upper case and a port name the same host: each is served as the tenant (never
    as the default host, which serves every zone) and gets the `_headers` rules written for that host,
    whether the answer is a prepared hit or not."""
    cdn = await two_zones(make_cdn, hit_path=hit_path)
    resp = await cdn.control.post("/api/core/rules", headers=ACCOUNT, json={
        "File": "_headers", "Content": f"https://{TENANT_HOST}/*\n  X-Frame-Options: DENY\n"})
    assert resp.status == 200, await resp.text()

    async def rules_arrived() -> bool:
        return bool(cdn.node.config.rules.headers)

    await wait_until(rules_arrived, "the rules reaching the edge")
    for _ in range(2):  # the rival's file is cached, and a prepared hit on the default host
        assert (await cdn.edge.get(f"/{OTHER_FILE}", headers={"Host": "127.0.0.1"})).status == 200
    for host in (f"{TENANT_HOST}.", f"{TENANT_HOST}.:8788", f"{TENANT_HOST.upper()}.", f"{CUSTOM_DOMAIN}.",
                 f"{CUSTOM_DOMAIN}..:443"):
        for _ in range(2):  # the second GET of a file is a hit (answered below aiohttp with the hit path)
            other = await statuses(cdn, host, OTHER_FILE)
            assert all_are(other, 404), (host, other)
            own = await statuses(cdn, host, OWN_FILE)
            assert all_are(own, 200), (host, own)
        resp = await cdn.edge.get("/v1/logos/own.png", headers={"Host": host})
        assert resp.status == 200, host
        hit = await cdn.edge.get(f"/{OWN_FILE}", headers={"Host": host})
        assert hit.headers["X-Cache"] == "HIT"
        assert hit.headers.get("X-Frame-Options") == ("DENY" if TENANT_HOST in host.lower() else None), host


@pytest.mark.parametrize("hit_path", [True, False], ids=["hit-path", "application-only"])
async def test_a_redirects_rule_for_the_root_applies_on_every_host(make_cdn: CdnFactory, hit_path: bool) -> None:
    """`/ /v1/logos/own.png 200` and `/ /welcome 301` in `_redirects` are followed for `/` as for any other path:
    the delivery route's pattern needed a character after the `/`, so the application answered 404 for `/`
    whatever the rules said. Without a rule `/` stays 404."""
    cdn = await two_zones(make_cdn, hit_path=hit_path)
    hosts = ("127.0.0.1", TENANT_HOST, CUSTOM_DOMAIN)
    for host in hosts:
        await expect_error(await cdn.edge.get("/", headers={"Host": host}), 404, "NotFound")

    async def rules(content: str) -> None:
        resp = await cdn.control.post("/api/core/rules", headers=ACCOUNT, json={"File": "_redirects",
                                                                                  "Content": content})
        assert resp.status == 200, await resp.text()

        async def arrived() -> bool:
            return cdn.node.config.rules.redirects.matches("/") == bool(content)

        await wait_until(arrived, "the rules reaching the edge")

    await rules("/ /welcome?from=root 301\n")
    for host in hosts:
        for method in ("GET", "HEAD"):
            resp = await cdn.edge.request(method, "/", headers={"Host": host}, allow_redirects=False)
            assert (resp.status, resp.headers["Location"]) == (301, "/welcome?from=root"), (host, method)
    await rules("/ /v1/logos/own.png 200\n")
    for host in (TENANT_HOST, CUSTOM_DOMAIN):
        for _ in range(2):  # the file cached by the first
            resp = await cdn.edge.get("/", headers={"Host": host})
            assert (resp.status, resp.content_type) == (200, "image/png"), host
    await rules("")
    for host in hosts:
        await expect_error(await cdn.edge.get("/", headers={"Host": host}), 404, "NotFound")


async def test_the_authority_of_an_absolute_form_target_is_the_host(make_cdn: CdnFactory) -> None:
    """RFC 9112 section 3.2.2: with an absolute-form request-target, its authority is the host and Host
    is ignored, for the tenant decision as for everything else."""
    cdn = await two_zones(make_cdn)
    for tenant in (TENANT_HOST, f"{TENANT_HOST}.", f"{TENANT_HOST}.:8788"):
        assert await raw_status(cdn, f"http://{tenant}/{OTHER_FILE}", "127.0.0.1") == 404, tenant
        assert await raw_status(cdn, f"http://{tenant}/{OWN_FILE}", "127.0.0.1") == 200, tenant
    assert await raw_status(cdn, f"http://127.0.0.1/{OTHER_FILE}", TENANT_HOST) == 200


async def test_the_default_host_serves_every_zone(make_cdn: CdnFactory) -> None:
    cdn = await two_zones(make_cdn)
    for host in ("127.0.0.1", "localhost:8788", "cdn.localhost"):
        for path in (OWN_FILE, OTHER_FILE, STOCK_FILE):
            found = await statuses(cdn, host, path)
            assert all_are(found, 200), (host, path, found)


async def test_a_purge_of_a_tenant_host_url_purges_that_zones_file(make_cdn: CdnFactory) -> None:
    cdn = await two_zones(make_cdn)

    async def cache_state() -> str:
        return (await cdn.edge.get(f"/{OWN_FILE}")).headers["X-Cache"]

    await cache_state()
    assert await cache_state() == "HIT"
    resp = await cdn.control.post("/api/purge", json={"urls": [f"https://{CUSTOM_DOMAIN}/v1/logos/own.png"]},
                                  headers=PURGE)
    assert resp.status == 200, await resp.text()
    generation = (await resp.json())["generation"]

    async def applied() -> bool:
        return cdn.node.replica.generation >= generation and not cdn.node._sync_lock.locked()

    await wait_until(applied, "the purge reaching the edge")
    assert await cache_state() == "MISS"


async def test_a_purge_url_on_a_custom_domain_never_names_another_zones_file(make_cdn: CdnFactory) -> None:
    """A custom domain serves its zone's files and the stock pool, nothing of another zone (404): a purge URL is read
    as a request for it (docs/api-guide.md), so `https://<domain>/<other zone>/...` names nothing. It purged the other
    zone's file, as the default host's URL does: a purge meant for one zone's domain evicted another zone's copy."""
    cdn = await two_zones(make_cdn)

    async def cache_state(path: str) -> str:
        return (await cdn.edge.get(f"/{path}")).headers["X-Cache"]

    for path in (OTHER_FILE, STOCK_FILE):
        await cache_state(path)
        assert await cache_state(path) == "HIT"
    assert (await cdn.edge.get(f"/{OTHER_FILE}", headers={"Host": CUSTOM_DOMAIN})).status == 404
    resp = await cdn.control.post("/api/purge", headers=PURGE, json={"urls": [
        f"https://{CUSTOM_DOMAIN}/{OTHER_FILE}", f"https://{TENANT_HOST}/{OTHER_FILE}",
        f"https://{CUSTOM_DOMAIN}/{STOCK_FILE}"]})
    assert resp.status == 200, await resp.text()
    generation = (await resp.json())["generation"]

    async def applied() -> bool:
        return cdn.node.replica.generation >= generation and not cdn.node._sync_lock.locked()

    await wait_until(applied, "the purge reaching the edge")
    assert await cache_state(STOCK_FILE) == "MISS"  # the stock pool is served on every host: named there too
    assert await cache_state(OTHER_FILE) == "HIT"


async def test_a_purge_prefix_on_a_custom_domain_names_what_its_requests_get(make_cdn: CdnFactory) -> None:
    """On a custom domain `/<zone>/v1/...` is the zone's file and `/stocks/...` the stock pool's, as `/v1/...` is
    the zone's (what its requests get): a prefix there naming them was read as a path below `/v1/`'s (`<zone>/<zone>/
    v1/...`, `<zone>/stocks/...`), so the purge was acknowledged and purged nothing. Another zone's prefix there
    still names nothing of that zone."""
    cdn = await two_zones(make_cdn)

    async def cache_state(path: str) -> str:
        return (await cdn.edge.get(f"/{path}")).headers["X-Cache"]

    for path in (OWN_FILE, STOCK_FILE, OTHER_FILE):
        await cache_state(path)
        assert await cache_state(path) == "HIT"
    resp = await cdn.control.post("/api/purge", headers=PURGE, json={"prefixes": [
        f"https://{CUSTOM_DOMAIN}/{ZONE}/v1/logos/", f"https://{CUSTOM_DOMAIN}/stocks/icons/",
        f"https://{CUSTOM_DOMAIN}/{OTHER}/v1/"]})
    assert resp.status == 200, await resp.text()
    generation = (await resp.json())["generation"]

    async def applied() -> bool:
        return cdn.node.replica.generation >= generation and not cdn.node._sync_lock.locked()

    await wait_until(applied, "the purge reaching the edge")
    assert [await cache_state(path) for path in (OWN_FILE, STOCK_FILE, OTHER_FILE)] == ["MISS", "MISS", "HIT"]


@pytest.mark.parametrize("hit_path", [True, False], ids=["hit-path", "application-only"])
async def test_a_host_that_names_no_host_is_refused(make_cdn: CdnFactory, hit_path: bool) -> None:
    """RFC 9112 section 3.2: a Host that is not a host[:port] is answered 400. Such values (userinfo, a
    list, an escape, two ports) named no tenant, so they were served as the default host, which serves
    every zone, while a cache in front may read them as the tenant."""
    cdn = await two_zones(make_cdn, hit_path=hit_path)
    for host in (f"u@{TENANT_HOST}", f"{TENANT_HOST}, 127.0.0.1", f"{ZONE}%2Ecdn.localhost", f"{TENANT_HOST}:1:2",
                 f"{TENANT_HOST}/x", f"{TENANT_HOST}:port", "::1"):
        for _ in range(2):  # the second would be a prepared hit
            assert await raw_status(cdn, f"/{OTHER_FILE}", host) == 400, host
    for host in ("127.0.0.1", "[::1]", "[::1]:8788", "localhost:8788", "cdn.localhost."):
        for _ in range(2):
            assert await raw_status(cdn, f"/{OTHER_FILE}", host) == 200, host
    for host in (f"{TENANT_HOST.upper()}.", f"{TENANT_HOST}.:8788", CUSTOM_DOMAIN):
        assert await raw_status(cdn, f"/{OTHER_FILE}", host) == 404, host
        assert await raw_status(cdn, f"/{OWN_FILE}", host) == 200, host


async def test_a_base_domain_written_with_its_trailing_dot_still_names_the_tenant_hosts(make_cdn: CdnFactory) -> None:
    """`[domains] base_domain = "cdn.localhost."`, a DNS name written absolute (control's check of custom domains reads
    it as `cdn.localhost`): the edges compared each request's host, its trailing dot dropped, with `.cdn.localhost.`
    and found no tenant host, so `<zone>.cdn.localhost` was the default host: its own paths 404 (a pull zone's origin
    never asked), and every other zone's files served there under `/<zone>/...`."""
    cdn = await make_cdn(ASSETCDN_DOMAINS_BASE_DOMAIN="cdn.localhost.")
    resp = await cdn.control.post("/api/core/zones", json={"Name": OTHER}, headers=ACCOUNT)
    assert resp.status == 201, await resp.text()
    for path, colour in ((OWN_FILE, (10, 200, 10)), (OTHER_FILE, (200, 10, 10))):
        await cdn.upload(path, solid_png(16, 12, colour))
    for host in (TENANT_HOST, f"{TENANT_HOST}.", f"{TENANT_HOST.upper()}:8788"):
        own = await cdn.edge.get("/v1/logos/own.png", headers={"Host": host})
        assert own.status == 200, (host, own.status)
        other = await cdn.edge.get(f"/{OTHER_FILE}", headers={"Host": host})
        assert other.status == 404, (host, other.status)


@pytest.mark.parametrize("hit_path", [True, False], ids=["hit-path", "application-only"])
async def test_the_cdns_own_hosts_under_the_base_domain_are_the_default_host(make_cdn: CdnFactory,
                                                                              hit_path: bool) -> None:
    """The CDN's own hosts (the public URL's, the CNAME target's, the dashboard's) may be `<label>.<base domain>`, as
    the default CNAME target `edge.cdn.localhost` is: each was read as the tenant host of a zone `<label>`, so every
    `/<zone>/...` there answered 404 AssetNotFound (the public URL's links among them). They are the default host;
    any other `<label>.<base domain>` stays a tenant host, of a zone that may come later."""
    public = "assets.cdn.localhost"
    cdn = await make_cdn(hit_path=hit_path, ASSETCDN_SERVER_PUBLIC_URL=f"http://{public}:8788")
    await cdn.upload(OWN_FILE, solid_png(16, 12, (10, 200, 10)))
    for host in ("edge.cdn.localhost", f"{public}:8788", "EDGE.cdn.localhost."):
        for _ in range(2):  # the second would be a prepared hit
            assert await raw_status(cdn, f"/{OWN_FILE}", host) == 200, host
    await expect_error(await cdn.edge.get(f"/{OWN_FILE}", headers={"Host": "www.cdn.localhost"}), 404, "AssetNotFound")
