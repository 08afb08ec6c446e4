"""An edge's /api/health and /metrics: the API reference's health shape, a public answer without internal
addresses, and the metrics key for /metrics and deep health."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import orjson

from assetcdn.edge.control_client import LATE_TIMEOUT_S
from tests.control.expect import expect_error
from tests.shared.health_shape import assert_health_shape, assert_no_internal_addresses
from tests.support.cdn import CdnFactory
from tests.support.control import ACCOUNT, METRICS, SECRETS
from tests.support.sockets import raw_answer


async def test_shallow_health_has_the_published_shape_and_no_internal_address(make_cdn: CdnFactory,
                                                                                tmp_path: Path) -> None:
    cdn = await make_cdn()
    resp = await cdn.edge.get("/api/health")
    text = await resp.text()
    assert resp.status == 200, text
    assert resp.headers["Cache-Control"] == "no-cache, no-store"
    body = orjson.loads(text)
    assert_health_shape(body)
    assert body["status"] == "ok"
    assert {c["name"] for c in body["checks"]} == {"cache", "manifest", "control", "counters"}
    assert {c["method"] for c in body["checks"]} == {"shape"}
    assert_no_internal_addresses(text, str(tmp_path))


async def test_deep_health_needs_the_metrics_key(make_cdn: CdnFactory) -> None:
    cdn = await make_cdn()
    for headers in ({}, ACCOUNT, {"Authorization": "Bearer wrong"}):
        await expect_error(await cdn.edge.get("/api/health?deep=1", headers=headers), 401, "Unauthorized")
    resp = await cdn.edge.get("/api/health?deep=1", headers=METRICS)
    body = await resp.json()
    assert resp.status == 200, body
    assert_health_shape(body)
    methods = {c["name"]: c["method"] for c in body["checks"]}
    assert methods == {"cache": "kv-get", "manifest": "shape", "control": "manifest-fetch", "counters": "kv-get"}


async def test_metrics_need_the_metrics_key(make_cdn: CdnFactory) -> None:
    cdn = await make_cdn()
    assert (await cdn.edge.get("/api/health")).status == 200
    for headers in ({}, ACCOUNT, {"Authorization": "Bearer wrong"}, {"Authorization": SECRETS.metrics_key}):
        resp = await cdn.edge.get("/metrics", headers=headers)
        await expect_error(resp, 401, "Unauthorized")
        assert resp.headers["WWW-Authenticate"].startswith("Bearer")
    resp = await cdn.edge.get("/metrics", headers=METRICS)
    assert resp.status == 200
    assert resp.content_type == "text/plain"
    text = await resp.text()
    assert "# TYPE assetcdn_requests_total counter" in text
    assert 'route="/api/health"' in text


async def test_a_metrics_key_that_is_not_utf8_is_401(make_cdn: CdnFactory) -> None:
    """The key's bytes as sent (here not UTF-8, which the server reads with surrogate escapes): a 401, not a 500."""
    cdn = await make_cdn()
    assert cdn.edge.server.port is not None
    for target in ("/metrics", "/api/health?deep=1"):
        for field in (b"Authorization: Bearer \xff", b"Authorization: Bearer " + SECRETS.metrics_key.encode() + b"\xc3"):
            answer = await raw_answer(cdn.edge.server.port, f"GET {target} HTTP/1.1\r\nHost: edge\r\n".encode()
                                      + field + b"\r\nConnection: close\r\n\r\n")
            assert answer.startswith(b"HTTP/1.1 401 "), (target, field, answer[:300])


async def test_health_asked_while_the_edges_loop_stalls_answers_200(make_cdn: CdnFactory) -> None:
    """A load balancer's health check that arrives while the edge's event loop does not run (busy, starved of CPU,
    paused) is answered first when it runs again, before the edge has asked control anything: silence is no
    sign that control is down, nor is a background call's timeout that fell due during the stall."""
    cdn = await make_cdn(ASSETCDN_EDGE_REACHABLE_FOR_S="0.5", ASSETCDN_EDGE_CONTROL_PROBE_TIMEOUT_S="0.2")
    stall_s = cdn.node.reachability_window_s + 0.2 + LATE_TIMEOUT_S  # past the window and any probe's lateness
    server = cdn.edge.server
    reader, writer = await asyncio.open_connection(server.host, server.port)
    try:
        writer.write(b"GET /api/health HTTP/1.1\r\nHost: edge\r\nConnection: close\r\n\r\n")
        time.sleep(stall_s)  # noqa: ASYNC251 (the edge shares this loop: this is its stall)
        head, _, body = (await reader.read()).partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200 "), body
        control = next(c for c in orjson.loads(body)["checks"] if c["name"] == "control")
        assert control["lastContactSecondsAgo"] >= cdn.node.reachability_window_s  # it was silent that long
    finally:
        writer.close()
