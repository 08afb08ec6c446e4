"""The hit path's HTTP/1.1 over raw sockets against a real edge: the same answers the application gives,
pipelining, heads split across packets, malformed and oversize requests, conditional requests, HEAD,
Range, Connection: close, and hand-over of everything that is not a hit."""

from __future__ import annotations

import asyncio
import logging
import socket
import uuid
from collections.abc import AsyncIterator

import orjson
import pytest
import pytest_asyncio

from assetcdn.edge.fastpath.hit_server import HitServer
from assetcdn.edge.site_config import EdgeConfig
from assetcdn.shared.published_config import PublishedConfig
from tests.support.cdn import ZONE
from tests.support.control import ACCOUNT
from tests.support.h2_memory import H2InProcess
from tests.support.hit_cdn import HitCdn, HitCdnFactory, Response, request_bytes, shared_hit_cdn
from tests.support.images import LOGO_SVG, solid_png
from tests.support.wait import wait_until

SVG = f"{ZONE}/v1/logos/logo.svg"
PNG = f"{ZONE}/v1/banners/photo.png"
PER_REQUEST = {"date", "x-request-id"}


async def warm(cdn: HitCdn) -> HitCdn:
    await cdn.upload(SVG, LOGO_SVG)
    await cdn.upload(PNG, solid_png(32, 16, (200, 10, 10)))
    conn = await cdn.connect()
    for path in (SVG, PNG):
        assert (await conn.request(f"/{path}")).header("X-Cache") == "MISS"
    conn.close()
    return cdn


async def warmed(make_hit_cdn: HitCdnFactory) -> HitCdn:
    return await warm(await make_hit_cdn())


