"""Session resumption on a real edge with two workers sharing the https port: a session made on one worker
resumes on the other (TLS 1.3 and TLS 1.2 tickets), each connection's worker found from the kernel's socket
table, both while the key callback is set (the window after a rotation, here the whole of a short period)
and while OpenSSL uses the shared key itself (a period far longer than that window); a ticket from two
rotations of `session_ticket_rotation_s` ago makes a full handshake on every worker. The shared key file is
the owner's only and its keys never reach the log."""

from __future__ import annotations

import json
import socket
import ssl
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from assetcdn.edge.tls.tickets import KEY_FILE
from tests.edge.tls.certs import TestCa
from tests.edge.tls.client import client_context
from tests.integration.harness import RunningCdn, free_port_block, start_cdn
from tests.support.https import serving_pid

pytestmark = pytest.mark.integration

WORKERS = 2
# Long enough that a ticket is always used within the period after the one that sealed it (the chains below
# offer each connection the session of the one before).
ROTATION_S = 5.0
# Periods of this length started long ago (they count from 1970): past the window of 7,200 s after a rotation.
STATIC_ROTATION_S = 1e9
EACH_WORKER_AT_LEAST = 3  # connections per worker before a run stops
MAX_CONNECTIONS = 200     # SO_REUSEPORT spreads connections by address: both are reached long before this


class Edge:
    def __init__(self, cdn: RunningCdn, https_port: int, ca: Path) -> None:
        self.cdn = cdn
        self.https_port = https_port
        self.ca = ca

    def connect(self, context: ssl.SSLContext, session: ssl.SSLSession | None) -> tuple[bool, ssl.SSLSession, int]:
        """(resumed?, the session to offer next, the worker's pid) of one request on a new connection."""
        with socket.create_connection(("127.0.0.1", self.https_port), timeout=20) as raw, \
                context.wrap_socket(raw, server_hostname="localhost", session=session) as tls:
            tls.sendall(b"GET /api/health HTTP/1.1\r\nHost: localhost\r\n\r\n")
            head = tls.recv(65536)  # the answer, after which a TLS 1.3 ticket has arrived too
            assert head.startswith(b"HTTP/1.1 200"), head[:100]
            pid = serving_pid(self.cdn, self.https_port, tls.getsockname()[1])
            resumed, new_session = bool(tls.session_reused), tls.session
        assert new_session is not None
        return resumed, new_session, pid


def _start(tmp_path: Path, rotation_s: float) -> tuple[RunningCdn, int, Path]:
    ca = TestCa()
    chain, key = ca.issue("localhost").write(tmp_path, "localhost")
    https_port = free_port_block(1)
    running = start_cdn(tmp_path, workers=WORKERS, env_extra={
        "ASSETCDN_TLS_HTTPS_PORT": str(https_port),
        "ASSETCDN_TLS_CERTIFICATES": json.dumps([[str(chain), str(key)]]),
        "ASSETCDN_TLS_SESSION_TICKET_ROTATION_S": str(rotation_s)})
    return running, running.https_port, ca.write_root(tmp_path)


@pytest.fixture(scope="module")
def edge(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Edge]:
    running, https_port, ca = _start(tmp_path_factory.mktemp("resumption"), ROTATION_S)
    try:
        yield Edge(running, https_port, ca)  # every worker ready: start_cdn waits for each one's health
    finally:
        running.stop()


@pytest.fixture(scope="module")
def static_edge(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Edge]:
    running, https_port, ca = _start(tmp_path_factory.mktemp("resumption-static"), STATIC_ROTATION_S)
    try:
        yield Edge(running, https_port, ca)  # every worker ready: start_cdn waits for each one's health
    finally:
        running.stop()


@pytest.mark.parametrize("keys", ["edge", "static_edge"])
@pytest.mark.parametrize("version", [ssl.TLSVersion.TLSv1_3, ssl.TLSVersion.TLSv1_2])
def test_a_session_resumes_on_every_worker(request: pytest.FixtureRequest, keys: str, version: ssl.TLSVersion) -> None:
    edge: Edge = request.getfixturevalue(keys)
    context = client_context(edge.ca, version=version)  # a session is offered only through its own context
    resumed, session, pid = edge.connect(context, None)
    assert not resumed
    workers: Counter[int] = Counter()
    failures = []
    for _ in range(MAX_CONNECTIONS):
        previous = pid
        resumed, session, pid = edge.connect(context, session)
        workers[pid] += 1
        if not resumed:
            failures.append((previous, pid))
        if len(workers) == WORKERS and min(workers.values()) >= EACH_WORKER_AT_LEAST:
            break
    assert len(workers) == WORKERS, f"connections reached only {dict(workers)}"
    assert failures == [], f"full handshakes (from worker, on worker): {failures}"


def test_a_ticket_from_two_rotations_ago_makes_a_full_handshake(edge: Edge) -> None:
    context = client_context(edge.ca)
    _resumed, old, _pid = edge.connect(context, None)
    sealed_by = int(time.time() // ROTATION_S)  # at the latest: the ticket was made before this
    while int(time.time() // ROTATION_S) < sealed_by + 2:  # waiting for the wall clock itself
        time.sleep(0.2)
    workers: Counter[int] = Counter()
    resumed_on = []
    for _ in range(MAX_CONNECTIONS):
        resumed, _session, pid = edge.connect(context, old)
        workers[pid] += 1
        if resumed:
            resumed_on.append(pid)
        if len(workers) == WORKERS and min(workers.values()) >= EACH_WORKER_AT_LEAST:
            break
    assert len(workers) == WORKERS, f"connections reached only {dict(workers)}"
    assert resumed_on == []
    _resumed, fresh, _pid = edge.connect(context, None)
    resumed, _session, _pid = edge.connect(context, fresh)  # a ticket of the current key resumes
    assert resumed


def test_the_key_file_is_the_owners_only_and_no_key_is_logged(edge: Edge) -> None:
    key_file = edge.cdn.data_dir / "edge-0" / KEY_FILE
    assert key_file.stat().st_mode & 0o777 == 0o600
    keys = [line.split()[1] for line in key_file.read_text().splitlines()[1:]]
    assert len(keys) == 3  # the previous, the current and the next period's
    log = edge.cdn.log_path.read_text(errors="replace").lower()
    for key in keys:
        for part in (key[:32], key[32:96], key[96:]):  # name, HMAC key, AES key
            assert part not in log
