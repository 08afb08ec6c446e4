"""Transform throughput: run_transform beside the same work in raw pyvips.

    .venv/bin/python -m benchmarks.transform_bench [--iterations 20] [--concurrency 1]

A 2000x1333 photo-like JPEG (gradients plus noise, as in the tests) is turned into a 400 px
WebP, JPEG and AVIF, sequentially, with no cache. The "raw pyvips" column is
`thumbnail_buffer` + save with the same encoder settings, so the difference is the service's
own overhead (header read and checks, options, step loop, deadline callback). libvips'
operation cache is switched off for both, or repeated loads of one buffer would be free.
Also printed: AVIF encode time and size by effort, and cover crops by gravity, and (first)
the throughput of 400 px WebP transforms through the edge's image pool of worker processes
beside the same jobs in a pool of threads in this process (how the edge ran them before),
`--pool-jobs` jobs per round, rounds alternated.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pyvips

from assetcdn.edge.image_pool import ImagePool
from assetcdn.edge.transform import encode as encoders
from assetcdn.edge.transform.budgets import TransformLimits
from assetcdn.edge.transform.jobs import transform_variant
from assetcdn.edge.transform.options import TransformOptions, parse_transform_options
from assetcdn.edge.transform.placeholder_images import make_blurhash_placeholder, make_lqip
from assetcdn.edge.transform.steps import run_transform

WIDTH, HEIGHT = 2000, 1333
LIMITS = TransformLimits(max_pixels=50_000_000, time_budget_s=30)


def photo_jpeg() -> bytes:
    xyz = pyvips.Image.xyz(WIDTH, HEIGHT)
    red = xyz[0] * (255 / WIDTH)
    green = xyz[1] * (255 / HEIGHT)
    blue = (xyz[0] + xyz[1]) * (255 / (WIDTH + HEIGHT))
    shapes = pyvips.Image.black(WIDTH, HEIGHT)
    for i in range(40):  # some edges, so encoders have structure to spend bits on
        shapes = shapes.draw_circle(40 + (i * 37) % 200, (i * 211) % WIDTH, (i * 127) % HEIGHT, 30 + i * 3, fill=True)
    noise = pyvips.Image.gaussnoise(WIDTH, HEIGHT, sigma=12, mean=0)
    image = (red.bandjoin([green, blue]) * 0.7 + shapes * 0.3 + noise).cast("uchar")
    return image.copy(interpretation="srgb").jpegsave_buffer(Q=90)


def measure(work: Callable[[], bytes], iterations: int) -> tuple[float, int]:
    """(median seconds per call, output bytes), after one warm-up call."""
    size = len(work())
    times = []
    for _ in range(iterations):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return statistics.median(times), size


def measure_pair(first: Callable[[], bytes], second: Callable[[], bytes],
                 iterations: int) -> tuple[float, float, int]:
    """Medians of two workloads run alternately, so a busy machine slows both alike."""
    size = len(first())
    second()
    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(iterations):
        for work, bucket in ((first, times[0]), (second, times[1])):
            start = time.perf_counter()
            work()
            bucket.append(time.perf_counter() - start)
    return statistics.median(times[0]), statistics.median(times[1]), size


def threads_rate(source: bytes, opts: TransformOptions, concurrency: int, jobs: int) -> float:
    """Transforms/s of `jobs` WebP transforms in `concurrency` threads of this process."""
    with ThreadPoolExecutor(concurrency) as threads:
        start = time.perf_counter()
        list(threads.map(lambda _: run_transform(source, "jpeg", opts, "webp", LIMITS).body, range(jobs)))
        return jobs / (time.perf_counter() - start)


async def processes_rate(pool: ImagePool, source: bytes, opts: TransformOptions, jobs: int) -> float:
    """Transforms/s of `jobs` WebP transforms through the image pool's worker processes."""
    waiting = asyncio.Semaphore(pool.max_queued)   # what the edge accepts at once

    async def one() -> None:
        async with waiting:
            await pool.run(transform_variant, "jpeg", opts, "webp", LIMITS, source)

    start = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(jobs)))
    return jobs / (time.perf_counter() - start)


async def pool_table(source: bytes, jobs: int, rounds: int) -> None:
    print("\n| 400 px WebP, in parallel | threads in the edge (before) | worker processes (now) | change |")
    print("|---|---|---|---|")
    opts = parse_transform_options({"url": "bench/v1/banners/photo.jpg", "w": "400"})
    for concurrency in (1, 2):
        pool = ImagePool(concurrency, LIMITS)
        pool.start()
        await asyncio.gather(*(pool.run(transform_variant, "jpeg", opts, "webp", LIMITS, source)
                               for _ in range(concurrency)))   # workers loaded
        threads, processes = [], []
        for _ in range(rounds):
            threads.append(await asyncio.to_thread(threads_rate, source, opts, concurrency, jobs))
            processes.append(await processes_rate(pool, source, opts, jobs))
        await pool.close()
        before, now = statistics.median(threads), statistics.median(processes)
        print(f"| concurrency {concurrency} | {before:.1f}/s | {now:.1f}/s | {(now / before - 1) * 100:+.0f}% |")


