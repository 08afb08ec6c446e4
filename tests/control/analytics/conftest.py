"""The control plane of these tests holds the zones their deliveries name: control counts a zone
that does not exist under no zone (assetcdn/control/analytics/zones.py)."""

from __future__ import annotations

import pytest
from aiohttp.test_utils import TestClient

from tests.support.analytics import with_zones


@pytest.fixture
async def control(control: TestClient) -> TestClient:
    return await with_zones(control)
