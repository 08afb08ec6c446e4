"""POST /api/purge while another process holds control.sqlite3's write lock (a backup, a `sqlite3` shell): the
client gets the purge or a clean 503 with Retry-After, never a 500, and the day's quota counts exactly the purges
that were made (docs/api-guide.md, POST /api/purge)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient

from assetcdn.control.app import create_app
from assetcdn.control.storage.service import MANIFEST
from assetcdn.shared.config import load_settings
from tests.support.control import NO_MODEL, SECRETS, write_lock_taken

PURGE = {"x-api-key": SECRETS.purge_key}
BUSY_TIMEOUT_MS = 200


@pytest.fixture
async def control(aiohttp_client, data_dir: Path) -> TestClient:  # type: ignore[no-untyped-def]
    settings = load_settings(environ={**NO_MODEL, "ASSETCDN_PURGE_DAILY_LIMIT": "2",
                                      "ASSETCDN_CONTROL_SQLITE_BUSY_TIMEOUT_MS": str(BUSY_TIMEOUT_MS)})
    return await aiohttp_client(create_app(settings, SECRETS, data_dir))


async def test_a_purge_whose_lock_is_held_past_the_bound_is_a_503_that_uses_no_quota(
        control: TestClient, data_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    before = control.app[MANIFEST].generation
    with caplog.at_level(logging.WARNING):
        async with write_lock_taken(data_dir / "control.sqlite3"):
            resp = await control.post("/api/purge", json={"tags": ["project-a"]}, headers=PURGE)
            body = await resp.json()
            assert resp.status == 503, body
    assert isinstance(body["error"], str) and body["HttpCode"] == 503 and body["requestId"]  # the legacy envelope
    assert resp.headers["Retry-After"] == "1"
    assert control.app[MANIFEST].generation == before  # nothing was recorded, so nothing reaches the edges
    # Said in a line naming the file and the bound, not as an unhandled error with its traceback.
    lines = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert (logging.WARNING, "control.sqlite3: another process held the write lock past the busy timeout "
            f"({BUSY_TIMEOUT_MS} ms); answering 503 DatabaseBusy") in lines, lines
    assert not any(message.startswith("unhandled error") for _, message in lines), lines
    # The refused purge used none of the day's two.
    for remaining in (1, 0):
        resp = await control.post("/api/purge", json={"tags": ["project-a"]}, headers=PURGE)
        assert resp.status == 200, await resp.text()
        assert (await resp.json())["remaining_today"] == remaining
