"""What slow, oversize and vanishing clients get from real processes (`assetcdn up`), on the edge and
on control alike: a request head or body that does not arrive in time is cut off, an oversize
Content-Length is refused before any of the body is sent, a request line or a header field too long is 414 or 431,
every response names the product without versions, and a client leaving an SSE stream leaves no traceback in the
logs."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Iterator

import aiohttp
import pytest

from tests.integration.harness import ACCESS, ACCOUNT, RunningCdn, start_cdn
from tests.support.sockets import still_sending_after_answer

pytestmark = pytest.mark.integration

DEADLINE_S = 3  # header_timeout_s and body_timeout_s of this cluster
WAIT_S = 30.0   # how long a test waits for what the deadlines should bring about (never asserted as a duration)
ZONE = "hostile"


@pytest.fixture(scope="module")
def cdn(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningCdn]:
    running = start_cdn(tmp_path_factory.mktemp("hostile"), env_extra={
        "ASSETCDN_SERVER_HEADER_TIMEOUT_S": str(DEADLINE_S), "ASSETCDN_SERVER_BODY_TIMEOUT_S": str(DEADLINE_S)})
    try:
        asyncio.run(_create_zone(running.control_url))
        yield running
    finally:
        running.stop()


async def _create_zone(base: str) -> None:
    async with aiohttp.ClientSession() as session, session.post(
            f"{base}/api/core/zones", json={"Name": ZONE}, headers=ACCOUNT) as resp:
        assert resp.status == 201, await resp.text()


def port_of(cdn: RunningCdn, process: str) -> int:
    url = cdn.edge_urls[0] if process == "edge" else cdn.control_url
    return int(url.rsplit(":", 1)[1])


def session() -> aiohttp.ClientSession:
    # A fresh connection per request: this cluster closes idle connections after DEADLINE_S.
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True))


async def drip_until_answered(port: int, head: bytes, drip: bytes) -> bytes:
    """Send `head`, then one byte of `drip` every 0.25 s; return everything the server sends until it closes."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(head)

    async def dripping() -> None:
        with contextlib.suppress(ConnectionError):
            for byte in drip:
                await asyncio.sleep(0.25)
                writer.write(bytes([byte]))
                await writer.drain()

    task = asyncio.create_task(dripping())
    try:
        return await asyncio.wait_for(reader.read(), WAIT_S)  # to EOF: the answer, then the close
    finally:
        task.cancel()
        writer.close()


