"""Storage on the control app: its typed state and the context that opens and closes it.

The git repository, control's SQLite database (each package adds its own tables to it as its context
starts), the manifest, the zones and the edge configuration. A `main` that names no readable commit
goes back to the newest commit a manifest generation recorded before anything reads it.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from aiohttp import web

from assetcdn.control.app_keys import DASHBOARD, DATA_DIR, SETTINGS
from assetcdn.control.storage.database import Database, open_database
from assetcdn.control.storage.edge_config_store import EdgeConfigStore, own_hosts
from assetcdn.control.storage.git_store import GitStore
from assetcdn.control.storage.manifest_store import ManifestStore
from assetcdn.control.storage.zones_store import ZoneStore
from assetcdn.shared.metrics import METRICS

GIT = web.AppKey("git", GitStore)
DB = web.AppKey("db", Database)
MANIFEST = web.AppKey("manifest", ManifestStore)
ZONES = web.AppKey("zones", ZoneStore)
EDGE_CONFIG = web.AppKey("edge_config", EdgeConfigStore)


@contextlib.asynccontextmanager
async def storage_context(app: web.Application) -> AsyncIterator[None]:
    settings = app[SETTINGS]
    data_dir = app[DATA_DIR]
    async with contextlib.AsyncExitStack() as opened:
        git = GitStore(data_dir / "repo.git")
        opened.callback(git.close)
        db = await open_database(data_dir / "control.sqlite3",
                                 busy_timeout_ms=settings.get("control", "sqlite_busy_timeout_ms"))
        opened.push_async_callback(db.close)
        await _restore_damaged_branch(git, db)
        manifest = ManifestStore(git, db)
        await manifest.load()
        app[GIT], app[DB], app[MANIFEST] = git, db, manifest
        # `assetcdn_manifest_generation{process="control"}`: the generation published at each scrape (every commit,
        # purge and config change records one), as the edges report the one each holds.
        metrics = app[METRICS]
        published = metrics.manifest_generation.labels(metrics.kind)

        def report_generation() -> None:
            published.set(manifest.generation)

        metrics.add_source(report_generation)
        opened.callback(metrics.remove_source, report_generation)
        app[ZONES] = ZoneStore(db)
        app[EDGE_CONFIG] = EdgeConfigStore(git, db, settings.get("domains", "base_domain"),
                                           frozenset(own_hosts(settings, app[DASHBOARD].origins)))
        yield


async def _restore_damaged_branch(git: GitStore, db: Database) -> None:
    """A `main` that names no readable commit goes back to the newest commit a manifest generation
    recorded: every acknowledged write has one (assetcdn/control/publishing/publisher.py records it before answering)."""
    if not await git.run(git.branch_damaged):
        return
    rows = await db.fetch("SELECT commit_id FROM manifest_generations WHERE commit_id != '' ORDER BY generation DESC")
    known = list(dict.fromkeys(row[0] for row in rows))
    await git.run(git.restore_branch, known)