RAW_SAVERS: dict[str, Callable[[pyvips.Image], bytes]] = {
    "webp": lambda image: image.webpsave_buffer(Q=encoders.DEFAULT_QUALITY["webp"], effort=encoders.WEBP_EFFORT, keep="none"),
    "jpeg": lambda image: image.jpegsave_buffer(Q=encoders.DEFAULT_QUALITY["jpeg"], optimize_coding=True, keep="none"),
    "avif": lambda image: image.heifsave_buffer(compression="av1", Q=encoders.DEFAULT_QUALITY["avif"],
                                                effort=encoders.AVIF_EFFORT, keep="none"),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--concurrency", type=int, default=0,
                        help="libvips worker threads (0: libvips default, one per core)")
    parser.add_argument("--pool-jobs", type=int, default=40, help="jobs per round of the pool table")
    parser.add_argument("--pool-rounds", type=int, default=5)
    args = parser.parse_args()
    if args.concurrency:
        pyvips.concurrency_set(args.concurrency)
    pyvips.cache_set_max(0)
    source = photo_jpeg()
    print(f"source: {WIDTH}x{HEIGHT} JPEG, {len(source):,} bytes; libvips {pyvips.version(0)}.{pyvips.version(1)}."
          f"{pyvips.version(2)}, {os.cpu_count()} cores, vips concurrency {pyvips.concurrency_get()}, "
          f"{args.iterations} iterations (median)")
    asyncio.run(pool_table(source, args.pool_jobs, args.pool_rounds))

    print("\n| 2000x1333 JPEG -> 400 px | run_transform ms | transforms/s | raw pyvips ms | raw ops/s | overhead | bytes |")
    print("|---|---|---|---|---|---|---|")
    opts = parse_transform_options({"url": "bench/v1/banners/photo.jpg", "w": "400"})
    for fmt, save in RAW_SAVERS.items():
        service, raw, size = measure_pair(
            lambda fmt=fmt: run_transform(source, "jpeg", opts, fmt, LIMITS).body,
            lambda save=save: save(pyvips.Image.thumbnail_buffer(source, 400)), args.iterations)
        print(f"| {fmt} | {service * 1000:.1f} | {1 / service:.1f} | {raw * 1000:.1f} | {1 / raw:.1f} | "
              f"{(service / raw - 1) * 100:+.0f}% | {size:,} |")

    print("\n| AVIF 400 px, effort | encode+resize ms | bytes |")
    print("|---|---|---|")
    for effort in range(0, 7):
        took, size = measure(lambda effort=effort: pyvips.Image.thumbnail_buffer(source, 400).heifsave_buffer(
            compression="av1", Q=encoders.DEFAULT_QUALITY["avif"], effort=effort, keep="none"),
            max(3, args.iterations // 4))
        print(f"| {effort}{' (chosen)' if effort == encoders.AVIF_EFFORT else ''} | {took * 1000:.1f} | {size:,} |")

    print("\n| other work | ms | bytes |")
    print("|---|---|---|")
    cases: list[tuple[str, Callable[[], bytes]]] = []
    for gravity in ("center", "auto", "face"):
        cover = parse_transform_options({"url": "bench/v1/banners/photo.jpg", "w": "400", "h": "400", "gravity": gravity})
        cases.append((f"cover 400x400 gravity={gravity} -> webp",
                      lambda cover=cover: run_transform(source, "jpeg", cover, "webp", LIMITS).body))
    for fmt in ("jxl", "heic"):
        if fmt in encoders.ENCODERS:
            cases.append((f"400 px -> {fmt}", lambda fmt=fmt: run_transform(
                source, "jpeg", opts, fmt, LIMITS).body))
    cases.append(("lqip 32 px blur 30", lambda: make_lqip(source, "jpeg", 32, 30)[0]))
    cases.append(("blurhash 32 px (WebP + BlurHash)", lambda: make_blurhash_placeholder(source, "jpeg", 32)[0]))
    for name, work in cases:
        took, size = measure(work, max(3, args.iterations // 2))
        print(f"| {name} | {took * 1000:.1f} | {size:,} |")


if __name__ == "__main__":
    main()
