"""HEAD on the API's GET routes (RFC 9110 9.3.2), on control and on the edge: the GET's status and headers, and no
body, also where the GET streams its answer (the asset list, the log stream), so that the next request on the
connection is read as a request. tests/test_openapi_routes.py holds every GET route to having its HEAD."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp.test_utils import TestClient

from tests.support.cdn import ZONE, CdnFactory
from tests.support.control import ACCESS, ACCOUNT
from tests.support.images import photo_jpeg
from tests.support.wait import WAIT_S

COMPARED = ("Content-Type", "Content-Length", "Cache-Control")


async def head_then_health(client: TestClient, target: str, headers: dict[str, str]) -> tuple[int, dict[str, str],
                                                                                               bytes]:
    """`HEAD target`, then `GET /api/health` on the same connection: the HEAD's status, its headers, and what came
    after the HEAD's head (the health answer, if the HEAD sent no body)."""
    assert client.server.port is not None
    reader, writer = await asyncio.open_connection("127.0.0.1", client.server.port)
    fields = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
    writer.write(f"HEAD {target} HTTP/1.1\r\nHost: 127.0.0.1\r\n{fields}\r\n"
                 "GET /api/health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode())
    try:
        data = await asyncio.wait_for(reader.read(-1), WAIT_S)
    finally:
        writer.close()
    head, _, rest = data.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    found = {}
    for line in lines:
        name, _, value = line.partition(":")
        found[name.strip().title()] = value.strip()
    return int(status_line.split(" ")[1]), found, rest


@pytest.mark.parametrize(("process", "target", "headers"), [
    ("control", "/api/health", {}),
    ("control", "/api/openapi.json", {}),
    ("control", "/api/assets", ACCESS),                 # a streamed answer
    ("control", "/api/core/zones", ACCOUNT),
    ("control", "/api/core/zones", {}),                 # a credential is still asked for: 401
    ("control", "/api/logs?stream=1", ACCOUNT),         # a streamed answer that lasts while the client listens
    ("edge", "/api/health", {}),
    ("edge", "/api/openapi.json", {}),
    ("edge", "/api/docs", {}),
    ("edge", "/api/core/zones", ACCOUNT),               # forwarded to control
])
async def test_head_answers_as_get_without_a_body(make_cdn: CdnFactory, process: str, target: str,
                                                  headers: dict[str, str]) -> None:
    cdn = await make_cdn()
    client = cdn.control if process == "control" else cdn.edge
    status, fields, rest = await head_then_health(client, target, headers)
    assert rest.startswith(b"HTTP/1.1 200 "), (status, rest[:200])  # no body before the next answer
    if "stream=1" in target:
        assert status == 200 and fields["Content-Type"] == "text/event-stream"
        return
    get = await client.get(target, headers=headers)
    await get.read()
    assert status == get.status
    for name in COMPARED:
        # A streamed GET is chunked (its HEAD need not say a length); an error's message names the method.
        if name != "Content-Length" or (name in fields and status < 400):
            assert fields.get(name) == get.headers.get(name), (name, fields, dict(get.headers))


async def test_head_of_a_placeholder_answers_as_its_get_made_or_cached(make_cdn: CdnFactory) -> None:
    """/api/lqip and /api/blurhash answered HEAD with 404 (the edge listed HEAD for transforms alone): a HEAD
    that makes the placeholder and one that finds it made both answer as the GET, without a body."""
    cdn = await make_cdn()
    photo = f"{ZONE}/v1/banners/head.jpg"
    await cdn.upload(photo, photo_jpeg(320, 200))
    for target in (f"/api/lqip?url=/{photo}&size=16", f"/api/blurhash?url=/{photo}&size=24"):
        made = await head_then_health(cdn.edge, target, {})
        cached = await head_then_health(cdn.edge, target, {})
        get = await cdn.edge.get(target)
        await get.read()
        for status, fields, rest in (made, cached):
            assert rest.startswith(b"HTTP/1.1 200 "), (target, status, rest[:200])
            assert status == get.status == 200
            # The GET's length is a cached answer's (a blurhash says `"source": "cached"` where it was made).
            for name in COMPARED if fields is cached[1] else ("Content-Type", "Cache-Control"):
                assert fields.get(name) == get.headers.get(name), (target, name, fields, dict(get.headers))
        assert cached[1]["X-Cache"] == "HIT"
