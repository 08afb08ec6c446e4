"""`assetcdn up` asks only its own children, on the address it started them on: the metrics key it sends to control
(`/api/health?deep=1`, while it waits for every edge worker to be registered and caught up) goes to this run's control
and nowhere else. Before, its requests went through a proxy named in the environment (`http_proxy`), which was handed
the key (and `up` waited for a health the proxy answered), and a redirect was followed with the key to wherever it
pointed."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from assetcdn import supervisor
from assetcdn.shared.process import RUN_ID_HEADER

RUN_ID = "0123456789abcdef"
KEY = "metrics-key-of-this-run"
WORKERS = {"edge-0/0", "edge-0/1"}


class Recorder(ThreadingHTTPServer):
    """A loopback HTTP server that keeps the Authorization header of every request it is sent."""

    def __init__(self, answer: tuple[int, dict[str, str], bytes]) -> None:
        self.answer = answer
        self.authorizations: list[str] = []
        super().__init__(("127.0.0.1", 0), Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class Handler(BaseHTTPRequestHandler):
    server: Recorder

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        # As sent (http.server reads a header's bytes as Latin-1): control compares the key's UTF-8 bytes.
        sent = self.headers.get("Authorization", "").encode("latin-1").decode("utf-8", "surrogateescape")
        self.server.authorizations.append(sent)
        status, headers, body = self.server.answer
        self.send_response(status)
        for name, value in {**headers, "Content-Length": str(len(body))}.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: object) -> None:
        pass


CAUGHT_UP = (200, {RUN_ID_HEADER: RUN_ID, "Content-Type": "application/json"},
             json.dumps({"edges": [{"name": name, "alive": True, "generationsBehind": 0}
                                   for name in sorted(WORKERS)]}).encode())


def serving(answer: tuple[int, dict[str, str], bytes]) -> Iterator[Recorder]:
    server = Recorder(answer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.fixture
def control() -> Iterator[Recorder]:
    yield from serving(CAUGHT_UP)


@pytest.fixture
def elsewhere() -> Iterator[Recorder]:
    """Another server on the machine (a proxy, or where a redirect points), which answers as control would."""
    yield from serving(CAUGHT_UP)


def test_the_metrics_key_is_not_handed_to_a_proxy_from_the_environment(
        monkeypatch: pytest.MonkeyPatch, control: Recorder, elsewhere: Recorder) -> None:
    for name in ("no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("http_proxy", elsewhere.url)
    monkeypatch.setenv("HTTP_PROXY", elsewhere.url)

    assert supervisor._caught_up_workers(control.url, RUN_ID, KEY) == WORKERS
    assert control.authorizations == [f"Bearer {KEY}"]
    assert elsewhere.authorizations == []
    # The other waits of `up` reach its children directly too (the proxy did not answer for them).
    assert supervisor._probe(control.url, RUN_ID) == supervisor.OURS
    assert supervisor._chat_ready(control.url, RUN_ID)
    assert elsewhere.authorizations == []


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_the_metrics_key_does_not_follow_a_redirect(status: int, elsewhere: Recorder) -> None:
    for redirecting in serving((status, {RUN_ID_HEADER: RUN_ID, "Location": f"{elsewhere.url}/api/health?deep=1"},
                                b"")):
        assert supervisor._caught_up_workers(redirecting.url, RUN_ID, KEY) == set()
        assert redirecting.authorizations == [f"Bearer {KEY}"]
    assert elsewhere.authorizations == []


def listed(*edges: tuple[str, float]) -> tuple[int, dict[str, str], bytes]:
    """Control's deep health listing each (worker, seconds since control last heard from it) at its generation."""
    body = {"edges": [{"name": name, "alive": True, "generationsBehind": 0, "lastSeenSecondsAgo": ago}
                      for name, ago in edges]}
    return 200, {RUN_ID_HEADER: RUN_ID, "Content-Type": "application/json"}, json.dumps(body).encode()


def test_a_worker_control_last_heard_before_this_run_started_its_edges_is_not_counted() -> None:
    """Control started again keeps the edges it knew (`edges.json`, assetcdn/control/publishing/edge_registry.py):
    after `up` was killed and started again within `control.edge_timeout_s`, the previous run's edge-0/1 is listed
    alive at control's generation before this run's edge-0/1 has registered. Before, `up` counted it and said
    "assetcdn is up" with that worker still starting (left out of purge answers)."""
    for control in serving(listed(("edge-0/0", 0.3), ("edge-0/1", 12.0))):
        assert supervisor._caught_up_workers(control.url, RUN_ID, KEY, heard_since=time.monotonic() - 2.0) == {"edge-0/0"}
        with pytest.raises(supervisor.StartupFailed, match=r"caught up within 0s: edge-0/1$"):
            supervisor._wait_workers_caught_up(control.url, RUN_ID, KEY, WORKERS, [], [], [], "127.0.0.1",
                                               supervisor._StopRequest(), timeout_s=0.3,
                                               edges_started=time.monotonic() - 2.0)


def test_a_metrics_key_that_is_not_ascii_is_sent_as_its_utf8_bytes(control: Recorder) -> None:
    """Control takes the key's UTF-8 bytes (a client's `curl -H "Authorization: Bearer clé"` is let in). Before, `up`
    stopped with a traceback (UnicodeEncodeError: http.client writes a header as Latin-1) for a key with a character
    Latin-1 lacks, and sent another key (Latin-1 bytes, refused) for one it has, waiting 60 s to fail."""
    for key in ("clé-de-mesure", "clé-€"):
        assert supervisor._caught_up_workers(control.url, RUN_ID, key) == WORKERS
        assert control.authorizations[-1] == f"Bearer {key}"


@pytest.mark.parametrize("key", ["s3cr3t-value ", "s3cr3t-value\n"])
def test_a_metrics_key_control_refuses_is_named_at_once(key: str) -> None:
    """A key control never matches (one with a space at either end, as `export ASSETCDN_METRICS_KEY="key "` gives: a
    client's Bearer credential is read without them): no client can read /metrics with it either. Before, `up` asked
    with it until its 60 s were over and then said that not every edge worker had registered, naming them all; with a
    line break at its end (no header can carry it) `up` stopped with a traceback."""
    refused = (401, {RUN_ID_HEADER: RUN_ID, "Content-Type": "application/json"}, b'{"error": "Unauthorized"}')
    for control in serving(refused):
        with pytest.raises(supervisor.StartupFailed, match="ASSETCDN_METRICS_KEY") as failed:
            supervisor._wait_workers_caught_up(control.url, RUN_ID, key, WORKERS, [], [], [], "127.0.0.1",
                                               supervisor._StopRequest(), timeout_s=3.0,
                                               edges_started=time.monotonic())
        assert "not every edge worker" not in str(failed.value)
        assert "s3cr3t" not in str(failed.value)  # the key itself is never said
