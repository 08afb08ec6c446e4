"""A manifest generation's purges reach a node's shared cache once, whichever worker learns of it first.

Two `EdgeCache`s on one directory are two workers of one node. A worker that learns a generation late
(it started after the generation was pushed, or catches up on purges it missed) must leave alone what
the node cached after another worker applied that generation; only generations the node has not taken
yet remove entries from the shared disk tier.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from assetcdn.edge.cache.applied import AppliedGeneration, GenerationPurge
from assetcdn.edge.cache.entry import strong_etag
from assetcdn.edge.cache.store import SOFT_PURGED, EdgeCache, PurgedMeanwhile

MB = 1024 * 1024
TEXT, VECTOR = "asset:b1:z/v1/titles/mark.txt", "asset:b1:z/v1/logos/mark.svg"
TEXT_TAGS = ("format-txt", "path:z/v1/titles/mark.txt")
VECTOR_TAGS = ("format-svg", "path:z/v1/logos/mark.svg")
URL_PURGE_OF_TEXT = GenerationPurge(4, ("path:z/v1/titles/mark.txt",))
TAG_PURGE_OF_VECTOR = GenerationPurge(5, ("format-svg",))


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[tuple[EdgeCache, EdgeCache]]:
    first = EdgeCache(tmp_path / "cache", disk_size_limit=64 * MB)
    second = EdgeCache(tmp_path / "cache", disk_size_limit=64 * MB)
    yield first, second
    first.close()
    second.close()


def put(cache: EdgeCache, key: str, tags: tuple[str, ...]) -> None:
    cache.put(key, b"same bytes", "text/plain", strong_etag("b1"), tags)


def test_a_worker_catching_up_late_keeps_what_was_cached_after_the_purge(
        workers: tuple[EdgeCache, EdgeCache]) -> None:
    first, late = workers
    put(first, TEXT, TEXT_TAGS)
    put(first, VECTOR, VECTOR_TAGS)
    assert first.purge_generations([URL_PURGE_OF_TEXT], upto=4) == 1  # pushed to the first worker
    assert first.get(TEXT) is None
    put(first, TEXT, TEXT_TAGS)  # cached again after the purge
    assert first.purge_generations([TAG_PURGE_OF_VECTOR], upto=5) == 1
    put(first, VECTOR, VECTOR_TAGS)

    # The late worker catches up from generation 0 and learns both purges now: the node took them already.
    assert late.purge_generations([URL_PURGE_OF_TEXT, TAG_PURGE_OF_VECTOR], upto=5) == 0
    assert first.get(TEXT) is not None and first.get(VECTOR) is not None
    assert late.get(TEXT) is not None and late.get(VECTOR) is not None


def test_the_same_push_reaching_both_workers_purges_once(workers: tuple[EdgeCache, EdgeCache]) -> None:
    first, second = workers
    put(first, TEXT, TEXT_TAGS)
    assert second.get(TEXT) is not None  # in the second worker's memory tier too
    assert first.purge_generations([URL_PURGE_OF_TEXT], upto=4) == 1
    put(first, TEXT, TEXT_TAGS)  # a request to the first worker refills it before the second gets the push
    assert second.purge_generations([URL_PURGE_OF_TEXT], upto=4) == 0
    assert second.get(TEXT) is not None and first.get(TEXT) is not None


def test_the_worker_that_learns_a_generation_first_applies_it_whatever_the_others_hold(
        workers: tuple[EdgeCache, EdgeCache]) -> None:
    first, second = workers
    put(first, TEXT, TEXT_TAGS)
    put(first, VECTOR, VECTOR_TAGS)
    assert first.purge_generations([], upto=3) == 0
    # The second worker learns generations 4 and 5 first (in one catch-up): both are applied.
    assert second.purge_generations([URL_PURGE_OF_TEXT, TAG_PURGE_OF_VECTOR], upto=5) == 2
    assert first.get(TEXT) is None and first.get(VECTOR) is None
    # A purge of a generation beyond what the node took is applied even by a worker that is behind.
    put(first, TEXT, TEXT_TAGS)
    assert first.purge_generations([GenerationPurge(6, TEXT_TAGS[:1])], upto=6) == 1
    assert second.get(TEXT) is None


def test_a_snapshot_empties_the_cache_only_when_the_node_has_not_reached_its_generation(
        workers: tuple[EdgeCache, EdgeCache]) -> None:
    first, late = workers
    put(first, TEXT, TEXT_TAGS)
    assert first.purge_generations([], upto=9000) == 0
    assert late.purge_generations([GenerationPurge(9000, everything=True)], upto=9000) == 0
    assert first.get(TEXT) is not None
    assert late.purge_generations([GenerationPurge(9001, everything=True)], upto=9001) == 1
    assert first.get(TEXT) is None


def test_when_control_starts_its_generations_again_the_cache_is_emptied_and_counts_anew(
        workers: tuple[EdgeCache, EdgeCache], tmp_path: Path) -> None:
    first, second = workers
    assert first.purge_generations([], upto=50) == 0
    put(first, TEXT, TEXT_TAGS)
    assert second.purge_generations([GenerationPurge(3, everything=True)], upto=3, restart=True) == 1
    assert AppliedGeneration(tmp_path / "cache").read() == 3
    put(first, TEXT, TEXT_TAGS)
    assert first.purge_generations([GenerationPurge(4, TEXT_TAGS[:1])], upto=4) == 1  # not skipped as <= 50


def test_a_skipped_purge_still_empties_the_late_workers_memory_tier(workers: tuple[EdgeCache, EdgeCache]) -> None:
    first, late = workers
    put(late, TEXT, TEXT_TAGS)  # the late worker holds it in memory from before the purge
    assert first.purge_generations([URL_PURGE_OF_TEXT], upto=4) == 1
    put(first, TEXT, TEXT_TAGS)
    late.purge_generations([URL_PURGE_OF_TEXT], upto=4)
    assert TEXT not in late.memory  # dropped from memory, still on disk for both
    assert late.get(TEXT) is not None


# Two zones' copies carrying one tag their origins both sent (`home`), each with its zone's tag.
HOME_A, HOME_B = "pull:a/home", "pull:b/home"
HOME_TAGS = {HOME_A: ("home", "project-a", "path:a/home"), HOME_B: ("home", "project-b", "path:b/home")}


def put_homes(cache: EdgeCache) -> None:
    for key, tags in HOME_TAGS.items():
        cache.put(key, b"home page", "text/html", strong_etag("h"), tags, headers=((":status", "200"),))


def test_a_tag_purge_within_a_zone_removes_that_zones_copies_only_from_every_worker(
        workers: tuple[EdgeCache, EdgeCache]) -> None:
    first, second = workers
    put_homes(first)
    assert all(second.get(key) is not None for key in HOME_TAGS)  # in the second worker's memory tier too
    assert first.purge_generations([GenerationPurge(1, ("home",), within="project-a")], upto=1) == 1
    second.sync_purges()
    for cache in (first, second):
        assert (HOME_A in cache.memory, HOME_B in cache.memory) == (False, True)
    assert (first.disk.get(HOME_A, load_limit=0), first.disk.get(HOME_B, load_limit=0) is not None) == (None, True)
    # A worker that learns the generation late leaves the other zone's memory copy too.
    assert second.get(HOME_A) is None
    put_homes(first)
    assert all(second.get(key) is not None for key in HOME_TAGS)
    assert second.purge_generations([GenerationPurge(1, ("home",), within="project-a")], upto=1) == 0
    assert (HOME_A in second.memory, HOME_B in second.memory) == (False, True)
    assert first.get(HOME_A) is not None  # cached after the purge: still on disk


def test_a_soft_tag_purge_within_a_zone_marks_that_zones_copies_stale_only(
        workers: tuple[EdgeCache, EdgeCache]) -> None:
    first, second = workers
    put_homes(first)
    assert all(second.get(key) is not None for key in HOME_TAGS)
    touched = first.purge_generations([GenerationPurge(1, ("home",), within="project-a", soft=True)], upto=1,
                                      revalidated="pull:")
    assert touched == 1
    second.sync_purges()
    assert (HOME_A in second.memory, HOME_B in second.memory) == (False, True)
    stale = {key: SOFT_PURGED in dict(obj.headers) for key in HOME_TAGS if (obj := first.get(key)) is not None}
    assert stale == {HOME_A: True, HOME_B: False}


def test_a_fill_under_way_is_kept_when_a_tag_purge_within_another_zone_is_made_meanwhile(
        workers: tuple[EdgeCache, EdgeCache]) -> None:
    first, second = workers
    mark = first.purge_mark()  # as a fill takes it when it asks the origin
    assert second.purge_generations([GenerationPurge(1, ("home",), within="project-b")], upto=1) == 0
    first.put(HOME_A, b"home page", "text/html", strong_etag("h"), HOME_TAGS[HOME_A], since=mark)
    with pytest.raises(PurgedMeanwhile):
        first.put(HOME_B, b"home page", "text/html", strong_etag("h"), HOME_TAGS[HOME_B], since=mark)
    assert first.get(HOME_A) is not None and first.get(HOME_B) is None
