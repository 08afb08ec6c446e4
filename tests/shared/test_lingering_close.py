"""The lingering close after the 408 of a body that came too slowly (assetcdn/shared/middleware.py `LingeringAnswer`),
on control and on the edge (its hit site in front, as the edge process runs it): the request's latency in
`assetcdn_request_seconds` and control's request log entry are the answer's, not the answer's plus the 2 s of the
linger, and a client that goes on sending much more than the request body's buffer after its 408 reads the answer
to a clean end, never a reset."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from aiohttp.test_utils import TestClient

from tests.support.cdn import ZONE, Cdn, shared_cdn_apps
from tests.support.control import ACCESS, ACCOUNT, METRICS
from tests.support.metrics_text import metric
from tests.support.sockets import sending_much_after_answer
from tests.support.wait import WAIT_S, wait_until

BODY_TIMEOUT_S = "1"  # [server] body_timeout_s of this module's CDN (with 1 s more per 16 KB received)
# The route each process counts a storage upload under (the edge forwards it to control).
UPLOAD_ROUTE = {"control": "/api/storage/{path}", "edge": "/api/{tail}"}
# What a client still sends after its 408: past aiohttp's buffer of a request body (128 KB) and what the kernel's
# buffers take of it when the server reads no more, the client's send buffer small (tests/support/sockets.py): on
# loopback a megabyte fitted in them, four did not.
STILL_SENT = 8 * 1024 * 1024

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def cdn(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Cdn]:
    async with shared_cdn_apps(tmp_path_factory.mktemp("lingering-close"),
                               ASSETCDN_SERVER_BODY_TIMEOUT_S=BODY_TIMEOUT_S) as running:
        yield running


def client_of(cdn: Cdn, process: str) -> TestClient:
    return cdn.control if process == "control" else cdn.edge


def port_of(client: TestClient) -> int:
    port = client.server.port
    assert port is not None
    return port


def upload_head(client: TestClient, name: str, length: int, request_id: str) -> bytes:
    """The head of an upload of `length` bytes, whose body the tests send too slowly (one byte, then a pause)."""
    return (f"PUT /api/storage/{ZONE}/lingering/{name} HTTP/1.1\r\nHost: 127.0.0.1:{port_of(client)}\r\n"
            f"AccessKey: {ACCESS['AccessKey']}\r\nX-Request-ID: {request_id}\r\nContent-Length: {length}\r\n\r\n"
            ).encode()


async def request_seconds(client: TestClient, process: str) -> tuple[float, float]:
    """(count, sum) of the uploads' `assetcdn_request_seconds` on `client`'s /metrics."""
    resp = await client.get("/metrics", headers=METRICS)
    assert resp.status == 200
    text = await resp.text()
    labels: dict[str, Any] = {"process": process, "route": UPLOAD_ROUTE[process]}
    return (metric(text, "assetcdn_request_seconds_count", **labels),
            metric(text, "assetcdn_request_seconds_sum", **labels))


@contextlib.asynccontextmanager
async def answered_408(client: TestClient, head: bytes) -> AsyncIterator[tuple[float, bytes]]:
    """Sends `head` and one byte of its body, then nothing, and reads the answer: (the seconds from the head's sending
    to the answer's head read, the answer), the connection still open (the client has not read the server's end:
    the linger goes on) until the block ends."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port_of(client))
    try:
        started = time.perf_counter()
        writer.write(head + b"x")
        answer = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), WAIT_S)
        waited = time.perf_counter() - started
        length = int(answer.split(b"\r\nContent-Length: ", 1)[1].split(b"\r\n", 1)[0])
        yield waited, answer + await asyncio.wait_for(reader.readexactly(length), WAIT_S)
    finally:
        writer.close()


@pytest.mark.parametrize("process", ["control", "edge"])
async def test_a_408s_latency_is_the_answers_not_the_lingering_closes(cdn: Cdn, process: str) -> None:
    """The latency counted for the 408 is within the time its client waited for it. It was 2 s longer (the linger,
    which the request's handler waited out), so the slow bodies' 408s stood out as the slowest answers of the
    route's histogram."""
    client = client_of(cdn, process)
    count, total = await request_seconds(client, process)

    async def counted() -> bool:
        return (await request_seconds(client, process))[0] > count

    async with answered_408(client, upload_head(client, f"{process}.txt", 1000, str(uuid.uuid4()))) as (
            waited, answer):
        assert answer.startswith(b"HTTP/1.1 408 ") and b'"code":"RequestTimeout"' in answer, answer[:300]
        await wait_until(counted, "the 408 counted")
    now_count, now_total = await request_seconds(client, process)
    assert now_count == count + 1
    assert now_total - total <= waited, (now_total - total, waited)


async def test_controls_request_log_has_a_408_with_the_time_its_answer_took(cdn: Cdn) -> None:
    """control's request log entry of the 408 says the time its client waited for it at most. It said 2 s more (the
    linger)."""
    request_id = str(uuid.uuid4())
    logged: list[dict[str, Any]] = []

    async def entry_logged() -> bool:
        resp = await cdn.control.get("/api/logs", params={"limit": "100"}, headers=ACCOUNT)
        logged[:] = [entry for entry in (await resp.json())["records"] if entry["requestId"] == request_id]
        return bool(logged)

    async with answered_408(cdn.control, upload_head(cdn.control, "logged.txt", 1000, request_id)) as (
            waited, answer):
        assert answer.startswith(b"HTTP/1.1 408 "), answer[:300]
        await wait_until(entry_logged, "the 408 logged")
    [entry] = logged
    assert entry["status"] == 408
    assert entry["durationMs"] <= round(waited * 1000, 1), (entry["durationMs"], waited)  # logged to 0.1 ms


@pytest.mark.parametrize("process", ["control", "edge"])
async def test_a_client_sending_megabytes_after_its_408_reads_the_answer_to_a_clean_end(
        cdn: Cdn, process: str) -> None:
    """What the client sends after its 408 is read and dropped however much it is, for the linger's time. It was read
    only to the request body's buffer (128 KB): the rest stayed in the kernel, the client could not send it, and the
    close reset the connection under it."""
    client = client_of(cdn, process)
    head = upload_head(client, f"much-{process}.txt", 2 * STILL_SENT, str(uuid.uuid4()))
    answer = await sending_much_after_answer(port_of(client), head, STILL_SENT, timeout_s=WAIT_S)
    assert answer.startswith(b"HTTP/1.1 408 "), answer[:300]
    assert b'"code":"RequestTimeout"' in answer
