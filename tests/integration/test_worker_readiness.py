"""`start_cdn`'s readiness: every worker sharing an edge's port answers its health 200, not only the one a
probe happens to reach. Two fake workers share one port here (SO_REUSEPORT, as the edge's workers do), each
naming itself in its health as an edge worker does; one catches up late."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from tests.integration.harness import free_port_block, wait_every_worker_ready


class Worker(HTTPServer):
    def __init__(self, port: int, name: str, not_ready_for: int) -> None:
        self.name, self.not_ready_for, self.answers = name, not_ready_for, [0, 0]  # 503s, 200s
        super().__init__(("127.0.0.1", port), Health)

    def server_bind(self) -> None:
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        super().server_bind()


class Health(BaseHTTPRequestHandler):
    server: Worker

    def do_GET(self) -> None:
        worker = self.server
        ready = sum(worker.answers) >= worker.not_ready_for
        worker.answers[ready] += 1
        body = json.dumps({"status": "ok" if ready else "degraded", "node": worker.name}).encode()
        self.send_response(200 if ready else 503)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def workers() -> Iterator[tuple[int, Worker, Worker]]:
    port = free_port_block(1)
    early, late = Worker(port, "edge-0/0", 0), Worker(port, "edge-0/1", 3)
    threads = [threading.Thread(target=worker.serve_forever, daemon=True) for worker in (early, late)]
    for thread in threads:
        thread.start()
    try:
        yield port, early, late
    finally:
        for worker in (early, late):
            worker.shutdown()
            worker.server_close()


def test_ready_once_every_worker_answered_its_health_200(workers: tuple[int, Worker, Worker]) -> None:
    port, _early, late = workers
    assert wait_every_worker_ready(f"http://127.0.0.1:{port}", 2) == {"edge-0/0", "edge-0/1"}
    assert late.answers[0] == 3 and late.answers[1] >= 1  # its 503s, then a 200 before the wait ended


def test_a_worker_that_never_gets_ready_fails_the_start(workers: tuple[int, Worker, Worker]) -> None:
    port, _early, late = workers
    late.not_ready_for = 10**9
    with pytest.raises(AssertionError, match="of 2 workers answered their health 200"):
        wait_every_worker_ready(f"http://127.0.0.1:{port}", 2, timeout_s=2.0)
