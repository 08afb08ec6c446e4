"""`assetcdn up --workers 2` says "assetcdn is up" once every worker of every edge has registered with control and
caught up. Before, it said so once an edge's health was answered by one of its workers: another, still starting (for
seconds on a loaded machine), was left out of purge answers, and a script that fetched right after the line could be
answered 503 EdgeNotReady. Here one worker is held (SIGSTOP) from its start until `up` has announced, or has had ample
time to announce, with the other worker ready."""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from tests.integration.harness import (
    ACCESS,
    ACCOUNT,
    PURGE,
    RunningCdn,
    child_processes,
    free_port_block,
    up_command,
    up_env,
    worker_health,
)

pytestmark = pytest.mark.integration

WORKERS = 2
READY = b"assetcdn is up"
ASSET = "ready/v1/logos/logo.txt"
BODY = b"every worker has it"
# How many looks (at POLL_S apart) `up` gets to announce while a worker is held, once the edge answers healthy: the
# old `up` announced within its next probe (0.2 s). Only how long the worker is held depends on it, not the outcome
# with this change, which never announces while a worker is held.
HELD_LOOKS, POLL_S = 40, 0.05


def edge_workers(up: int) -> list[int]:
    """The edge's worker processes (its fork server's children) below `up`, in the order they were forked."""
    children = child_processes()
    edges = children.get(up, [])
    return sorted(worker for edge in edges for server in children.get(edge, []) for worker in children.get(server, []))


def call(method: str, url: str, data: bytes | None, headers: dict[str, str]) -> dict:
    request = urllib.request.Request(url, data=data, headers=headers, method=method)
    with urllib.request.urlopen(request, timeout=30) as resp:  # noqa: S310 (loopback)
        return json.loads(resp.read() or b"{}")


def served_by(port: int, path: str) -> tuple[str, int, bytes]:
    """(the worker that answered, status, body) of GET `path` on a new connection, which the kernel hands to one of the
    workers sharing the port: its health (on the same connection) names it."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request("GET", "/api/health")
        health = connection.getresponse()
        node = json.loads(health.read()).get("node", "")
        connection.request("GET", f"/{path}")
        answer = connection.getresponse()
        return node, answer.status, answer.read()
    finally:
        connection.close()


def test_up_is_ready_once_every_worker_is_registered_and_caught_up(tmp_path: Path) -> None:
    base = free_port_block(3)
    edge_port, control_port, dashboard_port = base, base + 1, base + 2
    log_path = tmp_path / "up.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(up_command(tmp_path / "data", edge_port=edge_port, control_port=control_port,
                                              dashboard_port=dashboard_port, workers=WORKERS),
                                   env=up_env({"ASSETCDN_SEARCH_SEMANTIC": "false"}), stdout=log,
                                   stderr=subprocess.STDOUT)
    cdn = RunningCdn(process, tmp_path / "data", f"http://127.0.0.1:{control_port}",
                     [f"http://127.0.0.1:{edge_port}"], log_path, f"http://127.0.0.1:{dashboard_port}")
    try:
        # The last worker forked is held before it gets far (registering takes building its application first).
        while len(workers := edge_workers(process.pid)) < WORKERS:
            assert process.poll() is None, log_path.read_text()
        held = workers[-1]
        cdn.stopped_pids.append(held)
        os.kill(held, signal.SIGSTOP)
        while worker_health(cdn.edge_urls[0])[0] != 200:  # the other worker is ready
            assert process.poll() is None, log_path.read_text()
            time.sleep(POLL_S)
        for _ in range(HELD_LOOKS):
            if READY in log_path.read_bytes():
                break
            time.sleep(POLL_S)
        os.kill(held, signal.SIGCONT)
        while READY not in log_path.read_bytes():
            assert process.poll() is None, log_path.read_text()
            time.sleep(POLL_S)

        # Right after the line: a purge reaches every worker, and each one serves a file stored now.
        purged = call("POST", f"{cdn.edge_urls[0]}/api/purge", json.dumps({"purge_everything": True}).encode(),
                      {**PURGE, "Content-Type": "application/json"})
        assert sorted(purged["edges"]["latencyMs"]) == [f"edge-0/{w}" for w in range(WORKERS)], purged
        call("POST", f"{cdn.control_url}/api/core/zones", json.dumps({"Name": "ready"}).encode(),
             {**ACCOUNT, "Content-Type": "application/json"})
        call("PUT", f"{cdn.control_url}/api/storage/{ASSET}", BODY, ACCESS)
        served: set[str] = set()
        for _ in range(200):  # new connections until each worker has answered one (each is handed to either)
            node, status, body = served_by(edge_port, ASSET)
            assert (status, body) == (200, BODY), (node, status, body)
            served.add(node)
            if len(served) == WORKERS:
                break
        assert served == {f"edge-0/{w}" for w in range(WORKERS)}
    finally:
        assert cdn.stop() == 0
