"""Where an HTTP/2 cache hit's CPU goes: the edge worker under h2load, profiled with cProfile.

    .venv/bin/python -m benchmarks.profile_h2 [--duration 8] [--streams 16] [--top 30]

One ``assetcdn up`` (control and one edge with one worker and an https port), the 5 KB and 100 KB files
of benchmarks/hits_bench.py in the edge's memory tier. py-spy is not a dependency, so the worker profiles
itself (benchmarks/worker_profile.py: ``cProfile`` in the edge worker from SIGUSR1, its statistics written on
SIGUSR2). Every process of
``up`` (the supervisor, control, the edge worker, any image worker) is pinned to core 0, the tree walked
again before each size, as benchmarks/hits_bench.py pins what it measures; h2load (``-c8 -m<streams>``) runs
on core 1. Per size, h2load runs while the worker is profiled; printed: the functions by their own time
(tottime), and the CPU per request of the worker and of the whole system (every process of ``up``, read
``SETTLE_S`` after the run, when control has taken its last analytics flush), both under the profiler.

cProfile counts calls, so functions called per frame or per field look dearer than they are; the
ranking, not the microseconds, is what to read. Loopback only; everything started is stopped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import pstats
import signal
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.hits_bench import SETTLE_S, edge_server, prepare_files, whole_system
from benchmarks.https_bench import require_tools, run_h2load, warm
from benchmarks.measure import load_average, machine
from benchmarks.worker_profile import ENV, hook
from tests.edge.tls.certs import TestCa
from tests.integration.harness import free_port_block, start_cdn

SIZES = ["5 KB", "100 KB"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=8.0)
    parser.add_argument("--streams", type=int, default=16)
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--server-core", default="0")
    parser.add_argument("--load-core", default="1")
    args = parser.parse_args(argv)
    require_tools()
    prefix = ("taskset", "-c", args.load_core)
    print(f"# profile_h2: {time.strftime('%Y-%m-%d %H:%M')}, {machine()}, load average {load_average()}")
    with tempfile.TemporaryDirectory(prefix="profile-h2-") as tmp:
        workdir = Path(tmp)
        hooked = hook(workdir)
        stats = workdir / "edge.prof"
        cert, key = TestCa().issue("localhost").write(workdir, "localhost")
        port = free_port_block(1)
        path = os.pathsep.join([str(hooked), os.getcwd(), *filter(None, [os.environ.get("PYTHONPATH")])])
        env = {"ASSETCDN_EDGE_MEMORY_CACHE_MB": "512", "ASSETCDN_TLS_HTTPS_PORT": str(port),
               "ASSETCDN_TLS_CERTIFICATES": json.dumps([[str(cert), str(key)]]), "PYTHONPATH": path,
               ENV: str(stats)}
        (workdir / "cdn").mkdir()
        cdn = start_cdn(workdir / "cdn", workers=1, env_extra=env)
        try:
            system, _control = whole_system(cdn)
            system.pin(args.server_core)
            edge = edge_server(cdn)
            worker = edge.pids[0]
            paths, bodies = asyncio.run(prepare_files(cdn, SIZES))
            base = f"https://localhost:{port}"
            asyncio.run(warm(base, list(paths.values()), bodies))
            for size in SIZES:
                url = f"{base}/{paths[size]}"
                pinned = system.pin(args.server_core)  # a process started since the last walk too
                print(f"# {size}: every process of `up` (pids {pinned}; the worker is {worker}) pinned to core "
                      f"{args.server_core}, h2load to core {args.load_core}", flush=True)
                os.kill(worker, signal.SIGUSR1)
                before, system_before = edge.cpu_seconds(), system.cpu_seconds()
                began = time.monotonic()
                rps, errors = run_h2load(url, args.duration, prefix, args.streams)
                used = edge.cpu_seconds() - before
                os.kill(worker, signal.SIGUSR2)
                deadline = time.monotonic() + 10
                while not stats.exists() and time.monotonic() < deadline:
                    time.sleep(0.1)
                time.sleep(0.5)  # the dump is written by the worker between two loop turns
                time.sleep(max(0.0, began + args.duration + SETTLE_S - time.monotonic()))
                system_used = system.cpu_seconds() - system_before
                requests = max(1.0, rps * args.duration)
                print(f"## {size}: {rps:,.0f} req/s under the profiler, {errors} errors, "
                      f"{used / requests * 1e6:.0f} us of worker CPU and {system_used / requests * 1e6:.0f} us "
                      f"of whole-system CPU per request (profiled); load average {load_average()}")
                out = io.StringIO()
                pstats.Stats(str(stats), stream=out).sort_stats("tottime").print_stats(args.top)
                print(out.getvalue())
                stats.unlink()
        finally:
            cdn.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
