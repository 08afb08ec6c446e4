"""Where a cache hit's CPU goes: the edge worker profiled under wrk, one flame graph per size.

    .venv/bin/python -m benchmarks.profile_hits [--duration 10] [--out benchmarks/profiles] [--perf] [--pull]

One ``assetcdn up`` (control and one edge with one worker), the 5 KB and 100 KB files of
benchmarks/hits_bench.py uploaded and warmed; with ``--pull``, a pull zone's instead: the zone in front of
benchmarks/pull_bench.py's origin (one nginx, pinned with wrk), its two files warmed, the flame graphs named
``pull-hit-<size>.svg``. Every process of ``up`` (the supervisor, control, the edge worker, any image worker)
is pinned to core 0, the tree walked again before each size, as benchmarks/hits_bench.py pins what it
measures; wrk (``-t2 -c64``) runs on core 1. Per size: wrk runs while ``py-spy record --native --nonblocking``
samples the worker (SVG flame graph ``hit-<size>.svg``; a speedscope JSON, read for the breakdown printed by
category: ``CATEGORIES``); the worker's CPU time over the requests wrk counted gives the microseconds of CPU
per hit, and the whole system's (every process of ``up``, read ``SETTLE_S`` after the run) is printed beside
it. With ``--perf``, a second run per size under ``perf record`` gives the share per binary (kernel, libpython, httptools, uvloop, libc).

py-spy and perf slow the process they sample, so the req/s printed here is not a benchmark figure
(benchmarks/hits_bench.py is); the CPU per hit is taken from a run without a profiler attached.
Loopback only; every run is bounded; everything started is stopped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from benchmarks.hits_bench import (
    SETTLE_S,
    Server,
    edge_server,
    prepare_files,
    stop,
    warm,
    whole_system,
)
from benchmarks.load import run_wrk
from benchmarks.measure import create_pull_zone, load_average, machine
from benchmarks.pull_bench import SIZES as PULL_SIZES
from benchmarks.pull_bench import ZONE as PULL_ZONE
from benchmarks.pull_bench import ready_origin
from tests.integration.harness import ACCOUNT, free_port_block, start_cdn

SIZES = ("5 KB", "100 KB")


def py_spy() -> str:
    found = Path(sys.executable).parent / "py-spy"
    if found.exists():
        return str(found)
    which = shutil.which("py-spy")
    if which is None:
        raise SystemExit("py-spy not found (it is a dev dependency: make setup)")
    return which


def cpu_per_hit(edge: Server, system: Server, url: str, args: argparse.Namespace,
                prefix: tuple[str, ...]) -> tuple[float, float, float]:
    """(req/s, microseconds of worker CPU per request, microseconds of whole-system CPU per request) for one
    wrk run without a profiler; the system's CPU is read ``SETTLE_S`` after the run."""
    before, system_before = edge.cpu_seconds(), system.cpu_seconds()
    result = run_wrk(url, args.duration, args.connections, 2, prefix=prefix)
    used = edge.cpu_seconds() - before
    time.sleep(SETTLE_S)
    system_used = system.cpu_seconds() - system_before
    requests = max(result.requests, 1)
    return result.rps, used / requests * 1e6, system_used / requests * 1e6


def spy(edge_pid: int, url: str, svg: Path, speedscope: Path, args: argparse.Namespace,
        prefix: tuple[str, ...]) -> None:
    seconds = max(1, int(args.duration) - 2)
    for fmt, out in (("flamegraph", svg), ("speedscope", speedscope)):
        command = [py_spy(), "record", "--native", "--rate", str(args.rate), "--duration",
                   str(seconds), "--format", fmt, "-o", str(out), "--pid", str(edge_pid)]
        recorder = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        time.sleep(0.5)
        run_wrk(url, args.duration, args.connections, 2, prefix=prefix)
        _, err = recorder.communicate(timeout=60)
        if recorder.returncode != 0:
            raise RuntimeError(f"py-spy failed: {err.decode(errors='replace')[-2000:]}")


def perf_shares(edge_pid: int, url: str, workdir: Path, args: argparse.Namespace,
                prefix: tuple[str, ...]) -> list[tuple[str, float]]:
    """Share of the worker's samples per binary (perf record -p, no call graphs)."""
    data = workdir / "perf.data"
    seconds = max(1, int(args.duration) - 2)
    recorder = subprocess.Popen(["perf", "record", "-F", "999", "-p", str(edge_pid), "-o", str(data),
                                 "--", "sleep", str(seconds)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.3)
    run_wrk(url, args.duration, args.connections, 2, prefix=prefix)
    recorder.wait(timeout=60)
    report = subprocess.run(["perf", "report", "-i", str(data), "--sort", "dso", "--stdio", "-q"],
                            capture_output=True, text=True, check=False).stdout
    shares = []
    for line in report.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0].endswith("%"):
            shares.append((" ".join(parts[1:]), float(parts[0].rstrip("%"))))
    return shares


