"""A pull zone's deliveries in control's statistics: the zone holds no stored file (its paths come from its
origin), and its hits and misses are counted under its name, not the bucket of paths that name no zone."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.control import ACCOUNT
from tests.support.origins import LONG, pull_zone_on_hit_cdn

pytestmark = pytest.mark.asyncio

ZONE = "counted-pull"
BODY = b"from the origin"


async def test_a_pull_zones_deliveries_are_counted_under_its_name(tmp_path: Path) -> None:
    async with pull_zone_on_hit_cdn(tmp_path, ZONE) as (cdn, origin):
        origin.answer("/counted.txt", BODY, headers={"Content-Type": "text/plain", **LONG})
        for conn in (await cdn.connect(), await cdn.connect(), await cdn.plain()):  # a miss, then two hits
            resp = await conn.request(f"/{ZONE}/counted.txt")
            assert (resp.status, resp.body) == (200, BODY)
        await cdn.node.deliveries.ship(cdn.node.control, final=True)
        stats = await cdn.control.get(f"/api/core/statistics?days=1&zone={ZONE}", headers=ACCOUNT)
        summary = (await stats.json())["Summary"]
        assert (summary["TotalRequests"], summary["TotalBandwidth"]) == (3, 3 * len(BODY))
