"""Request log: GET /api/logs (AccountKey) as a JSON page, and with stream=1 (or tail=true) as
Server-Sent Events that deliver each new request as it happens."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest
from aiohttp import ClientResponse
from aiohttp.test_utils import TestClient

from control.routes import logs as logs_route
from control.state import REQUEST_LOG
from tests.control.conftest import ACCESS, ACCOUNT
from tests.control.expect import expect_error, parse_time

RECORD_FIELDS = {"id", "timestamp", "level", "code", "message", "method", "path", "status", "durationMs",
                 "requestId", "ip"}


async def page(control: TestClient, **params: Any) -> dict[str, Any]:
    resp = await control.get("/api/logs", params={k: str(v) for k, v in params.items()}, headers=ACCOUNT)
    assert resp.status == 200, await resp.text()
    body = await resp.json()
    assert set(body) == {"records", "count", "cursor"} and body["count"] == len(body["records"])
    return body


async def test_page_lists_requests_newest_first_without_query_strings(control: TestClient) -> None:
    await control.get("/api/core/zones", headers=ACCOUNT)
    await control.get("/api/core/zones/nobody", params={"secret": "s3cr3t"}, headers=ACCOUNT)
    await control.get("/api/core/zones")
    await control.get("/api/nothing-here")
    body = await page(control)
    records = body["records"]
    assert [(r["path"], r["status"], r["level"]) for r in records[:4]] == [
        ("/api/nothing-here", 404, "warn"), ("/api/core/zones", 401, "warn"),
        ("/api/core/zones/nobody", 404, "warn"), ("/api/core/zones", 200, "info")]
    for record in records:
        assert set(record) == RECORD_FIELDS
        parse_time(record["timestamp"])
        assert record["ip"] == "127.0.0.1" and record["requestId"] and record["durationMs"] >= 0
    assert "s3cr3t" not in str(records)
    assert body["cursor"] is None


async def test_limit_cursor_level_and_since(control: TestClient) -> None:
    for _ in range(5):
        await control.get("/api/core/zones", headers=ACCOUNT)
    first = await page(control, limit=2)
    assert first["count"] == 2 and first["cursor"] is not None
    second = await page(control, limit=2, cursor=first["cursor"])
    assert second["records"][0]["id"] == first["records"][-1]["id"] - 1
    assert (await page(control, limit=0))["count"] == 1      # clamped to 1..500
    await control.get("/api/core/zones")
    warnings = await page(control, level="warn")
    assert warnings["records"] and all(r["level"] == "warn" for r in warnings["records"])
    since = first["records"][0]["timestamp"]
    newer = await page(control, since=since)
    assert all(r["timestamp"] > since for r in newer["records"])
    await expect_error(await control.get("/api/logs", params={"since": "yesterday"}, headers=ACCOUNT),
                       400, "InvalidParameter")
    await expect_error(await control.get("/api/logs", params={"level": "debug"}, headers=ACCOUNT),
                       400, "InvalidParameter")
    await expect_error(await control.get("/api/logs", params={"cursor": "x"}, headers=ACCOUNT),
                       400, "InvalidParameter")


async def read_event(resp: ClientResponse) -> tuple[str, str]:
    """The next SSE frame as (event name or ':' for a comment, data)."""
    event, data = "", ""
    while True:
        raw = await resp.content.readline()
        assert raw, "the stream ended"
        line = raw.decode().rstrip("\n")
        if line == "":
            if event or data:
                return event, data
            continue
        if line.startswith(":"):
            return ":", line[1:].strip()
        field, _, value = line.partition(": ")
        if field == "event":
            event = value
        elif field == "data":
            data = value


@pytest.mark.parametrize("params", [{"stream": "1"}, {"tail": "true"}])
async def test_stream_delivers_new_requests_as_they_happen(control: TestClient, params: dict[str, str]) -> None:
    resp = await control.get("/api/logs", params=params, headers=ACCOUNT)
    assert resp.status == 200
    assert resp.headers["Content-Type"].startswith("text/event-stream")
    event, data = await read_event(resp)
    assert event == "connected"
    parse_time(orjson.loads(data)["timestamp"])

    answer = await control.get("/api/core/zones/nobody", headers=ACCOUNT)
    request_id = answer.headers["X-Request-ID"]
    event, data = await read_event(resp)
    assert event == "log"
    record = orjson.loads(data)
    assert (record["path"], record["status"], record["requestId"]) == ("/api/core/zones/nobody", 404, request_id)
    resp.close()


async def test_stream_sends_heartbeats_and_filters_by_level(control: TestClient,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(logs_route, "HEARTBEAT_S", 0.05)
    resp = await control.get("/api/logs", params={"stream": "1", "level": "error"}, headers=ACCOUNT)
    assert (await read_event(resp))[0] == "connected"
    await control.get("/api/core/zones", headers=ACCOUNT)      # info: filtered out
    kind, text = await read_event(resp)
    assert kind == ":" and text.startswith("heartbeat ")
    parse_time(text.split(" ", 1)[1])
    resp.close()


async def test_stream_backlog_since(control: TestClient) -> None:
    await control.get("/api/core/zones/early", headers=ACCOUNT)
    since = (await page(control))["records"][0]["timestamp"]
    await asyncio.sleep(0.01)  # timestamps have millisecond resolution: 'later' must be strictly newer
    await control.get("/api/core/zones/later", headers=ACCOUNT)
    resp = await control.get("/api/logs", params={"stream": "1", "since": since}, headers=ACCOUNT)
    assert (await read_event(resp))[0] == "connected"
    paths = []
    assert resp.status == 200
    async with asyncio.timeout(30):  # the backlog arrives at once; never wait on live traffic that won't come
        while "/api/core/zones/later" not in paths:
            event, data = await read_event(resp)
            assert event == "log"
            paths.append(orjson.loads(data)["path"])
    assert "/api/core/zones/early" not in paths
    resp.close()


async def test_a_closed_stream_unsubscribes(control: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(logs_route, "DISCONNECT_CHECK_S", 0.02)
    request_log = control.app[REQUEST_LOG]
    unsubscribed = asyncio.Event()
    original = request_log.unsubscribe

    def unsubscribe(queue: Any) -> None:
        original(queue)
        unsubscribed.set()
    monkeypatch.setattr(request_log, "unsubscribe", unsubscribe)
    resp = await control.get("/api/logs", params={"stream": "1"}, headers=ACCOUNT)
    assert (await read_event(resp))[0] == "connected"
    assert request_log.subscribers == 1
    resp.close()
    await unsubscribed.wait()  # bounded by the suite's timeout
    assert request_log.subscribers == 0


async def test_shutdown_ends_open_streams(control: TestClient) -> None:
    resp = await control.get("/api/logs", params={"stream": "1"}, headers=ACCOUNT)
    assert (await read_event(resp))[0] == "connected"
    control.app[REQUEST_LOG].close()
    assert await resp.content.read() == b""  # the server ended the stream
    assert control.app[REQUEST_LOG].subscribers == 0


@pytest.mark.parametrize("headers", [{}, ACCESS])
async def test_account_key_is_required(control: TestClient, headers: dict[str, str]) -> None:
    await expect_error(await control.get("/api/logs", headers=headers), 401, "Unauthorized")
    await expect_error(await control.get("/api/logs", params={"stream": "1"}, headers=headers), 401, "Unauthorized")
