"""Audit log: every successful mutation appends one entry; GET /api/core/audit-logs (AccountKey)
filters by days, action and limit, newest first, and no entry carries a key or token value."""

from __future__ import annotations

import base64
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from assetcdn.control.app import create_app
from assetcdn.control.records.service import AUDIT
from assetcdn.shared.cluster import FORWARDED_HEADER, sign_forwarded
from assetcdn.shared.config import load_settings
from tests.control.expect import expect_error, parse_time
from tests.support.control import ACCESS, ACCOUNT, SECRETS, forwarded_for
from tests.support.sockets import raw_answer

ENTRY_FIELDS = {"timestamp", "action", "ip", "userAgent", "requestId", "meta"}
PURGE = {"x-api-key": SECRETS.purge_key}


async def entries(control: TestClient, **params: Any) -> list[dict[str, Any]]:
    resp = await control.get("/api/core/audit-logs", params={k: str(v) for k, v in params.items()}, headers=ACCOUNT)
    assert resp.status == 200, await resp.text()
    body = await resp.json()
    assert set(body) == {"Period", "Entries", "Count", "DateFetched"}
    assert body["Count"] == len(body["Entries"])
    parse_time(body["DateFetched"])
    return body["Entries"]


async def test_every_mutation_appends_one_entry(control: TestClient) -> None:
    steps: list[tuple[str, Any]] = [
        ("zone.create", control.post("/api/core/zones", json={"Name": "akande"}, headers=ACCOUNT)),
        ("storage.upload", control.put("/api/storage/akande/v1/logos/a.svg", data=b"<svg/>", headers=ACCESS)),
        ("storage.batch", control.post("/api/storage/batch", headers=ACCESS, json={"files": [
            {"path": "akande/v1/logos/b.svg", "content": base64.b64encode(b"<svg/>").decode()},
            {"path": "akande/v1/logos/c.svg", "content": "<svg></svg>", "encoding": "utf-8"}]})),
        ("storage.delete", control.delete("/api/storage/akande/v1/logos/a.svg", headers=ACCESS)),
        ("domain.add", control.post("/api/core/zones/akande/domains", json={"Hostname": "cdn.akande.com"},
                                    headers=ACCOUNT)),
        ("domain.remove", control.delete("/api/core/zones/akande/domains/cdn.akande.com", headers=ACCOUNT)),
        ("rules.update", control.post("/api/core/rules", json={"File": "_redirects", "Content": "/a /b 301\n"},
                                      headers=ACCOUNT)),
        ("purge.execute", control.post("/api/purge", json={"tags": ["project-akande"]}, headers=PURGE)),
        ("token.create", control.post("/api/tokens", json={"name": "ci", "scopes": ["assets:read"]},
                                      headers=ACCOUNT)),
    ]
    for _action, call in steps:
        resp = await call
        assert resp.status in (200, 201), await resp.text()
    secret = (await resp.json())["token"]
    token_id = (await resp.json())["id"]
    resp = await control.delete("/api/tokens", params={"id": token_id}, headers=ACCOUNT)
    assert resp.status == 204
    resp = await control.delete("/api/core/zones/akande", headers=ACCOUNT)
    assert resp.status == 200
    expected = [action for action, _ in steps] + ["token.revoke", "zone.delete"]

    found = await entries(control)
    assert [e["action"] for e in reversed(found)] == expected
    for entry in found:
        assert set(entry) == ENTRY_FIELDS
        parse_time(entry["timestamp"])
        assert entry["ip"] == "127.0.0.1" and entry["requestId"]
    by_action = {e["action"]: e["meta"] for e in found}
    assert by_action["storage.upload"]["path"] == "akande/v1/logos/a.svg"
    assert by_action["storage.batch"]["files"] == 2 and by_action["storage.batch"]["commit"]
    assert by_action["zone.create"]["name"] == "akande" and by_action["zone.create"]["actor"] == "key:AccountKey"
    assert by_action["zone.delete"]["zone"] == "akande"
    assert by_action["domain.add"]["hostname"] == "cdn.akande.com"
    assert by_action["rules.update"]["file"] == "_redirects"
    assert by_action["purge.execute"]["purged"] == ["project-akande"]
    assert by_action["token.create"]["id"] == token_id == by_action["token.revoke"]["id"]
    text = str(found)
    for value in (secret, SECRETS.account_key, SECRETS.access_key, SECRETS.purge_key, "<svg"):
        assert value not in text


async def test_failed_and_read_only_calls_are_not_audited(control: TestClient, zone: str) -> None:
    before = len(await entries(control))
    await control.post("/api/core/zones", json={"Name": "akande"}, headers=ACCOUNT)           # 409
    await control.post("/api/core/rules", json={"File": "_headers", "Content": "nope"}, headers=ACCOUNT)  # 400
    await control.post("/api/core/zones", json={"Name": "other"})                             # 401
    await control.get("/api/core/zones", headers=ACCOUNT)
    await control.post("/api/analytics", json={"path": "/x"})
    assert len(await entries(control)) == before


