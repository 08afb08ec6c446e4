"""What the edges send control's analytics (signed batches of hits) and what tests read back: the request log's
pages, and the zones the deliveries name (control counts a zone that does not exist under no zone,
assetcdn/control/analytics/zones.py)."""

from __future__ import annotations

import time
from typing import Any

import orjson
from aiohttp import ClientResponse
from aiohttp.test_utils import TestClient

from assetcdn.shared.cluster import PREFIX, sign_request
from tests.support.control import ACCOUNT, SECRETS

ANALYTICS_KEY = {"x-api-key": SECRETS.analytics_key}
BATCH_PATH = PREFIX + "/analytics"


def hit(path: str, *, status: int = 200, size: int = 100, cache: str = "HIT", country: str = "US",
        timestamp: float | None = None, zone: str | None = None) -> dict[str, Any]:
    return {"timestamp": time.time() if timestamp is None else timestamp, "path": path,
            "zone": zone or path.split("/", 1)[0], "status": status, "bytes": size, "cache": cache,
            "country": country}


async def send_batch(control: TestClient, hits: list[Any], **extra: Any) -> ClientResponse:
    body = orjson.dumps({"v": 1, "hits": hits, **extra})
    headers = {**sign_request(SECRETS.cluster_secret, "POST", BATCH_PATH, body), "Content-Type": "application/json"}
    return await control.post(BATCH_PATH, data=body, headers=headers)


async def send_v2(control: TestClient, batch: dict[str, Any]) -> ClientResponse:
    body = orjson.dumps(batch)
    headers = {**sign_request(SECRETS.cluster_secret, "POST", BATCH_PATH, body), "Content-Type": "application/json"}
    return await control.post(BATCH_PATH, data=body, headers=headers)


async def page(control: TestClient, **params: Any) -> dict[str, Any]:
    resp = await control.get("/api/logs", params={k: str(v) for k, v in params.items()}, headers=ACCOUNT)
    assert resp.status == 200, await resp.text()
    body = await resp.json()
    assert set(body) == {"records", "count", "cursor"} and body["count"] == len(body["records"])
    return body


ZONES = ("akande", "bolt")


async def with_zones(control: TestClient) -> TestClient:
    for name in ZONES:
        resp = await control.post("/api/core/zones", json={"Name": name}, headers=ACCOUNT)
        assert resp.status == 201, await resp.text()
    return control
