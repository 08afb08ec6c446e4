"""What the benchmarks count and wait for: the whole system's process tree, and an anchor's, walked at each
reading (a process started after the first walk is pinned and counted, the CPU of one that ended is kept), and
the cache conformance run starting only once the edge serves the pull zone."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from benchmarks.cache_conformance import ZONE_PROBE, wait_zone_served
from benchmarks.hits_bench import anchor, whole_system
from benchmarks.measure import pin, stop_process
from tests.integration.harness import RunningCdn

# Waits for a line, then starts a child that burns CPU and prints its pid; waits for a second line, then
# lets the child end and reaps it; then waits for a third line before exiting.
LATE_CHILD = """
import subprocess, sys
sys.stdin.readline()
child = subprocess.Popen([sys.executable, "-c", "sum(range(20_000_000)); input()"], stdin=subprocess.PIPE)
print(child.pid, flush=True)
sys.stdin.readline()
child.communicate(b"\\n")
print("reaped", flush=True)
sys.stdin.readline()
"""


@pytest.fixture
def parent() -> Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen([sys.executable, "-c", LATE_CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        yield process
    finally:
        stop_process(process)


def tell(process: subprocess.Popen[bytes]) -> str:
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write(b"\n")
    process.stdin.flush()
    return process.stdout.readline().decode().strip()


def test_the_whole_system_is_every_process_of_up_whenever_it_started(parent: subprocess.Popen[bytes],
                                                                     tmp_path: Path) -> None:
    """``parent`` stands for the `up` supervisor (no control, no edge of this data directory exist here)."""
    cdn = RunningCdn(parent, tmp_path, "http://127.0.0.1:1", ["http://127.0.0.1:2"], tmp_path / "up.log",
                     "http://127.0.0.1:3")
    core = min(os.sched_getaffinity(0))
    system, _control = whole_system(cdn)
    assert system.pin(str(core)) == [parent.pid]
    before = system.cpu_seconds()
    child = int(tell(parent))

    assert system.pin(str(core)) == [parent.pid, child]
    assert os.sched_getaffinity(child) == {core}
    assert tell(parent) == "reaped"
    assert system.refresh() == [parent.pid]
    # The child's CPU (summing 20 million ints) is still counted: through its parent's reaped-children time.
    assert system.cpu_seconds() - before > 0.1


def test_pinning_a_server_pins_the_processes_it_started_before(parent: subprocess.Popen[bytes]) -> None:
    """A child forked before its parent is pinned (an image worker launched as the edge starts) keeps the
    affinity it was forked with: pinning the server pins every process under it, and says which."""
    cores = os.sched_getaffinity(0)
    child = int(tell(parent))
    assert os.sched_getaffinity(child) == cores and len(cores) > 1
    core = min(cores)
    assert pin([parent.pid], str(core)) == [parent.pid, child]
    assert os.sched_getaffinity(parent.pid) == os.sched_getaffinity(child) == {core}


def test_an_anchor_is_counted_and_pinned_as_the_whole_system_is(parent: subprocess.Popen[bytes]) -> None:
    """``parent`` stands for Varnish's manager or nginx's master: a child it starts after the anchor was made (a
    worker started again) is pinned with it and its CPU, once reaped, still counted, as for our own processes."""
    core = min(os.sched_getaffinity(0))
    server = anchor("nginx", "http://127.0.0.1:1", parent)
    assert server.pin(str(core)) == [parent.pid]
    before = server.cpu_seconds()
    child = int(tell(parent))

    assert server.pin(str(core)) == [parent.pid, child]
    assert os.sched_getaffinity(child) == {core}
    assert tell(parent) == "reaped"
    assert server.cpu_seconds() - before > 0.1


class ZoneEdge(BaseHTTPRequestHandler):
    """An edge that answers 404 (no such zone) to its first ``misses`` requests, then the suite origin's 409."""

    misses = 0
    asked: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        type(self).asked.append(self.path)
        if len(type(self).asked) <= type(self).misses:
            status, body = 404, b"no such zone"
        else:
            status, body = 409, f"Requests not found for {ZONE_PROBE}\n".encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@dataclass
class Edge:
    handler: type[ZoneEdge]
    base: str


@pytest.fixture
def edge() -> Iterator[Edge]:
    handler = type("Edge", (ZoneEdge,), {"misses": 3, "asked": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield Edge(handler, f"http://127.0.0.1:{server.server_address[1]}/conformance")
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_the_conformance_run_waits_until_the_edge_serves_the_zone(edge: Edge) -> None:
    wait_zone_served(edge.base)
    assert edge.handler.asked == [f"/conformance/test/{ZONE_PROBE}"] * 4  # three 404s, then the origin's answer


def test_the_conformance_run_does_not_start_while_the_edge_answers_404(edge: Edge) -> None:
    edge.handler.misses = 10**9
    with pytest.raises(RuntimeError, match="did not serve the pull zone"):
        wait_zone_served(edge.base, timeout_s=0.5)
