"""The catalog's orders (GET /api/assets, docs/api-guide.md): every file in each of its sorts, kept with the manifest so
that a page is a slice of one, never a sort of every file.

They are made as the manifest is built at start, before control answers anything: one sort by path, then each order a
stable sort of that one by its first part (its full key's second part is the path). Each generation then moves the
files it changes (`moved`): a few in place, more by merging them in; never a sort of every file again.
"""

from __future__ import annotations

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


def moved(order: list[ManifestEntry], key: Key, gone: list[ManifestEntry], added: list[ManifestEntry],
          in_place: int) -> list[ManifestEntry]:
    """`order` (sorted by `key`) without `gone` (entries in it, the very objects) and with `added`. At most `in_place`
    files are moved in place: a binary search and a move of the list's tail each. More make a new list, copied once in
    slices between the places binary searches find; many gone (a thirty-second of the list) are filtered out in one
    pass first, cheaper than a search each."""
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


class CatalogOrders:
    """Every file in each sort of `SORTS`. Read a list it gives, never change it, and not across an await."""

    def __init__(self, entries: Iterable[ManifestEntry] = ()) -> None:
        by_path = sorted(entries, key=attrgetter("path"))
        self._whole = {sort: sorted(by_path, key=first) for sort, (_, first) in SORTS.items()}

    def whole(self, sort: str) -> list[ManifestEntry]:
        """Every file, in `sort`'s order (ascending)."""
        return self._whole[sort]

    def change(self, gone: list[ManifestEntry], added: list[ManifestEntry], in_place: int) -> None:
        """Forget `gone` (entries held), take `added` (entries of paths not held once `gone` are forgotten)."""
        for sort, (key, _) in SORTS.items():
            self._whole[sort] = moved(self._whole[sort], key, gone, added, in_place)
