"""The demo content of a first `assetcdn up`, as `make run` makes it: `up` says it is up once the chat
is ready, Ctrl-C while the demo videos are still being made stops everything at once and quietly, the
next start finishes the videos, and control's health says when they are streamable."""

from __future__ import annotations

import json
import signal
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from assetcdn.shared.hls import VIDEOS
from assetcdn.shared.process import EXIT_DEADLINE_S
from tests.integration.harness import RunningCdn, start_cdn

pytestmark = pytest.mark.integration
SMALL_DEMO_VIDEOS = {"ASSETCDN_DEMO_VIDEO_HEIGHT": "180"}


def control_health(cdn: RunningCdn) -> dict[str, object]:
    with urllib.request.urlopen(f"{cdn.control_url}/api/health", timeout=10) as resp:  # noqa: S310 (loopback)
        return dict(json.loads(resp.read()))


def stream_status(cdn: RunningCdn, video: str) -> int:
    try:
        with urllib.request.urlopen(f"{cdn.edge_urls[0]}/api/stream?video={video}", timeout=10) as resp:  # noqa: S310
            resp.read()
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        exc.close()
        return exc.code


def test_ctrl_c_while_the_demo_videos_are_made_stops_at_once_and_the_next_start_finishes_them(tmp_path: Path) -> None:
    # Without the sentence model to load, `up` is up within a few seconds, while the 1080p videos take longer: under
    # load the model's loading outlasted the videos (they were ready before Ctrl-C, and nothing was interrupted).
    cdn = start_cdn(tmp_path, demo=True)
    try:
        health = control_health(cdn)
        assert health["demoVideos"] == "making"
        assert stream_status(cdn, "nature") == 404
        logged = cdn.log_path.stat().st_size
        cdn.process.send_signal(signal.SIGINT)   # what Ctrl-C sends `make run`'s foreground process
        started = time.monotonic()
        status = cdn.process.wait(timeout=60)
        took = time.monotonic() - started
    finally:
        if cdn.process.poll() is None:
            cdn.stop()
    output = cdn.log_path.read_bytes()[logged:].decode(errors="replace")
    assert status == 0, output
    # Control used to wait out its whole exit deadline for the video thread, then dump every thread's stack.
    assert took < EXIT_DEADLINE_S, (took, output)
    for sign in ("Traceback", "ERROR", "Thread 0x", "Current thread"):
        assert sign not in output, output

    # Started again (no longer a first start, so no --demo): the videos are finished and published. Those
    # left half made are made again, here at the smallest size: what they are made at is not under test.
    cdn = start_cdn(tmp_path, demo=True, semantic_search=True, env_extra=SMALL_DEMO_VIDEOS)
    try:
        health = control_health(cdn)
        assert health["chat"] == "ready"   # `up` says it is up once the first question is answered at once
        state = health.get("demoVideos")
        assert state in ("making", "ready")
        deadline = time.monotonic() + 600
        while state == "making" and time.monotonic() < deadline:
            time.sleep(0.5)
            state = control_health(cdn).get("demoVideos")
        assert state == "ready"
        for video in VIDEOS:   # ready means streamable through the edge
            for _ in range(100):
                if stream_status(cdn, video) == 200:
                    break
                time.sleep(0.1)
            assert stream_status(cdn, video) == 200, video
    finally:
        assert cdn.stop() == 0
