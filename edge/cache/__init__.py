"""The edge cache: memory tier, disk tier, purges by key and tag, request coalescing."""

from edge.cache.coalesce import SingleFlight
from edge.cache.entry import CachedObject, strong_etag
from edge.cache.store import CacheCheck, CacheStats, EdgeCache

__all__ = ["CacheCheck", "CacheStats", "CachedObject", "EdgeCache", "SingleFlight", "strong_etag"]
