"""Search on the control app: the index and engine built from the configuration, the per-client limit
of GET /api/search; the context that opens and closes them."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TYPE_CHECKING

from aiohttp import web

from assetcdn.control.ai.service import IMAGE_ANALYSIS
from assetcdn.control.app_keys import SETTINGS
from assetcdn.control.identity.rate_limit import RateLimiter
from assetcdn.control.publishing.publisher import Publisher
from assetcdn.control.publishing.service import PUBLISHER
from assetcdn.control.search.engine import SearchEngine
from assetcdn.control.search.index import SearchIndex
from assetcdn.control.search.model_info import ModelUnavailable, model_cache_dir
from assetcdn.control.storage.database import Database
from assetcdn.control.storage.manifest_store import ManifestStore
from assetcdn.control.storage.service import DB, MANIFEST
from assetcdn.shared.config import Settings

if TYPE_CHECKING:
    from assetcdn.control.search.encoder import SentenceEncoder

SEARCH_INDEX = web.AppKey("search_index", SearchIndex)
SEARCH = web.AppKey("search", SearchEngine)
SEARCH_LIMITER = web.AppKey("search_limiter", RateLimiter)  # GET /api/search, per client


@contextlib.asynccontextmanager
async def search_context(app: web.Application) -> AsyncIterator[None]:
    analysis = app[IMAGE_ANALYSIS]
    index, engine = await open_search(app[SETTINGS], app[DB], app[MANIFEST], app[PUBLISHER],
                                      alt_text=analysis.alt_text_for)
    app[SEARCH_INDEX], app[SEARCH] = index, engine
    analysis.alt_text_listeners.append(lambda path: index.refresh([path]))
    try:
        yield
    finally:
        engine.close()
        await index.close()

def _packaged_model(cache_dir: Path) -> SentenceEncoder:
    # Imported here: the encoder brings numpy and tokenizers, which a start without the model never needs.
    from assetcdn.control.search.encoder import load_packaged_model  # noqa: PLC0415

    return load_packaged_model(cache_dir).encoder


def _model_switched_off() -> SentenceEncoder:
    raise ModelUnavailable("semantic search is switched off ([search] semantic = false)")


async def open_search(settings: Settings, db: Database, manifest: ManifestStore, publisher: Publisher,
                      alt_text: Callable[[str], str | None] | None = None) -> tuple[SearchIndex, SearchEngine]:
    """The search index and engine; `alt_text` (path -> known alt text) adds image analysis' words."""
    semantic = settings.get("search", "semantic")
    cache_dir = model_cache_dir(settings.get("search", "model_cache_dir"))
    index = SearchIndex(db, manifest,
                        load_model=(lambda: _packaged_model(cache_dir)) if semantic else _model_switched_off)
    if alt_text is not None:
        index.alt_text = alt_text
    await index.open()
    publisher.listeners.append(index.on_commit)  # every commit's paths: upload, delete, batch, zone, pipeline
    return index, SearchEngine(manifest, index, settings.get("search", "cache_ttl_s"))
