"""A pull zone's deliveries in control's statistics: the zone holds no stored file (its paths come from its
origin), and its hits and misses are counted under its name, not the bucket of paths that name no zone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from assetcdn.shared.analytics_keys import MAX_PATH_LENGTH
from tests.support.control import ACCOUNT
from tests.support.hit_cdn import HitCdn
from tests.support.origins import LONG, pull_zone_on_hit_cdn
from tests.support.wait import wait_until

pytestmark = pytest.mark.asyncio

ZONE = "counted-pull"
BODY = b"from the origin"


async def summary_of(cdn: HitCdn, requests: int) -> dict[str, Any]:
    """The zone's statistics summary once control counts at least `requests` (the application's answer on a
    connection it holds alone is recorded once its handler is done, a moment after its client has it)."""
    summary: dict[str, Any] = {}

    async def counted() -> bool:
        await cdn.node.deliveries.ship(cdn.node.control, final=True)
        stats = await cdn.control.get(f"/api/core/statistics?days=1&zone={ZONE}", headers=ACCOUNT)
        summary.update((await stats.json())["Summary"])
        return bool(summary["TotalRequests"] >= requests)

    await wait_until(counted, f"{requests} deliveries counted")
    return summary


async def test_a_pull_zones_deliveries_are_counted_under_its_name(tmp_path: Path) -> None:
    async with pull_zone_on_hit_cdn(tmp_path, ZONE) as (cdn, origin):
        origin.answer("/counted.txt", BODY, headers={"Content-Type": "text/plain", **LONG})
        for conn in (await cdn.connect(), await cdn.connect(), await cdn.plain()):  # a miss, then two hits
            resp = await conn.request(f"/{ZONE}/counted.txt")
            assert (resp.status, resp.body) == (200, BODY)
        summary = await summary_of(cdn, 3)
        assert (summary["TotalRequests"], summary["TotalBandwidth"]) == (3, 3 * len(BODY))


async def test_a_pull_zones_path_too_long_to_be_named_is_counted_in_its_errors_and_logged(tmp_path: Path) -> None:
    """A pull zone's paths are its origin's, as long as a request line allows: one longer than control keeps
    under its name is counted in the zone's "other" row and logged cut to that length, so the errors report and
    the request log list its 404 as the zone's statistics count it (control refused both rows before)."""
    long_name = "/" + "a" * (MAX_PATH_LENGTH + 50)
    async with pull_zone_on_hit_cdn(tmp_path, ZONE) as (cdn, _origin):
        for conn in (await cdn.connect(), await cdn.plain()):  # the origin has no such path: 404, on either path
            assert (await conn.request(f"/{ZONE}{long_name}")).status == 404
        summary = await summary_of(cdn, 2)
        errors = await (await cdn.control.get(f"/api/insights/errors?days=1&zone={ZONE}", headers=ACCOUNT)).json()
        paths: list[str] = []

        async def logged() -> bool:  # control writes the request log a moment after it takes a batch
            records = (await (await cdn.control.get("/api/logs?limit=100", headers=ACCOUNT)).json())["records"]
            paths[:] = [record["path"] for record in records if record["code"] == "delivery"]
            return len(paths) == 2

        await wait_until(logged, "both 404s in the request log")
    assert summary["TotalRequests"] == 2
    assert [(group["StatusCode"], group["Count"]) for group in errors["Errors"]] == [(404, 2)]
    assert paths == [f"/{ZONE}{long_name}"[:MAX_PATH_LENGTH + 1]] * 2  # the path cut to what control keeps


async def test_a_path_refused_on_a_pull_zones_own_host_is_counted_in_the_zones_errors(tmp_path: Path) -> None:
    """Every path of a pull zone's own host (its tenant host, a custom domain) is the zone's: one refused before it
    reaches the origin (a dot segment: 400) is counted in the zone's statistics and errors, on either path, as
    its other answers are. It was counted under the zone its first segment happens to name (another tenant's),
    or in the bucket of no zone, and the zone's errors report never showed it."""
    async with pull_zone_on_hit_cdn(tmp_path, ZONE) as (cdn, _origin):
        for conn in (await cdn.connect(), await cdn.plain()):
            answer = await conn.request("/elsewhere/..%2fsecret", host=f"{ZONE}.cdn.localhost")
            assert answer.status == 400
        summary = await summary_of(cdn, 2)
        errors = await (await cdn.control.get(f"/api/insights/errors?days=1&zone={ZONE}", headers=ACCOUNT)).json()
    assert summary["TotalRequests"] == 2
    assert [(group["StatusCode"], group["Count"]) for group in errors["Errors"]] == [(400, 2)]


async def test_a_pull_zone_path_with_encoded_control_characters_is_logged_as_sent(tmp_path: Path) -> None:
    """A pull zone's path with percent-encoded CR, LF or ESC is refused (400) before it reaches the origin: the
    request log and the zone's errors report list that error, with the path as it was sent (still encoded), on the
    default host as on the zone's own host. On the default host the path was logged decoded, with the control
    characters, and control refused such a log entry and count row: a client could keep its requests out of the
    request log and the errors report by adding `%0a` to them."""
    async with pull_zone_on_hit_cdn(tmp_path, ZONE) as (cdn, _origin):
        for conn, target, host in ((await cdn.plain(), f"/{ZONE}/a%0d%0ab%1b[31m.txt", None),
                                   (await cdn.plain(), "/c%0a.txt", f"{ZONE}.cdn.localhost")):
            answer = await conn.request(target, host=host) if host else await conn.request(target)
            assert answer.status == 400
        summary = await summary_of(cdn, 2)
        errors = await (await cdn.control.get(f"/api/insights/errors?days=1&zone={ZONE}", headers=ACCOUNT)).json()
        paths: list[str] = []

        async def logged() -> bool:
            listed = await cdn.control.get("/api/logs?limit=100&level=warn", headers=ACCOUNT)
            records = (await listed.json())["records"]
            paths[:] = [record["path"] for record in records if record["code"] == "delivery"]
            return len(paths) == 2

        await wait_until(logged, "both errors in the request log")
    assert summary["TotalRequests"] == 2
    assert [(group["StatusCode"], group["Count"]) for group in errors["Errors"]] == [(400, 2)]
    assert sorted(paths) == sorted([f"/{ZONE}/a%0d%0ab%1b[31m.txt", f"/{ZONE}/c%0a.txt"])
