"""The edge cache: memory tier, disk tier, purges by key and tag, request coalescing."""

from assetcdn.edge.cache.coalesce import SingleFlight
from assetcdn.edge.cache.entry import CachedObject, strong_etag
from assetcdn.edge.cache.store import CacheCheck, CacheStats, EdgeCache

__all__ = ["CacheCheck", "CacheStats", "CachedObject", "EdgeCache", "SingleFlight", "strong_etag"]