async def raw_exchange(port: int, request: bytes) -> bytes:
    """Send `request` (headers only, whatever they announce) and read the first answer."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request)
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), WAIT_S)
        length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                       if line.lower().startswith(b"content-length:")), 0)
        return head + await asyncio.wait_for(reader.readexactly(length), WAIT_S)
    finally:
        writer.close()


def header(answer: bytes, name: str) -> str | None:
    for line in answer.split(b"\r\n\r\n", 1)[0].split(b"\r\n")[1:]:
        key, _, value = line.decode().partition(":")
        if key.strip().lower() == name.lower():
            return value.strip()
    return None


@pytest.mark.parametrize("process", ["edge", "control"])
async def test_a_request_head_that_trickles_is_cut_off(cdn: RunningCdn, process: str) -> None:
    port = port_of(cdn, process)
    answer = await drip_until_answered(port, b"GET /api/health HTTP/1.1\r\nHost: x\r\nX-Slow: ",
                                       b"a" * int(4 * WAIT_S))  # never finishes the head
    assert answer == b""  # closed without an answer: the head never arrived
    async with session() as client, client.get(f"http://127.0.0.1:{port}/api/core/zones", headers=ACCOUNT) as resp:
        assert resp.status == 200  # and the server serves others as before


@pytest.mark.parametrize("process", ["edge", "control"])
async def test_a_body_that_trickles_answers_408_and_is_cut_off(cdn: RunningCdn, process: str) -> None:
    head = (f"PUT /api/storage/{ZONE}/v1/slow/{process}.txt HTTP/1.1\r\nHost: x\r\n"
            f"AccessKey: {ACCESS['AccessKey']}\r\nContent-Length: 1000\r\n\r\n").encode()
    answer = await drip_until_answered(port_of(cdn, process), head, b"x" * 999)
    assert answer.startswith(b"HTTP/1.1 408 "), answer[:200]
    assert b'"code":"RequestTimeout"' in answer
    assert header(answer, "Connection") == "close"
    async with session() as client, client.get(f"{cdn.control_url}/api/storage/{ZONE}/v1/slow/{process}.txt",
                                               headers=ACCESS) as resp:
        assert resp.status == 404  # nothing was stored


@pytest.mark.parametrize("process", ["edge", "control"])
async def test_a_client_still_sending_its_body_after_its_408_reads_the_answer_to_a_clean_end(
        cdn: RunningCdn, process: str) -> None:
    """Cut off for a body that came too slowly, a client that goes on sending it (as clients do) gets the 408 and
    the end of the connection, never a reset: the server reads and drops what it still sends for a while (a
    lingering close). Closed at once, the connection was reset by the next bytes the client sent, and a client
    reading its answer to the end then got an error in its place."""
    head = (f"PUT /api/storage/{ZONE}/v1/slow/still-{process}.txt HTTP/1.1\r\nHost: x\r\n"
            f"AccessKey: {ACCESS['AccessKey']}\r\nContent-Length: 100000\r\n\r\n").encode()
    reader, writer = await asyncio.open_connection("127.0.0.1", port_of(cdn, process))
    try:
        answer, rest = await still_sending_after_answer(reader, writer, head, WAIT_S)
        assert answer.startswith(b"HTTP/1.1 408 "), answer[:200]
        assert b'"code":"RequestTimeout"' in rest
    finally:
        writer.close()


@pytest.mark.parametrize("process", ["edge", "control"])
@pytest.mark.parametrize(("method", "path", "limit"), [
    ("PUT", f"/api/storage/{ZONE}/v1/huge.bin", 26214400),
    ("POST", "/api/storage/batch", None),
])
async def test_an_oversize_content_length_is_refused_before_the_body_is_sent(
        cdn: RunningCdn, process: str, method: str, path: str, limit: int | None) -> None:
    announced = 10 * 1024 ** 3
    answer = await raw_exchange(port_of(cdn, process), (
        f"{method} {path} HTTP/1.1\r\nHost: x\r\nAccessKey: {ACCESS['AccessKey']}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {announced}\r\n\r\n").encode())
    assert answer.startswith(b"HTTP/1.1 413 "), answer[:300]
    assert b'"code":"PayloadTooLarge"' in answer
    assert b"10240.0 MB exceeds" in answer
    if limit is not None:
        assert f'"MaxSize":{limit}'.encode() in answer


@pytest.mark.parametrize("process", ["edge", "control", "dashboard"])
async def test_an_over_long_request_line_is_414_and_an_over_long_field_431(cdn: RunningCdn, process: str) -> None:
    """Each of the processes' listeners (the edge's, control's, control's dashboard port), as `assetcdn up` runs them:
    both were 400 BadRequest."""
    port = int(cdn.dashboard_url.rsplit(":", 1)[1]) if process == "dashboard" else port_of(cdn, process)
    for head, status, code in ((f"GET /api/health?{'q' * 9000} HTTP/1.1\r\nHost: x\r\n\r\n", 414, "URITooLong"),
                               (f"GET /api/health HTTP/1.1\r\nHost: x\r\nCookie: {'c' * 9000}\r\n\r\n", 431,
                                "RequestHeaderFieldsTooLarge")):
        answer = await raw_exchange(port, head.encode())
        assert answer.split(b" ", 2)[1] == str(status).encode(), answer[:300]
        assert f'"code":"{code}"'.encode() in answer and f'"HttpCode":{status}'.encode() in answer, answer[:300]
    assert (await raw_exchange(port, b"GET /api/health HTTP/1.1\r\nHost: x\r\n" + b"".join(
        b"X-Part-%d: %s\r\n" % (i, b"p" * 4000) for i in range(4)) + b"\r\n")).split(b" ", 2)[1] == b"200"


async def test_every_response_names_the_product_without_versions(cdn: RunningCdn) -> None:
    edge, control = cdn.edge_urls[0], cdn.control_url
    seen: dict[str, str | None] = {}
    async with session() as client:
        for name, method, url, headers in (
                ("edge health", "GET", f"{edge}/api/health", {}),
                ("edge delivery 404", "GET", f"{edge}/{ZONE}/v1/none.txt", {}),
                ("edge transform error", "GET", f"{edge}/api/transform?url=nothing", {}),
                ("edge forwarded 200", "GET", f"{edge}/api/core/zones", ACCOUNT),
                ("edge forwarded 401", "GET", f"{edge}/api/core/zones", {}),
                ("control 200", "GET", f"{control}/api/core/zones", ACCOUNT),
                ("control 401", "DELETE", f"{control}/api/tokens", {}),
                ("control 404", "GET", f"{control}/api/nothing", {})):
            async with client.request(method, url, headers=headers) as resp:
                seen[name] = resp.headers.get("Server")
    for process in ("edge", "control"):
        # Answered by the HTTP parser before any application code runs.
        malformed = await raw_exchange(port_of(cdn, process), b"GET /\x00 HTTP/1.1\r\nHost: x\r\n\r\n")
        assert malformed.startswith(b"HTTP/1.")
        seen[f"{process} malformed request"] = header(malformed, "Server")
    assert seen == dict.fromkeys(seen, "assetcdn")


async def test_a_client_leaving_an_sse_stream_through_the_edge_leaves_no_traceback(cdn: RunningCdn) -> None:
    edge = cdn.edge_urls[0]
    stream_id = str(uuid.uuid4())
    log_before = cdn.log_path.read_bytes()
    async with session() as client:
        resp = await client.get(f"{edge}/api/logs?stream=1", headers={**ACCOUNT, "X-Request-ID": stream_id})
        assert resp.status == 200
        assert (await asyncio.wait_for(resp.content.readline(), WAIT_S)).startswith(b"event: connected")
        resp.connection.transport.abort()  # type: ignore[union-attr]  # the client goes away mid-stream
        resp.release()
        # Something for the stream to carry after the client has gone.
        async with client.get(f"{cdn.control_url}/api/core/zones", headers=ACCOUNT) as other:
            assert other.status == 200

        async def stream_ended() -> bool:
            # Control logs the stream's request once it ends: the edge has let go of it.
            async with client.get(f"{cdn.control_url}/api/logs?limit=500", headers=ACCOUNT) as page:
                return any(r["requestId"] == stream_id for r in (await page.json())["records"])

        deadline = time.monotonic() + WAIT_S
        while not await stream_ended():
            assert time.monotonic() < deadline, "the edge never let go of the abandoned stream"
            await asyncio.sleep(0.2)
    new_output = cdn.log_path.read_bytes()[len(log_before):].decode(errors="replace")
    assert "Traceback" not in new_output, new_output
