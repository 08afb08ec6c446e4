"""Request bodies forwarded by the edge (assetcdn/edge/proxy.py, assetcdn/edge/proxied_body.py) and read by control
(assetcdn/shared/request_body.py): slow senders never hold the edge's connections to control, content codings
are decoded within the size limit or refused, and a control plane that does not answer is given up on."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import hashlib
import os
from collections.abc import AsyncIterator
from pathlib import Path

import orjson
import pytest
import pytest_asyncio
from aiohttp import web
from aiohttp.test_utils import TestClient

import assetcdn.edge.app  # noqa: F401
from assetcdn import edge
from assetcdn.edge.app import EdgeIdentity
from assetcdn.shared.config import load_settings
from tests.integration.harness import LAZY_IMAGE_POOL
from tests.support.cdn import ZONE, Cdn, CdnFactory, shared_cdn_apps
from tests.support.control import ACCESS, ACCOUNT, SECRETS
from tests.support.sockets import raw_answer
from tests.support.wait import WAIT_S, wait_until

TRICKLERS = 120  # more than the default pool of connections to control (100), and far more than 4


# The tests that store under paths of their own with default limits share one CDN; those that set
# limits or pools, or stall control, start their own.
SHARED = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def shared_cdn(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Cdn]:
    async with shared_cdn_apps(tmp_path_factory.mktemp("proxied-bodies")) as cdn:
        yield cdn


def both(cdn: Cdn) -> list[tuple[str, TestClient]]:
    return [("edge", cdn.edge), ("control", cdn.control)]


async def test_tricklers_beyond_the_pool_do_not_starve_uploads(make_cdn: CdnFactory) -> None:
    cdn = await make_cdn(ASSETCDN_EDGE_PROXY_POOL_SIZE="4", ASSETCDN_SERVER_BODY_TIMEOUT_S="600")
    server = cdn.edge.server
    handled_before = server.handler.requests_count
    streams: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
    for i in range(TRICKLERS):
        reader, writer = await asyncio.open_connection(server.host, server.port)
        writer.write(f"PUT /api/storage/{ZONE}/v1/slow/{i}.txt HTTP/1.1\r\nHost: edge\r\n"
                     f"AccessKey: {ACCESS['AccessKey']}\r\nContent-Length: 1000\r\n\r\nx".encode())
        streams.append((reader, writer))

    async def every_trickler_is_being_handled() -> bool:
        return server.handler.requests_count - handled_before >= TRICKLERS

    async def drip() -> None:
        while True:
            await asyncio.sleep(0.5)
            for _, writer in streams:
                writer.write(b"x")

    dripping = asyncio.create_task(drip())
    try:
        await wait_until(every_trickler_is_being_handled, "the edge handling every trickler")
        await asyncio.sleep(0.2)  # let each handler get as far as it will with its body
        upload = cdn.edge.put(f"/api/storage/{ZONE}/v1/fast.txt", data=b"uploaded while others trickle",
                              headers=ACCESS)
        resp = await asyncio.wait_for(upload, WAIT_S)
        assert resp.status == 201, await resp.text()
        zone = cdn.edge.post("/api/core/zones", json={"Name": "beside"}, headers=ACCOUNT)
        resp = await asyncio.wait_for(zone, WAIT_S)
        assert resp.status == 201, await resp.text()
        for reader, _ in streams:
            assert not reader.at_eof()  # every trickler is still being waited for
    finally:
        dripping.cancel()
        for _, writer in streams:
            writer.close()


async def test_a_slow_but_steady_body_outlives_the_body_timeout(make_cdn: CdnFactory) -> None:
    """The deadline grows with what arrives: 1 s plus 1 s per 50 bytes, for a body sent at ~500 bytes/s."""
    cdn = await make_cdn(ASSETCDN_SERVER_BODY_TIMEOUT_S="1", ASSETCDN_SERVER_BODY_MIN_BYTES_PER_S="50")

    async def steady() -> AsyncIterator[bytes]:
        for _ in range(25):
            yield b"s" * 50
            await asyncio.sleep(0.1)

    for name, client in both(cdn):
        resp = await client.put(f"/api/storage/{ZONE}/v1/steady/{name}.txt", data=steady(), headers=ACCESS)
        body = await resp.json()
        assert resp.status == 201, (name, body)
        assert body["Length"] == 25 * 50


async def test_a_body_larger_than_the_memory_buffer_arrives_intact(make_cdn: CdnFactory) -> None:
    cdn = await make_cdn(ASSETCDN_EDGE_PROXY_BODY_MEMORY_KB="64")  # this one waits in a temporary file
    data = os.urandom(3 * 1024 * 1024 + 17)
    checksum = hashlib.sha256(data).hexdigest().upper()
    resp = await cdn.edge.put(f"/api/storage/{ZONE}/v1/large.bin", data=data, headers={**ACCESS, "Checksum": checksum})
    body = await resp.json()
    assert resp.status == 201, body
    assert (body["Length"], body["Checksum"]) == (len(data), checksum)
    resp = await cdn.edge.get(f"/api/storage/{ZONE}/v1/large.bin", headers=ACCESS)
    assert await resp.read() == data


@SHARED
async def test_a_gzip_body_is_stored_decoded_through_the_edge_and_at_control(shared_cdn: Cdn) -> None:
    cdn = shared_cdn
    original = b"<svg xmlns='http://www.w3.org/2000/svg'/>\n" * 50
    for name, client in both(cdn):
        resp = await client.put(f"/api/storage/{ZONE}/v1/gz/{name}.txt", data=gzip.compress(original),
                                headers={**ACCESS, "Content-Encoding": "gzip"})
        body = await resp.json()
        assert resp.status == 201, body
        assert body["Length"] == len(original)
        resp = await cdn.control.get(f"/api/storage/{ZONE}/v1/gz/{name}.txt", headers=ACCESS)
        assert await resp.read() == original


async def test_a_gzip_bomb_stops_at_the_upload_limit(make_cdn: CdnFactory) -> None:
    cdn = await make_cdn(ASSETCDN_CONTROL_MAX_UPLOAD_BYTES="100000")
    bomb = gzip.compress(b"\0" * (64 * 1024 * 1024))  # 64 KB on the wire, 64 MB decoded
    assert len(bomb) < 100000
    for name, client in both(cdn):
        resp = await client.put(f"/api/storage/{ZONE}/v1/bomb/{name}.bin", data=bomb,
                                headers={**ACCESS, "Content-Encoding": "gzip"})
        body = await resp.json()
        assert resp.status == 413, body
        assert (body["error"]["code"], body["MaxSize"]) == ("PayloadTooLarge", 100000)
    resp = await cdn.control.get("/api/assets", headers=ACCESS)
    assert "bomb" not in await resp.text()  # nothing was stored


@SHARED
async def test_an_unsupported_content_coding_is_refused_with_415(shared_cdn: Cdn) -> None:
    cdn = shared_cdn
    for name, client in both(cdn):
        for coding in ("compress", "gzip, gzip", "x-custom"):
            resp = await client.put(f"/api/storage/{ZONE}/v1/coded/{name}.bin", data=b"\x1f\x9d raw bytes",
                                    headers={**ACCESS, "Content-Encoding": coding})
            body = await resp.json()
            assert resp.status == 415, (name, coding, body)
            assert body["error"]["code"] == "UnsupportedContentEncoding"
            assert resp.headers["Accept-Encoding"] == "gzip, deflate"


@SHARED
async def test_a_content_coding_that_is_not_utf8_is_refused_with_415(shared_cdn: Cdn) -> None:
    """The 415 quotes the coding it refuses: one written in bytes that are not UTF-8 (which the server reads with
    surrogate escapes, and JSON cannot hold) made that answer a 500, on the edge and on control."""
    cdn = shared_cdn
    for name, client in both(cdn):
        assert client.server.port is not None
        body = b"\x1f\x9d raw bytes"
        answer = await raw_answer(client.server.port, (
            f"PUT /api/storage/{ZONE}/v1/coded/{name}-raw.bin HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"AccessKey: {SECRETS.access_key}\r\nContent-Length: {len(body)}\r\nConnection: close\r\n").encode()
            + b"Content-Encoding: x-\xff\r\n\r\n" + body)
        head, _, text = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 415 "), (name, answer[:300])
        assert orjson.loads(text)["error"]["code"] == "UnsupportedContentEncoding"
        assert b"x-\\\\xff" in text, text  # the coding's bytes, escaped: '\\xff' in the JSON string


@SHARED
async def test_a_body_that_does_not_decode_answers_400(shared_cdn: Cdn) -> None:
    cdn = shared_cdn
    for name, client in both(cdn):
        resp = await client.put(f"/api/storage/{ZONE}/v1/broken/{name}.txt", data=b"this is not gzip at all",
                                headers={**ACCESS, "Content-Encoding": "gzip"})
        body = await resp.json()
        assert resp.status == 400, (name, body)
        assert body["error"]["code"] == "InvalidBody"
        # The rest of the body is never read, so the connection closes after the answer: the client is told, or
        # it would send its next request on a connection about to close ("server disconnected").
        assert resp.headers.get("Connection", "").lower() == "close", (name, resp.headers)
    resp = await cdn.edge.get("/api/health")  # the edge still serves
    assert resp.status == 200


async def test_a_control_plane_that_does_not_answer_is_given_up_on_with_504(
        aiohttp_server, aiohttp_client, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    release = asyncio.Event()

    async def never_answers(request: web.Request) -> web.Response:
        await release.wait()
        return web.Response(status=503)

    stalled = web.Application()
    stalled.router.add_route("*", "/{tail:.*}", never_answers)
    control = await aiohttp_server(stalled)
    # Each call's timeout counts against control as the edge's own calls' do: with the breaker open (two in a row by
    # default) the next call would be refused at once, 503 (tests/edge/routes/test_forwarding.py).
    settings = load_settings(environ={"ASSETCDN_EDGE_PROXY_TIMEOUT_S": "1", "ASSETCDN_EDGE_BREAKER_FAILURES": "100",
                                      **LAZY_IMAGE_POOL})
    identity = EdgeIdentity(name="edge-t", worker=0, control_url=str(control.make_url("")).rstrip("/"),
                            cache_dir=tmp_path / "edge", advertise_host="127.0.0.1")
    client = await aiohttp_client(edge.app.create_app(settings, SECRETS, identity))
    try:
        for method, data in (("GET", None), ("POST", b'{"Name": "late"}')):
            resp = await asyncio.wait_for(client.request(method, "/api/core/zones", data=data, headers=ACCOUNT),
                                          WAIT_S)
            body = await resp.json()
            assert resp.status == 504, body
            assert body["error"]["code"] == "ControlTimeout"
    finally:
        release.set()
        with contextlib.suppress(Exception):
            await client.close()
