"""The catalog's kept orders (assetcdn/control/storage/catalog_orders.py) against a sort of the files as they are."""

from __future__ import annotations

import random

import pytest

from assetcdn.control.storage.catalog_orders import FACETS, SORTS, CatalogOrders
from assetcdn.shared.manifest import ManifestEntry, make_entry


@pytest.mark.parametrize(("in_place", "others"), [(0, 0), (0, 500), (3, 0), (3, 500), (1000, 0)])
def test_the_orders_are_a_sort_of_the_files_through_random_changes(in_place: int, others: int) -> None:
    """Moved in place, merged in with a binary search per file, and with the gone filtered out (the many files
    unchanged, `others`, decide which); a project's files read alone, from its zone's files."""
    rng = random.Random(20261207 + in_place + others)
    paths = [f"{zone}/v1/{category}/{name}" for zone in ("ab", "ab-c", "z") for category in ("logos", "icons")
             for name in ("a.svg", "B.png", "b.png", "c.webp", "Σa.svg")] + ["stocks/icons/a.svg", "ab"]
    entries = {path: make_entry(path, n % 5, "0" * 64, "1" * 40, "2026-12-07T00:00:00Z")
               for n, path in enumerate(f"k/v1/logos/{n}.svg" for n in range(others))}

    def zone_files(zone: str) -> list[ManifestEntry]:  # a zone's files, as ManifestStore.zone_entries gives them
        return [e for e in entries.values() if e.zone == zone]

    orders = CatalogOrders(entries.values(), zone_files)
    for sort in SORTS:  # the filters' orders, made at the first ask (all but one: made late, below)
        for facet in FACETS:
            if (sort, facet) != ("size", "format"):
                orders.facet(sort, facet, "logos")
    for step in range(400):
        changes: list[tuple[ManifestEntry | None, ManifestEntry | None]] = []
        for path in rng.sample(paths, rng.randrange(1, 12)):
            previous = entries.pop(path, None)
            if previous is None or rng.random() < 0.5:  # added, or replaced (at times by one of the same size)
                entries[path] = make_entry(path, rng.randrange(4), "0" * 64, "1" * 40, "2026-12-07T00:00:00Z")
            changes.append((previous, entries.get(path)))
        orders.change(changes, in_place)
        for sort, (key, _) in SORTS.items():
            assert orders.whole(sort) == sorted(entries.values(), key=key), (step, sort)
            for facet, of in FACETS.items():
                for value in {of(e) for e in entries.values()} | {"none"}:
                    assert orders.facet(sort, facet, value) == sorted(
                        (e for e in entries.values() if of(e) == value), key=key), (step, sort, facet, value)
    for sort, (key, _) in SORTS.items():
        assert CatalogOrders(entries.values(), zone_files).whole(sort) == sorted(entries.values(), key=key)
