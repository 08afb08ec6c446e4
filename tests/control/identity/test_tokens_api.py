"""Scoped tokens: POST/GET/DELETE /api/tokens, and what a token then opens (or no longer opens)."""

from __future__ import annotations

import hashlib
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from assetcdn.control.identity.service import TOKENS
from assetcdn.control.identity.tokens import MAX_ACTIVE_TOKENS, SCOPES, TokenRequest
from assetcdn.control.storage.service import DB
from tests.control.expect import expect_error, head_commit, parse_time
from tests.support.control import ACCESS, ACCOUNT

TOKEN_RE = re.compile(r"^cdnsk_[0-9a-f]{40}$")
LIST_FIELDS = {"id", "name", "prefix", "scopes", "createdAt", "expiresAt", "lastUsedAt"}


async def mint(client: TestClient, scopes: list[str], **extra: Any) -> dict[str, Any]:
    resp = await client.post("/api/tokens", json={"name": "ci", "scopes": scopes, **extra}, headers=ACCOUNT)
    assert resp.status == 201, await resp.text()
    return await resp.json()


def bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


async def test_create_returns_the_secret_once(control: TestClient) -> None:
    body = await mint(control, ["storage:read", "assets:read"])
    assert body["HttpCode"] == 201
    secret = body["token"]
    assert TOKEN_RE.match(secret)
    token = body["Token"]
    assert token["secret"] == secret
    assert token["prefix"] == secret[:8]  # the OpenAPI document's "first 8 chars"
    assert (token["id"], token["name"], token["scopes"]) == (body["id"], "ci", ["storage:read", "assets:read"])
    expires = parse_time(token["expiresAt"]) - parse_time(token["createdAt"])
    assert timedelta(days=364) < expires <= timedelta(days=365)  # default lifetime: 365 days


async def test_list_is_redacted(control: TestClient) -> None:
    created = await mint(control, ["assets:read"])
    secret = created["token"]
    resp = await control.get("/api/tokens", headers=ACCOUNT)
    assert resp.status == 200
    raw = await resp.text()
    assert secret not in raw
    assert hashlib.sha256(secret.encode()).hexdigest() not in raw
    body = await resp.json()
    assert body["Count"] == 1
    (listed,) = body["Tokens"]
    assert set(listed) == LIST_FIELDS
    assert listed["prefix"] == secret[:8]
    assert (listed["id"], listed["scopes"], listed["lastUsedAt"]) == (created["id"], ["assets:read"], None)


async def test_use_records_last_used(control: TestClient) -> None:
    secret = (await mint(control, ["assets:read"]))["token"]
    assert (await control.get("/api/assets", headers=bearer(secret))).status == 200
    (listed,) = (await (await control.get("/api/tokens", headers=ACCOUNT)).json())["Tokens"]
    parse_time(listed["lastUsedAt"])


@pytest.mark.parametrize(("scope", "method", "path"), [
    ("storage:read", "GET", "/api/storage/akande/v1/logos/logo.svg"),
    ("storage:read", "HEAD", "/api/storage/akande/v1/logos/logo.svg"),
    ("storage:read", "GET", "/api/storage/akande/v1/"),
    ("assets:read", "GET", "/api/assets"),
    ("assets:read", "GET", "/api/assets/metadata?path=akande/v1/logos/logo.svg"),
])
async def test_token_opens_only_routes_of_its_scope(control: TestClient, zone: str, scope: str, method: str,
                                                    path: str) -> None:
    put = await control.put("/api/storage/akande/v1/logos/logo.svg", data=b"<svg/>", headers=ACCESS)
    assert put.status == 201
    allowed = (await mint(control, [scope]))["token"]
    other = (await mint(control, [s for s in SCOPES if s != scope]))["token"]
    assert (await control.request(method, path, headers=bearer(allowed))).status == 200
    resp = await control.request(method, path, headers=bearer(other))
    assert resp.status == 401
    if method != "HEAD":
        await expect_error(resp, 401, "Unauthorized")


