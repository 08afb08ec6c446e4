"""Cache hits and misses through the full product: a real ``assetcdn up`` with one edge.

    .venv/bin/python -m benchmarks.edge_bench [--duration 10] [--concurrency 64] [--workers 2]

Starts the real product with ``tests/integration/harness.start_cdn`` (control plus one edge
with ``--workers`` processes, free loopback ports, test keys), creates a zone, uploads 5 KB,
100 KB and 1 MB files through the storage API (PUT on the edge, as a customer would), warms
each through the edge until it answers ``X-Cache: HIT``, then runs ``benchmarks.load``
against each CDN URL and prints the numbers beside reference figures measured on a quiet machine of this kind.

Then the cost of a miss: ``--miss-files`` distinct 100 KB files are uploaded and each is
fetched once (the edge has never seen it: a MISS that fetches the blob from control) and
once more (a HIT), sequentially on one keep-alive connection, so the two latencies compare.

Finally, unless ``--no-baseline``: the same load against ``benchmarks.serve_bench``'s plain
aiohttp + uvloop app answering the same sizes from a dict with the same number of worker
processes, run right after the cluster is stopped, so the edge's overhead is measured against
a floor taken under the same machine load (the reference figures were taken on a quiet machine).

The cluster is always stopped at the end. Loopback only; every load run is bounded.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from benchmarks.load import LoadResult, run_load
from benchmarks.measure import load_average, percentile
from benchmarks.serve_bench import OBJECT_SIZES, Servers, fill_cache, key_of
from tests.integration.harness import ACCESS, ACCOUNT, RunningCdn, start_cdn

KB = 1024
MB = 1024 * KB
SIZES = {"5 KB": 5 * KB, "100 KB": 100 * KB, "1 MB": 1 * MB}
BASELINE_KEYS = {"5 KB": "5KB", "100 KB": "100KB", "1 MB": "1MB"}  # serve_bench's names
ZONE = "bench"

# Reference figures measured on a quiet 2-core machine of this kind (wrk -t2 -c64 on loopback, wrk
# sharing the 2 cores), 5 KB bodies;
# at 1 MB all of them reach about 3,700 req/s.
REFERENCE_5KB = (
    ("aiohttp + uvloop, dict, 1 process", 17_000),
    ("aiohttp + uvloop, dict, 2 processes", 24_000),
    ("nginx proxy_cache hit (1 worker)", 36_000),
    ("Varnish 7.1 hit", 50_000),
)
REFERENCE_1MB = 3_700


@dataclass(frozen=True, slots=True)
class MissCost:
    files: int
    size: int
    miss_ms: list[float]
    hit_ms: list[float]
    statuses: dict[str, int]


def payload(name: str, size: int) -> bytes:
    """Incompressible bytes, distinct per name."""
    return (name.encode() + b":" + os.urandom(size))[:size]


async def make_zone(session: aiohttp.ClientSession, edge: str, zone: str) -> None:
    async with session.post(f"{edge}/api/core/zones", json={"Name": zone}, headers=ACCOUNT) as resp:
        if resp.status != 201:
            raise RuntimeError(f"zone create: {resp.status} {await resp.text()}")


async def upload(session: aiohttp.ClientSession, edge: str, path: str, data: bytes) -> None:
    async with session.put(f"{edge}/api/storage/{path}", data=data, headers=ACCESS) as resp:
        if resp.status != 201:
            raise RuntimeError(f"upload {path}: {resp.status} {await resp.text()}")


async def get(session: aiohttp.ClientSession, url: str) -> tuple[int, str, bytes]:
    async with session.get(url) as resp:
        return resp.status, resp.headers.get("X-Cache", ""), await resp.read()


async def prepare(cdn: RunningCdn) -> dict[str, str]:
    """Zone, three uploads, warmed on every worker; returns size label -> CDN URL."""
    edge = cdn.edge_urls[0]
    urls: dict[str, str] = {}
    async with aiohttp.ClientSession() as session:
        await make_zone(session, edge, ZONE)
        for label, size in SIZES.items():
            path = f"{ZONE}/v1/bench/{label.replace(' ', '').lower()}.bin"
            data = payload(label, size)
            await upload(session, edge, path, data)
            url = f"{edge}/{path}"
            status, first, body = await get(session, url)
            if status != 200 or body != data or first != "MISS":
                raise RuntimeError(f"{url}: first fetch {status} {first!r}, {len(body)} bytes")
            status, second, _ = await get(session, url)
            if second != "HIT":
                raise RuntimeError(f"{url}: second fetch answered X-Cache {second!r}, not HIT")
            # With several workers each process has its own memory tier: touch it from a
            # few fresh connections so every worker has served (and cached) it at least once.
            for _ in range(8):
                async with aiohttp.ClientSession() as fresh:
                    status, state, _ = await get(fresh, url)
                    if status != 200 or state != "HIT":
                        raise RuntimeError(f"{url}: warm fetch {status} {state!r}")
            urls[label] = url
    return urls


async def measure_misses(cdn: RunningCdn, files: int, size: int) -> MissCost:
    edge = cdn.edge_urls[0]
    statuses: dict[str, int] = {}
    miss_ms: list[float] = []
    hit_ms: list[float] = []
    paths = [f"{ZONE}/v1/cold/file-{i:04d}.bin" for i in range(files)]
    connector = aiohttp.TCPConnector(limit=1)
    async with aiohttp.ClientSession(connector=connector) as session:
        for path in paths:
            await upload(session, edge, path, payload(path, size))
        for path in paths:
            url = f"{edge}/{path}"
            for bucket, expected in ((miss_ms, "MISS"), (hit_ms, None)):
                started = time.perf_counter()
                status, state, body = await get(session, url)
                elapsed = (time.perf_counter() - started) * 1000
                statuses[state] = statuses.get(state, 0) + 1
                if status != 200 or len(body) != size:
                    raise RuntimeError(f"{url}: {status}, {len(body)} bytes")
                if expected is not None and state != expected:
                    raise RuntimeError(f"{url}: first fetch answered X-Cache {state!r}")
                bucket.append(elapsed)
    return MissCost(files, size, miss_ms, hit_ms, statuses)


def run_baseline(
    workers: int, duration: float, warmup: float, concurrency: int, generator: str, threads: int
) -> dict[str, LoadResult]:
    """serve_bench's dict app (no product code on the path), same sizes, same workers."""
    results: dict[str, LoadResult] = {}
    with tempfile.TemporaryDirectory(prefix="edge-bench-baseline-") as tmp:
        directory = Path(tmp) / "cache"
        fill_cache(directory)
        servers = Servers(directory, workers, 256, 2 * KB)
        try:
            for label, name in BASELINE_KEYS.items():
                assert OBJECT_SIZES[name] == SIZES[label]
                url = servers.url("dict", key_of(name))
                if warmup > 0:
                    run_load(url, warmup, concurrency, generator, threads)
                result = run_load(url, duration, concurrency, generator, threads)
                results[label] = result
                print(f"baseline {label}: {result.rps:,.0f} req/s, p50 {result.p50_ms:.2f} ms, "
                      f"p99 {result.p99_ms:.2f} ms, errors {result.errors}", flush=True)
        finally:
            servers.stop()
    return results


