"""The vector index of the catalog: one unit vector per asset, kept in step with the manifest.

Vectors are stored in SQLite (table ``search_vectors`` of control.sqlite3: path, the key of the
text they were made from, 384 float32s), so a restart embeds only what changed while it was down.
On start the stored rows are read, then every manifest entry is checked against them (a changed
recipe, model or alt text changes the key) and what is missing or stale is embedded; after that,
each commit's paths are re-checked (the publisher tells `on_commit`). Embedding runs on a worker
thread, in small batches, never on the event loop. Searches read an immutable snapshot.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from assetcdn.control.search.asset_text import describe, searchable, text_key
from assetcdn.control.search.model_info import DIMENSIONS, ModelUnavailable
from assetcdn.control.storage.database import Database
from assetcdn.control.storage.git_store import CommitResult
from assetcdn.control.storage.manifest_store import ManifestStore, is_asset_path
from assetcdn.shared.paths import cdn_path_of

if TYPE_CHECKING:
    import numpy as np

    from assetcdn.control.search.encoder import SentenceEncoder

log = logging.getLogger(__name__)

SCHEMA = """
CREATE TABLE IF NOT EXISTS search_vectors (
    path TEXT PRIMARY KEY,
    text_key TEXT NOT NULL,
    vector BLOB NOT NULL
);
"""
EMBED_BATCH = 32          # texts per trip to the worker thread: short enough that a query between batches waits little
AltTextSource = Callable[[str], str | None]


@dataclass(frozen=True)
class VectorSnapshot:
    """What a search reads: paths and their vectors (row i is paths[i]); never mutated."""
    paths: tuple[str, ...]
    rows: dict[str, int]
    _matrix: np.ndarray | None = field(default=None, repr=False)  # None: empty

    @property
    def matrix(self) -> np.ndarray:
        if self._matrix is not None:
            return self._matrix
        import numpy as np  # noqa: PLC0415 (an empty index, as every start without the model has, needs no numpy)

        return np.zeros((0, DIMENSIONS), dtype=np.float32)

    @staticmethod
    def of(paths: tuple[str, ...], matrix: np.ndarray) -> VectorSnapshot:
        return VectorSnapshot(paths, {path: i for i, path in enumerate(paths)}, matrix)

    @staticmethod
    def empty() -> VectorSnapshot:
        return VectorSnapshot((), {})


def _packaged_model() -> SentenceEncoder:
    from assetcdn.control.search.encoder import load_packaged_model  # noqa: PLC0415 (numpy and tokenizers)

    return load_packaged_model().encoder


def _no_alt_text(path: str) -> str | None:
    return None


class SearchIndex:
    def __init__(self, db: Database, manifest: ManifestStore, *,
                 load_model: Callable[[], SentenceEncoder] | None = None) -> None:
        self._db = db
        self.manifest = manifest
        self._load_model = load_model or _packaged_model
        self.encoder: SentenceEncoder | None = None
        self.unavailable: str | None = None     # why vectors are not used, once the model failed to load
        # Hook for image analysis: alt text known for a path becomes part of its text. Call
        # `refresh([path])` when it changes so the vector is remade.
        self.alt_text: AltTextSource = _no_alt_text
        self.snapshot = VectorSnapshot.empty()
        self.version = 0                         # counts published snapshots (answers cached per version)
        self.backlog = 0                         # texts still to embed in the current pass
        self.embedded = 0                        # texts embedded since start (a restart should add few)
        self.embed_executor = ThreadPoolExecutor(1, thread_name_prefix="search-index")
        self._stored: dict[str, tuple[str, np.ndarray]] = {}
        self._pending: set[str] = set()
        self._full_pass = True
        self._wake = asyncio.Event()
        self._settled = asyncio.Event()
        self._model_loaded = asyncio.Event()
        self._changed = asyncio.Condition()     # notified when the backlog or the settled state changes
        self._task: asyncio.Task[None] | None = None

    async def open(self) -> None:
        """Read the stored vectors and start keeping the index in step (model load included)."""
        await self._db.script(SCHEMA)
        stored = await self._db.fetch("SELECT path, text_key, vector FROM search_vectors")
        if stored:  # vectors made by an earlier start: numpy only then
            import numpy as np  # noqa: PLC0415

            for path, key, blob in stored:
                vector = np.frombuffer(blob, dtype=np.float32)
                if vector.shape == (DIMENSIONS,):
                    self._stored[path] = (key, vector)
        self._publish_snapshot()
        self._task = asyncio.create_task(self._maintain())

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        # A batch already on the worker thread finishes on its own; nothing waits for it.
        self.embed_executor.shutdown(wait=False, cancel_futures=True)

    # -- told of changes -------------------------------------------------------------------------

    def on_commit(self, result: CommitResult) -> None:
        """Publisher listener: re-check the paths a commit touched (upload, delete, batch, zone delete, pipeline)."""
        self.refresh(cdn_path_of(c.path) for c in result.changes if is_asset_path(c.path))

    def refresh(self, paths: Iterable[str]) -> None:
        """Re-check these CDN paths (e.g. when their alt text became known)."""
        if self._model_loaded.is_set() and self.encoder is None:
            return  # fuzzy only: nothing to embed
        self._pending.update(paths)
        if self._pending:
            self._settled.clear()
            self._wake.set()

    # -- read by searches -------------------------------------------------------------------------

    async def model(self) -> SentenceEncoder | None:
        """The encoder once loaded, or None when the model package is unavailable."""
        await self._model_loaded.wait()
        return self.encoder

    async def settled(self, max_backlog: int) -> None:
        """Wait until the index reflects the manifest, unless more than `max_backlog` texts are queued
        (a first build of a large catalog): then searches use what is there and fuzzy-match the rest."""
        await self._model_loaded.wait()
        if self.encoder is None:
            return  # no vectors to wait for
        async with self._changed:
            await self._changed.wait_for(lambda: self._settled.is_set() or self.backlog > max_backlog)

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    # -- the maintenance task ---------------------------------------------------------------------

    async def _maintain(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            self.encoder = await loop.run_in_executor(self.embed_executor, self._load_model)
        except ModelUnavailable as exc:
            self.unavailable = str(exc)
            log.warning("semantic search is off, fuzzy matching only: %s", exc)
        except Exception as exc:  # a broken model must not take search down: fuzzy still answers
            self.unavailable = f"the model failed to load: {exc}"
            log.exception("semantic search is off, fuzzy matching only")
        finally:
            self._model_loaded.set()
        if self.encoder is None:
            self._settled.set()
            await self._notify()
            return
        while True:
            self._wake.clear()  # before looking at _pending: a commit arriving from here on wakes the wait below
            if self._full_pass:
                self._full_pass = False
                self._pending.clear()
                await self._sync(set(self.manifest.entries) | set(self._stored))
            elif self._pending:
                paths, self._pending = self._pending, set()
                await self._sync(paths)
            if not self._pending:
                self._settled.set()
                await self._notify()
                await self._wake.wait()

    async def _sync(self, paths: set[str]) -> None:
        import numpy as np  # noqa: PLC0415 (the model is loaded: numpy is already)

        assert self.encoder is not None
        model_id = self.encoder.model_id
        stale: list[tuple[str, str, str]] = []
        entries = {p: e for p in paths if (e := self.manifest.entries.get(p)) is not None and searchable(e)}
        removed = [p for p in paths if p not in entries and p in self._stored]
        for path in sorted(paths):
            entry = entries.get(path)
            if entry is None:
                continue
            text = describe(entry, self.alt_text(path))
            key = text_key(model_id, text)
            if self._stored.get(path, ("",))[0] != key:
                stale.append((path, key, text))
        if removed:
            for path in removed:
                self._stored.pop(path, None)
            async with self._db.transaction() as tx:
                await tx.executemany("DELETE FROM search_vectors WHERE path = ?", [(p,) for p in removed])
            self._publish_snapshot()
        self.backlog = len(stale)
        await self._notify()
        loop = asyncio.get_running_loop()
        for start in range(0, len(stale), EMBED_BATCH):
            batch = stale[start:start + EMBED_BATCH]
            vectors = await loop.run_in_executor(self.embed_executor, self.encoder.encode, [t for _, _, t in batch])
            rows = []
            for (path, key, _), vector in zip(batch, vectors, strict=True):
                self._stored[path] = (key, vector)
                rows.append((path, key, vector.astype(np.float32).tobytes()))
            async with self._db.transaction() as tx:
                await tx.executemany(
                    "INSERT INTO search_vectors (path, text_key, vector) VALUES (?, ?, ?) "
                    "ON CONFLICT (path) DO UPDATE SET text_key = excluded.text_key, vector = excluded.vector", rows)
            self.embedded += len(batch)
            self.backlog = max(len(stale) - start - len(batch), 0)
            self._publish_snapshot()
        self.backlog = 0

    def _publish_snapshot(self) -> None:
        self.version += 1
        paths = tuple(sorted(self._stored))
        if not paths:
            self.snapshot = VectorSnapshot.empty()
            return
        import numpy as np  # noqa: PLC0415 (only with vectors)

        self.snapshot = VectorSnapshot.of(paths, np.stack([self._stored[p][1] for p in paths]))