async def test_write_scope_is_needed_to_upload_and_delete(control: TestClient, zone: str, data_dir: Path) -> None:
    reader = (await mint(control, ["storage:read"]))["token"]
    writer = (await mint(control, ["storage:write"]))["token"]
    path = "/api/storage/akande/v1/logos/logo.svg"
    head = head_commit(data_dir)
    await expect_error(await control.put(path, data=b"<svg/>", headers=bearer(reader)), 401, "Unauthorized")
    await expect_error(await control.post("/api/storage/batch", json={"files": []}, headers=bearer(reader)),
                       401, "Unauthorized")
    assert head_commit(data_dir) == head
    assert (await control.put(path, data=b"<svg/>", headers=bearer(writer))).status == 201
    await expect_error(await control.delete(path, headers=bearer(reader)), 401, "Unauthorized")
    assert (await control.delete(path, headers=bearer(writer))).status == 200


async def test_no_token_opens_account_routes(control: TestClient) -> None:
    secret = (await mint(control, list(SCOPES)))["token"]
    for method, path in (("GET", "/api/tokens"), ("POST", "/api/tokens"), ("DELETE", "/api/tokens?id=x"),
                         ("GET", "/api/core/rules"), ("GET", "/api/core/audit-logs"), ("GET", "/api/logs")):
        resp = await control.request(method, path, json={"Name": "x1", "name": "x", "scopes": ["assets:read"]},
                                     headers=bearer(secret))
        await expect_error(resp, 401, "Unauthorized")


async def test_revoked_token_is_401_on_next_use(control: TestClient) -> None:
    created = await mint(control, ["assets:read"])
    secret = created["token"]
    assert (await control.get("/api/assets", headers=bearer(secret))).status == 200
    resp = await control.delete("/api/tokens", params={"id": created["id"]}, headers=ACCOUNT)
    assert resp.status == 204  # the OpenAPI document's status, no body
    assert await resp.read() == b""
    await expect_error(await control.get("/api/assets", headers=bearer(secret)), 401, "Unauthorized")
    assert (await (await control.get("/api/tokens", headers=ACCOUNT)).json())["Tokens"] == []
    # Revoking twice: the id is no longer known.
    resp = await control.delete("/api/tokens", params={"id": created["id"]}, headers=ACCOUNT)
    await expect_error(resp, 404, "TokenNotFound")


async def test_expired_token_is_401(control: TestClient) -> None:
    past = (datetime.now(UTC) - timedelta(minutes=1)).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    secret, _record = await control.app[TOKENS].create(TokenRequest("old", ("assets:read",), past))
    await expect_error(await control.get("/api/assets", headers=bearer(secret)), 401, "Unauthorized")


async def test_token_with_future_expiry_works(control: TestClient) -> None:
    future = (datetime.now(UTC) + timedelta(days=2)).isoformat()
    body = await mint(control, ["assets:read"], expiresAt=future)
    assert parse_time(body["expiresAt"]) > datetime.now(UTC) + timedelta(days=1)
    assert (await control.get("/api/assets", headers=bearer(body["token"]))).status == 200
    body = await mint(control, ["assets:read"], expiresInDays=3)
    assert parse_time(body["expiresAt"]) > datetime.now(UTC) + timedelta(days=2)


async def test_expires_at_and_expires_in_days_together_are_400_not_one_silently(control: TestClient) -> None:
    future = (datetime.now(UTC) + timedelta(days=2)).isoformat()
    resp = await control.post("/api/tokens", json={"name": "ci", "scopes": ["assets:read"], "expiresAt": future,
                                                   "expiresInDays": 30}, headers=ACCOUNT)
    body = await expect_error(resp, 400, "InvalidParameter")
    assert body["error"]["target"] == "expiresInDays" and "expiresAt" in body["Message"]
    assert (await (await control.get("/api/tokens", headers=ACCOUNT)).json())["Count"] == 0
    # Either one alone, or the other sent as null, is as before.
    body = await mint(control, ["assets:read"], expiresAt=None, expiresInDays=3)
    assert parse_time(body["expiresAt"]) > datetime.now(UTC) + timedelta(days=2)
    body = await mint(control, ["assets:read"], expiresAt=future, expiresInDays=None)
    assert parse_time(body["expiresAt"]) < datetime.now(UTC) + timedelta(days=3)


