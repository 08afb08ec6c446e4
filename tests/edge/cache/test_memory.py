"""The memory tier: LRU by what entries cost, the object-size cap, tag purges."""

from __future__ import annotations

from collections.abc import Iterable

import pytest

from assetcdn.edge.cache import memory
from assetcdn.edge.cache.entry import CachedObject, MemoryOnly, strong_etag
from assetcdn.edge.cache.memory import MemoryTier, entry_cost


def make(key: str, size: int, tags: tuple[str, ...] = ()) -> CachedObject:
    return CachedObject(
        key=key,
        content_type="application/octet-stream",
        etag=strong_etag(key),
        tags=tags,
        size=size,
        stored_at=0.0,
        body=b"x" * size,
    )


def test_evicts_least_recently_used_by_bytes() -> None:
    cost = entry_cost(make("a", 100))
    tier = MemoryTier(max_bytes=3 * cost, max_object_size=300)
    for key in ("a", "b", "c"):
        assert tier.put(make(key, 100))
    assert tier.get("a") is not None  # a becomes the most recently used
    tier.put(make("d", 100))
    assert "b" not in tier
    assert all(key in tier for key in ("a", "c", "d"))
    assert tier.bytes == 3 * cost


def test_large_entry_evicts_several() -> None:
    cost = entry_cost(make("a", 100))
    tier = MemoryTier(max_bytes=3 * cost, max_object_size=3 * cost)
    for key in ("a", "b", "c"):
        tier.put(make(key, 100))
    big = make("big", 2 * cost)
    tier.put(big)
    assert len(tier) == 1 and "big" in tier
    assert tier.bytes == entry_cost(big)


def test_an_entry_costing_more_than_the_budget_is_not_kept() -> None:
    tier = MemoryTier(max_bytes=1000, max_object_size=1000)
    tier.put(make("k", 10))
    assert not tier.put(make("k", 1000))  # its body fits the object limit, not what it costs with its overhead
    assert "k" not in tier and tier.bytes == 0


def test_objects_above_max_object_size_are_not_kept() -> None:
    tier = MemoryTier(max_bytes=1000, max_object_size=100)
    assert not tier.put(make("big", 101))
    assert tier.get("big") is None
    assert tier.bytes == 0


def test_path_backed_objects_are_not_kept() -> None:
    tier = MemoryTier(max_bytes=1000, max_object_size=1000)
    obj = CachedObject(
        key="k",
        content_type="video/mp4",
        etag='"k"',
        tags=(),
        size=10,
        stored_at=0.0,
        path="/nonexistent",
    )
    assert not tier.put(obj)


def test_overwrite_replaces_bytes_and_tags() -> None:
    tier = MemoryTier(max_bytes=1000, max_object_size=1000)
    tier.put(make("k", 100, ("old",)))
    tier.put(make("k", 40, ("new",)))
    assert tier.bytes == entry_cost(make("k", 40, ("new",)))
    assert tier.purge_tags(["old"]) == []
    assert tier.purge_tags(["new"]) == ["k"]


def test_purge_by_tag() -> None:
    tier = MemoryTier(max_bytes=10_000, max_object_size=1000)
    tier.put(make("a", 10, ("project-x", "all-assets")))
    tier.put(make("b", 10, ("project-y", "all-assets")))
    tier.put(make("c", 10, ("project-x",)))
    assert sorted(tier.purge_tags(["project-x"])) == ["a", "c"]
    assert "b" in tier and len(tier) == 1
    assert tier.purge_tags(["all-assets"]) == ["b"]
    assert tier.bytes == 0


def test_a_tag_purge_within_a_scope_removes_the_entries_carrying_both_evicted_ones_too() -> None:
    """Two zones' entries share the tag `home`: a purge of it within `project-x` removes x's only, also an x entry
    evicted unwritten and waiting for the disk writer (a victim), which the writer would otherwise bring back."""
    tier = MemoryTier(max_bytes=64 * entry_cost(make("x0", 100, ("home", "project-x"))), max_object_size=300)
    tier.keeps_victims = True
    keys = [f"{zone}{n}" for n in range(40) for zone in ("x", "y")]
    for key in keys:
        assert tier.put(MemoryOnly(key=key, content_type="application/octet-stream", etag=strong_etag(key),
                                   tags=("home", f"project-{key[0]}"), size=100, stored_at=0.0, body=b"x" * 100))

    def held(zone: str) -> set[str]:
        return {key for key in keys if key[0] == zone and (key in tier or tier.victim(key) is not None)}

    victims = {key for key in keys if key not in tier and tier.victim(key) is not None}
    assert {key[0] for key in victims} == {"x", "y"}  # both zones have entries waiting for the writer
    x_held, y_held = held("x"), held("y")
    assert sorted(tier.purge_tags(["home"], "project-x")) == sorted(x_held)
    assert (held("x"), held("y")) == (set(), y_held)
    assert tier.purge_tags(["home"], "project-z") == []


