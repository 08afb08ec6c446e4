"""The control plane of these tests holds the zones their deliveries name: control counts a zone
that does not exist under no zone (assetcdn/control/analytics/zones.py)."""

from __future__ import annotations

import pytest
from aiohttp.test_utils import TestClient

from tests.support.control import ACCOUNT

ZONES = ("akande", "bolt")


async def with_zones(control: TestClient) -> TestClient:
    for name in ZONES:
        resp = await control.post("/api/core/zones", json={"Name": name}, headers=ACCOUNT)
        assert resp.status == 201, await resp.text()
    return control


@pytest.fixture
async def control(control: TestClient) -> TestClient:
    return await with_zones(control)