@pytest.mark.parametrize("secret", ["cdnsk_" + "0" * 40, "cdnsk_short", "not-a-token", ""])
async def test_unknown_or_malformed_tokens_are_401(control: TestClient, secret: str) -> None:
    await expect_error(await control.get("/api/assets", headers=bearer(secret)), 401, "Unauthorized")


@pytest.mark.parametrize(("body", "target"), [
    ({"scopes": ["assets:read"]}, "name"),
    ({"name": "   ", "scopes": ["assets:read"]}, "name"),
    ({"name": "x" * 101, "scopes": ["assets:read"]}, "name"),
    ({"name": "ci"}, "scopes"),
    ({"name": "ci", "scopes": []}, "scopes"),
    ({"name": "ci", "scopes": "assets:read"}, "scopes"),
    ({"name": "ci", "scopes": ["assets:read", "root"]}, "scopes"),
    ({"name": "ci", "scopes": ["assets:read"], "expiresAt": "yesterday"}, "expiresAt"),
    ({"name": "ci", "scopes": ["assets:read"], "expiresAt": "2001-01-01T00:00:00Z"}, "expiresAt"),
    ({"name": "ci", "scopes": ["assets:read"], "expiresInDays": 0}, "expiresInDays"),
    ({"name": "ci", "scopes": ["assets:read"], "expiresInDays": 366}, "expiresInDays"),
    ({"name": "ci", "scopes": ["assets:read"], "expiresInDays": "7"}, "expiresInDays"),
    (["ci"], None),
])
async def test_invalid_create_bodies_are_400(control: TestClient, body: Any, target: str | None) -> None:
    resp = await control.post("/api/tokens", json=body, headers=ACCOUNT)
    assert resp.status == 400
    error = (await resp.json())["error"]
    assert error["target"] == target
    assert (await (await control.get("/api/tokens", headers=ACCOUNT)).json())["Count"] == 0


@pytest.mark.parametrize("name", ["x\u0000\u001b[31mred\u202e", "tab\there", "bidi\u202eoverride", "zero\u200bwidth",
                                  "line\u2028separator", "a" * 101])
async def test_names_with_hidden_characters_are_refused_as_passkey_names_are(control: TestClient, name: str) -> None:
    resp = await control.post("/api/tokens", json={"name": name, "scopes": ["assets:read"]}, headers=ACCOUNT)
    body = await expect_error(resp, 400, "InvalidName")
    assert body["error"]["target"] == "name"
    assert (await (await control.get("/api/tokens", headers=ACCOUNT)).json())["Count"] == 0


@pytest.mark.parametrize(("name", "code"), [(None, "MissingName"), ("  ", "MissingName"), (5, "InvalidName"),
                                           (True, "InvalidName"), (["ci"], "InvalidName")])
async def test_a_name_of_another_type_is_an_invalid_name_not_a_missing_one(control: TestClient, name: Any,
                                                                            code: str) -> None:
    """`{"name": 5}` was answered MissingName "'name' is required", though a name was sent."""
    resp = await control.post("/api/tokens", json={"name": name, "scopes": ["assets:read"]}, headers=ACCOUNT)
    body = await expect_error(resp, 400, code)
    assert body["error"]["target"] == "name"
    assert (await (await control.get("/api/tokens", headers=ACCOUNT)).json())["Count"] == 0


async def test_a_printable_name_is_kept_trimmed(control: TestClient) -> None:
    assert (await mint(control, ["assets:read"], name="  CI – déploiement 🚀 "))["name"] == "CI – déploiement 🚀"


async def test_unknown_scope_lists_the_offenders(control: TestClient) -> None:
    resp = await control.post("/api/tokens", json={"name": "ci", "scopes": ["assets:read", "root"]}, headers=ACCOUNT)
    body = await expect_error(resp, 400, "InvalidScopes")
    assert body["invalid"] == ["root"]


