"""Two checkouts side by side: what a hit costs the whole system, per core, in interleaved rounds.

    .venv/bin/python -m benchmarks.compare_hits --before /path/to/old/checkout [--after .] [--rounds 5]

The before/after pair a change to the hit path is judged by, on a shared machine: one ``assetcdn up`` (one
edge, one worker) is started from each checkout (its code is what that system runs); each system's edge and
control are pinned together to core 0 and counted together (until ``SETTLE_S`` after a run, when control has
taken its last analytics flush), as in benchmarks/hits_bench.py; Varnish (that benchmark's configuration, in
front of the "after" control plane) on core 0 too, as the anchor; wrk (``-t2 -c64``) on core 1. The 5 KB and
100 KB files are uploaded to each and warmed. Each round runs every size on every server in turn (the order
rotates per round), so the machine's load weighs on all alike. Printed per size: medians of req/s, CPU
(cores), microseconds of CPU per hit and the ratio to "before", and of those microseconds control's share
(its analytics ingestion of the edge's hit records, heartbeats). Loopback only; bounded.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.hits_bench import (
    SETTLE_S,
    Server,
    prepare_files,
    run_one,
    start_varnish,
    stop,
    wait_up,
    warm,
    whole_system,
)
from benchmarks.measure import load_average, machine
from tests.integration.harness import RunningCdn, free_port_block, start_cdn

SIZES = ["5 KB", "100 KB"]
SERVER_CORE, LOAD_CORE = "0", "1"


def start_from(checkout: Path, workdir: Path) -> RunningCdn:
    here = os.getcwd()
    os.chdir(checkout)  # `assetcdn up` runs ``python -m assetcdn.cli``: the checkout's code
    try:
        return start_cdn(workdir, workers=1, env_extra={"ASSETCDN_EDGE_MEMORY_CACHE_MB": "512"})
    finally:
        os.chdir(here)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, required=True, help="checkout of the code to compare against")
    parser.add_argument("--after", type=Path, default=Path("."))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    prefix = ("taskset", "-c", LOAD_CORE)
    print(f"# compare_hits: {time.strftime('%Y-%m-%d %H:%M')}, {machine()}, load average {load_average()}")
    with tempfile.TemporaryDirectory(prefix="compare-hits-") as tmp:
        workdir = Path(tmp)
        os.chmod(workdir, 0o755)
        cdns: dict[str, RunningCdn] = {}
        servers: dict[str, Server] = {}
        controls: dict[str, Server] = {}
        paths: dict[str, str] = {}
        varnish: Server | None = None
        try:
            for name, checkout in (("before", args.before.resolve()), ("after", args.after.resolve())):
                (workdir / name).mkdir()
                cdn = cdns[name] = start_from(checkout, workdir / name)
                servers[name], controls[name] = whole_system(cdn)  # what a hit costs: the edge and control
                servers[name].pin(SERVER_CORE)
                paths, bodies = asyncio.run(prepare_files(cdn, SIZES))
                asyncio.run(warm(servers[name].base, list(paths.values()), bodies))
            control_port = int(cdns["after"].control_url.rsplit(":", 1)[1])
            varnish = start_varnish(workdir, free_port_block(1), control_port, SERVER_CORE)
            asyncio.run(wait_up(varnish.base + "/"))
            varnish.pin(SERVER_CORE)
            asyncio.run(warm(varnish.base, list(paths.values())))
            servers["varnish"] = varnish
            results: dict[tuple[str, str], list[tuple[float, float, float]]] = {}
            control_us: dict[tuple[str, str], list[float]] = {}
            order = list(servers)
            for round_ in range(args.rounds):
                for size in SIZES:
                    for name in order:
                        server = servers[name]
                        control = controls.get(name)
                        server.pin(SERVER_CORE)  # a process started since the last walk too
                        control_before = control.cpu_seconds() if control is not None else 0.0
                        result, cores = run_one(server, f"{server.base}/{paths[size]}", args, prefix,
                                                SETTLE_S if name != "varnish" else 0.0)
                        us = cores * result.duration_s / result.requests * 1e6 if result.requests else 0.0
                        results.setdefault((name, size), []).append((result.rps, cores, us))
                        share = ""
                        if control is not None and result.requests:
                            of_control = (control.cpu_seconds() - control_before) / result.requests * 1e6
                            control_us.setdefault((name, size), []).append(of_control)
                            share = f" (control {of_control:4.1f})"
                        print(f"round {round_ + 1} {size:>6} {name:>7}: {result.rps:9,.0f} req/s cpu {cores:.2f} "
                              f"{us:6.1f} us/hit{share} (load {load_average()})", flush=True)
                order = order[1:] + order[:1]
            print(f"\n# medians of {args.rounds} rounds; load average after: {load_average()}\n")
            print("| object | server | req/s | CPU (cores) | us of CPU per hit | of which control | hits per core | "
                  "per core vs before |\n|---|---|---:|---:|---:|---:|---:|---:|")
            for size in SIZES:
                base_us = statistics.median(us for _, _, us in results[("before", size)])
                for name in servers:
                    rows = results[(name, size)]
                    us = statistics.median(u for _, _, u in rows)
                    shares = control_us.get((name, size))
                    control_text = f"{statistics.median(shares):.1f}" if shares else ""
                    print(f"| {size} | {name} | {statistics.median(r for r, _, _ in rows):,.0f} | "
                          f"{statistics.median(c for _, c, _ in rows):.2f} | {us:.1f} | {control_text} | "
                          f"{1e6 / us:,.0f} | {base_us / us:.2f}x |")
        finally:
            if varnish is not None:
                stop(varnish)
            for cdn in cdns.values():
                cdn.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