# The tests that only read the two warmed files share one CDN; those that change rules, the edge's
# configuration or what is stored start their own (`warmed`).
SHARED = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def warm_cdn(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[HitCdn]:
    async with shared_hit_cdn(tmp_path_factory.mktemp("hit-protocol")) as cdn:
        yield await warm(cdn)


def comparable(response: Response) -> tuple[int, list[tuple[str, str]], bytes]:
    headers = sorted((k.lower(), v) for k, v in response.headers.items() if k.lower() not in PER_REQUEST)
    return response.status, headers, response.body


@SHARED
async def test_a_hit_is_answered_exactly_as_the_application_answers_it(warm_cdn: HitCdn) -> None:
    cdn = warm_cdn
    hits, plain = await cdn.connect(), await cdn.plain()
    etag = (await hits.request(f"/{SVG}")).header("ETag")
    assert etag
    cases: list[tuple[str, str, dict[str, str]]] = [
        (SVG, "GET", {}), (PNG, "GET", {}), (SVG, "HEAD", {}), (PNG, "HEAD", {}),
        (SVG, "GET", {"If-None-Match": etag}), (SVG, "GET", {"If-None-Match": f'W/{etag}, "other"'}),
        (SVG, "GET", {"If-None-Match": "*"}), (SVG, "GET", {"If-None-Match": '"nope"'}),
        (SVG, "GET", {"Range": "bytes=0-9"}), (SVG, "GET", {"Range": "bytes=-7"}),
        (SVG, "GET", {"Range": "bytes=20-"}), (SVG, "HEAD", {"Range": "bytes=5-6"}),
        (SVG, "GET", {"Range": "bytes=0-1,4-5"}),  # several ranges: the whole body
    ]
    served = cdn.site.hits.served if cdn.site.hits else 0
    for path, method, headers in cases:
        fast = await hits.request(f"/{path}", method, **headers)
        slow = await plain.request(f"/{path}", method, **headers)
        assert comparable(fast) == comparable(slow), (path, method, headers)
        assert fast.header("X-Cache") == "HIT" and fast.header("Server") == "assetcdn"
        assert fast.header("X-Request-ID") and fast.header("Date")
    assert cdn.site.hits is not None and cdn.site.hits.served == served + len(cases)  # all on the hit path
    statuses = [(await hits.request(f"/{SVG}", **h)).status for h in ({"If-None-Match": etag}, {"Range": "bytes=0-0"})]
    assert statuses == [304, 206]


@SHARED
async def test_if_range_is_compared_on_both_paths(warm_cdn: HitCdn) -> None:
    """A Range under an If-Range that names another version (an overwritten file's old ETag, a date, a weak ETag)
    is answered with the whole body (RFC 9110 13.1.5): both paths sent a 206 of the current bytes, which a client
    resuming a download joined to bytes of the old version. Over HTTP/1.1 and HTTP/2 alike."""
    cdn = warm_cdn
    hits, plain = await cdn.connect(), await cdn.plain()
    etag = (await hits.request(f"/{SVG}")).header("ETag")
    assert etag and cdn.site.hits is not None
    secure = HitServer(cdn.app, cdn.site.hits.web_server, secure=True)  # the https site's, beside the plain one
    h2 = H2InProcess(secure)
    whole = len(LOGO_SVG)
    for if_range, status, length in ((etag, 206, 10), ('"an-older-version"', 200, whole), (f"W/{etag}", 200, whole),
                                     ("Mon, 01 Jan 2024 00:00:00 GMT", 200, whole)):
        for method in ("GET", "HEAD"):
            fast = await hits.request(f"/{SVG}", method, Range="bytes=0-9", **{"If-Range": if_range})
            slow = await plain.request(f"/{SVG}", method, Range="bytes=0-9", **{"If-Range": if_range})
            assert comparable(fast) == comparable(slow), (if_range, method)
            assert (fast.status, fast.header("Content-Length")) == (status, str(length)), (if_range, method)
        answer = await h2.get(f"/{SVG}", [("range", "bytes=0-9"), ("if-range", if_range)])
        assert (answer.status, len(answer.body)) == (status, length), if_range
    secure.stop()


@SHARED
async def test_other_methods_on_a_stored_file_are_405_naming_get_and_head_in_allow(warm_cdn: HitCdn) -> None:
    """A stored zone's paths take GET and HEAD only, and RFC 9110 15.5.6 has a 405 name the methods the resource
    supports in Allow. The 405 was rendered in the error envelope without the Allow field aiohttp's exception
    carried, on the hit path's port and the application's alike."""
    cdn = warm_cdn
    for method in ("POST", "PUT", "DELETE", "PATCH"):
        for conn in (await cdn.connect(), await cdn.plain()):
            answer = await conn.request(f"/{SVG}", method, Content_Length="0")
            assert answer.status == 405, (method, answer.body)
            assert orjson.loads(answer.body)["error"]["code"] == "MethodNotAllowed"
            allowed = (answer.header("Allow") or "").replace(" ", "").split(",")
            assert sorted(allowed) == ["GET", "HEAD", "OPTIONS"], (method, answer.headers)  # OPTIONS: a preflight
            conn.close()


@SHARED
async def test_a_page_on_another_origin_reads_a_stored_files_405(warm_cdn: HitCdn) -> None:
    """A page's POST (or PUT, DELETE) to a stored file's path is 405, and the page reads why, as it reads the path's
    other errors: the 405 carried only Allow of the path's fields, without Access-Control-Allow-Origin, so fetch()
    saw a network error. On the hit path's port and the application's alike (the application answers both)."""
    cdn = warm_cdn
    for method in ("POST", "DELETE"):
        for conn in (await cdn.connect(), await cdn.plain()):
            answer = await conn.request(f"/{SVG}", method, Content_Length="0", Origin="https://shop.example")
            assert answer.status == 405, (method, answer.body)
            assert answer.header("Access-Control-Allow-Origin") == "*", (method, answer.headers)
            exposed = (answer.header("Access-Control-Expose-Headers") or "").lower()
            assert "content-range" in exposed and "etag" in exposed, (method, answer.headers)
            conn.close()


@SHARED
async def test_a_page_on_another_origin_can_read_a_stored_file_and_its_errors(warm_cdn: HitCdn) -> None:
    """A stored zone's files are public: a page on another origin that fetch()es one, draws it into a canvas, loads
    it as a web font or plays it with hls.js needs Access-Control-Allow-Origin, which no CDN path sent (a font or a
    fetch() failed, a canvas was tainted), nor its errors, and a preflight (a page sending Range) was 405. Every
    answer of the edge on a stored file's path carries `*` now, on the hit path (in its prepared head: no work per
    request) and the application's alike, over HTTP/1.1 and HTTP/2, and OPTIONS is answered 204."""
    cdn = warm_cdn
    hits, plain = await cdn.connect(), await cdn.plain()
    etag = (await hits.request(f"/{SVG}")).header("ETag")
    assert etag and cdn.site.hits is not None
    served = cdn.site.hits.served
    page = {"Origin": "https://shop.example"}
    for headers, status in (({}, 200), ({"If-None-Match": etag}, 304), ({"Range": "bytes=0-9"}, 206)):
        for conn in (hits, plain):
            answer = await conn.request(f"/{SVG}", **page, **headers)
            assert answer.status == status, (headers, answer.body)
            assert answer.header("Access-Control-Allow-Origin") == "*", (headers, answer.headers)
            # A page reading a file in ranges (a PDF viewer, a video demuxer) reads the size from Content-Range and
            # whether it may ask for ranges from Accept-Ranges: no CORS-safelisted fields, so they are exposed.
            exposed = {name.strip().lower() for name in (answer.header("Access-Control-Expose-Headers") or "").split(",")}
            assert exposed >= {"accept-ranges", "content-range", "etag"}, (headers, answer.headers)
    assert cdn.site.hits.served == served + 3  # on the hit path
    secure = HitServer(cdn.app, cdn.site.hits.web_server, secure=True)
    over_h2 = await H2InProcess(secure).get(f"/{PNG}", [("origin", "https://shop.example")])
    assert (over_h2.status, over_h2.header("access-control-allow-origin")) == (200, "*")
    for path, status in ((f"/{SVG}", 416), (f"/{ZONE}/v1/logos/none.svg", 404),
                         (f"/{ZONE}/v1/logos/..%2flogo.svg", 400)):
        for conn in (hits, plain):
            answer = await conn.request(path, **page, Range="bytes=99999-")
            assert answer.status == status, (path, answer.body)
            assert answer.header("Access-Control-Allow-Origin") == "*", (path, answer.headers)
    for conn in (hits, plain):
        answer = await conn.request(f"/{SVG}", "OPTIONS", **page, **{"Access-Control-Request-Method": "GET",
                                                                     "Access-Control-Request-Headers": "range"})
        assert answer.status == 204, answer.body
        assert answer.header("Access-Control-Allow-Origin") == "*"
        assert {m.strip() for m in (answer.header("Access-Control-Allow-Methods") or "").split(",")} >= {"GET", "HEAD"}
        assert "range" in (answer.header("Access-Control-Allow-Headers") or "").lower()
        conn.close()


@SHARED
async def test_if_match_is_evaluated_on_both_paths(warm_cdn: HitCdn) -> None:
    """The edge is a stored file's origin, so If-Match is its to evaluate (RFC 9110 13.1.1, strong comparison):
    a request naming another version (an overwritten file's old ETag, a weak ETag) gets 412 in the error
    envelope, never the current bytes, before If-None-Match and Range are looked at. The hit path answered such a
    request 200 (or 206: a client resuming a download of version 1 got bytes of version 2). Over HTTP/1.1 and
    HTTP/2 alike. If-Unmodified-Since is ignored: a delivery carries no Last-Modified of its own (13.1.4)."""
    cdn = warm_cdn
    hits, plain = await cdn.connect(), await cdn.plain()
    etag = (await hits.request(f"/{SVG}")).header("ETag")
    assert etag and cdn.site.hits is not None
    secure = HitServer(cdn.app, cdn.site.hits.web_server, secure=True)
    h2 = H2InProcess(secure)
    whole = len(LOGO_SVG)
    cases: list[tuple[dict[str, str], int, int]] = [
        ({"If-Match": etag}, 200, whole), ({"If-Match": "*"}, 200, whole), ({"If-Match": f'"other", {etag}'}, 200, whole),
        ({"If-Match": '"an-older-version"'}, 412, 0), ({"If-Match": f"W/{etag}"}, 412, 0),
        ({"If-Match": etag, "Range": "bytes=0-9"}, 206, 10), ({"If-Match": '"an-older-version"', "Range": "bytes=0-9"}, 412, 0),
        ({"If-Match": '"an-older-version"', "If-None-Match": etag}, 412, 0),
        ({"If-Unmodified-Since": "Mon, 01 Jan 2024 00:00:00 GMT"}, 200, whole),
    ]
    for headers, status, length in cases:
        for method in ("GET", "HEAD"):
            fast = await hits.request(f"/{SVG}", method, **headers)
            slow = await plain.request(f"/{SVG}", method, **headers)
            same = 2 if status == 412 else 3  # a 412's body names its request id
            assert comparable(fast)[:same] == comparable(slow)[:same], (headers, method)
            assert fast.status == status, (headers, method)
            if status == 412:
                assert "no-store" in (fast.header("Cache-Control") or "") and fast.header("ETag") == etag
                if method == "GET":
                    assert orjson.loads(fast.body)["error"]["code"] == "PreconditionFailed"
            elif method == "GET":
                assert len(fast.body) == length, headers
        answer = await h2.get(f"/{SVG}", [(name.lower(), value) for name, value in headers.items()])
        assert answer.status == status, headers
        if status != 412:
            assert len(answer.body) == length, headers
    secure.stop()


async def test_a_416_is_not_stored_by_the_caches_after_the_edge_whatever_the_rules(make_hit_cdn: HitCdnFactory) -> None:
    """A 416 answers one request's Range, not the URL (as a 412 answers its If-Match): it went out with the stored
    file's Cache-Control (a transform's `public, max-age=31536000, immutable`) or a `_headers` rule's, so a shared
    cache after the edge could keep it and answer every later request for the URL with it. It is `no-store` now,
    on a stored file and a transform alike, with or without a rule."""
    cdn = await warmed(make_hit_cdn)
    hits, plain = await cdn.connect(), await cdn.plain()
    transform = f"/api/transform?url=/{PNG}&w=4"
    assert (await plain.request(transform)).status == 200
    targets = (f"/{SVG}", f"/{PNG}", transform)

    async def check(ruled: str | None) -> None:
        for path in targets:
            for conn in (hits, plain):
                answer = await conn.request(path, Range="bytes=999999-")
                assert answer.status == 416, path
                assert answer.header("Cache-Control") == "no-store", (path, answer.headers)
            whole = await plain.request(path)
            assert whole.status == 200 and whole.header("Cache-Control") != "no-store", path
            if ruled and path != transform:
                assert whole.header("Cache-Control") == ruled, path

    await check(None)
    rule = "public, max-age=31536000"
    resp = await cdn.control.post("/api/core/rules", headers=ACCOUNT, json={
        "File": "_headers", "Content": f"/*\n  Cache-Control: {rule}\n  X-Rule: applied\n"})
    assert resp.status == 200, await resp.text()

    async def applied() -> bool:
        return (await plain.request(f"/{SVG}")).header("X-Rule") == "applied"

    await wait_until(applied, "rules reaching the edge")
    await check(rule)


@SHARED
async def test_if_match_on_several_lines_is_one_list(warm_cdn: HitCdn) -> None:
    """If-Match sent as several field lines is the list they make together (RFC 9110 5.3): one naming the current
    ETag on its second line holds, 200, not 412 for the first line's old version; none naming it is 412. Over
    HTTP/1.1 (the hit port hands such a request over) and HTTP/2 alike."""
    cdn = warm_cdn
    hits, plain = await cdn.connect(), await cdn.plain()
    etag = (await hits.request(f"/{SVG}")).header("ETag")
    assert etag
    for conn in (hits, plain):
        for lines, status in ((('"an-older-version"', etag), 200), (('"an-older-version"', "*"), 200),
                              (('"an-older-version"', '"another"'), 412)):
            fields = "".join(f"If-Match: {line}\r\n" for line in lines)
            await conn.send(f"GET /{SVG} HTTP/1.1\r\nHost: edge.test\r\n{fields}\r\n".encode())
            answer = await conn.response()
            assert answer.status == status, lines
            if status == 200:
                assert answer.body == LOGO_SVG
    assert cdn.site.hits is not None
    secure = HitServer(cdn.app, cdn.site.hits.web_server, secure=True)
    over_h2 = await H2InProcess(secure).get(f"/{SVG}", [("if-match", '"an-older-version"'), ("if-match", etag)])
    assert (over_h2.status, over_h2.body) == (200, LOGO_SVG)
    secure.stop()


@SHARED
async def test_if_none_match_on_several_lines_is_one_list(warm_cdn: HitCdn) -> None:
    """If-None-Match sent as several field lines is one list too: the current ETag on the second line is a 304,
    as on one line, not the whole body again. Over HTTP/1.1 (the hit port hands a repeated field over) and HTTP/2."""
    cdn = warm_cdn
    hits, plain = await cdn.connect(), await cdn.plain()
    etag = (await hits.request(f"/{SVG}")).header("ETag")
    assert etag
    for conn in (hits, plain):
        for lines, status in ((('"an-older-version"', etag), 304), (('"an-older-version"', '"another"'), 200)):
            fields = "".join(f"If-None-Match: {line}\r\n" for line in lines)
            await conn.send(f"GET /{SVG} HTTP/1.1\r\nHost: edge.test\r\n{fields}\r\n".encode())
            assert (await conn.response()).status == status, lines
    assert cdn.site.hits is not None
    secure = HitServer(cdn.app, cdn.site.hits.web_server, secure=True)
    over_h2 = await H2InProcess(secure).get(f"/{SVG}", [("if-none-match", '"an-older-version"'),
                                                        ("if-none-match", etag)])
    assert over_h2.status == 304
    secure.stop()


@SHARED
async def test_a_range_or_an_if_range_on_several_lines_is_not_one_to_honour(warm_cdn: HitCdn) -> None:
    """Range and If-Range are no lists (RFC 9110 5.3): two lines of one are the invalid value they make together,
    so the range is ignored and the If-Range does not hold, as a pull zone's copy reads them. A stored file answered
    a 206 of the first line's range, whatever the second said (the hit port hands a repeated field over, so both
    ports did). Over HTTP/1.1 and HTTP/2."""
    cdn = warm_cdn
    hits, plain = await cdn.connect(), await cdn.plain()
    etag = (await hits.request(f"/{SVG}")).header("ETag")
    assert etag and cdn.site.hits is not None
    cases: list[list[tuple[str, str]]] = [
        [("Range", "bytes=0-9"), ("Range", "bytes=20-29")],
        [("Range", "bytes=0-9"), ("If-Range", etag), ("If-Range", etag)],
    ]
    secure = HitServer(cdn.app, cdn.site.hits.web_server, secure=True)
    h2 = H2InProcess(secure)
    for fields in cases:
        for method in ("GET", "HEAD"):
            lines = "".join(f"{name}: {value}\r\n" for name, value in fields)
            answers = []
            for conn in (hits, plain):
                await conn.send(f"{method} /{SVG} HTTP/1.1\r\nHost: edge.test\r\n{lines}\r\n".encode())
                answers.append(await conn.response())
            fast, slow = answers
            assert (slow.status, slow.header("Content-Length")) == (200, str(len(LOGO_SVG))), (fields, method)
            assert comparable(fast) == comparable(slow), (fields, method)
            over_h2 = await h2.get(f"/{SVG}", [(name.lower(), value) for name, value in fields], method)
            assert (over_h2.status, over_h2.header("content-length")) == (200, str(len(LOGO_SVG))), (fields, method)
    secure.stop()


@SHARED
async def test_pipelined_requests_come_back_in_order_across_hand_overs(warm_cdn: HitCdn) -> None:
    cdn = warm_cdn
    conn = await cdn.connect()
    missing = f"/{ZONE}/v1/logos/missing.svg"
    await conn.send(b"".join([
        request_bytes(f"/{SVG}"), request_bytes(missing), request_bytes(f"/{PNG}", "HEAD"),
        request_bytes("/api/health"), request_bytes(f"/{SVG}", If_None_Match="*"),
        request_bytes(f"/{PNG}"), request_bytes(f"/{SVG}?v=2", X_Request_ID="0b7f5f9e-8a59-4c9c-9d43-3f1f8a1b2c3d"),
    ]))
    answers = [await conn.response() for _ in range(7)]
    assert [a.status for a in answers] == [200, 404, 200, 200, 304, 200, 200]
    assert answers[0].body == LOGO_SVG and answers[6].body == LOGO_SVG
    assert answers[1].header("Content-Type") == "application/json"
    assert answers[2].body == b"" and int(answers[2].header("Content-Length") or 0) == len(answers[5].body)
    assert answers[6].header("X-Request-ID") == "0b7f5f9e-8a59-4c9c-9d43-3f1f8a1b2c3d"
    assert len({a.header("X-Request-ID") for a in answers}) == 7
    assert (await conn.request(f"/{SVG}")).body == LOGO_SVG  # the connection is still good


@SHARED
async def test_a_head_split_across_packets_is_reassembled(warm_cdn: HitCdn) -> None:
    cdn = warm_cdn
    conn = await cdn.connect()
    data = request_bytes(f"/{SVG}") + request_bytes(f"/{PNG}", "HEAD") + request_bytes(f"/{SVG}")
    for cut in range(0, len(data), 7):
        await conn.send(data[cut:cut + 7])
        await asyncio.sleep(0.002)
    answers = [await conn.response() for _ in range(3)]
    assert [(a.status, a.body == LOGO_SVG) for a in answers] == [(200, True), (200, False), (200, True)]
    # A second request's first bytes arriving with the end of the first.
    first, second = request_bytes(f"/{SVG}"), request_bytes(f"/{PNG}")
    await conn.send(first[:-3])
    await asyncio.sleep(0.01)
    await conn.send(first[-3:] + second[:5])
    await asyncio.sleep(0.01)
    await conn.send(second[5:])
    assert [(await conn.response()).status for _ in range(2)] == [200, 200]


@SHARED
async def test_malformed_requests_get_400_and_the_server_carries_on(warm_cdn: HitCdn) -> None:
    cdn = warm_cdn
    for garbage in (b"GET /\x00 HTTP/1.1\r\nHost: x\r\n\r\n", b"GET / HTTP/9.9\r\nHost: x\r\n\r\n",
                    b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", b"GET /x HTTP/1.1\r\nBad Header\r\n\r\n"):
        conn = await cdn.connect()
        await conn.send(garbage)
        answer = await conn.response()
        assert answer.status == 400, garbage
        assert answer.header("Server") == "assetcdn"
        conn.close()
    conn = await cdn.connect()
    await conn.send(request_bytes(f"/{SVG}") + b"GET /\x00 HTTP/1.1\r\nHost: x\r\n\r\n")  # a hit, then garbage
    assert (await conn.response()).body == LOGO_SVG
    assert (await conn.response()).status == 400
    assert await conn.closed_by_server()
    assert (await (await cdn.connect()).request(f"/{SVG}")).status == 200


@SHARED
async def test_no_error_answer_quotes_markup_or_can_be_taken_for_a_page(warm_cdn: HitCdn) -> None:
    """aiohttp's own answers to unreadable requests (its default is text or HTML quoting the request) and
    the application's errors on a delivery path that names markup: JSON, nosniff, no '<' in the body."""
    cdn = warm_cdn
    markup = b"<img src=x onerror=alert(1)>"
    for garbage in (markup + b" / HTTP/1.1\r\nHost: x\r\nAccept: text/html\r\n\r\n",
                    b"GET / HTTP/1.1\r\n" + markup + b"\r\nAccept: text/html\r\n\r\n",
                    b"GET /" + markup + b" HTTP/1.1\r\nHost: x\r\nAccept: text/html\r\n\r\n",
                    b"GET /x HTTP/1.1\r\nHost: x\r\nAccept: text/html\r\nContent-Length: " + markup + b"\r\n\r\n"):
        conn = await cdn.connect()
        await conn.send(garbage)
        answer = await conn.response()
        assert answer.status == 400, garbage
        assert (answer.header("Content-Type") or "").startswith("application/json"), garbage
        assert answer.header("X-Content-Type-Options") == "nosniff", garbage
        assert b"<" not in answer.body and answer.body.startswith(b"{"), answer.body
        conn.close()
    conn = await cdn.connect()
    for path in ("/akande/v1/logos/%3Cimg%20src=x%20onerror=alert(1)%3E.png",
                 "/akande/v1/logos/%3Cimg%20src=x%20onerror=alert(1)%3E/%2e%2e/%00.png",
                 "/api/transform?url=%3Cimg%20src=x%3E&w=abc", "/%3Cscript%3E"):
        answer = await conn.request(path, Accept="text/html")
        assert answer.status >= 400, path
        assert (answer.header("Content-Type") or "").startswith("application/json"), path
        assert answer.header("X-Content-Type-Options") == "nosniff", path
        assert b"<" not in answer.body, answer.body


# Request heads past the server's limits (a request line, a field's value, a field's name), with the status and
# code each is refused with.
OVER_LONG = ((f"GET /{SVG}?{'q' * 9000} HTTP/1.1\r\nHost: x\r\n\r\n", 414, "URITooLong"),
             (f"GET /{SVG} HTTP/1.1\r\nHost: x\r\nX-Big: {'a' * 9000}\r\n\r\n", 431, "RequestHeaderFieldsTooLarge"),
             (f"GET /{SVG} HTTP/1.1\r\nHost: x\r\nX-{'b' * 9000}: 1\r\n\r\n", 431, "RequestHeaderFieldsTooLarge"))


def refused(answer: Response, status: int, code: str) -> None:
    body = orjson.loads(answer.body)
    assert (answer.status, body["HttpCode"], body["error"]["code"]) == (status, status, code), answer.body
    # (the names of an HTTP/2 answer's fields in lower case)
    content_type = next(value for name, value in answer.headers.items() if name.lower() == "content-type")
    assert content_type.startswith("application/json")


@SHARED
async def test_an_over_long_request_line_is_414_and_an_over_long_field_431(warm_cdn: HitCdn) -> None:
    """A request line past the limit is 414 URI Too Long (RFC 9110 15.5.15), a header field past it 431 Request
    Header Fields Too Large (RFC 6585 5), in the envelope: both were 400 BadRequest, which told a client nothing of
    what to shorten. On the hit path's port and aiohttp's own, and over HTTP/2 (a stream's request made an HTTP/1.1
    head, assetcdn/edge/tls/h2.py) alike; over TLS on a real edge in tests/edge/tls/test_https_edge.py."""
    cdn = warm_cdn
    for connect in (cdn.connect, cdn.plain):
        for head, status, code in OVER_LONG:
            conn = await connect()
            await conn.send(head.encode())
            refused(await conn.response(), status, code)
            assert await conn.closed_by_server(), head[:40]
    assert cdn.site.hits is not None
    secure = HitServer(cdn.app, cdn.site.hits.web_server, secure=True)  # the https site's, beside the plain one
    refused(await H2InProcess(secure).get(f"/{SVG}?{'q' * 9000}", []), 414, "URITooLong")
    refused(await H2InProcess(secure).get(f"/{SVG}", [("x-big", "a" * 9000)]), 431, "RequestHeaderFieldsTooLarge")
    secure.stop()
    conn = await cdn.connect()  # a long head within the limits is no refusal
    answer = await conn.request(f"/{SVG}", **{f"X-Part-{i}": "c" * 4000 for i in range(4)})
    assert (answer.status, answer.body) == (200, LOGO_SVG)


@SHARED
async def test_an_over_long_request_line_is_refused_in_the_envelope_of_the_route_asked_for(warm_cdn: HitCdn) -> None:
    """The signed-URL, transform and stream routes answer every error in the legacy envelope (a string
    `error`), including a request line too long to read; other routes in the standard one."""
    cdn = warm_cdn
    for path, legacy in (("/api/signed", True), ("/api/transform", True), ("/api/assets", False), (f"/{SVG}", False)):
        conn = await cdn.connect()
        await conn.send(f"GET {path}?path=x&expires={'9' * 9000} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        answer = await conn.response()
        assert answer.status == 414, path
        error = orjson.loads(answer.body)["error"]
        assert isinstance(error, str) if legacy else error["code"] == "URITooLong", (path, answer.body)


@SHARED
async def test_connection_close_and_http_1_0(warm_cdn: HitCdn) -> None:
    cdn = warm_cdn
    conn = await cdn.connect()
    answer = await conn.request(f"/{SVG}", Connection="close")
    assert (answer.status, answer.body, answer.header("Connection")) == (200, LOGO_SVG, "close")
    assert await conn.closed_by_server()
    conn = await cdn.connect()  # pipelined requests after a `Connection: close` are not answered
    await conn.send(request_bytes(f"/{SVG}", Connection="close") + request_bytes(f"/{PNG}"))
    assert (await conn.response()).status == 200
    assert await conn.closed_by_server()
    conn = await cdn.connect()
    await conn.send(f"GET /{SVG} HTTP/1.0\r\nHost: x\r\n\r\n".encode())
    answer = await conn.response()
    assert (answer.status, answer.body) == (200, LOGO_SVG)
    assert await conn.closed_by_server()


@SHARED
async def test_requests_with_bodies_and_api_calls_go_to_the_application(warm_cdn: HitCdn) -> None:
    cdn = warm_cdn
    conn = await cdn.connect()
    answer = await conn.request(f"/api/transform?url=/{PNG}&w=8&format=png")
    assert answer.status == 200 and answer.header("Content-Type") == "image/png"
    await conn.send(b"POST /api/analytics HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                    b"Content-Length: 2\r\n\r\n{}")
    assert (await conn.response()).status in (200, 202, 400, 401)  # the application decided
    answer = await conn.request(f"/{SVG}")  # the connection now belongs to the application: still served
    assert (answer.status, answer.body) == (200, LOGO_SVG)


@SHARED
async def test_tenant_hosts_serve_only_their_zone_on_the_hit_path(warm_cdn: HitCdn) -> None:
    cdn = warm_cdn
    conn = await cdn.connect()
    tenant = f"{ZONE}.cdn.localhost"
    answer = await conn.request("/v1/logos/logo.svg", host=tenant)
    assert (answer.status, answer.body) == (200, LOGO_SVG)
    answer = await conn.request("/v1/logos/logo.svg", host=f"{tenant}:443")
    assert (answer.status, answer.header("X-Cache")) == (200, "HIT")
    assert (await conn.request(f"/{SVG}", host="other.cdn.localhost")).status == 404
    assert (await conn.request("/v1/logos/logo.svg", host="edge.test")).status == 404


@SHARED
async def test_a_deep_pipeline_behind_a_handed_over_request_is_read_in_bounded_steps(
        warm_cdn: HitCdn) -> None:
    cdn = warm_cdn
    conn = await cdn.connect()
    count = 6000  # about 400 KB of request heads: more than the hit path reads ahead
    # A transform made on this request (a miss): slow enough for the pipeline to pile up behind it.
    data = request_bytes(f"/api/transform?url=/{PNG}&w=9&format=webp") + request_bytes(f"/{SVG}") * count

    async def send() -> None:
        await conn.send(data)

    sending = asyncio.create_task(send())
    first = await conn.response()
    statuses = [(await conn.response()).status for _ in range(count)]
    await sending
    assert first.status == 200 and statuses == [200] * count
    assert (await conn.request(f"/{PNG}")).status == 200


@SHARED
async def test_upgrade_and_connect_requests_are_answered_by_the_application(warm_cdn: HitCdn) -> None:
    """httptools raises HttpParserUpgrade (not an HttpParserError) for `Upgrade`/`CONNECT` heads; that
    used to escape the protocol, so the connection was dropped unanswered with an ERROR traceback
    logged per request (what `curl --http2` sends on plain http, and a cheap log flood)."""
    cdn = warm_cdn
    conn = await cdn.connect()
    answer = await conn.request(f"/{SVG}", Upgrade="h2c", Connection="Upgrade, HTTP2-Settings",
                                HTTP2_Settings="AAMAAABkAARAAAAAAAIAAAAA")
    assert (answer.status, answer.body) == (200, LOGO_SVG)
    for head in (request_bytes("/x", Upgrade="websocket", Connection="Upgrade"),
                 b"CONNECT 127.0.0.1:22 HTTP/1.1\r\nHost: 127.0.0.1:22\r\n\r\n"):
        conn = await cdn.connect()
        await conn.send(head)
        answer = await conn.response()
        assert answer.status in (400, 404, 405), head
        assert (answer.header("Content-Type") or "").startswith("application/json"), head
        conn.close()


FRAMING_RULES = ["Content-Length: 2", "Transfer-Encoding: chunked", "Connection: close", "Keep-Alive: timeout=1",
                 "Upgrade: h2c", "Trailer: X-A", "TE: trailers", "Content-Encoding: gzip", "Content-Range: bytes 0-1/2"]


async def test_a_412_stays_no_store_under_a_cache_control_rule(make_hit_cdn: HitCdnFactory) -> None:
    """A 412 answers the request's If-Match, not the URL: `_headers` rules apply to a delivery's errors too, and a
    rule giving the files a year's `Cache-Control` (`public, max-age=31536000, immutable`, the usual one for
    versioned assets) made the 412 say so, so a shared cache in front could keep it and answer every later request
    for the file with it. Its own headers, the rule's others included (X-Frame-Options), stay as they were."""
    cdn = await warmed(make_hit_cdn)
    resp = await cdn.control.post("/api/core/rules", headers=ACCOUNT, json={
        "File": "_headers", "Content": "/*\n  Cache-Control: public, max-age=31536000, immutable\n  X-Frame-Options: DENY\n"})
    assert resp.status in (200, 201), await resp.text()
    plain = await cdn.plain()

    async def applied() -> bool:
        return "immutable" in ((await plain.request(f"/{SVG}")).header("Cache-Control") or "")

    await wait_until(applied, "the rule at the edge")
    assert cdn.site.hits is not None
    secure = HitServer(cdn.app, cdn.site.hits.web_server, secure=True)
    for conn in (await cdn.connect(), plain):
        for method in ("GET", "HEAD"):
            answer = await conn.request(f"/{SVG}", method, If_Match='"an-older-version"')
            assert answer.status == 412, method
            assert answer.headers.getall("Cache-Control") == ["no-store"], (method, answer.raw_head)
            assert answer.header("X-Frame-Options") == "DENY"
    over_h2 = await H2InProcess(secure).get(f"/{SVG}", [("if-match", '"an-older-version"')])
    assert over_h2.status == 412
    assert over_h2.header("cache-control") == "no-store"
    secure.stop()
    assert "immutable" in ((await plain.request(f"/{SVG}")).header("Cache-Control") or "")  # the file's own


async def test_header_rules_cannot_change_how_a_response_is_framed(make_hit_cdn: HitCdnFactory) -> None:
    """A `_headers` rule naming Content-Length or Transfer-Encoding used to be sent beside the real one:
    on a kept-alive connection the body's bytes past the declared length were read as the next
    response (a stored file could answer the next request with a page of its own, outside the
    sandbox). Control refuses such rules; an edge skips them in a file published before."""
    cdn = await warmed(make_hit_cdn)
    for line in FRAMING_RULES:
        resp = await cdn.control.post("/api/core/rules", headers=ACCOUNT,
                                      json={"File": "_headers", "Content": f"/*\n  X-Frame-Options: DENY\n  {line}\n"})
        assert resp.status == 400, (line, await resp.text())
        assert (await resp.json())["error"]["code"] == "InvalidRules"
    published_before = "/*\n  X-Frame-Options: DENY\n" + "".join(f"  {line}\n" for line in FRAMING_RULES)
    # Control's own version kept, so a heartbeat does not fetch control's (empty) rules over these.
    cdn.node.config = EdgeConfig.from_published(PublishedConfig(cdn.node.config.version or "", headers=published_before))
    for conn in (await cdn.connect(), await cdn.plain()):
        await conn.send(request_bytes(f"/{SVG}") + request_bytes(f"/{SVG}") + request_bytes(f"/{PNG}", "HEAD"))
        answers = [await conn.response() for _ in range(3)]
        assert [a.status for a in answers] == [200, 200, 200]
        for answer in answers[:2]:
            assert answer.body == LOGO_SVG
            assert answer.header("X-Frame-Options") == "DENY"
            assert answer.headers.getall("Content-Length") == [str(len(LOGO_SVG))]
            for line in FRAMING_RULES[1:]:
                name = line.split(":", 1)[0]
                assert name not in answer.headers, (name, answer.raw_head)
        conn.close()


async def test_placeholders_never_put_control_characters_in_a_header(make_hit_cdn: HitCdnFactory) -> None:
    """`:splat` and `:name` of a `_headers` rule take the decoded request path: `%0d%0a` or `%00` in it
    used to reach the header value, which aiohttp refuses to write, so the connection was dropped
    unanswered and an ERROR logged per request. They are percent-encoded. (`_redirects` match the
    encoded path; their Location is held to the same here.)"""
    cdn = await warmed(make_hit_cdn)
    for name, content in (("_headers", f"/{ZONE}/*\n  X-Splat: :splat\n/{ZONE}/v1/:kind/:file\n  X-File: :file\n"),
                          ("_redirects", "/old/* /new/:splat 301\n")):
        resp = await cdn.control.post("/api/core/rules", headers=ACCOUNT, json={"File": name, "Content": content})
        assert resp.status == 200, await resp.text()
    for conn in (await cdn.connect(), await cdn.plain()):
        for target in (f"/{ZONE}/v1/logos/a%0d%0aSet-Cookie:%20cdn_session=x.svg", f"/{ZONE}/v1/logos/a%0a%00%7f.svg",
                       f"/{ZONE}/v1/logos/a%09b.svg"):
            answer = await conn.request(target)
            assert 400 <= answer.status < 500, (target, answer.status)
            assert "Set-Cookie" not in answer.headers
            assert answer.header("X-Splat") is not None and answer.header("X-File") is not None, answer.raw_head
            assert not any(c in value for value in answer.headers.values() for c in "\r\n\x00\x7f"), answer.raw_head
        answer = await conn.request("/old/a%00b%7fc")
        assert (answer.status, answer.header("Location")) == (301, "/new/a%00b%7Fc")
        answer = await conn.request("/old/a%0d%0aSet-Cookie:%20cdn_session=x")  # no route takes a newline
        assert answer.status in (301, 404) and "Set-Cookie" not in answer.headers
        assert "\n" not in (answer.header("Location") or "")
        assert (await conn.request(f"/{SVG}")).header("X-Splat") == "v1/logos/logo.svg"  # ordinary paths as before
        conn.close()


@SHARED
async def test_unreadable_requests_are_not_logged_as_errors(warm_cdn: HitCdn,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    """aiohttp logs each request it cannot read at ERROR with a traceback: any stranger could fill the
    edge's and control's logs (and page whoever watches for errors) with a loop of bad request lines.
    They are the client's fault: logged at DEBUG, and still answered in JSON (400, or 414 and 431 for heads too long)."""
    cdn = warm_cdn
    caplog.set_level(logging.DEBUG, logger="aiohttp")
    for garbage, status in ((b"GET /\x00 HTTP/1.1\r\nHost: x\r\n\r\n", 400), (b"GET /x HTTP/1.1\r\nBad Header\r\n\r\n", 400),
                            *((head.encode(), status) for head, status, _ in OVER_LONG)):
        conn = await cdn.connect()
        await conn.send(garbage)
        assert (await conn.response()).status == status, garbage[:40]
        conn.close()
    errors = [r for r in caplog.records if r.name.startswith("aiohttp") and r.levelno >= logging.WARNING]
    assert not errors, [r.getMessage() for r in errors]
    assert any(r.name.startswith("aiohttp") and r.levelno == logging.DEBUG for r in caplog.records)


TENANT = f"{ZONE}.cdn.localhost"
PRIVATE = f"{ZONE}/v1/private/secret.txt"
SENT_ID = "0F8FAD5B-D9CB-469F-A165-70867728950E"  # a caller's id, not in canonical form
DELIVERY_RULES = (f"/{ZONE}/v1/logos/*\n  X-Frame-Options: DENY\n  ! Cache-Tag\n"
                  "/v1/banners/*\n  X-Banner: :splat\n"
                  "https://:tenant.cdn.localhost/v1/*\n  X-Tenant: :tenant\n  Cache-Control: public, max-age=60\n")
REDIRECT_RULES = (f"/old.svg /{SVG} 301\n/v1/old.png /v1/banners/photo.png 302\n/alias.svg /{SVG} 200\n"
                  "/v1/alias.png /v1/banners/photo.png?x=1 200\n")
# Rules on each header a delivery writes that a rule may touch: set (an ETag of the rule's own among them),
# detached, and the ones written per request (which the hit path leaves to the application).
RULED_SET, RULED_DETACHED = f"{ZONE}/v1/icons/set.txt", f"{ZONE}/v1/icons/detached.txt"
PER_REQUEST_SET, PER_REQUEST_DETACHED = f"{ZONE}/v1/icons/dated.txt", f"{ZONE}/v1/icons/undated.txt"
RULED_ETAG = '"ruled"'
ADJACENT_RULES = (f"/{RULED_SET}\n  ETag: {RULED_ETAG}\n  Cache-Control: no-cache\n  X-Cache: ruled\n"
                  "  Accept-Ranges: none\n  X-API-Version: 0\n  Cache-Tag: ruled\n  Warning: 199 - ruled\n"
                  "  Vary: Accept\n"
                  f"/{RULED_DETACHED}\n  ! ETag\n  ! Cache-Control\n  ! X-Cache\n  ! Accept-Ranges\n"
                  "  ! X-API-Version\n  ! Cache-Tag\n"
                  f"/{PER_REQUEST_SET}\n  Date: Thu, 01 Jan 1970 00:00:00 GMT\n  Server: ruled\n  X-Request-ID: ruled\n"
                  "  Strict-Transport-Security: max-age=1\n"
                  f"/{PER_REQUEST_DETACHED}\n  ! Date\n  ! Server\n  ! X-Request-ID\n  ! Strict-Transport-Security\n")


def as_the_client_sees_it(response: Response) -> tuple[int, list[tuple[str, str]], bytes]:
    """Every header but Date (the request id too: both ports are sent the same one), and the body, but
    the time an error envelope gives."""
    headers = sorted((k.lower(), v) for k, v in response.headers.items() if k.lower() != "date")
    body = response.body
    if body and response.header("Content-Type") == "application/json":
        envelope = orjson.loads(body)
        envelope.pop("timestamp")
        body = orjson.dumps(envelope)
    return response.status, headers, body


async def test_every_kind_of_delivery_is_answered_as_the_application_answers_it(make_hit_cdn: HitCdnFactory) -> None:
    """Tenant hosts (as sent, with a port, in capitals with a trailing dot) under `_headers` rules with host
    patterns, GET, HEAD, 304 and ranges of each; rewrites; rules setting or detaching each header a delivery
    writes (a rule's ETag used to be the one the hit path revalidated against, the stored one the
    application's); redirects, a private path, another zone's path; then all of it again while control is
    unreachable (STALE). The hit port answers each exactly as the
    application's own port does, request id included; what is a hit is answered on the hit path."""
    cdn = await warmed(make_hit_cdn)
    await cdn.upload(PRIVATE, b"not on its public path")
    for path in (RULED_SET, RULED_DETACHED, PER_REQUEST_SET, PER_REQUEST_DETACHED):
        await cdn.upload(path, f"the file at {path}".encode())
        assert (await (await cdn.connect()).request(f"/{path}")).header("X-Cache") == "MISS"
    for name, content in (("_headers", DELIVERY_RULES + ADJACENT_RULES), ("_redirects", REDIRECT_RULES)):
        resp = await cdn.control.post("/api/core/rules", headers=ACCOUNT, json={"File": name, "Content": content})
        assert resp.status == 200, await resp.text()

    async def applied() -> bool:
        return bool(cdn.node.config.rules.headers) and bool(cdn.node.config.rules.redirects)

    await wait_until(applied, "rules reaching the edge")
    hits, plain = await cdn.connect(), await cdn.plain()
    etags = {path: (await hits.request(f"/{path}")).header("ETag") for path in (SVG, PNG)}
    hit_cases: list[tuple[str, str, str, dict[str, str]]] = []
    for host, svg, png in ((
            "edge.test", f"/{SVG}", f"/{PNG}"), (TENANT, "/v1/logos/logo.svg", "/v1/banners/photo.png"),
            (f"{TENANT}:8443", "/v1/logos/logo.svg", "/v1/banners/photo.png"),
            (f"{TENANT.upper()}.", "/v1/logos/logo.svg", "/v1/banners/photo.png")):
        for path, etag in ((svg, etags[SVG]), (png, etags[PNG])):
            hit_cases += [(host, path, "GET", {}), (host, path, "HEAD", {}),
                          (host, path, "GET", {"If-None-Match": etag or ""}),
                          (host, path, "HEAD", {"If-None-Match": etag or ""}),
                          (host, path, "GET", {"Range": "bytes=2-5"}),
                          (host, path, "HEAD", {"Range": "bytes=-3"})]
    hit_cases.append((TENANT, f"/{SVG}", "GET", {}))  # the zone's full path is its own on its host too
    # A rewrite (a 200 rule) is served as the path it names, on the hit path too.
    hit_cases += [("edge.test", "/alias.svg", "GET", {}), ("edge.test", "/alias.svg?y=2", "HEAD", {}),
                  (TENANT, "/v1/alias.png", "GET", {"If-None-Match": etags[PNG] or ""}),
                  (TENANT, "/v1/alias.png", "GET", {"Range": "bytes=0-0"})]
    unruled = len(hit_cases)
    # A rule's ETag is the one If-None-Match is compared with, on both paths; a detached one matches only `*`.
    for path in (RULED_SET, RULED_DETACHED):
        stored = cdn.node.replica.head(cdn.node.replica.get(path)).etag  # type: ignore[arg-type]
        for method in ("GET", "HEAD"):
            hit_cases += [("edge.test", f"/{path}", method, {}),
                          ("edge.test", f"/{path}", method, {"If-None-Match": RULED_ETAG}),
                          ("edge.test", f"/{path}", method, {"If-None-Match": stored}),
                          ("edge.test", f"/{path}", method, {"If-None-Match": "*"}),
                          ("edge.test", f"/{path}", method, {"Range": "bytes=1-3"})]
    per_request_cases = [("edge.test", f"/{path}", method, headers) for path in (PER_REQUEST_SET, PER_REQUEST_DETACHED)
                         for method in ("GET", "HEAD") for headers in ({}, {"If-None-Match": "*"})]
    other_cases: list[tuple[str, str, str, dict[str, str]]] = [
        ("edge.test", "/old.svg", "GET", {}), (TENANT, "/v1/old.png?x=1", "GET", {}),
        ("edge.test", f"/{PRIVATE}", "GET", {}), (TENANT, "/v1/private/secret.txt", "HEAD", {}),
        ("other.cdn.localhost", f"/{SVG}", "GET", {}),
        ("edge.test", f"/{ZONE}/v1/logos/none.svg", "GET", {}),
        ("edge.test", f"/{PNG}", "GET", {"Range": "bytes=999999-"}),   # 416: the application's to answer
        (TENANT, "/v1/banners/photo.png", "HEAD", {"Range": "bytes=999999-"}),
    ]
    assert cdn.site.hits is not None

    async def compare(cases: list[tuple[str, str, str, dict[str, str]]]) -> list[Response]:
        answers = []
        for host, path, method, headers in cases:
            fast = await hits.request(path, method, host, X_Request_ID=SENT_ID, **headers)
            slow = await plain.request(path, method, host, X_Request_ID=SENT_ID, **headers)
            assert as_the_client_sees_it(fast) == as_the_client_sees_it(slow), (host, path, method, headers)
            if path[1:] not in (PER_REQUEST_SET, PER_REQUEST_DETACHED):
                assert fast.header("X-Request-ID") == SENT_ID.lower()
            answers.append(fast)
        return answers

    served = cdn.site.hits.served
    answers = await compare(hit_cases)
    assert cdn.site.hits.served == served + len(hit_cases)  # every one on the hit path
    assert {a.header("X-Cache") for a in answers[:unruled]} == {"HIT"} and {a.status for a in answers} == {200, 206, 304}
    # Rules match the path as requested: the zone's path on the default host, `/v1/...` on its own.
    default, tenant = answers[0], answers[6 * 2]  # the GETs of the logo on each
    assert (default.header("X-Frame-Options"), default.header("X-Tenant")) == ("DENY", None)
    assert "Cache-Tag" not in default.headers and tenant.header("Cache-Tag")
    assert (tenant.header("X-Tenant"), tenant.header("Cache-Control")) == (ZONE, "public, max-age=60")
    assert answers[6 * 3].header("X-Banner") == "photo.png"  # the tenant-host GET of the banner
    ruled = answers[unruled:]  # the set rules' GET and HEAD, then the detached rules'
    assert [a.status for a in ruled] == [200, 304, 200, 304, 206] * 2 + [200, 200, 200, 304, 206] * 2
    assert (ruled[1].header("ETag"), ruled[1].header("X-Cache")) == (RULED_ETAG, "ruled")
    assert "ETag" not in ruled[10].headers and "X-API-Version" not in ruled[10].headers
    served = cdn.site.hits.served
    answers = await compare(other_cases)
    assert cdn.site.hits.served == served  # none of these is a hit
    assert [a.status for a in answers] == [301, 302, 403, 403, 404, 404, 416, 416]
    assert answers[-2].header("Content-Range") == f"bytes */{len(solid_png(32, 16, (200, 10, 10)))}"
    assert answers[1].header("Location") == "/v1/banners/photo.png?x=1"
    answers = await compare(per_request_cases)
    assert cdn.site.hits.served == served  # rules on what the hit path writes per request: the application's
    assert [(a.header("Server"), a.header("X-Request-ID")) for a in answers] == [("ruled", "ruled")] * 4 + [
        (None, None)] * 4

    await cdn.control.close()

    async def unreachable() -> bool:
        return cdn.node.hit_status() == "STALE"

    await wait_until(unreachable, "the edge noticing control is gone")
    served = cdn.site.hits.served
    answers = await compare(hit_cases + other_cases + per_request_cases)
    assert cdn.site.hits.served == served  # STALE is the application's to answer
    assert {a.header("X-Cache") for a in answers[:unruled]} == {"STALE"}
    assert all(a.header("Warning") for a in answers[:len(hit_cases)])


async def test_request_ids_are_made_and_kept_alike_on_both_paths(make_hit_cdn: HitCdnFactory) -> None:
    cdn = await warmed(make_hit_cdn)
    hits, plain = await cdn.connect(), await cdn.plain()
    for sent in ({}, {"X_Request_ID": "not-a-uuid"}, {"X_Request_ID": ""},
                 {"X_Request_ID": "{0f8fad5b-d9cb-469f-a165-70867728950e}"}):
        ids = [(await conn.request(f"/{SVG}", **sent)).header("X-Request-ID") for conn in (hits, plain)]
        for made in ids:
            assert made is not None and str(uuid.UUID(made)) == made and uuid.UUID(made).version == 4, (sent, ids)
        if sent.get("X_Request_ID", "").startswith("{"):
            assert ids == ["0f8fad5b-d9cb-469f-a165-70867728950e"] * 2
        else:
            assert ids[0] != ids[1]


@SHARED
async def test_every_connection_the_hit_port_accepts_sends_keep_alive_probes(warm_cdn: HitCdn) -> None:
    # Set once on the listening socket, which each accepted connection inherits (no call per connection).
    conn = await warm_cdn.connect()
    try:
        assert (await conn.request(f"/{SVG}")).status == 200
        hits = warm_cdn.site.hits
        assert hits is not None and hits.connections
        for accepted in hits.connections:
            assert accepted.transport is not None
            sock = accepted.transport.get_extra_info("socket")
            assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
    finally:
        conn.close()


async def test_a_weak_etag_a_rule_sets_is_matched_weakly_in_if_none_match_on_both_paths(
        make_hit_cdn: HitCdnFactory) -> None:
    """If-None-Match compares weakly (RFC 9110 13.1.2): a `_headers` rule's `ETag: W/"v5"` is matched by `"v5"` and by
    a list naming `W/"v5"` (a cache holding two versions sends both). Only the very value sent back was: the weak
    ETag's `W/` was left on it when its quotes were taken off, so the list and the strong form were answered 200
    with the whole body, on both ports."""
    cdn = await warmed(make_hit_cdn)
    resp = await cdn.control.post("/api/core/rules", headers=ACCOUNT,
                                  json={"File": "_headers", "Content": f'/{SVG}\n  ETag: W/"v5"\n'})
    assert resp.status == 200, await resp.text()

    async def applied() -> bool:
        return bool(cdn.node.config.rules.headers)

    await wait_until(applied, "rules reaching the edge")
    hits, plain = await cdn.connect(), await cdn.plain()
    for conn in (hits, plain):
        assert (await conn.request(f"/{SVG}")).header("ETag") == 'W/"v5"'
        for sent, status in (('W/"v5"', 304), ('"v5"', 304), ('W/"v4", W/"v5"', 304), ('"v4", "v5"', 304),
                             ('W/"v4", "v6"', 200), ('"v4"', 200)):
            answer = await conn.request(f"/{SVG}", If_None_Match=sent)
            assert answer.status == status, (conn is hits, sent)


async def test_rules_decide_which_origins_read_a_stored_file_and_redirects_are_readable(
        make_hit_cdn: HitCdnFactory) -> None:
    """A stored file's `*` is the default: a `_headers` rule removes it, or names the one origin that may read the
    files, on the hit path and the application's alike. A `_redirects` redirect carries `*` too: a page's fetch()
    follows a redirect only when the redirect itself may be read."""
    cdn = await warmed(make_hit_cdn)
    for name, content in (("_headers", f"/{ZONE}/v1/logos/*\n  ! Access-Control-Allow-Origin\n"
                                        f"/{ZONE}/v1/banners/*\n  Access-Control-Allow-Origin: https://shop.example\n"
                                        "  Vary: Origin\n"),
                          ("_redirects", f"/old-logo.svg /{SVG} 301\n")):
        resp = await cdn.control.post("/api/core/rules", headers=ACCOUNT, json={"File": name, "Content": content})
        assert resp.status == 200, await resp.text()
    plain = await cdn.plain()

    async def applied() -> bool:
        return (await plain.request("/old-logo.svg")).status == 301 and \
            (await plain.request(f"/{PNG}")).header("Access-Control-Allow-Origin") == "https://shop.example"

    await wait_until(applied, "the rules at the edge")
    page = {"Origin": "https://shop.example"}
    for conn in (await cdn.connect(), plain):
        logo, photo = await conn.request(f"/{SVG}", **page), await conn.request(f"/{PNG}", **page)
        assert (logo.status, logo.header("Access-Control-Allow-Origin")) == (200, None)
        assert (photo.status, photo.header("Access-Control-Allow-Origin")) == (200, "https://shop.example")
        moved = await conn.request("/old-logo.svg", **page)
        assert (moved.status, moved.header("Location")) == (301, f"/{SVG}")
        assert moved.header("Access-Control-Allow-Origin") == "*"
        conn.close()
