"""An edge worker that dies (killed by the kernel's OOM killer, a crash) is started again by its edge: before, the
edge went on with one worker fewer until the whole edge was restarted, and nothing said so."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from tests.integration.harness import running, start_cdn, wait_every_worker_ready, wait_gone

pytestmark = pytest.mark.integration


def children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            if ppid == pid:
                found.append(int(entry.name))
    return found


def test_a_killed_edge_worker_is_started_again_by_its_edge(tmp_path: Path) -> None:
    cdn = start_cdn(tmp_path, edges=1, workers=2)
    try:
        [edge] = cdn.pids("--name edge-0")
        # The edge's fork server is its child, and the workers are the fork server's.
        workers = [worker for server in children(edge) for worker in children(server)]
        assert len(workers) == 2, workers
        killed = workers[0]
        os.kill(killed, signal.SIGKILL)
        assert wait_gone({killed}) == set()
        # Both workers answer again, the killed one's index by a new process, and the edge is the same process.
        assert wait_every_worker_ready(cdn.edge_urls[0], 2) == {"edge-0/0", "edge-0/1"}
        assert running({edge}) == {edge}
    finally:
        assert cdn.stop() == 0
    assert "edge-0 exited" not in cdn.log_path.read_text()  # not `up` restarting the whole edge
