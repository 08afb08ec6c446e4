"""POST /api/purge on control: auth, the daily quota (429 with Retry-After), what a purge reports."""

from __future__ import annotations

from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient

from assetcdn.control.app import create_app
from assetcdn.shared.config import load_settings
from tests.control.conftest import ACCOUNT, SECRETS

PURGE = {"x-api-key": SECRETS.purge_key}


@pytest.fixture
async def control_two_purges(aiohttp_client, tmp_path: Path) -> TestClient:  # type: ignore[no-untyped-def]
    settings = load_settings(environ={"ASSETCDN_PURGE_DAILY_LIMIT": "2"})
    return await aiohttp_client(create_app(settings, SECRETS, tmp_path / "data"))


async def test_the_daily_quota_counts_accepted_purges_only(control_two_purges: TestClient) -> None:
    control = control_two_purges
    resp = await control.post("/api/purge", json={"tags": ["bad tag"]}, headers=PURGE)
    assert resp.status == 400  # refused requests do not use the quota
    first = await control.post("/api/purge", json={"tags": ["project-a"]}, headers=PURGE)
    assert first.status == 200
    body = await first.json()
    assert (body["success"], body["purged"], body["remaining_today"]) == (True, ["project-a"], 1)
    assert body["edges"] == {"total": 0, "acknowledged": [], "pending": [], "elapsedMs": 0.0, "entriesRemoved": {},
                            "latencyMs": {}}
    assert first.headers["X-RateLimit-Remaining"] == "1"
    second = await control.post("/api/purge", json={"purge_everything": True}, headers=PURGE)
    assert second.status == 200 and (await second.json())["remaining_today"] == 0
    third = await control.post("/api/purge", json={"urls": ["/a/v1/logos/x.svg"]}, headers=PURGE)
    assert third.status == 429
    body = await third.json()
    assert body["error"] == "Rate limit exceeded: max 2 purges per day"
    assert body["HttpCode"] == 429 and body["requestId"]
    assert 0 < int(third.headers["Retry-After"]) <= 86400
    assert third.headers["X-RateLimit-Remaining"] == "0"


async def test_a_purge_write_token_may_purge_and_other_keys_may_not(control: TestClient) -> None:
    resp = await control.post("/api/tokens", json={"name": "ci", "scopes": ["purge:write"]}, headers=ACCOUNT)
    token = (await resp.json())["token"]
    resp = await control.post("/api/purge", json={"tags": ["all-assets"]},
                              headers={"Authorization": f"Bearer {token}"})
    assert resp.status == 200
    for headers in ({"x-api-key": SECRETS.analytics_key}, ACCOUNT, {}):
        resp = await control.post("/api/purge", json={"tags": ["all-assets"]}, headers=headers)
        assert resp.status == 401
        assert isinstance((await resp.json())["error"], str)  # the legacy envelope


async def test_an_oversize_purge_body_is_413_in_the_legacy_envelope(control: TestClient) -> None:
    resp = await control.post("/api/purge", data=b'{"tags": [' + b'"a",' * 20000 + b'"a"]}', headers=PURGE)
    body = await resp.json()
    assert resp.status == 413
    assert isinstance(body["error"], str) and body["HttpCode"] == 413 and body["Message"] == body["error"]