# What a sample is spent on, by the frames on its stack (first match wins). Idle executor threads
# and the wait in epoll are left out: the shares are of the time the worker was busy.
CATEGORIES: tuple[tuple[str, Callable[[set[str], str], bool]], ...] = (
    ("idle", lambda names, leaf: "_worker" in names or "Thread._bootstrap" in names
     or leaf in ("epoll_pwait", "epoll_wait")),
    ("delivery log shipped to control (rollups, sample, JSON, HMAC, POST)",
     lambda names, leaf: bool(names & {"DeliveryLog.ship", "DeliveryLog.take", "ControlClient._request"})),
    ("access log (JSON line per hit, writer thread)",
     lambda names, leaf: bool(names & {"AccessLog.write", "AccessLog.flush", "AccessLog._write"})),
    ("metrics flush (once a second)", lambda names, leaf: "Metrics.flush" in names),
    ("socket write: writev / sendfile system call",
     lambda names, leaf: bool(names & {"HitProtocol._flush", "send_file_nowait", "HitProtocol._send_file_now"})
     and (leaf in ("writev", "write", "sendfile64", "sendfile") or "uv__try_write" in names)),
    ("write and sendfile calls (uvloop, Python)",
     lambda names, leaf: bool(names & {"HitProtocol._flush", "send_file_nowait", "HitProtocol._send_file_now"})),
    ("httptools callbacks (Python: on_url, on_header, ...)",
     lambda names, leaf: bool(names & {"HitProtocol.on_header", "HitProtocol.on_url",
                                       "HitProtocol.on_headers_complete", "HitProtocol.on_message_complete"})),
    ("counting (metrics in ints, delivery counts and sample)", lambda names, leaf: "HitServer._count" in names),
    ("request id", lambda names, leaf: "RequestIds.of" in names),
    ("per read: configuration, purges, control reachable", lambda names, leaf: "HitServer.begin_batch" in names),
    ("open() of the disk tier's file", lambda names, leaf: "HitServer._answer" in names and leaf == "open64"),
    ("lookup and answer (Host, path, prepared head, body, Date)", lambda names, leaf: "HitServer._answer" in names),
    ("request loop (framing, httptools' C parser, buffer)",
     lambda names, leaf: "HitProtocol.process" in names or "HitProtocol.data_received" in names),
    ("socket read system call, uvloop", lambda names, leaf: leaf in ("read", "recv") or "uv__read" in names),
    ("garbage collector", lambda names, leaf: "gc_collect_main" in names),
    ("other (event loop, timers, sync with control)", lambda names, leaf: True),
)


def breakdown(speedscope: Path) -> list[tuple[str, float]]:
    """(category, share of the busy samples) from a py-spy speedscope file."""
    data = json.loads(speedscope.read_text())
    frames = data["shared"]["frames"]
    shares: collections.Counter[str] = collections.Counter()
    for profile in data["profiles"]:
        for sample, weight in zip(profile["samples"], profile["weights"], strict=True):
            names = [frames[index]["name"] for index in sample]
            found = set(names)
            leaf = names[-1] if names else ""
            shares[next(name for name, test in CATEGORIES if test(found, leaf))] += weight
    shares.pop("idle", None)
    busy = sum(shares.values())
    return [(name, share / busy) for name, share in shares.most_common()] if busy else []


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--rate", type=int, default=250, help="py-spy samples per second")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/profiles"))
    parser.add_argument("--perf", action="store_true", help="also perf record, share per binary")
    parser.add_argument("--server-core", default="0")
    parser.add_argument("--load-core", default="1")
    parser.add_argument("--pull", action="store_true", help="a pull zone's hits (benchmarks/pull_bench.py's origin)")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    prefix = ("taskset", "-c", args.load_core)
    print(f"# profile_hits: {time.strftime('%Y-%m-%d %H:%M')}, {machine()}, load average {load_average()}")
    with tempfile.TemporaryDirectory(prefix="profile-hits-") as tmp:
        workdir = Path(tmp)
        origin: Server | None = None
        (workdir / "cdn").mkdir()
        env = {"ASSETCDN_EDGE_MEMORY_CACHE_MB": "512"}
        if args.pull:
            env["ASSETCDN_ORIGIN_ALLOW_LOOPBACK"] = "true"
        cdn = start_cdn(workdir / "cdn", workers=1, env_extra=env)
        try:
            system, _control = whole_system(cdn)
            system.pin(args.server_core)
            edge = edge_server(cdn)
            if args.pull:
                workdir.chmod(0o755)  # the origin's nginx workers run as their own user
                origin, bodies = ready_origin(workdir, free_port_block(1), args.load_core)
                asyncio.run(create_pull_zone(cdn.control_url, ACCOUNT, PULL_ZONE, origin.base, cdn.data_dir))
                paths = {size: f"{PULL_ZONE}/{PULL_SIZES[size][0]}" for size in SIZES}
                bodies = {paths[size]: bodies[PULL_SIZES[size][0]] for size in SIZES}
            else:
                paths, bodies = asyncio.run(prepare_files(cdn))
            asyncio.run(warm(edge.base, list(paths.values()), bodies))
            for size in SIZES:
                url = f"{edge.base}/{paths[size]}"
                pinned = system.pin(args.server_core)  # a process started since the last walk too
                print(f"# {size}: every process of `up` (pids {pinned}; the worker is {edge.pids[0]}) pinned to "
                      f"core {args.server_core}, wrk to core {args.load_core}", flush=True)
                rps, us, system_us = cpu_per_hit(edge, system, url, args, prefix)
                print(f"{size}: {rps:,.0f} req/s, {us:.1f} us of worker CPU and {system_us:.1f} us of whole-system "
                      f"CPU per hit (no profiler; load average {load_average()})", flush=True)
                name = ("pull-hit-" if args.pull else "hit-") + size.replace(" ", "").lower()
                speedscope = workdir / f"{name}.speedscope.json"
                spy(edge.pids[0], url, args.out / f"{name}.svg", speedscope, args, prefix)
                print(f"  flame graph: {args.out / (name + '.svg')}; of the worker's busy samples, and as "
                      f"microseconds of the {us:.1f} us per hit:")
                for category, share in breakdown(speedscope):
                    print(f"  | {category} | {100 * share:.1f}% | {us * share:.1f} |")
                if args.perf:
                    for dso, share in perf_shares(edge.pids[0], url, workdir, args, prefix)[:10]:
                        print(f"  perf {share:5.1f}%  {dso}")
        finally:
            if origin is not None:
                stop(origin)
            cdn.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
