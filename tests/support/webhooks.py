"""A control plane with webhooks on (development setting: loopback targets) that resolves names with a resolver
the test controls, and the webhook API calls the tests make; the receiver is tests/control/webhooks/receiver.py."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from aiohttp import web
from aiohttp.test_utils import TestClient

from assetcdn.control.app import create_app
from assetcdn.control.webhooks.service import WEBHOOK_RESOLVER
from assetcdn.shared.config import load_settings
from assetcdn.shared.secrets import Secrets
from tests.control.webhooks.receiver import WAIT_S, FakeResolver, Receiver
from tests.support.control import ACCOUNT, NO_MODEL
from tests.support.control import SECRETS as BASE_SECRETS

T = TypeVar("T")
SECRETS = dataclasses.replace(BASE_SECRETS, webhook_secret_key="test-webhook-secret-key")
FAST = {"allow_loopback": True, "retry_delays_s": [0.05, 0.05, 0.05], "timeout_s": 5.0,
        "concurrency_per_target": 1, "concurrency_total": 8}
ALL_EVENTS = ["asset.created", "asset.updated", "asset.deleted", "zone.created", "zone.deleted",
              "purge.completed", "pipeline.completed", "rules.updated"]


def make_app(data_dir: Path, resolver: FakeResolver, secrets: Secrets = SECRETS, **webhooks: Any) -> web.Application:
    settings = load_settings(environ=NO_MODEL).with_overrides("webhooks", **{**FAST, **webhooks})
    app = create_app(settings, secrets, data_dir)
    app[WEBHOOK_RESOLVER] = resolver
    return app


async def register(control: TestClient, receiver: Receiver, name: str, events: list[str] | None = None,
                   **extra: Any) -> dict[str, Any]:
    resp = await control.post("/api/webhooks", headers=ACCOUNT,
                              json={"url": receiver.url(name), "events": events or ALL_EVENTS, **extra})
    assert resp.status == 201, await resp.text()
    body = await resp.json()
    receiver.secrets[name] = body["secret"]
    return body


async def eventually(check: Callable[[], Awaitable[T | None]]) -> T:
    """Poll `check` until it returns something truthy (bounded by WAIT_S)."""
    deadline = time.monotonic() + WAIT_S
    while True:
        found = await check()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError("condition not met within the bound")
        await asyncio.sleep(0.02)


async def deliveries(control: TestClient, webhook_id: str, **params: str) -> list[dict[str, Any]]:
    resp = await control.get("/api/webhooks/deliveries", params={"id": webhook_id, **params}, headers=ACCOUNT)
    assert resp.status == 200, await resp.text()
    return (await resp.json())["deliveries"]
