"""Passkeys end to end against a software authenticator (real P-256 keys, real CBOR): registration
with packed and none attestation, the list, sign-in, and every refusal the ceremonies owe."""

from __future__ import annotations

from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from assetcdn.control.identity.passkeys.ceremony import AUTHENTICATE
from assetcdn.control.identity.passkeys.store import (
    MAX_LIVE_CHALLENGES,
    MAX_LIVE_CHALLENGES_PER_CLIENT,
)
from assetcdn.control.identity.service import PASSKEYS
from assetcdn.control.records.service import AUDIT
from tests.control.expect import expect_error
from tests.control.identity.signin_client import (  # noqa: F401 (make_control is a fixture)
    auth_options,
    make_control,
    passkey_login,
    register,
    session_from,
    signed_in,
    with_session,
)
from tests.control.identity.soft_authenticator import SoftAuthenticator, b64url
from tests.support.control import forwarded_for

PUBLIC_FIELDS = {"id", "name", "createdAt", "lastUsedAt", "deviceType", "backedUp", "algorithm", "transports"}


@pytest.fixture
async def control(make_control) -> TestClient:  # type: ignore[no-untyped-def]  # noqa: F811
    return await make_control()


@pytest.fixture
async def session(control: TestClient) -> str:
    return await signed_in(control)


async def listed(control: TestClient, session: str) -> list[dict[str, Any]]:
    resp = await control.get("/api/passkeys", headers=with_session(session, origin=None))
    assert resp.status == 200
    body = await resp.json()
    assert set(body) == {"passkeys"}
    return body["passkeys"]


def minutes_pass(control: TestClient, minutes: float) -> None:
    """The pending challenges' clock moves on by `minutes` (one second more)."""
    challenges = control.app[PASSKEYS].challenges
    clock = challenges.clock
    challenges.clock = lambda: clock() + minutes * 60 + 1


async def begin_from(control: TestClient, address: str) -> dict[str, Any]:
    """auth/begin as the client at `address`, forwarded by an edge."""
    resp = await control.post("/api/passkeys/auth/begin", headers=forwarded_for(address))
    assert resp.status == 200, await resp.text()
    options: dict[str, Any] = await resp.json()
    return options


async def registered(control: TestClient, session: str, **kwargs: Any) -> SoftAuthenticator:
    authenticator = SoftAuthenticator()
    resp = await register(control, session, authenticator, **kwargs)
    assert resp.status == 201, await resp.text()
    return authenticator


