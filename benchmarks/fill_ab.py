"""CPU per pull zone cache fill of two source trees, side by side: the whole system's, turns alternated.

    .venv/bin/python -m benchmarks.fill_ab TREE_A TREE_B [--size "5 KB"] [--turns 6] [--duration 4] [--memory-mb 512]
        [--tls | --h2 | --workers N]

Each tree (a checkout or ``git archive`` of the project) runs its own ``assetcdn up`` (one edge with one worker,
a 512 MB memory tier unless ``--memory-mb`` says otherwise, every process importing from that tree), both with a pull zone in front of one origin:
benchmarks/pull_bench.py's nginx, pinned to core 1 with wrk. Turn after turn, in alternating order, wrk
(``-t2 -c64``) asks one tree for ``--duration`` seconds for URLs never asked before (pull_bench's fills, a
prefix of their own per turn), that tree's processes pinned to core 0; the CPU of its whole ``up`` (read
``SETTLE_S`` after the run, as pull_bench reads it) is divided by the fills made. Printed per turn, then each
tree's median and the ratio of B's to A's.

A tree's memory tier fills up over the turns (one 5 KB turn adds about 15,000 entries, a 100 KB one some 7,000
to a tier of 512 MB): later turns include the disk writes of what each fill evicts. On a shared machine a single
bench run moves by a fifth from run to run; the two trees alternating under the same load is what can compare
them. With ``--tls`` each tree's edge also listens for https (tests/support/https.py's test certificates) and wrk
asks it over TLS HTTP/1.1 (one handshake per connection, at the start of each turn). With ``--h2``, h2load (Debian's
nghttp2-client) asks the https port over HTTP/2 instead: one connection, 64 streams at a time, ``--h2-requests``
new URLs per turn from a list, each once (h2load has no per-request script), the CPU divided by those requests.
With ``--workers N`` each edge has N workers (plain HTTP/1.1), all pinned to core 0 with the rest: they share the
disk tier, so each fill is written to it before its client has the answer (group commit), and a worker tells the
others what it stored anew.
Loopback only; every run is bounded; everything started is stopped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from benchmarks.hits_bench import SETTLE_S, Server, stop, warm, whole_system
from benchmarks.load import run_wrk
from benchmarks.measure import create_pull_zone, load_average, machine, require_tools
from benchmarks.pull_bench import FILL_LUA, SIZES, ZONE, ready_origin
from tests.integration.harness import ACCOUNT, RunningCdn, free_port_block, start_cdn
from tests.support.https import start_https_cdn


def start_tree(workdir: Path, path: str, origin: Server, body: bytes, size: str, core: str,
               memory_mb: int = 512, tls: bool = False, workers: int = 1) -> tuple[RunningCdn, Server]:
    """`up` importing from `path`, its pull zone in front of `origin`, its size's file warmed; with `tls` the
    system's base is its https port. `workers`: the edge's (all pinned to `core` with the rest of the system)."""
    settings = {"PYTHONPATH": str(Path(path).resolve()), "ASSETCDN_EDGE_MEMORY_CACHE_MB": str(memory_mb),
                "ASSETCDN_ORIGIN_ALLOW_LOOPBACK": "true"}
    if tls:
        cdn = start_https_cdn(workdir, {**settings, "ASSETCDN_TLS_REDIRECT_HTTP": "false"}).cdn
    else:
        cdn = start_cdn(workdir, workers=workers, env_extra=settings)
    system, _control = whole_system(cdn)
    if tls:
        system.base = f"https://127.0.0.1:{cdn.https_port}"
    system.pin(core)
    asyncio.run(create_pull_zone(cdn.control_url, ACCOUNT, ZONE, origin.base, cdn.data_dir))
    name = SIZES[size][0]
    asyncio.run(warm(f"{cdn.edge_urls[0]}/{ZONE}", [name], {name: body}))  # the same cache as its https port's
    return cdn, system


def h2_fills(urls: Path, prefix: str, count: int, core: str) -> tuple[int, int, float]:
    """h2load over one HTTP/2 connection, 64 streams at a time, asking `count` new URLs under `prefix` (an https
    URL), each once: (requests answered 2xx, requests that were not, requests per second)."""
    urls.write_text("".join(f"{prefix}{n}\n" for n in range(count)))
    completed = subprocess.run(["taskset", "-c", core, "h2load", "-c1", "-m64", "-n", str(count), "-i", str(urls)],
                               capture_output=True, text=True, timeout=600, check=False)
    lines = completed.stdout.splitlines()
    codes = next((line.split(":", 1)[1].split() for line in lines if line.startswith("status codes:")), ["0"])
    finished = next((line for line in lines if line.startswith("finished in ")), "finished in 0s, 0 req/s")
    ok = int(codes[0])
    return ok, count - ok, float(finished.split(",")[1].split()[0])  # "finished in 2.5s, 5985.63 req/s, ..."


def turn_arguments(parser: argparse.ArgumentParser, turns: int) -> None:
    """The options of a run of alternated fill turns (this script's and tls_fill_anchor.py's)."""
    parser.add_argument("--size", default="5 KB", choices=list(SIZES))
    parser.add_argument("--turns", type=int, default=turns)
    parser.add_argument("--duration", type=float, default=4.0)
    parser.add_argument("--h2", action="store_true", help="ask over HTTP/2 (the https port, h2load)")
    parser.add_argument("--h2-requests", type=int, default=15_000, help="with --h2: new URLs asked per turn")
    parser.add_argument("--server-core", default="0")
    parser.add_argument("--load-core", default="1")


def parsed_turns(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """`turn_arguments` parsed and bounded (every run stops by itself)."""
    args = parser.parse_args(argv)
    if not 0 < args.duration <= 60 or not 0 < args.turns <= 40 or not 0 < args.h2_requests <= 200_000:
        parser.error("--duration within (0, 60], --turns within (0, 40], --h2-requests within (0, 200000]")
    return args


def fill_turn(server: Server, url: str, prefix: str, args: argparse.Namespace, urls: Path) -> tuple[float, int, float]:
    """One turn of new URLs under `prefix` asked of `server` (wrk at `url`, or with ``--h2`` h2load from the list
    `urls`), its whole system pinned to the server core and its CPU read ``SETTLE_S`` after the turn: (us of CPU
    per fill, errors, fills per second)."""
    server.pin(args.server_core)  # a process started since the last walk too
    before = server.cpu_seconds()
    if args.h2:
        requests, errors, rate = h2_fills(urls, server.base + prefix, args.h2_requests, args.load_core)
    else:
        result = run_wrk(url, args.duration, 64, 2, prefix=("taskset", "-c", args.load_core),
                         lua=FILL_LUA.replace("{prefix}", prefix))
        requests, errors, rate = result.requests, result.errors, result.rps
    time.sleep(SETTLE_S)
    return (server.cpu_seconds() - before) / max(requests, 1) * 1e6, errors, rate


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trees", nargs=2)
    parser.add_argument("--memory-mb", type=int, default=512,
                        help="each tree's memory tier (128, the default setting, fills within a turn or two)")
    parser.add_argument("--tls", action="store_true", help="ask each tree over TLS HTTP/1.1 (its https port)")
    parser.add_argument("--workers", type=int, default=1,
                        help="the edge's workers (plain HTTP/1.1 only; several share the disk tier, so every fill "
                             "is written to it before its client has it)")
    turn_arguments(parser, 6)
    args = parsed_turns(parser, argv)
    if args.tls and args.h2:
        parser.error("--tls or --h2, not both")
    if args.workers != 1 and (args.tls or args.h2):
        parser.error("--workers with plain HTTP/1.1 only")
    require_tools(("wrk", "nginx", "taskset", *(("h2load",) if args.h2 else ())), "bench-pull")
    print(f"# fill_ab: {time.strftime('%Y-%m-%d %H:%M')}, {machine()}, load average {load_average()}")
    with tempfile.TemporaryDirectory(prefix="fill-ab-") as tmp:
        workdir = Path(tmp)
        os.chmod(workdir, 0o755)  # the origin's nginx workers run as their own user
        origin, bodies = ready_origin(workdir, free_port_block(1), args.load_core)
        cdns: list[RunningCdn] = []
        try:
            systems = []
            for index, path in enumerate(args.trees):
                (workdir / f"cdn{index}").mkdir()
                cdn, system = start_tree(workdir / f"cdn{index}", path, origin, bodies[SIZES[args.size][0]],
                                         args.size, args.server_core, args.memory_mb, args.tls or args.h2,
                                         args.workers)
                cdns.append(cdn)
                systems.append(system)
            per_fill: list[list[float]] = [[], []]
            for turn in range(args.turns):
                for index in (0, 1) if turn % 2 == 0 else (1, 0):
                    system = systems[index]
                    cost, errors, rate = fill_turn(system, f"{system.base}/{ZONE}/",
                                                   f"/{ZONE}/{SIZES[args.size][1]}/t{turn}-", args,
                                                   workdir / f"urls-{index}-{turn}")
                    per_fill[index].append(cost)
                    print(f"# turn {turn + 1} {args.trees[index]}: {rate:,.0f} fills/s, "
                          f"{per_fill[index][-1]:,.0f} us of CPU a fill, {errors} errors; "
                          f"load {load_average()}", flush=True)
            medians = [statistics.median(values) for values in per_fill]
            for path, median, values in zip(args.trees, medians, per_fill, strict=True):
                print(f"{path}: {median:,.0f} us of CPU a {args.size} fill (median; turns "
                      f"{', '.join(f'{value:,.0f}' for value in values)})")
            print(f"B / A: {medians[1] / medians[0]:.3f}; load average {load_average()}")
        finally:
            for cdn in cdns:
                cdn.stop()
            stop(origin)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
