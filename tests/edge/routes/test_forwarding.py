"""What the edge forwards to control arrives as the client sent it, and control's answer to it tells the edge's
circuit breaker (assetcdn/edge/circuit_breaker.py) whether control is there, as the edge's own calls do."""

from __future__ import annotations

from pathlib import Path

from aiohttp import ClientResponse

from assetcdn.edge.circuit_breaker import CLOSED, OPEN, CircuitBreaker
from assetcdn.edge.control_client import ControlClient
from tests.control.expect import expect_error
from tests.integration.faults import control_check
from tests.support.cdn import ZONE, Cdn, CdnFactory
from tests.support.clock import Clock
from tests.support.control import ACCESS, ACCOUNT, write_lock_held
from tests.support.sockets import loopback_listener

OPEN_S = 30.0  # the breaker's open period here: never waited out, the breaker's clock is moved past it
# No background call to control during these tests (catch-up, heartbeat, analytics): the clients' calls are the only
# ones that can report to the breaker.
QUIET = {"ASSETCDN_EDGE_CATCHUP_INTERVAL_S": "3600", "ASSETCDN_EDGE_HEARTBEAT_INTERVAL_S": "3600",
         "ASSETCDN_ANALYTICS_FLUSH_INTERVAL_S": "3600"}


async def test_an_oversize_upload_through_the_edge_is_refused_from_its_content_length(
        make_cdn: CdnFactory) -> None:
    cdn = await make_cdn(ASSETCDN_CONTROL_MAX_UPLOAD_BYTES="1000")
    resp = await cdn.edge.put(f"/api/storage/{ZONE}/v1/logos/big.bin", data=b"x" * 5000, headers=ACCESS)
    body = await resp.json()
    assert resp.status == 413
    assert "5000 bytes" in body["Message"]  # sized from Content-Length, before the body is read
    assert body["MaxSize"] == 1000


def tripped(cdn: Cdn) -> tuple[ControlClient, Clock]:
    """The edge's control client, its breaker opened by a timeout (control counts as hung), on a clock of the
    test's own."""
    control = cdn.node.control
    clock = Clock()
    control.breaker = CircuitBreaker(failure_threshold=1, open_s=OPEN_S, clock=clock)
    control.breaker.failed(slow=True)
    return control, clock


async def zones(cdn: Cdn) -> ClientResponse:
    return await cdn.edge.get("/api/core/zones", headers=ACCOUNT)


async def test_a_forwarded_call_that_probes_the_breaker_closes_it_when_control_answers(make_cdn: CdnFactory) -> None:
    """It was let through as the half-open probe and answered, but control's answer was not reported: the breaker
    stayed half-open and refused the next forwarded calls (503 ControlUnreachable) for another `breaker_open_s`."""
    cdn = await make_cdn(**QUIET)
    control, clock = tripped(cdn)
    await expect_error(await zones(cdn), 503, "ControlUnreachable")
    clock.now += OPEN_S  # the next call is the breaker's probe
    statuses = [(await zones(cdn)).status for _ in range(2)]  # the probe, and a call right after it
    assert statuses == [200, 200]
    assert control.breaker.state == CLOSED


async def test_a_forwarded_probe_that_control_refuses_lets_the_next_call_through(make_cdn: CdnFactory) -> None:
    """A probe refused at once (control restarting) says control is not hung, as the edge's own calls report it:
    the next forwarded call goes to control rather than being refused for another `breaker_open_s`."""
    cdn = await make_cdn(**QUIET)
    control, clock = tripped(cdn)
    clock.now += OPEN_S
    control_url = control.control_url
    with loopback_listener() as not_listening:  # bound and not listening: connections to it are refused
        host, port = not_listening.getsockname()
        control.control_url = f"http://{host}:{port}"
        try:
            await expect_error(await zones(cdn), 503, "ControlUnreachable")
        finally:
            control.control_url = control_url  # control is back
    resp = await zones(cdn)
    assert resp.status == 200, await resp.text()
    assert control.breaker.state == CLOSED