class TestRegistration:
    @pytest.mark.parametrize("attestation", ["packed", "none"])
    async def test_register_then_list_without_the_public_key(self, control: TestClient, session: str,
                                                             attestation: str) -> None:
        authenticator = SoftAuthenticator()
        resp = await register(control, session, authenticator, name="MacBook Pro", attestation=attestation)
        assert resp.status == 201
        body = await resp.json()
        assert body["ok"] is True and body["message"] == "Passkey registered."
        assert body["id"] == authenticator.id and body["name"] == "MacBook Pro"
        [passkey] = await listed(control, session)
        assert set(passkey) == PUBLIC_FIELDS
        assert passkey["id"] == authenticator.id
        assert (passkey["name"], passkey["lastUsedAt"], passkey["algorithm"]) == ("MacBook Pro", None, "ES256")
        assert passkey["deviceType"] in ("single_device", "multi_device")
        public_key = b64url(authenticator.cose_public_key())
        assert public_key not in str(passkey) and public_key not in str(body)
        [entry] = await control.app[AUDIT].entries(days=1, action="passkey.register", limit=5)
        assert entry["meta"]["id"] == authenticator.id and entry["meta"]["name"] == "MacBook Pro"
        assert entry["meta"]["actor"] == "session:session"

    async def test_the_options_name_the_relying_party_and_exclude_known_credentials(
            self, control: TestClient, session: str) -> None:
        first = await registered(control, session)
        resp = await control.post("/api/passkeys/register/begin", headers=with_session(session))
        options = await resp.json()
        assert resp.headers["Cache-Control"] == "no-store"
        assert options["rp"] == {"id": "localhost", "name": "assetcdn"}
        assert options["attestation"] == "none"
        assert [c["id"] for c in options["excludeCredentials"]] == [first.id]
        assert {p["alg"] for p in options["pubKeyCredParams"]} >= {-7, -257}
        # The same credential again is a conflict; nothing changes.
        again = first.clone()
        again.sign_count = 5
        resp = await control.post("/api/passkeys/register/complete", headers=with_session(session),
                                  json={"credential": again.create(options), "name": "twice"})
        await expect_error(resp, 409, "PasskeyExists")
        assert [p["name"] for p in await listed(control, session)] == ["Test key"]

    async def test_the_account_key_registers_without_a_browser_session(self, control: TestClient,
                                                                      session: str) -> None:
        account = {"AccountKey": "test-account-key"}
        begin = await control.post("/api/passkeys/register/begin", headers=account)
        assert begin.status == 200, await begin.text()
        authenticator = SoftAuthenticator()
        resp = await control.post("/api/passkeys/register/complete", headers=account,
                                  json={"credential": authenticator.create(await begin.json()), "name": "CI key"})
        assert resp.status == 201, await resp.text()
        assert [p["name"] for p in await listed(control, session)] == ["CI key"]
        assert (await passkey_login(control, authenticator)).status == 200
        await expect_error(await control.post("/api/passkeys/register/begin", headers={"AccountKey": "wrong"}),
                           401, "Unauthorized")

    async def test_registration_needs_a_session(self, control: TestClient, session: str) -> None:
        await expect_error(await control.post("/api/passkeys/register/begin"), 401, "Unauthorized")
        begin = await control.post("/api/passkeys/register/begin", headers=with_session(session))
        credential = SoftAuthenticator().create(await begin.json())
        resp = await control.post("/api/passkeys/register/complete", json={"credential": credential})
        await expect_error(resp, 401, "Unauthorized")
        assert await listed(control, session) == []

    @pytest.mark.parametrize("tamper", ["origin", "rp_id", "challenge", "reused", "expired", "auth-challenge"])
    async def test_a_bad_attestation_is_refused_and_stores_nothing(self, control: TestClient, session: str,
                                                                   tamper: str) -> None:
        authenticator = SoftAuthenticator()
        begin = await control.post("/api/passkeys/register/begin", headers=with_session(session))
        options = await begin.json()
        create: dict[str, Any] = {}
        if tamper == "origin":
            create["origin"] = "https://evil.example"
        elif tamper == "rp_id":
            create["rp_id"] = "evil.example"
        elif tamper == "challenge":
            create["challenge"] = b64url(b"x" * 32)
        elif tamper == "reused":
            first = await control.post("/api/passkeys/register/complete", headers=with_session(session),
                                       json={"credential": authenticator.create(options)})
            assert first.status == 201
            await control.delete(f"/api/passkeys?id={authenticator.id}", headers=with_session(session))
        elif tamper == "expired":  # five minutes pass
            minutes_pass(control, 5)
        elif tamper == "auth-challenge":  # a challenge issued for signing in cannot register
            await registered(control, session)
            create["challenge"] = (await auth_options(control))["challenge"]
            authenticator = SoftAuthenticator()
        before = await listed(control, session)
        resp = await control.post("/api/passkeys/register/complete", headers=with_session(session),
                                  json={"credential": authenticator.create(options, **create), "name": "x"})
        body = await expect_error(resp, 400, "InvalidAttestation")
        assert "not registered" in body["Message"]
        assert await listed(control, session) == before

    @pytest.mark.parametrize("body", [
        {}, {"credential": "text"}, {"credential": {"id": "abc", "response": {}}},
        {"credential": {"id": "abc", "rawId": "abc", "type": "public-key",
                        "response": {"clientDataJSON": "!!!", "attestationObject": "AAAA"}}},
    ])
    async def test_a_malformed_credential_is_a_400(self, control: TestClient, session: str, body: dict) -> None:
        resp = await control.post("/api/passkeys/register/complete", headers=with_session(session), json=body)
        await expect_error(resp, 400, "InvalidAttestation")

    async def test_garbage_attestation_bytes_are_a_400(self, control: TestClient, session: str) -> None:
        begin = await control.post("/api/passkeys/register/begin", headers=with_session(session))
        credential = SoftAuthenticator().create(await begin.json())
        credential["response"]["attestationObject"] = b64url(b"\xa3not cbor at all")
        resp = await control.post("/api/passkeys/register/complete", headers=with_session(session),
                                  json={"credential": credential})
        await expect_error(resp, 400, "InvalidAttestation")
        assert await listed(control, session) == []

    async def test_invalid_json_and_oversized_bodies(self, control: TestClient, session: str) -> None:
        headers = {**with_session(session), "Content-Type": "application/json"}
        resp = await control.post("/api/passkeys/register/complete", headers=headers, data=b"{nope")
        await expect_error(resp, 400, "InvalidJson")
        resp = await control.post("/api/passkeys/register/complete", headers=headers, data=b" " * 70_000)
        await expect_error(resp, 413, "PayloadTooLarge")

    @pytest.mark.parametrize("name", [7, "x" * 101, "bad\u0000name", "line\nbreak"])
    async def test_a_bad_name_is_a_400(self, control: TestClient, session: str, name: Any) -> None:
        resp = await register(control, session, SoftAuthenticator(), name=name)
        await expect_error(resp, 400, "InvalidName")
        assert await listed(control, session) == []


