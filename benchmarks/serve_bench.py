"""The edge cache layer's ceiling: cache hits served by a minimal aiohttp + uvloop app.

    .venv/bin/python -m benchmarks.serve_bench [--duration 10] [--concurrency 64]

Standalone: no control plane, no edge routes. It fills an ``EdgeCache`` in a temporary
directory with 5 KB, 100 KB and 1 MB bodies, starts two worker processes on one loopback
port (SO_REUSEPORT) whose only handler is ``EdgeCache.get`` plus the response, and runs
``benchmarks.load`` against each object. Scenarios:

- baseline: the same app answering from a plain dict, to show what the cache layer costs;
- memory tier: the memory tier holds every object (the hot path);
- disk tier: memory tier off, so each request reads diskcache inline (bodies under 32 KB
  are rows in SQLite; larger ones are files, sent with aiohttp's FileResponse or streamed
  with ``CachedObject.iter_chunks`` inline).

The full edge is meant to be benchmarked the same way, with ``benchmarks.load`` against it.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from benchmarks.load import LoadResult, run_load
from benchmarks.measure import load_average, stop_process

KB = 1024
MB = 1024 * KB
OBJECT_SIZES = {"5KB": 5 * KB, "100KB": 100 * KB, "1MB": 1 * MB}


@dataclass(frozen=True, slots=True)
class Scenario:
    label: str
    tier: str  # "memory" or "disk": which server answers
    size: str
    route: str = "obj"  # "obj": Response or FileResponse; "stream": iter_chunks; "dict"


SCENARIOS = (
    Scenario("baseline: bytes from a dict, no cache layer, 5 KB", "memory", "5KB", "dict"),
    Scenario("baseline: bytes from a dict, no cache layer, 1 MB", "memory", "1MB", "dict"),
    Scenario("memory tier, 5 KB", "memory", "5KB"),
    Scenario("memory tier, 100 KB", "memory", "100KB"),
    Scenario("memory tier, 1 MB", "memory", "1MB"),
    Scenario("disk tier, 5 KB (SQLite row, read inline)", "disk", "5KB"),
    Scenario("disk tier, 100 KB (file, FileResponse)", "disk", "100KB"),
    Scenario("disk tier, 1 MB (file, FileResponse)", "disk", "1MB"),
    Scenario("disk tier, 1 MB (file, iter_chunks inline)", "disk", "1MB", "stream"),
)


def key_of(size_name: str) -> str:
    return "asset:" + hashlib.sha1(size_name.encode()).hexdigest()


# --- the server (runs in each worker process) ----------------------------------------------


def serve(directory: Path, port: int, memory_mb: int, memory_max_kb: int) -> None:
    import uvloop
    from aiohttp import web

    from assetcdn.edge.cache.store import EdgeCache

    cache_key = web.AppKey("cache", EdgeCache)
    plain_key = web.AppKey("plain", dict[str, bytes])

    async def get_object(request: web.Request) -> web.StreamResponse:
        obj = request.app[cache_key].get(request.match_info["key"])
        if obj is None:
            raise web.HTTPNotFound()
        headers = {"Content-Type": obj.content_type, "ETag": obj.etag}
        if obj.body is not None:
            return web.Response(body=obj.body, headers=headers)
        assert obj.path is not None
        return web.FileResponse(obj.path, headers={"Content-Type": obj.content_type})

    async def stream_object(request: web.Request) -> web.StreamResponse:
        obj = request.app[cache_key].get(request.match_info["key"])
        if obj is None:
            raise web.HTTPNotFound()
        response = web.StreamResponse(headers={"Content-Type": obj.content_type, "ETag": obj.etag})
        response.content_length = obj.size
        try:
            await response.prepare(request)
            for chunk in obj.iter_chunks():
                await response.write(chunk)
            await response.write_eof()
        except ConnectionResetError:  # the load generator closes connections when it stops
            pass
        return response

    async def get_plain(request: web.Request) -> web.Response:
        body = request.app[plain_key].get(request.match_info["key"])
        if body is None:
            raise web.HTTPNotFound()
        return web.Response(body=body, headers={"Content-Type": "image/jpeg", "ETag": '"x"'})

    async def run() -> None:
        app = web.Application()
        cache = EdgeCache(
            directory,
            disk_size_limit=1024 * MB,
            memory_bytes=memory_mb * MB,
            memory_max_object=memory_max_kb * KB,
        )
        app[cache_key] = cache
        plain: dict[str, bytes] = {}
        for name in OBJECT_SIZES:
            obj = cache.disk.get(key_of(name), load_limit=4 * MB)
            if obj is not None and obj.body is not None:
                plain[key_of(name)] = obj.body
        app[plain_key] = plain
        app.router.add_get("/obj/{key}", get_object)
        app.router.add_get("/stream/{key}", stream_object)
        app.router.add_get("/dict/{key}", get_plain)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port, reuse_port=True, backlog=1024).start()
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        sys.stdout.write("ready\n")
        sys.stdout.flush()
        await stop.wait()
        await runner.cleanup()
        cache.close()

    uvloop.run(run())


# --- the driver -----------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def fill_cache(directory: Path) -> None:
    from assetcdn.edge.cache.entry import strong_etag
    from assetcdn.edge.cache.store import EdgeCache

    cache = EdgeCache(directory, disk_size_limit=1024 * MB, memory_bytes=0)
    for name, size in OBJECT_SIZES.items():
        body = os.urandom(size)
        cache.put(
            key_of(name),
            body,
            "image/jpeg",
            strong_etag(hashlib.sha1(body).hexdigest()),
            ("project-bench", "all-assets"),
        )
    cache.close()


class Servers:
    """Worker processes started by this benchmark, stopped by their own handles."""

    def __init__(self, directory: Path, workers: int, memory_mb: int, memory_max_kb: int):
        self.port = free_port()
        command = [
            sys.executable,
            "-m",
            "benchmarks.serve_bench",
            "--serve",
            str(directory),
            "--port",
            str(self.port),
            "--memory-mb",
            str(memory_mb),
            "--memory-max-kb",
            str(memory_max_kb),
        ]
        self.processes = [
            subprocess.Popen(command, stdout=subprocess.PIPE, text=True) for _ in range(workers)
        ]
        for process in self.processes:
            assert process.stdout is not None
            if process.stdout.readline().strip() != "ready":
                self.stop()
                raise RuntimeError("a benchmark worker failed to start")

    def url(self, route: str, key: str) -> str:
        return f"http://127.0.0.1:{self.port}/{route}/{key}"

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.terminate()
        for process in self.processes:
            stop_process(process, 10)


def run_scenarios(
    duration: float, concurrency: int, workers: int, generator: str
) -> list[tuple[Scenario, LoadResult]]:
    results: list[tuple[Scenario, LoadResult]] = []
    with tempfile.TemporaryDirectory(prefix="edge-cache-bench-") as tmp:
        directory = Path(tmp) / "cache"
        fill_cache(directory)
        tiers = {"memory": (256, 2 * KB), "disk": (0, 0)}  # (memory MB, max object KB)
        for tier, (memory_mb, memory_max_kb) in tiers.items():
            servers = Servers(directory, workers, memory_mb, memory_max_kb)
            try:
                for scenario in (s for s in SCENARIOS if s.tier == tier):
                    url = servers.url(scenario.route, key_of(scenario.size))
                    with urllib.request.urlopen(url, timeout=5) as response:
                        assert len(response.read()) == OBJECT_SIZES[scenario.size]
                    run_load(url, 1, concurrency, generator)  # warm both workers' tiers
                    result = run_load(url, duration, concurrency, generator)
                    results.append((scenario, result))
                    sys.stdout.write(
                        f"{scenario.label}: {result.rps:,.0f} req/s, p99 {result.p99_ms:.2f} ms,"
                        f" errors {result.errors}\n"
                    )
                    sys.stdout.flush()
            finally:
                servers.stop()
    return results


def table(results: list[tuple[Scenario, LoadResult]]) -> str:
    lines = [
        "| Object | req/s | p50 | p99 | errors |",
        "|---|---:|---:|---:|---:|",
    ]
    for scenario, result in results:
        lines.append(
            f"| {scenario.label} | {result.rps:,.0f} | {result.p50_ms:.2f} ms"
            f" | {result.p99_ms:.2f} ms | {result.errors} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per scenario")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--workers", type=int, default=2, help="server processes (reuse_port)")
    parser.add_argument("--generator", choices=("auto", "wrk", "python"), default="auto")
    parser.add_argument("--serve", metavar="DIR", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--memory-mb", type=int, default=256, help=argparse.SUPPRESS)
    parser.add_argument("--memory-max-kb", type=int, default=2 * KB, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        serve(Path(args.serve), args.port, args.memory_mb, args.memory_max_kb)
        return 0
    if not 0 < args.duration <= 120:
        parser.error("--duration must be within (0, 120] seconds")
    started = time.monotonic()
    load_before = load_average()
    results = run_scenarios(args.duration, args.concurrency, args.workers, args.generator)
    generators = sorted({result.generator for _, result in results})
    sys.stdout.write(
        f"\nCache hits (edge cache layer): {args.workers} aiohttp+uvloop workers, reuse_port,"
        f" {os.cpu_count()} cores shared with the client; generator: {', '.join(generators)};"
        f" {args.duration:.0f} s per row; total {time.monotonic() - started:.0f} s;"
        f" load average {load_before} before, {load_average()} after"
        " (other work on the machine skews the numbers)\n\n"
    )
    sys.stdout.write(table(results) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
