"""GET/POST/DELETE /api/webhooks: shapes, validation, auth (AccountKey or webhooks:* tokens), audit, and
the signing secret shown once and stored encrypted."""

from __future__ import annotations

import asyncio
import re
import sqlite3
from pathlib import Path
from typing import Any

from aiohttp.test_utils import TestClient

from assetcdn.control.webhooks.secret_box import SecretBox
from tests.control.expect import expect_error, parse_time
from tests.control.webhooks.receiver import FakeResolver, Receiver
from tests.support.control import ACCOUNT
from tests.support.webhooks import SECRETS, make_app, register

RECORD_FIELDS = {"id", "url", "events", "createdAt", "active", "secretVersion", "secretLastFour", "hasSecret"}
SECRET_RE = re.compile(r"^whsec_[0-9a-f]{64}$")


async def listed(control: TestClient, headers: dict[str, str] = ACCOUNT) -> list[dict[str, Any]]:
    resp = await control.get("/api/webhooks", headers=headers)
    assert resp.status == 200, await resp.text()
    body = await resp.json()
    assert body["webhooks"] == body["Webhooks"] and body["Count"] == len(body["webhooks"])
    return body["webhooks"]


async def audit_actions(control: TestClient) -> list[dict[str, Any]]:
    resp = await control.get("/api/core/audit-logs", params={"action": "webhook"}, headers=ACCOUNT)
    assert resp.status == 200
    return (await resp.json())["Entries"]


async def test_register_list_and_delete(control: TestClient, receiver: Receiver) -> None:
    body = await register(control, receiver, "a", ["asset.created", "zone.deleted", "asset.created"])
    assert body["HttpCode"] == 201
    assert SECRET_RE.match(body["secret"])
    assert body["url"] == receiver.url("a") and body["events"] == ["asset.created", "zone.deleted"]
    record = body["Webhook"]
    assert set(record) == RECORD_FIELDS
    assert record["id"] == body["id"] and record["active"] is True and record["hasSecret"] is True
    assert record["secretLastFour"] == body["secret"][-4:] and record["secretVersion"] == 1
    parse_time(record["createdAt"])

    hooks = await listed(control)
    assert hooks == [record]  # the list never carries the secret
    assert body["secret"] not in str(hooks)

    resp = await control.delete("/api/webhooks", params={"id": body["id"]}, headers=ACCOUNT)
    assert resp.status == 204 and await resp.read() == b""
    assert await listed(control) == []
    await expect_error(await control.delete("/api/webhooks", params={"id": body["id"]}, headers=ACCOUNT),
                       404, "WebhookNotFound")

    entries = await audit_actions(control)
    assert [e["action"] for e in reversed(entries)] == ["webhook.create", "webhook.delete"]
    assert all(e["meta"]["id"] == body["id"] for e in entries)
    assert body["secret"] not in str(entries)


async def test_a_given_secret_is_used_and_shown_once(control: TestClient, receiver: Receiver) -> None:
    secret = "s" * 40
    body = await register(control, receiver, "a", secret=secret)
    assert body["secret"] == secret and body["Webhook"]["secretLastFour"] == "ssss"


async def test_secrets_are_encrypted_at_rest(control: TestClient, receiver: Receiver, data_dir: Path) -> None:
    body = await register(control, receiver, "a")
    def stored() -> tuple[bytes, bytes, bytes]:
        files = b"".join(p.read_bytes() for p in data_dir.glob("control.sqlite3*"))  # database, WAL
        with sqlite3.connect(data_dir / "control.sqlite3") as db:
            nonce, ciphertext = db.execute("SELECT secret_nonce, secret_ciphertext FROM webhooks").fetchone()
        return files, nonce, ciphertext

    files, nonce, ciphertext = await asyncio.to_thread(stored)
    assert body["secret"].encode() not in files
    assert SecretBox(SECRETS.webhook_secret_key).open(nonce, ciphertext, body["id"]) == body["secret"]