class TestSignIn:
    async def test_sign_in_sets_the_session_and_records_the_use(self, control: TestClient, session: str) -> None:
        authenticator = await registered(control, session)
        options = await auth_options(control)
        assert options["rpId"] == "localhost"
        assert [c["id"] for c in options["allowCredentials"]] == [authenticator.id]
        resp = await passkey_login(control, authenticator, options)
        assert resp.status == 200, await resp.text()
        body = await resp.json()
        assert body == {"ok": True, "verification": "ES256", "passkey": {"id": authenticator.id, "name": "Test key"}}
        new_session = session_from(resp)
        cookies = resp.headers.getall("Set-Cookie")
        assert cookies[0].endswith("; Path=/; HttpOnly; Secure; SameSite=Strict; Max-Age=604800")
        assert cookies[1].startswith("cdn_logged_in=1;")
        [passkey] = await listed(control, new_session)
        assert passkey["lastUsedAt"] is not None
        [entry] = await control.app[AUDIT].entries(days=1, action="login.success", limit=1)
        assert entry["meta"] == {"method": "passkey", "id": authenticator.id, "name": "Test key"}

    async def test_a_clone_with_a_counter_that_did_not_grow_is_refused(self, control: TestClient,
                                                                       session: str) -> None:
        authenticator = await registered(control, session)
        clone = authenticator.clone()
        assert (await passkey_login(control, authenticator)).status == 200  # counter 1
        assert (await passkey_login(control, authenticator)).status == 200  # counter 2
        resp = await passkey_login(control, clone, counter=2)  # the clone's copy of the counter
        body = await expect_error(resp, 401, "Unauthorized")
        assert "sign count" in body["Message"]
        assert "Set-Cookie" not in resp.headers
        await expect_error(await passkey_login(control, clone, counter=1), 401, "Unauthorized")
        assert (await passkey_login(control, authenticator)).status == 200  # the original goes on

    async def test_one_assertion_cannot_be_replayed(self, control: TestClient, session: str) -> None:
        authenticator = await registered(control, session)
        options = await auth_options(control)
        credential = authenticator.get(options)
        first = await control.post("/api/passkeys/auth/complete", json={"credential": credential})
        assert first.status == 200
        again = await control.post("/api/passkeys/auth/complete", json={"credential": credential})
        body = await expect_error(again, 401, "Unauthorized")
        assert "challenge" in body["Message"]

    async def test_an_expired_challenge_is_refused(self, control: TestClient, session: str) -> None:
        authenticator = await registered(control, session)
        options = await auth_options(control)
        minutes_pass(control, 5)
        resp = await passkey_login(control, authenticator, options)
        await expect_error(resp, 401, "Unauthorized")
        assert (await passkey_login(control, authenticator)).status == 200  # a fresh one works

    async def test_a_registration_challenge_does_not_sign_in(self, control: TestClient, session: str) -> None:
        authenticator = await registered(control, session)
        begin = await control.post("/api/passkeys/register/begin", headers=with_session(session))
        options = {**await begin.json(), "rpId": "localhost"}
        await expect_error(await passkey_login(control, authenticator, options), 401, "Unauthorized")

    @pytest.mark.parametrize("tamper", [{"origin": "https://evil.example"}, {"origin": "http://127.0.0.1:8787"},
                                        {"rp_id": "evil.example"}])
    async def test_wrong_origin_or_relying_party_is_refused(self, control: TestClient, session: str,
                                                            tamper: dict[str, str]) -> None:
        authenticator = await registered(control, session)
        resp = await passkey_login(control, authenticator, **tamper)
        await expect_error(resp, 401, "Unauthorized")
        assert "Set-Cookie" not in resp.headers

    async def test_a_signature_by_another_key_is_refused(self, control: TestClient, session: str) -> None:
        authenticator = await registered(control, session)
        impostor = SoftAuthenticator()
        impostor.credential_id = authenticator.credential_id  # same id, different private key
        await expect_error(await passkey_login(control, impostor), 401, "Unauthorized")

    async def test_delete_then_sign_in_fails(self, control: TestClient, session: str) -> None:
        authenticator = await registered(control, session)
        other = await registered(control, session)
        options = await auth_options(control)  # issued while the passkey still existed
        resp = await control.delete(f"/api/passkeys?id={authenticator.id}", headers=with_session(session))
        assert resp.status == 204 and await resp.read() == b""
        body = await expect_error(await passkey_login(control, authenticator, options), 401, "Unauthorized")
        assert "no passkey" in body["Message"]
        assert [c["id"] for c in (await auth_options(control))["allowCredentials"]] == [other.id]
        [entry] = await control.app[AUDIT].entries(days=1, action="passkey.delete", limit=5)
        assert entry["meta"]["id"] == authenticator.id
        await control.delete(f"/api/passkeys?id={other.id}", headers=with_session(session))
        assert (await auth_options(control))["allowCredentials"] == []

    async def test_failed_assertions_count_towards_the_sign_in_limit(self, control: TestClient,
                                                                     session: str) -> None:
        authenticator = await registered(control, session)
        for _ in range(5):
            await expect_error(await passkey_login(control, authenticator, origin="https://evil.example"),
                               401, "Unauthorized")
        resp = await passkey_login(control, authenticator)
        await expect_error(resp, 429, "TooManyRequests")
        assert 0 < int(resp.headers["Retry-After"]) <= 900
        failures = await control.app[AUDIT].entries(days=1, action="login.failure", limit=10)
        assert len(failures) == 5 and all(f["meta"]["method"] == "passkey" for f in failures)

    @pytest.mark.parametrize("body", [{}, {"credential": {}}, {"credential": {"id": "x", "response": {
        "clientDataJSON": b64url(b'{"challenge": 5}')}}}])
    async def test_a_malformed_assertion_is_refused(self, control: TestClient, session: str, body: dict) -> None:
        await registered(control, session)
        await expect_error(await control.post("/api/passkeys/auth/complete", json=body), 401, "Unauthorized")


