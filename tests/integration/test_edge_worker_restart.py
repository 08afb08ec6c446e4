"""An edge worker that dies (killed by the kernel's OOM killer, a crash) is started again by its edge: before, the
edge went on with one worker fewer until the whole edge was restarted, and nothing said so."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from assetcdn.edge.server import WORKER_MAX_RESTARTS
from tests.integration.harness import (
    KEYS,
    METRICS,
    child_processes,
    free_port_block,
    running,
    start_cdn,
    wait_every_worker_ready,
    wait_gone,
)
from tests.support.wait import WAIT_S

pytestmark = pytest.mark.integration


def workers_of(edge: int) -> list[int]:
    """The worker processes of the edge process `edge`: its fork server (its child)'s children."""
    children = child_processes()
    return [worker for server in children.get(edge, []) for worker in children.get(server, [])]


def test_a_killed_edge_worker_is_started_again_by_its_edge(tmp_path: Path) -> None:
    cdn = start_cdn(tmp_path, edges=1, workers=2)
    try:
        [edge] = cdn.pids("--name edge-0")
        workers = workers_of(edge)
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


def spool_bytes_held(edge_url: str) -> float:
    """`assetcdn_edge_body_spool_bytes` on the edge's /metrics (any worker reports the node)."""
    with urllib.request.urlopen(urllib.request.Request(f"{edge_url}/metrics", headers=METRICS), timeout=20) as resp:
        text = resp.read().decode()
    return sum(sample.value for family in text_string_to_metric_families(text) for sample in family.samples
               if sample.name == "assetcdn_edge_body_spool_bytes")


def test_a_killed_workers_held_space_leaves_the_nodes_metrics(tmp_path: Path) -> None:
    """`assetcdn_edge_body_spool_bytes` is what the node's workers hold now: a worker killed while it held a forwarded
    body's temporary space (the OOM killer in the middle of an upload) took that space with it. Its share stayed in
    the sum until the whole edge was restarted, a node that held nothing reporting it for good."""
    cdn = start_cdn(tmp_path, edges=1, workers=2)
    try:
        [edge] = cdn.pids("--name edge-0")
        host, port = cdn.edge_urls[0].removeprefix("http://").rsplit(":", 1)
        upload = socket.create_connection((host, int(port)))
        try:  # an upload under way, past what a forwarded body may hold in memory (256 KB): it holds a temporary file
            upload.sendall(b"PUT /api/storage/demo/big.bin HTTP/1.1\r\nHost: x\r\nContent-Length: 8000000\r\n\r\n"
                           + b"x" * 1_000_000)
            deadline = time.monotonic() + 6 * WAIT_S
            while spool_bytes_held(cdn.edge_urls[0]) == 0:
                assert time.monotonic() < deadline, "the upload never held temporary space"
                time.sleep(0.05)  # another process's count, reported once a second: polled
            workers = workers_of(edge)
            for worker in workers:  # the one receiving the upload among them
                os.kill(worker, signal.SIGKILL)
            assert wait_gone(set(workers)) == set()
        finally:
            upload.close()
        assert wait_every_worker_ready(cdn.edge_urls[0], 2) == {"edge-0/0", "edge-0/1"}
        assert spool_bytes_held(cdn.edge_urls[0]) == 0
    finally:
        assert cdn.stop() == 0


def test_an_edge_whose_workers_keep_dying_stops_with_status_1(tmp_path: Path) -> None:
    """Past WORKER_MAX_RESTARTS within a minute the edge stops, and says it failed: a crash loop of killed workers
    ended with status 0 (their statuses are negative), which a service manager restarting on failure takes for a
    clean stop."""
    port = free_port_block(1)
    env = {**KEYS, "PATH": "/usr/bin:/bin", "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    log = tmp_path / "edge.log"
    with log.open("wb") as output:
        edge = subprocess.Popen([sys.executable, "-m", "assetcdn.edge", "--control-url", "http://127.0.0.1:9",
                                 "--port", str(port), "--workers", "2", "--data-dir", str(tmp_path / "data")],
                                env=env, stdout=output, stderr=output)
    try:
        killed: set[int] = set()
        deadline = time.monotonic() + 6 * WAIT_S
        while edge.poll() is None and time.monotonic() < deadline:
            alive = [worker for worker in workers_of(edge.pid) if worker not in killed]
            if not alive:
                time.sleep(0.05)  # the edge starting a worker again: another process's event, polled
                continue
            with contextlib.suppress(ProcessLookupError):  # gone since it was listed: the edge stopping its workers
                os.kill(alive[0], signal.SIGKILL)
            killed.add(alive[0])
        status = edge.wait(timeout=WAIT_S)
    finally:
        if edge.poll() is None:
            edge.kill()
            edge.wait()
    said = log.read_text()
    assert status == 1, said
    assert said.count("starting it again") == WORKER_MAX_RESTARTS, said
    assert f"{WORKER_MAX_RESTARTS + 1} exits within 60 s: stopping" in said, said
