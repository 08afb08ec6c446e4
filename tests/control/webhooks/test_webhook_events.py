"""Each mutation emits its event, signed, to the webhooks subscribed to it; a refused mutation emits none."""

from __future__ import annotations

import base64
import hashlib
import hmac
from typing import Any

from aiohttp.test_utils import TestClient

from tests.control.expect import parse_time
from tests.control.webhooks.receiver import Receiver
from tests.support.control import ACCESS, ACCOUNT, SECRETS
from tests.support.webhooks import register

PURGE = {"x-api-key": SECRETS.purge_key}
SVG = b'<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16"><rect width="16" height="16"/></svg>'


async def ok(call: Any, status: int = 201) -> dict[str, Any]:
    resp = await call
    assert resp.status == status, await resp.text()
    return await resp.json() if resp.content_type == "application/json" else {}


async def settle(control: TestClient, receiver: Receiver, count: int) -> list[tuple[str, dict[str, Any]]]:
    """Wait for `count` events at hook 'all'; return them as (event, data), in the order they were made."""
    await receiver.wait(lambda: len(receiver.delivered("all")) >= count)
    # One delivery in flight per webhook (the fixture's setting) and none failing: they arrive in order.
    return [(r.event, r.payload["data"]) for r in receiver.delivered("all")]


async def test_every_mutation_emits_its_event(control: TestClient, receiver: Receiver) -> None:
    await register(control, receiver, "all")
    await ok(control.post("/api/core/zones", json={"Name": "akande"}, headers=ACCOUNT))
    await ok(control.put("/api/storage/akande/v1/logos/a.svg", data=SVG, headers=ACCESS))
    await ok(control.put("/api/storage/akande/v1/logos/a.svg", data=SVG + b"\n", headers=ACCESS))
    await ok(control.put("/api/storage/akande/v1/logos/a.svg", data=SVG + b"\n", headers=ACCESS))  # identical
    await ok(control.post("/api/storage/batch", headers=ACCESS, json={"files": [
        {"path": "akande/v1/banners/b.txt", "content": base64.b64encode(b"bee").decode()},
        {"path": "akande/v1/banners/c.txt", "content": "sea", "encoding": "utf-8"}]}))
    await ok(control.delete("/api/storage/akande/v1/logos/a.svg", headers=ACCESS), 200)
    await ok(control.post("/api/core/rules", json={"File": "_redirects", "Content": "/a /b 301\n"},
                          headers=ACCOUNT), 200)
    await ok(control.post("/api/purge", json={"tags": ["project-akande"]}, headers=PURGE), 200)
    pipeline = await ok(control.post("/api/pipeline", headers=ACCOUNT, json={
        "mode": "client", "name": "piped", "svg": base64.b64encode(SVG).decode()}))
    await ok(control.delete("/api/core/zones/akande", headers=ACCOUNT), 200)

    events = await settle(control, receiver, 12)
    assert [name for name, _ in events] == [
        "zone.created", "asset.created", "asset.updated", "asset.updated", "asset.created", "asset.created",
        "asset.deleted", "rules.updated", "purge.completed", "zone.created", "pipeline.completed", "zone.deleted"]
    data = [d for _, d in events]
    assert data[0] == {"zone": "akande"}
    assert data[1] == {"path": "/akande/v1/logos/a.svg", "size": len(SVG)}
    assert data[2] == data[3] == {"path": "/akande/v1/logos/a.svg", "size": len(SVG) + 1}
    assert data[4:6] == [{"path": "/akande/v1/banners/b.txt", "size": 3}, {"path": "/akande/v1/banners/c.txt", "size": 3}]
    assert data[6] == {"path": "/akande/v1/logos/a.svg"}
    assert data[7]["file"] == "_redirects" and data[7]["action"] == "updated" and len(data[7]["commit"]) == 40
    assert data[8]["purged"] == ["project-akande"] and isinstance(data[8]["generation"], int)
    assert data[8]["edges"] == {"total": 0, "acknowledged": [], "pending": [], "elapsedMs": data[8]["edges"]["elapsedMs"],
                                "entriesRemoved": {}}
    assert data[9] == {"zone": "piped"}
    assert data[10] == {"mode": "client", "name": "piped", "zone": "piped", "commit": pipeline["Commit"],
                        "files": [f for f in pipeline["Files"]]}
    assert data[11] == {"zone": "akande", "filesRemoved": 2}
    assert receiver.bad_signatures == []


