"""Control's ACME side against a real CA (Pebble): a custom domain is ordered a certificate, its HTTP-01 answer
reaches the edges in the TLS state and the CA validates it there, the domain turns `active` with its expiry;
an unanswerable challenge ends `failed` with the CA's reason; a removed domain loses certificate and key; a CA
that cannot be reached makes health say `acme` degraded while issued certificates stay, and orders resume
when it is back; a short-lived certificate is renewed and the new one reaches the edge."""

from __future__ import annotations

import asyncio
import datetime
import stat
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiohttp.test_utils import TestClient
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from assetcdn.control.app import create_app
from assetcdn.shared.cluster import PREFIX, sign_request
from assetcdn.shared.config import load_settings
from assetcdn.shared.tls_state import TLS_STATE_PATH, TlsState
from tests.support.acme.pebble import Pebble
from tests.support.acme.responder import ChallengeResponder
from tests.support.control import ACCOUNT, METRICS, SECRETS

ACTIVE_WITHIN_S = 30.0
pytestmark = pytest.mark.timeout(180)


@pytest.fixture
async def responder() -> AsyncIterator[ChallengeResponder]:
    edge = ChallengeResponder("edge-a/0", SECRETS.cluster_secret, 0)
    await edge.start()
    yield edge
    await edge.stop()


@pytest.fixture
def http_port(responder: ChallengeResponder) -> int:
    """The port Pebble validates HTTP-01 on: the responder's, bound first (another suite cannot take it)."""
    return responder.port


@pytest.fixture
def pebble(tmp_path: Path, http_port: int) -> Any:
    server = Pebble(tmp_path / "pebble", http_port)
    server.start()
    yield server
    server.stop()


def acme_environ(pebble: Pebble, **extra: str) -> dict[str, str]:
    return {"ASSETCDN_ACME_DIRECTORY_URL": pebble.directory_url, "ASSETCDN_ACME_CA_BUNDLE": str(pebble.listener_cert),
            "ASSETCDN_ACME_CONTACT_EMAIL": "ops@example.test", "ASSETCDN_ACME_RETRY_DELAYS_S": "1,2", **extra}


async def start_control(aiohttp_client: Any, data_dir: Path, environ: dict[str, str]) -> TestClient:
    return await aiohttp_client(create_app(load_settings(environ=environ), SECRETS, data_dir))


async def make_zone(control: TestClient) -> str:
    resp = await control.post("/api/core/zones", json={"Name": "shop"}, headers=ACCOUNT)
    assert resp.status == 201, await resp.text()
    return "shop"


async def domain(control: TestClient, hostname: str) -> dict[str, Any]:
    resp = await control.get(f"/api/core/zones/shop/domains/{hostname}", headers=ACCOUNT)
    assert resp.status == 200, await resp.text()
    body: dict[str, Any] = await resp.json()
    return body


async def wait_for(control: TestClient, hostname: str, status: str, *, field: str = "SslStatus",
                   within_s: float = ACTIVE_WITHIN_S) -> dict[str, Any]:
    deadline = time.monotonic() + within_s
    while True:
        body = await domain(control, hostname)
        if body[field] == status:
            return body
        assert time.monotonic() < deadline, f"{hostname} never reached {field}={status}: {body}"
        await asyncio.sleep(0.2)


async def pulled_state(control: TestClient) -> TlsState:
    """What an edge gets from control's GET /_cluster/tls (signed), as at its start or catch-up."""
    resp = await control.get(PREFIX + TLS_STATE_PATH,
                             headers=sign_request(SECRETS.cluster_secret, "GET", PREFIX + TLS_STATE_PATH))
    assert resp.status == 200, await resp.text()
    return TlsState.from_message(orjson.loads(await resp.read()))


def leaf(chain_pem: str) -> x509.Certificate:
    return x509.load_pem_x509_certificate(chain_pem.encode())


