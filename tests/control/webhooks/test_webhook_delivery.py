"""Delivery: retries, dead letters and replay, no redirects, deleting a webhook stops its deliveries at
once, and one slow receiver does not hold up another."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path
from typing import Any

import orjson
from aiohttp.test_utils import TestClient

from assetcdn.control.storage.service import DB
from assetcdn.control.webhooks.service import WEBHOOK_DELIVERIES, WEBHOOK_WORKER
from tests.control.expect import expect_error
from tests.control.webhooks.receiver import FakeResolver, Receiver
from tests.support.control import ACCESS, ACCOUNT
from tests.support.webhooks import deliveries, eventually, make_app, register


async def put(control: TestClient, name: str, data: bytes = b"x") -> None:
    resp = await control.put(f"/api/storage/akande/v1/logos/{name}", data=data, headers=ACCESS)
    assert resp.status == 201, await resp.text()


async def dead_letters(control: TestClient, webhook_id: str) -> list[dict]:
    resp = await control.get("/api/webhooks/dead-letters", params={"id": webhook_id}, headers=ACCOUNT)
    assert resp.status == 200, await resp.text()
    body = await resp.json()
    assert body["deadLetters"] == body["DeadLetters"] and body["Count"] == len(body["deadLetters"])
    return body["deadLetters"]


async def test_a_failed_delivery_is_retried_with_the_same_body(control: TestClient, receiver: Receiver,
                                                                zone: str) -> None:
    hook = await register(control, receiver, "a", ["asset.created"])
    receiver.statuses["a"] = [500, 503]
    await put(control, "a.txt")
    await receiver.wait(lambda: len(receiver.delivered("a")) == 1)
    attempts = receiver.received["a"]
    assert [r.status for r in attempts] == [500, 503, 200]
    assert [r.headers["X-Webhook-Attempt"] for r in attempts] == ["1", "2", "3"]
    assert len({r.body for r in attempts}) == 1 and len({r.headers["X-Webhook-Id"] for r in attempts}) == 1
    found = await eventually(lambda: _delivered(control, hook["id"]))
    assert found["attempts"] == 3 and found["lastStatus"] == 200 and found["lastError"] is None
    assert found["payload"] == attempts[0].payload and found["eventId"] == attempts[0].headers["X-Webhook-Id"]


async def _delivered(control: TestClient, webhook_id: str) -> dict | None:
    found = await deliveries(control, webhook_id)
    return found[0] if found and found[0]["state"] == "delivered" else None


async def test_a_delivery_that_keeps_failing_is_a_dead_letter_and_can_be_replayed(
        control: TestClient, receiver: Receiver, zone: str) -> None:
    hook = await register(control, receiver, "a", ["asset.created"])
    receiver.statuses["a"] = [500] * 4  # the first attempt and the three retries the fixture configures
    await put(control, "a.txt")
    dead = await eventually(lambda: dead_letters(control, hook["id"]))
    assert len(dead) == 1 and len(receiver.received["a"]) == 4
    letter = dead[0]
    assert letter["state"] == "dead" and letter["attempts"] == 4 and letter["lastStatus"] == 500
    assert letter["lastError"] == "HTTP 500" and letter["nextAttemptAt"] is None
    assert letter["payload"]["data"] == {"path": "/akande/v1/logos/a.txt", "size": 1}

    await expect_error(await control.post("/api/webhooks/replay", json={"id": "nope"}, headers=ACCOUNT),
                       404, "DeliveryNotFound")
    await expect_error(await control.post("/api/webhooks/replay", json={}, headers=ACCOUNT), 400, "MissingId")
    resp = await control.post("/api/webhooks/replay", json={"id": letter["id"]}, headers=ACCOUNT)
    assert resp.status == 202, await resp.text()
    assert (await resp.json())["Delivery"]["state"] == "pending"
    await receiver.wait(lambda: len(receiver.delivered("a")) == 1)
    assert receiver.delivered("a")[0].body == receiver.received["a"][0].body
    assert await dead_letters(control, hook["id"]) == []
    found = await eventually(lambda: _delivered(control, hook["id"]))
    assert found["id"] == letter["id"] and found["attempts"] == 1
    await expect_error(await control.post("/api/webhooks/replay", json={"id": letter["id"]}, headers=ACCOUNT),
                       409, "NotDeadLetter")
    entries = (await (await control.get("/api/core/audit-logs", params={"action": "webhook.replay"},
                                        headers=ACCOUNT)).json())["Entries"]
    assert len(entries) == 1


async def test_redirects_are_not_followed(control: TestClient, receiver: Receiver, zone: str) -> None:
    hook = await register(control, receiver, "a", ["asset.created"])
    receiver.secrets["elsewhere"] = hook["secret"]
    receiver.redirects["a"] = receiver.url("elsewhere", host="127.0.0.1")
    await put(control, "a.txt")
    dead = await eventually(lambda: dead_letters(control, hook["id"]))
    assert dead[0]["lastStatus"] == 302 and dead[0]["lastError"] == "HTTP 302"
    assert receiver.arrivals["elsewhere"] == 0


async def test_deleting_a_webhook_stops_its_deliveries_at_once(control: TestClient, receiver: Receiver,
                                                               zone: str) -> None:
    doomed = await register(control, receiver, "doomed", ["asset.created"])
    await register(control, receiver, "kept", ["asset.created"])
    receiver.hold("doomed")
    await put(control, "first.txt")
    await receiver.wait(lambda: receiver.arrivals["doomed"] == 1 and len(receiver.delivered("kept")) == 1)

    resp = await control.delete("/api/webhooks", params={"id": doomed["id"]}, headers=ACCOUNT)
    assert resp.status == 204
    await put(control, "second.txt")
    await receiver.wait(lambda: len(receiver.delivered("kept")) == 2)
    receiver.gates["doomed"].set()  # the request in flight at the delete was abandoned by the sender
    await put(control, "third.txt")
    await receiver.wait(lambda: len(receiver.delivered("kept")) == 3)
    assert receiver.arrivals["doomed"] == 1  # nothing after the delete, not even a retry
    await expect_error(await control.get("/api/webhooks/deliveries", params={"id": doomed["id"]},
                                         headers=ACCOUNT), 404, "WebhookNotFound")


async def test_a_failing_webhook_deleted_between_retries_is_not_retried(control: TestClient, receiver: Receiver,
                                                                        zone: str) -> None:
    doomed = await register(control, receiver, "doomed", ["asset.created"])
    await register(control, receiver, "kept", ["asset.created"])
    receiver.statuses["doomed"] = [500] * 10
    await put(control, "first.txt")
    await receiver.wait(lambda: len(receiver.received["doomed"]) >= 1)
    resp = await control.delete("/api/webhooks", params={"id": doomed["id"]}, headers=ACCOUNT)
    assert resp.status == 204
    ((remaining,),) = await control.app[DB].fetch("SELECT COUNT(*) FROM webhook_deliveries WHERE webhook_id = ?",
                                                  (doomed["id"],))
    assert remaining == 0  # its retries are gone with it
    arrived = receiver.arrivals["doomed"]
    for count, name in enumerate(("second.txt", "third.txt", "fourth.txt"), start=2):
        await put(control, name)
        await receiver.wait(lambda count=count: len(receiver.delivered("kept")) == count)
    assert receiver.arrivals["doomed"] == arrived


async def test_a_slow_receiver_does_not_delay_another(aiohttp_client, data_dir: Path,  # type: ignore[no-untyped-def]
                                                      resolver: FakeResolver, receiver: Receiver) -> None:
    control = await aiohttp_client(make_app(data_dir, resolver, concurrency_per_target=2, concurrency_total=4))
    resp = await control.post("/api/core/zones", json={"Name": "akande"}, headers=ACCOUNT)
    assert resp.status == 201
    await register(control, receiver, "slow", ["asset.created"])
    await register(control, receiver, "fast", ["asset.created"])
    gate = receiver.hold("slow")
    for i in range(6):
        await put(control, f"f{i}.txt")
    await receiver.wait(lambda: len(receiver.delivered("fast")) == 6)
    assert receiver.arrivals["slow"] == 2 and receiver.received["slow"] == []  # its two slots, held
    gate.set()
    await receiver.wait(lambda: len(receiver.delivered("slow")) == 6)


async def test_a_2xx_is_a_delivery_even_when_the_rest_of_its_reply_is_cut_short(control: TestClient, zone: str) -> None:
    """The receiver's status is its answer: a 200 whose body then breaks off (the receiver closes the connection
    early) was received, and is not sent again until it becomes a dead letter."""
    arrived: list[bytes] = []

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length:"))
        arrived.append(await reader.readexactly(length))
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 100\r\n\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        resp = await control.post("/api/webhooks", headers=ACCOUNT, json={
            "url": f"http://receiver.test:{port}/hook", "events": ["asset.created"]})
        assert resp.status == 201, await resp.text()
        hook = await resp.json()
        await put(control, "a.txt")

        async def finished() -> dict | None:
            found = await deliveries(control, hook["id"])
            return found[0] if found and found[0]["state"] != "pending" else None

        found = await eventually(finished)
        assert (found["state"], found["lastStatus"], found["lastError"]) == ("delivered", 200, None)
        assert found["attempts"] == len(arrived)
        assert orjson.loads(arrived[0])["data"] == {"path": "/akande/v1/logos/a.txt", "size": 1}
    finally:
        server.close()
        await server.wait_closed()


async def test_a_delivery_whose_outcome_cannot_be_recorded_is_not_sent_again_at_once(
        control: TestClient, receiver: Receiver, zone: str) -> None:
    """The receiver answered but the database refused to record it (locked past its timeout, a full disk): the
    delivery stays pending, and is sent again only after a pause, not in a loop as fast as the receiver answers."""
    worker, recorded = control.app[WEBHOOK_WORKER], control.app[WEBHOOK_DELIVERIES]
    now = [time.time() + 1000]
    worker._clock = lambda: now[0]  # the worker's time stands still unless the test moves it
    refused: list[str] = []
    refuse = [True]
    delivered = recorded.delivered

    async def refusing(delivery_id: str, *args: Any) -> None:
        if refuse[0] and any(r.headers["X-Webhook-Delivery"] == delivery_id for r in receiver.received["stuck"]):
            refused.append(delivery_id)
            raise sqlite3.OperationalError("database is locked")
        await delivered(delivery_id, *args)

    recorded.delivered = refusing  # type: ignore[method-assign]
    await register(control, receiver, "stuck", ["asset.created"])
    await register(control, receiver, "witness", ["asset.deleted"])
    await put(control, "a.txt")
    await receiver.wait(lambda: len(receiver.received["stuck"]) == 1)
    resp = await control.delete("/api/storage/akande/v1/logos/a.txt", headers=ACCESS)
    assert resp.status == 200, await resp.text()
    await receiver.wait(lambda: len(receiver.delivered("witness")) == 1)  # the worker went on with other work
    assert receiver.arrivals["stuck"] == 1 and len(refused) == 1
    (pending,) = await deliveries(control, (await _hook_id(control, "stuck")))
    assert pending["state"] == "pending"

    now[0] += 60  # past the pause, and the database records again
    refuse[0] = False
    worker.notify()
    await receiver.wait(lambda: len(receiver.received["stuck"]) == 2)
    found = await eventually(lambda: _delivered(control, pending["webhookId"]))
    assert found["id"] == pending["id"] and found["attempts"] == 1  # the attempt recorded, its sending twice not
    assert len({r.headers["X-Webhook-Id"] for r in receiver.received["stuck"]}) == 1


async def _hook_id(control: TestClient, name: str) -> str:
    resp = await control.get("/api/webhooks", headers=ACCOUNT)
    (hook,) = [h for h in (await resp.json())["webhooks"] if h["url"].endswith(f"/hook/{name}")]
    return hook["id"]
