"""A second `assetcdn up` on ports (or a data directory) that a running install already uses refuses to
start, quickly and with a message that says why, and the running install keeps serving alone."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import aiohttp
import pytest

from tests.integration.harness import (
    ACCESS,
    ACCOUNT,
    METRICS,
    RunningCdn,
    free_port_block,
    running,
    start_cdn,
    up_command,
    up_env,
    wait_gone,
)

pytestmark = pytest.mark.integration

ASSET = "first/v1/logos/logo.txt"
BODY = b"served by the first install"


def _call(method: str, url: str, data: bytes, headers: dict[str, str]) -> None:
    request = urllib.request.Request(url, data=data, headers=headers, method=method)
    with urllib.request.urlopen(request, timeout=30) as resp:  # noqa: S310 (loopback)
        assert resp.status == 201


@pytest.fixture(scope="module")
def first(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningCdn]:
    cdn = start_cdn(tmp_path_factory.mktemp("first"), edges=2, image_workers_at_start=True, semantic_search=True)
    try:
        _call("POST", f"{cdn.control_url}/api/core/zones", json.dumps({"Name": "first"}).encode(),
              {**ACCOUNT, "Content-Type": "application/json"})
        _call("PUT", f"{cdn.control_url}/api/storage/{ASSET}", BODY, ACCESS)
        yield cdn
    finally:
        assert cdn.stop() == 0


def port(url: str) -> int:
    return int(urlsplit(url).port or 0)


def run_second_up(data_dir: Path, *, edge_port: int, control_port: int, edges: int,
                  dashboard_port: int | None = None) -> tuple[int, str]:
    """Run another `assetcdn up`; it must end by itself (bounded wait; if it does not, it is stopped)."""
    if dashboard_port is None:  # a free port none of the others is (they may be free too)
        taken = {control_port, *range(edge_port, edge_port + edges)}
        base = free_port_block(len(taken) + 1)
        dashboard_port = next(p for p in range(base, base + len(taken) + 1) if p not in taken)
    process = subprocess.Popen(up_command(data_dir, edge_port=edge_port, control_port=control_port,
                                          dashboard_port=dashboard_port, edges=edges),
                               env=up_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        output, _ = process.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=60)
        raise AssertionError(f"the second `assetcdn up` kept running:\n{output.decode()[-3000:]}") from None
    return process.returncode, output.decode()


async def assert_first_serves_alone(first: RunningCdn, before: set[int]) -> None:
    assert running(before) == before  # none of its processes was disturbed
    async with aiohttp.ClientSession() as session:
        for edge in first.edge_urls:
            for _ in range(20):  # with a foreign listener on the port, some of these would go to it
                async with session.get(f"{edge}/{ASSET}") as resp:
                    assert (resp.status, await resp.read()) == (200, BODY)


async def test_a_second_install_on_the_same_ports_exits_at_once(first: RunningCdn, tmp_path: Path) -> None:
    before = first.descendants()
    status, output = run_second_up(tmp_path / "second", edge_port=port(first.edge_urls[0]),
                                   control_port=port(first.control_url), edges=2,
                                   dashboard_port=port(first.dashboard_url))
    assert status != 0
    assert "assetcdn is up" not in output
    # Each taken port is named with the flag and the setting (its environment variable) that move it.
    assert (f"control port {port(first.control_url)} on 127.0.0.1 is already in use; choose another with "
            "--control-port or ASSETCDN_SERVER_CONTROL_PORT ([server] control_port)") in output
    assert (f"dashboard port {port(first.dashboard_url)} on 127.0.0.1 is already in use; choose another with "
            "--dashboard-port or ASSETCDN_SERVER_DASHBOARD_PORT ([server] dashboard_port)") in output
    for i, edge in enumerate(first.edge_urls):
        assert (f"edge-{i} port {port(edge)} on 127.0.0.1 is already in use; choose another with "
                "--edge-port or ASSETCDN_SERVER_EDGE_PORT ([server] edge_port)") in output
    await assert_first_serves_alone(first, before)


async def test_sharing_only_an_edge_port_is_refused_too(first: RunningCdn, tmp_path: Path) -> None:
    # Its own control port is free: only the edge would have joined the first install's listeners.
    before = first.descendants()
    status, output = run_second_up(tmp_path / "second", edge_port=port(first.edge_urls[1]),
                                   control_port=free_port_block(1), edges=1)
    assert status != 0
    assert "assetcdn is up" not in output
    assert f"edge-0 port {port(first.edge_urls[1])} on 127.0.0.1 is already in use" in output
    await assert_first_serves_alone(first, before)


async def test_a_second_up_on_the_same_data_directory_is_refused(first: RunningCdn) -> None:
    before = first.descendants()
    base = free_port_block(2)
    status, output = run_second_up(first.data_dir, edge_port=base, control_port=base + 1, edges=1)
    assert status != 0
    assert f"already running on {first.data_dir}" in output
    await assert_first_serves_alone(first, before)


def test_a_child_that_cannot_listen_any_more_stops_up_at_once(tmp_path: Path) -> None:
    cdn = start_cdn(tmp_path, edges=1, image_workers_at_start=True, semantic_search=True)
    edge_port = port(cdn.edge_urls[0])
    with socket.socket() as squatter:
        try:
            # While `up` is suspended another program joins the edge's listeners on its port (as a
            # second install's edge would, with SO_REUSEPORT), then the edge dies.
            cdn.process.send_signal(signal.SIGSTOP)
            squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            squatter.bind(("127.0.0.1", edge_port))
            squatter.listen()
            edge = cdn.signal("--name edge-0", signal.SIGKILL)
            assert edge and wait_gone(set(edge)) == set()
            before = cdn.descendants()
            cdn.process.send_signal(signal.SIGCONT)
            status = cdn.process.wait(timeout=60)
        finally:
            cdn.process.send_signal(signal.SIGCONT)
            if cdn.process.poll() is None:
                cdn.stop()
    log = cdn.log_path.read_text()
    assert status != 0
    assert f"edge-0 cannot listen: edge-0 port {edge_port} on 127.0.0.1 is already in use; choose another " \
           "with --edge-port" in log, log
    assert f"cannot listen on 127.0.0.1:{edge_port}" in log
    assert log.count("restarting") <= 1  # one attempt, not a crash loop
    assert running(before) == set()


def test_control_that_cannot_listen_names_the_dashboard_port_it_lost(tmp_path: Path) -> None:
    # Control listens on two ports: when the one another program holds is the dashboard's, `up` says so.
    cdn = start_cdn(tmp_path, edges=1)
    dashboard_port = port(cdn.dashboard_url)
    with socket.socket() as squatter:
        try:
            cdn.process.send_signal(signal.SIGSTOP)  # `up` restarts control only once the port is taken
            # Control and what it started (which may hold its listening sockets) go at once: its process group.
            [control] = cdn.pids("-m assetcdn.control")
            group = {pid for pid in cdn.descendants() if os.getpgid(pid) == control}
            os.killpg(control, signal.SIGKILL)
            assert wait_gone(group) == set()
            squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # past connections in TIME_WAIT
            squatter.bind(("127.0.0.1", dashboard_port))
            squatter.listen()
            cdn.process.send_signal(signal.SIGCONT)
            status = cdn.process.wait(timeout=60)
        finally:
            cdn.process.send_signal(signal.SIGCONT)
            if cdn.process.poll() is None:
                cdn.stop()
    log = cdn.log_path.read_text()
    assert status != 0
    assert (f"control cannot listen: dashboard port {dashboard_port} on 127.0.0.1 is already in use; choose another "
            "with --dashboard-port or ASSETCDN_SERVER_DASHBOARD_PORT ([server] dashboard_port); stopping") in log, log
    assert "control port" not in log


def test_edges_of_one_up_take_cluster_port_ranges_of_their_own(tmp_path: Path) -> None:
    """With `[edge] cluster_port` set (a fixed range for a firewall), every edge's worker i listened on cluster_port + i:
    the second edge's workers found the first's ports taken and `up` stopped ("edge-0 exited early with status 1")."""
    edges, workers = 2, 2
    base = free_port_block(edges * workers)
    cdn = start_cdn(tmp_path, edges=edges, workers=workers, env_extra={"ASSETCDN_EDGE_CLUSTER_PORT": str(base)})
    try:
        request = urllib.request.Request(f"{cdn.control_url}/api/health?deep=1", headers=METRICS)
        with urllib.request.urlopen(request, timeout=30) as resp:  # noqa: S310 (loopback)
            listed = json.loads(resp.read())["edges"]
    finally:
        assert cdn.stop() == 0
    # Edge i's worker w at cluster_port + i x workers + w: each edge a range of its own, in the order of the edges.
    assert sorted((edge["name"], port(edge["url"])) for edge in listed) == [
        (f"edge-{i}/{w}", base + i * workers + w) for i in range(edges) for w in range(workers)]
