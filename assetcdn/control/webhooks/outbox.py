"""The durable event outbox: every mutation's events, written to SQLite with its bookkeeping.

How "a commit happened => its events are recorded" holds across a kill -9:
- Under the commit lock, after the git commit (which is fsynced before it returns), the publisher
  stages the commit's events and then moves a cursor (``webhook_outbox_cursor``) to the commit. Both
  are part of the open transaction that the commit's manifest generation then commits, so the
  generation and its events are written together. Staging events before the cursor means a
  transaction committed half-way (another writer on the shared connection may commit it) can hold
  events without the cursor, never the cursor without the events.
- A process killed after the git commit and before that transaction leaves HEAD ahead of the cursor.
  The next process, under the commit lock before its first commit and at start, walks the commits
  after the cursor and stages their events (``catch_up``). A commit's events are derived from the
  commit alone (``events.commit_events``), with ids ``<commit>-<n>``, so events already written are
  not written twice (``INSERT OR IGNORE``).
- A change that did not happen has no events: nothing is staged unless git made the commit.
- Events without a commit (a purge, an upload identical to the stored file) are staged with their
  manifest generation, in the same transaction. A purge's event is held until the edges answered;
  one still held when the process died is released at the next start without the answers.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

import aiosqlite

from assetcdn.control.storage.git_store import GitStore
from assetcdn.control.webhooks.events import Event, commit_events

log = logging.getLogger(__name__)

CURSOR = "commit"
CATCH_UP_LIMIT = 10_000  # commits walked back from HEAD looking for the cursor


class Outbox:
    def __init__(self, db: aiosqlite.Connection) -> None:
        self.db = db
        self._listeners: list[Callable[[], None]] = []
        self._caught_up = False

    def on_ready(self, listener: Callable[[], None]) -> None:
        """`listener` is called when events may have become deliverable (the delivery worker's wake-up)."""
        self._listeners.append(listener)

    def notify(self) -> None:
        for listener in self._listeners:
            listener()

    async def stage(self, events: Sequence[Event], *, held: bool = False) -> None:
        """Add events to the connection's open transaction; the caller's bookkeeping commits them."""
        if not events:
            return
        now = time.time()
        await self.db.executemany(
            "INSERT OR IGNORE INTO webhook_events (id, event, body, created_at, state) VALUES (?, ?, ?, ?, ?)",
            [(e.id, e.event, e.body(), now, "held" if held else "ready") for e in events])

    async def release(self, event: Event) -> None:
        """A held event whose data is now complete becomes deliverable, with that data."""
        await self.db.execute("UPDATE webhook_events SET body = ?, state = 'ready' WHERE id = ? AND state = 'held'",
                              (event.body(), event.id))
        await self.db.commit()
        self.notify()

    async def stage_commits(self, git: GitStore) -> None:
        """Stage the events of every commit after the cursor (under the commit lock), then move the cursor."""
        # execute_fetchall: the statement is done within the call, so no read snapshot stays open on the
        # shared connection across an await (a write from another coroutine would then fail at once
        # with "database is locked" while another connection writes).
        rows = list(await self.db.execute_fetchall("SELECT commit_id FROM webhook_outbox_cursor WHERE name = ?",
                                                   (CURSOR,)))
        row = rows[0] if rows else None
        if row is None:
            # The first start with webhooks: history before it has no subscribers to tell.
            await self._move_cursor(await git.run(git.head_commit_id))
            return
        logged = await git.run(git.commits_since, row[0], CATCH_UP_LIMIT)
        if logged is None:
            log.warning("webhook outbox: commit %s is not in the last %d commits of the history; events of "
                        "commits made since are not recorded", (row[0] or "")[:12], CATCH_UP_LIMIT)
            await self._move_cursor(await git.run(git.head_commit_id))
            return
        for commit in logged:
            await self.stage(commit_events(commit))
        if logged:
            await self._move_cursor(logged[-1].commit_id)

    async def _move_cursor(self, commit_id: str | None) -> None:
        await self.db.execute("INSERT INTO webhook_outbox_cursor (name, commit_id) VALUES (?, ?) "
                              "ON CONFLICT (name) DO UPDATE SET commit_id = excluded.commit_id", (CURSOR, commit_id))

    async def catch_up(self, git: GitStore) -> None:
        """Once per process, under the commit lock, before its first commit: record the events of commits
        a killed process made but did not record, and release the events it held."""
        if self._caught_up:
            return
        await self.stage_commits(git)
        async with self.db.execute("UPDATE webhook_events SET state = 'ready' WHERE state = 'held'") as cur:
            released = cur.rowcount
        await self.db.commit()
        if released:
            log.info("webhook outbox: released %d events held by a previous process", released)
        self._caught_up = True
        self.notify()
