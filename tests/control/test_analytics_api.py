"""Analytics: POST /api/analytics (public hit), GET /api/analytics (analytics key), and the edges'
signed batches on POST /_cluster/analytics. Errors of /api/analytics use the legacy envelope."""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiohttp import ClientResponse
from aiohttp.test_utils import TestClient

from control.app import create_app
from shared import API_VERSION
from shared.cluster import PREFIX, sign_request
from shared.config import load_settings
from tests.control.conftest import ACCESS, ACCOUNT, SECRETS
from tests.control.expect import expect_error, parse_time

ANALYTICS_KEY = {"x-api-key": SECRETS.analytics_key}
BATCH_PATH = PREFIX + "/analytics"


async def expect_legacy(resp: ClientResponse, status: int) -> dict[str, Any]:
    body = await resp.json()
    assert resp.status == status, body
    assert isinstance(body["error"], str) and body["error"]
    assert body["HttpCode"] == status and body["Message"]
    assert str(uuid.UUID(body["requestId"])) == body["requestId"] == resp.headers["X-Request-ID"]
    assert body["apiVersion"] == API_VERSION == resp.headers["X-API-Version"]
    parse_time(body["timestamp"])
    return body


def hit(path: str, *, status: int = 200, size: int = 100, cache: str = "HIT", country: str = "US",
        timestamp: float | None = None, zone: str | None = None) -> dict[str, Any]:
    return {"timestamp": time.time() if timestamp is None else timestamp, "path": path,
            "zone": zone or path.split("/", 1)[0], "status": status, "bytes": size, "cache": cache,
            "country": country}


async def send_batch(control: TestClient, hits: list[Any], **extra: Any) -> ClientResponse:
    body = orjson.dumps({"v": 1, "hits": hits, **extra})
    headers = {**sign_request(SECRETS.cluster_secret, "POST", BATCH_PATH, body), "Content-Type": "application/json"}
    return await control.post(BATCH_PATH, data=body, headers=headers)


async def report(control: TestClient, days: int | str | None = None) -> dict[str, Any]:
    params = {} if days is None else {"days": str(days)}
    resp = await control.get("/api/analytics", params=params, headers=ANALYTICS_KEY)
    assert resp.status == 200, await resp.text()
    return await resp.json()


def today() -> str:
    return datetime.now(UTC).date().isoformat()


async def test_track_is_public_and_counted(control: TestClient) -> None:
    resp = await control.post("/api/analytics", json={"path": "/akande/v1/logos/logo.svg", "bytes": 4523,
                                                      "country": "us", "cache": "hit"})
    assert resp.status == 200
    assert await resp.json() == {"ok": True}
    assert (await control.post("/api/analytics", json={})).status == 200  # every field has a default
    body = await report(control)
    assert set(body) == {"days", "data", "DateFetched"}
    assert body["days"] == 7 and len(body["data"]) == 7
    day = body["data"][0]
    assert day["date"] == today()
    assert day["hits"] == 2
    assert day["bandwidth"] == {"bytes": 4523, "human": "4.4 KB"}
    assert day["top_assets"] == {"/akande/v1/logos/logo.svg": 1, "/": 1}
    assert day["geo"] == {"US": 1, "XX": 1}
    assert day["cache"] == {"hit": 1, "miss": 1, "ratio": "50.0%"}
    assert all(d["hits"] == 0 for d in body["data"][1:])


@pytest.mark.parametrize("body", [
    {"path": 7}, {"bytes": -1}, {"bytes": "12"}, {"country": "USA"}, {"cache": "WARM"}, {"status": 99},
    ["not", "an", "object"],
])
async def test_track_refuses_bad_fields_in_the_legacy_envelope(control: TestClient, body: Any) -> None:
    await expect_legacy(await control.post("/api/analytics", json=body), 400)
    assert (await report(control))["data"][0]["hits"] == 0


async def test_track_refuses_invalid_json_and_big_bodies(control: TestClient) -> None:
    body = await expect_legacy(await control.post("/api/analytics", data=b"{oops"), 400)
    assert body["error"] == "Invalid JSON body"
    await expect_legacy(await control.post("/api/analytics", data=b" " * (65 * 1024)), 413)


