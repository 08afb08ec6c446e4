"""What each of many like objects holds, from two tracemalloc snapshots taken around making them."""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import Callable


def per_item(before: tracemalloc.Snapshot, after: tracemalloc.Snapshot, items: int) -> float:
    """The bytes that stayed allocated per item, counting the source lines that allocated about once per item or
    more (at least half as many blocks as items): a one-off growth meanwhile (a table resized, a buffer something
    else filled) is no item's, and on a busy process would swamp a few hundred items' bytes."""
    grown = sum(stat.size_diff for stat in after.compare_to(before, "lineno") if stat.count_diff * 2 >= items)
    return grown / items


def traced_per_item(make: Callable[[], None], items: int) -> float:
    """`per_item` of what `make()` leaves allocated, `items` of them, traced from a collected heap to a collected
    heap (what `make` returns or keeps in locals is not counted: it keeps what it made elsewhere)."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        make()
        gc.collect()
        return per_item(before, tracemalloc.take_snapshot(), items)
    finally:
        tracemalloc.stop()
