"""A write that fails or is cut off never wedges control's database or its publish sequence: the next
write succeeds, and a commit whose bookkeeping failed is published with the next one."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient

from assetcdn.control.app import create_app
from assetcdn.control.publishing.service import PUBLISHER
from assetcdn.control.storage.database import Database, open_database
from assetcdn.control.storage.service import DB, GIT, MANIFEST
from assetcdn.shared.config import load_settings
from assetcdn.shared.errors import ApiError
from assetcdn.shared.paths import cdn_path_of, repo_path_of
from tests.control.expect import expect_error
from tests.support.control import ACCESS, ACCOUNT, SECRETS, write_lock_held
from tests.support.wait import wait_until

BUSY_TIMEOUT_MS = 200


async def put(control: TestClient, path: str, body: bytes) -> int:
    resp = await control.put(f"/api/storage/{path}", data=body,
                             headers={**ACCESS, "Checksum": hashlib.sha256(body).hexdigest()})
    await resp.read()
    return resp.status


@pytest.fixture
async def control(aiohttp_client, data_dir: Path) -> TestClient:  # type: ignore[no-untyped-def]
    settings = load_settings(environ={"ASSETCDN_CONTROL_SQLITE_BUSY_TIMEOUT_MS": str(BUSY_TIMEOUT_MS)})
    client = await aiohttp_client(create_app(settings, SECRETS, data_dir))
    resp = await client.post("/api/core/zones", json={"Name": "akande"}, headers=ACCOUNT)
    assert resp.status == 201, await resp.text()
    return client


async def test_an_upload_whose_bookkeeping_failed_is_published_with_the_next(control: TestClient,
                                                                             data_dir: Path) -> None:
    manifest = control.app[MANIFEST]
    before = manifest.generation
    with write_lock_held(data_dir / "control.sqlite3") as other:
        resp = await control.put("/api/storage/akande/v1/logos/first.txt", data=b"first", headers=ACCESS)
        await expect_error(resp, 503, "DatabaseBusy")
        assert resp.headers["Retry-After"] == "1"
        # The other process writes too, so a snapshot control kept from before is stale afterwards.
        other.execute("INSERT INTO audit_log (timestamp, action, ip, user_agent, request_id, meta) "
                      "VALUES ('2026-01-01T00:00:00.000Z', 'backup', '-', '-', NULL, '{}')")
    assert await put(control, "akande/v1/logos/second.txt", b"second") == 201
    # The first file's commit landed in git before its bookkeeping failed: it is published now, in the
    # next generation, with its webhook events, and what an edge catches up on carries it.
    assert {"akande/v1/logos/first.txt", "akande/v1/logos/second.txt"} <= set(manifest.entries)
    delta = await manifest.changes_since(before)
    assert delta is not None
    assert {"akande/v1/logos/first.txt", "akande/v1/logos/second.txt"} <= {c.path for c in delta.changes}
    events = await control.app[DB].fetch("SELECT event, body FROM webhook_events WHERE event = 'asset.created'")
    assert sum(b"first.txt" in bytes(row[1]) for row in events) == 1
    assert sum(b"second.txt" in bytes(row[1]) for row in events) == 1
    # Every other write works as well.
    resp = await control.post("/api/tokens", json={"name": "after", "scopes": ["storage:read"]}, headers=ACCOUNT)
    assert resp.status == 201, await resp.text()
    resp = await control.post("/api/core/zones", json={"Name": "second"}, headers=ACCOUNT)
    assert resp.status == 201, await resp.text()


async def test_uploads_cancelled_at_any_point_leave_the_publish_sequence_going(control: TestClient) -> None:
    publisher, manifest, git = control.app[PUBLISHER], control.app[MANIFEST], control.app[GIT]
    for n in range(24):  # cancelled before, during or after the commit and its bookkeeping
        before = await git.run(git.head_commit_id)
        task = asyncio.create_task(publisher.upload({repo_path_of(f"akande/v1/logos/cut-{n}.txt"): b"%d" % n},
                                                    "an upload whose request went away"))
        if n % 4 == 3:  # once its commit landed (during its bookkeeping, or after): however loaded the machine

            async def landed(task: asyncio.Task[object] = task, before: str | None = before) -> bool:
                return task.done() or await git.run(git.head_commit_id) != before

            await wait_until(landed, f"upload {n}'s commit")
        else:
            for _ in range(n):
                await asyncio.sleep(0.001 if n % 3 == 0 else 0)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert await put(control, "akande/v1/logos/last.txt", b"last") == 201
    head = await git.run(git.head_commit_id)
    stored = {cdn_path_of(f.path) for f in await git.run(lambda: list(git.iter_files("clients/akande/v1/logos")))
              if f.path.endswith(".txt")}
    assert "akande/v1/logos/last.txt" in stored
    assert manifest.commit_id == head
    assert len(stored) > 2 and stored <= set(manifest.entries)  # every commit that landed is published


async def test_a_generation_whose_caller_went_away_is_stored_and_adopted_together(control: TestClient) -> None:
    # Cancelled at every step of its write, the COMMIT included (it lands on the writer's thread whether or
    # not anyone still waits): the generation SQLite holds and the one in memory never part.
    manifest, db = control.app[MANIFEST], control.app[DB]
    for n in range(40):
        task = asyncio.create_task(manifest.record_purge(None))
        for _ in range(n):
            await asyncio.sleep(0)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        stored = (await db.fetch("SELECT MAX(generation) FROM manifest_generations"))[0][0]
        assert stored == manifest.generation, n
    assert (await manifest.record_purge(None)).generation == manifest.generation


@pytest.fixture
async def database(tmp_path: Path) -> AsyncIterator[Database]:
    db = await open_database(tmp_path / "control.sqlite3", busy_timeout_ms=BUSY_TIMEOUT_MS)
    yield db
    await db.close()


async def zones(db: Database) -> list[str]:
    return [row[0] for row in await db.fetch("SELECT name FROM zones ORDER BY name")]


def lock_is_free(path: Path) -> bool:
    """True when another connection can take the write lock at once: nothing is left open."""
    other = sqlite3.connect(path, isolation_level=None, timeout=0)
    try:
        other.execute("BEGIN IMMEDIATE")
        other.execute("ROLLBACK")
        return True
    except sqlite3.OperationalError:
        return False
    finally:
        other.close()


async def test_an_exception_inside_a_transaction_rolls_it_back(database: Database, tmp_path: Path) -> None:
    with pytest.raises(RuntimeError):
        async with database.transaction() as tx:
            await tx.execute("INSERT INTO zones (name, created_at) VALUES ('half', 'now')")
            raise RuntimeError("a handler failed half-way")
    assert lock_is_free(tmp_path / "control.sqlite3")
    await database.write("INSERT INTO zones (name, created_at) VALUES ('next', 'now')")
    assert await zones(database) == ["next"]


async def test_a_task_cancelled_inside_a_transaction_leaves_nothing(database: Database, tmp_path: Path) -> None:
    inside = asyncio.Event()

    async def cut_off() -> None:
        async with database.transaction() as tx:
            await tx.execute("INSERT INTO zones (name, created_at) VALUES ('half', 'now')")
            inside.set()
            await tx.execute("INSERT INTO zones (name, created_at) VALUES ('other half', 'now')")
            await asyncio.sleep(3600)  # (a transaction never waits on anything else; this one is cancelled here)

    task = asyncio.create_task(cut_off())
    await inside.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await database.write("INSERT INTO zones (name, created_at) VALUES ('next', 'now')")
    assert await zones(database) == ["next"]
    assert lock_is_free(tmp_path / "control.sqlite3")


async def test_a_task_cancelled_while_its_statement_runs_leaves_nothing(database: Database, tmp_path: Path) -> None:
    for attempt in range(20):  # cancelled at the statement's every stage: queued, running, answered
        async def write(n: int = attempt) -> None:
            async with database.transaction() as tx:
                await tx.execute("INSERT INTO zones (name, created_at) VALUES (?, 'now')", (f"cut-{n}",))
                await tx.execute("INSERT INTO zones (name, created_at) VALUES (?, 'now')", (f"cut-{n}-b",))

        task = asyncio.create_task(write())
        for _ in range(attempt % 5):
            await asyncio.sleep(0)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        names = await zones(database)
        # all of a transaction or none of it
        assert (f"cut-{attempt}" in names) == (f"cut-{attempt}-b" in names)
    await database.write("INSERT INTO zones (name, created_at) VALUES ('next', 'now')")
    assert "next" in await zones(database)
    assert lock_is_free(tmp_path / "control.sqlite3")


async def test_another_process_holding_the_lock_is_a_503_and_then_passes(database: Database,
                                                                         tmp_path: Path) -> None:
    with write_lock_held(tmp_path / "control.sqlite3"):
        with pytest.raises(ApiError) as refused:
            await database.write("INSERT INTO zones (name, created_at) VALUES ('blocked', 'now')")
        assert refused.value.status == 503
    await database.write("INSERT INTO zones (name, created_at) VALUES ('next', 'now')")
    assert await zones(database) == ["next"]
