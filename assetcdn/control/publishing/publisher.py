"""A mutation's way out: one commit, a new manifest generation, a push to every edge.

The response of a mutation waits (bounded) for the edges' acknowledgements, so EdgeNote reports what
really happened instead of promising a deployment window (EdgeStatus names the kind of change only:
`purging` when cached copies of replaced or removed files go, else `pending`, whatever the edges acknowledged).

Every mutation's webhook events go into the outbox in the transaction of its manifest generation
(see ``control.webhooks.outbox`` for why a commit's events survive a kill -9).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from assetcdn.control.publishing.edge_registry import EdgeRegistry, FanOut
from assetcdn.control.storage.database import Transaction
from assetcdn.control.storage.edge_config_store import EdgeConfigStore
from assetcdn.control.storage.git_store import CommitResult, FileChange, GitStore, NothingToCommit
from assetcdn.control.storage.manifest_store import (
    Generation,
    ManifestStore,
    PendingGeneration,
    is_asset_path,
)
from assetcdn.control.webhooks.events import Change, Event, with_trailer
from assetcdn.control.webhooks.outbox import Outbox
from assetcdn.shared.edge_rules import RULE_FILES
from assetcdn.shared.generation_push import GenerationPush
from assetcdn.shared.paths import cdn_path_of
from assetcdn.shared.timestamps import utc_now_iso

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Published:
    commit: CommitResult   # without changes when an upload changed nothing: then the HEAD that holds it
    generation: Generation
    fan_out: FanOut
    unchanged: tuple[str, ...] = ()  # uploaded paths whose stored bytes were identical (purged by URL)

    @property
    def committed(self) -> bool:
        return bool(self.commit.changes)

    @property
    def replaced(self) -> frozenset[str]:
        """Paths that held a file before this mutation: overwritten (EdgeStatus `purging`) or unchanged."""
        return frozenset([c.path for c in self.commit.changes if c.old_blob is not None] + list(self.unchanged))

    @property
    def edge_note(self) -> str:
        if not self.committed:
            head = (f"Identical to the stored content: no commit was needed (HEAD {self.commit.commit_id[:12]}); "
                    f"the cached copies are purged as manifest generation {self.generation.generation}.")
            return head + acknowledgements(self.fan_out)
        note = edge_note(self.commit.commit_id, self.generation.generation, self.fan_out)
        if self.unchanged:
            note += (f" {len(self.unchanged)} of the files were identical to the stored ones; their cached copies "
                     "are purged.")
        return note


@dataclass(frozen=True)
class Mutation:
    """What one commit writes: {path: bytes (write) | None (delete)}, its message, tags to purge, and the
    kind of change when the files alone do not say it (a zone, a pipeline run: see webhooks.events)."""
    files: Mapping[str, bytes | None]
    message: str
    purge_tags: Sequence[str] = ()
    change: Change | None = None


def edge_note(commit_id: str, generation: int, fan_out: FanOut) -> str:
    return f"Committed {commit_id[:12]} as manifest generation {generation}." + acknowledgements(fan_out)


def acknowledgements(fan_out: FanOut) -> str:
    acked, pending = fan_out.nodes()
    total = len(acked) + len(pending)
    if total == 0:
        return " No edge is registered yet; edges load the new generation when they start."
    if not pending:
        return f" Acknowledged by {total} of {total} edges in {fan_out.elapsed_ms:.0f} ms."
    quiet = fan_out.quiet_nodes()
    asked = [name for name in pending if name not in quiet]
    waited = [f"not yet: {', '.join(asked)}"] if asked else []
    if quiet:  # registered, but silent: counted and named, never left out as if there were fewer edges
        waited.append(f"not heard from lately, so not sent it: {', '.join(quiet)}")
    return (f" Acknowledged by {len(acked)} of {total} edges within "
            f"{fan_out.elapsed_ms:.0f} ms; {'; '.join(waited)} (they catch up on their own).")


def purge_acknowledgements(fan_out: FanOut) -> dict[str, Any]:
    """Which edges applied a purge, how fast, and how many cached entries each dropped."""
    acked, pending = fan_out.nodes()
    return {"total": len(acked) + len(pending), "acknowledged": acked, "pending": pending,
            "elapsedMs": fan_out.elapsed_ms,
            "entriesRemoved": {name: reply.get("purged", 0) for name, reply in fan_out.results.items()}}


def purge_mode(command: Mapping[str, Any]) -> str:
    """How a purge command (assetcdn/control/routes/purge.py) selects: urls, tags, prefixes or everything."""
    return "everything" if command.get("everything") else next(m for m in ("urls", "tags", "prefixes")
                                                                if m in command)


class PurgeMadeCancelled(asyncio.CancelledError):
    """`Publisher.record_purge` cancelled (control stopping past its grace) after its generation was recorded all
    the same (ManifestStore.record ends its write): still a cancellation, and a purge made."""


@dataclass(frozen=True)
class RecordedPurge:
    """A purge whose generation is recorded (`Publisher.record_purge`): the purge is made, not yet pushed."""
    generation: Generation
    event: Callable[[int, dict[str, Any] | None], Event]  # its purge.completed event, given the edges' answers


class Publisher:
    def __init__(self, git: GitStore, manifest: ManifestStore, registry: EdgeRegistry, config: EdgeConfigStore,
                 push_wait_s: float, outbox: Outbox | None = None) -> None:
        self.git = git
        self.manifest = manifest
        self.outbox = outbox or Outbox(manifest.db)
        self.registry = registry
        self.config = config
        self.listeners: list[Callable[[CommitResult], None]] = []  # told of every commit (e.g. video ingest)
        self.push_wait_s = push_wait_s
        # Commit and manifest generation happen under one lock, so generations follow commit order.
        self._lock = asyncio.Lock()

    async def commit(self, changes: Mapping[str, bytes | None], message: str, purge_tags: Sequence[str] = (),
                     precondition: Callable[[], Awaitable[None]] | None = None,
                     change: Change | None = None) -> Published:
        """One commit, its generation, and the push. `precondition` runs under the same lock just before the
        commit and raises to refuse it, so a check such as "this zone does not exist yet" cannot race.
        A change that leaves the tree as it is raises NothingToCommit."""
        async def plan() -> Mutation:
            if precondition is not None:
                await precondition()
            return Mutation(changes, message, purge_tags, change)

        return await self.commit_planned(plan)

    async def commit_planned(self, plan: Callable[[], Awaitable[Mutation]]) -> Published:
        """A commit whose files are decided under the commit lock, by `plan` (which may raise to refuse it):
        for a change that depends on the tree, such as deleting everything under a prefix, which a commit
        queued ahead of it could otherwise extend."""
        async with self._lock:
            await self.outbox.catch_up(self.git)
            mutation = await plan()
            result = await self.git.commit(mutation.files, with_trailer(mutation.message, mutation.change))
            purge = {"tags": list(mutation.purge_tags)} if mutation.purge_tags else None
            prepared = await self.manifest.prepare_commit(result, purge)
            generation = await self._record(prepared)
        self.outbox.notify()
        return await self._publish(result, generation, covered=prepared.files)

    async def upload(self, files: Mapping[str, bytes], message: str,
                     precondition: Callable[[], Awaitable[None]] | None = None) -> Published:
        """Write files (a storage upload). A file whose bytes are already stored is an overwrite all the same
        (the API's `purging`): it makes no commit, as git history records only changes, but its URL is
        purged on every edge, in the commit's generation or, when nothing changed, a generation of its own."""
        async with self._lock:
            await self.outbox.catch_up(self.git)
            if precondition is not None:
                await precondition()
            try:
                result = await self.git.commit(files, message)
            except NothingToCommit:
                head = await self.git.run(self.git.head_commit_id) or ""  # identical bytes: a HEAD exists
                result = CommitResult(head, await self.git.run(self.git.commit_time, head), ())
            changed = {c.path for c in result.changes}
            unchanged = tuple(p for p in files if p not in changed)
            urls = [f"/{cdn_path_of(p)}" for p in unchanged if is_asset_path(p)]
            purge = {"urls": urls} if urls else None
            # An identical upload is an overwrite all the same (its response says so): asset.updated.
            now = utc_now_iso()
            updated = [Event(str(uuid.uuid4()), "asset.updated", now, {"path": f"/{cdn_path_of(p)}", "size": len(files[p])})
                       for p in unchanged if is_asset_path(p)]
            if result.changes or self.manifest.commit_id != result.commit_id:
                prepared = await self.manifest.prepare_commit(result, purge)
            else:
                prepared = self.manifest.prepare_purge(purge)
            generation = await self._record(prepared, updated)
        self.outbox.notify()
        return await self._publish(result, generation, unchanged, covered=prepared.files)

    async def _record(self, prepared: PendingGeneration, events: Sequence[Event] = (), *, held: bool = False) -> Generation:
        """Record a generation with the events of the commits it covers and `events`, in one transaction
        (under the lock, so generations follow commit order). When it fails nothing is recorded: the
        next one covers the commit too (ManifestStore.prepare_commit, Outbox.pending)."""
        staged = await self.outbox.pending(self.git)

        async def bookkeeping(tx: Transaction) -> None:
            await self.outbox.write(tx, staged, events, held=held)

        generation = await self.manifest.record(prepared, bookkeeping)
        if any(change.path in RULE_FILES for change in prepared.files):
            self.config.invalidate()
        return generation

    async def _publish(self, result: CommitResult, generation: Generation, unchanged: tuple[str, ...] = (),
                       covered: tuple[FileChange, ...] = ()) -> Published:
        # Listeners hear of every file the generation covers: a commit whose bookkeeping failed included.
        told = replace(result, changes=covered) if covered else result
        if told.changes:
            for listener in self.listeners:
                listener(told)
        fan_out = await self.push(generation, kind="push" if result.changes else "purge")
        return Published(result, generation, fan_out, unchanged)

    async def publish_config(self) -> FanOut:
        """After a change outside git (domains): a generation without file changes carries the new config."""
        self.config.invalidate()
        async with self._lock:
            generation = await self._record(self.manifest.prepare_purge(None))
        return await self.push(generation)

    async def purge(self, command: dict[str, Any]) -> tuple[Generation, FanOut]:
        """A purge generation and its push (`record_purge`, then `send_purge`)."""
        recorded = await self.record_purge(command)
        return recorded.generation, await self.send_purge(recorded)

    async def record_purge(self, command: dict[str, Any]) -> RecordedPurge:
        """Record a purge's generation with its purge.completed event, held until the edges answered. Once
        this returns the purge is made: every edge applies it, pushed it or at its next catch-up; when it
        raises, nothing was recorded, but for PurgeMadeCancelled (cancelled once the generation was recorded)."""
        mode = purge_mode(command)
        purged: Any = "everything" if mode == "everything" else command[mode]
        event_id, timestamp = str(uuid.uuid4()), utc_now_iso()

        def event(generation: int, edges: dict[str, Any] | None) -> Event:
            # edges None: the acknowledgements were not collected (the process stopped first)
            scope = {"zone": command["zone"]} if "zone" in command else {}  # a tag purge within one zone
            return Event(event_id, "purge.completed", timestamp,
                         {"purged": purged, "mode": mode, "soft": bool(command.get("soft")), **scope,
                          "generation": generation, "edges": edges})

        async with self._lock:
            await self.outbox.catch_up(self.git)
            prepared = self.manifest.prepare_purge(command)
            number = prepared.generation.generation
            try:
                # held until the edges answered; recorded with its generation
                generation = await self._record(prepared, [event(number, None)], held=True)
            except asyncio.CancelledError:
                if self.manifest.generation != number:  # not recorded (under the lock: no other generation is)
                    raise
                # Made, and never pushed from here (the edges apply it when they catch up): its event goes out
                # now, without their answers, as send_purge's does when cancelled, not at control's next start.
                await self.outbox.release(event(number, None))
                raise PurgeMadeCancelled() from None
        return RecordedPurge(generation, event)

    async def send_purge(self, recorded: RecordedPurge) -> FanOut:
        """Push a recorded purge and release its event with the edges' answers. Nothing but a cancellation
        raises here: the purge is made, so a push that failed (a read of the edge config the database
        refused) is answered as sent to none of the edges, each of which applies it when it catches up."""
        generation = recorded.generation
        try:
            fan_out = await self.push(generation, kind="purge")
        except asyncio.CancelledError:
            await self.outbox.release(recorded.event(generation.generation, None))
            raise
        except Exception as exc:
            log.warning("purge generation %d is recorded but its push failed (%s); the edges apply it when they "
                        "catch up", generation.generation, type(exc).__name__)
            live = sorted(e.name for e in self.registry.live_edges())
            fan_out = FanOut((), tuple(live), 0.0, quiet=tuple(sorted(set(self.registry.edges) - set(live))))
        await self.outbox.release(recorded.event(generation.generation, purge_acknowledgements(fan_out)))
        return fan_out

    async def catch_up_outbox(self) -> None:
        """At start: the events of commits a killed process left unrecorded (under the commit lock)."""
        async with self._lock:
            await self.outbox.catch_up(self.git)

    async def push(self, generation: Generation, kind: str = "push") -> FanOut:
        push = GenerationPush.of_generation(generation.generation, generation.commit_id, await self.config.version(),
                                            generation.changes, generation.purge)
        return await self.registry.fan_out(kind, "/push", push.to_json(), self.push_wait_s)
