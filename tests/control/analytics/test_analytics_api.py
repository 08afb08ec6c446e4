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

from assetcdn.control.analytics.hits import COUNTER_MAX, MAX_HIT_BYTES
from assetcdn.control.analytics.ingest import MAX_BATCH_HITS
from assetcdn.control.app import create_app
from assetcdn.control.app_keys import COUNTERS
from assetcdn.shared import API_VERSION
from assetcdn.shared.cluster import sign_request
from assetcdn.shared.config import load_settings
from assetcdn.shared.counter_store import Limit
from tests.control.expect import expect_error, parse_time
from tests.support.analytics import ANALYTICS_KEY, BATCH_PATH, hit, send_batch
from tests.support.control import ACCESS, ACCOUNT, SECRETS, forwarded_for


async def expect_legacy(resp: ClientResponse, status: int) -> dict[str, Any]:
    body = await resp.json()
    assert resp.status == status, body
    assert isinstance(body["error"], str) and body["error"]
    assert body["HttpCode"] == status and body["Message"]
    assert str(uuid.UUID(body["requestId"])) == body["requestId"] == resp.headers["X-Request-ID"]
    assert body["apiVersion"] == API_VERSION == resp.headers["X-API-Version"]
    parse_time(body["timestamp"])
    return body


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
    assert day["top_assets"] == {"/akande/v1/logos/logo.svg": 1}  # "/" names no asset
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


async def test_a_401_takes_no_slot_of_the_clients_window(aiohttp_client, data_dir: Path) -> None:  # type: ignore[no-untyped-def]
    settings = load_settings(environ={}).with_overrides("analytics", track_requires_key=True, track_rate_limit=2)
    client = await aiohttp_client(create_app(settings, SECRETS, data_dir))
    for _ in range(3):
        await expect_legacy(await client.post("/api/analytics", json={"path": "/a"}), 401)
    window = await client.app[COUNTERS].peek(Limit("rl", 2), "analytics:127.0.0.1")  # SharedRateLimiter's key
    assert window.remaining == 2


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
    (b'{"v": 3, "hits": []}', "InvalidVersion"),
])
async def test_malformed_batches_are_400(control: TestClient, body: bytes, code: str) -> None:
    headers = sign_request(SECRETS.cluster_secret, "POST", BATCH_PATH, body)
    await expect_error(await control.post(BATCH_PATH, data=body, headers=headers), 400, code)


# -- hostile input (issue 10, security 1): nothing a client or an edge sends can break the reports ----

READ_ENDPOINTS = [
    ("/api/analytics?days=30", ANALYTICS_KEY), ("/api/core/statistics?days=90", ACCOUNT),
    ("/api/insights/summary?days=90", ACCOUNT), ("/api/insights/top-assets?days=90&limit=100", ACCOUNT),
    ("/api/insights/geography?days=90", ACCOUNT), ("/api/insights/errors?days=90", ACCOUNT),
    ("/api/insights/asset?path=/akande/v1/logos/logo.svg&days=90", ACCOUNT),
]
HOSTILE_TRACK_BODIES: list[bytes] = [
    orjson.dumps(body) for body in (
        {"path": "/akande/v1/a.svg", "bytes": 2**63 - 1}, {"path": "/bolt/v1/b.svg", "bytes": 2**63 - 1},
        {"bytes": 2**64 - 1}, {"bytes": 2**40 + 1}, {"bytes": -1}, {"bytes": 1.5}, {"bytes": 1e300},
        {"bytes": "12"}, {"bytes": True}, {"bytes": None}, {"bytes": {"$gt": 0}}, {"bytes": [1]},
        {"status": 2**63 - 1}, {"status": 200.0}, {"status": "200"}, {"path": {"a": "b"}}, {"path": ["/x"]},
        {"path": "/x" * 2000}, {"path": "/a\x00b"}, {"path": "/akande/v1/a\nb.svg"}, {"country": "US\n"},
        {"country": {"US": 1}}, {"country": 12},
        {"cache": ["HIT"]}, {"cache": None}, [{"bytes": 1}], "hit", 42,
    )
] + [b'{"bytes": 18446744073709551616}', b'{"bytes": NaN}', b'{"bytes": Infinity}', b"[" * 5000 + b"]" * 5000]


async def every_report(control: TestClient) -> dict[str, Any]:
    reports = {}
    for path, headers in READ_ENDPOINTS:
        resp = await control.get(path, headers=headers)
        assert resp.status == 200, (path, await resp.text())
        body = await resp.json()
        body.pop("DateFetched")
        reports[path] = body
    return reports