async def test_invalid_registrations_are_400_and_store_nothing(control: TestClient, receiver: Receiver) -> None:
    url = receiver.url("a")
    cases: list[tuple[Any, str]] = [
        (["not", "an", "object"], "InvalidBody"),
        ({"events": ["asset.created"]}, "MissingUrl"),
        ({"url": 42, "events": ["asset.created"]}, "MissingUrl"),
        ({"url": "ftp://receiver.test/x", "events": ["asset.created"]}, "InvalidUrl"),
        ({"url": "/relative", "events": ["asset.created"]}, "InvalidUrl"),
        ({"url": f"http://user:pw@receiver.test:{receiver.port}/", "events": ["asset.created"]}, "InvalidUrl"),
        ({"url": url + "#frag", "events": ["asset.created"]}, "InvalidUrl"),
        ({"url": url + "\n", "events": ["asset.created"]}, "InvalidUrl"),
        ({"url": "https://x.example/" + "a" * 2048, "events": ["asset.created"]}, "InvalidUrl"),
        ({"url": url}, "InvalidEvents"),
        ({"url": url, "events": []}, "InvalidEvents"),
        ({"url": url, "events": ["asset.created", "asset.exploded"]}, "InvalidEvents"),
        ({"url": url, "events": "asset.created"}, "InvalidEvents"),
        ({"url": url, "events": ["asset.created"], "secret": "short"}, "InvalidSecret"),
        ({"url": url, "events": ["asset.created"], "secret": "é" * 40}, "InvalidSecret"),
    ]
    for body, code in cases:
        error = await expect_error(await control.post("/api/webhooks", json=body, headers=ACCOUNT), 400, code)
        if code == "InvalidEvents" and isinstance(body.get("events"), list) and body["events"]:
            assert error["invalid"] == ["asset.exploded"]
    resp = await control.post("/api/webhooks", data=b"{" + b" " * 70_000 + b"}", headers=ACCOUNT)
    await expect_error(resp, 413, "PayloadTooLarge")
    await expect_error(await control.post("/api/webhooks", data=b"{nope", headers=ACCOUNT), 400, "InvalidJson")
    await expect_error(await control.delete("/api/webhooks", headers=ACCOUNT), 400, "MissingId")
    assert await listed(control) == []


async def test_tokens_with_webhook_scopes(control: TestClient, receiver: Receiver) -> None:
    async def mint(scopes: list[str]) -> dict[str, str]:
        resp = await control.post("/api/tokens", json={"name": "hooks", "scopes": scopes}, headers=ACCOUNT)
        assert resp.status == 201
        return {"Authorization": f"Bearer {(await resp.json())['token']}"}

    reader, writer, other = await mint(["webhooks:read"]), await mint(["webhooks:write"]), await mint(["zones:write"])
    body = {"url": receiver.url("a"), "events": ["asset.created"]}
    for headers in ({}, reader, other, {"AccessKey": SECRETS.access_key}):
        await expect_error(await control.post("/api/webhooks", json=body, headers=headers), 401, "Unauthorized")
    for headers in ({}, writer, other):
        await expect_error(await control.get("/api/webhooks", headers=headers), 401, "Unauthorized")
        await expect_error(await control.get("/api/webhooks/dead-letters", headers=headers), 401, "Unauthorized")
    resp = await control.post("/api/webhooks", json=body, headers=writer)
    assert resp.status == 201
    webhook_id = (await resp.json())["id"]
    assert [h["id"] for h in await listed(control, reader)] == [webhook_id]
    await expect_error(await control.delete("/api/webhooks", params={"id": webhook_id}, headers=reader),
                       401, "Unauthorized")
    resp = await control.delete("/api/webhooks", params={"id": webhook_id}, headers=writer)
    assert resp.status == 204


async def test_the_number_of_webhooks_is_bounded(aiohttp_client, data_dir: Path, resolver: FakeResolver,  # type: ignore[no-untyped-def]
                                                 receiver: Receiver) -> None:
    control = await aiohttp_client(make_app(data_dir, resolver, max_webhooks=2))
    await register(control, receiver, "a")
    await register(control, receiver, "b")
    resp = await control.post("/api/webhooks", json={"url": receiver.url("c"), "events": ["asset.created"]},
                              headers=ACCOUNT)
    await expect_error(resp, 400, "TooManyWebhooks")
    assert len(await listed(control)) == 2


async def test_without_the_encryption_key_registration_is_refused(aiohttp_client, data_dir: Path,  # type: ignore[no-untyped-def]
                                                                  resolver: FakeResolver, receiver: Receiver) -> None:
    secrets = SECRETS.__class__(**{**SECRETS.__dict__, "webhook_secret_key": ""})
    control = await aiohttp_client(make_app(data_dir, resolver, secrets=secrets))
    resp = await control.post("/api/webhooks", json={"url": receiver.url("a"), "events": ["asset.created"]},
                              headers=ACCOUNT)
    await expect_error(resp, 503, "NotConfigured")
    assert await listed(control) == []
