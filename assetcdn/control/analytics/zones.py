"""The zones analytics rows may name: a zone of the repository (``clients/<zone>/``, empty or not) or
a built-in one. Control does not take an edge's word for it: counts for any other name go to the
``UNKNOWN_ZONE`` bucket (``assetcdn/control/analytics/store.py``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from assetcdn.control.analytics.hits import BUILT_IN_ZONES
from assetcdn.control.storage.git_store import GitStore
from assetcdn.control.storage.manifest_store import ManifestStore
from assetcdn.shared.paths import CLIENT_ROOT


def known_zones(git: GitStore, manifest: ManifestStore) -> Callable[[], Awaitable[frozenset[str]]]:
    """The zones at the manifest's commit, read from git again only after a commit (every zone's
    creation and deletion is one), so an analytics write rarely waits for git."""
    cached: tuple[str | None, frozenset[str]] | None = None

    async def zones() -> frozenset[str]:
        nonlocal cached
        commit = manifest.commit_id
        if cached is None or cached[0] != commit:
            children = await git.run(git.list_dir, CLIENT_ROOT) or []
            cached = (commit, BUILT_IN_ZONES | {name for name, is_dir, _oid, _size in children if is_dir})
        return cached[1]

    return zones
