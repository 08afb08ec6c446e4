"""A CA's rate limit is honoured: Pebble enforces none, so a minimal RFC 8555 front (directory, nonces) answers
every account or order request with `rateLimited` and a Retry-After, as Let's Encrypt does. The real acme
library talks to it over HTTP; the next attempt is scheduled no earlier than the CA asked, beyond the backoff."""

from __future__ import annotations

import asyncio
import base64
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from assetcdn.control.acme.authority import CertificateAuthority, retry_after_seconds
from assetcdn.control.acme.issuer import CertificateIssuer
from assetcdn.control.acme.settings import AcmeSettings
from assetcdn.control.acme.store import AcmeCertificates, CertificateRecord
from assetcdn.control.publishing.edge_registry import EdgeRegistry
from assetcdn.control.storage.database import open_database

RETRY_AFTER_S = 3600


def _nonce() -> str:
    return base64.urlsafe_b64encode(os.urandom(16)).decode().rstrip("=")


def rate_limiting_ca() -> web.Application:
    async def directory(request: web.Request) -> web.Response:
        base = f"http://{request.host}"
        return web.json_response({"newNonce": base + "/nonce", "newAccount": base + "/account",
                                  "newOrder": base + "/order", "revokeCert": base + "/revoke",
                                  "keyChange": base + "/key-change"})

    async def nonce(request: web.Request) -> web.Response:
        return web.Response(status=200, headers={"Replay-Nonce": _nonce(), "Cache-Control": "no-store"})

    async def limited(request: web.Request) -> web.Response:
        await request.read()
        problem = {"type": "urn:ietf:params:acme:error:rateLimited",
                   "detail": "too many new registrations from this address"}
        return web.json_response(problem, status=429, content_type="application/problem+json",
                                 headers={"Retry-After": str(RETRY_AFTER_S), "Replay-Nonce": _nonce()})

    app = web.Application()
    app.router.add_get("/dir", directory)
    app.router.add_route("HEAD", "/nonce", nonce)
    app.router.add_post("/account", limited)
    app.router.add_post("/order", limited)
    return app


@pytest.fixture
async def ca() -> AsyncIterator[TestServer]:
    server = TestServer(rate_limiting_ca(), host="127.0.0.1")
    await server.start_server()
    yield server
    await server.close()


async def test_a_rate_limited_order_waits_for_the_cas_retry_after(ca: TestServer, tmp_path: Path) -> None:
    settings = AcmeSettings(directory_url=str(ca.make_url("/dir")), contact_email="", ca_bundle="",
                            retry_delays_s=(1.0, 2.0), order_timeout_s=10.0, concurrency=1)
    db = await open_database(tmp_path / "control.sqlite3")
    registry = EdgeRegistry("secret", 15)
    await registry.start()
    registry.register("edge-0/0", "http://127.0.0.1:9", 0)  # orders wait for an edge; its push fails, the CA is asked
    authority = CertificateAuthority(settings, tmp_path / "acme")
    issuer = CertificateIssuer(settings, AcmeCertificates(db, tmp_path), authority, registry, "secret",
                               wanted_names=_names, push_wait_s=0.1)
    try:
        await issuer.start()  # orders "busy.example.com" at once
        deadline = time.monotonic() + 20
        while (record := await issuer.record("busy.example.com")) is None or record.error is None:
            assert time.monotonic() < deadline, "the order was never attempted"
            await asyncio.sleep(0.1)
        assert record.error is not None and record.error.startswith("rateLimited: too many new registrations")
        assert record.status == "failed" and record.attempts == 1
        # The CA's hour, not the 1 s backoff
        assert record.next_attempt_at - time.time() > RETRY_AFTER_S - 60
        assert issuer.ca_reachable is True  # it answered: a refusal is not an outage
    finally:
        await issuer.close()
        await registry.close()
        await db.close()


async def _names() -> set[str]:
    return {"busy.example.com"}


def test_retry_after_is_read_as_seconds_or_an_http_date() -> None:
    assert retry_after_seconds("120") == 120.0
    when = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(time.time() + 600))
    parsed = retry_after_seconds(when)
    assert parsed is not None and 590 <= parsed <= 601
    assert retry_after_seconds("not a date") is None and retry_after_seconds(None) is None


async def _two_names() -> set[str]:
    return {"first.example.com", "second.example.com"}


async def test_orders_past_the_weekly_budget_wait_and_say_why(ca: TestServer, tmp_path: Path) -> None:
    """One order a week: the first name is ordered (the CA refuses it), the second waits a week for room,
    and a restart does not give the week's budget back."""
    settings = AcmeSettings(directory_url=str(ca.make_url("/dir")), contact_email="", ca_bundle="",
                            retry_delays_s=(1.0,), order_timeout_s=10.0, concurrency=2, max_orders_per_week=1)
    db = await open_database(tmp_path / "control.sqlite3")
    registry = EdgeRegistry("secret", 15)
    await registry.start()
    registry.register("edge-0/0", "http://127.0.0.1:9", 0)  # orders wait for an edge; its push fails, the CA is asked

    async def started_issuer() -> CertificateIssuer:
        issuer = CertificateIssuer(settings, AcmeCertificates(db, tmp_path), CertificateAuthority(
            settings, tmp_path / "acme"), registry, "secret", wanted_names=_two_names, push_wait_s=0.1)
        await issuer.start()
        return issuer

    async def deferred(issuer: CertificateIssuer, name: str) -> CertificateRecord:
        """`name`'s record once it waits for the budget (its next attempt days away)."""
        deadline = time.monotonic() + 20
        while (record := await issuer.record(name)) is None or record.next_attempt_at < time.time() + 86400:
            assert time.monotonic() < deadline, record
            await asyncio.sleep(0.1)
        return record

    issuer = await started_issuer()
    try:
        deadline = time.monotonic() + 20
        while len(errors := {name: r.error for name, r in (await issuer.store.records()).items() if r.error}) < 2:
            assert time.monotonic() < deadline, errors
            await asyncio.sleep(0.1)
        ordered = [name for name, error in errors.items() if error.startswith("rateLimited")]
        waiting = [name for name, error in errors.items() if "acme.max_orders_per_week" in error]
        assert len(ordered) == 1 and len(waiting) == 1, errors
        record = await deferred(issuer, waiting[0])
        assert record.attempts == 0 and record.status == "provisioning"
        assert record.next_attempt_at - time.time() > 7 * 86400 - 60  # room again when the first order is a week old
    finally:
        await issuer.close()
    # After a restart the waiting name is still waiting: due now, it is deferred again, not ordered.
    await AcmeCertificates(db, tmp_path).due_now(waiting[0], time.time())
    issuer = await started_issuer()
    try:
        record = await deferred(issuer, waiting[0])
        assert record.attempts == 0 and "acme.max_orders_per_week" in str(record.error)
    finally:
        await issuer.close()
        await registry.close()
        await db.close()