def assert_issued_by(chain_pem: str, root_pem: str) -> None:
    """The chain's leaf is signed by its intermediate, which is signed by Pebble's root."""
    chain = x509.load_pem_x509_certificates(chain_pem.encode())
    root = x509.load_pem_x509_certificate(root_pem.encode())
    assert len(chain) >= 2
    for child, parent in zip(chain, [*chain[1:], root], strict=True):
        child.verify_directly_issued_by(parent)


async def test_a_domain_is_validated_through_the_edge_and_becomes_active(
        aiohttp_client: Any, data_dir: Path, pebble: Pebble, responder: ChallengeResponder) -> None:
    control = await start_control(aiohttp_client, data_dir, acme_environ(pebble))
    await responder.join(control)
    await make_zone(control)
    started = time.monotonic()
    resp = await control.post("/api/core/zones/shop/domains", json={"Hostname": "img.shop.test"}, headers=ACCOUNT)
    added = await resp.json()
    assert resp.status == 201, added
    assert added["SslStatus"] == "provisioning" and "provisioned automatically" in added["Note"]

    body = await wait_for(control, "img.shop.test", "active")
    assert time.monotonic() - started < ACTIVE_WITHIN_S
    assert body["SslError"] is None and body["SslRetryAt"] is None

    # The CA fetched the answer from the edge (Pebble's httpPort is the responder's port)
    assert sum(responder.hits.values()) >= 1
    assert any(state.challenges for state in responder.states), "the answer was never pushed to the edge"
    # The edge now holds the certificate, with a key that unseals only with the cluster secret and fits it
    [entry] = responder.state.certificates
    assert entry.names == ("img.shop.test",) and not responder.state.challenges
    certificate = leaf(entry.chain_pem)
    assert_issued_by(entry.chain_pem, pebble.root_pem())
    assert certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(
        x509.DNSName) == ["img.shop.test"]
    key = serialization.load_pem_private_key(entry.key_pem(SECRETS.cluster_secret), password=None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    cert_key = certificate.public_key()
    assert isinstance(cert_key, ec.EllipticCurvePublicKey)
    assert key.public_key().public_numbers() == cert_key.public_numbers()
    assert b"PRIVATE KEY" not in orjson.dumps(responder.state.to_message())  # sealed in transit
    # The answer's expiry is the certificate's
    expires = datetime.datetime.fromisoformat(body["SslExpiresAt"].replace("Z", "+00:00"))
    assert abs((expires - certificate.not_valid_after_utc).total_seconds()) < 1
    # The listing says the same, and never carries a key
    resp = await control.get("/api/core/zones/shop/domains", headers=ACCOUNT)
    raw = await resp.read()
    [listed] = orjson.loads(raw)["Domains"]
    assert (listed["SslStatus"], listed["SslExpiresAt"]) == ("active", body["SslExpiresAt"])
    assert b"PRIVATE KEY" not in raw and b"key_sealed" not in raw
    # An edge that starts later pulls the same state from control
    pulled = await pulled_state(control)
    assert [c.id for c in pulled.certificates] == [entry.id] and pulled.serial >= responder.state.serial
    # At rest: the private key and the account key are readable by their owner only
    key_file = data_dir / "certificates" / "img.shop.test" / "privkey.pem"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert stat.S_IMODE((data_dir / "acme" / "account.key").stat().st_mode) == 0o600
    assert stat.S_IMODE(key_file.parent.stat().st_mode) == 0o700
    # Health: acme configured and healthy; deep health counts the certificate
    resp = await control.get("/api/health?deep=1", headers=METRICS)
    health = await resp.json()
    [acme] = [c for c in health["checks"] if c["name"] == "acme"]
    assert resp.status == 200 and health["status"] == "ok"
    assert acme["configured"] and acme["healthy"] and acme["certificates"] == {"active": 1}


async def test_an_order_waits_for_an_edge_to_register(
        aiohttp_client: Any, data_dir: Path, pebble: Pebble, responder: ChallengeResponder) -> None:
    """A name due while no edge is registered (`assetcdn up` starts control before its edges; a restarted control
    knows no edge until each heartbeats again, as after the switch from a staging CA to production) was ordered at
    once: its answer reached no edge, and the CA's validation failed ("connection refused", or 404 from an edge
    that had not re-registered), one of the few failed validations a CA allows a name an hour. It now waits,
    saying why, and is ordered once an edge has registered."""
    control = await start_control(aiohttp_client, data_dir, acme_environ(pebble))
    await make_zone(control)
    resp = await control.post("/api/core/zones/shop/domains", json={"Hostname": "early.shop.test"}, headers=ACCOUNT)
    assert resp.status == 201, await resp.text()
    deadline = time.monotonic() + ACTIVE_WITHIN_S
    while (body := await domain(control, "early.shop.test"))["SslError"] is None:
        assert time.monotonic() < deadline, body
        await asyncio.sleep(0.2)
    assert body["SslStatus"] == "provisioning" and "no edge" in body["SslError"], body
    assert not responder.hits  # the CA was not asked to look
    await responder.join(control)
    body = await wait_for(control, "early.shop.test", "active")
    assert body["SslError"] is None and sum(responder.hits.values()) >= 1


async def test_an_unanswerable_challenge_ends_failed_with_the_cas_reason_and_is_retried(
        aiohttp_client: Any, data_dir: Path, pebble: Pebble, responder: ChallengeResponder) -> None:
    # Control waits for the edges' acknowledgements up to push_wait_ms (then they catch up later): long enough
    # here for a loaded machine, so the stand-in edge below is always among those that answered.
    control = await start_control(aiohttp_client, data_dir, acme_environ(pebble, ASSETCDN_CONTROL_PUSH_WAIT_MS="10000"))
    responder.apply_delay_s = 0.3  # a busy edge: "failed" must still not show before its answer is withdrawn
    await responder.join(control)
    await make_zone(control)
    pebble.point("lost.shop.test", "127.0.0.9")  # the CA looks for it where no edge listens
    resp = await control.post("/api/core/zones/shop/domains", json={"Hostname": "lost.shop.test"}, headers=ACCOUNT)
    assert resp.status == 201

    failed = await wait_for(control, "lost.shop.test", "failed")
    assert "connection" in failed["SslError"].lower() and "127.0.0.9" in failed["SslError"], failed
    assert failed["SslExpiresAt"] is None and failed["SslRetryAt"] is not None
    assert not responder.state.certificates and not responder.state.challenges  # the answer was withdrawn
    # It is tried again after the backoff (1 s, then 2 s): the CA refuses again, a later retry is announced
    first_retry = failed["SslRetryAt"]
    deadline = time.monotonic() + 20
    while (later := await domain(control, "lost.shop.test"))["SslRetryAt"] == first_retry:
        assert time.monotonic() < deadline, "the failed order was not retried"
        await asyncio.sleep(0.2)
    assert later["SslStatus"] == "failed" and later["SslRetryAt"] > first_retry


async def test_a_removed_domain_stops_being_offered_and_its_key_is_deleted(
        aiohttp_client: Any, data_dir: Path, pebble: Pebble, responder: ChallengeResponder) -> None:
    control = await start_control(aiohttp_client, data_dir, acme_environ(pebble))
    await responder.join(control)
    await make_zone(control)
    for name in ("a.shop.test", "b.shop.test"):
        resp = await control.post("/api/core/zones/shop/domains", json={"Hostname": name}, headers=ACCOUNT)
        assert resp.status == 201
    for name in ("a.shop.test", "b.shop.test"):
        await wait_for(control, name, "active")
    assert {c.names for c in responder.state.certificates} == {("a.shop.test",), ("b.shop.test",)}

    resp = await control.delete("/api/core/zones/shop/domains/a.shop.test", headers=ACCOUNT)
    assert resp.status == 200
    # Pushed before the DELETE answered: the edge no longer holds it, nor does control's state
    assert {c.names for c in responder.state.certificates} == {("b.shop.test",)}
    assert {c.names for c in (await pulled_state(control)).certificates} == {("b.shop.test",)}
    assert not (data_dir / "certificates" / "a.shop.test").exists()
    assert (data_dir / "certificates" / "b.shop.test" / "privkey.pem").exists()
    # Deleting the zone takes the other one with it
    resp = await control.delete("/api/core/zones/shop", headers=ACCOUNT)
    assert resp.status == 200
    assert not responder.state.certificates
    assert not (data_dir / "certificates" / "b.shop.test").exists()


async def test_the_ca_unreachable_degrades_health_keeps_certificates_and_orders_resume(
        aiohttp_client: Any, data_dir: Path, pebble: Pebble, responder: ChallengeResponder) -> None:
    control = await start_control(aiohttp_client, data_dir, acme_environ(pebble, ASSETCDN_CONTROL_PUSH_WAIT_MS="10000"))
    responder.apply_delay_s = 0.3  # a busy edge: health must still not say "degraded" before the domain says why
    await responder.join(control)
    await make_zone(control)
    resp = await control.post("/api/core/zones/shop/domains", json={"Hostname": "kept.shop.test"}, headers=ACCOUNT)
    assert resp.status == 201
    await wait_for(control, "kept.shop.test", "active")

    pebble.stop()
    resp = await control.post("/api/core/zones/shop/domains", json={"Hostname": "new.shop.test"}, headers=ACCOUNT)
    assert resp.status == 201
    deadline = time.monotonic() + 20
    while True:
        resp = await control.get("/api/health")
        health = await resp.json()
        [acme] = [c for c in health["checks"] if c["name"] == "acme"]
        if not acme["healthy"]:
            break
        assert time.monotonic() < deadline, health
        await asyncio.sleep(0.2)
    # Degraded, but control still serves (200): only new certificates wait
    assert resp.status == 200 and health["status"] == "degraded" and acme["status"] == "degraded"
    assert "127.0.0.1" not in orjson.dumps(health).decode()  # the public answer names no address
    waiting = await domain(control, "new.shop.test")
    assert waiting["SslStatus"] == "provisioning" and "could not be reached" in waiting["SslError"]
    # The issued certificate is still offered, to the edge and to edges that pull
    assert {c.names for c in responder.state.certificates} == {("kept.shop.test",)}
    assert (await domain(control, "kept.shop.test"))["SslStatus"] == "active"

    pebble.start()  # a new CA instance (new root, no accounts): the account is registered again
    responder.hits.clear()
    await wait_for(control, "new.shop.test", "active")
    resp = await control.get("/api/health")
    health = await resp.json()
    assert resp.status == 200 and health["status"] == "ok", health
    assert {c.names for c in responder.state.certificates} == {("kept.shop.test",), ("new.shop.test",)}


async def test_a_certificate_is_renewed_at_two_thirds_of_its_life_and_the_new_one_reaches_the_edge(
        aiohttp_client: Any, data_dir: Path, tmp_path: Path, http_port: int,
        responder: ChallengeResponder) -> None:
    pebble = Pebble(tmp_path / "short-pebble", http_port, validity_s=12)
    pebble.start()
    try:
        control = await start_control(aiohttp_client, data_dir, acme_environ(pebble))
        await responder.join(control)
        await make_zone(control)
        resp = await control.post("/api/core/zones/shop/domains", json={"Hostname": "brief.shop.test"},
                                  headers=ACCOUNT)
        assert resp.status == 201
        first = await wait_for(control, "brief.shop.test", "active")
        [entry] = responder.state.certificates
        first_serial, first_state = leaf(entry.chain_pem).serial_number, responder.state.serial
        # Renewed at 2/3 of 12 s: a new certificate (new serial, later expiry) replaces the old one on the edge
        deadline = time.monotonic() + 30
        while leaf(responder.state.certificates[0].chain_pem).serial_number == first_serial:
            assert time.monotonic() < deadline, "the certificate was not renewed"
            await asyncio.sleep(0.2)
        [renewed] = responder.state.certificates
        assert responder.state.serial > first_state and renewed.names == ("brief.shop.test",)
        assert leaf(renewed.chain_pem).not_valid_after_utc > leaf(entry.chain_pem).not_valid_after_utc
        # The edges get the certificate first, then the record says so (a client never reads an expiry no
        # edge serves yet): the domain shows the renewal right after, within the same deadline.
        body = await domain(control, "brief.shop.test")
        while body["SslExpiresAt"] == first["SslExpiresAt"]:
            assert time.monotonic() < deadline, "the domain never showed the renewed certificate"
            await asyncio.sleep(0.05)
            body = await domain(control, "brief.shop.test")
        assert body["SslStatus"] == "active" and body["SslExpiresAt"] > first["SslExpiresAt"]
    finally:
        pebble.stop()


async def test_the_public_host_of_an_https_public_url_gets_a_certificate_too(
        aiohttp_client: Any, data_dir: Path, pebble: Pebble, responder: ChallengeResponder) -> None:
    environ = acme_environ(pebble, ASSETCDN_SERVER_PUBLIC_URL="https://cdn.shop.test")
    control = await start_control(aiohttp_client, data_dir, environ)
    await responder.join(control)
    deadline = time.monotonic() + ACTIVE_WITHIN_S
    while True:
        resp = await control.get("/api/health?deep=1", headers=METRICS)
        [acme] = [c for c in (await resp.json())["checks"] if c["name"] == "acme"]
        if acme["publicHost"]["status"] == "active":
            break
        assert time.monotonic() < deadline, acme
        await asyncio.sleep(0.2)
    assert acme["publicHost"]["hostname"] == "cdn.shop.test" and acme["publicHost"]["expiresAt"]
    assert [c.names for c in responder.state.certificates] == [("cdn.shop.test",)]
    assert sum(responder.hits.values()) >= 1


async def test_another_ca_orders_every_certificate_again_and_the_old_one_serves_meanwhile(
        aiohttp_client: Any, data_dir: Path, tmp_path: Path, pebble: Pebble, http_port: int,
        responder: ChallengeResponder) -> None:
    control = await start_control(aiohttp_client, data_dir, acme_environ(pebble))
    await responder.join(control)
    await make_zone(control)
    resp = await control.post("/api/core/zones/shop/domains", json={"Hostname": "moved.shop.test"}, headers=ACCOUNT)
    assert resp.status == 201
    await wait_for(control, "moved.shop.test", "active")
    first_root = pebble.root_pem()
    await control.close()
    # As staging -> production: another directory. Its ports are chosen while the first CA still holds its own:
    # chosen after, they could be the same ones, the same directory URL, which is not another CA.
    production = Pebble(tmp_path / "production", http_port)
    production.prepare()
    assert production.directory_url != pebble.directory_url
    pebble.stop()
    production.start()
    try:
        control = await start_control(aiohttp_client, data_dir, acme_environ(production))
        # The certificate on disk is offered at once, before the new CA has issued anything
        [kept] = (await pulled_state(control)).certificates
        assert_issued_by(kept.chain_pem, first_root)
        await responder.join(control)
        deadline = time.monotonic() + ACTIVE_WITHIN_S
        while True:
            certificates = responder.state.certificates
            if certificates and certificates[0].id != kept.id:
                break
            assert time.monotonic() < deadline, "the new CA was not asked for a certificate"
            await asyncio.sleep(0.2)
        assert_issued_by(certificates[0].chain_pem, production.root_pem())
        assert (await domain(control, "moved.shop.test"))["SslStatus"] == "active"
    finally:
        production.stop()