async def test_hostile_hits_are_refused_and_every_report_keeps_its_totals(control: TestClient) -> None:
    assert (await send_batch(control, [hit("akande/v1/logos/logo.svg", size=4000),
                                       hit("bolt/v1/logos/bolt.svg", status=404, size=0)])).status == 200
    assert (await control.post("/api/analytics", json={"path": "/akande/v1/logos/logo.svg", "bytes": 10})).status == 200
    before = await every_report(control)
    assert before["/api/core/statistics?days=90"]["Summary"]["TotalRequests"] == 3

    for body in HOSTILE_TRACK_BODIES:
        resp = await control.post("/api/analytics", data=body, headers={"Content-Type": "application/json"})
        await expect_legacy(resp, 400)
    good = hit("akande/v1/logos/logo.svg")
    hostile_items = [{**good, "bytes": 2**63 - 1}, {**good, "bytes": 2**64 - 1}, {**good, "bytes": 2**40 + 1},
                     {**good, "bytes": 1.5}, {**good, "bytes": "1"}, {**good, "bytes": {"a": 1}},
                     {**good, "status": 2**63 - 1}, {**good, "timestamp": 1e308}, {**good, "path": {"a": 1}},
                     {**good, "cache": ["HIT"]}, {**good, "path": "akande/v1/a\r\nb.svg"}, [good], None]
    for items in (hostile_items, hostile_items[:2]):  # with and without company, each batch is answered
        resp = await send_batch(control, items)
        assert resp.status == 200, await resp.text()
        assert await resp.json() == {"recorded": 0, "rejected": len(items)}

    assert await every_report(control) == before


async def test_the_largest_accepted_hits_saturate_instead_of_overflowing(control: TestClient) -> None:
    largest = MAX_HIT_BYTES
    assert MAX_BATCH_HITS * largest > COUNTER_MAX  # one full batch fills a day's counter
    for zone in ("akande", "bolt", "akande"):  # two rows at the cap, one of them added to again
        hits = [hit(f"{zone}/v1/logos/big.bin", size=largest) for _ in range(MAX_BATCH_HITS)]
        assert (await send_batch(control, hits)).status == 200
    reports = await every_report(control)
    summary = reports["/api/core/statistics?days=90"]["Summary"]
    assert (summary["TotalRequests"], summary["TotalBandwidth"]) == (3 * MAX_BATCH_HITS, COUNTER_MAX)
    assert reports["/api/analytics?days=30"]["data"][0]["bandwidth"]["bytes"] == COUNTER_MAX


async def test_a_local_client_cannot_reset_its_track_limit_with_x_forwarded_for(  # type: ignore[no-untyped-def]
        aiohttp_client, data_dir: Path) -> None:
    settings = load_settings(environ={}).with_overrides("analytics", track_rate_limit=2, track_rate_window_s=3600.0)
    client = await aiohttp_client(create_app(settings, SECRETS, data_dir))
    for _ in range(2):
        assert (await client.post("/api/analytics", json={"path": "/akande/v1/a.svg"})).status == 200
    for spoofed in ("203.0.113.50", "198.51.100.1, 203.0.113.51"):  # unsigned: the peer (loopback) is the client
        resp = await client.post("/api/analytics", json={}, headers={"X-Forwarded-For": spoofed})
        await expect_legacy(resp, 429)


async def test_track_is_rate_limited_per_client(aiohttp_client, data_dir: Path) -> None:  # type: ignore[no-untyped-def]
    settings = load_settings(environ={}).with_overrides("analytics", track_rate_limit=3, track_rate_window_s=3600.0)
    client = await aiohttp_client(create_app(settings, SECRETS, data_dir))
    alice, bob = forwarded_for("203.0.113.7"), forwarded_for("2001:db8:1:2::1")
    for remaining in (2, 1, 0):
        resp = await client.post("/api/analytics", json={"path": "/akande/v1/a.svg"}, headers=alice)
        assert resp.status == 200
        assert (resp.headers["X-RateLimit-Limit"], resp.headers["X-RateLimit-Remaining"]) == ("3", str(remaining))
        for _ in range(2):  # an invalid hit is refused before it is counted: it takes no slot
            await expect_legacy(await client.post("/api/analytics", json={"bytes": -1}, headers=alice), 400)
    resp = await client.post("/api/analytics", json={"path": "/akande/v1/a.svg"}, headers=alice)
    error = await expect_legacy(resp, 429)
    assert error["error"] == "Rate limit exceeded"
    assert 1 <= int(resp.headers["Retry-After"]) <= 3600 and resp.headers["X-RateLimit-Remaining"] == "0"
    for _ in range(3):  # another client has its own window; an IPv6 client is counted by its /64
        assert (await client.post("/api/analytics", json={}, headers=bob)).status == 200
    neighbour = forwarded_for("2001:db8:1:2:ffff::9")
    await expect_legacy(await client.post("/api/analytics", json={}, headers=neighbour), 429)
    # A wrong key is just another anonymous caller; the analytics key itself is not limited.
    await expect_legacy(await client.post("/api/analytics", json={}, headers={**alice, "x-api-key": "guess"}), 429)
    for _ in range(5):
        resp = await client.post("/api/analytics", json={}, headers={**alice, **ANALYTICS_KEY})
        assert resp.status == 200 and "X-RateLimit-Limit" not in resp.headers
    resp = await client.get("/api/analytics", headers=ANALYTICS_KEY)
    assert (await resp.json())["data"][0]["hits"] == 11


async def test_a_batch_hit_with_a_malformed_country_or_zone_is_counted_as_unknown(control: TestClient) -> None:
    odd = {**hit("akande/v1/logos/logo.svg"), "country": "DE\n", "zone": "other\n"}
    assert await (await send_batch(control, [odd])).json() == {"recorded": 1, "rejected": 0}
    day = (await report(control))["data"][0]
    assert day["geo"] == {"XX": 1}
    resp = await control.get("/api/insights/summary", params={"zone": "akande"}, headers=ACCOUNT)
    assert (await resp.json())["TotalRequests"] == 1  # the zone comes from the path, not the malformed field
