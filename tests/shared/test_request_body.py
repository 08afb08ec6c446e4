"""The shared body reader (assetcdn/shared/request_body.py) as both servers run it, aiohttp's own decoding
off: gzip (one member or several) and deflate (zlib-wrapped or raw) are decoded, a stream that does not
decode or ends early is 400, a bomb is 413 at the limit without being inflated past it, and every
route's limit comes from the one table the edge forwards by."""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Callable

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from assetcdn.control.app import ROUTES
from assetcdn.shared.middleware import install_envelopes
from assetcdn.shared.request_body import (
    DEFAULT_BODY,
    INFLATE_STEP,
    RouteBody,
    batch_body_limit,
    body_chunks,
    route_body,
    too_large,
)

LIMIT = 256 * 1024
UPLOAD = 25 * 1024 * 1024


def raw_deflate(data: bytes) -> bytes:
    compressor = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    return compressor.compress(data) + compressor.flush()


@pytest.fixture
async def reader(aiohttp_server, aiohttp_client) -> TestClient:  # type: ignore[no-untyped-def]
    """An app whose one route reads its body with the shared reader; it reports what it decoded."""
    steps: list[int] = []

    async def read(request: web.Request) -> web.Response:
        data = b""
        async for chunk in body_chunks(request, LIMIT):
            steps.append(len(chunk))
            data += chunk
        return web.Response(body=data, headers={"X-Largest-Step": str(max(steps, default=0))})

    app = web.Application()
    install_envelopes(app)
    app.router.add_post("/read", read)
    # As assetcdn/shared/process.py runs both servers.
    client: TestClient = await aiohttp_client(await aiohttp_server(app, auto_decompress=False))
    return client


Encode = Callable[[bytes], bytes]
CODINGS: list[tuple[str, Encode]] = [
    ("gzip", gzip.compress),
    ("gzip", lambda data: gzip.compress(data[:100]) + gzip.compress(data[100:])),  # two members
    ("deflate", zlib.compress),
    ("deflate", raw_deflate),
]


@pytest.mark.parametrize(("coding", "encode"), CODINGS)
async def test_coded_bodies_are_decoded_in_bounded_steps(reader: TestClient, coding: str, encode: Encode) -> None:
    original = bytes(range(256)) * 800  # 200 KB
    resp = await reader.post("/read", data=encode(original), headers={"Content-Encoding": coding})
    assert resp.status == 200, await resp.text()
    assert await resp.read() == original
    assert int(resp.headers["X-Largest-Step"]) <= INFLATE_STEP


@pytest.mark.parametrize("broken", [gzip.compress(b"x" * 1000, mtime=0)[:-5],
                                    gzip.compress(b"x", mtime=0) + b"trailing junk", b"not compressed at all"],
                         ids=["truncated", "trailing junk", "not compressed"])
async def test_a_stream_that_does_not_decode_or_ends_early_is_400(reader: TestClient, broken: bytes) -> None:
    resp = await reader.post("/read", data=broken, headers={"Content-Encoding": "gzip"})
    body = await resp.json()
    assert resp.status == 400 and body["error"]["code"] == "InvalidBody", body


async def test_a_bomb_is_413_at_the_limit(reader: TestClient) -> None:
    resp = await reader.post("/read", data=gzip.compress(b"\0" * (64 * 1024 * 1024)),
                             headers={"Content-Encoding": "gzip"})
    body = await resp.json()
    assert resp.status == 413 and body["error"]["code"] == "PayloadTooLarge" and body["MaxSize"] == LIMIT


def test_every_route_that_takes_a_body_has_its_limit_in_the_one_table() -> None:
    limits = {(r.method, r.path): route_body(r.method, r.path.replace("{path:[\\s\\S]*}", "z/v1/a/b.png"), UPLOAD)
              for r in ROUTES if r.method in ("POST", "PUT", "PATCH") and not r.path.startswith("/_cluster")}
    assert limits[("POST", "/api/chat")] == RouteBody(64 * 1024, legacy=True)
    assert limits[("POST", "/api/analytics")] == RouteBody(64 * 1024, legacy=True)
    assert limits[("POST", "/api/purge")] == RouteBody(64 * 1024, legacy=True)
    assert limits[("POST", "/api/ai/alt-text")] == RouteBody(16 * 1024)
    assert limits[("PUT", r"/api/storage/{path:[\s\S]*}")] == RouteBody(UPLOAD)
    assert limits[("POST", "/api/storage/batch")] == RouteBody(batch_body_limit(UPLOAD))
    assert limits[("POST", "/api/core/zones")] == DEFAULT_BODY
    assert all(0 < body.limit <= batch_body_limit(UPLOAD) for body in limits.values())




@pytest.mark.parametrize(("limit", "size", "expected"), [
    (25 * 1024 * 1024, 25 * 1024 * 1024 + 1, "Payload too large: 26214401 bytes exceeds the 26214400 bytes limit."),
    (25 * 1024 * 1024, 30 * 1024 * 1024, "Payload too large: 30.0 MB exceeds the 25.0 MB limit."),
    (1000, 1001, "Payload too large: 1001 bytes exceeds the 1000 bytes limit."),
])
def test_a_size_just_over_the_limit_is_not_shown_as_the_limit_itself(limit: int, size: int, expected: str) -> None:
    # A body a byte over 25 MB was "25.0 MB exceeds the 25.0 MB limit": both sides in bytes when MB rounds them alike.
    assert too_large(limit, size).message == expected
