"""Request log: GET /api/logs (AccountKey) as a JSON page, and with stream=1 (or tail=true) as
Server-Sent Events that deliver each new entry as it happens. It lists control's own requests and
the deliveries edges ship in their signed analytics batches, and is kept in SQLite (it survives a
restart) within a count and an age."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiohttp import ClientResponse
from aiohttp.test_utils import TestClient, TestServer

from assetcdn.control.app import create_app
from assetcdn.control.records.request_log import RequestLog, delivery_entry
from assetcdn.control.records.service import REQUEST_LOG
from assetcdn.control.routes import logs as logs_route
from assetcdn.shared.config import Settings, load_settings
from tests.control.expect import expect_error, parse_time
from tests.support.analytics import ANALYTICS_KEY, hit, page, send_batch
from tests.support.control import ACCESS, ACCOUNT, SECRETS

RECORD_FIELDS = {"id", "timestamp", "level", "code", "message", "method", "path", "status", "durationMs",
                 "requestId", "ip", "node", "cache", "sampleRate"}


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
        assert (record["code"], record["node"], record["cache"]) == ("request", "control", None)
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
    control.app[REQUEST_LOG].end_streams()
    assert await resp.content.read() == b""  # the server ended the stream
    assert control.app[REQUEST_LOG].subscribers == 0


@pytest.mark.parametrize("headers", [{}, ACCESS])
async def test_account_key_is_required(control: TestClient, headers: dict[str, str]) -> None:
    await expect_error(await control.get("/api/logs", headers=headers), 401, "Unauthorized")
    await expect_error(await control.get("/api/logs", params={"stream": "1"}, headers=headers), 401, "Unauthorized")


# -- deliveries the edges served, and storage --------------------------------------------------------

def delivery(path: str, *, status: int = 200, cache: str = "HIT", method: str = "GET",
             ip: str = "198.51.100.4", request_id: str | None = None) -> dict[str, Any]:
    return {**hit(path, status=status, cache=cache), "method": method, "ip": ip,
            "requestId": request_id or str(uuid.uuid4())}


@asynccontextmanager
async def control_plane(data_dir: Path, settings: Settings | None = None) -> AsyncIterator[TestClient]:
    """A control plane over ``data_dir`` that can be stopped and started again on the same files."""
    app = create_app(settings or load_settings(environ={}), SECRETS, data_dir)
    async with TestClient(TestServer(app)) as client:
        yield client


def deliveries_of(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in records if r["code"] == "delivery"]


async def test_edge_deliveries_are_listed_with_the_node_and_cache_status(control: TestClient) -> None:
    sent = [delivery("akande/v1/logos/logo.svg", cache="MISS"), delivery("akande/v1/logos/logo.svg"),
            delivery("akande/v1/logos/gone.svg", status=404, cache="BYPASS", method="HEAD"),
            delivery("api/transform", cache="MISS", ip="2001:db8::7")]
    resp = await send_batch(control, sent, batch="b-1", node="edge-3/1")
    assert await resp.json() == {"recorded": 4, "rejected": 0}
    records = deliveries_of((await page(control))["records"])
    assert [(r["path"], r["status"], r["cache"], r["level"], r["method"]) for r in records] == [
        ("/api/transform", 200, "MISS", "info", "GET"), ("/akande/v1/logos/gone.svg", 404, "BYPASS", "warn", "HEAD"),
        ("/akande/v1/logos/logo.svg", 200, "HIT", "info", "GET"),
        ("/akande/v1/logos/logo.svg", 200, "MISS", "info", "GET")]
    for record, item in zip(records, reversed(sent), strict=True):
        assert set(record) == RECORD_FIELDS
        assert (record["node"], record["ip"], record["requestId"]) == ("edge-3/1", item["ip"], item["requestId"])
        assert record["durationMs"] is None and record["message"].startswith(f"{item['method']} {record['path']} ")
        assert abs(parse_time(record["timestamp"]).timestamp() - item["timestamp"]) < 0.002  # when it was served
    warnings = (await page(control, level="warn"))["records"]
    assert [r["path"] for r in deliveries_of(warnings)] == ["/akande/v1/logos/gone.svg"]


async def test_malformed_log_fields_are_replaced_not_trusted(control: TestClient) -> None:
    odd = {**delivery("akande/v1/a.svg"), "method": "get; rm -rf", "ip": "not an address",
           "requestId": "x" * 500}
    legacy = hit("akande/v1/b.svg")  # an edge from before the request log: no method, ip or request id
    resp = await send_batch(control, [odd, legacy], batch="b-odd", node="<script>")
    assert (await resp.json())["recorded"] == 2
    records = deliveries_of((await page(control))["records"])
    assert [(r["method"], r["ip"], r["requestId"], r["node"]) for r in records] == [
        ("GET", "unknown", None, "edge"), ("GET", "unknown", None, "edge")]


async def test_a_stream_delivers_edge_deliveries_as_they_arrive(control: TestClient) -> None:
    resp = await control.get("/api/logs", params={"stream": "1"}, headers=ACCOUNT)
    assert (await read_event(resp))[0] == "connected"
    sent = delivery("akande/v1/logos/logo.svg")
    await send_batch(control, [sent], batch="b-stream", node="edge-0/0")
    async with asyncio.timeout(30):  # the batch's own request comes first; the delivery follows at once
        while True:
            event, data = await read_event(resp)
            record = orjson.loads(data)
            if record["code"] == "delivery":
                break
    assert (record["requestId"], record["node"], record["cache"]) == (sent["requestId"], "edge-0/0", "HIT")
    resp.close()


async def test_the_log_survives_a_restart_and_a_retried_batch_counts_once(data_dir: Path) -> None:
    sent = [delivery("akande/v1/logos/logo.svg"), delivery("akande/v1/logos/logo.svg", cache="MISS")]
    async with control_plane(data_dir) as control:
        await control.get("/api/core/zones/before-restart", headers=ACCOUNT)
        assert (await (await send_batch(control, sent, batch="b-restart", node="edge-0/0")).json())["recorded"] == 2
        before = (await page(control))["records"]
    async with control_plane(data_dir) as control:
        # The edge never saw the reply and sends the batch again to the restarted control plane.
        resp = await send_batch(control, sent, batch="b-restart", node="edge-0/0")
        assert (await resp.json())["duplicate"] is True
        await control.get("/api/core/zones/after-restart", headers=ACCOUNT)
        after = (await page(control))["records"]
        assert after[-len(before):] == before  # everything listed before the restart, in order
        assert len(deliveries_of(after)) == 2
        assert any(r["path"] == "/api/core/zones/before-restart" for r in after)
        assert after[0]["path"] == "/api/core/zones/after-restart"
        assert after[0]["id"] > max(r["id"] for r in before)  # ids go on, so cursors stay meaningful
        resp = await control.get("/api/analytics", headers=ANALYTICS_KEY)
        assert (await resp.json())["data"][0]["hits"] == 2


async def test_retention_keeps_the_newest_records_and_prunes_by_age(data_dir: Path) -> None:
    settings = load_settings(environ={}).with_overrides("logs", max_records=5, retention_days=1)
    async with control_plane(data_dir, settings) as control:
        for n in range(8):
            await control.get(f"/api/core/zones/z{n}", headers=ACCOUNT)
        records = (await page(control, limit=500))["records"]
        assert [r["path"] for r in records] == [f"/api/core/zones/z{n}" for n in range(7, 2, -1)]
        old = delivery("akande/v1/logos/old.svg")
        old["timestamp"] = time.time() - 2 * 86400
        resp = await send_batch(control, [old, delivery("akande/v1/logos/new.svg")], batch="b-old", node="edge-0/0")
        assert (await resp.json())["recorded"] == 2
        await control.app[REQUEST_LOG].prune()  # what the hourly pruning does
        records = (await page(control, limit=500))["records"]
        assert [r["path"] for r in deliveries_of(records)] == ["/akande/v1/logos/new.svg"]
        assert len(records) == 4  # the five newest, less the one past the retention


async def test_prune_removes_what_is_older_than_the_retention(tmp_path: Path) -> None:
    request_log = RequestLog(retention_days=1)
    await request_log.open(tmp_path / "control.sqlite3")
    try:
        now = time.time()
        for age_days in (3, 2, 0.5, 0):
            request_log.append({**delivery_entry(timestamp=now - age_days * 86400, method="GET", path="a/v1/x.svg",
                                                 status=200, cache="HIT", request_id=None, ip="::1", node="e")})
        assert await request_log.prune(now) == 2
        assert len(await request_log.page(limit=10)) == 2
        assert await request_log.prune(now) == 0
    finally:
        await request_log.close()