async def test_deliveries_are_signed_and_shaped(control: TestClient, receiver: Receiver) -> None:
    hook = await register(control, receiver, "all", ["zone.created"])
    await ok(control.post("/api/core/zones", json={"Name": "akande"}, headers=ACCOUNT))
    await receiver.wait(lambda: len(receiver.delivered("all")) == 1)
    got = receiver.delivered("all")[0]
    assert set(got.payload) == {"event", "timestamp", "data"}
    parse_time(got.payload["timestamp"])
    expected = "sha256=" + hmac.new(hook["secret"].encode(), got.body, hashlib.sha256).hexdigest()
    assert got.headers["X-Webhook-Signature"] == expected
    assert got.headers["Content-Type"] == "application/json"
    assert got.headers["User-Agent"].startswith("assetcdn-webhook/")
    assert got.headers["X-Webhook-Event"] == "zone.created"
    # Usually attempt 1; on a starved machine the first try can overrun the 5 s delivery timeout
    # before the receiver has read it, and the retry (same id) is the one delivered.
    assert got.headers["X-Webhook-Id"]
    assert int(got.headers["X-Webhook-Attempt"]) >= 1
    assert set(receiver.arrival_ids["all"]) == {got.headers["X-Webhook-Id"]}


async def test_refused_mutations_emit_nothing(control: TestClient, receiver: Receiver) -> None:
    await ok(control.post("/api/core/zones", json={"Name": "akande"}, headers=ACCOUNT))
    await register(control, receiver, "all")
    for call, status in [
        (control.put("/api/storage/nozone/v1/logos/a.svg", data=SVG, headers=ACCESS), 404),
        (control.post("/api/core/zones", json={"Name": "akande"}, headers=ACCOUNT), 409),
        (control.post("/api/core/rules", json={"File": "_headers", "Content": "  no-colon\n"}, headers=ACCOUNT), 400),
        (control.delete("/api/storage/akande/v1/logos/missing.svg", headers=ACCESS), 404),
        (control.post("/api/storage/batch", headers=ACCESS, json={"files": [
            {"path": "akande/v1/logos/ok.txt", "content": "x", "encoding": "utf-8"},
            {"path": "nozone/v1/logos/bad.txt", "content": "x", "encoding": "utf-8"}]}), 404),
        (control.post("/api/core/rules", json={"File": "_redirects", "Content": ""}, headers=ACCOUNT), 200),
    ]:
        resp = await call
        assert resp.status in (status, 400), await resp.text()
    await ok(control.put("/api/storage/akande/v1/logos/marker.svg", data=SVG, headers=ACCESS))
    await receiver.wait(lambda: len(receiver.delivered("all")) >= 1)
    # The marker's event came after everything above: had any of those emitted, it would be first.
    assert receiver.events("all")[0] == "asset.created"
    assert receiver.delivered("all")[0].payload["data"]["path"] == "/akande/v1/logos/marker.svg"


async def test_a_webhook_gets_only_its_events_and_only_those_after_it_was_registered(
        control: TestClient, receiver: Receiver) -> None:
    await ok(control.post("/api/core/zones", json={"Name": "early"}, headers=ACCOUNT))
    await register(control, receiver, "zones", ["zone.created", "zone.deleted"])
    await register(control, receiver, "assets", ["asset.created"])
    await ok(control.post("/api/core/zones", json={"Name": "akande"}, headers=ACCOUNT))
    await ok(control.put("/api/storage/akande/v1/logos/a.svg", data=SVG, headers=ACCESS))
    await ok(control.delete("/api/core/zones/akande", headers=ACCOUNT), 200)
    await receiver.wait(lambda: len(receiver.delivered("zones")) >= 2 and len(receiver.delivered("assets")) >= 1)
    assert sorted(receiver.events("zones")) == ["zone.created", "zone.deleted"]
    assert [r.payload["data"] for r in receiver.delivered("zones") if r.event == "zone.created"] == [{"zone": "akande"}]
    assert receiver.events("assets") == ["asset.created"]


async def test_purge_completed_says_how_the_purge_selected(control: TestClient, receiver: Receiver) -> None:
    await register(control, receiver, "all", ["purge.completed"])
    await ok(control.post("/api/purge", json={"prefixes": ["/akande/v1/"], "soft": True}, headers=PURGE), 200)
    await ok(control.post("/api/purge", json={"urls": ["/akande/v1/logos/a.svg"]}, headers=PURGE), 200)
    events = await settle(control, receiver, 2)
    assert [(d["purged"], d["mode"], d["soft"]) for _, d in events] == [
        (["/akande/v1/"], "prefixes", True), (["/akande/v1/logos/a.svg"], "urls", False)]


async def test_purge_completed_names_the_zone_a_tag_purge_was_scoped_to(control: TestClient, zone: str,
                                                                         receiver: Receiver) -> None:
    await register(control, receiver, "all", ["purge.completed"])
    await ok(control.post("/api/purge", json={"tags": ["home"], "zone": zone}, headers=PURGE), 200)
    await ok(control.post("/api/purge", json={"tags": ["home"]}, headers=PURGE), 200)
    events = await settle(control, receiver, 2)
    assert [(d["purged"], d["mode"], d.get("zone")) for _, d in events] == [(["home"], "tags", zone),
                                                                          (["home"], "tags", None)]
