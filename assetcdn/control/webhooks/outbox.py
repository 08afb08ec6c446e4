"""The durable event outbox: every mutation's events, written to SQLite with its bookkeeping.

How "a commit happened => its events are recorded" holds across a kill -9:
- Under the commit lock, after the git commit (which is fsynced before it returns), the publisher
  reads the commit's events and where the cursor (``webhook_outbox_cursor``) moves to, then writes
  both in the one transaction that records the commit's manifest generation: the generation, its
  events and the cursor are written together or not at all.
- A process killed after the git commit and before that transaction leaves HEAD ahead of the cursor.
  The next process, under the commit lock before its first commit and at start, walks the commits
  after the cursor and stages their events (``catch_up``); a transaction that failed is caught up
  the same way by the next commit of the same process (``pending`` starts from the cursor). A commit's events are derived from the
  commit alone (``events.commit_events``), with ids ``<commit>-<n>``, so events already written are
  not written twice (``INSERT OR IGNORE``).
- A change that did not happen has no events: nothing is staged unless git made the commit.
- Events without a commit (a purge, an upload identical to the stored file) are staged with their
  manifest generation, in the same transaction. A purge's event is held until the edges answered;
  one still held when the process died is released at the next start without the answers. A release the
  database refused (another process held its lock past the busy timeout) is kept in memory and tried again
  at each round of the delivery worker (``release_unreleased``): the purge was made, so its answer does not
  wait for it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from assetcdn.control.storage.database import Database, Transaction
from assetcdn.control.storage.git_store import GitStore
from assetcdn.control.webhooks.events import Event, commit_events

# The events of mutations and the last commit they were derived from (created by `Outbox.open`).
SCHEMA = """
CREATE TABLE IF NOT EXISTS webhook_events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,          -- a commit's events: '<commit>-<n>', so re-deriving them is idempotent
    event TEXT NOT NULL,
    body BLOB NOT NULL,               -- the exact bytes posted and signed, the same on every attempt
    created_at REAL NOT NULL,
    state TEXT NOT NULL,              -- 'ready', or 'held' while its data is completed (purge acks)
    dispatched INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS webhook_events_undispatched ON webhook_events (dispatched, state, seq);
CREATE TABLE IF NOT EXISTS webhook_outbox_cursor (
    name TEXT PRIMARY KEY,
    commit_id TEXT                    -- the last commit whose events are in webhook_events
);
"""

log = logging.getLogger(__name__)

CURSOR = "commit"
CATCH_UP_LIMIT = 10_000  # commits walked back from HEAD looking for the cursor
# Releases the database refused, kept to try again; past this many the oldest stay held until the next start
# (which releases them without the edges' answers) rather than growing memory while the database is refused.
MAX_UNRELEASED = 1_000


@dataclass(frozen=True)
class Staged:
    """Events of commits not yet recorded, and the cursor's new place (when `moves_cursor`)."""
    events: tuple[Event, ...] = ()
    moves_cursor: bool = False
    cursor: str | None = None


class Outbox:
    def __init__(self, db: Database) -> None:
        self.db = db
        self._listeners: list[Callable[[], None]] = []
        self._caught_up = False
        self._unreleased: dict[str, Event] = {}  # event id -> its completed event, to release again

    async def open(self) -> None:
        """Create the outbox's tables (before the first mutation records events in them)."""
        await self.db.script(SCHEMA)

    def on_ready(self, listener: Callable[[], None]) -> None:
        """`listener` is called when events may have become deliverable (the delivery worker's wake-up)."""
        self._listeners.append(listener)

    def notify(self) -> None:
        for listener in self._listeners:
            listener()

    async def pending(self, git: GitStore) -> Staged:
        """The events of every commit after the cursor, and where the cursor moves (under the commit lock)."""
        row = await self.db.fetch_one("SELECT commit_id FROM webhook_outbox_cursor WHERE name = ?", (CURSOR,))
        if row is None:
            # The first start with webhooks: history before it has no subscribers to tell.
            return Staged((), True, await git.run(git.head_commit_id))
        logged = await git.run(git.commits_since, row[0], CATCH_UP_LIMIT)
        if logged is None:
            log.warning("webhook outbox: commit %s is not in the last %d commits of the history; events of "
                        "commits made since are not recorded", (row[0] or "")[:12], CATCH_UP_LIMIT)
            return Staged((), True, await git.run(git.head_commit_id))
        events = tuple(event for commit in logged for event in commit_events(commit))
        return Staged(events, bool(logged), logged[-1].commit_id if logged else None)

    async def write(self, tx: Transaction, staged: Staged, events: Sequence[Event] = (), *,
                    held: bool = False) -> None:
        """In `tx`: the staged commits' events and the cursor's move, then `events` (held until released
        when `held`)."""
        await self.stage(tx, staged.events)
        if staged.moves_cursor:
            await tx.execute("INSERT INTO webhook_outbox_cursor (name, commit_id) VALUES (?, ?) "
                             "ON CONFLICT (name) DO UPDATE SET commit_id = excluded.commit_id",
                             (CURSOR, staged.cursor))
        await self.stage(tx, events, held=held)

    @staticmethod
    async def stage(tx: Transaction, events: Sequence[Event], *, held: bool = False) -> None:
        if not events:
            return
        now = time.time()
        await tx.executemany(
            "INSERT OR IGNORE INTO webhook_events (id, event, body, created_at, state) VALUES (?, ?, ?, ?, ?)",
            [(e.id, e.event, e.body(), now, "held" if held else "ready") for e in events])

    async def release(self, event: Event) -> None:
        """A held event whose data is now complete becomes deliverable, with that data: now, or when the
        database refuses the write, at a later round of the delivery worker. It never raises for that: the
        change the event tells of was made already."""
        try:
            await self._release(event)
        except Exception as exc:
            self._unreleased[event.id] = event
            while len(self._unreleased) > MAX_UNRELEASED:
                del self._unreleased[next(iter(self._unreleased))]
            log.info("webhook outbox: event %s stays held until the database takes its release (%s)",
                     event.id, type(exc).__name__)
        self.notify()

    async def release_unreleased(self) -> None:
        """Release the events whose release the database refused, oldest first; those it refuses again wait
        for the next call (each round of the delivery worker)."""
        for event in list(self._unreleased.values()):
            try:
                await self._release(event)
            except Exception:
                return
            self._unreleased.pop(event.id, None)

    async def _release(self, event: Event) -> None:
        await self.db.write("UPDATE webhook_events SET body = ?, state = 'ready' WHERE id = ? AND state = 'held'",
                            (event.body(), event.id))

    async def catch_up(self, git: GitStore) -> None:
        """Once per process, under the commit lock, before its first commit: record the events of commits
        a killed process made but did not record, and release the events it held."""
        if self._caught_up:
            return
        staged = await self.pending(git)
        async with self.db.transaction() as tx:
            await self.write(tx, staged)
            released = await tx.execute("UPDATE webhook_events SET state = 'ready' WHERE state = 'held'")
        if released:
            log.info("webhook outbox: released %d events held by a previous process", released)
        self._caught_up = True
        self.notify()
