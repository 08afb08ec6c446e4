"""Where a pull zone cache fill's CPU goes: the edge worker under wrk's new URLs, profiled with cProfile.

    .venv/bin/python -m benchmarks.profile_fill [--size "5 KB"] [--duration 4] [--top 40] [--memory-mb 512] [--save FILE]

One ``assetcdn up`` (control and one edge with one worker) with a pull zone in front of benchmarks/pull_bench.py's
nginx origin (pinned to core 1 with wrk); every process of ``up`` pinned to core 0. First a turn without the
profiler (the CPU per fill of the worker and of the whole system, as benchmarks/fill_ab.py reads it), then one
with it: the worker profiles itself (benchmarks/worker_profile.py) for that turn. Printed: both turns' CPU per fill (the worker's split into user and system time), the Python calls per fill, and the functions by their own time.

cProfile adds its own cost to every call, so small functions look dearer than they are: read the ranking and the
call counts, not the microseconds. Loopback only; everything started is stopped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import os
import pstats
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.hits_bench import SETTLE_S, edge_server, stop, warm, whole_system
from benchmarks.load import run_wrk
from benchmarks.measure import create_pull_zone, load_average, machine, require_tools, stat_fields
from benchmarks.pull_bench import FILL_LUA, SIZES, ZONE, ready_origin
from benchmarks.worker_profile import ENV, hook
from tests.integration.harness import ACCOUNT, free_port_block, start_cdn


def user_system(pid: int) -> tuple[float, float]:
    """The user and system CPU seconds of process `pid` (every thread of it) so far."""
    fields = stat_fields(pid) or ["0"] * 13
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="5 KB", choices=list(SIZES))
    parser.add_argument("--duration", type=float, default=4.0)
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--memory-mb", type=int, default=512)
    parser.add_argument("--sort", default="tottime", choices=["tottime", "cumulative", "ncalls"])
    parser.add_argument("--save", type=Path, help="also keep the profile's statistics (pstats) at this path")
    parser.add_argument("--server-core", default="0")
    parser.add_argument("--load-core", default="1")
    args = parser.parse_args(argv)
    if not 0 < args.duration <= 60 or not 0 < args.top <= 500:
        parser.error("--duration within (0, 60], --top within (0, 500]")
    require_tools(("wrk", "nginx", "taskset"), "bench-pull")
    print(f"# profile_fill: {time.strftime('%Y-%m-%d %H:%M')}, {machine()}, load average {load_average()}")
    name, fill_prefix, _ = SIZES[args.size]
    with tempfile.TemporaryDirectory(prefix="profile-fill-") as tmp:
        workdir = Path(tmp)
        os.chmod(workdir, 0o755)  # the origin's nginx workers run as their own user
        hooked = hook(workdir)
        stats = workdir / "edge.prof"
        origin, bodies = ready_origin(workdir, free_port_block(1), args.load_core)
        path = os.pathsep.join([str(hooked), os.getcwd(), *filter(None, [os.environ.get("PYTHONPATH")])])
        env = {"ASSETCDN_EDGE_MEMORY_CACHE_MB": str(args.memory_mb), "ASSETCDN_ORIGIN_ALLOW_LOOPBACK": "true",
               "PYTHONPATH": path, ENV: str(stats)}
        (workdir / "cdn").mkdir()
        cdn = start_cdn(workdir / "cdn", workers=1, env_extra=env)
        try:
            system, _control = whole_system(cdn)
            edge = edge_server(cdn)
            worker = edge.pids[0]
            asyncio.run(create_pull_zone(cdn.control_url, ACCOUNT, ZONE, origin.base, cdn.data_dir))
            asyncio.run(warm(f"{cdn.edge_urls[0]}/{ZONE}", [name], {name: bodies[name]}))
            url = f"{system.base}/{ZONE}/"
            for turn, profiled in enumerate((False, True)):
                system.pin(args.server_core)
                if profiled:
                    os.kill(worker, signal.SIGUSR1)
                before, system_before, split_before = edge.cpu_seconds(), system.cpu_seconds(), user_system(worker)
                result = run_wrk(url, args.duration, 64, 2, prefix=("taskset", "-c", args.load_core),
                                 lua=FILL_LUA.replace("{prefix}", f"/{ZONE}/{fill_prefix}/p{turn}-"))
                if profiled:
                    os.kill(worker, signal.SIGUSR2)
                time.sleep(SETTLE_S)
                fills = max(result.requests, 1)
                print(f"## {'profiled' if profiled else 'unprofiled'} turn: {result.rps:,.0f} fills/s, "
                      f"{result.errors} errors, {(edge.cpu_seconds() - before) / fills * 1e6:.0f} us of worker CPU "
                      f"and {(system.cpu_seconds() - system_before) / fills * 1e6:.0f} us of whole-system CPU "
                      f"per fill (the worker's user / system: {' / '.join(f'{(after - earlier) / fills * 1e6:.0f}' for after, earlier in zip(user_system(worker), split_before, strict=True))} us); "
                      f"load average {load_average()}", flush=True)
            deadline = time.monotonic() + 10
            while not stats.exists() and time.monotonic() < deadline:
                time.sleep(0.1)
            time.sleep(0.5)  # the dump is written by the worker between two loop turns
            if args.save is not None:
                shutil.copyfile(stats, args.save)
            out = io.StringIO()
            profile = pstats.Stats(str(stats), stream=out)
            calls = sum(entry[1] for entry in profile.stats.values())  # type: ignore[attr-defined]
            print(f"## {calls / fills:,.0f} Python calls per fill (the profiled turn's {fills:,} fills)")
            profile.sort_stats(args.sort).print_stats(args.top)
            print(out.getvalue())
        finally:
            cdn.stop()
            stop(origin)
    return 0


if __name__ == "__main__":
    sys.exit(main())