async def test_bad_json_is_400(control: TestClient) -> None:
    resp = await control.post("/api/tokens", data=b"{name", headers={**ACCOUNT, "Content-Type": "application/json"})
    await expect_error(resp, 400, "InvalidJson")


async def test_revoke_without_id_is_400(control: TestClient) -> None:
    body = await expect_error(await control.delete("/api/tokens", headers=ACCOUNT), 400, "MissingId")
    assert body["error"]["target"] == "id"


async def test_revoke_of_an_unknown_id_is_404(control: TestClient) -> None:
    resp = await control.delete("/api/tokens", params={"id": "00000000-0000-0000-0000-000000000000"}, headers=ACCOUNT)
    await expect_error(resp, 404, "TokenNotFound")


async def test_fifty_first_active_token_is_400(control: TestClient) -> None:
    ids = [(await mint(control, ["assets:read"]))["id"] for _ in range(MAX_ACTIVE_TOKENS)]
    resp = await control.post("/api/tokens", json={"name": "one-more", "scopes": ["assets:read"]}, headers=ACCOUNT)
    body = await expect_error(resp, 400, "TooManyTokens")
    assert "50" in body["Message"]
    # Revoking one frees a place.
    assert (await control.delete("/api/tokens", params={"id": ids[0]}, headers=ACCOUNT)).status == 204
    await mint(control, ["assets:read"])


async def test_token_routes_need_the_account_key(control: TestClient) -> None:
    for method in ("GET", "POST", "DELETE"):
        for headers in ({}, ACCESS, {"AccountKey": "nope"}):
            resp = await control.request(method, "/api/tokens?id=x", json={"name": "x", "scopes": ["assets:read"]},
                                         headers=headers)
            await expect_error(resp, 401, "Unauthorized")


# -- expiresAt bounds -------------------------------------------------------------------------------

@pytest.mark.parametrize("expires_at", [
    "9999-12-31T23:59:59-05:00",        # year 10000 once the offset is applied
    "9999-12-31T23:59:59+05:00",
    "0001-01-01T00:00:00+14:00",        # year 0 once the offset is applied
    "2001-01-01T00:00:00Z",             # in the past
    "2999-01-01T00:00:00Z",             # beyond the longest lifetime (365 days, as expiresInDays)
    "2030-01-01T00:00:00",              # no time zone: refused rather than guessed
    "2030-01-01",
    "2030-13-01T00:00:00Z",
    "tomorrow",
    "",
    20300101,
    True,
    {"at": "2030-01-01T00:00:00Z"},
])
async def test_out_of_range_or_ambiguous_expiry_is_400(control: TestClient, expires_at: Any) -> None:
    resp = await control.post("/api/tokens", json={"name": "ci", "scopes": ["assets:read"], "expiresAt": expires_at},
                              headers=ACCOUNT)
    body = await expect_error(resp, 400, "InvalidParameter")
    assert body["error"]["target"] == "expiresAt"
    assert (await (await control.get("/api/tokens", headers=ACCOUNT)).json())["Count"] == 0


@pytest.mark.parametrize("offset", ["Z", "z", "+00:00", "-05:00", "+14:00"])
async def test_expiry_with_an_offset_is_kept_as_utc(control: TestClient, offset: str) -> None:
    local = datetime.now(UTC) + timedelta(days=30)
    hours = {"Z": 0, "z": 0, "+00:00": 0, "-05:00": -5, "+14:00": 14}[offset]
    wall = (local + timedelta(hours=hours)).strftime("%Y-%m-%dT%H:%M:%S")
    body = await mint(control, ["assets:read"], expiresAt=wall + offset)
    assert body["expiresAt"].endswith("Z")
    assert abs(parse_time(body["expiresAt"]) - local) < timedelta(seconds=2)
    assert (await control.get("/api/assets", headers=bearer(body["token"]))).status == 200