async def test_a_forwarded_probe_that_control_does_not_answer_opens_the_breaker_again(make_cdn: CdnFactory) -> None:
    """A probe that timed out left the breaker half-open, so the edge's health and its cached files went on saying
    control was there (200, HIT) while it did not answer; it opens the breaker again, as the edge's own calls do."""
    cdn = await make_cdn(ASSETCDN_EDGE_PROXY_TIMEOUT_S="0.5", **QUIET)
    control, clock = tripped(cdn)
    clock.now += OPEN_S
    control_url = control.control_url
    with loopback_listener() as hung:  # takes connections and never answers
        hung.listen()
        host, port = hung.getsockname()
        control.control_url = f"http://{host}:{port}"
        try:
            await expect_error(await zones(cdn), 504, "ControlTimeout")
        finally:
            control.control_url = control_url
    assert control.breaker.state == OPEN
    resp = await cdn.edge.get("/api/health")
    body = await resp.json()
    assert resp.status == 503, body
    assert control_check(body)["circuit"] == OPEN


async def test_a_forwarded_call_whose_body_is_refused_does_not_hold_the_probe(make_cdn: CdnFactory) -> None:
    """The half-open probe was claimed before the call's body was received, so a body the edge refuses (here one
    that does not decode, 400) took the probe without asking control: the breaker stayed half-open, and the next
    forwarded calls were refused 503 ControlUnreachable for another `breaker_open_s`."""
    cdn = await make_cdn(**QUIET)
    control, clock = tripped(cdn)
    clock.now += OPEN_S
    resp = await cdn.edge.put(f"/api/storage/{ZONE}/v1/broken/probe.txt", data=b"this is not gzip at all",
                              headers={**ACCESS, "Content-Encoding": "gzip", "Connection": "close"})
    await expect_error(resp, 400, "InvalidBody")  # (the edge closes the connection of a body it did not read whole)
    resp = await zones(cdn)
    assert resp.status == 200, await resp.text()
    assert control.breaker.state == CLOSED


async def test_a_forwarded_probe_that_control_answers_503_itself_closes_the_breaker(make_cdn: CdnFactory,
                                                                                  tmp_path: Path) -> None:
    """Control's own 503 (DatabaseBusy here; AiBusy, NotConfigured) is an answer, though a proxy in front of it
    answers 502-504 too: the breaker stayed half-open and the next forwarded calls were refused 503
    ControlUnreachable for another `breaker_open_s`. Control's answer carries the call's request id."""
    cdn = await make_cdn(ASSETCDN_CONTROL_SQLITE_BUSY_TIMEOUT_MS="100", **QUIET)
    control, clock = tripped(cdn)
    clock.now += OPEN_S
    with write_lock_held(tmp_path / "data" / "control.sqlite3"):  # (tests/support/cdn.py: control's data)
        resp = await cdn.edge.post("/api/core/zones", json={"Name": "busy"}, headers=ACCOUNT)
        await expect_error(resp, 503, "DatabaseBusy")
    resp = await zones(cdn)
    assert resp.status == 200, await resp.text()
    assert control.breaker.state == CLOSED


async def test_a_page_on_another_origin_reads_the_edges_own_refusal_of_a_public_search(make_cdn: CdnFactory) -> None:
    """/api/search is public and readable from any origin (assetcdn/shared/cors.py); the 503 the edge answers itself
    while control is unreachable went without Access-Control-Allow-Origin, so a page saw a network error."""
    cdn = await make_cdn(**QUIET)
    tripped(cdn)
    page = {"Origin": "https://shop.example"}
    resp = await cdn.edge.get("/api/search?q=logo", headers=page)
    body = await resp.json()  # search's legacy envelope: `error` is the message
    assert (resp.status, body["HttpCode"]) == (503, 503) and "cannot be reached" in body["error"], body
    assert resp.headers.get("Access-Control-Allow-Origin") == "*"
    assert "Retry-After" in resp.headers and "retry-after" in resp.headers.get("Access-Control-Expose-Headers", "").lower()
    resp = await cdn.edge.get("/api/core/zones", headers={**ACCOUNT, **page})  # behind a key: no CORS
    await expect_error(resp, 503, "ControlUnreachable")
    assert "Access-Control-Allow-Origin" not in resp.headers
