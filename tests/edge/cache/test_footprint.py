"""What a small pull-zone entry costs the edge's memory, and that the memory tier's budget counts it."""

from __future__ import annotations

import gc
import io
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest
from yarl import URL

from assetcdn.edge.cache.store import MB, EdgeCache
from assetcdn.edge.cache.tags import path_tag
from assetcdn.edge.origin_client import Origin
from assetcdn.edge.site_config import PullZone
from assetcdn.edge.states.freshness import stored_headers
from assetcdn.edge.states.keys import pull_key
from assetcdn.edge.states.pull import REQUEST_TIME, RESPONSE_TIME, STATUS, own_tags
from assetcdn.shared.manifest import zone_tag

ENTRIES = 2_000
BODY = bytes(range(256)) * 4   # 1 KB
# An entry is its body (1 KB and the bytes object's header) plus what describes it: this bounds the latter.
MAX_PER_ENTRY = 2_400
ZONE = PullZone("site", Origin(URL("http://origin.example")))


@pytest.fixture
def cache(tmp_path: Path) -> Iterator[EdgeCache]:
    edge_cache = EdgeCache(tmp_path / "cache", memory_bytes=256 * MB)
    yield edge_cache
    edge_cache.close()


def origin_head(number: int) -> list[tuple[str, str]]:
    """What a static-file origin (nginx) answers for one small file, names lower-cased as the origin client gives."""
    return [("server", "nginx/1.22.1"), ("date", "Sat, 05 Dec 2026 00:40:14 GMT"),
            ("content-type", "application/octet-stream"), ("content-length", "1024"),
            ("last-modified", "Thu, 03 Dec 2026 00:00:00 GMT"), ("connection", "keep-alive"),
            ("etag", f'"6930c6e0-{number:x}"'), ("expires", "Sat, 05 Dec 2026 01:40:14 GMT"),
            ("cache-control", "max-age=3600"), ("accept-ranges", "bytes")]


def fill(cache: EdgeCache, numbers: range) -> None:
    """Entries stored as a pull zone stores an origin's answer (assetcdn/edge/states/pull.py `store`)."""
    for number in numbers:
        path = f"/small/{number // 1000:03d}/{number:06d}.bin"
        head = stored_headers(origin_head(number))
        meta = (*head, (STATUS, "200"), (REQUEST_TIME, repr(1764895214.123456 + number)),
                (RESPONSE_TIME, repr(1764895214.125 + number)))
        cache.put(pull_key(ZONE.name, path, ""), io.BytesIO(BODY), "application/octet-stream",
                  f'"6930c6e0-{number:x}"', own_tags(ZONE, path), headers=meta)


def interpreter_table(stat: tracemalloc.StatisticDiff) -> bool:
    """One allocation outside the project's code: an interpreter-wide table that grew while entries were stored
    (the interned strings' dict, resized when path parts are interned), no entry's cost; where it lands depends
    on what the process did before."""
    return stat.count_diff == 1 and "/assetcdn/" not in stat.traceback[0].filename


def test_a_small_pull_entry_costs_little_beside_its_body_and_the_memory_budget_counts_it(cache: EdgeCache) -> None:
    fill(cache, range(100))  # the structures' first allocations are not any entry's
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        fill(cache, range(100, 100 + ENTRIES))
        gc.collect()
        grown = sum(stat.size_diff for stat in tracemalloc.take_snapshot().compare_to(before, "lineno")
                    if not interpreter_table(stat))
    finally:
        tracemalloc.stop()
    assert len(cache.memory) == 100 + ENTRIES  # every entry is held in memory
    per_entry = grown / ENTRIES
    assert per_entry < MAX_PER_ENTRY
    # A budget of X bytes holds about X bytes: what the tier charges is within a fifth of what entries hold.
    charged = cache.memory.bytes / len(cache.memory)
    assert 0.8 * per_entry < charged < 1.2 * per_entry


def test_entries_read_back_as_stored(cache: EdgeCache) -> None:
    fill(cache, range(3))
    path = "/small/000/000002.bin"
    for obj in (cache.memory.get(pull_key(ZONE.name, path, "")), cache.disk.get(pull_key(ZONE.name, path, ""),
                                                                                 load_limit=MB)):
        assert obj is not None and obj.body == BODY and obj.size == len(BODY)
        assert (obj.content_type, obj.etag) == ("application/octet-stream", '"6930c6e0-2"')
        assert obj.tags == (path_tag(f"site{path}"), zone_tag("site"))
        assert obj.headers == (*stored_headers(origin_head(2)), (STATUS, "200"),
                               (REQUEST_TIME, repr(1764895214.123456 + 2)), (RESPONSE_TIME, repr(1764895214.125 + 2)))


def test_fields_holding_the_separator_read_back_as_stored(cache: EdgeCache) -> None:
    headers = (("x-odd", "a\0b"), ("x-empty", ""))
    stored = cache.put("pull:odd", b"body", "text/plain", '"e\0"', ("tag\0one", ""), headers=headers)
    for obj in (stored, cache.memory.get("pull:odd"), cache.disk.get("pull:odd", load_limit=MB)):
        assert obj is not None
        assert (obj.content_type, obj.etag, obj.tags, obj.headers) == ("text/plain", '"e\0"', ("tag\0one", ""), headers)