async def test_track_can_require_the_analytics_key(aiohttp_client, data_dir: Path) -> None:  # type: ignore[no-untyped-def]
    settings = load_settings(environ={}).with_overrides("analytics", track_requires_key=True)
    client = await aiohttp_client(create_app(settings, SECRETS, data_dir))
    await expect_legacy(await client.post("/api/analytics", json={"path": "/a"}), 401)
    await expect_legacy(await client.post("/api/analytics", json={"path": "/a"}, headers=ACCOUNT), 401)
    assert (await client.post("/api/analytics", json={"path": "/a"}, headers=ANALYTICS_KEY)).status == 200


@pytest.mark.parametrize("headers", [{}, ACCESS, ACCOUNT, {"x-api-key": "wrong"}])
async def test_get_requires_the_analytics_key(control: TestClient, headers: dict[str, str]) -> None:
    await expect_legacy(await control.get("/api/analytics", headers=headers), 401)


@pytest.mark.parametrize(("days", "expected"), [(None, 7), (1, 1), (30, 30), (31, 30), (0, 1), ("abc", 7)])
async def test_get_clamps_days_to_1_30(control: TestClient, days: Any, expected: int) -> None:
    body = await report(control, days)
    assert body["days"] == expected and len(body["data"]) == expected


async def test_batches_are_counted_and_a_retried_batch_only_once(control: TestClient) -> None:
    hits = [hit("akande/v1/logos/logo.svg", size=1000), hit("akande/v1/logos/logo.svg", cache="MISS", size=1000),
            hit("stocks/images/a.png", country="DE", size=24)]
    resp = await send_batch(control, hits, batch="edge-1:42")
    assert resp.status == 200
    assert await resp.json() == {"recorded": 3, "rejected": 0}
    resp = await send_batch(control, hits, batch="edge-1:42")
    assert (await resp.json())["duplicate"] is True
    day = (await report(control))["data"][0]
    assert day["hits"] == 3 and day["bandwidth"]["bytes"] == 2024
    assert day["top_assets"] == {"/akande/v1/logos/logo.svg": 2, "/stocks/images/a.png": 1}
    assert day["geo"] == {"US": 2, "DE": 1}
    assert day["cache"] == {"hit": 2, "miss": 1, "ratio": "66.7%"}


async def test_invalid_hits_are_rejected_one_by_one(control: TestClient) -> None:
    good = hit("akande/v1/logos/logo.svg")
    bad = [{**good, "status": 42}, {**good, "bytes": -5}, {**good, "cache": "WARM"}, {**good, "path": None},
           {**good, "timestamp": "yesterday"}, {**good, "timestamp": time.time() + 86400},
           {**good, "timestamp": time.time() - 200 * 86400}, "not a hit"]
    resp = await send_batch(control, [good, *bad])
    assert await resp.json() == {"recorded": 1, "rejected": len(bad)}
    assert (await report(control))["data"][0]["hits"] == 1


async def test_batches_must_be_signed(control: TestClient) -> None:
    body = orjson.dumps({"v": 1, "hits": [hit("akande/v1/logos/logo.svg")]})
    await expect_error(await control.post(BATCH_PATH, data=body), 401, "Unauthorized")
    forged = sign_request("not-the-secret", "POST", BATCH_PATH, body)
    await expect_error(await control.post(BATCH_PATH, data=body, headers=forged), 401, "Unauthorized")
    await expect_error(await control.post(BATCH_PATH, data=body, headers=ACCOUNT), 401, "Unauthorized")
    assert (await report(control))["data"][0]["hits"] == 0


@pytest.mark.parametrize(("body", "code"), [
    (b"{nope", "InvalidJson"), (b"[]", "InvalidBody"), (b'{"v": 1}', "InvalidBody"),
    (b'{"v": 2, "hits": []}', "InvalidVersion"),
])
async def test_malformed_batches_are_400(control: TestClient, body: bytes, code: str) -> None:
    headers = sign_request(SECRETS.cluster_secret, "POST", BATCH_PATH, body)
    await expect_error(await control.post(BATCH_PATH, data=body, headers=headers), 400, code)
