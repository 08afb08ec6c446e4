"""hls.js in headless Chromium plays our master playlist past 12 seconds (one segment edge)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.browser.headless_chromium import HeadlessChromium

pytestmark = pytest.mark.browser

TARGET_SECONDS = 12
GIVE_UP_MS = 90_000  # the page reports "timeout" after this; the test then fails with it


async def test_master_playlist_plays_past_12_seconds(chromium: str, player_url: str,
                                                     stream_base_url: str,
                                                     tmp_path: Path) -> None:
    master = f"{stream_base_url}?video=nature"
    browser = HeadlessChromium(chromium, tmp_path / "profile")
    try:
        await browser.open(player_url)
        await browser.wait_for("document.readyState === 'complete' && !!window.playHls")
        result = await browser.evaluate(
            f"playHls({json.dumps(master)}, {TARGET_SECONDS}, {GIVE_UP_MS})")
    finally:
        await browser.close()
    if result["status"] == "unsupported":
        pytest.skip(result["reason"])
    assert result["status"] == "played", result
    assert result["currentTime"] > TARGET_SECONDS
    # The 14 s clip is 720p, so its 1080 rendition is 720p too (no upscaling); hls.js
    # folds identical variants into one level.
    assert {level["height"] for level in result["levels"]} == {480, 720}, result
    assert {sn for _, sn in result["fragments"]} >= {0, 1}  # crossed into the second segment
