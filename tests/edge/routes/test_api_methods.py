"""A method an /api endpoint does not take: 405 with the methods it takes in Allow, whether the edge answers the
endpoint itself or forwards it to control (RFC 9110 15.5.6); a path nothing takes stays 404."""

from __future__ import annotations

from tests.support.cdn import CdnFactory


async def test_a_method_an_endpoint_does_not_take_is_405_through_the_edge(make_cdn: CdnFactory) -> None:
    # The endpoint exists (on the edge or at control): a 404 "No endpoint matches" would say it does not.
    cdn = await make_cdn()
    for method, path, allowed, legacy in [
        ("POST", "/api/transform?url=/x.png", {"GET", "HEAD", "OPTIONS"}, True),   # OPTIONS: a page's preflight
        ("DELETE", "/api/auto/x/logo", {"GET", "HEAD", "OPTIONS"}, True),
        ("PUT", "/api/lqip", {"GET", "HEAD", "OPTIONS"}, False),
        ("POST", "/api/stream?video=black", {"GET", "HEAD", "OPTIONS"}, True),
        ("POST", "/api/signed", {"GET", "HEAD"}, True),
        ("GET", "/api/purge", {"POST"}, True),  # control's endpoint: its 405 comes through
        ("PATCH", "/api/tokens", {"GET", "HEAD", "POST", "DELETE"}, False),
    ]:
        resp = await cdn.edge.request(method, path)
        body = await resp.json()
        assert resp.status == 405 and body["HttpCode"] == 405, (path, body)
        message = body["error"] if legacy else body["error"]["message"]
        assert message == body["Message"] and method in message, body
        assert {m.strip() for m in resp.headers["Allow"].split(",")} == allowed, path
    # A path nothing takes is still 404, and the edge's own routes still answer their methods.
    assert (await cdn.edge.post("/api/nothing")).status == 404
    assert (await cdn.edge.options("/api/stream")).status == 204


async def test_a_page_on_another_origin_reads_the_405_of_a_route_it_may_read(make_cdn: CdnFactory) -> None:
    """The routes a page reads from another origin (assetcdn/shared/cors.py) carry their CORS fields on their 405 as
    on their other errors, so a page that sent the wrong method reads why: the 405 kept only Allow, and fetch() saw
    a network error. A route behind a key, or only the edge's, gets none."""
    cdn = await make_cdn()
    page = {"Origin": "https://shop.example"}
    for method, path, exposed in [
        ("POST", "/api/transform?url=/x.png", "x-ratelimit-remaining"),
        ("DELETE", "/api/auto/x/logo", None),
        ("PUT", "/api/auto?path=/x/logo", None),
        ("PUT", "/api/lqip", "retry-after"),
        ("POST", "/api/blurhash", "retry-after"),
        ("POST", "/api/stream?video=black", "content-range"),
    ]:
        resp = await cdn.edge.request(method, path, headers=page)
        assert resp.status == 405, path
        assert resp.headers.get("Access-Control-Allow-Origin") == "*", (path, dict(resp.headers))
        if exposed is not None:
            assert exposed in resp.headers.get("Access-Control-Expose-Headers", "").lower(), (path, dict(resp.headers))
    for method, path in [("POST", "/api/signed"), ("POST", "/api/health"), ("GET", "/api/purge")]:
        resp = await cdn.edge.request(method, path, headers=page)
        assert resp.status == 405 and "Access-Control-Allow-Origin" not in resp.headers, path


async def test_a_public_search_answers_a_pages_preflight_as_the_edges_public_reads_do(make_cdn: CdnFactory) -> None:
    """/api/search is public and readable from any origin (control answers it; the edge forwards it): a page sending a
    header of its own (If-None-Match, a revalidation) asks first with OPTIONS, which was 405 without
    Access-Control-Allow-Origin, so its fetch() failed before the GET. It is 204 with the fields /api/transform's
    preflight has, and another method's 405 is readable too."""
    cdn = await make_cdn()
    page = {"Origin": "https://shop.example", "Access-Control-Request-Method": "GET",
            "Access-Control-Request-Headers": "if-none-match"}
    fields = ("Access-Control-Allow-Origin", "Access-Control-Allow-Methods", "Access-Control-Allow-Headers",
              "Access-Control-Max-Age")
    transform = await cdn.edge.options("/api/transform", headers=page)
    assert transform.status == 204
    search = await cdn.edge.options("/api/search?q=logo", headers=page)
    assert search.status == 204, await search.text()
    assert {name: search.headers.get(name) for name in fields} == {name: transform.headers[name] for name in fields}
    refused = await cdn.edge.post("/api/search?q=logo", headers={"Origin": "https://shop.example"})
    assert refused.status == 405 and refused.headers.get("Access-Control-Allow-Origin") == "*"
    assert {m.strip() for m in refused.headers["Allow"].split(",")} == {"GET", "HEAD", "OPTIONS"}
