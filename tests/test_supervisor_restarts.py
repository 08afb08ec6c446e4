"""`assetcdn up` restarts a child that dies, and gives up on a crash loop: five restarts within a minute, then the
next exit stops everything (docs/operations.md), saying how many restarts it made."""

from __future__ import annotations

import os

import pytest

from assetcdn import supervisor


def test_a_crash_loop_is_restarted_five_times_then_stops_up_naming_the_restarts_made(
        capsys: pytest.CaptureFixture[str]) -> None:
    crash = ["-c", "raise SystemExit(1)"]
    env = dict(os.environ)
    processes = [supervisor._spawn(crash, env)]
    status = supervisor._supervise(processes, [crash], ["edge-0"], [[]], "127.0.0.1", [env], supervisor._StopRequest())
    said = capsys.readouterr().err
    assert status == 1
    assert said.count("edge-0 exited with status 1; restarting") == supervisor.MAX_RESTARTS
    # It said "6 restarts in 60s" after the five it made (the sixth exit was not restarted).
    assert f"{supervisor.MAX_RESTARTS} restarts" in said.splitlines()[-1], said
    assert said.splitlines()[-1].endswith("; stopping"), said
