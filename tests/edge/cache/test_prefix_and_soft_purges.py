"""Prefix and soft purges on a node's cache: two `EdgeCache`s on one directory are two workers of one node.

A prefix purge finds its entries in the disk tier's tag index by range and in each worker's memory tier by its
sorted tags, also those the disk tier no longer holds; a soft purge keeps what can be revalidated (pull zone
keys) on disk with a mark and removes the rest; the other worker's memory tier follows both."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from assetcdn.edge.cache.applied import GenerationPurge
from assetcdn.edge.cache.entry import strong_etag
from assetcdn.edge.cache.store import SOFT_PURGED, EdgeCache

MB = 1024 * 1024
PULL = "pull:"
UNDER = {"pull:aaa": "path:shop/img/a.png", "pull:bbb": "path:shop/img/deep/b.png"}
BESIDE = {"pull:ccc": "path:shop/imgs/c.png", "pull:ddd": "path:shop/im", "asset:x:shop2/v1/logos/a": "path:shop2/v1/a"}
STORED = "asset:b1:shop/img/stored.png"  # a stored zone's entry under the prefix


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[tuple[EdgeCache, EdgeCache]]:
    first = EdgeCache(tmp_path / "cache", disk_size_limit=64 * MB)
    second = EdgeCache(tmp_path / "cache", disk_size_limit=64 * MB)
    for key, tag in {**UNDER, **BESIDE, STORED: "path:shop/img/stored.png"}.items():
        first.put(key, b"body", "text/plain", strong_etag("e"), (tag, "zone-shop"), headers=((":status", "200"),))
        assert second.get(key) is not None  # in the second worker's memory tier too
    yield first, second
    first.close()
    second.close()


def test_a_prefix_purge_removes_what_is_under_it_from_both_tiers_of_every_worker(
        workers: tuple[EdgeCache, EdgeCache]) -> None:
    first, second = workers
    removed = first.purge_generations([GenerationPurge(1, tag_prefixes=("path:shop/img/",))], upto=1)
    assert removed == len(UNDER) + 1
    second.sync_purges()
    for cache in (first, second):
        assert [key in cache.memory for key in (*UNDER, STORED)] == [False] * 3
        assert all(key in cache.memory for key in BESIDE)
    assert [first.disk.get(key, load_limit=0) is None for key in (*UNDER, *BESIDE)] == [True] * 2 + [False] * 3


def test_a_prefix_purge_reaches_a_memory_copy_the_disk_tier_lost(workers: tuple[EdgeCache, EdgeCache]) -> None:
    first, _ = workers
    first.disk.delete("pull:aaa")  # evicted from disk; the memory tier still serves it
    assert first.purge_tag_prefixes(["path:shop/img/"]) == len(UNDER) + 1
    assert "pull:aaa" not in first.memory and first.get("pull:aaa") is None
    # The memory tier's sorted tags lost the removed ones: a wider prefix finds only what is left.
    assert sorted(first.memory.purge_tag_prefixes(["path:shop/im"])) == ["pull:ccc", "pull:ddd"]


def test_a_soft_purge_marks_pull_entries_stale_and_removes_stored_ones(workers: tuple[EdgeCache, EdgeCache]) -> None:
    first, second = workers
    touched = first.purge_generations([GenerationPurge(1, tag_prefixes=("path:shop/img/",), soft=True)], upto=1,
                                      revalidated=PULL)
    assert touched == len(UNDER) + 1
    second.sync_purges()
    assert not any(key in cache.memory for cache in (first, second) for key in (*UNDER, STORED))
    assert first.get(STORED) is None
    marks = []
    for key in UNDER:
        obj = second.get(key)
        assert obj is not None and obj.body == b"body"
        marks.append(dict(obj.headers)[SOFT_PURGED])
    # A second soft purge keeps the first mark (the entry has been stale since then).
    first.purge_generations([GenerationPurge(2, everything=True, soft=True)], upto=2, revalidated=PULL)
    assert [dict(first.disk.get(key, load_limit=MB).headers)[SOFT_PURGED] for key in UNDER] == marks  # type: ignore[union-attr]
    assert first.disk.get("asset:x:shop2/v1/logos/a", load_limit=0) is None  # everything soft: stored ones go
    assert first.disk.get("pull:ccc", load_limit=0) is not None


def test_a_soft_purge_without_revalidated_keys_is_a_hard_one(workers: tuple[EdgeCache, EdgeCache]) -> None:
    first, _ = workers
    first.purge_generations([GenerationPurge(1, ("path:shop/img/a.png",), soft=True)], upto=1)
    assert first.get("pull:aaa") is None and first.get("pull:bbb") is not None