def test_disabled_tier_keeps_nothing() -> None:
    tier = MemoryTier(max_bytes=0, max_object_size=1000)
    assert not tier.put(make("a", 1))
    assert len(tier) == 0


def test_prefix_purges_find_the_tags_of_entries_put_and_evicted_between_them() -> None:
    tier = MemoryTier(max_bytes=entry_cost(make("a0", 10, ("path:/a/0",))) * 4, max_object_size=100)
    for index in range(3):
        assert tier.put(make(f"a{index}", 10, (f"path:/a/{index}",)))
    assert tier.purge_tag_prefixes(["path:/a/1"]) == ["a1"]
    for index in range(3, 7):  # new tags after the purge sorted them; the oldest entries are evicted
        assert tier.put(make(f"a{index}", 10, (f"path:/a/{index}",)))
    assert tier.get("a0") is None and tier.get("a2") is None
    assert tier.purge_tag_prefixes(["path:/a/0", "path:/a/2"]) == []
    assert sorted(tier.purge_tag_prefixes(["path:/a/"])) == ["a3", "a4", "a5", "a6"]
    assert len(tier) == 0 and tier.bytes == 0
    tier.put(make("b", 10, ("path:/b",)))
    tier.clear()
    tier.put(make("c", 10, ("path:/c",)))
    assert tier.purge_tag_prefixes(["path:/"]) == ["c"]


def test_a_prefix_purge_orders_the_path_tags_only_not_the_origins_many_tags(monkeypatch: pytest.MonkeyPatch) -> None:
    """An origin may name dozens of tags per response (16 KB of them): a prefix purge after a fill sorted them all,
    some 0.7 s of a full default tier holding the worker. It orders the path tags alone, which it names; a prefix of
    another kind of tag is still answered, from every tag."""
    tier = MemoryTier(max_bytes=10 * 1024 * 1024, max_object_size=100)
    for index in range(20):
        origin_tags = tuple(f"key-{index}-{n}" for n in range(200))
        assert tier.put(make(f"p{index}", 10, (f"path:z/d{index % 2}/{index}", "project-z", *origin_tags)))
    sorted_lengths: list[int] = []

    def counted(items: Iterable[str]) -> list[str]:
        ordered = sorted(items)
        sorted_lengths.append(len(ordered))
        return ordered

    monkeypatch.setattr(memory, "sorted", counted, raising=False)
    assert sorted(tier.purge_tag_prefixes(["path:z/d1/"])) == sorted(f"p{index}" for index in range(1, 20, 2))
    assert sorted_lengths == [20]  # the path tags, not the 4,000 origin tags beside them
    assert tier.purge_tag_prefixes(["path:z/d1/"]) == []  # the ten left, sorted again once their tags went
    assert tier.purge_tag_prefixes(["path:z/d1/"]) == []  # in order still: nothing sorted again
    assert sorted_lengths == [20, 10]
    assert tier.put(make("p20", 10, ("path:z/d0/20",)))
    assert sorted(tier.purge_tag_prefixes(["path:z/d0/2"])) == ["p2", "p20"]
    assert sorted_lengths == [20, 10, 11]
    assert tier.purge_tag_prefixes(["key-4-1"]) == ["p4"]  # another kind of tag: every tag, this once
    assert sorted_lengths[-1] == 9 * 201 + 1  # each of the nine entries' own 201 tags and the zone's
    assert sorted(tier.purge_tag_prefixes(["path:z/d0/"])) == sorted(f"p{index}" for index in (0, 6, 8, 10, 12, 14, 16, 18))
    assert sorted_lengths[-1] == 8


def test_the_hit_paths_heads_are_charged_to_the_budget_and_the_oldest_entries_make_room() -> None:
    cost = entry_cost(make("a", 100))
    tier = MemoryTier(max_bytes=8 * cost, max_object_size=300)
    for key in "abcdefgh":
        assert tier.put(make(key, 100))
    tier.charge_heads(2 * cost)  # heads made for the hit path
    assert "a" not in tier and "b" not in tier and len(tier) == 6
    assert tier.bytes + tier.heads_bytes <= tier.max_bytes
    assert tier.put(make("i", 100)) and "c" not in tier  # the heads keep their part of the budget
    tier.charge_heads(-2 * cost)  # let go: the room is the entries' again
    assert tier.put(make("j", 100)) and tier.put(make("k", 100)) and len(tier) == 8


def test_with_no_memory_tier_the_heads_have_no_room_to_keep_within() -> None:
    """A budget of 0 turns the memory tier off, not the hit path: its heads are bounded by their number alone."""
    tier = MemoryTier(max_bytes=0, max_object_size=300)
    tier.charge_heads(10_000)
    assert tier.heads_room > tier.heads_bytes and len(tier) == 0
