"""The test harness's port blocks (tests/integration/harness.py `free_port_block`): a block handed out is reserved
for the process that asked, across processes, until that process is gone or the reservation lapses, so that two
test processes (a run's workers, or a second run beside it) never hand out the same port before its server binds
it."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration import harness


@pytest.fixture
def drawn(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[list[int]]:
    """Bases the harness draws, in order (every port counts as free): the test appends them."""
    bases: list[int] = []
    monkeypatch.setattr(harness, "RESERVED", tmp_path)
    monkeypatch.setattr(harness, "_port_free", lambda port, udp=False: True)
    monkeypatch.setattr(harness.random, "randrange", lambda low, high: bases.pop(0))
    yield bases


def mark(port: int, pid: int, age_s: float = 0.0) -> None:
    path = harness.RESERVED / str(port)
    path.write_text(str(pid))
    then = time.time() - age_s
    os.utime(path, (then, then))


def test_a_block_reserved_by_a_live_process_is_never_handed_out_again(drawn: list[int]) -> None:
    drawn += [20_000, 20_000, 20_002, 20_010]
    assert harness.free_port_block(3) == 20_000
    assert harness.free_port_block(3) == 20_010  # 20,000 and 20,002 (overlapping it) are taken: this process's
    mark(30_000, os.getppid())  # another live process's, fresh
    drawn += [30_000, 30_100]
    assert harness.free_port_block(1) == 30_100


def test_a_reservation_of_a_process_gone_or_past_its_time_lapses(drawn: list[int]) -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    mark(40_000, gone.pid)
    mark(40_100, os.getppid(), age_s=harness.RESERVED_FOR_S + 1)
    drawn += [40_000, 40_100]
    assert (harness.free_port_block(1), harness.free_port_block(1)) == (40_000, 40_100)
    assert (harness.RESERVED / "40000").read_text() == str(os.getpid())