async def test_expiry_at_the_longest_lifetime_is_accepted(control: TestClient) -> None:
    at = (datetime.now(UTC) + timedelta(days=365)).isoformat()
    body = await mint(control, ["assets:read"], expiresAt=at)
    assert abs(parse_time(body["expiresAt"]) - parse_time(at)) < timedelta(milliseconds=1)


# -- zones:* scopes ---------------------------------------------------------------------------------

async def test_zones_read_token_lists_and_reads_zones_but_cannot_change_them(control: TestClient, zone: str,
                                                                           data_dir: Path) -> None:
    reader = bearer((await mint(control, ["zones:read"]))["token"])
    resp = await control.get("/api/core/zones", headers=reader)
    assert resp.status == 200
    assert [z["Name"] for z in await resp.json()] == [zone]
    assert (await control.get(f"/api/core/zones/{zone}", headers=reader)).status == 200
    assert (await control.get(f"/api/core/zones/{zone}/domains", headers=reader)).status == 200
    head = head_commit(data_dir)
    for method, path, body in (("POST", "/api/core/zones", {"Name": "other"}),
                               ("DELETE", f"/api/core/zones/{zone}", None),
                               ("POST", f"/api/core/zones/{zone}/domains", {"Hostname": "cdn.example.com"}),
                               ("DELETE", f"/api/core/zones/{zone}/domains/cdn.example.com", None)):
        await expect_error(await control.request(method, path, json=body, headers=reader), 401, "Unauthorized")
    assert head_commit(data_dir) == head


async def test_zones_write_token_creates_and_deletes_zones_and_domains(control: TestClient) -> None:
    writer = bearer((await mint(control, ["zones:write"]))["token"])
    resp = await control.post("/api/core/zones", json={"Name": "scoped"}, headers=writer)
    assert resp.status == 201, await resp.text()
    resp = await control.post("/api/core/zones/scoped/domains", json={"Hostname": "cdn.scoped.com"}, headers=writer)
    assert resp.status == 201, await resp.text()
    assert (await control.delete("/api/core/zones/scoped/domains/cdn.scoped.com", headers=writer)).status == 200
    await expect_error(await control.get("/api/core/zones", headers=writer), 401, "Unauthorized")  # read is its own scope
    assert (await control.delete("/api/core/zones/scoped", headers=writer)).status == 200
    audit = await (await control.get("/api/core/audit-logs", headers=ACCOUNT)).json()
    actions = [(e["action"], e["meta"]["actor"]) for e in reversed(audit["Entries"]) if e["action"] != "token.create"]
    actor = f"token:{(await (await control.get('/api/tokens', headers=ACCOUNT)).json())['Tokens'][0]['id']}"
    assert actions == [("zone.create", actor), ("domain.add", actor), ("domain.remove", actor), ("zone.delete", actor)]


async def test_other_scopes_do_not_open_zone_routes(control: TestClient, zone: str) -> None:
    others = (await mint(control, [s for s in SCOPES if not s.startswith("zones:")]))["token"]
    await expect_error(await control.get("/api/core/zones", headers=bearer(others)), 401, "Unauthorized")
    await expect_error(await control.post("/api/core/zones", json={"Name": "x1"}, headers=bearer(others)),
                       401, "Unauthorized")


@pytest.mark.parametrize("scope", ["webhooks:read", "webhooks:write", "ai:read"])
async def test_scopes_of_endpoints_to_come_are_accepted_at_mint_time(control: TestClient, scope: str) -> None:
    body = await mint(control, [scope])
    assert body["scopes"] == [scope]


async def test_old_tokens_list_with_the_short_prefix(control: TestClient) -> None:
    secret = (await mint(control, ["assets:read"]))["token"]
    db = control.app[DB]
    await db.write("UPDATE tokens SET prefix = ?", (secret[:14],))  # a row minted before the prefix was shortened
    (listed,) = (await (await control.get("/api/tokens", headers=ACCOUNT)).json())["Tokens"]
    assert listed["prefix"] == secret[:8]
