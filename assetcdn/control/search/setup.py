"""Building the search pieces of the control plane from its configuration (wired by assetcdn.control.app)."""

from __future__ import annotations

from collections.abc import Callable

from assetcdn.control.publishing.publisher import Publisher
from assetcdn.control.search.encoder import (
    ModelUnavailable,
    SentenceEncoder,
    load_packaged_model,
    model_cache_dir,
)
from assetcdn.control.search.engine import SearchEngine
from assetcdn.control.search.index import SearchIndex
from assetcdn.control.storage.database import Database
from assetcdn.control.storage.manifest_store import ManifestStore
from assetcdn.shared.config import Settings


def _model_switched_off() -> SentenceEncoder:
    raise ModelUnavailable("semantic search is switched off ([search] semantic = false)")


async def open_search(settings: Settings, db: Database, manifest: ManifestStore, publisher: Publisher,
                      alt_text: Callable[[str], str | None] | None = None) -> tuple[SearchIndex, SearchEngine]:
    """The search index and engine; `alt_text` (path -> known alt text) adds image analysis' words."""
    semantic = settings.get("search", "semantic")
    cache_dir = model_cache_dir(settings.get("search", "model_cache_dir"))
    index = SearchIndex(db, manifest,
                        load_model=(lambda: load_packaged_model(cache_dir).encoder) if semantic else _model_switched_off)
    if alt_text is not None:
        index.alt_text = alt_text
    await index.open()
    publisher.listeners.append(index.on_commit)  # every commit's paths: upload, delete, batch, zone, pipeline
    return index, SearchEngine(manifest, index, settings.get("search", "cache_ttl_s"))