def print_hits(results: dict[str, LoadResult], baseline: dict[str, LoadResult]) -> None:
    print("\nCache hits through the full edge (GET on a CDN URL, X-Cache: HIT)")
    print("| Object | req/s | p50 | p99 | errors | same-run dict baseline | quiet-machine reference |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for label, result in results.items():
        base = baseline.get(label)
        base_text = (
            f"{base.rps:,.0f} req/s (edge {result.rps / base.rps:.2f}x)" if base and base.rps else "-"
        )
        if label == "1 MB":
            reference = f"all servers ~{REFERENCE_1MB:,} req/s at 1 MB"
        elif label == "5 KB":
            reference = "; ".join(f"{name} ~{rps:,}" for name, rps in REFERENCE_5KB)
        else:
            reference = "(none measured at 100 KB)"
        print(
            f"| {label} | {result.rps:,.0f} | {result.p50_ms:.2f} ms | {result.p99_ms:.2f} ms "
            f"| {result.errors} | {base_text} | {reference} |"
        )
    generators = {result.generator for result in results.values()}
    print(f"generator: {', '.join(sorted(generators))}")
    five = results.get("5 KB")
    if five is not None:
        for name, rps in REFERENCE_5KB:
            print(f"  5 KB edge vs {name}: {five.rps / rps:.2f}x")
    one = results.get("1 MB")
    if one is not None:
        print(f"  1 MB edge vs ~{REFERENCE_1MB:,} req/s: {one.rps / REFERENCE_1MB:.2f}x")


def print_misses(cost: MissCost) -> None:
    print(
        f"\nCost of a miss: {cost.files} distinct {cost.size // KB} KB files, each fetched once "
        "cold (MISS: blob from control) then once warm (HIT), sequentially"
    )
    print("| Fetch | mean | p50 | p90 | p99 | max |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, values in (("MISS (first fetch)", cost.miss_ms), ("HIT (second fetch)", cost.hit_ms)):
        print(
            f"| {name} | {statistics.fmean(values):.2f} ms | {percentile(values, 0.5):.2f} ms "
            f"| {percentile(values, 0.9):.2f} ms | {percentile(values, 0.99):.2f} ms "
            f"| {max(values):.2f} ms |"
        )
    extra = statistics.fmean(cost.miss_ms) - statistics.fmean(cost.hit_ms)
    print(f"a miss costs {extra:.2f} ms more than a hit on average; X-Cache seen: {cost.statuses}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per load run")
    parser.add_argument("--concurrency", type=int, default=64, help="open connections")
    parser.add_argument("--workers", type=int, default=2, help="edge worker processes")
    parser.add_argument("--threads", type=int, default=2, help="wrk threads / client processes")
    parser.add_argument("--generator", choices=("auto", "wrk", "python"), default="auto")
    parser.add_argument("--warmup", type=float, default=1.0, help="seconds of load before each run")
    parser.add_argument("--no-baseline", action="store_true", help="skip the dict baseline")
    parser.add_argument("--miss-files", type=int, default=200, help="cold 100 KB files (0: skip)")
    args = parser.parse_args(argv)
    if not 0 < args.duration <= 120:
        parser.error("--duration must be within (0, 120] seconds")
    if not 0 <= args.miss_files <= 2000:
        parser.error("--miss-files must be within [0, 2000]")

    print(f"before: load average {load_average()}")
    with tempfile.TemporaryDirectory(prefix="edge-bench-") as tmp:
        cdn = start_cdn(Path(tmp), edges=1, workers=args.workers)
        try:
            print(f"assetcdn up: control {cdn.control_url}, edge {cdn.edge_urls[0]} "
                  f"({args.workers} workers)")
            urls = asyncio.run(prepare(cdn))
            results: dict[str, LoadResult] = {}
            for label, url in urls.items():
                if args.warmup > 0:
                    run_load(url, args.warmup, args.concurrency, args.generator, args.threads)
                result = run_load(url, args.duration, args.concurrency, args.generator, args.threads)
                results[label] = result
                print(f"{label}: {result.rps:,.0f} req/s, p50 {result.p50_ms:.2f} ms, "
                      f"p99 {result.p99_ms:.2f} ms, errors {result.errors} ({result.error_detail})",
                      flush=True)
            cost = asyncio.run(measure_misses(cdn, args.miss_files, 100 * KB)) if args.miss_files else None
        finally:
            code = cdn.stop()
            print(f"cluster stopped (exit {code})")
    baseline: dict[str, LoadResult] = {}
    if not args.no_baseline:
        baseline = run_baseline(args.workers, args.duration, args.warmup, args.concurrency,
                                args.generator, args.threads)
    print_hits(results, baseline)
    if cost is not None:
        print_misses(cost)
    print(f"\nafter: load average {load_average()}")
    return 0 if all(result.errors == 0 for result in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
