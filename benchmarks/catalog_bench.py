"""The catalog (GET /api/assets) at 100,000 files: its pages through the handler, control's event loop held for each.

    PYTHONPATH=<checkout> .venv/bin/python benchmarks/catalog_bench.py [--files 100000] [--rounds 5] [--commits-only]

A manifest of `--files` entries (100 zones, five categories, four formats, random sizes: made as the manifest makes
them, without git) is built as control's start builds it. Then each request below is answered by the route's
handler (aiohttp's mocked request, its body thrown away) and timed to its answer: the first after the start, then the
least of `--rounds`; beside each, the event loop's longest hold meanwhile (of the rounds: their median), which is
less than the time to the answer where the page hands a pass to a thread. Also: what the start spends on the
catalog's orders and their memory, and what a commit of 1, 64 and 1,000 files spends moving them. One process, no I/O.
Runs against the checkout on PYTHONPATH, so two checkouts compare with the same script.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import random
import statistics
import sys
import time
import tracemalloc
from collections.abc import AsyncIterator, Callable
from functools import partial
from typing import Any

from aiohttp import web
from aiohttp.test_utils import make_mocked_request

from assetcdn.control.routes import assets
from assetcdn.control.storage.directory_index import DirectoryIndex
from assetcdn.control.storage.manifest_store import Generation, ManifestStore, PendingGeneration
from assetcdn.control.storage.service import MANIFEST
from assetcdn.shared.manifest import ManifestEntry, make_entry
from assetcdn.shared.timestamps import from_unix

CATEGORIES = ("logos", "icons", "banners", "titles", "github")
FORMATS = ("svg", "png", "webp", "jpg")
QUERIES = ("sort=name", "sort=size&order=desc&page=40", "sort=project&page=1000", "category=logos",
           "format=png&sort=size", "project=zone050", "project=zone050&category=icons&format=svg",
           "q=file01", "q=zone050/v1/icons&sort=size")


def entries_of(files: int, rng: random.Random) -> dict[str, ManifestEntry]:
    made: dict[str, ManifestEntry] = {}
    per_zone = max(files // 100, 1)
    for n in range(files):
        zone, rest = divmod(n, per_zone)
        path = f"zone{zone:03d}/v1/{CATEGORIES[rest % 5]}/File{rng.randrange(10**6):06d}-{rest}.{FORMATS[rest % 4]}"
        made[path] = make_entry(path, rng.randrange(10**6), "0" * 64, "1" * 40, from_unix(1_765_000_000 + n))
    return made


def built(entries: dict[str, ManifestEntry]) -> tuple[ManifestStore, float, float]:
    """A manifest as `ManifestStore.load` leaves it, and the ms and MB it spent on the catalog's orders."""
    manifest = ManifestStore(None, None)  # type: ignore[arg-type]
    manifest.entries = dict(entries)
    manifest._directories = DirectoryIndex(entries.values())
    gc.collect()
    tracemalloc.start()
    started = time.perf_counter()
    if hasattr(manifest, "catalog"):
        manifest.catalog = type(manifest.catalog)(entries.values(), manifest.zone_entries)
    took = (time.perf_counter() - started) * 1000
    size = tracemalloc.get_traced_memory()[0] / 1e6
    tracemalloc.stop()
    return manifest, took, size


class Hold:
    """The event loop's longest hold while a request runs: a task that wakes as often as the loop lets it."""

    def __init__(self) -> None:
        self.longest = 0.0

    async def watch(self, done: asyncio.Event) -> None:
        last = time.perf_counter()
        while not done.is_set():
            await asyncio.sleep(0)
            now = time.perf_counter()
            self.longest, last = max(self.longest, now - last), now


async def answer(app: web.Application, query: str) -> tuple[float, float]:
    """(ms to the whole answer, ms of the event loop's longest hold meanwhile)."""
    request = make_mocked_request("GET", f"/api/assets?{query}", app=app)
    hold, done = Hold(), asyncio.Event()
    watcher = asyncio.create_task(hold.watch(done))
    await asyncio.sleep(0)
    started = time.perf_counter()
    await assets.list_assets(request)
    took = time.perf_counter() - started
    done.set()
    await watcher
    return took * 1000, max(hold.longest, 0.0) * 1000


class _Transaction:
    async def execute(self, *_: Any) -> None:
        return None

    executemany = execute


class _NoDatabase:
    """SQLite left out: what a commit's adoption costs the event loop beside its writes."""

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[_Transaction]:
        yield _Transaction()


def commit_ms(manifest: ManifestStore, rng: random.Random, files: int, rounds: int,
              loop: asyncio.AbstractEventLoop) -> float:
    """The least ms of a generation changing `files` files' sizes, as `ManifestStore._store` adopts it."""
    manifest.db = _NoDatabase()  # type: ignore[assignment]
    best = float("inf")
    for _ in range(rounds):
        chosen = rng.sample(list(manifest.entries.values()), files)
        updates: dict[str, ManifestEntry | None] = {
            e.path: make_entry(e.path, rng.randrange(10**6), e.sha256, e.blob_id, e.modified) for e in chosen}
        prepared = PendingGeneration(Generation(manifest.generation + 1, "c", ()), updates, {})
        started = time.perf_counter()
        loop.run_until_complete(manifest._store(prepared, None))
        best = min(best, (time.perf_counter() - started) * 1000)
    return best


def answered(loop: asyncio.AbstractEventLoop, app: web.Application, query: str) -> tuple[float, float]:
    return loop.run_until_complete(answer(app, query))


def best_of(rounds: int, run: Callable[[], tuple[float, float]]) -> tuple[float, float]:
    """(the least time to the answer, the median of the event loop's longest holds) of `rounds` runs."""
    results = [run() for _ in range(rounds)]
    return min(r[0] for r in results), statistics.median(r[1] for r in results)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--commits-only", action="store_true",
                        help="the commits alone, no page asked first (no order made on demand, no filter's kept)")
    args = parser.parse_args(argv)
    rng = random.Random(20261207)
    entries = entries_of(args.files, rng)
    manifest, start_ms, orders_mb = built(entries)
    print(f"{len(entries)} files; start: the catalog's orders {start_ms:.0f} ms, {orders_mb:.1f} MB")
    app = web.Application()
    app[MANIFEST] = manifest
    loop = asyncio.new_event_loop()
    try:
        for query in () if args.commits_only else QUERIES:
            first = loop.run_until_complete(answer(app, query))
            took, held = best_of(args.rounds, partial(answered, loop, app, query))
            print(f"{query:45s} first {first[0]:7.1f} ms (loop held {first[1]:6.1f}), then {took:7.2f} ms "
                  f"(loop held {held:6.1f}, median)")
        facets = getattr(manifest.catalog, "_facets", {}) if hasattr(manifest, "catalog") else {}
        kept = sum(sys.getsizeof(groups) + sum(map(sys.getsizeof, groups.values())) for groups in facets.values())
        print(f"the filters' orders these pages made: {len(facets)}, {kept / 1e6:.1f} MB")
        for files in (1, 64, 1000):
            adopted = commit_ms(manifest, rng, files, args.rounds, loop)
            if args.commits_only:
                print(f"a commit of {files} files: the manifest adopts it in {adopted:.2f} ms")
                continue
            after = loop.run_until_complete(answer(app, "sort=size"))[0]
            print(f"a commit of {files} files: the manifest adopts it in {adopted:.2f} ms, the next page takes {after:.1f} ms")
    finally:
        loop.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
