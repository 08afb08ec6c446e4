"""A fixed `[edge] cluster_port` (or a port of its range) that another program holds is named, with the setting that
moves it, on one line: before, `assetcdn up --check-ports` did not look at it, `assetcdn up` said only "edge-0 exited
early with status 1", and the edge's worker stopped with a Python traceback (`OSError: address already in use`)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from assetcdn.shared.process import EXIT_CANNOT_LISTEN
from tests.integration.harness import KEYS, free_port_block

ROOT = Path(__file__).resolve().parents[1]
SETTING = "ASSETCDN_EDGE_CLUSTER_PORT ([edge] cluster_port)"


@pytest.fixture
def ports() -> Iterator[tuple[int, int]]:
    """(the first cluster port, the one another program holds: worker 1's of the first edge)."""
    base = free_port_block(8)
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", base + 4))
        holder.listen()
        yield base + 3, base + 4


def run_up(tmp_path: Path, cluster_port: int, *extra: str) -> subprocess.CompletedProcess[str]:
    base = cluster_port - 3  # the block's first three ports: edge, control, dashboard
    env = {**KEYS, "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(ROOT),
           "ASSETCDN_EDGE_CLUSTER_PORT": str(cluster_port), "ASSETCDN_TLS_HTTPS_PORT": "0"}
    return subprocess.run([sys.executable, "-m", "assetcdn.cli", "up", "--host", "127.0.0.1", "--edge-port", str(base),
                           "--control-port", str(base + 1), "--dashboard-port", str(base + 2), "--workers", "2",
                           "--data-dir", str(tmp_path / "data"), "--no-demo", *extra],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False)


def test_check_ports_names_a_cluster_port_that_is_taken(tmp_path: Path, ports: tuple[int, int]) -> None:
    first, taken = ports
    result = run_up(tmp_path, first, "--check-ports")
    assert result.returncode == 1, result.stderr
    assert (f"edge-0/1 cluster port {taken} on 127.0.0.1 is already in use; choose another with {SETTING}"
            in result.stderr), result.stderr
    assert f"cluster port {first} " not in result.stderr  # worker 0's is free
    assert not (tmp_path / "data").exists()  # nothing written, nothing started


def test_up_names_a_cluster_port_that_is_taken_before_it_starts_anything(tmp_path: Path,
                                                                         ports: tuple[int, int]) -> None:
    first, taken = ports
    result = run_up(tmp_path, first)
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    assert f"edge-0/1 cluster port {taken} on 127.0.0.1 is already in use; choose another with {SETTING}" in output
    assert "exited early" not in output and "Traceback" not in output, output
    assert "assetcdn is up" not in output


def test_an_edge_worker_names_the_cluster_port_it_cannot_listen_on(tmp_path: Path, ports: tuple[int, int]) -> None:
    """The edge run by itself (deploy/compose.yaml, or a port taken between `up`'s check and the worker's start): the
    worker that cannot listen says so on one line and the edge stops, status EXIT_CANNOT_LISTEN; its other worker
    does not go on serving alone (before, the edge kept running with one worker short)."""
    first, taken = ports
    env = {**KEYS, "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(ROOT),
           "ASSETCDN_EDGE_CLUSTER_PORT": str(first), "ASSETCDN_TLS_HTTPS_PORT": "0",
           "ASSETCDN_EDGE_CONTROL_PROBE_TIMEOUT_S": "1"}
    process = subprocess.Popen([sys.executable, "-m", "assetcdn.edge", "--control-url", "http://127.0.0.1:9",
                                "--host", "127.0.0.1", "--port", str(first - 3), "--workers", "2",
                                "--data-dir", str(tmp_path / "data")],
                               cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _, stderr = process.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        _, stderr = process.communicate()
        raise AssertionError(f"the edge kept running with a worker that could not listen:\n{stderr[-3000:]}") from None
    assert process.returncode == EXIT_CANNOT_LISTEN, stderr
    [line] = [line for line in stderr.splitlines() if f"cannot listen on 127.0.0.1:{taken}" in line]
    assert f"cannot listen on 127.0.0.1:{taken}, worker 1's cluster port: " in line, stderr
    assert f"; choose another with {SETTING}" in line, stderr
    assert "Traceback" not in stderr, stderr
