"""The catalog's orders (GET /api/assets, docs/api-guide.md): every file in each of its sorts, and the files of each
project, category and format in each, kept with the manifest so that a page is a slice of one, never a sort or a pass
over every file.

They are made as the manifest is built at start, before control answers anything: one sort by path, then each order a
stable sort of that one by its first part (its full key's second part is the path). Each generation then moves the
files it changes (`moved`): a few in place, more by merging them in; never a sort of every file again. A filter's
orders (`facet`) are made at its first ask in a sort and kept the same way from then on: a category's and a format's
by one pass over that sort's order grouping every file by its value (`ready`: on a thread), a project's alone from the
manifest's index of directories (its files, sorted). At 100,000 files each filter's are 0.8 MB in a sort, 7.2 MB for all nine.
"""

from __future__ import annotations

import asyncio
from bisect import bisect_left, insort
from collections.abc import Callable, Iterable
from operator import attrgetter
from typing import Any

from assetcdn.shared.manifest import ManifestEntry

Key = Callable[[ManifestEntry], Any]

# sort -> (its key, one value per file as it ends in the path; its first part, for the sorts at start)
SORTS: dict[str, tuple[Key, Key]] = {
    "name": (lambda e: (e.name.lower(), e.path), lambda e: e.name.lower()),
    "size": (lambda e: (e.size, e.path), attrgetter("size")),
    "project": (lambda e: (e.zone, e.path), attrgetter("zone")),
}
PASSES_AT_ONCE = 2  # passes on a thread over a copy of an order (0.8 MB at 100,000 files each), the others waiting
FACETS: dict[str, Key] = {"project": attrgetter("zone"), "category": attrgetter("category"),
                          "format": attrgetter("format")}


Change = tuple[ManifestEntry | None, ManifestEntry | None]  # a path's entry before and after a generation


def moved(order: list[ManifestEntry], key: Key, changes: list[Change], in_place: int) -> list[ManifestEntry]:
    """`order` (sorted by `key`, one value per file) with each of `changes` (the entry before in it, the very object):
    a file replaced by one of the same key (its content changed, and the order not by size) takes its place. Of the
    others, at most `in_place` are moved in place: a binary search and a move of the list's tail each. More make a new
    list, copied once in slices between the places binary searches find; many gone (a thirty-second of the list) are
    filtered out in one pass first, cheaper than a search each."""
    gone: list[ManifestEntry] = []
    added: list[ManifestEntry] = []
    for before, after in changes:
        if before is not None and after is not None and (k := key(after)) == key(before):
            order[bisect_left(order, k, key=key)] = after
            continue
        if before is not None:
            gone.append(before)
        if after is not None:
            added.append(after)
    if len(gone) + len(added) <= in_place:
        for entry in gone:
            del order[bisect_left(order, key(entry), key=key)]
        for entry in added:
            insort(order, entry, key=key)
        return order
    if len(gone) * 32 > len(order):
        dropped = {id(entry) for entry in gone}
        order, gone = [entry for entry in order if id(entry) not in dropped], []
    # (place in `order`, 0 to insert there or 1 to drop the file there, the key inserted): in `order`'s order, each
    # insertion before the drop at its place (a file replaced by one of the same key takes its place).
    steps = sorted([(bisect_left(order, k := key(e), key=key), 0, k, e) for e in added] +
                   [(bisect_left(order, key(e), key=key), 1, None, e) for e in gone], key=lambda step: step[:3])
    merged: list[ManifestEntry] = []
    done = 0
    for at, drop, _, entry in steps:
        merged += order[done:at]
        if drop:
            done = at + 1
        else:
            merged.append(entry)
            done = at
    merged += order[done:]
    return merged


def grouped(order: list[ManifestEntry], of: Key) -> dict[str, list[ManifestEntry]]:
    """{value: the files of `order` that `of` gives it, in `order`'s order}."""
    groups: dict[str, list[ManifestEntry]] = {}
    for entry in order:
        if (group := groups.get(of(entry))) is None:
            group = groups[of(entry)] = []
        group.append(entry)
    return groups


class CatalogOrders:
    """Every file in each sort of `SORTS`. Read a list it gives, never change it, and not across an await."""

    def __init__(self, entries: Iterable[ManifestEntry], zone_files: Callable[[str], list[ManifestEntry]]) -> None:
        """`zone_files`: a zone's files (ManifestStore.zone_entries), so that a project's order is made alone."""
        self._zone_files = zone_files
        by_path = sorted(entries, key=attrgetter("path"))
        self._whole = {sort: sorted(by_path, key=first) for sort, (_, first) in SORTS.items()}
        self._facets: dict[tuple[str, str], dict[str, list[ManifestEntry]]] = {}  # (sort, facet): {value: its files}
        self._changes = 0  # changes taken so far
        self.passes = asyncio.Semaphore(PASSES_AT_ONCE)  # held by each pass over a copy of an order, here and the route's

    def whole(self, sort: str) -> list[ManifestEntry]:
        """Every file, in `sort`'s order (ascending)."""
        return self._whole[sort]

    async def ready(self, sort: str, facet: str) -> None:
        """Make a category's or a format's orders in `sort` if not yet: the pass grouping every file runs on a thread,
        over a copy of the order, and control answers meanwhile; if a change came meanwhile, it is done again here."""
        if (sort, facet) in self._facets or facet == "project":  # a project's are made alone, in `facet`
            return
        async with self.passes:
            if (sort, facet) in self._facets:  # made while this one waited
                return
            changes = self._changes
            groups = await asyncio.to_thread(grouped, self._whole[sort][:], FACETS[facet])
            if (sort, facet) not in self._facets:
                self._facets[sort, facet] = (groups if self._changes == changes
                                             else grouped(self._whole[sort], FACETS[facet]))

    def facet(self, sort: str, facet: str, value: str) -> list[ManifestEntry]:
        """The files whose `facet` (of `FACETS`) is `value`, in `sort`'s order (ascending); `ready` first, so that a
        category's or a format's are not grouped here, on the event loop."""
        groups = self._facets.get((sort, facet))
        if facet == "project":  # only the projects asked for, never an empty one
            if groups is None:
                groups = self._facets[sort, facet] = {}
            if (order := groups.get(value)) is None:
                order = sorted((e for e in self._zone_files(value) if e.zone == value), key=SORTS[sort][0])
                if order:
                    groups[value] = order
            return order
        if groups is None:
            groups = self._facets[sort, facet] = grouped(self._whole[sort], FACETS[facet])
        return groups.get(value, [])

    def change(self, changes: list[Change], in_place: int) -> None:
        """Take each path's change (its entry before, held, and after; None: none), as `moved` does. A path's project,
        category and format are its own: its entries before and after share them."""
        self._changes += 1
        for sort, (key, _) in SORTS.items():
            self._whole[sort] = moved(self._whole[sort], key, changes, in_place)
        for (sort, facet), groups in self._facets.items():
            of = FACETS[facet]
            by_value: dict[str, list[Change]] = {}
            for before, after in changes:
                if (entry := before or after) is not None:
                    by_value.setdefault(of(entry), []).append((before, after))
            for value, its_changes in by_value.items():
                if facet == "project" and value not in groups:  # a project's: only those asked for are kept
                    continue
                if order := moved(groups.get(value, []), SORTS[sort][0], its_changes, in_place):
                    groups[value] = order
                else:
                    groups.pop(value, None)