class TestManagement:
    async def test_rename(self, control: TestClient, session: str) -> None:
        authenticator = await registered(control, session)
        resp = await control.patch(f"/api/passkeys?id={authenticator.id}", json={"name": "  YubiKey 5  "},
                                   headers=with_session(session))
        assert resp.status == 200
        assert (await resp.json())["name"] == "YubiKey 5"
        assert [p["name"] for p in await listed(control, session)] == ["YubiKey 5"]
        for body in ({"name": ""}, {"name": None}, {}, {"name": "x" * 101}):
            resp = await control.patch(f"/api/passkeys?id={authenticator.id}", json=body,
                                       headers=with_session(session))
            assert resp.status == 400
        await expect_error(await control.patch("/api/passkeys?id=nope", json={"name": "a"},
                                               headers=with_session(session)), 404, "PasskeyNotFound")
        [entry] = await control.app[AUDIT].entries(days=1, action="passkey.rename", limit=5)
        assert entry["meta"]["name"] == "YubiKey 5"

    async def test_delete_needs_a_known_id(self, control: TestClient, session: str) -> None:
        await expect_error(await control.delete("/api/passkeys", headers=with_session(session)), 400, "MissingId")
        await expect_error(await control.delete("/api/passkeys?id=nope", headers=with_session(session)),
                           404, "PasskeyNotFound")

    async def test_management_needs_the_session_or_the_account_key(self, control: TestClient, session: str) -> None:
        authenticator = await registered(control, session)
        await expect_error(await control.get("/api/passkeys"), 401, "Unauthorized")
        await expect_error(await control.delete(f"/api/passkeys?id={authenticator.id}"), 401, "Unauthorized")
        resp = await control.get("/api/passkeys", headers={"AccountKey": "test-account-key"})
        assert [p["id"] for p in (await resp.json())["passkeys"]] == [authenticator.id]
        resp = await control.delete(f"/api/passkeys?id={authenticator.id}", headers={"AccountKey": "test-account-key"})
        assert resp.status == 204

    async def test_a_client_at_its_share_loses_its_own_oldest_challenge(self, control: TestClient,
                                                                        session: str) -> None:
        authenticator = await registered(control, session)
        oldest = await begin_from(control, "203.0.113.7")
        for _ in range(MAX_LIVE_CHALLENGES_PER_CLIENT):
            newest = await begin_from(control, "203.0.113.7")
        await expect_error(await passkey_login(control, authenticator, oldest), 401, "Unauthorized")
        assert (await passkey_login(control, authenticator, newest)).status == 200

    async def test_an_ipv6_client_is_its_slash_64(self, control: TestClient, session: str) -> None:
        authenticator = await registered(control, session)
        oldest = await begin_from(control, "2001:db8:5:7::1")
        for host in range(2, MAX_LIVE_CHALLENGES_PER_CLIENT + 2):  # other addresses of the same /64
            await begin_from(control, f"2001:db8:5:7::{host:x}")
        await expect_error(await passkey_login(control, authenticator, oldest), 401, "Unauthorized")
        elsewhere = await begin_from(control, "2001:db8:5:8::1")  # the next /64 has a share of its own
        assert (await passkey_login(control, authenticator, elsewhere)).status == 200

    async def test_many_addresses_filling_the_cap_lock_no_one_out(self, control: TestClient, session: str) -> None:
        authenticator = await registered(control, session)
        challenges = control.app[PASSKEYS].challenges
        mine = await begin_from(control, "192.0.2.200")  # a ceremony in progress before the flood
        # The flood's challenges go to the store itself, as auth/begin issues them (the tests above hold the
        # forwarded addresses behind begin_from): 1,020 calls over HTTP last as long as the machine's load makes
        # them, and past 5 minutes `mine` (and the flood's first) expired under them, as the store should.
        flooders = MAX_LIVE_CHALLENGES // MAX_LIVE_CHALLENGES_PER_CLIENT + 1
        for n in range(flooders):  # every flooding address takes its whole share: more than the cap
            for _ in range(MAX_LIVE_CHALLENGES_PER_CLIENT):
                challenges.issue(AUTHENTICATE, f"198.51.100.{n}")
        assert len(challenges) == MAX_LIVE_CHALLENGES
        late = await begin_from(control, "192.0.2.201")  # a newcomer is still served
        assert (await passkey_login(control, authenticator, mine)).status == 200
        assert (await passkey_login(control, authenticator, late)).status == 200
