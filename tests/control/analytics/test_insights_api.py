"""Statistics and insights report exactly the hits the edges shipped: GET /api/core/statistics
(AccountKey) and GET /api/insights/* (AccountKey, AccessKey, or a Bearer token with insights:read)."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

import jsonschema_rs
import pytest
from aiohttp.test_utils import TestClient

from tests.control.expect import expect_error, parse_time
from tests.support.analytics import ANALYTICS_KEY, hit, send_batch
from tests.support.control import ACCESS, ACCOUNT, SECRETS

LOGO = "akande/v1/logos/logo.svg"
ICON = "akande/v1/icons/icon-192x192.png"
OTHER = "bolt/v1/logos/bolt.svg"
DAY_S = 86400


def day(offset: int) -> str:
    return (datetime.now(UTC).date() - timedelta(days=offset)).isoformat()


@pytest.fixture
async def traffic(control: TestClient) -> None:
    """12 hits: 10 today, 2 three days ago; akande 9, bolt 3."""
    now = time.time()
    three_days_ago = now - 3 * DAY_S
    hits = [
        *[hit(LOGO, size=1000, cache="HIT", country="US") for _ in range(4)],
        hit(LOGO, size=1000, cache="MISS", country="DE"),
        hit(LOGO, size=1000, cache="STALE", country="US", timestamp=three_days_ago),
        hit(ICON, size=500, cache="MISS", country="FR"),
        hit(ICON, size=0, status=404, cache="BYPASS", country="XX"),
        hit(ICON, size=0, status=404, cache="BYPASS", country="US", timestamp=three_days_ago),
        hit(OTHER, size=200, cache="HIT", country="DE"),
        hit(OTHER, size=0, status=500, cache="MISS", country="DE"),
        hit("bolt/v1/logos/gone.svg", size=0, status=404, cache="MISS", country="JP"),
    ]
    resp = await send_batch(control, hits)
    assert (await resp.json())["recorded"] == 12


async def get(control: TestClient, endpoint: str, headers: dict[str, str] = ACCOUNT, **params: Any) -> dict[str, Any]:
    resp = await control.get(endpoint, params={k: str(v) for k, v in params.items()}, headers=headers)
    assert resp.status == 200, await resp.text()
    body = await resp.json()
    parse_time(body.pop("DateFetched"))
    return body


@pytest.mark.usefixtures("traffic")
async def test_statistics_counts_exactly_what_was_served(control: TestClient) -> None:
    body = await get(control, "/api/core/statistics")
    assert body["Period"] == {"Days": 7, "Zone": "all"}
    assert body["Summary"] == {"TotalRequests": 12, "TotalBandwidth": 6700, "TotalBandwidthHuman": "6.5 KB",
                               "CacheHitRate": "50.0%", "UniqueCountries": 4}
    daily = {d["Date"]: d for d in body["Daily"]}
    assert len(body["Daily"]) == 7 and body["Daily"][0]["Date"] == day(0)  # newest first
    assert daily[day(0)] | {"BandwidthHuman": None} == {"Date": day(0), "TotalRequests": 10, "Bandwidth": 5700,
                                                        "BandwidthHuman": None, "CacheHit": 5, "CacheMiss": 5}
    assert (daily[day(3)]["TotalRequests"], daily[day(3)]["CacheHit"], daily[day(3)]["CacheMiss"]) == (2, 1, 1)
    assert sum(d["TotalRequests"] for d in body["Daily"]) == 12
    # Deliveries only: ICON's two 404s, OTHER's 500 and gone.svg's 404 are not asset deliveries.
    assert body["TopAssets"] == [{"Path": "/" + LOGO, "Requests": 6}, {"Path": "/" + ICON, "Requests": 1},
                                 {"Path": "/" + OTHER, "Requests": 1}]
    assert body["GeoDistribution"] == [{"CountryCode": "US", "Requests": 6}, {"CountryCode": "DE", "Requests": 3},
                                       {"CountryCode": "FR", "Requests": 1}, {"CountryCode": "JP", "Requests": 1},
                                       {"CountryCode": "XX", "Requests": 1}]


@pytest.mark.usefixtures("traffic")
async def test_days_and_zone_filters(control: TestClient) -> None:
    one_day = await get(control, "/api/core/statistics", days=1)
    assert one_day["Period"]["Days"] == 1 and one_day["Summary"]["TotalRequests"] == 10
    bolt = await get(control, "/api/core/statistics", zone="bolt")
    assert bolt["Period"] == {"Days": 7, "Zone": "bolt"}
    assert bolt["Summary"]["TotalRequests"] == 3
    summary = await get(control, "/api/insights/summary", zone="akande", days=2)
    assert summary == {"Period": {"Days": 2, "Zone": "akande"}, "TotalRequests": 7, "TotalBandwidth": "5.4 KB",
                       "TotalBandwidthBytes": 5500, "CacheHitRate": "57.1%", "UniqueCountries": 3}
    clamped = await get(control, "/api/insights/summary", days=365)
    assert clamped["Period"] == {"Days": 90, "Zone": "all"} and clamped["TotalRequests"] == 12
    await expect_error(await control.get("/api/insights/summary", params={"zone": "../etc"}, headers=ACCOUNT),
                       400, "InvalidParameter")
    await expect_error(await control.get("/api/insights/summary", params={"zone": "bolt\n"}, headers=ACCOUNT),
                       400, "InvalidParameter")


@pytest.mark.usefixtures("traffic")
async def test_top_assets_geography_and_errors(control: TestClient) -> None:
    top = await get(control, "/api/insights/top-assets", limit=2)
    assert top == {"Period": {"Days": 7}, "Assets": [{"Path": "/" + LOGO, "Requests": 6},
                                                     {"Path": "/" + ICON, "Requests": 1}]}
    assert (await get(control, "/api/insights/top-assets", zone="bolt"))["Assets"] == [
        {"Path": "/" + OTHER, "Requests": 1}]
    geography = await get(control, "/api/insights/geography", zone="bolt")
    assert geography == {"Period": {"Days": 7}, "Countries": [{"CountryCode": "DE", "Requests": 2},
                                                              {"CountryCode": "JP", "Requests": 1}]}
    errors = await get(control, "/api/insights/errors")
    assert errors == {"Period": {"Days": 7}, "Errors": [
        {"StatusCode": 404, "Count": 3, "TopPaths": [{"Path": "/" + ICON, "Count": 2},
                                                     {"Path": "/bolt/v1/logos/gone.svg", "Count": 1}]},
        {"StatusCode": 500, "Count": 1, "TopPaths": [{"Path": "/" + OTHER, "Count": 1}]},
    ]}
    quiet = await get(control, "/api/insights/errors", zone="nobody")
    assert quiet["Errors"] == [] and quiet["Note"]


@pytest.mark.usefixtures("traffic")
async def test_asset_report_accepts_either_path_form(control: TestClient) -> None:
    body = await get(control, "/api/insights/asset", path="/" + ICON)
    assert body["Path"] == "/" + ICON and body["Period"] == {"Days": 7}
    assert (body["TotalRequests"], body["Errors"]) == (3, {"404": 2})
    daily = {d["Date"]: d for d in body["Daily"]}
    assert daily[day(0)] == {"Date": day(0), "Requests": 2, "Errors": {"404": 1}}
    assert daily[day(3)] == {"Date": day(3), "Requests": 1, "Errors": {"404": 1}}
    assert await get(control, "/api/insights/asset", path=ICON) == body


@pytest.mark.parametrize(("params", "code"), [
    ({}, "MissingPath"), ({"path": ""}, "MissingPath"), ({"path": "/"}, "MissingPath"),
    ({"path": "/a" * 1100}, "PathTooLong"), ({"path": "/akande/../x"}, "InvalidPath"),
])
async def test_asset_report_bad_paths_are_400(control: TestClient, params: dict[str, str], code: str) -> None:
    await expect_error(await control.get("/api/insights/asset", params=params, headers=ACCOUNT), 400, code)


async def test_no_traffic_reports_zeros(control: TestClient) -> None:
    body = await get(control, "/api/core/statistics")
    assert body["Summary"]["TotalRequests"] == 0 and body["Summary"]["CacheHitRate"] == "0.0%"
    assert body["TopAssets"] == [] and body["GeoDistribution"] == []


INSIGHTS = ["/api/insights/summary", "/api/insights/top-assets", "/api/insights/geography",
            "/api/insights/errors", "/api/insights/asset?path=/a"]


@pytest.mark.parametrize("path", INSIGHTS)
async def test_insights_accept_account_access_and_scoped_tokens(control: TestClient, path: str) -> None:
    for headers in (ACCOUNT, ACCESS):
        assert (await control.get(path, headers=headers)).status == 200
    await expect_error(await control.get(path), 401, "Unauthorized")
    resp = await control.post("/api/tokens", json={"name": "dash", "scopes": ["insights:read"]}, headers=ACCOUNT)
    token = (await resp.json())["token"]
    assert (await control.get(path, headers={"Authorization": f"Bearer {token}"})).status == 200
    resp = await control.post("/api/tokens", json={"name": "ci", "scopes": ["assets:read"]}, headers=ACCOUNT)
    other = (await resp.json())["token"]
    await expect_error(await control.get(path, headers={"Authorization": f"Bearer {other}"}), 401, "Unauthorized")


async def test_statistics_is_account_key_only(control: TestClient) -> None:
    await expect_error(await control.get("/api/core/statistics", headers=ACCESS), 401, "Unauthorized")
    await expect_error(await control.get("/api/core/statistics"), 401, "Unauthorized")


async def test_top_assets_count_asset_deliveries_only(control: TestClient) -> None:
    hits = [hit("api/transform", zone=""), hit("api/stream", zone=""), hit("api/transform", zone=""),
            hit("akande/v1/logos/probe.php", status=404), hit("akande/v1/logos/probe.php", status=404),
            hit(LOGO, status=304), hit(LOGO, status=301)]
    assert (await (await send_batch(control, hits)).json())["recorded"] == len(hits)
    expected = [{"Path": "/" + LOGO, "Requests": 1}]
    assert (await get(control, "/api/insights/top-assets"))["Assets"] == expected
    statistics = await get(control, "/api/core/statistics")
    assert statistics["TopAssets"] == expected and statistics["Summary"]["TotalRequests"] == len(hits)
    resp = await control.get("/api/analytics", headers={"x-api-key": SECRETS.analytics_key})
    assert (await resp.json())["data"][0]["top_assets"] == {"/" + LOGO: 1}


async def test_daily_lists_are_newest_first_everywhere(control: TestClient) -> None:
    await send_batch(control, [hit(LOGO, timestamp=time.time() - 2 * DAY_S), hit(LOGO)])
    newest_first = [day(n) for n in range(7)]
    assert [d["Date"] for d in (await get(control, "/api/core/statistics"))["Daily"]] == newest_first
    assert [d["Date"] for d in (await get(control, "/api/insights/asset", path=LOGO))["Daily"]] == newest_first
    resp = await control.get("/api/analytics", headers={"x-api-key": SECRETS.analytics_key})
    assert [d["date"] for d in (await resp.json())["data"]] == newest_first


@pytest.mark.parametrize("path", ["/api/core/statistics", "/api/insights/summary", "/api/insights/top-assets",
                                  "/api/insights/geography", "/api/insights/errors"])
async def test_the_served_reference_lists_the_zone_filter_of_every_report_that_takes_it(
        control: TestClient, path: str) -> None:
    # Each of these routes filters by `zone` (test_days_and_zone_filters, test_top_assets_geography_and_errors) and
    # refuses a malformed one; a client made from /api/openapi.json knows of the filter only from the document.
    await expect_error(await control.get(path, params={"zone": "../etc"}, headers=ACCOUNT), 400, "InvalidParameter")
    reference = await (await control.get("/api/openapi.json")).json()
    for method in ("get", "head"):
        names = {p["name"] for p in reference["paths"][path][method].get("parameters", []) if p["in"] == "query"}
        assert {"days", "zone"} <= names, (method, names)


@pytest.mark.usefixtures("traffic")
@pytest.mark.parametrize(("path", "params", "headers"), [
    ("/api/core/statistics", {}, ACCOUNT),
    ("/api/insights/summary", {"zone": "akande"}, ACCOUNT),
    ("/api/insights/top-assets", {}, ACCESS),
    ("/api/insights/geography", {}, ACCESS),
    ("/api/insights/errors", {}, ACCESS),
    ("/api/insights/asset", {"path": "/" + ICON}, ACCESS),
    ("/api/analytics", {"days": "2"}, ANALYTICS_KEY),
])
async def test_every_report_is_answered_as_the_served_reference_describes_it(
        control: TestClient, path: str, params: dict[str, str], headers: dict[str, str]) -> None:
    """The document names each report's fields, so a client made from it can read them: the answer holds to its
    schema, and every field answered is one the schema names as required."""
    resp = await control.get(path, params=params, headers=headers)
    assert resp.status == 200, await resp.text()
    answer = await resp.json()
    reference = await (await control.get("/api/openapi.json")).json()
    schema = reference["paths"][path]["get"]["responses"]["200"]["content"]["application/json"]["schema"]
    validator = jsonschema_rs.Draft202012Validator({**schema, "components": reference["components"]},
                                                   validate_formats=True)
    assert [error.message for error in validator.iter_errors(answer)] == []
    named = reference["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
    assert set(answer) == set(named["required"]) == set(named["properties"]) - {"Note"}
