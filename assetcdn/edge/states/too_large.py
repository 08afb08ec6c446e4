"""URLs whose body a worker found over a size limit, remembered briefly (a negative cache, per worker).

A body over the limit is never stored, so nothing in the cache says so: without this, every request for the URL
would ask the origin for the whole body again to find it out. Two users: a transform's source refused as too large
(assetcdn/edge/states/pull_source.py, `TOO_LARGE_SOURCES`), and a pull zone URL whose chunked body (no declared
length) was found longer than ``origin.max_object_mb`` only while it was read (assetcdn/edge/states/pull.py,
`EdgeNode.too_large`): its next requests are answered as for one declared too large.
"""

from __future__ import annotations

import time
from collections import OrderedDict

# How long a refusal stands, and how many URLs a worker remembers (the oldest let go first).
TOO_LARGE_KEPT_S = 60.0
TOO_LARGE_NAMES = 1024


class TooLarge:
    """The URLs a worker found too large, remembered ``TOO_LARGE_KEPT_S`` (at most ``TOO_LARGE_NAMES``, the oldest
    let go first). A purge published since a URL was found too large (any: the node's purge mark moved, so a purge
    of the URL, its prefix, its zone or everything) lets it go, so a purged URL is asked for whole again. Each holds
    its key (the URL's) and four numbers: a thousand long URLs are a few MB at most."""

    def __init__(self, *, kept_s: float = TOO_LARGE_KEPT_S, names: int = TOO_LARGE_NAMES) -> None:
        self._kept_s = kept_s
        self._names = names
        self._refused: OrderedDict[str, tuple[float, int, int, int]] = OrderedDict()  # until, purge mark, size, limit

    def __contains__(self, url_key: object) -> bool:
        """Whether `url_key` may be remembered (one dict look-up): `refusal` says whether it still stands."""
        return url_key in self._refused

    def refusal(self, url_key: str, mark: int) -> tuple[int, int] | None:
        """The size and limit a refusal of `url_key` still standing at the purge mark `mark` named; else None."""
        known = self._refused.get(url_key)
        if known is None:
            return None
        until, refused_at_mark, size, limit = known
        if until <= time.monotonic() or refused_at_mark != mark:
            del self._refused[url_key]
            return None
        return size, limit

    def remember(self, url_key: str, mark: int, size: int, limit: int) -> None:
        """`url_key`'s body found `size` bytes long (or at least that), over `limit`, by a request made at the purge
        mark `mark` (taken before the origin was asked: a purge meanwhile lets it go)."""
        self._refused[url_key] = (time.monotonic() + self._kept_s, mark, size, limit)
        self._refused.move_to_end(url_key)
        while len(self._refused) > self._names:
            self._refused.popitem(last=False)
