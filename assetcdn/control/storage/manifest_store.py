"""The manifest: regenerated on every commit, one generation per commit.

It holds each file's CDN path, zone, category, format, size, SHA-256, git blob id, content type and
cache tags. Each generation's changes are kept in SQLite so that an edge that missed pushes can ask
for the changes since its generation; an edge too far behind gets a full snapshot instead.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

import orjson

from assetcdn.control.storage.catalog_orders import CatalogOrders
from assetcdn.control.storage.database import Database, Transaction, to_the_end
from assetcdn.control.storage.directory_index import DirectoryIndex
from assetcdn.control.storage.git_store import CommitResult, FileChange, GitStore
from assetcdn.shared.generation_push import PushedChange, PushedPurge
from assetcdn.shared.manifest import ManifestChange, ManifestEntry, make_entry
from assetcdn.shared.paths import CLIENT_ROOT, STOCK_ROOT, cdn_path_of
from assetcdn.shared.timestamps import utc_now_iso

HISTORY_KEPT = 5000
ORDER_UPDATES_KEPT = 64  # a generation of more files is merged into the catalog's orders, fewer are moved in place
IGNORED_NAMES = (".gitkeep",)


def is_asset_path(repo_path: str) -> bool:
    root, _, rest = repo_path.partition("/")
    if root not in (CLIENT_ROOT, STOCK_ROOT) or not rest:
        return False
    return repo_path.rsplit("/", 1)[-1] not in IGNORED_NAMES


@dataclass(frozen=True)
class Generation:
    generation: int
    commit_id: str | None
    changes: tuple[ManifestChange, ...]
    purge: dict[str, Any] | None = None  # {"tags": [...], "urls": [...], "everything": bool}


@dataclass(frozen=True)
class Delta:
    changes: list[ManifestChange]
    purges: list[dict[str, Any]]
    # The generation of each purge (same order) and of each path's latest change: an edge node whose
    # workers share one cache applies each generation's purges to it once (assetcdn/edge/cache/applied.py).
    purge_generations: list[int] = field(default_factory=list)
    change_generations: dict[str, int] = field(default_factory=dict)

    def pushed_changes(self) -> tuple[PushedChange, ...]:
        return tuple(PushedChange(self.change_generations[c.path], c) for c in self.changes)

    def pushed_purges(self) -> tuple[PushedPurge, ...]:
        return tuple(PushedPurge.of_command(g, p) for p, g in zip(self.purges, self.purge_generations, strict=True))


@dataclass(frozen=True)
class PendingGeneration:
    """A generation computed and not yet recorded: the manifest adopts it only once it is in SQLite."""
    generation: Generation
    updates: dict[str, ManifestEntry | None]   # CDN path -> its new entry (None: removed)
    hashes: dict[str, str]                     # blob id -> SHA-256 learnt while preparing
    files: tuple[FileChange, ...] = ()         # every file change the generation covers (rules included)


class ManifestStore:
    def __init__(self, git: GitStore, db: Database) -> None:
        self.git = git
        self.db = db
        self.entries: dict[str, ManifestEntry] = {}  # changed only here, with its index and the catalog's orders
        self._directories = DirectoryIndex()
        self.catalog = CatalogOrders((), self.zone_entries)  # GET /api/assets: made at start, kept through each change
        self.generation = 0
        self.commit_id: str | None = None

    async def load(self) -> None:
        """Build the manifest from HEAD; record a generation if the repository moved since the last one."""
        row = await self.db.fetch_one(
            "SELECT generation, commit_id FROM manifest_generations ORDER BY generation DESC LIMIT 1")
        last_generation, last_commit = (row[0], row[1]) if row else (0, None)
        head = await self.git.run(self.git.head_commit_id)
        files = await self.git.run(lambda: list(self.git.iter_files()))
        modified = await self.git.run(self.git.commit_time, head) if head else utc_now_iso()
        # Each file dated as when control last recorded it, if it still holds that content; else by HEAD's commit.
        kept = {row[0]: (row[1], row[2]) for row in await self.db.fetch("SELECT path, blob_id, modified FROM file_times")}
        hashes: dict[str, str] = {}
        entries = {}
        for f in files:
            if is_asset_path(f.path):
                was = kept.get(cdn_path_of(f.path))
                entry = await self._entry_for(f.path, f.blob_id, f.size,
                                              was[1] if was and was[0] == f.blob_id else modified, hashes)
                entries[entry.path] = entry
        stale = [(path,) for path in kept if path not in entries]
        dated = [(e.path, e.blob_id, e.modified) for e in entries.values() if kept.get(e.path) != (e.blob_id, e.modified)]
        if stale or dated:  # once for the files of a repository older than the table, or changed outside control
            async with self.db.transaction() as tx:
                await tx.executemany("DELETE FROM file_times WHERE path = ?", stale)
                await tx.executemany("INSERT OR REPLACE INTO file_times (path, blob_id, modified) VALUES (?, ?, ?)",
                                     dated)
        self.entries = entries
        self._directories = DirectoryIndex(entries.values())
        self.catalog = CatalogOrders(entries.values(), self.zone_entries)
        self.generation = last_generation
        self.commit_id = last_commit
        if head != last_commit and head is not None:
            diff = await self.git.run(self.git.diff_files, last_commit, head)
            prepared = await self._prepare(head, diff, modified, None)
            await self.record(replace(prepared, hashes={**hashes, **prepared.hashes}))
        elif hashes:
            async with self.db.transaction() as tx:
                await self._write_hashes(tx, hashes)

    async def _sha256(self, blob_id: str, learnt: dict[str, str]) -> str:
        if blob_id in learnt:
            return learnt[blob_id]
        row = await self.db.fetch_one("SELECT sha256 FROM blob_hashes WHERE blob_id = ?", (blob_id,))
        if row:
            return str(row[0])
        git = self.git
        # Read and hashed together in git's thread: a blob can be tens of MB, never hashed on the event loop.
        digest = await git.run(lambda: hashlib.sha256(git.read_blob(blob_id) or b"").hexdigest())
        learnt[blob_id] = digest
        return digest

    async def _entry_for(self, repo_path: str, blob_id: str, size: int | None, modified: str,
                         learnt: dict[str, str]) -> ManifestEntry:
        if size is None:
            size = await self.git.run(self.git.blob_size, blob_id)
        return make_entry(cdn_path_of(repo_path), size, await self._sha256(blob_id, learnt), blob_id, modified)

    async def prepare_commit(self, result: CommitResult, purge: dict[str, Any] | None = None) -> PendingGeneration:
        """The generation of a commit. When the manifest is not at the commit's parent (an earlier commit
        was made but its generation never recorded, its bookkeeping having failed), it carries every file
        changed since the manifest's commit, so that commit is published too."""
        changes: Iterable[FileChange] = result.changes
        recorded = self.commit_id or None  # "" after a purge recorded before the first commit
        if not result.changes or result.parent_id != recorded:
            changes = await self.git.run(self.git.diff_files, recorded, result.commit_id)
        return await self._prepare(result.commit_id, changes, result.committed_at, purge)

    def prepare_purge(self, purge: dict[str, Any] | None) -> PendingGeneration:
        """A purge (or a config change, purge=None) is a generation without file changes, so edges that
        miss it catch up on it too."""
        return PendingGeneration(Generation(self.generation + 1, self.commit_id or "", (), purge), {}, {})

    async def apply_commit(self, result: CommitResult, purge: dict[str, Any] | None = None) -> Generation:
        return await self.record(await self.prepare_commit(result, purge))

    async def record_purge(self, purge: dict[str, Any] | None) -> Generation:
        return await self.record(self.prepare_purge(purge))

    async def _prepare(self, commit_id: str, file_changes: Iterable[FileChange], modified: str,
                       purge: dict[str, Any] | None) -> PendingGeneration:
        changes: list[ManifestChange] = []
        updates: dict[str, ManifestEntry | None] = {}
        hashes: dict[str, str] = {}
        files = []
        for fc in file_changes:
            files.append(fc)
            if not is_asset_path(fc.path):
                continue
            cdn_path = cdn_path_of(fc.path)
            previous = self.entries.get(cdn_path)
            if fc.new_blob is None:
                updates[cdn_path] = None
                changes.append(ManifestChange(cdn_path, None, previous.tags if previous else ()))
            else:
                entry = await self._entry_for(fc.path, fc.new_blob, None, modified, hashes)
                updates[cdn_path] = entry
                changes.append(ManifestChange(cdn_path, entry, previous.tags if previous else ()))
        return PendingGeneration(Generation(self.generation + 1, commit_id, tuple(changes), purge), updates, hashes,
                        tuple(files))

    async def record(self, prepared: PendingGeneration,
                     also: Callable[[Transaction], Awaitable[None]] | None = None) -> Generation:
        """Write a prepared generation (with `also`'s writes, in the same transaction), then adopt it. A
        failed write changes nothing: memory and SQLite both stay at the previous generation."""
        generation = prepared.generation
        if generation.generation != self.generation + 1:
            raise RuntimeError(f"generation {generation.generation} prepared at {self.generation}: not recorded")
        # Stored and adopted together even if the caller goes away: a caller cancelled while the COMMIT ran
        # would otherwise leave SQLite one generation ahead of memory, and the next one would not be stored.
        return await to_the_end(self._store(prepared, also))

    async def _store(self, prepared: PendingGeneration, also: Callable[[Transaction], Awaitable[None]] | None) -> Generation:
        generation = prepared.generation
        async with self.db.transaction() as tx:
            if also is not None:
                await also(tx)
            await self._write_hashes(tx, prepared.hashes)
            await self._write_times(tx, prepared.updates)
            await tx.execute(
                "INSERT INTO manifest_generations (generation, commit_id, created_at, changes, purge) "
                "VALUES (?, ?, ?, ?, ?)",
                (generation.generation, generation.commit_id, utc_now_iso(),
                 orjson.dumps([c.to_json() for c in generation.changes]),
                 orjson.dumps(generation.purge) if generation.purge else None))
            await tx.execute("DELETE FROM manifest_generations WHERE generation <= ?",
                             (generation.generation - HISTORY_KEPT,))
        changes: list[tuple[ManifestEntry | None, ManifestEntry | None]] = []
        for path, entry in prepared.updates.items():
            previous = self.entries.pop(path, None) if entry is None else self.entries.get(path)
            if previous is not None:
                self._directories.remove(previous)
            if entry is not None:
                self.entries[path] = entry
                self._directories.add(entry)
            if previous is not None or entry is not None:
                changes.append((previous, entry))
        self.catalog.change(changes, ORDER_UPDATES_KEPT)
        self.generation = generation.generation
        self.commit_id = generation.commit_id
        return generation

    @staticmethod
    async def _write_times(tx: Transaction, updates: dict[str, ManifestEntry | None]) -> None:
        """Each changed file's time (`load` dates it by it at the next start), or its removal."""
        removed = [(path,) for path, entry in updates.items() if entry is None]
        if removed:
            await tx.executemany("DELETE FROM file_times WHERE path = ?", removed)
        dated = [(path, entry.blob_id, entry.modified) for path, entry in updates.items() if entry is not None]
        if dated:
            await tx.executemany("INSERT OR REPLACE INTO file_times (path, blob_id, modified) VALUES (?, ?, ?)", dated)

    @staticmethod
    async def _write_hashes(tx: Transaction, hashes: dict[str, str]) -> None:
        if hashes:
            await tx.executemany("INSERT OR IGNORE INTO blob_hashes (blob_id, sha256) VALUES (?, ?)",
                                 list(hashes.items()))

    async def changes_since(self, since: int, until: int | None = None) -> Delta | None:
        """Changes and purges after generation `since` up to `until` (default: the current one), or None when
        they are no longer kept (send a snapshot)."""
        until = self.generation if until is None else until
        if since == until:
            return Delta([], [])
        if since > until or since < 0:
            return None
        row = await self.db.fetch_one("SELECT MIN(generation) FROM manifest_generations")
        oldest = row[0] if row and row[0] is not None else self.generation + 1
        if since + 1 < oldest:
            return None
        merged: dict[str, ManifestChange] = {}
        purges: list[dict[str, Any]] = []
        delta = Delta([], purges)
        rows = await self.db.fetch("SELECT generation, changes, purge FROM manifest_generations "
                                   "WHERE generation > ? AND generation <= ? ORDER BY generation", (since, until))
        for generation, payload, purge in rows:
            if purge:
                purges.append(orjson.loads(purge))
                delta.purge_generations.append(generation)
            for item in orjson.loads(payload):
                change = ManifestChange.from_json(item)
                earlier = merged.get(change.path)
                tags = tuple(dict.fromkeys((earlier.previous_tags if earlier else ()) + change.previous_tags))
                merged[change.path] = ManifestChange(change.path, change.entry, tags)
                delta.change_generations[change.path] = generation
        delta.changes.extend(merged.values())
        return delta

    def snapshot(self) -> list[ManifestEntry]:
        return list(self.entries.values())

    def newest_below(self, directory: str) -> dict[str, str]:
        """{subdirectory of `directory` (a CDN path, "" the root): the time of its newest file}, from the index:
        as many steps as the directory has subdirectories (and, for one whose newest file went, its files)."""
        return self._directories.newest_below(directory)

    def directory_entries(self, directory: str) -> list[ManifestEntry]:
        """The files directly in `directory` (a CDN path, "" the root), from the index."""
        return self._directories.files_in(directory)

    def zone_totals(self, zone: str) -> tuple[int, int, list[str]]:
        """(files, bytes, sorted categories) of `zone_entries`, from the index's sums: a file's category
        (assetcdn/shared/manifest.py `classify`) is the directory it is below in its zone's v1/ (a stock file's, in
        stocks/)."""
        if not zone or "/" in zone:
            return 0, 0, []
        files, size = self._directories.totals(zone)
        categories = self._directories.subdirectories(zone if zone == STOCK_ROOT else f"{zone}/v1")
        if (at_the_root := self.entries.get(zone)) is not None:
            files, size = files + 1, size + at_the_root.size
        return files, size, sorted(categories)

    def zone_entries(self, zone: str) -> list[ManifestEntry]:
        """A zone's files, from the index: a zone is its paths' first part (assetcdn/shared/manifest.py `classify`),
        so they are those below its directory, and a file of its name at the root."""
        if not zone or "/" in zone:
            return []
        found = self._directories.entries_below(zone)
        if (at_the_root := self.entries.get(zone)) is not None:
            found.append(at_the_root)
        return found
