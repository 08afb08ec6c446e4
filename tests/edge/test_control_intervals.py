"""The intervals of an edge's calls to control (`[edge] catchup_interval_s`, `heartbeat_interval_s`,
`control_retry_s`) stop the edge as it starts when no wait could come of them: before, `catchup_interval_s = 0`
started an edge whose every worker asked control for changes without pause (some 1,600 catch-ups a second from one
worker, a core of the edge's and one of control's)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from assetcdn.edge.server import EXIT_BAD_CONFIG
from assetcdn.shared.config import load_settings
from assetcdn.shared.pull_settings import check_control_intervals
from tests.integration.harness import KEYS, free_port_block


@pytest.mark.parametrize(("key", "value"), [("catchup_interval_s", "0"), ("catchup_interval_s", "inf"),
                                            ("heartbeat_interval_s", "-1"), ("control_retry_s", "0"),
                                            ("control_retry_s", "nan")])
def test_an_interval_no_wait_could_come_of_is_named(key: str, value: str) -> None:
    with pytest.raises(ValueError, match=rf"\[edge\] {key} must be"):
        check_control_intervals(load_settings(environ={f"ASSETCDN_EDGE_{key.upper()}": value}))


def test_the_shipped_intervals_and_short_ones_pass() -> None:
    check_control_intervals(load_settings(environ={}))
    check_control_intervals(load_settings(environ={"ASSETCDN_EDGE_CATCHUP_INTERVAL_S": "0.05",
                                                   "ASSETCDN_EDGE_CONTROL_RETRY_S": "0.01"}))


def test_an_edge_does_not_start_with_a_catch_up_interval_of_0(tmp_path: Path) -> None:
    port = free_port_block(1)
    env = {**KEYS, "PATH": "/usr/bin:/bin", "ASSETCDN_EDGE_CATCHUP_INTERVAL_S": "0"}
    done = subprocess.run([sys.executable, "-m", "assetcdn.edge", "--control-url", "http://127.0.0.1:9",
                           "--port", str(port), "--data-dir", str(tmp_path / "data")],
                          env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == EXIT_BAD_CONFIG, done.stderr
    assert "[edge] catchup_interval_s must be above 0 seconds" in done.stderr