async def test_filters_by_action_family_and_limit(control: TestClient) -> None:
    for name in ("one", "two", "three"):
        assert (await control.post("/api/core/zones", json={"Name": name}, headers=ACCOUNT)).status == 201
    await control.delete("/api/core/zones/two", headers=ACCOUNT)
    assert [e["meta"]["name"] for e in await entries(control, action="zone.create")] == ["three", "two", "one"]
    assert [e["action"] for e in await entries(control, action="zone")] == ["zone.delete"] + ["zone.create"] * 3
    assert await entries(control, action="token.create") == []
    assert len(await entries(control, limit=2)) == 2
    resp = await control.get("/api/core/audit-logs", params={"limit": "99999", "days": "0"}, headers=ACCOUNT)
    assert (await resp.json())["Period"] == {"Days": 1, "Action": None, "Limit": 5000}
    resp = await control.get("/api/core/audit-logs", params={"action": "zone.create"}, headers=ACCOUNT)
    assert (await resp.json())["Period"] == {"Days": 7, "Action": "zone.create", "Limit": 500}


async def test_days_window_and_90_day_retention(control: TestClient) -> None:
    audit = control.app[AUDIT]
    now = time.time()
    for days_ago, action in ((100, "zone.create"), (30, "zone.delete"), (2, "rules.update")):
        await audit.append(action, ip="192.0.2.1", user_agent="t", request_id=None, meta={},
                           now=now - days_ago * 86400)
    assert [e["action"] for e in await entries(control)] == ["rules.update"]
    assert [e["action"] for e in await entries(control, days=90)] == ["rules.update", "zone.delete"]
    await audit.prune()  # (the start-up prune may have run already)
    assert [tuple(row) for row in await audit.db.fetch("SELECT COUNT(*) FROM audit_log")] == [(2,)]


async def test_user_agent_is_cut_at_256(control: TestClient) -> None:
    resp = await control.post("/api/core/zones", json={"Name": "akande"},
                              headers={**ACCOUNT, "User-Agent": "u" * 1000})
    assert resp.status == 201
    assert (await entries(control))[0]["userAgent"] == "u" * 256


async def test_a_user_agent_that_is_not_utf8_is_audited_as_its_bytes(control: TestClient) -> None:
    """The entry of a mutation whose User-Agent is not UTF-8 (read with surrogate escapes, which SQLite refuses) was
    not written: whoever held a key could make changes that the audit log never showed."""
    assert control.server.port is not None
    body = b'{"Name": "akande"}'
    answer = await raw_answer(control.server.port, (
        f"POST /api/core/zones HTTP/1.1\r\nHost: 127.0.0.1\r\nAccountKey: {SECRETS.account_key}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\nConnection: close\r\n").encode()
        + b"User-Agent: tool/\xff\xfe\r\n\r\n" + body)
    assert answer.startswith(b"HTTP/1.1 201 "), answer[:300]
    [entry] = await entries(control)
    assert (entry["action"], entry["meta"]["name"], entry["userAgent"]) == ("zone.create", "akande", "tool/\\xff\\xfe")


@pytest.mark.parametrize(("peer_headers", "expected"), [
    # Signed as each test runs: a signature made when the tests are collected is stale minutes later.
    (lambda: forwarded_for("203.0.113.9"), "203.0.113.9"),                       # signed by an edge: believed
    (lambda: forwarded_for("198.51.100.1, 203.0.113.9"), "203.0.113.9"),         # the hop the edge saw
    (lambda: forwarded_for("not-an-ip"), "127.0.0.1"),
    (lambda: {"X-Forwarded-For": "203.0.113.9"}, "127.0.0.1"),                   # unsigned, even from loopback
    (lambda: {**forwarded_for("203.0.113.9"), "X-Forwarded-For": "198.51.100.7"}, "127.0.0.1"),  # another's
    (lambda: {"X-Forwarded-For": "203.0.113.9",
              FORWARDED_HEADER: sign_forwarded("another-secret", "203.0.113.9")}, "127.0.0.1"),
    (lambda: {"X-Forwarded-For": "203.0.113.9",
              FORWARDED_HEADER: sign_forwarded(SECRETS.cluster_secret, "203.0.113.9", now=time.time() - 3600)},
     "127.0.0.1"),
])
async def test_client_ip_comes_from_a_signed_edge_forward(control: TestClient,
                                                          peer_headers: Callable[[], dict[str, str]],
                                                          expected: str) -> None:
    resp = await control.post("/api/core/zones", json={"Name": "akande"}, headers={**ACCOUNT, **peer_headers()})
    assert resp.status == 201
    assert (await entries(control))[0]["ip"] == expected


