"""A mutation's way out: one commit, a new manifest generation, a push to every edge.

The response of a mutation waits (bounded) for the edges' acknowledgements, so EdgeStatus and
EdgeNote report what really happened instead of promising a deployment window.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from control.cluster.registry import EdgeRegistry, FanOut
from control.edge_config import EdgeConfigStore
from control.manifest_store import Generation, ManifestStore
from control.storage.git_store import CommitResult, GitStore
from shared.edge_rules import RULE_FILES


@dataclass(frozen=True)
class Published:
    commit: CommitResult
    generation: Generation
    fan_out: FanOut

    @property
    def edge_note(self) -> str:
        return edge_note(self.commit.commit_id, self.generation.generation, self.fan_out)


def edge_note(commit_id: str, generation: int, fan_out: FanOut) -> str:
    head = f"Committed {commit_id[:12]} as manifest generation {generation}."
    acked, pending = fan_out.nodes()
    total = len(acked) + len(pending)
    if total == 0:
        return head + " No edge is registered yet; edges load the new generation when they start."
    if not pending:
        return head + f" Acknowledged by {total} of {total} edges in {fan_out.elapsed_ms:.0f} ms."
    return (head + f" Acknowledged by {len(acked)} of {total} edges within "
            f"{fan_out.elapsed_ms:.0f} ms; not yet: {', '.join(pending)} (they catch up on their own).")


class Publisher:
    def __init__(self, git: GitStore, manifest: ManifestStore, registry: EdgeRegistry, config: EdgeConfigStore,
                 push_wait_s: float) -> None:
        self.git = git
        self.manifest = manifest
        self.registry = registry
        self.config = config
        self.listeners: list[Callable[[CommitResult], None]] = []  # told of every commit (e.g. video ingest)
        self.push_wait_s = push_wait_s
        # Commit and manifest generation happen under one lock, so generations follow commit order.
        self._lock = asyncio.Lock()

    async def commit(self, changes: Mapping[str, bytes | None], message: str, purge_tags: Sequence[str] = (),
                     precondition: Callable[[], Awaitable[None]] | None = None) -> Published:
        """One commit, its generation, and the push. `precondition` runs under the same lock just before the
        commit and raises to refuse it, so a check such as "this zone does not exist yet" cannot race."""
        async with self._lock:
            if precondition is not None:
                await precondition()
            result = await self.git.commit(changes, message)
            generation = await self.manifest.apply_commit(result, {"tags": list(purge_tags)} if purge_tags else None)
            if any(c.path in RULE_FILES for c in result.changes):
                self.config.invalidate()
        for listener in self.listeners:
            listener(result)
        fan_out = await self.push(generation)
        return Published(result, generation, fan_out)

    async def publish_config(self) -> FanOut:
        """After a change outside git (domains): a generation without file changes carries the new config."""
        self.config.invalidate()
        async with self._lock:
            generation = await self.manifest.record_purge(None)
        return await self.push(generation)

    async def purge(self, command: dict[str, Any]) -> tuple[Generation, FanOut]:
        async with self._lock:
            generation = await self.manifest.record_purge(command)
        return generation, await self.push(generation, kind="purge")

    async def push(self, generation: Generation, kind: str = "push") -> FanOut:
        message = {**generation.message(), "config_version": await self.config.version()}
        return await self.registry.fan_out(kind, "/push", message, self.push_wait_s)
