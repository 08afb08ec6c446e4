"""`_redirects` targets built from a request path, over raw sockets to a real edge (the hit port and the
application's own port), so each path reaches the edge exactly as written: the open-redirect forms a
splat may carry never answer 5xx and never give a Location off the rule's host."""

from __future__ import annotations

import logging
from urllib.parse import urljoin, urlsplit

import orjson
import pytest

from tests.support.control import ACCOUNT
from tests.support.hit_cdn import HitCdn, HitCdnFactory, RawConnection, Response
from tests.support.wait import wait_until

RULES = "/go/* /:splat 302\n/ext/* https://other.example/:splat 302\n/glued/* https://other.example:splat 302\n"
EDGE_HOST = "edge.test"

# What may follow '/go/' or '/ext/' to turn a path into another host: slashes and backslashes as sent and
# encoded, browser-stripped tab and CR/LF (as sent and encoded), userinfo and schemes.
OPEN_REDIRECT_FORMS = (
    "/evil.example", "//evil.example", "/\\evil.example", "\\\\evil.example", "\\/evil.example",
    "%2F%2Fevil.example", "%2f%5cevil.example", "/%2Fevil.example", "%5C%5Cevil.example", "/%5Cevil.example",
    "/%09/evil.example", "/%09evil.example", "%09//evil.example", "/%0d%0a/evil.example", "/\t/evil.example",
    "@evil.example", "/@evil.example", "%40evil.example", ".@evil.example", ":@evil.example",
    "https:evil.example", "https://evil.example", "https:%2F%2Fevil.example", "javascript:alert(1)",
    "/https://evil.example", "..//evil.example", "/./evil.example", "%00//evil.example", "/#/evil.example",
    "/?//evil.example", "",
)


def where_a_browser_goes(base: str, location: str) -> tuple[str, str]:
    """(scheme, host) a browser follows `location` to from `base`: it drops tabs and newlines anywhere and
    reads '\\' as '/' in http(s) URLs (WHATWG URL), then resolves as RFC 3986 does."""
    cleaned = location.replace("\t", "").replace("\r", "").replace("\n", "").replace("\\", "/")
    target = urlsplit(urljoin(base, cleaned))
    return target.scheme, target.netloc


async def rules_applied(cdn: HitCdn) -> None:
    resp = await cdn.control.post("/api/core/rules", headers=ACCOUNT, json={"File": "_redirects", "Content": RULES})
    assert resp.status == 200, await resp.text()

    async def applied() -> bool:
        return len(cdn.node.config.rules.redirects) == 3

    await wait_until(applied, "the rules reaching the edge")


def assert_stays(response: Response, target: str, base: str, host: str) -> None:
    assert response.status < 500, (target, response.status, response.body)
    location = response.header("Location")
    if 300 <= response.status < 400:
        assert location is not None, (target, response.raw_head)
        assert where_a_browser_goes(base, location) in {("http", host), ("https", host)}, (target, location)
    else:
        assert location is None, (target, response.raw_head)
    if response.status == 400:
        assert orjson.loads(response.body)["error"]["code"] in {"InvalidPath", "BadRequest"}, (target, response.body)


async def test_a_splat_never_gives_a_location_off_the_host_nor_a_5xx(make_hit_cdn: HitCdnFactory) -> None:
    cdn = await make_hit_cdn()
    await rules_applied(cdn)
    for port in (cdn.port, cdn.plain_port):
        for form in OPEN_REDIRECT_FORMS:
            for prefix, base, host in (("/go/", f"http://{EDGE_HOST}/go/x", EDGE_HOST),
                                       ("//go/", f"http://{EDGE_HOST}//go/x", EDGE_HOST),
                                       ("/ext/", f"http://{EDGE_HOST}/ext/x", "other.example"),
                                       ("/glued/", f"http://{EDGE_HOST}/glued/x", "other.example")):
                target = prefix + form
                conn = await RawConnection.open(port)
                try:
                    response = await conn.request(target, host=EDGE_HOST)
                finally:
                    conn.close()
                assert_stays(response, target, base, host)


async def test_what_the_issue_reported(make_hit_cdn: HitCdnFactory) -> None:
    """`/go//\\evil.example` was 500; `/go//evil.example` and `/go//%09evil.example` gave `//evil.example` and
    `//%09evil.example`. They are 400 `InvalidPath` in the envelope, as the same paths are without the rule;
    ordinary paths still redirect, and on another host the splat stays in its path."""
    cdn = await make_hit_cdn()
    await rules_applied(cdn)
    for port in (cdn.port, cdn.plain_port):
        conn = await RawConnection.open(port)
        for target in ("/go//\\evil.example", "/go//evil.example", "/go//%09evil.example", "/glued/@evil.example",
                       "/glued/.evil.example%23"):
            response = await conn.request(target, host=EDGE_HOST)
            assert response.status == 400, (target, response.raw_head)
            error = orjson.loads(response.body)["error"]
            assert (error["code"], error["target"]) == ("InvalidPath", "path"), error
        for target, location in (("/go/demo/v1/logos/logo.svg?x=1", "/demo/v1/logos/logo.svg?x=1"),
                                 ("/go/\\evil.example", "/%5Cevil.example"),
                                 ("/ext/@evil.example", "https://other.example/@evil.example"),
                                 ("/ext//evil.example", "https://other.example//evil.example"),
                                 ("/glued/.cdn", "https://other.example.cdn")):
            response = await conn.request(target, host=EDGE_HOST)
            assert (response.status, response.header("Location")) == (302, location), (target, response.raw_head)
        conn.close()


async def test_a_path_its_rule_cannot_map_is_refused_by_the_hit_path_without_an_error_logged(
        make_hit_cdn: HitCdnFactory, caplog: pytest.LogCaptureFixture) -> None:
    """The hit path asked `recv.resolve` about such a path, whose rule raised the 400 there: it was taken for the hit
    path failing, and each request (any client's, as often as it likes) logged an error with its traceback before
    the application answered the same 400."""
    cdn = await make_hit_cdn()
    await rules_applied(cdn)
    caplog.set_level(logging.ERROR, logger="assetcdn.edge.fastpath.hit_server")
    conn = await cdn.connect()
    try:
        for target in ("/go//evil.example", "/go//evil.example?x=1", "/glued/@evil.example"):
            response = await conn.request(target, host=EDGE_HOST)
            assert response.status == 400, (target, response.raw_head)
            assert orjson.loads(response.body)["error"]["code"] == "InvalidPath", response.body
    finally:
        conn.close()
    assert [record.getMessage() for record in caplog.records if record.levelno >= logging.ERROR] == []