@pytest.mark.parametrize(("proxies", "peer_headers", "expected"), [
    ("127.0.0.1", {"X-Forwarded-For": "203.0.113.9"}, "203.0.113.9"),
    ("10.0.0.0/8, 127.0.0.0/8", {"X-Forwarded-For": "198.51.100.1, 203.0.113.9, 10.1.2.3"}, "203.0.113.9"),
    ("192.0.2.1", {"X-Forwarded-For": "203.0.113.9"}, "127.0.0.1"),      # another proxy: the peer is the client
])
async def test_client_ip_from_a_configured_proxy(aiohttp_client: Any, data_dir: Path, proxies: str,
                                                 peer_headers: dict[str, str], expected: str) -> None:
    settings = load_settings(environ={"ASSETCDN_CONTROL_TRUSTED_PROXIES": proxies})
    control = await aiohttp_client(create_app(settings, SECRETS, data_dir))
    resp = await control.post("/api/core/zones", json={"Name": "akande"}, headers={**ACCOUNT, **peer_headers})
    assert resp.status == 201
    assert (await entries(control))[0]["ip"] == expected


def test_a_bad_trusted_proxy_stops_start_up(data_dir: Path) -> None:
    settings = load_settings(environ={"ASSETCDN_CONTROL_TRUSTED_PROXIES": "127.0.0.1, nginx.local"})
    with pytest.raises(ValueError, match="nginx.local"):
        create_app(settings, SECRETS, data_dir)


@pytest.mark.parametrize("headers", [{}, ACCESS])
async def test_account_key_is_required(control: TestClient, headers: dict[str, str]) -> None:
    await expect_error(await control.get("/api/core/audit-logs", headers=headers), 401, "Unauthorized")


async def test_an_origin_set_is_audited_with_where_it_pulls_from_and_no_header_value(control: TestClient) -> None:
    assert (await control.post("/api/core/zones", json={"Name": "pulled-audit"}, headers=ACCOUNT)).status == 201
    resp = await control.put("/api/core/zones/pulled-audit/origin", headers=ACCOUNT, json={
        "Url": "https://origin.example.com/assets", "HostHeader": "assets.example.com",
        "RequestHeaders": {"X-Origin-Secret": "s3cret-value"}})
    assert resp.status == 200, await resp.text()
    (entry,) = [e for e in await entries(control) if e["action"] == "zone.origin.set"]
    assert (entry["meta"]["zone"], entry["meta"]["originUrl"], entry["meta"]["originHost"]) == \
        ("pulled-audit", "https://origin.example.com/assets", "assets.example.com")
    assert "s3cret-value" not in str(await entries(control))


async def test_an_origin_removal_is_audited_with_the_origin_it_removed_and_no_header_value(control: TestClient) -> None:
    resp = await control.post("/api/core/zones", headers=ACCOUNT, json={"Name": "unpulled-audit", "Origin": {
        "Url": "https://origin.test/assets", "HostHeader": "assets.test",
        "RequestHeaders": {"X-Origin-Secret": "s3cret-value"}}})
    assert resp.status == 201, await resp.text()
    resp = await control.delete("/api/core/zones/unpulled-audit/origin", headers=ACCOUNT)
    assert resp.status == 200, await resp.text()
    assert (await resp.json())["Origin"] is None
    (entry,) = [e for e in await entries(control) if e["action"] == "zone.origin.remove"]
    assert (entry["meta"]["zone"], entry["meta"]["originUrl"], entry["meta"]["originHost"]) == \
        ("unpulled-audit", "https://origin.test/assets", "assets.test")
    assert "s3cret-value" not in str(await entries(control))
    resp = await control.delete("/api/core/zones/unpulled-audit/origin", headers=ACCOUNT)  # none left: 404
    assert resp.status == 404
    assert [e["action"] for e in await entries(control)].count("zone.origin.remove") == 1


async def test_a_family_of_three_part_actions_is_filtered_by_its_first_two_parts(control: TestClient) -> None:
    assert (await control.post("/api/core/zones", json={"Name": "family"}, headers=ACCOUNT)).status == 201
    assert (await control.put("/api/core/zones/family/origin", headers=ACCOUNT,
                              json={"Url": "https://origin.test"})).status == 200
    assert (await control.delete("/api/core/zones/family/origin", headers=ACCOUNT)).status == 200
    assert [e["action"] for e in await entries(control, action="zone.origin")] == \
        ["zone.origin.remove", "zone.origin.set"]
    assert [e["action"] for e in await entries(control, action="zone.origin.set")] == ["zone.origin.set"]
    assert [e["action"] for e in await entries(control, action="zone.create")] == ["zone.create"]
    assert len(await entries(control, action="zone")) == 3
    assert await entries(control, action="zone.orig") == []
