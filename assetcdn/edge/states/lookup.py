"""look up: whether a key is cached; the serve sequence (assetcdn/edge/states/serve.py) makes that HIT, STALE
or MISS. Keys are what a response depends on: the path and its content id for assets and their
variants (built in assetcdn/edge/states/keys.py)."""

from __future__ import annotations

from assetcdn.edge.cache.entry import CachedObject
from assetcdn.edge.node import EdgeNode


def lookup(node: EdgeNode, key: str) -> CachedObject | None:
    try:
        return node.cache.get(key)
    except FileNotFoundError:
        return None  # evicted between index read and open: a miss
