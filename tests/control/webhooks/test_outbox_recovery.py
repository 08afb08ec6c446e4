"""The outbox across restarts: a commit made by a process killed before it recorded the commit's events
gets its events at the next start (derived from git, once), events held by a dead process are
released, and deliveries in flight at a stop are sent again."""

from __future__ import annotations

import uuid
from pathlib import Path

from aiohttp.test_utils import TestClient

from assetcdn.control.publishing.service import PUBLISHER
from assetcdn.control.routes.zones import zone_scaffold
from assetcdn.control.storage.git_store import GitStore
from assetcdn.control.storage.service import DB
from assetcdn.control.webhooks.events import Event, with_trailer, zone_created
from tests.control.webhooks.receiver import FakeResolver, Receiver
from tests.support.control import ACCESS, ACCOUNT
from tests.support.webhooks import make_app, register


async def start(aiohttp_client, data_dir: Path, resolver: FakeResolver) -> TestClient:  # type: ignore[no-untyped-def]
    return await aiohttp_client(make_app(data_dir, resolver))


async def commit_behind_its_back(data_dir: Path, files: dict[str, bytes | None], message: str) -> str:
    """What a process killed right after its git commit leaves: the commit, and no SQLite bookkeeping."""
    git = GitStore(data_dir / "repo.git")
    try:
        return (await git.commit(files, message)).commit_id
    finally:
        git.close()


async def test_commits_without_recorded_events_get_them_at_the_next_start(
        aiohttp_client, data_dir: Path, resolver: FakeResolver, receiver: Receiver) -> None:  # type: ignore[no-untyped-def]
    control = await start(aiohttp_client, data_dir, resolver)
    await register(control, receiver, "a")
    resp = await control.post("/api/core/zones", json={"Name": "akande"}, headers=ACCOUNT)
    assert resp.status == 201
    await receiver.wait(lambda: len(receiver.delivered("a")) == 1)
    await control.close()

    upload = await commit_behind_its_back(data_dir, {"clients/akande/v1/logos/lost.txt": b"lost"},
                                          "Upload akande/v1/logos/lost.txt (4 bytes) via Storage API")
    await commit_behind_its_back(data_dir, zone_scaffold("second"),
                                 with_trailer("Create zone second with its v1 directories", zone_created("second")))

    control = await start(aiohttp_client, data_dir, resolver)
    await receiver.wait(lambda: len(receiver.delivered("a")) == 3)
    got = receiver.delivered("a")[1:]
    assert [(r.event, r.payload["data"]) for r in got] == [
        ("asset.created", {"path": "/akande/v1/logos/lost.txt", "size": 4}), ("zone.created", {"zone": "second"})]
    assert got[0].headers["X-Webhook-Id"] == f"{upload}-0"
    assert receiver.bad_signatures == []


async def test_events_written_but_not_marked_are_not_sent_twice(
        aiohttp_client, data_dir: Path, resolver: FakeResolver, receiver: Receiver) -> None:  # type: ignore[no-untyped-def]
    control = await start(aiohttp_client, data_dir, resolver)
    await register(control, receiver, "a", ["asset.created", "zone.created"])
    resp = await control.post("/api/core/zones", json={"Name": "akande"}, headers=ACCOUNT)
    assert resp.status == 201
    before = (await resp.json())["Commit"]
    resp = await control.put("/api/storage/akande/v1/logos/a.txt", data=b"a", headers=ACCESS)
    assert resp.status == 201
    await receiver.wait(lambda: len(receiver.delivered("a")) == 2)
    # The upload's events stored, the cursor still before them (an earlier version could commit half-way).
    db = control.app[DB]
    await db.write("UPDATE webhook_outbox_cursor SET commit_id = ?", (before,))
    await control.close()

    control = await start(aiohttp_client, data_dir, resolver)
    resp = await control.put("/api/storage/akande/v1/logos/b.txt", data=b"b", headers=ACCESS)
    assert resp.status == 201
    await receiver.wait(lambda: len(receiver.delivered("a")) == 3)
    paths = [r.payload["data"].get("path") for r in receiver.delivered("a")]
    assert paths == [None, "/akande/v1/logos/a.txt", "/akande/v1/logos/b.txt"]


async def test_an_event_held_by_a_stopped_process_is_released_at_start(
        aiohttp_client, data_dir: Path, resolver: FakeResolver, receiver: Receiver) -> None:  # type: ignore[no-untyped-def]
    control = await start(aiohttp_client, data_dir, resolver)
    await register(control, receiver, "a", ["purge.completed"])
    # A purge whose process stopped before the edges answered: recorded, held, never released.
    outbox = control.app[PUBLISHER].outbox
    async with control.app[DB].transaction() as tx:
        await outbox.stage(tx, [Event(str(uuid.uuid4()), "purge.completed", "2026-01-01T00:00:00.000Z",
                                      {"purged": ["x"], "generation": 7, "edges": None})], held=True)
    await control.close()
    assert receiver.arrivals["a"] == 0

    await start(aiohttp_client, data_dir, resolver)
    await receiver.wait(lambda: len(receiver.delivered("a")) == 1)
    assert receiver.delivered("a")[0].payload["data"] == {"purged": ["x"], "generation": 7, "edges": None}


async def test_a_delivery_in_flight_at_shutdown_is_sent_after_the_restart(
        aiohttp_client, data_dir: Path, resolver: FakeResolver, receiver: Receiver) -> None:  # type: ignore[no-untyped-def]
    control = await start(aiohttp_client, data_dir, resolver)
    await register(control, receiver, "a", ["zone.created"])
    gate = receiver.hold("a")
    resp = await control.post("/api/core/zones", json={"Name": "akande"}, headers=ACCOUNT)
    assert resp.status == 201
    await receiver.wait(lambda: receiver.arrivals["a"] == 1)
    await control.close()  # stops while the receiver holds the request: no answer reached control

    await start(aiohttp_client, data_dir, resolver)
    await receiver.wait(lambda: receiver.arrivals["a"] == 2)
    gate.set()
    await receiver.wait(lambda: any(r.payload["data"] == {"zone": "akande"} for r in receiver.delivered("a")))
    first, again = receiver.arrival_ids["a"]
    assert first and first == again  # the same event, sent again by the new process
